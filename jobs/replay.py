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
from controller_core.vector import fold
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


def _seeds(lake: Lake, cluster: str, offset: int, timestamp, template):
    """Every live partition's latest state as a snapshot-like PartitionRecord at ``offset``."""
    state = lake.read(STATE.name).where(F.col("cluster") == cluster).where(~F.col("orphan"))
    version = (F.when(F.size(F.coalesce("eligible_leader_replicas", F.array())) > 0, 2)
               .when(F.size(F.coalesce("directories", F.array())) > 0, 1).otherwise(0))
    cols = {
        "source_file": F.lit(f"replay-state-{offset:020d}.checkpoint"), "source_kind": F.lit("snapshot"),
        "offset": F.lit(offset).cast("long"), "batch_base_offset": F.lit(offset).cast("long"),
        "timestamp": F.lit(timestamp).cast("timestamp"), "record_type": F.lit("PARTITION_RECORD"),
        "record_version": version.cast("short"), "phase": F.lit(S.PHASE["segment"]),
        "bucket_key": F.concat_ws("-", "topic_id", F.col("partition_id").cast("string")),
    }
    for name in ("topic_id", "partition_id", *fold.STATE_COLUMNS):
        cols[name] = F.col(name)
    types = dict(template.dtypes)
    return state.select(*[(cols[n] if n in cols else F.lit(None)).cast(types[n]).alias(n) for n in template.columns])


def replay(spark, lake: Lake, cluster: str, buckets: int, invariants: bool = True, full: bool = False) -> dict:
    records = lake.read(RECORDS.name).where(F.col("cluster") == cluster)
    plan = replay_plan(records)
    snapshot = plan.snapshot.label if plan.snapshot else None
    rows = S.replay_rows(records, [(f.label, f.kind) for f in plan.files], plan.start_offset)
    end_offset, end_ts = _log_end(records, plan)
    ckpt = None if full else _checkpoint(lake, cluster)
    if ckpt is not None and (ckpt.start_offset != plan.start_offset or ckpt.snapshot != snapshot
                             or ckpt.last_offset > end_offset):
        ckpt = None  # the bronze rows changed under the replay: start over
    if ckpt is not None and ckpt.last_offset == end_offset:
        return {"mode": "up-to-date", "last_offset": end_offset}
    counts: dict = {"mode": "incremental" if ckpt is not None else "full", "last_offset": end_offset}

    # cluster timelines: small, rebuilt every run on the driver by the scalar image
    brokers, topics = timelines.build(r for r in _cluster_level_recs(rows)
                                      if r.type not in S.PARTITION_TYPES or r.data.get("partitionId") == 0)
    for t, table in ((BROKERS, brokers), (TOPICS, topics)):
        lake.overwrite(t.name, _with_cluster(spark, table, cluster), partition_by=t.partition_by,
                       where={"cluster": cluster})
        counts[t.name] = table.num_rows

    where = {"cluster": cluster}
    if ckpt is not None:
        since = ckpt.last_offset
        part = F.col("bucket_key").isNotNull()
        rows = rows.where(~part | ((F.col("phase") == S.PHASE["segment"]) & (F.col("offset") > since)))
        rows = rows.unionByName(_seeds(lake, cluster, since, ckpt.last_timestamp, rows))
    bucketed = S.bucketize(rows, buckets).persist()
    try:
        out = S.core(bucketed, plan.start_offset if plan.snapshot else None, invariants).persist()
        found = S.findings_of(out).withColumn("cluster", F.lit(cluster))
        history = S.history_of(out).withColumn("cluster", F.lit(cluster))
        if ckpt is None:
            found = found.persist()
            lake.overwrite(HISTORY.name, history, partition_by=HISTORY.partition_by, where=where)
        else:
            found = found.where(F.col("offset") > since).persist()
            history = history.persist()
            new = history.where(F.col("offset") > since)
            # a seed's valid-to is the first new state of its partition: close the superseded row
            closed = history.where((F.col("offset") == since) & F.col("valid_to_offset").isNotNull()
                                   & (F.col("record_type") == "PARTITION_RECORD"))
            lake.merge_update(HISTORY.name, closed, on=STATE.key_in_partition,
                              columns=("valid_to_offset", "valid_to_timestamp"), where=where,
                              condition="t.valid_to_offset IS NULL")
            lake.append(HISTORY.name, new, partition_by=HISTORY.partition_by)
            counts[f"{HISTORY.name}_new"] = new.count()
            history.unpersist()
        hist = lake.read(HISTORY.name).where(F.col("cluster") == cluster)
        lake.overwrite(STATE.name, S.latest_state(hist), partition_by=STATE.partition_by, where=where)

        div = found.where(F.col("kind") == "divergence").drop("kind", "message")
        brc = found.where(F.col("kind") == "breach").drop("kind", "field", "trigger")
        write = (lambda t, df: lake.overwrite(t.name, df, partition_by=t.partition_by, where=where)) if ckpt is None \
            else (lambda t, df: lake.append(t.name, df, partition_by=t.partition_by))
        write(DIVERGENCES, div)
        write(BREACHES, brc)
        found.unpersist()
        out.unpersist()
        alls = {t.name: lake.read(t.name).where(F.col("cluster") == cluster) for t in (DIVERGENCES, BREACHES)}
        counts[DIVERGENCES.name] = alls[DIVERGENCES.name].count()
        counts[BREACHES.name] = alls[BREACHES.name].count()
        counts[f"{BREACHES.name}_error"] = alls[BREACHES.name].where(F.col("severity") == "ERROR").count()
        counts[HISTORY.name] = hist.count()
        counts[STATE.name] = lake.read(STATE.name).where(F.col("cluster") == cluster).count()
    finally:
        bucketed.unpersist()

    import datetime as dt

    mark = pa.table({"cluster": [cluster], "replayed_at": [dt.datetime.now(dt.timezone.utc)],
                     "mode": [counts["mode"]], "start_offset": [plan.start_offset], "snapshot": [snapshot],
                     "last_offset": [end_offset], "last_timestamp": [end_ts],
                     "records": [counts.get(HISTORY.name, 0)]}, schema=CHECKPOINT_SCHEMA)
    lake.append_arrow(CHECKPOINTS.name, mark, partition_by=CHECKPOINTS.partition_by)
    return counts


