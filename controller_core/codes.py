"""Every code kraft-audit reports, declared once: the gold finding codes of the ``violations`` table, the
``INV-*`` invariants of controller-rules.md §4 (rows of ``invariant_breaches``, carried over into
``violations``) and the rule of a recomputation that disagrees with the log (``divergences``).

Each declaration gives the code, its kind, its default severity, a one-line meaning and where the rule
comes from (a controller-rules section or a KIP).  What else knows a code reads it from here:

* the config's ``audit.severities`` defaults (:func:`default_severities` of the findings, filled in by
  ``lake.config`` at load time, so a user's file can only re-grade codes that exist);
* the invariant checker's severities (``controller_core.rules.invariants.RULES``) and the divergence rules
  of ``controller_core.rules.verify``;
* the gold finders (``audit.violations``, ``audit.scalar``), through the module constants below;
* the Great Expectations suites (the known rule ids of ``invariant_breaches`` and ``divergences``);
* README's "Finding codes" table (``scripts/readme_codes.py`` renders it; a test compares).

Adding a code is one declaration here.  Tests fail when a log or a built-in scenario makes the program
emit a code that is not declared, and when a source file spells one that is not.

This module sits in ``controller_core`` because the invariant checker needs it and ``controller_core``
never imports ``audit`` or ``lake``; it imports nothing itself.
"""
from __future__ import annotations

from dataclasses import dataclass

ERROR, WARN, INFO = "ERROR", "WARN", "INFO"
SEVERITIES = (ERROR, WARN, INFO)  # most severe first

FINDING, INVARIANT, DIVERGENCE = "finding", "invariant", "divergence"
KINDS = (FINDING, INVARIANT, DIVERGENCE)

# where a code's rows are first written: the gold violations, the silver invariant breaches or the silver
# divergences (breaches are copied to gold later).  Names of sinks, not tables: the table names live only in
# lake/catalog.py, which maps each sink to its table.
VIOLATIONS, INVARIANT_BREACHES, DIVERGENCES = "violation", "breach", "divergence"


@dataclass(frozen=True)
class Code:
    code: str
    kind: str  # FINDING | INVARIANT | DIVERGENCE
    severity: str  # the default; see ``varies`` for the cases an emitter grades differently
    meaning: str  # one line an operator reads
    reference: str  # "§4", "§2.6-5", "KIP-966", ... (controller-rules.md sections, KIP numbers)
    table: str  # VIOLATIONS | INVARIANT_BREACHES | DIVERGENCES
    varies: str = ""  # when the emitter departs from the default severity, and why
    long_window: bool = False  # a window of this finding lasting audit.long_window_ms is raised to ERROR


REGISTRY: dict[str, Code] = {}


class UnknownCode(KeyError):
    """A code that is not declared in :data:`REGISTRY`."""


def _declare(code: str, kind: str, severity: str, meaning: str, reference: str, table: str, **extra) -> str:
    # guards against a copy-paste slip in the declarations below: import fails rather than one code
    # silently replacing another
    if code in REGISTRY:
        raise ValueError(f"{code} is declared twice")
    if severity not in SEVERITIES:
        raise ValueError(f"{code}: severity {severity!r} is not one of {SEVERITIES}")
    REGISTRY[code] = Code(code, kind, severity, meaning, reference, table, **extra)
    return code


def _finding(code: str, severity: str, meaning: str, reference: str, **extra) -> str:
    return _declare(code, FINDING, severity, meaning, reference, VIOLATIONS, **extra)


def _invariant(code: str, severity: str, meaning: str, reference: str = "§4", table: str = INVARIANT_BREACHES,
               **extra) -> str:
    return _declare(code, INVARIANT, severity, meaning, reference, table, **extra)


def _divergence(code: str, severity: str, meaning: str, reference: str) -> str:
    return _declare(code, DIVERGENCE, severity, meaning, reference, DIVERGENCES)


# ---------------------------------------------------------------------------------- gold findings
_LONG = ("ERROR once the window lasts audit.long_window_ms; INFO when shorter than audit.min_window_ms (a flap) or "
         "inside a CLUSTER_DOWN / METADATA_GAP for less than audit.long_window_ms outside it")
