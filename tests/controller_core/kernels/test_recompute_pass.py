"""The compiled change builder (controller_core.kernels.recompute_pass) judges every change record exactly as the
NumPy builder (vector.recompute), its reference:

* directly, on thousands of random partition states, triggers and cluster contexts (the cases of
  ``vector/test_recompute.py``), with the scalar builder's own record and with edits of it (another leader,
  ISR, ELR, LastKnownElr or recovery state): same ``matched`` and ``modelled`` for every record, and the
  triggers the loop completes (elections) equal ``explain``'s;
* the short path for an AlterPartition (the ISR, maybe the leader) and for a preferred election (``_short_path``)
  against the general path alone (``_judge_general``), on random records of those shapes and around their edges;
* through ``explain`` (trigger labels, matched, modelled: the whole table), with the layout (compiled) and without
  (NumPy), on every real log, on simulated clusters (fences, unclean shutdowns, ELR, reassignments, topic
  deletion), on generated histories whose changes no controller wrote, on records edited after the fact, on
  replicas repeating a broker (judged by the NumPy builder, flagged by the loop) and on replica lists wider than
  the loop's 64 positions (the NumPy builder for the whole input).

One test runs the loop with ``NUMBA_DISABLE_JIT=1`` (plain Python, debuggable) in a subprocess.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from numba import njit

from controller_core import pipeline, timelines
from controller_core.image import Cluster
from controller_core.kernels import fold_pass, judge_pass, layout, recompute_pass
from controller_core.replay import plan, read_log_dir
from controller_core.rules.builder import build
from controller_core.vector import explain as X
from controller_core.vector import recompute as V
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "vector"))
import test_fold as vector_tests  # noqa: E402  (its generator and bronze reader)
import test_fold_pass as fold_tests  # noqa: E402  (its simulator scenario)
import test_recompute as builder_tests  # noqa: E402  (its random cases)


# ------------------------------------------------------------------------------- the loop, directly
def _kernel_args(cases, changes):
    """The loop's inputs for the cases of vector/test_recompute.py: history rows = the states before, layout rows =
    the recorded changes, a broker table with one row per record (its active brokers)."""
    ps = [c[0] for c in cases]
    n = len(ps)
    width = max(1, max(len(p.replicas) for p in ps))
    ints = np.zeros((n, 5), np.int32)
    lists = np.full((n, 12), -1, np.int32)
    tape: list[int] = []
    for i, ch in enumerate(changes):
        ch = ch or {}
        ints[i, 0] = ch.get("leader", -2)
        ints[i, 3] = ch.get("leaderRecoveryState", -1)
        ints[i, 4] = len(ch["directories"]) if "directories" in ch else -1
        for f, key in ((layout.R, "replicas"), (layout.I, "isr"), (layout.RM, "removingReplicas"),
                       (layout.AD, "addingReplicas"), (layout.E, "eligibleLeaderReplicas"), (layout.K, "lastKnownElr")):
            if ch.get(key) is not None:
                lists[i, 2 * f], lists[i, 2 * f + 1] = len(tape), len(ch[key])
                tape += ch[key]
    nb = 8  # broker ids 0..6, then the inactive column
    table = np.zeros(n * nb, bool)
    for i, c in enumerate(cases):
        for b in c[4]:
            table[i * nb + b] = True
    before = pa.table({name: pa.array(vals, pa.list_(pa.int32())) for name, vals in zip(layout.LISTS, (
        [p.replicas for p in ps], [p.isr for p in ps], [[] for _ in ps], [[] for _ in ps], [p.elr for p in ps],
        [p.last_known_elr for p in ps]))})
    return (np.arange(n, dtype=np.int64), np.arange(n, dtype=np.int64), width, *X.before_lists(before),
            np.array([p.leader for p in ps], np.int32), np.array([p.lrs for p in ps], np.int32),
            ints, lists, np.array(tape or [0], np.int32), np.array([c[2] for c in cases], np.int8),
            np.array([c[3] for c in cases], np.int32), np.array([c[5] for c in cases], np.int16),
            np.array([c[6] for c in cases], bool), np.array([c[7] for c in cases], np.int32), table,
            np.arange(n, dtype=np.int64) * nb, np.arange(nb, dtype=np.int32))


@pytest.mark.parametrize("seed", range(4))
def test_the_loop_judges_every_record_as_the_numpy_builder(seed):
    rng = random.Random(2000 + seed)
    cases = [builder_tests._random_case(rng) for _ in range(2000)]
    truth = [build(c[0], c[1]) for c in cases]
    matched_some = 0
    for kind in range(6):
        recs = builder_tests.edits(rng, cases, truth, kind)
        before, rec, ctx = builder_tests._columns(cases, recs)
        trig = X._election_or_alter(ctx.trigger.astype(np.int8), rec)  # the elections explain tells apart
        ctx.trigger = trig.astype(np.int64)
        want = V.recompute(before, rec, ctx)
        args = _kernel_args(cases, recs)
        matched, modelled, unjudged = recompute_pass.recompute(*args)
        assert not unjudged.any()
        np.testing.assert_array_equal(args[11], trig)  # the loop completed the triggers alike
        np.testing.assert_array_equal(modelled, want.modelled)
        np.testing.assert_array_equal(matched, want.matched)
        matched_some += int(matched.sum())
    assert matched_some > 1000  # the controller's own records are explained: the comparison is not all-False


# ------------------------------------------------------------------------- the short path, against the general
@njit(cache=False)
def _both_ways(reps, isr, elr, lke, moving, rec, ints, lists, leader, lrs, trig, broker, elr_on, mv, min_isr, table,
               width, out):
    """Each case judged by ``_judge`` (short path first) and by ``_judge_general`` alone, into ``out[k]``: (trigger,
    matched, modelled) each way, then whether the short path decided it (-1: replicas the map does not take).  Case
    k's state lists are ``reps[k]``, ``isr[k]``, ``elr[k]``, ``lke[k]`` (-9 pads; ``moving[k]``: the lengths of its
    adding and removing replicas), laid on one tape with the record's lists, ``rec[k]`` (its layout row
    ``lists[k]``: positions within ``rec[k]``); broker b is active iff ``table[k, b]``."""
    m = reps.shape[1]
    nb = table.shape[1]
    posof = np.full(nb, -1, np.int8)
    ti = np.empty(width.max() + 64, np.int64)
    lut = np.arange(nb).astype(np.int32)
    flat = table.ravel()
    tape = np.zeros(5 * m, np.int32)
    lens = np.zeros(4, np.int64)
    for k in range(len(reps)):
        for f in range(4):
            src = (reps, isr, elr, lke)[f]
            n = 0
            for x in src[k]:
                if x != -9:
                    tape[f * m + n] = x
                    n += 1
            lens[f] = n
        tape[4 * m:] = rec[k]
        lst = lists[k:k + 1].copy()
        for f in range(6):
            if lst[0, 2 * f + 1] >= 0:
                lst[0, 2 * f] += 4 * m
        w = lens[0]
        if not recompute_pass._map(posof, tape, 0, w):
            out[k, 6] = -1
            continue
        row = ints[k:k + 1]
        adl, rml = moving[k, 0], moving[k, 1]
        t1, ok1, mo1 = recompute_pass._judge(posof, tape, tape, ti, 0, w, m, lens[1], 2 * m, lens[2], 3 * m, lens[3],
                                             adl, rml, leader[k], lrs[k], row, lst, 0, trig[k], broker[k], elr_on[k],
                                             mv[k], min_isr[k], flat, k * nb, lut, width[k])
        t2, ok2, mo2 = recompute_pass._judge_general(posof, tape, tape, ti, 0, w, m, lens[1], 2 * m, lens[2], 3 * m,
                                                     lens[3], adl, rml, leader[k], lrs[k], row, lst, 0, trig[k],
                                                     broker[k], elr_on[k], mv[k], min_isr[k], flat, k * nb, lut,
                                                     width[k])
        decided = recompute_pass._short_path(posof, tape, tape, 0, w, m, lens[1], lens[2], lens[3], adl, rml,
                                             leader[k], row, lst, 0, trig[k], broker[k], elr_on[k], mv[k], min_isr[k],
                                             flat, k * nb, lut, width[k])[0]
        recompute_pass._unmap(posof, tape, 0, w)
        out[k, 0], out[k, 1], out[k, 2], out[k, 3], out[k, 4], out[k, 5] = t1, ok1, mo1, t2, ok2, mo2
        out[k, 6] = decided


def _short_path_cases(rng: np.random.Generator, n: int):
    """``n`` random change records without a broker event and the states before them, mostly of the short path's
    shapes (an AlterPartition that writes the ISR and maybe the leader, a preferred election that writes the leader)
    and around their edges: leaders in and out of the requested ISR, active or not, not replicas or none; requested
    ISRs equal to the state's, growing, shrinking, reordered, holding other brokers or -1; ISRs outside the
    replicas; metadata versions either side of 3.6; ELR on and off, min ISRs either side of the requested ISR's
    length; leaders written that are the first replica, another or none; now and then an ELR, a LastKnownElr, a
    recovery state written, a broker event's trigger, a reassignment in flight or written, directories written."""
    m = 6
    reps, isr, elr, lke = (np.full((n, m), -9, np.int64) for _ in range(4))
    moving = np.where(rng.random((n, 2)) < 0.05, 1, 0)
    rec = np.zeros((n, m), np.int64)
    ints = np.tile(np.array([-2, 0, 0, -1, -1], np.int32), (n, 1))
    lists = np.full((n, 12), -1, np.int64)
    leader, lrs = np.zeros(n, np.int64), rng.integers(0, 2, n)
    trig = np.where(rng.random(n) < 0.9, V.ALTER, rng.integers(0, 6, n))
    broker = np.where(trig == V.ALTER, -1, rng.integers(0, 8, n))
    elr_on = rng.random(n) < 0.4
    mv = rng.choice([3, 7, 11, 12, 13, 17, 22, 23], n)
    min_isr = rng.integers(1, 4, n)
    table = rng.random((n, 10)) < 0.8
    width = np.zeros(n, np.int64)
    for k in range(n):
        w = int(rng.integers(1, 6))
        r = rng.permutation(8)[:w]
        reps[k, :w] = r
        s = [int(x) for x in r if rng.random() < 0.7]
        rng.shuffle(s)
        if rng.random() < 0.05:
            s.append(int(rng.choice([8, 9, -1])))
        isr[k, :len(s)] = s
        if rng.random() < 0.1:
            elr[k, 0] = r[-1]
        if rng.random() < 0.1:
            lke[k, 0] = r[0] if rng.random() < 0.5 else int(rng.choice([8, 9]))
        leader[k] = (int(rng.choice(s)) if s and rng.random() < 0.85 else
                     int(rng.choice([-1, int(r[0]), 8, 9])))
        q = [int(x) for x in r if rng.random() < 0.7]
        rng.shuffle(q)
        if rng.random() < 0.25:  # the state's ISR, maybe with one more or one fewer
            q = list(s[:len(s) - 1] if rng.random() < 0.5 else s) + ([int(r[0])] if rng.random() < 0.3 else [])
        if rng.random() < 0.05:
            q.append(int(rng.choice([8, 9, -1])))
        q = q[:m]
        rec[k, :len(q)] = q
        lists[k, 2 * layout.I], lists[k, 2 * layout.I + 1] = 0, len(q)
        if rng.random() < 0.05:
            lists[k, 2 * layout.E], lists[k, 2 * layout.E + 1] = 0, 0
        if rng.random() < 0.25:  # a leader written: with the ISR, an election; without, a preferred election
            ints[k, 0] = int(r[0]) if rng.random() < 0.5 else int(rng.choice([-1, 8, *r]))
            if rng.random() < 0.6:
                lists[k, 2 * layout.I + 1] = -1
        if rng.random() < 0.05:
            ints[k, 3] = int(rng.integers(0, 2))
        for f in (layout.R, layout.RM, layout.AD):  # an assignment field written (the ISR's values again)
            if rng.random() < 0.03:
                lists[k, 2 * f], lists[k, 2 * f + 1] = 0, len(q)
        if rng.random() < 0.03:
            ints[k, 4] = len(r)
        width[k] = w + int(rng.integers(0, 2))
    return (reps, isr, elr, lke, moving, rec, ints, lists, leader, lrs, trig, broker, elr_on, mv, min_isr, table, width)


