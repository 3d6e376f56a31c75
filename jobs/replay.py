"""``kraft-audit replay --cluster NAME``: bronze metadata_records -> silver tables.

  partition_state_history  one row per partition per change: the state after it, valid-from/-to
  partition_state          the latest state of every live partition
  broker_state_history     every broker's registration state after each broker record
  topic_config_history     each topic's resolved min ISR / unclean-election / ELR settings over time
  divergences              recorded vs recomputed controller decisions
  invariant_breaches       controller-rules §4 findings (INV-*)

Every table is partitioned by cluster.  A run records how far it got in ``replay_checkpoints``; the
next run is incremental when the bronze rows only grew past that offset (new segments, a grown active
segment): every partition's latest state becomes a seed (a snapshot-like PartitionRecord at the
checkpoint offset), only the new partition records are folded and recomputed against the full
cluster-level history (brokers, topics, configs, features are small), the new history rows and
findings are appended and the superseded states get their valid-to.  Anything else -- no checkpoint,
a different starting snapshot or start offset, ``--full`` -- replaces the cluster's rows.  Either way
a re-run with nothing new changes nothing (idempotent).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from controller_core import timelines
from controller_core.logdir import classify
from controller_core.replay import Rec, choose
from lake import catalog
from lake.config import load_config
from lake.delta import Lake
from lake.spark import get_spark
from transforms import silver as S

RECORDS, HISTORY, STATE = catalog.METADATA_RECORDS, catalog.PARTITION_STATE_HISTORY, catalog.PARTITION_STATE
BROKERS, TOPICS = catalog.BROKER_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY
DIVERGENCES, BREACHES, CHECKPOINTS = catalog.DIVERGENCES, catalog.INVARIANT_BREACHES, catalog.REPLAY_CHECKPOINTS
SILVER = tuple(t.name for t in (HISTORY, STATE, BROKERS, TOPICS, DIVERGENCES, BREACHES))
CHECKPOINT_SCHEMA = CHECKPOINTS.schema


def replay_plan(records):
    """The files a replay of the bronze rows reads (same rule as a log directory: complete log from
    offset 0, else the newest snapshot covering the missing start)."""
    labels = [r.source_file for r in records.select("source_file").distinct().collect()]
    files = [lf for lf in (classify(Path(label), Path(".")) for label in labels) if lf is not None]
    return choose(files, "the bronze rows")


def _cluster_level_recs(rows) -> list[Rec]:
    """The few non-partition records, in replay order, on the driver."""
    small = (rows.where(F.col("bucket_key").isNull() | (F.col("partition_id") == 0))
             .select("phase", "offset", "batch_base_offset", "timestamp", "record_type", "record_version",
                     "data_json", "source_file").orderBy("phase", "offset").collect())
    return [Rec(r.offset, int(r.timestamp.timestamp() * 1000), r.batch_base_offset, r.record_type, r.record_version,
                json.loads(r.data_json), r.source_file) for r in small]


def _with_cluster(spark, table: pa.Table, cluster: str):
    df = spark.createDataFrame(table) if table.num_rows else spark.createDataFrame([], from_arrow_schema(table.schema))
    return df.withColumn("cluster", F.lit(cluster))


def _checkpoint(lake: Lake, cluster: str):
    """The cluster's newest replay checkpoint row, or None."""
    if not lake.exists(CHECKPOINTS.name) or not all(lake.exists(t) for t in SILVER):
        return None
    rows = (lake.read(CHECKPOINTS.name).where(F.col("cluster") == cluster)
            .orderBy(F.col("last_offset").desc(), F.col("replayed_at").desc()).limit(1).collect())
    return rows[0] if rows else None


def _log_end(records, plan):
    """(offset, timestamp) of the last segment record the plan reads, NoOps included."""
    seg = records.where(F.col("source_kind") == "segment").where(F.col("offset") >= plan.start_offset)
    row = seg.orderBy(F.col("offset").desc()).select("offset", "timestamp").limit(1).collect()
    if row:
        return row[0].offset, row[0].timestamp
    return plan.start_offset - 1, None


