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
