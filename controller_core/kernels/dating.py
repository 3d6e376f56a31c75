"""The history's valid-from / valid-to times (``pipeline.date_history``) from the fold's row arrays, in one compiled
loop: each history row takes the timestamp of the record it was folded from (``Fold.rows``) and its valid-to the
valid-from of the row that ends it (``Fold.successor``).  Before: a dozen NumPy gathers and masks over the
history, each a pass of its own.  And the change records' trigger labels placed on their rows (:func:`place`) and
counted (:func:`count`)."""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.kernels.prefetch import prefetch
from controller_core.numba_cache import read_only

# history rows between fetching a row's record time and reading it: the rows come grouped by partition, their records
# scattered over the log
_AHEAD = 256


@njit(cache=True, nogil=True)
def times(rows, successor, us, known, from_us, from_ok, to_us, to_ok) -> None:
    """Each history row's valid-from, the time of its own input row (``us`` where ``known``, else null), and its
    valid-to, the valid-from of its successor row (none: null)."""
    m = len(rows)
    for j in range(m):
        if j + _AHEAD < m:
            q = rows[j + _AHEAD]
            prefetch(us, q)
            prefetch(known, q)
        r = rows[j]
        from_us[j] = us[r]
        from_ok[j] = known[r]
    for j in range(len(successor)):
        s = successor[j]
        if s >= 0:
            to_us[j] = from_us[s]
            to_ok[j] = from_ok[s]
        else:
            to_us[j] = 0
            to_ok[j] = False


@njit(cache=True, nogil=True)
def place(rows, labels, codes, bits) -> None:
    """Each change record's label code ``labels[k]`` onto its history row ``rows[k]`` in ``codes``, and that row's
    validity bit set in ``bits`` (both zeros before: the other rows have no trigger).  A pass of its own over the
    change rows: as NumPy scatters and a mask packed into bits, 2.7 ns a record of the benchmark's group, 0.8 so."""
    for k in range(len(rows)):
        r = rows[k]
        codes[r] = labels[k]
        bits[r >> 3] |= np.uint8(1 << (r & 7))


@njit(cache=True, nogil=True)
def count(codes, counts) -> None:
    """How many change records each label code labels, into ``counts`` (zeros; a code per record, none negative): one
    pass (NumPy's ``bincount`` of 1.31 M int32 codes took 3.3 ms, converting and checking them first)."""
    for k in range(len(codes)):
        counts[codes[k]] += 1


def warm() -> None:
    """Compile the loop (or load it from numba's cache) with the argument types of a real run."""
    i64, b = np.zeros(1, np.int64), np.ones(1, np.bool_)
    times(i64, np.full(1, -1, np.int64), i64, b, np.zeros(1, np.int64), np.zeros(1, np.bool_), np.zeros(1, np.int64),
          np.zeros(1, np.bool_))
    place(i64, np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.uint8))
    for codes in (np.zeros(1, np.int32), np.zeros(1, np.int64)):
        count(read_only(codes), np.zeros(1, np.int64))
