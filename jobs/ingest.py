"""``kraft-audit ingest``: a metadata log directory -> bronze Delta tables.

Tables (partitioned by cluster, so several clusters share one lake):
  metadata_records -- one row per record of the cluster's log, keyed by (cluster, log_part, offset): by the
                      log, not by the file (lake/catalog.py); ``source_file`` is the file of the copy that
                      first provided the row
  quarantine       -- one row per span that could not be decoded (file, position, length, reason), and one per
                      span of a copy that differs from the log bronze holds (COPY_DIVERGED)

Several copies of one log (each controller and broker keeps its own replica of ``__cluster_metadata``): ``--log-dir``
given several times, or a copy ingested into a lake that already holds the cluster, is compared batch by batch
(base and last offset, leader epoch, CRC: ``controller_core/copies.relate_batches``, the definition
``compare-copies`` uses) with what bronze holds, the copies in the order given: a batch bronze already holds
adds nothing, a batch over offsets bronze has none of is added (a longer copy adds its tail, a copy can fill a
hole another one had), and from a copy's first batch that differs from bronze's at some offset on, nothing of
that copy is added: each span of it that is not bronze's is one COPY_DIVERGED quarantine row naming the copy's
file, its first offset and both sides' epochs and CRCs.  Snapshots and bootstrap.checkpoint are written by
every node on its own (the bytes differ between healthy nodes): the first copy to bring a snapshot id (or the
bootstrap records) provides them, the others' are not compared.

Exit codes: 0 ingested; 1 ingested, but a copy diverges (its span is quarantined, not ingested: a Raft
safety violation, or a copy of another log -- the finding ``compare-copies`` exits 1 for); 2 cannot run, or
``--strict`` and anything was quarantined.

Speed: a cluster's first copy, when the Spark tasks write the lake's files (delta-rs, ``delta.spark_writes:
executors``), is decoded by tasks that write ``metadata_records``' data files themselves; only a summary per split
comes back (offsets, counts, quarantined spans) and the driver commits the files in one add commit.  Splits are
cut smaller than ``ingest.split_bytes`` when the log would leave cores idle (two per core, at least 4 MiB).

Crash safety: each table gets only the rows whose key it does not hold yet (one append each), so a run
killed after any commit and run again adds exactly what is missing.  The rows a table holds after the
commit are checked against what was decoded (CommitCheckError: exit 2), and a log whose files hold bytes
but decode to nothing fails instead of committing an empty batch.  ``main`` holds the cluster's lock
(lake/lock.py) while it runs.  A lake written before bronze was keyed by the log is migrated first
(lake/bronze.py, one commit).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import functions as F

from controller_core import copies
from controller_core.codec.logfile import split_points
from controller_core.logdir import discover
from lake import bronze as LB
from lake import catalog
from lake.config import load_config
from jobs.common import CannotRun, Progress
from lake import lock as L
from lake.delta import CommitCheckError, Lake, root_of
from lake.spark import get_spark
from transforms import bronze as T

RECORDS, QUARANTINE = catalog.METADATA_RECORDS, catalog.QUARANTINE
COPY_DIVERGED = copies.COPY_DIVERGED


@dataclass
class IngestResult:
    files: int = 0
    records_seen: int = 0
    records_added: int = 0
    types_added: dict[str, int] = field(default_factory=dict)
    quarantined: list[dict] = field(default_factory=list)  # every span quarantined in this run
    quarantine_added: int = 0  # of which new to the quarantine table
    newer_kafka: list[str] = field(default_factory=list)  # warnings: what a newer Kafka wrote (bronze.NewerKafka)
    # per copy (log directory, in the order given): batches already in bronze, added, withheld (diverged)
    copies: list[dict] = field(default_factory=list)
    migrated: int | None = None  # duplicate rows a migration of an older lake dropped (None: no migration)

    @property
    def diverged(self) -> list[dict]:
        """The quarantined spans of copies that differ from bronze."""
        return [q for q in self.quarantined if q["reason"] == COPY_DIVERGED]


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


def plan_splits(log_dir: str, cluster: str, split_bytes: int, copy: int = 0) -> list[tuple]:
    """Rows of transforms.bronze.SPLIT_DDL: each file cut at batch boundaries.  Only a file's first
    split knows which offset its first batch must carry (for the offset-sequence check).  ``copy``: the
    log directory's index among the copies of one ingest."""
    rows = []
    for lf in discover(Path(log_dir)):
        path = str(lf.path.resolve())
        size = lf.path.stat().st_size
        points = split_points(path, split_bytes) + [size]
        for start, end in zip(points, points[1:]):  # an empty file still gets a (0, 0) split
            rows.append((path, lf.label, lf.kind, start, end, cluster, lf.first_offset if start == 0 else None, copy))
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


