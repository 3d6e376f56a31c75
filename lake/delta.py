"""The one module through which every job reads and writes Delta tables.

Two interchangeable backends, chosen once per `Lake`:

* ``delta-spark`` -- Delta's own Spark data source. Needs Delta's JVM jars on the
  classpath (a cluster / Databricks). Not available on the dev/CI machines: the jars
  cannot be downloaded there (no Maven access), see docs/stack-notes section 3.
* ``delta-rs`` -- Spark does the compute, the ``deltalake`` Python package (delta-rs)
  owns the transaction log. Works with a plain pip-installed pyspark.

Rules the delta-rs backend enforces, each learnt the hard way (stack-notes sections 4, 7):

* Reads go through the table's *current file list* (``DeltaTable.file_uris()``), never a
  directory read: a directory read also returns files an overwrite/delete logically
  removed (old rows "come back").
* Writes check the frame against the table schema *before* writing, because delta-rs
  silently casts on append (string "3" -> 3, float 1.7 -> 1).
* Timestamps are tz-aware UTC. One naive timestamp column makes delta-rs create the
  table at protocol 3/7 (``timestampNtz``), which older readers cannot open; new tables
  are checked to be at reader 1 / writer 2.
* Spark frames (``delta.spark_writes: executors``, the default): the Spark tasks write the table's data
  files themselves (:mod:`lake.files`, through ``mapInArrow``): straight into the table's folder, in its
  partition layout and exact Arrow schema, each with its Delta statistics; the driver collects one small row
  per file and commits them as add actions in ONE delta-rs write transaction (``create_write_transaction`` /
  ``create_table_with_add_actions``) -- it never reads a row.  An overwrite of a partition removes its files
  in the same transaction; an overwrite of the rows past an offset (``above``) removes the files whose
  statistics say every row is past it and rewrites, in the same tasks, the rows to keep of the files that
  hold both; ``merge_update`` rewrites only the files holding a matched row.  Before committing, the files
  the tasks reported must be there for the driver with their size and row count (footers only): an executor
  that cannot see the lake writes to its own disk, and the commit would silently lose its rows
  (StagedOutputError); after it, every file must be in the table with its rows (CommitCheckError).
* ``delta.spark_writes: driver`` keeps the previous path: the executors stage parquet under ``_staging`` and
  the driver streams it into ``write_deltalake`` batch by batch (every row through the driver), checked the
  same way against the rows the tasks counted.
* Staging folders are named ``<host>_<pid>_<uuid>``: a job killed mid-write leaves its folder, and the
  next job removes the folders of processes gone from this host (:meth:`Lake.clean_staging`) -- with an
  executor write's folder, the data files the tasks wrote under that uuid that no commit added (orphans:
  Delta never reads them).

Test hook (crash safety, README "Crash safety and concurrency"): every commit of this process is
numbered from 1.  ``KRAFT_AUDIT_CRASH_AFTER=<n>`` kills the process with SIGKILL right after its n-th
commit, ``KRAFT_AUDIT_CRASH_AFTER=staged:<n>`` right after the n-th commit's Spark output is written (and
checked) and before it is committed.  :func:`on_commit` registers an in-process callback instead (tests that copy the
lake at every commit point).  Never set in production.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.dataset as pads
from deltalake import DeltaTable, WriterProperties, write_deltalake
from deltalake.exceptions import DeltaError, DeltaProtocolError, TableNotFoundError
from deltalake import Schema as DeltaSchema

from lake.files import is_tagged
from lake.spark import delta_jvm_available

if TYPE_CHECKING:  # Spark is optional for read_arrow/append_arrow callers.
    from pyspark.sql import DataFrame, SparkSession

BACKENDS = ("auto", "delta-spark", "delta-rs")
# Who writes a Spark frame's data files with the delta-rs backend: the Spark tasks, straight into the table
# (the driver commits their file list), or the driver (it streams the tasks' staged parquet into delta-rs)
SPARK_WRITES = ("executors", "driver")
STAGING_DIR = "_staging"
INTENT = "intent.json"
# Table names are relative paths under the lake root ("records", "bronze/records").
# Leading "_" / "." are reserved (staging dir, hidden files), ".." cannot escape the root.
_TABLE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*(/[A-Za-z0-9][A-Za-z0-9_\-]*)*")
# Integer widening is the only type change accepted on write (e.g. a Spark literal 1 is
# an int but the column is a long). It is lossless; everything else must match exactly.
_INT_LADDER = ("byte", "short", "integer", "long")
# Batch size for streaming rows into delta-rs (staged parquet, Arrow tables): bounded driver memory.
_STREAM_BATCH_ROWS = 65_536
# row groups of 128 k rows: delta-rs buffers a whole row group before encoding it, and its default (a million
# rows) held 2 GB of a million-partition audit's findings at once
_WRITER = WriterProperties(max_row_group_size=2 * _STREAM_BATCH_ROWS, compression="SNAPPY")


class SchemaMismatchError(ValueError):
    """A frame does not match the schema of the table it is written to."""


class ProtocolError(RuntimeError):
    """A table was (or would be) created with an unexpected Delta protocol."""


class BackendError(RuntimeError):
    """The configured Delta backend cannot do what was asked (e.g. stage Spark output for a remote lake
    without delta-spark): the command cannot run."""


class DamagedTableError(RuntimeError):
    """A table whose Delta log cannot be read: a commit file in its ``_delta_log`` damaged or cut outside kraft-audit
    (said so when delta-rs could not parse it), or a store refusing it.  The job cannot run (exit 2, one line naming
    the folder)."""


def open_table(path: str, version: int | None = None) -> DeltaTable:
    """The delta-rs table at ``path`` (at ``version``); a log delta-rs cannot parse raised as DamagedTableError
    naming the table's log folder (delta-rs says only what it could not parse, not where)."""
    try:
        return DeltaTable(path) if version is None else DeltaTable(path, version=version)
    except DeltaError as exc:
        if isinstance(exc, (TableNotFoundError, DeltaProtocolError)):
            raise
        what = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        # a file of the log that does not parse is damage; anything else (a remote store's access, say) is not claimed
        damaged = re.search(r"json|parquet|parse|checkpoint", what, re.IGNORECASE) is not None
        hint = ("; a commit file damaged outside kraft-audit: restore it, or remove the table and run the job that "
                "writes it again") if damaged else ""
        raise DamagedTableError(f"the Delta log of table {Path(path).name} cannot be read ({what}){hint} "
                                f"({str(path).rstrip('/')}/_delta_log)") from exc