_ATTRIBUTED = "INFO inside a CLUSTER_DOWN / METADATA_GAP for less than audit.long_window_ms outside it"

UNDER_MIN_ISR = _finding(
    "UNDER_MIN_ISR", WARN, "window: |ISR| < effective min ISR: acks=all producers fail", "§1.7",
    varies=_LONG, long_window=True)
AT_MIN_ISR = _finding(
    "AT_MIN_ISR", INFO, "window: |ISR| = effective min ISR while a replica is missing: one more loss blocks "
    "acks=all producers", "§1.7")
OFFLINE = _finding("OFFLINE", WARN, "window: no leader", "§2.3", varies=_LONG, long_window=True)
OFFLINE_NO_CANDIDATE = _finding(
    "OFFLINE_NO_CANDIDATE", ERROR, "window: no leader, ISR and ELR empty: only an unclean / recovery election "
    "helps", "§2.3, §3.3", varies=_ATTRIBUTED)
LAST_REPLICA_STANDING = _finding(
    "LAST_REPLICA_STANDING", WARN, "window: ELR not in effect, ISR = [leader] alone, effective min ISR ≥ 2",
    "KIP-966, §2.4-9")
DATA_LOSS_LIKELY = _finding(
    "DATA_LOSS_LIKELY", ERROR, "the broker of a LAST_REPLICA_STANDING window restarted (new incarnation) without a "
    "controlled shutdown and was elected again: what it lost is gone everywhere",
    "KIP-966, §1.6")
UNCLEAN_ELECTION = _finding(
    "UNCLEAN_ELECTION", ERROR, "a leader from outside ISR and ELR, with the previous ISR / ELR / LastKnownElr and "
    "the replicas whose data may be gone", "§2.6-5")
UNCLEAN_CONFIG = _finding(
    "UNCLEAN_CONFIG", WARN, "a topic resolves `unclean.leader.election.enable=true` (one row per topic, "
    "partition null)", "§1.7, §2.6-4")
ELR_MEMBER_FENCED_LEADER = _finding(
    "ELR_MEMBER_FENCED_LEADER", WARN, "a leader taken from ELR or the last-known-leader path while not active",
    "§2.3-3, §2.4-4")
MIN_ISR_ABOVE_RF = _finding(
    "MIN_ISR_ABOVE_RF", WARN, "configured `min.insync.replicas` above the replication factor (silently capped)",
    "§1.7")
MIN_ISR_CHANGE_CLEARED_ELR = _finding(
    "MIN_ISR_CHANGE_CLEARED_ELR", WARN, "a `min.insync.replicas` change cleared ELRs (ClearElrRecord)",
    "§1.7, KIP-966")
METADATA_GAP = _finding(
    "METADATA_GAP", WARN, "no record for `audit.metadata_gap_ms` in a log with NoOp heartbeats: no controller "
    "wrote it (stopped, no quorum); windows leave the time out", "KIP-835")
DISKLESS_TOPIC = _finding(
    "DISKLESS_TOPIC", INFO, "a leaderless / diskless topic (`diskless.enable=true`): its data is not in the replicas' "
    "logs, so no ISR rule judges its partitions (one row per topic)", "KIP-1150")

CLUSTER_DOWN = _finding(
    "CLUSTER_DOWN", WARN, "no registered broker active (fenced, in controlled shutdown or gone) after one was: no "
    "partition could have a leader; the partition windows inside it are INFO", "§1.5, §2.3")
CONTROLLER_ELECTION = _finding(
    "CONTROLLER_ELECTION", INFO, "the metadata quorum elected a controller (a LeaderChange after the log's first), "
    "with the epochs and how long the log was silent before it", "KIP-595")

# ------------------------------------------------------------------- incident causes (audit/incidents.py)
# What groups findings into one incident, in the order the audit tries them; an operator reads these first.
INCIDENT_CAUSES = {
    "CLUSTER_RESTART": "no broker active (CLUSTER_DOWN), with the metadata gaps, controller elections and broker "
                       "stops around it",
    "METADATA_GAP": "no controller wrote the log (METADATA_GAP) while brokers stayed registered",
    "AZ_LOSS": "every broker of one rack down together (the cluster has several racks)",
    "BROKERS_DOWN": "several brokers down together",
    "BROKER_DOWN": "one broker fenced, in controlled shutdown, unregistered or restarted",
    "UNCLEAN_ELECTION": "unclean elections and likely data losses no outage explains",
}

