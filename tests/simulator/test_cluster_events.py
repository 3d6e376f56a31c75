"""Cluster events in the simulator (issue 12): ``cluster_restart`` and ``controller_outage`` write what a real
cluster's metadata log shows (every broker in controlled shutdown then fenced; no record at all while no
controller runs; a new Raft epoch after), and the ground truth follows /work/scratch/incidents-spec.md:
METADATA_GAP, CLUSTER_DOWN and CONTROLLER_ELECTION findings, window durations without gap time, windows
attributed to a cluster event, sub-second flaps, and each incident's ``cause``."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from controller_core.codec.batch import iter_batches_scalar
from controller_core.pipeline import from_log_dir
from controller_core.rules.invariants import InvariantChecker
from controller_core.rules.verify import verify_log_dir
from simulator.engine import simulate
from simulator.scenario import load
from simulator.truth import Incident, Truth

META = "__cluster_metadata-0"
HOUR = 3_600_000
CLUSTER = ("METADATA_GAP", "CLUSTER_DOWN", "CONTROLLER_ELECTION")


@pytest.fixture(scope="module")
def sims(tmp_path_factory):
    root = tmp_path_factory.mktemp("cluster-events")
    out = {}
    for name in ("cluster-restart", "metadata-gap"):
        simulate(load(name), root / name, seed=7)
        out[name] = root / name
    return out


def _records(d: Path):
    """(batch leader epoch, batch timestamp ms, record) of every segment record, in offset order."""
    out = []
    for seg in sorted((d / META).glob("*.log")):
        for h, recs in iter_batches_scalar(seg.read_bytes()):
            out += [(h.leader_epoch, h.base_timestamp, r) for r in recs]
    return out


def _times(d: Path) -> list[tuple[int, int, str]]:
    """(offset, timestamp ms, record type) from the project's decoder."""
    _, times = from_log_dir(d)
    ms = [int(t.timestamp() * 1000) for t in times.column("timestamp").to_pylist()]
    return list(zip(times.column("offset").to_pylist(), ms, times.column("record_type").to_pylist()))


def _largest_gap(d: Path) -> tuple[int, int, int, int]:
    """(length ms, offset before, offset after, time after) of the longest stretch without a record."""
    t = _times(d)
    return max((b[1] - a[1], a[0], b[0], b[1]) for a, b in zip(t, t[1:]))


def _truth(d: Path) -> list[dict]:
    return json.loads((d / "ground_truth.json").read_text())["incidents"]


def _cluster_findings(d: Path) -> list[tuple[str, str, str, str | None]]:
    """(code, severity, incident kind, incident cause) of every cluster-level finding."""
    return sorted((f["code"], f["severity"], i["kind"], i["cause"]) for i in _truth(d) for f in i["expectedFindings"]
                  if f["code"] in CLUSTER)


# ------------------------------------------------------------------------------------------ the logs
def test_controller_outage_writes_nothing_for_an_hour_then_a_new_raft_epoch(sims):
    d = sims["metadata-gap"]
    length, before, after, _ = _largest_gap(d)
    assert HOUR <= length < HOUR + 10_000
    recs = _records(d)
    by_offset = {r.offset: (epoch, r) for epoch, _, r in recs}
    epoch_after, first = by_offset[after]
    assert first.type == "LEADER_CHANGE" and epoch_after > by_offset[before][0]
    assert first.data["leaderId"] in load("metadata-gap")["controllers"]
    # NoOp heartbeats resume after the new epoch
    assert any(r.type == "NO_OP_RECORD" for _, _, r in recs if r.offset > after)
    # the brokers kept running: nothing fences or re-registers them for the outage (broker 1's own session
    # timeout comes two minutes after the controller is back)
    start = load("metadata-gap")["start_ms"]
    broker_types = {"BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD", "REGISTER_BROKER_RECORD"}
    assert not [r for _, ts, r in recs if r.type in broker_types and start + 300_000 <= ts < start + 4_020_000]
    assert verify_log_dir(d, checker=InvariantChecker()).divergences == []


