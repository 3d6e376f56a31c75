"""The invariants of a KRaft metadata log (controller-rules.md §4), checked while the log is replayed.

The verify loop drives an :class:`InvariantChecker` batch by batch::

    for rec in batch:
        breaches += checker.before_record(cluster, rec)   # the image BEFORE rec is applied
        cluster.apply(rec.type, rec.data, rec.offset)      # skipped by the caller if it raises
    breaches += checker.after_batch(cluster, batch)        # "at write time" = right after the batch
    ...
    breaches += checker.finish(cluster)                     # once, after the last batch

``finish`` reports what was still waiting for later batches: a controlled shutdown's partition records
may be split over several batches (see ``_check_fences``).  :func:`check_log` is this loop.

Record-level rules (structure of the state a record leaves, epoch steps, bumps, LRS transitions,
broker epochs) are evaluated in ``before_record`` on the state the record produces, computed with
:func:`controller_core.image.merge`.  Rules that speak about the state *after a batch* (min ISR,
fencing, unclean-shutdown handling, availability windows) are evaluated in ``after_batch``.

The election rules a record shows by itself are here too: INV-UNCLEAN-ELECTION (every unclean election,
:func:`is_unclean_election` classifies a PartitionChangeRecord as §2.6-5 does), INV-UNCLEAN-CONFIG (that
election on a topic whose unclean config resolves false at that point) and INV-LEADER-ACTIVE (a new
leader that is not an active broker when the record is written).  Not here: INV-ELECTION-ORDER, which
needs the recomputation of the controller's decision (verify.py reports it as a divergence).

One id not in the §4 table: INV-TOPIC-UNIQUE (E) for a TopicRecord naming a live topic (§1.4), which
``Cluster.apply`` refuses like the records of INV-TOPIC-EXISTS.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from controller_core import codes
from controller_core.rules import breaches as say
from controller_core.codes import ERROR, INFO, WARN
from controller_core.image import (
    ELR_FEATURE, LEADER_UNCHANGED, METADATA_VERSION, MIN_ISR, MV_3_2_IV0, MV_3_6_IV0, MV_4_0_IV1, MV_4_1_IV0, NO_LEADER,
    RECOVERED, RECOVERING, Cluster, Partition, merge,
)

if TYPE_CHECKING:
    from controller_core.replay import Rec

# the §4 rules evaluated elsewhere: they need the recomputed election (verify.py reports a leader that
# differs from the recomputed one as a divergence with this rule id)
NOT_HERE = tuple(c.code for c in codes.of_kind(codes.INVARIANT) if c.table == codes.DIVERGENCES)

# id -> default severity, from the registry (controller_core/codes.py).  The checker grades a few cases
# below differently (``_elr_flag``, INV-ISR-EXPAND-ACTIVE before Kafka 3.3, INV-ELR-BELOW-MINISR after a
# min ISR change): the registry's ``varies`` says which and why.
RULES: dict[str, str] = {c.code: c.severity for c in codes.of_kind(codes.INVARIANT) if c.code not in NOT_HERE}


@dataclass(frozen=True)
class Breach:
    offset: int
    rule: str  # "INV-LEADER-IN-ISR", ...
    severity: str  # "ERROR" | "WARN" | "INFO"
    topic: str | None  # topic name (or id if unknown)
    partition: int | None
    recorded: object  # JSON-able: what the log holds
    expected: object  # JSON-able: what the rule wants
    message: str  # one sentence an operator understands
    topic_id: str | None = field(default=None, compare=False, repr=False)  # for callers that key by id


# --------------------------------------------------------------------------------------------- helpers
def _written(rtype: str, d: dict) -> frozenset[str]:
    """The partition fields a record writes (a PartitionRecord writes all of them; a change record only
    the fields not in their "unchanged" encoding, §1.3)."""
    if rtype == "PARTITION_RECORD":
        return _ALL_FIELDS
    w = set()
    if d.get("isr") is not None:
        w.add("isr")
    if d.get("leader", LEADER_UNCHANGED) != LEADER_UNCHANGED:
        w.add("leader")
    for key, name in (("replicas", "replicas"), ("removingReplicas", "removing"), ("addingReplicas", "adding"),
                      ("directories", "directories"), ("eligibleLeaderReplicas", "elr"),
                      ("lastKnownElr", "lke")):
        if d.get(key) is not None:
            w.add(name)
    if d.get("leaderRecoveryState", -1) != -1:
        w.add("lrs")
    return frozenset(w)


_ALL_FIELDS = frozenset({"isr", "leader", "replicas", "removing", "adding", "directories", "elr", "lke", "lrs"})


def _from_partition_record(d: dict) -> Partition:
    reps = list(d.get("replicas") or [])
    return Partition(
        topic_id=d["topicId"], partition_id=d["partitionId"], replicas=reps, isr=list(d.get("isr") or []),
        leader=d.get("leader", NO_LEADER), leader_epoch=d.get("leaderEpoch", -1),
        partition_epoch=d.get("partitionEpoch", -1), removing=list(d.get("removingReplicas") or []),
        adding=list(d.get("addingReplicas") or []), elr=list(d.get("eligibleLeaderReplicas") or []),
        last_known_elr=list(d.get("lastKnownElr") or []), lrs=d.get("leaderRecoveryState", RECOVERED),
        directories=list(d.get("directories") or []))


def _min_isr_known(c: Cluster, topic_id: str) -> bool:
    """Whether the log determines m: a min.insync.replicas ConfigRecord resolves (§1.7 sources 1-3), or
    partition 0 has a single replica (m is capped at 1).  Otherwise the controller's static config, which
    the log does not hold, may set it."""
    if c.topic_config(c.topics.get(topic_id, ""), MIN_ISR) is not None:
        return True
    p0 = c.partitions.get((topic_id, 0))
    return p0 is not None and len(set(p0.replicas) | set(p0.adding) | set(p0.removing)) <= 1


def _is_snapshot(rec: Rec) -> bool:
    return str(rec.file).endswith(".checkpoint")


def _elected_from_elr(before: Partition, d: dict) -> bool:
    """B4 with the winner taken from ELR: a new leader from the previous ELR that becomes the sole ISR member."""
    leader = d.get("leader", LEADER_UNCHANGED)
    return (leader >= 0 and leader != before.leader and leader in before.elr and d.get("isr") == [leader]
            and d.get("leaderRecoveryState", -1) != RECOVERING)


def _elected_last_known_leader(before: Partition, d: dict) -> bool:
    """§2.3 step 3: the single LastKnownElr member elected (unclean) while ISR and ELR are empty."""
    leader = d.get("leader", LEADER_UNCHANGED)
    return leader >= 0 and leader != before.leader and before.last_known_elr == [leader] and d.get("isr") == [leader]


def _clean_restart(c: Cluster, previous) -> bool:
    """A re-registration a Kafka 4.1+ controller treats as a clean restart, keeping the broker's ELR membership
    (§1.6-3): it runs the unclean-shutdown handling only when the broker's previous broker epoch does not match,
    and a broker sends its epoch only after a clean shutdown.  The epoch is not in the log; the controlled
    shutdown is (the previous incarnation still in controlled shutdown when it registers again).  Only MV >=
    4.1-IV0 proves a 4.1+ controller; at a lower level the 4.0 controller's rule stands (every new incarnation is
    unclean)."""
    return c.metadata_version >= MV_4_1_IV0 and previous is not None and previous.in_controlled_shutdown


def is_unclean_election(before: Partition, change: dict) -> bool:
    """§2.6-5: does this PartitionChangeRecord (Kafka JSON form) record an unclean election?

    An unclean election writes a leader >= 0 and ``isr = [leader]`` where the new leader was not in the
    previous ISR.  A leader taken from the previous ELR also lands in ISR ``[leader]`` (B4 + B7) but is a
    clean election, unless the record also sets RECOVERING, which clean elections never do (§2.6-5): that
    is §2.3 step 4 picking an acceptable replica that happened to sit in ELR.  The last-known-leader
    election (§2.3 step 3) is unclean.  Kafka's own ``electionWasClean`` ignores ELR; do not use it.
    """
    leader = change.get("leader", LEADER_UNCHANGED)
    if leader < 0 or change.get("isr") != [leader]:
        return False
    if leader in before.isr:
        return False
    if leader in before.elr and change.get("leaderRecoveryState", -1) != RECOVERING:
        return False
    return True


@dataclass
class _Touch:
    """One partition record of the current batch."""

    offset: int
    before: Partition | None
    after: Partition
    data: dict


@dataclass
class _BatchState:
    touched: dict[tuple[str, int], list[_Touch]] = field(default_factory=dict)
    m_before: dict[str, int] = field(default_factory=dict)  # topic id -> m before the batch touched it
    # (broker, offset, "fence" | "controlled shutdown")
    fences: list[tuple[int, int, str]] = field(default_factory=list)
    registrations: list[tuple[int, int]] = field(default_factory=list)  # new incarnations: (broker, offset)
    reevaluate_at: int | None = None  # offset of a record that may change m of partitions not written

    def reevaluate(self, offset: int) -> None:
        if self.reevaluate_at is None:
            self.reevaluate_at = offset


class InvariantChecker:
    """Evaluates the §4 invariants over a replay (see the module docstring for the calling protocol)."""

    def __init__(self) -> None:
        self._b = _BatchState()
        self._pending_epochs: list[tuple[tuple[str, int], int, int, int]] = []  # key, offset, LE', PE'
        self._m_at_record: dict[tuple[str, int], int] = {}  # m right after the partition's last batch
        self._under: set[tuple[str, int]] = set()  # partitions inside an INV-UNDER-MINISR window
        self._offline: set[tuple[str, int]] = set()  # partitions inside an INV-OFFLINE-NO-CANDIDATE window
        self._zk_import = False  # a ZooKeeper migration is importing partitions (their epochs come from ZK)
        # controlled shutdowns whose partition records may continue in later batches (non-atomic results
        # are split into batches of at most 10000 records): broker -> (offset, partitions still offending)
        self._pending_cs: dict[int, tuple[int, set]] = {}

    # ------------------------------------------------------------------------------------- protocol
    def before_record(self, c: Cluster, rec: Rec) -> list[Breach]:
        out: list[Breach] = []
        self._verify_epochs(c, out)
        handler = self._RECORD_CHECKS.get(rec.type)
        if handler is not None:
            handler(self, c, rec, out)
        return out

    def after_batch(self, c: Cluster, batch: list[Rec]) -> list[Breach]:
        out: list[Breach] = []
        self._verify_epochs(c, out)
        b = self._b
        self._check_elr_below_min_isr(c, out)
        self._check_windows(c, out)
        self._check_fences(c, out)
        self._check_unclean_shutdowns(c, out)
        if any(r.type == "REMOVE_TOPIC_RECORD" for r in batch):  # only a deletion makes entries stale
            for key in [k for k in self._m_at_record if k not in c.partitions]:
                del self._m_at_record[key]
        for key in b.touched:
            if key in c.partitions:
                self._m_at_record[key] = c.min_isr(key[0])
        self._b = _BatchState()
        return out

    # ------------------------------------------------------------------------------------- utilities
    @staticmethod
    def _breach(c: Cluster, offset: int, rule: str, severity: str | None, key, said) -> Breach:
        """``said``: (recorded, expected, message) from :mod:`controller_core.rules.breaches`."""
        recorded, expected, message = said
        topic, part = (None, None) if key is None else (c.topics.get(key[0], key[0]), key[1])
        default = RULES[rule]  # looked up even for a case-specific severity: an undeclared id fails here
        return Breach(offset, rule, severity or default, topic, part, recorded, expected, message,
                      topic_id=None if key is None else key[0])

    def _verify_epochs(self, c: Cluster, out: list[Breach]) -> None:
        """INV-LEADER-EPOCH-STEP / INV-PARTITION-EPOCH-STEP: a change record carries no epochs, so the rule
        is checked on the image the record produced (guards the applier: fold, merge)."""
        if not self._pending_epochs:
            return
        for key, offset, le, pe in self._pending_epochs:
            p = c.partitions.get(key)
            if p is None:
                continue
            if p.leader_epoch != le:
                out.append(self._breach(c, offset, "INV-LEADER-EPOCH-STEP", None, key, (p.leader_epoch, le,
                                        f"leader epoch became {p.leader_epoch} after this change record, "
                                        f"the record's leader field makes it {le}")))
            if p.partition_epoch != pe:
                out.append(self._breach(c, offset, "INV-PARTITION-EPOCH-STEP", None, key, (p.partition_epoch, pe,
                                        f"partition epoch became {p.partition_epoch} after this change record, "
                                        f"every change record adds exactly 1 (expected {pe})")))
        self._pending_epochs = []

    def _touch(self, c: Cluster, key, offset: int, before: Partition | None, after: Partition, d: dict) -> None:
        b = self._b
        if key[0] not in b.m_before:
            b.m_before[key[0]] = c.min_isr(key[0])
        b.touched.setdefault(key, []).append(_Touch(offset, before, after, d))
        # m of every partition of the topic is capped by partition 0's replica count (§1.7)
        if key[1] == 0 and before is not None and (
                set(before.replicas) | set(before.adding) | set(before.removing)
                != set(after.replicas) | set(after.adding) | set(after.removing)):
            b.reevaluate(offset)

    @staticmethod
    def _elr_flag(c: Cluster) -> tuple[bool, str | None]:
        """(ELR in effect?, severity of an ELR-only state if not): §1.8 auditor rule.  When MV >= 4.0-IV1,
        no eligible.leader.replicas.version record and no override, the flag is only inferred from
        evidence; the first evidence is then WARN (the property may well have been on)."""
        mv = c.metadata_version
        if mv < MV_4_0_IV1:
            return False, ERROR
        if ELR_FEATURE in c.features:
            return (True, None) if c.features[ELR_FEATURE] >= 1 else (False, ERROR)
        if c.elr_override is not None:
            return (True, None) if c.elr_override else (False, ERROR)
        return (True, None) if c.elr_evidence else (False, WARN)

    # ------------------------------------------------------------------------------------- topics
    def _on_topic(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        name = rec.data.get("name")
        if name in c.topic_ids:
            out.append(self._breach(c, rec.offset, "INV-TOPIC-UNIQUE", None, None,
                                    say.topic_unique(name, rec.data.get("topicId"), c.topic_ids[name])))

    def _on_remove_topic(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        tid = rec.data.get("topicId")
        if tid not in c.topics:
            out.append(self._breach(c, rec.offset, "INV-TOPIC-EXISTS", None, None, say.remove_unknown_topic(tid)))

    def _on_clear_elr(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        name = rec.data.get("topicName") or ""
        if name and name not in c.topic_ids:
            out.append(self._breach(c, rec.offset, "INV-TOPIC-EXISTS", None, None, say.clear_elr_unknown_topic(name)))
            return
        tids = {c.topic_ids[name]} if name else set(c.topics)
        for key, p in c.partitions.items():
            if key[0] in tids and (p.elr or p.last_known_elr):
                d = {"topicId": key[0], "partitionId": key[1], "eligibleLeaderReplicas": [], "lastKnownElr": []}
                self._touch(c, key, rec.offset, p, merge(p, d), d)

    def _on_zk_migration(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        # ZkMigrationState: NONE 0, MIGRATION 1, POST_MIGRATION 2, PRE_MIGRATION 3, ZK 4.  While the controller
        # imports ZooKeeper's metadata, PartitionRecords carry ZooKeeper's epochs and ISRs.
        self._zk_import = rec.data.get("zkMigrationState") in (1, 3)

    def _on_config(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        if rec.data.get("name") == MIN_ISR:
            self._b.reevaluate(rec.offset)

    def _on_leader_change(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        # the active controller's node-level config takes part in the resolution of m (§1.7)
        if rec.data.get("leaderId") != c.controller_id:
            self._b.reevaluate(rec.offset)

    # ------------------------------------------------------------------------------------- partitions
    def _on_partition(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        tid, pid = d.get("topicId"), d.get("partitionId")
        key = (tid, pid)
        if tid not in c.topics:
            out.append(self._breach(c, rec.offset, "INV-TOPIC-EXISTS", None, key,
                                    say.partition_of_unknown_topic(tid, pid)))
            return
        before = c.partitions.get(key)
        after = _from_partition_record(d)
        snapshot = _is_snapshot(rec) or self._zk_import  # not a creation by this controller
        if before is not None:
            if after.leader_epoch < before.leader_epoch or after.partition_epoch < before.partition_epoch:
                out.append(self._breach(c, rec.offset, "INV-EPOCH-MONOTONIC", None, key, say.epochs_lowered(
                    after.leader_epoch, after.partition_epoch, before.leader_epoch, before.partition_epoch)))
        elif not snapshot:
            if after.leader_epoch != 0 or after.partition_epoch != 0:
                out.append(self._breach(c, rec.offset, "INV-EPOCH-MONOTONIC", None, key,
                                        say.epochs_of_new_partition(after.leader_epoch, after.partition_epoch)))
            if after.lrs == RECOVERING:
                out.append(self._breach(c, rec.offset, "INV-LRS-ENTRY", None, key, say.created_recovering()))
        self._check_state(c, rec, key, after, _ALL_FIELDS, d, out)
        if before is None and not snapshot:
            self._check_isr_expand(c, rec, key, None, after, d, out)
        self._touch(c, key, rec.offset, before, after, d)

    def _on_partition_change(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        tid, pid = d.get("topicId"), d.get("partitionId")
        key = (tid, pid)
        before = c.partitions.get(key)
        if before is None:
            out.append(self._breach(c, rec.offset, "INV-TOPIC-EXISTS", None, key, say.change_of_unknown_partition(
                tid, pid, tid in c.topics, c.topics.get(tid, tid))))
            return
        w = _written("PARTITION_CHANGE_RECORD", d)
        if not w:
            out.append(self._breach(c, rec.offset, "INV-RECORD-NOOP", None, key, say.record_noop(d)))
        after = merge(before, d)
        bump = 1 if "leader" in w else 0
        self._pending_epochs.append((key, rec.offset, before.leader_epoch + bump, before.partition_epoch + 1))
        self._check_state(c, rec, key, after, w, d, out)
        self._check_change(c, rec, key, before, after, w, d, out)
        self._check_isr_expand(c, rec, key, before, after, d, out)
        self._check_election(c, rec, key, before, d, out)
        self._touch(c, key, rec.offset, before, after, d)

    def _check_election(self, c: Cluster, rec: Rec, key, before: Partition, d: dict, out: list[Breach]) -> None:
        """INV-UNCLEAN-ELECTION, INV-UNCLEAN-CONFIG, INV-LEADER-ACTIVE for a record that elects a new leader."""
        leader = d.get("leader", LEADER_UNCHANGED)
        if leader < 0 or leader == before.leader:
            return
        tp = f"{c.topics.get(key[0], key[0])}-{key[1]}"
        if is_unclean_election(before, d):
            out.append(self._breach(c, rec.offset, "INV-UNCLEAN-ELECTION", None, key, say.unclean_election(
                leader, tp, before.leader, before.isr, before.elr, before.last_known_elr)))
            if not c.unclean_enabled(key[0]):
                value = c.topic_config(c.topics.get(key[0], ""), "unclean.leader.election.enable")
                out.append(self._breach(c, rec.offset, "INV-UNCLEAN-CONFIG", None, key,
                                        say.unclean_config_off(tp, value)))
        if not c.active(leader):
            b = c.brokers.get(leader)
            state = ("not registered" if b is None else "fenced" if b.fenced else "in controlled shutdown")
            out.append(self._breach(c, rec.offset, "INV-LEADER-ACTIVE", None, key,
                                    say.leader_not_active(leader, tp, state)))

    def _check_state(self, c: Cluster, rec: Rec, key, p: Partition, w: frozenset[str], d: dict,
                     out: list[Breach]) -> None:
        """Structural rules on the state a partition record leaves, for the fields it wrote: one family
        of §4 invariants at a time (breaches in this order)."""
        o = rec.offset
        self._check_assignment(c, o, key, p, w, out)
        self._check_directories(c, o, key, p, w, d, out)
        self._check_isr(c, o, key, p, w, out)
        self._check_leader(c, o, key, p, w, out)
        self._check_elr(c, o, key, p, w, out)
        self._check_last_known_elr(c, o, key, p, w, out)
        self._check_leader_recovery(c, o, key, p, w, out)

    def _check_assignment(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str], out: list[Breach]) -> None:
        """INV-REPLICAS-DISTINCT: distinct non-negative replicas; removing and adding replicas are replicas
        and never both."""
        if not w & {"replicas", "removing", "adding"}:
            return
        said = say.replicas_invalid(p.replicas, p.removing, p.adding)
        if said is not None:
            out.append(self._breach(c, o, "INV-REPLICAS-DISTINCT", None, key, said))

    def _check_directories(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str], d: dict,
                           out: list[Breach]) -> None:
        """INV-DIRS-LENGTH: written directories name one log directory per replica (or none at all)."""
        if "directories" not in w:
            return
        dirs, R = d.get("directories") or [], p.replicas
        if dirs and len(dirs) != len(R):
            out.append(self._breach(c, o, "INV-DIRS-LENGTH", None, key, say.directories_length(len(dirs), len(R))))

    def _check_isr(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str], out: list[Breach]) -> None:
        """INV-ISR-SUBSET-REPLICAS: the ISR is a set of replicas."""
        if not w & {"isr", "replicas"}:
            return
        said = say.isr_invalid(p.isr, p.replicas)
        if said is not None:
            out.append(self._breach(c, o, "INV-ISR-SUBSET-REPLICAS", None, key, said))

    def _check_leader(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str], out: list[Breach]) -> None:
        """INV-LEADER-IN-ISR, INV-LEADER-IN-REPLICAS: a leader is an in-sync replica."""
        L, I, R = p.leader, p.isr, p.replicas
        if w & {"leader", "isr"} and L != NO_LEADER and L not in I:
            out.append(self._breach(c, o, "INV-LEADER-IN-ISR", None, key, say.leader_not_in_isr(L, I)))
        if w & {"leader", "replicas"} and L != NO_LEADER and L not in R:
            out.append(self._breach(c, o, "INV-LEADER-IN-REPLICAS", None, key, say.leader_not_replica(L, R)))

    def _check_elr(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str], out: list[Breach]) -> None:
        """INV-ELR-DISJOINT, INV-ELR-DISABLED-EMPTY, INV-ISR-EMPTY-NEEDS-ELR, INV-ELR-SUBSET-REPLICAS: ELR
        members are replicas outside the ISR, and ELR state (an ELR, a LastKnownElr, an emptied ISR) only
        appears while ELR is in effect."""
        I, E, K, R = p.isr, p.elr, p.last_known_elr, p.replicas
        if w & {"elr", "isr"} and set(E) & set(I):
            out.append(self._breach(c, o, "INV-ELR-DISJOINT", None, key, say.elr_overlaps_isr(I, E)))
        if ("elr" in w and E) or ("lke" in w and K):
            on, sev = self._elr_flag(c)
            if not on:
                reason = say.elr_off_reason(c.metadata_version, c.features.get(ELR_FEATURE), c.elr_override)
                out.append(self._breach(c, o, "INV-ELR-DISABLED-EMPTY", sev, key, say.elr_state_while_off(E, K, reason)))
        if "isr" in w and not I:
            on, sev = self._elr_flag(c)
            if not on:
                out.append(self._breach(c, o, "INV-ISR-EMPTY-NEEDS-ELR", sev, key, say.isr_emptied_while_elr_off(I)))
        if w & {"elr", "replicas"} and set(E) - set(R):
            out.append(self._breach(c, o, "INV-ELR-SUBSET-REPLICAS", None, key, say.elr_not_replicas(E, R)))

    def _check_last_known_elr(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str],
                              out: list[Breach]) -> None:
        """INV-LKE-SINGLETON, INV-LKE-NEGATIVE, INV-LKE-LEADERLESS: LastKnownElr holds at most the last known
        leader, and only while the partition has none."""
        K, L = p.last_known_elr, p.leader
        if "lke" in w:
            if len(K) > 1:
                out.append(self._breach(c, o, "INV-LKE-SINGLETON", None, key, say.last_known_elr_too_long(K)))
            if any(x < 0 for x in K):
                out.append(self._breach(c, o, "INV-LKE-NEGATIVE", None, key, say.last_known_elr_negative(K)))
        if w & {"lke", "leader"} and K and L != NO_LEADER:
            out.append(self._breach(c, o, "INV-LKE-LEADERLESS", None, key, say.last_known_elr_with_leader(K, L)))

    def _check_leader_recovery(self, c: Cluster, o: int, key, p: Partition, w: frozenset[str],
                               out: list[Breach]) -> None:
        """INV-LRS-SINGLE-ISR: a partition in leader recovery (RECOVERING) has only its leader in the ISR."""
        I, L = p.isr, p.leader
        if p.lrs == RECOVERING and w & {"lrs", "isr", "leader"} and (len(I) > 1 or (L != NO_LEADER and I != [L])):
            out.append(self._breach(c, o, "INV-LRS-SINGLE-ISR", None, key, say.recovering_isr(L, I)))

    def _check_change(self, c: Cluster, rec: Rec, key, before: Partition, after: Partition, w: frozenset[str],
                      d: dict, out: list[Breach]) -> None:
        """Rules on the transition a PartitionChangeRecord makes."""
        o = rec.offset
        mv = c.metadata_version
        add = out.append
        lost_replicas = "replicas" in w and bool(set(before.replicas) - set(after.replicas))
        lost_isr = "isr" in w and bool(set(before.isr) - set(after.isr))
        if lost_replicas and "leader" not in w:
            add(self._breach(c, o, "INV-BUMP-ON-REPLICA-LOSS", None, key,
                             say.replica_loss_without_bump(before.replicas, after.replicas, before.leader)))
        if mv < MV_3_6_IV0 and lost_isr and "leader" not in w:
            add(self._breach(c, o, "INV-BUMP-ON-SHRINK-OLDMV", None, key,
                             say.shrink_without_bump(before.isr, after.isr, before.leader)))
        if "leader" in w and d["leader"] == before.leader:
            b8 = mv < MV_3_6_IV0 and (lost_isr or ("isr" not in w and before.leader == NO_LEADER))
            if not lost_replicas and not b8:
                add(self._breach(c, o, "INV-NO-SPURIOUS-BUMP", None, key, say.spurious_bump(d["leader"], mv < MV_3_6_IV0)))
        if before.lrs == RECOVERED and after.lrs == RECOVERING:
            known_mv = METADATA_VERSION in c.features
            if not is_unclean_election(before, d):
                add(self._breach(c, o, "INV-LRS-ENTRY", None, key, say.recovering_without_unclean(d)))
            elif known_mv and mv < MV_3_2_IV0:
                add(self._breach(c, o, "INV-LRS-ENTRY", None, key, say.recovering_below_3_2(mv)))
        if "lrs" in w and d["leaderRecoveryState"] == RECOVERED:
            completes = bool(before.removing or before.adding) and not after.removing and not after.adding
            if before.leader == NO_LEADER:
                add(self._breach(c, o, "INV-LRS-EXIT", None, key, say.recovered_without_leader(before.leader)))
            elif "leader" in w and d["leader"] != before.leader and not completes:
                add(self._breach(c, o, "INV-LRS-EXIT", None, key, say.recovered_with_new_leader(d["leader"], before.leader)))

    def _check_isr_expand(self, c: Cluster, rec: Rec, key, before: Partition | None, after: Partition, d: dict,
                          out: list[Breach]) -> None:
        """INV-ISR-EXPAND-ACTIVE: brokers newly added to the ISR were active when the record was written."""
        new = [b for b in after.isr if before is None or b not in before.isr]
        if not new:
            return
        if before is not None:
            leader = d.get("leader", LEADER_UNCHANGED)
            if leader >= 0 and leader != before.leader:  # a leader chosen by an election
                new = [b for b in new if b != leader]
            # §2.7-4: a reassignment cancel whose reverted ISR is empty takes [R[0]]
            if before.adding and not after.adding and after.replicas and after.isr == [after.replicas[0]]:
                new = [b for b in new if b != after.replicas[0]]
        inactive = [b for b in new if not c.active(b)]
        if not inactive:
            return
        kip841 = METADATA_VERSION in c.features
        states = {b: ("unregistered" if b not in c.brokers else
                      "fenced" if c.brokers[b].fenced else "in controlled shutdown") for b in inactive}
        out.append(self._breach(c, rec.offset, "INV-ISR-EXPAND-ACTIVE", ERROR if kip841 else INFO, key,
                                say.inactive_joined_isr(inactive, states, kip841)))

    # ------------------------------------------------------------------------------------- brokers
    def _epoch_match(self, c: Cluster, rec: Rec, bid, epoch, what: str, out: list[Breach]) -> None:
        br = c.brokers.get(bid)
        if br is None:
            out.append(self._breach(c, rec.offset, "INV-BROKER-EPOCH-MATCH", None, None,
                                    say.broker_not_registered(what, bid, epoch)))
        elif br.epoch != epoch:
            out.append(self._breach(c, rec.offset, "INV-BROKER-EPOCH-MATCH", None, None,
                                    say.broker_epoch_differs(what, bid, epoch, br.epoch)))

    def _on_fence(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        self._epoch_match(c, rec, d.get("id"), d.get("epoch"), "FenceBrokerRecord", out)
        self._b.fences.append((d.get("id"), rec.offset, "fence"))

    def _on_unfence(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        self._epoch_match(c, rec, d.get("id"), d.get("epoch"), "UnfenceBrokerRecord", out)

    def _on_unregister(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        self._epoch_match(c, rec, d.get("brokerId"), d.get("brokerEpoch"), "UnregisterBrokerRecord", out)

    def _on_registration_change(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        bid = d.get("brokerId")
        self._epoch_match(c, rec, bid, d.get("brokerEpoch"), "BrokerRegistrationChangeRecord", out)
        cs = d.get("inControlledShutdown", 0)
        if cs not in (0, 1):
            out.append(self._breach(c, rec.offset, "INV-CS-STICKY", None, None, say.controlled_shutdown_value(bid, cs)))
        if d.get("fenced", 0) == 1:
            self._b.fences.append((bid, rec.offset, "fence"))
        if cs == 1:
            self._b.fences.append((bid, rec.offset, "controlled shutdown"))

    def _on_register(self, c: Cluster, rec: Rec, out: list[Breach]) -> None:
        d = rec.data
        bid = d.get("brokerId")
        cur = c.brokers.get(bid)
        if cur is not None and cur.incarnation_id == d.get("incarnationId"):
            # an amended registration keeps epoch, fencing and controlled shutdown (§1.5-2)
            if cur.in_controlled_shutdown and not d.get("inControlledShutdown", False):
                out.append(self._breach(c, rec.offset, "INV-CS-STICKY", None, None,
                                        say.controlled_shutdown_cleared(bid)))
            return
        self._b.registrations.append((bid, rec.offset))
        if c.metadata_version < MV_4_0_IV1:
            return
        # INV-REGISTER-UNCLEAN-BATCH: the unclean-shutdown records must precede the registration (§1.6)
        elr_on = c.elr_enabled
        lkl = self._lkl_elected(bid)
        clean = _clean_restart(c, cur)
        for key, p in c.partitions.items():
            in_isr = bid in p.isr and key not in lkl and not (not elr_on and p.isr == [bid] and p.leader == NO_LEADER)
            in_elr = bid in p.elr and not clean
            if in_isr or in_elr:
                out.append(self._breach(c, rec.offset, "INV-REGISTER-UNCLEAN-BATCH", None, key,
                                        say.registered_while_member(bid, p.isr, p.elr, in_isr, in_elr)))

    def _lkl_elected(self, bid: int) -> set:
        """Partitions whose records in this batch elected ``bid`` as last known leader (§2.3 step 3)."""
        return {key for key, touches in self._b.touched.items()
                for t in touches if t.before is not None and t.data.get("leader") == bid
                and _elected_last_known_leader(t.before, t.data)}

    # ------------------------------------------------------------------------------------- after the batch
    def _check_elr_below_min_isr(self, c: Cluster, out: list[Breach]) -> None:
        b = self._b
        if not c.elr_enabled:
            return  # a non-empty ELR is then INV-ELR-DISABLED-EMPTY's business
        for key, touches in b.touched.items():
            p = c.partitions.get(key)
            if p is None or not p.elr:
                continue
            m = c.min_isr(key[0])
            if len(p.isr) < m:
                continue
            last = touches[-1]
            # B4 then B6: a winner from ELR becomes the sole ISR member and the other ELR members stay,
            # which reaches |ISR| >= m when m is 1 (§2.3)
            if last.before is not None and _elected_from_elr(last.before, last.data) and len(p.isr) == 1:
                continue
            prev = self._m_at_record.get(key)
            stale = (prev is not None and prev != m) or b.m_before.get(key[0], m) != m
            known = _min_isr_known(c, key[0])
            out.append(self._breach(c, last.offset, "INV-ELR-BELOW-MINISR", WARN if stale or not known else ERROR,
                                    key, say.elr_kept_at_min_isr(p.elr, p.isr, m, stale, known)))

    def _check_windows(self, c: Cluster, out: list[Breach]) -> None:
        """INV-UNDER-MINISR and INV-OFFLINE-NO-CANDIDATE, reported when a partition enters the state."""
        b = self._b
        for s in (self._under, self._offline):
            for key in [k for k in s if k not in c.partitions]:
                s.discard(key)
        offsets = {k: t[-1].offset for k, t in b.touched.items()}
        if b.reevaluate_at is not None:  # m may have changed for partitions the batch did not write
            keys = list(c.partitions)
        else:
            keys = [k for k in b.touched if k in c.partitions]
        m_cache: dict[str, int] = {}
        for key in keys:
            p = c.partitions[key]
            o = offsets.get(key, b.reevaluate_at)
            m = m_cache.get(key[0])
            if m is None:
                m = m_cache[key[0]] = c.min_isr(key[0])
            if len(p.isr) < m:
                if key not in self._under:
                    self._under.add(key)
                    out.append(self._breach(c, o, "INV-UNDER-MINISR", None, key, say.under_min_isr(p.isr, m)))
            else:
                self._under.discard(key)
            if p.leader == NO_LEADER and not p.isr and not p.elr:
                if key not in self._offline:
                    self._offline.add(key)
                    out.append(self._breach(c, o, "INV-OFFLINE-NO-CANDIDATE", None, key,
                                            say.offline_no_candidate(p.leader, p.isr, p.elr)))
            else:
                self._offline.discard(key)

    @staticmethod
    def _still_in_isr(c: Cluster, bid: int, keys=None) -> set:
        """Partitions whose ISR still holds ``bid`` although a fence / controlled shutdown removes it: all but,
        with ELR off, the last member of a leaderless ISR (last replica standing, §2.4-9)."""
        elr_on = c.elr_enabled
        items = c.partitions.items() if keys is None else ((k, c.partitions[k]) for k in keys if k in c.partitions)
        return {key for key, p in items
                if bid in p.isr and (elr_on or not (p.isr == [bid] and p.leader == NO_LEADER))}

    def _fence_breaches(self, c: Cluster, bid: int, offset: int, kind: str, keys) -> list[Breach]:
        elr_on = c.elr_enabled
        out = []
        for key in sorted(keys, key=lambda k: (c.topics.get(k[0], k[0]), k[1])):
            p = c.partitions[key]
            out.append(self._breach(c, offset, "INV-FENCE-REMOVES-ISR", None, key,
                                    say.still_in_isr_after_fence(bid, p.isr, p.leader, kind, elr_on)))
        return out

    def _check_fences(self, c: Cluster, out: list[Breach]) -> None:
        """INV-FENCE-REMOVES-ISR.  A fence record follows its partition records, so the state after its batch
        is final.  A controlled-shutdown record precedes them and a large result may be split over several
        batches: offenders are re-checked after each following batch that still removes the broker from
        ISRs, and reported once a batch makes no more progress (or at :meth:`finish`)."""
        b = self._b
        for bid in list(self._pending_cs):
            offset, keys = self._pending_cs.pop(bid)
            if bid not in c.brokers or c.active(bid) or any(bid == f[0] for f in b.fences):
                continue  # re-registered, back in service, or fenced (checked below)
            progress = any(t.before is not None and bid in t.before.isr and bid not in t.after.isr
                           for touches in b.touched.values() for t in touches)
            left = self._still_in_isr(c, bid, keys)
            if left and progress:
                self._pending_cs[bid] = (offset, left)
            elif left:
                out += self._fence_breaches(c, bid, offset, "controlled shutdown", left)
        done = set()
        for bid, offset, kind in reversed(b.fences):  # a fence supersedes a controlled shutdown before it
            if bid in done or bid not in c.brokers or c.active(bid):
                continue
            done.add(bid)
            left = self._still_in_isr(c, bid)
            if not left:
                continue
            if kind == "fence":
                out += self._fence_breaches(c, bid, offset, kind, left)
            else:
                self._pending_cs[bid] = (offset, left)

    def finish(self, c: Cluster) -> list[Breach]:
        """Call once after the last batch: reports what was still waiting for more batches."""
        out: list[Breach] = []
        for bid, (offset, keys) in sorted(self._pending_cs.items()):
            if bid in c.brokers and not c.active(bid):
                left = self._still_in_isr(c, bid, keys)
                out += self._fence_breaches(c, bid, offset, "controlled shutdown", left)
        self._pending_cs = {}
        return out

    def _check_unclean_shutdowns(self, c: Cluster, out: list[Breach]) -> None:
        """INV-ELR-UNCLEAN-REMOVED: after a batch that handled an unclean shutdown of B (§1.6-4), B is in no ELR
        and in no ISR (except as a last known leader elected by that batch)."""
        b = self._b
        if not b.registrations or not c.elr_enabled:
            return
        for bid, reg_offset in b.registrations:
            unclean = False
            for key, touches in b.touched.items():
                for t in touches:
                    if t.before is None or t.offset > reg_offset:
                        continue
                    if bid in t.before.elr and bid not in t.after.elr:
                        unclean = True
                    elif (bid in t.before.isr and bid not in t.after.isr and bid not in t.after.elr
                          and len(t.after.isr) < c.min_isr(key[0])):
                        unclean = True
            if not unclean:
                continue
            lkl = self._lkl_elected(bid)
            for key, p in c.partitions.items():
                in_elr = bid in p.elr
                in_isr = bid in p.isr and key not in lkl
                if not (in_elr or in_isr):
                    continue
                out.append(self._breach(c, reg_offset, "INV-ELR-UNCLEAN-REMOVED", None, key,
                                        say.still_member_after_unclean_shutdown(bid, p.isr, p.elr, in_elr, in_isr)))

    _RECORD_CHECKS = {
        "TOPIC_RECORD": _on_topic,
        "REMOVE_TOPIC_RECORD": _on_remove_topic,
        "PARTITION_RECORD": _on_partition,
        "PARTITION_CHANGE_RECORD": _on_partition_change,
        "CLEAR_ELR_RECORD": _on_clear_elr,
        "CONFIG_RECORD": _on_config,
        "ZK_MIGRATION_STATE_RECORD": _on_zk_migration,
        "LEADER_CHANGE": _on_leader_change,
        "REGISTER_BROKER_RECORD": _on_register,
        "BROKER_REGISTRATION_CHANGE_RECORD": _on_registration_change,
        "FENCE_BROKER_RECORD": _on_fence,
        "UNFENCE_BROKER_RECORD": _on_unfence,
        "UNREGISTER_BROKER_RECORD": _on_unregister,
    }


def check_batches(batches, checker: InvariantChecker | None = None, cluster: Cluster | None = None) -> list[Breach]:
    """Replay record batches with only the invariant checker (records the image cannot apply are
    skipped after being reported)."""
    from controller_core.image import ReplayError

    checker = checker or InvariantChecker()
    c = cluster or Cluster()
    out: list[Breach] = []
    for batch in batches:
        for rec in batch:
            out += checker.before_record(c, rec)
            try:
                c.apply(rec.type, rec.data, rec.offset)
            except ReplayError:
                pass
        out += checker.after_batch(c, batch)
    return out + checker.finish(c)


def check_log(log_dir, checker: InvariantChecker | None = None, cluster: Cluster | None = None) -> list[Breach]:
    """:func:`check_batches` over a log directory's replay."""
    from controller_core.replay import iter_batches

    return check_batches((batch for _lf, batch in iter_batches(log_dir)), checker, cluster)
