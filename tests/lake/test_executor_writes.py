"""The delta-rs backend's Spark writes (``delta.spark_writes: executors``): the Spark tasks write the table's
data files, the driver commits their file list (lake/files.py, ``Lake._commit_files``).

* no row goes through the driver: with ``write_deltalake`` and pyarrow's ``ParquetWriter`` made to fail in
  the driver process, every kind of Spark write (create, append, overwrite of a partition, of the rows past an
  offset, of the whole table, merge_update) still works, and each commit's add actions are files on disk;
* the tables read back identical (rows and schema; delta-rs, Spark and DataFusion readers) to those of the
  previous path (``spark_writes: driver``: the driver streams the staged rows into delta-rs);
* every added file carries Delta statistics (numRecords, min/max, nullCount) that filtered reads can trust;
* a job killed with its files written but not committed leaves orphans Delta never reads, which the next
  job's ``clean_staging`` removes.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, QueryBuilder

from lake import delta
from lake.delta import Lake

UTC = timezone.utc
SCHEMA = "cluster string, offset long, name string, replicas array<int>, ts timestamp, valid_to long"
T0 = datetime(2024, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)


def _rows(cluster: str, offsets, name="n"):
    return [(cluster, o, None if o % 3 == 0 else f"{name}{o}", None if o % 4 == 0 else [o, o + 1],
             None if o % 5 == 0 else T0 + timedelta(seconds=o), None) for o in offsets]


def _script(spark, lake: Lake) -> list[int]:
    """Every kind of Spark write, in the order a replay makes them; the versions."""
    df = lambda rows: spark.createDataFrame(rows, SCHEMA)  # noqa: E731
    v = [lake.overwrite("t", df(_rows("a", range(0, 40)) + _rows("b", range(0, 5))), partition_by="cluster",
                        where={"cluster": "a"})]  # new table: a's rows only
    v.append(lake.append("t", df(_rows("b", range(0, 30)))))
    v.append(lake.overwrite("t", df(_rows("a", range(10, 60), "m")), where={"cluster": "a"}))
    v.append(lake.overwrite("t", df(_rows("a", range(50, 80), "x")), where={"cluster": "a"}, above={"offset": 54}))
    src = spark.createDataFrame([(20, 99), (21, 98), (1000, 1)], "offset long, valid_to long")
    v.append(lake.merge_update("t", src, on=["offset"], columns=["valid_to"], where={"cluster": "a"},
                               condition="t.valid_to IS NULL"))
    v.append(lake.overwrite("t", df(_rows("b", range(0, 10), "y")), where={"cluster": "b"}, above={"offset": 4}))
    v.append(lake.overwrite("w", df(_rows("c", range(0, 7)))))
    v.append(lake.overwrite("w", df(_rows("d", range(0, 3)))))  # the whole table
    return v


def _read_all(lake: Lake, table: str):
    """(rows as sorted JSON by delta-rs, by Spark, by DataFusion; the delta-rs schema)."""
    t = lake.read_arrow(table)
    by_rs = sorted(json.dumps(r, default=str, sort_keys=True) for r in t.to_pylist())
    by_spark = sorted(json.dumps(r.asDict(), default=str, sort_keys=True) for r in lake.read(table).collect())
    qb = QueryBuilder().register("t", DeltaTable(lake.path(table)))
    sql = pa.RecordBatchReader.from_stream(qb.execute("SELECT * FROM t")).read_all()
    by_sql = sorted(json.dumps(r, default=str, sort_keys=True) for r in sql.to_pylist())
    return by_rs, by_spark, by_sql, t.schema


@pytest.fixture
def written(spark, tmp_path):
    """The same writes through both paths: {"executors": (lake, versions), "driver": (lake, versions)}."""
    out = {}
    for mode in ("driver", "executors"):
        lake = Lake(tmp_path / mode, spark, backend="delta-rs", spark_writes=mode)
        out[mode] = (lake, _script(spark, lake))
    return out


def test_executor_written_tables_read_back_identical_to_the_driver_path(written):
    (ex, v_ex), (dr, v_dr) = written["executors"], written["driver"]
    for table in ("t", "w"):
        got, want = _read_all(ex, table), _read_all(dr, table)
        assert got[3] == want[3], table  # the schema
        for i in range(3):  # delta-rs, Spark, DataFusion
            assert got[i] == want[i], (table, i)
    rows = [json.loads(r) for r in _read_all(ex, "t")[0]]
    assert sorted(r["offset"] for r in rows if r["cluster"] == "a") == list(range(10, 80))
    assert {r["offset"]: r["valid_to"] for r in rows if r["cluster"] == "a" and r["valid_to"]} == {20: 99, 21: 98}
    assert sorted(r["offset"] for r in rows if r["cluster"] == "b") == list(range(0, 10))  # 5..29 replaced by 5..9
    # the merge matched: one commit each way (delta-rs' MERGE / the rewrite of the files holding rows 20, 21)
    assert len(v_ex) == len(v_dr) and v_ex[-1] == v_dr[-1]


def test_spark_writes_never_pass_rows_through_the_driver(spark, tmp_path, monkeypatch):
    """The driver process cannot write a parquet file nor call write_deltalake: every Spark write still works,
    so the data files were written by the Spark tasks (separate Python workers) and only committed here."""
    import pyarrow.parquet as pq

    def refuse(*a, **k):
        raise AssertionError("the driver wrote data")

    monkeypatch.setattr(delta, "write_deltalake", refuse)
    monkeypatch.setattr(pq, "ParquetWriter", refuse)
    monkeypatch.setattr(pq, "write_table", refuse)
    lake = Lake(tmp_path / "lake", spark, backend="delta-rs")
    assert lake.spark_writes == "executors"
    versions = _script(spark, lake)
    assert versions == [0, 1, 2, 3, 4, 5, 0, 1]  # table t, then table w
    dt = DeltaTable(lake.path("t"))
    for uri in dt.file_uris():
        name = Path(uri).name
        assert re.fullmatch(r"part-\d{5}-[0-9a-f]{32}-[0-9a-f]{32}\.c000\.snappy\.parquet", name), name
        assert Path(uri).parent.name.startswith("cluster=") and os.path.getsize(uri) > 0
    # one commit per write: the file lists of all tasks together
    ops = [h["operation"] for h in dt.history()]
    assert ops[-1] == "CREATE TABLE" and set(ops[:-1]) == {"WRITE"} and len(ops) == 6
    assert not (Path(lake.root) / delta.STAGING_DIR).exists()


def test_added_files_carry_statistics_filtered_reads_can_trust(written):
    lake, _ = written["executors"]
    dt = DeltaTable(lake.path("t"))
    acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert acts
    for a in acts:
        assert a["num_records"] > 0
        assert a["min.offset"] is not None and a["max.offset"] is not None and a["null_count.offset"] == 0
        assert a["null_count.name"] is not None and a["null_count.ts"] is not None
    raw = [json.loads(line)["add"] for f in sorted((Path(lake.path("t")) / "_delta_log").glob("*.json"))
           for line in f.read_text().splitlines() if line.startswith('{"add"')]
    stats = json.loads(raw[0]["stats"])
    assert set(stats) == {"numRecords", "minValues", "maxValues", "nullCount"}
    # filtered reads (pruned by these statistics) return what the unfiltered read holds
    every = lake.read_arrow("t").to_pylist()
    for flt, keep in ((("offset", ">", 54), lambda r: r["offset"] > 54),
                      (("offset", "<=", 12), lambda r: r["offset"] <= 12),
                      (("ts", ">=", T0 + timedelta(seconds=33, microseconds=500)),
                       lambda r: r["ts"] is not None and r["ts"] >= T0 + timedelta(seconds=33, microseconds=500)),
                      (("name", "=", "m33"), lambda r: r["name"] == "m33")):
        got = sorted(json.dumps(r, default=str) for r in lake.read_arrow("t", filters=[flt]).to_pylist())
        assert got == sorted(json.dumps(r, default=str) for r in every if keep(r)), flt


def test_files_written_but_not_committed_are_orphans_the_next_job_removes(spark, tmp_path):
    """A job killed between its tasks' writes and its commit (the "staged" commit point): Delta does not read
    its files; the next job's clean_staging removes them with the staging folder, and nothing else."""
    root = tmp_path / "lake"
    lake = Lake(root, spark, backend="delta-rs")
    lake.append("t", spark.createDataFrame(_rows("a", range(10)), SCHEMA), partition_by="cluster")
    copy = tmp_path / "killed"

    def hook(n, stage, table):
        if stage == "staged":
            shutil.copytree(root, copy)  # the lake as a SIGKILL at this point leaves it

    delta.on_commit(hook)
    try:
        lake.append("t", spark.createDataFrame(_rows("a", range(10, 20)), SCHEMA))
    finally:
        delta.clear_hooks()
    killed = Lake(copy, spark, backend="delta-rs")
    (folder,) = (copy / delta.STAGING_DIR).iterdir()
    intent = json.loads((folder / delta.INTENT).read_text())
    orphans = sorted(p for p in (copy / "t").rglob("*.parquet") if intent["tag"] in p.name)
    assert orphans and intent["table"] == "t"
    assert sorted(r["offset"] for r in killed.read_arrow("t").to_pylist()) == list(range(10))  # not read
    before = sorted(str(p) for p in (copy / "t").rglob("*.parquet") if p not in orphans)
    # the killed job's folder as another process would find it (a dead pid)
    dead = folder.with_name(re.sub(r"_\d+_", "_999999999_", folder.name))
    folder.rename(dead)
    assert killed.clean_staging() == [str(dead)]
    assert not any(p.exists() for p in orphans)
    assert sorted(str(p) for p in (copy / "t").rglob("*.parquet")) == before
    assert not (copy / delta.STAGING_DIR).exists()
    # a killed job whose commit went through: its files are the table's and stay
    assert sorted(r["offset"] for r in lake.read_arrow("t").to_pylist()) == list(range(20))


def test_a_task_that_writes_where_the_driver_cannot_see_commits_nothing(spark, tmp_path, monkeypatch):
    """The driver checks the tasks' files (sizes, footers) before committing: files it cannot find (an executor
    writing to its own disk) fail the write with StagedOutputError naming the table, and nothing is committed."""
    lake = Lake(tmp_path / "lake", spark, backend="delta-rs")
    lake.append("t", spark.createDataFrame(_rows("a", range(3)), SCHEMA), partition_by="cluster")
    real = delta._found

    def vanish(table, path, written, reported):
        for r in written:
            os.remove(os.path.join(path, r.path))  # as if the tasks had written to another host's disk
        return real(table, path, written, reported)

    monkeypatch.setattr(delta, "_found", vanish)
    with pytest.raises(delta.StagedOutputError, match=r"the Spark tasks wrote 5 rows but the driver finds 0") as e:
        lake.append("t", spark.createDataFrame(_rows("a", range(3, 8)), SCHEMA))
    assert e.value.where == lake.path("t")
    assert lake.version("t") == 0 and lake.count("t") == 3