def test_cluster_restart_stops_every_broker_then_the_quorum_then_starts_them_again(sims):
    d = sims["cluster-restart"]
    length, before, after, _ = _largest_gap(d)
    assert 900_000 <= length < 900_000 + 10_000
    recs = _records(d)
    changes = [(r.offset, r.data) for _, _, r in recs if r.type == "BROKER_REGISTRATION_CHANGE_RECORD"]
    stop = load("cluster-restart")["start_ms"] + 120_000
    for b in (1, 2, 3):
        mine = [(o, x) for o, x in changes if x["brokerId"] == b and o <= before]
        cs = [o for o, x in mine if x.get("inControlledShutdown") == 1]
        fenced = [o for o, x in mine if x.get("fenced") == 1 and o > min(cs, default=1 << 62)]
        assert len(cs) == 1 and fenced, f"broker {b}: controlled shutdown, then fenced, before the gap"
    shutdowns = sorted(ts for _, ts, r in recs if r.type == "BROKER_REGISTRATION_CHANGE_RECORD"
                       and r.data.get("inControlledShutdown") == 1 and ts >= stop)
    assert len(shutdowns) == 3 and all(2000 <= b - a <= 4000 for a, b in zip(shutdowns, shutdowns[1:]))
    epochs = {r.offset: e for e, _, r in recs}
    first = next(r for _, _, r in recs if r.offset == after)
    assert first.type == "LEADER_CHANGE" and epochs[after] > epochs[before]
    # after the quorum: every broker registers again (new incarnation) and is unfenced, the last one stopped first
    regs = [r.data for _, _, r in recs if r.type == "REGISTER_BROKER_RECORD" and r.offset > after]
    assert [x["brokerId"] for x in regs] == [3, 2, 1] and all(x["fenced"] for x in regs)
    unfenced = {x["brokerId"] for o, x in changes if o > after and x.get("fenced") == -1}
    assert unfenced == {1, 2, 3}
    assert verify_log_dir(d, checker=InvariantChecker()).divergences == []


