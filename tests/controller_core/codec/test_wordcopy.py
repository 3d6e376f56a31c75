"""The word copies of codec/wordcopy.py: a copy in whole words lands the source's bytes where asked and touches
nothing outside [pos, lim) (the bytes past the copy are the writer's to overwrite), uuid compares and copies by
words equal the byte ones, and a column spelled from codes equals Arrow's take of the same texts."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from controller_core.codec import wordcopy


@pytest.mark.parametrize("seed", range(4))
def test_copy_within_writes_the_bytes_and_nothing_past_its_limit(seed):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 256, 200, dtype=np.uint8)
    for _ in range(300):
        s = int(rng.integers(0, 190))
        e = s + int(rng.integers(0, min(40, 200 - s) + 1))
        out = np.full(120, 7, np.uint8)
        pos = int(rng.integers(0, 60))
        lim = pos + (e - s) + int(rng.integers(0, 12))
        end = wordcopy.copy_within(out, pos, src, s, e, min(lim, len(out)))
        assert end == pos + e - s
        assert (out[pos:end] == src[s:e]).all()
        assert (out[:pos] == 7).all() and (out[min(lim, len(out)):] == 7).all()


def test_uuid_words_equal_the_byte_forms():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 4, 400, dtype=np.uint8)  # few values: equal runs of 16 bytes happen
    a[200:216] = a[100:116]
    hits = 0
    for p in list(range(0, 384, 3)) + [100, 200]:
        for q in (100, 200, p):
            same = wordcopy.equal16(a, p, q)
            assert same == bytes(a[p:p + 16]).__eq__(bytes(a[q:q + 16]))
            hits += same
    assert hits > 130  # beyond each position with itself: the copied run, both ways
    out = np.zeros(70, np.uint8)
    wordcopy.copy22(out, 24, a, 50)
    assert (out[24:46] == a[50:72]).all() and not out[:24].any() and not out[46:].any()


@pytest.mark.parametrize("n", [0, 1, 1000])
def test_spelled_equals_take(n):
    rng = np.random.default_rng(n)
    texts = ["PARTITION_CHANGE_RECORD", "NO_OP_RECORD", "", "A", "FEATURE_LEVEL_RECORD_0123456789"]
    codes = rng.integers(0, len(texts), n)
    offsets, data = wordcopy.spelled([t.encode() for t in texts], codes)
    got = pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data))
    assert got.equals(pa.array(texts, pa.string()).take(pa.array(codes)))
