"""The layout's record kinds (kernels/layout.py): read from the type numbers bronze carries (record_type_id,
is_control), equal to reading them from the type names -- which a lake written before record_type_id existed
still takes -- on every real cluster's log and a simulated one."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from controller_core import threads
from controller_core.kernels import layout
from controller_core.replay import read_log_dir
from realdata_facts import CLUSTERS, REALDATA
from simulator.engine import simulate
from simulator.scenario import load


def _by_name(records: pa.Table) -> np.ndarray:
    return np.array([layout.KINDS.get(t, layout.OTHER) for t in records.column("record_type").to_pylist()], np.int8)


@pytest.mark.parametrize("folder", sorted(CLUSTERS.values()))
def test_kinds_from_type_numbers_equal_the_names_on_real_logs(folder):
    records, _ = read_log_dir(REALDATA / folder)
    kinds = layout._kinds(records)
    assert (kinds == _by_name(records)).all()
    assert (kinds == layout.CHANGE).any() or (kinds == layout.PARTITION).any()


def test_a_lake_without_type_numbers_and_numbers_no_kind_has(tmp_path):
    simulate(load("fleet-large", params={"partitions": 200, "events": 4}), tmp_path, seed=2)
    records, _ = read_log_dir(tmp_path)
    want = _by_name(records)
    assert len(set(want.tolist())) >= 6  # topics, partitions, changes, brokers, features, LeaderChange
    assert (layout._kinds(records) == want).all()
    # a lake written before bronze had record_type_id: the column is null, the names decide
    at = records.schema.get_field_index("record_type_id")
    older = records.set_column(at, "record_type_id", pa.nulls(records.num_rows, pa.int32()))
    assert (layout._kinds(older) == want).all()
    # an apiKey or control type this build does not declare (UNKNOWN_RECORD), however large or negative: OTHER
    odd = np.asarray(records.column("record_type_id").to_numpy(zero_copy_only=False), np.int32).copy()
    odd[:3] = (-7, 30_000, 2 ** 31 - 1)
    names = records.column("record_type").to_pylist()
    names[:3] = ["UNKNOWN_RECORD"] * 3
    unknown = (records.set_column(at, "record_type_id", pa.array(odd, pa.int32()))
               .set_column(records.schema.get_field_index("record_type"), "record_type", pa.array(names)))
    got = layout._kinds(unknown)
    assert (got[:3] == layout.OTHER).all() and (got[3:] == want[3:]).all()


def _rechunked(records: pa.Table, column: str, sizes: list[int]) -> pa.Table:
    whole = records.column(column).combine_chunks()
    pieces, at = [], 0
    for n in sizes:
        pieces.append(whole.slice(at, n))
        at += n
    return records.set_column(records.schema.get_field_index(column), column, pa.chunked_array(pieces, whole.type))


def test_list_references_the_same_however_the_columns_are_chunked(tmp_path):
    """The six lists' (start, length) and the tape: written in one pass over the rows when the list columns are
    chunked alike, column by column when not -- the same arrays either way, and the same as one chunk each."""
    simulate(load("fleet-large", params={"partitions": 120, "events": 4}), tmp_path, seed=3)
    records, _ = read_log_dir(tmp_path)
    n = records.num_rows
    alike = pa.Table.from_batches(records.combine_chunks().to_batches(max_chunksize=n // 3 + 1))
    assert alike.column("isr").num_chunks >= 3 and alike.column("isr").null_count  # nulls: unchanged lists
    one = records.combine_chunks()
    apart = _rechunked(alike, "replicas", [n // 2, n - n // 2])  # one column chunked otherwise: column by column
    want = layout.build(one, cluster=False)
    for table in (alike, apart):
        got = layout.build(table, cluster=False)
        assert (got.lists == want.lists).all() and (got.tape == want.tape).all()
        assert (got.lists[:, 1::2] == -1).any() and (got.lists[:, 1::2] > 0).any()


@pytest.mark.parametrize("chunks", [
    [["a", "a", "a"], ["b", "b"], ["a"]],  # one value per chunk, the values shared across chunks
    [["a", "b", "a"], ["a", "a"], ["c", "c", "c"]],  # a chunk's ends equal, its middle not; then constant chunks
    [["x", None, "x"], ["x", "x"]],  # a null: never the shortcut
    [[None, None], ["y", "y"], []],
])
def test_dense_codes_equal_a_dictionary_of_the_whole_column(chunks):
    """``_dense`` (short chunks by a hash) gives every row the code of its value in
    the values in order of first appearance, as one dictionary encoding of the whole column does; -1 for null."""
    col = pa.chunked_array([pa.array(c, pa.string()) for c in chunks], pa.string())
    codes, values = layout._dense(col)
    first = list(dict.fromkeys(v for v in col.to_pylist() if v is not None))
    assert values == first == pa.concat_arrays(col.chunks).dictionary_encode().dictionary.to_pylist()
    assert codes.tolist() == [first.index(v) if v is not None else -1 for v in col.to_pylist()]


def _runs_column(seed: int) -> pa.ChunkedArray:
    """Chunks of strings in runs (a replay's topic ids), long enough for the run-by-run encoding: neighbours that
    differ in one byte anywhere (first, middle, last, inside the overlapping last word), in length only, or by
    being null; some chunks sliced, some read as codes (a Spark scan), some too varied for runs."""
    rng = np.random.default_rng(seed)
    base = "Zq3xY9-kLmN0pQrStUvWxA"  # a topic id's 22 characters
    values = [base, base[:-1] + "B", "B" + base[1:], base[:13] + "#" + base[14:], base[:15] + "!" + base[16:],
              base[:8], base[:7], "", "x", base + base, None]
    chunks = []
    for _ in range(int(rng.integers(1, 6))):
        n = int(rng.choice([64, 65, 130, 700]))
        if rng.random() < 0.2:  # too many runs: hashed
            rows = [values[int(k)] for k in rng.integers(0, len(values), n)]
        else:
            rows = _rows_in_runs(rng, values, n, 40)
        arr = pa.array(rows, pa.string())
        if rng.random() < 0.3:
            arr = arr.slice(3, n - 5)
        chunks.append(arr)
    return _column(rng, chunks, 0.25)


def _rows_in_runs(rng, values: list, n: int, longest: int, rows: list | None = None) -> list:
    """``n`` rows (``rows`` first) of ``values`` drawn in runs of 1 to ``longest`` - 1."""
    rows = list(rows or [])
    while len(rows) < n:
        rows += [values[int(rng.integers(0, len(values)))]] * int(rng.integers(1, longest))
    return rows[:n]


def _column(rng, chunks: list, coded: float) -> pa.ChunkedArray:
    """The string chunks as one column, read as codes (a Spark scan) with probability ``coded``."""
    if rng.random() < coded:
        chunks = [c.dictionary_encode() for c in chunks]
        return pa.chunked_array(chunks, chunks[0].type)
    return pa.chunked_array(chunks, pa.string())


@pytest.mark.parametrize("seed", range(12))
def test_dense_codes_of_strings_in_runs_equal_a_dictionary_of_the_whole_column(seed):
    """``_dense`` on chunks whose values come in runs (each run's first value encoded, equal neighbours told by
    their bytes a word at a time): the codes and values one dictionary encoding of the whole column gives."""
    col = _runs_column(seed)
    codes, values = layout._dense(col)
    plain = col.cast(pa.string()).to_pylist()
    first = list(dict.fromkeys(v for v in plain if v is not None))
    assert values == first
    assert codes.tolist() == [first.index(v) if v is not None else -1 for v in plain]


def _file_column(seed: int) -> pa.ChunkedArray:
    """Source-file names in runs, as a replay's rows carry them: segments and snapshots (``.checkpoint``), names that
    differ in one digit or by being null, a run going on across a chunk's end, chunks short (under 64 rows: their
    runs found all the same) and long, some sliced; a fifth of the columns read as codes (a Spark scan)."""
    rng = np.random.default_rng(seed)
    names = ["__cluster_metadata-0/00000000000000000000.log", "__cluster_metadata-0/00000000000000000001.log",
             "__cluster_metadata-0/00000000000000012345-0000000004.checkpoint", "bootstrap.checkpoint", None]
    chunks, last = [], None
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.choice([1, 5, 63, 64, 130, 700]))
        going_on = [last] * int(rng.integers(0, 5)) if last is not None and rng.random() < 0.5 else []
        rows = _rows_in_runs(rng, names, n, 60, going_on)
        last = rows[-1]
        arr = pa.array(rows, pa.string())
        chunks.append(arr.slice(1, n - 2) if n > 8 and rng.random() < 0.3 else arr)
    return _column(rng, chunks, 0.2)


@pytest.mark.parametrize("seed", range(16))
def test_batch_numbers_by_the_files_runs_equal_plain_python(seed):
    """``_batches``: a new batch where the file or the batch base offset changes from the row before, and each row's
    snapshot flag (its file a ``.checkpoint``), as plain Python reads them off the rows."""
    col = _file_column(seed)
    files = col.cast(pa.string()).to_pylist()
    rng = np.random.default_rng(seed + 100)
    bbo = np.repeat(rng.integers(0, 3, len(files)), 1)
    bbo[rng.random(len(files)) < 0.7] = 0  # (mostly the same base offset: the files' runs make the batches)
    batch, snapshot = layout._batches(col, bbo)
    want, b = [], -1
    for r, f in enumerate(files):
        b += r == 0 or f != files[r - 1] or bbo[r] != bbo[r - 1]
        want.append(b)
    assert batch.tolist() == want
    assert snapshot.tolist() == [f is not None and f.endswith(".checkpoint") for f in files]
    coded = layout._batches_coded(col, bbo)
    assert coded[0].tolist() == want and coded[1].tolist() == snapshot.tolist()


def _dense_of_runs(seeds) -> list:
    """[codes, values] of ``_dense`` on each seed's :func:`_runs_column` (JSON-ready)."""
    return [[codes.tolist(), values] for codes, values in (layout._dense(_runs_column(s)) for s in seeds)]


