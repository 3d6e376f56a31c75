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

Crash safety: every write is idempotent and the checkpoint row is written last.  A full replay replaces
the cluster's rows; an incremental one replaces the rows past the checkpoint offset (history, findings)
and takes its seeds from the history as of that offset (never from ``partition_state``, which a killed run
may already have moved on), so a run killed after any commit and run again ends with exactly the tables
of an uninterrupted run.  The checkpoint records the Delta version of every table the run wrote and the
bronze version it read: readers read those versions together.  After writing, the rows the tables hold
are checked against the rows the run computed (CommitCheckError: exit 2).  ``main`` holds the cluster's
lock (lake/lock.py) while it runs.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import functions as F

from controller_core import timelines, transactions, vendor
from controller_core.codec.arrowutil import plain
from controller_core.image import Cluster
from controller_core.logdir import classify
from controller_core.replay import Plan, Rec, bridged, bridging_note, choose, kafka_start, kafka_start_note
from jobs.common import Progress
from lake import catalog
from lake.config import load_config
from lake import lock as L
from lake.delta import CommitCheckError, Lake, root_of
from lake.spark import get_spark
from transforms import silver as S

RECORDS, HISTORY, STATE = catalog.METADATA_RECORDS, catalog.PARTITION_STATE_HISTORY, catalog.PARTITION_STATE
BROKERS, TOPICS = catalog.BROKER_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY
DIVERGENCES, BREACHES, CHECKPOINTS = catalog.DIVERGENCES, catalog.INVARIANT_BREACHES, catalog.REPLAY_CHECKPOINTS
QUORUM = catalog.QUORUM_HISTORY
SILVER = tuple(t.name for t in (HISTORY, STATE, BROKERS, TOPICS, QUORUM, DIVERGENCES, BREACHES))
CHECKPOINT_SCHEMA = CHECKPOINTS.schema


def replay_plan(records):
    """The files a replay of the bronze rows reads (same rule as a log directory: complete log from
    offset 0, else the newest snapshot covering the missing start)."""
    return _plan_of({r.source_file for r in records.select("source_file").distinct().collect()})


def _plan_of(labels: set[str]):
    """The replay plan over bronze's file labels (those a log directory would hold)."""
    files = [lf for lf in (classify(Path(label), Path(".")) for label in sorted(labels)) if lf is not None]
    return choose(files, "the bronze rows")


def plan_from_files(files: list[str], notes: list | None = None):
    """:func:`replay_plan` and :func:`_log_end` from bronze's data files read here (a lake this process sees): the
    distinct file labels and the last segment record, from the files' row-group statistics where they tell (a data
    file the ingest writes holds one log file's rows: its ``source_file`` bounds are that label, its
    ``source_kind`` bounds its kind), otherwise from one column scan each -- never two Spark jobs over every row (10
    s of a 1 M-partition replay; the scans 0.4 s).  Returns (the plan, the last segment offset, its timestamp)."""
    from lake import files as LF

    bounds = LF.row_group_bounds(files, ["source_file", "source_kind", "offset"])
    one_file = bounds is not None and all(b["source_file"][0] == b["source_file"][1] for _, _, b in bounds)
    labels = {b["source_file"][0] for _, _, b in bounds} if one_file else _labels_read(files)
    # each segment's first and last offset, for the gaps (replay.find_gaps): from the statistics where they tell
    if one_file and all(b["source_kind"][0] == b["source_kind"][1] for _, _, b in bounds):
        spans: dict = {}
        for _, _, b in bounds:
            if b["source_kind"][0] == "segment":
                lo, hi = b["offset"]
                was = spans.get(b["source_file"][0], (lo, hi))
                spans[b["source_file"][0]] = (min(was[0], lo), max(was[1], hi))
    else:
        spans = _spans(LF.scan_task(files, ["source_file", "offset"], lambda f: f("source_kind") == "segment")())
    plan, gap_notes = _bridged(_plan_of(labels), spans, notes)
    wanted = lambda f: (f("source_kind") == "segment") & (f("offset") >= plan.start_offset)  # noqa: E731
    if bounds is not None and all(b["source_kind"][0] == b["source_kind"][1] for _, _, b in bounds):
        # the row groups of segment rows reaching the start; the last record is in those whose offsets reach
        # furthest (read to find its timestamp)
        segs = [(path, group, b["offset"][1]) for path, group, b in bounds
                if b["source_kind"][0] == "segment" and b["offset"][1] >= plan.start_offset]
        top = max((hi for _, _, hi in segs), default=None)
        seg = (LF.read_row_groups([(p, g) for p, g, hi in segs if hi == top], _END_COLUMNS, wanted)
               if top is not None else None)
    else:
        seg = LF.scan_task(files, _END_COLUMNS, wanted)()
    if seg is None or not seg.num_rows:
        return _as_kafka_starts(plan, None, None, None, notes, gap_notes)
    last = pc.index(seg.column("offset"), pc.max(seg.column("offset"))).as_py()
    return _as_kafka_starts(plan, *(seg.column(c)[last].as_py() for c in _END_COLUMNS), notes, gap_notes)


