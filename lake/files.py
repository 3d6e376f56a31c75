"""Delta data files written by the Spark tasks themselves (the delta-rs backend's Spark writes).

Each task of :func:`write_task` (run through ``DataFrame.mapInArrow``) casts its rows to the table's
exact Arrow schema (strings held as dictionary codes stay codes: :func:`written_schema`), writes one parquet
file per partition value it holds straight into the table's folder
(``<table>/cluster=<name>/part-<task>-<tag>-<uuid>.c000.snappy.parquet``, the partition columns in the folder
names only, as every Delta writer does) and returns one small row per file: its path
relative to the table, size, partition values, row count and Delta statistics (``numRecords``,
``minValues``, ``maxValues``, ``nullCount``).  The driver commits those rows as add actions; no data row
goes through it.

``tag`` is the writing job's staging id: a file whose name holds it and that no commit added is an orphan
of that job (a failed task attempt, a job killed before its commit) and is removed by the job itself or,
after a kill, by :meth:`lake.delta.Lake.clean_staging`.  Delta never reads a file its log does not list.

Imports only pyarrow and NumPy at module level: the executors import this module.
"""
from __future__ import annotations

import json
import os
import uuid
from typing import Iterator

import numpy as np
import pyarrow as pa

# the result row of every written file (one per task and partition value)
FILE_SCHEMA = pa.schema([("path", pa.string()), ("size", pa.int64()), ("partition_values", pa.string()),
                         ("rows", pa.int64()), ("stats", pa.string()), ("modification_time", pa.int64())])
FILE_DDL = "path string, size long, partition_values string, rows long, stats string, modification_time long"
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# as delta-rs (and Delta's dataSkippingNumIndexedCols): statistics of the first 32 columns
STATS_COLUMNS = 32
# a longer string's min is cut to this prefix (still a lower bound) and its max left out (unknown)
STATS_STRING_CHARS = 32
# rows per parquet row group (pyarrow's default is 1 Mi rows; smaller groups keep the task's memory flat)
ROW_GROUP_ROWS = 128 * 1024


class RowError(ValueError):
    """A task's rows cannot be written under the table's schema (the driver re-raises it as a ValueError)."""


ROW_ERROR = "kraft-audit write task: "
READ_ERROR = "kraft-audit read task: "  # a task's reader cannot open the lake's files (the job re-raises the rest)


class MissingDataFile(FileNotFoundError):
    """A data file a table's Delta log lists is not on this machine's disk (``path``: the first one).  In a
    Spark task its message says every executor must see the lake; read by the driver itself, the commands
    report it as any missing file of the lake (``jobs.common.error_line``)."""

    def __init__(self, message: str, path: str):
        super().__init__(message)
        self.path = path  # not OSError's filename: that would replace the message in str()


def file_name(task: int, tag: str) -> str:
    return f"part-{task:05d}-{tag}-{uuid.uuid4().hex}.c000.snappy.parquet"


def is_tagged(name: str, tag: str) -> bool:
    """Whether a data file's name says the job with staging id ``tag`` wrote it."""
    return name.startswith("part-") and f"-{tag}-" in name and name.endswith(".parquet")


def partition_dir(parts: list[str], values: tuple) -> str:
    """The Hive-style folder of a partition, its values percent-encoded as delta-rs writes them
    (``p=b%20c%2Fd``; Spark's partition discovery decodes them)."""
    from urllib.parse import quote

    return "/".join(f"{col}={NULL_PARTITION}" if v is None else f"{col}={quote(_partition_string(v), safe='-_.')}"
                    for col, v in zip(parts, values))


