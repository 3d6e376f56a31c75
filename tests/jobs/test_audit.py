"""`kraft-audit audit` / `plan` / `collect-log-info` end to end on the real logs (log-directory mode,
no Spark), and the log-info bronze table.  The lake mode is tested with the replay (test_replay.py)."""
from __future__ import annotations

import io
import json
import shutil

import pytest

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA

# What the audit must find on each real log, above INFO, as {(severity, code): findings}, and why.  Every
# cluster-wide outage (no broker active: CLUSTER_DOWN; nobody writing the log: METADATA_GAP) is one finding,
# and the partition windows inside it are INFO (they are the outage's, audit/cluster_events.py).
EXPECTED = {
    # one broker (RF 1, combined mode) stopped again and again: 8 periods with no broker active, 6 metadata
    # gaps (no controller ran: 2.8 min - 16 days) inside them; the 430 OFFLINE windows of its 60 partitions are
    # the outages' (INFO), 60 still open at the end of the log
    "arthurarutunyan04": {("WARN", "CLUSTER_DOWN"): 8, ("WARN", "METADATA_GAP"): 6},
    # test-topic-0 (one replica, ELR on): broker 1, the only broker, fenced at 3594 (the cluster is down,
    # so its offline windows are INFO), its unclean restart at 3599 empties the ELR, and at 3602 Kafka
    # elects it back as the last known leader, RECOVERING: an unclean election (controller-rules §2.3-3)
    # with unclean.leader.election.enable not set for the topic (INV-UNCLEAN-CONFIG); two more stops of
    # the broker, 2 metadata gaps (3.8 min after offset 183, 18 h after offset 51221)
    "induswargods": {("ERROR", "UNCLEAN_ELECTION"): 1, ("WARN", "CLUSTER_DOWN"): 3, ("WARN", "METADATA_GAP"): 2,
                     ("WARN", "INV-OFFLINE-NO-CANDIDATE"): 1, ("WARN", "INV-UNCLEAN-ELECTION"): 1,
                     ("WARN", "INV-UNCLEAN-CONFIG"): 1},
    # every broker is down at the end of the log (broker 1, the sole ISR member of the 9 partitions, among
    # them): one open CLUSTER_DOWN, the 9 open OFFLINE windows are its
    "mavila01": {("WARN", "CLUSTER_DOWN"): 1},
    # a dev cluster of 3 combined nodes restarted over and over: 12 periods with no broker active, 3 metadata
    # gaps (48 min, 7 min, 3.5 min: 2 of 3 nodes down, no quorum); the 112 OFFLINE windows of 56 partitions
    # around offsets 26144-26389 are inside them
    "ogs59": {("WARN", "CLUSTER_DOWN"): 12, ("WARN", "METADATA_GAP"): 3},
    # pre-3.3 fences at 66-102 take the three brokers down one by one (a restart): 35 single-replica
    # partitions offline for 2-6 s across it (INFO); John_Snow sets min.insync.replicas=3 on a replication
    # factor of 1 (silently capped to 1).  Kafka < 3.3 writes no NoOp heartbeats: its silences of 49 and
    # 6.7 min are no metadata gaps
    "vasifvortex": {("WARN", "MIN_ISR_ABOVE_RF"): 1, ("WARN", "CLUSTER_DOWN"): 1},
}
# The incidents of each real log, {(severity, cause): incidents}: outages closer than a minute are one
# restart; every finding above INFO but the topic settings belongs to one.
EXPECTED_INCIDENTS = {
    "arthurarutunyan04": {("WARN", "CLUSTER_RESTART"): 7},
    "induswargods": {("ERROR", "CLUSTER_RESTART"): 1, ("WARN", "CLUSTER_RESTART"): 2, ("WARN", "METADATA_GAP"): 1},
    "mavila01": {("WARN", "CLUSTER_RESTART"): 1},
    "ogs59": {("WARN", "CLUSTER_RESTART"): 10},
    "vasifvortex": {("WARN", "CLUSTER_RESTART"): 1},
}


def _audit(argv, capsys):
    code = cli.main(["audit", *argv])
    return code, capsys.readouterr()