def _spans(rows: pa.Table | None) -> dict:
    """label -> (first, last offset) of segment rows (``source_file``, ``offset``)."""
    if rows is None or not rows.num_rows:
        return {}
    agg = rows.group_by("source_file").aggregate([("offset", "min"), ("offset", "max")])
    return {r["source_file"]: (r["offset_min"], r["offset_max"]) for r in agg.to_pylist()}


def _bridged(plan, spans: dict, notes: list | None) -> tuple:
    """(plan, the gap warnings) of a replay of bronze's rows whose segments hold ``spans``: from the snapshot a
    log directory's replay bridges their gaps with (replay.bridged; its note into ``notes``)."""
    plan, gaps, snap = bridged(plan, spans)
    if snap is not None and notes is not None:
        notes.append(bridging_note(snap))
    return plan, [g.message for g in gaps]


# what the log's end is read from: its last segment record's offset, time and leader epoch
_END_COLUMNS = ["offset", "timestamp", "batch_leader_epoch"]


def _as_kafka_starts(plan, offset, timestamp, epoch, notes: list | None = None, gap_notes=()):
    """(plan, last offset, its timestamp) of a replay of bronze's rows whose plan reads up to the segment record at
    ``offset`` (None: none): from the snapshot Kafka would start the log from (replay.kafka_start), when there is one
    -- the same start as a log directory's replay (replay.read_log_dir); else the plan's gap warnings go to
    ``notes``."""
    start = kafka_start(plan, offset, epoch)
    if start is None:
        if notes is not None:
            notes.extend(gap_notes)
        return plan, plan.start_offset - 1 if offset is None else offset, timestamp
    if notes is not None:
        notes.append(kafka_start_note(start, offset, epoch))
    return Plan([start], start, start.offset, plan.snapshots), start.offset - 1, None


def _labels_read(files: list[str]) -> set[str]:
    """The distinct ``source_file`` labels of bronze's data files, read from the column (its dictionaries)."""
    from lake import files as LF

    names = LF.scan_task(files, ["source_file"], lambda f: f("source_file").is_valid(), ("source_file",))()
    labels = set()
    for chunk in names.column("source_file").chunks:  # the values used (a dictionary may hold others)
        used = chunk.unique()
        labels.update(v for v in used.dictionary.take(used.indices).to_pylist() if v is not None)
    return labels


def _cluster_level_recs(rows) -> list[Rec]:
    """The few non-partition records, in replay order, on the driver."""
    small = (rows.where(F.col("bucket_key").isNull() | (F.col("partition_id") == 0))
             .select("phase", "offset", "batch_base_offset", "timestamp", "record_type", "record_version",
                     "data_json", "source_file").orderBy("phase", "offset").collect())
    return [Rec(r.offset, int(r.timestamp.timestamp() * 1000), r.batch_base_offset, r.record_type, r.record_version,
                json.loads(r.data_json), r.source_file) for r in small]


def _with_cluster(table: pa.Table, cluster: str) -> pa.Table:
    return table.append_column("cluster", pa.array([cluster] * table.num_rows, pa.string()))


def _checkpoint(lake: Lake, cluster: str):
    """The cluster's newest replay checkpoint row, or None."""
    if not lake.exists(CHECKPOINTS.name) or not all(lake.exists(t) for t in SILVER):
        return None
    rows = (lake.read(CHECKPOINTS.name).where(F.col("cluster") == cluster)
            .orderBy(F.col("last_offset").desc(), F.col("replayed_at").desc()).limit(1).collect())
    return rows[0] if rows else None


