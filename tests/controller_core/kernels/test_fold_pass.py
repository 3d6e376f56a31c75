"""The compiled fold (controller_core.kernels.fold_pass) equals the NumPy fold (vector.fold), table for table.

Same rows, same order, same values (``Table.equals`` once the pass's dictionary-encoded strings are decoded; its schema
is ``fold.HISTORY_ENCODED``) on:

* every real log under ../shared/realdata, as the replay reads it (plan: snapshot + segments) and as all of
  its files decoded one after another, also out of offset order;
* generated logs: the valid interleaved histories of ``vector/test_fold.py`` (re-created topics under reused
  names, RemoveTopic, ClearElr by name and for all topics, every kind of directory list) and the illegal
  logs of ``test_invariant_pass.py`` (changes of partitions that do not exist, RemoveTopic of unknown topics,
  re-registered topic ids, ELR lists);
* simulator logs with reassignments, RemoveTopic, re-creation and ClearElr (a min.insync.replicas change
  with ELR on);
* an input the pass does not take (a null where the fold reads a value): the NumPy fold's table, counted.

On each of them the state-only fold (``state_only=True``, what ``describe`` reads) equals ``state_at`` of the
history, and its orphans the history's orphan rows.

One test runs the pass with ``NUMBA_DISABLE_JIT=1`` (plain Python, debuggable) in a subprocess.
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_core import pipeline
from controller_core.kernels import fold_pass, layout
from controller_core.replay import SKIP, plan, read_log_dir
from controller_core.codec.arrowutil import plain
from controller_core.vector.fold import HISTORY_ENCODED, HISTORY_SCHEMA, fold_partitions, state_at
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "vector"))
import test_fold as vector_tests  # noqa: E402  (its generator and bronze reader; module import: not re-collected)
import test_invariant_pass as invariant_tests  # noqa: E402

_RUNS = itertools.count()
SETTINGS = dict(deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


def replayed(records: pa.Table) -> pa.Table:
    """The partition and cluster rows, without the types a replay passes over (the fold ignores those either way)."""
    return records.filter(pc.invert(pc.is_in(records.column("record_type"), pa.array(sorted(SKIP)))))


def assert_same_fold(records: pa.Table, lay: layout.Layout | None = None) -> pa.Table:
    want = fold_partitions(records)
    got = fold_pass.fold(records, lay)
    assert got.fallback_partitions == 0
    assert got.history.schema == HISTORY_ENCODED  # its strings dictionary-encoded; decoded, the NumPy fold's table
    history = plain(got.history)
    # each history row names the input row it was folded from: the record at its offset, of its type
    src = records.take(pa.array(got.rows))
    assert src.column("offset").to_pylist() == history.column("offset").to_pylist()
    assert src.column("record_type").to_pylist() == history.column("record_type").to_pylist()
    if not history.equals(want):
        g, w = history.to_pylist(), want.to_pylist()
        assert len(g) == len(w), f"{len(g)} rows compiled, {len(w)} rows NumPy"
        for i, (a, b) in enumerate(zip(g, w)):
            assert a == b, f"row {i}: " + ", ".join(f"{k}: {a[k]!r} != {b[k]!r}" for k in b if a[k] != b[k])
        raise AssertionError("tables differ (types or chunk-independent content)")
    orphans = want.filter(want.column("orphan")).select(["offset", "topic_id", "partition_id"])
    assert got.orphans.equals(orphans)  # the history's orphan rows, beside it as the state-only fold has them
    assert_same_state(records, want, lay)
    # verify's fold: the columns its judgement reads, the same values, without the rest (directories, record types)
    narrow = fold_pass.fold(records, lay, columns=pipeline.JUDGED_COLUMNS).history
    assert plain(narrow).equals(want.select([c for c in HISTORY_SCHEMA.names if c in pipeline.JUDGED_COLUMNS]))
    return want


def assert_same_state(records: pa.Table, history: pa.Table, lay: layout.Layout | None = None) -> None:
    """``fold(state_only=True)`` (describe's fold: no row per record) is ``state_at`` of the whole history, and its
    orphans are the history's orphan rows, in the history's order."""
    got = fold_pass.fold(records, lay, state_only=True)
    assert got.fallback_partitions == 0
    want = state_at(history)
    assert got.history.schema == HISTORY_ENCODED
    assert plain(got.history).equals(want), (got.history.to_pylist()[:3], want.to_pylist()[:3])
    src = records.take(pa.array(got.rows))  # the input row of each state row: the record that made it
    assert src.column("offset").to_pylist() == want.column("offset").to_pylist()
    assert (got.successor == -1).all() and len(got.changes) == 0
    orphans = history.filter(history.column("orphan")).select(["offset", "topic_id", "partition_id"])
    assert got.orphans.equals(orphans)


# ----------------------------------------------------------------------------------------- real logs
@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_real_log_as_replayed(folder):
    records, _ = read_log_dir(REALDATA / folder, [])
    history = assert_same_fold(replayed(records))
    assert history.num_rows


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_real_log_every_file_and_out_of_offset_order(folder):
    table = vector_tests.bronze([f.path for f in plan(REALDATA / folder).files])
    assert_same_fold(table)
    rng = np.random.default_rng(len(folder))
    assert_same_fold(table.take(pa.array(rng.permutation(table.num_rows))))


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_partitions_asked_last_end_the_history(folder):
    """``last`` (a Spark bucket's context partitions, dropped afterwards by a slice) moves those partitions' rows to
    the end of the history; the other rows, and theirs among themselves, keep their order, and each row still names
    the record it was folded from."""
    records = replayed(read_log_dir(REALDATA / folder, [])[0])
    lay = layout.build(records)
    whole = fold_pass.fold(records, lay)
    last = np.random.default_rng(len(folder)).random(len(lay.part_id)) < 0.3
    moved = fold_pass.fold(records, lay, last=last)
    topics = lay.topic_dict.to_pylist()
    chosen = {(topics[t], int(p)) for t, p in zip(lay.part_topic[last], lay.part_id[last])}
    rows = plain(whole.history)
    at_end = np.array([(t, p) in chosen for t, p in zip(rows.column("topic_id").to_pylist(),
                                                       rows.column("partition_id").to_pylist())], bool)
    assert at_end.any() and not at_end.all()
    order = np.concatenate([np.flatnonzero(~at_end), np.flatnonzero(at_end)])
    assert plain(moved.history).equals(rows.take(pa.array(order)))
    assert np.array_equal(moved.rows, np.asarray(whole.rows)[order])


def test_layout_shared_with_the_invariant_pass():
    """One layout serves both passes; the fold's fields do not change what the invariant pass finds."""
    from controller_core.kernels import invariants

    records = replayed(read_log_dir(REALDATA / CLUSTERS["induswargods"], [])[0])
    lay = layout.build(records)
    assert_same_fold(records, lay)
    key = invariant_tests._key
    assert sorted(map(key, invariants.check(records, None, lay))) == sorted(map(key, invariants.check(records)))


# ----------------------------------------------------------------------------------- generated logs
@settings(max_examples=int(os.environ.get("FOLD_SEEDS", 150)), **SETTINGS)
@given(seed=st.integers(0, 2**64 - 1))
def test_generated_histories(tmp_path, seed):
    r = vector_tests.Seeded(seed)
    batches, _ = vector_tests.interleaved_log(r, r.int(1, 8), r.int(1, 30))
    path = vector_tests.write_log(tmp_path / f"h{next(_RUNS)}", batches)
    assert_same_fold(vector_tests.bronze([path]))


@settings(max_examples=int(os.environ.get("FOLD_EXAMPLES", 150)), **SETTINGS)
@given(log=invariant_tests.logs())
def test_generated_illegal_logs(tmp_path, log):
    """Orphan changes, RemoveTopic of unknown or already deleted topics, ClearElr of unknown names."""
    path = log.write(tmp_path / f"log{next(_RUNS)}")
    records, _ = read_log_dir(path, [])
    assert_same_fold(replayed(records))


# ------------------------------------------------------------------------------------ simulator logs
SCENARIO = """\
metadata_version: 4.0-IV1
elr: true
start_time: 2026-01-01T00:00:00Z
heartbeat_interval_ms: 5000
session_timeout_ms: 9000
segment_bytes: 8192
snapshot_every: 150
brokers: [{id: 1, rack: a}, {id: 2, rack: b}, {id: 3, rack: c}, {id: 4, rack: a}]
topics:
  - {name: orders, partitions: 4, replication_factor: 3, configs: {min.insync.replicas: 2}}
  - {name: logs, partitions: 2, replication_factor: 2}
timeline:
  - {at: 20, event: reassignment, topic: orders, partition: 0, replicas: [4, 2, 3]}
  - {at: 40, event: network_partition, brokers: [1, 2], duration_s: 60}
  - {at: 60, event: unclean_shutdown, broker: 3, lose_records: 0}
  - {at: 90, event: config_change, resource: topic, name: orders, key: min.insync.replicas, value: 1}
  - {at: 110, event: restart, broker: 3}
  - {at: 130, event: reassignment, topic: logs, partition: 1, replicas: [3, 4]}
  - {at: 150, event: delete_topic, name: logs}
  - {at: 170, event: create_topic, name: logs, partitions: 3, replication_factor: 3}
  - {at: 190, event: controlled_shutdown, broker: 4}
  - {at: 200, event: config_change, resource: cluster, key: min.insync.replicas, value: 2}
  - {at: 230, event: restart, broker: 4}
  - {at: 260, event: preferred_election}
"""


def test_simulated_log_with_reassignments_remove_topic_and_clear_elr(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    simulate(load(str(f)), tmp_path / "out", seed=0)
    records, _ = read_log_dir(tmp_path / "out", [])
    types = set(records.column("record_type").to_pylist())
    assert {"REMOVE_TOPIC_RECORD", "CLEAR_ELR_RECORD"} <= types
    assert_same_fold(replayed(records))  # from the newest snapshot on
    every = vector_tests.bronze([f.path for f in plan(tmp_path / "out").files])
    history = assert_same_fold(every)
    # the log reaches what this test is for: deleted partitions, applied ClearElrs, reassignments in flight
    assert {"REMOVE_TOPIC_RECORD", "CLEAR_ELR_RECORD"} <= set(history.column("record_type").to_pylist())
    assert pc.any(pc.greater(pc.list_value_length(history.column("adding_replicas")), 0)).as_py()
    assert pipeline.run(records, invariants=False).fold_fallback_partitions == 0


def test_fleet_scenario_through_the_pipeline(tmp_path):
    simulate(load("fleet-large", params={"partitions": 400, "events": 4}), tmp_path, seed=3)
    records, _ = read_log_dir(tmp_path, [])
    assert_same_fold(replayed(records))


# ------------------------------------------------------------------------------------------ fallback
def test_input_the_pass_does_not_take_goes_to_the_numpy_fold(tmp_path):
    records = replayed(read_log_dir(REALDATA / CLUSTERS["ogs59"], [])[0])
    change = np.flatnonzero(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD").to_numpy(
        zero_copy_only=False))
    leader = records.column("leader").combine_chunks()
    mask = np.zeros(records.num_rows, bool)
    mask[change[0]] = True
    nulled = pc.if_else(pa.array(mask), pa.scalar(None, leader.type), leader)
    odd = records.set_column(records.schema.get_field_index("leader"), "leader", nulled)
    got = fold_pass.fold(odd)
    assert got.fallback_partitions > 0
    assert got.history.schema == HISTORY_ENCODED and plain(got.history).equals(fold_partitions(odd))
    state = fold_pass.fold(odd, state_only=True)  # describe's fold falls back the same way
    assert state.fallback_partitions == got.fallback_partitions
    assert plain(state.history).equals(plain(state_at(got.history))) and state.history.num_rows


def test_empty_and_partitionless_inputs():
    from controller_core.codec.bronze import SCHEMA

    assert fold_pass.fold(SCHEMA.empty_table()).history.equals(fold_partitions(SCHEMA.empty_table(),
                                                                              dictionary_strings=True))
    records = replayed(read_log_dir(REALDATA / CLUSTERS["ogs59"], [])[0])
    brokers_only = records.filter(pc.invert(pc.is_in(records.column("record_type"), pa.array(
        ["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"]))))
    assert fold_pass.fold(brokers_only).history.equals(fold_partitions(brokers_only, dictionary_strings=True))


# ------------------------------------------------------------------------------------- plain Python
def _history_json(segment: str) -> str:
    records = vector_tests.bronze([segment])
    return json.dumps([fold_pass.fold(records).history.to_pylist(),
                       fold_pass.fold(records, state_only=True).history.to_pylist()], sort_keys=True)


def test_the_pass_runs_as_plain_python(tmp_path):
    """NUMBA_DISABLE_JIT=1: the same functions interpreted give the same table."""
    r = vector_tests.Seeded(11)
    batches, _ = vector_tests.interleaved_log(r, 3, 25)
    segment = vector_tests.write_log(tmp_path / "log", batches)
    kinds = set(fold_partitions(vector_tests.bronze([segment])).column("record_type").to_pylist())
    assert {"PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REMOVE_TOPIC_RECORD"} <= kinds
    compiled = _history_json(str(segment))
    here = Path(__file__).resolve()
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[3]]; "
              "from test_fold_pass import _history_json; print(_history_json(sys.argv[4]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", script, str(here.parent), str(here.parents[2]), str(here.parents[3]),
                          str(segment)], env=env, capture_output=True, text=True, timeout=300, cwd=here.parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == compiled
