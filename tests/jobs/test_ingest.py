"""The Spark ingest job on real logs: bronze equals Kafka's facts, re-runs are idempotent, a new
segment appends only its records, bad input lands in quarantine without taking good data down."""
from __future__ import annotations

import shutil
from collections import Counter

import pytest
from pyspark.sql import functions as F

from jobs import cli
from jobs.ingest import ingest, plan_splits
from lake import catalog
from lake.delta import Lake
from realdata_facts import CLUSTERS, REALDATA, expected_counts, readme_table

RECORDS_TABLE, QUARANTINE_TABLE = catalog.METADATA_RECORDS.name, catalog.QUARANTINE.name

SPLIT = 64 << 20


@pytest.fixture(scope="module")
def real_lake(spark, tmp_path_factory):
    """Every real cluster ingested into one lake (clusters share it, partitioned by cluster)."""
    lake = Lake(tmp_path_factory.mktemp("real") / "lake", spark)
    results = {name: ingest(spark, lake, name, str(REALDATA / rel), SPLIT) for name, rel in CLUSTERS.items()}
    return lake, results


def _counts_by_file(lake, cluster):
    rows = (lake.read(RECORDS_TABLE).where(F.col("cluster") == cluster)
            .groupBy("source_file", "record_type").count().collect())
    out: dict[str, Counter] = {}
    for r in rows:
        out.setdefault(r["source_file"], Counter())[r["record_type"]] = r["count"]
    return out


@pytest.mark.parametrize("cluster", sorted(CLUSTERS))
def test_bronze_counts_equal_the_realdata_readme(real_lake, cluster):
    lake, results = real_lake
    got = _counts_by_file(lake, cluster)
    prefix = CLUSTERS[cluster] + "/"
    want = {rel[len(prefix):]: expected_counts(row) for rel, row in readme_table().items() if rel.startswith(prefix)}
    assert got == want
    assert results[cluster].quarantined == []
    batches = (lake.read(RECORDS_TABLE).where(F.col("cluster") == cluster)
               .select("source_file", "batch_position").distinct().groupBy("source_file").count().collect())
    want_batches = {rel[len(prefix):]: int(row["batches"]) for rel, row in readme_table().items()
                    if rel.startswith(prefix)}
    assert {r["source_file"]: r["count"] for r in batches} == want_batches


def test_bronze_typed_columns_carry_the_partition_change(real_lake):
    lake, _ = real_lake
    # induswargods offset 3594: {"partitionId":0,...,"isr":[],"leader":-1,"eligibleLeaderReplicas":[1],"lastKnownElr":[1]}
    row = (lake.read(RECORDS_TABLE).where((F.col("cluster") == "induswargods") & (F.col("offset") == 3594)
                                          & (F.col("source_kind") == "segment")).collect())
    assert len(row) == 1
    r = row[0]
    assert (r.record_type, r.record_version, r.partition_id, r.isr, r.leader, r.eligible_leader_replicas,
            r.last_known_elr, r.replicas) == ("PARTITION_CHANGE_RECORD", 2, 0, [], -1, [1], [1], None)
    assert r.data_json == ('{"partitionId":0,"topicId":"YNY5hm01SZ-bAGeCLAGqWA","isr":[],"leader":-1,'
                           '"eligibleLeaderReplicas":[1],"lastKnownElr":[1]}')
    # broker state flags are normalised across FenceBroker / BrokerRegistrationChange / RegisterBroker
    fences = (lake.read(RECORDS_TABLE).where(F.col("cluster") == "vasifvortex")
              .where(F.col("record_type").isin("FENCE_BROKER_RECORD", "UNFENCE_BROKER_RECORD"))
              .groupBy("record_type", "fenced").count().collect())
    assert {(r.record_type, r.fenced): r["count"] for r in fences} == {
        ("FENCE_BROKER_RECORD", True): 2, ("UNFENCE_BROKER_RECORD", False): 6}


def test_reingesting_the_same_files_adds_nothing(spark, real_lake):
    lake, _ = real_lake
    before = (lake.version(RECORDS_TABLE), lake.version(QUARANTINE_TABLE), lake.read(RECORDS_TABLE).count())
    res = ingest(spark, lake, "mavila01", str(REALDATA / CLUSTERS["mavila01"]), SPLIT)
    assert res.records_seen == 3091 and res.records_added == 0
    assert (lake.version(RECORDS_TABLE), lake.version(QUARANTINE_TABLE), lake.read(RECORDS_TABLE).count()) == before


