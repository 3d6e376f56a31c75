"""`whatif` and rule B10: the directory the controller gives a replica it places (a new partition's, one a
reassignment adds), and §2.7-3: an AlterPartition that completes a reassignment and moves the leader away
is answered NEW_LEADER_ELECTED although its record is written.

Default directory of broker b (controller-rules §2.1 B10, ``ClusterControlManager.defaultDir``): MIGRATING
below MV 3.7-IV2; UNASSIGNED if b is not registered; MIGRATING if its registration lists no log directory;
its only directory if it lists one; UNASSIGNED if it lists several.  A replica already in the partition
keeps its current directory."""
from __future__ import annotations

import pytest

from controller_core.image import MIGRATING, UNASSIGNED
from controller_core.rules.whatif import load_cluster, what_if

T = "AAAAAAAAAAAAAAAAAAAAAQ"  # the topic id
M, U = MIGRATING, UNASSIGNED
D1, D2, D3 = "d1d1d1d1d1d1d1d1d1d1dQ", "d2d2d2d2d2d2d2d2d2d2dQ", "d3d3d3d3d3d3d3d3d3d3dQ"  # broker 1-3's own
DA, DB = "dAdAdAdAdAdAdAdAdAdAdQ", "dBdBdBdBdBdBdBdBdBdBdQ"  # broker 4's, when it has some
LOG_DIRS = {0: [], 1: [DA], 2: [DA, DB]}  # broker 4 registered with 0 / 1 / 2 log directories
DEFAULT = {0: M, 1: DA, 2: U}


def image(mv="3.9-IV0", dirs4=1, partitions=None, brokers=None):
    """Brokers 1-3 with one log directory each, broker 4 with ``dirs4`` of them; partition orders-0 on
    1, 2, 3 in their directories (explicit, as a 3.7+ cluster writes them)."""
    return {"metadataVersion": mv, "controllerId": 1,
            "brokers": brokers or {"1": {"epoch": 10, "logDirs": [D1]}, "2": {"epoch": 11, "logDirs": [D2]},
                                   "3": {"epoch": 12, "logDirs": [D3]}, "4": {"epoch": 13, "logDirs": LOG_DIRS[dirs4]}},
            "topics": {"orders": T},
            "partitions": partitions if partitions is not None else [
                {"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1,
                 "leaderEpoch": 4, "partitionEpoch": 7, "directories": [D1, D2, D3]}]}


def run(event, **kw):
    return what_if({**image(**kw), "event": event})


def recs(out):
    return [(r["type"], r["version"], r["data"]) for r in out["records"]]


def change(p, version=1, **fields):
    return ("PARTITION_CHANGE_RECORD", version, {"partitionId": p, "topicId": T, **fields})


def part(out, p=0):
    return next(x for x in out["partitions"] if x["topic"] == "orders" and x["partition"] == p)


# ------------------------------------------------------------------------ the default directory
@pytest.mark.parametrize("mv, log_dirs, registered, want", [
    ("3.9-IV0", [], True, M),  # registered without log directories: MIGRATING
    ("3.9-IV0", [DA], True, DA),  # exactly one: that one
    ("3.9-IV0", [DA, DB], True, U),  # several: UNASSIGNED (the broker picks one and reports it)
    ("3.9-IV0", None, False, U),  # not registered: UNASSIGNED
    ("3.7-IV2", [DA], True, DA),  # 3.7-IV2 is the first level with directory assignment
    ("3.7-IV1", [DA], True, M),  # below it: MIGRATING whatever the broker has
    ("3.7-IV1", None, False, M),
])
def test_default_dir(mv, log_dirs, registered, want):
    brokers = {"4": {"epoch": 13, "logDirs": log_dirs}} if registered else {"1": {"epoch": 10}}
    c = load_cluster(image(mv=mv, partitions=[], brokers=brokers))
    assert c.default_dir(4) == want


