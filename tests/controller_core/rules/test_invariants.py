"""The §4 invariants of controller-rules.md, one test per rule: a small metadata log that breaks the rule is
caught at the right offset with the right id and severity, and a near-identical legal log is not.

Logs are written with the batch encoder into ``<tmp>/<name>/__cluster_metadata-0/00000000000000000000.log``
and read back through ``controller_core.replay.iter_batches``, so the decode/replay path the verify job uses
is the one exercised.  The last tests replay every real log under ../shared/realdata: real Kafka wrote
them, so no ERROR may appear, and every WARN/INFO is listed with its reason.
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core.rules.invariants import (
    ERROR, INFO, NOT_HERE, RULES, WARN, Breach, InvariantChecker, check_log, is_unclean_election,
)
from controller_core.kernels.invariants import check as compiled_check
from controller_core.replay import SKIP, Rec, read_log_dir
from controller_core.image import MIGRATING, Cluster, Partition
from log_builder import Log, uuid
from simulator.writer import write_log

REALDATA = Path(__file__).resolve().parents[4] / "shared" / "realdata"


def base(mv: int | None = 25, *, elr: bool = False, min_isr: int | None = None, parts=([1, 2, 3],)) -> Log:
    """Three active brokers and topic ``t`` (partition i assigned ``parts[i]``, ISR = replicas)."""
    log = Log(mv, elr=elr)
    if min_isr is not None:
        log.add(log.config("min.insync.replicas", str(min_isr)))
    log.create("t", *parts)
    return log


_runs = 0


def run(log: Log, tmp_path: Path, cluster: Cluster | None = None) -> list[Breach]:
    """The scalar reference's breaches of ``log``; every log is also checked by the compiled pass, which
    must find exactly the same breaches, described in the same words (except with an image whose
    applier is broken on purpose: the compiled pass has its own)."""
    global _runs
    _runs += 1
    path = log.write(tmp_path / f"log{_runs}")
    found = check_log(path, cluster=cluster)
    if cluster is None or type(cluster) is Cluster:
        assert_compiled_agrees(path, found, None if cluster is None else cluster.elr_override)
    return found


def _breach_key(b: Breach) -> tuple:
    return (b.offset, b.rule, b.severity, b.topic, b.partition, b.topic_id, json.dumps(b.recorded, default=str),
            json.dumps(b.expected, default=str), b.message)


def assert_compiled_agrees(path: Path, scalar: list[Breach], elr_override=None) -> None:
    records, _ = read_log_dir(path, [])
    records = records.filter(pc.invert(pc.is_in(records.column("record_type"), pa.array(sorted(SKIP)))))
    compiled = compiled_check(records, elr_override)
    assert Counter(map(_breach_key, compiled)) == Counter(map(_breach_key, scalar))


def hits(breaches: list[Breach], rule: str) -> list[tuple[int, str]]:
    return [(b.offset, b.severity) for b in breaches if b.rule == rule]


# ---------------------------------------------------------------------------------------------- baseline
@pytest.mark.parametrize("mv,elr", [(None, False), (5, False), (8, False), (19, False), (21, False), (25, False),
                                    (25, True), (29, True)])
def test_cluster_start_and_topic_creation_break_nothing(tmp_path, mv, elr):
    log = base(mv, elr=elr, parts=([1, 2, 3], [2, 3, 1], [3]))
    log.add(log.change("t", 0, isr=[1, 2]))  # an AlterPartition shrink (bumps below 3.6 only)
    if mv is None or mv < 12:
        log.batches[-1] = (log.batches[-1][0], [log.change("t", 0, isr=[1, 2], leader=1)])
    log.add(log.change("t", 0, isr=[1, 2, 3]))
    assert run(log, tmp_path) == []


def test_every_rule_has_a_severity_and_the_trigger_rules_are_left_out():
    assert set(RULES.values()) <= {ERROR, WARN, INFO}
    assert not set(NOT_HERE) & set(RULES)


# ---------------------------------------------------------------------------------------------- topics
def test_topic_exists_partition_records_need_a_live_topic_and_partition(tmp_path):
    log = base()
    [bad_change] = log.add(log.change("t", 5, isr=[1, 2]))
    [bad_partition] = log.add(log.partition("nope", 0, [1, 2, 3]))
    [bad_remove] = log.add(("REMOVE_TOPIC_RECORD", 0, {"topicId": uuid("topic-nope")}))
    [bad_clear] = log.add(("CLEAR_ELR_RECORD", 0, {"topicName": "nope"}))
    assert hits(run(log, tmp_path), "INV-TOPIC-EXISTS") == [
        (bad_change, ERROR), (bad_partition, ERROR), (bad_remove, ERROR), (bad_clear, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]))
    legal.add(legal.topic("u"), legal.partition("u", 0, [1, 2, 3]))
    legal.add(("CLEAR_ELR_RECORD", 0, {"topicName": "u"}))
    legal.add(("REMOVE_TOPIC_RECORD", 0, {"topicId": uuid("topic-u")}))
    assert hits(run(legal, tmp_path), "INV-TOPIC-EXISTS") == []


def test_topic_unique_a_live_name_cannot_be_created_again(tmp_path):
    log = base()
    [o] = log.add(log.topic("t", uuid("second-t")))
    assert hits(run(log, tmp_path), "INV-TOPIC-UNIQUE") == [(o, ERROR)]

    legal = base()
    legal.add(("REMOVE_TOPIC_RECORD", 0, {"topicId": uuid("topic-t")}))
    legal.add(legal.topic("t", uuid("second-t")), legal.partition("t", 0, [1, 2], topic_id=uuid("second-t")))
    assert hits(run(legal, tmp_path), "INV-TOPIC-UNIQUE") == []


# ---------------------------------------------------------------------------------------------- structure
def test_replicas_distinct_duplicates_and_reassignment_lists(tmp_path):
    log = base()
    [_, dup] = log.add(log.topic("u"), log.partition("u", 0, [1, 1, 2]))
    [not_subset] = log.add(log.change("t", 0, removing=[4]))
    [overlap] = log.add(log.change("t", 0, replicas=[2, 3, 4, 1], removing=[1], adding=[1, 4]))
    assert hits(run(log, tmp_path), "INV-REPLICAS-DISTINCT") == [(dup, ERROR), (not_subset, ERROR), (overlap, ERROR)]

    legal = base()  # a reassignment start [1,2,3] -> [2,3,4]: R' = target ++ removing (§2.7-2)
    legal.add(legal.topic("u"), legal.partition("u", 0, [1, 2]))
    legal.add(legal.change("t", 0, replicas=[2, 3, 4, 1], removing=[1], adding=[4]))
    assert hits(run(legal, tmp_path), "INV-REPLICAS-DISTINCT") == []


def test_dirs_length_one_directory_per_replica(tmp_path):
    d = [uuid("dir-1"), uuid("dir-2"), uuid("dir-3")]
    log = Log(19)
    [_, o] = log.add(log.topic("t"), log.partition("t", 0, [1, 2, 3], dirs=d[:2]))
    [o2] = log.add(log.change("t", 0, dirs=d + [uuid("dir-4")]))
    assert hits(run(log, tmp_path), "INV-DIRS-LENGTH") == [(o, ERROR), (o2, ERROR)]

    legal = Log(19)
    legal.add(legal.topic("t"), legal.partition("t", 0, [1, 2, 3], dirs=d), legal.partition("t", 1, [1, 2], dirs=[]))
    legal.add(legal.change("t", 0, dirs=[MIGRATING] * 3))
    assert hits(run(legal, tmp_path), "INV-DIRS-LENGTH") == []


def test_isr_subset_replicas(tmp_path):
    log = base()
    [o] = log.add(log.change("t", 0, isr=[1, 2, 4]))
    [o2] = log.add(log.change("t", 0, isr=[1, 1, 2]))
    assert hits(run(log, tmp_path), "INV-ISR-SUBSET-REPLICAS") == [(o, ERROR), (o2, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]))
    assert hits(run(legal, tmp_path), "INV-ISR-SUBSET-REPLICAS") == []


def test_leader_in_isr(tmp_path):
    log = base()
    [o] = log.add(log.change("t", 0, isr=[2, 3]))  # drops the leader without electing another
    assert hits(run(log, tmp_path), "INV-LEADER-IN-ISR") == [(o, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[2, 3], leader=2))
    assert hits(run(legal, tmp_path), "INV-LEADER-IN-ISR") == []


def test_leader_in_replicas(tmp_path):
    log = base()
    [o] = log.add(log.change("t", 0, leader=4, isr=[4]))
    assert hits(run(log, tmp_path), "INV-LEADER-IN-REPLICAS") == [(o, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, leader=2))
    legal.add(legal.change("t", 0, leader=-1, isr=[3]))
    assert hits(run(legal, tmp_path), "INV-LEADER-IN-REPLICAS") == []


# ---------------------------------------------------------------------------------------------- ELR
def test_elr_disjoint_from_isr(tmp_path):
    log = base(elr=True, min_isr=3)
    [o] = log.add(log.change("t", 0, isr=[1, 2], elr=[2, 3]))
    assert hits(run(log, tmp_path), "INV-ELR-DISJOINT") == [(o, ERROR)]

    legal = base(elr=True, min_isr=3)
    legal.add(legal.change("t", 0, isr=[1, 2], elr=[3]))
    assert hits(run(legal, tmp_path), "INV-ELR-DISJOINT") == []


@pytest.mark.parametrize("mv,feature,override,expected", [
    (21, None, None, [ERROR, ERROR]),  # below 4.0-IV1 ELR cannot be in effect
    (25, 0, None, [ERROR, ERROR]),  # eligible.leader.replicas.version = 0 says it is off
    (25, None, False, [ERROR, ERROR]),  # the user says the controller property was off
    (25, None, None, [WARN]),  # only inferred: the first evidence is a warning, later records are fine
    (25, 1, None, []),
    (25, None, True, []),
])
def test_elr_disabled_empty(tmp_path, mv, feature, override, expected):
    log = base(mv, min_isr=3)
    if feature is not None:
        log.add(log.feature("eligible.leader.replicas.version", feature))
    offsets = log.add(log.change("t", 0, version=2, isr=[1, 2], elr=[3]))
    offsets += log.add(log.change("t", 0, version=2, isr=[1], elr=[2, 3]))
    found = hits(run(log, tmp_path, Cluster(elr_override=override)), "INV-ELR-DISABLED-EMPTY")
    assert found == list(zip(offsets, expected))


@pytest.mark.parametrize("mv,feature,expected", [(21, None, [ERROR]), (25, 0, [ERROR]), (25, None, [WARN]),
                                                 (25, 1, [])])
def test_isr_empty_needs_elr(tmp_path, mv, feature, expected):
    log = base(mv, parts=([1, 2, 3], [1]))
    if feature is not None:
        log.add(log.feature("eligible.leader.replicas.version", feature))
    [o, _, _] = log.add(log.change("t", 1, version=2, isr=[], leader=-1, elr=[1], lke=[1]),
                        log.change("t", 0, isr=[2, 3], leader=2), log.fence(1))
    assert hits(run(log, tmp_path), "INV-ISR-EMPTY-NEEDS-ELR") == [(o, sev) for sev in expected]

    legal = base(mv, parts=([1, 2, 3], [1]))  # ELR off: the last member stays in the ISR (B7)
    legal.add(legal.change("t", 1, leader=-1), legal.change("t", 0, isr=[2, 3], leader=2), legal.fence(1))
    assert hits(run(legal, tmp_path), "INV-ISR-EMPTY-NEEDS-ELR") == []


def test_elr_below_minisr_is_an_error_when_min_isr_did_not_change(tmp_path):
    log = base(elr=True, min_isr=2)
    [o] = log.add(log.change("t", 0, isr=[1, 2], elr=[3]))  # |ISR| = 2 >= m: ELR must be cleared (B2)
    assert hits(run(log, tmp_path), "INV-ELR-BELOW-MINISR") == [(o, ERROR)]

    legal = base(elr=True, min_isr=2)
    legal.add(legal.change("t", 0, isr=[1], elr=[2, 3]))  # the current ISR feeds the ELR
    assert hits(run(legal, tmp_path), "INV-ELR-BELOW-MINISR") == []


def test_elr_below_minisr_is_a_warning_after_min_isr_changed(tmp_path):
    log = base(elr=True, min_isr=3)
    log.add(log.change("t", 0, isr=[1], elr=[2, 3]))
    log.add(log.config("min.insync.replicas", "1"))  # no re-evaluation of the ELR at this commit
    [o] = log.add(log.change("t", 0, isr=[1]))
    assert hits(run(log, tmp_path), "INV-ELR-BELOW-MINISR") == [(o, WARN)]

    legal = base(elr=True, min_isr=3)
    legal.add(legal.change("t", 0, isr=[1], elr=[2, 3]))
    legal.add(legal.change("t", 0, isr=[1]))
    assert hits(run(legal, tmp_path), "INV-ELR-BELOW-MINISR") == []


def test_elr_below_minisr_is_a_warning_when_min_isr_is_not_in_the_log(tmp_path):
    log = base(elr=True)  # m = 1 by default, but a static min.insync.replicas=3 would make this legal
    [o] = log.add(log.change("t", 0, isr=[1], elr=[2, 3]))
    assert hits(run(log, tmp_path), "INV-ELR-BELOW-MINISR") == [(o, WARN)]


def test_elr_below_minisr_spares_an_elr_election_at_min_isr_1(tmp_path):
    # B4: the ELR winner becomes the sole ISR member, the other ELR members stay (|ISR| = 1 = m)
    log = base(elr=True)
    log.add(log.change("t", 0, isr=[], leader=-1, elr=[1, 2, 3], lke=[1]))
    log.add(log.change("t", 0, leader=2, isr=[2], elr=[1, 3], lke=[]))
    assert hits(run(log, tmp_path), "INV-ELR-BELOW-MINISR") == []


def test_elr_subset_replicas_warns_when_a_reassignment_drops_an_elr_member(tmp_path):
    log = base(elr=True, min_isr=3)
    log.add(log.change("t", 0, isr=[1], elr=[2, 3]))
    [o] = log.add(log.change("t", 0, replicas=[1, 2], leader=1))
    assert hits(run(log, tmp_path), "INV-ELR-SUBSET-REPLICAS") == [(o, WARN)]

    legal = base(elr=True, min_isr=3)
    legal.add(legal.change("t", 0, isr=[1], elr=[2, 3]))
    legal.add(legal.change("t", 0, replicas=[1, 3, 2]))
    assert hits(run(legal, tmp_path), "INV-ELR-SUBSET-REPLICAS") == []


def _fenced_into_elr(min_isr: int = 3) -> Log:
    """Broker 3 fenced while ISR < m: it joins the ELR of both partitions."""
    log = base(elr=True, min_isr=min_isr, parts=([1, 2, 3], [2, 1, 3]))
    log.add(log.change("t", 0, isr=[1, 2], elr=[3]), log.change("t", 1, isr=[2, 1], elr=[3]), log.fence(3))
    return log


def test_elr_unclean_removed_after_an_unclean_shutdown_batch(tmp_path):
    log = _fenced_into_elr()
    [_, reg] = log.add(log.change("t", 1, elr=[]), log.register(3))  # forgets partition 0
    assert hits(run(log, tmp_path), "INV-ELR-UNCLEAN-REMOVED") == [(reg, ERROR)]

    legal = _fenced_into_elr()
    legal.add(legal.change("t", 0, elr=[]), legal.change("t", 1, elr=[]), legal.register(3))
    assert hits(run(legal, tmp_path), "INV-ELR-UNCLEAN-REMOVED") == []


def test_elr_unclean_removed_spares_the_last_known_leader_quirk(tmp_path):
    # §2.3-3: the unclean-shutdown handling of broker 1 itself elects 1 as last known leader
    log = base(elr=True, parts=([1, 2],))
    log.add(log.change("t", 0, isr=[1], elr=[], lke=[]))
    log.add(log.change("t", 0, isr=[], leader=-1, elr=[1], lke=[1]), log.fence(1))
    log.add(log.change("t", 0, elr=[]), log.change("t", 0, leader=1, isr=[1], lrs=1, lke=[]), log.register(1))
    breaches = run(log, tmp_path)
    assert hits(breaches, "INV-ELR-UNCLEAN-REMOVED") == []
    assert hits(breaches, "INV-ISR-EXPAND-ACTIVE") == []  # the elected leader is exempt


def test_lke_singleton(tmp_path):
    log = base(elr=True, parts=([1, 2],))
    [o] = log.add(log.change("t", 0, isr=[], leader=-1, elr=[1, 2], lke=[1, 2]))
    assert hits(run(log, tmp_path), "INV-LKE-SINGLETON") == [(o, ERROR)]

    legal = base(elr=True, parts=([1, 2],))
    legal.add(legal.change("t", 0, isr=[], leader=-1, elr=[1, 2], lke=[1]))
    assert hits(run(legal, tmp_path), "INV-LKE-SINGLETON") == []


def test_lke_leaderless(tmp_path):
    log = base(elr=True)
    [o] = log.add(log.change("t", 0, lke=[1]))
    assert hits(run(log, tmp_path), "INV-LKE-LEADERLESS") == [(o, ERROR)]

    legal = base(elr=True)
    legal.add(legal.change("t", 0, isr=[], leader=-1, elr=[1, 2, 3], lke=[1]))
    legal.add(legal.change("t", 0, leader=2, isr=[2], elr=[1, 3], lke=[]))
    assert hits(run(legal, tmp_path), "INV-LKE-LEADERLESS") == []


def test_lke_negative_warns_about_the_minus_one_quirk(tmp_path):
    log = base(elr=True, min_isr=3)
    log.add(log.change("t", 0, isr=[1], elr=[2, 3]))
    log.add(log.change("t", 0, leader=-1))
    [o] = log.add(log.change("t", 0, isr=[], elr=[1, 2, 3], lke=[-1]))  # B9 with P.L = -1
    assert hits(run(log, tmp_path), "INV-LKE-NEGATIVE") == [(o, WARN)]

    legal = base(elr=True, min_isr=3)
    legal.add(legal.change("t", 0, isr=[1], elr=[2, 3]))
    legal.add(legal.change("t", 0, isr=[], leader=-1, elr=[1, 2, 3], lke=[1]))
    assert hits(run(legal, tmp_path), "INV-LKE-NEGATIVE") == []


# ---------------------------------------------------------------------------------------------- epochs
class _ForgetfulCluster(Cluster):
    """An image whose applier forgets the epoch arithmetic of §1.3 (what the step rules guard against)."""

    def apply(self, rtype, data, offset=-1):
        super().apply(rtype, data, offset)
        if rtype == "PARTITION_CHANGE_RECORD":
            p = self.partitions[(data["topicId"], data["partitionId"])]
            if data.get("leader", -2) != -2:
                p.leader_epoch -= 1
            if data.get("isr") == [1]:
                p.partition_epoch -= 1


def test_leader_epoch_step(tmp_path):
    log = base()
    log.add(log.change("t", 0, isr=[1, 2]))
    [o] = log.add(log.change("t", 0, leader=2))
    assert hits(run(log, tmp_path, _ForgetfulCluster()), "INV-LEADER-EPOCH-STEP") == [(o, ERROR)]
    assert hits(run(log, tmp_path), "INV-LEADER-EPOCH-STEP") == []


def test_partition_epoch_step(tmp_path):
    log = base()
    log.add(log.change("t", 0, isr=[1, 2]))
    [o] = log.add(log.change("t", 0, isr=[1]))
    assert hits(run(log, tmp_path, _ForgetfulCluster()), "INV-PARTITION-EPOCH-STEP") == [(o, ERROR)]
    assert hits(run(log, tmp_path), "INV-PARTITION-EPOCH-STEP") == []


def test_epoch_monotonic_new_partitions_start_at_zero(tmp_path):
    log = Log()
    [_, o] = log.add(log.topic("t"), log.partition("t", 0, [1, 2, 3], le=3, pe=4))
    assert hits(run(log, tmp_path), "INV-EPOCH-MONOTONIC") == [(o, ERROR)]

    legal = Log()
    legal.add(legal.topic("t"), legal.partition("t", 0, [1, 2, 3]))
    assert hits(run(legal, tmp_path), "INV-EPOCH-MONOTONIC") == []


def test_epoch_monotonic_partition_record_of_an_existing_partition(tmp_path):
    def log_with(le, pe):
        log = base()
        log.add(log.change("t", 0, isr=[1, 2], leader=2))  # LE 1, PE 1
        log.add(log.change("t", 0, isr=[2]))  # LE 1, PE 2
        return log, log.add(log.partition("t", 0, [1, 2, 3], [2], 2, le=le, pe=pe))[0]

    log, o = log_with(0, 0)
    assert hits(run(log, tmp_path), "INV-EPOCH-MONOTONIC") == [(o, ERROR)]
    legal, _ = log_with(1, 2)
    assert hits(run(legal, tmp_path), "INV-EPOCH-MONOTONIC") == []


@pytest.mark.parametrize("zk_state,caught", [(None, True), (0, True), (3, False), (1, False), (2, True)])
def test_epoch_monotonic_spares_partitions_imported_from_zookeeper(tmp_path, zk_state, caught):
    log = Log(19)
    if zk_state is not None:
        log.add(("ZK_MIGRATION_STATE_RECORD", 0, {"zkMigrationState": zk_state}))
    [_, o] = log.add(log.topic("t"), log.partition("t", 0, [1, 2, 3], le=7, pe=12))
    assert hits(run(log, tmp_path), "INV-EPOCH-MONOTONIC") == ([(o, ERROR)] if caught else [])


def test_epoch_monotonic_accepts_a_replay_starting_from_a_snapshot(tmp_path):
    """Partitions first seen in a snapshot carry their epochs; they are not controller creations."""
    snap = Log()
    snap.add(snap.topic("t"), snap.partition("t", 0, [1, 2, 3], [1, 2], 2, le=5, pe=9))
    change = ("PARTITION_CHANGE_RECORD", 2, {"partitionId": 0, "topicId": uuid("topic-t"), "isr": [1, 2, 3]})
    write_log(tmp_path / "snap", [[change]], first_offset=100, snapshot=[recs for _, recs in snap.batches],
              snapshot_epoch=3)
    assert check_log(tmp_path / "snap") == []
    assert_compiled_agrees(tmp_path / "snap", [])

    # the same snapshot record arriving for a partition whose epochs are already higher lowers them
    c, checker = Cluster(), InvariantChecker()
    check_log(tmp_path / "snap", checker, c)
    rec = Rec(101, 0, 101, "PARTITION_RECORD", 2,
              {"partitionId": 0, "topicId": uuid("topic-t"), "replicas": [1, 2, 3], "isr": [1, 2], "leader": 2,
               "leaderEpoch": 5, "partitionEpoch": 9},
              "__cluster_metadata-0/00000000000000000200-0000000003.checkpoint")
    assert [(b.rule, b.offset) for b in checker.before_record(c, rec)] == [("INV-EPOCH-MONOTONIC", 101)]


# ---------------------------------------------------------------------------------------------- bumps
def test_bump_on_replica_loss(tmp_path):
    log = base()
    [o] = log.add(log.change("t", 0, replicas=[1, 2], isr=[1, 2]))
    assert hits(run(log, tmp_path), "INV-BUMP-ON-REPLICA-LOSS") == [(o, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, replicas=[1, 2], isr=[1, 2], leader=1))  # B5
    assert hits(run(legal, tmp_path), "INV-BUMP-ON-REPLICA-LOSS") == []


@pytest.mark.parametrize("mv", [None, 3, 8, 11])
def test_bump_on_shrink_before_3_6(tmp_path, mv):
    log = base(mv)
    [o] = log.add(log.change("t", 0, isr=[1, 2]))
    assert hits(run(log, tmp_path), "INV-BUMP-ON-SHRINK-OLDMV") == [(o, ERROR)]

    legal = base(mv)
    legal.add(legal.change("t", 0, isr=[1, 2], leader=1))  # B8, KAFKA-15021
    assert hits(run(legal, tmp_path), "INV-BUMP-ON-SHRINK-OLDMV") == []


def test_isr_shrink_does_not_bump_leader_epoch_from_3_6(tmp_path):
    log = base(12)
    log.add(log.change("t", 0, isr=[1, 2]))
    assert hits(run(log, tmp_path), "INV-BUMP-ON-SHRINK-OLDMV") == []


def test_no_spurious_bump(tmp_path):
    log = base(21)
    [o] = log.add(log.change("t", 0, leader=1))
    assert hits(run(log, tmp_path), "INV-NO-SPURIOUS-BUMP") == [(o, INFO)]

    legal = base(21, parts=([1, 2, 3],))
    legal.add(legal.change("t", 0, replicas=[1, 2], isr=[1, 2], leader=1))  # B5
    assert hits(run(legal, tmp_path), "INV-NO-SPURIOUS-BUMP") == []
    old = base(8, parts=([1, 2, 3], [3]))
    old.add(old.change("t", 0, isr=[1, 2], leader=1))  # B8
    old.add(old.change("t", 1, leader=-1), old.fence(3))
    old.add(old.change("t", 1, leader=-1))  # B8: the sole member of a leaderless ISR fenced again
    assert hits(run(old, tmp_path), "INV-NO-SPURIOUS-BUMP") == []


def test_record_noop(tmp_path):
    log = base()
    [o] = log.add(log.change("t", 0))
    assert hits(run(log, tmp_path), "INV-RECORD-NOOP") == [(o, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]))
    assert hits(run(legal, tmp_path), "INV-RECORD-NOOP") == []


# ---------------------------------------------------------------------------------------------- leader recovery
def _leaderless(mv: int | None = 25) -> Log:
    """Partition t-0 on [1, 2] with ISR [1]; broker 1 fenced: leaderless, ISR [1] (ELR off)."""
    log = base(mv, parts=([1, 2],))
    log.add(log.change("t", 0, isr=[1], **({} if mv is not None and mv >= 12 else {"leader": 1})))
    log.add(log.change("t", 0, leader=-1), log.fence(1))
    return log


def test_lrs_entry_only_through_an_unclean_election(tmp_path):
    log = _leaderless()
    [o] = log.add(log.change("t", 0, lrs=1))
    assert hits(run(log, tmp_path), "INV-LRS-ENTRY") == [(o, ERROR)]

    legal = _leaderless()
    legal.add(legal.change("t", 0, leader=2, isr=[2], lrs=1))
    assert hits(run(legal, tmp_path), "INV-LRS-ENTRY") == []


def test_lrs_entry_not_below_3_2(tmp_path):
    log = _leaderless(2)
    [o] = log.add(log.change("t", 0, leader=2, isr=[2], lrs=1))
    assert hits(run(log, tmp_path), "INV-LRS-ENTRY") == [(o, ERROR)]
    legal = _leaderless(3)
    legal.add(legal.change("t", 0, leader=2, isr=[2], lrs=1))
    assert hits(run(legal, tmp_path), "INV-LRS-ENTRY") == []


def _recovering() -> Log:
    log = _leaderless()
    log.add(log.change("t", 0, leader=2, isr=[2], lrs=1))
    log.add(log.register(1), )
    log.add(log.unfence(1))
    return log


def test_lrs_single_isr(tmp_path):
    log = _recovering()
    [o] = log.add(log.change("t", 0, isr=[2, 1]))
    assert hits(run(log, tmp_path), "INV-LRS-SINGLE-ISR") == [(o, ERROR)]

    legal = _recovering()
    legal.add(legal.change("t", 0, isr=[2, 1], lrs=0))  # the leader's AlterPartition ends recovery
    assert hits(run(legal, tmp_path), "INV-LRS-SINGLE-ISR") == []


def test_lrs_exit_keeps_the_sitting_leader(tmp_path):
    log = _recovering()
    [o] = log.add(log.change("t", 0, leader=1, isr=[1], lrs=0))
    assert hits(run(log, tmp_path), "INV-LRS-EXIT") == [(o, ERROR)]
    leaderless = _recovering()
    leaderless.add(leaderless.change("t", 0, leader=-1), leaderless.fence(2))
    [o2] = leaderless.add(leaderless.change("t", 0, lrs=0))
    assert hits(run(leaderless, tmp_path), "INV-LRS-EXIT") == [(o2, ERROR)]

    legal = _recovering()
    legal.add(legal.change("t", 0, lrs=0))
    assert hits(run(legal, tmp_path), "INV-LRS-EXIT") == []


# ---------------------------------------------------------------------------------------------- brokers and ISR
@pytest.mark.parametrize("mv,severity", [(25, ERROR), (8, ERROR), (None, INFO)])
def test_isr_expand_active(tmp_path, mv, severity):
    def log_with(unfence: bool) -> tuple[Log, int]:
        log = base(mv)
        log.add(log.change("t", 0, isr=[1, 2], **({} if mv is not None and mv >= 12 else {"leader": 1})),
                log.fence(3))
        if unfence:
            log.add(log.unfence(3))
        return log, log.add(log.change("t", 0, isr=[1, 2, 3]))[0]

    log, o = log_with(False)
    assert hits(run(log, tmp_path), "INV-ISR-EXPAND-ACTIVE") == [(o, severity)]
    legal, _ = log_with(True)
    assert hits(run(legal, tmp_path), "INV-ISR-EXPAND-ACTIVE") == []


@pytest.mark.parametrize("revert_isr,caught", [([1], False), ([2], True)])
def test_isr_expand_active_spares_the_head_replica_of_an_unclean_revert(tmp_path, revert_isr, caught):
    log = base(parts=([1, 2],))
    log.add(log.change("t", 0, replicas=[3, 1, 2], adding=[3], removing=[1, 2]))
    log.add(log.change("t", 0, isr=[1, 2, 3]))
    log.add(log.change("t", 0, isr=[3], leader=3), log.fence(1), log.fence(2))
    log.add(log.change("t", 0, leader=-1), log.fence(3))  # ISR [3] = only adding replicas
    # cancel: R = [1, 2], ISR = [] -> [R[0]] = [1] (§2.7-4) although broker 1 is fenced
    [o] = log.add(log.change("t", 0, replicas=[1, 2], isr=revert_isr, adding=[], removing=[], leader=-1))
    assert hits(run(log, tmp_path), "INV-ISR-EXPAND-ACTIVE") == ([(o, ERROR)] if caught else [])


def test_fence_removes_isr(tmp_path):
    log = base()
    [o] = log.add(log.fence(3))
    assert hits(run(log, tmp_path), "INV-FENCE-REMOVES-ISR") == [(o, ERROR)]
    cs = base()
    [o2, _] = cs.add(cs.shutdown(3), cs.change("t", 0, isr=[1, 3]))
    assert hits(run(cs, tmp_path), "INV-FENCE-REMOVES-ISR") == [(o2, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]), legal.fence(3))
    legal.add(legal.shutdown(2), legal.change("t", 0, isr=[1]))
    assert hits(run(legal, tmp_path), "INV-FENCE-REMOVES-ISR") == []


def test_fence_removes_isr_waits_for_a_controlled_shutdown_split_over_batches(tmp_path):
    # the controller splits a large non-atomic result into several batches; the CS record comes first
    log = base(parts=([1, 2, 3], [2, 3, 1], [3, 1, 2]))
    log.add(log.shutdown(3), log.change("t", 0, isr=[1, 2]))
    log.add(log.change("t", 1, isr=[2, 1]))
    log.add(log.change("t", 2, isr=[1, 2], leader=1))
    log.add(log.fence(3))
    assert hits(run(log, tmp_path), "INV-FENCE-REMOVES-ISR") == []

    stuck = base(parts=([1, 2, 3], [2, 3, 1], [3, 1, 2]))
    [o, _] = stuck.add(stuck.shutdown(3), stuck.change("t", 0, isr=[1, 2]))
    stuck.add(stuck.change("t", 1, isr=[2, 1]))
    stuck.add(stuck.config("retention.ms", "1000", 2, "t"))  # no progress: t-2 was forgotten
    stuck.add(stuck.change("t", 0, isr=[1, 2, 3]))  # broker 3 back while in controlled shutdown
    assert hits(run(stuck, tmp_path), "INV-FENCE-REMOVES-ISR") == [(o, ERROR)]


def test_fence_removes_isr_with_overlapping_controlled_shutdowns_then_another(tmp_path):
    # two brokers in controlled shutdown at once, each waiting on its own partitions over several batches; both
    # stall, then a third broker's shutdown starts anew (the compiled pass keeps each broker's waiting partitions
    # in its own range of one pool, emptied once nobody waits)
    log = base(parts=([1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2]))
    [cs3, _] = log.add(log.shutdown(3), log.change("t", 0, isr=[1, 2]))
    [cs2, _] = log.add(log.shutdown(2), log.change("t", 1, isr=[1], leader=1))
    log.add(log.change("t", 2, isr=[1], leader=1))
    log.add(log.config("retention.ms", "1000", 2, "t"))  # no progress: both stall
    [cs1] = log.add(log.shutdown(1))
    log.add(log.config("retention.ms", "2000", 2, "t"))
    found = hits(run(log, tmp_path), "INV-FENCE-REMOVES-ISR")
    assert sorted(found) == sorted([(cs3, ERROR)] + [(cs2, ERROR)] * 2 + [(cs1, ERROR)] * 4)


@pytest.mark.parametrize("elr,expected", [(False, []), (True, [ERROR])])
def test_fence_removes_isr_keeps_the_last_member_only_with_elr_off(tmp_path, elr, expected):
    log = base(elr=elr, parts=([3],))
    [_, o] = log.add(log.change("t", 0, leader=-1), log.fence(3))
    assert hits(run(log, tmp_path), "INV-FENCE-REMOVES-ISR") == [(o, sev) for sev in expected]


def test_offline_no_candidate(tmp_path):
    def log_with(unclean_restart: bool) -> tuple[Log, int]:
        log = base(elr=True, parts=([1],))
        log.add(log.change("t", 0, isr=[], leader=-1, elr=[1], lke=[1]), log.fence(1))  # ELR keeps a candidate
        if not unclean_restart:
            return log, -1
        return log, log.add(log.change("t", 0, elr=[]), log.register(1))[0]

    log, o = log_with(True)
    assert hits(run(log, tmp_path), "INV-OFFLINE-NO-CANDIDATE") == [(o, WARN)]
    legal, _ = log_with(False)
    assert hits(run(legal, tmp_path), "INV-OFFLINE-NO-CANDIDATE") == []


def test_under_minisr_reports_each_window_once(tmp_path):
    log = base(min_isr=2)
    [o1] = log.add(log.change("t", 0, isr=[1]))
    log.add(log.change("t", 0, isr=[1, 2]))
    [o2] = log.add(log.change("t", 0, isr=[1]))
    log.add(log.change("t", 0, isr=[1, 3]), log.change("t", 0, isr=[1]))  # same batch: still inside
    assert hits(run(log, tmp_path), "INV-UNDER-MINISR") == [(o1, INFO), (o2, INFO)]

    legal = base()  # min ISR 1
    legal.add(legal.change("t", 0, isr=[1]))
    assert hits(run(legal, tmp_path), "INV-UNDER-MINISR") == []


def test_under_minisr_opens_when_min_isr_is_raised(tmp_path):
    log = base()
    log.add(log.change("t", 0, isr=[1, 2]))
    [o] = log.add(log.config("min.insync.replicas", "3", 2, "t"))
    assert hits(run(log, tmp_path), "INV-UNDER-MINISR") == [(o, INFO)]


def test_broker_epoch_match(tmp_path):
    log = base()
    [o1] = log.add(log.fence(3, epoch=7))
    [o2] = log.add(log.fence(9, epoch=1))
    [o3] = log.add(("UNREGISTER_BROKER_RECORD", 0, {"brokerId": 2, "brokerEpoch": 5}))
    old = base(None)
    [o4] = old.add(old.unfence(1, epoch=1))
    assert hits(run(log, tmp_path), "INV-BROKER-EPOCH-MATCH") == [(o1, ERROR), (o2, ERROR), (o3, ERROR)]
    assert hits(run(old, tmp_path), "INV-BROKER-EPOCH-MATCH") == [(o4, ERROR)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]), legal.fence(3))
    legal.add(("UNREGISTER_BROKER_RECORD", 0, {"brokerId": 3, "brokerEpoch": legal.epoch[3]}))
    assert hits(run(legal, tmp_path), "INV-BROKER-EPOCH-MATCH") == []


def test_cs_sticky(tmp_path):
    def in_shutdown() -> Log:
        log = base()
        log.add(log.shutdown(3), log.change("t", 0, isr=[1, 2]))
        return log

    log = in_shutdown()
    [o] = log.add(log.register(3, new=False, fenced=False, cs=False))  # an amend that drops the CS state
    assert hits(run(log, tmp_path), "INV-CS-STICKY") == [(o, ERROR)]
    leave = in_shutdown()
    [o2] = leave.add(leave.shutdown(3, value=-1))
    assert hits(run(leave, tmp_path), "INV-CS-STICKY") == [(o2, ERROR)]

    legal = in_shutdown()
    legal.add(legal.register(3, new=False, fenced=False, cs=True))  # amend keeps it
    legal.add(legal.unfence(3))  # unfencing does not clear it either
    legal.add(legal.register(3))  # a new incarnation does
    assert hits(run(legal, tmp_path), "INV-CS-STICKY") == []


def test_register_unclean_batch(tmp_path):
    log = base()
    [o] = log.add(log.register(3))  # broker 3 restarted while still in the ISR of t-0
    assert hits(run(log, tmp_path), "INV-REGISTER-UNCLEAN-BATCH") == [(o, WARN)]

    legal = base()
    legal.add(legal.change("t", 0, isr=[1, 2]), legal.register(3))
    assert hits(run(legal, tmp_path), "INV-REGISTER-UNCLEAN-BATCH") == []
    before_4_0 = base(21)
    before_4_0.add(before_4_0.register(3))
    assert hits(run(before_4_0, tmp_path), "INV-REGISTER-UNCLEAN-BATCH") == []


@pytest.mark.parametrize("mv,controlled,breach", [(26, True, False), (25, True, True), (26, False, True)])
def test_register_unclean_batch_clean_restart_keeps_elr(tmp_path, mv, controlled, breach):
    """A 4.1+ controller (only it writes MV >= 4.1-IV0) keeps a broker's ELR membership when it restarts after a
    clean shutdown, which the log shows as a controlled shutdown (real Kafka 4.1 / 4.2 logs); the 4.0 controller,
    and any controller after a crash, removes it in the registration's batch first (§1.6)."""
    log = base(mv, elr=True, min_isr=3)
    if controlled:
        log.add(log.shutdown(3))
    log.add(log.change("t", 0, isr=[1, 2], elr=[3]))  # 3 leaves the ISR below min ISR: it is eligible (ELR)
    log.add(log.fence(3))
    [o] = log.add(log.register(3))  # the restart: a new incarnation, nothing removed before it
    assert hits(run(log, tmp_path), "INV-REGISTER-UNCLEAN-BATCH") == ([(o, WARN)] if breach else [])
    # still in an ISR at the restart: every controller removes it first, clean shutdown or not
    in_isr = base(mv, elr=True, min_isr=3)
    if controlled:
        in_isr.add(in_isr.shutdown(3))
    [o2] = in_isr.add(in_isr.register(3))
    assert hits(run(in_isr, tmp_path), "INV-REGISTER-UNCLEAN-BATCH") == [(o2, WARN)]


