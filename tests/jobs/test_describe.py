"""`kraft-audit describe`: kafka-topics.sh --describe at any offset or time, replayed from a log directory.

Expected values are worked out by hand from Kafka's own decode of the records
(../shared/realdata/expected-decode) and from the batch headers read here with ``struct``, not from the
code under test.
"""
from __future__ import annotations

import gzip
import io
import json
import shutil
import struct
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from controller_core.codec.batch import iter_batches_scalar
from controller_core.point import PointError

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ROOT / "data" / "default-cluster"
INDUS = REALDATA / "induswargods-elr-mv4.2/kafka-data"
INDUS_LOG = INDUS / "__cluster_metadata-0/00000000000000000000.log"
VASIF = REALDATA / "vasifvortex-pre3.3-fence/kafka1"
OGS = REALDATA / "ogs59-3broker-mv3.7/kafka-1"

YNY5 = "YNY5hm01SZ-bAGeCLAGqWA"  # test-topic, third incarnation (offset 3516)
DIR1 = "Teb3PFb009qvAZgMDEFH4g"  # broker 1's log directory in induswargods
ORDERS, PAYMENTS = "6bsXvKPySb-cYxa5UPJEVQ", "eh1QBo1yQQS3c4PBNFinSA"  # default-cluster's topic ids


def describe(capsys, *args) -> tuple[int, str, str]:
    rc = cli.main(["describe", *map(str, args)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def describe_json(capsys, *args) -> list[dict]:
    rc, out, err = describe(capsys, *args, "--json")
    assert rc == 0, err
    return json.loads(out)


def batch_headers(path: Path) -> list[tuple[int, int, int]]:
    """(base offset, last offset, base timestamp ms) of every batch of a segment, from the v2 header."""
    buf = path.read_bytes()
    out, pos = [], 0
    while pos < len(buf):
        base, length = struct.unpack_from(">qi", buf, pos)
        (last_delta,) = struct.unpack_from(">i", buf, pos + 23)
        (ts,) = struct.unpack_from(">q", buf, pos + 27)
        out.append((base, base + last_delta, ts))
        pos += 12 + length
    return out


def iso(ms: int, tz=timezone.utc) -> str:
    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)).astimezone(tz).isoformat(
        timespec="milliseconds")


def expected_records(rel: str) -> list[dict]:
    with gzip.open(REALDATA / "expected-decode" / (rel + ".jsonl.gz"), "rt") as fh:
        return [json.loads(line) for line in fh]


def from_partition_record(d: dict, name: str) -> dict:
    """The describe --json object a PartitionRecord stands for (absent fields: their defaults)."""
    dirs = d.get("directories") or []
    if not dirs or all(x == "AAAAAAAAAAAAAAAAAAAAAA" for x in dirs):  # §1.2-4: MIGRATING per replica
        dirs = ["AAAAAAAAAAAAAAAAAAAAAA"] * len(d["replicas"])
    return {"topic": name, "topicId": d["topicId"], "partition": d["partitionId"], "replicas": d["replicas"],
            "isr": d["isr"], "eligibleLeaderReplicas": d.get("eligibleLeaderReplicas", []),
            "lastKnownElr": d.get("lastKnownElr", []), "leader": d["leader"], "leaderEpoch": d["leaderEpoch"],
            "partitionEpoch": d["partitionEpoch"], "leaderRecoveryState": d.get("leaderRecoveryState", 0),
            "addingReplicas": d["addingReplicas"], "removingReplicas": d["removingReplicas"],
            "directories": dirs}


def snapshot_partitions(records: list[dict]) -> list[dict]:
    names = {r["data"]["topicId"]: r["data"]["name"] for r in records if r["type"] == "TOPIC_RECORD"}
    rows = [from_partition_record(r["data"], names[r["data"]["topicId"]])
            for r in records if r["type"] == "PARTITION_RECORD"]
    return sorted(rows, key=lambda o: (o["topic"], o["partition"]))