def _log_end(records, plan, notes: list | None = None):
    """(plan, offset, timestamp) of the last segment record the plan reads, NoOps included (the plan from the snapshot
    Kafka would start from, if any: :func:`_as_kafka_starts`)."""
    spans = {r.source_file: (r.first, r.last) for r in records.where(F.col("source_kind") == "segment")
             .groupBy("source_file").agg(F.min("offset").alias("first"), F.max("offset").alias("last")).collect()}
    plan, gap_notes = _bridged(plan, spans, notes)
    seg = records.where(F.col("source_kind") == "segment").where(F.col("offset") >= plan.start_offset)
    row = seg.orderBy(F.col("offset").desc()).select(*_END_COLUMNS).limit(1).collect()
    if row:
        return _as_kafka_starts(plan, row[0].offset, row[0].timestamp, row[0].batch_leader_epoch, notes, gap_notes)
    return _as_kafka_starts(plan, None, None, None, notes, gap_notes)


def _resume_from(ckpt, plan, snapshot, end_offset: int):
    """The checkpoint an incremental replay continues from, or None for a full replay: the bronze rows
    must only have grown past it (same starting snapshot and start offset, nothing lost at the end)."""
    if ckpt is None:
        return None
    if ckpt.start_offset != plan.start_offset or ckpt.snapshot != snapshot or ckpt.last_offset > end_offset:
        return None  # the bronze rows changed under the replay: start over
    return ckpt


def cluster_timelines(recs: list[Rec], notes: list | None = None) -> tuple[pa.Table, pa.Table, Cluster]:
    """(broker_state_history, topic_config_history, image) of the cluster-level records and partition 0's, in replay
    order, by the scalar image: what ``pipeline.run`` builds of the same records first (its ``cluster_timelines``:
    a full replay's tasks start from these).  A Confluent Server log's metadata version is read as Apache Kafka's,
    as ``pipeline.run`` reads it (controller_core/vendor.py; its note into ``notes``)."""
    recs, said = vendor.as_apache_recs(recs)
    if notes is not None:
        notes.extend(said)
    image = Cluster()
    brokers, topics = timelines.build((r for r in recs
                                       if r.type not in S.PARTITION_TYPES or r.data.get("partitionId") == 0), image)
    return brokers, topics, image


def _write_timelines(lake: Lake, cluster: str, made: tuple) -> dict:
    """broker_state_history and topic_config_history (:func:`cluster_timelines`), rebuilt every run on the driver
    (the records are few); {table: rows written}."""
    counts = {}
    for t, table in ((BROKERS, made[0]), (TOPICS, made[1])):
        lake.overwrite_rows(t.name, _with_cluster(table, cluster), partition_by=t.partition_by,
                            where={"cluster": cluster})
        counts[t.name] = table.num_rows
    return counts


# what quorum_history reads of the quorum records and of the record before each LeaderChange
QUORUM_COLUMNS = ["offset", "timestamp", "source_kind", "record_type", "batch_leader_epoch", "data_json"]


def _quorum_rows(records, plan) -> pa.Table:
    """The rows :func:`_write_quorum` builds quorum_history from, through Spark: the few quorum records of the
    replay plan's files and, for each LeaderChange, the record before it (how long the log was silent before
    the election).  The plan's rows as a log directory replay reads them (``replay.read_plan``): segments from
    its start offset, the starting snapshot's rows dated at its end offset - 1."""
    from controller_core import quorum

    start = plan.start_offset
    records = records.where(F.col("source_file").isin([f.label for f in plan.files]))
    if start:
        records = records.where((F.col("source_kind") != "segment") | (F.col("offset") >= start))
    records = records.withColumn("offset", F.when(F.col("source_kind") == "snapshot", F.lit(start - 1).cast("long"))
                                 .otherwise(F.col("offset")))
    q = records.where(F.col("record_type").isin(list(quorum.EVENTS)))
    changes = [r.offset for r in q.where((F.col("record_type") == "LEADER_CHANGE")
                                         & (F.col("source_kind") == "segment")).select("offset").collect()]
    # a quorum record before another is in ``q`` already: not twice
    before = records.where((F.col("source_kind") == "segment") & F.col("offset").isin([o - 1 for o in changes])
                           & ~F.col("record_type").isin(list(quorum.EVENTS)))
    return q.select(*QUORUM_COLUMNS).unionByName(before.select(*QUORUM_COLUMNS)).toArrow()