# ---------------------------------------------------------------------------------------------- helper
def _p(isr, leader, elr=(), lke=()):
    return Partition("tid", 0, [1, 2, 3], list(isr), leader, 4, 7, elr=list(elr), last_known_elr=list(lke))


@pytest.mark.parametrize("before,change,unclean", [
    (_p([1], -1), {"leader": 1, "isr": [1]}, False),  # clean: the leader was in the ISR
    (_p([], -1, elr=[2, 3]), {"leader": 2, "isr": [2], "eligibleLeaderReplicas": [3]}, False),  # from ELR
    (_p([1], -1), {"leader": 2, "isr": [2], "leaderRecoveryState": 1}, True),  # §2.3 step 4
    (_p([1], -1), {"leader": 2, "isr": [2]}, True),  # step 4 on an already RECOVERING partition
    (_p([], -1, lke=[1]), {"leader": 1, "isr": [1], "leaderRecoveryState": 1, "lastKnownElr": []}, True),  # step 3
    (_p([1], -1, elr=[2]), {"leader": 2, "isr": [2], "leaderRecoveryState": 1}, True),  # step 4 hit an ELR member
    (_p([1, 2], 1), {"leader": 2, "isr": [2]}, False),  # shrink + clean election
    (_p([1], 1), {"leader": -1}, False),
    (_p([1], -1), {"isr": [2]}, False),
])
def test_is_unclean_election(before, change, unclean):
    assert is_unclean_election(before, change) is unclean


