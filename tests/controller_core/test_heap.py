"""``heap.keep_freed_memory``: a log-only command's process keeps what it frees (controller_core/heap.py).

Each case runs in a fresh interpreter: the policy is the process's, and the test process must not take it.
glibc's ``mallinfo2`` says where a large block came from (its own mmap, ``hblkhd``, or the heap) and what the
heap holds free after the block is freed (``fordblks``)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = r"""
import ctypes, json, sys
import numpy as np
from controller_core.heap import keep_freed_memory

class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
before = libc.mallinfo2()
a = np.ones(64 << 20, np.uint8)  # a replay-sized array (above glibc's largest mmap threshold, 32 MB)
during = libc.mallinfo2()
del a
after = libc.mallinfo2()
# a decoder thread's array (mallinfo2 sums every arena; malloc_stats below says how many there are)
seen = {}
def decode_thread():
    b = np.ones(8 << 20, np.uint8)
    now = libc.mallinfo2()
    seen["main_heap"], seen["mmapped"] = now.uordblks - after.uordblks, now.hblkhd - after.hblkhd
    del b
import threading
t = threading.Thread(target=decode_thread)
t.start(); t.join()
print(json.dumps({"kept": kept, "mmapped": during.hblkhd - before.hblkhd, "free_after": after.fordblks,
                  "thread_heap": seen["main_heap"], "thread_mmapped": seen["mmapped"]}))
sys.stdout.flush()
libc.malloc_stats()  # to stderr: one "Arena N:" block per arena
"""


def _probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout), "arenas": done.stderr.count("Arena ")}


def _glibc() -> bool:
    import ctypes

    try:
        ctypes.CDLL(None).mallinfo2
    except AttributeError:
        return False
    return True


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc(), reason="glibc's malloc only (mallinfo2)")
def test_freed_arrays_stay_in_the_heap():
    default, kept = _probe("default"), _probe("keep")
    # without the policy the block is its own mapping, unmapped on free: nothing of it stays
    assert default["mmapped"] >= 64 << 20
    assert default["free_after"] < 64 << 20
    assert default["thread_mmapped"] >= 8 << 20  # a thread's block: a mapping of its own
    assert default["arenas"] >= 2  # and the thread's arena beside the main one
    # with it: from the heap, and still there, free for the next array, once freed
    assert kept["kept"] is True
    assert kept["mmapped"] == 0
    assert kept["free_after"] >= 64 << 20
    # and a thread's block from the same heap (one arena), where the freed one waits
    assert kept["thread_heap"] >= 8 << 20 and kept["thread_mmapped"] == 0
    assert kept["arenas"] == 1


HUGE_PROBE = r"""
import json, sys
import numpy as np
from controller_core.heap import log_only_process

def huge_kb():  # the process's anonymous memory in transparent huge pages
    with open("/proc/self/smaps_rollup") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("AnonHugePages:"))

took = log_only_process() if sys.argv[1] == "log-only" else None
from numpy._core.multiarray import _set_madvise_hugepage
asks = _set_madvise_hugepage(False)  # (returns the setting it replaces)
_set_madvise_hugepage(asks)
before = huge_kb()
a = np.ones(64 << 20, np.uint8)  # a replay-sized array, written
print(json.dumps({"took": took, "asks": asks, "huge_kb": huge_kb() - before}))
"""


def _thp_mode() -> str | None:
    """The kernel's transparent huge page policy (the bracketed word), None where there is none to read."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    return text.split("[", 1)[1].split("]", 1)[0] if "[" in text else None


def _huge_probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", HUGE_PROBE, mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.skipif(not Path("/proc/self/smaps_rollup").exists(), reason="Linux's smaps_rollup says where pages are")
def test_a_log_only_process_asks_for_small_pages():
    default, log_only = _huge_probe("default"), _huge_probe("log-only")
    assert default["asks"] is True  # NumPy's own default: huge pages advised on large arrays
    assert log_only["took"] is (_glibc()) and log_only["asks"] is False
    assert log_only["huge_kb"] == 0 or _thp_mode() == "always"  # (with "always" the kernel uses them unasked)
    if _thp_mode() == "madvise":  # where the advice decides: NumPy's array in huge pages, the log-only one not
        assert default["huge_kb"] >= 32 << 10


ZEROS_PROBE = r"""
import json, resource
import numpy as np
from controller_core import heap

heap.log_only_process()  # (calloc then clears what it takes from the heap by writing it)
spent = np.ones(96 << 20, np.uint8)  # the heap holds 96 MB of its own once this is freed
del spent
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
f0 = faults()
z = heap.zeros((1 << 20, 8), np.int64)  # 64 MB, written on a few rows
z[[5, 70_000, 900_000], 3] = 7
f1 = faults()
plain = np.zeros((1 << 20, 8), np.int64)
small = heap.zeros(1000, np.int32)
print(json.dumps({"zeros_faults": f1 - f0, "shape": list(z.shape), "dtype": str(z.dtype),
                  "sum": int(z.sum()), "nonzero": np.flatnonzero(z.ravel()).tolist(),
                  "small_mapped": small.base is not None,
                  "equal": bool(np.array_equal(plain, heap.zeros(plain.shape, plain.dtype)))}))
"""


def test_zeros_are_not_written_until_used():
    """``heap.zeros``: a large array of zeros takes pages only where it is written, also in a log-only process (where
    ``np.zeros`` comes from the heap and is cleared by writing it)."""
    done = subprocess.run([sys.executable, "-c", ZEROS_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["shape"] == [1 << 20, 8] and got["dtype"] == "int64" and got["equal"]
    assert got["sum"] == 21 and got["nonzero"] == [5 * 8 + 3, 70_000 * 8 + 3, 900_000 * 8 + 3]
    assert got["zeros_faults"] < 64  # three rows written: a page each (and the probe's own)
    assert got["small_mapped"] is False  # a small array is np.zeros' own
