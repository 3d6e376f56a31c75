"""The embedded default data directory ``data/default-cluster/``.

* it is exactly what the simulator writes for the built-in scenario ``default-cluster`` with seed 0
  (regenerated into a temporary directory);
* every file decodes with the scalar reference reader;
* offsets run consecutively from 0 across the two log segments, each segment named by its base offset;
* the metadata snapshot equals a replay of the log up to its end offset (a small independent fold);
* the side files (leader-epoch-checkpoint, quorum-state, meta.properties, bootstrap.checkpoint) agree
  with the log.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller_core.codec.batch import iter_batches_scalar
from jobs import cli

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data"
CLUSTER = DATA / "default-cluster"
META = CLUSTER / "__cluster_metadata-0"


REGENERATE = "kraft-audit simulate default-cluster -o data/default-cluster --seed 0"


def _simulate(out: Path) -> None:
    assert cli.main(["simulate", "default-cluster", "-o", str(out), "--seed", "0"]) == 0


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _decode(path: Path):
    """[(header, records)] of a whole file, with the scalar reference reader."""
    return list(iter_batches_scalar(path.read_bytes()))


def _segments() -> list[Path]:
    return sorted(META.glob("*.log"))


def _snapshot() -> Path:
    snaps = sorted(META.glob("*-*.checkpoint"))
    assert len(snaps) == 1, snaps
    return snaps[0]


def _log_records():
    for seg in _segments():
        for h, recs in _decode(seg):
            for r in recs:
                yield h, r


# ------------------------------------------------------------------------------------- reproducible
def test_committed_files_are_what_the_simulator_writes(tmp_path):
    _simulate(tmp_path / "default-cluster")
    expected = _files(tmp_path / "default-cluster")
    actual = _files(CLUSTER)
    assert sorted(actual) == sorted(expected), f"file set differs: rerun {REGENERATE}"
    for name in expected:
        assert actual[name] == expected[name], f"{name} differs: rerun {REGENERATE}"


def test_simulator_is_deterministic(tmp_path):
    _simulate(tmp_path / "a")
    _simulate(tmp_path / "b")
    assert _files(tmp_path / "a") == _files(tmp_path / "b")


def test_layout():
    names = {p.name for p in META.iterdir()}
    assert {"quorum-state", "leader-epoch-checkpoint", "partition.metadata"} <= names
    assert (CLUSTER / "bootstrap.checkpoint").is_file() and (CLUSTER / "meta.properties").is_file()
    segs = _segments()
    assert len(segs) == 2
    assert segs[0].name == "00000000000000000000.log"
    end, epoch = _snapshot().name.removesuffix(".checkpoint").split("-")
    assert len(end) == 20 and len(epoch) == 10


# ------------------------------------------------------------------------------------------ decoding
@pytest.mark.parametrize("rel", ["bootstrap.checkpoint", "log segments", "snapshot"])
def test_files_decode_with_the_scalar_reader(rel):
    paths = {"bootstrap.checkpoint": [CLUSTER / "bootstrap.checkpoint"], "log segments": _segments(),
             "snapshot": [_snapshot()]}[rel]
    for path in paths:
        batches = _decode(path)
        assert batches, path
        for h, recs in batches:
            assert h.records_count == len(recs) > 0
            assert all(r.type and isinstance(r.data, dict) for r in recs)


def test_offsets_consecutive_across_segments():
    expected = 0
    for seg in _segments():
        batches = _decode(seg)
        assert int(seg.stem) == batches[0][0].base_offset == expected, seg.name
        for h, recs in batches:
            assert h.base_offset == expected
            for i, r in enumerate(recs):
                assert r.offset == expected + i
            expected += len(recs)
            assert h.base_offset + h.last_offset_delta == expected - 1
    assert expected > 150


def test_timestamps_increase_and_heartbeats_are_alone():
    last = 0
    for seg in _segments():
        for h, recs in _decode(seg):
            assert h.base_timestamp > last
            last = h.base_timestamp
            if any(r.type == "NO_OP_RECORD" for r in recs):
                assert len(recs) == 1


def test_snapshot_and_bootstrap_framing():
    for path, first_offset in ((_snapshot(), 0), (CLUSTER / "bootstrap.checkpoint", 0)):
        batches = _decode(path)
        types = [r.type for _, recs in batches for r in recs]
        assert types[0] == "SNAPSHOT_HEADER" and types[-1] == "SNAPSHOT_FOOTER"
        assert batches[0][0].is_control and batches[-1][0].is_control and len(batches) == 3
        offsets = [r.offset for _, recs in batches for r in recs]
        assert offsets == list(range(first_offset, first_offset + len(offsets)))


# ------------------------------------------------------------------------------------- replay vs snapshot
def _partition_state(d: dict) -> dict:
    """A PartitionRecord as partition state (replaces whatever was there)."""
    return {"replicas": d["replicas"], "isr": d["isr"], "removingReplicas": d["removingReplicas"],
            "addingReplicas": d["addingReplicas"], "leader": d["leader"], "leaderEpoch": d["leaderEpoch"],
            "partitionEpoch": d["partitionEpoch"], "directories": d.get("directories", []),
            "leaderRecoveryState": d.get("leaderRecoveryState", 0)}


def _fold(records, end_offset: int):
    """Replay of the log up to ``end_offset`` (exclusive): partitions, brokers, topics, configs."""
    parts: dict[tuple[str, int], dict] = {}
    brokers: dict[int, dict] = {}
    topics: dict[str, str] = {}
    configs: dict[tuple[int, str, str], str] = {}
    for _, r in records:
        if r.offset >= end_offset:
            break
        d = r.data
        if r.type == "PARTITION_RECORD":
            parts[(d["topicId"], d["partitionId"])] = _partition_state(d)
        elif r.type == "PARTITION_CHANGE_RECORD":
            st = parts[(d["topicId"], d["partitionId"])]
            for key in ("isr", "replicas", "removingReplicas", "addingReplicas", "directories"):
                if d.get(key) is not None:
                    st[key] = d[key]
            if d.get("leaderRecoveryState", -1) != -1:
                st["leaderRecoveryState"] = d["leaderRecoveryState"]
            if d.get("leader", -2) != -2:
                st["leader"] = d["leader"]
                st["leaderEpoch"] += 1
            st["partitionEpoch"] += 1
            assert st["leader"] == -1 or st["leader"] in st["isr"], r.offset
            assert set(st["isr"]) <= set(st["replicas"]), r.offset
        elif r.type == "REGISTER_BROKER_RECORD":
            brokers[d["brokerId"]] = {"epoch": d["brokerEpoch"], "incarnation": d["incarnationId"],
                                      "fenced": d["fenced"], "cs": d["inControlledShutdown"]}
        elif r.type == "BROKER_REGISTRATION_CHANGE_RECORD":
            b = brokers[d["brokerId"]]
            assert b["epoch"] == d["brokerEpoch"], r.offset
            if d.get("fenced", 0):
                b["fenced"] = d["fenced"] == 1
            if d.get("inControlledShutdown", 0) == 1:
                b["cs"] = True
        elif r.type == "TOPIC_RECORD":
            topics[d["topicId"]] = d["name"]
        elif r.type == "CONFIG_RECORD":
            configs[(d["resourceType"], d["resourceName"], d["name"])] = d["value"]
    return parts, brokers, topics, configs


def test_snapshot_equals_replay_of_the_log():
    snap = _snapshot()
    end_offset, epoch = (int(x) for x in snap.name.removesuffix(".checkpoint").split("-"))
    log = list(_log_records())
    assert any(r.offset == end_offset - 1 for _, r in log) and any(r.offset >= end_offset for _, r in log)
    # the snapshot ends at a batch boundary, and its epoch is the raft epoch of its last record
    last_h = next(h for h, r in log if r.offset == end_offset - 1)
    assert last_h.base_offset + last_h.last_offset_delta == end_offset - 1
    assert last_h.leader_epoch == epoch
    parts, brokers, topics, configs = _fold(log, end_offset)

    snap_recs = [r for _, recs in _decode(snap) for r in recs]
    s_parts = {(r.data["topicId"], r.data["partitionId"]): _partition_state(r.data)
               for r in snap_recs if r.type == "PARTITION_RECORD"}
    assert parts and s_parts == parts
    s_brokers = {r.data["brokerId"]: r.data for r in snap_recs if r.type == "REGISTER_BROKER_RECORD"}
    assert {b: {"epoch": d["brokerEpoch"], "incarnation": d["incarnationId"], "fenced": d["fenced"],
                "cs": d["inControlledShutdown"]} for b, d in s_brokers.items()} == brokers
    assert {r.data["topicId"]: r.data["name"] for r in snap_recs if r.type == "TOPIC_RECORD"} == topics
    assert {(r.data["resourceType"], r.data["resourceName"], r.data["name"]): r.data["value"]
            for r in snap_recs if r.type == "CONFIG_RECORD"} == configs
    controllers = {r.data["controllerId"]: r.data["incarnationId"] for _, r in log
                   if r.type == "REGISTER_CONTROLLER_RECORD" and r.offset < end_offset}
    assert controllers and {r.data["controllerId"]: r.data["incarnationId"] for r in snap_recs
                            if r.type == "REGISTER_CONTROLLER_RECORD"} == controllers
    header = snap_recs[0]
    assert header.data["lastContainedLogTimestamp"] == last_h.base_timestamp


def test_story_is_in_the_log():
    """The events the default data is meant to show are there (guards against silent story edits)."""
    log = [r for _, r in _log_records()]
    types = [r.type for r in log]
    mv = [r.data["featureLevel"] for r in log if r.type == "FEATURE_LEVEL_RECORD" and r.data["name"] == "metadata.version"]
    assert mv == [21]
    assert types[0] == "LEADER_CHANGE" and types[1] == "BEGIN_TRANSACTION_RECORD"
    assert {r.data["name"] for r in log if r.type == "TOPIC_RECORD"} == {"orders", "payments"}
    assert any(r.type == "CONFIG_RECORD" and r.data["name"] == "min.insync.replicas" and r.data["value"] == "2"
               and r.data["resourceType"] == 2 and r.data["resourceName"] == "orders" for r in log)
    fences = [r for r in log if r.type == "BROKER_REGISTRATION_CHANGE_RECORD" and r.data.get("fenced") == 1]
    assert [r.data["brokerId"] for r in fences] == [3]
    regs3 = [r for r in log if r.type == "REGISTER_BROKER_RECORD" and r.data["brokerId"] == 3]
    assert len(regs3) == 2 and regs3[0].data["incarnationId"] != regs3[1].data["incarnationId"]
    assert all(r.data["brokerEpoch"] == r.offset for r in log if r.type == "REGISTER_BROKER_RECORD")
    changes = [r for r in log if r.type == "PARTITION_CHANGE_RECORD"]
    assert any("leader" not in r.data and "isr" in r.data for r in changes)       # ISR-only shrink/expand
    assert any(r.data.get("leader") == 3 and "isr" not in r.data for r in changes)  # preferred election
    names = {r.data["topicId"]: r.data["name"] for r in log if r.type == "TOPIC_RECORD"}
    # the lagging follower: ISR-only changes without broker 2 (the fence of 3 never removes 2)
    assert sorted((names[r.data["topicId"]], r.data["partitionId"]) for r in changes
                  if "leader" not in r.data and 2 not in r.data["isr"]) == [("orders", 0), ("orders", 2), ("orders", 3)]
    # controller failover: node 3 led the raft quorum until its crash, node 1 after it
    assert [r.data["leaderId"] for r in log if r.type == "LEADER_CHANGE"] == [3, 1]
    # combined nodes: the three controllers register at the start, node 3's again when it restarts
    ctrl = [r for r in log if r.type == "REGISTER_CONTROLLER_RECORD"]
    assert [r.data["controllerId"] for r in ctrl] == [3, 1, 2, 3]
    assert ctrl[0].data["incarnationId"] != ctrl[3].data["incarnationId"]
    assert regs3[1].offset < ctrl[3].offset
    assert 150 <= len(log) <= 500


# ----------------------------------------------------------------------------------------- side files
def test_leader_epoch_checkpoint_and_quorum_state_match_the_log():
    log = [(h, r) for h, r in _log_records()]
    changes = [(h.leader_epoch, r.offset, r.data["leaderId"]) for h, r in log if r.type == "LEADER_CHANGE"]
    lines = (META / "leader-epoch-checkpoint").read_text().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(changes) == len(lines) - 2
    assert [tuple(map(int, ln.split())) for ln in lines[2:]] == [(e, o) for e, o, _ in changes]
    quorum = json.loads((META / "quorum-state").read_text())
    assert quorum["leaderId"] == changes[-1][2] and quorum["leaderEpoch"] == changes[-1][0]
    epochs = [h.leader_epoch for h, _ in log]
    assert epochs == sorted(epochs)


def test_meta_properties_and_bootstrap():
    props = dict(line.split("=", 1) for line in (CLUSTER / "meta.properties").read_text().splitlines()
                 if line and not line.startswith("#"))
    assert props["version"] == "1" and props["node.id"] == "1" and len(props["cluster.id"]) == 22
    log = [r for _, r in _log_records()]
    own = next(r for r in log if r.type == "REGISTER_BROKER_RECORD" and r.data["brokerId"] == 1)
    assert own.data["logDirs"] == [props["directory.id"]]
    boot = [r for _, recs in _decode(CLUSTER / "bootstrap.checkpoint") for r in recs]
    assert [r.type for r in boot] == ["SNAPSHOT_HEADER", "FEATURE_LEVEL_RECORD", "SNAPSHOT_FOOTER"]
    assert boot[1].data == {"name": "metadata.version", "featureLevel": 21}