# ---------------------------------------------------------------------------------------------- real logs
# Every WARN / INFO the real logs hold, with the reason.  No ERROR may appear: real Kafka wrote them.
REAL_EXPECTED: dict[str, Counter] = {
    # Kafka 4.0, one broker, ELR off: restarts leave the sole replica in the ISR of leaderless partitions
    # (last replica standing), min ISR 1: nothing to report
    "arthurarutunyan04-2segments-mv4.0/kafka-data": Counter(),
    # Kafka 4.2, ELR on, one broker, min ISR 1.  At 3594 broker 1 is fenced: test-topic-0 gets ISR [],
    # ELR [1] (|ISR| 0 < 1: INFO window).  At 3599 the unclean-shutdown handling of broker 1 empties the
    # ELR before its RegisterBrokerRecord: no candidate left (WARN) until the last-known-leader election
    # at 3602: an unclean election (§2.3-3) on a topic whose unclean config is not set (resolves false).
    # Broker 1 is unfenced earlier in that batch, so the new leader is active.
    "induswargods-elr-mv4.2/kafka-data": Counter({("INV-UNDER-MINISR", INFO, 3594): 1,
                                                  ("INV-OFFLINE-NO-CANDIDATE", WARN, 3599): 1,
                                                  ("INV-UNCLEAN-ELECTION", WARN, 3602): 1,
                                                  ("INV-UNCLEAN-CONFIG", WARN, 3602): 1}),
    # Kafka 3.9, three brokers shut down one after another in controlled shutdown, min ISR 1
    "mavila01-3broker-mv3.9/kafka1": Counter(),
    # Kafka 3.7, three brokers, many leader changes and ISR shrinks, min ISR 1
    "ogs59-3broker-mv3.7/kafka-1": Counter(),
    # Kafka < 3.3: every broker added to an ISR was unfenced at the time, so no INFO either
    "vasifvortex-pre3.3-fence/kafka1": Counter(),
}


