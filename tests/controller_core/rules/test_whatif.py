"""`whatif`: the records each hypothetical event makes the controller write, and chained events.

The last test closes the loop: whatever whatif writes, written into a log after a snapshot of the
starting image, must replay and recompute with 0 divergences."""
from __future__ import annotations

import json
import random

import pytest

from controller_core.rules.verify import verify_log_dir
from controller_core.rules.whatif import Run, WhatIfError, load_cluster, what_if
from jobs import cli
from simulator.writer import write_log

T = "AAAAAAAAAAAAAAAAAAAAAQ"


def image(mv="3.9-IV0", elr=None, partitions=None, brokers=None, **extra):
    spec = {"metadataVersion": mv, "controllerId": 1,
            "brokers": brokers or {"1": {"epoch": 10}, "2": {"epoch": 11}, "3": {"epoch": 12}},
            "configs": {"cluster": {"min.insync.replicas": "2"}}, "topics": {"orders": T},
            "partitions": partitions if partitions is not None else [
                {"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1,
                 "leaderEpoch": 4, "partitionEpoch": 7},
                {"topic": "orders", "partition": 1, "replicas": [2, 3, 1], "isr": [2, 3], "leader": 2,
                 "leaderEpoch": 2, "partitionEpoch": 3}], **extra}
    if elr is not None:
        spec["elrEnabled"] = elr
    return spec


def run(event, **kw):
    return what_if({**image(**kw), "event": event})


def recs(out):
    return [(r["type"], r["data"]) for r in out["records"]]


def change(p, **fields):
    return ("PARTITION_CHANGE_RECORD", {"partitionId": p, "topicId": T, **fields})


def test_fence_broker_moves_leadership_then_writes_the_fence():
    out = run({"kind": "fence_broker", "broker": 2})
    assert recs(out) == [change(0, isr=[1, 3]), change(1, isr=[3], leader=3),
                         ("BROKER_REGISTRATION_CHANGE_RECORD", {"brokerId": 2, "brokerEpoch": 11, "fenced": 1})]
    assert out["brokers"]["2"]["fenced"] is True
    assert [p["leaderEpoch"] for p in out["partitions"]] == [4, 3]


def test_fence_before_3_3_uses_fence_broker_record():
    out = run({"kind": "fence_broker", "broker": 1}, mv="3.2-IV0")
    assert recs(out)[-1] == ("FENCE_BROKER_RECORD", {"id": 1, "epoch": 10})
    assert recs(out)[0] == change(0, isr=[2, 3], leader=2)


def test_controlled_shutdown_of_a_leader_writes_the_cs_record_first():
    out = run({"kind": "controlled_shutdown", "broker": 1})
    assert recs(out)[0] == ("BROKER_REGISTRATION_CHANGE_RECORD", {"brokerId": 1, "brokerEpoch": 10,
                                                                   "inControlledShutdown": 1})
    assert recs(out)[1] == change(0, isr=[2, 3], leader=2)


def test_controlled_shutdown_of_a_broker_leading_nothing_is_a_plain_fence():
    out = run({"kind": "controlled_shutdown", "broker": 3})
    assert [t for t, _ in recs(out)] == ["PARTITION_CHANGE_RECORD", "PARTITION_CHANGE_RECORD",
                                         "BROKER_REGISTRATION_CHANGE_RECORD"]
    assert "inControlledShutdown" not in recs(out)[-1][1]


def test_unfence_elects_leaderless_partitions():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2], "isr": [2], "leader": -1}]
    brokers = {"1": {"epoch": 10}, "2": {"epoch": 11, "fenced": True}}
    out = run({"kind": "unfence_broker", "broker": 2}, partitions=parts, brokers=brokers)
    assert recs(out) == [("BROKER_REGISTRATION_CHANGE_RECORD", {"brokerId": 2, "brokerEpoch": 11, "fenced": -1}),
                         change(0, leader=2)]


