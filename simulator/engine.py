"""The event-driven cluster simulator: brokers, replica logs, the active controller and its metadata log.

Every action runs at a simulated time taken from a priority queue (timeline events, and the follow-ups
they schedule: a fence after the session timeout, an unfence after a restart, followers catching up).
Each action asks :mod:`simulator.controller` what the controller writes, writes it as batches through
:class:`simulator.writer.LogWriter`, applies it to the model and updates the ground truth.
"""
from __future__ import annotations

import gc
import heapq
import json
import random
from array import array
from pathlib import Path

import numpy as np

from controller_core.codec.message import uuid_to_str
from simulator import controller as C
from simulator.controller import Ask, Part, Reg, Registrations, apply_change, changed, decide, partition_record
from simulator.fastcodec import ChangeBody, PartitionBody, change_tags, partition_parts, partition_value
from simulator.truth import Incident, Truth, iso
from simulator.writer import LogWriter, write_bootstrap, write_side_files

MIGRATING = "AAAAAAAAAAAAAAAAAAAAAA"
LV_3_7_IV0 = C.MV_LEVELS["3.7-IV0"]  # RegisterControllerRecord (KIP-919)
RESERVED = {"AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"}
TOPIC_RES, BROKER_RES = 2, 4
MIN_ISR, UNCLEAN_KEY = "min.insync.replicas", "unclean.leader.election.enable"
DISKLESS_KEY = "diskless.enable"  # KIP-1150: a leaderless / diskless topic (the audit: controller_core.image.DISKLESS_CONFIGS)
SETUP = -1        # incident index of the cluster's creation (brokers, scenario topics)
HEARTBEAT = -2    # NoOp records belong to no incident
_MISSING = object()
BROKER_RECORDS = frozenset({"REGISTER_BROKER_RECORD", "BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD",
                            "UNFENCE_BROKER_RECORD", "UNREGISTER_BROKER_RECORD"})


class Plan:
    """What the builder decided for one registration and trigger, shared by every partition it applies to:
    the change body's fields, whether the election is unclean, the encoded tagged fields, and the transition
    ``src`` -> ``dst`` of the registration (``bump``: 1 if a leader is written)."""

    __slots__ = ("fields", "unclean", "tags", "src", "dst", "bump", "assignment", "template")

    def __init__(self, src: Reg, fields: dict, unclean: bool, version: int):
        self.src, self.fields, self.unclean = src, fields, unclean
        self.template = {"partitionId": None, "topicId": None, **fields}  # a body, ids to fill in
        self.tags = change_tags(version, fields)
        self.dst, self.bump = changed(src, fields)
        self.assignment = "replicas" in fields or "addingReplicas" in fields or "removingReplicas" in fields


def random_uuid(rng: random.Random) -> str:
    """A version-4 UUID in Kafka's base64 text form, not starting with '-' and not reserved."""
    while True:
        raw = bytearray(rng.getrandbits(128).to_bytes(16, "big"))
        raw[6] = (raw[6] & 0x0F) | 0x40
        raw[8] = (raw[8] & 0x3F) | 0x80
        text = uuid_to_str(bytes(raw))
        if not text.startswith("-") and text not in RESERVED:
            return text


class ReplicaLog:
    """One replica's log: end offset and the leader epochs its records were written in."""

    __slots__ = ("leo", "epochs")

    def __init__(self):
        self.leo = 0
        self.epochs: list[tuple[int, int]] = []  # (leader epoch, start offset)

    def append(self, n: int, epoch: int) -> None:
        if n <= 0:
            return
        if not self.epochs or self.epochs[-1][0] != epoch:
            self.epochs.append((epoch, self.leo))
        self.leo += n

    def truncate(self, leo: int) -> None:
        self.leo = max(0, leo)
        self.epochs = [(e, s) for e, s in self.epochs if s < self.leo]

    def copy_from(self, other: "ReplicaLog") -> None:
        self.leo, self.epochs = other.leo, list(other.epochs)

    @property
    def last_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1


_EMPTY_LOG = ReplicaLog()  # what a replica that was never written holds (never modified)


class Broker:
    def __init__(self, bid: int, rack, dir_id: str):
        self.id, self.rack, self.dir_id = bid, rack, dir_id
        self.registered = False
        self.epoch = -1
        self.incarnation = ""
        self.fenced = True
        self.cs = False
        self.alive = True       # process running
        self.reachable = True   # heartbeats reach the controller, replication works
        self.unclean = False    # last stop was an unclean shutdown

    @property
    def active(self) -> bool:
        return self.registered and not self.fenced and not self.cs

    @property
    def up(self) -> bool:
        return self.alive and self.reachable