class StagedOutputError(RuntimeError):
    """The Spark tasks' staged output is not what the driver finds (missing, or another row count):
    nothing is committed."""

    def __init__(self, what: str, where: str):
        super().__init__(what)
        self.what, self.where = what, where

    def __str__(self) -> str:
        return f"{self.what} ({self.where})"


class CommitCheckError(StagedOutputError):
    """What a commit (or a job's commits) recorded is not what was written: the job fails (exit 2)."""


# ---------------------------------------------------------------------- commit points (test hook)
CRASH_ENV = "KRAFT_AUDIT_CRASH_AFTER"
_commits = {"n": 0}
_hooks: list = []


def on_commit(hook) -> None:
    """Call ``hook(n, stage, table)`` at every commit point of this process (``stage`` "staged": Spark's
    output is staged, not committed; "committed": commit ``n`` is in the table's log).  A test hook."""
    _hooks.append(hook)


def clear_hooks() -> None:
    _hooks.clear()


def commits() -> int:
    """How many commits this process made (the number of its last commit point)."""
    return _commits["n"]


def _commit_point(stage: str, table: str) -> None:
    n = _commits["n"] + (1 if stage == "staged" else 0)
    for hook in list(_hooks):
        hook(n, stage, table)
    want = os.environ.get(CRASH_ENV)
    if want and want == (str(n) if stage == "committed" else f"staged:{n}"):
        os.kill(os.getpid(), signal.SIGKILL)  # the test hook: die as a killed job dies, no cleanup


def _committed(table: str) -> None:
    _commits["n"] += 1
    _commit_point("committed", table)