def test_work_due_during_an_outage_waits_for_the_next_controller(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("brokers: [{id: 1}, {id: 2}, {id: 3}]\n"
                 "topics: [{name: t, partitions: 3, replication_factor: 3,"
                 " assignment: [[1, 2, 3], [2, 3, 1], [3, 1, 2]]}]\n"
                 "timeline: [{at: 20, event: lagging_follower, broker: 2, duration_s: 30},\n"
                 "           {at: 30, event: controller_outage, duration_s: 120}, {at: 60, event: produce, records: 5}]\n")
    simulate(load(str(f)), tmp_path / "out", seed=0)
    length, _, after, t_after = _largest_gap(tmp_path / "out")
    assert 120_000 <= length < 130_000
    recs = _records(tmp_path / "out")
    first = next(r for _, _, r in recs if r.offset == after)
    assert first.type == "LEADER_CHANGE"
    # broker 2 caught up at 50 s, inside the outage: its ISR expansions are written after the LeaderChange
    expand = [r.offset for _, _, r in recs if r.type == "PARTITION_CHANGE_RECORD" and 2 in r.data.get("isr", [])
              and len(r.data["isr"]) == 3]
    assert expand and min(expand) > after


# ------------------------------------------------------------------------------------------ ground truth
def test_metadata_gap_truth(sims):
    d = sims["metadata-gap"]
    assert _cluster_findings(d) == [("CONTROLLER_ELECTION", "INFO", "controller_outage", "METADATA_GAP"),
                                    ("METADATA_GAP", "WARN", "controller_outage", "METADATA_GAP")]
    incs = {i["kind"] + "@" + i["time"][11:19]: i for i in _truth(d)}
    gap = incs["controller_outage@00:05:00"]
    _, before, after, _ = _largest_gap(d)
    assert gap["firstOffset"] == gap["lastOffset"] == after  # its LeaderChange
    assert all(f["topic"] is None and f["partition"] is None for f in gap["expectedFindings"])
    assert gap["partitions"] == []
    # the follower lagging across the hour: ~3 minutes under min ISR outside the gap, attributed to it (INFO);
    # its leader left alone in the ISR stays a last replica standing exposure (WARN), outage or not
    across = incs["lagging_follower@00:04:00"]
    assert {(f["code"], f["severity"]) for f in across["expectedFindings"]} == \
        {("UNDER_MIN_ISR", "INFO"), ("LAST_REPLICA_STANDING", "WARN")}
    assert across["cause"] is None
    # broker 1's session timeout after the outage: a broker incident, not attributed to the gap
    timeout = incs["broker_session_timeout@01:07:00"]
    assert timeout["cause"] == "BROKER_DOWN"
    assert ("UNDER_MIN_ISR", "WARN") in {(f["code"], f["severity"]) for f in timeout["expectedFindings"]}


def test_cluster_restart_truth(sims):
    d = sims["cluster-restart"]
    assert _cluster_findings(d) == [("CLUSTER_DOWN", "WARN", "cluster_restart", "CLUSTER_RESTART"),
                                    ("CONTROLLER_ELECTION", "INFO", "cluster_restart", "CLUSTER_RESTART"),
                                    ("METADATA_GAP", "WARN", "cluster_restart", "CLUSTER_RESTART")]
    [restart] = [i for i in _truth(d) if i["kind"] == "cluster_restart"]
    windows = {(f["code"], f["severity"]) for f in restart["expectedFindings"] if f["topic"] is not None}
    # every availability window across the restart is explained by it (seconds outside the outage): INFO, the
    # OFFLINE windows included; the last replica standing exposure before it stays WARN
    assert {c for c, _ in windows} >= {"OFFLINE", "UNDER_MIN_ISR", "AT_MIN_ISR"}
    assert {s for c, s in windows if c != "LAST_REPLICA_STANDING"} == {"INFO"}
    assert {s for c, s in windows if c == "LAST_REPLICA_STANDING"} == {"WARN"}
    assert len(restart["partitions"]) == 9 and restart["brokers"] == [1, 2, 3]


def test_cluster_restart_with_controllers_up_is_a_long_cluster_down_without_a_gap(tmp_path):
    """Controllers running: no gap, the NoOps go on, 15 minutes without an active broker. The partitions are
    offline for those 15 minutes (an ERROR on its own) but the window is the cluster's restart: INFO."""
    f = tmp_path / "s.yaml"
    f.write_text("brokers: [{id: 1, rack: a}, {id: 2, rack: b}, {id: 3, rack: c}]\n"
                 "topics: [{name: t, partitions: 3, replication_factor: 3, configs: {min.insync.replicas: 2}}]\n"
                 "timeline: [{at: 20, event: cluster_restart, down_s: 900, controllers_down: false}]\n")
    simulate(load(str(f)), tmp_path / "out", seed=0)
    assert _largest_gap(tmp_path / "out")[0] <= 5000  # one heartbeat interval
    assert _cluster_findings(tmp_path / "out") == [("CLUSTER_DOWN", "WARN", "cluster_restart", "CLUSTER_RESTART")]
    [inc] = _truth(tmp_path / "out")
    offline = {f["severity"] for f in inc["expectedFindings"] if f["code"] == "OFFLINE"}
    assert offline == {"INFO"}


# ------------------------------------------------------------------------------------------ Truth rules
def _window(truth: Truth, events, close_at: int, is_open: bool = False, code: str = "OFFLINE") -> str:
    """Drive ``truth`` through batches at the times of ``events`` ((time, action)); the window of ``code``
    opens at the first and closes at ``close_at``; returns the severity it was given."""
    truth.incidents[0] = Incident(0, "x", "x", 0, [])
    truth.beat_seen = True
    key = ("tid", 0)
    for t, action in sorted(events + [(close_at, "close")], key=lambda e: e[0]):
        truth.note_batch(0, t, 1, t)
        if action == "open":
            truth.observe(key, "t", 0, {code}, t, 0)
        elif action == "close" and not is_open:
            truth.observe(key, "t", 0, set(), t, 0)
        elif action == "down":
            truth.brokers_active(frozenset(), t, 0)
        elif action == "up":
            truth.brokers_active(frozenset({1}), t, 0)
    truth.finish(close_at, lambda key: ("t", 0))
    return truth.incidents[0].findings[(code, "t", 0)]


MIN = 60_000


def _truth_obj() -> Truth:
    t = Truth(10 * MIN)
    t.active = frozenset({1})
    t.ever_active = True
    return t


def test_window_durations_leave_gaps_out():
    # heartbeats every 10 s, except for 20 minutes from minute 1
    beats = [(t, "beat") for t in list(range(10_000, MIN + 1, 10_000)) + list(range(21 * MIN, 45 * MIN, 10_000))]
    # 25 minutes of wall time, 20 of them a metadata gap: 5 minutes counted, attributed to the gap -> INFO
    assert _window(_truth_obj(), [(0, "open")] + beats, 25 * MIN) == "INFO"
    # 40 minutes with a 20-minute gap: 20 minutes outside it -> the usual ERROR
    assert _window(_truth_obj(), [(0, "open")] + beats, 40 * MIN) == "ERROR"
    # the boundary: 10 minutes outside the gap is long (ERROR), 9 is not (INFO)
    assert _window(_truth_obj(), [(0, "open")] + beats, 30 * MIN) == "ERROR"
    assert _window(_truth_obj(), [(0, "open")] + beats, 29 * MIN) == "INFO"
    # no gap: 5 minutes is a WARN, 12 an ERROR (heartbeats every 10 s)
    beats = [(t, "beat") for t in range(10_000, 12 * MIN, 10_000)]
    assert _window(_truth_obj(), [(0, "open")] + beats, 5 * MIN) == "WARN"
    assert _window(_truth_obj(), [(0, "open")] + beats, 12 * MIN) == "ERROR"


def test_windows_attributed_to_cluster_down():
    beats = [(t, "beat") for t in range(10_000, 40 * MIN, 10_000)]
    # offline 20 minutes, 15 of them with no broker active: 5 minutes outside -> INFO
    assert _window(_truth_obj(), [(0, "open"), (2 * MIN, "down"), (17 * MIN, "up")] + beats, 20 * MIN) == "INFO"
    # closes at the very instant the cluster goes down (bounds included) -> attributed
    assert _window(_truth_obj(), [(0, "open"), (3 * MIN, "down"), (4 * MIN, "up")] + beats, 3 * MIN,
                   code="OFFLINE") == "INFO"
    # a minute before it: not attributed
    assert _window(_truth_obj(), [(0, "open"), (3 * MIN, "down"), (4 * MIN, "up")] + beats, 2 * MIN,
                   code="OFFLINE") == "WARN"
    # a last replica standing exposure is never the outage's: it keeps its WARN
    assert _window(_truth_obj(), [(0, "open"), (3 * MIN, "down"), (4 * MIN, "up")] + beats, 3 * MIN,
                   code="LAST_REPLICA_STANDING") == "WARN"
    # 30 minutes, 5 of them down: 25 outside -> the usual ERROR
    assert _window(_truth_obj(), [(0, "open"), (2 * MIN, "down"), (7 * MIN, "up")] + beats, 30 * MIN) == "ERROR"


def test_sub_second_flaps_are_info_when_closed():
    assert _window(_truth_obj(), [(0, "open")], 999) == "INFO"
    assert _window(_truth_obj(), [(0, "open")], 999, code="UNDER_MIN_ISR") == "INFO"
    assert _window(_truth_obj(), [(0, "open")], 1000) == "WARN"
    assert _window(_truth_obj(), [(0, "open")], 999, is_open=True) == "WARN"  # an open window is no flap
    assert _window(_truth_obj(), [(0, "open")], 999, code="OFFLINE_NO_CANDIDATE") == "ERROR"


def test_cluster_down_and_gap_findings():
    t = Truth(10 * MIN)
    t.incidents[0] = Incident(0, "x", "x", 0, [])
    t.incidents[1] = Incident(1, "y", "y", 0, [])
    t.note_batch(0, 0, 1, 0)
    t.brokers_active(frozenset(), 0, 0)  # never active yet: brokers registering fenced is no cluster down
    t.note_batch(0, 1, 1, 10)
    t.brokers_active(frozenset({1, 2}), 10, 0)
    t.note_batch(0, 2, 1, 5000)  # no NoOp yet: a silence is no gap
    t.beat_seen = True
    t.note_batch(0, 3, 1, 10_000)
    t.brokers_active(frozenset({2}), 10_000, 1)
    t.brokers_active(frozenset(), 12_000, 1)
    t.note_batch(1, 4, 1, 50_000)  # 40 s without a record
    t.brokers_active(frozenset({1}), 50_000, 1)
    t.finish(60_000, lambda k: k, racks={1: "a", 2: "b"})
    assert t.incidents[0].findings == {}
    assert t.incidents[1].findings == {("CLUSTER_DOWN", None, None): "WARN", ("METADATA_GAP", None, None): "WARN"}
    assert t.gaps == [(10_000, 50_000)] and t.downs == [[12_000, 50_000]]
    assert t.incidents[1].cause == "CLUSTER_RESTART"
    assert t.incidents[1].to_json()["expectedFindings"][0]["topic"] is None


def test_a_session_expiring_during_an_outage_gets_a_full_timeout_from_the_next_controller(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("brokers: [{id: 1}, {id: 2}, {id: 3}]\n"
                 "topics: [{name: t, partitions: 3, replication_factor: 3}]\n"
                 "timeline: [{at: 25, event: broker_session_timeout, broker: 2, duration_s: 300},\n"
                 "           {at: 30, event: controller_outage, duration_s: 120}]\n")
    sc = load(str(f))
    simulate(sc, tmp_path / "out", seed=0)
    _, _, after, t_after = _largest_gap(tmp_path / "out")
    fences = [ts for _, ts, r in _records(tmp_path / "out")
              if r.type == "BROKER_REGISTRATION_CHANGE_RECORD" and r.data.get("fenced") == 1]
    # broker 2's session expired at 34 s, during the outage; the controller is back at t_after and fences it
    # one session timeout later, not at once
    assert len(fences) == 1 and fences[0] - t_after >= sc["session_timeout_ms"]


def _causes(d: Path) -> dict[str, str | None]:
    return {i["kind"] + "@" + i["time"][11:19]: i["cause"] for i in _truth(d)}


def test_incident_causes_of_builtin_scenarios(tmp_path):
    for name in ("az-outage", "unclean-election", "last-replica-standing-elr-off"):
        simulate(load(name), tmp_path / name, seed=7)
    # the two brokers of rack a (of three racks) crash together
    assert _causes(tmp_path / "az-outage")["az_outage@00:01:00"] == "AZ_LOSS"
    # broker 2 times out, broker 1 crashes 20 s later: one incident of two brokers; the elections they force
    # are explained by it (no incident of their own)
    c = _causes(tmp_path / "unclean-election")
    assert c["broker_session_timeout@00:00:30"] == c["unclean_shutdown@00:00:50"] == "BROKERS_DOWN"
    assert c["unclean_election@00:01:40"] is None and c["config_change@00:01:50"] is None
    # the last replica's crash fences the last active broker: a cluster incident; its re-election after the
    # cluster is back loses data, explained by nothing else
    c = _causes(tmp_path / "last-replica-standing-elr-off")
    assert c["unclean_shutdown@00:01:30"] == "CLUSTER_RESTART" and c["restart@00:02:32"] == "UNCLEAN_ELECTION"
    # brokers 1 and 2 cut off a minute before it: the lead-up of the same cluster incident
    assert c["network_partition@00:00:30"] == "CLUSTER_RESTART"


def test_fleet_without_info_findings_still_gives_single_broker_incidents_a_cause(tmp_path):
    simulate(load("fleet-large", {"partitions": "60", "events": "8"}), tmp_path / "f", seed=7)
    incs = _truth(tmp_path / "f")
    downs = [i for i in incs if i["kind"] in ("controlled_shutdown", "unclean_shutdown", "broker_session_timeout")]
    assert downs and {i["cause"] for i in downs} == {"BROKER_DOWN"}
    assert all(f["severity"] != "INFO" for i in incs for f in i["expectedFindings"])
