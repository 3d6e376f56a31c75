"""A replay's files decoded by threads over batch-boundary ranges (codec/ranges.py): the same rows and quarantine
as the one-pass decoder on every real log, and on damaged ones (decoded again in one pass); split points found by
the compiled header walk equal the seek-by-seek walk."""
from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from controller_core import threads
from controller_core.codec import logfile, ranges
from controller_core.codec.batch import LOG_OVERHEAD
from controller_core.replay import read_log_dir

REAL = Path(__file__).resolve().parents[4] / "shared" / "realdata"
LOG_DIRS = sorted(REAL.glob("*/*/__cluster_metadata-0"))
BIG = REAL / "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000000000.log"  # 3.7 MB


@pytest.fixture
def stitched(monkeypatch):
    """Every verdict of ranges._stitched: (accepted, ranges of the file)."""
    seen = []
    real = ranges._stitched

    def spy(rs):
        ok = real(rs)
        seen.append((ok, len(rs)))
        return ok
    monkeypatch.setattr(ranges, "_stitched", spy)
    return seen


def _one_pass(path: Path, first_offset=0):
    chunks = list(logfile.iter_chunks(str(path), "f", first_offset=first_offset))
    return [o for c in chunks for o in c.offset.tolist()], [q for c in chunks for q in c.quarantine]


def _threads(path: Path, range_bytes: int, first_offset=0):
    got = ranges.decode_files([(str(path), "f", first_offset)], lambda c: c.offset, threads=3,
                              min_range_bytes=range_bytes)[0]
    return np.concatenate(got.results).tolist() if got.results else [], got.quarantine


@pytest.mark.parametrize("log_dir", LOG_DIRS, ids=lambda p: p.parts[-3])
def test_every_real_log_reads_the_same_on_threads(log_dir, monkeypatch, stitched):
    one_q, threads_q = [], []
    one, _ = read_log_dir(log_dir, one_q, threads=1)
    monkeypatch.setattr(ranges, "MIN_RANGE_BYTES", 16 << 10)
    got, _ = read_log_dir(log_dir, threads_q, threads=3)
    assert got.equals(one)
    assert threads_q == one_q
    if max(f.stat().st_size for f in log_dir.iterdir()) >= 2 * ranges.MIN_RANGE_BYTES:
        assert stitched and all(ok and n > 1 for ok, n in stitched)  # cut into ranges, put back together


def test_a_damaged_batch_is_decoded_again_in_one_pass(tmp_path, stitched):
    data = bytearray(BIG.read_bytes())
    starts = logfile.split_points(str(BIG), len(data) // 7)
    p = starts[4] + 40  # a byte of the maxTimestamp of the batch at the fifth range's start: its CRC fails
    data[p] ^= 0xFF
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(data))
    one, quarantine = _one_pass(seg)
    assert [q.reason for q in quarantine] == ["CRC_MISMATCH"] and quarantine[0].position == starts[4]
    assert _threads(seg, 64 << 10) == (one, quarantine)
    assert stitched == [(False, stitched[0][1])] and stitched[0][1] > 2