def test_unclean_shutdown_with_elr_removes_the_broker_from_isr_and_elr_before_registering():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1], "leader": 1,
              "eligibleLeaderReplicas": [2]}]
    out = run({"kind": "unclean_shutdown", "broker": 1, "brokerEpoch": 40}, mv="4.1-IV0", elr=True,
              partitions=parts)
    types = [t for t, _ in recs(out)]
    assert types == ["PARTITION_CHANGE_RECORD", "REGISTER_BROKER_RECORD"]
    # the ELR member 2 is active: it is elected at once and forms the ISR alone (§2.3, §2.4-5)
    assert recs(out)[0] == change(0, isr=[2], leader=2, eligibleLeaderReplicas=[])
    assert recs(out)[1][1]["brokerEpoch"] == 40 and recs(out)[1][1]["fenced"] is True


def test_unregister_broker():
    out = run({"kind": "unregister_broker", "broker": 3})
    assert recs(out)[-1] == ("UNREGISTER_BROKER_RECORD", {"brokerId": 3, "brokerEpoch": 12})
    assert "3" not in out["brokers"]


@pytest.mark.parametrize("event, error", [
    ({"brokerId": 2}, "INVALID_REQUEST"),  # not the leader
    ({"leaderEpoch": 3}, "FENCED_LEADER_EPOCH"),
    ({"leaderEpoch": 5}, "NOT_CONTROLLER"),
    ({"partitionEpoch": 6}, "INVALID_UPDATE_VERSION"),
    ({"isr": [2, 3]}, "INVALID_REQUEST"),  # lacks the leader
    ({"isr": [1, 4]}, "INVALID_REQUEST"),  # not a replica
    ({"brokerEpoch": 9}, "STALE_BROKER_EPOCH"),
    ({"isr": [1, {"brokerId": 2, "brokerEpoch": 99}]}, "INELIGIBLE_REPLICA"),
])
def test_alter_partition_validation_first_failure_wins(event, error):
    out = run({"kind": "alter_partition", "topic": "orders", "partition": 0, "isr": [1, 2], **event})
    assert out["errors"] == {"orders-0": error} and out["records"] == []


def test_alter_partition_shrink():
    out = run({"kind": "alter_partition", "topic": "orders", "partition": 0, "isr": [1, 2]})
    assert recs(out) == [change(0, isr=[1, 2])] and out["errors"] == {}


def test_preferred_election_and_its_errors():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 2},
             {"topic": "orders", "partition": 1, "replicas": [1, 2, 3], "isr": [1, 2, 3], "leader": 1},
             {"topic": "orders", "partition": 2, "replicas": [3, 2, 1], "isr": [2, 1], "leader": 2}]
    listed = [{"topic": "orders", "partition": p} for p in (0, 1, 2)] + [{"topic": "nope", "partition": 0}]
    out = run({"kind": "elect_leaders", "electionType": "PREFERRED", "partitions": listed}, partitions=parts)
    assert recs(out) == [change(0, leader=1)]
    assert out["errors"] == {"orders-1": "ELECTION_NOT_NEEDED", "orders-2": "PREFERRED_LEADER_NOT_AVAILABLE",
                             "nope-0": "UNKNOWN_TOPIC_OR_PARTITION"}
    # partitions = null: ELECTION_NOT_NEEDED results are left out
    out = run({"kind": "elect_leaders", "electionType": "PREFERRED", "partitions": None}, partitions=parts)
    assert out["errors"] == {"orders-2": "PREFERRED_LEADER_NOT_AVAILABLE"}


def test_unclean_election_ignores_the_topic_config_and_marks_recovering():
    parts = [{"topic": "orders", "partition": 0, "replicas": [1, 2, 3], "isr": [1], "leader": -1}]
    brokers = {"1": {"epoch": 10, "fenced": True}, "2": {"epoch": 11}, "3": {"epoch": 12}}
    out = run({"kind": "elect_leaders", "electionType": "UNCLEAN", "partitions": [{"topic": "orders",
                                                                                     "partition": 0}]},
              partitions=parts, brokers=brokers)
    assert recs(out) == [change(0, isr=[2], leader=2, leaderRecoveryState=1)]


