"""What a replay's input may leave in or out without changing a single output row.

* The record types a replay passes over (``replay.SKIP``: NoOps, transaction markers, snapshot and KRaft
  control records) stay in ``pipeline.run``'s input: removing them copied every column (6 s of ``verify`` on a
  1 M-partition log).  The replay of the rows as read equals the replay of the rows without them.
* ``from_log_dir`` decodes partition records without their Kafka JSON (``read_log_dir(partition_json=False)``):
  every step reads their typed columns, and the scalar reference rebuilds the few it needs.  The replay equals
  the one of the rows with their JSON.

On the embedded default scenario (transaction markers, NoOps, a fence and an unclean election), the
ELR-off scenario and every real cluster of ../shared/realdata.
"""
from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core import pipeline
from controller_core.codec.arrowutil import plain
from controller_core.codec.bronze import REPLAY_SCHEMA, SCHEMA
from controller_core.replay import SKIP, TYPED_ONLY, read_log_dir
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[2]
LOG_DIRS = {"default-cluster": ROOT / "data" / "default-cluster",
            "last-replica-standing-elr-off": ROOT / "data" / "last-replica-standing-elr-off",
            **{name: REALDATA / rel for name, rel in CLUSTERS.items()}}


def _same_replay(a: pipeline.Replay, b: pipeline.Replay) -> None:
    tables = [f.name for f in fields(a) if isinstance(getattr(a, f.name), pa.Table)]
    assert len(tables) == 6  # history, the timelines, divergences, breaches, explained
    for name in tables:
        assert getattr(a, name).equals(getattr(b, name)), name
    assert (a.records, a.partition_changes, a.scalar_partitions, a.trigger_counts) == \
        (b.records, b.partition_changes, b.scalar_partitions, b.trigger_counts)


def _skipped(records: pa.Table) -> pa.Array:
    return pc.is_in(records.column("record_type"), pa.array(sorted(SKIP)))


@pytest.mark.parametrize("name", sorted(set(LOG_DIRS) - {"vasifvortex"}))  # its Kafka (< 3.3) wrote no NoOps
def test_rows_a_replay_skips_change_nothing(name):
    records, _ = read_log_dir(LOG_DIRS[name])
    skipped = _skipped(records)
    assert pc.sum(skipped).as_py() > 0, "every one of these logs holds NoOps or control records"
    kept = records.filter(pc.invert(skipped))
    rejected_with, rejected_without = [], []
    with_them = pipeline.run(records, rejected=rejected_with)
    without = pipeline.run(kept, rejected=rejected_without)
    without.records = with_them.records  # the count of records replayed includes them by definition
    _same_replay(with_them, without)
    assert rejected_with == rejected_without  # no skipped record reaches the image as one it cannot apply
    assert with_them.history.num_rows > 0 and with_them.explained.num_rows > 0