@pytest.mark.parametrize("cluster", sorted(EXPECTED))
def test_audit_finds_what_each_real_log_holds(cluster, capsys):
    code, cap = _audit(["--log-dir", str(REALDATA / CLUSTERS[cluster]), "--json", "--all"], capsys)
    doc = json.loads(cap.out)
    got = {(c["severity"], c["code"]): c["findings"] for c in doc["counts"] if c["severity"] != "INFO"}
    assert got == EXPECTED[cluster]
    worst = "ERROR" if any(s == "ERROR" for s, _ in got) else "WARN"
    assert doc["worstSeverity"] == worst
    assert code == (1 if worst == "ERROR" else 0)  # default --fail-on ERROR
    for f in doc["findings"]:  # every finding names its partition and says something an operator reads
        assert f["explanation"] and f["code"] and f["severity"] in ("ERROR", "WARN", "INFO")
    incidents = {}
    for i in doc["incidents"]:
        incidents[(i["severity"], i["cause"])] = incidents.get((i["severity"], i["cause"]), 0) + 1
    assert incidents == EXPECTED_INCIDENTS[cluster]
    ids = {i["incident_id"] for i in doc["incidents"]}
    loose = {(f["code"], f["first_offset"]) for f in doc["findings"] if f["incident_id"] is None and f["severity"] != "INFO"
             and f["code"] not in ("MIN_ISR_ABOVE_RF", "UNCLEAN_CONFIG", "MIN_ISR_CHANGE_CLEARED_ELR")}
    assert not loose and {f["incident_id"] for f in doc["findings"]} - {None} == ids
    # no partition window across a cluster-wide outage is an ERROR: the outage is the one finding
    outages = [(f["first_time"], f["last_time"] or "9999") for f in doc["findings"]
               if f["code"] in ("CLUSTER_DOWN", "METADATA_GAP")]
    for f in doc["findings"]:
        if f["partition"] is not None and f["severity"] == "ERROR" and f["first_time"] != f["last_time"]:
            end = f["last_time"] or "9999"
            assert not [o for o in outages if o[0] <= end and o[1] >= f["first_time"]], f


def test_fail_on_and_text_summary(capsys):
    log = str(REALDATA / CLUSTERS["vasifvortex"])
    code, cap = _audit(["--log-dir", log], capsys)
    assert code == 0 and "Worst severity: WARN" in cap.out and "MIN_ISR_ABOVE_RF" in cap.out
    assert "John_Snow" in cap.out  # the explanation names the topic
    code, cap = _audit(["--log-dir", log, "--fail-on", "WARN"], capsys)
    assert code == 1 and "FAIL (exit 1)" in cap.out


def test_audit_as_of_an_offset_sees_only_the_past(capsys):
    log = str(REALDATA / CLUSTERS["induswargods"])
    code, cap = _audit(["--log-dir", log, "--json", "--all", "--at-offset", "3598"], capsys)
    doc = json.loads(cap.out)
    assert doc["atOffset"] == 3598
    codes = {c["code"] for c in doc["counts"]}
    assert "UNCLEAN_ELECTION" not in codes and "OFFLINE_NO_CANDIDATE" not in codes
    offline = [f for f in doc["findings"] if f["code"] == "OFFLINE"]
    assert len(offline) == 1 and offline[0]["open"] and offline[0]["first_offset"] == 3594
    # at 3598 test-topic-0 is leaderless with ELR [1] (broker 1 fenced): one candidate row, broker 1
    cands = doc["recoveryCandidates"]
    assert [(c["broker"], c["in_elr"], c["alive_now"]) for c in cands] == [(1, True, False)]
    assert code == 0


def test_audit_errors_are_clear(capsys, tmp_path):
    code = cli.main(["audit", "--cluster", "nope", "--lake", str(tmp_path / "lake")])
    assert code == 2
    assert "kraft-audit replay" in capsys.readouterr().err


# ------------------------------------------------------------------------------- log info and plans
OGS = REALDATA / "ogs59-3broker-mv3.7"


@pytest.fixture(scope="module")
def ogs_log_info(tmp_path_factory):
    out = tmp_path_factory.mktemp("loginfo")
    files = []
    for b in (1, 2, 3):
        f = out / f"broker-{b}.json"
        assert cli.main(["collect-log-info", "--broker-id", str(b), "--data-dir", str(OGS / f"kafka-{b}"),
                         "--at", "2025-09-22T14:31:30Z", "-o", str(f)]) == 0
        files.append(f)
    return files


