"""The lookups of records in the history's order (controller_core.kernels.lookup) equal NumPy's: ``gather`` is
``values[rows]`` (rows in any order, repeated, at both ends), ``count_below`` is ``searchsorted(keys, q, "left")``
over keys spread wide or crowded into one bucket (repeats, the binary search within a bucket), queries below, at,
between and past the keys, and no keys at all."""
from __future__ import annotations

import numpy as np
import pytest

from controller_core.kernels.lookup import count_below, gather


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8])
def test_gather_is_numpys(dtype):
    rng = np.random.default_rng(7)
    values = rng.integers(-100, 100, 5000).astype(dtype)
    for m in (0, 1, 255, 256, 257, 3000):  # around the distance rows are fetched ahead
        rows = rng.integers(0, len(values), m)
        rows[:min(m, 2)] = [0, len(values) - 1][:min(m, 2)]
        got = gather(values, rows)
        assert got.dtype == values.dtype
        assert np.array_equal(got, values[rows])


@pytest.mark.parametrize("seed", range(8))
def test_count_below_is_searchsorted(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        span = int(rng.choice([1, 5, 100, 10**4, 10**12]))
        keys = np.sort(rng.integers(0, span, rng.integers(1, 80)))
        if rng.random() < 0.4:  # a run of keys crowded together: past the bucket's linear scan
            at = int(rng.choice(keys))
            keys = np.sort(np.concatenate([keys, at + rng.integers(0, 3, rng.integers(9, 40))]))
        q = np.concatenate([rng.integers(-span, 2 * span + 2, rng.integers(0, 300)), keys, keys - 1, keys + 1])
        rng.shuffle(q)
        assert np.array_equal(count_below(keys, q), np.searchsorted(keys, q, side="left"))
    assert np.array_equal(count_below(np.zeros(0, np.int64), np.arange(5)), np.zeros(5, np.int64))