def _write_quorum(lake: Lake, cluster: str, rows: pa.Table) -> int:
    """quorum_history, rebuilt every run from :func:`_quorum_rows` (controller_core/quorum.py)."""
    from controller_core import quorum

    table = quorum.quorum_history(rows)
    lake.overwrite_rows(QUORUM.name, _with_cluster(table, cluster), partition_by=QUORUM.partition_by,
                        where={"cluster": cluster})
    return table.num_rows


def _write_history(lake: Lake, cluster: str, history, since: int | None) -> int | None:
    """partition_state_history: a full replay (``since`` None) replaces the cluster's rows; an incremental
    one closes the superseded states and replaces the rows past ``since`` (returns how many): a re-run after
    a killed run writes them again instead of twice."""
    where = {"cluster": cluster}
    if since is None:
        lake.overwrite(HISTORY.name, history, partition_by=HISTORY.partition_by, where=where)
        return None
    history = history.persist()
    new = history.where(F.col("offset") > since)
    lake.merge_update(HISTORY.name, S.superseded(history, since), on=STATE.key_in_partition,
                      columns=("valid_to_offset", "valid_to_timestamp"), where=where,
                      condition="t.valid_to_offset IS NULL")
    lake.overwrite(HISTORY.name, new, partition_by=HISTORY.partition_by, where=where, above={"offset": since})
    count = new.count()
    history.unpersist()
    return count


class _BronzeFiles:
    """A full replay's own reads of the cluster's bronze files (a lake the executors see): ``read``, the core
    tasks' reader of their partition records (:func:`transforms.silver.core_from_files`); ``shared``, the
    cluster-level rows with their ``data_json``, ``first``, every partition 0's records and ``quorum``, the
    quorum's records -- the rows the driver needs itself, read here instead of through Spark (the quorum's
    records in the same pass as the cluster-level ones)."""

    def __init__(self, lake: Lake, cluster: str, version: int, plan, end_offset: int | None):
        from controller_core import quorum
        from lake import files as LF

        self._files = lake.data_files(RECORDS.name, version, {"cluster": cluster})
        self._labels = [(f.label, f.kind) for f in plan.files]
        self._start = plan.start_offset
        # a file missing here raises lake.files.MissingDataFile: the commands name it as any missing file.  One
        # scan for both sets of rows (every row group holds some of them; a scan decodes a row group whole), the
        # transaction markers too (which records no replay applies: ``dropped``)
        cluster_level = S.replay_filter(self._labels, self._start, False, also=quorum.EVENTS + transactions.MARKERS)
        partition_0 = S.replay_filter(self._labels, self._start, True, first_partition=True)
        # the repeated strings read as codes (a string per row of 11.5 M was a tenth of the scan), decoded once the
        # few rows are chosen
        rows = plain(LF.scan_task(self._files, S.READ_COLUMNS + ["data_json", "batch_leader_epoch"],
                                  lambda field: cluster_level(field) | partition_0(field), S.READ_DICTIONARY)())
        segment = pc.fill_null(pc.equal(rows.column("source_kind"), "segment"), False).to_numpy(zero_copy_only=False)
        self.dropped = transactions.of_rows(rows, segment, end_offset)
        if self.dropped:
            offsets = rows.column("offset").to_numpy(zero_copy_only=False)
            rows = rows.filter(pa.array(~(transactions.inside(offsets, self.dropped) & segment)))
        self.read = LF.scan_task(self._files, S.PARTITION_READ_COLUMNS,
                                 S.replay_filter(self._labels, self._start, True, dropped=tuple(self.dropped)),
                                 S.READ_DICTIONARY)
        partition = pc.is_in(rows.column("record_type"), pa.array(list(S.PARTITION_TYPES)))
        self.first = rows.filter(partition).select(S.READ_COLUMNS)
        rows = rows.filter(pc.invert(partition))
        self.quorum = self._quorum_rows(rows.filter(pc.is_in(rows.column("record_type"),
                                                             pa.array(list(quorum.EVENTS)))))
        kept = pc.invert(pc.is_in(rows.column("record_type"), pa.array(sorted(S.SKIP))))
        self.shared = rows.filter(kept).select(S.READ_COLUMNS + ["data_json"])

    def _quorum_rows(self, q: pa.Table) -> pa.Table:
        """:func:`_quorum_rows` from the quorum records read: the records before the LeaderChanges read here too
        (a few offsets: the files' statistics skip the rest)."""
        from controller_core import quorum
        from lake import files as LF

        snapshot = pc.equal(q.column("source_kind"), "snapshot")
        q = q.set_column(q.schema.get_field_index("offset"), "offset",
                         pc.if_else(snapshot, pa.scalar(self._start - 1, pa.int64()), q.column("offset")))
        seg_changes = pc.and_(pc.equal(q.column("record_type"), "LEADER_CHANGE"), pc.invert(snapshot))
        before = [o - 1 for o in q.column("offset").filter(seg_changes).to_pylist()]
        rows = [q.select(QUORUM_COLUMNS)]
        if before:
            rows.append(LF.scan_task(self._files, QUORUM_COLUMNS, lambda f: (
                f("source_file").isin([label for label, _ in self._labels]) & (f("source_kind") == "segment")
                & (f("offset") >= self._start) & f("offset").isin(before)
                & ~f("record_type").isin(list(quorum.EVENTS))))())
        return pa.concat_tables(rows)

    def cluster_level_recs(self) -> list[Rec]:
        """What :func:`_cluster_level_recs` collects through Spark (:func:`timeline_recs` of the rows read)."""
        return timeline_recs(self.first, self.shared)