# ----------------------------------------------------------------------------- copies against bronze
def _as_copy(path: str, rows: list) -> tuple[copies.Copy, list[str]]:
    """Batch rows (transforms.bronze.BATCH_COLUMNS) as a Copy in offset order, and each batch's file."""
    labels = sorted({r["source_file"] for r in rows})
    index = {f: i for i, f in enumerate(labels)}
    c = copies.of_batches(
        path, [r["batch_base_offset"] for r in rows], [r["last_offset"] for r in rows],
        [r["batch_leader_epoch"] for r in rows],
        [copies.UNKNOWN_CRC if r["batch_crc"] is None else r["batch_crc"] for r in rows],
        position=[r["batch_position"] for r in rows], files=[index[r["source_file"]] for r in rows], segments=labels)
    return c, [labels[i] for i in c.files]


def _one_per_offset(rows: list) -> list:
    """A copy's segment batches, one per base offset: the later segment's when two hold it (a segment rolled
    while the copy was taken), as ``copies.read_copy`` keeps them."""
    best: dict[int, dict] = {}
    for r in sorted(rows, key=lambda r: r["source_file"]):
        best[r["batch_base_offset"]] = r
    return list(best.values())


def _side(c: copies.Copy, i: int) -> str:
    crc = "unknown" if c.crc[i] == copies.UNKNOWN_CRC else f"{int(c.crc[i]):#010x}"
    return f"offsets {int(c.base[i])}-{int(c.last[i])} epoch {int(c.epoch[i])} crc {crc}"


def choose(held: list, mine: list, dirs: list[str], paths: dict, cluster: str) -> tuple[list, list, list]:
    """Which decoded batches bronze gets: ``held`` the batches bronze holds, ``mine`` the batches each copy decoded
    to (``T.batches`` rows with ``copy``), ``paths`` {(copy, source_file): the file's path}.  Returns (the chosen
    (copy, source_file, batch_base_offset), the COPY_DIVERGED quarantine rows, per copy its counts)."""
    chosen, diverged, per_copy = [], [], []
    held_log = [r for r in held if r[catalog.LOG_PART] == catalog.LOG_PART_LOG]
    held_parts = {r[catalog.LOG_PART] for r in held if r[catalog.LOG_PART] != catalog.LOG_PART_LOG}
    for i, d in enumerate(dirs):
        own = [r for r in mine if r[T.COPY] == i]
        seg = _one_per_offset([r for r in own if r[catalog.LOG_PART] == catalog.LOG_PART_LOG])
        bronze, bronze_files = _as_copy("bronze", held_log)
        copy, files = _as_copy(d, seg)
        by_base = {(r["batch_base_offset"], r["source_file"]): r for r in seg}
        relation = copies.relate_batches(bronze, copy)
        add, spans = copies.withheld_spans(relation)
        for k in np.flatnonzero(add).tolist():
            r = by_base[(int(copy.base[k]), files[k])]
            chosen.append((i, r["source_file"], r["batch_base_offset"]))
            held_log.append(r)
        first_diff = next((int(copy.base[a]) for a, _ in spans if relation[a] == copies.DIFFERS), None)
        for a, b in spans:
            label = files[a]
            size = sum(int(by_base[(int(copy.base[k]), files[k])][T.BATCH_BYTES] or 0) for k in range(a, b + 1))
            if relation[a] == copies.DIFFERS:
                j = int(np.searchsorted(bronze.base, copy.last[a], side="right")) - 1
                why = (f"differs from bronze at offset {int(copy.base[a])}: this copy's batch {_side(copy, a)} vs "
                       f"bronze's {_side(bronze, j)} (from {bronze_files[j]})")
            else:
                why = f"follows this copy's divergence at offset {first_diff}"
            diverged.append({
                "cluster": cluster, "source_file": paths.get((i, label), label), "source_kind": "segment",
                "position": int(copy.position[a]), "length": size, "reason": COPY_DIVERGED,
                "message": f"copy {d}: {paths.get((i, label), label)} offsets {int(copy.base[a])}-{int(copy.last[b])} "
                           f"{why}: not ingested"})
        # snapshots and bootstrap.checkpoint: the first copy that brings one provides it
        others = [r for r in own if r[catalog.LOG_PART] != catalog.LOG_PART_LOG]
        new_parts = {r[catalog.LOG_PART] for r in others} - held_parts
        chosen += [(i, r["source_file"], r["batch_base_offset"]) for r in others if r[catalog.LOG_PART] in new_parts]
        held_parts |= new_parts
        per_copy.append({"log_dir": d, "batches": len(seg), "same": int((relation == copies.SAME).sum()),
                         "added": int(add.sum()), "withheld": int(sum(b - a + 1 for a, b in spans)),
                         "firstDifference": first_diff, "parts_added": sorted(new_parts)})
    return chosen, diverged, per_copy


