"""The history's valid-from / valid-to times (``pipeline.date_history``) from the fold's row arrays, in compiled
loops: each history row takes the timestamp of the record it was folded from (``Fold.rows``) and its valid-to
the valid-from of the row that ends it (``Fold.successor``).  Before: a dozen NumPy gathers and masks over the
history, each a pass of its own."""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)


@njit(cache=True)
def segments_increasing(is_seg, offsets) -> bool:
    """The segment records' offsets, in row order, strictly increasing."""
    last = np.int64(0)
    seen = False
    for i in range(len(offsets)):
        if is_seg[i]:
            if seen and offsets[i] <= last:
                return False
            last = offsets[i]
            seen = True
    return True


@njit(cache=True)
def own_times(rows, is_seg, us, known, from_us, from_ok) -> int:
    """Each history row's valid-from: the timestamp of its own record when that is a segment record with one
    (``known``); returns how many rows come from other records (a snapshot's), which the caller dates."""
    others = 0
    for j in range(len(rows)):
        r = rows[j]
        from_us[j] = us[r]
        from_ok[j] = known[r]
        if not is_seg[r]:
            others += 1
    return others


@njit(cache=True)
def successor_times(successor, from_us, from_ok, to_us, to_ok) -> None:
    """Each row's valid-to: the valid-from of the row whose offset is its valid_to_offset (none: null)."""
    for j in range(len(successor)):
        s = successor[j]
        if s >= 0:
            to_us[j] = from_us[s]
            to_ok[j] = from_ok[s]
        else:
            to_us[j] = 0
            to_ok[j] = False


def warm() -> None:
    """Compile the loops (or load them from numba's cache) with the argument types of a real run."""
    i64, b = np.zeros(1, np.int64), np.ones(1, np.bool_)
    segments_increasing(b, i64)
    own_times(i64, b, i64, b, np.zeros(1, np.int64), np.zeros(1, np.bool_))
    successor_times(np.full(1, -1, np.int64), i64, b, np.zeros(1, np.int64), np.zeros(1, np.bool_))