def _resume_from(ckpt, plan, snapshot, end_offset: int):
    """The checkpoint an incremental replay continues from, or None for a full replay: the bronze rows
    must only have grown past it (same starting snapshot and start offset, nothing lost at the end)."""
    if ckpt is None:
        return None
    if ckpt.start_offset != plan.start_offset or ckpt.snapshot != snapshot or ckpt.last_offset > end_offset:
        return None  # the bronze rows changed under the replay: start over
    return ckpt


def _write_timelines(spark, lake: Lake, cluster: str, rows) -> dict:
    """broker_state_history and topic_config_history, rebuilt every run on the driver by the scalar image
    (the records are few); {table: rows written}."""
    brokers, topics = timelines.build(r for r in _cluster_level_recs(rows)
                                      if r.type not in S.PARTITION_TYPES or r.data.get("partitionId") == 0)
    counts = {}
    for t, table in ((BROKERS, brokers), (TOPICS, topics)):
        lake.overwrite(t.name, _with_cluster(spark, table, cluster), partition_by=t.partition_by,
                       where={"cluster": cluster})
        counts[t.name] = table.num_rows
    return counts


def _write_history(lake: Lake, cluster: str, history, since: int | None) -> int | None:
    """partition_state_history: a full replay (``since`` None) replaces the cluster's rows; an incremental
    one closes the superseded states and appends the rows past ``since`` (returns how many)."""
    where = {"cluster": cluster}
    if since is None:
        lake.overwrite(HISTORY.name, history, partition_by=HISTORY.partition_by, where=where)
        return None
    history = history.persist()
    new = history.where(F.col("offset") > since)
    lake.merge_update(HISTORY.name, S.superseded(history, since), on=STATE.key_in_partition,
                      columns=("valid_to_offset", "valid_to_timestamp"), where=where,
                      condition="t.valid_to_offset IS NULL")
    lake.append(HISTORY.name, new, partition_by=HISTORY.partition_by)
    count = new.count()
    history.unpersist()
    return count


def _write_findings(lake: Lake, cluster: str, found, incremental: bool) -> None:
    """divergences and invariant_breaches: replaced by a full replay, appended to by an incremental one."""
    for t, df in ((DIVERGENCES, S.divergences_of(found)), (BREACHES, S.breaches_of(found))):
        if incremental:
            lake.append(t.name, df, partition_by=t.partition_by)
        else:
            lake.overwrite(t.name, df, partition_by=t.partition_by, where={"cluster": cluster})


def _silver_counts(lake: Lake, cluster: str) -> dict:
    """The cluster's rows in the findings and history tables after the run (ERROR breaches apart)."""
    def rows(t):
        return lake.read(t.name).where(F.col("cluster") == cluster)

    breaches = rows(BREACHES)
    return {DIVERGENCES.name: rows(DIVERGENCES).count(), BREACHES.name: breaches.count(),
            f"{BREACHES.name}_error": breaches.where(F.col("severity") == "ERROR").count(),
            HISTORY.name: rows(HISTORY).count(), STATE.name: rows(STATE).count()}


def _write_checkpoint(lake: Lake, cluster: str, mode: str, plan, snapshot, end_offset: int, end_ts,
                      history_rows: int) -> None:
    """The replay_checkpoints row the next run resumes from (or starts over when the plan changed)."""
    import datetime as dt

    mark = pa.table({"cluster": [cluster], "replayed_at": [dt.datetime.now(dt.timezone.utc)],
                     "mode": [mode], "start_offset": [plan.start_offset], "snapshot": [snapshot],
                     "last_offset": [end_offset], "last_timestamp": [end_ts],
                     "records": [history_rows]}, schema=CHECKPOINT_SCHEMA)
    lake.append_arrow(CHECKPOINTS.name, mark, partition_by=CHECKPOINTS.partition_by)