@pytest.mark.parametrize("seed", range(3))
def test_the_short_path_decides_as_the_general_path(seed):
    """``_judge`` takes an AlterPartition (the ISR, maybe the leader) and a preferred election by ``_short_path``, the
    general judgement worked out for those shapes: on random records of those shapes and around them, the same
    (trigger, matched, modelled) as ``_judge_general``, with the short path deciding many of each, both ways."""
    cases = _short_path_cases(np.random.default_rng(seed), 20000)
    out = np.zeros((20000, 7), np.int64)
    _both_ways(*cases, out)
    judged = out[:, 6] >= 0
    assert judged.sum() > 19000
    np.testing.assert_array_equal(out[judged, :3], out[judged, 3:6])
    decided = out[:, 6] == 1
    alter, leader = out[:, 0] == V.ALTER, cases[6][:, 0] != -2
    for shape in (alter & ~leader, alter & leader, out[:, 0] == V.PREFERRED_ELECTION):  # each decided often, both ways
        assert (decided & shape).sum() > 500
        assert 50 < out[decided & shape, 1].sum() < (decided & shape).sum() - 50
    assert (out[judged & ~decided, 4] == 1).sum() > 100  # the general path's own matches, elsewhere


# ------------------------------------------------------------------------------------ through explain
def assert_same_judgement(records: pa.Table, unfolded: bool | None = True) -> pa.Table:
    """explain with the layout (the compiled loop) equals explain without (the NumPy builder), the lists before
    each record read from the history's columns or, as a findings-only replay reads them, from the layout's tape
    where the fold found them (a history without list columns) -- and ``explain_unfolded``, which judges each
    record in the fold's own pass without a history (kernels/judge_pass.py), gives the same table.  ``unfolded``:
    whether that pass must take the input (True), must leave it to the fold and ``explain`` (False: returns None),
    or either (None)."""
    lay = layout.build(records, cluster=False)
    folded = fold_pass.fold(records, lay)
    history = folded.history
    narrow = fold_pass.fold(records, lay, columns=pipeline.JUDGED_COLUMNS)
    assert narrow.refs is not None and "replicas" not in narrow.history.schema.names
    brokers, topics = timelines.build(X.cluster_level_recs(records), Cluster(), None)
    want = X.explain(records, history, brokers, topics)
    # the records found by offset, and by the fold's own note of each history row's input row
    for got in (X.explain(records, history, brokers, topics, lay),
                X.explain(records, history, brokers, topics, lay, folded.rows),
                X.explain(records, history, brokers, topics, lay, folded.rows, folded.changes, folded.refs),
                X.explain(records, narrow.history, brokers, topics, lay, narrow.rows, narrow.changes, narrow.refs)):
        _assert_equal_tables(got, want)
    prepared = judge_pass.prepare(records, lay)
    one_pass = X.explain_unfolded(records, lay, prepared, brokers, topics) if prepared is not None else None
    if unfolded is not None:
        assert (one_pass is not None) is unfolded
    if one_pass is not None:
        _assert_equal_tables(one_pass, want)
    return got


