"""Concurrency: two jobs of one cluster at the same time serialise on the cluster's lock
(``<lake>/_locks/<cluster>.lock``, lake/lock.py) -- the second says on stderr whom it waits for -- and no
key of any table is written twice; a job that cannot get the lock in time exits 2 naming the holder.
Readers read the table versions the last replay recorded, not what a running replay has half written."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from jobs import cli
from lake import catalog, lock
from lake.delta import Lake
from job_conf import small_job_yaml
from realdata_facts import CLUSTERS, REALDATA

SEG0 = "00000000000000000000.log"
KEYED = (catalog.METADATA_RECORDS, catalog.QUARANTINE, catalog.PARTITION_STATE_HISTORY, catalog.PARTITION_STATE,
         catalog.BROKER_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY, catalog.DIVERGENCES, catalog.INVARIANT_BREACHES,
         catalog.REPLAY_CHECKPOINTS)


def _env():
    return dict(os.environ, PYTHONPATH=str(Path(cli.__file__).resolve().parents[1]))


def _start(cmd: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=cwd)


def _held_by(path: Path, pid: int, timeout: float = 300) -> None:
    """Wait until process ``pid`` holds the lock file ``path``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if json.loads(path.read_text()).get("pid") == pid:
                return
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"pid {pid} never took {path}")


def _duplicates(lake: Lake, table) -> int:
    if not lake.exists(table.name):
        return -1
    keys = lake.read_arrow(table.name, columns=list(table.key))
    return keys.num_rows - keys.group_by(list(table.key)).aggregate([]).num_rows


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    src = REALDATA / CLUSTERS["arthurarutunyan04"]
    data = tmp_path_factory.mktemp("conc") / "kafka-data"
    (data / "__cluster_metadata-0").mkdir(parents=True)
    shutil.copy(src / "bootstrap.checkpoint", data)
    shutil.copy(src / "__cluster_metadata-0" / SEG0, data / "__cluster_metadata-0")
    return data


def test_a_second_job_of_the_cluster_is_refused_while_one_runs_and_nothing_is_written_twice(log_dir, tmp_path):
    """Two ingests at once, then two replays at once (the second of each with lock.timeout_s 0, so that it
    refuses at once instead of waiting: each job costs a JVM start): the second exits 2 naming the first,
    and no key of any table is written twice.  Waiting for the lock: test_a_waiting_job_gets_the_lock_..."""
    lake_root = tmp_path / "lake"
    spark_conf = small_job_yaml("replay:\n  buckets: 3\n")
    (tmp_path / "wait.yaml").write_text(spark_conf + "lock:\n  timeout_s: 600\n")
    (tmp_path / "refuse.yaml").write_text(spark_conf + "lock:\n  timeout_s: 0\n")
    lock_file = lake_root / "_locks" / "c.lock"

    def cmd(job, conf):
        extra = ["--log-dir", str(log_dir)] if job == "ingest" else []
        return [job, *extra, "--cluster", "c", "--lake", str(lake_root), "--conf", str(tmp_path / f"{conf}.yaml")]

    for job in ("ingest", "replay"):
        first = _start(cmd(job, "wait"), tmp_path)
        _held_by(lock_file, first.pid)
        second = subprocess.run([sys.executable, "-m", "jobs.cli", *cmd(job, "refuse")], capture_output=True,
                                text=True, env=_env(), cwd=tmp_path, timeout=300)
        code, (_, err) = first.wait(timeout=600), first.communicate()
        assert code == 0, err[-1500:]
        assert second.returncode == 2, second.stderr[-1500:]
        last = second.stderr.strip().splitlines()[-1]
        assert last.startswith(f"kraft-audit {job}: cluster 'c' is locked by {job} (pid {first.pid} on ")
        assert last.endswith(f"gave up after waiting 0 s (lock.timeout_s): run again when it is done, or remove "
                             f"{lock_file} if that job is gone")
        assert not lock_file.exists()
    lake = Lake(lake_root, None, backend="delta-rs")
    assert {t.name: _duplicates(lake, t) for t in KEYED} == {t.name: 0 for t in KEYED}
    assert lake.read_arrow(catalog.REPLAY_CHECKPOINTS.name).num_rows == 1


def test_a_waiting_job_gets_the_lock_when_the_holder_releases_it(tmp_path):
    import io
    import threading

    first = lock.acquire(str(tmp_path), True, "c", "ingest", 0, 50)
    threading.Timer(0.5, first.release).start()
    err = io.StringIO()
    t0 = time.monotonic()
    second = lock.acquire(str(tmp_path), True, "c", "replay", 30, 50, err=err, poll_s=0.05)
    assert 0.5 <= time.monotonic() - t0 < 10
    lines = err.getvalue().splitlines()
    assert lines[0].startswith(f"kraft-audit replay: cluster 'c' is locked by ingest (pid {os.getpid()} on ")
    assert "waiting up to 30 s" in lines[0] and lines[1] == "kraft-audit replay: got the lock of cluster 'c'"
    assert json.loads(lock.lock_path(tmp_path, "c").read_text())["job"] == "replay"
    first.release()  # no longer its lock: left alone
    assert lock.lock_path(tmp_path, "c").exists()
    second.release()
    assert not lock.lock_path(tmp_path, "c").exists()