@pytest.mark.parametrize("log_dir", sorted(REAL_EXPECTED))
def test_real_logs_hold_no_error_and_only_the_listed_warnings(log_dir):
    path = REALDATA / log_dir
    if not path.is_dir():
        raise FileNotFoundError(f"real metadata is missing: {path} (need ../shared beside the checkout)")
    breaches = check_log(path)
    assert_compiled_agrees(path, breaches)
    errors = [b for b in breaches if b.severity == ERROR]
    assert errors == []
    assert Counter((b.rule, b.severity, b.offset) for b in breaches) == REAL_EXPECTED[log_dir]


def _real_snapshots() -> list[Path]:
    return sorted(p for p in REALDATA.glob("*/*/__cluster_metadata-0/*.checkpoint"))


@pytest.mark.parametrize("snapshot", _real_snapshots(), ids=lambda p: str(p.relative_to(REALDATA)))
def test_real_snapshots_replayed_alone_hold_no_breach(snapshot):
    """A snapshot is the state the controller had: its PartitionRecords carry epochs (not creations) and
    must satisfy every structural rule on their own."""
    from itertools import groupby

    from controller_core.logdir import classify
    from controller_core.replay import iter_file_records

    c, checker, breaches = Cluster(), InvariantChecker(), []
    for _, recs in groupby(iter_file_records(classify(snapshot, snapshot.parents[1])), key=lambda r: r.batch):
        recs = list(recs)
        for rec in recs:
            breaches += checker.before_record(c, rec)
            c.apply(rec.type, rec.data, rec.offset)
        breaches += checker.after_batch(c, recs)
    assert breaches + checker.finish(c) == []
    assert c.partitions  # the snapshot did hold partitions


