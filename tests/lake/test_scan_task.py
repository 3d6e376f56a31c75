"""lake.files.scan_task (a replay task's read of bronze's data files) and transforms.silver.bucket_of."""
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lake import files as LF
from transforms import silver as S


def _files(tmp_path):
    paths = []
    for i in range(3):
        t = pa.table({"record_type": ["PARTITION_RECORD", "TOPIC_RECORD", "PARTITION_CHANGE_RECORD"],
                      "topic_id": [f"t{i}", None, f"t{i}"], "partition_id": pa.array([0, None, i + 1], pa.int32()),
                      "offset": pa.array([10 * i, 10 * i + 1, 10 * i + 2], pa.int64())})
        p = tmp_path / f"part-{i}.parquet"
        pq.write_table(t, p)
        paths.append(str(p))
    return paths


def test_reads_the_rows_the_expression_and_the_mask_keep(tmp_path):
    files = _files(tmp_path)
    read = LF.scan_task(files, ["offset", "partition_id", "leader"],
                        lambda f: f("record_type").isin(["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"]))
    everything = read()
    assert sorted(everything.column("offset").to_pylist()) == [0, 2, 10, 12, 20, 22]
    assert everything.column_names == ["offset", "partition_id", "leader"]
    assert everything.column("leader").null_count == 6  # a column the files lack comes back null
    odd = read(lambda batch: np.asarray(batch.column("partition_id")) % 2 == 1)
    assert sorted(odd.column("offset").to_pylist()) == [2, 22]


def test_a_file_the_task_cannot_see_is_named(tmp_path):
    files = _files(tmp_path)
    (tmp_path / "part-1.parquet").unlink()
    with pytest.raises(FileNotFoundError, match=r"part-1\.parquet is listed by the table's Delta log") as e:
        LF.scan_task(files, ["offset"], lambda f: f("offset") >= 0)()
    assert str(e.value).startswith(LF.READ_ERROR)
    assert isinstance(e.value, LF.MissingDataFile) and e.value.path == str(tmp_path / "part-1.parquet")


def test_bucket_of_is_a_function_of_the_partition_alone():
    ids = pa.array([f"topic-{i % 7}" for i in range(500)])
    parts = np.arange(500, dtype=np.int64) % 13
    whole = S.bucket_of(ids, parts, 8)
    chunked = S.bucket_of(pa.chunked_array([ids.slice(0, 123), ids.slice(123)]), parts, 8)
    assert (whole == chunked).all() and whole.min() >= 0 and whole.max() < 8
    # the same (topic, partition) lands in one bucket wherever it appears; a batch's other rows do not matter
    alone = np.array([S.bucket_of(pa.array([t]), np.array([p]), 8)[0] for t, p in zip(ids.to_pylist()[:40], parts[:40])])
    assert (alone == whole[:40]).all()
    assert len(set(whole.tolist())) == 8  # the partitions spread over every bucket


def test_bucket_of_dictionary_encoded_ids_as_a_task_reads_them_equals_plain_ids():
    ids = pa.array([f"topic-{i % 11}" if i % 17 else None for i in range(400)])
    parts = np.arange(400, dtype=np.int64) % 5
    plain = S.bucket_of(ids, parts, 6)
    assert (plain == S.bucket_of(pa.array([t or "" for t in ids.to_pylist()]), parts, 6)).all()  # null: ""
    encoded = pa.chunked_array([ids.slice(0, 150).dictionary_encode(), ids.slice(150).dictionary_encode()])
    assert (S.bucket_of(encoded, parts, 6) == plain).all()
    assert S.bucket_of(pa.chunked_array([], pa.string()), np.zeros(0, np.int64), 6).shape == (0,)


def test_row_groups_the_statistics_rule_out_are_never_decoded(tmp_path):
    """Bronze keeps every snapshot ingested; a replay reads the segments and at most one of them.  A row group
    whose ``source_file`` statistics name another file is skipped without being decoded: here its pages are
    garbage, and only a read that chooses it fails."""
    t = pa.table({"source_file": ["old.checkpoint"] * 3 + ["seg.log"] * 3,
                  "offset": pa.array(range(6), pa.int64()), "partition_id": pa.array([0, 1, 2] * 2, pa.int32())})
    path = tmp_path / "part-0.parquet"
    pq.write_table(t, path, row_group_size=3, compression="none")
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # the snapshot's offsets
    data = bytearray(path.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start:start + chunk.total_compressed_size] = b"\xff" * chunk.total_compressed_size
    path.write_bytes(bytes(data))
    segments = LF.scan_task([str(path)], ["offset", "partition_id"], lambda f: f("source_file").isin(["seg.log"]))
    assert segments().column("offset").to_pylist() == [3, 4, 5]
    assert segments(lambda b: np.asarray(b.column("partition_id")) > 0).column("offset").to_pylist() == [4, 5]
    # the file names read as codes, as a replay task reads them: the statistics still rule the snapshot out
    coded = LF.scan_task([str(path)], ["source_file", "offset"], lambda f: f("source_file").isin(["seg.log"]),
                         ("source_file",))
    got = coded()
    assert got.column("offset").to_pylist() == [3, 4, 5] and pa.types.is_dictionary(got.schema.field(0).type)
    with pytest.raises(Exception):  # the damage is real: a read that needs the snapshot's row group fails
        LF.scan_task([str(path)], ["offset"], lambda f: f("source_file").isin(["old.checkpoint"]))()


def test_a_split_read_returns_each_masks_rows_as_the_masked_reads_do(tmp_path):
    files = _files(tmp_path)
    read = LF.scan_task(files, ["offset", "partition_id"],
                        lambda f: f("record_type").isin(["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"]))
    masks = [lambda b: np.asarray(b.column("partition_id")) % 2 == 1,
             lambda b: np.asarray(b.column("partition_id")) == 0,
             lambda b: np.asarray(b.column("partition_id")) > 99]  # none: an empty table, still returned
    tables = read(split=(3, lambda batch: [m(batch) for m in masks]))
    assert len(tables) == 3
    for table, mask in zip(tables, masks):
        assert table.column_names == ["offset", "partition_id"]
        assert sorted(table.column("offset").to_pylist()) == sorted(read(mask).column("offset").to_pylist())
    assert sorted(tables[0].column("offset").to_pylist()) == [2, 22] and tables[2].num_rows == 0


def test_a_split_reads_parts_that_overlap_or_take_every_row_in_the_scans_order(tmp_path):
    """A replay task's buckets: every partition 0 in each of them (parts overlap), a part may be all of a batch;
    each part's rows in the order the scan read them."""
    files = _files(tmp_path)
    where = lambda f: f("record_type").isin(["PARTITION_RECORD", "PARTITION_CHANGE_RECORD"])  # noqa: E731
    every = LF.scan_task(files, ["offset", "partition_id"], where)()
    masks = [lambda b: np.asarray(b.column("partition_id")) <= 1,
             lambda b: np.asarray(b.column("partition_id")) % 2 == 0,
             lambda b: np.ones(b.num_rows, bool)]
    tables = LF.scan_task(files, ["offset", "partition_id"], where)(split=(3, lambda b: [m(b) for m in masks]))
    for table, mask in zip(tables, masks):
        want = every.filter(pa.array(mask(every)))
        assert table.column("offset").to_pylist() == want.column("offset").to_pylist() and want.num_rows
    assert tables[2].column("offset").to_pylist() == every.column("offset").to_pylist()
