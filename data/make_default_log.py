#!/usr/bin/env python3
"""Write the embedded default data directory ``data/default-cluster/`` (deterministic).

The directory is the data directory of node 1 of a small combined-mode KRaft cluster (nodes 1, 2, 3 are
each broker and controller), laid out as Kafka lays it out::

    default-cluster/
        bootstrap.checkpoint            SNAPSHOT_HEADER | FEATURE_LEVEL metadata.version | SNAPSHOT_FOOTER
        meta.properties
        __cluster_metadata-0/
            00000000000000000000.log    first log segment
            000000000000000NNNNN.log    second segment, named by its base offset
            <endOffset>-<epoch>.checkpoint   metadata snapshot = state of the log before endOffset
            leader-epoch-checkpoint     raft epochs of the metadata log ("epoch startOffset")
            partition.metadata          topic id of the metadata partition (Uuid.METADATA_TOPIC_ID)
            quorum-state                raft election state (JSON)

Story (~30 simulated minutes, metadata.version 3.9-IV0 = level 21: PartitionRecord v1 /
PartitionChangeRecord v1 with directories, RegisterBrokerRecord v3, BrokerRegistrationChangeRecord v0
for fence/unfence):

* t=0      node 3 wins the first raft election (LEADER_CHANGE, epoch 1) and writes the bootstrap
           transaction (metadata.version, ZK migration state NONE);
* t=1s     brokers 2, 3, 1 register (fenced, broker epoch = offset of the record), the three controllers
           register, then the brokers are unfenced;
* t=60s    topic ``orders`` (6 partitions, RF 3, min.insync.replicas=2) in one atomic batch
           (TopicRecord, ConfigRecord, PartitionRecords), t=95s topic ``payments`` (3 partitions, RF 3);
* t=6min   broker 2 lags: the leaders of three partitions shrink it out of their ISR (AlterPartition;
           no leader field since MV >= 3.6), ~40 s later it catches up and they expand the ISR again;
* t=13.5min node 3 (active controller and broker) crashes; node 1 wins raft epoch 2 (LEADER_CHANGE),
           and after the broker session timeout (9 s) fences broker 3: one batch with a
           PartitionChangeRecord for every partition whose ISR holds 3 (leader moved to the first live
           replica in replica order where 3 led), then BrokerRegistrationChangeRecord fenced=1;
* t=15min  the log rolls to the second segment; t=15.5min a ConfigRecord sets payments retention.ms;
* t=16min  the controller writes a metadata snapshot (end offset = the next offset at that moment);
* t=19min  node 3 restarts: RegisterBrokerRecord with a new incarnation id and a new epoch (fenced),
           RegisterControllerRecord, unfence, then the leaders add 3 back to their ISRs;
* t=25min  the automatic leader rebalance (preferred election) gives broker 3 its partitions back;
* t=30min  end.

NoOp heartbeat records (each in its own batch, as the controller writes them) every 10 s, i.e. the log was
written with ``metadata.max.idle.interval.ms=10000`` (Kafka's default is 500 ms; a sparser interval keeps
the file to a few hundred records).  Every record is checked against the controller rules while it is
generated (docs: controller-rules.md): epochs, leader in ISR, ISR within replicas, new ISR members active,
fenced broker out of every ISR, broker epochs of change records.

Everything is derived from a fixed seed and a fixed start time; the output is byte-for-byte identical on
every run.  Usage::

    python data/make_default_log.py [--out DIR]      # default: data/default-cluster next to this file
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # runnable from a checkout without installation

from controller_core.codec.batch import encode_batch  # noqa: E402
from controller_core.codec.message import uuid_to_str  # noqa: E402

SEED = 20250115
START_MS = 1736931600000            # 2025-01-15T09:00:00Z
START_TEXT = "Wed Jan 15 09:00:00 UTC 2025"
FORMAT_MS = START_MS - 41_317       # kafka-storage.sh format, shortly before the first start
MV_LEVEL = 21                       # 3.9-IV0
NOOP_INTERVAL_MS = 10_000
SESSION_TIMEOUT_MS = 9_000
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"
NODES = (1, 2, 3)
DATA_NODE = 1                       # whose data directory this is

PARTITION_RECORD_V = 1
PARTITION_CHANGE_V = 1
REGISTER_BROKER_V = 3


# --------------------------------------------------------------------------------------------- ids
def random_uuid(rng: random.Random) -> str:
    """Kafka ``Uuid.randomUuid()``: a version-4 UUID whose text form does not start with '-' and
    that is not one of the reserved ids."""
    while True:
        raw = bytearray(rng.getrandbits(8) for _ in range(16))
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        text = uuid_to_str(bytes(raw))
        if not text.startswith("-") and text not in ("AAAAAAAAAAAAAAAAAAAAAA", METADATA_TOPIC_ID):
            return text


class IllegalRecord(AssertionError):
    pass


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise IllegalRecord(msg)


# ------------------------------------------------------------------------------------------ cluster
class Cluster:
    """Controller-side state plus the log being written.  ``append`` validates and applies records."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.next_offset = 0
        self.raft_epoch = 0
        self.raft_leader = -1
        self.epoch_starts: list[tuple[int, int]] = []     # (epoch, start offset)
        self.batches: list[tuple[int, int, bytes]] = []   # (base offset, timestamp, bytes)
        self.features: dict[str, int] = {}
        self.zk_migration_state: int | None = None
        self.brokers: dict[int, dict] = {}       # RegisterBrokerRecord data, kept current
        self.controllers: dict[int, dict] = {}   # RegisterControllerRecord data
        self.topics: dict[str, str] = {}         # name -> id, in creation order
        self.partitions: dict[tuple[str, int], dict] = {}  # (topic id, partition) -> PartitionRecord data
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.last_timestamp = 0
        self.in_transaction = False

    # --------------------------------------------------------------------------- queries
    def active(self, b: int) -> bool:
        reg = self.brokers.get(b)
        return reg is not None and not reg["fenced"] and not reg["inControlledShutdown"]

    def topic_partitions(self):
        for name, tid in self.topics.items():
            pids = sorted(p for (t, p) in self.partitions if t == tid)
            for p in pids:
                yield name, tid, p, self.partitions[(tid, p)]

    def log_dir(self, b: int) -> str:
        return self.brokers[b]["logDirs"][0]

    # --------------------------------------------------------------------------- writing
    def append(self, ts: int, records: list[tuple[str, int, dict]]) -> int:
        """Append one batch at time ``ts``; returns its base offset."""
        check(ts > self.last_timestamp, f"timestamps must increase ({ts} after {self.last_timestamp})")
        base = self.next_offset
        control = records[0][0] in ("LEADER_CHANGE",)
        if control:
            check(len(records) == 1, "a control batch holds one record")
        for i, (rtype, version, data) in enumerate(records):
            self.apply(base + i, rtype, version, data)
        data = encode_batch(base, records, leader_epoch=self.raft_epoch, timestamp=ts)
        self.batches.append((base, ts, data))
        self.next_offset = base + len(records)
        self.last_timestamp = ts
        self.post_batch_checks(records)
        return base

    def leader_change(self, ts: int, leader: int, granting: list[int]) -> None:
        self.raft_epoch += 1
        self.raft_leader = leader
        self.epoch_starts.append((self.raft_epoch, self.next_offset))
        self.append(ts, [("LEADER_CHANGE", 0, {
            "version": 0, "leaderId": leader,
            "voters": [{"voterId": v} for v in NODES],
            "grantingVoters": [{"voterId": v} for v in granting]})])

    # --------------------------------------------------------------------------- replay + rules
    def apply(self, offset: int, rtype: str, version: int, d: dict) -> None:
        if rtype == "LEADER_CHANGE":
            check(d["leaderId"] == self.raft_leader, "LEADER_CHANGE names the raft leader")
        elif rtype == "BEGIN_TRANSACTION_RECORD":
            check(not self.in_transaction, "nested transaction")
            self.in_transaction = True
        elif rtype == "END_TRANSACTION_RECORD":
            check(self.in_transaction, "END without BEGIN")
            self.in_transaction = False
        elif rtype == "FEATURE_LEVEL_RECORD":
            self.features[d["name"]] = d["featureLevel"]
        elif rtype == "ZK_MIGRATION_STATE_RECORD":
            self.zk_migration_state = d["zkMigrationState"]
        elif rtype == "REGISTER_BROKER_RECORD":
            check(version == REGISTER_BROKER_V, "RegisterBrokerRecord version")
            old = self.brokers.get(d["brokerId"])
            if old is not None:
                check(old["incarnationId"] != d["incarnationId"], "new registration = new incarnation here")
                check(d["brokerEpoch"] > old["brokerEpoch"], "broker epoch grows")
            check(d["brokerEpoch"] <= offset, "a broker epoch is never later than its record")
            self.brokers[d["brokerId"]] = copy.deepcopy(d)
        elif rtype == "REGISTER_CONTROLLER_RECORD":
            self.controllers[d["controllerId"]] = copy.deepcopy(d)
        elif rtype == "BROKER_REGISTRATION_CHANGE_RECORD":
            reg = self.brokers.get(d["brokerId"])
            check(reg is not None, "change for an unregistered broker")
            check(reg["brokerEpoch"] == d["brokerEpoch"], "INV-BROKER-EPOCH-MATCH")
            f = d.get("fenced", 0)
            if f == 1:
                check(not reg["fenced"], "fencing a fenced broker")
                reg["fenced"] = True
            elif f == -1:
                check(reg["fenced"], "unfencing an unfenced broker")
                reg["fenced"] = False
            if d.get("inControlledShutdown", 0) == 1:
                reg["inControlledShutdown"] = True
        elif rtype == "TOPIC_RECORD":
            check(d["name"] not in self.topics, "TopicRecord for a live name")
            self.topics[d["name"]] = d["topicId"]
        elif rtype == "CONFIG_RECORD":
            res = self.configs.setdefault((d["resourceType"], d["resourceName"]), {})
            if d["value"] is None:
                res.pop(d["name"], None)
            else:
                res[d["name"]] = d["value"]
        elif rtype == "PARTITION_RECORD":
            check(version == PARTITION_RECORD_V, "PartitionRecord version")
            check(d["topicId"] in self.topics.values(), "INV-TOPIC-EXISTS")
            key = (d["topicId"], d["partitionId"])
            check(key not in self.partitions, "the log creates each partition once")
            check(d["leaderEpoch"] == 0 and d["partitionEpoch"] == 0, "new partitions start at 0/0")
            check(d["isr"] == [b for b in d["replicas"] if self.active(b)], "creation ISR = active replicas")
            check(d["leader"] == d["isr"][0], "creation leader = first ISR member")
            st = copy.deepcopy(d)
            self.partitions[key] = st
            self.check_partition(st)
        elif rtype == "PARTITION_CHANGE_RECORD":
            check(version == PARTITION_CHANGE_V, "PartitionChangeRecord version")
            key = (d["topicId"], d["partitionId"])
            check(key in self.partitions, "INV-TOPIC-EXISTS (partition)")
            st = self.partitions[key]
            fields = set(d) - {"topicId", "partitionId"}
            check(bool(fields), "INV-RECORD-NOOP")
            old_isr = list(st["isr"])
            new_leader = d.get("leader", -2)
            if d.get("isr") is not None:
                st["isr"] = list(d["isr"])
            if d.get("replicas") is not None:
                st["replicas"] = list(d["replicas"])
            if d.get("directories") is not None:
                st["directories"] = list(d["directories"])
            if new_leader != -2:
                st["leader"] = new_leader
                st["leaderEpoch"] += 1
            st["partitionEpoch"] += 1
            for b in st["isr"]:
                if b not in old_isr and b != new_leader:
                    check(self.active(b), f"INV-ISR-EXPAND-ACTIVE: {b} joins the ISR while inactive")
            self.check_partition(st)
        elif rtype == "NO_OP_RECORD":
            pass
        else:
            raise IllegalRecord(f"story writes no {rtype}")

    def check_partition(self, st: dict) -> None:
        r, i, ld = st["replicas"], st["isr"], st["leader"]
        check(len(set(r)) == len(r) and all(b >= 0 for b in r), "INV-REPLICAS-DISTINCT")
        check(len(st["directories"]) in (0, len(r)), "INV-DIRS-LENGTH")
        check(len(set(i)) == len(i) and set(i) <= set(r), "INV-ISR-SUBSET-REPLICAS")
        check(ld == -1 or ld in i, "INV-LEADER-IN-ISR")
        check(len(i) >= 1, "ELR is off: the ISR never empties")

    def post_batch_checks(self, records) -> None:
        for rtype, _, d in records:
            if rtype == "BROKER_REGISTRATION_CHANGE_RECORD" and d.get("fenced") == 1:
                b = d["brokerId"]
                for _, _, _, st in self.topic_partitions():
                    check(b not in st["isr"] or (st["leader"] == -1 and st["isr"] == [b]),
                          "INV-FENCE-REMOVES-ISR")

    # --------------------------------------------------------------------------- controller decisions
    def change_record(self, tid: str, pid: int, *, isr=None, leader=-2) -> tuple[str, int, dict]:
        d = {"partitionId": pid, "topicId": tid}
        if isr is not None:
            d["isr"] = list(isr)
        if leader != -2:
            d["leader"] = leader
        return ("PARTITION_CHANGE_RECORD", PARTITION_CHANGE_V, d)

    def build_change(self, st: dict, target_isr: list[int], acceptable, preferred=False):
        """PartitionChangeBuilder at MV 3.9, ELR off, no reassignment (§2.1 B3, B4, B7)."""
        def valid(b):
            return acceptable(b) and b in target_isr
        r, cur = st["replicas"], st["leader"]
        if preferred:
            node = r[0] if valid(r[0]) else (cur if valid(cur) else
                                             next((b for b in r[1:] if valid(b)), -1))
        else:
            node = cur if valid(cur) else next((b for b in r if valid(b)), -1)
        leader = node if node != cur else -2
        isr = target_isr if (target_isr and target_isr != st["isr"]) else None
        if leader == -2 and isr is None:
            return None
        return self.change_record(st["topicId"], st["partitionId"], isr=isr, leader=leader)

    def create_topic(self, ts: int, name: str, assignment: list[list[int]], configs: dict[str, str]):
        tid = random_uuid(self.rng)
        recs = [("TOPIC_RECORD", 0, {"name": name, "topicId": tid})]
        for k, v in configs.items():
            recs.append(("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": name, "name": k, "value": v}))
        for pid, replicas in enumerate(assignment):
            isr = [b for b in replicas if self.active(b)]
            recs.append(("PARTITION_RECORD", PARTITION_RECORD_V, {
                "partitionId": pid, "topicId": tid, "replicas": list(replicas), "isr": isr,
                "removingReplicas": [], "addingReplicas": [], "leader": isr[0],
                "leaderEpoch": 0, "partitionEpoch": 0,
                "directories": [self.log_dir(b) for b in replicas]}))
        self.append(ts, recs)
        return tid

    def alter_partition(self, ts: int, requests: list[tuple[str, int, list[int]]]):
        """One AlterPartition request from a leader: [(topic, partition, new ISR)]."""
        recs = []
        for topic, pid, new_isr in requests:
            st = self.partitions[(self.topics[topic], pid)]
            check(st["leader"] in new_isr, "AlterPartition ISR lacks the leader")
            rec = self.build_change(st, new_isr, self.active)
            check(rec is not None and "leader" not in rec[2], "AlterPartition keeps the leader")
            recs.append(rec)
        self.append(ts, recs)

    def fence(self, ts: int, b: int):
        """Session timeout of broker b: partition records first, the fence record after (§2.2)."""
        recs = []
        for _, _, _, st in self.topic_partitions():
            if b in st["isr"]:
                rec = self.build_change(st, [x for x in st["isr"] if x != b],
                                        lambda x: x != b and self.active(x))
                if rec is not None:
                    recs.append(rec)
        recs.append(("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                     {"brokerId": b, "brokerEpoch": self.brokers[b]["brokerEpoch"], "fenced": 1}))
        self.append(ts, recs)

    def unfence(self, ts: int, brokers: list[int]):
        recs = [("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                 {"brokerId": b, "brokerEpoch": self.brokers[b]["brokerEpoch"], "fenced": -1}) for b in brokers]
        # the unfence trigger also visits leaderless partitions; the story never has any
        check(all(st["leader"] != -1 for _, _, _, st in self.topic_partitions()), "no leaderless partitions")
        self.append(ts, recs)

    def preferred_election(self, ts: int):
        recs = []
        for _, _, _, st in self.topic_partitions():
            if st["leader"] != st["replicas"][0]:
                rec = self.build_change(st, st["isr"], self.active, preferred=True)
                if rec is not None:
                    recs.append(rec)
        if recs:
            self.append(ts, recs)
        return len(recs)

    def register_broker(self, ts: int, b: int, incarnation: str, log_dir: str):
        self.append(ts, [("REGISTER_BROKER_RECORD", REGISTER_BROKER_V, {
            "brokerId": b, "isMigratingZkBroker": False, "incarnationId": incarnation,
            "brokerEpoch": self.next_offset,
            "endPoints": [{"name": "PLAINTEXT", "host": f"kafka-{b}", "port": 9092, "securityProtocol": 0}],
            "features": [{"name": "kraft.version", "minSupportedVersion": 0, "maxSupportedVersion": 1},
                         {"name": "metadata.version", "minSupportedVersion": 1,
                          "maxSupportedVersion": MV_LEVEL}],
            "rack": None, "fenced": True, "inControlledShutdown": False, "logDirs": [log_dir]})])

    def register_controller(self, ts: int, c: int, incarnation: str):
        self.append(ts, [("REGISTER_CONTROLLER_RECORD", 0, {
            "controllerId": c, "incarnationId": incarnation, "zkMigrationReady": False,
            "endPoints": [{"name": "CONTROLLER", "host": f"kafka-{c}", "port": 9093, "securityProtocol": 0}],
            "features": [{"name": "kraft.version", "minSupportedVersion": 0, "maxSupportedVersion": 1},
                         {"name": "metadata.version", "minSupportedVersion": 1,
                          "maxSupportedVersion": MV_LEVEL}]})])

    # --------------------------------------------------------------------------- snapshot
    def snapshot_records(self) -> list[tuple[str, int, dict]]:
        """The state as Kafka 3.9 ``MetadataImage.write`` lays it out (features, cluster, topics, configs)."""
        recs = [("FEATURE_LEVEL_RECORD", 0, {"name": n, "featureLevel": v}) for n, v in self.features.items()]
        if self.zk_migration_state is not None:
            recs.append(("ZK_MIGRATION_STATE_RECORD", 0, {"zkMigrationState": self.zk_migration_state}))
        for b in sorted(self.brokers):
            recs.append(("REGISTER_BROKER_RECORD", REGISTER_BROKER_V, copy.deepcopy(self.brokers[b])))
        for c in sorted(self.controllers):
            recs.append(("REGISTER_CONTROLLER_RECORD", 0, copy.deepcopy(self.controllers[c])))
        for name, tid in self.topics.items():
            recs.append(("TOPIC_RECORD", 0, {"name": name, "topicId": tid}))
            for (t, p) in sorted(k for k in self.partitions if k[0] == tid):
                recs.append(("PARTITION_RECORD", PARTITION_RECORD_V, copy.deepcopy(self.partitions[(t, p)])))
        for (rt, rn), kv in self.configs.items():
            for k, v in kv.items():
                recs.append(("CONFIG_RECORD", 0, {"resourceType": rt, "resourceName": rn, "name": k, "value": v}))
        return recs


# ------------------------------------------------------------------------------------------- story
def build(out: Path) -> dict:
    rng = random.Random(SEED)
    cluster_id = random_uuid(rng)
    log_dirs = {n: random_uuid(rng) for n in NODES}
    incarnations = {n: random_uuid(rng) for n in NODES}
    controller_incarnations = {n: random_uuid(rng) for n in NODES}
    c = Cluster(rng)

    def at(seconds: float) -> int:
        return START_MS + int(round(seconds * 1000))

    # Events are (time ms, order, callable); NoOp heartbeats are interleaved by time.
    events: list[tuple[int, int, object]] = []

    def ev(seconds: float, fn):
        events.append((at(seconds), len(events), fn))

    ev(0.0, lambda t: c.leader_change(t, 3, [1, 3]))
    ev(0.712, lambda t: c.append(t, [
        ("BEGIN_TRANSACTION_RECORD", 0, {"name": "Bootstrap records"}),
        ("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": MV_LEVEL}),
        ("ZK_MIGRATION_STATE_RECORD", 0, {"zkMigrationState": 0}),
        ("END_TRANSACTION_RECORD", 0, {})]))
    for i, b in enumerate((2, 3, 1)):
        ev(0.781 + 0.047 * i + 0.011 * (i == 2), lambda t, b=b: c.register_broker(t, b, incarnations[b], log_dirs[b]))
    for i, n in enumerate((3, 1, 2)):
        ev(1.204 + 0.563 * i, lambda t, n=n: c.register_controller(t, n, controller_incarnations[n]))
    ev(3.152, lambda t: c.unfence(t, [3, 1]))
    ev(3.349, lambda t: c.unfence(t, [2]))

    # Replica placement as Kafka's striped placer does it without racks: rotations of the broker list.
    layouts = [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 3, 2], [3, 2, 1], [2, 1, 3]]
    orders_assign = rng.sample(layouts[:3], 3) + rng.sample(layouts[3:], 3)
    payments_assign = rng.sample(layouts[:3], 3)
    ev(60.418, lambda t: c.create_topic(t, "orders", orders_assign, {"min.insync.replicas": "2"}))
    ev(95.077, lambda t: c.create_topic(t, "payments", payments_assign, {}))

    # ISR shrink/expand cycle: broker 2 falls behind as a follower of three partitions.
    def lagging():
        picks = []
        for name, _, pid, st in c.topic_partitions():
            if st["leader"] != 2 and 2 in st["isr"]:
                picks.append((name, pid, st["leader"]))
        rng2 = random.Random(SEED + 2)
        return sorted(rng2.sample(picks, 3), key=lambda p: (p[2], p[0], p[1]))

    state = {}

    def shrink(t):
        state["lag"] = lagging()
        by_leader: dict[int, list] = {}
        for name, pid, ld in state["lag"]:
            by_leader.setdefault(ld, []).append((name, pid))
        for k, (ld, parts) in enumerate(sorted(by_leader.items())):
            reqs = [(n, p, [x for x in c.partitions[(c.topics[n], p)]["isr"] if x != 2]) for n, p in parts]
            c.alter_partition(t + 37 * k, reqs)

    def expand(t):
        by_leader: dict[int, list] = {}
        for name, pid, ld in state["lag"]:
            by_leader.setdefault(ld, []).append((name, pid))
        for k, (ld, parts) in enumerate(sorted(by_leader.items(), reverse=True)):
            reqs = [(n, p, c.partitions[(c.topics[n], p)]["isr"] + [2]) for n, p in parts]
            c.alter_partition(t + 113 * k, reqs)

    ev(362.507, shrink)
    ev(404.236, expand)

    # Node 3 (active controller + broker) crashes at 810 s.
    ev(812.391, lambda t: c.leader_change(t, 1, [1, 2]))
    ev(810.0 + SESSION_TIMEOUT_MS / 1000 + 1.377, lambda t: c.fence(t, 3))
    ev(931.644, lambda t: c.append(t, [("CONFIG_RECORD", 0, {
        "resourceType": 2, "resourceName": "payments", "name": "retention.ms", "value": "604800000"})]))

    snap = {}

    def take_snapshot(t):
        snap["end_offset"] = c.next_offset
        snap["epoch"] = c.raft_epoch
        snap["last_ts"] = c.last_timestamp
        snap["time"] = t
        snap["records"] = c.snapshot_records()
    ev(960.0, take_snapshot)

    # Node 3 restarts with a new incarnation.
    new_incarnation = random_uuid(rng)
    new_controller_incarnation = random_uuid(rng)
    ev(1140.283, lambda t: c.register_broker(t, 3, new_incarnation, log_dirs[3]))
    ev(1141.905, lambda t: c.register_controller(t, 3, new_controller_incarnation))
    ev(1143.517, lambda t: c.unfence(t, [3]))

    def catch_up(t):
        by_leader: dict[int, list] = {}
        for name, _, pid, st in c.topic_partitions():
            if 3 in st["replicas"] and 3 not in st["isr"]:
                by_leader.setdefault(st["leader"], []).append((name, pid))
        k = 0
        for ld in sorted(by_leader):
            parts = by_leader[ld]
            cut = max(1, len(parts) // 2)
            for chunk in (parts[:cut], parts[cut:]):
                if chunk:
                    reqs = [(n, p, c.partitions[(c.topics[n], p)]["isr"] + [3]) for n, p in chunk]
                    c.alter_partition(t + 131 * k + rng.randrange(0, 40), reqs)
                    k += 1
    ev(1151.020, catch_up)
    ev(1500.631, lambda t: c.preferred_election(t))

    # NoOp heartbeats every 10 s while a controller is active (none between the crash and the election).
    k = 0
    while True:
        s = 5.0 + k * NOOP_INTERVAL_MS / 1000
        if s > 1800:
            break
        if not (810.0 < s < 812.391 + 0.5):
            ev(s + (k * 7919 % 23) / 1000, lambda t: c.append(t, [("NO_OP_RECORD", 0, {})]))
        k += 1

    events.sort(key=lambda e: (e[0], e[1]))
    for t, _, fn in events:
        fn(t)
    check(not c.in_transaction, "open transaction at the end")

    # ------------------------------------------------------------------ files
    roll_index = next(i for i, (base, ts, _) in enumerate(c.batches) if ts >= at(900.0))
    segments = [c.batches[:roll_index], c.batches[roll_index:]]
    meta_dir = out / "__cluster_metadata-0"
    meta_dir.mkdir(parents=True, exist_ok=True)
    for old in list(meta_dir.glob("*.log")) + list(meta_dir.glob("*.checkpoint")):
        old.unlink()
    written = []
    for seg in segments:
        name = f"{seg[0][0]:020d}.log"
        (meta_dir / name).write_bytes(b"".join(b for _, _, b in seg))
        written.append(name)

    # metadata snapshot
    snap_name = f"{snap['end_offset']:020d}-{snap['epoch']:010d}.checkpoint"
    st = snap["time"] + 87
    body = snap["records"]
    snap_bytes = (
        encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": snap["last_ts"]})],
                     leader_epoch=snap["epoch"], timestamp=st)
        + encode_batch(1, body, leader_epoch=snap["epoch"], timestamp=st + 196)
        + encode_batch(1 + len(body), [("SNAPSHOT_FOOTER", 0, {"version": 0})],
                       leader_epoch=snap["epoch"], timestamp=st + 198))
    (meta_dir / snap_name).write_bytes(snap_bytes)

    # bootstrap.checkpoint, as kafka-storage.sh format writes it
    (out / "bootstrap.checkpoint").write_bytes(
        encode_batch(0, [("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": 0})],
                     leader_epoch=0, timestamp=FORMAT_MS)
        + encode_batch(1, [("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": MV_LEVEL})],
                       leader_epoch=0, timestamp=FORMAT_MS + 96)
        + encode_batch(2, [("SNAPSHOT_FOOTER", 0, {"version": 0})], leader_epoch=0, timestamp=FORMAT_MS + 98))

    (out / "meta.properties").write_text(
        f"#\n#{START_TEXT}\nnode.id={DATA_NODE}\ndirectory.id={log_dirs[DATA_NODE]}\nversion=1\n"
        f"cluster.id={cluster_id}\n", encoding="ascii", newline="\n")
    quorum = {"clusterId": "", "leaderId": c.raft_leader, "leaderEpoch": c.raft_epoch, "votedId": -1,
              "appliedOffset": 0, "currentVoters": [{"voterId": v} for v in NODES], "data_version": 0}
    (meta_dir / "quorum-state").write_text(json.dumps(quorum, separators=(",", ":")), encoding="ascii",
                                           newline="\n")
    lines = ["0", str(len(c.epoch_starts))] + [f"{e} {o}" for e, o in c.epoch_starts]
    (meta_dir / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n", encoding="ascii", newline="\n")
    (meta_dir / "partition.metadata").write_text(f"version: 0\ntopic_id: {METADATA_TOPIC_ID}", encoding="ascii",
                                                 newline="\n")
    return {"records": c.next_offset, "batches": len(c.batches), "segments": written, "snapshot": snap_name}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=HERE / "default-cluster", help="output directory")
    args = ap.parse_args(argv)
    info = build(args.out)
    print(f"{args.out}: {info['records']} records in {info['batches']} batches, "
          f"segments {', '.join(info['segments'])}, snapshot {info['snapshot']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
