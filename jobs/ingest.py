"""``kraft-audit ingest``: a metadata log directory -> bronze Delta tables.

Tables (partitioned by cluster, so several clusters share one lake):
  metadata_records -- one row per record (controller_core.codec.bronze.SCHEMA)
  quarantine       -- one row per span that could not be decoded (file, position, length, reason)

Crash safety: each table gets only the rows whose key it does not hold yet (one append each), so a run
killed after any commit and run again adds exactly what is missing.  The rows a table holds after the
commit are checked against what was decoded (CommitCheckError: exit 2), and a log whose files hold bytes
but decode to nothing fails instead of committing an empty batch.  ``main`` holds the cluster's lock
(lake/lock.py) while it runs.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from pyspark import StorageLevel
from pyspark.sql import functions as F

from controller_core.codec.logfile import split_points
from controller_core.logdir import discover
from lake import catalog
from lake.config import load_config
from jobs.common import CannotRun, Progress
from lake import lock as L
from lake.delta import CommitCheckError, Lake, root_of
from lake.spark import get_spark
from transforms import bronze as T

RECORDS, QUARANTINE = catalog.METADATA_RECORDS, catalog.QUARANTINE


@dataclass
class IngestResult:
    files: int = 0
    records_seen: int = 0
    records_added: int = 0
    types_added: dict[str, int] = field(default_factory=dict)
    quarantined: list[dict] = field(default_factory=list)  # every span quarantined in this run
    quarantine_added: int = 0  # of which new to the quarantine table
    newer_kafka: list[str] = field(default_factory=list)  # warnings: what a newer Kafka wrote (bronze.NewerKafka)


def _newer_kafka(records) -> list[str]:
    """The warnings of controller_core.codec.bronze.NewerKafka over the decoded rows a newer Kafka wrote
    (few: undeclared types, versions above the newest declared, undeclared tagged fields)."""
    import pyarrow as pa

    from controller_core.codec.bronze import SCHEMA, NewerKafka
    from controller_core.records import BY_TYPE_NAME, UNKNOWN_RECORD_TYPE

    cond = (F.col("record_type") == UNKNOWN_RECORD_TYPE) | F.col("unknown_tagged_fields").isNotNull()
    for name, rdef in BY_TYPE_NAME.items():
        if rdef.valid_versions.hi is not None:
            cond = cond | ((F.col("record_type") == name) & (F.col("record_version") > rdef.valid_versions.hi))
    cols = ["source_file", "offset", "record_type", "record_type_id", "record_version", "is_control",
            "unknown_tagged_fields"]
    rows = [r.asDict() for r in records.where(cond).select(*cols).collect()]
    newer = NewerKafka()
    if rows:
        newer.add(pa.Table.from_pylist(rows, schema=pa.schema([SCHEMA.field(c) for c in cols])))
    return newer.lines()


def plan_splits(log_dir: str, cluster: str, split_bytes: int) -> list[tuple]:
    """Rows of transforms.bronze.SPLIT_DDL: each file cut at batch boundaries.  Only a file's first
    split knows which offset its first batch must carry (for the offset-sequence check)."""
    rows = []
    for lf in discover(Path(log_dir)):
        path = str(lf.path.resolve())
        size = lf.path.stat().st_size
        points = split_points(path, split_bytes) + [size]
        for start, end in zip(points, points[1:]):  # an empty file still gets a (0, 0) split
            rows.append((path, lf.label, lf.kind, start, end, cluster, lf.first_offset if start == 0 else None))
    return rows


def _appended(lake: Lake, table, cluster: str, before: int | None, added: int) -> None:
    """The cluster's rows of ``table`` must have grown by exactly the ``added`` rows this run appended."""
    if before is None and not added:
        return
    now = lake.count(table.name, where={"cluster": cluster})
    had = 0 if before is None else lake.count(table.name, where={"cluster": cluster}, version=before)
    if now != had + added:
        raise CommitCheckError(f"table {table.name}: {added} new rows were decoded for cluster {cluster!r} but the "
                               f"table went from {had} to {now} rows", lake.path(table.name))


