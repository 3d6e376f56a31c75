"""collect-log-info and read_log_info: the per-replica log info of KIP-966's GetReplicaLogInfo, read
off real broker data directories (ogs59: rxx-topic-1 on brokers 1, 2, 3) and off damaged copies."""
from __future__ import annotations

import argparse
import json
import shutil
import struct

import pyarrow as pa
import pytest

from audit import loginfo
from audit.loginfo import (
    CORRUPT_MESSAGE, KAFKA_STORAGE_ERROR, LOG_INFO_QUARANTINE_SCHEMA, LOG_INFO_SCHEMA, UNKNOWN_SERVER_ERROR,
    collect, read_log_info,
)
from jobs import collect_log_info

TOPIC_ID = "KFvSE487Q4m4j_tN115p3w"
SEGMENT = "00000000000000000000.log"


@pytest.fixture(scope="module")
def ogs59(realdata):
    return realdata / "ogs59-3broker-mv3.7"


def _walk_by_hand(path):
    """Independent reading of a segment: every batch is baseOffset(int64) batchLength(int32) and then
    batchLength bytes, with lastOffsetDelta (int32) at byte 23 of the batch.  No CRC, no checks."""
    data, pos, last = path.read_bytes(), 0, None
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        last, pos = base + delta, pos + 12 + length
    return last + 1


def _info(doc, partition=1):
    [topic] = doc["TopicPartitionLogInfoList"]
    return topic, {p["Partition"]: p for p in topic["PartitionLogInfo"]}[partition]


# What the files hold, checked by hand (xxd / cat):
#  - the three 00000000000000000000.log are byte-identical, 164 bytes: two 82-byte batches
#    (batchLength 0x46 = 70), baseOffset 0 and 1, lastOffsetDelta 0, payloads "test message 1" / "2",
#    partitionLeaderEpoch 0 in both  -> LogEndOffset 2 on every replica;
#  - leader-epoch-checkpoint of brokers 1 and 2: "0 / 1 / 0 0" -> last epoch 0;
#    of broker 3 (the leader, leader epoch 6 in the metadata log): "0 / 2 / 0 0 / 6 2" -> last epoch 6,
#    an epoch begun at offset 2 in which nothing was written yet (the batches still say epoch 0);
#  - partition.metadata: "version: 0\ntopic_id: KFvSE487Q4m4j_tN115p3w".
OGS59_RXX_TOPIC_1 = {1: (0, 2), 2: (0, 2), 3: (6, 2)}  # broker -> (last written leader epoch, log end offset)


@pytest.mark.parametrize("broker", [1, 2, 3])
def test_rxx_topic_1_log_info_is_what_the_replica_files_hold(ogs59, broker):
    folder = ogs59 / f"kafka-{broker}" / "rxx-topic-1"
    doc = collect(ogs59 / f"kafka-{broker}", broker, 17, "2025-09-22T10:00:00Z")
    topic, p = _info(doc)
    epoch, leo = OGS59_RXX_TOPIC_1[broker]
    assert topic["TopicId"] == TOPIC_ID
    assert (p["LastWrittenLeaderEpoch"], p["CurrentLeaderEpoch"], p["LogEndOffset"]) == (epoch, epoch, leo)
    assert (p["ErrorCode"], p["ErrorMessage"]) == (0, None)
    assert (doc["BrokerId"], doc["BrokerEpoch"], doc["CollectedAt"]) == (broker, 17, "2025-09-22T10:00:00Z")
    # the same numbers by an independent reading of the files
    assert _walk_by_hand(folder / SEGMENT) == leo
    lines = (folder / "leader-epoch-checkpoint").read_text().split("\n")
    assert int(lines[2 + int(lines[1]) - 1].split()[0]) == epoch


def test_metadata_log_folder_is_not_a_replica(ogs59):
    doc = collect(ogs59 / "kafka-1", 1)
    assert [t["TopicId"] for t in doc["TopicPartitionLogInfoList"]] == [TOPIC_ID]
    assert doc["BrokerEpoch"] == -1 and doc["CollectedAtOffset"] is None


