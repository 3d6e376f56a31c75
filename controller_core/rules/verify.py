"""Replay a metadata log and recompute every controller decision it records (scalar reference).

For each PartitionChangeRecord the controller's possible triggers (§2.2) are derived from the records
around it -- a fence, controlled shutdown, unfence, unclean shutdown or unregistration of a broker in
the same batch or in the adjacent run of partition-only batches (large triggers may be split across
batches) -- plus the triggers that leave no broker record behind (AlterPartition, elections,
reassignment).  Each candidate is run through the change builder (:mod:`controller_core.rules.builder`)
against the state just before the record; the first whose result equals the record explains it.
When none does, every field where the record differs from the most plausible candidate is a
divergence.  Unknowns of the log (a broker's static config, whether ELR was on before the log shows
evidence of it) are tried both ways rather than guessed.
"""
from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from controller_core import codes
from controller_core.rules.builder import ONLINE, PREFERRED, UNCLEAN, Inputs, build
from controller_core.replay import Rec, iter_batches
from controller_core.transactions import committed
from controller_core.image import (
    ELR_FEATURE, MIN_ISR, MV_4_0_IV1, NO_LEADER, Cluster, Partition, ReplayError,
)
from controller_core.rules.triggers import MV_4_0_IV0, acceptable


@dataclass(frozen=True)
class Divergence:
    offset: int
    topic: str | None
    partition: int | None
    field: str  # Kafka JSON field name of the record ("leader", "isr", ...), or "record"
    recorded: object
    expected: object
    trigger: str
    rule: str  # codes.RECOMPUTE, or codes.ELECTION_ORDER for the leader field
    severity: str  # the registry's default for the rule (codes.severity)
    topic_id: str | None = field(default=None, compare=False, repr=False)  # for callers that key by id


@dataclass
class Report:
    records: int = 0
    partition_changes: int = 0
    divergences: list[Divergence] = field(default_factory=list)
    breaches: list = field(default_factory=list)
    triggers: dict[str, int] = field(default_factory=dict)  # how often each trigger explained a record
    # (offset, topic id, partition, trigger) per PartitionChangeRecord; "?" marks an unexplained one
    explained: list[tuple[int, str, int, str]] = field(default_factory=list)
    start_offset: int = 0

    def to_json(self) -> dict:
        return {"records": self.records, "partitionChanges": self.partition_changes,
                "divergences": [_item(d) for d in self.divergences],
                "invariantBreaches": [_item(b) for b in self.breaches]}


def _item(x) -> dict:
    d = asdict(x)
    tid = d.pop("topic_id", None)
    return {"offset": d.pop("offset"), "topic": d.pop("topic"), "topicId": tid, "partition": d.pop("partition"),
            "rule": d.pop("rule"), "severity": d.pop("severity"), "recorded": d.pop("recorded"),
            "expected": d.pop("expected"), **d}


# --------------------------------------------------------------------------------- broker events
FENCE, CONTROLLED_SHUTDOWN, UNFENCE, UNCLEAN_SHUTDOWN, UNREGISTER, DIRS_OFFLINE = (
    "fence", "controlled_shutdown", "unfence", "unclean_shutdown", "unregister", "directories_offline")
# whether the trigger's broker record comes after (True) or before (False) its partition records
AFTER = {FENCE: True, UNCLEAN_SHUTDOWN: True, UNREGISTER: True, DIRS_OFFLINE: True,
         CONTROLLED_SHUTDOWN: False, UNFENCE: False}