def test_dense_codes_the_same_as_plain_python():
    """NUMBA_DISABLE_JIT=1: the run loop and its word loads interpreted give the compiled codes."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    script = ("import sys, json; sys.path[:0] = sys.argv[1:4]; from test_layout import _dense_of_runs; "
              "print(json.dumps(_dense_of_runs(range(4))))")
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), str(root / "tests"), str(root)],
                         env=env, capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == _dense_of_runs(range(4))


def _fields_equal(a: layout.Layout, b: layout.Layout) -> None:
    import dataclasses

    for f in dataclasses.fields(layout.Layout):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y), f.name
        elif isinstance(x, pa.Array):
            assert x.equals(y), f.name
        else:
            assert x == y, f.name


def test_cluster_fields_added_later_equal_one_build_and_leave_the_first_layout_alone(tmp_path, monkeypatch):
    """The pipeline builds the partition fields, then (on the invariant pass's thread) the cluster fields:
    ``with_cluster`` must give what one ``build`` gives -- also with a ZkMigrationStateRecord, whose flag goes into
    ``cfg`` -- without changing the layout the fold reads meanwhile."""
    simulate(load("fleet-large", params={"partitions": 100, "events": 4}), tmp_path, seed=3)
    records, _ = read_log_dir(tmp_path)
    # a NoOp made a ZkMigrationStateRecord (MIGRATION = 1): its flag is the value of its cfg row
    noop = int(np.flatnonzero(np.asarray(records.column("record_type").to_pylist()) == "NO_OP_RECORD")[3])
    edits = {"record_type": "ZK_MIGRATION_STATE_RECORD", "record_type_id": 21, "data_json": '{"zkMigrationState":1}'}
    for column, value in edits.items():
        vals = records.column(column).to_pylist()
        vals[noop] = value
        records = records.set_column(records.schema.get_field_index(column), column,
                                     pa.array(vals, records.schema.field(column).type))
    whole = layout.build(records)
    assert whole.cfg[noop, 3] == 1 and whole.batch is not None
    monkeypatch.setattr(threads, "MIN_RECORDS", 0)
    _fields_equal(layout.build(records, threads=2), whole)  # the list columns read on another thread
    beside = layout.build(records, cluster=False, threads=2, cluster_beside=True)  # the cluster fields too
    assert beside.batch is None and beside.beside is not None
    _fields_equal(layout.with_cluster(beside, records), whole)
    first = layout.build(records, cluster=False)
    ints_before = first.ints.copy()
    later = layout.with_cluster(first, records)
    _fields_equal(later, whole)
    assert first.batch is None and first.cfg is None and np.array_equal(first.ints, ints_before)
    assert layout.with_cluster(later, records) is later


@pytest.mark.parametrize("seed", range(5))
def test_null_among_rows_equals_the_unpacked_validity(seed):
    """``null_among`` reads each chunk's validity bits where they lie, chunks sliced at any bit (not byte
    aligned) included, and answers as the unpacked bools masked by the rows."""
    rng = np.random.default_rng(seed)
    chunks = []
    for _ in range(rng.integers(1, 5)):
        vals = [None if rng.random() < 0.02 else int(v) for v in rng.integers(0, 9, rng.integers(1, 300))]
        arr = pa.array(vals + [1] * 11, pa.int32())
        start = int(rng.integers(0, 9))  # a slice starting inside a byte of the bitmap
        chunks.append(arr.slice(start, len(arr) - start - int(rng.integers(0, 3))))
    col = pa.chunked_array(chunks, pa.int32())
    valid = np.concatenate([c.is_valid().to_numpy(zero_copy_only=False) for c in chunks])
    for share in (0.0, 0.01, 0.3, 1.0):
        rows = rng.random(len(col)) < share
        assert layout.null_among(col, rows) == bool((~valid & rows).any())
    assert layout.null_among(col, ~valid) == (col.null_count > 0)
    for i in range(len(col)):  # each row alone: found exactly where it is null (a byte of valid rows is skipped)
        one = np.zeros(len(col), bool)
        one[i] = True
        assert layout.null_among(col, one) == (not valid[i])


@pytest.mark.parametrize("seed", range(8))
def test_partition_numbers_from_the_table_equal_the_sorted_keys(seed):
    """``_dense_partitions`` (a table over the keys' extent) numbers the partition records' (topic, partition id)
    keys as the sorted distinct keys do (``_partitions``), -1 on other rows and on rows without a topic or partition
    id; keys too sparse for a table are left to the sort (-1, the keyed rows marked 0)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    kind = rng.choice(np.array([layout.PARTITION, layout.CHANGE, layout.TOPIC, layout.OTHER], np.int8), n)
    topic = rng.integers(-1, 6, n).astype(np.int32)
    pid = rng.integers(-1, 40 if seed % 4 else 5000, n).astype(np.int32)  # every fourth seed: sparse ids
    has = ((kind == layout.PARTITION) | (kind == layout.CHANGE)) & (topic >= 0) & (pid >= 0)
    uniq, inv = layout._partitions(topic[has], pid[has])
    part = np.empty(n, np.int32)
    count, part_topic, part_id = layout._dense_partitions(kind, topic, pid, part)
    if count < 0:  # left to the sort, the keyed rows marked for it
        assert seed % 4 == 0 and len(uniq) * 4 + 1024 < (int(topic[has].max()) + 1) * (int(pid[has].max()) + 1)
        assert np.array_equal(part == 0, has) and np.array_equal(part[~has], np.full((~has).sum(), -1))
        return
    want = np.full(n, -1, np.int32)
    want[has] = inv
    assert count == len(uniq) and np.array_equal(part, want)
    assert np.array_equal(part_topic, uniq >> 32) and np.array_equal(part_id, uniq & 0xFFFFFFFF)


@pytest.mark.parametrize("seed", range(6))
def test_valid_rows_are_the_unpacked_validity(seed):
    """``_valid_rows`` (the rows a sparse column has a value on, read a byte of validity bits at a time) equals the
    unpacked bools: chunks sliced at any bit, with no null, only nulls, mostly nulls or few."""
    rng = np.random.default_rng(seed)
    chunks = []
    for _ in range(rng.integers(0, 6)):
        share = rng.choice([0.0, 0.003, 0.5, 1.0])
        vals = [None if rng.random() < share else "t" for _ in range(rng.integers(0, 300))]
        arr = pa.array(vals + ["x"] * 11, pa.string())
        start = int(rng.integers(0, 9))
        chunks.append(arr.slice(start, len(arr) - start - int(rng.integers(0, 3))))
    col = pa.chunked_array(chunks, pa.string())
    valid = np.concatenate([c.is_valid().to_numpy(zero_copy_only=False) for c in chunks]) if chunks else \
        np.zeros(0, bool)
    got = layout._valid_rows(col)
    assert got.dtype == np.int64 and np.array_equal(got, np.flatnonzero(valid))
    assert np.array_equal(layout._valid_rows(pa.array([None, None], pa.string())), np.zeros(0, np.int64))
