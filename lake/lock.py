"""One writer per cluster: the lock the writing jobs (``ingest``, ``replay``) hold on a cluster of a lake.

The lock is a file, ``<lake>/_locks/<cluster>.lock``, created atomically (``O_CREAT | O_EXCL``: of two
jobs starting at once exactly one creates it) and holding who owns it, as JSON: the job, its pid, the
start time of that pid (``/proc/<pid>/stat``, so a reused pid is not taken for the holder), the host and
when it was taken.  The holder removes it when it ends, whatever the outcome.

A lock is *stale*, and is taken over, when its holder ran on this host and that process is gone (a
job killed with SIGKILL, a machine that rebooted), or when it is older than ``stale_after_s`` (a holder on
another host that cannot be checked).  A job that finds a live lock says on stderr who holds it and
waits, polling, up to ``timeout_s`` (0: it does not wait); then :class:`LockBusy` (a ``TimeoutError``:
exit 2, one line naming the holder).

Readers (``audit``, ``quality``, ``describe --cluster``) take no lock to read: they read the table versions
the last replay recorded with its checkpoint (``lake.delta.Lake.replayed_versions``), which a running job
never changes.  What they write -- the gold tables of an audit run, the data-quality results -- is written
under the cluster's *gold* lock (``<lake>/_locks/gold/<cluster>.lock``, scope ``GOLD``): two audits of one
cluster at once serialise there (the second compares with the first's run), and neither waits for an
ingest or replay, which hold the cluster's log lock.

Only a local lake (or one on a shared file system) can hold a lock file; on a remote lake (``s3a://``)
jobs run unlocked (:func:`acquire` returns None).
"""
from __future__ import annotations

import json
import os
import re
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

LOCKS_DIR = "_locks"
LOG, GOLD = "log", "gold"  # the scopes: bronze + silver writers (ingest, replay); gold writers (audit, quality)


class LockBusy(TimeoutError):
    """Another live job holds the cluster's lock and did not release it within the timeout."""


def _pid_start(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/<pid>/stat field 22), None when
    there is no such process or no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # fields after "(comm)": state is field 3 -> index 0


def _alive(pid: int, start: str | None) -> bool:
    """Whether process ``pid`` (started at ``start``, when known) still runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    if start is not None:
        now = _pid_start(pid)
        if now is not None and now != start:
            return False  # the pid was reused by another process
    return True


def lock_path(root: str | Path, cluster: str, scope: str = LOG) -> Path:
    """``<root>/_locks/<cluster>.lock`` (scope LOG) or ``<root>/_locks/gold/<cluster>.lock`` (GOLD), the cluster
    name made a safe file name (%XX for other characters)."""
    safe = re.sub(r"[^A-Za-z0-9_.\-]", lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), cluster)
    return Path(root) / LOCKS_DIR / ("" if scope == LOG else scope) / f"{safe}.lock"


@dataclass
class ClusterLock:
    path: Path
    owner: dict

    def release(self) -> None:
        """Remove the lock file, only when it is still ours (a job that outlived ``stale_after_s`` may have
        lost it to another)."""
        held = _read(self.path)
        if held is not None and held.get("token") == self.owner["token"]:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


def describe(owner: dict) -> str:
    """``ingest (pid 123 on host, since 2026-...)``."""
    return (f"{owner.get('job', '?')} (pid {owner.get('pid', '?')} on {owner.get('host', '?')}, "
            f"since {owner.get('started', '?')})")


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # being written or damaged: judged by its age


def _stale(path: Path, owner: dict, stale_after_s: float) -> str | None:
    """Why the lock ``owner`` (read from ``path``) is stale, or None when its holder may still run."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return "gone"
    if owner.get("host") == socket.gethostname() and isinstance(owner.get("pid"), int):
        if not _alive(owner["pid"], owner.get("pid_start")):
            return f"its holder, pid {owner['pid']}, is gone"
        return None  # a live job on this host: never taken over, however long it runs
    if not owner and age > 5:
        return "it is empty or damaged"
    if age > stale_after_s:
        return f"it is {age:.0f} s old (lock.stale_after_s {stale_after_s:g})"
    return None


def _break(path: Path, seen: dict) -> None:
    """Remove the stale lock ``seen``, and only that one: moved aside first, put back when another job
    replaced it in the meantime."""
    aside = path.with_name(f"{path.name}.stale-{uuid.uuid4().hex}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    if _read(aside) != seen:  # not the lock we judged: restore it (unless a third job took the slot)
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


def acquire(root: str, local: bool, cluster: str, job: str, timeout_s: float, stale_after_s: float,
            err=None, poll_s: float = 0.25, scope: str = LOG) -> ClusterLock | None:
    """Take the cluster's lock of ``scope`` for ``job``, waiting up to ``timeout_s`` for a live holder; None
    for a remote lake.  Says on ``err`` (stderr) whom it waits for and which stale lock it took over."""
    if not local:
        return None
    err = err or sys.stderr
    path = lock_path(root, cluster, scope)
    what, are = (f"cluster {cluster!r}", "is") if scope == LOG else (f"the {scope} tables of cluster {cluster!r}", "are")
    path.parent.mkdir(parents=True, exist_ok=True)
    owner = {"job": job, "cluster": cluster, "pid": os.getpid(), "pid_start": _pid_start(os.getpid()),
             "host": socket.gethostname(), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             "token": uuid.uuid4().hex}
    deadline = time.monotonic() + max(0.0, timeout_s)
    said = None
    while True:
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            held = _read(path)
            if held is None:
                continue  # released between the two calls
            why = _stale(path, held, stale_after_s)
            if why is not None:
                print(f"kraft-audit {job}: taking over the stale lock of {describe(held)} on {what}: "
                      f"{why} ({path})", file=err)
                _break(path, held)
                continue
            if time.monotonic() >= deadline:
                raise LockBusy(f"{what} {are} locked by {describe(held)}; gave up after waiting "
                               f"{timeout_s:g} s (lock.timeout_s): run again when it is done, or remove {path} "
                               "if that job is gone") from None
            if said != held.get("token"):
                print(f"kraft-audit {job}: {what} {are} locked by {describe(held)}: waiting up to "
                      f"{timeout_s:g} s ({path})", file=err, flush=True)
                said = held.get("token")
            time.sleep(poll_s)
            continue
        with os.fdopen(fd, "w") as f:
            json.dump(owner, f)
            f.flush()
            os.fsync(f.fileno())
        if said is not None:
            print(f"kraft-audit {job}: got the lock of {what}", file=err, flush=True)
        return ClusterLock(path, owner)


@contextmanager
def holding(config: dict, cluster: str, job: str, scope: str = LOG):
    """``with holding(config, cluster, "audit", GOLD):`` the cluster's lock of ``scope`` on the configured
    lake (``lock.timeout_s`` / ``lock.stale_after_s``), released at the end whatever happens."""
    from lake.delta import root_of

    root, local = root_of(config["lake"])
    held = acquire(root, local, cluster, job, float(config["lock"]["timeout_s"]),
                   float(config["lock"]["stale_after_s"]), scope=scope)
    try:
        yield held
    finally:
        if held is not None:
            held.release()