def broker_events(c: Cluster, batch: list[Rec]) -> list[tuple[int, str, int]]:
    """(index in batch, event kind, broker) for the broker-state records of a batch."""
    out = []
    for i, r in enumerate(batch):
        d = r.data
        if r.type == "BROKER_REGISTRATION_CHANGE_RECORD":
            if d.get("fenced", 0) == 1:
                out.append((i, FENCE, d["brokerId"]))
            elif d.get("fenced", 0) == -1:
                out.append((i, UNFENCE, d["brokerId"]))
            if d.get("inControlledShutdown", 0) == 1:
                out.append((i, CONTROLLED_SHUTDOWN, d["brokerId"]))
            if d.get("logDirs"):
                out.append((i, DIRS_OFFLINE, d["brokerId"]))
        elif r.type == "FENCE_BROKER_RECORD":
            out.append((i, FENCE, d["id"]))
        elif r.type == "UNFENCE_BROKER_RECORD":
            out.append((i, UNFENCE, d["id"]))
        elif r.type == "UNREGISTER_BROKER_RECORD":
            out.append((i, UNREGISTER, d["brokerId"]))
        elif r.type == "REGISTER_BROKER_RECORD":
            prev = c.brokers.get(d["brokerId"])
            if prev is None or prev.incarnation_id != d["incarnationId"]:
                out.append((i, UNCLEAN_SHUTDOWN, d["brokerId"]))
    return out


# ----------------------------------------------------------------------------------- candidates
@dataclass
class Candidate:
    trigger: str
    inputs: Inputs


def candidates(c: Cluster, p: Partition, rec: Rec, events: list[tuple[str, int]]) -> Iterator[Candidate]:
    """The triggers that could have produced ``rec`` for partition ``p``, most plausible first
    (generated lazily: the first usually explains the record)."""
    mv = c.metadata_version
    topic_mode = [UNCLEAN, ONLINE] if c.unclean_enabled(p.topic_id) else [ONLINE, UNCLEAN]
    # ELR: the feature record decides; without it (MV >= 4.0-IV1) try both until the log shows evidence
    if ELR_FEATURE in c.features or mv < MV_4_0_IV1 or c.elr_override is not None or c.elr_evidence:
        elr_modes = [c.elr_enabled]
    else:
        elr_modes = [False, True]
    # effective min ISR: from the log, or -- when no ConfigRecord resolves it and a static broker
    # config might -- any value up to the replication factor
    m = c.min_isr(p.topic_id)
    resolved = c.topic_config(c.topics.get(p.topic_id, ""), MIN_ISR) is not None
    p0 = c.partitions.get((p.topic_id, 0), p)
    mins = [m] if resolved else [m] + [k for k in range(1, len(set(p0.replicas)) + 1) if k != m]
    lkl_checks = [True, False] if mv >= MV_4_0_IV0 else [False, True]
    d = rec.data

    def variants(trigger, elections, accept=None, **kw):
        accept = accept or acceptable(c, p)
        for e in elections:
            for elr in elr_modes:
                for mm in mins:
                    for chk in lkl_checks:
                        yield Candidate(trigger, Inputs(acceptable=accept, min_isr=mm, elr_enabled=elr,
                                                        metadata_version=mv, election=e,
                                                        check_last_known_leader=chk,
                                                        default_dir=c.default_dir, **kw))

    # 1. broker-state triggers seen around the record
    for kind, b in events:
        name = f"{kind}({b})"
        if kind in (FENCE, CONTROLLED_SHUTDOWN, UNREGISTER, DIRS_OFFLINE):
            yield from variants(name, topic_mode, acceptable(c, p, exclude=b), target_isr=[x for x in p.isr if x != b])
        elif kind == UNCLEAN_SHUTDOWN:
            yield from variants(name, topic_mode, acceptable(c, p, exclude=b), target_isr=[x for x in p.isr if x != b],
                                unclean_shutdown=frozenset({b}))
            # [LATER] a clean restart (previous epoch matches) is handled like a fence
            yield from variants(name + "[clean restart]", topic_mode, acceptable(c, p, exclude=b),
                                target_isr=[x for x in p.isr if x != b])
        elif kind == UNFENCE:
            yield from variants(name, topic_mode, acceptable(c, p, include=b))
    # 2. triggers that leave no broker record
    isr = d.get("isr")
    lrs = d.get("leaderRecoveryState", -1)
    yield from variants("alter_partition", topic_mode, target_isr=isr if isr is not None else None,
                        target_lrs=lrs if lrs != -1 else None)
    if d.get("replicas") is not None or d.get("addingReplicas") is not None or d.get("removingReplicas") is not None:
        yield from variants("reassignment", [ONLINE], target_replicas=d.get("replicas"),
                            target_adding=d.get("addingReplicas"), target_removing=d.get("removingReplicas"),
                            target_isr=isr)
    yield from variants("preferred_election", [PREFERRED])
    yield from variants("unclean_election", [UNCLEAN])


