"""Silver transforms: bronze ``metadata_records`` of one cluster -> replayed history and findings.

The work is split by Kafka partition: partition records are hashed into buckets, and the few
cluster-level records (brokers, topics, configs, features, leader changes) every partition's
decisions depend on are copied into every bucket.  Each bucket is one Arrow group handed whole to the
controller core in an executor (``applyInArrow``), so the core sees many partitions at once.
"""
from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from controller_core.vector import fold
from controller_core.replay import SKIP

PARTITION_TYPES = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")
# phases order the files of a replay: bootstrap.checkpoint, then the starting snapshot, then segments
PHASE = {"bootstrap": 0, "snapshot": 1, "segment": 2}

FINDING = pa.schema([
    ("kind", pa.string()), ("offset", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
    ("rule", pa.string()), ("severity", pa.string()), ("field", pa.string()), ("recorded", pa.string()),
    ("expected", pa.string()), ("trigger", pa.string()), ("message", pa.string()),
])
FINDING_SCHEMA = from_arrow_schema(FINDING)
_COLUMNS = ["phase", "offset", "batch_base_offset", "timestamp", "source_file", "source_kind", "record_type",
            "record_version", "data_json"]


def replay_rows(records: DataFrame, files: list[tuple[str, str]], start_offset: int) -> DataFrame:
    """The rows a replay reads: the chosen files, segment records from ``start_offset``, with the
    replay order in (phase, offset).  NoOps and transaction markers change nothing: dropped."""
    labels = [f for f, _ in files]
    phase = F.create_map(*[x for k, v in PHASE.items() for x in (F.lit(k), F.lit(v))])
    return (records.where(F.col("source_file").isin(labels))
            .where((F.col("source_kind") != "segment") | (F.col("offset") >= start_offset))
            .where(~F.col("record_type").isin(*SKIP))
            .withColumn("phase", phase[F.col("source_kind")])
            .withColumn("bucket_key", F.when(F.col("record_type").isin(*PARTITION_TYPES),
                                             F.concat_ws("-", "topic_id", F.col("partition_id").cast("string")))))


# Columns the controller core reads in the executors.  Spark's Arrow conversion of array columns is
# slow (measured: 30 s vs 2.7 s for 350k rows through applyInArrow), so list columns travel as
# comma-joined strings and are split back with Arrow kernels in the worker (``unpack``).
CORE_COLUMNS = ["source_file", "source_kind", "offset", "batch_base_offset", "timestamp", "record_type",
                "record_version", "topic_id", "topic_name", "partition_id", "leader", "leader_epoch",
                "partition_epoch", "leader_recovery_state", "data_json"]
LIST_COLUMNS = {"replicas": pa.int32(), "isr": pa.int32(), "removing_replicas": pa.int32(),
                "adding_replicas": pa.int32(), "eligible_leader_replicas": pa.int32(),
                "last_known_elr": pa.int32(), "directories": pa.string()}


def bucketize(rows: DataFrame, buckets: int) -> DataFrame:
    """Partition records to the bucket of their partition; cluster-level records to every bucket.

    A partition record's ``data_json`` is dropped except for partition 0 (the topic timeline needs
    it): the typed columns hold the same values (``controller_core.vector.explain.record_data``).

    Partition 0's records are also copied into every other bucket as *context* (``context`` true):
    a topic's effective min ISR is capped by partition 0's replica count (§1.7), which every
    partition's decisions and invariants depend on.  Only the owning bucket reports partition 0."""
    spark = rows.sparkSession
    parts = rows.where(F.col("bucket_key").isNotNull()).withColumn(
        "bucket", F.pmod(F.hash("bucket_key"), F.lit(buckets))).withColumn(
        "data_json", F.when(F.col("partition_id") == 0, F.col("data_json"))).withColumn("context", F.lit(False))
    context = (parts.where(F.col("partition_id") == 0).withColumnRenamed("bucket", "owner")
               .crossJoin(spark.range(buckets).withColumnRenamed("id", "bucket"))
               .where(F.col("bucket") != F.col("owner")).drop("owner").withColumn("context", F.lit(True)))
    shared = rows.where(F.col("bucket_key").isNull()).crossJoin(
        spark.range(buckets).withColumnRenamed("id", "bucket")).withColumn("context", F.lit(False))
    return parts.unionByName(context).unionByName(shared).select(
        "bucket", "phase", "context", *CORE_COLUMNS, *[F.array_join(c, ",").alias(c) for c in LIST_COLUMNS])


def unpack(table: pa.Table) -> pa.Table:
    """Undo the comma-joined list columns of ``bucketize`` (null stays null, "" is [])."""
    import pyarrow.compute as pc

    for name, vtype in LIST_COLUMNS.items():
        s = table.column(name).combine_chunks()
        empty = pc.fill_null(pc.equal(s, ""), False)
        split = pc.split_pattern(pc.if_else(empty, pa.scalar(None, pa.string()), s), ",")
        lens = pc.fill_null(pc.list_value_length(split), 0)
        lens = pc.if_else(empty, 0, lens)
        offsets = pa.array(np.concatenate([[0], np.cumsum(lens.to_numpy(zero_copy_only=False))]).astype(np.int32))
        values = pc.list_flatten(split).cast(vtype)
        arr = pa.ListArray.from_arrays(offsets, values, mask=pc.is_null(s))
        table = table.set_column(table.schema.get_field_index(name), name, arr)
    return table


def ordered(table: pa.Table, snapshot_start: int | None) -> pa.Table:
    """A bucket's rows in replay order (phase, offset), without the grouping columns; rows of the
    starting snapshot dated ``snapshot_start - 1``: the state they describe."""
    import pyarrow.compute as pc

    # source_kind last: an incremental replay's seed states ("snapshot") follow the segment records
    # sharing their offset (the state they carry is the one after that record)
    table = table.sort_by([("phase", "ascending"), ("offset", "ascending"), ("source_kind", "ascending")])
    if snapshot_start is not None:
        off = pc.if_else(pc.equal(table.column("phase"), PHASE["snapshot"]),
                         pa.scalar(snapshot_start - 1, pa.int64()), table.column("offset"))
        table = table.set_column(table.schema.get_field_index("offset"), "offset", off)
    return unpack(table.drop_columns([c for c in ("bucket", "phase", "context") if c in table.column_names]))


def _finding_rows(rep, exp) -> list[dict]:
    rows = [{"kind": "divergence", "offset": d.offset, "topic": d.topic, "partition": d.partition, "rule": d.rule,
             "severity": d.severity, "field": d.field, "recorded": json.dumps(d.recorded),
             "expected": json.dumps(d.expected), "trigger": d.trigger, "message": None} for d in rep.divergences]
    rows += [{"kind": "breach", "offset": b.offset, "topic": b.topic, "partition": b.partition, "rule": b.rule,
              "severity": b.severity, "field": None, "recorded": json.dumps(b.recorded, default=str),
              "expected": json.dumps(b.expected, default=str), "trigger": None, "message": b.message}
             for b in rep.breaches]
    # triggers: the vectorized core's where it explained the record, the scalar reference's elsewhere
    scalar = {(o, t, p): trig for o, t, p, trig in rep.explained}
    for off, tid, part, trig, ok in zip(*(exp.column(c).to_pylist() for c in
                                          ("offset", "topic_id", "partition_id", "trigger", "matched"))):
        rows.append({"kind": "trigger", "offset": off, "topic": tid, "partition": part,
                     "trigger": trig if ok else scalar.get((off, tid, part), trig)})
    return rows


_HISTORY_NAMES = list(fold.HISTORY_SCHEMA.names)
# one Arrow group in, one table out: the partition history rows (kind "history") and the findings
CORE = pa.schema([f.with_nullable(True) for f in fold.HISTORY_SCHEMA]
                 + [f for f in FINDING if f.name not in _HISTORY_NAMES])


def core(bucketed: DataFrame, snapshot_start: int | None = None, invariants: bool = True) -> DataFrame:
    """Per bucket, in one executor call: the partition state history (fold) and the findings --
    divergences, invariant breaches and the trigger explaining each change (kind "trigger",
    topic = topic id).  Split them with :func:`history_of` and :func:`findings_of`.

    The vectorized core (fold + explain) recomputes every change record; the scalar reference
    re-checks only the partitions holding a record it could not explain.  Records of the starting
    snapshot are dated ``snapshot_start - 1`` (the state they describe).  The invariants of
    controller-rules §4 need the scalar image record by record (``invariants=False`` skips them)."""

    def core_group(table: pa.Table) -> pa.Table:
        from controller_core import timelines
        from controller_core.vector.explain import cluster_level_recs, explain, scalar_batches
        from controller_core.rules.invariants import check_batches
        from controller_core.rules.verify import Report, verify_batches

        # partition 0 of these topics is here only as context (another bucket owns it): not reported
        ctx = set()
        if "context" in table.column_names:
            import pyarrow.compute as pc

            ctx = set(pc.unique(table.column("topic_id").filter(pc.fill_null(table.column("context"), False)))
                      .to_pylist())
        bronze = ordered(table, snapshot_start)
        history = fold.fold_partitions(bronze)
        brokers, topics = timelines.build(cluster_level_recs(bronze))
        exp = explain(bronze, history, brokers, topics)
        todo = {(t, p) for t, p, ok in zip(exp.column("topic_id").to_pylist(), exp.column("partition_id").to_pylist(),
                                           exp.column("matched").to_pylist()) if not ok}
        kind = bronze.column("source_kind").to_pylist()
        snaps = frozenset(f for f, k in zip(bronze.column("source_file").to_pylist(), kind) if k == "snapshot")
        rep = verify_batches(scalar_batches(bronze, todo), snapshot_files=snaps) if todo else Report()
        if invariants:
            rep.breaches.extend(check_batches(scalar_batches(bronze, None)))
        hist = history.cast(fold.HISTORY_SCHEMA)
        if ctx:
            import pyarrow.compute as pc

            rep.divergences = [d for d in rep.divergences if not (d.partition == 0 and d.topic_id in ctx)]
            rep.breaches = [b for b in rep.breaches if not (b.partition == 0 and b.topic_id in ctx)]
            rep.explained = [e for e in rep.explained if not (e[2] == 0 and e[1] in ctx)]
            exp = exp.filter(pc.invert(pc.and_(pc.equal(exp.column("partition_id"), 0),
                                               pc.is_in(exp.column("topic_id"), pa.array(sorted(ctx), pa.string())))))

            mine = pc.invert(pc.and_(pc.equal(hist.column("partition_id"), 0),
                                     pc.is_in(hist.column("topic_id"), pa.array(sorted(ctx), pa.string()))))
            hist = hist.filter(mine)
        found = pa.Table.from_pylist(_finding_rows(rep, exp), schema=FINDING)
        hist = hist.append_column("kind", pa.array(["history"] * hist.num_rows, pa.string()))
        return pa.concat_tables([_widen(hist), _widen(found)])

    return bucketed.groupBy("bucket").applyInArrow(core_group, from_arrow_schema(CORE))


def _widen(table: pa.Table) -> pa.Table:
    """``table`` in the CORE schema: its own columns, nulls elsewhere."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else pa.nulls(table.num_rows, f.type) for f in CORE}, schema=CORE)


def findings_of(out: DataFrame) -> DataFrame:
    """The findings of :func:`core`; cluster-level findings seen by every bucket are kept once."""
    return (out.where(F.col("kind") != "history").select(*FINDING.names)
            .dropDuplicates(["kind", "offset", "rule", "topic", "partition", "field"]))


def history_of(out: DataFrame) -> DataFrame:
    """The partition state history rows of :func:`core` (fold.HISTORY_SCHEMA)."""
    return out.where(F.col("kind") == "history").select(*_HISTORY_NAMES)


# ------------------------------------------------------------------------------ partition history
def dated(history: DataFrame, rows: DataFrame, triggers: DataFrame) -> DataFrame:
    """History rows with the time they became / stopped being valid and the trigger behind them."""
    ts = rows.where(F.col("phase") == PHASE["segment"]).select("offset", "timestamp").dropDuplicates(["offset"])
    frm = ts.withColumnRenamed("timestamp", "valid_from_timestamp")
    to = ts.withColumnRenamed("offset", "valid_to_offset").withColumnRenamed("timestamp", "valid_to_timestamp")
    trig = triggers.select("offset", F.col("topic").alias("topic_id"), F.col("partition").alias("partition_id"),
                           "trigger")
    return (history.join(frm, "offset", "left").join(to, "valid_to_offset", "left")
            .join(trig, ["offset", "topic_id", "partition_id"], "left"))


def latest_state(history: DataFrame) -> DataFrame:
    """The current state of every live partition: its history row that nothing follows."""
    live = history.where(F.col("valid_to_offset").isNull())
    if "deleted" in history.columns:
        live = live.where(~F.col("deleted"))
    return live
