#!/usr/bin/env python3
"""Synthetic KRaft metadata logs for benchmarks (streamed to disk, bounded memory).

Two mixes:

``snapshot``
    The layout of a large metadata snapshot (``<endOffset>-<epoch>.checkpoint``): a SNAPSHOT_HEADER
    control batch, FEATURE_LEVEL records, RegisterBroker/RegisterController records, then for every topic a
    TopicRecord followed by its PartitionRecords (v2, with directories; a few partitions with shrunk ISRs,
    ELR / LastKnownElr, leaderless ones), topic and cluster ConfigRecords, and a SNAPSHOT_FOOTER control
    batch.  Many records per batch (default 2,000).  ~95 % of the records are PartitionRecords.
    Broker epochs and offsets inside the file are those of a snapshot (offsets restart at ``base_offset``).

``changes``
    A live log of a cluster at metadata.version 4.1-IV0 (level 26) with the ELR feature on
    (``eligible.leader.replicas.version`` = 1, cluster min.insync.replicas = 2, RF 3): bootstrap
    transaction, controller and broker registrations, topic creation, then a stream of controller
    decisions computed from the tracked state by the rules of shared/docs/controller-rules.md (§2.1
    builder with ELR, §2.2 triggers): AlterPartition ISR shrinks/expands (one request from one leader =
    one batch of 1-50 records), session-timeout fences (partition changes then the fence record, split
    in batches of <= 50), the broker's restart some events later (unclean-shutdown handling: ELR removal
    before the new-incarnation RegisterBrokerRecord, in the same batch; broker epoch = first offset of
    that batch), its unfence (ELR / last-known-leader elections of leaderless partitions), the leaders'
    catch-up ISR expansions, RECOVERING -> RECOVERED, preferred leader elections, topic config changes,
    topic creation/deletion, raft leader changes (LEADER_CHANGE control batches, epoch in the batch
    headers), and NoOp heartbeats, each in its own batch.  The cluster size scales with ``n_records``
    (1M records: ~4,000 partitions, 13 brokers).  At 1M records ~78 % of the records are
    PartitionChangeRecords (~15 % of those carry eligibleLeaderReplicas / lastKnownElr, version 2),
    ~21 % NoOps.  Every PartitionChangeRecord keeps the invariants of §4 (leader in ISR, ELR disjoint
    from ISR and only below min ISR, LastKnownElr only while leaderless, epochs, fenced brokers out of
    every ISR, broker epochs of change records).

Offsets are consecutive from ``base_offset`` across all batches; the file holds exactly ``n_records``
records.  Records are produced batch by batch and written immediately: memory is bounded by the
cluster state (a few thousand partitions), never by ``n_records``.

Hot record types (PartitionRecord, PartitionChangeRecord, NoOpRecord) are encoded by a specialised
encoder; a sample of batches (the first 64, up to 5,000 records, then one batch in 4,096) is re-encoded
with the project's reference encoder ``controller_core.codec.batch.encode_batch`` and must be
byte-identical (``verify=False`` skips this).  Output is deterministic for given parameters.

Generated logs are cached under ``benchmarks/.cache/`` keyed by their parameters
(:func:`cached_synthetic_log`).  CLI::

    python benchmarks/synth.py OUT --records 1000000 --mix changes [--seed 0] [--records-per-batch N]
                               [--no-cache]
"""
from __future__ import annotations

import argparse
import bisect
import hashlib
import os
import random
import shutil
import struct
import sys
import time
from collections import Counter
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import crc32c as _crc32c  # noqa: E402

from controller_core.codec.batch import encode_batch, encode_value  # noqa: E402
from controller_core.codec.message import uuid_to_str  # noqa: E402

MIXES = ("snapshot", "changes")
GENERATOR_VERSION = 1          # bump whenever the output of a given parameter set changes
CACHE_DIR = Path(__file__).resolve().parent / ".cache"
START_MS = 1767261600000       # 2026-01-01T10:00:00Z, fixed: no wall clock in the output
MV_CHANGES = 26                # 4.1-IV0: PartitionRecord/ChangeRecord v2, ELR feature available
MV_SNAPSHOT = 26
MAX_CHANGE_BATCH = 50
VERIFY_FIRST = 64
VERIFY_EVERY = 4096

# ------------------------------------------------------------------------------------ fast encoder
_P32 = struct.Struct(">i").pack
_P3I = struct.Struct(">iii").pack
_HEAD = struct.Struct(">qiibI").pack
_TAIL = struct.Struct(">hiqqqhii").pack
_ARR = [struct.Struct(f">{n}i").pack for n in range(256)]


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_UV = [_uvarint(i) for i in range(1 << 15)]


def _uv(n: int) -> bytes:
    return _UV[n] if n < 32768 else _uvarint(n)


def _zz(n: int) -> bytes:  # zigzag varint of n >= 0
    return _uv(n << 1)


def _arr(a) -> bytes:
    n = len(a)
    return _UV[n + 1] + _ARR[n](*a) if n < 256 else _uv(n + 1) + struct.pack(f">{n}i", *a)


_UUID_CACHE: dict[str, bytes] = {}


def _uuid(text: str) -> bytes:
    raw = _UUID_CACHE.get(text)
    if raw is None:
        import base64
        raw = base64.urlsafe_b64decode(text + "==")
        if len(_UUID_CACHE) < 100_000:
            _UUID_CACHE[text] = raw
    return raw


_UUIDS_CACHE: dict[tuple, bytes] = {}


