"""The table catalog: every Delta table of the lake declared once -- name, layer, schema, partition
and key columns, what one row is.  Every reader and writer names a table through this module
(``catalog.PARTITION_STATE_HISTORY.name``), never with a string literal; ``tests/lake/test_catalog.py``
checks that each name is spelled out here and nowhere else, that the schemas are what the jobs write
and that the keys are unique in what they write.

Dependency rule.  This module imports pyarrow only: no Spark, no Delta, nothing from ``jobs`` or
``transforms``, so any layer can import it cheaply (``audit``, ``jobs``, ``transforms``, ``lake``,
``benchmarks``, tests).  ``controller_core`` never imports it (the core knows no tables); where the
core's output becomes a table, the table's name lives here.  A schema that some module already
declares (the core's ``fold.HISTORY_SCHEMA``, the audit's ``VIOLATION_SCHEMA`` ...) is taken from
that module, not repeated; since ``audit`` modules import this one for table names, those schemas
are resolved on first use of :attr:`Table.schema` (never at import), so no import cycle can form.
Schemas no other module declares (divergences, replay checkpoints, data quality) are declared here.

A schema is the table as a reader gets it back from Delta (``Lake.read_arrow``): timestamps are
``timestamp[us, UTC]``, Delta's one timestamp type (``lake/delta.py``: tz-aware UTC, delta-rs
stores ns as us), whatever unit the producing module computes in.  Column order and nullability
are not part of the contract: the lake matches columns by name, and Spark writes most columns
nullable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Callable

import pyarrow as pa

BRONZE, SILVER, GOLD = "bronze", "silver", "gold"
LAYERS = (BRONZE, SILVER, GOLD)
CLUSTER = "cluster"
TS = pa.timestamp("us", tz="UTC")


@dataclass(frozen=True)
class Table:
    name: str
    layer: str
    key: tuple[str, ...]  # unique in the table
    description: str  # what one row is
    _schema: Callable[[], pa.Schema] = field(repr=False, compare=False)
    partition_by: tuple[str, ...] = (CLUSTER,)

    @property
    def schema(self) -> pa.Schema:
        """The table's columns and types as read back from Delta (see the module docstring)."""
        return _schema_of(self)

    @property
    def key_in_partition(self) -> list[str]:
        """The key columns without the partition columns: unique within one cluster's rows."""
        return [c for c in self.key if c not in self.partition_by]


@cache
def _schema_of(table: Table) -> pa.Schema:
    return _stored(table._schema())


