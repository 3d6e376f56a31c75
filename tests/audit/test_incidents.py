"""Incidents (audit/incidents.py): the findings of an audit grouped by cause and time, on logs written the
way a Kafka controller writes them (``verify_log_dir``: no divergence).  A broker going down is one incident
however many partitions it takes below min ISR; a whole-cluster stop is one CLUSTER_RESTART holding the
outage, the metadata gap and every partition window inside them (INFO); a flap is INFO and no incident."""
from __future__ import annotations

import pytest

from audit.local import log_end, silver_tables
from audit.run import audit as run_audit
from controller_core.rules.verify import verify_log_dir
from lake.config import load_config
from test_violations import MIN, Log

NOOP = ("NO_OP_RECORD", 0, {})


class Beating(Log):
    """A log whose active controller appends a NoOpRecord every 10 s between the batches written with
    ``at`` (an idle controller's heartbeat), unless the batch says ``silent`` (nobody wrote the log)."""

    def add(self, *records, at=None, silent=False):
        if at is not None and not silent and self.batches:
            t = self.clock + 10_000
            while t < at:
                super().add(NOOP, at=t)
                t += 10_000
        return super().add(*records, at=at)


def _audit(log: Log, tmp_path, **audit_conf):
    d = log.write(tmp_path / "data")
    rep = verify_log_dir(d)
    assert rep.divergences == [], [(x.offset, x.field, x.recorded, x.expected) for x in rep.divergences]
    tables = silver_tables(d)
    result = run_audit(tables, load_config(overrides={"audit": audit_conf}), *log_end(tables))
    return result.violations.to_pylist(), result.incidents.to_pylist()


def _two_partitions(min_isr: int = 3) -> Log:
    log = Beating(21, min_isr=min_isr)
    log.add(NOOP)  # a controller with heartbeats (Kafka >= 3.3): its silences mean something
    log.create("orders", [0, 1, 2], [1, 2, 0], at=1 * MIN)
    return log


def test_a_broker_down_is_one_incident_for_all_its_partitions(tmp_path):
    log = _two_partitions()
    [shrink0, shrink1, fenced] = log.add(log.change("orders", 0, isr=[1, 2], leader=1),
                                         log.change("orders", 1, isr=[1, 2]), log.fence(0), at=2 * MIN)
    log.add(log.unfence(0), at=5 * MIN)
    [grow0, grow1] = log.add(log.change("orders", 0, isr=[1, 2, 0]), log.change("orders", 1, isr=[1, 2, 0]),
                             at=6 * MIN)
    # later, a follower of orders-1 falls out of the ISR and is back 400 ms later: a flap
    [flap] = log.add(log.change("orders", 1, isr=[1, 0]), at=8 * MIN)
    [back] = log.add(log.change("orders", 1, isr=[1, 0, 2]), at=8 * MIN + 400)
    rows, incidents = _audit(log, tmp_path)

    [inc] = incidents
    assert (inc["cause"], inc["severity"], inc["brokers"], inc["partitions"]) == ("BROKER_DOWN", "WARN", [0], 2)
    assert (inc["first_offset"], inc["last_offset"], inc["open"]) == (shrink0, grow1, False)
    assert "broker 0 fenced" in inc["title"] and "2 partition(s)" in inc["title"]
    under = [r for r in rows if r["code"] == "UNDER_MIN_ISR" and r["first_offset"] in (shrink0, shrink1)]
    assert len(under) == 2 and {r["severity"] for r in under} == {"WARN"}
    assert {r["incident_id"] for r in under} == {inc["incident_id"]}
    [blip] = [r for r in rows if r["code"] == "UNDER_MIN_ISR" and r["first_offset"] == flap]
    assert (blip["last_offset"], blip["duration_ms"], blip["severity"]) == (back, 400, "INFO")
    assert blip["incident_id"] is None  # no broker went down: no incident explains it
    # audit.min_window_ms: 0 turns the flap rule off
    rows, _ = _audit(log, tmp_path / "again", min_window_ms=0)
    [blip] = [r for r in rows if r["code"] == "UNDER_MIN_ISR" and r["first_offset"] == flap]
    assert blip["severity"] == "WARN"