def test_leaderless_partition_with_elr_at_3594(capsys):
    # 3517 PartitionRecord [1] isr [1] leader 1 LE0 PE0; 3594 isr [] leader -1 ELR [1] LKE [1] -> LE1 PE1
    rc, out, err = describe(capsys, "--log-dir", INDUS, "--at-offset", 3594)
    assert rc == 0
    assert out == (f"Topic: test-topic\tTopicId: {YNY5}\tPartitionCount: 1\tReplicationFactor: 1\tConfigs: \n"
                   "\tTopic: test-topic\tPartition: 0\tLeader: none\tReplicas: 1\tIsr: \tElr: 1\tLastKnownElr: 1\n")
    # 3594 opens the batch 3594..3596 (3595 fences broker 1): the cut is said on stderr
    assert "offset 3594 is inside batch 3594..3596" in err
    assert describe_json(capsys, "--log-dir", INDUS, "--at-offset", 3594) == [{
        "topic": "test-topic", "topicId": YNY5, "partition": 0, "replicas": [1], "isr": [],
        "eligibleLeaderReplicas": [1], "lastKnownElr": [1], "leader": -1, "leaderEpoch": 1, "partitionEpoch": 1,
        "leaderRecoveryState": 0, "addingReplicas": [], "removingReplicas": [], "directories": [DIR1]}]


def test_elr_cleared_then_elected_back_recovering(capsys):
    # 3599: ELR [] only -> PE2, LE unchanged; 3602: isr [1] leader 1 LRS 1 LKE [] -> LE2 PE3
    [p] = describe_json(capsys, "--log-dir", INDUS, "--at-offset", 3599)
    assert (p["isr"], p["leader"], p["eligibleLeaderReplicas"], p["lastKnownElr"], p["leaderEpoch"],
            p["partitionEpoch"], p["leaderRecoveryState"]) == ([], -1, [], [1], 1, 2, 0)
    [p] = describe_json(capsys, "--log-dir", INDUS, "--at-offset", 3602)
    assert p == {"topic": "test-topic", "topicId": YNY5, "partition": 0, "replicas": [1], "isr": [1],
                 "eligibleLeaderReplicas": [], "lastKnownElr": [], "leader": 1, "leaderEpoch": 2, "partitionEpoch": 3,
                 "leaderRecoveryState": 1, "addingReplicas": [], "removingReplicas": [], "directories": [DIR1]}
    assert list(p) == ["topic", "topicId", "partition", "replicas", "isr", "eligibleLeaderReplicas", "lastKnownElr",
                       "leader", "leaderEpoch", "partitionEpoch", "leaderRecoveryState", "addingReplicas",
                       "removingReplicas", "directories"]
    # the end of the log (NoOps after 3602) is the same state
    assert describe_json(capsys, "--log-dir", INDUS) == [p]


def test_at_time_applies_whole_batches_up_to_the_boundary(capsys):
    heads = {base: (last, ts) for base, last, ts in batch_headers(INDUS_LOG)}
    # batch 3599..3600 (ELR cleared, broker 1 re-registers), then batch 3601..3602 (unfence, election)
    assert heads[3599][0] == 3600 and heads[3601][0] == 3602
    t_first, t_second = heads[3599][1], heads[3601][1]
    assert t_first < t_second

    def state_at(when: str) -> tuple[dict, str]:
        rc, out, err = describe(capsys, "--log-dir", INDUS, "--at-time", when, "--json")
        assert rc == 0, err
        [p] = json.loads(out)
        return p, err

    p, err = state_at(iso(t_second - 1))  # just before the second batch: after 3600
    assert (p["leader"], p["isr"], p["eligibleLeaderReplicas"], p["lastKnownElr"], p["partitionEpoch"]) == (
        -1, [], [], [1], 2)
    assert "after offset 3600" in err
    p, err = state_at(iso(t_second))  # exactly the second batch's timestamp: applied whole
    assert (p["leader"], p["isr"], p["leaderRecoveryState"], p["partitionEpoch"]) == (1, [1], 1, 3)
    assert "after offset 3602" in err
    # the same instant written with another offset, and as epoch milliseconds
    assert state_at(iso(t_second, timezone(timedelta(hours=2))))[0] == p
    assert state_at(str(t_second))[0] == p
    p, _ = state_at(iso(t_first - 1))  # before the first: after the 3594..3596 batch (ELR still [1])
    assert (p["leader"], p["isr"], p["eligibleLeaderReplicas"], p["partitionEpoch"]) == (-1, [], [1], 1)


