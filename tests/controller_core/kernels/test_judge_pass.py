"""The findings-only replay's one pass (controller_core/kernels/judge_pass.py): the fold and the change builder
together, no history made.

Its table is held to ``explain``'s on every real log, simulated cluster, edited and generated log by
``test_recompute_pass.assert_same_judgement`` (the plain-Python run included).  Here: the pipeline takes it for a
findings-only replay (``verify``) and finds exactly what a replay with a history finds -- divergences, the scalar
reference's partitions, breaches, triggers --, and ``explain``'s padding width, which only a whole pass knows, is
met by a second run when a log's widest replica list never precedes a change record."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc

from controller_core import pipeline, timelines
from controller_core.image import Cluster
from controller_core.kernels import judge_pass, layout
from controller_core.replay import read_log_dir
from controller_core.vector import explain as X
from simulator.engine import simulate
from simulator.scenario import load

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_recompute_pass import _edit_rows, assert_same_judgement  # noqa: E402


def _spied(monkeypatch) -> list:
    """The widths every run of the loop was given."""
    widths: list = []
    real = judge_pass._pass

    def spy(*args):
        widths.append(args[-8])
        return real(*args)

    monkeypatch.setattr(judge_pass, "_pass", spy)
    return widths


def _same_findings(a: pipeline.Replay, b: pipeline.Replay) -> None:
    assert a.explained.equals(b.explained)
    # the timelines built once, whichever way the replay went (building them applies records to the image)
    assert a.brokers.equals(b.brokers) and a.topics.equals(b.topics)
    assert sorted(a.image.topics) == sorted(b.image.topics)
    assert a.divergences.to_pylist() == b.divergences.to_pylist()
    assert a.breaches.to_pylist() == b.breaches.to_pylist()
    assert (a.trigger_counts, a.scalar_partitions, a.partition_changes) == (b.trigger_counts, b.scalar_partitions,
                                                                             b.partition_changes)


def test_a_findings_only_replay_takes_the_one_pass_and_finds_what_a_full_replay_finds(tmp_path, monkeypatch):
    simulate(load("fleet-large", params={"partitions": 80, "events": 6}), tmp_path, seed=11)
    records, _ = read_log_dir(tmp_path, [], partition_json=False)  # (the scalar reference reads the typed columns)
    change = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD")))
    rng = np.random.default_rng(4)  # records no controller would write: divergences, some for the scalar reference
    edited = _edit_rows(records, "leader", rng.choice(change, 12, replace=False), 5)
    edited = _edit_rows(edited, "isr", rng.choice(change, 12, replace=False), lambda v: (v or [1])[::-1] + [9])
    widths = _spied(monkeypatch)
    for recs in (records, edited):
        full = pipeline.run(recs)  # a history: the fold and explain
        assert not widths
        found = pipeline.run(recs, history=False)
        assert len(widths) == 1 and found.history.num_rows == 0
        _same_findings(found, full)
        widths.clear()
    assert found.divergences.num_rows > 0 and found.scalar_partitions > 0  # (the edited log)
    assert pc.sum(found.explained.column("matched")).as_py() > found.explained.num_rows // 2


def test_the_padding_width_comes_from_the_states_before_the_changes(tmp_path, monkeypatch):
    """The last change of a partition writes four replicas (a reassignment's shape): the widest list a record
    writes, never the state before a change -- the loop runs again with explain's width (3)."""
    simulate(load("fleet-large", params={"partitions": 40, "events": 4}), tmp_path, seed=2)
    records, _ = read_log_dir(tmp_path, [])
    change = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD")))
    last = int(change[-1])
    wide = _edit_rows(records, "replicas", [last], lambda v: [1, 2, 3, 4])
    widths = _spied(monkeypatch)
    got = assert_same_judgement(wide)
    assert widths == [4, 3] and got.num_rows == len(change)
    widths.clear()
    full, found = pipeline.run(wide), pipeline.run(wide, history=False)
    _same_findings(found, full)
    assert widths == [4, 3]


def test_what_the_pass_does_not_take_replays_through_the_fold(tmp_path, monkeypatch):
    """Replicas repeating a broker: the pass leaves the whole input to the fold and explain (the NumPy builder
    judges those records), and the findings are the same."""
    simulate(load("fleet-large", params={"partitions": 30, "events": 4}), tmp_path, seed=7)
    records, _ = read_log_dir(tmp_path, [])
    created = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_RECORD")))
    odd = _edit_rows(records, "replicas", created[:3], lambda v: [v[0]] + v)
    lay = layout.build(odd, cluster=False)
    brokers, topics = timelines.build(X.cluster_level_recs(odd), Cluster(), None)
    assert X.explain_unfolded(odd, lay, judge_pass.prepare(odd, lay), brokers, topics) is None
    found = pipeline.run(odd, history=False)
    _same_findings(found, pipeline.run(odd))
    assert found.explained.num_rows and found.scalar_partitions == 0  # (the NumPy builder judged them in explain)


def test_brokers_states_counted_a_record_at_a_time_where_offsets_are_sparse(tmp_path, monkeypatch):
    """Where the records' offsets span too wide a range for a table over it (a bootstrap at offset 0 before a log that
    starts millions of offsets later; forced here by a span of none), each record's count of broker rows before it is
    made per record: the same judgement."""
    simulate(load("fleet-large", params={"partitions": 40, "events": 4}), tmp_path, seed=9)
    records, _ = read_log_dir(tmp_path, [])
    spans = []
    real = judge_pass._pass

    def spy(*args):
        spans.append(args[-12])  # by_row
        return real(*args)

    monkeypatch.setattr(judge_pass, "_pass", spy)
    assert_same_judgement(records)
    monkeypatch.setattr(judge_pass, "dense_span", lambda n: -1)
    assert_same_judgement(records)
    assert spans == [False, True]
