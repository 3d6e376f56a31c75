"""The compiled invariant pass against the scalar reference on generated logs.

Hypothesis writes small, often illegal, metadata logs -- partitions with duplicate or foreign members,
fences and controlled shutdowns, re-registrations, ELR and LastKnownElr lists, min ISR and unclean
configs, ClearElr and topic deletions, metadata.version and ELR feature changes -- and both checkers
must report the same breaches in the same words.  A second test runs the pass as plain Python
(``NUMBA_DISABLE_JIT=1``) so its logic stays debuggable with pdb and coverage.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
import pyarrow.compute as pc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller_core.kernels.invariants import check as compiled_check
from controller_core.replay import SKIP, read_log_dir
from controller_core.rules.invariants import check_log
from log_builder import Log, uuid

BROKERS = [0, 1, 2, 3]
TOPICS = ["a", "b"]
members = st.lists(st.sampled_from([-1, 0, 1, 2, 3, 4]), max_size=4)
near_members = st.lists(st.sampled_from(BROKERS), max_size=3, unique=True)


def _change(draw, log: Log, elr_fields: bool):
    fields = {}
    if draw(st.booleans()):
        fields["isr"] = draw(st.one_of(near_members, members))
    if draw(st.booleans()):
        fields["leader"] = draw(st.sampled_from([-1, 0, 1, 2, 3, 4]))
    if draw(st.integers(0, 5)) == 0:
        fields["replicas"] = draw(st.one_of(near_members, members))
    if draw(st.integers(0, 6)) == 0:
        fields["adding"] = draw(near_members)
    if draw(st.integers(0, 6)) == 0:
        fields["removing"] = draw(near_members)
    if draw(st.integers(0, 4)) == 0:
        fields["lrs"] = draw(st.sampled_from([0, 1]))
    if elr_fields and draw(st.booleans()):
        fields["elr"] = draw(near_members)
    if elr_fields and draw(st.integers(0, 3)) == 0:
        fields["lke"] = draw(st.one_of(near_members, st.just([-1])))
    return log.change(draw(st.sampled_from(TOPICS)), draw(st.integers(0, 2)), **fields)


def _record(draw, log: Log):
    elr_fields = log.version >= 2
    kind = draw(st.integers(0, 15))
    b = draw(st.sampled_from(BROKERS))
    if kind <= 5:
        return _change(draw, log, elr_fields)
    if kind == 6:
        return log.fence(b) if b in log.epoch else log.register(b)
    if kind == 7:
        return log.unfence(b, epoch=draw(st.sampled_from([None, 7])))
    if kind == 8:
        return log.shutdown(b, draw(st.sampled_from([1, 1, 0, 2]))) if b in log.epoch else log.register(b)
    if kind == 9:
        return log.register(b, new=draw(st.booleans()), fenced=draw(st.booleans()), cs=draw(st.booleans()))
    if kind == 10:
        name = draw(st.sampled_from(["min.insync.replicas", "unclean.leader.election.enable"]))
        value = draw(st.sampled_from(["1", "2", "3", "true", "false", None]))
        resource = draw(st.sampled_from([(2, "a"), (2, "b"), (4, ""), (4, "0")]))
        return log.config(name, value, *resource)
    if kind == 11:
        extra = {"elr": draw(near_members)} if elr_fields and draw(st.booleans()) else {}
        replicas = draw(st.one_of(near_members, members))
        return log.partition(draw(st.sampled_from(TOPICS)), draw(st.integers(0, 2)), replicas,
                             draw(st.one_of(st.none(), members)), le=draw(st.integers(0, 3)),
                             pe=draw(st.integers(0, 3)), lrs=draw(st.sampled_from([0, 0, 1])), **extra)
    if kind == 12:
        return ("CLEAR_ELR_RECORD", 0, {"topicName": draw(st.sampled_from(["", "a", "zz"]))})
    if kind == 13:
        return ("REMOVE_TOPIC_RECORD", 0, {"topicId": uuid("topic-" + draw(st.sampled_from(TOPICS + ["zz"])))})
    if kind == 14:
        name = draw(st.sampled_from(TOPICS))
        return log.topic(name, topic_id=draw(st.sampled_from([None, uuid("again-" + name)])))
    return log.feature(*draw(st.sampled_from([("metadata.version", 11), ("metadata.version", 25),
                                              ("eligible.leader.replicas.version", 1),
                                              ("eligible.leader.replicas.version", 0)])))


@st.composite
def logs(draw) -> Log:
    mv = draw(st.sampled_from([None, 3, 8, 12, 19, 23, 25, 29]))
    log = Log(mv, elr=draw(st.booleans()), brokers=draw(st.sampled_from([(0, 1, 2), (1, 2, 3), (0, 1, 2, 3)])))
    if draw(st.booleans()):
        log.add(log.config("min.insync.replicas", draw(st.sampled_from(["1", "2", "3"]))))
    for name in TOPICS:
        log.create(name, *draw(st.lists(near_members.filter(bool), min_size=1, max_size=3)))
    for _ in range(draw(st.integers(1, 14))):
        log.add(*[_record(draw, log) for _ in range(draw(st.integers(1, 4)))])
    return log


def _key(b) -> tuple:
    return (b.offset, b.rule, b.severity, b.topic, b.partition, b.topic_id, json.dumps(b.recorded, default=str),
            json.dumps(b.expected, default=str), b.message)


def _compiled(path: Path, elr_override=None):
    records, _ = read_log_dir(path, [])
    records = records.filter(pc.invert(pc.is_in(records.column("record_type"), pa.array(sorted(SKIP)))))
    return compiled_check(records, elr_override)


def test_compiled_pass_equals_the_scalar_reference(tmp_path):
    """Breach for breach on generated logs; the logs must reach many rules for the comparison to mean much."""
    from controller_core.image import Cluster

    seen: set[str] = set()
    runs = iter(range(10**6))

    @settings(max_examples=300, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(log=logs(), override=st.sampled_from([None, None, True, False]))
    def agree(log, override):
        path = log.write(tmp_path / f"log{next(runs)}")
        scalar = check_log(path, cluster=Cluster(elr_override=override))
        seen.update(b.rule for b in scalar)
        assert Counter(map(_key, _compiled(path, override))) == Counter(map(_key, scalar))

    agree()
    assert len(seen) >= 25, sorted(seen)


def test_min_isr_cap_counts_a_replica_both_adding_and_removing_once(tmp_path):
    """Partition 0 caps its topic's min ISR at |replicas ∪ adding ∪ removing|: a broker listed as both adding and
    removing counts once (found by the property test above: the pass once counted it twice, missed the cap and
    reported an INV-UNDER-MINISR the scalar reference did not)."""
    log = Log(25, elr=False)
    log.add(log.config("min.insync.replicas", "3", 2, "a"))
    log.create("a", [0], [0, 1, 2])
    # partition 0: replicas [0], adding [1], removing [1] -> 2 distinct brokers, so m = min(3, 2) = 2
    log.add(log.change("a", 0, replicas=[0], adding=[1], removing=[1]))
    _at_m, under_m = log.add(log.change("a", 1, isr=[0, 1]), log.change("a", 1, isr=[0]))
    path = log.write(tmp_path / "log")
    compiled = Counter(map(_key, _compiled(path)))
    assert compiled == Counter(map(_key, check_log(path)))
    under = [k for k in compiled if k[1] == "INV-UNDER-MINISR" and k[4] == 1]
    assert [(k[0], json.loads(k[6])) for k in under] == [(under_m, {"isr": [0], "minIsr": 2})]  # not at_m


def test_the_pass_runs_as_plain_python(tmp_path):
    """NUMBA_DISABLE_JIT=1: the same functions interpreted, same breaches as the compiled run."""
    log = Log(25, elr=True)
    log.add(log.config("min.insync.replicas", "2"))
    log.create("a", [0, 1, 2], [1, 2, 0])
    log.add(log.fence(0), log.change("a", 0, isr=[1, 2], leader=1))
    log.add(log.change("a", 1, isr=[1], elr=[2]), log.change("a", 1, isr=[], elr=[1, 2], leader=-1))
    log.add(log.change("a", 1, isr=[0], leader=0, lrs=1), log.register(0))
    path = log.write(tmp_path / "log")
    compiled = sorted(map(_key, _compiled(path)))
    assert len({k[1] for k in compiled}) >= 4  # the log does break several rules
    script = ("import json, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
              "from test_invariant_pass import _compiled, _key; from pathlib import Path; "
              "print(json.dumps(sorted(map(_key, _compiled(Path(sys.argv[3]))))))")
    here = Path(__file__).resolve()
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", script, str(here.parent), str(here.parents[2]), str(path)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=here.parents[3])
    assert out.returncode == 0, out.stderr[-2000:]
    assert [tuple(k) for k in json.loads(out.stdout)] == compiled


def test_a_breach_stream_longer_than_its_buffer_is_written_whole(tmp_path, monkeypatch):
    """The pass writes its breaches into a buffer sized from the records; a log breaching more than that runs the
    pass again with room for all of it: the same breaches, none cut."""
    from controller_core.kernels import invariant_pass, invariants

    log = Log(25, elr=True)
    log.add(log.config("min.insync.replicas", "2"))
    log.create("a", [0, 1, 2], [1, 2, 0], [2, 0, 1])
    log.add(log.fence(0), log.change("a", 0, isr=[1, 2], leader=1))
    log.add(log.change("a", 1, isr=[1], elr=[2]), log.change("a", 1, isr=[], elr=[1, 2], leader=-1))
    log.add(log.change("a", 1, isr=[0], leader=0, lrs=1), log.register(0))
    path = log.write(tmp_path / "log")
    whole = sorted(map(_key, _compiled(path)))
    assert len(whole) >= 4
    calls = []
    real = invariant_pass.check

    def counted(*args):
        calls.append(args[-2])  # the stream's capacity (the last argument: the state lines)
        return real(*args)

    monkeypatch.setattr(invariants, "STREAM_WORDS_PER_RECORD", 0)
    monkeypatch.setattr(invariants, "STREAM_WORDS_MIN", 3)
    monkeypatch.setattr(invariants.K, "check", counted)
    assert sorted(map(_key, _compiled(path))) == whole
    assert len(calls) == 2 and calls[0] == 3 and calls[1] > 3  # cut at 3 words, then run with room for all


def test_an_epoch_bumped_past_int32_runs_the_pass_on_wide_state_lines(tmp_path, monkeypatch):
    """The partitions' state lines are int32; the one value the pass makes beyond a record's own is an epoch bumped by
    a change record, which passes 2**31 - 1 on a partition recorded there (Kafka's int32 would wrap; the rules do not).
    The pass says so and runs again on int64 lines: a PartitionRecord after the bump lowers the epochs, as the scalar
    reference says, and its breach names the epochs 2**31 (wrapped, they read as lower than anything)."""
    from controller_core.kernels import invariants

    top = 2**31 - 1
    log = Log(25, elr=True)
    log.add(log.topic("a"), log.partition("a", 0, [0, 1, 2], leader=0, le=top, pe=top))
    log.add(log.change("a", 0, leader=1))  # leader epoch and partition epoch: 2**31
    lowered, = log.add(log.partition("a", 0, [0, 1, 2], leader=1, le=top, pe=top))
    path = log.write(tmp_path / "log")
    lines = []
    real = invariants.K.check

    def seen(*args):
        lines.append(args[-1].dtype)
        return real(*args)

    monkeypatch.setattr(invariants.K, "check", seen)
    compiled = Counter(map(_key, _compiled(path)))
    assert compiled == Counter(map(_key, check_log(path)))
    assert lines == [np.int32, np.int64]
    lower = [(json.loads(k[6]), json.loads(k[7])) for k in compiled
             if k[0] == lowered and k[1] == "INV-EPOCH-MONOTONIC"]
    assert lower and str(2**31) in json.dumps(lower)


@pytest.mark.parametrize("x, brokers", [(1, (1, 2, 3)), (66, tuple(range(1, 70)))], ids=["row-0", "row-65"])
def test_a_pending_controlled_shutdown_is_followed_batch_by_batch(tmp_path, x, brokers):
    """A controlled shutdown of broker x stays pending while batches move partitions off it.  The pass follows only
    the partitions each batch writes or deletes (not the whole list again), and checks the list whole when ELR stops
    being in effect: a leaderless partition whose ISR is x alone offends only while ELR is in effect (§4
    INV-FENCE-REMOVES-ISR).  What is left when a batch makes no progress is reported, with the scalar reference's
    words.  Broker 66 is row 65 of the pass's broker table, past the 63 it follows by bits: checked whole each time."""
    log = Log(25, elr=True, brokers=brokers)
    log.create("a", [x, 2, 3], [x, 2, 3], [x, 2, 3], [x, 3, 2])
    log.create("b", [x, 2, 3])
    log.create("c", [x, 2, 3])
    log.add(log.change("a", 0, isr=[x], leader=-1))  # a-0: ISR [x], no leader
    (shutdown,) = log.add(log.shutdown(x))  # pending: a-0 (ELR on), a-1, a-2, a-3, b-0, c-0
    log.add(log.change("a", 1, isr=[2, 3], leader=2))  # a-1 leaves
    log.add(("REMOVE_TOPIC_RECORD", 0, {"topicId": uuid("topic-b")}), log.change("a", 2, isr=[2, 3], leader=2))
    log.add(log.feature("eligible.leader.replicas.version", 0), log.change("a", 3, isr=[3, 2], leader=3))
    log.add(log.change("a", 1, isr=[2]))  # no progress for x: c-0 alone is left (a-0 left with ELR)
    path = log.write(tmp_path / "log")
    compiled = Counter(map(_key, _compiled(path)))
    assert compiled == Counter(map(_key, check_log(path)))
    fenced = sorted((k[0], k[3], k[4]) for k in compiled if k[1] == "INV-FENCE-REMOVES-ISR")
    assert fenced == [(shutdown, "c", 0)]


def test_a_batch_that_writes_nothing_ends_a_pending_controlled_shutdown(tmp_path):
    """The pass skips the batch-level rules at the end of a batch that wrote, deleted, fenced, registered and
    re-configured nothing -- unless a controlled shutdown is pending: such a batch makes no progress, and what the
    shutdown left in ISRs is reported then (here a FeatureLevelRecord of another feature), not saved by a later batch
    that moves the partition off."""
    log = Log(25, elr=True, brokers=(1, 2, 3))
    log.create("a", [1, 2, 3], [1, 2, 3])
    (shutdown,) = log.add(log.shutdown(1))  # pending: a-0, a-1
    log.add(log.change("a", 0, isr=[2, 3], leader=2))  # progress: a-0 leaves
    log.add(log.feature("group.version", 1))  # no progress: a-1 is left
    log.add(log.change("a", 1, isr=[2, 3], leader=2))  # too late
    path = log.write(tmp_path / "log")
    compiled = Counter(map(_key, _compiled(path)))
    assert compiled == Counter(map(_key, check_log(path)))
    fenced = sorted((k[0], k[3], k[4]) for k in compiled if k[1] == "INV-FENCE-REMOVES-ISR")
    assert fenced == [(shutdown, "a", 1)]