@pytest.fixture
def replica_copy(ogs59, tmp_path):
    """A writable copy of broker 3's data directory (without the metadata log)."""
    root = tmp_path / "kafka-3"
    shutil.copytree(ogs59 / "kafka-3" / "rxx-topic-1", root / "rxx-topic-1")
    for f in (root / "rxx-topic-1").iterdir():
        f.chmod(0o644)
    return root


def test_torn_tail_batch_reports_the_last_complete_batch(replica_copy):
    seg = replica_copy / "rxx-topic-1" / SEGMENT
    seg.write_bytes(seg.read_bytes()[:82 + 40])  # second batch cut inside its header
    _, p = _info(collect(replica_copy, 3))
    assert (p["LogEndOffset"], p["ErrorCode"], p["ErrorMessage"]) == (1, 0, None)
    seg.write_bytes(seg.read_bytes()[:50])  # first batch cut too
    _, p = _info(collect(replica_copy, 3))
    assert (p["LogEndOffset"], p["ErrorCode"]) == (0, 0)


def test_corrupt_batch_mid_segment_is_corrupt_message_naming_file_and_byte(replica_copy):
    seg = replica_copy / "rxx-topic-1" / SEGMENT
    data = bytearray(seg.read_bytes())
    data[82 + 70] ^= 0xFF  # a payload byte of the second batch: its CRC no longer verifies
    seg.write_bytes(bytes(data))
    _, p = _info(collect(replica_copy, 3))
    assert p["ErrorCode"] == CORRUPT_MESSAGE and p["LogEndOffset"] == 1
    assert SEGMENT in p["ErrorMessage"] and "byte 82" in p["ErrorMessage"] and "CRC" in p["ErrorMessage"]


def test_empty_last_segment_gives_its_base_offset(replica_copy):
    (replica_copy / "rxx-topic-1" / "00000000000000000002.log").write_bytes(b"")
    _, p = _info(collect(replica_copy, 3))
    assert (p["LogEndOffset"], p["ErrorCode"]) == (2, 0)


def test_garbled_partition_metadata_goes_under_a_null_topic_id_with_the_name(replica_copy):
    (replica_copy / "rxx-topic-1" / "partition.metadata").write_text("version: 0\ntopic_id: not-a-uuid\n")
    doc = collect(replica_copy, 3)
    topic, p = _info(doc)
    assert topic["TopicId"] is None and topic["TopicName"] == "rxx-topic"
    assert p["ErrorCode"] == CORRUPT_MESSAGE and "partition.metadata" in p["ErrorMessage"]
    assert (p["LastWrittenLeaderEpoch"], p["LogEndOffset"]) == (6, 2)  # what could be read is kept


def test_missing_partition_metadata_is_a_storage_error(replica_copy):
    (replica_copy / "rxx-topic-1" / "partition.metadata").unlink()
    _, p = _info(collect(replica_copy, 3))
    assert p["ErrorCode"] == KAFKA_STORAGE_ERROR and "partition.metadata: missing" in p["ErrorMessage"]


@pytest.mark.parametrize("text, where", [
    ("0\n3\n0 0\n6 2\n", "line 2: entry count 3 but 2"),
    ("1\n1\n0 0\n", "line 1: version"),
    ("0\n2\n0 0\nsix 2\n", "line 4"),
    ("0\n2\n6 2\n0 0\n", "line 4: entry (0, 0) does not follow"),
])
def test_bad_leader_epoch_checkpoint_is_corrupt_message_naming_the_line(replica_copy, text, where):
    (replica_copy / "rxx-topic-1" / "leader-epoch-checkpoint").write_text(text)
    _, p = _info(collect(replica_copy, 3))
    assert p["ErrorCode"] == CORRUPT_MESSAGE
    assert "leader-epoch-checkpoint" in p["ErrorMessage"] and where in p["ErrorMessage"]
    assert p["LogEndOffset"] == 2