CHOSEN_DDL = f"{T.COPY} int, source_file string, batch_base_offset long"


def _collect(df) -> list[dict]:
    """A small frame's rows (one per batch) as dicts, through Arrow."""
    return df.toArrow().to_pylist()


def ingest(spark, lake: Lake, cluster: str, log_dir: str | list[str], split_bytes: int, progress=None) -> IngestResult:
    """Ingest one log directory, or several copies of one cluster's log (a list, compared in that order)."""
    progress = progress or (lambda message: None)
    dirs = [log_dir] if isinstance(log_dir, (str, Path)) else list(log_dir)
    dirs = [str(d) for d in dirs]
    result = IngestResult()
    result.migrated = LB.migrate_records(lake)
    if result.migrated is not None:
        progress(f"{RECORDS.name} migrated to one row per offset ({result.migrated} duplicate rows dropped)")
    split_bytes = _split_bytes(split_bytes, dirs, spark.sparkContext.defaultParallelism)
    splits = [s for i, d in enumerate(dirs) for s in plan_splits(d, cluster, split_bytes, i)]
    result.files = len({(s[7], s[1]) for s in splits})
    paths = {(s[7], s[1]): s[0] for s in splits}
    log_bytes = sum(s[4] - s[3] for s in splits)
    progress(f"decoding {result.files} files, {log_bytes / 1e6:.1f} MB, in {len(splits)} Spark tasks")
    before = lake.version(RECORDS.name) if lake.exists(RECORDS.name) else None  # one version read and checked
    existing = (lake.read(RECORDS.name, version=before).where(F.col("cluster") == cluster)
                if before is not None else None)
    held = _collect(T.batches(existing)) if existing is not None else []
    if not held and len(dirs) == 1 and lake.tasks_write_files():
        quarantined = _first_copy_by_tasks(spark, lake, cluster, dirs[0], splits, log_bytes, before, result,
                                           progress)
        if quarantined is not None:
            _commit_quarantine(spark, lake, cluster, quarantined, result)
            return result
        progress("a log part's files overlap in offsets: decoding again to drop the duplicates")
    decoded = T.decode_splits(spark, splits).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        records = T.records(decoded, T.COPY, T.BATCH_BYTES)
        if not held and len(dirs) == 1:  # the cluster's first copy: nothing to compare it with
            picked, diverged, nothing_new = records.select(*T.RECORD_COLUMNS), [], False
            result.records_seen = records.count()
        else:
            mine = _collect(T.batches(records, (T.COPY,)))
            result.records_seen = sum(r[T.BATCH_ROWS] for r in mine)
            chosen, diverged, result.copies = choose(held, mine, dirs, paths, cluster)
            nothing_new = not chosen  # (a scheduled re-run over the same files: no Spark job for its new rows)
            chosen = pa.table([pa.array(c, t) for c, t in zip(zip(*chosen) if chosen else ([], [], []),
                                                                (pa.int32(), pa.string(), pa.int64()))],
                              names=[T.COPY, "source_file", "batch_base_offset"])
            picked = T.from_batches(records, spark.createDataFrame(chosen) if chosen.num_rows
                                    else spark.createDataFrame([], CHOSEN_DDL))
        new = T.only_new(picked, existing, T.RECORD_KEY).persist(StorageLevel.MEMORY_AND_DISK)
        result.types_added = ({} if nothing_new else
                              {r["record_type"]: r["count"] for r in new.groupBy("record_type").count().collect()})
        result.records_added = sum(result.types_added.values())
        result.newer_kafka = _newer_kafka(records)
        progress(f"{result.records_seen} records decoded, {result.records_added} new: committing {RECORDS.name}")
        quarantine = T.quarantine(decoded)
        if diverged:
            quarantine = quarantine.unionByName(spark.createDataFrame(
                pa.Table.from_pylist(diverged, schema=QUARANTINE.schema)).select(*T.QUARANTINE_COLUMNS))
        result.quarantined = [r.asDict() for r in quarantine.orderBy("source_file", "position").collect()]
        if log_bytes and not result.records_seen and not result.quarantined:
            raise CannotRun(f"{result.files} files of {log_bytes} bytes decoded to no record and no quarantined span: "
                            "nothing is committed", ", ".join(dirs))
        if result.records_added or existing is None:
            lake.append(RECORDS.name, new, partition_by=RECORDS.partition_by)
            _appended(lake, RECORDS, cluster, before, result.records_added)
        new.unpersist()
        _commit_quarantine(spark, lake, cluster, quarantine, result)
    finally:
        decoded.unpersist()
    return result


