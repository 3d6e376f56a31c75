"""lake.delta against real Spark + real delta-rs tables (no mocks).

On machines without Delta's JVM jars (dev, CI) the Lake picks the delta-rs backend;
the delta-spark test at the bottom only runs where the jars are on the classpath.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from lake.delta import Lake, ProtocolError, SchemaMismatchError
from lake.spark import delta_jvm_available

UTC = timezone.utc
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("part", StringType()),  # partition column, deliberately not last
        StructField("name", StringType()),
        StructField("replicas", ArrayType(IntegerType())),
        StructField("ts", TimestampType()),
    ]
)
T0 = datetime(2024, 3, 1, 12, 30, 45, 123456, tzinfo=UTC)
ROWS = [
    (1, "a", "alpha", [1, 2, 3], T0),
    (2, "a", None, None, None),
    # partition value that must be escaped in the folder name
    (3, "b c/d", "gamma", [], datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)),
]


def ids(df) -> list[int]:
    return sorted(r.id for r in df.select("id").collect())


def protocol(lake: Lake, table: str) -> tuple[int, int]:
    p = DeltaTable(lake.path(table)).protocol()
    return p.min_reader_version, p.min_writer_version


def test_session_settings_and_backend_choice(spark, tmp_path):
    # The Lake's timestamp handling depends on these (see lake/spark.py).
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "TIMESTAMP_MICROS"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"

    jvm = delta_jvm_available(spark)
    assert Lake(tmp_path, spark).backend == ("delta-spark" if jvm else "delta-rs")
    assert Lake(tmp_path, None).backend == "delta-rs"
    assert Lake(tmp_path, spark, backend="delta-rs").backend == "delta-rs"
    if not jvm:  # forcing delta-spark without jars fails at construction, not at first write
        with pytest.raises(RuntimeError, match="JVM classes"):
            Lake(tmp_path, spark, backend="delta-spark")
    with pytest.raises(ValueError, match="invalid table name"):
        Lake(tmp_path, None).path("../escape")


def test_round_trip_types_partitions_and_arrow_filters(spark, lake):
    df = spark.createDataFrame(ROWS, SCHEMA)
    assert lake.append("records", df, partition_by="part") == 0

    back = lake.read("records")
    assert back.schema == SCHEMA  # same types AND column order (Spark would move `part` last)
    assert sorted(back.collect(), key=lambda r: r.id) == sorted(df.collect(), key=lambda r: r.id)
    # really partitioned on disk: the partition column lives in folder names only
    assert len([p for p in Path(lake.path("records")).iterdir() if p.name.startswith("part=")]) == 2
    assert protocol(lake, "records") == (1, 2)

    t = lake.read_arrow("records", filters=[("part", "=", "b c/d")])
    assert t.column("id").to_pylist() == [3]
    t = lake.read_arrow("records", columns=["id", "replicas", "ts"], filters=[("part", "=", "a")])
    assert t.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert t.schema.field("replicas").type == pa.list_(pa.int32())
    assert sorted(t.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "replicas": [1, 2, 3], "ts": T0},
        {"id": 2, "replicas": None, "ts": None},
    ]


def test_time_travel_and_overwrite_do_not_resurrect_rows(spark, lake):
    schema = "id long, p string"
    assert lake.append("t", spark.createDataFrame([(1, "x"), (2, "y")], schema), partition_by="p") == 0
    assert lake.append("t", spark.createDataFrame([(3, "y")], schema)) == 1
    assert lake.overwrite("t", spark.createDataFrame([(9, "x")], schema)) == 2

    assert ids(lake.read("t", version=0)) == [1, 2]
    assert sorted(map(tuple, lake.read("t", version=1).collect())) == [(1, "x"), (2, "y"), (3, "y")]
    assert sorted(map(tuple, lake.read("t").collect())) == [(9, "x")]
    # What a naive directory read would have returned: every file ever written.
    assert ids(lake.spark.read.parquet(lake.path("t"))) == [1, 2, 3, 9]

    assert lake.version("t") == 2
    history = lake.history("t")
    assert [h["version"] for h in history] == [2, 1, 0]
    # the Spark tasks' files committed by a delta-rs write transaction: the first commit creates the table
    assert [h["operation"] for h in history] == ["WRITE", "WRITE", "CREATE TABLE"]


def test_empty_frame_creates_table_with_schema(spark, lake):
    assert not lake.exists("empty")
    assert lake.overwrite("empty", spark.createDataFrame([], SCHEMA), partition_by="part") == 0
    assert lake.exists("empty")
    assert protocol(lake, "empty") == (1, 2)

    back = lake.read("empty")
    assert back.schema == SCHEMA and back.count() == 0
    arrow = lake.read_arrow("empty")
    assert arrow.num_rows == 0 and arrow.schema.names == SCHEMA.fieldNames()

    assert lake.append("empty", spark.createDataFrame(ROWS[:1], SCHEMA)) == 1
    assert ids(lake.read("empty")) == [1]


def test_schema_is_enforced_not_silently_cast(spark, lake):
    lake.append("typed", spark.createDataFrame([(1, "x")], "id long, name string"))

    bad_frames = [
        (spark.createDataFrame([("3", "y")], "id string, name string"), "'id'"),  # delta-rs alone: 3
        (spark.createDataFrame([(1.7, "y")], "id double, name string"), "'id'"),  # delta-rs alone: 1
        (spark.createDataFrame([(4,)], "id long"), "missing column"),
        (spark.createDataFrame([(4, "y", 1)], "id long, name string, extra int"), "unexpected column"),
    ]
    for frame, message in bad_frames:
        with pytest.raises(SchemaMismatchError, match=message):
            lake.append("typed", frame)
    with pytest.raises(SchemaMismatchError, match="'id'"):
        lake.append_arrow("typed", pa.table({"id": ["4"], "name": ["w"]}))
    with pytest.raises(SchemaMismatchError, match="partitioned by"):
        lake.append("typed", spark.createDataFrame([(5, "v")], "id long, name string"), partition_by="name")
    assert lake.version("typed") == 0

    # Lossless differences are accepted: int -> long, other column order.
    assert lake.append("typed", spark.createDataFrame([("z", 2)], "name string, id int")) == 1
    t = lake.read_arrow("typed")
    assert t.schema.field("id").type == pa.int64()
    assert sorted(t.column("id").to_pylist()) == [1, 2]


def test_failed_write_leaves_table_and_staging_clean(spark, lake):
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    assert lake.append_arrow("strict", pa.table({"id": [1]}, schema=strict)) == 0

    # Schema-compatible (nullability is not part of the check), so this gets through
    # Spark's staging write; the NULL is rejected while streaming into the table.
    with pytest.raises(ValueError, match="non-nullable"):
        lake.append("strict", spark.createDataFrame([(2,), (None,)], "id long"))

    assert lake.version("strict") == 0
    assert lake.read_arrow("strict").column("id").to_pylist() == [1]
    assert not (Path(lake.root) / "_staging").exists()


def test_naive_timestamps_refused_before_creating_a_table(spark, lake):
    naive = pa.table({"ts": pa.array([datetime(2024, 1, 1)], pa.timestamp("us"))})
    with pytest.raises(ProtocolError, match="timezone-naive"):
        lake.append_arrow("naive", naive)
    with pytest.raises(ProtocolError, match="timezone-naive"):
        lake.append("naive", spark.createDataFrame([(datetime(2024, 1, 1),)], "ts timestamp_ntz"))
    assert not lake.exists("naive")


def test_delta_spark_backend_round_trip(spark, tmp_path):
    if not delta_jvm_available(spark):
        pytest.skip("Delta JVM classes not on the classpath (expected without the delta-spark jars)")
    lake = Lake(tmp_path, spark, backend="delta-spark")
    schema = "id long, p string"
    lake.append("t", spark.createDataFrame([(1, "x"), (2, "y")], schema), partition_by="p")
    lake.overwrite("t", spark.createDataFrame([(9, "x")], schema))
    assert ids(lake.read("t", version=0)) == [1, 2]
    assert ids(lake.read("t")) == [9]
    assert lake.version("t") == 1
    assert lake.read_arrow("t").column("id").to_pylist() == [9]


def test_overwrite_where_replaces_only_that_partition(spark, lake):
    df = spark.createDataFrame([("a", 1), ("a", 2), ("b", 3)], "cluster string, v long")
    lake.overwrite("t", df, partition_by="cluster", where={"cluster": "a"})  # new table: only a's rows
    assert sorted(r.v for r in lake.read("t").collect()) == [1, 2]
    lake.append("t", spark.createDataFrame([("b", 3)], "cluster string, v long"))
    lake.overwrite("t", spark.createDataFrame([("a", 9)], "cluster string, v long"), where={"cluster": "a"})
    assert sorted((r.cluster, r.v) for r in lake.read("t").collect()) == [("a", 9), ("b", 3)]


def test_a_table_of_an_earlier_version_gets_the_columns_the_catalog_declared_since(spark, tmp_path):
    """broker_state_history written before ``cordoned_log_dirs`` existed: the next write (Arrow or a Spark frame)
    adds the column in a metadata-only commit and goes on; the old rows read it as null.  A column the catalog
    does not declare is still refused."""
    from lake import catalog

    t = catalog.BROKER_STATE_HISTORY
    assert "cordoned_log_dirs" in t.schema.names
    old_schema = pa.schema([f for f in t.schema if f.name != "cordoned_log_dirs"])
    lake = Lake(tmp_path / "lake", spark)
    row = {f.name: None for f in t.schema} | {"cluster": "c", "broker_id": 1, "offset": 5}
    lake.append_arrow(t.name, pa.Table.from_pylist([{k: row[k] for k in old_schema.names}], old_schema),
                      partition_by=t.partition_by)
    assert "cordoned_log_dirs" not in DeltaTable(lake.path(t.name)).schema().to_arrow().names

    lake.append_arrow(t.name, pa.Table.from_pylist([row | {"offset": 6, "cordoned_log_dirs": ["d1"]}], t.schema),
                      partition_by=t.partition_by)
    got = lake.read_arrow(t.name).sort_by("offset")
    assert got.column("cordoned_log_dirs").to_pylist() == [None, ["d1"]]
    from pyspark.sql.pandas.types import from_arrow_schema

    frame = spark.createDataFrame([row | {"offset": 7, "cordoned_log_dirs": ["d2"]}], from_arrow_schema(t.schema))
    lake.append(t.name, frame, partition_by=t.partition_by)
    assert lake.read_arrow(t.name).sort_by("offset").column("cordoned_log_dirs").to_pylist() == [None, ["d1"], ["d2"]]

    extra = pa.Table.from_pylist([row | {"offset": 8, "not_declared": 1}],
                                 t.schema.append(pa.field("not_declared", pa.int64())))
    with pytest.raises(SchemaMismatchError, match="unexpected column"):
        lake.append_arrow(t.name, extra, partition_by=t.partition_by)