def test_folder_without_segment_or_partition_number_gets_error_entries(replica_copy):
    (replica_copy / "orders-0").mkdir()
    (replica_copy / "orders-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID[:-1]}A\n")
    (replica_copy / "lost+found").mkdir()
    (replica_copy / "orders-3.0123456789abcdef0123456789abcdef-delete").mkdir()  # not a live replica
    doc = collect(replica_copy, 3)
    entries = {(t["TopicId"], t.get("TopicName"), p["Partition"]): p
               for t in doc["TopicPartitionLogInfoList"] for p in t["PartitionLogInfo"]}
    assert set(entries) == {(TOPIC_ID, None, 1), (TOPIC_ID[:-1] + "A", None, 0), (None, "lost+found", -1)}
    assert entries[(TOPIC_ID[:-1] + "A", None, 0)]["ErrorCode"] == KAFKA_STORAGE_ERROR
    assert "no log segment" in entries[(TOPIC_ID[:-1] + "A", None, 0)]["ErrorMessage"]
    assert entries[(None, "lost+found", -1)]["ErrorCode"] == UNKNOWN_SERVER_ERROR


def test_cli_writes_valid_json_that_reads_back_as_rows(ogs59, tmp_path):
    ap = argparse.ArgumentParser()
    collect_log_info.add_arguments(ap)
    outs = []
    for b in (1, 2, 3):
        out = tmp_path / f"b{b}.json"
        args = ap.parse_args(["--broker-id", str(b), "--data-dir", str(ogs59 / f"kafka-{b}"), "--broker-epoch",
                              str(100 + b), "--at", "2025-09-22T12:00:00+02:00", "--at-offset", "31000", "-o", str(out)])
        assert collect_log_info.main(args) == 0
        doc = json.loads(out.read_text())
        assert doc["CollectedAt"] == "2025-09-22T10:00:00.000Z" and doc["CollectedAtOffset"] == 31000
        outs.append(out)
    rows, bad = read_log_info(outs)
    assert rows.schema == LOG_INFO_SCHEMA and bad.num_rows == 0
    got = sorted((r["broker_id"], r["broker_epoch"], r["partition"], r["last_written_leader_epoch"],
                  r["current_leader_epoch"], r["log_end_offset"], r["error_code"]) for r in rows.to_pylist())
    # broker 1's data dir holds its __cluster_metadata-0 replica: its current leader epoch is the one
    # its metadata knows at offset 31000 (6), not the last epoch its partition files hold (0)
    assert got == [(1, 101, 1, 0, 6, 2, 0), (2, 102, 1, 0, 0, 2, 0), (3, 103, 1, 6, 6, 2, 0)]


def test_cli_rejects_missing_data_dir(tmp_path):
    ap = argparse.ArgumentParser()
    collect_log_info.add_arguments(ap)
    args = ap.parse_args(["--broker-id", "1", "--data-dir", str(tmp_path / "nope"), "-o", str(tmp_path / "x.json")])
    assert collect_log_info.main(args, err=open("/dev/null", "w")) == 2


def _doc(**over):
    doc = {"BrokerId": 2, "BrokerEpoch": 40, "CollectedAt": "2025-01-01T00:00:00Z", "CollectedAtOffset": None,
           "TopicPartitionLogInfoList": [{"TopicId": TOPIC_ID, "PartitionLogInfo": [
               {"Partition": 0, "LastWrittenLeaderEpoch": 3, "CurrentLeaderEpoch": 4, "LogEndOffset": 100,
                "ErrorCode": 0, "ErrorMessage": None},
               {"Partition": 1, "LastWrittenLeaderEpoch": 3, "CurrentLeaderEpoch": 4, "LogEndOffset": 90,
                "ErrorCode": 0, "ErrorMessage": None}]}]}
    doc.update(over)
    return doc


