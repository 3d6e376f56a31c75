"""``arrowutil.equal``: a string column compared with a value, its dictionary-encoded chunks by code, exactly as
``pc.equal`` compares the strings (a replay's ``source_kind`` is dictionary-encoded: codec/bronze.REPLAY_SCHEMA)."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core.codec.arrowutil import equal


def _chunks(*lists, encode=True):
    arrays = [pa.array(v, pa.string()) for v in lists]
    return pa.chunked_array([a.dictionary_encode() if encode else a for a in arrays])


@pytest.mark.parametrize("value", ["segment", "snapshot", "bootstrap", ""])
def test_by_code_equals_by_string(value):
    # chunks with dictionaries of their own (another order, a value missing), nulls, an empty chunk
    col = _chunks(["segment", "snapshot", None, "segment"], ["snapshot", "bootstrap"], [], [None, "segment", ""])
    got = equal(col, value)
    want = pc.equal(col.cast(pa.string()), value)
    assert got.type == pa.bool_() and got.to_pylist() == want.to_pylist()
    assert got.null_count == 2  # a null row stays null, as pc.equal leaves it


def test_plain_strings_and_a_lone_array():
    plain = _chunks(["segment", None, "snapshot"], encode=False)
    assert equal(plain, "segment").to_pylist() == [True, None, False]
    single = pa.array(["a", "segment"]).dictionary_encode()  # an array, not a chunked array
    assert equal(single, "segment").to_pylist() == [False, True]
