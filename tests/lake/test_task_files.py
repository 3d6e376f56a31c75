"""A task's own data files (lake/files.write_task), outside Spark: rows land in the file of their partition values
whether a batch holds one key (written as it is) or several (split by key), and the files dictionary-encode
every column but the 64-bit integers and timestamps (offsets, positions, times: one value per row)."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from lake import files as LF

SCHEMA = pa.schema([("cluster", pa.string()), ("part", pa.int32()), ("offset", pa.int64()), ("name", pa.string()),
                    ("ts", pa.timestamp("us", tz="UTC")), ("replicas", pa.list_(pa.int32()))])
T0 = datetime(2024, 3, 1, 12, 30, tzinfo=timezone.utc)


def _batch(cluster, part, offsets) -> pa.RecordBatch:
    n = len(offsets)
    return pa.RecordBatch.from_pydict({
        "cluster": [cluster] * n if not isinstance(cluster, list) else cluster,
        "part": [part] * n if not isinstance(part, list) else part,
        "offset": list(offsets), "name": [f"t{o % 3}" for o in offsets],
        "ts": [T0 + timedelta(seconds=o) for o in offsets], "replicas": [[o % 5, 1] for o in offsets]}, schema=SCHEMA)


def _write(tmp_path, batches, parts):
    out = list(LF.write_task(str(tmp_path), SCHEMA, parts, "tag")(iter(batches)))
    return pa.Table.from_batches(out).to_pylist()


def _read_back(tmp_path, files, parts) -> list[dict]:
    rows = []
    for f in files:
        values = json.loads(f["partition_values"])
        t = pq.read_table(os.path.join(tmp_path, f["path"]))
        assert t.num_rows == f["rows"]
        for r in t.to_pylist():
            rows.append({**r, **{c: (None if values[c] is None else
                                     (int(values[c]) if c == "part" else values[c])) for c in parts}})
    return sorted(rows, key=lambda r: r["offset"])


def test_one_key_batches_and_mixed_batches_land_in_their_partitions(tmp_path):
    batches = [_batch("a", 1, range(0, 50)),  # one key: written as it is
               _batch(["a"] * 10 + ["b"] * 10, [1] * 5 + [2] * 5 + [2] * 10, range(50, 70)),  # three keys
               _batch(None, None, range(70, 80)),  # every partition value null: one key, the null partition
               _batch(["c", None], [3, 3], [80, 81])]  # a null beside a value: split
    files = _write(tmp_path, batches, ["cluster", "part"])
    keys = sorted((json.loads(f["partition_values"])["cluster"] or "", json.loads(f["partition_values"])["part"] or "")
                  for f in files)
    assert keys == [("", ""), ("", "3"), ("a", "1"), ("a", "2"), ("b", "2"), ("c", "3")]
    by_key = {tuple(json.loads(f["partition_values"]).values()): f["rows"] for f in files}
    assert by_key[("a", "1")] == 55 and by_key[("a", "2")] == 5 and by_key[("b", "2")] == 10
    expected = sorted(pa.Table.from_batches(batches).to_pylist(), key=lambda r: r["offset"])
    assert _read_back(tmp_path, files, ["cluster", "part"]) == expected


def test_offsets_and_times_are_not_dictionary_encoded_the_rest_is(tmp_path):
    files = _write(tmp_path, [_batch("a", 1, range(0, 1000))], ["cluster"])
    meta = pq.ParquetFile(os.path.join(tmp_path, files[0]["path"])).metadata
    encodings = {meta.schema.column(i).path: set(meta.row_group(0).column(i).encodings)
                 for i in range(meta.num_columns)}
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert not encodings["offset"] & dictionary and not encodings["ts"] & dictionary
    assert encodings["name"] & dictionary and encodings["part"] & dictionary
    assert encodings["replicas.list.element"] & dictionary
    assert LF.dictionary_columns(SCHEMA) == ["cluster", "part", "name", "replicas.list.element"]
    nested = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.list_(pa.string()))]))])
    assert LF.dictionary_columns(nested) == ["s.b.list.element"]


def test_a_whole_table_of_many_small_chunks_is_written_in_full_row_groups(tmp_path, monkeypatch):
    # a replay bucket's history less the partitions another bucket owns: runs of the table, not copied together
    monkeypatch.setattr(LF, "ROW_GROUP_ROWS", 1000)
    chunks = [_batch("a", 1, range(i, i + 37)) for i in range(0, 37 * 70, 37)]
    table = pa.Table.from_batches(chunks).drop_columns(["cluster", "part"])
    write = LF.write_table(str(tmp_path), SCHEMA, ["cluster", "part"], "tag", {"cluster": "a", "part": 1})
    files = write(table)
    assert len(files) == 1 and files[0]["rows"] == 37 * 70
    meta = pq.ParquetFile(os.path.join(tmp_path, files[0]["path"])).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 590]
    assert _read_back(tmp_path, files, ["cluster", "part"]) == pa.Table.from_batches(chunks).to_pylist()
    stats = json.loads(files[0]["stats"])
    assert stats["minValues"]["offset"] == 0 and stats["maxValues"]["offset"] == 37 * 70 - 1


DIRS = pa.schema([*SCHEMA, ("dirs", pa.list_(pa.string()))])


def _with_dirs(batch: pa.RecordBatch) -> pa.Table:
    dirs = [[f"dir-{o % 4}", "dir-x"] if o % 7 else None for o in batch.column("offset").to_pylist()]
    return pa.Table.from_batches([batch]).append_column("dirs", pa.array(dirs, pa.list_(pa.string())))


def _as_codes(table: pa.Table) -> pa.Table:
    """``name`` and ``dirs`` as a replay hands them over: codes over dictionaries holding values no row uses."""
    codes = pa.dictionary(pa.int32(), pa.string())

    def encoded(values: pa.Array) -> pa.Array:
        spare = pa.array(["a-unused", "zz-unused"])
        distinct = pa.concat_arrays([spare, values.unique().drop_null()])
        return pa.DictionaryArray.from_arrays(pc.index_in(values, distinct).cast(pa.int32()), distinct)

    name = encoded(table.column("name").combine_chunks())
    dirs = table.column("dirs").combine_chunks()
    dirs = pa.ListArray.from_arrays(dirs.offsets, encoded(dirs.values), mask=dirs.is_null())
    out = table.set_column(table.schema.get_field_index("name"), pa.field("name", codes), name)
    return out.set_column(out.schema.get_field_index("dirs"), pa.field("dirs", pa.list_(codes)), dirs)


def test_strings_held_as_codes_are_written_as_they_are_and_read_back_as_strings(tmp_path):
    """A replay's history holds topic ids, record types and directory ids as codes: the file takes the codes'
    dictionary as it is, and is the file the plain strings make -- the same stored Arrow schema, rows and Delta
    statistics (bounds of the values the rows use, not of the whole dictionary)."""
    rows = _with_dirs(_batch("a", 1, range(0, 500)))
    plain_dir, codes_dir = tmp_path / "plain", tmp_path / "codes"
    files = {}
    for folder, table in ((plain_dir, rows), (codes_dir, _as_codes(rows))):
        # the codes' second batch comes plain: the open file casts it to its form
        batches = [table.slice(0, 300), rows.slice(300)]
        out = list(LF.write_task(str(folder), DIRS, ["cluster"], "tag")(iter(batches)))
        files[folder] = pa.Table.from_batches(out).to_pylist()
    (plain,), (coded,) = files[plain_dir], files[codes_dir]
    assert coded["rows"] == plain["rows"] == 500
    assert json.loads(coded["stats"]) == json.loads(plain["stats"])
    assert json.loads(coded["stats"])["minValues"]["name"] == "t0"
    assert json.loads(coded["stats"])["maxValues"]["name"] == "t2"
    meta = {f: pq.read_metadata(os.path.join(f, files[f][0]["path"])).metadata for f in (plain_dir, codes_dir)}
    assert meta[codes_dir][b"ARROW:schema"] == meta[plain_dir][b"ARROW:schema"]
    back = {f: pq.read_table(os.path.join(f, files[f][0]["path"])) for f in (plain_dir, codes_dir)}
    assert back[codes_dir].schema == back[plain_dir].schema
    assert back[codes_dir].schema.field("name").type == pa.string()
    assert back[codes_dir].to_pylist() == back[plain_dir].to_pylist() == rows.drop_columns(["cluster"]).to_pylist()
    file_meta = pq.ParquetFile(os.path.join(codes_dir, coded["path"])).metadata
    encodings = {file_meta.schema.column(i).path: set(file_meta.row_group(0).column(i).encodings)
                 for i in range(file_meta.num_columns)}
    assert encodings["name"] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert encodings["dirs.list.element"] & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    # the codes' dictionary went into the file as it was (unused values too): the writer hashed no string
    pages = pq.ParquetFile(os.path.join(codes_dir, coded["path"]), read_dictionary=["name"]).read_row_group(0)
    assert "zz-unused" in pages.column("name").chunk(0).dictionary.to_pylist()


def test_row_groups_carry_statistics_of_the_scalar_columns_only(tmp_path):
    """What a reader prunes row groups by (offsets, times, names) has Parquet statistics; a list's elements do not."""
    files = _write(tmp_path, [_batch("a", 1, range(0, 1000))], ["cluster"])
    meta = pq.ParquetFile(os.path.join(tmp_path, files[0]["path"])).metadata
    stats = {meta.schema.column(i).path: meta.row_group(0).column(i).statistics for i in range(meta.num_columns)}
    assert stats["offset"].has_min_max and (stats["offset"].min, stats["offset"].max) == (0, 999)
    assert stats["name"].has_min_max and (stats["name"].min, stats["name"].max) == ("t0", "t2")
    assert stats["replicas.list.element"] is None or not stats["replicas.list.element"].has_min_max
    assert LF.statistics_columns(SCHEMA) == ["cluster", "part", "offset", "name", "ts"]