def test_bad_entry_is_quarantined_without_dropping_its_neighbours(tmp_path):
    doc = _doc()
    doc["TopicPartitionLogInfoList"][0]["PartitionLogInfo"][0]["LogEndOffset"] = "100"
    doc["TopicPartitionLogInfoList"].append({"TopicId": "zz", "PartitionLogInfo": []})
    f = tmp_path / "a.json"
    f.write_text(json.dumps(doc))
    rows, bad = read_log_info(f)
    assert rows.column("partition").to_pylist() == [1]
    assert bad.schema == LOG_INFO_QUARANTINE_SCHEMA
    assert bad.column("json_path").to_pylist() == ["$.TopicPartitionLogInfoList[0].PartitionLogInfo[0].LogEndOffset",
                                                   "$.TopicPartitionLogInfoList[1].TopicId"]
    assert all(str(f) in r for r in bad.column("reason").to_pylist())


@pytest.mark.parametrize("content, path", [
    ("{not json", "$"),
    ("[1, 2]", "$"),
    (json.dumps(_doc(BrokerId="2")), "$.BrokerId"),
    (json.dumps(_doc(BrokerEpoch=-7)), "$.BrokerEpoch"),
    (json.dumps(_doc(TopicPartitionLogInfoList={})), "$.TopicPartitionLogInfoList"),
])
def test_unusable_file_is_one_quarantine_row(tmp_path, content, path):
    f = tmp_path / "bad.json"
    f.write_text(content)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc()))
    rows, bad = read_log_info([f, good])
    assert rows.num_rows == 2 and set(rows.column("source_file").to_pylist()) == {str(good)}
    assert bad.to_pylist() == [{"source_file": str(f), "json_path": path, "reason": bad.column("reason")[0].as_py()}]


def test_bad_collected_at_is_null_and_reported_but_entries_kept(tmp_path):
    f = tmp_path / "a.json"
    f.write_text(json.dumps(_doc(CollectedAt="yesterday")))
    rows, bad = read_log_info(f)
    assert rows.num_rows == 2 and rows.column("collected_at").null_count == 2
    assert bad.column("json_path").to_pylist() == ["$.CollectedAt"]


def test_rows_keep_unknown_topic_ids_by_name_and_reject_duplicates(tmp_path):
    doc = _doc()
    doc["TopicPartitionLogInfoList"].append({"TopicId": None, "TopicName": "orders", "PartitionLogInfo": [
        {"Partition": 0, "LastWrittenLeaderEpoch": -1, "CurrentLeaderEpoch": -1, "LogEndOffset": -1,
         "ErrorCode": 2, "ErrorMessage": "x"}]})
    doc["TopicPartitionLogInfoList"][0]["PartitionLogInfo"].append(
        dict(doc["TopicPartitionLogInfoList"][0]["PartitionLogInfo"][0]))
    f = tmp_path / "a.json"
    f.write_text(json.dumps(doc))
    rows, bad = read_log_info(f)
    assert [(r["topic_id"], r["topic_name"], r["partition"]) for r in rows.to_pylist()] == [
        (TOPIC_ID, None, 0), (TOPIC_ID, None, 1), (None, "orders", 0)]
    assert "second entry" in bad.column("reason")[0].as_py()
    assert rows.column("collected_at")[0].as_py().isoformat() == "2025-01-01T00:00:00+00:00"


def test_output_of_collect_round_trips_through_read_log_info(replica_copy, tmp_path):
    (replica_copy / "rxx-topic-1" / "partition.metadata").write_text("garbage")
    f = tmp_path / "c.json"
    f.write_text(json.dumps(collect(replica_copy, 3)))
    rows, bad = read_log_info(f)
    assert bad.num_rows == 0
    [r] = rows.to_pylist()
    assert (r["topic_id"], r["topic_name"], r["error_code"]) == (None, "rxx-topic", CORRUPT_MESSAGE)
    assert isinstance(rows, pa.Table)


def test_old_magic_message_sets_are_stepped_over():
    # two magic-1 entries (offset, size, crc, magic, ...): the last offset of the last entry + 1
    body = struct.pack(">iBBq", 0, 1, 0, 0) + struct.pack(">ii", -1, 0)
    data = b"".join(struct.pack(">qi", off, len(body)) + body for off in (10, 14))
    assert loginfo.segment_log_end_offset(data, 10).log_end_offset == 15
