"""Recovery candidates for leaderless partitions: clean ISR/ELR candidates, then the KIP-966 unclean
recovery ranking (highest last written leader epoch, then longest log) under each strategy."""
from __future__ import annotations

import json

import pyarrow as pa
import pytest

from audit.loginfo import LOG_INFO_SCHEMA, collect, read_log_info
from audit.recovery import (
    BROKER_SCHEMA, CANDIDATE_SCHEMA, PARTITION_SCHEMA, BrokerState, recovery_candidates, recovery_candidates_table,
    required_replies,
)

TID = "KFvSE487Q4m4j_tN115p3w"


def part(replicas=(1, 2, 3), isr=(), elr=(), lke=(), leader=-1, epoch=7, partition=0, topic="orders"):
    return {"topic_id": TID, "topic": topic, "partition": partition, "replicas": list(replicas), "isr": list(isr),
            "eligible_leader_replicas": list(elr), "last_known_elr": list(lke), "leader": leader,
            "leader_epoch": epoch}


def up(epoch=10):
    return BrokerState(registered=True, broker_epoch=epoch, fenced=False)


def down(epoch=10):
    return BrokerState(registered=True, broker_epoch=epoch, fenced=True)


def info(broker, lwle, leo, cle=7, bepoch=10, err=0, partition=0):
    return {"broker_id": broker, "broker_epoch": bepoch, "topic_id": TID, "partition": partition,
            "last_written_leader_epoch": lwle, "current_leader_epoch": cle, "log_end_offset": leo,
            "error_code": err, "error_message": "disk gone" if err else None}


def by_broker(rows):
    return {r["broker"]: r for r in rows}


def recommended(rows):
    return [r["broker"] for r in rows if r["recommended"]]


def test_partition_with_a_leader_has_no_candidates():
    assert recovery_candidates(part(leader=2), {2: up()}, [info(2, 6, 10)]) == []


@pytest.mark.parametrize("strategy", ["balanced", "aggressive", "none"])
def test_active_isr_member_is_the_clean_choice_under_every_strategy(strategy):
    rows = recovery_candidates(part(isr=[3, 2]), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 500), info(2, 5, 90), info(3, 6, 100)], strategy)
    assert [(r["broker"], r["kind"], r["rank"]) for r in rows][:2] == [(2, "clean_isr", 1), (3, "clean_isr", 2)]
    assert recommended(rows) == [2]  # replica order, as the controller's election walks it
    assert by_broker(rows)[1]["kind"] == "unclean_longest_log" and by_broker(rows)[1]["rank"] == 3


def test_unfenced_elr_members_are_clean_fenced_ones_are_not():
    rows = recovery_candidates(part(elr=[3, 1, 2]), {1: down(), 2: up(), 3: up()}, [])
    kinds = {r["broker"]: (r["kind"], r["rank"], r["alive_now"]) for r in rows}
    assert kinds == {2: ("clean_elr", 1, True), 3: ("clean_elr", 2, True), 1: ("unclean_longest_log", None, False)}
    assert recommended(rows) == [2] and rows[0]["in_elr"] and rows[0]["estimated_records_lost"] is None


def test_controlled_shutdown_broker_is_not_a_clean_candidate():
    st = BrokerState(registered=True, broker_epoch=10, fenced=False, in_controlled_shutdown=True)
    rows = recovery_candidates(part(elr=[2]), {1: up(), 2: st, 3: up()}, [], "aggressive")
    assert by_broker(rows)[2]["kind"] == "unclean_longest_log" and by_broker(rows)[2]["alive_now"]


def test_aggressive_elects_highest_leader_epoch_before_longest_log():
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()},
                               [info(1, 5, 900), info(2, 6, 100), info(3, 6, 120)], "aggressive")
    assert [(r["broker"], r["rank"]) for r in rows] == [(3, 1), (2, 2), (1, 3)]
    assert recommended(rows) == [3]
    lost = {r["broker"]: r["estimated_records_lost"] for r in rows}
    assert lost == {3: 780, 2: 800, 1: 0}  # best end offset (900) minus each, an estimate across epochs
    assert "unclean election" in rows[0]["note"]


def test_ties_are_broken_in_replica_order():
    rows = recovery_candidates(part(replicas=[3, 1, 2]), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 100), info(2, 6, 100), info(3, 6, 100)], "aggressive")
    assert [r["broker"] for r in rows] == [3, 1, 2] and recommended(rows) == [3]
    assert all(r["estimated_records_lost"] == 0 for r in rows)


def test_stale_broker_epoch_reply_is_discarded():
    rows = recovery_candidates(part(), {1: up(10), 2: up(11), 3: up(10)},
                               [info(1, 6, 100), info(2, 7, 999, bepoch=9), info(3, 6, 90)], "aggressive")
    b = by_broker(rows)
    assert b[2]["excluded_reason"].startswith("stale broker epoch") and b[2]["rank"] is None
    assert b[2]["estimated_records_lost"] is None and b[2]["log_end_offset"] == 999
    assert recommended(rows) == [1] and b[3]["estimated_records_lost"] == 10