def _stored(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a Delta table stores it: every timestamp in us, UTC; a dictionary-encoded column (what a
    job holds in memory, e.g. the audit's evidence) as its values' type."""
    def stored(t):
        if pa.types.is_dictionary(t):
            t = t.value_type
        return TS if pa.types.is_timestamp(t) else t

    return pa.schema([f.with_type(stored(f.type)) for f in schema], metadata=schema.metadata)


def _with_cluster(schema: pa.Schema) -> pa.Schema:
    return schema if CLUSTER in schema.names else schema.append(pa.field(CLUSTER, pa.string()))


# ------------------------------------------------------------------------ schemas declared elsewhere
def _records() -> pa.Schema:
    from controller_core.codec import bronze

    return bronze.SCHEMA.append(pa.field(LOG_PART, pa.string(), nullable=False)).append(
        pa.field(BATCH_CRC, pa.int64()))


# metadata_records is keyed by the log, not by the file: several nodes' copies of one log hold the same records
# at the same offsets.  ``log_part`` says which numbering a row's ``offset`` belongs to -- the log's for segment
# records (one offset space, whatever segment file or copy they came from), a snapshot's own for its records
# (numbered from 0 in each snapshot; named by the snapshot id, the file name without .checkpoint, which every
# node's snapshot at that point shares), bootstrap.checkpoint's for its records.  ``batch_crc``: the CRC32C
# of the record's batch (an unsigned 32-bit value; null for rows ingested before it was kept), what copies of
# the log are compared on (controller_core/copies.py).  ``source_file`` is the file of the copy that first
# provided the row (a path relative to its data directory: the same in every copy of the same layout).
LOG_PART, BATCH_CRC = "log_part", "batch_crc"
LOG_PART_LOG, LOG_PART_BOOTSTRAP = "log", "bootstrap"


def log_part(source_kind: str, source_file: str) -> str:
    """The ``log_part`` of a bronze row from its file's kind and name (see above)."""
    if source_kind == "segment":
        return LOG_PART_LOG
    if source_kind == "snapshot":
        name = source_file.replace("\\", "/").rsplit("/", 1)[-1]
        return name[: -len(".checkpoint")] if name.endswith(".checkpoint") else name
    return LOG_PART_BOOTSTRAP


def _quarantine() -> pa.Schema:
    from controller_core.codec import bronze

    return bronze.QUARANTINE_SCHEMA


def _log_info() -> pa.Schema:
    from audit import loginfo

    return _with_cluster(loginfo.LOG_INFO_SCHEMA)


def _log_info_quarantine() -> pa.Schema:
    from audit import loginfo

    return _with_cluster(loginfo.LOG_INFO_QUARANTINE_SCHEMA)


def _history() -> pa.Schema:
    from controller_core import pipeline  # fold.HISTORY_SCHEMA + valid_from/to_timestamp, trigger

    return _with_cluster(pipeline.HISTORY_DATED_SCHEMA)


def _brokers() -> pa.Schema:
    from controller_core import timelines

    return _with_cluster(timelines.BROKER_SCHEMA)


def _topics() -> pa.Schema:
    from controller_core import timelines

    return _with_cluster(timelines.TOPIC_SCHEMA)


def _quorum() -> pa.Schema:
    from controller_core import quorum

    return _with_cluster(quorum.QUORUM_SCHEMA)


def _breaches() -> pa.Schema:
    from audit import local

    return _with_cluster(local.BREACH_SCHEMA)


RUN_ID = "run_id"  # the audit run a gold row belongs to (audit_runs)


def _violations() -> pa.Schema:
    from audit import violations

    return violations.VIOLATION_SCHEMA.append(pa.field(RUN_ID, pa.string()))  # has its cluster column


def _incidents() -> pa.Schema:
    from audit import incidents

    return incidents.INCIDENT_SCHEMA.append(pa.field(RUN_ID, pa.string()))  # has its cluster column


def _candidates() -> pa.Schema:
    from audit import recovery

    return _with_cluster(recovery.CANDIDATE_SCHEMA.append(pa.field("at_offset", pa.int64()))
                         .append(pa.field(RUN_ID, pa.string())))


# ------------------------------------------------------------------------- schemas declared here
DIVERGENCE_SCHEMA = pa.schema([
    ("offset", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()), ("rule", pa.string()),
    ("severity", pa.string()), ("field", pa.string()), ("recorded", pa.string()), ("expected", pa.string()),
    ("trigger", pa.string()), (CLUSTER, pa.string()),
])
AUDIT_RUN_SCHEMA = pa.schema([
    (RUN_ID, pa.string()), ("audited_at", pa.timestamp("us", tz="UTC")), ("at_offset", pa.int64()),
    ("at_time", pa.timestamp("us", tz="UTC")), ("end_offset", pa.int64()),
    ("at_end", pa.bool_()),  # the run audited the end of the replayed log (a scheduled audit), not a past point
    ("fail_on", pa.string()), ("strategy", pa.string()), ("config", pa.string()),  # the audit config, JSON
    ("findings", pa.int64()), ("worst_severity", pa.string()),
    ("previous_run_id", pa.string()), ("new_findings", pa.int64()),  # vs the latest end-of-log run before it
    (CLUSTER, pa.string()),
])
CHECKPOINT_SCHEMA = pa.schema([
    (CLUSTER, pa.string()), ("replayed_at", TS), ("mode", pa.string()),
    ("start_offset", pa.int64()), ("snapshot", pa.string()), ("last_offset", pa.int64()),
    ("last_timestamp", TS), ("records", pa.int64()),
    # {table: Delta version} of every silver table (and metadata_records) this replay committed and read,
    # JSON: what readers read together (lake.delta.Lake.replayed_versions); written last, so a reader never
    # sees a half-done replay
    ("table_versions", pa.string()),
])
QUALITY_SCHEMA = pa.schema([
    (CLUSTER, pa.string()), ("checked_at", TS), ("table", pa.string()),
    ("expectation", pa.string()), ("kwargs", pa.string()), ("severity", pa.string()), ("success", pa.bool_()),
    ("element_count", pa.int64()), ("unexpected_count", pa.int64()), ("unexpected_sample", pa.string()),
])


# ---------------------------------------------------------------------------------------- tables
METADATA_RECORDS = Table(
    "metadata_records", BRONZE, (CLUSTER, LOG_PART, "offset"),
    "record of a cluster's metadata log (one row per offset, whichever node's copy provided it; a snapshot's or "
    "bootstrap.checkpoint's records per snapshot): framing, typed columns in Kafka's field names, data_json, "
    "batch CRC", _records)
QUARANTINE = Table(
    "quarantine", BRONZE, (CLUSTER, "source_file", "position", "reason"),
    "span of a log file that could not be decoded", _quarantine)
REPLICA_LOG_INFO = Table(
    "replica_log_info", BRONZE, (CLUSTER, "source_file", "broker_id", "topic_id", "partition"),
    "GetReplicaLogInfo entry: a broker's last written leader epoch and log end offset of a replica", _log_info)
REPLICA_LOG_INFO_QUARANTINE = Table(
    "replica_log_info_quarantine", BRONZE, (CLUSTER, "source_file", "json_path"),
    "bad log info file or entry", _log_info_quarantine)
PARTITION_STATE_HISTORY = Table(
    "partition_state_history", SILVER, (CLUSTER, "topic_id", "partition_id", "offset"),
    "partition x record that changed it: full state after it, valid-to, valid-from/to timestamps, trigger",
    _history)
PARTITION_STATE = Table(
    "partition_state", SILVER, (CLUSTER, "topic_id", "partition_id"),
    "live partition: its latest partition_state_history row", _history)
BROKER_STATE_HISTORY = Table(
    "broker_state_history", SILVER, (CLUSTER, "broker_id", "offset"),
    "broker record: registration, epoch, fenced, controlled shutdown after it", _brokers)
TOPIC_CONFIG_HISTORY = Table(
    "topic_config_history", SILVER, (CLUSTER, "topic_id", "offset"),
    "change of a topic's resolved settings (min ISR, effective min ISR, unclean election, ELR, MV)", _topics)
QUORUM_HISTORY = Table(
    "quorum_history", SILVER, (CLUSTER, "offset", "event", "controller_id"),  # a snapshot's rows share an offset
    "record of the metadata quorum: LeaderChange (leader, Raft epoch, voters, silence before it), VotersRecord, "
    "KRaftVersionRecord, (Un)RegisterControllerRecord", _quorum)
DIVERGENCES = Table(
    "divergences", SILVER, (CLUSTER, "offset", "topic", "partition", "field"),
    "recorded field != recomputed field", lambda: DIVERGENCE_SCHEMA)
INVARIANT_BREACHES = Table(
    "invariant_breaches", SILVER, (CLUSTER, "offset", "rule", "topic", "partition"),
    "INV-* finding (ERROR / WARN / INFO)", _breaches)
REPLAY_CHECKPOINTS = Table(
    "replay_checkpoints", SILVER, (CLUSTER, "replayed_at"),
    "replay run: mode, start offset and snapshot, last offset replayed", lambda: CHECKPOINT_SCHEMA)
VIOLATIONS = Table(
    "violations", GOLD, (CLUSTER, RUN_ID, "code", "topic_id", "partition", "first_offset"),
    "durability finding of one audit run with its window, brokers, evidence and explanation", _violations)
INCIDENTS = Table(
    "incidents", GOLD, (CLUSTER, RUN_ID, "incident_id"),
    "findings of one audit run grouped by cause and time (a cluster restart, a broker or rack down, an unclean "
    "election): its span, brokers, partitions, worst severity", _incidents)
RECOVERY_CANDIDATES = Table(
    "recovery_candidates", GOLD, (CLUSTER, RUN_ID, "topic_id", "partition", "broker"),
    "replica of a leaderless partition at the audited offset of one audit run, ranked for recovery", _candidates)
AUDIT_RUNS = Table(
    "audit_runs", GOLD, (CLUSTER, RUN_ID),
    "audit run: the point audited, its config, what it found and how much of it was new", lambda: AUDIT_RUN_SCHEMA)
DATA_QUALITY = Table(
    "data_quality", GOLD, (CLUSTER, "table", "expectation", "kwargs"),
    "Great Expectations expectation result", lambda: QUALITY_SCHEMA)

TABLES: tuple[Table, ...] = (
    METADATA_RECORDS, QUARANTINE, REPLICA_LOG_INFO, REPLICA_LOG_INFO_QUARANTINE,
    PARTITION_STATE_HISTORY, PARTITION_STATE, BROKER_STATE_HISTORY, TOPIC_CONFIG_HISTORY, QUORUM_HISTORY, DIVERGENCES,
    INVARIANT_BREACHES, REPLAY_CHECKPOINTS, VIOLATIONS, INCIDENTS, RECOVERY_CANDIDATES, AUDIT_RUNS, DATA_QUALITY,
)
BY_NAME: dict[str, Table] = {t.name: t for t in TABLES}


def table(name: str) -> Table:
    """The declaration of table ``name``; KeyError naming the known tables otherwise."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"no table {name!r} in the catalog (known: {', '.join(BY_NAME)})") from None