def _assert_equal_tables(got: pa.Table, want: pa.Table) -> None:
    if not got.equals(want):
        g, w = got.to_pylist(), want.to_pylist()
        diff = [(a, b) for a, b in zip(g, w) if a != b]
        raise AssertionError(f"{len(diff)} of {len(w)} change records judged differently ({len(g)} rows against "
                             f"{len(w)}), e.g. {diff[:2]}")


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_real_logs(folder):
    records, _ = read_log_dir(REALDATA / folder, [])
    got = assert_same_judgement(records)
    every = vector_tests.bronze([f.path for f in plan(REALDATA / folder).files])
    assert_same_judgement(every)
    if got.num_rows:
        assert pc.sum(got.column("matched")).as_py() > 0


def test_simulated_cluster_with_fences_elr_reassignments_and_deletion(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(fold_tests.SCENARIO)
    simulate(load(str(f)), tmp_path / "out", seed=0)
    every = vector_tests.bronze([f.path for f in plan(tmp_path / "out").files])
    got = assert_same_judgement(every)
    labels = set(got.column("trigger").cast(pa.string()).to_pylist())
    assert {"fence", "unfence", "alter_partition"} <= {x.split("(")[0] for x in labels}
    assert pc.all(got.column("matched")).as_py() is False  # reassignments: not modelled, left to the scalar path
    assert pc.sum(got.column("matched")).as_py() > got.num_rows // 2


def test_fleet_scenario(tmp_path):
    simulate(load("fleet-large", params={"partitions": 300, "events": 6}), tmp_path, seed=5)
    records, _ = read_log_dir(tmp_path, [])
    got = assert_same_judgement(records)
    assert pc.all(got.column("matched")).as_py()  # the controller's own decisions, every one reproduced


@pytest.mark.parametrize("seed", range(6))
def test_generated_histories_no_controller_wrote(tmp_path, seed):
    r = vector_tests.Seeded(seed)
    batches, _ = vector_tests.interleaved_log(r, r.int(2, 8), r.int(10, 40))
    path = vector_tests.write_log(tmp_path / "h", batches)
    # (their replica lists repeat brokers: where a record's do, the one pass leaves the input to the fold)
    assert_same_judgement(vector_tests.bronze([path]), unfolded=None)


def _edit_rows(records: pa.Table, column: str, rows: np.ndarray, value) -> pa.Table:
    vals = records.column(column).to_pylist()
    for i in rows:
        vals[i] = value(vals[i]) if callable(value) else value
    return records.set_column(records.schema.get_field_index(column), column,
                              pa.array(vals, records.schema.field(column).type))


def _simulated(tmp_path, partitions=60, events=6, seed=7) -> pa.Table:
    simulate(load("fleet-large", params={"partitions": partitions, "events": events}), tmp_path, seed=seed)
    return read_log_dir(tmp_path, [])[0]


def test_records_edited_after_the_fact(tmp_path):
    records = _simulated(tmp_path)
    change = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_CHANGE_RECORD")))
    rng = np.random.default_rng(1)
    edited = _edit_rows(records, "leader", rng.choice(change, 40, replace=False), 5)
    edited = _edit_rows(edited, "isr", rng.choice(change, 40, replace=False), lambda v: (v or [1])[::-1] + [9])
    edited = _edit_rows(edited, "eligible_leader_replicas", rng.choice(change, 20, replace=False), [2])
    edited = _edit_rows(edited, "leader_recovery_state", rng.choice(change, 20, replace=False), 1)
    got = assert_same_judgement(edited)
    base = assert_same_judgement(records)
    assert pc.sum(got.column("matched")).as_py() < pc.sum(base.column("matched")).as_py()


def test_replicas_repeating_a_broker_go_to_the_numpy_builder(tmp_path):
    records = _simulated(tmp_path)
    created = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_RECORD")))
    odd = _edit_rows(records, "replicas", created[:5], lambda v: [v[0]] + v)
    lay = layout.build(odd, cluster=False)
    history = fold_pass.fold(odd, lay).history
    brokers, topics = timelines.build(X.cluster_level_recs(odd), Cluster(), None)
    idx = np.flatnonzero(np.asarray(pc.equal(history.column("record_type"), "PARTITION_CHANGE_RECORD")))
    width = int(pc.max(pc.list_value_length(history.column("replicas"))).as_py())
    # the loop flags those partitions' records...
    seen = {}
    real = recompute_pass.recompute

    def spy(*args):
        seen["out"] = real(*args)
        return seen["out"]

    recompute_pass.recompute = spy
    try:
        assert_same_judgement(odd, unfolded=False)  # ... and the table is still the NumPy builder's
    finally:
        recompute_pass.recompute = real
    assert seen["out"][2].sum() > 0 and width == 4 and len(idx)


def test_an_isr_longer_than_the_loop_holds_goes_to_the_numpy_builder(tmp_path):
    records = _simulated(tmp_path, partitions=20, events=4)
    created = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_RECORD")))
    long_isr = _edit_rows(records, "isr", created[:2], lambda v: v * 40)  # 120 entries, every broker repeated
    got = assert_same_judgement(long_isr, unfolded=False)
    assert got.num_rows and pc.sum(got.column("matched")).as_py() > 0


def test_replica_lists_wider_than_the_loop_go_to_the_numpy_builder(tmp_path):
    records = _simulated(tmp_path, partitions=20, events=4)
    created = np.flatnonzero(np.asarray(pc.equal(records.column("record_type"), "PARTITION_RECORD")))
    wide = _edit_rows(records, "replicas", created[:1], lambda v: v + list(range(100, 100 + 70)))
    got = assert_same_judgement(wide, unfolded=False)
    assert got.num_rows and pc.sum(got.column("matched")).as_py() > 0


# ------------------------------------------------------------------------------------- plain Python
def _explained_json(segment: str) -> str:
    records = vector_tests.bronze([segment])
    return json.dumps(assert_same_judgement(records).to_pylist(), sort_keys=True, default=str)


def test_the_loop_runs_as_plain_python(tmp_path):
    """NUMBA_DISABLE_JIT=1: the same functions interpreted judge every record alike."""
    simulate(load("fleet-large", params={"partitions": 40, "events": 4}), tmp_path / "sim", seed=2)
    segment = str(plan(tmp_path / "sim").files[-1].path)
    compiled = _explained_json(segment)
    assert '"matched": true' in compiled
    script = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]]; "
              "from test_recompute_pass import _explained_json; print(_explained_json(sys.argv[5]))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", script, str(HERE.parent), str(HERE.parents[1] / "vector"),
                          str(HERE.parents[2]), str(HERE.parents[3]), segment], env=env, capture_output=True,
                         text=True, timeout=600, cwd=HERE.parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == compiled
