"""A full replay's Spark task, in process: its buckets' rows (transforms.silver), replayed one after the other from
the driver's broker and topic timelines, and partition 0 of other buckets' topics dropped, give the rows of
one replay of the whole log; a bucket's replay order (in_replay_order) is Arrow's sort of its keys, computed in
NumPy; and arrowutil.gather, the copy both use, is a take."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller_core import pipeline
from jobs import replay as R
from controller_core.codec.arrowutil import gather, plain
from controller_core.replay import SKIP, read_log_dir
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load
from transforms import silver as S

KINDS = ["segment", "snapshot", "bootstrap", None]


def _table(rows):
    phase = [None if k is None else S.PHASE[k] for k, _ in rows]
    return pa.table({"source_kind": pa.array([k for k, _ in rows], pa.string()),
                     "offset": pa.array([o for _, o in rows], pa.int64()),
                     "phase": pa.array(phase, pa.int32()),
                     "row": pa.array(np.arange(len(rows)), pa.int64())})


def _arrow_order(table: pa.Table) -> list[int]:
    keys = [("phase", "ascending"), ("offset", "ascending"), ("source_kind", "ascending")]
    return table.sort_by(keys).column("row").to_pylist()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.one_of(st.none(), st.integers(-3, 40))), max_size=60),
       st.booleans())
def test_the_order_is_arrows_sort_of_phase_offset_and_kind(rows, seeded):
    table = _table(rows)
    if seeded:  # an incremental replay's seed rows: kind "snapshot" in the segment phase, sharing offsets
        phase = [2 if k == "snapshot" and i % 2 else p for i, (k, p) in
                 enumerate(zip(table.column("source_kind").to_pylist(), table.column("phase").to_pylist()))]
        table = table.set_column(2, "phase", pa.array(phase, pa.int32()))
    got = S.in_replay_order(table, None)
    assert got.column("row").to_pylist() == _arrow_order(table)
    assert "phase" not in got.column_names


def test_rows_in_order_are_not_copied_and_a_snapshot_is_dated_before_its_start():
    rows = [("bootstrap", 0), ("snapshot", 5), ("snapshot", 5), ("segment", 9), ("segment", 9), ("segment", 12)]
    table = _table(rows)
    assert S._replay_order(table) is None
    assert S._replay_order(table.take([1, 0, 2, 3, 4, 5])) is not None
    got = S.in_replay_order(table.take([3, 1, 0, 5, 2, 4]), 10)
    assert got.column("offset").to_pylist() == [0, 9, 9, 9, 9, 12]
    assert got.column("row").to_pylist() == [0, 1, 2, 3, 4, 5]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 400), st.lists(st.tuples(st.integers(0, 399), st.integers(1, 60)), max_size=12))
def test_gather_is_a_take(n, runs):
    table = pa.table({"i": pa.array(np.arange(n), pa.int64()),
                      "l": pa.array([[j, j % 3] if j % 5 else None for j in range(n)], pa.list_(pa.int32())),
                      "s": pa.array([f"s{j % 7}" for j in range(n)])})
    rows = np.concatenate([np.arange(a, min(a + k, n)) for a, k in runs if a < n] or [np.zeros(0, np.int64)])
    got = gather(table, rows)
    assert got.equals(table.take(pa.array(rows, pa.int64())))
    assert all(c.num_chunks <= 1 for c in got.columns)
    shuffled = np.random.default_rng(n).permutation(n)  # no runs: a take
    assert gather(table, shuffled).equals(table.take(pa.array(shuffled, pa.int64())))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 300), st.integers(0, 60), st.integers(1, 4), st.booleans())
def test_gather_of_columns_null_in_their_head_is_a_take(head, tail, tail_chunks, shuffled):
    """A Spark bucket's rows: its partition records (broker and config columns null, as the scan leaves them), then
    the cluster-level rows in a few chunks: the null-headed columns are taken from their values, the rest copied."""
    def part(n, start, with_values):
        j = np.arange(start, start + n)
        return pa.table({"i": pa.array(j, pa.int64()),
                         "broker": pa.array([int(x) if with_values and x % 3 else None for x in j], pa.int32()),
                         "json": pa.array([f"b{x}" if with_values else None for x in j], pa.string()),
                         "lists": pa.array([[int(x)] if with_values and x % 2 else None for x in j],
                                           pa.list_(pa.int32())),
                         "none": pa.nulls(n, pa.string()),
                         "codes": pa.array([f"t{x % 4}" for x in j]).dictionary_encode()})
    cuts = np.linspace(0, tail, tail_chunks + 1).astype(int)
    table = pa.concat_tables([part(head, 0, False)]
                             + [part(int(b - a), head + int(a), True) for a, b in zip(cuts[:-1], cuts[1:])],
                             promote_options="permissive")
    n = table.num_rows
    rows = (np.random.default_rng(n).permutation(n) if shuffled
            else np.concatenate([np.arange(head, n), np.arange(0, head)]).astype(np.int64))
    got = gather(table, rows)
    # (the codes' dictionaries may be unified where the take keeps each chunk's: compared as strings)
    assert plain(got).equals(plain(table.take(pa.array(rows, pa.int64()))))
    assert got.schema == table.schema and all(c.num_chunks <= 1 for c in got.columns)


def _task(records: pa.Table, buckets: int):
    """A core task's replays of every bucket, as core_from_files' task makes them from bronze's rows."""
    partition = pc.is_in(records.column("record_type"), pa.array(list(S.PARTITION_TYPES))).to_numpy(
        zero_copy_only=False)
    kept = ~partition & ~pc.is_in(records.column("record_type"), pa.array(sorted(SKIP))).to_numpy(
        zero_copy_only=False)
    records = plain(records)  # bronze's rows as the lake holds them (a replay's own read encodes the record types)
    records = records.cast(pa.schema([f.with_nullable(True) for f in records.schema]))  # as a task reads them
    shared = records.filter(pa.array(kept)).select(S.READ_COLUMNS + ["data_json"])
    parts = records.filter(pa.array(partition)).select(S.PARTITION_READ_COLUMNS)
    for name in S.READ_DICTIONARY:  # the strings lake.files.scan_task reads as codes
        i = parts.schema.get_field_index(name)
        parts = parts.set_column(i, name, pc.dictionary_encode(parts.column(i)))
    owner = S.bucket_of(parts.column("topic_id"), S._partitions(parts), buckets)
    first = S._partitions(parts) == 0
    # the driver's timelines of the cluster-level rows and partition 0s, which every bucket starts from
    made = R.cluster_timelines(R.timeline_recs(
        records.filter(pa.array(partition)).filter(pa.array(first)).select(S.READ_COLUMNS), shared))
    reps = []
    for b in range(buckets):
        mine = (owner == b) | first
        rep = S._replay_bucket(parts.filter(pa.array(mine)), (first & (owner != b))[mine], shared, None, True, made)
        assert rep.brokers is made[0] and rep.topics is made[1]  # not built again
        reps.append(rep)
    return reps


