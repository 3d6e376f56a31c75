"""``arrowutil.nulls``: all-null arrays over one shared, never-written buffer of zeros, equal to ``pa.nulls``
in every way a reader can see -- values, validity, Arrow's full validation, and what bronze rows made with
them write to Parquet and read back."""
from __future__ import annotations

import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from controller_core.codec import arrowutil
from controller_core.codec.arrowutil import nulls
from controller_core.codec.bronze import SCHEMA, records_table
from controller_core.codec.logfile import iter_chunks

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.bool_(), pa.timestamp("ms", tz="UTC"),
         pa.timestamp("us", tz="UTC"), pa.string(), pa.binary(), pa.list_(pa.int32()), pa.list_(pa.string()),
         pa.float64()]


@pytest.mark.parametrize("typ", TYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 70_001])
def test_equal_to_pa_nulls(typ, n):
    a = nulls(n, typ)
    a.validate(full=True)
    assert a.type == typ and len(a) == n and a.null_count == n
    assert a.equals(pa.nulls(n, typ))
    # what readers do with such a column: fill, slice, concatenate with values, compare
    assert a.slice(n // 3).equals(pa.nulls(n - n // 3, typ))
    if n:
        assert pc.all(pc.is_null(a)).as_py()
        assert pa.concat_arrays([a, pa.nulls(2, typ)]).null_count == n + 2


def test_one_buffer_for_all():
    """The point of it: no buffer per array (``pa.nulls`` allocates and zero-fills one each time)."""
    a, b = nulls(50_000, pa.int64()), nulls(40_000, pa.string())
    shared = {buf.address for buf in a.buffers() + b.buffers() if buf is not None and buf.size}
    assert shared == {arrowutil._ZEROS[0].address}
    big = nulls(3 * arrowutil._ZEROS[0].size, pa.int32())  # longer than the buffer: it grows
    big.validate(full=True)
    assert big.buffers()[1].size == 4 * len(big)


def test_a_small_array_pickles_small():
    """Each array's buffers are as long as it needs, not the shared buffer's length: a pickle (Spark ships a
    closure's tables that way) or an IPC stream of ten null rows is bytes, not the megabytes the zeros hold."""
    import pickle

    arrowutil._zeros(8 << 20)
    t = pa.table({"a": nulls(10, pa.int64()), "b": nulls(10, pa.string()), "c": nulls(10, pa.list_(pa.int32())),
                  "d": nulls(10, pa.bool_())})
    data = pickle.dumps(t)
    assert len(data) < 4096 and pickle.loads(data).equals(t)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    assert sink.getvalue().size < 4096


def test_bronze_rows_round_trip_parquet(realdata):
    """Bronze rows of the largest real segment (most of their typed columns all-null per chunk, made by ``nulls``)
    write to Parquet and read back equal, with each column's nulls where the decoder put them."""
    seg = max(realdata.rglob("*.log"), key=lambda f: f.stat().st_size)
    tables = [records_table(c, "c", seg.name, "segment") for c in iter_chunks(str(seg), seg.name) if len(c)]
    table = pa.concat_tables(tables)
    assert table.schema == SCHEMA and table.num_rows
    table.validate(full=True)
    sink = io.BytesIO()
    pq.write_table(table, sink)
    back = pq.read_table(io.BytesIO(sink.getvalue()), schema=SCHEMA)
    assert back.equals(table)
    assert any(table.column(f.name).null_count == table.num_rows for f in SCHEMA)  # the all-null case occurred


def test_column_ints_fills_null_chunks():
    """``column_ints`` over chunks with some, no and only nulls (the last now filled without reading the chunk)."""
    import numpy as np

    from controller_core.codec.arrowutil import column_ints

    col = pa.chunked_array([pa.array([1, None, 3], pa.int32()), nulls(4, pa.int32()), pa.array([], pa.int32()),
                            pa.nulls(2, pa.int32()), pa.array([5], pa.int32())])
    assert column_ints(col, -7, np.int32).tolist() == [1, -7, 3, -7, -7, -7, -7, -7, -7, 5]
    assert column_ints(col).dtype == np.int64 and column_ints(col).tolist() == [1, 0, 3, 0, 0, 0, 0, 0, 0, 5]


@pytest.mark.parametrize("typ", [pa.int8(), pa.int16(), pa.int32(), pa.int64()])
def test_column_ints_of_large_chunks_with_some_nulls(typ):
    """A chunk with some nulls past ``_COMPILED_FILL`` rows is filled by the compiled loop (codec/nullfill.py) from
    its values and validity bits where they lie -- chunks sliced inside a byte of the bitmap, into int64 and int32
    -- as the NumPy form fills the small ones."""
    import numpy as np

    from controller_core.codec import arrowutil

    rng = np.random.default_rng(typ.bit_width)
    n = 3 * arrowutil._COMPILED_FILL
    vals = [None if rng.random() < 0.3 else int(v) for v in rng.integers(-100, 100, n)]
    arr = pa.array(vals, typ)
    cuts = [(3, arrowutil._COMPILED_FILL + 5), (arrowutil._COMPILED_FILL + 8, arrowutil._COMPILED_FILL + 1), (0, 10)]
    col = pa.chunked_array([arr.slice(a, k) for a, k in cuts])
    for dtype in (np.int64, np.int32):
        want = np.array([-7 if v is None else v for a, k in cuts for v in vals[a:a + k]], dtype)
        got = arrowutil.column_ints(col, -7, dtype)
        assert got.dtype == dtype and np.array_equal(got, want)
        matrix = np.zeros((len(col), 3), dtype)  # into a matrix's column, as the layout's epochs are read
        assert arrowutil.column_ints(col, -7, dtype, matrix[:, 1]) is not None
        assert np.array_equal(matrix[:, 1], want) and not matrix[:, [0, 2]].any()


def test_repeat_str_reuses_its_buffers():
    """``repeat_str`` of a text it made before, as long or shorter: slices of the same buffers (a decoded chunk's
    source_file / source_kind / cluster, made for every chunk), each array exactly as long as it is -- its values
    right, its pickle its own size -- and a longer one made anew."""
    import pickle

    from controller_core.codec.arrowutil import repeat_str

    text = "00000000000000004242.log-kraft-audit-test"
    first = repeat_str(text, 50_000)
    again, short = repeat_str(text, 50_000), repeat_str(text, 7)
    assert again.buffers()[2].address == first.buffers()[2].address == short.buffers()[2].address
    for arr, n in ((first, 50_000), (again, 50_000), (short, 7)):
        arr.validate(full=True)
        assert arr.to_pylist() == [text] * n
    assert len(pickle.dumps(short)) < 1024
    longer = repeat_str(text, 60_000)
    assert longer.to_pylist() == [text] * 60_000 and longer.buffers()[2].address != first.buffers()[2].address
    assert repeat_str("", 3).to_pylist() == ["", "", ""] and repeat_str("é", 2).to_pylist() == ["é", "é"]
    assert repeat_str(text, 0).to_pylist() == []


def test_threads_growing_the_zeros_at_once():
    """The decoder's threads make null columns at the same time, and may each grow the shared zeros: every array
    gets buffers as long as it needs, whichever thread's buffer ends up shared."""
    import threading

    bad = []

    def work(k: int) -> None:
        for n in range(1, 3000, 7):
            a = nulls(n * (k + 1) * 11, pa.int64() if k % 2 else pa.list_(pa.int32()))
            try:
                a.validate(full=True)
            except pa.ArrowInvalid as exc:  # pragma: no cover - what a short buffer would raise
                bad.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_repeat_str_keeps_at_most_its_bytes(monkeypatch):
    """The kept buffers stay under their bound, all texts together: the least recently used text goes first, and an
    array longer than the bound is made for its caller alone (still right)."""
    from collections import OrderedDict

    from controller_core.codec.arrowutil import repeat_str

    monkeypatch.setattr(arrowutil, "_REPEATED", OrderedDict())
    monkeypatch.setattr(arrowutil, "_REPEATED_MAX_BYTES", 10_000)
    for text in ("aa", "bb", "cc"):
        assert repeat_str(text, 1000).to_pylist() == [text] * 1000  # 6,004 bytes each
    kept = arrowutil._REPEATED
    assert list(kept) == [b"cc"] and sum(o.size + v.size for o, v in kept.values()) <= 10_000
    assert repeat_str("dd", 5000).to_pylist() == ["dd"] * 5000 and b"dd" not in kept


def test_plain_decodes_codes_and_keeps_the_rest(realdata):
    """A replay's own read of a real segment (record types as codes, partition records without their JSON in a
    column bronze declares non-nullable) decoded by ``plain``: bronze's schema and the full read's values."""
    seg = sorted(realdata.rglob("*.log"))[0]
    chunk = next(c for c in iter_chunks(str(seg), seg.name) if len(c))
    lean = records_table(chunk, "", seg.name, "segment", frozenset({"PARTITION_RECORD", "PARTITION_CHANGE_RECORD"}),
                         lean=True)
    full = records_table(chunk, "", seg.name, "segment")
    assert pa.types.is_dictionary(lean.schema.field("record_type").type)
    got = arrowutil.plain(lean)
    assert got.schema.equals(SCHEMA) and arrowutil.plain_schema(lean.schema).equals(SCHEMA)
    assert got.drop_columns(["data_json"]).equals(full.drop_columns(["data_json"]))
    assert arrowutil.plain(full) is full  # nothing to decode: the same table
    codes = pa.dictionary(pa.int32(), pa.string())
    lists = pa.table({"d": pa.array([["a", "b"], None, []], pa.list_(pa.string())).cast(pa.list_(codes))})
    assert arrowutil.plain(lists).column("d").to_pylist() == [["a", "b"], None, []]
    assert arrowutil.plain(lists).schema.field("d").type == pa.list_(pa.string())
