"""The C library's heap policy of a command that replays in its own process: freed memory is kept for reuse.

NumPy allocates through the C library's ``malloc``.  glibc serves every block above its mmap threshold (at most
32 MB, so every array of a million-record replay's layout) with a fresh ``mmap`` and unmaps it on ``free``, and
gives the top of its heap back past a trim threshold.  On a VM whose host backs a guest page on its first write
(this machine: ~2 ms per MB, ``benchmarks/first_touch.py``), every array a replay step allocates after an earlier
step freed one of the same size then pays those pages again: ``describe``'s replay of a 1.15 M-record log took
0.16-0.43 s from one call to the next in one process, 0.13-0.17 s with freed blocks kept.  So a command that
replays in process keeps them: no mmap for a block, no trim below 2 GB free at the top of the heap, and one arena
for every thread -- glibc gives each new thread an arena of its own, 64 MB heaps that it maps and trims by itself,
so the decoder's threads faulted their windows' arrays in again where the main heap had them free (``describe`` of
the 1.15 M-record log, interpreter to exit: 1.10-1.33 s with the first two, 0.94-0.98 s with the one arena; 1.22-1.43
s without any).  A replay allocates few, large arrays: its threads do not wait on the one arena's lock.

NumPy also asks the kernel for transparent huge pages on every array of 4 MB or more (``madvise``), and on this
VM a huge page's first write is the dearer and the less predictable way to fresh memory: a 200 MB array written
in 2 MB pages took 0.07-0.86 ms per MB from one process to the next (0.07 where the host still backed pages the
guest had freed moments before), in 4 kB pages 0.39-0.44 every time (``benchmarks/first_touch.py`` with
``NUMPY_MADVISE_HUGEPAGE`` 1 and 0), and ``verify``'s first call on a 1.15 M-record log took 0.56-1.1 s with
them, 0.44-0.45 s without.  So that process asks for none (:func:`small_pages`); a warm replay, whose memory is
its own by then, runs at the same speed either way.

Not for a process whose peak is near the memory budget (audit, plan, quality hold whole tables: what they free
is given back), nor for a Spark worker.  Arrow's own pool is another allocator (``lake.files.return_freed_memory``
sets its policy); this is the C library's.
"""
from __future__ import annotations

import ctypes
import mmap

import numpy as np

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
TRIM_BYTES = (1 << 31) - 1  # (mallopt takes an int)
TOP_PAD_BYTES = 64 << 20  # the heap grows 64 MB at a time: fewer brk calls


def log_only_process() -> bool:
    """Set up this process for a command that replays in it and exits (``jobs.cli.console``'s ``LOG_ONLY``
    commands; the benchmarks' children as the executable does): :func:`keep_freed_memory` and
    :func:`small_pages`.  True when both took."""
    kept = keep_freed_memory()
    return small_pages() and kept


def small_pages() -> bool:
    """From here on NumPy no longer asks the kernel for transparent huge pages on its large arrays (see the module
    docstring; the kernel's own policy, ``/sys/kernel/mm/transparent_hugepage/enabled``, still rules: with
    ``always`` it uses them unasked).  False where this NumPy has no such switch."""
    try:
        from numpy._core.multiarray import _set_madvise_hugepage
    except ImportError:
        return False
    _set_madvise_hugepage(False)
    return True


def keep_freed_memory() -> bool:
    """From here on, this process's ``malloc`` keeps what ``free`` gives back (see the module docstring).  False
    where the C library has no ``mallopt`` (not glibc) or refuses: nothing changed, nothing wrong."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return all(mallopt(param, value) == 1
               for param, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_BYTES), (M_TOP_PAD, TOP_PAD_BYTES),
                                    (M_ARENA_MAX, 1)))


# from this size :func:`zeros` maps its own pages (below it, a page or two of the heap costs nothing to clear)
MAPPED_BYTES = 1 << 20


def zeros(shape, dtype) -> np.ndarray:
    """``np.zeros(shape, dtype)`` whose pages stay the kernel's zero page until something writes them, whatever the
    C library's policy: an array read or written on a few rows only (the layout's broker and config fields, the
    buffer every all-null Arrow array is made over) costs the memory of those rows.  ``np.zeros`` asks ``calloc``,
    which clears a block it takes from its heap by writing it -- under :func:`keep_freed_memory` every block (the
    layout's two sparse arrays were 22 k page faults, 92 MB, on a 1.15 M-record log's first replay).  Large arrays
    are an anonymous private mapping of their own (unmapped when the array goes); small ones ``np.zeros``."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    size = count * dtype.itemsize
    if size < MAPPED_BYTES or _PRIVATE_ZEROS is None:
        return np.zeros(shape, dtype)
    return np.frombuffer(mmap.mmap(-1, size, flags=_PRIVATE_ZEROS), dtype, count).reshape(shape)


try:
    _PRIVATE_ZEROS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS  # an anonymous mapping's pages: zero until written
except AttributeError:  # (no such flags: Windows)
    _PRIVATE_ZEROS = None