@pytest.mark.parametrize("offset, flag, expected", [
    (3594, "--under-min-isr-partitions", True),   # |ISR| 0 < m = min(cluster min.insync.replicas 1, RF 1)
    (3594, "--at-min-isr-partitions", False),
    (3594, "--unavailable-partitions", True),     # leader -1
    (3594, "--elr-partitions", True),
    (3594, "--under-replicated-partitions", True),
    (3600, "--elr-partitions", False),            # cleared at 3599
    (3600, "--unavailable-partitions", True),
    (3602, "--at-min-isr-partitions", True),      # |ISR| 1 = m
    (3602, "--under-min-isr-partitions", False),
    (3602, "--unavailable-partitions", False),    # leader 1, registered at 3600 and unfenced at 3601
    (3602, "--under-replicated-partitions", False),
])
def test_partition_filters_print_only_matching_partition_lines(capsys, offset, flag, expected):
    rc, out, _ = describe(capsys, "--log-dir", INDUS, "--at-offset", offset, flag)
    assert rc == 0
    lines = out.splitlines()
    assert not any(line.startswith("Topic:") for line in lines)  # no topic lines with a partition filter
    assert len(lines) == (1 if expected else 0)
    assert all(line.startswith("\tTopic: test-topic\tPartition: 0\tLeader: ") for line in lines)
    assert len(describe_json(capsys, "--log-dir", INDUS, "--at-offset", offset, flag)) == (1 if expected else 0)


def test_unavailable_when_the_leader_is_a_fenced_broker(capsys):
    # vasifvortex: _schemas-0 replicas [3,1,2] isr [3,1,2] leader 3 (offset 9); at 65 broker 3 registers
    # again (new incarnation, fenced) while still leader
    args = ("--log-dir", VASIF, "--topic", "_schemas", "--unavailable-partitions")
    assert describe(capsys, *args, "--at-offset", 64)[1] == ""
    rc, out, _ = describe(capsys, *args, "--at-offset", 65)
    assert (rc, out) == (0, "\tTopic: _schemas\tPartition: 0\tLeader: 3\tReplicas: 3,1,2\tIsr: 3,1,2\tElr: \t"
                            "LastKnownElr: \n")


def test_effective_min_isr_is_capped_by_the_replica_count(capsys):
    # John_Snow (146-152): min.insync.replicas=3 but one replica per partition, so m = 1: at, not under
    rc, out, _ = describe(capsys, "--log-dir", VASIF, "--topic", "John_Snow")
    assert out.splitlines()[0] == ("Topic: John_Snow\tTopicId: fmuEQvoPTd-nHiKigbxKeQ\tPartitionCount: 3\t"
                                   "ReplicationFactor: 1\tConfigs: cleanup.policy=delete,min.insync.replicas=3,"
                                   "retention.ms=604800000")
    assert describe(capsys, "--log-dir", VASIF, "--topic", "John_Snow", "--under-min-isr-partitions")[1] == ""
    rc, out, _ = describe(capsys, "--log-dir", VASIF, "--topic", "John_Snow", "--at-min-isr-partitions")
    assert [line.split("\t")[2] for line in out.splitlines()] == ["Partition: 0", "Partition: 1", "Partition: 2"]


MIGRATING = "AAAAAAAAAAAAAAAAAAAAAA"


def test_records_without_directories_are_migrating_per_replica(capsys):
    # PartitionRecord v0 (pre-3.3) has no directories field: §1.2-4 / B10, Kafka reports MIGRATING for every
    # replica (never an empty list); v2 in induswargods carries real ones
    rows = describe_json(capsys, "--log-dir", VASIF)
    assert len(rows) == 54 and all(r["directories"] == [MIGRATING] * len(r["replicas"]) for r in rows)
    # ogs59 is MV 3.7 with records carrying real directories: they are kept as written
    ogs = describe_json(capsys, "--log-dir", OGS)
    assert ogs and all(len(r["directories"]) == len(r["replicas"]) and MIGRATING not in r["directories"]
                       for r in ogs)
    # _schemas-0 by hand: 9 PR leader 3; 83 isr [3,1] leader 1; 102 isr [3] leader -1; 143 leader 3;
    # 144 isr [3,2]; 145 isr [3,2,1]  ->  LE 3, PE 5
    [s] = [r for r in rows if r["topic"] == "_schemas"]
    assert (s["leader"], s["isr"], s["leaderEpoch"], s["partitionEpoch"]) == (3, [3, 2, 1], 3, 5)


