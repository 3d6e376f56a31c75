"""Silver transforms: bronze ``metadata_records`` of one cluster -> replayed history and findings.

The work is split by Kafka partition: partition records are hashed into buckets, and the few
cluster-level records (brokers, topics, configs, features, leader changes) every partition's
decisions depend on are copied into every bucket.  Each bucket is one Arrow group handed whole to the
controller core in an executor, so the core sees many partitions at once: a full replay on a lake the
executors see reads each task's buckets straight from bronze's data files (:func:`core_from_files`); an
incremental replay moves its rows to their buckets by a shuffle (:func:`bucketize`, ``applyInArrow``).
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from controller_core import pipeline
from controller_core.codec.arrowutil import gather, nulls
from controller_core.codec.bronze import COLUMN_MAP
from controller_core.replay import SKIP
from controller_core.vector import fold

PARTITION_TYPES = ("PARTITION_RECORD", "PARTITION_CHANGE_RECORD")
# phases order the files of a replay: bootstrap.checkpoint, then the starting snapshot, then segments
PHASE = {"bootstrap": 0, "snapshot": 1, "segment": 2}

FINDING = pa.schema([
    ("kind", pa.string()), ("offset", pa.int64()), ("topic", pa.string()), ("partition", pa.int32()),
    ("rule", pa.string()), ("severity", pa.string()), ("field", pa.string()), ("recorded", pa.string()),
    ("expected", pa.string()), ("trigger", pa.string()), ("message", pa.string()),
])


def replay_rows(records: DataFrame, files: list[tuple[str, str]], start_offset: int,
                dropped: tuple = ()) -> DataFrame:
    """The rows a replay reads: the chosen files, segment records from ``start_offset``, with the
    replay order in (phase, offset).  NoOps and transaction markers change nothing: dropped; so are the segment
    records of the discarded metadata transactions ``dropped`` (controller_core/transactions.Discarded)."""
    labels = [f for f, _ in files]
    phase = F.create_map(*[x for k, v in PHASE.items() for x in (F.lit(k), F.lit(v))])
    for d in dropped:
        records = records.where((F.col("source_kind") != "segment") | ~F.col("offset").between(d.first, d.last))
    return (records.where(F.col("source_file").isin(labels))
            .where((F.col("source_kind") != "segment") | (F.col("offset") >= start_offset))
            .where(~F.col("record_type").isin(*SKIP))
            .withColumn("phase", phase[F.col("source_kind")])
            .withColumn("bucket_key", F.when(F.col("record_type").isin(*PARTITION_TYPES), _partition_key())))


def _partition_key():
    """The bucket key of a partition's records: "<topic id>-<partition>"."""
    return F.concat_ws("-", "topic_id", F.col("partition_id").cast("string"))


# ------------------------------------------------------------------------------ incremental replay
def after_checkpoint(rows: DataFrame, since: int) -> DataFrame:
    """The replay rows an incremental replay reads: every cluster-level row (brokers, topics, configs,
    features are small, and every partition's decisions depend on them) and only the partition records
    of the segments past the checkpoint offset ``since``."""
    partition = F.col("bucket_key").isNotNull()
    return rows.where(~partition | ((F.col("phase") == PHASE["segment"]) & (F.col("offset") > since)))


def seeds(state: DataFrame, offset: int, timestamp, template: DataFrame) -> DataFrame:
    """Every partition of ``state`` (partition_state rows) as a snapshot-like PartitionRecord at the
    checkpoint ``offset``, in ``template``'s columns and types (the replay rows it joins): the state the
    new partition records are folded from.  Its record version is the lowest that carries its fields
    (2 with ELR, 1 with directories)."""
    version = (F.when(F.size(F.coalesce("eligible_leader_replicas", F.array())) > 0, 2)
               .when(F.size(F.coalesce("directories", F.array())) > 0, 1).otherwise(0))
    cols = {
        "source_file": F.lit(f"replay-state-{offset:020d}.checkpoint"), "source_kind": F.lit("snapshot"),
        "offset": F.lit(offset).cast("long"), "batch_base_offset": F.lit(offset).cast("long"),
        "timestamp": F.lit(timestamp).cast("timestamp"), "record_type": F.lit("PARTITION_RECORD"),
        "record_version": version.cast("short"), "phase": F.lit(PHASE["segment"]),
        "bucket_key": _partition_key(),
    }
    for name in ("topic_id", "partition_id", *fold.STATE_COLUMNS):
        cols[name] = F.col(name)
    types = dict(template.dtypes)
    return state.select(*[(cols[n] if n in cols else F.lit(None)).cast(types[n]).alias(n) for n in template.columns])