class Simulator:
    def __init__(self, sc: dict, seed: int, out: Path):
        self.sc, self.seed, self.out = sc, seed, Path(out)
        self.rng = random.Random(seed)
        self.mv = C.MV_LEVELS.get(str(sc["metadata_version"]), sc["metadata_version"])
        self.elr = bool(sc["elr"])
        self.now = sc["start_ms"]
        self.queue: list = []
        self.seq = 0
        self.writer = LogWriter(self.out, sc["segment_bytes"])
        self.truth = Truth(sc["long_window_ms"], sc["truth_info"], metadata_gap_ms=sc["metadata_gap_ms"],
                           min_window_ms=sc["min_window_ms"], incident_merge_ms=sc["incident_merge_ms"],
                           clock=lambda: self.now)
        self.raft_epoch = 0
        self.raft_leader = -1
        self.controllers = list(sc["controllers"])
        self.kraft_version = 0  # KIP-853: 1 once the voters are recorded in the log (voter_change)
        self.epoch_starts: list[tuple[int, int]] = []
        self.noop_paused_until = 0
        self.quorum_down_until: int | None = None  # no controller runs until then (cluster_restart, controller_outage)
        self.next_noop = sc["start_ms"] + sc["heartbeat_interval_ms"]
        self.since_snapshot = 0
        self.cluster_id = random_uuid(self.rng)
        self.brokers: dict[int, Broker] = {}
        self.topics: dict[str, str] = {}                   # name -> topic id (creation order)
        self.names: dict[str, str] = {}                    # topic id -> name
        self.parts: dict[tuple[str, int], Part] = {}       # (topic id, partition) -> state
        self.logs: dict[tuple[str, int, int], ReplicaLog] = {}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        self.features: dict[str, int] = {}
        self.hw: dict[tuple[str, int], int] = {}
        self.last_standing: dict[tuple[str, int], int] = {}  # partition -> last replica that crashed uncleanly
        self.pending_restart: set[int] = set()
        self.lagging: set[int] = set()  # followers too far behind to join an ISR (lagging_follower)
        self.combined: list[int] = []  # nodes that are broker and controller (registered as both at MV >= 3.7)
        self.controller_incarnations: dict[int, str] = {}
        self.stats = {"records": 0, "batches": 0}
        self._min_isr: dict[str, int] = {}
        self._unclean: dict[str, bool] = {}
        self._diskless: dict[str, bool] = {}
        # partitions in creation order (the order of ``parts``): key -> ordinal, ordinal -> key, and the
        # registration (Reg.idx, -1 once deleted) per ordinal, so that "partitions whose registration ..." is an
        # array lookup (keys_with)
        self.regs = Registrations()
        self._ordinal: dict[tuple[str, int], int] = {}
        self._keys: list[tuple[str, int]] = []
        self._regid = array("i")
        # decide() memoised per partition registration and trigger (see planned), window flags per min ISR
        # and registration (see observe)
        self._plans: dict = {}
        self._flags: dict = {}
        self._at_min: dict = {}  # min ISR -> registration -> at its minimum (AT_MIN_ISR) when INFO is not listed

    # ------------------------------------------------------------------------------ model queries
    def active(self, b: int) -> bool:
        br = self.brokers.get(b)
        return br is not None and br.active

    def config(self, topic: str, key: str) -> str | None:
        for res in ((TOPIC_RES, topic), (BROKER_RES, str(self.raft_leader)), (BROKER_RES, "")):
            v = self.configs.get(res, {}).get(key)
            if v is not None:
                return v
        return None

    def min_isr(self, tid: str) -> int:
        m = self._min_isr.get(tid)
        if m is None:
            m = self._min_isr[tid] = self._resolve_min_isr(tid)
        return m

    def _resolve_min_isr(self, tid: str) -> int:
        configured = int(self.config(self.names[tid], MIN_ISR) or 1)
        p0 = self.parts.get((tid, 0))
        if p0 is None:
            return configured
        return min(configured, len(set(p0.replicas) | set(p0.adding) | set(p0.removing)))

    def unclean_allowed(self, tid: str) -> bool:
        u = self._unclean.get(tid)
        if u is None:
            v = self.config(self.names[tid], UNCLEAN_KEY)
            u = self._unclean[tid] = v is not None and v.strip().lower() == "true"
        return u

    def diskless(self, tid: str) -> bool:
        """The topic is leaderless / diskless (``diskless.enable=true``, KIP-1150): the audit judges its partitions
        by no ISR rule, so the ground truth expects none of those findings for them (the INV-* checks stay)."""
        d = self._diskless.get(tid)
        if d is None:
            v = self.config(self.names[tid], DISKLESS_KEY)
            d = self._diskless[tid] = v is not None and v.strip().lower() == "true"
        return d

    def forget_configs(self) -> None:
        """Resolved settings are cached per topic; a config or controller change invalidates them."""
        self._min_isr.clear()
        self._unclean.clear()
        self._diskless.clear()

    def mode(self, tid: str) -> str:
        return C.UNCLEAN if self.unclean_allowed(tid) else C.ONLINE

    def ask(self, p: Part, election: str, acceptable, **kw) -> Ask:
        return Ask(election=election, acceptable=acceptable, elr=self.elr, min_isr=self.min_isr(p.topic_id),
                   mv=self.mv, default_dir=self.default_dir, **kw)

    def default_dir(self, b: int) -> str:
        return self.brokers[b].dir_id if self.mv >= C.LV_3_7_IV2 else MIGRATING

    def log(self, key, b: int) -> ReplicaLog:
        k = (key[0], key[1], b)
        lg = self.logs.get(k)
        if lg is None:
            lg = self.logs[k] = ReplicaLog()
        return lg

    # ------------------------------------------------------------------------------ scheduling
    def at(self, t: int, fn, idx: int) -> None:
        heapq.heappush(self.queue, (t, self.seq, fn, idx))
        self.seq += 1

    def run(self) -> dict:
        # a fleet keeps millions of long-lived objects (partitions, replica logs) and makes no cyclic garbage
        # worth collecting while it runs: the cyclic collector would only re-scan them (a third of the time)
        enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run()
        finally:
            if enabled:
                gc.enable()

    def _run(self) -> dict:
        sc = self.sc
        if sc.get("generate"):
            from simulator.fleet import expand
            expand(sc, self.rng)
        self.truth.incidents[SETUP] = Incident(SETUP, "setup", "cluster start: brokers register, scenario topics "
                                               "are created", sc["start_ms"], [])
        self.setup()
        last_event = sc["start_ms"]
        for i, ev in enumerate(sc["timeline"]):
            self.truth.incidents[i] = Incident(i, ev["event"], ev.get("description") or self.describe(ev),
                                               ev["at_ms"], self.event_brokers(ev))
            self.at(ev["at_ms"], lambda ev=ev, i=i: self.dispatch(ev, i), i)
            last_event = max(last_event, ev["at_ms"])
        while self.queue:
            t, _, fn, idx = heapq.heappop(self.queue)
            if self.quorum_down_until is not None and t <= self.quorum_down_until \
                    and not getattr(fn, "quorum", False):
                # no controller: whatever would be written waits for the next one (after its LeaderChange);
                # a session that expired meanwhile gets a full session timeout from the new controller
                self.at(self.quorum_down_until + (self.sc["session_timeout_ms"] if getattr(fn, "session", False)
                                                  else 0), fn, idx)
                continue
            self.heartbeats_until(t)
            self.now = max(self.now, t)
            self.idx = idx
            fn()
            last_event = max(last_event, self.now)
        end = last_event + int(sc["end_after_s"] * 1000)
        self.heartbeats_until(end)
        self.now = max(self.now, end)
        return self.finish()

    def heartbeats_until(self, t: int) -> None:
        hb = self.sc["heartbeat_interval_ms"]
        while self.next_noop < t:
            if self.next_noop >= self.noop_paused_until:
                self.now = max(self.now, self.next_noop)
                idx, self.idx = self.idx, HEARTBEAT
                self.emit([("NO_OP_RECORD", 0, {})])
                self.truth.beat_seen = True
                self.idx = idx
            self.next_noop += hb

    # ------------------------------------------------------------------------------ writing
    def emit(self, records: list[tuple[str, int, dict]]) -> int:
        """Write one batch at the current time (strictly after the previous one) and apply it."""
        self.now = max(self.now, self.writer.last_timestamp + 1)
        base = self.writer.append(self.now, self.raft_epoch, records)
        n = len(records)
        self.truth.note_batch(self.idx, base, n, self.now)
        touched = []
        brokers_written = False
        for i, (rtype, _, d) in enumerate(records):
            if rtype == "PARTITION_CHANGE_RECORD":
                touched.append(self.apply_partition_change(d))
                continue
            key = self.apply(rtype, d, base + i)
            if key is not None:
                touched.append(key)
            elif rtype in BROKER_RECORDS:
                brokers_written = True
        self.stats["records"] += n
        self.stats["batches"] += 1
        if brokers_written:  # before the windows: a window closing as the cluster goes down is attributed to it
            self.truth.brokers_active(frozenset(b for b, br in self.brokers.items() if br.active), self.now,
                                      self.idx)
        self.observe(touched)
        self.since_snapshot += n
        if self.since_snapshot >= self.sc["snapshot_every"]:
            self.snapshot()
        return base

    def emit_many(self, changes: list[tuple[str, int, dict]], tail: list | None = None, head: list | None = None):
        """A heartbeat-driven trigger: head records, partition changes split into batches, tail records."""
        recs = list(head or []) + changes + list(tail or [])
        if not recs:
            return
        step = self.sc["max_batch_records"]
        for i in range(0, len(recs), step):
            self.emit(recs[i:i + step])

    def snapshot(self) -> None:
        self.since_snapshot = 0
        self.writer.snapshot(self.raft_epoch, self.writer.last_timestamp + 50, self.snapshot_records())

    def snapshot_records(self):
        """The image as records (features, brokers, topics with their partitions, configs), lazily."""
        for n, v in self.features.items():
            yield ("FEATURE_LEVEL_RECORD", 0, {"name": n, "featureLevel": v})
        if self.mv >= 8:
            yield ("ZK_MIGRATION_STATE_RECORD", 0, {"zkMigrationState": 0})
        for b in sorted(self.brokers):
            br = self.brokers[b]
            if br.registered:
                yield self.register_record(br)
        for c in sorted(self.controller_incarnations):
            yield self.controller_record(c)
        version = C.change_version(self.mv)
        encoded: dict = {}  # registration -> its encoded fields (a fleet has few distinct registrations)
        for name, tid in self.topics.items():
            yield ("TOPIC_RECORD", 0, {"name": name, "topicId": tid})
            for key in self.topic_keys(tid):
                p = self.parts[key]
                parts = encoded.get(p.reg)
                if parts is None:
                    parts = encoded[p.reg] = partition_parts(version, partition_record(p, self.mv)[2])
                yield ("PARTITION_RECORD", version,
                       partition_value(version, p.pid, p.topic_id, p.leader_epoch, p.partition_epoch, parts))
        for (rt, rn), kv in self.configs.items():
            for k, v in kv.items():
                yield ("CONFIG_RECORD", 0, {"resourceType": rt, "resourceName": rn, "name": k, "value": v})

    def topic_keys(self, tid: str):
        n = self.partition_counts[tid]
        return [(tid, p) for p in range(n)]

    # ------------------------------------------------------------------------------ applying
    def apply(self, rtype: str, d: dict, offset: int):
        if rtype == "PARTITION_CHANGE_RECORD":
            return self.apply_partition_change(d)
        if rtype == "PARTITION_RECORD":
            key = (d["topicId"], d["partitionId"])
            if d.__class__ is PartitionBody:
                p = self.parts[key] = Part.with_reg(d["topicId"], d["partitionId"], d.reg)
            else:
                dirs = d.get("directories") or [MIGRATING] * len(d["replicas"])
                p = self.parts[key] = Part(d["topicId"], d["partitionId"], list(d["replicas"]), list(d["isr"]),
                                           d["leader"], list(dirs), pool=self.regs)
            if key[1] == 0:
                self._min_isr.pop(key[0], None)
            i = self._ordinal.get(key)
            if i is None:
                i = self._ordinal[key] = len(self._keys)
                self._keys.append(key)
                self._regid.append(-1)
            p.ordinal = i
            self._regid[i] = p.reg.idx
            return key
        if rtype == "TOPIC_RECORD":
            self.topics[d["name"]] = d["topicId"]
            self.names[d["topicId"]] = d["name"]
        elif rtype == "REMOVE_TOPIC_RECORD":
            tid = d["topicId"]
            name = self.names.pop(tid)
            del self.topics[name]
            for key in self.topic_keys(tid):
                self.truth.forget(key, name, key[1], self.now)
                del self.parts[key]
                self._regid[self._ordinal.pop(key)] = -1
                self.hw.pop(key, None)
                self.last_standing.pop(key, None)
            for k in [k for k in self.logs if k[0] == tid]:
                del self.logs[k]
            self.configs.pop((TOPIC_RES, name), None)
            del self.partition_counts[tid]
            self.forget_configs()
        elif rtype == "REGISTER_BROKER_RECORD":
            br = self.brokers[d["brokerId"]]
            br.registered, br.epoch, br.incarnation = True, d["brokerEpoch"], d["incarnationId"]
            br.fenced, br.cs = d["fenced"], d.get("inControlledShutdown", False)
        elif rtype in ("BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"):
            br = self.brokers[d.get("brokerId", d.get("id"))]
            f = d.get("fenced", 0)
            if rtype == "FENCE_BROKER_RECORD" or f == 1:
                br.fenced = True
            elif rtype == "UNFENCE_BROKER_RECORD" or f == -1:
                br.fenced = False
            if d.get("inControlledShutdown", 0) == 1:
                br.cs = True
        elif rtype == "CONFIG_RECORD":
            res = self.configs.setdefault((d["resourceType"], d["resourceName"]), {})
            if d["value"] is None:
                res.pop(d["name"], None)
            else:
                res[d["name"]] = d["value"]
            self.forget_configs()
            if d["resourceType"] == TOPIC_RES:
                tid = self.topics.get(d["resourceName"])
                self.observe(self.topic_keys(tid) if tid in self.partition_counts else [])
            else:
                self.observe(list(self.parts))
        elif rtype == "CLEAR_ELR_RECORD":
            tids = [self.topics[d["topicName"]]] if d["topicName"] else list(self.topics.values())
            for tid in tids:
                for key in self.topic_keys(tid):
                    p = self.parts[key]
                    if p.elr or p.lke:
                        apply_change(p, {"eligibleLeaderReplicas": [], "lastKnownElr": []})
                        self._regid[p.ordinal] = p.reg.idx
                        self.truth.point(self.idx, "MIN_ISR_CHANGE_CLEARED_ELR", "WARN", self.names[tid], key[1])
        elif rtype == "FEATURE_LEVEL_RECORD":
            self.features[d["name"]] = d["featureLevel"]
        elif rtype == "LEADER_CHANGE":
            self.forget_configs()
            self.observe(list(self.parts))
        return None

    def apply_partition_change(self, d: dict):
        if d.__class__ is ChangeBody:
            p, plan = d.part, d.plan
            key = p.key
            if self.parts.get(key) is not p:  # not the partition it was decided for: apply the fields
                p, plan = self.parts[key], None
        else:
            key = (d["topicId"], d["partitionId"])
            p, plan = self.parts[key], None
        if plan is not None and plan.src is p.reg:  # the registration the plan was decided for
            p.reg = plan.dst
            p.leader_epoch += plan.bump
            p.partition_epoch += 1
            assignment = plan.assignment
        else:
            apply_change(p, d)
            assignment = "replicas" in d or "addingReplicas" in d or "removingReplicas" in d
        if assignment and key[1] == 0:
            self._min_isr.pop(key[0], None)  # m is capped by partition 0's replica count
        self._regid[p.ordinal] = p.reg.idx
        return key

    def observe(self, keys) -> None:
        """Open and close the partitions' windows in the ground truth after a batch."""
        parts, memo, open_windows, min_isr = self.parts, self._flags, self.truth.open, self._min_isr
        # without INFO findings (truth_info false) AT_MIN_ISR windows are not followed; whether one may start
        # in this batch is still noted, for the incidents' causes (a broker incident needs a finding)
        unlisted = None if self.truth.include_info else self._at_min
        for key in dict.fromkeys(keys):
            p = parts.get(key)
            if p is None:
                continue
            m = min_isr.get(key[0])
            if m is None:
                m = self.min_isr(key[0])
            by_reg = memo.get(m)
            if by_reg is None:
                by_reg = memo[m] = {}
            flags = by_reg.get(p.reg)
            if flags is None:
                flags = by_reg[p.reg] = self.window_flags(p.reg, m)
            if flags and self.diskless(key[0]):  # no ISR rule judges it; the invariants still do
                flags = frozenset(f for f in flags if f.startswith("INV-"))
            if flags or key in open_windows:
                self.truth.observe(key, self.names[key[0]], key[1], flags, self.now, self.idx)
            if unlisted is not None:
                at_min = unlisted.setdefault(m, {}).get(p.reg)
                if at_min is None:
                    at_min = unlisted[m][p.reg] = len(p.reg.isr) == m and m < len(p.reg.replicas)
                if at_min:
                    self.truth.unlisted_finding(self.now)
                    unlisted = None  # once per batch

    def window_flags(self, reg: Reg, m: int) -> frozenset:
        """The window codes true of a registration when the topic's min ISR is ``m``."""
        n = len(reg.isr)
        flags = set()
        if n < m:
            flags.add("UNDER_MIN_ISR")
        elif n == m and n < len(reg.replicas) and self.truth.include_info:
            flags.add("AT_MIN_ISR")
        if reg.leader == C.NONE:
            flags.add("OFFLINE")
            if not reg.isr and not reg.elr:
                flags.add("OFFLINE_NO_CANDIDATE")
                flags.add("INV-OFFLINE-NO-CANDIDATE")
        elif not self.elr and reg.isr == [reg.leader] and m >= 2:
            flags.add("LAST_REPLICA_STANDING")
        if reg.lke == [-1]:
            flags.add("INV-LKE-NEGATIVE")
        return frozenset(flags)

    # ------------------------------------------------------------------------------ records
    def register_record(self, br: Broker) -> tuple[str, int, dict]:
        version = 3 if self.mv >= C.LV_3_7_IV2 else 2 if self.mv >= 6 else 1
        d = {"brokerId": br.id, "isMigratingZkBroker": False, "incarnationId": br.incarnation,
             "brokerEpoch": br.epoch,
             "endPoints": [{"name": "PLAINTEXT", "host": f"broker-{br.id}", "port": 9092, "securityProtocol": 0}],
             "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": self.mv}],
             "rack": br.rack, "fenced": br.fenced, "inControlledShutdown": br.cs}
        if version >= 3:
            d["logDirs"] = [br.dir_id]
        return ("REGISTER_BROKER_RECORD", version, d)

    def fence_record(self, br: Broker, fenced: bool):
        if self.mv >= C.LV_3_3_IV2:
            return ("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                    {"brokerId": br.id, "brokerEpoch": br.epoch, "fenced": 1 if fenced else -1})
        return ("FENCE_BROKER_RECORD" if fenced else "UNFENCE_BROKER_RECORD", 0, {"id": br.id, "epoch": br.epoch})

    def change(self, body: dict) -> tuple[str, int, dict]:
        return ("PARTITION_CHANGE_RECORD", C.change_version(self.mv), body)

    def note_election(self, p: Part, body: dict, unclean: bool) -> None:
        """Point findings of an election the controller is about to write."""
        key = (p.topic_id, p.pid)
        name = self.names[p.topic_id]
        leader = body.get("leader", C.UNCHANGED)
        diskless = self.diskless(p.topic_id)
        if unclean:
            if not diskless:
                self.truth.point(self.idx, "UNCLEAN_ELECTION", "ERROR", name, p.pid)
            self.truth.point(self.idx, "INV-UNCLEAN-ELECTION", "WARN", name, p.pid)
            if not self.unclean_allowed(p.topic_id):
                self.truth.point(self.idx, "INV-UNCLEAN-CONFIG", "WARN", name, p.pid)
        if leader >= 0 and leader != p.leader:
            crashed = self.last_standing.pop(key, None)
            if crashed is not None and crashed == leader and not unclean and not diskless:
                self.truth.point(self.idx, "DATA_LOSS_LIKELY", "ERROR", name, p.pid)

    def changes_for(self, keys, ok, election: str | None = None, drop: int | None = None,
                    unclean_brokers: frozenset = frozenset()) -> list:
        """The PartitionChangeRecords a trigger writes for ``keys``: ``ok`` says which brokers are acceptable
        leaders, ``election`` is the election type (None: the topic's, online or unclean), ``drop`` a broker
        the trigger removes from the ISR."""
        ok_set = self.ok_set(ok)
        out = []
        version = C.change_version(self.mv)
        topic, plans = None, None
        for key in keys:
            p = self.parts[key]
            tid = p.topic_id
            if tid != topic:  # the trigger's settings are per topic
                topic, el, m = tid, election or self.mode(tid), self.min_isr(tid)
                plans = self.plans_for(ok_set, unclean_brokers, (el, m, drop))
            body, unclean = self.planned(p, plans, lambda: Ask(
                election=el, acceptable=ok_set.__contains__, elr=self.elr, min_isr=m, mv=self.mv,
                default_dir=self.default_dir, target_isr=None if drop is None else [x for x in p.isr if x != drop],
                unclean_brokers=unclean_brokers))
            if body is not None:
                if unclean or self.last_standing:
                    self.note_election(p, body, unclean)
                out.append(("PARTITION_CHANGE_RECORD", version, body))
        return out

    def ok_set(self, ok) -> frozenset:
        """The brokers a predicate accepts (it is never true of an unknown broker id)."""
        return frozenset(b for b in self.brokers if ok(b))

    def plans_for(self, ok_set: frozenset, unclean_brokers: frozenset, trigger: tuple) -> dict:
        """The memo of :meth:`planned` for one trigger: registration -> Plan (or None: nothing to write)."""
        key = (ok_set, unclean_brokers, trigger)
        plans = self._plans.get(key)
        if plans is None:
            if len(self._plans) > 10_000:
                self._plans.clear()
            plans = self._plans[key] = {}
        return plans

    def planned(self, p: Part, plans: dict, make_ask):
        """``decide(p, make_ask())``, memoised: the builder's answer depends only on the partition's
        registration (not on its id or epochs) and on the trigger ``plans`` belongs to. Returns (body or None,
        unclean); the body is a :class:`ChangeBody` of the shared :class:`Plan`."""
        reg = p.reg
        plan = plans.get(reg, _MISSING)
        if plan is _MISSING:
            body, unclean = decide(p, make_ask())
            if body is None:
                plan = None
            else:
                fields = {k: v for k, v in body.items() if k not in ("partitionId", "topicId")}
                plan = Plan(reg, fields, unclean, C.change_version(self.mv))
            plans[reg] = plan
        if plan is None:
            return None, False
        body = ChangeBody(plan.template)
        body["partitionId"] = p.pid
        body["topicId"] = p.topic_id
        body.plan, body.part = plan, p
        return body, plan.unclean

    def keys_where(self, pred) -> list:
        return [k for k, p in self.parts.items() if pred(p)]

    def keys_with(self, pred) -> list:
        """Keys of the partitions whose registration satisfies ``pred`` (a predicate over :class:`Reg`,
        evaluated once per distinct registration), in the order of ``parts``."""
        return [self._keys[i] for i in self.ordinals_with(pred).tolist()]

    def ordinals_with(self, pred):
        table = self.regs.table
        lut = np.zeros(len(table) + 1, dtype=bool)  # the last entry stands for -1, a deleted partition
        lut[:-1] = [bool(pred(r)) for r in table]
        return np.flatnonzero(lut[np.frombuffer(self._regid, dtype=np.int32)])

    # ------------------------------------------------------------------------------ setup
    def setup(self) -> None:
        sc = self.sc
        self.idx = SETUP
        self.partition_counts: dict[str, int] = {}
        for b in sc["brokers"]:
            self.brokers[b["id"]] = Broker(b["id"], b.get("rack"), random_uuid(self.rng))
        self.leader_change(self.controllers[0])
        recs = []
        if self.mv >= 13:
            recs.append(("BEGIN_TRANSACTION_RECORD", 0, {"name": "Bootstrap records"}))
        recs.append(("FEATURE_LEVEL_RECORD", 0, {"name": "metadata.version", "featureLevel": self.mv}))
        if self.elr:
            recs.append(("FEATURE_LEVEL_RECORD", 0, {"name": "eligible.leader.replicas.version", "featureLevel": 1}))
        if self.mv >= 8:
            recs.append(("ZK_MIGRATION_STATE_RECORD", 0, {"zkMigrationState": 0}))
        if self.mv >= 13:
            recs.append(("END_TRANSACTION_RECORD", 0, {}))
        self.now += 700
        self.emit(recs)
        if sc["cluster_configs"]:
            self.now += 50
            self.emit([("CONFIG_RECORD", 0, {"resourceType": BROKER_RES, "resourceName": "", "name": k,
                                             "value": None if v is None else str(v)})
                       for k, v in sc["cluster_configs"].items()])
        order = sorted(self.brokers)
        self.rng.shuffle(order)  # brokers register in the order they happen to start
        for b in order:
            self.now += self.rng.randint(5, 60)
            self.register(self.brokers[b])
        # combined nodes (a controller id that is also a broker id): each controller registers itself (KIP-919)
        self.combined = [c for c in self.controllers if c in self.brokers] if self.mv >= LV_3_7_IV0 else []
        for c in self.combined:
            self.now += self.rng.randint(5, 60)
            self.register_controller(c)
        for b in order:
            self.at(self.now + self.sc["unfence_delay_ms"] + self.rng.randint(0, 300),
                    lambda b=b: self.unfence(self.brokers[b]), SETUP)
        t0 = self.now + self.sc["unfence_delay_ms"] + 2000
        for i, t in enumerate(sc["topics"] or []):
            self.at(t0 + 1000 * i, lambda t=t: self.create_topic(t), SETUP)

    def leader_change(self, leader: int) -> None:
        if self.raft_epoch > 0:  # every election after the log's first (which only says who led at its start)
            self.truth.controller_election(self.now, self.idx)
        self.raft_epoch += 1
        self.raft_leader = leader
        self.epoch_starts.append((self.raft_epoch, self.writer.next_offset))
        granting = [leader] + [c for c in self.controllers if c != leader][: len(self.controllers) // 2]
        self.emit([("LEADER_CHANGE", 0, {"version": 0, "leaderId": leader,
                                         "voters": [{"voterId": v} for v in self.controllers],
                                         "grantingVoters": [{"voterId": v} for v in sorted(granting)]})])

    def voter_dir(self, node: int) -> str:
        """A voter's directory id (KIP-853): a combined node's metadata log directory, else one derived from the
        cluster and node ids (no draw from the random stream: the other events stay as they were)."""
        if node in self.brokers:
            return self.brokers[node].dir_id
        import hashlib
        return uuid_to_str(hashlib.md5(f"{self.cluster_id}/voter-{node}".encode()).digest())

    def voters_record(self) -> tuple[str, int, dict]:
        return ("KRAFT_VOTERS", 0, {"version": 0, "voters": [
            {"voterId": v, "voterDirectoryId": self.voter_dir(v),
             "endpoints": [{"name": "CONTROLLER", "host": f"broker-{v}", "port": 9093}],
             "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1}} for v in self.controllers]})

    def voter_change(self, add: int | None, remove: int | None) -> None:
        """KIP-853 dynamic quorum: on the first change the quorum moves to kraft.version 1 (a KRaftVersionRecord
        and a VotersRecord of the voters it had), then the leader writes the new voter set (AddRaftVoter /
        RemoveRaftVoter) as a VotersRecord; an added node registers its controller (KIP-919).  Removing the
        active controller makes another one take over (a failover)."""
        if self.kraft_version < 1:
            self.kraft_version = 1
            self.emit([("KRAFT_VERSION", 0, {"version": 0, "kRaftVersion": 1}), self.voters_record()])
        if add is not None and add not in self.controllers:
            self.controllers.append(add)
            self.emit([self.voters_record()])
            if self.mv >= LV_3_7_IV0:
                self.register_controller(add)
        if remove is not None and remove in self.controllers and len(self.controllers) > 1:
            self.controllers.remove(remove)
            self.emit([self.voters_record()])
            if remove == self.raft_leader:
                self.failover(None)

    def register_controller(self, node: int) -> None:
        """RegisterControllerRecord of a combined node's controller, with a new incarnation (the node started)."""
        self.controller_incarnations[node] = random_uuid(self.rng)
        self.emit([self.controller_record(node)])

    def controller_record(self, node: int) -> tuple[str, int, dict]:
        return ("REGISTER_CONTROLLER_RECORD", 0, {
            "controllerId": node, "incarnationId": self.controller_incarnations[node], "zkMigrationReady": False,
            "endPoints": [{"name": "CONTROLLER", "host": f"broker-{node}", "port": 9093, "securityProtocol": 0}],
            "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": self.mv}]})

    # ------------------------------------------------------------------------------ broker lifecycle
    def register(self, br: Broker) -> None:
        """A (re)start: new incarnation; at MV >= 4.0-IV1 with ELR on, an unclean restart is handled first."""
        changes = []
        if br.registered and self.elr and br.unclean:
            u = frozenset({br.id})
            keys = self.keys_with(lambda r: br.id in r.isr) + self.keys_with(lambda r: br.id in r.elr)
            changes = self.changes_for(keys, lambda x: x != br.id and self.active(x), drop=br.id,
                                       unclean_brokers=u)
        elif br.registered and self.mv >= C.LV_4_0_IV1:
            # a clean restart keeps ELR membership (Kafka 4.1+); the pinned 4.0 controller would have run
            # the unclean-shutdown handling for any new incarnation: INV-REGISTER-UNCLEAN-BATCH (W) -- for ELR
            # membership only below 4.1-IV0 or without a controlled shutdown before (what the checker can see of
            # a clean shutdown, rules/invariants._clean_restart)
            elr_kept = self.mv >= C.LV_4_1_IV0 and br.cs
            for key in self.keys_with(lambda r: (br.id in r.elr and not elr_kept) or br.id in r.isr):
                self.truth.point(self.idx, "INV-REGISTER-UNCLEAN-BATCH", "WARN", self.names[key[0]], key[1])
        br.incarnation = random_uuid(self.rng)
        br.epoch = self.writer.next_offset + len(changes)
        br.fenced, br.cs, br.unclean = True, False, False
        br.alive = br.reachable = True
        self.emit(changes + [self.register_record(br)])

    def unfence(self, br: Broker) -> None:
        if not br.registered or not br.fenced or not br.up:
            return
        b = br.id
        changes = self.changes_for(self.keys_with(lambda r: r.leader == C.NONE),
                                   lambda x: x == b or self.active(x))
        self.emit_many(changes, head=[self.fence_record(br, False)])
        self.at(self.now + self.sc["catch_up_ms"], self.catch_up, self.idx)

    def fence(self, br: Broker, incarnation: str | None = None) -> None:
        """Session timeout (or a shutdown while leading nothing): ISR removals, then the fence record.
        ``incarnation``: only if the broker has not re-registered since the timeout started."""
        if not br.registered or br.fenced or (incarnation is not None and incarnation != br.incarnation):
            return
        b = br.id
        changes = self.changes_for(self.keys_with(lambda r: b in r.isr), lambda x: x != b and self.active(x),
                                   drop=b)
        self.emit_many(changes, tail=[self.fence_record(br, True)])

    def controlled_shutdown(self, br: Broker) -> None:
        if not br.registered or br.fenced or not br.up:
            return
        b = br.id
        leads = any(p.reg.leader == b for p in self.parts.values())
        if leads and self.mv >= C.LV_3_3_IV3 and not br.cs:
            changes = self.changes_for(self.keys_with(lambda r: b in r.isr),
                                       lambda x: x != b and self.active(x), drop=b)
            self.emit_many(changes, head=[("BROKER_REGISTRATION_CHANGE_RECORD", 1,
                                           {"brokerId": b, "brokerEpoch": br.epoch, "inControlledShutdown": 1})])
            self.at(self.now + self.sc["controlled_shutdown_ms"], lambda: self._finish_shutdown(br), self.idx)
        else:
            self.fence(br)
            br.alive = False

    def _finish_shutdown(self, br: Broker) -> None:
        self.fence(br)
        br.alive = False

    def crash(self, br: Broker, lose: int) -> None:
        """Unclean shutdown: the tail of every local log is lost; the controller notices at session timeout."""
        if not br.alive:
            return
        br.alive = False
        br.unclean = True
        b = br.id
        for key in self.keys_with(lambda r: b in r.replicas):
            lg = self.logs.get((key[0], key[1], b))
            if lg is not None:  # a log never written stays empty
                lg.truncate(lg.leo - lose)
            if self.parts[key].isr == [b] and not self.elr and self.min_isr(key[0]) >= 2:
                self.last_standing[key] = b
        self.session_timeout(br)

    def session_timeout(self, br: Broker) -> None:
        """The broker's heartbeats stopped now: the controller fences it after the session timeout (unless it
        registered again meanwhile).  Due while no controller runs, the fence waits for the next one, which
        gives every broker a full session timeout from its election."""
        def expire(inc=br.incarnation):
            self.fence(br, inc)
        expire.session = True
        self.at(self.now + self.sc["session_timeout_ms"], expire, self.idx)

    def restart(self, br: Broker) -> None:
        if br.alive and br.registered and not br.fenced:
            # a bounce of a running broker: controlled shutdown first
            self.controlled_shutdown(br)
            self.at(self.now + 2 * self.sc["controlled_shutdown_ms"], lambda: self.restart(br), self.idx)
            return
        if br.registered and not br.fenced:
            self.fence(br)
        self.register(br)
        if br.id in self.combined:  # the node's controller restarted with it
            self.now += self.rng.randint(500, 2000)
            self.register_controller(br.id)
        self.at(self.now + self.sc["unfence_delay_ms"], lambda: self.unfence(br), self.idx)

    def isolate(self, br: Broker, duration_ms: int | None) -> None:
        """Heartbeats stop reaching the controller (session timeout / network partition)."""
        br.reachable = False
        self.session_timeout(br)
        if duration_ms:
            self.at(self.now + duration_ms, lambda: self.heal(br), self.idx)

    def heal(self, br: Broker) -> None:
        br.reachable = True
        self.at(self.now + self.sc["unfence_delay_ms"], lambda: self.unfence(br), self.idx)

    def lag(self, br: Broker, tid: str | None, partitions, duration_ms: int) -> None:
        """Follower ``br`` falls behind on the partitions it follows in an ISR (of topic ``tid``, those listed):
        each leader shrinks it out of its ISRs with one AlterPartition request (the leader stays); after
        ``duration_ms`` it has caught up and the leaders take it back (catch_up)."""
        b = br.id
        keys = [k for k in self.keys_with(lambda r: b in r.isr and r.leader != b)
                if (tid is None or k[0] == tid) and (not partitions or k[1] in partitions)]
        self.lagging.add(b)
        by_leader: dict[int, list] = {}
        for key in keys:
            by_leader.setdefault(self.parts[key].leader, []).append(key)
        for leader in sorted(by_leader):
            self.now += self.rng.randint(1, 40)
            self.emit_many(self.changes_for(by_leader[leader], self.active, drop=b))
        self.at(self.now + duration_ms, lambda: self.caught_up(br), self.idx)

    def caught_up(self, br: Broker) -> None:
        self.lagging.discard(br.id)
        self.catch_up()

    # ------------------------------------------------------------------------------ replication
    def catch_up(self) -> None:
        """Followers that are up fetch from their leader and are added back to the ISR (AlterPartition,
        one request per leader); a RECOVERING leader first reports RECOVERED."""
        by_leader: dict[int, list] = {}
        again = False
        ready = frozenset(b for b, br in self.brokers.items()  # may fetch, join an ISR
                          if br.up and br.active and b not in self.lagging)
        keys, parts, logs = self._keys, self.parts, self.logs
        # registration -> (ISR asked for, recovery state asked for, joining replicas), for the registrations
        # short of replicas or RECOVERING whose leader can act
        wants = {r: self._catch_up_wanted(r, ready) for r in self.regs.table if r.unsynced}
        for i in self.ordinals_with(lambda r: wants.get(r) is not None).tolist():
            key = keys[i]  # in the order of ``parts``
            p = parts[key]
            reg = p.reg
            isr, lrs, joining = wants[reg]
            if lrs is not None:
                again = True
            else:  # the joining followers fetch the leader's log (an empty one needs no object)
                src = logs.get((key[0], key[1], reg.leader), _EMPTY_LOG)
                for b in joining:
                    if src.leo or src.epochs or (key[0], key[1], b) in logs:
                        self.log(key, b).copy_from(src)
            by_leader.setdefault(reg.leader, []).append(key)
        ok_set = self.ok_set(self.active)
        version = C.change_version(self.mv)
        for leader in sorted(by_leader):
            recs = []
            topic = None
            for key in by_leader[leader]:
                p = parts[key]
                tid = p.topic_id
                if tid != topic:
                    topic, el, m = tid, self.mode(tid), self.min_isr(tid)
                    plans = self.plans_for(ok_set, frozenset(), ("catch_up", el, m, ready))
                isr, lrs, _ = wants[p.reg]
                body, unclean = self.planned(p, plans, lambda: Ask(
                    election=el, acceptable=ok_set.__contains__, elr=self.elr, min_isr=m, mv=self.mv,
                    default_dir=self.default_dir, target_isr=isr, target_lrs=lrs))
                if body is not None:
                    if unclean or self.last_standing:
                        self.note_election(p, body, unclean)
                    recs.append(("PARTITION_CHANGE_RECORD", version, body))
            if recs:
                self.now += self.rng.randint(1, 40)
                self.emit_many(recs)
        if again:
            self.at(self.now + self.sc["catch_up_ms"], self.catch_up, self.idx)

    @staticmethod
    def _catch_up_wanted(reg: Reg, ready: frozenset):
        """What catch_up asks for a registration: a RECOVERING leader reports RECOVERED, else the followers
        that are ready join the ISR; None when its leader cannot fetch or nobody joins."""
        if reg.leader not in ready:
            return None
        if reg.lrs == C.RECOVERING:
            return list(reg.isr), C.RECOVERED, []
        joining = [b for b in reg.replicas if b in ready and b not in reg.isr]
        return (reg.isr + joining, None, joining) if joining else None

    def produce(self, tid: str | None, n: int) -> None:
        for key, p in self.parts.items():
            if tid is not None and key[0] != tid:
                continue
            if p.leader == C.NONE or not self.brokers[p.leader].up:
                continue
            src = self.log(key, p.leader)
            src.append(n, p.leader_epoch)
            for b in p.isr:
                if b != p.leader and self.brokers[b].up:
                    self.log(key, b).copy_from(src)
            self.hw[key] = min(self.log(key, b).leo for b in p.isr)

    # ------------------------------------------------------------------------------ admin operations
    def create_topic(self, t: dict) -> None:
        name, n, rf = t["name"], t["partitions"], t["replication_factor"]
        if name in self.topics:
            return
        configs = {k: None if v is None else str(v) for k, v in (t.get("configs") or {}).items()}
        assignment = t.get("assignment") or self.place(n, rf)
        tid = random_uuid(self.rng)
        recs = [("TOPIC_RECORD", 0, {"name": name, "topicId": tid})]
        recs += [("CONFIG_RECORD", 0, {"resourceType": TOPIC_RES, "resourceName": name, "name": k, "value": v})
                 for k, v in configs.items()]
        version = C.change_version(self.mv)
        made: dict = {}  # replica list -> (record body, its encoded fields, registration)
        for pid, replicas in enumerate(assignment):
            made_as = made.get(tuple(replicas))
            if made_as is None:
                isr = [b for b in replicas if self.active(b)]
                if not isr:
                    return  # INVALID_REPLICATION_FACTOR: nothing is written
                dirs = [self.default_dir(b) for b in replicas]
                p = Part(tid, pid, list(replicas), isr, isr[0], dirs, pool=self.regs)
                d = partition_record(p, self.mv)[2]
                made_as = made[tuple(replicas)] = (d, partition_parts(version, d), p.reg)
            d = PartitionBody(made_as[0])
            d["partitionId"] = pid
            d.parts, d.reg = made_as[1], made_as[2]
            recs.append(("PARTITION_RECORD", version, d))
        self.partition_counts[tid] = n
        self.emit(recs)  # topic creation is atomic: one batch
        m_conf = int(self.config(name, MIN_ISR) or 1)
        for pid in range(n):
            if m_conf > rf and not self.diskless(tid):
                self.truth.point(self.idx, "MIN_ISR_ABOVE_RF", "WARN", name, pid)
            if self.unclean_allowed(tid):
                self.truth.point(self.idx, "UNCLEAN_CONFIG", "WARN", name, pid)

    def place(self, n: int, rf: int) -> list[list[int]]:
        """Striped placement over a rack-alternating broker list, from a random start (as Kafka's placer)."""
        by_rack: dict = {}
        for b in sorted(self.brokers):
            by_rack.setdefault(str(self.brokers[b].rack), []).append(b)
        racks = [by_rack[r] for r in sorted(by_rack)]
        order = []
        for i in range(max(len(r) for r in racks)):
            order += [r[i] for r in racks if i < len(r)]
        nb = len(order)
        start = self.rng.randrange(nb)
        out = []
        for pid in range(n):
            # consecutive entries of a rack-alternating list sit in different racks (when there are enough)
            first = (start + pid + pid // nb) % nb
            out.append([order[(first + j) % nb] for j in range(rf)])
        return out

    def delete_topic(self, name: str) -> None:
        tid = self.topics.get(name)
        if tid is not None:
            self.emit([("REMOVE_TOPIC_RECORD", 0, {"topicId": tid})])

    def set_config(self, ev: dict) -> None:
        res = ev["resource"]
        rtype, rname = (TOPIC_RES, str(ev["name"])) if res == "topic" else \
            (BROKER_RES, str(ev["name"])) if res == "broker" else (BROKER_RES, "")
        value = ev.get("value")
        recs = [("CONFIG_RECORD", 0, {"resourceType": rtype, "resourceName": rname, "name": ev["key"],
                                      "value": None if value is None else str(value).lower()
                                      if isinstance(value, bool) else None if value is None else str(value)})]
        if self.elr and ev["key"] == MIN_ISR:
            recs.append(("CLEAR_ELR_RECORD", 0, {"topicName": rname if res == "topic" else ""}))
        self.emit(recs)
        for tid, name in self.names.items():
            if ev["key"] == UNCLEAN_KEY and self.unclean_allowed(tid):
                for pid in range(self.partition_counts[tid]):
                    self.truth.point(self.idx, "UNCLEAN_CONFIG", "WARN", name, pid)
            if ev["key"] == MIN_ISR and int(self.config(name, MIN_ISR) or 1) > len(self.parts[(tid, 0)].replicas) \
                    and not self.diskless(tid):
                for pid in range(self.partition_counts[tid]):
                    self.truth.point(self.idx, "MIN_ISR_ABOVE_RF", "WARN", name, pid)
        if ev["key"] == UNCLEAN_KEY:
            self.at(self.now + self.sc["unclean_election_interval_ms"], self.periodic_unclean, self.idx)

    def periodic_unclean(self) -> None:
        keys = self.keys_where(lambda p: p.leader == C.NONE and self.unclean_allowed(p.topic_id))
        changes = self.changes_for(keys, self.active, election=C.UNCLEAN)
        self.emit_many(changes)
        if changes:
            self.at(self.now + self.sc["catch_up_ms"], self.catch_up, self.idx)

    def elect(self, election: str, topic: str | None, partitions) -> None:
        tid = self.topics.get(topic) if topic else None
        if election == C.PREFERRED:
            keys = self.keys_with(lambda r: r.leader != r.replicas[0])
        else:
            keys = self.keys_with(lambda r: r.leader == C.NONE)
        if tid is not None or partitions:
            keys = [k for k in keys if (tid is None or k[0] == tid) and (not partitions or k[1] in partitions)]
        changes = self.changes_for(keys, self.active, election=election)
        self.emit_many(changes)
        self.at(self.now + self.sc["catch_up_ms"], self.catch_up, self.idx)

    def reassign(self, topic: str, pid: int, target: list[int]) -> None:
        key = (self.topics[topic], pid)
        p = self.parts[key]
        removing = sorted(set(p.replicas) - set(target))
        adding = sorted(set(target) - set(p.replicas))
        new_r = list(target) + removing
        body, unclean = decide(p, self.ask(p, C.ONLINE, self.active, target_replicas=new_r,
                                           target_removing=removing or None, target_adding=adding or None))
        if body is not None:
            self.note_election(p, body, unclean)
            self.emit([self.change(body)])
        self.at(self.now + self.sc["catch_up_ms"], self.catch_up, self.idx)

    def failover(self, to: int | None) -> None:
        others = [c for c in self.controllers if c != self.raft_leader]
        new = to if to is not None else others[0]
        gap = 1500 + self.rng.randint(0, 1500)
        self.noop_paused_until = self.now + gap
        self.at(self.now + gap, lambda: self.leader_change(new), self.idx)

    # ------------------------------------------------------------------------------ cluster events
    def quorum_stop(self, duration_ms: int, idx: int) -> None:
        """The controller quorum stops (lost quorum, or every controller shut down): nothing at all is written
        -- no NoOp, no fence, no election -- until a controller wins a new Raft epoch ``duration_ms`` later.
        Brokers keep running as they are: no controller can fence them.  What the simulation would write
        meanwhile (follow-ups, timeline events) waits for the new controller."""
        until = self.now + duration_ms
        self.quorum_down_until = until
        self.noop_paused_until = max(self.noop_paused_until, until)
        self.truth.gap_owner = idx

        def resume():
            self.now = max(self.now, until)
            self.quorum_down_until = None
            # the new controller loads the log and gives every registered broker a fresh session timeout to
            # heartbeat: brokers that kept running keep their registration, nothing is fenced for the outage
            self.leader_change(self.rng.choice(self.controllers))
            self.truth.gap_owner = None
        resume.quorum = True
        self.at(until, resume, idx)

    def cluster_restart(self, ev: dict, i: int) -> None:
        """Every registered broker does a controlled shutdown a few seconds after the previous one; then (if
        ``controllers_down``) the controller quorum stops for ``down_s`` and comes back with a new Raft epoch;
        then the brokers start again one after another in the reverse order (re-register, unfenced, catch up).
        Without ``controllers_down`` the controllers keep running and the brokers start ``down_s`` later."""
        down = int(ev["down_s"] * 1000)
        brokers = sorted(b for b, br in self.brokers.items() if br.registered)
        t = self.now
        for k, b in enumerate(brokers):
            if k:
                t += self.rng.randint(2000, 4000)
            self.at(t, lambda b=b: self.controlled_shutdown(self.brokers[b]), i)
        t += self.sc["controlled_shutdown_ms"] + self.rng.randint(1500, 2500)  # the last broker is stopped
        if ev.get("controllers_down", True):
            self.at(t, lambda: self.quorum_stop(down, i), i)
            t += down + self.rng.randint(1500, 2500)  # brokers start once a controller leads again
        else:
            t += down
        for b in reversed(brokers):  # the last one stopped first: it holds the ISRs of one the others left
            self.at(t, lambda b=b: self.restart(self.brokers[b]), i)
            t += self.rng.randint(1000, 2500)

    # ------------------------------------------------------------------------------ timeline
    def event_brokers(self, ev: dict) -> list[int]:
        if "broker" in ev:
            return [ev["broker"]]
        if "brokers" in ev:
            return list(ev["brokers"])
        if ev["event"] == "az_outage":
            return [b["id"] for b in self.sc["brokers"] if b.get("rack") == ev["rack"]]
        if ev["event"] == "cluster_restart":
            return [b["id"] for b in self.sc["brokers"]]
        return []

    @staticmethod
    def describe(ev: dict) -> str:
        args = ", ".join(f"{k}={v}" for k, v in ev.items() if k not in ("event", "at", "at_ms", "description"))
        return f"{ev['event']}({args})"

    def dispatch(self, ev: dict, i: int) -> None:
        kind = ev["event"]
        br = self.brokers.get(ev.get("broker"))
        dur = int(ev["duration_s"] * 1000) if ev.get("duration_s") else None
        if kind == "create_topic":
            self.create_topic(ev)
        elif kind == "delete_topic":
            self.delete_topic(ev["name"])
        elif kind == "broker_session_timeout":
            self.isolate(br, dur)
        elif kind == "network_partition":
            for b in ev["brokers"]:
                self.isolate(self.brokers[b], dur)
        elif kind == "controlled_shutdown":
            self.controlled_shutdown(br)
        elif kind == "unclean_shutdown":
            self.crash(br, ev.get("lose_records", 0))
        elif kind == "restart":
            self.restart(br)
        elif kind == "az_outage":
            for b in self.event_brokers(ev):
                self.crash(self.brokers[b], ev.get("lose_records", 0))
                if dur:
                    self.at(self.now + dur, lambda b=b: self.restart(self.brokers[b]), i)
        elif kind == "rolling_restart":
            brokers = ev.get("brokers") or sorted(self.brokers)
            down = int(ev.get("down_s", 20) * 1000)
            every = int(ev.get("interval_s", 60) * 1000)
            for k, b in enumerate(brokers):
                t = self.now + k * every
                self.at(t, lambda b=b: self.controlled_shutdown(self.brokers[b]), i)
                self.at(t + down, lambda b=b: self.restart(self.brokers[b]), i)
        elif kind == "reassignment":
            self.reassign(ev["topic"], ev["partition"], ev["replicas"])
        elif kind == "preferred_election":
            self.elect(C.PREFERRED, ev.get("topic"), ev.get("partitions"))
        elif kind == "unclean_election":
            self.elect(C.UNCLEAN, ev.get("topic"), ev.get("partitions"))
        elif kind == "config_change":
            self.set_config(ev)
        elif kind == "controller_failover":
            self.failover(ev.get("to"))
        elif kind == "voter_change":
            self.voter_change(ev.get("add"), ev.get("remove"))
        elif kind == "cluster_restart":
            self.cluster_restart(ev, i)
        elif kind == "controller_outage":
            self.quorum_stop(dur, i)
        elif kind == "produce":
            self.produce(self.topics.get(ev["topic"]) if ev.get("topic") else None, ev["records"])
        elif kind == "lagging_follower":
            self.lag(br, self.topics.get(ev["topic"]) if ev.get("topic") else None, ev.get("partitions"), dur)
        elif kind == "snapshot":
            self.snapshot()
        elif kind == "collect_log_info":
            # a crashed broker cannot answer: only running brokers reply (KIP-966 GetReplicaLogInfo)
            wanted = ev.get("brokers") or sorted(self.brokers)
            self.write_log_info([b for b in wanted if self.brokers[b].alive], at_offset=True)

    # ------------------------------------------------------------------------------ output
    def finish(self) -> dict:
        if not self.writer.snapshots or self.since_snapshot:
            if not self.writer.snapshots:
                self.snapshot()
        self.writer.close()
        self.truth.finish(self.now, lambda key: (self.names[key[0]], key[1]),
                          racks={b: br.rack for b, br in self.brokers.items() if br.registered})
        self.truth.clock = None  # no cycle back to the simulator: its millions of objects go by reference count
        sc = self.sc
        write_bootstrap(self.out, sc["start_ms"] - 41_000, [("metadata.version", self.mv)] +
                        ([("eligible.leader.replicas.version", 1)] if self.elr else []))
        node, directory = sc["data_node"], random_uuid(self.rng)
        if node is None:
            node = self.controllers[0]
        elif node in self.brokers:  # a combined node: its metadata log lives in its (only) log directory
            directory = self.brokers[node].dir_id
        if self.kraft_version >= 1 and node in self.controllers:  # the directory its VotersRecord entry names
            directory = self.voter_dir(node)
        write_side_files(self.out, node_id=node, directory_id=directory,
                         cluster_id=self.cluster_id, raft_leader=self.raft_leader, raft_epoch=self.raft_epoch,
                         voters=self.controllers, epoch_starts=self.epoch_starts,
                         start_text=iso(sc["start_ms"]))
        self.write_log_info()
        truth = {"scenario": sc["name"], "seed": self.seed, "metadataVersion": str(sc["metadata_version"]),
                 "elrEnabled": self.elr,
                 "incidents": [inc.to_json() for _, inc in sorted(self.truth.incidents.items())
                               if inc.findings or (inc.first_offset is not None
                                                   and inc.kind not in ("produce", "create_topic", "setup"))]}
        big = sum(len(i["expectedFindings"]) for i in truth["incidents"]) > 20_000
        with open(self.out / "ground_truth.json", "w", encoding="utf-8") as f:
            json.dump(truth, f, indent=None if big else 2)
            f.write("\n")
        return {"records": self.writer.next_offset, "batches": self.writer.batches,
                "bytes": self.writer.bytes_written, "segments": len(self.writer.segments),
                "snapshots": list(self.writer.snapshots)}

    def write_log_info(self, brokers=None, at_offset: bool = False) -> None:
        """``log-info/broker-<id>.json`` (end of the log) or, mid-timeline, ``broker-<id>-at-<offset>.json``."""
        d = self.out / "log-info"
        d.mkdir(exist_ok=True)
        empty = ReplicaLog()
        for b in sorted(self.brokers) if brokers is None else brokers:
            br = self.brokers[b]
            by_topic: dict = {}  # topic id -> [(partition, last written epoch, current epoch, end offset)]
            for key in self.keys_with(lambda r: b in r.replicas):
                lg = self.logs.get((key[0], key[1], b), empty)
                by_topic.setdefault(key[0], []).append((key[1], lg.last_epoch, self.parts[key].leader_epoch, lg.leo))
            topics = [(tid, sorted(by_topic[tid])) for tid in self.topics.values() if tid in by_topic]
            head = {"BrokerId": b, "BrokerEpoch": br.epoch if br.registered else -1,
                    "CollectedAtOffset": self.writer.next_offset - 1, "CollectedAt": iso(self.now)}
            name = f"broker-{b}-at-{head['CollectedAtOffset']}.json" if at_offset else f"broker-{b}.json"
            if sum(len(infos) for _, infos in topics) > 20_000:
                text = _log_info_compact(head, topics)
            else:
                doc = dict(head, TopicPartitionLogInfoList=[
                    {"TopicId": tid, "PartitionLogInfo": [
                        {"Partition": pid, "LastWrittenLeaderEpoch": lwe, "CurrentLeaderEpoch": cle,
                         "LogEndOffset": leo, "ErrorCode": 0, "ErrorMessage": None}
                        for pid, lwe, cle, leo in infos]} for tid, infos in topics])
                text = json.dumps(doc, indent=1)
            (d / name).write_text(text + "\n", encoding="utf-8")


def _log_info_compact(head: dict, topics: list) -> str:
    """``json.dumps(doc)`` (no indent) of a big log-info document, written out without building it."""
    info = ('{"Partition": %d, "LastWrittenLeaderEpoch": %d, "CurrentLeaderEpoch": %d, "LogEndOffset": %d, '
            '"ErrorCode": 0, "ErrorMessage": null}')
    body = ", ".join('{"TopicId": %s, "PartitionLogInfo": [%s]}'
                     % (json.dumps(tid), ", ".join([info % t for t in infos])) for tid, infos in topics)
    return json.dumps(head)[:-1] + ', "TopicPartitionLogInfoList": [' + body + "]}"


def simulate(sc: dict, out, seed: int = 0) -> dict:
    return Simulator(sc, seed, Path(out)).run()