def test_stale_leader_epoch_reply_is_discarded():
    rows = recovery_candidates(part(epoch=7), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 100, cle=6), info(2, 6, 50)], "aggressive")
    b = by_broker(rows)
    assert b[1]["excluded_reason"] == "stale leader epoch (6, partition at 7)"
    assert recommended(rows) == [2] and b[3]["excluded_reason"] == "no log info"


def test_log_leader_epoch_check_accepts_checkpoint_epochs_below_the_partition_epoch():
    replies = [info(1, 6, 100, cle=6), info(2, 6, 50, cle=8)]
    rows = recovery_candidates(part(epoch=7), {1: up(), 2: up(), 3: up()}, replies, "aggressive",
                               leader_epoch_check="log")
    assert recommended(rows) == [1] and by_broker(rows)[2]["excluded_reason"].startswith("stale leader epoch")


def test_error_entry_is_discarded_with_its_message():
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()},
                               [info(1, 9, 1000, err=56), info(2, 6, 50)], "aggressive")
    assert by_broker(rows)[1]["excluded_reason"] == "error 56: disk gone"
    assert recommended(rows) == [2]


def test_unknown_broker_epoch_is_accepted_with_a_note():
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()}, [info(2, 6, 50, bepoch=-1)], "aggressive")
    assert recommended(rows) == [2] and "broker epoch was not supplied" in rows[0]["note"]


def test_aggressive_skips_a_fenced_best_log_for_the_best_active_one():
    rows = recovery_candidates(part(), {1: down(), 2: up(), 3: up()},
                               [info(1, 6, 200), info(2, 6, 150), info(3, 5, 300)], "aggressive")
    b = by_broker(rows)
    assert b[1]["rank"] == 1 and not b[1]["recommended"] and "fenced" in b[1]["note"]
    assert recommended(rows) == [2] and b[2]["estimated_records_lost"] == 150


def test_balanced_waits_for_missing_last_known_elr_members():
    rows = recovery_candidates(part(lke=[1, 3]), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 100), info(2, 6, 300)], "balanced")
    assert recommended(rows) == []
    assert "waiting for broker 3 (no log info)" in rows[0]["note"]
    assert [r["rank"] for r in rows] == [1, 2, None]  # the facts are still ranked


def test_balanced_waits_for_a_fenced_last_known_elr_member_even_with_its_reply():
    rows = recovery_candidates(part(lke=[1]), {1: down(), 2: up(), 3: up()},
                               [info(1, 6, 100), info(2, 6, 300), info(3, 6, 10)], "balanced")
    assert recommended(rows) == [] and "broker 1 (fenced)" in rows[0]["note"]


def test_balanced_waits_for_a_stale_last_known_elr_reply():
    rows = recovery_candidates(part(lke=[1]), {1: up(11), 2: up(), 3: up()},
                               [info(1, 6, 100, bepoch=10), info(2, 6, 300)], "balanced")
    assert recommended(rows) == [] and "broker 1 (stale broker epoch" in rows[0]["note"]


def test_balanced_decides_once_every_last_known_elr_member_replied_using_all_replies():
    rows = recovery_candidates(part(lke=[1]), {1: up(), 2: up(), 3: down()},
                               [info(1, 6, 100), info(2, 6, 300)], "balanced")
    assert recommended(rows) == [2]  # broker 3 (no reply, not required) does not block


def test_balanced_with_fenced_elr_members_waits_for_them():
    rows = recovery_candidates(part(elr=[3]), {1: up(), 2: up(), 3: down()},
                               [info(1, 6, 100), info(2, 6, 300), info(3, 6, 300)], "balanced")
    assert recommended(rows) == [] and "broker 3 (fenced)" in rows[0]["note"]
    rows = recovery_candidates(part(elr=[3]), {1: up(), 2: up(), 3: down()},
                               [info(1, 6, 100), info(2, 6, 300), info(3, 6, 400)], "aggressive")
    assert recommended(rows) == [2] and by_broker(rows)[3]["rank"] == 1


def test_balanced_without_isr_elr_or_last_known_elr_requires_every_replica():
    assert required_replies(part()) == [1, 2, 3]
    assert required_replies(part(isr=[9], lke=[2])) == [2, 9]
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()}, [info(1, 6, 100), info(2, 6, 300)])
    assert recommended(rows) == [] and "broker 3 (no log info)" in rows[0]["note"]
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 100), info(2, 6, 300), info(3, 5, 900)])
    assert recommended(rows) == [2]


def test_strategy_none_recommends_nothing_but_lists_the_facts():
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up()},
                               [info(1, 6, 100), info(2, 6, 300), info(3, 6, 200)], "none")
    assert recommended(rows) == [] and [r["rank"] for r in rows] == [1, 2, 3]
    assert all(r["strategy"] == "none" for r in rows) and "operator decides" in rows[0]["note"]


def test_reply_from_a_non_replica_is_listed_and_ignored():
    rows = recovery_candidates(part(), {1: up(), 2: up(), 3: up(), 4: up()},
                               [info(4, 9, 1000), info(1, 6, 5)], "aggressive")
    assert by_broker(rows)[4]["excluded_reason"] == "not a replica of the partition"
    assert recommended(rows) == [1]