def test_an_offset_jump_kept_without_quarantine_is_decoded_again_in_one_pass(tmp_path, stitched):
    """Batches after a point start 1000 offsets later (baseOffset is outside the CRC): the decoder keeps the jump
    (the batches after it agree), quarantines nothing, and the threads' result must still be one pass's."""
    data = bytearray(BIG.read_bytes())
    cut = logfile.split_points(str(BIG), len(data) // 3)[1]
    pos = cut
    while pos + LOG_OVERHEAD <= len(data):
        base, blen = struct.unpack_from(">qi", data, pos)
        struct.pack_into(">q", data, pos, base + 1000)
        pos += LOG_OVERHEAD + blen
    seg = tmp_path / "00000000000000000000.log"
    seg.write_bytes(bytes(data))
    one, quarantine = _one_pass(seg)
    assert quarantine == [] and any(b - a == 1001 for a, b in zip(one, one[1:]))
    assert _threads(seg, 64 << 10) == (one, quarantine)
    assert len(stitched) == 1 and not stitched[0][0]


def test_a_small_file_or_one_thread_is_one_range(tmp_path, stitched):
    assert _threads(BIG, 4 << 20) == _one_pass(BIG)  # 3.7 MB < 2 ranges of 4 MB
    got = ranges.decode_files([(str(BIG), "f", 0)], lambda c: c.offset, threads=1, min_range_bytes=1024)[0]
    assert np.concatenate(got.results).tolist() == _one_pass(BIG)[0]
    assert stitched == []


def test_threads_follow_the_cpu_affinity_and_the_operators_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(threads, "CGROUP_V2", str(tmp_path / "absent"))  # no container quota here
    monkeypatch.setattr(threads, "CGROUP_V1", (str(tmp_path / "absent"),) * 2)
    monkeypatch.delenv(threads.ENV, raising=False)
    if hasattr(os, "sched_setaffinity"):  # the process pinned for real (taskset -c 0): one thread
        saved = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, {min(saved)})
            assert threads.available() == 1
        finally:
            os.sched_setaffinity(0, saved)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert threads.available() == threads.MAX_THREADS
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    assert threads.available() == 3
    monkeypatch.setenv(threads.ENV, "1")
    assert threads.available() == 1
    for ignored in ("0", "-2", "two", ""):
        monkeypatch.setenv(threads.ENV, ignored)
        assert threads.available() == 3


@pytest.mark.parametrize("target", [1000, 64 << 10, 1 << 20])
def test_split_points_compiled_walk_equals_the_seek_walk(tmp_path, monkeypatch, target):
    data = bytearray(BIG.read_bytes())
    broken = tmp_path / "broken.log"
    mid = logfile.split_points(str(BIG), len(data) // 2)[1]
    struct.pack_into(">i", data, mid + 8, 3)  # an impossible batchLength: the chain stops there
    broken.write_bytes(bytes(data))
    for path in (BIG, broken):
        monkeypatch.setattr(logfile, "_use_compiled", lambda size: False)
        seek = logfile.split_points(str(path), target)
        monkeypatch.setattr(logfile, "_use_compiled", lambda size: True)
        assert logfile.split_points(str(path), target) == seek
        assert len(seek) > 1 and all(b > a for a, b in zip(seek, seek[1:]))
    assert max(logfile.split_points(str(broken), target)) <= mid


def test_a_containers_cpu_quota_caps_the_threads(tmp_path, monkeypatch):
    """A Kubernetes pod with limits.cpu 1.5 on an 8-core node: two threads, not eight (cgroup v2 cpu.max, and v1's
    quota and period); no quota ("max", -1) or no files: the affinity alone."""
    v2 = tmp_path / "cpu.max"
    quota, period = tmp_path / "cfs_quota_us", tmp_path / "cfs_period_us"
    none = tmp_path / "absent"
    v2.write_text("150000 100000\n")
    assert threads.cgroup_cpus(str(v2), (str(none), str(none))) == 2
    v2.write_text("max 100000\n")
    assert threads.cgroup_cpus(str(v2), (str(none), str(none))) is None
    v2.write_text("50000 100000\n")
    assert threads.cgroup_cpus(str(v2)) == 1
    quota.write_text("300000\n")
    period.write_text("100000\n")
    assert threads.cgroup_cpus(str(none), (str(quota), str(period))) == 3
    quota.write_text("-1\n")
    assert threads.cgroup_cpus(str(none), (str(quota), str(period))) is None
    assert threads.cgroup_cpus(str(none), (str(none), str(none))) is None
    v2.write_text("150000 100000\n")
    monkeypatch.setattr(threads, "CGROUP_V2", str(v2))
    monkeypatch.delenv(threads.ENV, raising=False)
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    assert threads.available() == 2
