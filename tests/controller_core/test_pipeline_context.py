"""A Spark bucket's context partitions (``pipeline.run(context_topics=...)``: partition 0 of topics another bucket
owns, replayed for the min ISR cap it sets, never reported): the replay reports every other partition exactly as a
replay without context does -- history rows with their dates and triggers, recomputed changes -- on every real log
and on a simulated cluster with fences, ELR, reassignments and deletion.  The compiled fold ends the history with
the context partitions (``fold_pass.fold(last=...)``), so the replay drops them with a slice; the copy it falls back
to when they are anywhere else gives the same rows."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core import pipeline
from controller_core.codec.arrowutil import plain
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load

sys.path.insert(0, str(Path(__file__).resolve().parent / "kernels"))
import test_fold_pass as fold_tests  # noqa: E402  (its simulator scenario: fences, ELR, reassignments, deletion)


def _rows(table: pa.Table) -> list[dict]:
    return sorted(plain(table).to_pylist(), key=lambda r: repr(sorted(r.items())))


def _not_context(table: pa.Table, topics: frozenset[str]) -> pa.Table:
    """The rows of ``table`` (a history, the recomputed changes, findings: "partition" there) but partition 0's of
    ``topics``."""
    partition = "partition_id" if "partition_id" in table.column_names else "partition"
    theirs = pc.and_(pc.equal(table.column(partition), 0),
                     pc.is_in(table.column("topic_id").cast(pa.string()), pa.array(sorted(topics), pa.string())))
    return table.filter(pc.invert(pc.fill_null(theirs, False)))


def _same_but_context(records: pa.Table) -> frozenset[str]:
    """Half of the topics with a partition 0 as context: the replay reports the rest as a replay without context."""
    first = records.filter(pc.equal(records.column("partition_id"), 0))
    topics = sorted(t for t in set(first.column("topic_id").cast(pa.string()).to_pylist()) if t)
    context = frozenset(topics[::2])
    whole = pipeline.run(records)
    part = pipeline.run(records, context_topics=context)
    for got, want in ((part.history, whole.history), (part.explained, whole.explained)):
        assert _rows(got) == _rows(_not_context(want, context))
    for got, want in ((part.divergences, whole.divergences), (part.breaches, whole.breaches)):
        assert _rows(got) == _rows(_not_context(want, context))
    return context


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_real_logs(folder):
    records, _ = read_log_dir(REALDATA / folder, [], partition_json=False)
    _same_but_context(records)


def test_a_simulated_cluster_with_fences_elr_reassignments_and_deletion(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(fold_tests.SCENARIO)
    simulate(load(str(f)), tmp_path / "out", seed=0)
    records, _ = read_log_dir(tmp_path / "out", [], partition_json=False)
    assert len(_same_but_context(records)) >= 2


def test_context_rows_anywhere_are_dropped_by_a_copy():
    """Rows of context partitions in the middle of a table (the NumPy fold's order) go as those at its end do."""
    table = pa.table({"topic_id": ["a", "b", "a", "c", "b", "b"], "partition_id": [0, 0, 1, 0, 0, 2],
                      "offset": [1, 2, 3, 4, 5, 6]})
    ctx = frozenset({"b"})
    _, _, (middle,) = pipeline._drop_context(ctx, [], [], (table,))
    assert middle.column("offset").to_pylist() == [1, 3, 4, 6]
    tail = table.take(pa.array([0, 2, 3, 5, 1, 4]))  # b's partition 0 last
    _, _, (cut,) = pipeline._drop_context(ctx, [], [], (tail,))
    assert cut.column("offset").to_pylist() == [1, 3, 4, 6]
    assert cut.num_rows == 4 and cut.column("offset").chunks[0].offset == 0  # a slice of the table