def test_collect_log_info_cli_on_the_three_replicas(ogs_log_info):
    docs = [json.loads(f.read_text()) for f in ogs_log_info]
    got = {d["BrokerId"]: [(t["TopicId"], p["Partition"], p["LastWrittenLeaderEpoch"], p["LogEndOffset"])
                           for t in d["TopicPartitionLogInfoList"] for p in t["PartitionLogInfo"]] for d in docs}
    # rxx-topic-1 as each broker stores it: two one-record batches (LEO 2); broker 3's checkpoint ends at epoch 6
    assert got == {1: [("KFvSE487Q4m4j_tN115p3w", 1, 0, 2)], 2: [("KFvSE487Q4m4j_tN115p3w", 1, 0, 2)],
                   3: [("KFvSE487Q4m4j_tN115p3w", 1, 6, 2)]}


def test_log_info_ingest_is_idempotent_and_quarantines_bad_files(ogs_log_info, tmp_path):
    from lake import catalog, gold
    from lake.delta import Lake

    bad = tmp_path / "broker-9.json"
    bad.write_text('{"BrokerId": 9, "BrokerEpoch": 3, "TopicPartitionLogInfoList": [{"TopicId": "x", '
                   '"PartitionLogInfo": [{"Partition": "zero"}]}]}')
    lake = Lake(tmp_path / "lake", None, backend="delta-rs")
    paths = [str(f) for f in ogs_log_info] + [str(bad)]
    n, q = gold.ingest_log_info(lake, "ogs59", paths)
    assert n == 3 and q.num_rows == 1 and "broker-9.json" in q.column("source_file")[0].as_py()
    v = lake.version(catalog.REPLICA_LOG_INFO.name)
    assert gold.ingest_log_info(lake, "ogs59", paths)[0] == 3
    rows = gold.log_info_from_lake(lake, "ogs59")
    assert rows.num_rows == 3  # re-ingesting replaced, not duplicated
    assert sorted(rows.column("broker_id").to_pylist()) == [1, 2, 3]
    assert lake.version(catalog.REPLICA_LOG_INFO.name) > v
    assert lake.read_arrow(catalog.REPLICA_LOG_INFO_QUARANTINE.name).num_rows == 1


def test_recovery_with_log_info_at_a_leaderless_point(ogs_log_info, capsys):
    # at offset 26200 rxx-topic-1 is leaderless; the replies were read off disk later (epochs 0 and 6 vs
    # the partition's): strict checking refuses them all, and balanced recovery names who is missing
    argv = ["--log-dir", str(OGS / "kafka-1"), "--json", "--all", "--at-offset", "26200", "--log-info", str(ogs_log_info[0]),
            "--log-info", str(ogs_log_info[1]), "--log-info", str(ogs_log_info[2])]
    _, cap = _audit(argv, capsys)
    cands = [c for c in json.loads(cap.out)["recoveryCandidates"] if c["topic"] == "rxx-topic" and c["partition"] == 1]
    assert {c["broker"] for c in cands} == {1, 2, 3}
    assert not any(c["recommended"] for c in cands)
    reason = {c["broker"]: (c["excluded_reason"] or "").split(" (")[0] for c in cands}
    # broker 1's reply says it was captured at metadata offset 31932, after the audited point: not used
    assert reason == {1: "no log info", 2: "stale leader epoch", 3: "stale leader epoch"}


def test_collected_log_info_carries_what_the_brokers_metadata_knows(ogs_log_info):
    from controller_core.point import image_at

    image, reached = image_at(str(OGS / "kafka-1"))
    doc = json.loads(ogs_log_info[0].read_text())  # kafka-1 holds a __cluster_metadata-0 replica
    part = doc["TopicPartitionLogInfoList"][0]["PartitionLogInfo"][0]
    assert doc["BrokerEpoch"] == image.brokers[1].epoch and doc["CollectedAtOffset"] == reached.offset
    assert part["CurrentLeaderEpoch"] == image.partitions[("KFvSE487Q4m4j_tN115p3w", 1)].leader_epoch == 6
    other = json.loads(ogs_log_info[1].read_text())  # kafka-2 has no metadata replica: unknown stays -1
    assert other["BrokerEpoch"] == -1 and other["CollectedAtOffset"] is None