def _discarded(records, plan, end_offset: int | None) -> list:
    """The discarded metadata transactions (controller_core/transactions.py) of the plan's segment records, through
    Spark: its few transaction markers."""
    markers = (records.where(F.col("source_file").isin([f.label for f in plan.files]))
               .where((F.col("source_kind") == "segment") & (F.col("offset") >= plan.start_offset))
               .where(F.col("record_type").isin(*transactions.MARKERS)).select("offset", "record_type").collect())
    return transactions.discarded([(r.offset, r.record_type) for r in markers], end_offset)


def timeline_recs(first: pa.Table, shared: pa.Table) -> list[Rec]:
    """The cluster-level records (``shared``: :data:`transforms.silver.READ_COLUMNS` and ``data_json``) and partition
    0's (``first``: their READ_COLUMNS), in replay order (partition records rebuilt from their typed columns)."""
    from controller_core.vector.explain import cluster_level_recs

    rows = pa.concat_tables([first.append_column("data_json", pa.nulls(first.num_rows, pa.string())), shared])
    rows = rows.append_column("_phase", S.phase_of(rows))
    return cluster_level_recs(rows.sort_by([("_phase", "ascending"), ("offset", "ascending")]))


def _history_by_tasks(lake: Lake, cluster: str, core):
    """A full replay whose core tasks write the files of partition_state_history and of partition_state (each
    bucket's latest states, :func:`transforms.silver.latest_state_rows`) themselves: the rows never go back
    through the JVM, nor does Spark read the history again for the latest states; one commit per table adds
    its files and removes the cluster's previous ones.  ``core(write)`` is the core's frame given the tasks'
    writer.  Returns the core's persisted output (its findings and file rows), {table: rows written} and how many
    findings the buckets tallied (0: none to look for).  A task that cannot read the lake's files fails the job
    with that."""
    from pyspark.errors import PythonException
    from pyspark.sql import Row

    from controller_core import pipeline
    from lake import files as LF

    names = (HISTORY.name, STATE.name)

    def run(targets):
        writers = [LF.write_table(path, target, parts, tag, {"cluster": cluster})
                   for path, target, parts, tag in targets]

        def write(history: pa.Table) -> list[dict]:  # in a task: each file row names its table
            rows = (history, S.latest_state_rows(history))
            return [dict(f, table=name) for name, w, t in zip(names, writers, rows) for f in w(t)]

        out = core(write).persist()
        try:
            made = S.files_of(out).collect()
        except PythonException as exc:
            m = re.search(re.escape(LF.READ_ERROR) + r"(.*)", str(exc))
            if m:
                raise FileNotFoundError(m.group(1).strip()) from None
            raise
        files = [json.loads(r.body) for r in made if r.kind == S.FILE]
        tallied = sum(json.loads(r.body)["findings"] for r in made if r.kind == S.TALLY)
        written = [[Row(**{k: v for k, v in f.items() if k != "table"}) for f in files if f["table"] == name]
                   for name in names]
        return written, (out, {name: sum(int(f.rows) for f in w) for name, w in zip(names, written)}, tallied)

    # the rows as the frame path writes them: the core's columns (nullable), then the cluster
    source = pa.schema([f.with_nullable(True) for f in pipeline.HISTORY_DATED_SCHEMA]
                       + [pa.field("cluster", pa.string())])
    _, (out, rows, tallied) = lake.overwrite_written_tables([(HISTORY.name, source, HISTORY.partition_by),
                                                             (STATE.name, source, STATE.partition_by)],
                                                            {"cluster": cluster}, run)
    return out, rows, tallied


