"""The cluster simulator (``simulator/``): every built-in scenario writes a data directory that

* decodes without quarantine (vectorized decoder) and with the scalar reference reader,
* replays with 0 divergences under ``verify_log_dir`` (the simulator's own controller rules agree with
  the core's), and whose invariant breaches above INFO are exactly the ones its ground truth expects,
* has snapshots equal to the replay of the log at their end offset (``state.Cluster``),
* is byte-identical for the same seed and differs for another seed,
* shows the planted incidents in the replayed state and the per-broker log info.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from controller_core.codec.batch import iter_batches_scalar
from controller_core.rules.invariants import NOT_HERE, InvariantChecker
from controller_core.replay import iter_file_records
from controller_core.logdir import discover
from controller_core.image import Cluster
from controller_core.rules.verify import verify_log_dir
from jobs import decode
from simulator.engine import simulate
from simulator.scenario import ScenarioError, builtin_names, load

BUILTIN = ["az-outage", "cluster-restart", "default-cluster", "fleet-large", "last-replica-standing-elr-off",
           "last-replica-standing-elr-on", "long-under-min-isr", "metadata-gap", "rolling-restart",
           "unclean-election"]
META = "__cluster_metadata-0"


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    out = {}
    for name in BUILTIN:
        d = root / name
        simulate(load(name), d, seed=7)
        out[name] = d
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _truth(d: Path) -> dict:
    return json.loads((d / "ground_truth.json").read_text())


def _expected(d: Path) -> set[tuple[str, str, int, str]]:
    return {(f["code"], f["topic"], f["partition"], f["severity"])
            for inc in _truth(d)["incidents"] for f in inc["expectedFindings"]}


def _log_records(d: Path):
    for seg in sorted((d / META).glob("*.log")):
        for h, recs in iter_batches_scalar(seg.read_bytes()):
            for r in recs:
                yield h, r


def test_builtin_scenarios_are_listed():
    assert builtin_names() == BUILTIN


# ------------------------------------------------------------------------------------------ decoding
@pytest.mark.parametrize("name", BUILTIN)
def test_every_file_decodes_without_quarantine(generated, name):
    out, err = io.StringIO(), io.StringIO()
    assert decode.run([str(generated[name])], summary=True, strict=True, out=out, err=err) == 0, err.getvalue()
    summaries = [json.loads(line) for line in out.getvalue().splitlines()]
    assert summaries and all(not s["errors"] for s in summaries)
    for path in [generated[name] / "bootstrap.checkpoint", *sorted((generated[name] / META).glob("*.log")),
                 *sorted((generated[name] / META).glob("*.checkpoint"))]:
        for h, recs in iter_batches_scalar(path.read_bytes()):
            assert h.records_count == len(recs) > 0


@pytest.mark.parametrize("name", BUILTIN)
def test_layout_offsets_and_side_files(generated, name):
    d = generated[name]
    meta = d / META
    assert (d / "bootstrap.checkpoint").is_file() and (d / "meta.properties").is_file()
    assert {"quorum-state", "partition.metadata"} <= {p.name for p in meta.iterdir()}
    json.loads((meta / "quorum-state").read_text())
    snaps = sorted(meta.glob("*-*.checkpoint"))
    assert snaps, "every scenario writes at least one snapshot"
    for s in snaps:
        end, epoch = s.stem.split("-")
        assert len(end) == 20 and len(epoch) == 10
    expected = 0
    last_ts = 0
    for seg in sorted(meta.glob("*.log")):
        batches = list(iter_batches_scalar(seg.read_bytes()))
        assert int(seg.stem) == batches[0][0].base_offset == expected and len(seg.stem) == 20
        for h, recs in batches:
            assert h.base_offset == expected and h.base_timestamp > last_ts
            last_ts = h.base_timestamp
            expected += len(recs)
    assert sorted(p.name for p in (d / "log-info").iterdir())


def test_segments_roll_at_segment_bytes(generated):
    d = generated["last-replica-standing-elr-off"]
    segs = sorted((d / META).glob("*.log"))
    assert len(segs) >= 2
    assert all(s.stat().st_size <= load("last-replica-standing-elr-off")["segment_bytes"] for s in segs[:-1])


# ------------------------------------------------------------------------------------------ replay
@pytest.mark.parametrize("name", BUILTIN)
def test_replay_has_no_divergence_and_only_expected_breaches(generated, name):
    d = generated[name]
    rep = verify_log_dir(d, checker=InvariantChecker())
    assert rep.divergences == []
    assert rep.partition_changes > 0
    found = {(b.rule, b.topic, b.partition, b.severity) for b in rep.breaches if b.severity != "INFO"}
    # INV-* ids the invariant checker evaluates (the others need the trigger: the audit reports them)
    expected = {e for e in _expected(d) if e[0].startswith("INV-") and e[0] not in NOT_HERE and e[3] != "INFO"}
    assert found == expected
    assert not any(b.severity == "ERROR" for b in rep.breaches)


def _replay_until(d: Path, end_offset: int) -> Cluster:
    c = Cluster()
    for f in discover(d):
        if f.kind in ("bootstrap",) or f.path.suffix == ".log":
            for rec in iter_file_records(f):
                if f.path.suffix == ".log" and rec.offset >= end_offset:
                    return c
                c.apply(rec.type, rec.data, rec.offset)
    return c


@pytest.mark.parametrize("name", BUILTIN)
def test_snapshots_equal_the_replay_at_their_end_offset(generated, name):
    d = generated[name]
    for snap in sorted((d / META).glob("*-*.checkpoint")):
        end = int(snap.stem.split("-")[0])
        replayed = _replay_until(d, end)
        s = Cluster()
        lf = next(f for f in discover(d) if f.path == snap)
        for rec in iter_file_records(lf):
            s.apply(rec.type, rec.data, rec.offset)
        assert s.partitions == replayed.partitions
        assert s.brokers == replayed.brokers
        assert s.topics == replayed.topics and s.configs == replayed.configs
        assert s.features == replayed.features


# ------------------------------------------------------------------------------------------ determinism
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    sc = load("last-replica-standing-elr-off")
    simulate(sc, tmp_path / "a", seed=3)
    simulate(load("last-replica-standing-elr-off"), tmp_path / "b", seed=3)
    simulate(load("last-replica-standing-elr-off"), tmp_path / "c", seed=4)
    a, b, c = _files(tmp_path / "a"), _files(tmp_path / "b"), _files(tmp_path / "c")
    assert a == b
    assert sorted(a) == sorted(c) and a != c
    # the story does not depend on the seed
    assert {k: v for k, v in _truth(tmp_path / "a").items() if k != "seed"} == \
        {k: v for k, v in _truth(tmp_path / "c").items() if k != "seed"}


def test_fleet_depends_on_the_seed(tmp_path):
    params = {"partitions": "40", "events": "4"}
    simulate(load("fleet-large", params), tmp_path / "a", seed=1)
    simulate(load("fleet-large", params), tmp_path / "b", seed=2)
    assert _files(tmp_path / "a") != _files(tmp_path / "b")


# ------------------------------------------------------------------------------------------ incidents
def _leaderships(d: Path, topic: str, pid: int) -> list[tuple[int, int]]:
    """(offset, new leader) for every leader field written for the partition."""
    tid = None
    out = []
    for _, r in _log_records(d):
        if r.type == "TOPIC_RECORD" and r.data["name"] == topic:
            tid = r.data["topicId"]
        elif r.type == "PARTITION_RECORD" and r.data["topicId"] == tid and r.data["partitionId"] == pid:
            out.append((r.offset, r.data["leader"]))
        elif r.type == "PARTITION_CHANGE_RECORD" and r.data["topicId"] == tid and r.data["partitionId"] == pid \
                and r.data.get("leader", -2) != -2:
            out.append((r.offset, r.data["leader"]))
    return out


def _log_info(d: Path, broker: int) -> dict:
    doc = json.loads((d / "log-info" / f"broker-{broker}.json").read_text())
    return {p["Partition"]: p for t in doc["TopicPartitionLogInfoList"] for p in t["PartitionLogInfo"]}


def test_last_replica_standing_elr_off_reelects_the_crashed_replica_and_loses_data(generated):
    d = generated["last-replica-standing-elr-off"]
    leaders = [ld for _, ld in _leaderships(d, "payments", 0)]
    assert leaders == [3, -1, 3]                      # created, offline at T2, broker 3 again at T4
    regs = [r for _, r in _log_records(d) if r.type == "REGISTER_BROKER_RECORD" and r.data["brokerId"] == 3]
    assert len(regs) == 2 and regs[0].data["incarnationId"] != regs[1].data["incarnationId"]
    info3 = _log_info(d, 3)[0]
    assert info3["LogEndOffset"] == 700 < 1000        # the others' high watermark before T1 was 1000
    assert all(_log_info(d, b)[0]["LogEndOffset"] == 700 for b in (1, 2))  # they truncated to it
    assert ("DATA_LOSS_LIKELY", "payments", 0, "ERROR") in _expected(d)
    # broker 3's fence leaves no broker active (CLUSTER_DOWN); the exposure before it stays a WARN
    assert ("LAST_REPLICA_STANDING", "payments", 0, "WARN") in _expected(d)
    assert ("CLUSTER_DOWN", None, None, "WARN") in _expected(d)
    doc = json.loads((d / "log-info" / "broker-3.json").read_text())
    assert doc["BrokerEpoch"] == regs[1].data["brokerEpoch"] == regs[1].offset


def test_last_replica_standing_elr_on_elects_an_elr_member(generated):
    d = generated["last-replica-standing-elr-on"]
    leaders = [ld for _, ld in _leaderships(d, "payments", 0)]
    assert leaders[:3] == [3, -1, 2]                  # broker 2 comes back from the ELR
    changes = [r.data for _, r in _log_records(d) if r.type == "PARTITION_CHANGE_RECORD"]
    assert any(c.get("isr") == [] and c.get("eligibleLeaderReplicas") for c in changes)
    reg_batch = next(recs for recs in _batches(d) if any(
        r.type == "REGISTER_BROKER_RECORD" and r.data["brokerId"] == 3 and r.offset > 40 for r in recs))
    assert reg_batch[0].type == "PARTITION_CHANGE_RECORD" and reg_batch[0].data["eligibleLeaderReplicas"] == []
    assert not any(e[0] == "DATA_LOSS_LIKELY" for e in _expected(d))
    assert _log_info(d, 2)[0]["LogEndOffset"] == 1000  # committed data kept


def _batches(d: Path):
    for seg in sorted((d / META).glob("*.log")):
        for _, recs in iter_batches_scalar(seg.read_bytes()):
            yield recs


def test_rolling_restart_expects_nothing_above_info(generated):
    assert {e[3] for e in _expected(generated["rolling-restart"])} == {"INFO"}


def test_unclean_election_scenario(generated):
    d = generated["unclean-election"]
    exp = _expected(d)
    assert ("UNCLEAN_ELECTION", "audit-log", 0, "ERROR") in exp
    assert ("INV-UNCLEAN-CONFIG", "audit-log", 0, "WARN") in exp      # forced although the topic forbids it
    assert ("UNCLEAN_CONFIG", "clicks", None, "WARN") in exp
    assert ("INV-UNCLEAN-CONFIG", "clicks", 0, "WARN") not in exp    # the periodic run had the config
    changes = [r.data for _, r in _log_records(d) if r.type == "PARTITION_CHANGE_RECORD"]
    assert sum(c.get("leaderRecoveryState") == 1 for c in changes) == 3
    assert sum(c.get("leaderRecoveryState") == 0 for c in changes) == 3


def test_long_under_min_isr_is_an_error_and_min_isr_change_clears_elr(generated):
    exp = _expected(generated["long-under-min-isr"])
    assert ("UNDER_MIN_ISR", "ledger", 0, "ERROR") in exp
    assert ("MIN_ISR_ABOVE_RF", "metrics", None, "WARN") in exp
    assert ("MIN_ISR_CHANGE_CLEARED_ELR", "metrics", None, "WARN") in exp
    # 'events' (diskless.enable=true) goes to one replica as ledger does, but no ISR rule judges it
    assert not any(t == "events" and not c.startswith("INV-") for c, t, _, s in exp), exp


def test_az_outage_goes_under_min_isr_only_where_rf_is_2(generated):
    exp = _expected(generated["az-outage"])
    assert {t for c, t, _, s in exp if c == "UNDER_MIN_ISR"} == {"legacy"}
    assert not any(s == "ERROR" for *_, s in exp)


def test_ground_truth_shape(generated):
    t = _truth(generated["last-replica-standing-elr-off"])
    assert set(t) == {"scenario", "seed", "metadataVersion", "elrEnabled", "incidents"}
    for inc in t["incidents"]:
        assert set(inc) == {"kind", "description", "partitions", "brokers", "firstOffset", "lastOffset", "time",
                            "cause", "expectedFindings"}


# ------------------------------------------------------------------------------------------ YAML errors
@pytest.mark.parametrize("text, needle", [
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: explode}]\n", "timeline[0].event"),
    ("brokers: [{id: 1}]\nbogus: 1\n", "unknown key 'bogus'"),
    ("brokers: [{id: 1}, {id: 1}]\n", "brokers[1].id"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: restart, broker: 9}]\n", "timeline[0].broker"),
    ("brokers: [{id: 1}]\ntopics: [{name: t, partitions: 1, replication_factor: 3}]\n", "topics[0].replication_factor"),
    ("brokers: [{id: 1}]\nmetadata_version: 3.9-IV0\nelr: true\n", "elr"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: restart}]\n", "timeline[0].broker"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: lagging_follower, broker: 1}]\n", "timeline[0].duration_s"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: lagging_follower, broker: 1, duration_s: 5, topic: t}]\n",
     "timeline[0].topic"),
    ("brokers: [{id: 1}]\ndata_node: one\n", "data_node"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: cluster_restart}]\n", "timeline[0].down_s"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: cluster_restart, down_s: 5, controllers_down: 1}]\n",
     "timeline[0].controllers_down"),
    ("brokers: [{id: 1}]\ntimeline: [{at: 1, event: controller_outage, duration_s: 0}]\n", "timeline[0].duration_s"),
    ("brokers: [{id: 1}]\nmetadata_gap_ms: 0\n", "metadata_gap_ms"),
])
def test_yaml_errors_name_the_file_and_key(tmp_path, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as e:
        load(str(f))
    assert str(f) in str(e.value) and needle in str(e.value)


def test_unknown_scenario_and_param(tmp_path):
    with pytest.raises(ScenarioError, match="unknown scenario"):
        load("no-such-scenario")
    with pytest.raises(ScenarioError, match="nope"):
        load("rolling-restart", {"nope": "1"})


def test_cli_list_and_run(tmp_path):
    import argparse

    from jobs import simulate as job
    ap = argparse.ArgumentParser()
    job.add_arguments(ap)
    out = io.StringIO()
    assert job.main(ap.parse_args(["--list"]), out=out) == 0
    lines = out.getvalue().splitlines()
    assert [line.split()[0] for line in lines] == BUILTIN
    for line in lines:  # every scenario says what it shows
        assert len(line.split(None, 1)) == 2 and len(line.split(None, 1)[1]) > 10, line
    out = io.StringIO()
    assert job.main(ap.parse_args(["fleet-large", "-o", str(tmp_path / "f"), "--param", "partitions=30",
                                   "--param", "events=3"]), out=out) == 0
    assert json.loads(out.getvalue())["records"] > 0


# ------------------------------------------------------------------------------------------ fast encoder
def test_fast_encoder_writes_the_same_bytes_as_the_reference_encoder(generated):
    from controller_core.codec.batch import encode_batch
    from simulator.fastcodec import encode_batch_fast
    tid = "5hpEHBLgSLK61kD7GUiN7A"
    dirs = ["gTModjfrTNmoehYT5EPfeA", "GEbUJMF8QnmjxmEvSCaGcw"]
    samples = [
        [("PARTITION_CHANGE_RECORD", v, {"partitionId": 7, "topicId": tid, "isr": [1]}) for v in (0, 1, 2)],
        [("PARTITION_CHANGE_RECORD", 2, {"partitionId": 300, "topicId": tid, "isr": [], "leader": -1,
                                         "eligibleLeaderReplicas": [2, 3], "lastKnownElr": [3]}),
         ("PARTITION_CHANGE_RECORD", 1, {"partitionId": 0, "topicId": tid, "leader": 2, "isr": [2],
                                         "leaderRecoveryState": 1, "replicas": [2, 1], "removingReplicas": [],
                                         "addingReplicas": [1], "directories": dirs})],
        [("PARTITION_RECORD", v, {"partitionId": 1, "topicId": tid, "replicas": [1, 2], "isr": [1, 2],
                                  "removingReplicas": [], "addingReplicas": [], "leader": 1,
                                  "leaderRecoveryState": 1 if v else 0, "leaderEpoch": 5, "partitionEpoch": 9,
                                  **({"directories": dirs} if v else {}),
                                  **({"eligibleLeaderReplicas": [2], "lastKnownElr": [1]} if v == 2 else {})})
         for v in (0, 1, 2)],
        [("NO_OP_RECORD", 0, {})],
        [("LEADER_CHANGE", 0, {"version": 0, "leaderId": 1, "voters": [{"voterId": 1}],
                               "grantingVoters": [{"voterId": 1}]})],
    ]
    for recs in samples:
        assert encode_batch_fast(1234, recs, leader_epoch=3, timestamp=1767225600000) == \
            encode_batch(1234, recs, leader_epoch=3, timestamp=1767225600000)
    # and over every batch of a simulated log
    for recs in list(_batches(generated["last-replica-standing-elr-on"]))[:80]:
        raw = [(r.type, r.version, r.data) for r in recs]
        assert encode_batch_fast(0, raw, leader_epoch=1, timestamp=5) == \
            encode_batch(0, raw, leader_epoch=1, timestamp=5)


# ------------------------------------------------------------------------------------------ user scenarios
USER_SCENARIO = """
description: every remaining event type on a small cluster
metadata_version: {mv}
elr: {elr}
segment_bytes: 2048
snapshot_every: 60
cluster_configs: {{min.insync.replicas: 2}}
brokers: [{{id: 1, rack: a}}, {{id: 2, rack: b}}, {{id: 3, rack: c}}, {{id: 4, rack: a}}]
topics:
  - {{name: t1, partitions: 4, replication_factor: 3}}
