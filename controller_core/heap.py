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

Not for a process whose peak is near the memory budget (audit, plan, quality hold whole tables: what they free
is given back), nor for a Spark worker.  Arrow's own pool is another allocator (``lake.files.return_freed_memory``
sets its policy); this is the C library's.
"""
from __future__ import annotations

import ctypes

# mallopt(3) parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_MAX, M_ARENA_MAX = -1, -2, -4, -8
TRIM_BYTES = (1 << 31) - 1  # (mallopt takes an int)
TOP_PAD_BYTES = 64 << 20  # the heap grows 64 MB at a time: fewer brk calls


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
