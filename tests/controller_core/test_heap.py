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
print(json.dumps({"kept": kept, "mmapped": during.hblkhd - before.hblkhd, "free_after": after.fordblks}))
"""


def _probe(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


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
    # with it: from the heap, and still there, free for the next array, once freed
    assert kept["kept"] is True
    assert kept["mmapped"] == 0
    assert kept["free_after"] >= 64 << 20
