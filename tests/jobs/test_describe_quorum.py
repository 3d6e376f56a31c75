"""describe --quorum: the metadata quorum's history from the log, checked against the LeaderChange control
records as `kraft-audit decode` (kafka-dump-log's JSON) prints them, on every real log and on a simulated
3-controller quorum with a controller failover."""
from __future__ import annotations

import json

import pytest

from jobs import cli
from realdata_facts import CLUSTERS, REALDATA


def _decoded_leader_changes(log_dir, capsys) -> list[tuple[int, int, int]]:
    """(offset, batch leader epoch, leaderId) of every LeaderChange of the segments, from decode's JSON."""
    assert cli.main(["decode", str(log_dir)]) in (0, 1)
    out = []
    for line in capsys.readouterr().out.splitlines():
        r = json.loads(line)
        if r.get("type") == "LEADER_CHANGE" and r["file"].endswith(".log"):
            out.append((r["offset"], r["batchLeaderEpoch"], r["data"]["leaderId"]))
    return sorted(out)


def _quorum(log_dir, capsys, *extra) -> dict:
    assert cli.main(["describe", "--log-dir", str(log_dir), "--quorum", "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_quorum_history_of_every_real_log_is_its_leader_changes(cluster, capsys):
    log = REALDATA / CLUSTERS[cluster]
    want = _decoded_leader_changes(log, capsys)
    doc = _quorum(log, capsys)
    got = [(e["offset"], e["epoch"], e["leaderId"]) for e in doc["elections"]]
    assert got == want
    if want:
        assert (doc["leaderId"], doc["epoch"], doc["leaderSince"]) == (want[-1][2], want[-1][1], want[-1][0])
        epochs = [e for _, e, _ in want]
        assert epochs == sorted(epochs)  # a Raft epoch never goes back
    else:
        assert doc["leaderId"] is None and doc["elections"] == []
    # its stalls are the audit's metadata gaps (one definition: audit/gaps.py)
    assert cli.main(["audit", "--log-dir", str(log), "--json", "--all"]) in (0, 1)
    gaps = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["code"] == "METADATA_GAP"]
    assert [(s["afterOffset"], s["beforeOffset"]) for s in doc["stalls"]] == sorted(
        (f["first_offset"], f["last_offset"]) for f in gaps)


def test_simulated_failover_and_the_point_in_time(tmp_path, capsys):
    d = tmp_path / "sim"
    assert cli.main(["simulate", "default-cluster", "-o", str(d), "--seed", "7"]) == 0
    capsys.readouterr()
    doc = _quorum(d, capsys)
    leaders = [(e["epoch"], e["leaderId"]) for e in doc["elections"]]
    assert leaders[0][1] == 3 and leaders[-1][1] == 1 and leaders[-1][0] > leaders[0][0]  # node 1 wins epoch 2
    assert {v["voterId"] for v in doc["voters"]} == {1, 2, 3}
    assert [c["controllerId"] for c in doc["controllers"]] == [1, 2, 3]
    failover = doc["elections"][-1]
    assert failover["silentMs"] >= 1500  # the simulator's failover pauses the log 1.5-3 s
    # as of the offset before the failover: the first leader still leads
    before = _quorum(d, capsys, "--at-offset", str(failover["offset"] - 1))
    assert (before["leaderId"], before["epoch"]) == leaders[0][::-1]
    props = dict(line.split("=", 1) for line in (d / "meta.properties").read_text().splitlines()
                 if "=" in line and not line.startswith("#"))
    dd = doc["dataDirectory"]
    assert dd["nodeId"] == props["node.id"] and dd["isVoter"] == (int(props["node.id"]) in {1, 2, 3})
    assert cli.main(["describe", "--quorum", "--log-dir", str(d)]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"ActiveController: 1\tEpoch: {leaders[-1][0]}")
    assert f"Elections: {len(leaders)}" in text


def test_a_controller_unregistered_by_kafka_4_4_leaves_the_quorum_list(tmp_path, capsys):
    """UnregisterControllerRecord (apiKey 29, metadata.version 4.4-IV2) is decoded and taken into account."""
    from simulator.writer import write_log

    def register(cid, inc):
        return ("REGISTER_CONTROLLER_RECORD", 0, {"controllerId": cid, "incarnationId": inc, "zkMigrationReady": False,
                                                   "endPoints": [], "features": []})

    write_log(tmp_path, [[("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": 21})],
                         [register(3000, "AAAAAAAAAAAAAAAAAAAAAQ"), register(3001, "AAAAAAAAAAAAAAAAAAAAAg")],
                         [("UNREGISTER_CONTROLLER_RECORD", 0, {"controllerId": 3001})]])
    assert cli.main(["decode", str(tmp_path)]) == 0
    [rec] = [json.loads(x) for x in capsys.readouterr().out.splitlines() if "UNREGISTER_CONTROLLER" in x]
    assert (rec["offset"], rec["data"]) == (3, {"controllerId": 3001})
    doc = _quorum(tmp_path, capsys)
    assert [c["controllerId"] for c in doc["controllers"]] == [3000]