class Lake:
    """Delta tables under one root directory, ``<root>/<table>``.

    ``spark`` may be None for callers that only use the Arrow methods
    (``read_arrow``, ``append_arrow``, ``version``, ``history``, ``exists``).
    """

    def __init__(self, root: str | Path, spark: SparkSession | None = None, backend: str = "auto",
                 spark_writes: str = "executors"):
        self.spark = spark
        self.root, self._local = _normalize_root(root)
        self.backend = _choose_backend(backend, spark)
        if spark_writes not in SPARK_WRITES:
            raise ValueError(f"spark_writes must be one of {SPARK_WRITES}, got {spark_writes!r}")
        self.spark_writes = spark_writes

    @classmethod
    def from_config(cls, config: dict, spark: SparkSession | None = None) -> Lake:
        """Lake at ``config["lake"]`` with backend ``config["delta"]["backend"]`` (and, for delta-rs,
        ``config["delta"]["spark_writes"]``)."""
        return cls(config["lake"], spark, backend=config["delta"]["backend"],
                   spark_writes=config["delta"].get("spark_writes", "executors"))

    def __repr__(self) -> str:
        return f"Lake({self.root!r}, backend={self.backend!r})"

    # ------------------------------------------------------------------ metadata

    def path(self, table: str) -> str:
        if not isinstance(table, str) or not _TABLE_NAME.fullmatch(table):
            raise ValueError(
                f"invalid table name {table!r}: use letters, digits, '_' and '-', "
                "optionally nested with '/', not starting with '_' or '.'"
            )
        return f"{self.root}/{table}"

    def exists(self, table: str) -> bool:
        if self.backend == "delta-spark":
            from delta.tables import DeltaTable as SparkDeltaTable

            return bool(SparkDeltaTable.isDeltaTable(self.spark, self.path(table)))
        return DeltaTable.is_deltatable(self.path(table))

    def column_names(self, table: str) -> list[str]:
        """The columns of an existing table, from its metadata (no data file is read)."""
        if self.backend == "delta-spark":
            return list(self.read(table).columns)
        return list(pa.schema(open_table(self.path(table)).schema().to_arrow()).names)

    def version(self, table: str) -> int:
        """Latest committed version (0 for a freshly created table)."""
        if self.backend == "delta-spark":
            return int(self._spark_delta_table(table).history(1).first()["version"])
        return open_table(self.path(table)).version()

    def history(self, table: str) -> list[dict[str, Any]]:
        """Commit info dicts, newest first (each has at least "version" and "operation")."""
        if self.backend == "delta-spark":
            rows = self._spark_delta_table(table).history().collect()
            return [r.asDict(recursive=True) for r in rows]
        return open_table(self.path(table)).history()

    def count(self, table: str, where: dict[str, str] | None = None, version: int | None = None) -> int:
        """Rows of ``table`` (at ``version``) in the partition ``where`` ({partition column: value}), from the
        row counts the Delta log keeps per file (delta-rs: no data file read; files without the count are
        read)."""
        dt = open_table(self.path(table), version=version)
        actions = pa.table(dt.get_add_actions(flatten=True)).to_pydict()
        n, unknown = 0, False
        for i in range(len(actions.get("path", []))):
            if where and any(str(actions.get(f"partition.{k}", [None] * (i + 1))[i]) != str(v) for k, v in where.items()):
                continue
            rows = actions.get("num_records", [None] * (i + 1))[i]
            if rows is None:
                unknown = True
                break
            n += int(rows)
        if unknown:
            flt = [(k, "=", v) for k, v in (where or {}).items()] or None
            cols = [next(iter(where))] if where else None
            return dt.to_pyarrow_table(columns=cols, filters=flt).num_rows
        return n

    def count_matching(self, table: str, where: dict[str, str], condition: Callable[[Callable], Any]) -> int:
        """Rows of the ``where`` partition ({partition column: value}) matching ``condition(column)``, an expression
        built from ``column(name)`` alone (e.g. ``lambda c: c("severity") == "ERROR"``): counted by Arrow over the
        table's files, streamed, when this process sees them (:meth:`tasks_write_files`), else by a Spark job."""
        if self.tasks_write_files():
            import pyarrow.dataset as ds

            files = self.data_files(table, None, where)
            if not files:
                return 0
            return ds.dataset(files, format="parquet").count_rows(filter=condition(ds.field))
        from pyspark.sql import functions as F

        df = self.read(table)
        for k, v in where.items():
            df = df.where(F.col(k) == v)
        return df.where(condition(F.col)).count()

    def partitions(self, table: str) -> list[dict[str, str]]:
        """Partition values of the table's current files, e.g. ``[{"cluster": "c1"}, ...]``: read from the
        Delta log alone (delta-rs), so it costs no data file and no Spark."""
        return open_table(self.path(table)).partitions()

    # ------------------------------------------------------------------ reads

    def read(self, table: str, version: int | None = None) -> DataFrame:
        """The table (or a past ``version`` of it) as a Spark DataFrame."""
        spark = self._require_spark()
        path = self.path(table)
        if self.backend == "delta-spark":
            reader = spark.read.format("delta")
            if version is not None:
                reader = reader.option("versionAsOf", version)
            return reader.load(path)

        from pyspark.sql.pandas.types import from_arrow_schema

        dt = open_table(path, version=version)
        schema = from_arrow_schema(pa.schema(dt.schema().to_arrow()))
        files = dt.file_uris()  # exactly the files of that version
        if not files:
            return spark.createDataFrame([], schema)
        # Explicit schema: no type inference from partition folder names.
        # basePath: otherwise the partition columns (only in folder names) are dropped.
        df = spark.read.schema(schema).option("basePath", path).parquet(*files)
        return df.select(*schema.fieldNames())  # Spark moves partition columns last

    def read_arrow(
        self,
        table: str,
        version: int | None = None,
        columns: Sequence[str] | None = None,
        filters: Any = None,
    ) -> pa.Table:
        """The table as a pyarrow Table via delta-rs; no Spark needed.

        ``filters`` uses the deltalake/pyarrow DNF form, e.g. ``[("part", "=", "a")]``.
        """
        dt = open_table(self.path(table), version=version)
        return dt.to_pyarrow_table(columns=list(columns) if columns else None, filters=filters)

    # ------------------------------------------------------------------ writes

    def append(self, table: str, df: DataFrame, partition_by: str | Sequence[str] | None = None) -> int:
        """Append a Spark DataFrame (creating the table if needed); returns the new version."""
        if self._executor_writes():
            return self._write_files(table, df, "append", partition_by)
        return self._write_spark(table, df, "append", partition_by)

    def overwrite(self, table: str, df: DataFrame, partition_by: str | Sequence[str] | None = None,
                  where: dict[str, str] | None = None, above: dict[str, int] | None = None) -> int:
        """Replace the table's rows (schema and partitioning are kept); returns the new version.

        ``where`` ({partition column: value}) replaces only those rows, e.g. one cluster's, leaving
        the other clusters sharing the table untouched; ``above`` ({column: n}) narrows it to the rows
        whose column is greater than n (any column: e.g. the offsets an incremental replay covers, so a
        re-run replaces what a killed run appended instead of appending it twice).  Older versions stay
        readable via ``read(table, version=...)`` until vacuumed.
        """
        from pyspark.sql import functions as F

        predicate = None
        if where or above:
            where, above = dict(where or {}), dict(above or {})
            if any("'" in str(v) for v in where.values()):
                raise ValueError(f"quote in a partition value: {where}")
            q = "`" if self.backend == "delta-spark" else '"'  # Spark SQL / DataFusion identifier quotes
            predicate = " AND ".join([f"{q}{k}{q} = '{v}'" for k, v in where.items()]
                                     + [f"{q}{k}{q} > {int(v)}" for k, v in above.items()])
            cond = None
            for k, v in where.items():
                cond = (F.col(k) == v) if cond is None else cond & (F.col(k) == v)
            for k, v in above.items():
                cond = (F.col(k) > int(v)) if cond is None else cond & (F.col(k) > int(v))
            df = df.where(cond)  # only rows of the replaced part may be written
            if not self.exists(table):
                predicate, where, above = None, None, None  # a new table: a plain write creates it
        if self._executor_writes():
            return self._write_files(table, df, "overwrite", partition_by, where or None, above or None)
        return self._write_spark(table, df, "overwrite", partition_by, predicate)

    def overwrite_arrow(self, table: str, data: pa.Table, partition_by: str | Sequence[str] | None = None,
                        where: dict[str, str] | None = None) -> int:
        """Replace the rows matching ``where`` ({column: value or list of values}, any columns) with
        ``data``, without Spark (always through delta-rs); ``data`` must only hold rows matching it."""
        predicate = None
        if where:
            values = {k: v if isinstance(v, (list, tuple)) else [v] for k, v in where.items()}
            if any("'" in str(x) for vs in values.values() for x in vs):
                raise ValueError(f"quote in a value: {where}")
            predicate = " AND ".join(f"{k} = '{vs[0]}'" if len(vs) == 1 else
                                     f"{k} IN ({', '.join(repr(str(x)) for x in vs)})" for k, vs in values.items())
        target, parts, is_new = self._plan(table, data.schema, _as_list(partition_by))
        # bounded batches: the conformed copy of one batch exists at a time, not of a whole table of findings
        batches = data.to_batches(max_chunksize=_STREAM_BATCH_ROWS)
        return self._commit(table, target, parts, is_new, batches, "overwrite", None if is_new else predicate)

    def overwrite_rows(self, table: str, data: pa.Table, partition_by: str | Sequence[str] | None = None,
                       where: dict[str, str] | None = None) -> int:
        """:meth:`overwrite` of a few rows the driver holds (e.g. a replay's broker and quorum timelines), typed as a
        Spark frame of them is: committed here through delta-rs when this lake's Spark writes are anyway
        (:meth:`tasks_write_files`; no Spark job for a few hundred rows), else written through Spark.  The table
        is the same either way."""
        from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema

        typed = from_arrow_schema(data.schema)
        if self.tasks_write_files():
            return self.overwrite_arrow(table, data.cast(to_arrow_schema(typed, timezone="UTC")), partition_by, where)
        spark = self._require_spark()
        df = spark.createDataFrame(data) if data.num_rows else spark.createDataFrame([], typed)
        return self.overwrite(table, df, partition_by, where)

    def replace_schema(self, table: str, data: pa.Table) -> int:
        """Rewrite a whole table with ``data`` under ``data``'s schema (a catalog change to an existing table:
        new columns).  Keeps the table's partitioning."""
        path = self.path(table)
        parts = list(open_table(path).metadata().partition_columns)
        write_deltalake(path, data, mode="overwrite", schema_mode="overwrite", partition_by=parts or None)
        _committed(table)
        return open_table(path).version()

    def merge_update(self, table: str, source: DataFrame, on: Sequence[str], columns: Sequence[str],
                     where: dict[str, str], condition: str | None = None) -> int:
        """Set ``columns`` of the target rows matching a ``source`` row on ``on`` (within the
        ``where`` partition, and ``condition`` on the target, in SQL over alias ``t``): a Delta
        MERGE ... WHEN MATCHED UPDATE.  Source rows without a match change nothing.  Used by the
        incremental replay to close the valid-to of the states a new segment supersedes."""
        if any("'" in str(v) for v in where.values()):
            raise ValueError(f"quote in a partition value: {where}")
        cond = [f"t.{k} = '{v}'" for k, v in where.items()] + [f"t.{k} = s.{k}" for k in on]
        if condition:
            cond.append(condition)
        predicate = " AND ".join(cond)
        updates = {c: f"s.{c}" for c in columns}
        source = source.select(*on, *columns)
        if self._executor_writes():
            return self._merge_files(table, source, on, columns, where, condition)
        if self.backend == "delta-spark":
            (self._spark_delta_table(table).alias("t").merge(source.alias("s"), predicate)
             .whenMatchedUpdate(set=updates).execute())
            _committed(table)
            return self.version(table)
        data = source.toArrow()
        if data.num_rows == 0:
            return self.version(table)
        dt = open_table(self.path(table))
        target = pa.schema(dt.schema().to_arrow())
        data = data.cast(pa.schema([target.field(n) for n in data.column_names]), safe=True)
        (dt.merge(source=data, predicate=predicate, source_alias="s", target_alias="t")
         .when_matched_update(updates=updates).execute())
        _committed(table)
        return open_table(self.path(table)).version()

    def _merge_files(self, table: str, source: DataFrame, on: Sequence[str], columns: Sequence[str],
                     where: dict[str, str], condition: str | None) -> int:
        """:meth:`merge_update` as a file-level rewrite in the executors: the files of the ``where`` partition
        holding a matched row are read by the Spark tasks, their rows written again with ``columns`` set from
        the matching source row, and one commit removes them and adds the new files.  The driver collects the
        names of the matched files, never a row.  Nothing matched: no commit."""
        from functools import reduce

        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        path = self.path(table)
        dt = open_table(path)
        target = pa.schema(dt.schema().to_arrow())
        parts = list(dt.metadata().partition_columns)
        files, _ = _replaced_files(dt, where, {})  # every file of the partition
        if not files:
            return dt.version()
        rows = (self._require_spark().read.schema(from_arrow_schema(target)).option("basePath", path)
                .parquet(*[f"{path}/{f['path']}" for f in files])
                .select(*target.names, F.col("_metadata.file_path").alias("_file")).alias("t"))
        s = source.withColumn("_matched", F.lit(True)).alias("s")
        cond = ([F.col(f"t.{k}") == F.lit(v) for k, v in where.items()]
                + [F.col(f"t.{k}") == F.col(f"s.{k}") for k in on] + ([F.expr(condition)] if condition else []))
        match = reduce(lambda a, b: a & b, cond)
        hit = {r["_file"] for r in rows.join(s, match, "left_semi").select("_file").distinct().collect()}
        from urllib.parse import unquote

        plain = {unquote(u) for u in hit}
        affected = [f for f in files if any(u.endswith("/" + f["path"]) for u in plain)]
        if not affected:
            return dt.version()
        touched = rows.where(F.col("t._file").isin(sorted(hit))).join(s, match, "left")
        out = touched.select(*[(F.when(F.col("s._matched"), F.col(f"s.{c}")).otherwise(F.col(f"t.{c}"))
                                if c in columns else F.col(f"t.{c}")).alias(c) for c in target.names])
        held = _file_rows(dt)
        expect = sum(int(held[f["path"]]) for f in affected) if all(held.get(f["path"]) is not None
                                                                    for f in affected) else None
        return self._commit_files(table, path, out, target, parts, False, "append", False, affected, expect)

    def data_files(self, table: str, version: int | None = None, where: dict[str, str] | None = None) -> list[str]:
        """The data files of ``table`` (at ``version``) in the partitions matching ``where``: what a job's own
        tasks read when they see the lake (:meth:`tasks_write_files`)."""
        import warnings

        filters = [(k, "=", v) for k, v in (where or {}).items()] or None
        with warnings.catch_warnings():  # partition_filters: deprecated in favour of a predicate, same result
            warnings.simplefilter("ignore", DeprecationWarning)
            return list(open_table(self.path(table), version=version).file_uris(partition_filters=filters))

    def tasks_write_files(self) -> bool:
        """Whether Spark tasks write this lake's data files themselves (:meth:`append_written`)."""
        return self._executor_writes() and self._local

    def append_written(self, table: str, source: pa.Schema, partition_by: str | Sequence[str] | None,
                       run: Callable[[str, pa.Schema, list[str], str], tuple[list, Any]],
                       commit_if: Callable[[Any], bool] = lambda extra: True) -> tuple[int | None, Any]:
        """Append rows that a job's own Spark tasks write into the table (only when :meth:`tasks_write_files`):
        ``run(table path, target schema, partition columns, tag)`` runs them -- each writes its files with
        :func:`lake.files.write_task` under ``tag`` -- and returns (their file rows, anything else the job's
        tasks reported).  ``commit_if(that)`` decides whether they are committed (one add commit, checked as
        every executor write is); files not committed are removed.  Returns (the new version or None, that)."""
        versions, extra = self._tasks_commit([(table, source, partition_by)], _one_table(run), commit_if, None)
        return (versions[0] if versions else None), extra

    def overwrite_written(self, table: str, source: pa.Schema, partition_by: str | Sequence[str] | None,
                          where: dict[str, str], run: Callable[[str, pa.Schema, list[str], str], tuple[list, Any]]
                          ) -> tuple[int, Any]:
        """Replace the ``where`` partition's rows ({partition column: value}, e.g. one cluster's) with rows the
        job's own Spark tasks write into the table (only when :meth:`tasks_write_files`): ``run`` as for
        :meth:`append_written`; one commit adds their files and removes the partition's old ones.  Returns (the
        new version, what the tasks reported besides their files)."""
        versions, extra = self.overwrite_written_tables([(table, source, partition_by)], where, _one_table(run))
        return versions[0], extra

    def overwrite_written_tables(self, tables: Sequence[tuple[str, pa.Schema, str | Sequence[str] | None]],
                                 where: dict[str, str], run: Callable[[list], tuple[list, Any]]
                                 ) -> tuple[list[int], Any]:
        """:meth:`overwrite_written` of several tables whose rows one Spark job's tasks write together (e.g. the
        replay's history and the latest state, both from the core's tasks): ``tables`` as (name, source schema,
        partition columns); ``run([(table path, target schema, partition columns, tag) per table])`` returns
        ([file rows per table], anything else).  One commit per table, in the order given (Delta commits one
        table at a time); a failure before a table's commit leaves that table as it was and removes its files.
        Returns ([the new versions], that)."""
        return self._tasks_commit(tables, run, lambda extra: True, where)

    def _tasks_commit(self, tables, run, commit_if, where: dict[str, str] | None):
        """:meth:`append_written` (``where`` None) and :meth:`overwrite_written_tables`: plan each table, run the
        tasks under a job tag per table, commit their files (and, with ``where``, remove the partition's old
        ones) or drop them."""
        self._require_spark()
        plans, jobs = [], []
        try:
            for table, source, partition_by in tables:
                target, parts, is_new = self._plan(table, source, _as_list(partition_by))
                if where and any(k not in parts for k in where):
                    raise ValueError(f"table {table}: {sorted(where)} must be partition columns to be replaced "
                                     "by files")
                path = self.path(table)
                jobs.append(_Job(Path(self.root), table, -1 if is_new else open_table(path).version()))
                plans.append((table, path, target, parts, is_new))
            written, extra = run([(path, target, parts, job.tag)
                                  for (_, path, target, parts, _), job in zip(plans, jobs)])
            if not commit_if(extra):
                return None, extra
            versions = []
            for (table, path, target, parts, is_new), files in zip(plans, written):
                removes = _replaced_files(open_table(path), where, {})[0] if where and not is_new else []
                versions.append(self._commit_written(table, path, files, target, parts, is_new, False, removes))
            return versions, extra
        finally:
            for job in jobs:
                job.close()

    def append_arrow(
        self,
        table: str,
        data: pa.Table | pa.RecordBatchReader,
        partition_by: str | Sequence[str] | None = None,
    ) -> int:
        """Append Arrow data without Spark (always through delta-rs); returns the new version."""
        if isinstance(data, pa.Table):
            reader = data.to_reader()
        elif isinstance(data, pa.RecordBatchReader):
            reader = data
        else:
            reader = pa.RecordBatchReader.from_stream(data)  # any Arrow C stream producer
        target, parts, is_new = self._plan(table, reader.schema, _as_list(partition_by))
        return self._commit(table, target, parts, is_new, reader, "append")

    # ------------------------------------------------------------------ crash leftovers

    def clean_staging(self, stale_after_s: float = 86400.0) -> list[str]:
        """Remove the staging folders killed jobs left (``_staging/<host>_<pid>_<uuid>``): those of a process
        gone from this host, and any (another host's, or named before pids were) older than ``stale_after_s``.
        Returns the folders removed.  A live job's folder is never touched.

        A folder of an executor write (``intent.json``) also names the data files its tasks wrote into a
        table: those no commit of the table added after the version it started from are removed with it
        (Delta never reads them; this keeps them from piling up)."""
        if not self._local:
            return []
        base = Path(self.root) / STAGING_DIR
        if not base.is_dir():
            return []
        removed = []
        for d in sorted(base.iterdir()):
            m = re.fullmatch(r"(.+)_(\d+)_[0-9a-f]{32}", d.name)
            try:
                age = time.time() - d.stat().st_mtime
            except FileNotFoundError:
                continue
            if m and m.group(1) == _HOST:
                gone = not _pid_alive(int(m.group(2)))
            else:
                gone = age > stale_after_s
            if gone:
                _orphans_of(Path(self.root), d)
                shutil.rmtree(d, ignore_errors=True)
                removed.append(str(d))
        try:
            base.rmdir()
        except OSError:
            pass
        return removed

    # ------------------------------------------------------------------ internals

    def _require_spark(self) -> SparkSession:
        if self.spark is None:
            raise RuntimeError("this Lake was created without a SparkSession; use read_arrow/append_arrow")
        return self.spark

    def _spark_delta_table(self, table: str):
        from delta.tables import DeltaTable as SparkDeltaTable  # lazy: delta-spark backend only

        return SparkDeltaTable.forPath(self._require_spark(), self.path(table))

    # ---------------------------------------------------------- executors write, the driver commits the list

    def _executor_writes(self) -> bool:
        return self.backend == "delta-rs" and self.spark_writes == "executors"

    def _write_files(self, table: str, df: DataFrame, mode: str, partition_by, where: dict | None = None,
                     above: dict | None = None) -> int:
        """A Spark frame written by the Spark tasks into the table's folder (:mod:`lake.files`) and committed by
        the driver in one delta-rs write transaction of their add actions; no row goes through the driver.

        ``overwrite`` without ``where``/``above`` replaces the whole table; with them it removes the files of
        the ``where`` partition whose rows all match ``above`` ({column: n}: column > n) and rewrites the files
        holding both kinds of rows (their rows outside ``above`` are written again by the same tasks), all in
        the same commit."""
        from pyspark.sql.pandas.types import to_arrow_schema

        self._require_spark()
        if not self._local:
            raise BackendError(
                f"the delta-rs backend writes Spark output on the local filesystem; {self.root!r} "
                "is not local (use the delta-spark backend for remote lakes)"
            )
        source = to_arrow_schema(df.schema, timezone="UTC")
        target, parts, is_new = self._plan(table, source, _as_list(partition_by))
        path = self.path(table)
        removes: list[dict] = []
        if mode == "overwrite" and not is_new and (where or above):
            removes, mixed = _replaced_files(open_table(path), where or {}, above or {})
            if mixed:  # their rows outside the replaced part stay: written again into new files
                df = df.unionByName(self._kept_rows(path, target, mixed, above or {}))
        whole = mode == "overwrite" and not is_new and not (where or above)
        return self._commit_files(table, path, df, target, parts, is_new, mode, whole, removes)

    def _kept_rows(self, path: str, target: pa.Schema, mixed: list[dict], above: dict) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = from_arrow_schema(target)
        uris = [f"{path}/{f['path']}" for f in mixed]
        rows = self._require_spark().read.schema(schema).option("basePath", path).parquet(*uris)
        replaced = None
        for k, v in above.items():
            c = F.col(k) > int(v)
            replaced = c if replaced is None else replaced & c
        return rows.where(~F.coalesce(replaced, F.lit(False))).select(*target.names)

    def _commit_files(self, table: str, path: str, df: DataFrame, target: pa.Schema, parts: list[str],
                      is_new: bool, mode: str, whole: bool, removes: list[dict], expect_rows: int | None = None) -> int:
        """Run the write tasks, check their files from the driver (footers only), commit their add actions and
        ``removes`` in one transaction (``whole``: an overwrite of the whole table), check the commit."""
        from lake import files as LF

        job = _Job(Path(self.root), table, -1 if is_new else open_table(path).version())
        try:
            written = _run_tasks(df.mapInArrow(LF.write_task(path, target, parts, job.tag), LF.FILE_DDL))
            return self._commit_written(table, path, written, target, parts, is_new, whole, removes, expect_rows)
        finally:
            job.close()

    def _commit_written(self, table: str, path: str, written: list, target: pa.Schema, parts: list[str],
                        is_new: bool, whole: bool, removes: list[dict], expect_rows: int | None = None) -> int:
        from deltalake.transaction import AddAction, RemoveAction, create_table_with_add_actions

        reported = sum(int(r.rows) for r in written)
        _found(table, path, written, reported)
        if expect_rows is not None and reported != expect_rows:
            raise CommitCheckError(f"table {table}: the rewrite of {len(removes)} files wrote {reported} rows "
                                   f"but they hold {expect_rows} (a target row matched twice?)", path)
        _commit_point("staged", table)
        adds = [AddAction(path=r.path, size=int(r.size), partition_values=json.loads(r.partition_values),
                          modification_time=int(r.modification_time), data_change=True, stats=r.stats)
                for r in written]
        now = int(time.time() * 1000)
        rms = [RemoveAction(path=f["path"], data_change=True, deletion_timestamp=now, size=f["size"],
                            partition_values=f["partition_values"]) for f in removes]
        if is_new:
            # "append" whatever the mode: a table another job created meanwhile (another cluster's rows)
            # is added to, never replaced
            create_table_with_add_actions(path, DeltaSchema.from_arrow(target), adds, mode="append",
                                          partition_by=parts or None)
        else:
            open_table(path).create_write_transaction(adds + rms, mode="overwrite" if whole else "append",
                                                      schema=DeltaSchema.from_arrow(target),
                                                      partition_by=parts or None)
        _committed(table)
        dt = open_table(path)
        _check_added(table, path, dt, written)
        if is_new:
            proto = dt.protocol()
            if (proto.min_reader_version, proto.min_writer_version) != (1, 2):
                raise ProtocolError(
                    f"table {table!r} was created with protocol {proto}; expected reader 1 / writer 2")
        return dt.version()

    def _write_spark(self, table: str, df: DataFrame, mode: str, partition_by, predicate: str | None = None) -> int:
        self._require_spark()
        parts = _as_list(partition_by)
        if self.backend == "delta-spark":
            writer = df.write.format("delta").mode(mode)
            if predicate:
                writer = writer.option("replaceWhere", predicate)
            if parts:
                writer = writer.partitionBy(*parts)
            writer.save(self.path(table))
            _committed(table)
            return self.version(table)

        from pyspark.sql.pandas.types import to_arrow_schema

        if not self._local:
            raise BackendError(
                f"the delta-rs backend stages Spark output on the local filesystem; {self.root!r} "
                "is not local (use the delta-spark backend for remote lakes)"
            )
        # Schema check first: fail before Spark spends time writing anything.
        # TimestampType -> timestamp[us, tz=UTC]: Delta timestamps are UTC instants.
        source = to_arrow_schema(df.schema, timezone="UTC")
        target, parts, is_new = self._plan(table, source, parts)

        from pyspark.sql import Observation
        from pyspark.sql import functions as F

        staging = Path(self.root) / STAGING_DIR / f"{_HOST}_{os.getpid()}_{uuid.uuid4().hex}"
        try:
            written = Observation()  # the rows the tasks wrote, counted by the tasks themselves
            df.observe(written, F.count(F.lit(1)).alias("rows")).write.parquet(str(staging))
            dataset = _staged(table, staging, int(written.get["rows"]))
            _commit_point("staged", table)
            batches: Iterable[pa.RecordBatch] = () if dataset is None else dataset.to_batches(
                batch_size=_STREAM_BATCH_ROWS, batch_readahead=2, fragment_readahead=1
            )
            return self._commit(table, target, parts, is_new, batches, mode, predicate)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            try:
                staging.parent.rmdir()  # only succeeds when no other write is staging
            except OSError:
                pass

    def _add_declared_columns(self, table: str, dt: DeltaTable, source: pa.Schema, target: pa.Schema) -> pa.Schema:
        """A table written by an earlier version lacks the columns a later one declared (e.g.
        ``broker_state_history.cordoned_log_dirs``): add those the frame carries and the catalog declares for
        ``table`` -- nullable, a metadata-only commit (older files read as null) -- so the write goes on.  A
        column the catalog does not declare stays a SchemaMismatchError."""
        from lake import catalog

        declared = catalog.BY_NAME.get(table)
        if declared is None:
            return target
        known = set(declared.schema.names)
        new = [f for f in source if f.name not in target.names and f.name in known]
        if not new:
            return target
        dt.alter.add_columns(DeltaSchema.from_arrow(pa.schema([f.with_nullable(True) for f in new])).fields)
        _committed(table)
        return pa.schema(open_table(self.path(table)).schema().to_arrow())

    def _plan(
        self, table: str, source: pa.Schema, partition_by: list[str]
    ) -> tuple[pa.Schema, list[str], bool]:
        """Decide the target schema/partitioning and reject incompatible frames early."""
        path = self.path(table)
        if DeltaTable.is_deltatable(path):
            dt = open_table(path)
            target = pa.schema(dt.schema().to_arrow())
            existing_parts = list(dt.metadata().partition_columns)
            if partition_by and partition_by != existing_parts:
                raise SchemaMismatchError(
                    f"table {table!r} is partitioned by {existing_parts}, not {partition_by}"
                )
            target = self._add_declared_columns(table, dt, source, target)
            _check_compatible(source, target, table)
            return target, existing_parts, False

        types = delta_types(source)
        naive = [n for n, t in types.items() if "timestamp_ntz" in json.dumps(t)]
        if naive:
            raise ProtocolError(
                f"cannot create table {table!r}: column(s) {naive} hold timezone-naive timestamps, "
                "which would create the table at protocol 3/7 (timestampNtz). Use UTC "
                "timestamps: Spark TimestampType with session TZ UTC, or pa.timestamp('us', tz='UTC')."
            )
        missing = [c for c in partition_by if c not in source.names]
        if missing:
            raise SchemaMismatchError(f"partition column(s) {missing} not in the frame's columns {source.names}")
        return source, partition_by, True

    def _commit(
        self,
        table: str,
        target: pa.Schema,
        parts: list[str],
        is_new: bool,
        batches: Iterable[pa.RecordBatch],
        mode: str,
        predicate: str | None = None,
    ) -> int:
        path = self.path(table)
        errors: list[BaseException] = []
        streamed = [0]

        def conform() -> Iterator[pa.RecordBatch]:
            # Reorder by name and cast: only representation changes are left at this point
            # (list child names, int widening, timestamp unit); safe=True rejects any loss.
            try:
                for batch in batches:
                    streamed[0] += batch.num_rows
                    yield batch.select(target.names).cast(target, safe=True)
            except BaseException as exc:  # surfaced through delta-rs as a generic error
                errors.append(exc)
                raise

        reader = pa.RecordBatchReader.from_batches(target, conform())
        before = -1 if is_new else open_table(path).version()
        try:
            write_deltalake(path, reader, mode=mode, partition_by=parts or None, predicate=predicate,
                            writer_properties=_WRITER)
        except Exception as exc:
            if errors:  # re-raise the real cause (e.g. ArrowInvalid), not delta-rs' wrapper
                raise errors[0] from exc
            raise
        dt = open_table(path)
        _committed(table)
        # the commit's own metrics (when no other writer committed since: another cluster sharing the table)
        added = (((dt.history(1) or [{}])[0].get("operationMetrics") or {}).get("num_added_rows")
                 if dt.version() == before + 1 else None)
        if added is not None and int(added) != streamed[0]:
            raise CommitCheckError(f"table {table}: {streamed[0]} rows were written but version {dt.version()} "
                                   f"records {added} added rows", path)
        if is_new:
            proto = dt.protocol()
            if (proto.min_reader_version, proto.min_writer_version) != (1, 2):
                raise ProtocolError(
                    f"table {table!r} was created with protocol {proto}; expected reader 1 / writer 2"
                )
        return dt.version()


