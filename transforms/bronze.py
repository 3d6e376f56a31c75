"""Bronze transforms: metadata log file splits -> decoded record rows and quarantine rows.

Decoding runs in the executors (``mapInArrow``), one task per file split, each streaming its byte
range through the vectorized decoder in bounded memory.  No I/O besides reading the log files the
splits name; no session creation.

Several nodes' copies of one log can be decoded together: a split names its copy (``copy``, the index of its
log directory in the ingest's list), every decoded row carries it, and :func:`batches` sums the rows up per
batch (base and last offset, leader epoch, CRC, where in which file) for the driver to compare the copies
with what bronze holds (``controller_core/copies.py``).  The rows to keep are then picked by
:func:`from_batches`.
"""
from __future__ import annotations

import os
import socket

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from controller_core.codec import bronze as B
from controller_core.codec.arrowutil import nulls
from lake import catalog

SPLIT_DDL = ("path string, source_file string, source_kind string, start long, end long, cluster string, "
             "first_offset long, copy int")
SPLIT_NAMES = [c.split()[0] for c in SPLIT_DDL.split(",")]
COPY, BATCH_BYTES = "copy", "batch_bytes"  # decoded rows only: which copy, the batch's size in its file

# Executors emit one schema for both kinds of row; `row_kind` (the table's name) tells them apart.
_TS_US = pa.timestamp("us", tz="UTC")
_DECODED = pa.schema(
    [pa.field("row_kind", pa.string(), nullable=False)]
    + [pa.field(f.name, _TS_US if f.type == B.TS else f.type, nullable=True) for f in catalog.METADATA_RECORDS.schema]
    + [pa.field("length", pa.int64()), pa.field("reason", pa.string()), pa.field("message", pa.string()),
       pa.field(COPY, pa.int32()), pa.field(BATCH_BYTES, pa.int64())])
DECODED_SCHEMA = from_arrow_schema(_DECODED)
RECORD_COLUMNS = list(catalog.METADATA_RECORDS.schema.names)
QUARANTINE_COLUMNS = [f.name for f in B.QUARANTINE_SCHEMA]
RECORD_KEY = list(catalog.METADATA_RECORDS.key)
QUARANTINE_KEY = list(catalog.QUARANTINE.key)
# `row_kind`: the bronze table a decoded row belongs to
_RECORD, _QUARANTINED = catalog.METADATA_RECORDS.name, catalog.QUARANTINE.name