# ---------------------------------------------------------------------------------- comparison
_SET_FIELDS = ("eligibleLeaderReplicas", "lastKnownElr")


def normalise(p: Partition, change: dict | None) -> dict:
    """A change record's effective content: only fields it writes, ELR/LastKnownElr as sets, and an
    ELR field that merely re-orders the current ELR dropped (Kafka compares them as lists, §2.1)."""
    out = {}
    for k, v in (change or {}).items():
        if k in ("partitionId", "topicId"):
            continue
        if v is None or (k == "leader" and v == -2) or (k == "leaderRecoveryState" and v == -1):
            continue
        if k in _SET_FIELDS:
            v = sorted(v)
            if k == "eligibleLeaderReplicas" and v == sorted(p.elr) and len(p.elr) > 0:
                continue
        out[k] = v
    return out


def diff(recorded: dict, expected: dict) -> list[tuple[str, object, object]]:
    keys = list(dict.fromkeys(list(expected) + list(recorded)))
    return [(k, recorded.get(k), expected.get(k)) for k in keys if recorded.get(k) != expected.get(k)]


# ----------------------------------------------------------------------------------------- loop
def _nearby_events(c: Cluster, batches: list[list[Rec]], bi: int) -> list[tuple[int, str, int]]:
    """Broker events that could have triggered the records of batch bi, as (index, kind, broker):
    those of its own batch (index in the batch), else those just across a run of partition-change-
    only batches (index -1 for a run before it: its events come before every record; len+1 after)."""
    own = broker_events(c, batches[bi])
    if own:
        return own
    evs = []
    for step in (1, -1):
        j = bi + step
        while 0 <= j < len(batches) and all(r.type == "PARTITION_CHANGE_RECORD" for r in batches[j]):
            j += step
        if 0 <= j < len(batches):
            for _, kind, b in broker_events(c, batches[j]):
                if AFTER[kind] == (step == 1):
                    evs.append((len(batches[bi]) if step == 1 else -1, kind, b))
    return evs


def _events_for(evs: list[tuple[int, str, int]], ri: int) -> list[tuple[str, int]]:
    """The events on the right side of record ri: after it for fence-like, before it for the rest."""
    return [(kind, b) for i, kind, b in evs if (AFTER[kind] and i > ri) or (not AFTER[kind] and i < ri)]


LOOK = 64  # batches of look-ahead / look-behind for triggers split across batches


def _partition_only(batch: list[Rec]) -> bool:
    return all(r.type == "PARTITION_CHANGE_RECORD" for r in batch)


def verify_batches(batches: Iterable[list[Rec]], checker=None, elr_override: bool | None = None,
                   snapshot_files: frozenset[str] = frozenset()) -> Report:
    """Replay and recompute; ``checker`` (optional) evaluates the §4 invariants."""
    c = Cluster(elr_override=elr_override)
    rep = Report()
    src = iter(batches)
    ahead: deque[list[Rec]] = deque()
    behind: deque[list[Rec]] = deque(maxlen=LOOK)
    done = False
    while True:
        # see past the run of partition-only batches that follows, to the batch that ends it
        while not done and len(ahead) < LOOK and (len(ahead) < 2 or _partition_only(ahead[-1])):
            nxt = next(src, None)
            if nxt is None:
                done = True
            else:
                ahead.append(nxt)
        if not ahead:
            if checker is not None:
                rep.breaches.extend(checker.finish(c))  # findings held back for a possible continuation
            return rep
        batch = ahead.popleft()
        context = list(behind) + [batch] + list(ahead)
        _verify_batch(c, rep, context, len(behind), checker, snapshot_files)
        behind.append(batch)


