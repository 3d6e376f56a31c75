"""The cores a replay may use, and the threads it uses them with.

In process (``verify``, ``describe``, ``audit --log-dir``, the benchmarks) a replay decodes its files on several
threads (:mod:`controller_core.codec.ranges`) and runs the invariant pass beside the fold and the recompute
(:mod:`controller_core.pipeline`): the compiled loops run without the GIL (``nogil=True``) and NumPy and Arrow
release it in their kernels; the layout builds its list columns beside the rest.  Only the calling thread hands
work to a pool, never a pool's thread (two threads waiting on each other's pool).  A Spark task is one core of
its executor and gets ``threads=1`` from its caller.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

MAX_THREADS = 8
# from this many records a replay hands a step to another thread (fewer: the handover costs more than it saves)
MIN_RECORDS = 50_000
# an operator's cap on the cores an in-process command uses (a shared box at 3 a.m.): a positive integer
ENV = "KRAFT_AUDIT_THREADS"
# where a container's CPU quota is (cgroup v2; v1: the quota and the period in two files)
CGROUP_V2 = "/sys/fs/cgroup/cpu.max"
CGROUP_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")

_POOLS: dict[tuple[int, int], ThreadPoolExecutor] = {}
_LOCK = threading.Lock()


def available() -> int:
    """The cores this process may run on (its CPU affinity: a ``taskset``-pinned process gets one; a container's
    CPU quota, rounded up: a Kubernetes pod's ``limits.cpu``), at most :data:`MAX_THREADS` and at most
    ``$KRAFT_AUDIT_THREADS`` when that is set (a value that is not a positive integer is ignored: the commands'
    results do not depend on it)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = cgroup_cpus()
    if quota is not None:
        n = min(n, quota)
    cap = os.environ.get(ENV, "").strip()
    if cap.isdigit() and int(cap) > 0:
        n = min(n, int(cap))
    return max(1, min(n, MAX_THREADS))


def cgroup_cpus(v2: str | None = None, v1: tuple[str, str] | None = None) -> int | None:
    """The CPUs a container's quota allows (quota / period, rounded up, at least 1), or None: no quota, no cgroup
    files, or files this cannot read.  ``v2``, ``v1``: the files (default :data:`CGROUP_V2`, :data:`CGROUP_V1`)."""
    v2, v1 = v2 or CGROUP_V2, v1 or CGROUP_V1
    try:
        with open(v2) as fh:
            quota, period = (fh.read().split() + ["100000"])[:2]
    except OSError:
        try:
            with open(v1[0]) as fq, open(v1[1]) as fp:
                quota, period = fq.read().strip(), fp.read().strip()
        except OSError:
            return None
    if quota in ("max", "-1") or not quota.lstrip("-").isdigit() or not period.isdigit() or int(period) <= 0:
        return None
    return max(1, -(-int(quota) // int(period)))


def worth(threads: int, records: int) -> bool:
    """Whether a replay of ``records`` records on ``threads`` cores hands work to another thread."""
    return threads > 1 and records >= MIN_RECORDS


def pool(threads: int) -> ThreadPoolExecutor:
    """A pool of ``threads`` threads, kept for the process's next replays: a kept thread reuses the memory its
    allocator got for the replay before (a fresh thread's faulted the decode's pages in again, 10-20 % of a
    warm decode of 1.15 M records).  Keyed by process id too: a forked child gets pools of its own."""
    key = (os.getpid(), threads)
    with _LOCK:
        got = _POOLS.get(key)
        if got is None:
            got = _POOLS[key] = ThreadPoolExecutor(threads, thread_name_prefix="kraft-audit")
        return got