def _uuids(texts) -> bytes:
    key = tuple(texts)
    raw = _UUIDS_CACHE.get(key)
    if raw is None:
        raw = _uv(len(texts) + 1) + b"".join(_uuid(t) for t in texts)
        if len(_UUIDS_CACHE) < 50_000:
            _UUIDS_CACHE[key] = raw
    return raw


_PR_HEAD = [bytes([1, 3, v]) for v in range(3)]
_PCR_HEAD = [bytes([1, 5, v]) for v in range(3)]
_NOOP_VALUE = bytes([1, 20, 0, 0])   # frame 1, apiKey 20, version 0, no tagged fields


def _value_partition_record(v: int, d: dict) -> bytes:
    rem, add = d.get("removingReplicas"), d.get("addingReplicas")
    b = [_PR_HEAD[v], _P32(d["partitionId"]), _uuid(d["topicId"]), _arr(d["replicas"]), _arr(d["isr"]),
         _arr(rem) if rem else b"\x01", _arr(add) if add else b"\x01",
         _P3I(d["leader"], d["leaderEpoch"], d["partitionEpoch"])]
    if v >= 1:
        b.append(_uuids(d.get("directories", ())))
    tags = []
    lrs = d.get("leaderRecoveryState", 0)
    if lrs != 0:
        tags.append(b"\x00\x01" + struct.pack(">b", lrs))
    if v >= 2:
        for tag, key in ((1, "eligibleLeaderReplicas"), (2, "lastKnownElr")):
            val = d.get(key)
            if val is not None:
                p = _arr(val)
                tags.append(_UV[tag] + _uv(len(p)) + p)
    b.append(_UV[len(tags)])
    b.extend(tags)
    return b"".join(b)


# PartitionChangeRecord tagged fields: json key -> (tag, kind, default, first version)
_PCR_TAGS = {"isr": (0, "a", None, 0), "leader": (1, "i", -2, 0), "replicas": (2, "a", None, 0),
             "removingReplicas": (3, "a", None, 0), "addingReplicas": (4, "a", None, 0),
             "leaderRecoveryState": (5, "b", -1, 0), "eligibleLeaderReplicas": (6, "a", None, 2),
             "lastKnownElr": (7, "a", None, 2), "directories": (8, "u", None, 1)}


def _value_partition_change(v: int, d: dict) -> bytes:
    tags = []
    for key, val in d.items():
        spec = _PCR_TAGS.get(key)
        if spec is None:
            continue
        tag, kind, default, since = spec
        if val == default or v < since:
            continue
        if kind == "a":
            p = _arr(val)
            tags.append((tag, _UV[tag] + _UV[len(p)] + p if len(p) < 32768 else _UV[tag] + _uv(len(p)) + p))
        elif kind == "i":
            tags.append((tag, b"\x01\x04" + _P32(val)))
        elif kind == "b":
            tags.append((tag, b"\x05\x01" + struct.pack(">b", val)))
        else:
            p = _uuids(val)
            tags.append((tag, b"\x08" + _uv(len(p)) + p))
    if len(tags) > 1:
        tags.sort()
    return b"".join([_PCR_HEAD[v], _P32(d["partitionId"]), _uuid(d["topicId"]), _UV[len(tags)]]
                    + [t[1] for t in tags])


def _key_value(rtype: str, version: int, data: dict):
    if rtype == "PARTITION_CHANGE_RECORD":
        return None, _value_partition_change(version, data)
    if rtype == "PARTITION_RECORD":
        return None, _value_partition_record(version, data)
    if rtype == "NO_OP_RECORD":
        return None, _NOOP_VALUE
    key, value, _ = encode_value(rtype, version, data)
    return key, value


def fast_batch(base_offset: int, records, *, leader_epoch: int, timestamp: int, control: bool = False) -> bytes:
    """Same bytes as ``encode_batch(base_offset, records, leader_epoch=..., timestamp=...)``."""
    parts = []
    for i, (rtype, version, data) in enumerate(records):
        key, value = _key_value(rtype, version, data)
        rec = b"".join((b"\x00\x00", _zz(i), b"\x01" if key is None else _zz(len(key)) + key,
                        _zz(len(value)), value, b"\x00"))
        parts.append(_zz(len(rec)))
        parts.append(rec)
    body = b"".join(parts)
    n = len(records)
    tail = _TAIL(0x20 if control else 0, n - 1, timestamp, timestamp, -1, -1, -1, n)
    crc = _crc32c.crc32c(body, _crc32c.crc32c(tail))
    return _HEAD(base_offset, 49 + len(body), leader_epoch, 2, crc) + tail + body


# ---------------------------------------------------------------------------------------- writer
class _Writer:
    """Appends batches with consecutive offsets, counts record types, cross-checks a sample."""

    def __init__(self, fh, base_offset: int, verify: bool):
        self.fh = fh
        self.next_offset = base_offset
        self.base_offset = base_offset
        self.batches = 0
        self.bytes = 0
        self.counts: Counter = Counter()
        self.verify = verify
        self.verified = 0
        self.verified_records = 0
        self.epoch = 1
        self.ts = START_MS

    @property
    def written(self) -> int:
        return self.next_offset - self.base_offset

    def batch(self, records, *, ts: int | None = None, control: bool = False) -> int:
        if ts is not None:
            self.ts = max(self.ts + 1, ts)
        base = self.next_offset
        data = fast_batch(base, records, leader_epoch=self.epoch, timestamp=self.ts, control=control)
        if self.verify and ((self.batches < VERIFY_FIRST and self.verified_records < 5000)
                            or (self.batches % VERIFY_EVERY == 0 and len(records) <= 500)):
            ref = encode_batch(base, list(records), leader_epoch=self.epoch, timestamp=self.ts)
            if ref != data:
                raise AssertionError(f"fast encoder differs from encode_batch at batch {self.batches} "
                                     f"(offset {base}, first record {records[0][0]})")
            self.verified += 1
            self.verified_records += len(records)
        self.fh.write(data)
        self.batches += 1
        self.bytes += len(data)
        self.next_offset = base + len(records)
        for r in records:
            self.counts[r[0]] += 1
        return base