def _rows(tables: list[pa.Table], keys: list[str]) -> list[dict]:
    return pa.concat_tables([plain(t).combine_chunks() for t in tables]).sort_by(
        [(k, "ascending") for k in keys]).to_pylist()


def _same_as_one_replay(records: pa.Table, buckets: int = 4) -> pipeline.Replay:
    whole = pipeline.run(records, threads=1)
    reps = _task(records, buckets)
    keys = ["topic_id", "partition_id", "offset"]
    assert _rows([r.history for r in reps], keys) == _rows([whole.history], keys)
    for one, each in ((whole.breaches, [r.breaches for r in reps]), (whole.divergences, [r.divergences for r in reps])):
        keys = one.column_names[:4]
        assert sorted(map(str, _rows(each, keys))) == sorted(map(str, _rows([one], keys)))
    for r in reps:
        assert r.brokers.equals(whole.brokers) and r.topics.equals(whole.topics)
    return whole


def test_a_tasks_buckets_replay_a_simulated_fleet_with_breaches_as_one_replay(tmp_path):
    simulate(load("fleet-large", params={"partitions": 60, "events": 6}), tmp_path, seed=7)
    # no partition JSON, as a replay reads them: the edits below are then the records' only account of themselves
    records, _ = read_log_dir(tmp_path, partition_json=False)
    change = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD")))
    isr = records.column("isr").to_pylist()
    for i in np.random.default_rng(4).choice(change, 40, replace=False).tolist():
        isr[i] = (isr[i] or [1])[::-1] + [9]
    records = records.set_column(records.schema.get_field_index("isr"), "isr",
                                 pa.array(isr, records.schema.field("isr").type))
    whole = _same_as_one_replay(records)
    assert whole.breaches.num_rows and whole.divergences.num_rows and whole.scalar_partitions


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_a_tasks_buckets_replay_every_real_log_as_one_replay(cluster):
    records, start = read_log_dir(REALDATA / CLUSTERS[cluster] / "__cluster_metadata-0", partition_json=False)
    assert _same_as_one_replay(records, buckets=3).history.num_rows
