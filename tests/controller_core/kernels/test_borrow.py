"""kernels/borrow.py: a borrowed view is the owner's data (reads and writes go through), in any layout the
passes use, and the owner outlives it when read after the loop."""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core.kernels.borrow import borrow, keep


@njit(cache=False)
def _fill_through_views(n):
    owned = (np.zeros((n, 3), np.int64), np.zeros(n, np.int32))
    views = (borrow(owned[0]), borrow(owned[1]))
    for i in range(n):  # the views are handed around; the owners hold the memory
        views[0][i, 2] = i * 7
        views[1][i] = -i
    keep(owned)
    return owned


@njit(cache=False)
def _sum_view(a):
    v = borrow(a)
    s = 0
    for i in range(v.shape[0]):
        s += v[i]
    return s


def test_writes_through_a_borrowed_view_land_in_the_owner():
    grid, ids = _fill_through_views(1000)
    assert grid[:, 2].tolist() == [i * 7 for i in range(1000)]
    assert grid[:, :2].sum() == 0
    assert ids.tolist() == [-i for i in range(1000)]


def test_a_borrowed_view_reads_the_callers_array_and_slices():
    a = np.arange(10_000, dtype=np.int64)
    assert _sum_view(a) == int(a.sum())
    assert _sum_view(a[::3]) == int(a[::3].sum())  # strided: the view keeps the strides