def main(args) -> int:
    config = load_config(args.conf, {"lake": args.lake} if args.lake else None)
    spark = get_spark(config)
    lake = Lake.from_config(config, spark)
    if not lake.exists(RECORDS.name):
        print(f"kraft-audit replay: no {RECORDS.name} table in {lake.root}: run kraft-audit ingest first",
              file=sys.stderr)
        return 2
    counts = replay(spark, lake, args.cluster, int(config["replay"]["buckets"]), bool(config["replay"]["invariants"]),
                    full=bool(getattr(args, "full", False)))
    if counts["mode"] == "up-to-date":
        print(f"kraft-audit replay: cluster {args.cluster!r} in {lake.root} is up to date "
              f"(replayed through offset {counts['last_offset']}); --full replays it all again")
        return 0
    print(f"kraft-audit replay: cluster {args.cluster!r} in {lake.root} ({counts['mode']} replay through offset "
          f"{counts['last_offset']})")
    for name in SILVER:
        print(f"  {name:<26} {counts.get(name, 0):>10} rows")
    if counts.get(DIVERGENCES.name) or counts.get(f"{BREACHES.name}_error"):
        print(f"  {counts[DIVERGENCES.name]} divergences, {counts[f'{BREACHES.name}_error']} ERROR invariant breaches:"
              f" see the {DIVERGENCES.name} / {BREACHES.name} tables (or kraft-audit verify on the log directory)")
    return 0
