"""Election plans: selection of partitions, and files in exactly the shapes kafka-leader-election.sh and
kafka-reassign-partitions.sh document (KIP-460 / the tools' --help), plus KIP-966's designation form."""
from __future__ import annotations

import json

import pytest

from audit import plans
from audit.recovery import BrokerState, recovery_candidates

TID = "KFvSE487Q4m4j_tN115p3w"
OID = "q5ZyZkC0Re2nOJbLk4zTgA"


def state(topic, partition, replicas, isr, leader, elr=(), lke=(), epoch=5, tid=TID):
    return {"topic": topic, "topicId": tid, "partition": partition, "replicas": list(replicas), "isr": list(isr),
            "eligibleLeaderReplicas": list(elr), "lastKnownElr": list(lke), "leader": leader, "leaderEpoch": epoch,
            "partitionEpoch": epoch + 1, "leaderRecoveryState": 0, "addingReplicas": [], "removingReplicas": []}


# rxx-topic at the end of the ogs59 log (kraft-audit describe --json), all three brokers active
OGS59 = [state("rxx-topic", 0, [3, 1, 2], [3], 3, epoch=4), state("rxx-topic", 1, [1, 2, 3], [3], 3, epoch=6),
         state("rxx-topic", 2, [2, 3, 1], [2], 2, epoch=4)]


def test_no_preferred_election_when_the_preferred_replica_is_out_of_the_isr():
    # partitions 0 and 2 are led by their first replica; partition 1's first replica (1) is not in the ISR
    assert plans.preferred_partitions(OGS59, {1, 2, 3}) == []


def test_preferred_election_selects_led_elsewhere_with_first_replica_active_in_isr():
    parts = [state("orders", 0, [1, 2, 3], [1, 2, 3], 2),  # yes
             state("orders", 1, [2, 3, 1], [3, 1], 3),  # 2 not in ISR
             state("orders", 2, [3, 1, 2], [3, 1, 2], 1),  # 3 fenced
             state("orders", 3, [1, 2, 3], [1, 2, 3], 1),  # already preferred
             state("orders", 4, [1, 2, 3], [1], -1)]  # leaderless, 1 active in ISR: yes
    got = [(p["topic"], p["partition"]) for p in plans.preferred_partitions(parts, {1, 2})]
    assert got == [("orders", 0), ("orders", 4)]
    plan = plans.build_plan("preferred", parts, {1, 2}, bootstrap_server="kafka-1:9092")
    assert plan["files"] == {"election-preferred.json": {"partitions": [{"topic": "orders", "partition": 0},
                                                                        {"topic": "orders", "partition": 4}]}}
    assert plan["commands"] == ["kafka-leader-election.sh --bootstrap-server kafka-1:9092 --election-type preferred "
                                "--path-to-json-file election-preferred.json"]


def test_unclean_election_selects_leaderless_partitions_without_clean_candidate():
    parts = [state("orders", 0, [1, 2, 3], [1], -1, epoch=7),  # ISR member 1 fenced: unclean needed
             state("orders", 1, [1, 2, 3], [], -1, elr=[2]),  # active ELR member: clean, not included
             state("orders", 2, [1, 2, 3], [2], 2),  # has a leader
             state("orders", 3, [1, 4], [], -1, elr=[1]),  # fenced ELR member, 4 offline: nothing can win
             state("orders", 4, [1, 3, 2], [], -1, lke=[2])]  # single LastKnownElr member active
    plan = plans.build_plan("unclean", parts, {2, 3})
    assert plan["files"]["election-unclean.json"] == {"partitions": [{"topic": "orders", "partition": 0},
                                                                     {"topic": "orders", "partition": 4}]}
    assert [(p["partition"], p["newLeader"]) for p in plan["partitions"]] == [(0, 2), (4, 2)]
    assert [s["partition"] for s in plan["skipped"]] == [3]
    assert "--election-type unclean --path-to-json-file election-unclean.json" in plan["commands"][0]