def superseded(history: DataFrame, since: int) -> DataFrame:
    """The seeds of an incremental replay that the new records superseded: a seed's valid-to is the first
    new state of its partition, which the stored row (open until now) must take."""
    return history.where((F.col("offset") == since) & F.col("valid_to_offset").isNotNull()
                         & (F.col("record_type") == "PARTITION_RECORD"))


# Columns the controller core reads in the executors.  Spark's Arrow conversion of array columns is
# slow (measured: 30 s vs 2.7 s for 350k rows through applyInArrow), so list columns travel as
# comma-joined strings and are split back with Arrow kernels in the worker (``unpack``).
CORE_COLUMNS = ["source_file", "source_kind", "offset", "batch_base_offset", "timestamp", "record_type",
                "record_version", "topic_id", "topic_name", "partition_id", "leader", "leader_epoch",
                "partition_epoch", "leader_recovery_state", "broker_id", "broker_epoch", "fenced",
                "in_controlled_shutdown", "incarnation_id", "leader_id", "config_resource_type",
                "config_resource_name", "config_name", "config_value", "feature_name", "feature_level", "data_json"]
LIST_COLUMNS = {"replicas": pa.int32(), "isr": pa.int32(), "removing_replicas": pa.int32(),
                "adding_replicas": pa.int32(), "eligible_leader_replicas": pa.int32(),
                "last_known_elr": pa.int32(), "directories": pa.string()}


# 8: a bucket's replay holds about an eighth of a core's share of the log (a full replay's task holds its
# buckets' bronze rows too; at 1 M partitions 4 per core put local[2] over 8 GiB, 8 per core 7 GiB, as fast)
BUCKETS_PER_CORE = 8


def default_buckets(spark) -> int:
    """The bucket count when the config leaves ``replay.buckets`` unset: eight per core of the cluster --
    Spark's default parallelism (``spark.default.parallelism`` when set, else the cores of the executors
    registered when the session started) -- so every core stays busy and no one replay holds more than an
    eighth of its core's share."""
    return BUCKETS_PER_CORE * max(1, int(spark.sparkContext.defaultParallelism))


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
    """A bucket's rows (from :func:`bucketize`) in replay order, list columns unpacked: see :func:`in_replay_order`."""
    return unpack(in_replay_order(table, snapshot_start))


def in_replay_order(table: pa.Table, snapshot_start: int | None) -> pa.Table:
    """A bucket's rows in replay order (phase, offset), without the grouping columns; rows of the
    starting snapshot dated ``snapshot_start - 1``: the state they describe."""
    import pyarrow.compute as pc

    order = _replay_order(table)
    if order is not None:
        table = gather(table, order)
    if snapshot_start is not None:
        off = pc.if_else(pc.equal(table.column("phase"), PHASE["snapshot"]),
                         pa.scalar(snapshot_start - 1, pa.int64()), table.column("offset"))
        table = table.set_column(table.schema.get_field_index("offset"), "offset", off)
    return table.drop_columns([c for c in ("bucket", "phase", "context") if c in table.column_names])