def test_topic_deletion_and_name_reuse(capsys):
    at = lambda n, *more: describe_json(capsys, "--log-dir", INDUS, "--at-offset", n, *more)  # noqa: E731
    first = at(1172)  # 1169 TopicRecord + 3 PartitionRecords
    assert [(r["topicId"], r["partition"]) for r in first] == [("fVJ4Z1ZQTB-TZNDBS44j9g", p) for p in range(3)]
    assert [r["topicId"] for r in at(1503)] == ["fVJ4Z1ZQTB-TZNDBS44j9g"] * 3
    assert at(1504) == []  # RemoveTopicRecord
    rc, out, err = describe(capsys, "--log-dir", INDUS, "--at-offset", 1504, "--topic", "test-topic")
    assert (rc, out) == (2, "") and "topic 'test-topic' does not exist at that point" in err
    assert [(r["topicId"], r["partition"]) for r in at(2838)] == [("nyXeXxVUS5CsGNKqjhc6UA", 0)]
    assert at(2874) == []
    assert [(r["topicId"], r["leaderEpoch"], r["partitionEpoch"]) for r in at(3517, "--topic", "test-topic")] == [
        (YNY5, 0, 0)]


# data/default-cluster (conf/scenarios/default-cluster.yaml), by hand: each ISR starts as the replica list; the
# lagging follower 2 leaves and rejoins orders-0/-2/-3 (appended: [1,3,2], [3,1,2], [1,3,2]); the fence of 3 removes
# it everywhere and moves its leaderships to the next live replica (orders-2 -> 1, orders-4 -> 2, payments-0 -> 1);
# after the restart 3 is appended to every ISR; the preferred election gives orders-2, orders-4, payments-0 back to 3.
DEFAULT_END = """\
Topic: orders\tTopicId: 6bsXvKPySb-cYxa5UPJEVQ\tPartitionCount: 6\tReplicationFactor: 3\tConfigs: min.insync.replicas=2
\tTopic: orders\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: \tLastKnownElr: 
\tTopic: orders\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,1,3\tElr: \tLastKnownElr: 
\tTopic: orders\tPartition: 2\tLeader: 3\tReplicas: 3,1,2\tIsr: 1,2,3\tElr: \tLastKnownElr: 
\tTopic: orders\tPartition: 3\tLeader: 1\tReplicas: 1,3,2\tIsr: 1,2,3\tElr: \tLastKnownElr: 
\tTopic: orders\tPartition: 4\tLeader: 3\tReplicas: 3,2,1\tIsr: 2,1,3\tElr: \tLastKnownElr: 
\tTopic: orders\tPartition: 5\tLeader: 2\tReplicas: 2,1,3\tIsr: 2,1,3\tElr: \tLastKnownElr: 
Topic: payments\tTopicId: eh1QBo1yQQS3c4PBNFinSA\tPartitionCount: 3\tReplicationFactor: 3\tConfigs: retention.ms=604800000
\tTopic: payments\tPartition: 0\tLeader: 3\tReplicas: 3,1,2\tIsr: 1,2,3\tElr: \tLastKnownElr: 
\tTopic: payments\tPartition: 1\tLeader: 2\tReplicas: 2,3,1\tIsr: 2,1,3\tElr: \tLastKnownElr: 
\tTopic: payments\tPartition: 2\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tElr: \tLastKnownElr: 
"""  # noqa: W291


def test_default_cluster_at_the_end(capsys):
    rc, out, _ = describe(capsys, "--log-dir", DEFAULT)
    assert (rc, out) == (0, DEFAULT_END)
    # repeated and comma-separated --topic, printed in name order either way
    assert describe(capsys, "--log-dir", DEFAULT, "--topic", "payments", "--topic", "orders,payments")[1] == DEFAULT_END
    # epochs by hand: orders-2 LE 0 -> 115 leader 1 (LE1) -> 205 leader 3 (LE2); PE: 64 71 115 161 205 -> 5;
    # orders-5 (not lagging, never lost its leader 2): LE 0; PE: 118 (fence) 167 (catch-up) -> 2
    rows = {(r["topic"], r["partition"]): r for r in describe_json(capsys, "--log-dir", DEFAULT)}
    assert (rows["orders", 2]["leaderEpoch"], rows["orders", 2]["partitionEpoch"]) == (2, 5)
    assert (rows["orders", 5]["leaderEpoch"], rows["orders", 5]["partitionEpoch"]) == (0, 2)
    # directories: each replica's log directory (its RegisterBrokerRecord's logDirs), in replica order
    log_dirs = {}
    for seg in sorted((DEFAULT / "__cluster_metadata-0").glob("*.log")):
        for _, recs in iter_batches_scalar(seg.read_bytes()):
            log_dirs.update({r.data["brokerId"]: r.data["logDirs"] for r in recs if r.type == "REGISTER_BROKER_RECORD"})
    assert rows["orders", 0]["directories"] == [log_dirs[b][0] for b in (1, 2, 3)]
    assert rows["orders", 4]["directories"] == [log_dirs[b][0] for b in (3, 2, 1)]
    assert len(set(rows["orders", 0]["directories"])) == 3