def test_unknown_strategy_is_rejected():
    with pytest.raises(ValueError):
        recovery_candidates(part(), {}, [], "proactive")


def test_describe_json_keys_are_accepted():
    p = {"topic": "orders", "topicId": TID, "partition": 0, "replicas": [1, 2], "isr": [],
         "eligibleLeaderReplicas": [2], "lastKnownElr": [], "leader": -1, "leaderEpoch": 3}
    assert recommended(recovery_candidates(p, {1: up(), 2: up()}, [])) == [2]


def test_ogs59_rxx_topic_1_log_info_after_losing_its_leader(realdata, tmp_path):
    """rxx-topic-1 at the end of the ogs59 log: replicas [1, 2, 3], ISR [3], leader 3 at epoch 6.  If broker 3
    is fenced the leader becomes -1 at epoch 7 and ISR keeps [3] (ELR off at MV 3.7).  The replica files say:
    brokers 1 and 2 wrote up to epoch 0, broker 3 up to epoch 6, all to offset 2."""
    root = realdata / "ogs59-3broker-mv3.7"
    files = []
    for b in (1, 2, 3):
        f = tmp_path / f"{b}.json"
        f.write_text(json.dumps(collect(root / f"kafka-{b}", b, 100 + b)))
        files.append(f)
    rows, _ = read_log_info(files)
    state = part(isr=[3], epoch=7, partition=1, topic="rxx-topic")
    brokers = {1: up(101), 2: up(102), 3: down(103)}
    strict = recovery_candidates(state, brokers, rows.to_pylist(), "aggressive")
    assert {r["broker"]: r["excluded_reason"] for r in strict} == {
        1: "stale leader epoch (0, partition at 7)", 2: "stale leader epoch (0, partition at 7)",
        3: "stale leader epoch (6, partition at 7)"}
    logs = recovery_candidates(state, brokers, rows.to_pylist(), "aggressive", leader_epoch_check="log")
    assert [(r["broker"], r["rank"], r["last_written_leader_epoch"], r["log_end_offset"]) for r in logs] == [
        (3, 1, 6, 2), (1, 2, 0, 2), (2, 3, 0, 2)]
    assert recommended(logs) == [1]  # broker 3 holds the newest epoch but is fenced
    balanced = recovery_candidates(state, brokers, rows.to_pylist(), "balanced", leader_epoch_check="log")
    assert recommended(balanced) == [] and "broker 3 (fenced)" in balanced[0]["note"]


def test_table_entry_point_matches_the_per_partition_function():
    parts = [part(partition=0, lke=[1]), part(partition=1, elr=[2]), part(partition=2, leader=1),
             part(partition=3, isr=[3])]
    brokers = {1: up(), 2: up(11), 3: down()}
    infos = [info(1, 6, 100, partition=0), info(2, 6, 300, partition=0), info(2, 6, 30, bepoch=11, partition=1),
             info(1, 4, 10, partition=3), info(2, 4, 20, bepoch=9, partition=3)]
    btab = pa.Table.from_pylist([{"broker_id": b, "registered": s.registered, "broker_epoch": s.broker_epoch,
                                  "fenced": s.fenced, "in_controlled_shutdown": s.in_controlled_shutdown}
                                 for b, s in brokers.items()], schema=BROKER_SCHEMA)
    ptab = pa.Table.from_pylist(parts, schema=PARTITION_SCHEMA)
    itab = pa.Table.from_pylist([{**i, "source_file": "x.json"} for i in infos], schema=LOG_INFO_SCHEMA)
    for strategy in ("balanced", "aggressive", "none"):
        got = recovery_candidates_table(ptab, btab, itab, strategy)
        assert got.schema == CANDIDATE_SCHEMA
        want = [r for p in parts for r in recovery_candidates(p, brokers, infos, strategy)]
        assert got.to_pylist() == want
    got = recovery_candidates_table(ptab, btab, itab, "aggressive").to_pylist()
    assert [(r["partition"], r["broker"]) for r in got if r["recommended"]] == [(0, 1), (1, 2), (3, 1)]  # 0: broker 2 re-registered (epoch 11)


def test_balanced_waits_for_a_last_known_elr_member_in_controlled_shutdown_aggressive_does_not():
    # broker 1, the last leader, holds the longest log and is shutting down: it cannot lead now, and
    # choosing broker 2 would throw away its 100 extra records, so balanced waits for it to come back
    draining = BrokerState(registered=True, broker_epoch=10, fenced=False, in_controlled_shutdown=True)
    brokers, replies = {1: draining, 2: up(), 3: up()}, [info(1, 6, 300), info(2, 6, 200), info(3, 6, 150)]
    rows = recovery_candidates(part(lke=[1]), brokers, replies, "balanced")
    assert recommended(rows) == []
    assert "waiting for broker 1 (in controlled shutdown)" in rows[0]["note"]
    assert by_broker(rows)[1]["alive_now"] and "cannot be elected while in controlled shutdown" in rows[0]["note"]
    assert recommended(recovery_candidates(part(lke=[1]), brokers, replies, "aggressive")) == [2]