def _replay_order(table: pa.Table) -> np.ndarray | None:
    """The row order of :func:`in_replay_order`: by phase, offset, then ``source_kind`` (an incremental replay's
    seed states, "snapshot", follow the segment records sharing their offset: the state they carry is the one
    after that record); nulls last, ties kept in table order -- Arrow's ``sort_by`` of those keys.  None when the
    rows are in that order already.  In NumPy: Arrow sorted the string key row by row, 0.6 s of a 1.4 M-row
    bucket, 2.4 s of a 1 M-partition replay task."""
    import pyarrow.compute as pc

    def ints(name: str) -> np.ndarray:
        column = table.column(name).cast(pa.int64())
        return np.asarray(pc.fill_null(column, np.iinfo(np.int64).max).to_numpy(zero_copy_only=False), np.int64)

    phase, offset = ints("phase"), ints("offset")
    kinds = pc.dictionary_encode(table.column("source_kind")).combine_chunks()
    rank = np.argsort(np.argsort(np.array(kinds.dictionary.to_pylist(), object), kind="stable"))
    rank = np.append(rank, len(rank))  # a null kind: after every value
    kind = rank[np.asarray(pc.fill_null(kinds.indices, len(kinds.dictionary)).to_numpy(zero_copy_only=False),
                           np.int64)]

    def up(key):  # (after, same) of each row against the one before (no subtraction: a null is int64's max)
        return key[1:] > key[:-1], key[1:] == key[:-1]

    (phase_up, phase_same), (offset_up, offset_same), (kind_up, kind_same) = up(phase), up(offset), up(kind)
    if bool(np.all(phase_up | (phase_same & (offset_up | (offset_same & (kind_up | kind_same)))))):
        return None
    return np.lexsort((kind, offset, phase))


# one Arrow group in, one table out: the dated partition history rows (kind "history") and the findings; with a
# writer, the files the task wrote the history into instead (kind "file", the file row as JSON in "body") and the
# tally of its findings (kind "tally")
_HISTORY_NAMES = list(pipeline.HISTORY_DATED_SCHEMA.names)
HISTORY, FILE, TALLY = "history", "file", "tally"
CORE = pa.schema([f.with_nullable(True) for f in pipeline.HISTORY_DATED_SCHEMA]
                 + [f for f in FINDING if f.name not in _HISTORY_NAMES] + [pa.field("body", pa.string())])


def core(bucketed: DataFrame, snapshot_start: int | None = None, invariants: bool = True, write=None) -> DataFrame:
    """Per bucket, in one executor call, the replay pipeline (:func:`controller_core.pipeline.run`):
    the dated partition state history and the findings (divergences, invariant breaches; kind
    "divergence" / "breach").  Split them with :func:`history_of` and :func:`findings_of`.

    ``write``: the task's writer of the history (the job passes ``lake.files.write_table(...)``): the task
    writes its history rows as data files of the table and returns one row per file (:func:`files_of`)
    instead of the rows -- the history never goes through the JVM.

    Records of the starting snapshot are dated ``snapshot_start - 1`` (the state they describe).
    ``invariants=False`` skips the §4 invariant checks."""

    def core_group(table: pa.Table) -> pa.Table:
        import pyarrow.compute as pc

        # partition 0 of these topics is here only as context (another bucket owns it): not reported
        ctx = frozenset()
        if "context" in table.column_names:
            ctx = frozenset(pc.unique(table.column("topic_id").filter(
                pc.fill_null(table.column("context"), False))).to_pylist())
        rep = pipeline.run(ordered(table, snapshot_start), invariants=invariants, context_topics=ctx, threads=1)
        return _core_output(rep, write)

    return bucketed.groupBy("bucket").applyInArrow(core_group, from_arrow_schema(CORE))


def _core_output(rep, write) -> pa.Table:
    """One bucket's replay (:class:`controller_core.pipeline.Replay`) as CORE rows: its history rows (or, with a
    writer, the files it wrote them into) and its findings."""
    div = rep.divergences.drop_columns(["topic_id"])
    div = div.append_column("kind", pa.array(["divergence"] * div.num_rows, pa.string()))
    brc = rep.breaches.drop_columns(["topic_id"])
    brc = brc.append_column("kind", pa.array(["breach"] * brc.num_rows, pa.string()))
    if write is None:
        hist = rep.history.append_column("kind", pa.array([HISTORY] * rep.history.num_rows, pa.string()))
    else:
        import json

        files = [json.dumps(f) for f in write(rep.history)]
        # and one tally of the bucket's findings: a run whose tallies are all 0 (a healthy log) needs no second
        # Spark job to look for findings
        tally = json.dumps({"findings": div.num_rows + brc.num_rows})
        hist = pa.table({"kind": pa.array([FILE] * len(files) + [TALLY], pa.string()),
                         "body": pa.array(files + [tally], pa.string())})
    return pa.concat_tables([_widen(hist), _widen(div), _widen(brc)])


