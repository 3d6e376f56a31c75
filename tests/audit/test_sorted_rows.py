"""audit.frames.sorted_rows / take_chunked: the audit's column-at-a-time sort equals Arrow's own."""
import numpy as np
import pyarrow as pa
import pytest

from audit import frames as F


def _chunked(rng, n_chunks: int) -> pa.ChunkedArray:
    chunks = []
    for _ in range(n_chunks):
        k = int(rng.integers(0, 6))  # empty chunks too
        vals = [None if rng.random() < 0.2 else "t" * int(rng.integers(0, 4)) + str(int(rng.integers(0, 9)))
                for _ in range(k)]
        chunks.append(pa.array(vals, pa.string()))
    return pa.chunked_array(chunks, pa.string())


@pytest.mark.parametrize("seed", range(20))
def test_take_chunked_equals_arrow_take(seed):
    rng = np.random.default_rng(seed)
    col = _chunked(rng, int(rng.integers(0, 5)))
    rows = rng.integers(0, max(len(col), 1), size=int(rng.integers(0, 30))) if len(col) else np.zeros(0, np.int64)
    got = F.take_chunked(col, rows.astype(np.int64), piece=int(rng.integers(1, 8)))
    assert got.to_pylist() == col.take(pa.array(rows, pa.int64())).to_pylist()
    assert got.type == pa.string()


def test_sorted_rows_equals_sort_by_and_empties_the_parts():
    rng = np.random.default_rng(7)
    parts = []
    for _ in range(4):
        n = int(rng.integers(0, 50))
        parts.append(pa.table({"first_offset": pa.array(rng.integers(0, 10, n), pa.int64()),
                               "code": pa.array(rng.choice(["A_X", "B_Y"], n).tolist(), pa.string()),
                               "explanation": pa.array([f"text {i}" for i in range(n)], pa.string())}))
    keys = (("first_offset", "ascending"), ("code", "ascending"))
    expected = pa.concat_tables(parts).sort_by(list(keys))  # Arrow's sort is stable: ties keep input order
    held = list(parts)
    got = F.sorted_rows(held, keys)
    assert held == []
    assert got.equals(expected)


@pytest.mark.parametrize("seed", range(12))
def test_unique_rows_equals_numpy_unique_rows(seed):
    """frames.unique_rows: the same distinct rows as np.unique(axis=0) and an inverse that rebuilds the input,
    whether the columns pack into one key (narrow spans, or few distinct values over wide spans) or not."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    kind = seed % 3
    if kind == 0:  # durations, left-out gaps and flags: what the window texts key on
        key = np.stack([rng.integers(-1, 50, n), rng.integers(0, 3, n), rng.integers(0, 2, n), rng.integers(0, 2, n)], 1)
    elif kind == 1:  # wide spans, few distinct values: the columns' distinct values become the digits
        key = np.stack([rng.choice([-(1 << 61), 0, 1 << 61], n), rng.choice([5, 1 << 60], n)], 1)
    else:  # ten wide columns of many distinct values: the packed key would pass 2^62, the rows are sorted instead
        n = max(n, 300)
        key = rng.integers(-(1 << 62), 1 << 62, (n, 10))
        key[n // 2:] = key[:n - n // 2]  # repeats
    key = key.astype(np.int64)
    uniq, inverse = F.unique_rows(key)
    expected = np.unique(key, axis=0) if n else key
    assert sorted(map(tuple, uniq.tolist())) == sorted(map(tuple, expected.tolist()))
    assert len(uniq) == len({tuple(r) for r in key.tolist()})
    assert np.array_equal(uniq[inverse], key)