# ------------------------------------------------------------------------------ new partitions
@pytest.mark.parametrize("dirs4", [0, 1, 2])
def test_create_partition_places_each_replica_in_its_brokers_default_directory(dirs4):
    out = run({"kind": "create_partition", "topic": "orders", "partition": 1, "replicas": [4, 1, 2]}, dirs4=dirs4)
    assert recs(out) == [("PARTITION_RECORD", 1, {
        "partitionId": 1, "topicId": T, "replicas": [4, 1, 2], "isr": [4, 1, 2], "removingReplicas": [],
        "addingReplicas": [], "leader": 4, "leaderEpoch": 0, "partitionEpoch": 0,
        "directories": [DEFAULT[dirs4], D1, D2]})]
    assert out["errors"] == {}
    # the image keeps them (an all-MIGRATING list would be shown as none, §1.2-4)
    assert part(out, 1)["directories"] == [DEFAULT[dirs4], D1, D2]


def test_topic_creation_writes_the_topic_then_the_partition_with_default_directories():
    out = run({"kind": "create_partition", "topic": "payments", "partition": 0, "replicas": [2, 4]}, dirs4=2)
    (t, _, topic), (p, version, data) = recs(out)
    assert (t, topic["name"]) == ("TOPIC_RECORD", "payments")
    assert (p, version, data["topicId"], data["directories"]) == ("PARTITION_RECORD", 1, topic["topicId"], [D2, U])


def test_create_partition_with_no_log_directory_anywhere_writes_migrating():
    brokers = {"1": {"epoch": 10}, "2": {"epoch": 11}}
    out = run({"kind": "create_partition", "topic": "orders", "partition": 1, "replicas": [1, 2]},
              brokers=brokers, partitions=[])
    assert recs(out)[0][2]["directories"] == [M, M]
    assert part(out, 1)["directories"] == []  # all MIGRATING: shown as none


@pytest.mark.parametrize("mv", ["3.6-IV2", "3.7-IV1"])
def test_create_partition_below_3_7_iv2_writes_no_directories(mv):
    out = run({"kind": "create_partition", "topic": "orders", "partition": 1, "replicas": [4, 1]}, mv=mv)
    (_, version, data), = recs(out)
    assert version == 0 and "directories" not in data


def test_create_partition_on_an_unregistered_broker_is_refused():
    # the manual assignment is validated before any directory is chosen: nothing is written
    out = run({"kind": "create_partition", "topic": "orders", "partition": 1, "replicas": [1, 5]})
    assert out["errors"] == {"orders-1": "INVALID_REPLICA_ASSIGNMENT"} and out["records"] == []


# ------------------------------------------------------------------------------- reassignments
@pytest.mark.parametrize("dirs4", [0, 1, 2])
def test_reassignment_adding_a_replica_puts_it_in_the_default_directory_and_keeps_the_others(dirs4):
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 4]}, dirs4=dirs4)
    # R' = target ++ removing; replicas 2, 3 and 1 keep their explicit directories
    assert recs(out) == [change(0, replicas=[2, 3, 4, 1], removingReplicas=[1], addingReplicas=[4],
                                directories=[D2, D3, DEFAULT[dirs4], D1])]
    assert part(out)["directories"] == [D2, D3, DEFAULT[dirs4], D1]


def test_reassignment_that_only_reorders_keeps_every_directory_with_its_replica():
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [3, 1, 2]})
    assert recs(out) == [change(0, replicas=[3, 1, 2], directories=[D3, D1, D2])]


def test_a_replica_kept_by_a_reassignment_keeps_its_directory_even_when_the_default_differs():
    # broker 2 now lists two directories (its default would be UNASSIGNED), yet its replica stays in D2
    brokers = {"1": {"epoch": 10, "logDirs": [D1]}, "2": {"epoch": 11, "logDirs": [D2, DB]},
               "3": {"epoch": 12, "logDirs": [D3]}, "4": {"epoch": 13, "logDirs": [DA]}}
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 4]}, brokers=brokers)
    assert recs(out)[0][2]["directories"] == [D2, DA, D1, D3]


def test_a_partition_without_directories_keeps_migrating_for_its_replicas_and_the_new_one_gets_the_default():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1}]
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [1, 2, 4]}, partitions=parts)
    assert recs(out)[0][2]["directories"] == [M, M, DA, M]


@pytest.mark.parametrize("mv, version", [("3.6-IV2", 0), ("3.7-IV1", 0)])
def test_reassignment_below_3_7_iv2_writes_no_directories(mv, version):
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1}]
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 4]}, mv=mv, partitions=parts)
    assert recs(out) == [change(0, version, replicas=[2, 3, 4, 1], removingReplicas=[1], addingReplicas=[4])]
    assert part(out)["directories"] == []  # MIGRATING for every replica


