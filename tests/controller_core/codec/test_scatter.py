"""codec/scatter.place (the compiled placement of string and integer-list columns) against the Arrow way it
replaces: ``concat_arrays(pieces).take(inverse)``, on generated pieces (nulls, empty values, slices, rows no
group holds) and on the bronze rows of every real log and a simulated one."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from controller_core.codec import bronze, scatter
from controller_core.codec.arrowutil import from_numpy
from controller_core.codec.logfile import iter_chunks
from controller_core.replay import TYPED_ONLY
from realdata_facts import REALDATA, readme_table

REAL_FILES = sorted(REALDATA / rel for rel in readme_table())
TYPES = [pa.string(), pa.list_(pa.int32()), pa.list_(pa.int64()), pa.binary()]


def _values(typ):
    if pa.types.is_list(typ):
        return st.none() | st.lists(st.integers(-2 ** 31, 2 ** 31 - 1), max_size=5)
    if pa.types.is_binary(typ):
        return st.none() | st.binary(max_size=30)
    return st.none() | st.text(max_size=30)


def _arrow_way(held, n, typ):
    rows = np.concatenate([r for r, _ in held]) if held else np.zeros(0, np.int64)
    inverse = np.zeros(n, np.int64)
    valid = np.zeros(n, bool)
    inverse[rows] = np.arange(len(rows))
    valid[rows] = True
    whole = pa.concat_arrays([a for _, a in held]) if held else pa.nulls(0, typ)
    return whole.take(from_numpy(inverse, valid))


@settings(max_examples=80, deadline=None)
@given(data=st.data(), typ=st.sampled_from(TYPES), groups=st.integers(1, 4), spare=st.integers(0, 5))
def test_place_equals_concat_and_take(data, typ, groups, spare):
    sizes = [data.draw(st.integers(0, 12)) for _ in range(groups)]
    n = sum(sizes) + spare
    order = np.array(data.draw(st.permutations(range(n))), np.int64)
    held, at = [], 0
    for size in sizes:
        vals = data.draw(st.lists(_values(typ), min_size=size + 2, max_size=size + 2))
        arr = pa.array(vals, typ).slice(1, size)  # a slice: offsets not starting at 0
        held.append((np.sort(order[at:at + size]), arr))
        at += size
    got = scatter.place(held, n, typ)
    want = _arrow_way(held, n, typ)
    assert got is not None and got.type == want.type
    assert got.equals(want), (got.to_pylist(), want.to_pylist())


def test_columns_it_does_not_place_are_left_to_arrow():
    assert scatter.place([(np.array([0]), pa.array([["a"]]))], 1, pa.list_(pa.string())) is None
    with_null_element = pa.array([[1, None]], pa.list_(pa.int32()))
    assert scatter.place([(np.array([0]), with_null_element)], 1, pa.list_(pa.int32())) is None


def _same_bronze(path, monkeypatch) -> int:
    n = 0
    for chunk in iter_chunks(str(path)):
        for without in (frozenset(), TYPED_ONLY):
            monkeypatch.setattr(bronze, "COMPILED_MIN_RECORDS", 1)
            got = bronze.records_table(chunk, "c", "f", "segment", without)
            monkeypatch.setattr(bronze, "COMPILED_MIN_RECORDS", 1 << 62)
            want = bronze.records_table(chunk, "c", "f", "segment", without)
            assert got.schema == want.schema
            for name in want.column_names:
                assert got.column(name).equals(want.column(name)), (path, name)
        n += len(chunk)
    return n


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: str(p.relative_to(REALDATA)))
def test_bronze_rows_equal_the_arrow_placement_on_every_real_file(path, monkeypatch):
    assert _same_bronze(path, monkeypatch) > 0


def test_bronze_rows_equal_the_arrow_placement_on_a_simulated_log(tmp_path, monkeypatch):
    from controller_core.logdir import discover
    from simulator.fleet import simulate_fleet

    simulate_fleet(tmp_path, 1000, 6, seed=7)
    assert sum(_same_bronze(lf.path, monkeypatch) for lf in discover(tmp_path)
               if lf.kind in ("segment", "snapshot")) > 5_000