def test_default_cluster_after_broker_3_is_fenced(capsys):
    # batch 113..122: every ISR loses 3. orders (min.insync.replicas=2) is then at min ISR; payments (m = 1) not
    rc, out, _ = describe(capsys, "--log-dir", DEFAULT, "--at-offset", 122, "--at-min-isr-partitions")
    assert [tuple(line.split("\t")[1:3]) for line in out.splitlines()] == [
        ("Topic: orders", f"Partition: {p}") for p in range(6)]
    assert describe(capsys, "--log-dir", DEFAULT, "--at-offset", 122, "--under-min-isr-partitions")[1] == ""
    assert len(describe(capsys, "--log-dir", DEFAULT, "--at-offset", 122, "--under-replicated-partitions")[1]
               .splitlines()) == 9
    # broker 3 is fenced, but the same batch moved its leaderships (orders-2 -> 1, orders-4 -> 2, payments-0 -> 1)
    assert describe(capsys, "--log-dir", DEFAULT, "--at-offset", 122, "--unavailable-partitions")[1] == ""


def test_default_cluster_describe_at_its_snapshot_equals_the_snapshot(capsys):
    from jobs import decode

    snap = DEFAULT / "__cluster_metadata-0/00000000000000000138-0000000002.checkpoint"
    buf = io.StringIO()
    assert decode.run([str(snap)], out=buf, err=io.StringIO()) == 0
    records = [json.loads(line) for line in buf.getvalue().splitlines()]
    want = snapshot_partitions(records)
    assert len(want) == 9
    assert describe_json(capsys, "--log-dir", DEFAULT, "--at-offset", 137) == want
    rc, out, _ = describe(capsys, "--log-dir", DEFAULT, "--at-offset", 137)
    assert [line.rsplit("Configs: ", 1)[1] for line in out.splitlines() if line.startswith("Topic:")] == [
        "min.insync.replicas=2", "retention.ms=604800000"]


@pytest.mark.parametrize("rel", [
    "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000010744-0000000004.checkpoint",
    "ogs59-3broker-mv3.7/kafka-1/__cluster_metadata-0/00000000000000020475-0000000026.checkpoint",
])
def test_describe_at_a_real_snapshots_end_equals_its_partition_records(capsys, rel):
    end = int(Path(rel).name.split("-")[0])
    want = snapshot_partitions(expected_records(rel))
    assert want
    assert describe_json(capsys, "--log-dir", REALDATA / rel.split("/__cluster")[0], "--at-offset", end - 1) == want


@pytest.fixture
def cut_log(tmp_path) -> Path:
    """induswargods with its segments' start deleted: a segment from offset 10000 and the six snapshots."""
    meta = tmp_path / "kafka-data" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    buf = INDUS_LOG.read_bytes()
    pos = 0
    for base, last, _ in batch_headers(INDUS_LOG):
        if base >= 10000:
            break
        pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    (meta / f"{base:020d}.log").write_bytes(buf[pos:])
    for snap in INDUS_LOG.parent.glob("*.checkpoint"):
        shutil.copy(snap, meta)
    return tmp_path / "kafka-data"


def test_replay_from_a_snapshot_refuses_points_before_it(capsys, cut_log):
    rc, out, err = describe(capsys, "--log-dir", cut_log, "--at-offset", 10742)
    assert (rc, out) == (2, "")
    assert "offset 10742 is before what the log covers" in err and "00000000000000010744-0000000004.checkpoint" in err
    rc, _, err = describe(capsys, "--log-dir", cut_log, "--at-time", "2026-04-06T12:00:00Z")
    assert rc == 2 and "is before what the log covers" in err
    # at the oldest snapshot's end: its state, as written in the snapshot
    rel = "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000010744-0000000004.checkpoint"
    assert describe_json(capsys, "--log-dir", cut_log, "--at-offset", 10743) == snapshot_partitions(
        expected_records(rel))
    # later points (an older snapshot than the newest is picked) agree with the replay of the complete log
    for point in (["--at-offset", 20000], ["--at-time", "2026-04-06T12:30:00Z"], []):
        assert describe(capsys, "--log-dir", cut_log, *point) == describe(capsys, "--log-dir", INDUS, *point)


