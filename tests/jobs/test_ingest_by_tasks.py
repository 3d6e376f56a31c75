"""A cluster's first copy ingested by decoding tasks that write bronze's files themselves (issue 11 item 3:
no record row back through the JVM): the same tables and the same report as the frame path (decoded rows
-> Spark frame -> write tasks), on damaged input, on what a newer Kafka wrote and on every real cluster; a
log whose segments overlap in offsets falls back to the frame path, leaving no uncommitted file behind."""
from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from controller_core.codec.logfile import split_points
from jobs import ingest as I
from lake import catalog
from lake.delta import Lake
from log_builder import newer_log
from realdata_facts import CLUSTERS, REALDATA

RECORDS, QUARANTINE = catalog.METADATA_RECORDS, catalog.QUARANTINE
SPLIT = 64 << 20


def _ingest(spark, root: Path, log_dir, tasks: bool):
    lake = Lake(root, spark)
    if not tasks:
        lake.tasks_write_files = lambda: False
    said: list[str] = []
    res = I.ingest(spark, lake, "c", str(log_dir), SPLIT, progress=said.append)
    return lake, res, said


def _table(lake: Lake, table) -> pa.Table | None:
    if not lake.exists(table.name):
        return None
    t = lake.read_arrow(table.name)
    return t.sort_by([(k, "ascending") for k in table.key])


def _same(spark, tmp_path, log_dir) -> tuple:
    by_tasks, res, said = _ingest(spark, tmp_path / "tasks", log_dir, True)
    by_frame, ref, _ = _ingest(spark, tmp_path / "frame", log_dir, False)
    assert any("written by the tasks" in s for s in said)  # the tasks' path was taken
    for table in (RECORDS, QUARANTINE):
        got, want = _table(by_tasks, table), _table(by_frame, table)
        assert got.schema == want.schema, table.name  # the table the frame path creates, column for column
        assert got.equals(want), table.name
    for f in ("files", "records_seen", "records_added", "types_added", "quarantined", "quarantine_added",
              "newer_kafka", "copies"):
        assert getattr(res, f) == getattr(ref, f), f
    return res, by_tasks


def _orphans(lake: Lake, table) -> set[str]:
    """Parquet files in the table's folder that its log does not list."""
    from deltalake import DeltaTable

    root = Path(lake.path(table.name))
    listed = {Path(u.removeprefix("file://")).resolve() for u in DeltaTable(str(root)).file_uris()}
    on_disk = {p.resolve() for p in root.rglob("*.parquet")}
    return on_disk - listed


def test_damaged_log_same_tables_and_report(spark, tmp_path):
    src = REALDATA / CLUSTERS["mavila01"]
    meta = tmp_path / "kafka1" / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    raw = bytearray((src / "__cluster_metadata-0/00000000000000000000.log").read_bytes())
    raw[5000] ^= 0xFF  # a CRC mismatch inside a batch
    (meta / "00000000000000000000.log").write_bytes(bytes(raw) + b"\x00garbage tail" * 10)
    shutil.copy(src / "bootstrap.checkpoint", meta.parent)
    res, lake = _same(spark, tmp_path, meta.parent)
    assert {q["reason"] for q in res.quarantined} >= {"CRC_MISMATCH"}
    assert 3088 - 3 <= res.records_seen - 3 < 3088  # all but the damaged batch, and bootstrap's 3 records
    assert _orphans(lake, RECORDS) == set()


def test_newer_kafka_records_same_tables_and_warnings(spark, tmp_path):
    d, _ = newer_log(tmp_path)
    res, _ = _same(spark, tmp_path, d)
    assert len(res.newer_kafka) == 2 and "apiKey 99" in res.newer_kafka[1]


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_real_clusters_same_tables(spark, tmp_path, cluster):
    res, _ = _same(spark, tmp_path, REALDATA / CLUSTERS[cluster])
    assert res.records_added == res.records_seen > 0 and res.quarantined == []


def _rolled_twice(src: Path, dst: Path) -> int:
    """A copy whose second segment repeats the first one's tail (a segment rolled while the copy was taken):
    the first segment whole, the second from a batch boundary inside it.  Returns the overlap's first offset."""
    dst.mkdir(parents=True)
    seg = src / "__cluster_metadata-0/00000000000000000000.log"
    raw = seg.read_bytes()
    cut = split_points(str(seg), len(raw) // 3)[1]
    base = struct.unpack(">q", raw[cut:cut + 8])[0]
    (dst / seg.name).write_bytes(raw)
    (dst / f"{base:020d}.log").write_bytes(raw[cut:])
    return base


def test_overlapping_segments_fall_back_to_the_frame_path(spark, tmp_path):
    base = _rolled_twice(REALDATA / CLUSTERS["mavila01"], tmp_path / "rolled" / "__cluster_metadata-0")
    assert base > 0
    lake, res, said = _ingest(spark, tmp_path / "tasks", tmp_path / "rolled", True)
    ref_lake, ref, _ = _ingest(spark, tmp_path / "frame", tmp_path / "rolled", False)
    assert any("overlap" in s for s in said) and not any("written by the tasks" in s for s in said)
    assert res.records_added == ref.records_added < res.records_seen  # the repeated tail once
    got = _table(lake, RECORDS)
    assert got.num_rows == res.records_added
    assert len(set(zip(got.column("log_part").to_pylist(), got.column("offset").to_pylist()))) == got.num_rows
    assert _orphans(lake, RECORDS) == set()  # the tasks' files of the abandoned attempt are gone
    assert not os.path.exists(Path(lake.root) / "_staging")


def test_split_size_follows_the_cores(tmp_path):
    d = tmp_path / "d" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / "00000000000000000000.log").write_bytes(b"\0" * (40 << 20))
    assert I._split_bytes(64 << 20, [str(d.parent)], 2) == 10 << 20  # two splits per core
    assert I._split_bytes(64 << 20, [str(d.parent)], 64) == I.MIN_SPLIT_BYTES  # never below the floor
    assert I._split_bytes(8 << 20, [str(d.parent)], 1) == 8 << 20  # never above the configured size
    assert I._split_bytes(1 << 20, [str(d.parent)], 64) == 1 << 20  # a configured size under the floor stands
