"""Lookups for rows that come in an order the memory does not follow: the change records in the history's order
(grouped by partition) reading columns kept in log order.

* :func:`gather`: ``values[rows]``, each value fetched 256 rows ahead (:mod:`.prefetch`): NumPy's gather waits on a
  cache miss per row.  On the benchmark's 1.44 M-record group the records' batch and topic took 2.5 and 1.9 ns a
  record by NumPy, 0.8 and 0.7 this way.
* :func:`count_below`: how many of a few sorted keys (the broker timeline's offsets) lie below each query (a
  record's offset), through a table of buckets over the keys' range that stays in the cache: NumPy's form
  (``vector.recompute.count_below``) builds a table over the queries' whole range (the log's offsets: 46 MB on that
  group) or mispredicts at every step of a binary search.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.kernels.borrow import borrow
from controller_core.kernels.prefetch import prefetch
from controller_core.numba_cache import read_only

_AHEAD = 256  # rows between fetching a value and reading it (64: 1.5 ns a row, 256: 0.8)
_SCAN = 8  # keys in one bucket searched one after another; more, by halves


@njit(cache=True, inline="always")
def lower_bound(keys, a, b, x):
    """The first position in ``keys[a:b]`` (ascending) holding ``x`` or more (``b``: none), by halves.  ``keys`` a
    borrowed view (kernels/borrow.py) where the caller loops."""
    while a < b:
        mid = (a + b) >> 1
        if keys[mid] < x:
            a = mid + 1
        else:
            b = mid
    return a


@njit(cache=True, nogil=True)
def _gather(values, rows, out):
    m = len(rows)
    for j in range(m):
        if j + _AHEAD < m:
            prefetch(values, rows[j + _AHEAD])
        out[j] = values[rows[j]]


def gather(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``values[rows]`` (``rows`` int64, every one within ``values``; one-dimensional ``values``)."""
    out = np.empty(len(rows), values.dtype)
    _gather(read_only(np.ascontiguousarray(values)), read_only(np.ascontiguousarray(rows, np.int64)), out)
    return out


@njit(cache=True, nogil=True)
def _count_below(keys, q, out):
    n = len(keys)
    lo, hi = keys[0], keys[n - 1]
    shift = 0
    while ((hi - lo) >> shift) >= 2 * n + 64:  # about two buckets a key
        shift += 1
    nb = ((hi - lo) >> shift) + 2
    first = np.empty(nb, np.int64)  # first[b]: the keys below the start of bucket b, lo + (b << shift)
    b_keys = borrow(keys)
    k = 0
    for b in range(nb):
        start = lo + (np.int64(b) << shift)
        while k < n and keys[k] < start:
            k += 1
        first[b] = k
    for j in range(len(q)):
        x = q[j]
        if x <= lo:
            out[j] = 0
            continue
        if x > hi:
            out[j] = n
            continue
        b = (x - lo) >> shift
        a, e = first[b], first[b + 1]
        if e - a > _SCAN:  # keys crowded into one bucket: by halves
            a = lower_bound(b_keys, a, e, x)
        else:
            while a < e and keys[a] < x:
                a += 1
        out[j] = a


def count_below(sorted_keys: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The number of ``sorted_keys`` (ascending int64) below each query ``q`` (int64): ``np.searchsorted(sorted_keys,
    q, "left")``."""
    out = np.empty(len(q), np.int64)
    if not len(sorted_keys):
        out[:] = 0
        return out
    _count_below(read_only(np.ascontiguousarray(sorted_keys, np.int64)), read_only(np.ascontiguousarray(q, np.int64)),
                 out)
    return out


def warm() -> None:
    """Compile the loops (or load them from numba's cache) for what they are given: int64 batches and int32 topics
    to gather, int64 offsets to count."""
    rows = np.zeros(1, np.int64)
    for dtype in (np.int64, np.int32):
        gather(np.zeros(1, dtype), rows)
    count_below(rows, rows)