def test_reassign_and_cancel():
    out = run({"kind": "reassign", "topic": "orders", "partition": 0, "replicas": [2, 3, 1]})
    assert recs(out) == [change(0, replicas=[2, 3, 1])]  # a pure reorder completes at once
    out = what_if({**image(), "event": {"kind": "sequence", "events": [
        {"kind": "reassign", "topic": "orders", "partition": 1, "replicas": [2, 3, 4]},
        {"kind": "cancel_reassignment", "topic": "orders", "partition": 1}]},
        "brokers": {"1": {"epoch": 10}, "2": {"epoch": 11}, "3": {"epoch": 12}, "4": {"epoch": 13}}})
    m = "AAAAAAAAAAAAAAAAAAAAAA"  # MIGRATING: broker 4 registered without log directories (B10)
    assert recs(out)[0] == change(1, replicas=[2, 3, 4, 1], removingReplicas=[1], addingReplicas=[4],
                                  directories=[m, m, m, m])
    # cancel: back to the old replicas; replica 4 leaves, so the leader epoch is bumped (B5)
    assert recs(out)[1] == change(1, leader=2, replicas=[2, 3, 1], removingReplicas=[], addingReplicas=[],
                                  directories=[m, m, m])
    assert run({"kind": "cancel_reassignment", "topic": "orders", "partition": 0})["errors"] == {
        "orders-0": "NO_REASSIGNMENT_IN_PROGRESS"}


def test_create_partition_takes_the_active_replicas_in_order():
    brokers = {"1": {"epoch": 10, "fenced": True}, "2": {"epoch": 11}, "3": {"epoch": 12}}
    out = run({"kind": "create_partition", "topic": "orders", "partition": 5, "replicas": [1, 3, 2]}, brokers=brokers)
    assert recs(out)[0][1]["isr"] == [3, 2] and recs(out)[0][1]["leader"] == 3


def test_register_broker_amend_keeps_epoch_and_state():
    out = run({"kind": "register_broker", "broker": 2, "newIncarnation": False})
    assert recs(out) == [("REGISTER_BROKER_RECORD", recs(out)[0][1])]
    assert recs(out)[0][1]["brokerEpoch"] == 11 and recs(out)[0][1]["fenced"] is False


def test_delete_topic_and_set_config_with_elr_clears_elr():
    out = run({"kind": "sequence", "events": [
        {"kind": "set_config", "resource": "topic", "name": "orders", "configs": {"min.insync.replicas": "3"}},
        {"kind": "delete_topic", "topic": "orders"}]}, mv="4.1-IV0", elr=True)
    assert [t for t, _ in recs(out)] == ["CONFIG_RECORD", "CLEAR_ELR_RECORD", "REMOVE_TOPIC_RECORD"]
    assert out["partitions"] == []


def test_chained_events_see_each_others_results():
    out = run({"kind": "sequence", "events": [{"kind": "fence_broker", "broker": 1},
                                              {"kind": "fence_broker", "broker": 2},
                                              {"kind": "unfence_broker", "broker": 1}]})
    p0 = out["partitions"][0]
    # ELR off: fencing 1 then 2 leaves 3 leading with ISR [3]; unfencing 1 elects nothing (3 still leads)
    assert (p0["leader"], p0["isr"]) == (3, [3])
    assert [t for t, _ in recs(out)][-1] == "BROKER_REGISTRATION_CHANGE_RECORD"


def test_cli_reads_stdin_and_rejects_bad_events(monkeypatch, capsys):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**image(), "event": {"kind": "fence_broker",
                                                                                     "broker": 3}})))
    assert cli.main(["whatif", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["brokers"]["3"]["fenced"] is True
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({**image(), "event": {"kind": "explode"}})))
    assert cli.main(["whatif", "-"]) == 2
    err = capsys.readouterr().err
    assert "event.kind: 'explode' is not one of" in err and "whatif.schema.json" in err
    with pytest.raises(WhatIfError):
        what_if({**image(), "event": {"kind": "fence_broker"}})