def test_reassignment_onto_an_unregistered_broker_is_refused():
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 5]})
    assert out["errors"] == {"orders-0": "INVALID_REPLICA_ASSIGNMENT"} and out["records"] == []


def test_cancel_returns_each_remaining_replica_to_its_directory():
    out = run({"kind": "sequence", "events": [
        {"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 4]},
        {"kind": "cancel_reassignment", "topic": "orders", "partition": 0}]})
    # the revert drops the adding replicas from R' = [2, 3, 4, 1] (the order of R' stays)
    assert recs(out)[1] == change(0, leader=1, replicas=[2, 3, 1], removingReplicas=[], addingReplicas=[],
                                  directories=[D2, D3, D1])


# ------------------------------------------------- §2.7-3 AlterPartition completing a reassignment
def reassigning(target=(2, 3, 4)):
    """orders-0 moving from [1, 2, 3] to ``target``, broker 4 (one directory) caught up: the leader 1 is
    among the removed replicas."""
    removing = sorted({1, 2, 3} - set(target))
    adding = sorted(set(target) - {1, 2, 3})
    reps = list(target) + removing
    dirs = {1: D1, 2: D2, 3: D3, 4: DA}
    return [{"topic": "orders", "partition": 0, "replicas": reps, "isr": [1, 2, 3], "leader": 1,
             "leaderEpoch": 4, "partitionEpoch": 8, "removingReplicas": removing, "addingReplicas": adding,
             "directories": [dirs[b] for b in reps]}]


def alter(isr, **kw):
    return {"kind": "alter_partition", "topic": "orders", "partition": 0, "brokerId": 1, "isr": isr, **kw}


@pytest.mark.parametrize("version", [2, 3, None])
def test_alter_partition_completing_a_reassignment_that_removes_the_leader_answers_new_leader_elected(version):
    ev = alter([1, 2, 3, 4]) if version is None else alter([1, 2, 3, 4], version=version)
    out = run(ev, partitions=reassigning())
    # B1 completes (ISR - removing = [2, 3, 4] covers the new replicas); the leader 1 is gone, so the
    # first new-ISR member in replica order leads; the record is written nevertheless
    assert recs(out) == [change(0, leader=2, isr=[2, 3, 4], replicas=[2, 3, 4], removingReplicas=[],
                                addingReplicas=[], directories=[D2, D3, DA])]
    assert out["errors"] == {"orders-0": "NEW_LEADER_ELECTED"}
    p = part(out)
    assert (p["leader"], p["isr"], p["replicas"], p["leaderEpoch"], p["partitionEpoch"]) == (2, [2, 3, 4], [2, 3, 4],
                                                                                             5, 9)


@pytest.mark.parametrize("version", [0, 1])
def test_before_v2_the_same_completion_answers_fenced_leader_epoch(version):
    out = run(alter([1, 2, 3, 4], version=version), partitions=reassigning())
    assert [r[2]["leader"] for r in recs(out)] == [2]
    assert out["errors"] == {"orders-0": "FENCED_LEADER_EPOCH"}


def test_the_new_leader_follows_replica_order_not_isr_order():
    out = run(alter([1, 2, 3, 4]), partitions=reassigning(target=(4, 3, 2)))
    assert recs(out)[0][2]["leader"] == 4 and recs(out)[0][2]["isr"] == [2, 3, 4]
    assert out["errors"] == {"orders-0": "NEW_LEADER_ELECTED"}


def test_completion_keeping_the_leader_bumps_its_epoch_and_answers_no_error():
    out = run(alter([1, 2, 4]), partitions=reassigning(target=(1, 2, 4)))
    # replica 3 leaves: B5 re-writes the same leader (leader epoch +1); the sender still leads
    assert recs(out) == [change(0, leader=1, isr=[1, 2, 4], replicas=[1, 2, 4], removingReplicas=[],
                                addingReplicas=[], directories=[D1, D2, DA])]
    assert out["errors"] == {}


def test_an_isr_change_that_does_not_complete_the_reassignment_answers_no_error():
    out = run(alter([1, 2]), partitions=reassigning())
    assert recs(out) == [change(0, isr=[1, 2])] and out["errors"] == {}


# -------------------------------------------------------------- the request versions whatif models
def test_unknown_topic_by_version():
    assert run(alter([1], topic="nope"))["errors"] == {"nope-0": "UNKNOWN_TOPIC_ID"}
    assert run(alter([1], topic="nope", version=1))["errors"] == {"nope-0": "UNKNOWN_TOPIC_OR_PARTITION"}
    assert run(alter([1], partition=9))["errors"] == {"orders-9": "UNKNOWN_TOPIC_OR_PARTITION"}


def test_ineligible_replica_by_version():
    brokers = {"1": {"epoch": 10}, "2": {"epoch": 11}, "3": {"epoch": 12, "fenced": True}}
    assert run(alter([1, 3]), brokers=brokers)["errors"] == {"orders-0": "INELIGIBLE_REPLICA"}
    assert run(alter([1, 3], version=1), brokers=brokers)["errors"] == {"orders-0": "OPERATION_NOT_ATTEMPTED"}
    # members' broker epochs exist from v3 only
    stale = [1, {"brokerId": 2, "brokerEpoch": 99}]
    assert run(alter(stale), brokers=brokers)["errors"] == {"orders-0": "INELIGIBLE_REPLICA"}
    out = run(alter(stale, version=2), brokers=brokers)
    assert out["errors"] == {} and recs(out)[0][2]["isr"] == [1, 2]


def test_a_version_0_request_carries_no_leader_recovery_state():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1], "leader": 1,
              "leaderRecoveryState": 1, "leaderEpoch": 4, "partitionEpoch": 7}]
    # v0: the field does not exist, so the request means RECOVERED
    out = run(alter([1], version=0, leaderRecoveryState=1), partitions=parts)
    assert recs(out) == [change(0, leaderRecoveryState=0)]
    out = run(alter([1], version=1, leaderRecoveryState=1), partitions=parts)
    assert out["records"] == [] and out["errors"] == {}