# ---------------------------------------------------------------------- helpers


def _staged(table: str, staging: Path, reported: int) -> pads.Dataset | None:
    """The staged parquet files the driver sees (None: no file), checked against the ``reported`` rows
    the tasks wrote; StagedOutputError when the folder is missing or holds another number of rows."""
    hint = ("the executors wrote where the driver cannot read: the lake must be on storage the driver "
            "and every executor share (a shared file system or an object store)")
    if not staging.is_dir():
        raise StagedOutputError(f"table {table}: the Spark tasks wrote {reported} rows but their staged output is "
                                f"missing on the driver; {hint}", str(staging))
    files = sorted(p for p in staging.iterdir() if p.suffix == ".parquet" and not p.name.startswith((".", "_")))
    dataset = pads.dataset(files, format="parquet") if files else None
    seen = dataset.count_rows() if dataset is not None else 0  # parquet footers only
    if seen != reported:
        raise StagedOutputError(f"table {table}: the Spark tasks wrote {reported} rows but the driver finds {seen} "
                                f"in their staged output; {hint}", str(staging))
    return dataset


def _run_tasks(files: DataFrame) -> list:
    """Collect the write tasks' file rows; a task's RowError (a null in a non-nullable column, a lossy cast)
    comes back as the ValueError it is, not as Spark's wrapper."""
    from pyspark.errors import PythonException

    from lake.files import ROW_ERROR

    try:
        return files.collect()
    except PythonException as exc:
        m = re.search(re.escape(ROW_ERROR) + r"(.*)", str(exc))
        if m:
            raise ValueError(m.group(1).strip()) from exc
        m = re.search(r"pyarrow\.lib\.ArrowInvalid: (.*)", str(exc))
        if m:
            raise ValueError(m.group(1).strip()) from exc
        raise


