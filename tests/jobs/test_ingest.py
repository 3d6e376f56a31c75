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
def real_lake(real_bronze):
    """Every real cluster ingested into one lake (clusters share it, partitioned by cluster): conftest's,
    which the one-engine tests also replay in (they read their own clusters' rows only)."""
    return real_bronze


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


# ------------------------------------------------------------------------ several copies of one log
COPIES = REALDATA.parent / "realdata-copies"
OGS_COPIES = [COPIES / "ogs59-3broker-mv3.7" / f"kafka-{n}" for n in (1, 2, 3)]
LOG = catalog.LOG_PART_LOG


def _decoded_offsets(data_dir) -> dict[str, set]:
    """{log_part: offsets} of a copy, decoded straight from its files (no Spark, no lake)."""
    from pathlib import Path

    from controller_core.logdir import discover
    from controller_core.replay import iter_file_records

    out: dict[str, set] = {}
    for lf in discover(Path(data_dir)):
        part = catalog.log_part(lf.kind, lf.label)
        out.setdefault(part, set()).update(r.offset for r in iter_file_records(lf, include_skipped=True))
    return out


def _bronze_offsets(lake, cluster) -> dict[str, list]:
    rows = lake.read_arrow(RECORDS_TABLE, columns=[catalog.LOG_PART, "offset"], filters=[("cluster", "=", cluster)])
    out: dict[str, list] = {}
    for part, off in zip(rows.column(catalog.LOG_PART).to_pylist(), rows.column("offset").to_pylist()):
        out.setdefault(part, []).append(off)
    return out


def test_every_nodes_copy_ingested_keeps_one_row_per_offset(spark, lake):
    """kafka-1's copy, then kafka-2's (one batch longer), then kafka-3's (identical to kafka-2's), then kafka-1's
    again (a prefix): bronze holds each offset once, as many rows as the longest copy decodes to."""
    decoded = [_decoded_offsets(d) for d in OGS_COPIES]
    first = ingest(spark, lake, "ogs", str(OGS_COPIES[0]), SPLIT)
    assert first.records_added == sum(len(v) for v in decoded[0].values())
    tail = decoded[1][LOG] - decoded[0][LOG]
    assert tail and min(tail) > max(decoded[0][LOG])  # kafka-2's copy runs on past kafka-1's
    second = ingest(spark, lake, "ogs", str(OGS_COPIES[1]), SPLIT)
    assert second.records_added == len(tail)  # only the offsets kafka-1's copy lacked
    assert second.quarantined == [] and second.diverged == []
    [c] = second.copies
    assert c["added"] >= 1 and c["same"] + c["added"] == c["batches"] and c["firstDifference"] is None
    version = lake.version(RECORDS_TABLE)
    for again in (OGS_COPIES[2], OGS_COPIES[0]):  # identical, then a prefix: nothing to add, nothing committed
        res = ingest(spark, lake, "ogs", str(again), SPLIT)
        assert res.records_added == 0 and res.quarantined == []
        assert res.copies[0]["added"] == 0 and res.copies[0]["same"] == res.copies[0]["batches"]
    assert lake.version(RECORDS_TABLE) == version
    got = _bronze_offsets(lake, "ogs")
    assert {p: len(v) for p, v in got.items()} == {p: len(set(v)) for p, v in got.items()}  # one row per offset
    assert {p: set(v) for p, v in got.items()} == decoded[1]
    # the rows of the tail name the file of the copy that brought them, the same path in every copy
    files = {r.source_file for r in lake.read(RECORDS_TABLE).where(F.col("offset").isin(sorted(tail))).collect()}
    assert files == {"__cluster_metadata-0/00000000000000000000.log"}
    crc = lake.read(RECORDS_TABLE).where(F.col(catalog.BATCH_CRC).isNull()).count()
    assert crc == 0  # every row carries its batch's CRC


def test_several_log_dirs_in_one_run(spark, lake, capsys):
    argv = ["ingest", "--cluster", "mav", "--lake", str(lake.root)]
    mav = sorted((COPIES / "mavila01-3broker-mv3.9").iterdir())
    mav = [d for d in mav if d.is_dir()]
    code = cli.main(argv + [x for d in mav for x in ("--log-dir", str(d))])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count(" already in bronze") == len(mav) and "DIVERGES" not in out
    decoded = _decoded_offsets(mav[0])
    got = _bronze_offsets(lake, "mav")
    assert {p: sorted(v) for p, v in got.items()} == {p: sorted(v) for p, v in decoded.items()}
    assert not lake.exists(QUARANTINE_TABLE) or lake.read(QUARANTINE_TABLE).count() == 0