def test_a_stopped_cluster_is_one_restart_incident_with_its_gap_and_windows(tmp_path):
    log = _two_partitions(min_isr=2)
    log.add(NOOP, at=2 * MIN - 500)
    [first] = log.add(log.change("orders", 0, isr=[1, 2], leader=1), log.change("orders", 1, isr=[1, 2]),
                      log.fence(0), at=2 * MIN)[:1]
    log.add(log.change("orders", 0, isr=[2], leader=2), log.change("orders", 1, isr=[2], leader=2), log.fence(1),
            at=2 * MIN + 10_000)
    [off0, off1, down] = log.add(log.change("orders", 0, leader=-1), log.change("orders", 1, leader=-1), log.fence(2),
                                 at=2 * MIN + 20_000)
    # nobody writes the log for 28 minutes (the controllers were stopped too), then the cluster comes back
    [up] = log.add(log.unfence(2), at=30 * MIN, silent=True)
    log.add(log.change("orders", 0, leader=2), log.change("orders", 1, leader=2), at=30 * MIN + 100)
    log.add(log.unfence(0), log.unfence(1), at=30 * MIN + 5_000)
    [grown] = log.add(log.change("orders", 0, isr=[2, 0, 1]), log.change("orders", 1, isr=[2, 1, 0]),
                      at=31 * MIN)[1:]
    log.add(NOOP, at=31 * MIN + 500)
    rows, incidents = _audit(log, tmp_path)

    [inc] = incidents
    assert (inc["cause"], inc["brokers"], inc["partitions"]) == ("CLUSTER_RESTART", [0, 1, 2], 2)
    assert (inc["first_offset"], inc["last_offset"], inc["severity"]) == (first, grown, "WARN")
    [cd] = [r for r in rows if r["code"] == "CLUSTER_DOWN"]
    [gap] = [r for r in rows if r["code"] == "METADATA_GAP"]
    assert (cd["first_offset"], cd["last_offset"], cd["brokers"], cd["severity"]) == (down, up, [0, 1, 2], "WARN")
    assert (gap["first_offset"], gap["last_offset"]) == (down, up)
    # the 28 minutes are the outage's: each partition's OFFLINE / UNDER_MIN_ISR window is INFO and the incident's
    windows = [r for r in rows if r["partition"] is not None and r["code"] in ("AT_MIN_ISR", "OFFLINE", "UNDER_MIN_ISR")]
    assert {(r["code"], r["partition"]) for r in windows} == {(c, p) for c in ("AT_MIN_ISR", "OFFLINE", "UNDER_MIN_ISR") for p in (0, 1)}
    assert {r["severity"] for r in windows} == {"INFO"}
    # broker 2 led both partitions alone with min ISR 2 and ELR off before it stopped: that exposure was
    # real before the outage and stays a WARN (KIP-966 last replica standing), in the same incident
    lrs = [r for r in rows if r["code"] == "LAST_REPLICA_STANDING"]
    assert [(r["brokers"], r["severity"]) for r in lrs] == [([2], "WARN")] * 2
    assert {r["incident_id"] for r in rows} == {inc["incident_id"]}
    [offline] = [r for r in windows if r["code"] == "OFFLINE" and r["first_offset"] == off0]
    assert "across a cluster-wide outage" in offline["explanation"]
    # without the outage rules the same window is a 28-minute ERROR
    rows, _ = _audit(log, tmp_path / "plain", metadata_gap_ms=0, long_window_ms=60_000)
    [offline] = [r for r in rows if r["code"] == "OFFLINE" and r["first_offset"] == off1]
    assert offline["severity"] == "INFO"  # CLUSTER_DOWN still explains it ...
    assert [r["code"] for r in rows if r["code"] == "CLUSTER_DOWN"] == ["CLUSTER_DOWN"]


@pytest.mark.parametrize("racks, cause", [({0: "a", 1: "a", 2: "b", 3: "b"}, "AZ_LOSS"),
                                          ({0: "a", 1: "b", 2: "a", 3: "b"}, "BROKERS_DOWN")])
def test_brokers_down_together_are_one_incident_an_az_loss_when_they_are_a_rack(tmp_path, racks, cause):
    class Racked(Beating):
        def register(self, b, offset=None):
            kind, version, data = super().register(b, offset)
            return kind, version, dict(data, rack=racks[b])

    log = Racked(21, brokers=(0, 1, 2, 3), min_isr=2)
    log.add(NOOP)
    log.create("orders", [0, 2, 3], [1, 3, 2], at=1 * MIN)
    [first] = log.add(log.change("orders", 0, isr=[2, 3], leader=2), log.fence(0), at=2 * MIN)[:1]
    log.add(log.change("orders", 1, isr=[3, 2], leader=3), log.fence(1), at=2 * MIN + 3_000)
    log.add(log.unfence(0), log.unfence(1), at=9 * MIN)
    log.add(log.change("orders", 0, isr=[2, 3, 0]), log.change("orders", 1, isr=[3, 2, 1]), at=10 * MIN)
    rows, incidents = _audit(log, tmp_path)
    [inc] = incidents
    assert (inc["cause"], inc["brokers"], inc["first_offset"]) == (cause, [0, 1], first)
    assert (inc["severity"], inc["partitions"]) == ("INFO", 2)  # at min ISR: nothing worse
    if cause == "AZ_LOSS":
        assert inc["title"].startswith("rack a lost: brokers 0 fenced, 1 fenced")
