"""silver_tables + violations run on every real log under ../shared/realdata (Kafka wrote them): the
table has the declared schema, every window is consistent, and the tables match what the replay reads."""
from __future__ import annotations

import pytest

from audit.local import log_end, silver_tables
from audit.violations import VIOLATION_SCHEMA, violations
from lake.config import load_config
from realdata_facts import CLUSTERS, REALDATA


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_real_log_audit_is_consistent(cluster):
    tables = silver_tables(REALDATA / CLUSTERS[cluster])
    end_offset, end_time = log_end(tables)
    out = violations(tables, load_config(), end_offset, end_time)
    assert out.schema == VIOLATION_SCHEMA
    for r in out.to_pylist():
        assert r["open"] == (r["last_offset"] is None)
        assert r["first_offset"] <= (r["last_offset"] if r["last_offset"] is not None else end_offset)
        assert r["duration_ms"] is None or r["duration_ms"] >= 0
        assert r["explanation"]
    # real Kafka never wrote an unclean election's data loss through the KIP-966 path here
    assert not [r for r in out.to_pylist() if r["code"] == "DATA_LOSS_LIKELY"]