@pytest.fixture(scope="module")
def node_copies(tmp_path_factory):
    """A simulated node's copy (several segments), a copy of it cut in the middle of its last segment (a node
    that stopped: a prefix), and one whose last segment from its n-th batch on was written in another epoch (a
    diverged copy; the epoch is outside the batch CRC, so every batch still decodes)."""
    from controller_core.codec.batch import iter_batches_scalar

    root = tmp_path_factory.mktemp("node-copies")
    original = root / "node-1"
    assert cli.main(["simulate", "rolling-restart", "-o", str(original), "--seed", "3",
                     "--param", "segment_bytes=2048"]) == 0
    short, diverged = root / "node-2", root / "node-3"
    shutil.copytree(original, short)
    shutil.copytree(original, diverged)
    seg = sorted((original / "__cluster_metadata-0").glob("*.log"))[-1]
    buf = seg.read_bytes()
    heads = [h for h, _ in iter_batches_scalar(buf)]
    assert len(heads) >= 4
    n = len(heads) // 3
    (short / "__cluster_metadata-0" / seg.name).write_bytes(buf[:heads[len(heads) // 2].position])
    edited = bytearray(buf)
    for h in heads[n:]:
        edited[h.position + 12:h.position + 16] = (h.leader_epoch + 5).to_bytes(4, "big")
    (diverged / "__cluster_metadata-0" / seg.name).write_bytes(bytes(edited))
    return dict(original=original, short=short, diverged=diverged, segment=seg.name, heads=heads, n=n)


def test_a_longer_copy_adds_only_its_tail(spark, lake, node_copies):
    short, original = node_copies["short"], node_copies["original"]
    ingest(spark, lake, "sim", str(short), SPLIT)
    want = _decoded_offsets(original)
    tail = want[LOG] - _decoded_offsets(short)[LOG]
    res = ingest(spark, lake, "sim", str(original), SPLIT)
    assert res.records_added == len(tail) > 0 and res.quarantined == []
    assert {p: sorted(v) for p, v in _bronze_offsets(lake, "sim").items()} == {p: sorted(v) for p, v in want.items()}


def test_a_diverged_copy_is_quarantined_naming_the_copy_and_offset(spark, lake, node_copies, capsys):
    original, diverged = node_copies["original"], node_copies["diverged"]
    first = node_copies["heads"][node_copies["n"]]
    assert cli.main(["ingest", "--cluster", "sim", "--log-dir", str(original), "--lake", str(lake.root)]) == 0
    capsys.readouterr()
    before = (lake.version(RECORDS_TABLE), sorted(map(str, lake.read(RECORDS_TABLE).collect())))
    code = cli.main(["ingest", "--cluster", "sim", "--log-dir", str(diverged), "--lake", str(lake.root)])
    captured = capsys.readouterr()
    assert code == 1  # a finding: the copies contradict each other (compare-copies exits 1 for it too)
    assert (lake.version(RECORDS_TABLE), sorted(map(str, lake.read(RECORDS_TABLE).collect()))) == before
    path = str((diverged / "__cluster_metadata-0" / node_copies["segment"]).resolve())
    [q] = [r.asDict() for r in lake.read(QUARANTINE_TABLE).where(F.col("reason") == "COPY_DIVERGED").collect()]
    assert (q["source_file"], q["position"], q["source_kind"]) == (path, first.position, "segment")
    assert q["length"] == sum(h.size for h in node_copies["heads"][node_copies["n"]:])
    assert (f"offsets {first.base_offset}-" in q["message"] and f"epoch {first.leader_epoch + 5}" in q["message"]
            and f"epoch {first.leader_epoch} " in q["message"] and str(diverged) in q["message"])
    err = [line for line in captured.err.splitlines() if "COPY_DIVERGED" in line]
    assert len(err) == 1 and err[0].startswith("kraft-audit ingest: quarantined copy ")
    assert f"DIVERGES at offset {first.base_offset}" in captured.out
    # the same diverged copy again: the same quarantine row, not a second one; --strict: exit 2
    assert cli.main(["ingest", "--cluster", "sim", "--log-dir", str(diverged), "--lake", str(lake.root),
                     "--strict"]) == 2
    assert lake.read(QUARANTINE_TABLE).where(F.col("reason") == "COPY_DIVERGED").count() == 1


def test_copies_in_one_run_compare_in_the_order_given(spark, lake, node_copies, capsys):
    """short, original and diverged in one run: the prefix, then its tail, then the diverged span withheld."""
    c = node_copies
    code = cli.main(["ingest", "--cluster", "sim", "--lake", str(lake.root), "--log-dir", str(c["short"]),
                     "--log-dir", str(c["original"]), "--log-dir", str(c["diverged"])])
    assert code == 1
    assert {p: sorted(v) for p, v in _bronze_offsets(lake, "sim").items()} == {
        p: sorted(v) for p, v in _decoded_offsets(c["original"]).items()}
    [q] = lake.read(QUARANTINE_TABLE).collect()
    assert q.reason == "COPY_DIVERGED" and q.position == c["heads"][c["n"]].position and str(c["diverged"]) in q.message


def test_a_lake_keyed_by_file_is_migrated_and_its_duplicates_dropped(spark, lake, node_copies):
    """A bronze table written before it was keyed by the log: no log_part, no batch_crc, and a second node's copy
    ingested under another folder name held every offset twice.  The next ingest migrates it (one row per
    offset) and compares the copy with the migrated rows on offsets and epochs."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from lake import bronze

    original = node_copies["original"]
    ingest(spark, lake, "old", str(original), SPLIT)
    rows = lake.read_arrow(RECORDS_TABLE).drop_columns([catalog.LOG_PART, catalog.BATCH_CRC])
    other = rows.set_column(rows.schema.get_field_index("source_file"), "source_file",
                            pc.replace_substring(rows.column("source_file"), "__cluster_metadata-0/", "copy-2/"))
    legacy = pa.concat_tables([rows, other])
    lake.replace_schema(RECORDS_TABLE, legacy)
    assert bronze.needs_migration(lake)
    from jobs import quality

    assert quality.load_tables(lake, "old")[RECORDS_TABLE][catalog.LOG_PART].notna().all()  # readable before
    res = ingest(spark, lake, "old", str(original), SPLIT)
    assert res.migrated == rows.num_rows  # every row of the second folder: segments, snapshots, bootstrap
    assert res.records_added == 0 and res.quarantined == []
    got = _bronze_offsets(lake, "old")
    assert {p: sorted(v) for p, v in got.items()} == {p: sorted(v) for p, v in _decoded_offsets(original).items()}
    assert not bronze.needs_migration(lake)