def test_plan_cli_writes_kafka_tool_files(tmp_path, capsys):
    # induswargods at offset 3598: test-topic-0 leaderless, its only replica (ELR member) fenced: no clean
    # candidate, and no active replica either, so the unclean plan has nothing it could run yet
    out = tmp_path / "plan"
    code = cli.main(["plan", "--log-dir", str(REALDATA / CLUSTERS["induswargods"]), "--at-offset", "3598",
                     "--election-type", "unclean", "-o", str(out)])
    assert code == 0
    assert (out / "PLAN.md").is_file()
    text = capsys.readouterr().out
    assert "test-topic" in text
    # ogs59 at the end: every leader is its preferred replica or the preferred one is down; the files that
    # are written have exactly kafka-leader-election.sh's shape
    out2 = tmp_path / "plan2"
    assert cli.main(["plan", "--log-dir", str(REALDATA / CLUSTERS["ogs59"]), "--election-type", "preferred",
                     "-o", str(out2)]) == 0
    for f in out2.glob("election-*.json"):  # plan-manifest.json is plan's own record of its files
        doc = json.loads(f.read_text())
        assert set(doc) == {"partitions"}
        assert all(set(p) == {"topic", "partition"} for p in doc["partitions"])


def test_collect_log_info_on_a_damaged_copy_reports_errors(tmp_path, capsys):
    d = tmp_path / "kafka-2"
    shutil.copytree(OGS / "kafka-2", d)
    seg = d / "rxx-topic-1" / "00000000000000000000.log"
    seg.write_bytes(seg.read_bytes()[:100])  # torn in the second batch
    (d / "rxx-topic-1" / "partition.metadata").write_text("garbage")
    out = io.StringIO()
    assert cli.main(["collect-log-info", "--broker-id", "2", "--data-dir", str(d), "-o", str(tmp_path / "o.json")]) == 0
    doc = json.loads((tmp_path / "o.json").read_text())
    entries = [p for t in doc["TopicPartitionLogInfoList"] for p in t["PartitionLogInfo"]]
    assert len(entries) == 1 and entries[0]["ErrorCode"] != 0
    assert "partition.metadata" in entries[0]["ErrorMessage"]
    assert out.getvalue() == ""


def test_audit_at_a_time_resolves_to_the_last_record_written_by_then(capsys):
    # induswargods: offset 3598 (a NoOp) was written at 1775473338080 ms, 3599 (the unclean-shutdown
    # handling) at ...145: a time between them audits through 3598, NoOps included
    log = str(REALDATA / CLUSTERS["induswargods"])
    code, cap = _audit(["--log-dir", log, "--json", "--at-time", "1775473338100"], capsys)
    doc = json.loads(cap.out)
    assert doc["atOffset"] == 3598 and doc["atTime"].startswith("2026-04-06T11:02:18.08")
    assert "OFFLINE_NO_CANDIDATE" not in {c["code"] for c in doc["counts"]}
    code, cap = _audit(["--log-dir", log, "--json", "--at-time", "2026-04-06T11:02:18.300Z"], capsys)
    assert json.loads(cap.out)["atOffset"] == 3602  # after the re-election batch (…212 ms)


def test_a_metadata_gap_is_one_finding_and_no_window_counts_its_time(tmp_path, capsys):
    """The cluster is stopped for an hour while a partition is offline: one METADATA_GAP of an hour; the
    OFFLINE window across it lasts milliseconds of controller time, so it is not raised to ERROR.  A log
    without NoOp heartbeats (Kafka < 3.3) proves nothing by its silence: no gap there."""
    from log_builder import Log
    from simulator.writer import write_log

    log = Log(25)
    log.create("t", [1, 2, 3])
    log.add(("NO_OP_RECORD", 0, {}))  # a controller with heartbeats (Kafka >= 3.3): its silence means something
    [down] = log.add(log.change("t", 0, isr=[1], leader=-1))
    resume = log.next_offset
    [up] = log.add(log.change("t", 0, leader=1))
    log.add(("NO_OP_RECORD", 0, {}))
    hour = 3_600_000
    write_log(tmp_path / "d", [recs for _, recs in log.batches],
              timestamp=lambda base: 1_700_000_000_000 + base + (hour if base >= resume else 0))
    _, cap = _audit(["--log-dir", str(tmp_path / "d"), "--json", "--all"], capsys)
    doc = json.loads(cap.out)
    [gap] = [f for f in doc["findings"] if f["code"] == "METADATA_GAP"]
    assert (gap["severity"], gap["first_offset"], gap["last_offset"]) == ("WARN", down, resume)
    assert gap["duration_ms"] >= hour
    [offline] = [f for f in doc["findings"] if f["code"] == "OFFLINE"]
    assert (offline["first_offset"], offline["last_offset"]) == (down, up)
    # not an hour-long ERROR: the gap's (INFO), and it lasted milliseconds of controller time
    assert offline["duration_ms"] < 1000 and offline["severity"] == "INFO"
    assert "(60.0 min) in which no controller wrote the log" in offline["explanation"]
    [incident] = doc["incidents"]
    # the gap, and the partition's OFFLINE and AT_MIN_ISR (ISR [1], min ISR 1, of 3 replicas) windows across it
    assert (incident["cause"], incident["findings"], incident["partitions"]) == ("METADATA_GAP", 3, 1)
    assert incident["codes"] == ["METADATA_GAP", "AT_MIN_ISR", "OFFLINE"]
    assert offline["incident_id"] == gap["incident_id"] == incident["incident_id"]
    # without the gap rule the same window is an hour long and an ERROR (audit.long_window_ms: 10 min)
    conf = tmp_path / "nogap.yaml"
    conf.write_text("audit:\n  metadata_gap_ms: 0\n")
    _, cap = _audit(["--log-dir", str(tmp_path / "d"), "--json", "--all", "--conf", str(conf)], capsys)
    plain = json.loads(cap.out)
    [offline] = [f for f in plain["findings"] if f["code"] == "OFFLINE"]
    assert offline["duration_ms"] >= hour and offline["severity"] == "ERROR"
    assert not [f for f in plain["findings"] if f["code"] == "METADATA_GAP"]
    silent = [(i, [r for r in recs if r[0] != "NO_OP_RECORD"]) for i, recs in log.batches]
    write_log(tmp_path / "old", [recs for _, recs in silent if recs],
              timestamp=lambda base: 1_700_000_000_000 + base + (hour if base >= resume - 1 else 0))
    _, cap = _audit(["--log-dir", str(tmp_path / "old"), "--json", "--all"], capsys)
    assert not [f for f in json.loads(cap.out)["findings"] if f["code"] == "METADATA_GAP"]