def _commit_quarantine(spark, lake: Lake, cluster: str, quarantine, result: IngestResult) -> None:
    """Append the quarantine rows (a frame, or dicts) the table does not hold yet."""
    if isinstance(quarantine, list):  # nullable, as the decoded frame's columns: one table schema either way
        schema = pa.schema([f.with_nullable(True) for f in QUARANTINE.schema])
        quarantine = spark.createDataFrame(pa.Table.from_pylist(quarantine, schema=schema)).select(
            *T.QUARANTINE_COLUMNS)
    before_q = lake.version(QUARANTINE.name) if lake.exists(QUARANTINE.name) else None
    existing_q = (lake.read(QUARANTINE.name, version=before_q).where(F.col("cluster") == cluster)
                  if before_q is not None else None)
    new_q = T.only_new(quarantine, existing_q, T.QUARANTINE_KEY).persist(StorageLevel.MEMORY_AND_DISK)
    result.quarantine_added = new_q.count()
    if result.quarantine_added or existing_q is None:
        lake.append(QUARANTINE.name, new_q, partition_by=QUARANTINE.partition_by)
        _appended(lake, QUARANTINE, cluster, before_q, result.quarantine_added)
    new_q.unpersist()


# ----------------------------------------------------------------------------- the first copy, written by its tasks
MIN_SPLIT_BYTES = 4 << 20


