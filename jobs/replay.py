"""``kraft-audit replay --cluster NAME``: bronze metadata_records -> silver tables.

  partition_state_history  one row per partition per change: the state after it, valid-from/-to
  partition_state          the latest state of every live partition
  broker_state_history     every broker's registration state after each broker record
  topic_config_history     each topic's resolved min ISR / unclean-election / ELR settings over time
  divergences              recorded vs recomputed controller decisions
  invariant_breaches       controller-rules §4 findings (INV-*)

Every table is partitioned by cluster; a re-run replaces the cluster's rows (idempotent).
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
from jobs.config import load_config
from jobs.ingest import RECORDS_TABLE
from jobs.lake import Lake
from jobs.spark import get_spark
from transforms import silver as S

SILVER = ("partition_state_history", "partition_state", "broker_state_history", "topic_config_history",
          "divergences", "invariant_breaches")


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


def replay(spark, lake: Lake, cluster: str, buckets: int, invariants: bool = True) -> dict[str, int]:
    records = lake.read(RECORDS_TABLE).where(F.col("cluster") == cluster)
    plan = replay_plan(records)
    rows = S.replay_rows(records, [(f.label, f.kind) for f in plan.files], plan.start_offset)
    counts: dict[str, int] = {}

    # cluster timelines: small, built on the driver by the scalar image
    brokers, topics = timelines.build(r for r in _cluster_level_recs(rows)
                                      if r.type not in S.PARTITION_TYPES or r.data.get("partitionId") == 0)
    for name, table in (("broker_state_history", brokers), ("topic_config_history", topics)):
        lake.overwrite(name, _with_cluster(spark, table, cluster), partition_by="cluster", where={"cluster": cluster})
        counts[name] = table.num_rows

    bucketed = S.bucketize(rows, buckets).persist()
    try:
        out = S.core(bucketed, plan.start_offset if plan.snapshot else None, invariants).persist()
        found = S.findings_of(out).withColumn("cluster", F.lit(cluster)).persist()
        history = S.dated(S.history_of(out), rows, found.where(F.col("kind") == "trigger"))
        history = history.withColumn("cluster", F.lit(cluster))
        lake.overwrite("partition_state_history", history, partition_by="cluster", where={"cluster": cluster})
        hist = lake.read("partition_state_history").where(F.col("cluster") == cluster)
        latest = S.latest_state(hist)
        lake.overwrite("partition_state", latest, partition_by="cluster", where={"cluster": cluster})

        div = found.where(F.col("kind") == "divergence").drop("kind", "message")
        brc = found.where(F.col("kind") == "breach").drop("kind", "field", "trigger")
        lake.overwrite("divergences", div, partition_by="cluster", where={"cluster": cluster})
        lake.overwrite("invariant_breaches", brc, partition_by="cluster", where={"cluster": cluster})
        counts["divergences"] = div.count()
        counts["invariant_breaches"] = brc.count()
        counts["invariant_breaches_error"] = brc.where(F.col("severity") == "ERROR").count()
        found.unpersist()
        out.unpersist()
        counts["partition_state_history"] = hist.count()
        counts["partition_state"] = lake.read("partition_state").where(F.col("cluster") == cluster).count()
    finally:
        bucketed.unpersist()
    return counts


def main(args) -> int:
    config = load_config(args.conf, {"lake": args.lake} if args.lake else None)
    spark = get_spark(config)
    lake = Lake.from_config(config, spark)
    if not lake.exists(RECORDS_TABLE):
        print(f"kraft-audit replay: no {RECORDS_TABLE} table in {lake.root}: run kraft-audit ingest first",
              file=sys.stderr)
        return 2
    counts = replay(spark, lake, args.cluster, int(config["replay"]["buckets"]), bool(config["replay"]["invariants"]))
    print(f"kraft-audit replay: cluster {args.cluster!r} in {lake.root}")
    for name in SILVER:
        print(f"  {name:<26} {counts.get(name, 0):>10} rows")
    if counts.get("divergences") or counts.get("invariant_breaches_error"):
        print(f"  {counts['divergences']} divergences, {counts['invariant_breaches_error']} ERROR invariant breaches:"
              " see the divergences / invariant_breaches tables (or kraft-audit verify on the log directory)")
    return 0
