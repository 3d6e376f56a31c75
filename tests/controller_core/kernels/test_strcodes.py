"""``strcodes.encode_values`` codes a ``list<string>`` column's values as Arrow's ``dictionary_encode`` of the joined
values does (same codes, same dictionary in order of first appearance): strings of every length around the eight
bytes it compares at a time (empty ones too), chunks sliced in their values, empty chunks, and strings that share
their first and last words; it declines (None: Arrow encodes) a null string among the values and a column with more
distinct strings than its table holds."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from controller_core.kernels import layout, strcodes


def _word(rng) -> str:
    n = int(rng.choice([0, 1, 7, 8, 9, 15, 16, 17, 22, 23, 24, 31, 40]))
    return "".join(rng.choice(list("ab"), n))  # two letters: many strings alike in their first and last bytes


def _column(rng, distinct: int, rows: int) -> pa.ChunkedArray:
    pool = [_word(rng) for _ in range(distinct)]
    values = [None if rng.random() < 0.1 else [pool[int(k)] for k in rng.integers(0, distinct, rng.integers(0, 4))]
              for _ in range(rows)]
    arr = pa.array(values, pa.list_(pa.string()))
    cuts = sorted({0, rows, *rng.integers(0, rows + 1, 3).tolist()})
    return pa.chunked_array([arr.slice(a, b - a) for a, b in zip(cuts, cuts[1:])], arr.type)


def _arrow(col: pa.ChunkedArray):
    enc = pc.dictionary_encode(col.combine_chunks().values)
    return enc.indices.to_numpy(zero_copy_only=False), enc.dictionary


@pytest.mark.parametrize("seed", range(10))
def test_codes_equal_arrows_dictionary_encode(seed):
    rng = np.random.default_rng(seed)
    col = _column(rng, int(rng.integers(1, 60)), int(rng.integers(0, 500)))
    got = strcodes.encode_values(layout._chunks(col))
    want_codes, want_dict = _arrow(col)
    assert got is not None
    assert np.array_equal(got[0], want_codes) and got[1].equals(want_dict)


def test_a_null_string_and_too_many_strings_are_left_to_arrow():
    with_null = pa.chunked_array([pa.array([["x", None]], pa.list_(pa.string()))])
    assert strcodes.encode_values(layout._chunks(with_null)) is None
    many = pa.chunked_array([pa.array([[f"dir-{i}" for i in range(strcodes.MAX_DISTINCT + 1)]],
                                      pa.list_(pa.string()))])
    assert strcodes.encode_values(layout._chunks(many)) is None
    fits = pa.chunked_array([pa.array([[f"dir-{i}" for i in range(strcodes.MAX_DISTINCT)]], pa.list_(pa.string()))])
    codes, dictionary = strcodes.encode_values(layout._chunks(fits))
    assert np.array_equal(codes, np.arange(strcodes.MAX_DISTINCT)) and dictionary.to_pylist()[-1] == f"dir-{strcodes.MAX_DISTINCT - 1}"


def test_strings_alike_but_in_one_place():
    """Strings of one length that share all but a byte -- in the first word, in a middle one, in the last (thousands:
    their hashes meet in the table, so the bytes decide) -- each get a code of their own."""
    words = []
    for n in (9, 17, 22, 24, 33):
        for at in range(n):
            for ch in "bcdefgh":
                words.append("a" * at + ch + "a" * (n - at - 1))
    tails = [f"{'x' * 16}{i:06d}" for i in range(6000)]  # 22 bytes: first and middle words alike
    col = pa.chunked_array([pa.array([words + tails, words[::-1]], pa.list_(pa.string()))])
    got = strcodes.encode_values(layout._chunks(col))
    want_codes, want_dict = _arrow(col)
    assert np.array_equal(got[0], want_codes) and got[1].equals(want_dict)
    assert len(want_dict) == len(set(words)) + len(tails)
