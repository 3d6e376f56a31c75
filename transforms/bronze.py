"""Bronze transforms: metadata log file splits -> decoded record rows and quarantine rows.

Decoding runs in the executors (``mapInArrow``), one task per file split, each streaming its byte
range through the vectorized decoder in bounded memory.  No I/O besides reading the log files the
splits name; no session creation.
"""
from __future__ import annotations

import os
import socket

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from controller_core.codec import bronze as B
from lake import catalog

SPLIT_DDL = ("path string, source_file string, source_kind string, start long, end long, cluster string, "
             "first_offset long")

# Executors emit one schema for both kinds of row; `row_kind` (the table's name) tells them apart.
_TS_US = pa.timestamp("us", tz="UTC")
_DECODED = pa.schema(
    [pa.field("row_kind", pa.string(), nullable=False)]
    + [pa.field(f.name, _TS_US if f.type == B.TS else f.type, nullable=True) for f in B.SCHEMA]
    + [pa.field("length", pa.int64()), pa.field("reason", pa.string()), pa.field("message", pa.string())])
DECODED_SCHEMA = from_arrow_schema(_DECODED)
RECORD_COLUMNS = [f.name for f in B.SCHEMA]
QUARANTINE_COLUMNS = [f.name for f in B.QUARANTINE_SCHEMA]
RECORD_KEY = list(catalog.METADATA_RECORDS.key)
QUARANTINE_KEY = list(catalog.QUARANTINE.key)
# `row_kind`: the bronze table a decoded row belongs to
_RECORD, _QUARANTINED = catalog.METADATA_RECORDS.name, catalog.QUARANTINE.name


def _conform(table: pa.Table, kind: str) -> pa.RecordBatch:
    n = table.num_rows
    cols = []
    for f in _DECODED:
        if f.name == "row_kind":
            cols.append(pa.array([kind] * n, pa.string()))
        elif f.name in table.column_names:
            cols.append(table.column(f.name).combine_chunks().cast(f.type))
        else:
            cols.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=_DECODED)


def _decode_partition(batches):
    # imported here: runs in the Python worker
    from controller_core.codec.logfile import iter_chunks

    for split in batches:
        for row in split.to_pylist():
            if not os.path.isfile(row["path"]):  # the driver listed it: this executor does not see it
                raise FileNotFoundError(f"{row['path']}: not found by the executor on {socket.gethostname()}: "
                                        "the log directory must be at the same path on the driver and every executor")
            for chunk in iter_chunks(row["path"], row["source_file"], row["start"], row["end"],
                                     first_offset=row["first_offset"]):
                if len(chunk):
                    yield _conform(B.records_table(chunk, row["cluster"], row["source_file"], row["source_kind"]),
                                   _RECORD)
                if chunk.quarantine:
                    yield _conform(B.quarantine_table(chunk.quarantine, row["cluster"], row["source_kind"]),
                                   _QUARANTINED)


def decode_splits(splits: DataFrame) -> DataFrame:
    """Splits (``SPLIT_DDL``) -> one row per decoded record or quarantined span (``row_kind``)."""
    return splits.mapInArrow(_decode_partition, DECODED_SCHEMA)


def records(decoded: DataFrame) -> DataFrame:
    """The bronze ``metadata_records`` rows of a decoded frame."""
    return decoded.where(F.col("row_kind") == _RECORD).select(*RECORD_COLUMNS)


def quarantine(decoded: DataFrame) -> DataFrame:
    """The bronze ``quarantine`` rows of a decoded frame."""
    return decoded.where(F.col("row_kind") == _QUARANTINED).select(*QUARANTINE_COLUMNS)


def only_new(rows: DataFrame, existing: DataFrame | None, key: list[str]) -> DataFrame:
    """Rows whose key is not in ``existing`` yet: re-ingesting the same files adds nothing, and a
    segment that grew (or a newly rotated one) contributes only the offsets not seen before."""
    if existing is None:
        return rows.dropDuplicates(key)
    return rows.dropDuplicates(key).join(existing.select(*key), on=key, how="left_anti")