# KIPs a reference may cite besides the seeds (../shared/seeds): the operational facts the audit relies on
EXTERNAL_KIPS = {
    "595": "the Raft protocol of the metadata quorum: a new leader starts its epoch with a LeaderChange control "
           "record",
    "835": "KRaft controllers append a NoOpRecord every metadata.max.idle.interval.ms (500 ms) from Kafka 3.3",
    "1150": "diskless topics: a topic created with diskless.enable=true keeps its records in object storage, not in "
            "the replicas' logs (Aiven's Inkless implements it)",
}

# ------------------------------------------------------------------- invariants (controller-rules §4)
# E -> ERROR, W -> WARN, I -> INFO as the §4 table grades them; "E/W" rows default to ERROR.  The checker
# names them by these id strings (the spec's spelling); a test holds every id the source spells to this list.
_ELR_INFERRED = "WARN when metadata.version >= 4.0-IV1 and ELR is only inferred from this very record"

_invariant("INV-TOPIC-EXISTS", ERROR, "a partition record or change names a topic (and a change a partition) "
           "that is live")
_invariant("INV-REPLICAS-DISTINCT", ERROR, "the replica list holds distinct broker ids; adding and removing "
           "replicas are disjoint parts of it")
_invariant("INV-DIRS-LENGTH", ERROR, "the directory list is empty or as long as the replica list")
_invariant("INV-ISR-SUBSET-REPLICAS", ERROR, "the ISR is a duplicate-free subset of the replicas")
_invariant("INV-LEADER-IN-ISR", ERROR, "a partition with a leader has it in its ISR, however it was elected")
_invariant("INV-LEADER-IN-REPLICAS", ERROR, "the leader is -1 or one of the replicas")
_invariant("INV-ELR-DISJOINT", ERROR, "no broker is in both the ISR and the ELR")
_invariant("INV-ELR-DISABLED-EMPTY", ERROR, "ELR and LastKnownElr stay empty while ELR is not in effect",
           varies=_ELR_INFERRED)
_invariant("INV-ISR-EMPTY-NEEDS-ELR", ERROR, "an empty ISR is written only while ELR is in effect",
           varies=_ELR_INFERRED)
_invariant("INV-ELR-BELOW-MINISR", ERROR, "right after a batch, a non-empty ELR means the ISR is below the "
           "effective min ISR", varies="WARN when the min ISR changed since the partition's last record, or is "
           "unknown (the controller does not re-evaluate ELR on a config change)")
_invariant("INV-ELR-SUBSET-REPLICAS", WARN, "ELR members are replicas (a completed reassignment may leave "
           "removed ones behind)")
_invariant("INV-ELR-UNCLEAN-REMOVED", ERROR, "after a batch handling a broker's unclean shutdown, that broker "
           "is in no ELR and in no ISR it was not just elected into")
_invariant("INV-LKE-SINGLETON", ERROR, "LastKnownElr holds at most one broker")
_invariant("INV-LKE-LEADERLESS", ERROR, "a non-empty LastKnownElr only on a partition without a leader")
_invariant("INV-LKE-NEGATIVE", WARN, "LastKnownElr = [-1]: the ISR emptied on a partition already without "
           "a leader (a controller quirk)")
_invariant("INV-LEADER-EPOCH-STEP", ERROR, "a change record raises the leader epoch by one exactly when it "
           "writes the leader field")
_invariant("INV-PARTITION-EPOCH-STEP", ERROR, "every change record raises the partition epoch by one")
_invariant("INV-EPOCH-MONOTONIC", ERROR, "a snapshot's partition record never lowers the epochs; a partition "
           "the controller creates starts at epoch 0/0")
_invariant("INV-BUMP-ON-REPLICA-LOSS", ERROR, "a change that drops a replica writes the leader field (epoch "
           "bump)")
_invariant("INV-BUMP-ON-SHRINK-OLDMV", ERROR, "below metadata.version 3.6-IV0, a change that drops an ISR "
           "member writes the leader field")