def _assert_election_file_shape(doc):
    assert list(doc) == ["partitions"] and isinstance(doc["partitions"], list)
    for e in doc["partitions"]:
        assert list(e) == ["topic", "partition"]
        assert isinstance(e["topic"], str) and type(e["partition"]) is int


def _recovery_inputs():
    """orders-0: leaderless after its last ISR member 1 was fenced (ELR off); orders-1: ELR member 3 active;
    payments-0: all replicas reported, broker 2 holds the longest log."""
    parts = [state("orders", 0, [1, 2, 3], [1], -1, epoch=7),
             state("orders", 1, [1, 2, 3], [], -1, elr=[3], epoch=9),
             state("payments", 0, [3, 1, 2], [], -1, lke=[3], epoch=4, tid=OID)]
    brokers = {1: BrokerState(True, 10, True), 2: BrokerState(True, 20, False), 3: BrokerState(True, 30, False)}
    info = [
        {"broker_id": 2, "broker_epoch": 20, "topic_id": TID, "partition": 0, "last_written_leader_epoch": 6,
         "current_leader_epoch": 7, "log_end_offset": 950, "error_code": 0, "error_message": None},
        {"broker_id": 3, "broker_epoch": 30, "topic_id": TID, "partition": 0, "last_written_leader_epoch": 6,
         "current_leader_epoch": 7, "log_end_offset": 1000, "error_code": 0, "error_message": None},
        {"broker_id": 1, "broker_epoch": 10, "topic_id": TID, "partition": 0, "last_written_leader_epoch": 6,
         "current_leader_epoch": 7, "log_end_offset": 1200, "error_code": 0, "error_message": None},
        {"broker_id": 3, "broker_epoch": 30, "topic_id": OID, "partition": 0, "last_written_leader_epoch": 3,
         "current_leader_epoch": 4, "log_end_offset": 40, "error_code": 0, "error_message": None},
        {"broker_id": 2, "broker_epoch": 20, "topic_id": OID, "partition": 0, "last_written_leader_epoch": 3,
         "current_leader_epoch": 4, "log_end_offset": 70, "error_code": 0, "error_message": None},
    ]
    cands = {s: [r for p in parts for r in recovery_candidates(p, brokers, info, s)] for s in ("balanced", "aggressive")}
    return parts, {2, 3}, cands


def test_longest_log_aggressive_plan_files_and_order(tmp_path):
    parts, active, cands = _recovery_inputs()
    plan = plans.build_plan("longest_log_aggressive", parts, active, cands["aggressive"], "kafka-1:9092")
    chosen = {(p["topic"], p["partition"]): (p["newLeader"], p["election"], p["estimatedRecordsLost"])
              for p in plan["partitions"]}
    # orders-0: 1 has the longest log but is fenced -> 3 (loses ~200); orders-1: clean ELR member 3;
    # payments-0: 2 has the longest log (3 would lose 30)
    assert chosen == {("orders", 0): (3, "unclean", 200), ("orders", 1): (3, "preferred", 0),
                      ("payments", 0): (2, "unclean", 0)}
    files = plans.write_plan(plan, tmp_path)
    assert [f.name for f in files] == ["PLAN.md", "designation.json", "election-preferred.json",
                                       "election-unclean.json", "reassign.json"]
    reassign = json.loads((tmp_path / "reassign.json").read_text())
    assert list(reassign) == ["version", "partitions"] and reassign["version"] == 1
    for e in reassign["partitions"]:
        assert list(e) == ["topic", "partition", "replicas", "log_dirs"]
        assert type(e["partition"]) is int and all(type(b) is int for b in e["replicas"])
        assert e["log_dirs"] == ["any"] * len(e["replicas"])
    assert [(e["topic"], e["partition"], e["replicas"]) for e in reassign["partitions"]] == [
        ("orders", 0, [3, 1, 2]), ("orders", 1, [3, 1, 2]), ("payments", 0, [2, 3, 1])]
    designation = json.loads((tmp_path / "designation.json").read_text())
    assert list(designation) == ["partitions"]
    assert [list(e) for e in designation["partitions"]] == [["topic", "partition", "desiredLeader"]] * 3
    assert [e["desiredLeader"] for e in designation["partitions"]] == [3, 3, 2]
    pref = json.loads((tmp_path / "election-preferred.json").read_text())
    uncl = json.loads((tmp_path / "election-unclean.json").read_text())
    _assert_election_file_shape(pref)
    _assert_election_file_shape(uncl)
    assert pref == {"partitions": [{"topic": "orders", "partition": 1}]}
    assert uncl == {"partitions": [{"topic": "orders", "partition": 0}, {"topic": "payments", "partition": 0}]}
    assert plan["commands"] == [
        "kafka-reassign-partitions.sh --bootstrap-server kafka-1:9092 --reassignment-json-file reassign.json --execute",
        "kafka-reassign-partitions.sh --bootstrap-server kafka-1:9092 --reassignment-json-file reassign.json --verify",
        "kafka-leader-election.sh --bootstrap-server kafka-1:9092 --election-type preferred "
        "--path-to-json-file election-preferred.json",
        "kafka-leader-election.sh --bootstrap-server kafka-1:9092 --election-type unclean "
        "--path-to-json-file election-unclean.json"]
    text = (tmp_path / "PLAN.md").read_text()
    assert "No released Kafka accepts it" in text and "| orders | 0 | -1 | 3 | 3,1,2 | 200 |" in text
    assert all(c in text for c in plan["commands"])