# findings a full replay commits from the driver (Lake.overwrite_rows) rather than through a Spark write job
FEW_FINDINGS = 100_000


def _write_findings(lake: Lake, cluster: str, found, since: int | None, none_found: bool = False) -> dict:
    """divergences and invariant_breaches: the cluster's rows replaced by a full replay, its rows past ``since``
    by an incremental one; {table: rows written}.  A full replay's few findings (the usual case: a healthy
    log has none) are collected once and committed by the driver, many are written by Spark's tasks;
    ``none_found``: the replay's tasks tallied none, and no job looks for them (the tables are emptied of the
    cluster's rows all the same)."""
    tables = ((DIVERGENCES, "divergence", S.divergences_of), (BREACHES, "breach", S.breaches_of))
    # one Spark job: the findings, or one more than few of them (then written by Spark's tasks); none (limit 0:
    # planned empty, no job) when the tasks found none
    rows = found.limit(0 if none_found else FEW_FINDINGS + 1).toArrow() if since is None else None
    if rows is not None and rows.num_rows <= FEW_FINDINGS:
        written = {}
        for t, kind, _ in tables:
            table = S.findings_table(rows, kind)
            lake.overwrite_rows(t.name, table, partition_by=t.partition_by, where={"cluster": cluster})
            written[t.name] = table.num_rows
        return written
    written = {}
    for t, _, of in tables:
        df = of(found)
        above = None if since is None else {"offset": since}
        lake.overwrite(t.name, df, partition_by=t.partition_by, where={"cluster": cluster}, above=above)
        written[t.name] = df.count()
    return written


def _silver_counts(lake: Lake, cluster: str, since: int | None) -> dict:
    """The cluster's rows in the findings and history tables after the run, from the Delta log's per-file row
    counts (no data read); of the findings also the ERROR breaches and the rows past ``since`` (all rows past
    offset -1 for a full replay), counted over the tables' files (:meth:`lake.delta.Lake.count_matching`)."""
    where = {"cluster": cluster}
    counts = {t.name: lake.count(t.name, where=where) for t in (DIVERGENCES, BREACHES, HISTORY, STATE)}
    after = since if since is not None else -1
    for t in (DIVERGENCES, BREACHES):
        counts[f"{t.name}_past"] = lake.count_matching(t.name, where, lambda c: c("offset") > after)
    counts[f"{BREACHES.name}_error"] = lake.count_matching(BREACHES.name, where, lambda c: c("severity") == "ERROR")
    return counts


def _write_checkpoint(lake: Lake, cluster: str, mode: str, plan, snapshot, end_offset: int, end_ts,
                      history_rows: int, versions: dict) -> None:
    """The replay_checkpoints row the next run resumes from (or starts over when the plan changed), with the
    table versions readers read together; the last commit of a replay."""
    import datetime as dt

    _migrate_checkpoints(lake)
    mark = pa.table({"cluster": [cluster], "replayed_at": [dt.datetime.now(dt.timezone.utc)],
                     "mode": [mode], "start_offset": [plan.start_offset], "snapshot": [snapshot],
                     "last_offset": [end_offset], "last_timestamp": [end_ts],
                     "records": [history_rows], "table_versions": [json.dumps(versions, sort_keys=True)]},
                    schema=CHECKPOINT_SCHEMA)
    lake.append_arrow(CHECKPOINTS.name, mark, partition_by=CHECKPOINTS.partition_by)


