"""``arrowutil.valid_at``: whether a column holds a value at some rows, read off the validity bits of the chunks the
rows fall in -- equal to ``is_valid`` of the whole column taken at those rows, for list and integer columns of
chunks with and without nulls, sliced chunks (a bit offset not on a byte) and empty chunks."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given
from hypothesis import strategies as st

from controller_core.codec.arrowutil import valid_at

_values = st.lists(st.one_of(st.none(), st.lists(st.integers(0, 9), max_size=3)), max_size=40)


@given(chunks=st.lists(st.tuples(_values, st.integers(0, 9)), min_size=1, max_size=5), ints=st.booleans(),
       pick=st.lists(st.integers(0, 10_000), max_size=30))
def test_equal_to_is_valid_at_the_rows(chunks, ints, pick):
    typ = pa.int32() if ints else pa.list_(pa.int32())
    arrays = []
    for values, cut in chunks:
        vals = [None if v is None else (len(v) if ints else v) for v in values]
        arrays.append(pa.array(vals, typ).slice(min(cut, len(vals))))  # sliced: bits from an offset
    col = pa.chunked_array(arrays, typ)
    n = len(col)
    rows = np.unique(np.array([p % n for p in pick], np.int64)) if n else np.zeros(0, np.int64)
    want = np.asarray(pc.is_valid(col), bool)[rows] if n else np.zeros(0, bool)
    assert valid_at(col, rows).tolist() == want.tolist()
    assert valid_at(col.combine_chunks() if n else arrays[0], rows).tolist() == want.tolist()