def test_longest_log_balanced_skips_partitions_still_waiting():
    parts, active, cands = _recovery_inputs()
    plan = plans.build_plan("longest_log_balanced", parts, active, cands["balanced"])
    # orders-0 waits for fenced ISR member 1; payments-0 (LastKnownElr [3] replied) and orders-1 (clean) go
    assert [(p["topic"], p["partition"], p["newLeader"]) for p in plan["partitions"]] == [
        ("orders", 1, 3), ("payments", 0, 2)]
    assert plan["skipped"][0]["partition"] == 0 and "waiting for broker 1 (fenced)" in plan["skipped"][0]["reason"]
    # aggressive rows are not used by a balanced plan
    assert plans.build_plan("longest_log_balanced", parts, active, cands["aggressive"])["partitions"] == []


def test_designation_uses_desired_leaders_over_candidates_and_rejects_inactive():
    parts, active, cands = _recovery_inputs()
    plan = plans.build_plan("designation", parts, active, cands["aggressive"],
                            desired_leaders={("orders", 0): 2, ("payments", 0): 1})
    assert plans.designation_file({("orders", 0): 2}) == {"partitions": [
        {"topic": "orders", "partition": 0, "desiredLeader": 2}]}
    assert plan["files"]["designation.json"]["partitions"] == [
        {"topic": "orders", "partition": 0, "desiredLeader": 2}, {"topic": "orders", "partition": 1, "desiredLeader": 3}]
    assert any(s["partition"] == 0 and s["topic"] == "payments" and "not active" in s["reason"] for s in plan["skipped"])
    assert plan["partitions"][0]["estimatedRecordsLost"] == 250  # broker 2's row: 1200 - 950


def test_candidate_first_keeps_the_others_in_order():
    assert plans.candidate_first([5, 3, 9, 1], 9) == [9, 5, 3, 1]
    assert plans.candidate_first([5, 3, 9, 1], 5) == [5, 3, 9, 1]
    with pytest.raises(ValueError):
        plans.candidate_first([5, 3], 7)


def test_single_last_known_elr_member_is_flagged_when_it_would_win_the_unclean_election():
    p = state("orders", 0, [1, 2, 3], [], -1, lke=[2], epoch=3)
    rows = [{"topic_id": TID, "partition": 0, "broker": 3, "recommended": True, "strategy": "aggressive",
             "kind": "unclean_longest_log", "estimated_records_lost": 0, "note": ""}]
    plan = plans.build_plan("longest_log_aggressive", [p], {2, 3}, rows)
    assert "elects broker 2" in plan["partitions"][0]["caveat"]
    assert "## Caveats" in plan["summary"]


