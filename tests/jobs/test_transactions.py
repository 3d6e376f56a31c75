"""Metadata transactions (KIP-868; controller_core/transactions.py): what no replay applies.

A controller that fails over in the middle of a transaction leaves its records in the log, and the next active
controller writes an AbortTransactionRecord: Kafka discards those records, and no broker ever saw them (brokers
publish a transaction's records only at its EndTransactionRecord, so a transaction the log does not end is not
visible either).  The log below, written record by record as Kafka writes them (Kafka 3.9, metadata.version 21):

    0      FeatureLevelRecord metadata.version 21
    1-3    RegisterBrokerRecord 1, 2, 3
    4-5    TopicRecord orders, PartitionRecord orders-0 (replicas 1,2,3, leader 1)
    6      BeginTransactionRecord "CreateTopics"
    7-10   RemoveTopicRecord orders, TopicRecord huge, PartitionRecord huge-0, huge-1
    11     AbortTransactionRecord (a controller failover)
    12     PartitionChangeRecord orders-0 isr [1,2] (an ISR shrink, leader kept: no bump at this version)
    13     BeginTransactionRecord
    14-15  TopicRecord ok, PartitionRecord ok-0
    16     EndTransactionRecord
    17     BeginTransactionRecord
    18-19  TopicRecord late, PartitionRecord late-0 (the log ends here: never ended)

Applied, the aborted records would delete orders (its change at 12 then names no partition: INV-TOPIC-EXISTS) and
create huge; the unended ones would create late.
"""
from __future__ import annotations

import base64
import io
import json

import pytest

from controller_core import point, transactions
from controller_core.replay import read_log_dir
from jobs import cli
from lake import catalog
from simulator.writer import write_log

ORDERS, HUGE = "b3JkZXJzLXRvcGljLWlkIQ", "aHVnZS10b3BpYy1pZC0hIQ"
OK, LATE = "b2stdG9waWMtaWQtISEhIQ", "bGF0ZS10b3BpYy1pZCEhIQ"


def _partition(tid: str, p: int) -> tuple:
    return ("PARTITION_RECORD", 1, {"partitionId": p, "topicId": tid, "replicas": [1, 2, 3], "isr": [1, 2, 3],
                                    "removingReplicas": [], "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
                                    "partitionEpoch": 0, "directories": ["AAAAAAAAAAAAAAAAAAAAAA"] * 3})


def _broker(b: int) -> tuple:
    return ("REGISTER_BROKER_RECORD", 3, {
        "brokerId": b, "isMigratingZkBroker": False,
        "incarnationId": base64.urlsafe_b64encode(bytes([b]) * 16).decode()[:22], "brokerEpoch": b,
        "endPoints": [], "features": [{"name": "metadata.version", "minSupportedVersion": 1,
                                       "maxSupportedVersion": 21}], "rack": None, "fenced": False,
        "inControlledShutdown": False, "logDirs": ["AAAAAAAAAAAAAAAAAAAAAA"]})


BATCHES = [
    [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21})],
    [_broker(1), _broker(2), _broker(3)],
    [("TOPIC_RECORD", 0, {"name": "orders", "topicId": ORDERS}), _partition(ORDERS, 0)],
    [("BEGIN_TRANSACTION_RECORD", 0, {"name": "CreateTopics"})],
    [("REMOVE_TOPIC_RECORD", 0, {"topicId": ORDERS}), ("TOPIC_RECORD", 0, {"name": "huge", "topicId": HUGE}),
     _partition(HUGE, 0)],
    [_partition(HUGE, 1)],
    [("ABORT_TRANSACTION_RECORD", 0, {"reason": "controller failover"})],
    [("PARTITION_CHANGE_RECORD", 1, {"partitionId": 0, "topicId": ORDERS, "isr": [1, 2]})],
    [("BEGIN_TRANSACTION_RECORD", 0, {"name": "CreateTopics"})],
    [("TOPIC_RECORD", 0, {"name": "ok", "topicId": OK}), _partition(OK, 0)],
    [("END_TRANSACTION_RECORD", 0, {})],
    [("BEGIN_TRANSACTION_RECORD", 0, {"name": "CreateTopics"})],
    [("TOPIC_RECORD", 0, {"name": "late", "topicId": LATE}), _partition(LATE, 0)],
]
ABORTED = "note: offsets 7..10: a metadata transaction (BeginTransactionRecord at offset 6) aborted at offset 11"
UNENDED = ("note: offsets 18..19: a metadata transaction (BeginTransactionRecord at offset 17) not ended where the "
           "replay stops")


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    return write_log(tmp_path_factory.mktemp("txn"), BATCHES, timestamp=lambda o: 1_700_000_000_000 + o).parent


def _topics(capsys, *args) -> tuple[int, set, str]:
    code = cli.main(["describe", "--json", *args])
    out, err = capsys.readouterr()
    return code, {p["topic"] for p in json.loads(out)} if code == 0 else set(), err


def test_the_markers_name_what_is_discarded():
    spans = transactions.discarded([(6, transactions.BEGIN), (11, transactions.ABORT), (13, transactions.BEGIN),
                                    (16, transactions.END), (17, transactions.BEGIN)], 19)
    assert [(d.begin, d.first, d.last, d.abort) for d in spans] == [(6, 7, 10, 11), (17, 18, 19, None)]
    assert transactions.discarded([(6, transactions.BEGIN), (7, transactions.END)], 9) == []
    assert transactions.discarded([(5, transactions.ABORT), (9, transactions.BEGIN)], 9) == []  # nothing after it
    # a transaction never ended before another began (a damaged log): its records are not visible either
    spans = transactions.discarded([(2, transactions.BEGIN), (6, transactions.BEGIN), (9, transactions.END)], 12)
    assert [(d.first, d.last, d.abort) for d in spans] == [(3, 5, None)]