def _split_bytes(configured: int, dirs: list[str], cores: int) -> int:
    """Split size: the configured one, smaller when the log would otherwise keep cores idle (two splits per core,
    none under MIN_SPLIT_BYTES: a split's fixed cost is a task)."""
    total = sum(lf.path.stat().st_size for d in dirs for lf in discover(Path(d)))
    return max(min(configured, -(-total // max(1, 2 * cores))), min(configured, MIN_SPLIT_BYTES))


def _overlaps(splits: list[dict]) -> bool:
    """Whether two splits of one log part hold a common offset (a segment rolled while the copy was taken):
    their rows would share a key."""
    by_part: dict[str, list] = {}
    for s in splits:
        if s["rows"]:
            by_part.setdefault(s[catalog.LOG_PART], []).append((s["first_offset"], s["last_offset"]))
    for spans in by_part.values():
        spans.sort()
        if any(b[0] <= a[1] for a, b in zip(spans, spans[1:])):
            return True
    return False


def _first_copy_by_tasks(spark, lake: Lake, cluster: str, log_dir: str, splits: list, log_bytes: int,
                         before: int | None, result: IngestResult, progress) -> list[dict] | None:
    """A cluster's first copy when the Spark tasks write the lake's files: each decoding task writes its rows
    straight into ``metadata_records`` (transforms.bronze.decode_and_write) and the driver commits the files in
    one add commit, no record row going back through the JVM.  Every offset of a log part is then new: the
    splits' offset spans must not overlap, else nothing is committed and None is returned (the frame path drops
    the duplicates).  Returns the quarantine rows."""
    import json

    from pyspark.sql import Row

    from controller_core.codec.bronze import NewerKafka
    from lake import files as LF

    def run(path, target, parts, tag):
        rows = T.decode_and_write(spark, splits, LF.write_task(path, target, parts, tag)).toArrow().to_pylist()
        by_kind: dict[str, list] = {}
        for r in rows:
            by_kind.setdefault(r["kind"], []).append(json.loads(r["body"]))
        return [Row(**f) for f in by_kind.get(T.FILE, [])], by_kind

    def commit_if(by_kind) -> bool:
        done = by_kind.get(T.SPLIT, [])
        if _overlaps(done):
            return False
        types: dict[str, int] = {}
        for s in done:
            for t, n in s["types"].items():
                types[t] = types.get(t, 0) + n
        result.types_added = types
        result.records_seen = result.records_added = sum(s["rows"] for s in done)
        newer = NewerKafka()
        for state in by_kind.get(T.NEWER, []):
            newer.merge(state)
        result.newer_kafka = newer.lines()
        result.quarantined = sorted(by_kind.get(T.QUARANTINED, []), key=lambda q: (q["source_file"], q["position"]))
        if log_bytes and not result.records_seen and not result.quarantined:
            raise CannotRun(f"{result.files} files of {log_bytes} bytes decoded to no record and no quarantined span: "
                            "nothing is committed", log_dir)
        progress(f"{result.records_seen} records decoded and written by the tasks: committing {RECORDS.name}")
        return True

    version, _ = lake.append_written(RECORDS.name, T.records_schema(), RECORDS.partition_by, run, commit_if)
    if version is None:
        return None
    _appended(lake, RECORDS, cluster, before, result.records_added)
    return result.quarantined


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
    dirs = args.log_dir if isinstance(args.log_dir, list) else [args.log_dir]
    res = ingest(spark, lake, args.cluster, dirs, int(config["ingest"]["split_bytes"]),
                 progress=Progress("kraft-audit ingest"))
    print(f"kraft-audit ingest: cluster {args.cluster!r} from {', '.join(dirs)} into {lake.root}")
    if res.migrated:
        print(f"  {RECORDS.name} migrated to one row per offset: {res.migrated} duplicate rows of copies dropped")
    print(f"  {res.files} files, {res.records_seen} records decoded, {res.records_added} new rows in "
          f"{RECORDS.name}")
    if len(dirs) > 1 or any(c["same"] or c["withheld"] for c in res.copies):
        for c in res.copies:
            state = (f"DIVERGES at offset {c['firstDifference']}: {c['withheld']} batches withheld"
                     if c["firstDifference"] is not None else "agrees with bronze")
            print(f"  copy {c['log_dir']}: {c['batches']} log batches, {c['same']} already in bronze, "
                  f"{c['added']} added; {state}")
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
    if args.strict and (res.quarantined or bad_info):
        return 2
    return 1 if res.diverged else 0
