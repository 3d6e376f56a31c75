"""An integer column's values with its nulls read as a given value, in one compiled loop over the values and their
validity bits where they lie (:func:`controller_core.codec.arrowutil.column_ints` for a chunk with some nulls).

In Arrow and NumPy that was four passes and three fresh arrays per chunk (fill the nulls, convert, unpack the
validity, mask): the partition id, the epochs and the config resource type of a replay's records, 2.3 ns a record
for one column on the benchmark's 1.44 M-record group, 0.7 this way.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.numba_cache import read_only


@njit(cache=True, nogil=True)
def _filled(vals, bits, bit0, fill, out):
    for r in range(len(vals)):
        b = bit0 + r
        out[r] = vals[r] if (bits[b >> 3] >> (b & 7)) & 1 else fill


def fill_into(chunk, dtype_of_values, fill, out: np.ndarray) -> None:
    """``out[:] = chunk`` with its nulls as ``fill`` (``chunk``: an Arrow integer array with a validity bitmap;
    ``dtype_of_values``: its values' NumPy type; ``out``: an array of ``len(chunk)``, contiguous or a matrix's column)."""
    n = len(chunk)
    bufs = chunk.buffers()
    vals = np.frombuffer(bufs[1], dtype_of_values, count=n, offset=chunk.offset * np.dtype(dtype_of_values).itemsize)
    bits = np.frombuffer(bufs[0], np.uint8)
    _filled(read_only(vals), read_only(bits), chunk.offset, out.dtype.type(fill), out)


def warm() -> None:
    """Compile the loop (or load it from numba's cache) for every integer column type into int64 and int32."""
    import pyarrow as pa

    for typ, dtype in ((pa.int8(), np.int8), (pa.int16(), np.int16), (pa.int32(), np.int32), (pa.int64(), np.int64)):
        chunk = pa.array([1, None], typ)
        for out in (np.int64, np.int32):
            fill_into(chunk, dtype, -1, np.empty(2, out))
        fill_into(chunk, dtype, -1, np.empty((2, 5), np.int32)[:, 1])  # (a column of the layout's ints)