# ------------------------------------------------------------------ whatif -> log -> verify
def _random_spec(rng: random.Random) -> dict:
    mv = rng.choice(["3.3-IV3", "3.5-IV2", "3.6-IV0", "3.9-IV0", "4.0-IV1", "4.1-IV0", "4.2-IV1"])
    elr = rng.random() < 0.7 if mv >= "4.0-IV1" else None
    n = rng.randint(3, 5)
    brokers = {str(b): {"epoch": 10 + b, "fenced": rng.random() < 0.15} for b in range(1, n + 1)}
    active = [b for b in range(1, n + 1) if not brokers[str(b)]["fenced"]] or [1]
    brokers[str(active[0])]["fenced"] = False
    parts = []
    for p in range(rng.randint(2, 6)):
        reps = rng.sample(range(1, n + 1), 3)
        isr = [b for b in reps if b in active and rng.random() < 0.8] or [b for b in reps if b in active][:1]
        leader = isr[0] if isr else -1
        parts.append({"topic": "orders", "partition": p, "replicas": reps, "isr": isr or reps[:1], "leader": leader,
                      "leaderEpoch": rng.randint(0, 9), "partitionEpoch": rng.randint(10, 20)})
    return {**image(mv=mv, elr=elr, partitions=parts, brokers=brokers), "configs": {
        "cluster": {"min.insync.replicas": str(rng.choice([1, 2, 3]))}}}


def _random_event(rng, spec, run: Run):
    c = run.c
    b = rng.choice(sorted(c.brokers)) if c.brokers else 1
    kinds = ["fence_broker", "unfence_broker", "controlled_shutdown", "unclean_shutdown", "alter_partition",
             "elect_leaders", "elect_leaders"]
    kind = rng.choice(kinds)
    if kind == "alter_partition":
        p = rng.choice(sorted(c.partitions.values(), key=lambda p: p.partition_id))
        if p.leader < 0:
            return {"kind": "fence_broker", "broker": b}
        others = [x for x in p.replicas if x != p.leader and c.active(x)]
        return {"kind": "alter_partition", "topic": "orders", "partition": p.partition_id,
                "isr": [p.leader] + rng.sample(others, rng.randint(0, len(others)))}
    if kind == "elect_leaders":
        return {"kind": kind, "electionType": rng.choice(["PREFERRED", "UNCLEAN"]), "partitions": None}
    return {"kind": kind, "broker": b}


def _image_records(c) -> list:
    """The starting image as a snapshot holds it."""
    out = [("FEATURE_LEVEL_RECORD", 0, {"name": k, "featureLevel": v}) for k, v in sorted(c.features.items())]
    out += [("CONFIG_RECORD", 0, {"resourceType": t, "resourceName": n, "name": k, "value": v})
            for (t, n), kv in sorted(c.configs.items()) for k, v in sorted(kv.items())]
    for b, br in sorted(c.brokers.items()):
        out.append(("REGISTER_BROKER_RECORD", 3, {"brokerId": b, "incarnationId": br.incarnation_id,
                                                   "brokerEpoch": br.epoch, "endPoints": [], "features": [],
                                                   "rack": None, "fenced": br.fenced,
                                                   "inControlledShutdown": br.in_controlled_shutdown,
                                                   "logDirs": br.log_dirs}))
    out.append(("TOPIC_RECORD", 0, {"name": "orders", "topicId": T}))
    for p in sorted(c.partitions.values(), key=lambda p: p.partition_id):
        out.append(("PARTITION_RECORD", 2, {"partitionId": p.partition_id, "topicId": T, "replicas": p.replicas,
                                            "isr": p.isr, "removingReplicas": [], "addingReplicas": [],
                                            "leader": p.leader, "leaderEpoch": p.leader_epoch,
                                            "partitionEpoch": p.partition_epoch}))
    return out


@pytest.mark.parametrize("seed", range(int(__import__("os").environ.get("WHATIF_SEEDS", 60))))
def test_what_whatif_writes_verifies_without_divergence(tmp_path, seed):
    rng = random.Random(seed)
    spec = _random_spec(rng)
    c = load_cluster(spec)
    image = _image_records(c)
    run = Run(c)
    batches = []
    for _ in range(rng.randint(1, 6)):
        before = len(run.records)
        run.apply(_random_event(rng, spec, run))
        new = [(r["type"], r["version"], r["data"]) for r in run.records[before:]]
        if new:
            batches.append(new)
    if not batches:
        return
    # the image as the snapshot at 1000, what whatif wrote as the log after it
    write_log(tmp_path, batches, first_offset=1000, timestamp=lambda offset: offset, snapshot=[image])
    rep = verify_log_dir(tmp_path)
    assert rep.divergences == [], (spec, run.records)