def _found(table: str, path: str, written: list, reported: int) -> None:
    """The files the write tasks report must be there for the driver, with the size and rows they report
    (their parquet footers: no data read); StagedOutputError otherwise, before anything is committed."""
    import pyarrow.parquet as pq

    hint = ("the executors wrote where the driver cannot read: the lake must be on storage the driver "
            "and every executor share (a shared file system or an object store)")
    seen = 0
    for r in written:
        full = os.path.join(path, r.path)
        try:
            if os.stat(full).st_size != int(r.size):
                continue
            seen += pq.read_metadata(full).num_rows
        except (OSError, pa.ArrowInvalid):
            continue
    if seen != reported:
        raise StagedOutputError(f"table {table}: the Spark tasks wrote {reported} rows but the driver finds {seen} "
                                f"in the files they wrote; {hint}", path)


def _check_added(table: str, path: str, dt: DeltaTable, written: list) -> None:
    """After the commit: every file the tasks wrote is in the table with the rows they wrote (CommitCheckError)."""
    rows = _file_rows(dt)
    for r in written:
        if rows.get(r.path) != int(r.rows):
            raise CommitCheckError(f"table {table}: the tasks wrote {r.rows} rows to {r.path} but version "
                                   f"{dt.version()} records {rows.get(r.path)}", path)