# ---------------------------------------------------------------- a full replay's tasks read bronze themselves
# what the tasks read of bronze: the core's columns, lists as lists (nothing goes through the JVM); the strings
# repeated row after row (a file, a record type, a topic id) dictionary-encoded while a task holds its buckets'
# rows (strings again per bucket): the topic ids' dictionaries are also what bucket_of hashes, once per id
READ_COLUMNS = [c for c in CORE_COLUMNS if c != "data_json"] + list(LIST_COLUMNS)
# what the tasks read of their partition records: the envelope and the columns a partition record fills (the
# broker, config and feature columns are null in its rows: decoding them cost a fifth of a task's read)
_TYPED = {c for columns in COLUMN_MAP.values() for c in columns}
PARTITION_READ_COLUMNS = [c for c in READ_COLUMNS
                          if c not in _TYPED or any(c in COLUMN_MAP[t] for t in PARTITION_TYPES)]
READ_DICTIONARY = ("source_file", "source_kind", "record_type", "topic_id")


def replay_filter(files: list[tuple[str, str]], start_offset: int, partition_records: bool,
                  first_partition: bool = False, also: tuple[str, ...] = (), dropped: tuple = ()):
    """``where(field)`` (a pyarrow.dataset expression) of the bronze rows a replay reads, as
    :func:`replay_rows` chooses them: the plan's files, segment records from ``start_offset`` outside the discarded
    metadata transactions ``dropped``; the partition records (``partition_records``; only partition 0's with
    ``first_partition``) or the others (NoOps and markers left out, except the record types ``also`` names: e.g. the
    quorum's, read in the same pass)."""
    labels = [f for f, _ in files]

    def where(field):
        chosen = field("source_file").isin(labels) & (
            (field("source_kind") != "segment") | (field("offset") >= start_offset))
        for d in dropped:
            chosen = chosen & ((field("source_kind") != "segment") | (field("offset") < d.first)
                               | (field("offset") > d.last))
        if partition_records:
            chosen = chosen & field("record_type").isin(list(PARTITION_TYPES))
            return chosen & (field("partition_id") == 0) if first_partition else chosen
        skipped = sorted(set(PARTITION_TYPES) | (set(SKIP) - set(also)))
        return chosen & ~field("record_type").isin(skipped)
    return where