def test_plan_output_is_deterministic(tmp_path):
    parts, active, cands = _recovery_inputs()
    a = plans.write_plan(plans.build_plan("longest_log_aggressive", parts, active, cands["aggressive"]), tmp_path / "a")
    b = plans.write_plan(plans.build_plan("longest_log_aggressive", list(reversed(parts)), active,
                                          list(reversed(cands["aggressive"]))), tmp_path / "b")
    assert [f.read_bytes() for f in a] == [f.read_bytes() for f in b]


def test_empty_plan_writes_only_the_summary(tmp_path):
    plan = plans.build_plan("preferred", OGS59, {1, 2, 3})
    assert [f.name for f in plans.write_plan(plan, tmp_path)] == ["PLAN.md"]
    assert "No partition needs this election." in plan["summary"]


def test_unknown_election_type_is_rejected():
    with pytest.raises(ValueError):
        plans.build_plan("longest_log_proactive", [], set())


def _image(parts, fenced=(1,)):
    """The whatif image of ``parts`` with brokers 1-3 (``fenced`` fenced), ELR on (4.0-IV1)."""
    return {"metadataVersion": "4.0-IV1", "elrEnabled": True, "topics": {"orders": TID, "payments": OID},
            "brokers": {str(b): {"epoch": 10 * b, "fenced": b in fenced} for b in (1, 2, 3)}, "partitions": parts}


def test_checked_recovery_plan_follows_the_controller_through_the_reassignment():
    parts, active, cands = _recovery_inputs()
    plan = plans.build_plan("longest_log_aggressive", parts, active, cands["aggressive"], image=_image(parts))
    got = {(p["topic"], p["partition"]): (p["newLeader"], p["election"], [s["step"] for s in p["steps"]])
           for p in plan["partitions"]}
    # orders-1: reordering a leaderless partition runs the controller's election, which takes the active ELR
    # member 3 at once: a preferred election after it would be answered ELECTION_NOT_NEEDED, so none follows
    assert got == {("orders", 0): (3, "unclean", ["reassign", "unclean election"]),
                   ("orders", 1): (3, None, ["reassign (elects it)"])}
    # payments-0: the same election already takes its single LastKnownElr member 3, not the chosen 2
    [skip] = [s for s in plan["skipped"] if s["topic"] == "payments"]
    assert skip["error"] is None and "the reassignment itself would elect broker 3, not broker 2" in skip["reason"]
    assert "election-preferred.json" not in plan["files"]
    assert plan["files"]["election-unclean.json"] == {"partitions": [{"topic": "orders", "partition": 0}]}
    assert [e["partition"] for e in plan["files"]["reassign.json"]["partitions"]] == [0, 1]
    assert "| orders | 0 | -1 | 3 | 3,1,2 | 200 | 1,2,3 | 1 | none | none | reassign: 0; unclean election: 200 |" \
        in plan["summary"]


def test_checked_preferred_plan_lists_refusals_with_the_error_and_the_replicas_states():
    parts = [state("orders", 0, [1, 2, 3], [1, 2, 3], 2),  # 1 fenced: PREFERRED_LEADER_NOT_AVAILABLE
             state("orders", 1, [2, 3, 1], [2, 3, 1], 3)]  # 2 active, in ISR: accepted
    plan = plans.build_plan("preferred", parts, {2, 3}, image=_image(parts))
    assert plan["files"] == {"election-preferred.json": {"partitions": [{"topic": "orders", "partition": 1}]}}
    assert [(p["partition"], p["newLeader"]) for p in plan["partitions"]] == [(1, 2)]
    [refused] = plan["skipped"]
    assert refused["error"] == "PREFERRED_LEADER_NOT_AVAILABLE" and refused["partition"] == 0
    assert "replicas 1 fenced (ISR); 2 active (ISR); 3 active (ISR)" in refused["reason"]
    assert "## Refused by Kafka (not included)" in plan["summary"]
