"""The evidence columns of the violations (``evidence_before`` / ``evidence_after``: a partition's state in Kafka's
field names) are written by the compiled JSON writer (``violations._evidence``); ``_states`` + ``json.dumps``, the
per-finding Python it replaced, stays the reference: the same text for every history row of simulated clusters,
for rows before a partition's first (-1: null) and for deleted partitions."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from audit import local
from audit import violations as V
from jobs import cli
from lake import catalog
from lake.config import load_config


@pytest.mark.parametrize("scenario", ["unclean-election", "last-replica-standing-elr-off", "long-under-min-isr"])
def test_evidence_equals_the_per_row_reference(tmp_path, capsys, scenario):
    assert cli.main(["simulate", scenario, "-o", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    tables = local.silver_tables(tmp_path / "d")
    name = catalog.PARTITION_STATE_HISTORY.name
    hist = tables[name]
    # some rows deleted, so that the {"deleted": true} form is written too
    deleted = np.zeros(hist.num_rows, bool)
    deleted[::7] = True
    tables[name] = hist.set_column(hist.schema.get_field_index("deleted"), "deleted", pa.array(deleted))
    end = tables["log_end"].to_pylist()[0]
    ctx = V._context(tables, load_config(), end["end_offset"], end["end_timestamp"])
    rows = np.concatenate([np.arange(ctx.h.n), ctx.h.prev, [-1]])
    want = [V._json(s) for s in V._states(ctx, rows)]
    got = V._evidence(ctx, rows).to_pylist()
    assert got == want
    assert None in got and '{"deleted":true}' in got and any(g and '"leaderEpoch"' in g for g in got)
    assert V._evidence(ctx, np.zeros(0, np.int64)).to_pylist() == []


def test_evidence_when_states_hash_alike_writes_every_row(tmp_path, capsys, monkeypatch):
    """Each distinct state is written once, found by a hash of its columns and checked against the first row of
    its hash: with a hash that sends every state to one value (multiplier 0) the check fails and every row is
    written, the same texts either way."""
    assert cli.main(["simulate", "unclean-election", "-o", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    tables = local.silver_tables(tmp_path / "d")
    end = tables["log_end"].to_pylist()[0]
    ctx = V._context(tables, load_config(), end["end_offset"], end["end_timestamp"])
    rows = np.concatenate([np.arange(ctx.h.n), ctx.h.prev])
    want = [V._json(s) for s in V._states(ctx, rows)]
    shared = V._evidence(ctx, rows)
    assert shared.to_pylist() == want
    assert len(shared.dictionary) == len(set(want) - {None}) < len(want)  # one text per distinct state
    monkeypatch.setattr(V, "_MIX", np.uint64(0))
    every = V._evidence(ctx, rows)
    assert every.to_pylist() == want and len(every.dictionary) == len(rows)
