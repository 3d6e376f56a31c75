"""Gold tables per audit run: a lake written before runs (and incidents) were recorded is carried over, not
refused."""
from __future__ import annotations

import pyarrow as pa

from audit.violations import VIOLATION_SCHEMA
from lake import catalog, gold
from lake.delta import Lake


def _finding(**kw) -> dict:
    row = {f.name: None for f in VIOLATION_SCHEMA}
    row.update(code="OFFLINE", severity="ERROR", first_offset=7, open=False, explanation="offline", cluster="c")
    row.update(kw)
    return row


def test_violations_written_before_audit_runs_get_a_run_id_and_stay(tmp_path):
    lake = Lake(tmp_path / "lake", None, backend="delta-rs")
    old = VIOLATION_SCHEMA.remove(VIOLATION_SCHEMA.get_field_index("incident_id"))  # an earlier version's table
    before = pa.Table.from_pylist([_finding(), _finding(first_offset=9)], schema=old)  # no run_id, no incident_id
    lake.overwrite_arrow(catalog.VIOLATIONS.name, before, partition_by=("cluster",), where={"cluster": "c"})
    gold._migrate(lake, catalog.VIOLATIONS)
    t = lake.read_arrow(catalog.VIOLATIONS.name)
    assert t.schema.names == catalog.VIOLATIONS.schema.names
    assert t.column(catalog.RUN_ID).to_pylist() == [gold.LEGACY_RUN] * 2
    assert t.column("incident_id").null_count == 2
    run = pa.Table.from_pylist([_finding(run_id="r1")], schema=catalog.VIOLATIONS.schema)
    lake.overwrite_arrow(catalog.VIOLATIONS.name, run, partition_by=("cluster",), where={"cluster": "c", "run_id": "r1"})
    t = lake.read_arrow(catalog.VIOLATIONS.name)
    assert sorted(t.column(catalog.RUN_ID).to_pylist()) == sorted([gold.LEGACY_RUN] * 2 + ["r1"])
    seen = gold.run_findings(lake, "c", gold.LEGACY_RUN)
    assert sorted(seen.column("first_offset").to_pylist()) == [7, 9]
    # what is new against that run: the null topic / partition of these findings still match
    now = pa.Table.from_pylist([_finding(), _finding(first_offset=11, severity="WARN"), _finding(first_offset=12)],
                               schema=VIOLATION_SCHEMA)
    assert gold.new_since(now, seen).column("first_offset").to_pylist() == [12, 11]  # ERROR before WARN
    assert gold.new_since(now, None).num_rows == 3
    gold._migrate(lake, catalog.VIOLATIONS)  # already carried over: nothing happens
    assert lake.read_arrow(catalog.VIOLATIONS.name).num_rows == 3