def _file_rows(dt: DeltaTable) -> dict[str, int | None]:
    """{path relative to the table, as on disk: rows} of the table's files (the log holds the paths
    percent-encoded)."""
    from urllib.parse import unquote

    acts = pa.table(dt.get_add_actions(flatten=True)).select(["path", "num_records"]).to_pydict()
    return {unquote(p): n for p, n in zip(acts["path"], acts["num_records"])}


def _replaced_files(dt: DeltaTable, where: dict, above: dict) -> tuple[list[dict], list[dict]]:
    """The table's files an overwrite of the ``where`` partition's rows whose ``above`` columns are all greater
    than their n replaces: (files whose every row is replaced: removed, files holding replaced and kept rows:
    rewritten), each {"path", "size", "partition_values"}, from the Delta log's statistics alone (a file
    without them counts as mixed)."""
    from urllib.parse import unquote

    acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    gone, mixed = [], []
    for a in acts:
        pv = {k[len("partition."):]: (None if v is None else str(v)) for k, v in a.items() if k.startswith("partition.")}
        if any(pv.get(k) != str(v) for k, v in where.items()):
            continue
        f = {"path": unquote(a["path"]), "size": int(a["size_bytes"]), "partition_values": pv}
        verdict = "all"
        for col, n in above.items():
            lo, hi, nulls, rows = a.get(f"min.{col}"), a.get(f"max.{col}"), a.get(f"null_count.{col}"), a["num_records"]
            if rows is not None and nulls is not None and nulls == rows:
                verdict = "none"  # only nulls: no row matches
                break
            if hi is not None and nulls is not None and hi <= int(n):
                verdict = "none"
                break
            if lo is None or nulls is None or lo <= int(n) or nulls > 0:
                verdict = "some"
        if verdict == "all":
            gone.append(f)
        elif verdict == "some":
            mixed.append(f)
    return gone + mixed, mixed