VOTER_CHANGE = """\
name: voter-change
description: a 3-controller quorum (combined nodes 1-3) with a controller failover, then node 4 joins the voters
  and node 1 leaves them (KIP-853)
metadata_version: 3.9-IV0
controllers: [1, 2, 3]
brokers:
  - {id: 1, rack: a}
  - {id: 2, rack: b}
  - {id: 3, rack: c}
topics:
  - {name: payments, partitions: 2, replication_factor: 3}
end_after_s: 120
timeline:
  - {at: 30, event: controller_failover, to: 2, description: "node 2 wins epoch 2"}
  - {at: 60, event: voter_change, add: 4, description: "AddRaftVoter 4"}
  - {at: 90, event: voter_change, remove: 1, description: "RemoveRaftVoter 1"}
"""


def test_simulated_voter_change_shows_the_voters_before_and_after(tmp_path, capsys):
    """Issue 14 item 2: on a simulated 3-controller quorum with a failover and a voter change, describe --quorum
    shows the voters before and after each change, with their directory ids, as the VotersRecords say."""
    scenario = tmp_path / "voter-change.yaml"
    scenario.write_text(VOTER_CHANGE)
    d = tmp_path / "sim"
    assert cli.main(["simulate", str(scenario), "-o", str(d), "--seed", "3"]) == 0
    capsys.readouterr()
    assert cli.main(["decode", str(d)]) == 0
    decoded = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    voters_records = [r for r in decoded if r["type"] == "KRAFT_VOTERS" and r["file"].endswith(".log")]
    assert [r["type"] for r in decoded if r["type"] == "KRAFT_VERSION" and r["file"].endswith(".log")] == \
        ["KRAFT_VERSION"]
    dirs = {v["voterId"]: v["voterDirectoryId"] for r in voters_records for v in r["data"]["voters"]}

    doc = _quorum(d, capsys)
    assert [e["leaderId"] for e in doc["elections"]] == [1, 2]  # the failover
    assert doc["kraftVersion"]["level"] == 1
    changes = doc["voterChanges"]
    assert [c["offset"] for c in changes] == [r["offset"] for r in voters_records]
    assert [([v["voterId"] for v in c["voters"]], c["added"], c["removed"]) for c in changes] == [
        ([1, 2, 3], [], []), ([1, 2, 3, 4], [4], []), ([2, 3, 4], [], [1])]
    assert all(v["directoryId"] == dirs[v["voterId"]] for c in changes for v in c["voters"])
    assert len(set(dirs.values())) == 4
    assert doc["voters"] == [{"voterId": i, "directoryId": dirs[i]} for i in (2, 3, 4)]
    assert doc["votersFrom"] == "VotersRecord"
    assert 4 in [c["controllerId"] for c in doc["controllers"]]  # the new voter registered its controller

    # before the change: the voters of the LeaderChange, no VotersRecord yet
    before = _quorum(d, capsys, "--at-offset", str(changes[0]["offset"] - 2))
    assert before["voterChanges"] == [] and before["votersFrom"] == "LeaderChange"
    assert [v["voterId"] for v in before["voters"]] == [1, 2, 3]

    assert cli.main(["describe", "--log-dir", str(d), "--quorum"]) == 0
    text = capsys.readouterr().out
    assert "VoterChanges: 3" in text and "KRaftVersion: 1" in text
    assert f"Added: 4\tRemoved: -" in text and f"Added: -\tRemoved: 1" in text
    assert f"4 (directory {dirs[4]})" in text