def _partition_string(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


class _Stats:
    """Delta statistics of one file, accumulated batch by batch."""

    def __init__(self, schema: pa.Schema):
        self.rows = 0
        self.cols = [f for f in schema if _has_stats(f.type)][:STATS_COLUMNS]
        self.nulls = {f.name: 0 for f in self.cols}
        self.min: dict = {}
        self.max: dict = {}
        self.no_max: set = set()
        self.no_minmax: set = set()

    def add(self, batch: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        self.rows += batch.num_rows
        for f in self.cols:
            col = batch.column(f.name)
            self.nulls[f.name] += col.null_count
            if f.name in self.no_minmax or col.null_count == len(col):
                continue
            if pa.types.is_floating(f.type) and pc.any(pc.is_nan(col)).as_py():
                self.no_minmax.add(f.name)  # NaN has no place in an ordering: leave the bounds unknown
                continue
            mm = pc.min_max(_referenced(col) if pa.types.is_dictionary(col.type) else col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if f.name not in self.min or lo < self.min[f.name]:
                self.min[f.name] = lo
            if f.name not in self.max or hi > self.max[f.name]:
                self.max[f.name] = hi

    def json(self) -> str:
        lo, hi = {}, {}
        for f in self.cols:
            n = f.name
            if n in self.no_minmax or n not in self.min:
                continue
            lo[n] = _stat_value(self.min[n], f.type, upper=False)
            up = _stat_value(self.max[n], f.type, upper=True)
            if up is not None:
                hi[n] = up
        return json.dumps({"numRecords": self.rows, "minValues": lo, "maxValues": hi, "nullCount": self.nulls},
                          separators=(",", ":"))


def _referenced(col) -> pa.Array:
    """The dictionary values a dictionary-encoded column's rows use (its bounds are theirs, not the whole
    dictionary's)."""
    import pyarrow.compute as pc

    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    return pa.concat_arrays([c.dictionary.take(pc.unique(c.indices.drop_null())) for c in chunks]
                            or [pa.array([], col.type.value_type)])


def _has_stats(t: pa.DataType) -> bool:
    return not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t) or pa.types.is_map(t)
                or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def _stat_value(v, t: pa.DataType, upper: bool):
    """A Delta statistics value: timestamps in milliseconds (min rounded down, max up: still bounds),
    strings longer than STATS_STRING_CHARS cut (min) or left out (max)."""
    if pa.types.is_timestamp(t):
        import datetime as dt

        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        v = v.astimezone(dt.timezone.utc)
        ms = v.replace(microsecond=(v.microsecond // 1000) * 1000)
        if upper and ms != v:
            ms += dt.timedelta(milliseconds=1)
        return ms.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"
    if pa.types.is_date(t):
        return v.isoformat()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        if len(v) > STATS_STRING_CHARS:
            return None if upper else v[:STATS_STRING_CHARS]
        return v
    return v


def dictionary_columns(schema: pa.Schema) -> list[str]:
    """The columns (Parquet leaf paths) a data file dictionary-encodes: all but the 64-bit integers and timestamps
    (offsets, file positions, record times -- nearly one value per row: Parquet's writer hashed each of them into
    a dictionary it then dropped, a third of a bronze file's write)."""
    wide = (pa.types.is_int64, pa.types.is_uint64, pa.types.is_timestamp)

    def leaves(path: str, t: pa.DataType):
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            yield from leaves(f"{path}.list.element", t.value_type)
        elif pa.types.is_struct(t):
            for f in t:
                yield from leaves(f"{path}.{f.name}", f.type)
        elif not any(is_(t) for is_ in wide):
            yield path

    return [leaf for f in schema for leaf in leaves(f.name, f.type)]


def statistics_columns(schema: pa.Schema) -> list[str]:
    """The columns whose row groups carry Parquet statistics (min, max, nulls): the top-level scalar ones, what a
    reader prunes row groups by (a cluster, an offset, a record type).  Not the elements of a list (replicas, ISR,
    directory ids): nothing filters on them, and their statistics were a sixth of a replay bucket's history write."""
    nested = (pa.types.is_list, pa.types.is_large_list, pa.types.is_struct, pa.types.is_map)
    return [f.name for f in schema if not any(is_(f.type) for is_ in nested)]


def _strings(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _as_written(target: pa.DataType, have: pa.DataType) -> pa.DataType:
    """The type a column of type ``have`` is written with into a column of type ``target``: ``target`` itself,
    but a string (or list of strings) the rows hold as dictionary codes stays codes over ``target``'s values --
    Parquet's writer then takes the dictionary as it is, where plain strings are decoded only for the writer to
    hash each one back into its dictionary (a replay's topic ids, record types and directory ids: a fifth of a
    bucket's write).  The file's Parquet type is the same string either way."""
    if _strings(target) and pa.types.is_dictionary(have) and _strings(have.value_type):
        return pa.dictionary(have.index_type, target)
    if (pa.types.is_list(target) and pa.types.is_list(have) and _strings(target.value_type)
            and pa.types.is_dictionary(have.value_type) and _strings(have.value_type.value_type)):
        return pa.list_(target.value_field.with_type(pa.dictionary(have.value_type.index_type, target.value_type)))
    return target


def written_schema(target: pa.Schema, have: pa.Schema, plain: list[str] = ()) -> pa.Schema:
    """``target`` with the types rows of schema ``have`` are written with (:func:`_as_written`); the ``plain``
    columns (the partition columns, in folder names only) as ``target`` has them."""
    return pa.schema([f.with_type(_as_written(f.type, have.field(f.name).type))
                      if f.name in have.names and f.name not in plain else f for f in target], metadata=target.metadata)


def _stored_schema(schema: pa.Schema) -> dict[str, str]:
    """The key-value metadata pyarrow's Parquet writer stores for ``schema`` (``store_schema``): the schema as an
    Arrow IPC message, base64."""
    import base64

    return {"ARROW:schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")}


def _single_key(batch: pa.Table, parts: list[str]) -> tuple | None:
    """The partition values of ``batch`` when every row has the same (one min-max per column), else None."""
    import pyarrow.compute as pc

    values = []
    for c in parts:
        col = batch.column(c)
        if col.null_count == len(col):
            values.append(None)
            continue
        if col.null_count:
            return None
        mm = pc.min_max(col)
        lo, hi = mm["min"].as_py(), mm["max"].as_py()
        if lo != hi:
            return None
        values.append(lo)
    return tuple(values)


def write_task(table_path: str, target: pa.Schema, parts: list[str], tag: str):
    """The ``mapInArrow`` function writing a task's rows into the table at ``table_path``: ``target`` is the
    table's Arrow schema (the rows are cast to it, ``safe=True``: any loss fails the task; strings as codes stay
    codes, :func:`written_schema`), ``parts`` its partition columns.  Yields FILE_SCHEMA rows, one per file.  The
    items may also be whole tables (:func:`write_table`): their chunks, however small, go into the file's row
    groups of ROW_GROUP_ROWS rows."""

    def run(batches: Iterator[pa.RecordBatch | pa.Table]) -> Iterator[pa.RecordBatch]:
        import time

        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        try:
            from pyspark import TaskContext

            ctx = TaskContext.get()
            task = ctx.partitionId() if ctx is not None else 0
        except Exception:  # outside Spark (tests)
            task = 0
        stored = pa.schema([f for f in target if f.name not in parts])  # the table's, what a reader gets back
        data_names = stored.names
        open_files: dict = {}  # partition values -> [relative path, writer, stats]

        def sink(values: tuple, batch: pa.Table) -> None:
            entry = open_files.get(values)
            if entry is None:
                folder = partition_dir(parts, values)
                rel = f"{folder}/{file_name(task, tag)}" if folder else file_name(task, tag)
                full = os.path.join(table_path, rel)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                # the rows' schema (codes kept: written_schema) makes the file; the Arrow schema stored in it is
                # the table's, byte for byte what the writer stores for plain rows: a reader gets strings back
                writer = pq.ParquetWriter(full, batch.schema, compression="snappy",
                                          use_dictionary=dictionary_columns(batch.schema),
                                          write_statistics=statistics_columns(batch.schema), store_schema=False)
                writer.add_key_value_metadata(_stored_schema(stored))
                entry = open_files[values] = [rel, writer, _Stats(stored)]
            elif not batch.schema.equals(entry[1].schema):  # later rows in another form: the file's
                batch = batch.cast(entry[1].schema)
            entry[1].write_table(batch, row_group_size=ROW_GROUP_ROWS)
            entry[2].add(batch)

        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                try:
                    if isinstance(batch, pa.RecordBatch):
                        batch = pa.Table.from_batches([batch])
                    batch = batch.select(target.names)
                    batch = batch.cast(written_schema(target, batch.schema, plain=parts), safe=True)
                except (ValueError, pa.ArrowInvalid) as exc:  # a lossy cast, a null in a non-nullable column
                    raise RowError(f"{ROW_ERROR}{exc}") from exc
                for f in target:
                    if not f.nullable and batch.column(f.name).null_count:
                        raise RowError(f"{ROW_ERROR}column {f.name!r} is non-nullable in the table but the frame "
                                       f"holds {batch.column(f.name).null_count} null(s)")
                if not parts:
                    sink((), batch)
                    continue
                key = _single_key(batch, parts)
                if key is not None:  # the usual case (one cluster's rows): no filter copying every column
                    sink(key, batch.select(data_names))
                    continue
                keys = batch.select(parts).group_by(parts).aggregate([]).to_pylist()
                for key in keys:
                    mask = None
                    for c in parts:
                        m = pc.is_null(batch.column(c)) if key[c] is None else pc.equal(batch.column(c), key[c])
                        m = pc.fill_null(m, False)
                        mask = m if mask is None else pc.and_(mask, m)
                    sink(tuple(key[c] for c in parts), batch.filter(mask).select(data_names))
        finally:
            for entry in open_files.values():
                entry[1].close()
        out = {n: [] for n in FILE_SCHEMA.names}
        for values, (rel, _, stats) in open_files.items():
            st = os.stat(os.path.join(table_path, rel))
            out["path"].append(rel)
            out["size"].append(st.st_size)
            out["partition_values"].append(json.dumps(
                {c: (None if v is None else _partition_string(v)) for c, v in zip(parts, values)}))
            out["rows"].append(stats.rows)
            out["stats"].append(stats.json())
            out["modification_time"].append(int(time.time() * 1000))
        yield pa.RecordBatch.from_pydict(out, schema=FILE_SCHEMA)

    return run


def write_table(table_path: str, target: pa.Schema, parts: list[str], tag: str, constants: dict | None = None):
    """A task's writer of whole Arrow tables (a task that computes its rows in Python, e.g. the replay's core per
    bucket): ``write(table)`` adds the ``constants`` columns ({name: value}, e.g. the cluster), writes the rows
    as :func:`write_task` does and returns their FILE_SCHEMA rows as dicts."""
    constants = dict(constants or {})

    def write(table: pa.Table) -> list[dict]:
        for name, value in constants.items():
            index = pa.array(np.zeros(table.num_rows, np.int32))
            table = table.append_column(name, pa.array([value], target.field(name).type).take(index))
        out = []
        for batch in write_task(table_path, target, parts, tag)(iter([table])):
            out += batch.to_pylist()
        return out

    return write


# ------------------------------------------------------------------------------------------ memory
# how long a replay task's jemalloc keeps a page freed before it gives it back: long enough that the next batch of
# the scan or the next bucket reuses it (a fresh page costs 2 ms/MB on a VM whose host backs it on first touch: given
# back at once, a 1 M-partition replay's driver scan of bronze took 4.2 s instead of 1.9 and a replay task 21 s
# instead of 17), short enough that a bucket's pages are back while the next one runs
REPLAY_PAGES_KEPT_MS = 1000


def return_freed_memory(kept_ms: int = 0) -> None:
    """Arrow allocates from jemalloc, which gives freed pages back after ``kept_ms``, from here on in this process:
    pyarrow's default allocator (mimalloc) keeps the pages it frees for reuse, and after a million-partition audit's
    chunks that was 3-4 GB of RSS above what Arrow held (a replay task's scan: a gigabyte).  For the processes that
    hold whole tables (audit, plan, quality: at once, their peaks are near the 8 GiB budget; a full replay's tasks:
    :data:`REPLAY_PAGES_KEPT_MS`); the decoder keeps the default, faster for its many small buffers.  Without
    jemalloc in the build: the C library's malloc, which gives large blocks back at once."""
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
        pa.jemalloc_set_decay_ms(kept_ms)
    except NotImplementedError:
        pa.set_memory_pool(pa.system_memory_pool())


# ------------------------------------------------------------------------------------------ task reads
_WHERE = "__where"  # scan_task's column of its rows' ``where``


def scan_task(files: list[str], columns: list[str], where, dictionary: tuple[str, ...] = ()) -> "callable":
    """A task's reader of a table's data files (a local lake the executors see, as :func:`write_task`'s):
    ``read(keep)`` scans ``files`` for ``columns`` (those the files have; the others come back null), the rows
    matching ``where(pyarrow.dataset.field)`` (an expression, evaluated per batch by Arrow) and, of those,
    the rows ``keep(batch)`` marks (a NumPy mask over all of a batch's rows, ``where``'s or not, e.g. the task's
    own buckets): one pass, batch by batch, so a task holds its own rows only.  The ``dictionary`` columns come
    back dictionary-encoded (a file name or a record type per row is most of a task's strings).  A file it
    cannot open raises :class:`MissingDataFile` naming it: a worker that cannot see the lake fails loudly,
    never replays nothing."""

    def read(keep=None, split=None) -> pa.Table | list[pa.Table]:
        """With ``split`` = (n, masks) instead of ``keep``: n tables, the rows ``masks(batch)`` (n NumPy masks over
        a batch's rows) marks for each -- a task's buckets copied out of the scan's batches once, not its share
        copied and then each bucket's rows again (a sixth of a 1 M-partition replay task)."""
        import pyarrow.dataset as ds

        return_freed_memory(REPLAY_PAGES_KEPT_MS)  # the task then replays what it read: the scan's pages go back
        _require(files)
        fmt = ds.ParquetFileFormat(read_options=ds.ParquetReadOptions(dictionary_columns=list(dictionary)))
        data = _row_groups_of(ds.dataset(files, format=fmt), where(ds.field))
        have = [c for c in columns if c in data.schema.names]
        # with ``keep`` (a task's share of the most rows ``where`` chooses) ``where`` is one more, boolean column
        # and one filter of both copies the rows once: the scan's filter copied every chosen row, then ``keep``
        # copied a task's share again (a fifth of a 1 M-partition replay task's read).  Without, ``where`` is the
        # scan's filter, far cheaper when it chooses few rows: the cluster-level rows' data_json read in 2.8 s of
        # 16.5 M rows, 11 s as a column
        chosen = {c: ds.field(c) for c in have}
        if keep is not None:  # one mask: a split in one
            split = (1, lambda batch: [keep(batch)])
        if split is not None:
            chosen[_WHERE] = where(ds.field)
        out: list = []
        parts: list[list] = [[] for _ in range(split[0])] if split is not None else []
        # little read-ahead: Arrow's default decodes a dozen batches of several files ahead, gigabytes a task
        # then holds (its allocator keeps the pages) while it replays
        for batch in data.to_batches(columns=chosen, filter=None if split is not None else where(ds.field),
                                     batch_size=1 << 17, batch_readahead=2, fragment_readahead=1):
            if not batch.num_rows:
                continue
            if split is None:
                out.append(batch)
                continue
            mask = np.asarray(batch.column(len(have)).fill_null(False).to_numpy(zero_copy_only=False), bool)
            batch = batch.select(have)
            if mask.any():
                _split_rows(batch, [mask & m for m in split[1](batch)], parts)
        schema = pa.schema([data.schema.field(c) for c in have])
        # every column nullable, as Spark reads them: the callers join these rows with rows they make (nulls, an
        # if_else), and a bronze whose files declare columns not null (appended from Arrow rather than written by
        # Spark) would not concatenate with them
        nullable = pa.schema([f.with_nullable(True) for f in schema])

        def table_of(batches: list) -> pa.Table:
            table = pa.Table.from_batches(batches, schema=schema).cast(nullable)
            for c in columns:  # a column an older bronze table lacks: null (as Spark's read of it is)
                if c not in have:
                    table = table.append_column(c, pa.nulls(table.num_rows, pa.string()))
            return table.select(columns)

        if keep is not None:
            return table_of(parts[0])
        return [table_of(p) for p in parts] if split is not None else table_of(out)

    return read


def _require(files: list[str]) -> None:
    """Raise :class:`MissingDataFile` naming the first of ``files`` not on this machine's disk."""
    missing = [f for f in files if not os.path.exists(f)]
    if missing:
        raise MissingDataFile(f"{READ_ERROR}data file {missing[0]} is listed by the table's Delta log but not on "
                              f"this machine's disk ({len(missing)} of {len(files)} files): every executor must "
                              f"see the lake, and nothing but Delta may remove its files", missing[0])


def _split_rows(batch: pa.RecordBatch, masks: list[np.ndarray], parts: list[list]) -> None:
    """The rows of ``batch`` each of ``masks`` marks, onto the matching list of ``parts``: one take of every part's
    rows, part after part, each part a slice of it (a filter per part went over every column of the batch again for
    each: 10 against 7.5 ms a 128 k-row batch of a replay task's 8 buckets); the batch itself for a part that is all
    of it.  (The parts share the taken buffers until the last of them goes: a replay task holds all its buckets at
    its first one anyway.)"""
    rows = [np.flatnonzero(m) for m in masks]
    whole = [len(r) == batch.num_rows for r in rows]
    taken = [r for r, w in zip(rows, whole) if not w and len(r)]
    from controller_core.codec.arrowutil import from_numpy  # (pa.array would import pandas in the worker)

    copy = batch.take(from_numpy(np.concatenate(taken).astype(np.int64))) if taken else None
    at = 0
    for r, w, out in zip(rows, whole, parts):
        if w:
            out.append(batch)
        elif len(r):
            out.append(copy.slice(at, len(r)))
            at += len(r)


def row_group_bounds(files: list[str], columns: list[str]) -> list[tuple[str, int, dict]] | None:
    """(file, row group, {column: (min, max)}) of every row group of ``files``, from the Parquet footers alone (no
    data read); None when a row group lacks the bounds of one of ``columns`` (a writer that kept no statistics, a
    column null throughout): the caller then reads the column.  A file not on disk raises :class:`MissingDataFile`,
    as :func:`scan_task` does."""
    import pyarrow.dataset as ds

    _require(files)
    out = []
    for fragment in ds.dataset(files, format="parquet").get_fragments():
        fragment.ensure_complete_metadata()
        for group in fragment.row_groups:
            stats = group.statistics or {}
            if any(c not in stats or stats[c].get("min") is None for c in columns):
                return None
            out.append((fragment.path, group.id, {c: (stats[c]["min"], stats[c]["max"]) for c in columns}))
    return out


def read_row_groups(groups: list[tuple[str, int]], columns: list[str], where) -> pa.Table:
    """The rows of the given (file, row group)s matching ``where(pyarrow.dataset.field)``, ``columns`` only."""
    import pyarrow.dataset as ds

    _require([path for path, _ in groups])
    parts = []
    for path, group in groups:
        (fragment,) = ds.dataset([path], format="parquet").get_fragments()
        parts.append(fragment.subset(row_group_ids=[group]).to_table(columns=columns, filter=where(ds.field)))
    return pa.concat_tables(parts)


def _row_groups_of(data, where):
    """``data`` without the row groups whose Parquet statistics rule ``where`` out: a replay reads the log's
    segments and at most one snapshot, and bronze holds every snapshot ingested -- at 1 M partitions the five
    snapshots are 5 of the 16.5 M rows a replay task would otherwise decode only to drop them (a data file's
    ``source_file`` statistics name one log file: Spark's ingest writes each split of a log file on its own).
    ``where`` is still evaluated on the rows read: statistics only say which row groups may match.  The row groups
    are chosen on the files read plainly: with columns read as dictionaries (``scan_task``'s ``dictionary``), Arrow
    tests no statistics against ``where`` and kept every row group -- each replay task decoded every snapshot."""
    import pyarrow.dataset as ds

    plain = ds.dataset(data.files, format="parquet", filesystem=data.filesystem)
    fragments = []
    for fragment in plain.get_fragments():
        chosen = fragment.subset(filter=where)
        if chosen.num_row_groups:
            fragments.append(data.format.make_fragment(fragment.path, data.filesystem,
                                                       row_groups=[g.id for g in chosen.row_groups]))
    return ds.FileSystemDataset(fragments, data.schema, data.format, data.filesystem)