def test_default_cluster_second_segment_with_its_snapshot(capsys, tmp_path):
    meta = tmp_path / "__cluster_metadata-0"
    meta.mkdir()
    shutil.copy(DEFAULT / "__cluster_metadata-0/00000000000000000126.log", meta)
    rc, _, err = describe(capsys, "--log-dir", meta, "--at-offset", 137)
    assert rc == 2 and "no snapshot covers" in err  # a segment alone, from 126: the start is gone
    shutil.copy(DEFAULT / "__cluster_metadata-0/00000000000000000138-0000000002.checkpoint", meta)
    assert describe(capsys, "--log-dir", meta, "--at-offset", 136)[0] == 2
    assert describe(capsys, "--log-dir", meta, "--at-offset", 137)[1] == describe(
        capsys, "--log-dir", DEFAULT, "--at-offset", 137)[1]
    assert describe(capsys, "--log-dir", meta)[1] == DEFAULT_END


@pytest.mark.parametrize("args, message", [
    (["--log-dir", INDUS, "--at-offset", "-1"], "offsets start at 0"),
    (["--log-dir", INDUS, "--at-offset", "51264"], "offset 51264 is past the end of the log (last offset 51263)"),
    (["--log-dir", INDUS, "--at-time", "2020-01-01T00:00:00Z"], "is before the log's first record (offset 0"),
    (["--log-dir", INDUS, "--at-time", "yesterday"], "not an ISO 8601 time"),
    (["--log-dir", "/nonexistent/kraft"], "/nonexistent/kraft: neither a __cluster_metadata-0 folder"),
    (["--lake", "/nonexistent/lake", "--cluster", "c1"], "no silver table partition_state_history; run kraft-audit replay"),
    (["--lake", "/nonexistent/lake"], "--lake and --cluster go together"),
    (["--log-dir", INDUS, "--lake", "/tmp/lake", "--cluster", "c1"], "not both"),
    ([], "give --log-dir DIR"),
])
def test_errors_exit_2_with_a_clear_message(capsys, args, message):
    rc, out, err = describe(capsys, *args)
    assert (rc, out) == (2, "")
    assert message in err