def test_the_default_scenario_has_transaction_markers():
    types = set(read_log_dir(LOG_DIRS["default-cluster"])[0].column("record_type").to_pylist())
    assert {"BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "NO_OP_RECORD"} <= types


@pytest.mark.parametrize("name", sorted(LOG_DIRS))
def test_partition_records_without_their_json_replay_the_same(name):
    full, _ = read_log_dir(LOG_DIRS[name])
    lean, _ = read_log_dir(LOG_DIRS[name], partition_json=False)
    typed_only = pc.is_in(full.column("record_type"), pa.array(sorted(TYPED_ONLY))).to_pylist()
    assert any(typed_only)
    # the JSON is null exactly on partition records, the same text elsewhere, every other column the same values
    # (the record types as codes over their names: bronze.REPLAY_SCHEMA)
    assert lean.schema.equals(REPLAY_SCHEMA) and full.schema.equals(SCHEMA)
    assert lean.column("data_json").is_null().to_pylist() == typed_only
    others = pc.invert(pa.array(typed_only))
    assert lean.column("data_json").filter(others).equals(full.column("data_json").filter(others))
    assert plain(lean.drop_columns(["data_json"])).equals(full.drop_columns(["data_json"]))
    _same_replay(pipeline.run(full), pipeline.run(lean))


def test_breaches_quoting_a_partition_record_read_the_same_without_its_json(tmp_path):
    """INV-RECORD-NOOP and INV-LRS-ENTRY quote the change record itself ("recorded"): rebuilt from the typed
    columns (explain.record_data: a tagged field at its default is absent, as in Kafka's dump) it is the same
    JSON as the log's text."""
    from log_builder import Log

    log = Log(25, brokers=(1, 2, 3))
    log.create("t", [1, 2, 3], [2, 3, 1])
    log.add(log.change("t", 0))  # every field unchanged
    log.add(log.change("t", 1, leader=3, isr=[3, 1], lrs=1))  # RECOVERING without an unclean election
    path = log.write(tmp_path / "log")
    full, lean = pipeline.run(read_log_dir(path)[0]), pipeline.run(read_log_dir(path, partition_json=False)[0])
    rules = set(full.breaches.column("rule").to_pylist())
    assert {"INV-RECORD-NOOP", "INV-LRS-ENTRY"} <= rules, rules
    assert full.breaches.equals(lean.breaches)


@pytest.mark.parametrize("name", sorted(LOG_DIRS))
def test_the_state_without_recomputing_changes_is_the_same(name):
    """``pipeline.run(recompute=False)``: the state only.  History (triggers aside), timelines, the image and the
    partitions at the end are those of the full replay; nothing is explained.  ``describe`` asks for the state at
    its point alone (``state_only=True``): ``state_at`` of the full replay's dated history, the same records
    rejected, the same image."""
    from controller_core.point import with_partitions
    from controller_core.vector.fold import state_at

    records, _ = read_log_dir(LOG_DIRS[name], partition_json=False)
    rejected_full, rejected_state = [], []
    full = pipeline.run(records, invariants=False, rejected=rejected_full)
    state = pipeline.run(records, invariants=False, recompute=False, rejected=rejected_state)
    assert state.explained.num_rows == 0 and state.divergences.num_rows == 0 and full.explained.num_rows > 0
    assert state.history.drop_columns(["trigger"]).equals(full.history.drop_columns(["trigger"]))
    assert state.history.column("trigger").null_count == state.history.num_rows
    assert state.brokers.equals(full.brokers) and state.topics.equals(full.topics)
    assert rejected_state == rejected_full
    a, b = with_partitions(full.image, full.history), with_partitions(state.image, state.history)
    assert a.partitions == b.partitions and a.partitions
    assert (a.topics, a.brokers, a.configs, a.features) == (b.topics, b.brokers, b.configs, b.features)
    rejected_point: list = []
    point = pipeline.run(records, invariants=False, recompute=False, rejected=rejected_point, state_only=True)
    want = state_at(full.history)
    assert point.history.num_rows == want.num_rows < full.history.num_rows
    assert point.history.drop_columns(["trigger"]).equals(want.drop_columns(["trigger"]))  # dated as the history
    assert point.history.column("valid_from_timestamp").null_count < point.history.num_rows
    assert rejected_point == rejected_full and point.brokers.equals(full.brokers)
    c = with_partitions(point.image, point.history)
    assert c.partitions == a.partitions and (c.topics, c.brokers, c.configs) == (a.topics, a.brokers, a.configs)
    with pytest.raises(ValueError, match="state_only"):
        pipeline.run(records, invariants=False, state_only=True)


@pytest.mark.parametrize("name", ["default-cluster", "induswargods"])
def test_a_tape_past_32_bits_replays_the_same(name, monkeypatch):
    """The layout keeps list positions in int32 below 2^31 tape entries and in int64 from there (a log no test
    can hold): lowered threshold, the int64 layout replays the same, breaches included."""
    from controller_core.kernels import layout

    records, _ = read_log_dir(LOG_DIRS[name], partition_json=False)
    narrow = pipeline.run(records)
    assert layout.build(records).lists.dtype == "int32"
    monkeypatch.setattr(layout, "POSITIONS_32", 0)
    assert layout.build(records).lists.dtype == "int64"
    _same_replay(narrow, pipeline.run(records))