def _one_table(run):
    """A one-table ``run`` (path, target, partition columns, tag) as :meth:`Lake._tasks_commit`'s of a list."""
    def tables(targets):
        written, extra = run(*targets[0])
        return [written], extra

    return tables


class _Job:
    """One executor write: its staging folder ``_staging/<host>_<pid>_<tag>`` holds ``intent.json`` (the table,
    the tag in the data files' names, the table's version before), so the files of a job killed before its
    commit can be found and removed (:meth:`Lake.clean_staging`).  ``close`` removes the job's files no commit
    added (a failed task attempt's, or all of them when the commit failed: read from the table's log, so a
    commit that went through before an error is never undone) and the folder."""

    def __init__(self, root: Path, table: str, before: int):
        self.tag = uuid.uuid4().hex
        self.before = before
        self.table_dir = root / table
        self.folder = root / STAGING_DIR / f"{_HOST}_{os.getpid()}_{self.tag}"
        self.folder.mkdir(parents=True)
        (self.folder / INTENT).write_text(json.dumps({"table": table, "tag": self.tag, "before": before}))

    def close(self) -> None:
        _remove_orphans(self.table_dir, self.tag, _added_since(self.table_dir, self.before))
        shutil.rmtree(self.folder, ignore_errors=True)
        try:
            self.folder.parent.rmdir()  # only succeeds when no other write is staging
        except OSError:
            pass