_invariant("INV-NO-SPURIOUS-BUMP", INFO, "the leader field re-written with the same leader without a reason "
           "the change builder knows")
_invariant("INV-RECORD-NOOP", ERROR, "a change record changes at least one field")
_invariant("INV-LRS-ENTRY", ERROR, "a partition enters RECOVERING only through an unclean election "
           "(leader written, ISR = [leader]) from metadata.version 3.2-IV0")
_invariant("INV-LRS-SINGLE-ISR", ERROR, "a RECOVERING partition has at most one ISR member, its leader if it "
           "has one")
_invariant("INV-LRS-EXIT", ERROR, "leaving RECOVERING is the sitting leader's own request: it keeps the "
           "leader unless it also completes a reassignment")
_invariant("INV-ISR-EXPAND-ACTIVE", ERROR, "a broker joining the ISR is active when written, bar an elected "
           "leader and the head of an unclean reassignment revert", varies="INFO on logs without a "
           "metadata.version record (Kafka < 3.3 let fenced brokers into the ISR)")
_invariant("INV-FENCE-REMOVES-ISR", ERROR, "after a fence or controlled shutdown of a broker it is in no ISR, "
           "except as the last member of a leaderless partition with ELR off")
ELECTION_ORDER = _invariant(
    "INV-ELECTION-ORDER", ERROR, "a leader the controller wrote is the one its election order gives for the "
    "state and trigger before the batch", table=DIVERGENCES)
_invariant("INV-LEADER-ACTIVE", WARN, "a newly elected leader is active when written (the last-known-leader "
           "path breaks it)")
_invariant("INV-UNCLEAN-CONFIG", WARN, "an unclean election on a topic whose unclean config resolves to "
           "false")
_invariant("INV-UNCLEAN-ELECTION", WARN, "an unclean election happened: records may be lost")
_invariant("INV-OFFLINE-NO-CANDIDATE", WARN, "a partition entered a state with no leader and an empty ISR and "
           "ELR")
_invariant("INV-UNDER-MINISR", INFO, "a partition entered a state with fewer ISR members than its effective "
           "min ISR")
_invariant("INV-BROKER-EPOCH-MATCH", ERROR, "a fence, unfence, registration change or unregistration carries "
           "the broker's current registration epoch")
_invariant("INV-CS-STICKY", ERROR, "only a new registration clears a broker's controlled-shutdown state")
_invariant("INV-REGISTER-UNCLEAN-BATCH", WARN, "a new incarnation registering (MV >= 4.0-IV1) follows the "
           "records of its batch taking it out of ISRs and ELRs (ELRs: not after a clean stop at MV >= 4.1-IV0)")
# not a §4 row: the auditor's own check of a rule §1.4 states (a topic name is live at most once)
_invariant("INV-TOPIC-UNIQUE", ERROR, "a topic record does not reuse the name of a live topic", "§1.4")

# -------------------------------------------------------------------------------------- divergences
RECOMPUTE = _divergence(
    "RECOMPUTE", ERROR, "a change or creation record differs from what the change builder writes for the "
    "state and trigger before it (a leader: INV-ELECTION-ORDER)", "§2.1, §2.2")


# ------------------------------------------------------------------------------------------ lookups
def lookup(code: str) -> Code:
    try:
        return REGISTRY[code]
    except KeyError:
        raise UnknownCode(f"{code!r} is not a declared code: declare it in controller_core/codes.py") from None


def severity(code: str) -> str:
    """The default severity of a declared code (raises :class:`UnknownCode` otherwise)."""
    return lookup(code).severity


def of_kind(kind: str) -> tuple[Code, ...]:
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    return tuple(c for c in REGISTRY.values() if c.kind == kind)


def written_to(table: str) -> tuple[str, ...]:
    """The codes whose rows a table holds when it is first written."""
    return tuple(c.code for c in REGISTRY.values() if c.table == table)


def default_severities(kind: str = FINDING) -> dict[str, str]:
    """code -> default severity, in declaration order (``audit.severities`` for the findings)."""
    return {c.code: c.severity for c in of_kind(kind)}


def long_window_codes() -> tuple[str, ...]:
    return tuple(c.code for c in REGISTRY.values() if c.long_window)