# ---------------------------------------------------------------------------------------------- elections
def test_unclean_election_and_unclean_config(tmp_path):
    """An out-of-sync replica elected while the topic's unclean config is false (an admin UNCLEAN
    election) breaks both rules; the same election with the config on is only INV-UNCLEAN-ELECTION."""
    log = _leaderless()  # t-0 on [1, 2], ISR [1], broker 1 fenced: leaderless
    [o] = log.add(log.change("t", 0, leader=2, isr=[2], lrs=1))
    found = run(log, tmp_path)
    assert hits(found, "INV-UNCLEAN-ELECTION") == [(o, WARN)]
    assert hits(found, "INV-UNCLEAN-CONFIG") == [(o, WARN)]
    [b] = [b for b in found if b.rule == "INV-UNCLEAN-ELECTION"]
    assert (b.topic, b.partition, b.recorded["leader"], b.recorded["previousIsr"]) == ("t", 0, 2, [1])

    allowed = _leaderless()
    allowed.add(allowed.config("unclean.leader.election.enable", "true", resource_type=2, resource="t"))
    [o2] = allowed.add(allowed.change("t", 0, leader=2, isr=[2], lrs=1))
    found = run(allowed, tmp_path)
    assert hits(found, "INV-UNCLEAN-ELECTION") == [(o2, WARN)]
    assert hits(found, "INV-UNCLEAN-CONFIG") == []

    clean = _leaderless()  # broker 1 comes back and is elected from the ISR: clean
    clean.add(clean.unfence(1))
    clean.add(clean.change("t", 0, leader=1))
    found = run(clean, tmp_path)
    assert hits(found, "INV-UNCLEAN-ELECTION") == [] and hits(found, "INV-UNCLEAN-CONFIG") == []