def _det_uuid(*parts) -> str:
    """A deterministic version-4 style Kafka uuid (text form never starts with '-')."""
    h = bytearray(hashlib.blake2b(repr(parts).encode(), digest_size=16).digest())
    h[6] = (h[6] & 0x0F) | 0x40
    h[8] = (h[8] & 0x3F) | 0x80
    h[0] &= 0x7F  # avoid a leading '-' / '_' and the reserved ids
    h[0] |= 0x04
    return uuid_to_str(bytes(h))


def _broker_record(b: int, epoch: int, incarnation: str, dirs: list[str], mv: int, fenced: bool) -> tuple:
    return ("REGISTER_BROKER_RECORD", 3, {
        "brokerId": b, "isMigratingZkBroker": False, "incarnationId": incarnation, "brokerEpoch": epoch,
        "endPoints": [{"name": "PLAINTEXT", "host": f"broker-{b}.kafka.svc", "port": 9092, "securityProtocol": 0}],
        "features": [{"name": "group.version", "minSupportedVersion": 0, "maxSupportedVersion": 1},
                     {"name": "kraft.version", "minSupportedVersion": 0, "maxSupportedVersion": 1},
                     {"name": "metadata.version", "minSupportedVersion": 7, "maxSupportedVersion": mv},
                     {"name": "transaction.version", "minSupportedVersion": 0, "maxSupportedVersion": 2}],
        "rack": f"rack-{b % 3}", "fenced": fenced, "inControlledShutdown": False, "logDirs": list(dirs)})


def _controller_record(c: int, incarnation: str, mv: int) -> tuple:
    return ("REGISTER_CONTROLLER_RECORD", 0, {
        "controllerId": c, "incarnationId": incarnation, "zkMigrationReady": False,
        "endPoints": [{"name": "CONTROLLER", "host": f"controller-{c}.kafka.svc", "port": 9093,
                       "securityProtocol": 0}],
        "features": [{"name": "kraft.version", "minSupportedVersion": 0, "maxSupportedVersion": 1},
                     {"name": "metadata.version", "minSupportedVersion": 7, "maxSupportedVersion": mv}]})


def _features(mv: int) -> list[tuple]:
    return [("FEATURE_LEVEL_RECORD", 0, {"name": n, "featureLevel": v}) for n, v in (
        ("metadata.version", mv), ("eligible.leader.replicas.version", 1), ("group.version", 1),
        ("transaction.version", 2))]


_TOPIC_CONFIGS = (("retention.ms", ("3600000", "86400000", "604800000", "-1")),
                  ("cleanup.policy", ("delete", "compact", "compact,delete")),
                  ("segment.bytes", ("104857600", "1073741824")),
                  ("max.message.bytes", ("1048588", "5242880")),
                  ("compression.type", ("producer", "zstd", "lz4")))