timeline:
  - {{at: 20, event: produce, records: 50}}
  - {{at: 30, event: reassignment, topic: t1, partition: 0, replicas: [4, 2, 3]}}
  - {{at: 40, event: controller_failover}}
  - {{at: 50, event: config_change, resource: broker, name: 3001, key: min.insync.replicas, value: 3}}
  - {{at: 60, event: broker_session_timeout, broker: 2, duration_s: 30}}
  - {{at: 100, event: lagging_follower, broker: 1, duration_s: 15}}
  - {{at: 110, event: snapshot}}
  - {{at: 120, event: config_change, resource: cluster, key: min.insync.replicas, value: 1}}
  - {{at: 130, event: controlled_shutdown, broker: 3}}
  - {{at: 150, event: restart, broker: 3}}
  - {{at: 170, event: delete_topic, name: t1}}
  - {{at: 180, event: create_topic, name: t1, partitions: 2, replication_factor: 2}}
  - {{at: 190, event: unclean_shutdown, broker: 4, lose_records: 5}}
  - {{at: 200, event: unclean_election, topic: t1}}
  - {{at: 230, event: restart, broker: 4}}
  - {{at: 260, event: preferred_election, topic: t1}}
"""


@pytest.mark.parametrize("mv, elr", [("3.5-IV2", "false"), ("3.9-IV0", "false"), ("4.1-IV0", "true")])
def test_user_scenario_with_every_event_replays_without_divergence(tmp_path, mv, elr):
    f = tmp_path / "mine.yaml"
    f.write_text(USER_SCENARIO.format(mv=mv, elr=elr))
    simulate(load(str(f)), tmp_path / "out", seed=1)
    rep = verify_log_dir(tmp_path / "out", checker=InvariantChecker())
    assert rep.divergences == []
    assert not any(b.severity == "ERROR" for b in rep.breaches)
    found = {(b.rule, b.topic, b.partition, b.severity) for b in rep.breaches if b.severity != "INFO"}
    assert found == {e for e in _expected(tmp_path / "out")
                     if e[0].startswith("INV-") and e[0] not in NOT_HERE and e[3] != "INFO"}
    assert "reassignment" in rep.triggers or any("alter_partition" in t for t in rep.triggers)
    for snap in sorted((tmp_path / "out" / META).glob("*-*.checkpoint")):
        end = int(snap.stem.split("-")[0])
        s = Cluster()
        for rec in iter_file_records(next(x for x in discover(tmp_path / "out") if x.path == snap)):
            s.apply(rec.type, rec.data, rec.offset)
        assert s.partitions == _replay_until(tmp_path / "out", end).partitions


def test_lagging_follower_leaves_the_isrs_it_follows_and_rejoins_after_its_duration(tmp_path):
    f = tmp_path / "lag.yaml"
    f.write_text("brokers: [{id: 1}, {id: 2}, {id: 3}]\n"
                 "topics: [{name: t, partitions: 3, replication_factor: 3,"
                 " assignment: [[1, 2, 3], [2, 3, 1], [3, 1, 2]]}]\n"
                 "timeline: [{at: 20, event: lagging_follower, broker: 2, duration_s: 30},\n"
                 "           {at: 30, event: preferred_election}, {at: 60, event: snapshot}]\n")
    simulate(load(str(f)), tmp_path / "out", seed=0)
    changes = [(h.base_timestamp, r.data) for seg in sorted((tmp_path / "out" / META).glob("*.log"))
               for h, recs in iter_batches_scalar(seg.read_bytes())
               for r in recs if r.type == "PARTITION_CHANGE_RECORD"]
    start = load(str(f))["start_ms"]
    # t-0 and t-2 follow their leaders 1 and 3 with broker 2: ISR-only shrinks at 20 s; t-1 is led by 2: untouched
    shrink = [(d["partitionId"], d["isr"]) for ts, d in changes if ts < start + 50_000]
    assert sorted(shrink) == [(0, [1, 3]), (2, [3, 1])]
    assert all("leader" not in d for _, d in changes)
    # caught up 30 s later (not at the catch-up round after the preferred election): appended to both ISRs again
    expand = [(d["partitionId"], d["isr"]) for ts, d in changes if ts >= start + 50_000]
    assert sorted(expand) == [(0, [1, 3, 2]), (2, [3, 1, 2])]
    assert verify_log_dir(tmp_path / "out").divergences == []
    # the snapshot event: a checkpoint at the end offset of that moment, not only the final one
    snaps = sorted((tmp_path / "out" / META).glob("*-*.checkpoint"))
    assert len(snaps) == 1 and int(snaps[0].stem.split("-")[0]) < sum(1 for _ in _log_records(tmp_path / "out"))


def test_simulate_fleet_is_fleet_large_at_the_given_size(tmp_path):
    from simulator.fleet import simulate_fleet

    stats = simulate_fleet(tmp_path / "f", 30, 2, seed=3)
    simulate(load("fleet-large", {"partitions": "30", "events": "2"}), tmp_path / "g", seed=3)
    assert _files(tmp_path / "f") == _files(tmp_path / "g")
    newest = max((tmp_path / "f" / META).glob("*-*.checkpoint"))
    assert stats["snapshots"][-1] == newest.name
    records = [r for _, recs in iter_batches_scalar(newest.read_bytes()) for r in recs]
    assert sum(r.type == "PARTITION_RECORD" for r in records) == 30


def test_large_triggers_split_into_batches_still_replay(tmp_path):
    sc = load("fleet-large", {"partitions": "90", "events": "8", "max_batch_records": "4"})
    simulate(sc, tmp_path / "f", seed=11)
    sizes = [len(recs) for recs in _batches(tmp_path / "f")]
    assert max(sizes) > 4  # topic creation stays atomic
    rep = verify_log_dir(tmp_path / "f", checker=InvariantChecker())
    assert rep.divergences == [] and not any(b.severity == "ERROR" for b in rep.breaches)


def test_replayed_state_shows_the_elr_off_story(generated):
    d = generated["last-replica-standing-elr-off"]
    c = _replay_until(d, 1 << 62)
    tid = c.topic_ids["payments"]
    p = c.partitions[(tid, 0)]
    assert p.leader == 3 and sorted(p.isr) == [1, 2, 3] and p.elr == []
    assert c.active(3)  # registered, unfenced, not in controlled shutdown
    info = {b: _log_info(d, b)[0] for b in (1, 2, 3)}
    assert {i["CurrentLeaderEpoch"] for i in info.values()} == {p.leader_epoch}
    assert info[3]["LastWrittenLeaderEpoch"] == 0   # its surviving records were written in epoch 0


def test_replayed_state_shows_the_elr_on_story(generated):
    d = generated["last-replica-standing-elr-on"]
    c = _replay_until(d, 1 << 62)
    p = c.partitions[(c.topic_ids["payments"], 0)]
    assert p.leader == 2 and sorted(p.isr) == [1, 2, 3] and p.elr == [] and p.last_known_elr == []
    assert c.features["eligible.leader.replicas.version"] == 1
    assert all(_log_info(d, b)[0]["LogEndOffset"] == 1000 for b in (1, 2, 3))


# ------------------------------------------------------------------------------------------ shared work
def test_fast_encoder_writes_shared_change_bodies_like_plain_ones():
    from controller_core.codec.batch import encode_batch
    from simulator.fastcodec import ChangeBody, change_tags, encode_batch_fast

    class Plan:  # what the encoder reads of the simulator's plan
        def __init__(self, version, fields):
            self.tags = change_tags(version, fields)

    tid = "5hpEHBLgSLK61kD7GUiN7A"
    for version, fields in [(0, {"isr": [1, 2]}), (1, {"leader": -1, "isr": [3]}),
                            (2, {"isr": [], "leader": -1, "eligibleLeaderReplicas": [2, 3], "lastKnownElr": [3]}),
                            (1, {"leader": 2, "directories": ["gTModjfrTNmoehYT5EPfeA"], "replicas": [2]})]:
        plan = Plan(version, fields)
        shared, plain = [], []
        for pid in (0, 1, 70, 200, 70_000):  # offset deltas and partition ids of every varint width used
            body = ChangeBody(partitionId=pid, topicId=tid)
            body.update(fields)
            body.plan = plan
            shared.append(("PARTITION_CHANGE_RECORD", version, body))
            plain.append(("PARTITION_CHANGE_RECORD", version, dict(body)))
        many = shared * 40  # offset deltas above 63 take two varint bytes
        assert encode_batch_fast(9, many, leader_epoch=2, timestamp=77) == \
            encode_batch(9, [(t, v, dict(d)) for t, v, d in many], leader_epoch=2, timestamp=77)
        assert encode_batch_fast(9, shared + [("NO_OP_RECORD", 0, {})], leader_epoch=2, timestamp=77) == \
            encode_batch(9, plain + [("NO_OP_RECORD", 0, {})], leader_epoch=2, timestamp=77)


def test_partitions_in_the_same_state_share_one_registration_and_change_alone():
    from simulator.controller import Part, Reg, apply_change
    a = Part("t", 0, [1, 2, 3], [1, 2, 3], 1, ["d1", "d2", "d3"])
    b = Part("t", 1, [1, 2, 3], [1, 2, 3], 1, ["d1", "d2", "d3"])
    assert a.reg is b.reg and isinstance(a.reg, Reg)
    apply_change(a, {"partitionId": 0, "topicId": "t", "isr": [1, 2], "leader": 2})
    assert (a.isr, a.leader, a.leader_epoch, a.partition_epoch) == ([1, 2], 2, 1, 1)
    assert (b.isr, b.leader, b.leader_epoch, b.partition_epoch) == ([1, 2, 3], 1, 0, 0)
    b.isr = [1, 2]
    b.leader = 2
    assert b.reg is a.reg


def test_fleet_does_not_depend_on_the_decision_memo(tmp_path, monkeypatch):
    """The simulator decides once per distinct registration and trigger; deciding for every partition
    writes the same bytes."""
    from simulator import engine

    class Forgetful(dict):
        def __setitem__(self, key, value):
            pass

    params = {"partitions": "2500", "events": "12"}
    simulate(load("fleet-large", params), tmp_path / "memo", seed=5)
    monkeypatch.setattr(engine.Simulator, "plans_for", lambda self, *a: Forgetful())
    simulate(load("fleet-large", params), tmp_path / "each", seed=5)
    assert _files(tmp_path / "memo") == _files(tmp_path / "each")


@pytest.mark.parametrize("scenario", ["user:3.5-IV2:false", "user:4.1-IV0:true", "long-under-min-isr"])
def test_partition_index_follows_every_registration_change(tmp_path, scenario):
    """Bulk triggers pick their partitions from an index of registrations (one per partition, in creation
    order): after every batch it must agree with the partitions themselves (changes, ClearElrRecord,
    deletion, re-creation)."""
    from simulator.engine import Simulator
    if scenario.startswith("user:"):
        _, mv, elr = scenario.split(":")
        f = tmp_path / "mine.yaml"
        f.write_text(USER_SCENARIO.format(mv=mv, elr=elr))
        scenario = str(f)
    sim = Simulator(load(scenario), 1, tmp_path / "out")
    emit, checked = sim.emit, []

    def emit_and_check(records):
        base = emit(records)
        assert [sim._keys[i] for i, r in enumerate(sim._regid) if r >= 0] == list(sim.parts)
        assert all(sim._regid[p.ordinal] == p.reg.idx and sim.regs.table[p.reg.idx] is p.reg
                   for p in sim.parts.values())
        checked.append(len(records))
        return base

    sim.emit = emit_and_check
    sim.run()
    assert len(checked) > 20