def bucket_of(topic_ids, partitions: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket of each (topic id, partition) when the tasks read their own rows: the CRC-32 of the id
    plus the partition, modulo ``buckets`` (a topic's partitions go round the buckets).  The one definition
    for a task's own rows and for the owner of each partition 0.  ``topic_ids`` plain or dictionary-encoded
    (as a task reads them), chunk by chunk: a null id counts as ""."""
    chunks = topic_ids.chunks if isinstance(topic_ids, pa.ChunkedArray) else [topic_ids]
    crc = np.concatenate([_topic_crcs(c) for c in chunks]) if chunks else np.zeros(0, np.int64)
    return (crc + partitions) % buckets


def _topic_crcs(ids: pa.Array) -> np.ndarray:
    """zlib's CRC-32 of each id's UTF-8 (0, that of "", for a null), once per distinct id."""
    import zlib

    import pyarrow.compute as pc

    enc = ids if pa.types.is_dictionary(ids.type) else ids.dictionary_encode()
    values = enc.dictionary.to_pylist()
    crc = np.array([zlib.crc32(t.encode()) if t is not None else 0 for t in values] + [0], np.int64)
    index = pc.fill_null(enc.indices, len(values))  # a null row: the last entry, 0
    return crc[np.asarray(index.to_numpy(zero_copy_only=False), np.int64)]


def core_from_files(spark, read, shared: pa.Table, buckets: int, snapshot_start: int | None = None,
                    invariants: bool = True, write=None, cluster_timelines: tuple | None = None) -> DataFrame:
    """:func:`core` of a full replay without moving bronze through Spark.  One task per core of the cluster
    (Spark's default parallelism, at most ``buckets``) reads, in one pass over bronze's data files
    (``read(split=...)``: :func:`lake.files.scan_task` with :func:`replay_filter`), the partition records of each
    of its buckets (:func:`bucket_of`; bucket ``b`` belongs to task ``b % tasks``) with every partition 0, then
    replays its buckets one after the other (the broker and topic timelines given, or built by the first): each
    bucket's own records, every partition 0 (context where another bucket owns it, as :func:`bucketize` sends them)
    and ``shared`` -- the cluster-level rows (:data:`READ_COLUMNS` and ``data_json``), read once by the driver;
    ``read`` returns the :data:`PARTITION_READ_COLUMNS` of the partition records.  A partition record needs no
    ``data_json``: its typed columns hold it (``explain.record_data``).  ``cluster_timelines``: (brokers, topics,
    image) the driver built of the same cluster-level rows and partition 0s (``pipeline.run``'s), used by every
    bucket instead of the first's.  Same rows out as :func:`core`."""
    tasks = max(1, min(buckets, int(spark.sparkContext.defaultParallelism)))

    def bucket_rows(table) -> np.ndarray:
        return bucket_of(table.column("topic_id"), _partitions(table), buckets)

    def task(batches):
        for batch in batches:
            for t in batch.column(0).to_pylist():
                mine = list(range(t, buckets, tasks))

                def split(scanned):
                    owner, first = bucket_rows(scanned), _partitions(scanned) == 0
                    return [(owner == b) | first for b in mine]

                made = cluster_timelines  # the broker and topic timelines: every bucket has the same rows for them
                tables = read(split=(len(mine), split))
                for b in mine:
                    rows = tables.pop(0)  # a bucket's rows let go once replayed
                    context = (_partitions(rows) == 0) & (bucket_rows(rows) != b)
                    rep = _replay_bucket(rows, context, shared, snapshot_start, invariants, made)
                    made = (rep.brokers, rep.topics, rep.image)
                    yield from _core_output(rep, write).to_batches()

    return spark.range(0, tasks, 1, tasks).mapInArrow(task, from_arrow_schema(CORE))


def _replay_bucket(own: pa.Table, context: np.ndarray, shared: pa.Table, snapshot_start, invariants,
                   cluster_timelines) -> pipeline.Replay:
    """One bucket of :func:`core_from_files`: its rows (its partitions' records and every partition 0; ``context``
    marks the partition 0 records another bucket owns) and the shared cluster-level rows, replayed (with the
    timelines of the task's bucket before, if any: ``pipeline.run``'s ``cluster_timelines``)."""
    # the strings the scan read as codes (READ_DICTIONARY: file, kind, record type, topic id) stay codes through the
    # replay, as a log directory's own read keeps its record types (decoded here, they were strings made per row
    # for a replay that compares them); the shared rows, a few thousand, encoded to match
    for f in own.schema:
        i = shared.schema.get_field_index(f.name)
        if pa.types.is_dictionary(f.type) and i >= 0 and not pa.types.is_dictionary(shared.schema.field(i).type):
            shared = shared.set_column(i, shared.schema.field(i).with_type(f.type), shared.column(i).cast(f.type))
    # the columns a partition record leaves null (not read): null, in the shared rows' types
    own = pa.table({f.name: own.column(f.name) if f.name in own.column_names else nulls(own.num_rows, f.type)
                    for f in shared.schema if f.name != "data_json"})
    own = (own.append_column("data_json", nulls(own.num_rows, pa.string()))
           .append_column("context", pa.array(context)))
    mine = pa.concat_tables([own, shared.append_column("context", pa.array(np.zeros(shared.num_rows, bool)))])
    mine = mine.append_column("phase", phase_of(mine))
    ctx = frozenset(own.column("topic_id").filter(pa.array(context)).unique().to_pylist())
    del own
    return pipeline.run(in_replay_order(mine, snapshot_start), invariants=invariants, context_topics=ctx, threads=1,
                        cluster_timelines=cluster_timelines)


def phase_of(table: pa.Table) -> pa.Array:
    """The replay phase (:data:`PHASE`) of each row, from its ``source_kind``: PHASE's values are the positions
    of its kinds."""
    import pyarrow.compute as pc

    return pc.index_in(table.column("source_kind"), pa.array(list(PHASE)))


def _partitions(table) -> np.ndarray:
    import pyarrow.compute as pc

    return np.asarray(pc.fill_null(table.column("partition_id"), -1).to_numpy(zero_copy_only=False), np.int64)


def _widen(table: pa.Table) -> pa.Table:
    """``table`` in the CORE schema: its own columns, nulls elsewhere."""
    return pa.table({f.name: table.column(f.name).cast(f.type) if f.name in table.column_names
                     else nulls(table.num_rows, f.type) for f in CORE}, schema=CORE)


def findings_of(out: DataFrame) -> DataFrame:
    """The findings of :func:`core`; cluster-level findings seen by every bucket are kept once."""
    return (out.where(~F.col("kind").isin(HISTORY, FILE, TALLY)).select(*FINDING.names)
            .dropDuplicates(["kind", "offset", "rule", "topic", "partition", "field"]))


# each findings table: its kind of finding and the FINDING columns it leaves out
FINDING_TABLES = {"divergence": ("kind", "message"), "breach": ("kind", "field", "trigger")}


def divergences_of(findings: DataFrame) -> DataFrame:
    """The divergences of :func:`findings_of` (recorded vs recomputed decisions), in their table's columns."""
    return findings.where(F.col("kind") == "divergence").drop(*FINDING_TABLES["divergence"])


def breaches_of(findings: DataFrame) -> DataFrame:
    """The invariant breaches of :func:`findings_of`, in their table's columns."""
    return findings.where(F.col("kind") == "breach").drop(*FINDING_TABLES["breach"])


def findings_table(findings: pa.Table, kind: str) -> pa.Table:
    """:func:`divergences_of` (``kind`` "divergence") or :func:`breaches_of` ("breach") of findings collected
    to Arrow."""
    import pyarrow.compute as pc

    return findings.filter(pc.equal(findings.column("kind"), kind)).drop_columns(list(FINDING_TABLES[kind]))


def history_of(out: DataFrame) -> DataFrame:
    """The dated partition state history rows of :func:`core` (pipeline.HISTORY_DATED_SCHEMA)."""
    return out.where(F.col("kind") == HISTORY).select(*_HISTORY_NAMES)


def files_of(out: DataFrame) -> DataFrame:
    """What the tasks of :func:`core` wrote (with a writer), a JSON ``body`` each: the data files they wrote the
    history into (``kind`` FILE) and per bucket a tally of its findings (TALLY, ``{"findings": n}``, counted before
    :func:`findings_of` keeps once what several buckets saw)."""
    return out.where(F.col("kind").isin(FILE, TALLY)).select("kind", "body")


# ------------------------------------------------------------------------------ partition history
def latest_state(history: DataFrame) -> DataFrame:
    """The current state of every live partition: its history row that nothing follows (not a deletion).
    :func:`latest_state_rows` is the same choice of a bucket's Arrow rows."""
    live = history.where(F.col("valid_to_offset").isNull())
    if "deleted" in history.columns:
        live = live.where(~F.col("deleted"))
    return live


def latest_state_rows(history: pa.Table) -> pa.Table:
    """:func:`latest_state` of history rows in Arrow: those of a replay that saw every record of their
    partitions (a bucket's, in a full replay's core task)."""
    import pyarrow.compute as pc

    return history.filter(pc.and_(pc.is_null(history.column("valid_to_offset")),
                                  pc.invert(history.column("deleted"))))