def test_collect_log_info_refuses_another_brokers_data_dir(tmp_path, capsys):
    # ogs59's kafka-1 is broker 1 (its meta.properties: node.id=1): --broker-id 2 is refused, one line naming both
    out = tmp_path / "o.json"
    meta = OGS / "kafka-1" / "meta.properties"
    assert cli.main(["collect-log-info", "--broker-id", "2", "--data-dir", str(OGS / "kafka-1"), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--broker-id 2" in err and "node.id=1" in err and str(meta) in err
    assert "Traceback" not in err and not out.exists()
    # the second of two data dirs disagrees: still refused, naming that one
    sim = tmp_path / "sim"
    sim.mkdir()
    (sim / "meta.properties").write_text("#\n#Thu Jan 01 00:00:00 GMT 2026\nversion=1\nnode.id : 7\ncluster.id=x\n")
    assert cli.main(["collect-log-info", "--broker-id", "1", "--data-dir", str(OGS / "kafka-1"),
                     "--data-dir", str(sim), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "node.id=7" in err and str(sim / "meta.properties") in err
    # a node.id that is no number: refused; the matching id: accepted
    (sim / "meta.properties").write_text("node.id=seven\n")
    assert cli.main(["collect-log-info", "--broker-id", "7", "--data-dir", str(sim), "-o", str(out)]) == 2
    assert "'seven'" in capsys.readouterr().err
    (sim / "meta.properties").write_text("node.id=7\n")
    assert cli.main(["collect-log-info", "--broker-id", "7", "--data-dir", str(sim), "-o", str(out)]) == 0
    # no meta.properties: accepted, nothing said about it
    (sim / "meta.properties").unlink()
    assert cli.main(["collect-log-info", "--broker-id", "7", "--data-dir", str(sim), "-o", str(out)]) == 0
    assert "meta.properties" not in capsys.readouterr().err


def test_collect_log_info_on_a_simulated_data_dir_checks_its_node_id(tmp_path, capsys):
    # the simulator writes meta.properties for its data node (default: the first controller)
    assert cli.main(["simulate", "default-cluster", "-o", str(tmp_path / "d")]) == 0
    capsys.readouterr()
    props = dict(line.split("=", 1) for line in (tmp_path / "d" / "meta.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    node = int(props["node.id"])
    out = str(tmp_path / "o.json")
    assert cli.main(["collect-log-info", "--broker-id", str(node), "--data-dir", str(tmp_path / "d"), "-o", out]) == 0
    capsys.readouterr()
    assert cli.main(["collect-log-info", "--broker-id", str(node + 1), "--data-dir", str(tmp_path / "d"), "-o", out]) == 2
    assert f"node.id={node}" in capsys.readouterr().err