# -------------------------------------------------------------------------------- snapshot mix
def _write_snapshot_mix(w: _Writer, n: int, rng: random.Random, per_batch: int, seed: int) -> None:
    n_brokers = max(3, min(200, n // 5000))
    brokers = {b: [_det_uuid(seed, "dir", b, k) for k in range(1 + (b % 3 == 0))] for b in range(1, n_brokers + 1)}
    controllers = (3000, 3001, 3002)
    head = _features(MV_SNAPSHOT)
    head += [_broker_record(b, 100 + 17 * b, _det_uuid(seed, "inc", b), dirs, MV_SNAPSHOT, fenced=(b % 29 == 7))
             for b, dirs in brokers.items()]
    head += [_controller_record(c, _det_uuid(seed, "cinc", c), MV_SNAPSHOT) for c in controllers]
    cluster_cfg = [("CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas",
                                         "value": "2"})]
    fixed = 2 + len(head) + len(cluster_cfg)  # header + footer
    if n < fixed + 2:
        raise ValueError(f"the snapshot mix needs at least {fixed + 2} records")

    override: dict[int, tuple[int, int]] = {}

    def parts_of(i):  # partitions and config count of topic i, deterministic
        if i in override:
            return override[i]
        r = random.Random(seed * 1_000_003 + i)
        return r.choice((1, 3, 6, 12, 12, 24, 32, 50, 64, 100)), r.choice((0, 0, 0, 1, 2))
    # planning pass: how many topics fit (ints only, no records)
    budget, n_topics, total = n - fixed, 0, 0
    while True:
        p, c = parts_of(n_topics)
        if total + 1 + p + c > budget:
            break
        total += 1 + p + c
        n_topics += 1
    if n_topics == 0:   # tiny budget: one topic with budget - 1 partitions and no configs
        n_topics = 1
        override[0] = (budget - 1, 0)
    else:               # the remainder goes to the last topic as extra partitions
        p_last, c_last = parts_of(n_topics - 1)
        override[n_topics - 1] = (p_last + budget - total, c_last)

    broker_ids = [b for b in brokers if b % 29 != 7]   # fenced brokers (b % 29 == 7) hold no replicas
    pending: list[tuple] = []
    ts = START_MS

    def emit(rec):
        nonlocal pending
        pending.append(rec)
        if len(pending) >= per_batch:
            w.batch(pending, ts=ts)
            pending = []

    w.epoch = 7
    last_ts = START_MS - 1234
    w.batch([("SNAPSHOT_HEADER", 0, {"version": 0, "lastContainedLogTimestamp": last_ts})], ts=ts, control=True)
    for rec in head:
        emit(rec)
    for i in range(n_topics):
        p, c = parts_of(i)
        name = f"topic-{i:06d}"
        tid = _det_uuid(seed, "topic", i)
        emit(("TOPIC_RECORD", 0, {"name": name, "topicId": tid}))
        for pid in range(p):
            nb = len(broker_ids)
            i0 = int(rng.random() * nb)
            i1 = (i0 + 1 + int(rng.random() * (nb - 1))) % nb
            i2 = i0
            while i2 == i0 or i2 == i1:
                i2 = int(rng.random() * nb)
            replicas = [broker_ids[i0], broker_ids[i1], broker_ids[i2]]
            isr, elr, lke, leader, lrs = list(replicas), None, None, replicas[0], 0
            k = rng.random()
            if k < 0.05:
                isr = replicas[:2] if rng.random() < 0.5 else [replicas[0], replicas[2]]
                leader = isr[0]
            elif k < 0.07:
                isr = [replicas[1]]
                leader = replicas[1]
                elr = [replicas[0]]
            elif k < 0.075:
                isr, leader, elr, lke = [], -1, [replicas[2]], [replicas[0]]
            elif k < 0.077:
                isr, leader, lrs = [replicas[2]], replicas[2], 1
            elif k < 0.2:
                leader = replicas[1]
            le = int(rng.random() * 40)
            d = {"partitionId": pid, "topicId": tid, "replicas": replicas, "isr": isr, "removingReplicas": [],
                 "addingReplicas": [], "leader": leader, "leaderEpoch": le,
                 "partitionEpoch": le + int(rng.random() * 60),
                 "directories": [brokers[b][pid % len(brokers[b])] for b in replicas]}
            if lrs:
                d["leaderRecoveryState"] = lrs
            if elr:
                d["eligibleLeaderReplicas"] = sorted(elr)
            if lke:
                d["lastKnownElr"] = lke
            emit(("PARTITION_RECORD", 2, d))
    for i in range(n_topics):
        _, c = parts_of(i)
        r = random.Random(seed * 7_000_001 + i)
        for key, values in r.sample(_TOPIC_CONFIGS, c):
            emit(("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": f"topic-{i:06d}", "name": key,
                                       "value": r.choice(values)}))
    for rec in cluster_cfg:
        emit(rec)
    if pending:
        w.batch(pending, ts=ts)
    w.batch([("SNAPSHOT_FOOTER", 0, {"version": 0})], ts=ts + 2, control=True)


# --------------------------------------------------------------------------------- changes mix
class _Part:
    __slots__ = ("tid", "pid", "replicas", "isr", "leader", "le", "pe", "elr", "lke", "lrs", "dirs")