def _migrate_checkpoints(lake: Lake) -> None:
    """A replay_checkpoints table written before table versions were recorded gets the column (null)."""
    if not lake.exists(CHECKPOINTS.name):
        return
    old = lake.read_arrow(CHECKPOINTS.name)
    missing = [f for f in CHECKPOINT_SCHEMA if f.name not in old.column_names]
    if missing:
        for f in missing:
            old = old.append_column(f.name, pa.nulls(old.num_rows, f.type))
        lake.replace_schema(CHECKPOINTS.name, old.select(CHECKPOINT_SCHEMA.names).cast(CHECKPOINT_SCHEMA))


def _seed_states(lake: Lake, cluster: str, since: int):
    """Every live partition's state as of offset ``since`` (the checkpoint), from the history: the rows
    valid at ``since``.  Not ``partition_state``: a run killed after rewriting it left the newer states there."""
    hist = lake.read(HISTORY.name).where(F.col("cluster") == cluster)
    valid = (F.col("offset") <= since) & (F.col("valid_to_offset").isNull() | (F.col("valid_to_offset") > since))
    return hist.where(valid).where(~F.col("deleted")).where(~F.col("orphan"))


def _check(table: str, what: str, found: int, want: int) -> None:
    if found != want:
        raise CommitCheckError(f"table {table}: the replay computed {want} {what} but the table holds {found} "
                               "after its commits; the tables are not trustworthy: run kraft-audit replay --full",
                               table)