def replay(spark, lake: Lake, cluster: str, buckets: int, invariants: bool = True, full: bool = False) -> dict:
    """Replay the cluster's bronze rows into its silver tables (full, incremental or nothing to do: see
    the module doc); returns the mode, the last offset and the row counts of the tables."""
    records = lake.read(RECORDS.name).where(F.col("cluster") == cluster)
    plan = replay_plan(records)
    snapshot = plan.snapshot.label if plan.snapshot else None
    rows = S.replay_rows(records, [(f.label, f.kind) for f in plan.files], plan.start_offset)
    end_offset, end_ts = _log_end(records, plan)
    ckpt = None if full else _resume_from(_checkpoint(lake, cluster), plan, snapshot, end_offset)
    if ckpt is not None and ckpt.last_offset == end_offset:
        return {"mode": "up-to-date", "last_offset": end_offset}
    since = ckpt.last_offset if ckpt is not None else None
    counts: dict = {"mode": "incremental" if ckpt is not None else "full", "last_offset": end_offset}
    counts.update(_write_timelines(spark, lake, cluster, rows))

    if since is not None:  # fold only the new partition records, from every partition's latest state
        state = lake.read(STATE.name).where(F.col("cluster") == cluster).where(~F.col("orphan"))
        rows = S.after_checkpoint(rows, since)
        rows = rows.unionByName(S.seeds(state, since, ckpt.last_timestamp, rows))
    bucketed = S.bucketize(rows, buckets).persist()
    try:
        out = S.core(bucketed, plan.start_offset if plan.snapshot else None, invariants).persist()
        found = S.findings_of(out).withColumn("cluster", F.lit(cluster))
        found = (found if since is None else found.where(F.col("offset") > since)).persist()
        new = _write_history(lake, cluster, S.history_of(out).withColumn("cluster", F.lit(cluster)), since)
        if new is not None:
            counts[f"{HISTORY.name}_new"] = new
        hist = lake.read(HISTORY.name).where(F.col("cluster") == cluster)
        lake.overwrite(STATE.name, S.latest_state(hist), partition_by=STATE.partition_by, where={"cluster": cluster})
        _write_findings(lake, cluster, found, incremental=since is not None)
        found.unpersist()
        out.unpersist()
        counts.update(_silver_counts(lake, cluster))
    finally:
        bucketed.unpersist()
    _write_checkpoint(lake, cluster, counts["mode"], plan, snapshot, end_offset, end_ts, counts.get(HISTORY.name, 0))
    return counts


def main(args) -> int:
    config = load_config(args.conf, {"lake": args.lake} if args.lake else None)
    spark = get_spark(config, getattr(args, "master", None))
    lake = Lake.from_config(config, spark)
    if not lake.exists(RECORDS.name):
        print(f"kraft-audit replay: no {RECORDS.name} table in {lake.root}: run kraft-audit ingest first",
              file=sys.stderr)
        return 2
    buckets = config["replay"]["buckets"] or S.default_buckets(spark)
    counts = replay(spark, lake, args.cluster, int(buckets), bool(config["replay"]["invariants"]),
                    full=bool(getattr(args, "full", False)))
    if counts["mode"] == "up-to-date":
        print(f"kraft-audit replay: cluster {args.cluster!r} in {lake.root} is up to date "
              f"(replayed through offset {counts['last_offset']}); --full replays it all again")
        return 0
    print(f"kraft-audit replay: cluster {args.cluster!r} in {lake.root} ({counts['mode']} replay through offset "
          f"{counts['last_offset']}, {buckets} buckets on {spark.sparkContext.master})")
    for name in SILVER:
        print(f"  {name:<26} {counts.get(name, 0):>10} rows")
    if counts.get(DIVERGENCES.name) or counts.get(f"{BREACHES.name}_error"):
        print(f"  {counts[DIVERGENCES.name]} divergences, {counts[f'{BREACHES.name}_error']} ERROR invariant breaches:"
              f" see the {DIVERGENCES.name} / {BREACHES.name} tables (or kraft-audit verify on the log directory)")
    return 0