def test_offset_and_time_together_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["describe", "--log-dir", str(INDUS), "--at-offset", "1", "--at-time", "2026-04-06T12:00:00Z"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_invalid_record_is_reported_and_skipped_and_reassignment_columns(capsys, tmp_path):
    from simulator.writer import write_log

    tid = "c3ludGhldGljLXRvcGljIQ"
    broker = lambda b, fenced: ("REGISTER_BROKER_RECORD", 0, {  # noqa: E731
        "brokerId": b, "incarnationId": "AAECAwQFBgcICQoLDA0ODw", "brokerEpoch": b, "endPoints": [], "features": [],
        "fenced": fenced})
    batches = [
        [broker(1, False), broker(2, False), broker(3, True)],
        [("TOPIC_RECORD", 0, {"name": "moving", "topicId": tid})],
        [("PARTITION_CHANGE_RECORD", 0, {"partitionId": 7, "topicId": tid, "isr": [1]})],  # unknown partition
        [("PARTITION_RECORD", 0, {"partitionId": 0, "topicId": tid, "replicas": [1, 2, 3, 4], "isr": [1, 2, 3],
                                  "removingReplicas": [2], "addingReplicas": [4], "leader": 3, "leaderEpoch": 0,
                                  "partitionEpoch": 0})],
    ]
    meta = write_log(tmp_path, batches, timestamp=lambda offset: 1_700_000_000_000 + offset).parent
    rc, out, err = describe(capsys, "--log-dir", meta)
    assert rc == 0
    assert "offset 4 (PARTITION_CHANGE_RECORD)" in err and "record skipped" in err
    # Kafka's columns during a reassignment; replication factor = replicas - adding = 3
    assert out == (f"Topic: moving\tTopicId: {tid}\tPartitionCount: 1\tReplicationFactor: 3\tConfigs: \n"
                   "\tTopic: moving\tPartition: 0\tLeader: 3\tReplicas: 1,2,3,4\tIsr: 1,2,3\tAdding Replicas: 4\t"
                   "Removing Replicas: 2\tElr: \tLastKnownElr: \n")
    assert describe(capsys, "--log-dir", meta, "--unavailable-partitions")[1].startswith("\tTopic: moving")  # 3 fenced
    [p] = describe_json(capsys, "--log-dir", meta)
    assert (p["addingReplicas"], p["removingReplicas"], p["directories"]) == ([4], [2], [MIGRATING] * 4)


def test_describe_starts_without_spark_or_pandas():
    code = ("import sys; from jobs.cli import main; rc = main(['describe', '--log-dir', sys.argv[1], '--json']); "
            "sys.stderr.write(repr([m for m in ('pyspark', 'pandas') if sys.modules.get(m)])); sys.exit(rc)")
    res = subprocess.run([sys.executable, "-c", code, str(VASIF)], capture_output=True, text=True, check=True)
    assert len(json.loads(res.stdout)) == 54
    assert res.stderr.splitlines()[-1] == "[]"
    res = subprocess.run([str(Path(sys.executable).parent / "kraft-audit"), "describe", "--log-dir", str(DEFAULT),
                          "--topic", "payments"], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.startswith(f"Topic: payments\tTopicId: {PAYMENTS}")


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_the_id_lists_remembered_per_rendering_print_what_joining_each_prints(monkeypatch, cluster):
    """render joins each distinct replica / ISR / ELR list once per rendering (describe._IdLists); the text is
    the one joining every list again gives, on real logs (reassignments, ELR, empty lists) at every partition."""
    from controller_core.point import image_at
    from jobs import describe

    image, _ = image_at(REALDATA / CLUSTERS[cluster], err=io.StringIO())
    filters = dict.fromkeys(("under_min_isr", "at_min_isr", "under_replicated", "unavailable", "elr"), False)
    remembered = describe.render(image, [], filters, False)
    monkeypatch.setattr(describe, "_IdLists", lambda: describe._ids)
    assert remembered == describe.render(image, [], filters, False)
    assert remembered.count("\tPartition: ") == len(image.partitions) > 0


_NO_FILTER = dict.fromkeys(("under_min_isr", "at_min_isr", "under_replicated", "unavailable", "elr"), False)


def _both_renderings(log_dir, at_offset=None, names=()):
    """(describe's text from the state table, the reference text from the image's Partition objects) at a point."""
    from controller_core.point import replay_to, with_partitions
    from jobs import describe as d

    image, history, _ = replay_to(log_dir, at_offset=at_offset, err=io.StringIO())
    return d.render_state(image, history, list(names)), d.render(with_partitions(image, history), list(names),
                                                                  _NO_FILTER, False)


def _on_two_cores(monkeypatch) -> None:
    """Every replay and rendering on two threads, however small (controller_core/threads.py)."""
    from controller_core import threads

    monkeypatch.setattr(threads, "MIN_RECORDS", 0)
    monkeypatch.setattr(threads, "available", lambda: 2)


@pytest.mark.parametrize("two_cores", [False, True], ids=["one core", "two cores"])
@pytest.mark.parametrize("log_dir", [DEFAULT, ROOT / "data" / "last-replica-standing-elr-off",
                                     *(REALDATA / rel for rel in CLUSTERS.values())], ids=lambda p: p.parent.name)
def test_text_from_the_state_table_equals_the_partition_objects_text(log_dir, two_cores, monkeypatch):
    """describe prints its text (no filter, not --json) a column at a time from the partition state table; the
    same text as formatting each Partition object of the image, at the end of the log, after the first records,
    half way, and for the first topic alone -- also with the partition lines made in two halves on two threads."""
    import pyarrow.compute as pc

    if two_cores:
        _on_two_cores(monkeypatch)

    from controller_core.point import replay_to

    last = pc.max(replay_to(log_dir, err=io.StringIO())[1].column("offset")).as_py()
    for at in (None, 20, last // 2):
        try:
            text, ref = _both_renderings(log_dir, at)
        except PointError:  # a point the log does not reach (before its snapshot)
            continue
        assert text == ref, at
    text, ref = _both_renderings(log_dir)
    assert text.count("\tPartition: ") > 0
    first = text.split("\t", 1)[0].removeprefix("Topic: ")
    one, one_ref = _both_renderings(log_dir, names=[first])
    assert one == one_ref and one.startswith(f"Topic: {first}\t") and one.count("\nTopic: ") == 0


def test_text_from_the_state_table_during_reassignments(tmp_path, capsys, monkeypatch):
    """The same at every offset of a simulated log with two reassignments in flight (Adding / Removing columns,
    the replication factor without the adding replicas), the lines made in two halves on two threads."""
    import yaml

    _on_two_cores(monkeypatch)

    sc = {"description": "reassignments in flight", "metadata_version": "3.9-IV0", "heartbeat_interval_ms": 5000,
          "brokers": [{"id": b, "rack": r} for b, r in ((1, "a"), (2, "b"), (3, "c"), (4, "a"))],
          "topics": [{"name": "orders", "partitions": 4, "replication_factor": 3,
                      "configs": {"min.insync.replicas": 2}},
                     {"name": "audit", "partitions": 2, "replication_factor": 2}],
          "timeline": [{"at": 20, "event": "produce", "records": 500},
                       {"at": 30, "event": "reassignment", "topic": "orders", "partition": 1, "replicas": [4, 2, 3]},
                       {"at": 31, "event": "reassignment", "topic": "audit", "partition": 0, "replicas": [3, 4]},
                       {"at": 60, "event": "produce", "records": 300}]}
    (tmp_path / "sc.yaml").write_text(yaml.safe_dump(sc))
    assert cli.main(["simulate", str(tmp_path / "sc.yaml"), "-o", str(tmp_path / "re")]) == 0
    capsys.readouterr()
    moving = 0
    for at in range(60):
        try:
            text, ref = _both_renderings(tmp_path / "re", at)
        except PointError:
            break
        assert text == ref, at
        moving += "\tAdding Replicas: " in text
    assert moving > 0


def _end_both_ways(records, snapshot):
    """(the end of the log as describe's default point finds it from the last batch, as ``cut`` finds it for a
    point at the last segment offset by its pass over every row)."""
    import numpy as np
    import pyarrow.compute as pc

    from controller_core import point
    from controller_core.codec.arrowutil import to_numpy

    seg = to_numpy(pc.equal(records.column("source_kind"), "segment"))
    fast = point.cut(records, None, None, snapshot, [])
    if not seg.any():
        return fast[1], point.Reached(snapshot=snapshot)
    last = int(records.column("offset")[int(np.flatnonzero(seg)[-1])].as_py())
    return fast[1], point.cut(records, last, None, snapshot, [])[1]


@pytest.mark.parametrize("log_dir", [DEFAULT, *(REALDATA / rel for rel in CLUSTERS.values())],
                         ids=lambda p: p.parent.name)
def test_the_end_of_the_log_found_from_its_last_batch(log_dir):
    from controller_core import point
    from controller_core.replay import read_plan

    p = point.plan_for(log_dir, None, None)
    records = read_plan(p, [], partition_json=False)
    fast, ref = _end_both_ways(records, p.snapshot)
    assert fast == ref and fast.offset is not None
    assert point.cut(records, None, None, p.snapshot, [])[0] is records  # every row: no copy


def test_the_end_of_a_long_last_batch_and_of_a_snapshot_alone(cut_log):
    """A last batch of 3,000 rows (the walk back to its first row goes past its first steps), and a replay plan
    holding nothing after its snapshot (no segment row: the point is the snapshot's)."""
    import numpy as np
    import pyarrow as pa

    from controller_core import point
    from controller_core.replay import read_plan

    p = point.plan_for(cut_log, None, None)
    records = read_plan(p, [], partition_json=False)
    base = records.column("batch_base_offset").to_numpy().copy()
    base[-3000:] = base[-3000]  # the last 3,000 rows one batch
    longer = records.set_column(records.schema.get_field_index("batch_base_offset"), "batch_base_offset",
                                pa.array(base, pa.int64()))
    fast, ref = _end_both_ways(longer, p.snapshot)
    first_ms = longer.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())[-3000].as_py()
    assert fast == ref and fast.timestamp == first_ms  # the batch's time: its first record's
    snap_only = records.filter(pa.array(records.column("source_kind").to_numpy(zero_copy_only=False) != "segment"))
    fast, ref = _end_both_ways(snap_only, p.snapshot)
    assert fast == ref and fast.offset is None and np.any(records.column("source_kind").to_numpy(
        zero_copy_only=False) == "snapshot")