def _conform(table: pa.Table, kind: str, copy) -> pa.RecordBatch:
    n = table.num_rows
    cols = []
    for f in _DECODED:
        if f.name == "row_kind":
            cols.append(pa.array([kind] * n, pa.string()))
        elif f.name == COPY:
            cols.append(pa.array([copy] * n, pa.int32()))
        elif f.name in table.column_names:
            cols.append(table.column(f.name).combine_chunks().cast(f.type))
        else:
            cols.append(nulls(n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=_DECODED)


def _split_chunks(row: dict):
    """(chunk, its bronze rows with log_part, batch_crc and batch_bytes, or None when it holds no record) of one
    split, decoded in bounded memory."""
    # imported here: runs in the Python worker
    from controller_core.codec.logfile import iter_chunks

    if not os.path.isfile(row["path"]):  # the driver listed it: this executor does not see it
        raise FileNotFoundError(f"{row['path']}: not found by the executor on {socket.gethostname()}: "
                                "the log directory must be at the same path on the driver and every executor")
    part = catalog.log_part(row["source_kind"], row["source_file"])
    for chunk in iter_chunks(row["path"], row["source_file"], row["start"], row["end"],
                             first_offset=row["first_offset"]):
        if not len(chunk):
            yield chunk, None
            continue
        t = B.records_table(chunk, row["cluster"], row["source_file"], row["source_kind"])
        crc, size = _batch_crc_and_size(row["path"], chunk.batch_position)
        yield chunk, (t.append_column(catalog.LOG_PART, pa.array([part] * t.num_rows, pa.string()))
                      .append_column(catalog.BATCH_CRC, pa.array(crc, pa.int64()))
                      .append_column(BATCH_BYTES, pa.array(size, pa.int64())))


def _decode_partition(batches):
    for split in batches:
        for row in split.to_pylist():
            for chunk, t in _split_chunks(row):
                if t is not None:
                    yield _conform(t, _RECORD, row.get(COPY))
                if chunk.quarantine:
                    yield _conform(B.quarantine_table(chunk.quarantine, row["cluster"], row["source_kind"]),
                                   _QUARANTINED, row.get(COPY))


def _batch_crc_and_size(path: str, batch_position) -> tuple:
    """Per record: the CRC32C its batch header records (unsigned, as int64) and the batch's size in bytes, read
    from the headers at ``batch_position`` (each decoded batch passed its CRC check)."""
    import numpy as np

    pos, inverse = np.unique(np.asarray(batch_position, np.int64), return_inverse=True)
    a = np.memmap(path, np.uint8, mode="r")
    crc = np.zeros(len(pos), np.int64)
    size = np.zeros(len(pos), np.int64)
    for k in range(4):
        crc = (crc << 8) | a[pos + 17 + k].astype(np.int64)
        size = (size << 8) | a[pos + 8 + k].astype(np.int64)
    del a
    return crc[inverse], (size + 12)[inverse]


# ------------------------------------------------------------------ decoding tasks that write bronze themselves
SUMMARY_DDL = "kind string, body string"
SPLIT, FILE, QUARANTINED, NEWER = "split", "file", catalog.QUARANTINE.name, "newer"


def _decode_and_write(write):
    def run(batches):
        import json
        from collections import Counter

        import numpy as np

        from controller_core.codec.logfile import TYPE_NAMES

        out: list[tuple[str, str]] = []
        newer = B.NewerKafka()

        def rows():
            for split in batches:
                for row in split.to_pylist():
                    first = last = None
                    n = 0
                    types: Counter = Counter()
                    for chunk, t in _split_chunks(row):
                        if chunk.quarantine:
                            out.extend((QUARANTINED, json.dumps(q)) for q in B.quarantine_table(
                                chunk.quarantine, row["cluster"], row["source_kind"]).to_pylist())
                        if t is None:
                            continue
                        n += t.num_rows
                        first = int(chunk.offset.min()) if first is None else min(first, int(chunk.offset.min()))
                        last = int(chunk.offset.max()) if last is None else max(last, int(chunk.offset.max()))
                        codes, counts = np.unique(chunk.type_code, return_counts=True)
                        types.update({TYPE_NAMES[int(c)]: int(k) for c, k in zip(codes, counts)})
                        if B.chunk_has_newer(chunk):
                            newer.add(t)
                        yield from t.select(RECORD_COLUMNS).to_batches()
                    out.append((SPLIT, json.dumps({
                        catalog.LOG_PART: catalog.log_part(row["source_kind"], row["source_file"]),
                        "source_file": row["source_file"], "start": row["start"], "first_offset": first,
                        "last_offset": last, "rows": n, "types": dict(types)})))

        for files in write(rows()):
            out.extend((FILE, json.dumps(r)) for r in files.to_pylist())
        if newer.groups:
            out.append((NEWER, json.dumps(newer.state())))
        yield pa.RecordBatch.from_pydict({"kind": [k for k, _ in out], "body": [b for _, b in out]},
                                         schema=pa.schema([("kind", pa.string()), ("body", pa.string())]))

    return run


def records_schema() -> pa.Schema:
    """The Arrow schema of :func:`records`' frame (all columns nullable, as Spark hands them to a writer): what
    the decoding tasks' rows are planned against, so the table is the one the frame path creates."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    return to_arrow_schema(StructType([DECODED_SCHEMA[c] for c in RECORD_COLUMNS]), timezone="UTC")


def _per_split(spark, splits: list[tuple], run, schema) -> DataFrame:
    """``run`` (a ``mapInArrow`` function of batches of ``SPLIT_DDL`` rows) in one task per split: a range of split
    numbers, each task taking its splits from the list shipped with the function.  No shuffle plans it:
    ``createDataFrame(splits).repartition(n)`` ran a shuffle stage first, and an ingest's first decoding task
    started 1.1-1.4 s later on local[2] (the first Python job of a session)."""
    n = len(splits)

    def task(batches):
        def rows():
            for ids in batches:
                chosen = [dict(zip(SPLIT_NAMES, splits[i])) for i in ids.column(0).to_pylist()]
                if chosen:
                    yield pa.RecordBatch.from_pylist(chosen)

        yield from run(rows())

    return spark.range(0, n, 1, max(1, n)).mapInArrow(task, schema)


def decode_and_write(spark, splits: list[tuple], write) -> DataFrame:
    """Splits (``SPLIT_DDL`` rows, one task each) decoded by tasks that write the ``metadata_records`` rows
    themselves, as data files of the table: ``write`` is the task's writer (``lake.files.write_task(...)``, given by
    the job: rows in, one row per written file out; the driver commits or removes the files).  No record row goes
    back through the JVM: the frame holds only (``kind``, JSON ``body``) rows -- ``file`` (a written file,
    ``lake.files.FILE_SCHEMA``), ``split`` (per split: log_part, source_file, start, first and last offset, rows, rows
    per record type), ``quarantine`` (a quarantine row) and ``newer`` (``NewerKafka.state()`` of the task)."""
    return _per_split(spark, splits, _decode_and_write(write), SUMMARY_DDL)


def decode_splits(spark, splits: list[tuple]) -> DataFrame:
    """Splits (``SPLIT_DDL`` rows, one task each) -> one row per decoded record or quarantined span
    (``row_kind``)."""
    return _per_split(spark, splits, _decode_partition, DECODED_SCHEMA)


def records(decoded: DataFrame, *extra: str) -> DataFrame:
    """The bronze ``metadata_records`` rows of a decoded frame (and ``extra`` decoded columns: ``COPY``...)."""
    return decoded.where(F.col("row_kind") == _RECORD).select(*RECORD_COLUMNS, *extra)


BATCH_ROWS = "batch_rows"  # of batches(): how many of the rows given are the batch's
BATCH_COLUMNS = ["log_part", "source_file", "batch_base_offset", "last_offset", "batch_leader_epoch", "batch_crc",
                 "batch_position", "batch_bytes", BATCH_ROWS]


def batches(rows: DataFrame, by: tuple[str, ...] = ()) -> DataFrame:
    """One row per batch of bronze-shaped rows (grouped by ``by`` too, e.g. ``COPY``): ``BATCH_COLUMNS``, the last
    offset being the batch's greatest record offset; ``batch_bytes`` only where ``rows`` have it; ``BATCH_ROWS``
    how many of the rows are the batch's."""
    keys = [*by, catalog.LOG_PART, "source_file", "batch_base_offset"]
    size = F.max(BATCH_BYTES) if BATCH_BYTES in rows.columns else F.lit(None).cast("long")
    crc = F.max(catalog.BATCH_CRC) if catalog.BATCH_CRC in rows.columns else F.lit(None).cast("long")
    return rows.groupBy(*keys).agg(F.max("offset").alias("last_offset"),
                                   F.max("batch_leader_epoch").alias("batch_leader_epoch"), crc.alias("batch_crc"),
                                   F.min("batch_position").alias("batch_position"), size.alias(BATCH_BYTES),
                                   F.count(F.lit(1)).alias(BATCH_ROWS))


def from_batches(rows: DataFrame, chosen: DataFrame) -> DataFrame:
    """The rows of the batches ``chosen`` names (columns ``COPY``, ``source_file``, ``batch_base_offset``),
    in bronze's columns."""
    on = [COPY, "source_file", "batch_base_offset"]
    return rows.join(chosen.select(*on), on=on, how="left_semi").select(*RECORD_COLUMNS)


def quarantine(decoded: DataFrame) -> DataFrame:
    """The bronze ``quarantine`` rows of a decoded frame."""
    return decoded.where(F.col("row_kind") == _QUARANTINED).select(*QUARANTINE_COLUMNS)


def only_new(rows: DataFrame, existing: DataFrame | None, key: list[str]) -> DataFrame:
    """Rows whose key is not in ``existing`` yet: re-ingesting the same files adds nothing, and a
    segment that grew (or a newly rotated one) contributes only the offsets not seen before."""
    if existing is None:
        return rows.dropDuplicates(key)
    return rows.dropDuplicates(key).join(existing.select(*key), on=key, how="left_anti")