class _Changes:
    """Cluster state and the controller decisions of the ``changes`` mix (ELR on, MV 4.1)."""

    def __init__(self, w: _Writer, n: int, rng: random.Random, seed: int, max_batch: int = MAX_CHANGE_BATCH):
        self.w, self.n, self.rng, self.seed = w, n, rng, seed
        self.max_batch = max_batch
        self.n_parts_target = max(60, min(20_000, n // 250))
        self.n_brokers = max(5, min(60, self.n_parts_target // 300))
        self.m = 2  # cluster min.insync.replicas; every topic has RF 3, so the effective min ISR is 2
        self.brokers: dict[int, dict] = {}   # id -> {epoch, fenced, dirs, incarnation}
        self.live: set[int] = set()           # registered and unfenced
        self.parts: dict[tuple[str, int], _Part] = {}
        self.keys: list[tuple[str, int]] = []
        self.topics: dict[str, tuple[str, int]] = {}  # id -> (name, partitions)
        self.topic_seq = 0
        self.leaderless: set = set()
        self.by_leader: dict[int, dict] = {}   # leader -> {partition key: None}, insertion ordered
        self.imbalanced: dict = {}             # partitions whose leader is not the preferred replica
        self.controllers = (3000, 3001, 3002)
        self.raft_leader = 3000
        self.ts = START_MS
        self.event_no = 0
        self.agenda: list = []   # (due event number, fn, args), sorted by due event

    # ---------------------------------------------------------------- helpers
    def tick(self, ms: int) -> int:
        self.ts += ms
        return self.ts

    def active(self, b: int) -> bool:
        return b in self.live

    def remaining(self) -> int:
        return self.n - self.w.written

    def emit(self, records, control=False, ts=None):
        """Apply (state) and write one batch."""
        for rtype, _, d in records:
            self.apply(rtype, d)
        self.w.batch(records, ts=self.ts if ts is None else ts, control=control)

    def apply(self, rtype: str, d: dict) -> None:
        if rtype == "PARTITION_CHANGE_RECORD":
            p = self.parts[(d["topicId"], d["partitionId"])]
            if "isr" in d:
                p.isr = d["isr"]
            if "leader" in d:
                self._unindex(p)
                p.leader = d["leader"]
                p.le += 1
                self._index(p)
            if "eligibleLeaderReplicas" in d:
                p.elr = d["eligibleLeaderReplicas"]
            if "lastKnownElr" in d:
                p.lke = d["lastKnownElr"]
            if "leaderRecoveryState" in d:
                p.lrs = d["leaderRecoveryState"]
            p.pe += 1
            assert p.leader == -1 or p.leader in p.isr, (d, p.isr)
            assert not (set(p.elr) & set(p.isr)), d
        elif rtype == "PARTITION_RECORD":
            p = _Part()
            p.tid, p.pid = d["topicId"], d["partitionId"]
            p.replicas, p.isr, p.leader = d["replicas"], d["isr"], d["leader"]
            p.le, p.pe, p.elr, p.lke, p.lrs, p.dirs = 0, 0, [], [], 0, d["directories"]
            self.parts[(p.tid, p.pid)] = p
            self.keys.append((p.tid, p.pid))
            self._index(p)
        elif rtype == "REGISTER_BROKER_RECORD":
            self.brokers[d["brokerId"]] = {"epoch": d["brokerEpoch"], "fenced": d["fenced"], "dirs": d["logDirs"],
                                           "incarnation": d["incarnationId"]}
            if d["fenced"]:
                self.live.discard(d["brokerId"])
            else:
                self.live.add(d["brokerId"])
        elif rtype == "BROKER_REGISTRATION_CHANGE_RECORD":
            reg = self.brokers[d["brokerId"]]
            assert reg["epoch"] == d["brokerEpoch"]
            if d.get("fenced") == 1:
                reg["fenced"] = True
                self.live.discard(d["brokerId"])
            elif d.get("fenced") == -1:
                reg["fenced"] = False
                self.live.add(d["brokerId"])
        elif rtype == "TOPIC_RECORD":
            self.topics[d["topicId"]] = (d["name"], 0)
        elif rtype == "REMOVE_TOPIC_RECORD":
            tid = d["topicId"]
            del self.topics[tid]
            for k in [k for k in self.keys if k[0] == tid]:
                self._unindex(self.parts.pop(k))
            self.keys = [k for k in self.keys if k[0] != tid]

    def _index(self, p: _Part) -> None:
        k = (p.tid, p.pid)
        if p.leader == -1:
            self.leaderless.add(k)
        else:
            self.by_leader.setdefault(p.leader, {})[k] = None
        if p.leader != p.replicas[0]:
            self.imbalanced[k] = None

    def _unindex(self, p: _Part) -> None:
        k = (p.tid, p.pid)
        if p.leader == -1:
            self.leaderless.discard(k)
        else:
            self.by_leader[p.leader].pop(k, None)
        self.imbalanced.pop(k, None)

    # ---------------------------------------------------------------- §2.1 change builder (no reassignment)
    def build(self, p: _Part, target_isr: list, acceptable, *, preferred=False, unclean_brokers=(), lrs=None):
        """The PartitionChangeRecord the controller writes, or None (ELR on, MV >= 4.0-IV1)."""
        t_i = target_isr
        # B2
        if len(t_i) >= self.m:
            elr = []
        else:
            s = (set(p.elr) | set(p.isr)) - set(t_i) - set(unclean_brokers)
            elr = sorted(s)

        def valid(b):
            return b >= 0 and acceptable(b) and (b in t_i or (not t_i and b in elr))
        # B3
        unclean = False
        r = p.replicas
        if preferred:
            if valid(r[0]):
                node = r[0]
            elif valid(p.leader):
                node = p.leader
            else:
                node = next((b for b in r[1:] if valid(b)), None)
        else:
            node = p.leader if valid(p.leader) else next((b for b in r if valid(b)), None)
        if node is None:
            if not t_i and not elr and len(p.lke) == 1:
                node, unclean = p.lke[0], True   # last known leader (Balanced-recovery stand-in)
            else:
                node = -1
        d = {"partitionId": p.pid, "topicId": p.tid}
        isr_w = None
        leader_w = None
        # B4
        if node != p.leader:
            if node in elr:
                t_i = [node]
                elr = [b for b in elr if b != node]
            leader_w = node
            d["leader"] = node
            if unclean:
                isr_w = [node]
                if p.lrs != 1:
                    d["leaderRecoveryState"] = 1
        # B6
        if unclean:
            elr = []
        if elr != p.elr:
            d["eligibleLeaderReplicas"] = elr
        # B7 (ELR on: an empty target ISR is written)
        if isr_w is None and t_i != p.isr:
            isr_w = t_i
        if isr_w is not None:
            d["isr"] = isr_w
        # B9 production mode
        if isr_w == [] and p.lke != [p.leader]:
            d["lastKnownElr"] = [p.leader]
        elif ((leader_w is not None and leader_w >= 0) or (p.leader != -1 and leader_w != -1)) and p.lke:
            d["lastKnownElr"] = []
        # B10: leader recovery state requested by the leader
        if lrs is not None and lrs != p.lrs and "leaderRecoveryState" not in d:
            d["leaderRecoveryState"] = lrs
        if len(d) == 2:
            return None
        # key order as Kafka's JSON form prints it
        order = ("partitionId", "topicId", "isr", "leader", "leaderRecoveryState", "eligibleLeaderReplicas",
                 "lastKnownElr")
        return ("PARTITION_CHANGE_RECORD", 2, {k: d[k] for k in order if k in d})

    # ---------------------------------------------------------------- events
    def bootstrap(self):
        w = self.w
        w.epoch = 1
        self.emit([("LEADER_CHANGE", 0, {"version": 0, "leaderId": self.raft_leader,
                                         "voters": [{"voterId": c} for c in self.controllers],
                                         "grantingVoters": [{"voterId": c} for c in self.controllers[:2]]})],
                  control=True)
        self.tick(640)
        self.emit([("BEGIN_TRANSACTION_RECORD", 0, {"name": "Bootstrap records"})] + _features(MV_CHANGES)
                  + [("CONFIG_RECORD", 0, {"resourceType": 4, "resourceName": "", "name": "min.insync.replicas",
                                           "value": str(self.m)}),
                     ("END_TRANSACTION_RECORD", 0, {})])
        for c in self.controllers:
            self.tick(40)
            self.emit([_controller_record(c, _det_uuid(self.seed, "cinc", c, 0), MV_CHANGES)])
        for b in range(1, self.n_brokers + 1):
            self.tick(self.rng.randrange(5, 60))
            dirs = [_det_uuid(self.seed, "dir", b, k) for k in range(1 + (b % 4 == 0))]
            self.emit([_broker_record(b, self.w.next_offset, _det_uuid(self.seed, "inc", b, 0), dirs,
                                      MV_CHANGES, True)])
        for b in range(1, self.n_brokers + 1):
            self.tick(self.rng.randrange(5, 60))
            self.emit([("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                        {"brokerId": b, "brokerEpoch": self.brokers[b]["epoch"], "fenced": -1})])
        while len(self.parts) < self.n_parts_target and self.remaining() > 200:
            self.create_topic()

    def create_topic(self):
        rng = self.rng
        n_parts = rng.choice((1, 3, 6, 12, 12, 24, 32, 50))
        if 1 + n_parts + 2 > self.remaining() - 1:
            return False
        name = f"topic-{self.topic_seq:06d}"
        tid = _det_uuid(self.seed, "topic", self.topic_seq)
        self.topic_seq += 1
        live = [b for b in self.brokers if self.active(b)]   # the placer uses unfenced brokers only
        recs = [("TOPIC_RECORD", 0, {"name": name, "topicId": tid})]
        r = random.Random(self.seed * 7_000_001 + self.topic_seq)
        for key, values in r.sample(_TOPIC_CONFIGS, r.choice((0, 1, 2))):
            recs.append(("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": name, "name": key,
                                              "value": r.choice(values)}))
        for pid in range(n_parts):
            replicas = rng.sample(live, 3)
            isr = list(replicas)
            dirs = [self.brokers[b]["dirs"][pid % len(self.brokers[b]["dirs"])] for b in replicas]
            recs.append(("PARTITION_RECORD", 2, {
                "partitionId": pid, "topicId": tid, "replicas": replicas, "isr": isr, "removingReplicas": [],
                "addingReplicas": [], "leader": isr[0], "leaderEpoch": 0, "partitionEpoch": 0,
                "directories": dirs}))
        self.tick(rng.randrange(10, 900))
        self.emit(recs)
        return True

    def delete_topic(self):
        if len(self.topics) < 5:
            return False
        tid = self.rng.choice(list(self.topics))
        self.tick(self.rng.randrange(10, 900))
        self.emit([("REMOVE_TOPIC_RECORD", 0, {"topicId": tid})])
        return True

    def noop(self):
        self.tick(500 + self.rng.randrange(0, 3))
        self.emit([("NO_OP_RECORD", 0, {})])
        return True

    def alter_partition(self):
        """One AlterPartition request from one leader: ISR shrinks/expands, RECOVERING -> RECOVERED."""
        rng = self.rng
        live = [b for b in self.brokers if self.active(b)]
        leader = rng.choice(live)
        want = min(self.max_batch, 1 + int(rng.expovariate(1 / 5)), self.remaining())
        led = list(self.by_leader.get(leader, ()))
        recs = []
        for k in rng.sample(led, min(len(led), want + 2)):
            if len(recs) >= want:
                break
            p = self.parts[k]
            if p.lrs == 1:
                rec = self.build(p, p.isr, self.live.__contains__, lrs=0)
            else:
                out = [b for b in p.replicas if b not in p.isr and self.active(b)]
                followers = [b for b in p.isr if b != p.leader]
                if out and (rng.random() < 0.9 or not followers):
                    target = p.isr + [rng.choice(out)]   # a follower caught up
                elif followers and (len(p.isr) == len(p.replicas) or rng.random() < 0.03):
                    drop = rng.choice(followers)          # a follower fell behind
                    target = [b for b in p.isr if b != drop]
                else:
                    continue
                rec = self.build(p, target, self.live.__contains__)
            if rec is not None:
                recs.append(rec)
        if not recs:
            return False
        self.tick(rng.randrange(1, 400))
        self.emit(recs)
        return True

    def _chunks(self, recs, tail=None):
        out = []
        for i in range(0, len(recs), self.max_batch):
            out.append(recs[i:i + self.max_batch])
        if tail is not None:
            if out and len(out[-1]) < self.max_batch:
                out[-1].append(tail)
            else:
                out.append([tail])
        return out

    def fence(self):
        """Session timeout of a live broker; its restart and unfence are scheduled a little later."""
        live = [b for b in self.brokers if self.active(b)]
        if len(self.brokers) - len(live) >= max(2, self.n_brokers // 6):
            return False
        b = self.rng.choice(live)
        recs = []
        for k in self.keys:
            p = self.parts[k]
            if b in p.isr:
                rec = self.build(p, [x for x in p.isr if x != b], lambda x: x != b and self.active(x))
                if rec is not None:
                    recs.append(rec)
        fence_rec = ("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                     {"brokerId": b, "brokerEpoch": self.brokers[b]["epoch"], "fenced": 1})
        if len(recs) + 1 > self.remaining():
            return False
        self.tick(9000 + self.rng.randrange(0, 1500))
        for chunk in self._chunks(recs, fence_rec):
            self.emit(chunk)
            self.tick(1)
        self.schedule(self.rng.randrange(30, 300), self.reregister, b)
        return True

    def schedule(self, after_events: int, fn, *args) -> None:
        self.agenda.append((self.event_no + after_events, fn, args))
        self.agenda.sort(key=lambda e: e[0])

    def reregister(self, b: int):
        """A fenced broker restarts after a crash: unclean-shutdown handling + RegisterBrokerRecord."""
        recs = []
        for k in self.keys:  # B in ISR first, then B in ELR (B is already out of every ISR after its fence)
            p = self.parts[k]
            if b in p.isr:
                rec = self.build(p, [x for x in p.isr if x != b], lambda x: x != b and self.active(x),
                                 unclean_brokers=(b,))
                if rec is not None:
                    recs.append(rec)
        for k in self.keys:
            p = self.parts[k]
            if b in p.elr and b not in p.isr:
                rec = self.build(p, list(p.isr), lambda x: x != b and self.active(x), unclean_brokers=(b,))
                if rec is not None:
                    recs.append(rec)
        if len(recs) + 1 > self.remaining():
            return False
        reg = self.brokers[b]
        gen = reg.get("gen", 0) + 1
        incarnation = _det_uuid(self.seed, "inc", b, gen)
        self.tick(self.rng.randrange(5000, 60000))
        base = self.w.next_offset
        rec = _broker_record(b, base, incarnation, reg["dirs"], MV_CHANGES, True)
        self.emit(recs + [rec])  # one atomic batch; broker epoch = first offset of the batch
        self.brokers[b]["gen"] = gen
        self.schedule(self.rng.randrange(5, 100), self.unfence, b)
        return True

    def unfence(self, b: int):
        head = ("BROKER_REGISTRATION_CHANGE_RECORD", 0,
                {"brokerId": b, "brokerEpoch": self.brokers[b]["epoch"], "fenced": -1})
        # records of one trigger are computed against the state before it, but the unfence record
        # comes first and its acceptability test already counts b as usable
        recs = []
        for k in sorted(self.leaderless):
            p = self.parts[k]
            rec = self.build(p, list(p.isr), lambda x: x == b or self.active(x))
            if rec is not None:
                recs.append(rec)
        if len(recs) + 1 > self.remaining():
            return False
        self.tick(self.rng.randrange(500, 3000))
        chunks = self._chunks([head] + recs)
        for chunk in chunks:
            self.emit(chunk)
            self.tick(1)
        self.schedule(self.rng.randrange(2, 20), self.catch_up, b)
        return True

    def catch_up(self, b: int):
        """The restarted broker has caught up: every leader adds it back to its ISRs (AlterPartition
        requests, one batch of <= max_batch partitions per request); RECOVERING leaders first report
        RECOVERED."""
        if not self.active(b):
            return False
        by_leader: dict[int, list] = {}
        for k in self.keys:
            p = self.parts[k]
            if p.leader == -1 or b not in p.replicas:
                continue
            if p.lrs == 1:
                rec = self.build(p, p.isr, self.live.__contains__, lrs=0)
            elif b not in p.isr:
                rec = self.build(p, p.isr + [b], self.live.__contains__)
            else:
                continue
            if rec is not None:
                by_leader.setdefault(p.leader, []).append(rec)
        total = sum(len(v) for v in by_leader.values())
        if total > self.remaining():
            return False
        for leader in sorted(by_leader):
            for chunk in self._chunks(by_leader[leader]):
                self.tick(self.rng.randrange(1, 200))
                self.emit(chunk)
        return True

    def preferred(self):
        """Automatic leader balancing: PREFERRED builder over imbalanced partitions (one batch)."""
        recs = []
        rng = self.rng
        cands = list(self.imbalanced)
        for k in rng.sample(cands, min(len(cands), 3 * self.max_batch)):
            if len(recs) >= min(self.max_batch, self.remaining()):
                break
            p = self.parts[k]
            r0 = p.replicas[0]
            if not self.active(r0) or (r0 not in p.isr and (p.isr or r0 not in p.elr)):
                continue
            rec = self.build(p, list(p.isr), self.live.__contains__, preferred=True)
            if rec is not None:
                recs.append(rec)
        if not recs:
            return False
        self.tick(rng.randrange(1, 300))
        self.emit(recs)
        return True

    def config(self):
        if not self.topics:
            return False
        tid = self.rng.choice(list(self.topics))
        key, values = self.rng.choice(_TOPIC_CONFIGS)
        self.tick(self.rng.randrange(10, 2000))
        self.emit([("CONFIG_RECORD", 0, {"resourceType": 2, "resourceName": self.topics[tid][0], "name": key,
                                         "value": self.rng.choice(values)})])
        return True

    def raft_election(self):
        others = [c for c in self.controllers if c != self.raft_leader]
        self.raft_leader = self.rng.choice(others)
        self.w.epoch += 1
        self.tick(self.rng.randrange(1500, 4000))
        self.emit([("LEADER_CHANGE", 0, {"version": 0, "leaderId": self.raft_leader,
                                         "voters": [{"voterId": c} for c in self.controllers],
                                         "grantingVoters": [{"voterId": c} for c in sorted(
                                             {self.raft_leader, others[0]})]})], control=True)
        return True

    def run(self):
        fixed = 1 + 7 + len(self.controllers) + 2 * self.n_brokers   # LEADER_CHANGE, bootstrap txn, registrations
        if self.n < fixed:
            raise ValueError(f"the changes mix needs at least {fixed} records")
        self.bootstrap()
        events = ((self.noop, 1.2), (self.alter_partition, 0.35), (self.preferred, 0.03), (self.fence, 0.001),
                  (self.config, 0.03), (self.create_topic, 0.003), (self.delete_topic, 0.001),
                  (self.raft_election, 0.0003))
        fns = [e[0] for e in events]
        cum = []
        acc = 0.0
        for _, wgt in events:
            acc += wgt
            cum.append(acc)
        rng = self.rng
        while self.remaining() > 0:
            self.event_no += 1
            if self.remaining() < 64:   # the tail: heartbeats only, so the count is exact
                self.noop()
                continue
            if self.agenda and self.agenda[0][0] <= self.event_no:
                _, fn, args = self.agenda.pop(0)
                fn(*args)
                continue
            fn = fns[bisect.bisect_left(cum, rng.random() * acc)]
            if fn == self.delete_topic and len(self.parts) < self.n_parts_target * 0.8:
                continue
            if fn == self.create_topic and len(self.parts) > self.n_parts_target * 1.2:
                continue
            fn()


# ---------------------------------------------------------------------------------------- API
def write_synthetic_log(path, n_records: int, mix: str, seed: int = 0, records_per_batch: int | None = None,
                        *, base_offset: int = 0, verify: bool = True) -> dict:
    """Write a synthetic KRaft metadata log of exactly ``n_records`` records to ``path`` (streamed).

    ``records_per_batch`` is the batch size of the ``snapshot`` mix (default 2,000); for ``changes`` it caps
    the size of change batches (default 50; heartbeats are always one per batch).  Returns statistics:
    records, batches, bytes, seconds, records_per_second, counts per record type.
    """
    if mix not in MIXES:
        raise ValueError(f"mix must be one of {MIXES}, not {mix!r}")
    if n_records < 1:
        raise ValueError("n_records must be positive")
    rng = random.Random(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(path, "wb", buffering=1 << 20) as fh:
        w = _Writer(fh, base_offset, verify)
        if mix == "snapshot":
            _write_snapshot_mix(w, n_records, rng, records_per_batch or 2000, seed)
        else:
            _Changes(w, n_records, rng, seed, max(1, records_per_batch or MAX_CHANGE_BATCH)).run()
    dt = time.perf_counter() - t0
    if w.written != n_records:
        raise AssertionError(f"wrote {w.written} records, asked for {n_records}")
    return {"path": str(path), "mix": mix, "records": w.written, "batches": w.batches, "bytes": w.bytes,
            "seconds": dt, "records_per_second": w.written / dt if dt else float("inf"),
            "verified_batches": w.verified, "counts": dict(w.counts.most_common())}


def cache_key(n_records: int, mix: str, seed: int = 0, records_per_batch: int | None = None) -> str:
    return f"{mix}-n{n_records}-s{seed}-b{records_per_batch or 'default'}-g{GENERATOR_VERSION}"


def cached_synthetic_log(n_records: int, mix: str, seed: int = 0, records_per_batch: int | None = None,
                         cache_dir: Path | None = None) -> Path:
    """Path of a cached synthetic log with these parameters, generated on first use."""
    cache_dir = Path(cache_dir) if cache_dir else CACHE_DIR
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"{cache_key(n_records, mix, seed, records_per_batch)}.log"
    if not path.exists():
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        try:
            write_synthetic_log(tmp, n_records, mix, seed, records_per_batch)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Write a synthetic KRaft metadata log.")
    ap.add_argument("out", type=Path, help="output file (e.g. /tmp/x/00000000000000000000.log)")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--mix", choices=MIXES, default="changes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--records-per-batch", type=int, default=None)
    ap.add_argument("--no-cache", action="store_true", help="generate straight into OUT, bypassing the cache")
    args = ap.parse_args(argv)
    if args.no_cache:
        st = write_synthetic_log(args.out, args.records, args.mix, args.seed, args.records_per_batch)
        _report(st)
        return 0
    cache_path = CACHE_DIR / f"{cache_key(args.records, args.mix, args.seed, args.records_per_batch)}.log"
    if cache_path.exists():
        print(f"cached: {cache_path}")
    else:
        tmp = cache_path.with_suffix(f".tmp{os.getpid()}")
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        try:
            st = write_synthetic_log(tmp, args.records, args.mix, args.seed, args.records_per_batch)
            os.replace(tmp, cache_path)
        finally:
            if tmp.exists():
                tmp.unlink()
        st["path"] = str(cache_path)
        _report(st)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cache_path, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size:,} bytes)")
    return 0


def _report(st: dict) -> None:
    n = st["records"]
    print(f"{st['path']}: {n:,} records ({st['mix']}), {st['batches']:,} batches, {st['bytes']:,} bytes "
          f"in {st['seconds']:.2f} s = {st['records_per_second']:,.0f} records/s "
          f"({st['bytes'] / st['seconds'] / 1e6:.1f} MB/s); {st['verified_batches']} batches cross-checked")
    for t, c in st["counts"].items():
        print(f"  {t:36s} {c:>10,}  {100 * c / n:5.1f} %")


if __name__ == "__main__":
    sys.exit(main())