def test_elr_election_is_clean_and_last_known_leader_is_not(tmp_path):
    log = base(elr=True, min_isr=2, parts=([1, 2, 3],))
    log.add(log.change("t", 0, isr=[1, 2], elr=[3]), log.fence(3))
    log.add(log.change("t", 0, isr=[1], elr=[3, 2]), log.fence(2))
    log.add(log.change("t", 0, leader=-1, isr=[], elr=[3, 2, 1], lke=[1]), log.fence(1))
    log.add(log.unfence(2))
    log.add(log.change("t", 0, leader=2, isr=[2], elr=[3, 1], lke=[]))  # from ELR: clean
    assert hits(run(log, tmp_path), "INV-UNCLEAN-ELECTION") == []


def test_leader_active(tmp_path):
    log = _leaderless()
    [o] = log.add(log.change("t", 0, leader=1))  # broker 1 is still fenced
    found = run(log, tmp_path)
    assert hits(found, "INV-LEADER-ACTIVE") == [(o, WARN)]
    assert [b.recorded for b in found if b.rule == "INV-LEADER-ACTIVE"] == [{"leader": 1, "broker": "fenced"}]

    legal = _leaderless()
    legal.add(legal.unfence(1), legal.change("t", 0, leader=1))  # unfenced earlier in the same batch
    assert hits(run(legal, tmp_path), "INV-LEADER-ACTIVE") == []