def test_the_scalar_reference_holds_a_transaction_as_a_broker_does(log):
    """The scalar replay (rules/verify.py) reads the batches through transactions.committed: held from a
    BeginTransactionRecord to its end, passed on at an EndTransactionRecord, dropped at an AbortTransactionRecord
    or at the end of the log -- the same records the pipeline leaves out, the same verdicts."""
    from controller_core.replay import iter_batches
    from controller_core.rules.invariants import InvariantChecker
    from controller_core.rules.verify import verify_log_dir

    kept = [r.offset for _, batch in transactions.committed(iter_batches(log, include_skipped=True)) for r in batch]
    spans = transactions.discarded([(6, transactions.BEGIN), (11, transactions.ABORT), (13, transactions.BEGIN),
                                    (16, transactions.END), (17, transactions.BEGIN)], 19)
    assert kept == [o for o in range(20) if not any(d.first <= o <= d.last for d in spans)]
    rep = verify_log_dir(log, InvariantChecker())
    assert rep.divergences == [] and [b for b in rep.breaches if b.severity == "ERROR"] == []


def test_a_log_directory_replay_leaves_out_aborted_and_unended_transactions(log, capsys):
    code, doc_topics, err = _topics(capsys, "--log-dir", str(log))
    assert code == 0 and doc_topics == {"orders", "ok"}
    notes = [line for line in err.splitlines() if "metadata transaction" in line]
    assert len(notes) == 2 and ABORTED in notes[0] and UNENDED in notes[1]
    # the change at 12 applies to orders-0, which the aborted transaction did not delete
    code = cli.main(["verify", "--log-dir", str(log), "--json"])
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert code == 0 and doc[catalog.DIVERGENCES.name] == [] and doc["invariantBreaches"] == []  # (the JSON's key)
    assert sum("metadata transaction" in line for line in err.splitlines()) == 2
    image, _ = point.image_at(log, err=io.StringIO())
    assert image.partitions[(ORDERS, 0)].isr == [1, 2]
    assert set(image.topics) == {ORDERS, OK}


def test_a_point_inside_a_transaction_sees_none_of_it(log, capsys):
    """Until its EndTransactionRecord (16), no broker saw the transaction of ok: a point before it does not hold
    ok, a point at it does."""
    code, at_15, err = _topics(capsys, "--log-dir", str(log), "--at-offset", "15")
    assert code == 0 and at_15 == {"orders"}
    assert ("note: offsets 14..15: a metadata transaction (BeginTransactionRecord at offset 13) not ended where the "
            "replay stops") in err
    assert _topics(capsys, "--log-dir", str(log), "--at-offset", "16")[1] == {"orders", "ok"}
    assert _topics(capsys, "--log-dir", str(log), "--at-offset", "9")[1] == {"orders"}


def test_without_the_rule_the_aborted_records_break_the_log(log, monkeypatch):
    """What the rule spares: applied, the aborted transaction deletes orders and the change at 12 is an error."""
    monkeypatch.setattr(transactions, "outside", lambda records, seg: (records, seg, []))
    from controller_core import pipeline

    rep, _ = pipeline.from_log_dir(log)
    rules = set(rep.breaches.column("rule").to_pylist())
    assert "INV-TOPIC-EXISTS" in rules and rep.notes == []


def test_the_lake_replay_leaves_out_the_same_records(log, tmp_path, spark, capsys):
    from lake.delta import Lake

    lake = str(tmp_path / "lake")
    assert cli.main(["ingest", "--cluster", "t", "--log-dir", str(log.parent), "--lake", lake]) == 0
    capsys.readouterr()
    assert cli.main(["replay", "--cluster", "t", "--lake", lake]) == 0
    err = capsys.readouterr().err
    assert ABORTED in err and UNENDED in err
    rows = Lake(lake, spark).read(catalog.PARTITION_STATE.name).collect()
    assert {(r.topic_id, r.partition_id, tuple(r.isr)) for r in rows} == {(ORDERS, 0, (1, 2)), (OK, 0, (1, 2, 3))}
    breaches = Lake(lake, spark).read(catalog.INVARIANT_BREACHES.name).collect()
    assert [b.rule for b in breaches if b.severity == "ERROR"] == []
    # the checkpoint stays before the unended transaction: the next replay reads it again (and nothing changed)
    ckpt = Lake(lake, spark).read(catalog.REPLAY_CHECKPOINTS.name).collect()
    assert [c.last_offset for c in ckpt] == [17]
    assert cli.main(["replay", "--cluster", "t", "--lake", lake]) == 0
    rows = Lake(lake, spark).read(catalog.PARTITION_STATE.name).collect()
    assert {(r.topic_id, r.partition_id) for r in rows} == {(ORDERS, 0), (OK, 0)}


def test_the_markers_are_found_with_or_without_type_numbers(log):
    """A replay finds the markers through the rows' type numbers (record_type_id, is_control), or through their
    type names in a table without them (a lake written before record_type_id): the same transactions."""
    from controller_core import pipeline

    rows, _ = read_log_dir(log, [], partition_json=False)
    seg = pipeline.segment_rows(rows)
    by_number = transactions.of_rows(rows, seg)
    by_name = transactions.of_rows(rows.drop_columns(["record_type_id"]), seg)
    assert by_number == by_name and [(d.first, d.last) for d in by_number] == [(7, 10), (18, 19)]