def _hold(root: Path, cluster: str, scope: str = lock.LOG, **owner) -> Path:
    path = lock.lock_path(root, cluster, scope)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"job": "replay", "pid": os.getpid(), "pid_start": lock._pid_start(os.getpid()),
                                "host": socket.gethostname(), "started": "2026-11-26T00:00:00+00:00",
                                "token": "t", **owner}))
    return path


def test_a_job_that_cannot_get_the_lock_exits_2_naming_the_holder(tmp_path, log_dir, capsys):
    """A live holder (this process): ingest waits lock.timeout_s, then refuses, before any Spark."""
    lake_root = tmp_path / "lake"
    path = _hold(lake_root, "c")
    conf = tmp_path / "conf.yaml"
    conf.write_text("lock:\n  timeout_s: 1\n")
    t0 = time.monotonic()
    code = cli.main(["ingest", "--log-dir", str(log_dir), "--cluster", "c", "--lake", str(lake_root), "--conf", str(conf)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and time.monotonic() - t0 >= 1
    holder = f"replay (pid {os.getpid()} on {socket.gethostname()}, since 2026-11-26T00:00:00+00:00)"
    assert err[0] == f"kraft-audit ingest: cluster 'c' is locked by {holder}: waiting up to 1 s ({path})"
    assert err[-1] == (f"kraft-audit ingest: cluster 'c' is locked by {holder}; gave up after waiting 1 s "
                       f"(lock.timeout_s): run again when it is done, or remove {path} if that job is gone")
    assert not (lake_root / catalog.METADATA_RECORDS.name).exists()  # refused before doing anything
    assert path.exists()  # a live holder's lock is never taken


def test_stale_locks_are_taken_over_live_ones_are_not(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = int(dead.stdout)
    _hold(tmp_path, "gone", pid=gone, pid_start=None)
    _hold(tmp_path, "reused", pid=os.getpid(), pid_start="1")  # this pid, but another process's start time
    _hold(tmp_path, "remote", host="elsewhere", pid=1)
    os.utime(lock.lock_path(tmp_path, "remote"), (time.time() - 100, time.time() - 100))
    import io

    for cluster in ("gone", "reused", "remote"):
        err = io.StringIO()
        held = lock.acquire(str(tmp_path), True, cluster, "ingest", 0, 50, err=err)
        assert held is not None and "taking over the stale lock" in err.getvalue()
        held.release()
        assert not lock.lock_path(tmp_path, cluster).exists()
    _hold(tmp_path, "remote", host="elsewhere", pid=1)  # fresh: may still run elsewhere
    with pytest.raises(lock.LockBusy):
        lock.acquire(str(tmp_path), True, "remote", "ingest", 0, 50)
    # an odd cluster name is a safe file name
    assert lock.lock_path(tmp_path, "a/b c").name == "a%2Fb%20c.lock"


def test_readers_read_the_versions_the_last_replay_recorded(tmp_path):
    """A replay running (or killed) after the checkpoint wrote more rows: the audit's inputs stay those of
    the checkpoint, and a checkpoint whose history count does not match what is read fails the read."""
    from lake import gold

    lake = Lake(tmp_path / "lake", None, backend="delta-rs")
    hist = catalog.PARTITION_STATE_HISTORY.schema
    row = {f.name: None for f in hist} | {"cluster": "c", "topic_id": "t", "partition_id": 0, "offset": 1,
                                          "record_type": "PARTITION_RECORD", "deleted": False, "orphan": False}
    lake.append_arrow(catalog.PARTITION_STATE_HISTORY.name, pa.Table.from_pylist([row], hist), partition_by="cluster")
    for t in (catalog.BROKER_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY, catalog.INVARIANT_BREACHES,
              catalog.METADATA_RECORDS):
        lake.append_arrow(t.name, t.schema.empty_table(), partition_by="cluster")
    versions = {t: lake.version(t) for t in (*gold.SILVER_INPUTS, catalog.METADATA_RECORDS.name)}
    mark = {"cluster": "c", "replayed_at": None, "mode": "full", "start_offset": 0, "snapshot": None,
            "last_offset": 1, "last_timestamp": None, "records": 1, "table_versions": json.dumps(versions)}
    lake.append_arrow(catalog.REPLAY_CHECKPOINTS.name, pa.Table.from_pylist([mark], catalog.CHECKPOINT_SCHEMA),
                      partition_by="cluster")
    # a later replay's history write, not (yet) checkpointed
    lake.append_arrow(catalog.PARTITION_STATE_HISTORY.name, pa.Table.from_pylist([row | {"offset": 2}], hist))
    tables, end, _ = gold.silver_from_lake(lake, "c")
    assert end == 1 and tables[catalog.PARTITION_STATE_HISTORY.name].column("offset").to_pylist() == [1]
    # a checkpoint naming a version whose rows are not the ones it counted
    lake.append_arrow(catalog.REPLAY_CHECKPOINTS.name, pa.Table.from_pylist(
        [mark | {"last_offset": 2, "records": 5, "table_versions": json.dumps(
            {**versions, catalog.PARTITION_STATE_HISTORY.name: lake.version(catalog.PARTITION_STATE_HISTORY.name)})}],
        catalog.CHECKPOINT_SCHEMA))
    with pytest.raises(gold.GoldError, match="holds 2 rows at version 1 but its replay recorded 5"):
        gold.silver_from_lake(lake, "c")


def test_gold_writers_serialise_on_the_gold_lock_and_never_wait_for_ingest_or_replay(silver, tmp_path, capsys):
    """audit and quality write their gold rows under the cluster's gold lock (``_locks/gold/<cluster>.lock``):
    held by another live job, they wait lock.timeout_s and exit 2 naming it, writing nothing; the log lock of
    a running ingest / replay does not stop them; two audits at once leave no key twice."""
    import threading

    from lake import gold

    src, _ = silver
    root = tmp_path / "lake"
    # bronze and silver only: the shared lake may hold other tests' audit runs and quality results
    gold_tables = [t.name for t in catalog.TABLES if t.layer == catalog.GOLD]
    shutil.copytree(src.root, root, ignore=shutil.ignore_patterns("_locks", *gold_tables))
    conf = tmp_path / "conf.yaml"
    conf.write_text("lock:\n  timeout_s: 1\n")
    c = "induswargods"
    base = ["--cluster", c, "--lake", str(root), "--conf", str(conf)]
    lake = Lake(root, None, backend="delta-rs")
    runs = lambda: lake.read_arrow(catalog.AUDIT_RUNS.name).num_rows if lake.exists(catalog.AUDIT_RUNS.name) else 0  # noqa: E731
    before = runs()
    quality = lambda: lake.version(catalog.DATA_QUALITY.name) if lake.exists(catalog.DATA_QUALITY.name) else None  # noqa: E731
    quality_before = quality()

    held = _hold(root, c, lock.GOLD)
    assert held == root / "_locks" / "gold" / f"{c}.lock"
    holder = f"replay (pid {os.getpid()} on {socket.gethostname()}, since 2026-11-26T00:00:00+00:00)"
    for job in ("audit", "quality"):
        assert cli.main([job, *base]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1] == (f"kraft-audit {job}: the gold tables of cluster {c!r} are locked by {holder}; gave up after "
                           f"waiting 1 s (lock.timeout_s): run again when it is done, or remove {held} if that job "
                           "is gone")
    assert runs() == before == 0 and quality() == quality_before is None  # nothing written
    held.unlink()

    log_lock = _hold(root, c)  # an ingest or replay running: readers and gold writers go on
    assert cli.main(["audit", *base]) in (0, 1)
    assert runs() == before + 1
    log_lock.unlink()

    # waiting: the holder releases after 0.5 s, the audit then writes its run
    first = lock.acquire(str(root), True, c, "audit", 0, 50, scope=lock.GOLD)
    threading.Timer(0.5, first.release).start()
    (tmp_path / "wait.yaml").write_text("lock:\n  timeout_s: 60\n")
    assert cli.main(["audit", "--cluster", c, "--lake", str(root), "--conf", str(tmp_path / "wait.yaml")]) in (0, 1)
    err = capsys.readouterr().err
    assert f"kraft-audit audit: the gold tables of cluster {c!r} are locked by audit (pid {os.getpid()} on " in err
    assert f"kraft-audit audit: got the lock of the gold tables of cluster {c!r}" in err

    # two audits at once (separate processes): one run, no key twice
    procs = [_start(["audit", "--cluster", c, "--lake", str(root), "--conf", str(tmp_path / "wait.yaml")], tmp_path)
             for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode in (0, 1), err[-1500:]
    for t in (catalog.AUDIT_RUNS, catalog.VIOLATIONS, catalog.INCIDENTS, catalog.RECOVERY_CANDIDATES):
        assert _duplicates(lake, t) == 0, t.name
    assert runs() == before + 1  # the same audit again replaces its own run
    assert not lock.lock_path(root, c, lock.GOLD).exists()
    assert gold.previous_run(lake, c) is not None