# ------------------------------------------------------------------ whatif -> log -> verify
def _snapshot(c) -> list:
    """The starting image as a snapshot holds it, directories included."""
    out = [("FEATURE_LEVEL_RECORD", 0, {"name": k, "featureLevel": v}) for k, v in sorted(c.features.items())]
    for b, br in sorted(c.brokers.items()):
        out.append(("REGISTER_BROKER_RECORD", 3, {"brokerId": b, "incarnationId": br.incarnation_id,
                                                   "brokerEpoch": br.epoch, "endPoints": [], "features": [],
                                                   "rack": None, "fenced": br.fenced, "inControlledShutdown": False,
                                                   "logDirs": br.log_dirs}))
    out.append(("TOPIC_RECORD", 0, {"name": "orders", "topicId": T}))
    for p in sorted(c.partitions.values(), key=lambda p: p.partition_id):
        out.append(("PARTITION_RECORD", 1, {"partitionId": p.partition_id, "topicId": T, "replicas": p.replicas,
                                            "isr": p.isr, "removingReplicas": [], "addingReplicas": [],
                                            "leader": p.leader, "leaderEpoch": p.leader_epoch,
                                            "partitionEpoch": p.partition_epoch, "directories": p.directories}))
    return out


@pytest.mark.parametrize("mv, dirs4", [("3.6-IV2", 0), ("3.6-IV2", 1), ("3.9-IV0", 2), ("3.9-IV0", 0),
                                       ("3.9-IV0", 1)])
def test_what_whatif_writes_for_a_reassignment_verifies(tmp_path, mv, dirs4):
    from controller_core.rules.verify import verify_log_dir
    from controller_core.rules.whatif import Run
    from simulator.writer import write_log

    c = load_cluster(image(mv=mv, dirs4=dirs4))
    snapshot = _snapshot(c)
    run, batches = Run(c), []
    for ev in [{"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 4]},
               alter([1, 2, 3, 4]),
               {"kind": "create_partition", "topic": "orders", "partition": 1, "replicas": [4, 1]}]:
        before = len(run.records)
        run.apply(ev)
        batches.append([(r["type"], r["version"], r["data"]) for r in run.records[before:]])
    assert run.errors == {"orders-0": "NEW_LEADER_ELECTED"}
    write_log(tmp_path, batches, first_offset=1000, timestamp=lambda offset: offset, snapshot=[snapshot])
    assert verify_log_dir(tmp_path).divergences == []
