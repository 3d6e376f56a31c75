"""pipeline._offset_finder, which dates every history row (valid-from / valid-to) and places its trigger: the
position of each queried offset among a log's offsets, -1 where absent -- by a table indexed by offset when
the offsets are nearly dense, by binary search when they are sparse; both equal a dictionary lookup."""
from __future__ import annotations

import numpy as np
import pytest

from controller_core.pipeline import _offset_finder


@pytest.mark.parametrize("gap", [1, 3, 10_000])  # dense, a NoOp-thinned log, a sparse set (the search)
@pytest.mark.parametrize("seed", range(3))
def test_positions_equal_a_dictionary(gap, seed):
    rng = np.random.default_rng(seed)
    offsets = np.unique(rng.integers(0, 5000 * gap, 5000)) + int(rng.integers(0, 10 ** 12))
    queries = np.concatenate([offsets, offsets + 1, offsets - 1, [-1, 0, 2 ** 62, offsets[0] - 10 ** 9]])
    rng.shuffle(queries)
    where = {int(o): i for i, o in enumerate(offsets)}
    assert _offset_finder(offsets)(queries).tolist() == [where.get(int(q), -1) for q in queries]


def test_no_offsets():
    assert _offset_finder(np.zeros(0, np.int64))(np.array([0, 5, -1])).tolist() == [-1, -1, -1]