def _verify_batch(c: Cluster, rep: Report, batches: list[list[Rec]], bi: int, checker, snapshot_files) -> None:
    batch = batches[bi]
    evs = None  # computed once per batch, when the batch has a partition change
    for ri, rec in enumerate(batch):
        rep.records += 1
        if checker is not None:
            rep.breaches.extend(checker.before_record(c, rec))
        if rec.type == "PARTITION_CHANGE_RECORD":
            p = c.partitions.get((rec.data["topicId"], rec.data["partitionId"]))
            if p is not None:
                rep.partition_changes += 1
                if evs is None:
                    evs = _nearby_events(c, batches, bi)
                _check_change(c, rep, p, rec, _events_for(evs, ri))
        elif rec.type == "PARTITION_RECORD" and rec.file not in snapshot_files:
            _check_creation(c, rep, rec)
        try:
            c.apply(rec.type, rec.data, rec.offset)
        except ReplayError:
            pass  # reported by the invariant checker (INV-TOPIC-EXISTS); the image stays as it was
    if checker is not None:
        rep.breaches.extend(checker.after_batch(c, batch))


def _check_change(c: Cluster, rep: Report, p: Partition, rec: Rec, events) -> None:
    recorded = normalise(p, rec.data)
    first = None
    for cand in candidates(c, p, rec, events):
        expected = normalise(p, build(p, cand.inputs))
        if first is None:
            first = (cand, expected)
        if expected == recorded:
            rep.triggers[cand.trigger] = rep.triggers.get(cand.trigger, 0) + 1
            rep.explained.append((rec.offset, p.topic_id, p.partition_id, cand.trigger))
            return
    cand, expected = first
    rep.explained.append((rec.offset, p.topic_id, p.partition_id, cand.trigger + "?"))
    topic = c.topics.get(p.topic_id, p.topic_id)
    for k, got, want in diff(recorded, expected):
        rule = codes.ELECTION_ORDER if k == "leader" else codes.RECOMPUTE
        rep.divergences.append(Divergence(rec.offset, topic, p.partition_id, k, got, want, cand.trigger, rule,
                                          codes.severity(rule), topic_id=p.topic_id))


def _check_creation(c: Cluster, rep: Report, rec: Rec) -> None:
    """§1.2-5: a partition created by the controller (not a snapshot's state dump)."""
    d = rec.data
    key = (d["topicId"], d["partitionId"])
    if key in c.partitions:
        return  # an overwrite of a live partition: checked by INV-EPOCH-MONOTONIC
    isr = [b for b in d["replicas"] if c.active(b)]
    expected = {"isr": isr, "leader": isr[0] if isr else NO_LEADER, "leaderEpoch": 0, "partitionEpoch": 0,
                "eligibleLeaderReplicas": [], "lastKnownElr": [], "leaderRecoveryState": 0}
    recorded = {"isr": d["isr"], "leader": d["leader"], "leaderEpoch": d["leaderEpoch"],
                "partitionEpoch": d["partitionEpoch"], "eligibleLeaderReplicas": d.get("eligibleLeaderReplicas") or [],
                "lastKnownElr": d.get("lastKnownElr") or [], "leaderRecoveryState": d.get("leaderRecoveryState", 0)}
    topic = c.topics.get(d["topicId"], d["topicId"])
    for k, got, want in diff(recorded, expected):
        rep.divergences.append(Divergence(rec.offset, topic, d["partitionId"], k, got, want, "create_partition",
                                          codes.RECOMPUTE, codes.severity(codes.RECOMPUTE), topic_id=d["topicId"]))


def verify_log_dir(log_dir: str | Path, checker=None, elr_override: bool | None = None) -> Report:
    from controller_core.logdir import SNAPSHOT
    from controller_core.replay import plan

    pl = plan(log_dir)
    snaps = frozenset(f.label for f in pl.files if f.kind == SNAPSHOT)
    # the records of aborted or unended metadata transactions are not replayed (controller_core/transactions.py)
    batches = committed(iter_batches(log_dir, include_skipped=True))
    rep = verify_batches((b for _, b in batches), checker, elr_override, snaps)
    rep.start_offset = pl.start_offset
    return rep