def _orphans_of(root: Path, folder: Path) -> list[str]:
    """Remove the uncommitted data files of the killed executor write whose staging folder is ``folder``."""
    try:
        intent = json.loads((folder / INTENT).read_text())
        table_dir = root / intent["table"]
        return _remove_orphans(table_dir, intent["tag"], _added_since(table_dir, int(intent["before"])))
    except (OSError, ValueError, KeyError, TypeError):
        return []  # a driver-staged folder (no intent), or one cut short: nothing in a table to remove


def _remove_orphans(table_dir: Path, tag: str, committed: set[str]) -> list[str]:
    """Remove the data files the job ``tag`` wrote into ``table_dir`` that are not in ``committed`` (paths
    relative to the table)."""
    removed = []
    if not table_dir.is_dir():
        return removed
    for folder, dirs, names in os.walk(table_dir):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for name in names:
            if is_tagged(name, tag):
                rel = os.path.relpath(os.path.join(folder, name), table_dir).replace(os.sep, "/")
                if rel not in committed:
                    try:
                        os.remove(os.path.join(folder, name))
                        removed.append(rel)
                    except FileNotFoundError:
                        pass
    return removed


def _added_since(table_dir: Path, before: int) -> set[str]:
    """The paths every commit after version ``before`` added (read from the JSON commits of the Delta log)."""
    added: set[str] = set()
    log = table_dir / "_delta_log"
    if not log.is_dir():
        return added
    from urllib.parse import unquote

    for f in log.glob("*.json"):
        if not f.stem.isdigit() or int(f.stem) <= before:
            continue
        for line in f.read_text().splitlines():
            if '"add"' in line:
                act = json.loads(line).get("add")
                if act:
                    added.add(unquote(act["path"]))
    return added


_HOST = re.sub(r"[^A-Za-z0-9.\-]", "-", socket.gethostname()) or "host"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def root_of(root: str | Path) -> tuple[str, bool]:
    """(the lake root as a Lake names it, whether it is a local path): what the cluster lock needs before
    any SparkSession exists."""
    return _normalize_root(root)


def _normalize_root(root: str | Path) -> tuple[str, bool]:
    """Absolute local path (so Spark and delta-rs agree regardless of cwd) or a remote URI."""
    root = str(root)
    if root.startswith("file://"):
        root = root[len("file://") :]
    elif "://" in root:
        return root.rstrip("/"), False
    return str(Path(root).expanduser().resolve()), True


def _choose_backend(backend: str, spark: SparkSession | None) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "delta-rs":
        return backend
    available = spark is not None and delta_jvm_available(spark)
    if backend == "delta-spark" and not available:
        raise RuntimeError(
            "delta backend 'delta-spark' requested but "
            + ("no SparkSession was given" if spark is None else "Delta's JVM classes are not on the classpath")
            + " (pass the delta-spark jars via spark.conf 'spark.jars', or use backend 'auto'/'delta-rs')"
        )
    return "delta-spark" if available else "delta-rs"


def _as_list(cols: str | Sequence[str] | None) -> list[str]:
    if cols is None:
        return []
    return [cols] if isinstance(cols, str) else list(cols)


def delta_types(schema: pa.Schema) -> dict[str, Any]:
    """Column name -> Delta type (as parsed JSON) with nullability/metadata stripped.

    Comparing *Delta* types rather than Arrow types ignores pure representation
    differences (string vs large_string, list child names, timestamp units) and
    nothing else.
    """
    names = schema.names
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SchemaMismatchError(f"duplicate column name(s) {dupes}")
    fields = json.loads(DeltaSchema.from_arrow(schema).to_json())["fields"]
    return {f["name"]: _strip(f["type"]) for f in fields}


def _strip(t: Any) -> Any:
    if isinstance(t, str):
        return "timestamp" if t == "timestamp_nanos" else t  # delta-rs stores ns as us
    if isinstance(t, dict):
        return {
            k: _strip(v)
            for k, v in t.items()
            if k not in ("nullable", "containsNull", "valueContainsNull", "metadata")
        }
    if isinstance(t, list):
        return [_strip(v) for v in t]
    return t


def _check_compatible(source: pa.Schema, target: pa.Schema, table: str) -> None:
    src, tgt = delta_types(source), delta_types(target)
    problems = []
    missing = [n for n in tgt if n not in src]
    extra = [n for n in src if n not in tgt]
    if missing:
        problems.append(f"missing column(s) {missing}")
    if extra:
        problems.append(f"unexpected column(s) {extra}")
    for name in (n for n in tgt if n in src):
        s, t = src[name], tgt[name]
        widening = s in _INT_LADDER and t in _INT_LADDER and _INT_LADDER.index(s) <= _INT_LADDER.index(t)
        if s != t and not widening:
            problems.append(f"column {name!r} is {json.dumps(s)} in the frame but {json.dumps(t)} in the table")
    if problems:
        raise SchemaMismatchError(f"cannot write to table {table!r}: " + "; ".join(problems))