def test_a_new_segment_appends_exactly_its_records(spark, lake, tmp_path):
    src = REALDATA / CLUSTERS["arthurarutunyan04"]
    data = tmp_path / "kafka-data"
    meta = data / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    shutil.copy(src / "bootstrap.checkpoint", data)
    shutil.copy(src / "__cluster_metadata-0/00000000000000000000.log", meta)
    first = ingest(spark, lake, "a", str(data), SPLIT)
    assert first.records_added == 5 + 5151
    shutil.copy(src / "__cluster_metadata-0/00000000000000005151.log", meta)  # the log rolled
    second = ingest(spark, lake, "a", str(data), SPLIT)
    assert second.records_added == 2169
    rows = lake.read(RECORDS_TABLE).groupBy("source_file").agg(F.count("*").alias("n"), F.min("offset").alias("lo"),
                                                                F.max("offset").alias("hi")).collect()
    assert {r.source_file: (r.n, r.lo, r.hi) for r in rows} == {
        "bootstrap.checkpoint": (5, 0, 4),
        "__cluster_metadata-0/00000000000000000000.log": (5151, 0, 5150),
        "__cluster_metadata-0/00000000000000005151.log": (2169, 5151, 7319),
    }


def test_small_splits_decode_in_several_tasks_to_the_same_rows(spark, lake, real_lake):
    src = str(REALDATA / CLUSTERS["induswargods"])
    splits = plan_splits(src, "s", 256 * 1024)
    segment_splits = [s for s in splits if s[1].endswith(".log")]
    assert len(segment_splits) >= 10  # the 3.6 MB segment is cut at batch boundaries
    assert [s[6] for s in segment_splits] == [0] + [None] * (len(segment_splits) - 1)
    res = ingest(spark, lake, "induswargods", src, 256 * 1024)
    assert res.quarantined == []
    whole, _ = real_lake
    cols = ["source_file", "offset", "record_type", "data_json"]
    got = lake.read(RECORDS_TABLE).select(*cols).orderBy("source_file", "offset").collect()
    want = (whole.read(RECORDS_TABLE).where(F.col("cluster") == "induswargods").select(*cols)
            .orderBy("source_file", "offset").collect())
    assert got == want


def test_bad_input_is_quarantined_and_good_records_survive(spark, lake, tmp_path, capsys):
    src = REALDATA / CLUSTERS["mavila01"]
    data = tmp_path / "kafka1"
    meta = data / "__cluster_metadata-0"
    meta.mkdir(parents=True)
    raw = bytearray((src / "__cluster_metadata-0/00000000000000000000.log").read_bytes())
    raw[5000] ^= 0xFF  # inside some batch: CRC mismatch
    (meta / "00000000000000000000.log").write_bytes(bytes(raw) + b"\x00garbage tail" * 10)
    (meta / "00000000000000003088.log").write_bytes(b"")  # a freshly rolled, empty active segment
    shutil.copy(src / "__cluster_metadata-0/00000000000000000000.index", meta)  # not record data: ignored
    shutil.copy(src / "bootstrap.checkpoint", data)

    code = cli.main(["ingest", "--cluster", "broken", "--log-dir", str(meta), "--lake", str(lake.root), "--strict"])
    assert code == 2
    err = capsys.readouterr().err
    assert "00000000000000000000.log at byte" in err and "CRC32C mismatch" in err

    q = {(r.source_file, r.reason) for r in lake.read(QUARANTINE_TABLE).collect()}
    assert ("__cluster_metadata-0/00000000000000000000.log", "CRC_MISMATCH") in q
    # the empty active segment Kafka creates when it rolls is no damage: not quarantined
    assert not any(f.endswith("00000000000000003088.log") for f, _ in q)
    assert any(f == "__cluster_metadata-0/00000000000000000000.log" and r in ("GARBAGE", "TRUNCATED_BATCH")
               for f, r in q)
    # everything but the one damaged batch is in bronze
    n = lake.read(RECORDS_TABLE).where(F.col("source_file") == "__cluster_metadata-0/00000000000000000000.log").count()
    assert 3088 - 3 <= n < 3088
    assert lake.read(RECORDS_TABLE).where(F.col("source_file") == "bootstrap.checkpoint").count() == 3


def test_a_log_file_an_executor_cannot_see_is_named_not_quarantined(tmp_path):
    """The driver plans the splits from the files it sees; an executor that does not see one (the log
    directory is not shared) fails the task naming the path, instead of decoding nothing."""
    import pyarrow as pa

    from transforms.bronze import _decode_partition

    split = pa.RecordBatch.from_pylist([{"path": str(tmp_path / "gone.log"), "source_file": "gone.log",
                                         "source_kind": "segment", "start": 0, "end": 10, "cluster": "c",
                                         "first_offset": 0}])
    with pytest.raises(FileNotFoundError, match="gone.log: not found by the executor on .*: the log directory "
                                                "must be at the same path on the driver and every executor"):
        list(_decode_partition([split]))
