"""Durability violations (audit) on realistic metadata logs, finding by finding.

Each log is written with the project's batch encoder, checked to be what a Kafka controller writes
(``verify_log_dir``: no divergence), turned into silver tables without Spark
(``audit.local.silver_tables``) and audited.  Offsets and times are the log's own.
"""
from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pytest

from audit.local import silver_tables, log_end
from audit.violations import VIOLATION_SCHEMA, violations
from controller_core.rules.verify import verify_log_dir
from lake import catalog
from lake.config import load_config
from simulator.writer import write_log

T0 = 1_700_000_000_000  # epoch ms of the first batch
MIN = 60_000


def uuid(name: str) -> str:
    return base64.urlsafe_b64encode(hashlib.md5(name.encode()).digest()).decode().rstrip("=")


class Log:
    """A metadata log under construction: features, a cluster-wide min.insync.replicas, brokers registered
    and unfenced.  ``add(*records, at=ms)`` appends one batch written at ``T0 + ms``."""

    def __init__(self, mv: int = 21, *, elr: bool = False, brokers=(0, 1, 2), min_isr: int | None = 2):
        self.mv, self.batches, self.next_offset, self.clock = mv, [], 0, 0
        self.epoch: dict[int, int] = {}
        self.generation: dict[int, int] = {}
        head = [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": mv})]
        if elr:
            head.append(("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1}))
        if min_isr is not None:
            head.append(self.config("min.insync.replicas", str(min_isr)))
        self.add(*head)
        for b in brokers:
            self.add(self.register(b))
        self.add(*[self.unfence(b) for b in brokers])

    @property
    def pv(self) -> int:
        return 2 if self.mv >= 23 else 1 if self.mv >= 17 else 0

    def add(self, *records, at: int | None = None) -> list[int]:
        self.clock = self.clock + 10 if at is None else at
        base = self.next_offset
        self.batches.append((base, self.clock, list(records)))
        self.next_offset += len(records)
        return list(range(base, base + len(records)))

    @staticmethod
    def config(name, value, resource_type=4, resource=""):
        return ("CONFIG_RECORD", 0, {"resourceType": resource_type, "resourceName": resource, "name": name,
                                     "value": value})

    def register(self, b: int, offset: int | None = None):
        """A RegisterBrokerRecord of a new incarnation (epoch: the offset it is written at)."""
        n = self.generation[b] = self.generation.get(b, 0) + 1
        self.epoch[b] = self.next_offset if offset is None else offset
        return ("REGISTER_BROKER_RECORD", 3, {
            "brokerId": b, "incarnationId": uuid(f"broker-{b}-{n}"), "brokerEpoch": self.epoch[b], "endPoints": [],
            "features": [], "rack": None, "fenced": True, "inControlledShutdown": False, "logDirs": []})

    def unfence(self, b):
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": self.epoch[b], "fenced": -1})

    def fence(self, b):
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 0, {"brokerId": b, "brokerEpoch": self.epoch[b], "fenced": 1})

    def shutdown(self, b):
        return ("BROKER_REGISTRATION_CHANGE_RECORD", 1,
                {"brokerId": b, "brokerEpoch": self.epoch[b], "inControlledShutdown": 1})

    def create(self, name: str, *assignments, at=None) -> list[int]:
        tid = uuid("topic-" + name)
        parts = [("PARTITION_RECORD", self.pv, {"partitionId": i, "topicId": tid, "replicas": list(r), "isr": list(r),
                                                "removingReplicas": [], "addingReplicas": [], "leader": r[0],
                                                "leaderEpoch": 0, "partitionEpoch": 0})
                 for i, r in enumerate(assignments)]
        return self.add(("TOPIC_RECORD", 0, {"name": name, "topicId": tid}), *parts, at=at)

    def change(self, name: str, p: int, **fields):
        keys = {"elr": "eligibleLeaderReplicas", "lke": "lastKnownElr", "lrs": "leaderRecoveryState"}
        data = {"partitionId": p, "topicId": uuid("topic-" + name)}
        data.update({keys.get(k, k): v for k, v in fields.items()})
        return ("PARTITION_CHANGE_RECORD", self.pv, data)

    def write(self, data_dir: Path) -> Path:
        at = {base: at for base, at, _ in self.batches}
        write_log(data_dir, [recs for _, _, recs in self.batches], timestamp=lambda base: T0 + at[base])
        return data_dir


@pytest.fixture(scope="module")
def config():
    return load_config()


def audit(log: Log, tmp_path: Path, config) -> tuple[pa.Table, list[dict]]:
    d = log.write(tmp_path / "data")
    rep = verify_log_dir(d)
    assert rep.divergences == [], [(x.offset, x.field, x.recorded, x.expected) for x in rep.divergences]
    tables = silver_tables(d)
    out = violations(tables, config, *log_end(tables))
    assert out.schema == VIOLATION_SCHEMA
    return out, out.to_pylist()


def find(rows, code, partition=0) -> list[dict]:
    return [r for r in rows if r["code"] == code and (partition is None or r["partition"] == partition)]


def window(r) -> tuple:
    return r["first_offset"], r["last_offset"], r["open"], r["duration_ms"], r["severity"]


# ------------------------------------------------------------------------ KIP-966 "last replica standing"
def kip966_elr_off() -> tuple[Log, dict]:
    """T0 broker 0 drops out, T1 broker 1 drops out (broker 2 leads alone), T2 broker 2 crashes, T3 brokers
    0 and 1 come back (cannot lead: not in ISR), T4 broker 2 restarts uncleanly and is re-elected."""
    log = Log(21)
    log.create("orders", [0, 1, 2], at=1 * MIN)
    at = {}
    at["t0"], _ = log.add(log.change("orders", 0, isr=[1, 2], leader=1), log.fence(0), at=2 * MIN)
    at["t1"], _ = log.add(log.change("orders", 0, isr=[2], leader=2), log.fence(1), at=3 * MIN)
    at["t2"], at["fence2"] = log.add(log.change("orders", 0, leader=-1), log.fence(2), at=4 * MIN)
    [at["t3a"]] = log.add(log.unfence(0), at=6 * MIN)
    [at["t3b"]] = log.add(log.unfence(1), at=6 * MIN + 500)
    [at["register"]] = log.add(log.register(2), at=20 * MIN)
    at["unfence2"], at["t4"] = log.add(log.unfence(2), log.change("orders", 0, leader=2), at=20 * MIN + 2_000)
    [at["catchup"]] = log.add(log.change("orders", 0, isr=[2, 0, 1]), at=21 * MIN)
    return log, at


def test_kip966_story_with_elr_off_is_last_replica_standing_then_data_loss(tmp_path, config):
    log, at = kip966_elr_off()
    _, rows = audit(log, tmp_path, config)

    [lrs] = find(rows, "LAST_REPLICA_STANDING")
    assert window(lrs) == (at["t1"], at["catchup"], False, 18 * MIN, "WARN")
    assert lrs["brokers"] == [2] and lrs["topic"] == "orders"
    assert json.loads(lrs["evidence_before"])["isr"] == [1, 2]
    assert json.loads(lrs["evidence_after"]) | {} == {
        "replicas": [0, 1, 2], "isr": [2], "eligibleLeaderReplicas": [], "lastKnownElr": [], "addingReplicas": [],
        "removingReplicas": [], "leader": 2, "leaderEpoch": 2, "partitionEpoch": 2, "leaderRecoveryState": 0}

    [loss] = find(rows, "DATA_LOSS_LIKELY")
    assert (loss["first_offset"], loss["last_offset"], loss["severity"], loss["brokers"]) == (
        at["t4"], at["t4"], "ERROR", [2])
    for off in (at["t1"], at["fence2"], at["register"], at["t4"]):  # shrink, crash, re-registration, re-election
        assert f"offset {off}" in loss["explanation"]
    assert "broker 2" in loss["explanation"] and "orders-0" in loss["explanation"]
    assert json.loads(loss["evidence_before"])["leader"] == -1 and json.loads(loss["evidence_after"])["leader"] == 2

    # under min ISR from the shrink to [2] until the catch-up: 18 min, past audit.long_window_ms -> ERROR
    [under] = find(rows, "UNDER_MIN_ISR")
    assert window(under) == (at["t1"], at["catchup"], False, 18 * MIN, "ERROR")
    assert under["brokers"] == [0, 1]
    # leaderless from the crash until the re-election: 16 min 2 s
    [offline] = find(rows, "OFFLINE")
    assert window(offline) == (at["t2"], at["t4"], False, 16 * MIN + 2_000, "ERROR")
    assert offline["brokers"] == [2]
    [at_min] = find(rows, "AT_MIN_ISR")
    assert window(at_min) == (at["t0"], at["t1"], False, MIN, "INFO")
    assert find(rows, "UNCLEAN_ELECTION") == [] and find(rows, "OFFLINE_NO_CANDIDATE") == []


def test_kip966_story_with_elr_on_elects_the_elr_member_and_loses_nothing(tmp_path, config):
    log = Log(25, elr=True)
    log.create("orders", [0, 1, 2], at=1 * MIN)
    [t0, _] = log.add(log.change("orders", 0, isr=[1, 2], leader=1), log.fence(0), at=2 * MIN)
    [t1, _] = log.add(log.change("orders", 0, isr=[2], leader=2, elr=[1]), log.fence(1), at=3 * MIN)
    [t2, _] = log.add(log.change("orders", 0, isr=[], leader=-1, elr=[1, 2], lke=[2]), log.fence(2), at=4 * MIN)
    [_, t3] = log.add(log.unfence(1), log.change("orders", 0, isr=[1], leader=1, elr=[2], lke=[]), at=6 * MIN)
    log.add(log.unfence(0), at=6 * MIN + 500)
    [t4, _] = log.add(log.change("orders", 0, elr=[]), log.register(2, log.next_offset), at=20 * MIN)
    log.add(log.unfence(2), at=20 * MIN + 2_000)
    [grow] = log.add(log.change("orders", 0, isr=[1, 2]), at=21 * MIN)
    out, rows = audit(log, tmp_path, config)

    # broker 1, in ELR [1, 2] while the partition was leaderless, is elected cleanly when it comes back
    hist = silver_tables(tmp_path / "data")[catalog.PARTITION_STATE_HISTORY.name].to_pylist()
    elected = next(r for r in hist if r["offset"] == t3)
    assert (elected["leader"], elected["isr"], elected["eligible_leader_replicas"]) == (1, [1], [2])
    assert find(rows, "DATA_LOSS_LIKELY") == [] and find(rows, "UNCLEAN_ELECTION") == []
    assert find(rows, "LAST_REPLICA_STANDING") == [] and find(rows, "ELR_MEMBER_FENCED_LEADER") == []
    assert find(rows, "OFFLINE_NO_CANDIDATE") == []  # ELR [1, 2] kept clean candidates
    [under] = find(rows, "UNDER_MIN_ISR")
    assert window(under) == (t1, grow, False, 18 * MIN, "ERROR")
    # all three brokers fenced from T2 until broker 1 returns: the cluster was down, one finding says so and
    # the partition's leaderless window inside it is INFO
    [down] = find(rows, "CLUSTER_DOWN", partition=None)
    assert window(down) == (t2 + 1, t3 - 1, False, 2 * MIN, "WARN") and down["brokers"] == [0, 1, 2]
    [offline] = find(rows, "OFFLINE")
    assert window(offline) == (t2, t3, False, 2 * MIN, "INFO")
    assert "cluster-wide outage" in offline["explanation"]
    assert "ELR [1, 2]" in offline["explanation"]
    assert t0 < t1 < t4


# ------------------------------------------------------------------------------------ unclean election
def test_unclean_election_names_the_replicas_whose_data_may_be_gone(tmp_path, config):
    log = Log(21, brokers=(1, 2, 3), min_isr=None)
    log.create("u", [1, 2, 3], at=MIN)
    [cfg] = log.add(log.config("unclean.leader.election.enable", "true", 2, "u"), at=2 * MIN)
    [shrink] = log.add(log.change("u", 0, isr=[1]), at=3 * MIN)
    [elect, _] = log.add(log.change("u", 0, leader=2, isr=[2], lrs=1), log.fence(1), at=4 * MIN)
    _, rows = audit(log, tmp_path, config)

    [unclean] = find(rows, "UNCLEAN_ELECTION")
    assert (unclean["first_offset"], unclean["severity"], unclean["brokers"]) == (elect, "ERROR", [1])
    assert json.loads(unclean["evidence_before"])["isr"] == [1]
    assert json.loads(unclean["evidence_after"])["leaderRecoveryState"] == 1
    assert "broker 2" in unclean["explanation"] and "[1]" in unclean["explanation"]
    [topic] = find(rows, "UNCLEAN_CONFIG", None)
    assert (topic["topic"], topic["partition"], topic["first_offset"], topic["last_offset"], topic["open"]) == (
        "u", None, cfg, None, True)
    assert topic["duration_ms"] == 2 * MIN  # to the end of the log (the election batch)
    assert shrink < elect


# ------------------------------------------------------------------------------------ rolling restart
def test_rolling_restart_with_controlled_shutdowns_finds_nothing_above_info(tmp_path, config):
    log = Log(21, brokers=(1, 2, 3))
    assign = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]
    log.create("t", *assign, at=MIN)
    isr = [list(r) for r in assign]
    leader = [r[0] for r in assign]
    clock = 2 * MIN
    for b in (1, 2, 3):
        changes = []
        for p, reps in enumerate(assign):
            isr[p] = [x for x in isr[p] if x != b]
            if leader[p] == b:
                leader[p] = next(x for x in reps if x in isr[p])
                changes.append(log.change("t", p, isr=list(isr[p]), leader=leader[p]))
            else:
                changes.append(log.change("t", p, isr=list(isr[p])))
        log.add(log.shutdown(b), *changes, at=clock)
        log.add(log.fence(b), at=clock + 1_000)
        log.add(log.register(b), at=clock + 30_000)
        log.add(log.unfence(b), at=clock + 31_000)
        for p in range(3):
            isr[p].append(b)
            log.add(log.change("t", p, isr=list(isr[p])), at=clock + 40_000 + p)
        clock += MIN
    for p, reps in enumerate(assign):  # preferred leaders back
        if leader[p] != reps[0]:
            leader[p] = reps[0]
            log.add(log.change("t", p, leader=reps[0]), at=clock)
    _, rows = audit(log, tmp_path, config)

    assert {r["severity"] for r in rows} == {"INFO"}
    assert {r["code"] for r in rows} == {"AT_MIN_ISR"}
    assert len(rows) == 9  # each partition at min ISR 2 once per restarted broker
    assert {r["duration_ms"] for r in rows} == {40_000, 40_001, 40_002}


# --------------------------------------------------------------------------- long under-min-ISR window
def test_long_under_min_isr_window_has_the_exact_duration_and_is_an_error(tmp_path, config):
    log = Log(21, brokers=(1, 2, 3))
    log.create("t", [1, 2, 3], [2, 3, 1], at=MIN)
    [long_start] = log.add(log.change("t", 0, isr=[1]), at=2 * MIN)
    [short_start] = log.add(log.change("t", 1, isr=[2]), at=2 * MIN + 5)
    [short_end] = log.add(log.change("t", 1, isr=[2, 3]), at=2 * MIN + 5 + 599_999)
    [long_end] = log.add(log.change("t", 0, isr=[1, 2]), at=2 * MIN + 654_321)
    [reopen] = log.add(log.change("t", 1, isr=[2]), at=2 * MIN + 700_000)
    log.add(log.change("t", 0, isr=[1, 2, 3]), at=2 * MIN + 730_000)
    _, rows = audit(log, tmp_path, config)

    assert [window(r) for r in find(rows, "UNDER_MIN_ISR")] == [(long_start, long_end, False, 654_321, "ERROR")]
    assert [window(r) for r in find(rows, "UNDER_MIN_ISR", 1)] == [
        (short_start, short_end, False, 599_999, "WARN"),  # one ms short of audit.long_window_ms
        (reopen, None, True, 30_000, "WARN")]  # still open: measured to the end of the log
    assert "below its effective min ISR 2" in find(rows, "UNDER_MIN_ISR")[0]["explanation"]


def test_long_window_threshold_zero_never_raises(tmp_path):
    cfg = load_config(overrides={"audit": {"long_window_ms": 0}})
    log = Log(21, brokers=(1, 2, 3))
    log.create("t", [1, 2, 3], at=MIN)
    log.add(log.change("t", 0, isr=[1]), at=2 * MIN)
    log.add(log.change("t", 0, isr=[1, 2]), at=200 * MIN)
    _, rows = audit(log, tmp_path, cfg)
    assert [r["severity"] for r in find(rows, "UNDER_MIN_ISR")] == ["WARN"]


# ------------------------------------------------------------------------------------- topic findings
def test_min_isr_above_replication_factor_is_one_row_per_topic(tmp_path, config):
    log = Log(21, brokers=(1, 2, 3), min_isr=None)
    [cfg] = log.add(log.config("min.insync.replicas", "3", 2, "small"), at=MIN)
    [created, *_] = log.create("small", [1, 2], [2, 3], [3, 1], at=2 * MIN)
    _, rows = audit(log, tmp_path, config)
    [row] = find(rows, "MIN_ISR_ABOVE_RF", None)
    assert (row["topic"], row["first_offset"], row["open"], row["severity"]) == ("small", created + 1, True, "WARN")
    assert "3 partition(s)" in row["explanation"] and "min.insync.replicas=3" in row["explanation"]
    assert json.loads(row["evidence_after"])["effectiveMinIsr"] == 2
    assert cfg < created


def test_invariant_breaches_are_carried_over_with_their_severity(tmp_path, config):
    log, _ = kip966_elr_off()
    out, rows = audit(log, tmp_path, config)
    tables = silver_tables(tmp_path / "data")
    inv = [r for r in rows if r["code"].startswith("INV-")]
    assert inv  # INV-UNDER-MINISR (INFO) at the shrink to [2]
    assert [(r["code"], r["first_offset"], r["severity"], r["explanation"]) for r in inv] == [
        (b["rule"], b["offset"], b["severity"], b["message"])
        for b in tables[catalog.INVARIANT_BREACHES.name].to_pylist()]


def test_last_known_leader_elected_while_fenced(tmp_path, config):
    """§2.3-3 at the pinned commit: with ISR and ELR empty, the single LastKnownElr member is elected
    without checking that it is active -- here broker 0, still fenced after its unclean restart.  The
    election is unclean and its leader cannot serve: ELR_MEMBER_FENCED_LEADER and UNCLEAN_ELECTION."""
    log = Log(25, elr=True, brokers=(0, 1), min_isr=1)
    log.create("solo", [0], at=1 * MIN)
    fenced, _ = log.add(log.change("solo", 0, leader=-1, isr=[], elr=[0], lke=[0]), log.fence(0), at=2 * MIN)
    cleared, _ = log.add(log.change("solo", 0, elr=[]), log.register(0), at=3 * MIN)
    [elected] = log.add(log.change("solo", 0, leader=0, isr=[0], lrs=1), at=3 * MIN + 100)  # 0 still fenced
    d = log.write(tmp_path / "data")
    tables = silver_tables(d)
    rows = violations(tables, config, *log_end(tables)).to_pylist()
    [fenced_leader] = find(rows, "ELR_MEMBER_FENCED_LEADER")
    assert (fenced_leader["first_offset"], fenced_leader["brokers"], fenced_leader["severity"]) == (elected, [0], "WARN")
    assert "solo-0" in fenced_leader["explanation"]
    [unclean] = find(rows, "UNCLEAN_ELECTION")
    assert unclean["first_offset"] == elected
    # the invariant checker says the same in its own terms
    breaches = {(b["rule"], b["offset"]) for b in tables[catalog.INVARIANT_BREACHES.name].to_pylist()}
    assert {("INV-LEADER-ACTIVE", elected), ("INV-UNCLEAN-ELECTION", elected)} <= breaches
    [gap] = find(rows, "OFFLINE_NO_CANDIDATE")
    assert (gap["first_offset"], gap["last_offset"]) == (cleared, elected)
    assert fenced < cleared


# ------------------------------------------------------------------------ leaderless / diskless topics
def test_a_diskless_topic_is_not_judged_by_the_isr_rules_and_says_why(tmp_path, config):
    """Issue 14 item 3: a topic created with diskless.enable=true (KIP-1150) keeps its records in object storage;
    its partitions get no ISR-rule finding, the topic one INFO DISKLESS_TOPIC; a disk topic beside it going
    through the same changes is judged as usual.  The scalar reference agrees on the windows."""
    from audit.scalar import WINDOW_CODES, violations_scalar

    log = Log(21, brokers=(1, 2, 3))
    log.create("disk", [1, 2, 3], at=MIN)
    [lake_at, *_] = log.create("lake", [1, 2, 3], at=MIN + 10)
    log.add(log.config("diskless.enable", "true", resource_type=2, resource="lake"), at=MIN + 20)
    [disk_start, lake_start] = log.add(log.change("disk", 0, isr=[1]), log.change("lake", 0, isr=[1]), at=2 * MIN)
    log.add(log.change("disk", 0, leader=-1), log.change("lake", 0, leader=-1), log.fence(1),
            at=3 * MIN)
    out, rows = audit(log, tmp_path, config)

    lake = [r for r in rows if r["topic"] == "lake" and not r["code"].startswith("INV-")]  # §4: the log's integrity
    assert [(r["code"], r["severity"], r["partition"], r["open"]) for r in lake] == [
        ("DISKLESS_TOPIC", "INFO", None, True)]
    assert "diskless.enable=true" in lake[0]["explanation"] and "1 partitions" in lake[0]["explanation"]
    assert json.loads(lake[0]["evidence_after"]) == {"diskless.enable": "true"}
    disk = {r["code"] for r in rows if r["topic"] == "disk"}
    assert {"UNDER_MIN_ISR", "OFFLINE"} <= disk

    tables = silver_tables(log.write(tmp_path / "again"))
    assert [r["diskless"] for r in tables[catalog.TOPIC_CONFIG_HISTORY.name].to_pylist() if r["topic_name"] == "lake"][-1] \
        == "diskless.enable"
    fast = sorted((r["code"], r["topic_id"], r["partition"], r["first_offset"]) for r in rows
                  if r["code"] in WINDOW_CODES)
    slow = sorted((r["code"], r["topic_id"], r["partition"], r["first_offset"])
                  for r in violations_scalar(tables, config, *log_end(tables)))
    assert fast == slow and fast