def replay(spark, lake: Lake, cluster: str, buckets: int, invariants: bool = True, full: bool = False,
           progress=None) -> dict:
    """Replay the cluster's bronze rows into its silver tables (full, incremental or nothing to do: see
    the module doc); returns the mode, the last offset and the row counts of the tables."""
    progress = progress or (lambda message: None)
    bronze_version = lake.version(RECORDS.name)  # one version of bronze for the whole run
    progress(f"reading {RECORDS.name} version {bronze_version}")
    local = lake.tasks_write_files()  # the lake is on this machine's disk: its files read here, not through Spark
    # bronze as a Spark frame, made only for the steps that read it through Spark (planning it costs a second)
    records = None if local else lake.read(RECORDS.name, version=bronze_version).where(F.col("cluster") == cluster)
    notes: list = []
    if local:
        plan, end_offset, end_ts = plan_from_files(lake.data_files(RECORDS.name, bronze_version, {"cluster": cluster}),
                                                   notes)
    else:
        plan, end_offset, end_ts = _log_end(records, replay_plan(records), notes)
    snapshot = plan.snapshot.label if plan.snapshot else None
    ckpt = None if full else _resume_from(_checkpoint(lake, cluster), plan, snapshot, end_offset)
    if ckpt is not None and ckpt.last_offset == end_offset:
        return {"mode": "up-to-date", "last_offset": end_offset, "notes": notes}
    since = ckpt.last_offset if ckpt is not None else None
    counts: dict = {"mode": "incremental" if ckpt is not None else "full", "last_offset": end_offset, "notes": notes}
    progress(f"{counts['mode']} replay through offset {end_offset}: broker, topic and quorum timelines")
    # a full replay on a lake the executors see reads bronze's files itself, the driver's few rows once
    direct = _BronzeFiles(lake, cluster, bronze_version, plan, end_offset) if since is None and local else None
    if direct is None:
        if records is None:
            records = lake.read(RECORDS.name, version=bronze_version).where(F.col("cluster") == cluster)
        dropped = _discarded(records, plan, end_offset)
        rows = S.replay_rows(records, [(f.label, f.kind) for f in plan.files], plan.start_offset, tuple(dropped))
    else:
        dropped = direct.dropped
    # the records of aborted or unended metadata transactions: never replayed; the checkpoint stays before a
    # transaction the log does not end yet, so the next replay reads its records if it has ended by then
    notes.extend(d.message for d in dropped)
    replayed_to = min([end_offset] + [d.begin for d in dropped if d.abort is None and d.last == end_offset]) \
        if dropped else end_offset
    made = cluster_timelines(direct.cluster_level_recs() if direct is not None else _cluster_level_recs(rows), notes)
    counts.update(_write_timelines(lake, cluster, made))
    counts[QUORUM.name] = _write_quorum(lake, cluster, direct.quorum if direct is not None
                                        else _quorum_rows(records, plan))

    if since is not None:  # fold only the new partition records, from every partition's state at the checkpoint
        rows = S.after_checkpoint(rows, since)
        rows = rows.unionByName(S.seeds(_seed_states(lake, cluster, since), since, ckpt.last_timestamp, rows))
    progress(f"folding and recomputing every partition change in {buckets} buckets, then writing silver")
    snapshot_start = plan.start_offset if plan.snapshot else None
    if direct is not None:
        # a full replay: the core's tasks read bronze's files and write the history files themselves, one
        # commit replaces the cluster's
        def core(write):
            # the tasks start from the driver's timelines of the same records: not built again by each
            return S.core_from_files(spark, direct.read, direct.shared, buckets, snapshot_start, invariants,
                                     write=write, cluster_timelines=made)
        out, computed, tallied = _history_by_tasks(lake, cluster, core)
        computed, live = computed[HISTORY.name], computed[STATE.name]
        new = None
    else:
        # bronze read once, by the core (whose output is persisted)
        out = S.core(S.bucketize(rows, buckets), snapshot_start, invariants).persist()
        history = S.history_of(out).withColumn("cluster", F.lit(cluster))
        computed = history.count() if since is None else None
        new = _write_history(lake, cluster, history, since)
        hist = lake.read(HISTORY.name).where(F.col("cluster") == cluster)
        lake.overwrite(STATE.name, S.latest_state(hist), partition_by=STATE.partition_by, where={"cluster": cluster})
        live = tallied = None
    found = S.findings_of(out).withColumn("cluster", F.lit(cluster))
    found = (found if since is None else found.where(F.col("offset") > since)).persist()
    if new is not None:
        counts[f"{HISTORY.name}_new"] = new
    written = _write_findings(lake, cluster, found, since, none_found=tallied == 0)
    found.unpersist()
    out.unpersist()
    counts.update(_silver_counts(lake, cluster, since))
    # what the tables hold now must be what this run computed (an empty or doubled commit fails the run)
    if since is None:
        _check(HISTORY.name, "history rows", counts[HISTORY.name], computed)
    else:
        _check(HISTORY.name, "history rows (those of the last replay and the new ones)", counts[HISTORY.name],
               int(ckpt.records) + new)
    for t in (DIVERGENCES, BREACHES):
        _check(t.name, "rows past the checkpoint", counts.pop(f"{t.name}_past"), written[t.name])
    if live is None:  # written by Spark from the history table: counted there again
        live = lake.read(HISTORY.name).where(F.col("cluster") == cluster).transform(S.latest_state).count()
    _check(STATE.name, "live partitions", counts[STATE.name], live)
    progress("checking what was committed; writing the checkpoint")
    versions = {t: lake.version(t) for t in SILVER}
    versions[RECORDS.name] = bronze_version
    _write_checkpoint(lake, cluster, counts["mode"], plan, snapshot, replayed_to, end_ts, counts.get(HISTORY.name, 0),
                      versions)
    return counts


def main(args) -> int:
    config = load_config(args.conf, {"lake": args.lake} if args.lake else None)
    root, local = root_of(config["lake"])
    # the cluster's lock first: a second replay or ingest of the cluster waits here, before its Spark starts
    held = L.acquire(root, local, args.cluster, "replay", float(config["lock"]["timeout_s"]),
                     float(config["lock"]["stale_after_s"]))
    try:
        spark = get_spark(config, getattr(args, "master", None))
        lake = Lake.from_config(config, spark)
        if not lake.exists(RECORDS.name):
            print(f"kraft-audit replay: no {RECORDS.name} table in {lake.root}: run kraft-audit ingest first",
                  file=sys.stderr)
            return 2
        for d in lake.clean_staging(float(config["lock"]["stale_after_s"])):
            print(f"kraft-audit replay: removed {d}, left by a killed job", file=sys.stderr)
        buckets = config["replay"]["buckets"] or S.default_buckets(spark)
        counts = replay(spark, lake, args.cluster, int(buckets), bool(config["replay"]["invariants"]),
                        full=bool(getattr(args, "full", False)), progress=Progress("kraft-audit replay"))
    finally:
        if held is not None:
            held.release()
    for note in counts.get("notes", ()):  # how the log was read (where Kafka would start it from)
        print(f"kraft-audit replay: {note}", file=sys.stderr)
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