def ingest(spark, lake: Lake, cluster: str, log_dir: str, split_bytes: int, progress=None) -> IngestResult:
    progress = progress or (lambda message: None)
    splits = plan_splits(log_dir, cluster, split_bytes)
    result = IngestResult(files=len({s[1] for s in splits}))
    log_bytes = sum(s[4] - s[3] for s in splits)
    progress(f"decoding {result.files} files, {log_bytes / 1e6:.1f} MB, in {len(splits)} Spark tasks")
    df = spark.createDataFrame(splits, T.SPLIT_DDL).repartition(max(1, len(splits)))
    decoded = T.decode_splits(df).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        records = T.records(decoded)
        before = lake.version(RECORDS.name) if lake.exists(RECORDS.name) else None  # one version read and checked
        existing = (lake.read(RECORDS.name, version=before).where(F.col("cluster") == cluster)
                    if before is not None else None)
        new = T.only_new(records, existing, T.RECORD_KEY).persist(StorageLevel.MEMORY_AND_DISK)
        result.types_added = {r["record_type"]: r["count"] for r in new.groupBy("record_type").count().collect()}
        result.records_added = sum(result.types_added.values())
        result.records_seen = records.count()
        result.newer_kafka = _newer_kafka(records)
        progress(f"{result.records_seen} records decoded, {result.records_added} new: committing {RECORDS.name}")
        quarantine = T.quarantine(decoded)
        result.quarantined = [r.asDict() for r in quarantine.orderBy("source_file", "position").collect()]
        if log_bytes and not result.records_seen and not result.quarantined:
            raise CannotRun(f"{result.files} files of {log_bytes} bytes decoded to no record and no quarantined span: "
                            "nothing is committed", log_dir)
        if result.records_added or existing is None:
            lake.append(RECORDS.name, new, partition_by=RECORDS.partition_by)
            _appended(lake, RECORDS, cluster, before, result.records_added)
        new.unpersist()

        before_q = lake.version(QUARANTINE.name) if lake.exists(QUARANTINE.name) else None
        existing_q = (lake.read(QUARANTINE.name, version=before_q).where(F.col("cluster") == cluster)
                      if before_q is not None else None)
        new_q = T.only_new(quarantine, existing_q, T.QUARANTINE_KEY).persist(StorageLevel.MEMORY_AND_DISK)
        result.quarantine_added = new_q.count()
        if result.quarantine_added or existing_q is None:
            lake.append(QUARANTINE.name, new_q, partition_by=QUARANTINE.partition_by)
            _appended(lake, QUARANTINE, cluster, before_q, result.quarantine_added)
        new_q.unpersist()
    finally:
        decoded.unpersist()
    return result


def main(args) -> int:
    overrides = {"lake": args.lake} if args.lake else None
    config = load_config(args.conf, overrides)
    root, local = root_of(config["lake"])
    # the cluster's lock first: a second ingest or replay of the cluster waits here, before its Spark starts
    held = L.acquire(root, local, args.cluster, "ingest", float(config["lock"]["timeout_s"]),
                     float(config["lock"]["stale_after_s"]))
    try:
        return _main(args, config)
    finally:
        if held is not None:
            held.release()


def _main(args, config) -> int:
    spark = get_spark(config, getattr(args, "master", None))
    lake = Lake.from_config(config, spark)
    for d in lake.clean_staging(float(config["lock"]["stale_after_s"])):
        print(f"kraft-audit ingest: removed {d}, left by a killed job", file=sys.stderr)
    res = ingest(spark, lake, args.cluster, args.log_dir, int(config["ingest"]["split_bytes"]),
                 progress=Progress("kraft-audit ingest"))
    print(f"kraft-audit ingest: cluster {args.cluster!r} from {args.log_dir} into {lake.root}")
    print(f"  {res.files} files, {res.records_seen} records decoded, {res.records_added} new rows in "
          f"{RECORDS.name}")
    for t, n in sorted(res.types_added.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"    {t:<36} {n:>10}")
    for q in res.quarantined:
        print(f"kraft-audit ingest: quarantined {q['message']} [{q['reason']}]", file=sys.stderr)
    for line in res.newer_kafka:  # kept in metadata_records: a warning, never quarantined
        print(f"kraft-audit ingest: warning: {line}", file=sys.stderr)
    if res.quarantined:
        print(f"  {len(res.quarantined)} spans quarantined ({res.quarantine_added} new rows in {QUARANTINE.name})")
    bad_info = 0
    if getattr(args, "log_info", None):
        from lake import gold

        n, bad = gold.ingest_log_info(lake, args.cluster, args.log_info)
        print(f"  {n} replica log info rows in {catalog.REPLICA_LOG_INFO.name}")
        for q in bad.to_pylist():
            print(f"kraft-audit ingest: quarantined {q['source_file']} {q['json_path']}: {q['reason']}",
                  file=sys.stderr)
        bad_info = bad.num_rows
    return 2 if (args.strict and (res.quarantined or bad_info)) else 0
