"""The Spark jobs on a real standalone cluster: a master and two workers of one core each, started from
the pip package's own scripts (``bin/spark-class``), bound to 127.0.0.1 and stopped by PID at the end.

The executors run a Python that has the pinned dependencies but not this project (``python -S`` with
only site-packages on its path: no editable install), so the code they run is the code the driver
ships.  The workers run in a private mount namespace where one folder, ``private/``, is a tmpfs of
their own: the driver and the executors see different files there, as two hosts do with a local disk.

* ingest -> replay (``--master spark://...``) -> audit -> quality on a simulated cluster in the shared
  folder: every table and the audit's verdict equal those of a local run;
* ingest into a lake under ``private/`` (the driver sees it, the executors write to their own copy):
  exit 2 with one line naming the table and the folder the tasks wrote into, nothing committed.

Each command runs in its own process (the suite's local SparkSession stays untouched); the local
reference run goes through that session in process.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from job_conf import SHORT_JVM, write_small_job_conf
from jobs import cli
from lake import catalog

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "data" / "last-replica-standing-elr-off"  # simulator output, seed 0 (tests/data)
CLUSTER = "lrs"
RECORDS = catalog.METADATA_RECORDS
# columns that say when a run happened, not what it found
RUN_COLUMNS = {"replayed_at", "checked_at", "audited_at"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "--map-root-user", "true"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each daemon we started (a worker stops its executors), then SIGKILL what is left of its
    process group (each was started as the leader of its own)."""
    for p in reversed(procs):
        if p.poll() is None:
            p.terminate()
    for p in reversed(procs):
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _alive_workers(webui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
            state = json.load(r)
    except (OSError, ValueError):
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    import pyarrow
    import pyspark

    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    root = tmp_path_factory.mktemp("standalone")
    shared, private = root / "shared", root / "private"
    shared.mkdir()
    private.mkdir()
    # the executors' Python: the pinned dependencies (site-packages), not the project
    site = Path(pyarrow.__file__).resolve().parents[1]
    python = root / "executor-python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="${{PYTHONPATH:+$PYTHONPATH:}}{site}" exec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    probe = subprocess.run([str(python), "-c", "import pyarrow, pyspark, numpy\ntry:\n import transforms\n"
                            "except ImportError:\n print('no project')"], capture_output=True, text=True,
                           cwd=root, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, timeout=60)
    assert probe.stdout.strip() == "no project", probe.stdout + probe.stderr

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, webui = _free_port(), _free_port()
    # short-lived JVMs: the C1 compiler alone and a serial collector cost a fraction of the CPU
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_JAVA_OPTS": SHORT_JVM}
    env.pop("PYTHONPATH", None)
    blind = _can_unshare()
    procs: list[subprocess.Popen] = []
    logs = []

    def start(name: str, argv: list[str]) -> None:
        log = open(root / f"{name}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=root,
                                      start_new_session=True))

    try:
        start("master", [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                         "--port", str(port), "--webui-port", str(webui)])
        for i in (1, 2):
            worker = [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                      "--cores", "1", "--memory", "1g", "--webui-port", "0", "--work-dir", str(root / f"work{i}"),
                      f"spark://127.0.0.1:{port}"]
            if blind:  # private/ becomes a tmpfs only this worker and its executors see
                worker = ["unshare", "--mount", "--map-root-user", "sh", "-c",
                          'mount -t tmpfs kraft-audit-private "$0" && exec "$@"', str(private), *worker]
            start(f"worker{i}", worker)
        deadline = time.monotonic() + 90
        while _alive_workers(webui) < 2:
            dead = [p.args for p in procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                tails = {f.name: f.read_text()[-2000:] for f in sorted(root.glob("*.log"))}
                pytest.fail(f"standalone cluster did not come up (exited: {dead}): {tails}")
            time.sleep(0.5)
        driver_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(python),
                      "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        driver_env.pop("KRAFT_AUDIT_LAKE", None)
        yield {"master": f"spark://127.0.0.1:{port}", "webui": webui, "shared": shared, "private": private,
               "blind": blind, "env": driver_env, "root": root}
    finally:
        _stop(procs)
        for log in logs:
            log.close()


def _running_application(webui: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Wait until the master runs an application with cores granted (or ``proc``, its driver, has ended)."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
                apps = json.load(r).get("activeapps", [])
        except (OSError, ValueError):
            apps = []
        if any(a.get("state") == "RUNNING" and a.get("cores", 0) > 0 for a in apps):
            return
        time.sleep(0.5)


def _start(standalone, *argv) -> subprocess.Popen:
    """A ``kraft-audit`` command in its own process (with the cluster's driver environment)."""
    return subprocess.Popen([sys.executable, "-m", "jobs.cli", *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=standalone["env"], cwd=standalone["root"])


def _finish(proc: subprocess.Popen, timeout=300) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _rows(lake: str, table: str) -> list[str]:
    """A table's rows as sorted JSON lines, without the run-time columns."""
    from lake.delta import Lake

    t = Lake(lake, None, backend="delta-rs").read_arrow(table)
    t = t.drop_columns([c for c in t.column_names if c in RUN_COLUMNS])
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in t.to_pylist())


def _local(*argv) -> tuple[int, str]:
    """A command on the suite's local session, in process: (exit code, stdout)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main([str(a) for a in argv])
    return code, out.getvalue()


@pytest.fixture(scope="module")
def runs(standalone, spark):
    """Every run of this module, overlapped where they do not compete for the cluster's two cores:
    ingest -> replay -> audit, quality on the cluster (each command its own process) and the same
    commands on the suite's local session meanwhile; the ingest into a lake the executors cannot see
    queues behind the cluster's replay and runs while the cluster's audit and quality (no Spark) read the
    lake."""
    log = standalone["shared"] / "log"
    shutil.copytree(SCENARIO, log)
    lake, local = standalone["shared"] / "lake", standalone["shared"] / "local-lake"
    conf = standalone["shared"] / "small.yaml"  # as the suite's session: few shuffle partitions
    write_small_job_conf(conf, master=None)
    master = standalone["master"]
    on_cluster = ("--lake", lake, "--conf", conf, "--master", master)
    local_args = ("--lake", local, "--conf", conf)
    out = {"lake": lake, "local": local, "master": master}

    ingest = _start(standalone, "ingest", "--cluster", CLUSTER, "--log-dir", log, "--log-info", log / "log-info",
                    *on_cluster)
    out["local_ingest"] = _local("ingest", "--cluster", CLUSTER, "--log-dir", log, "--log-info", log / "log-info",
                                 *local_args)
    out["ingest"] = _finish(ingest)
    replay = _start(standalone, "replay", "--cluster", CLUSTER, *on_cluster)
    out["local_replay"] = _local("replay", "--cluster", CLUSTER, *local_args)
    out["local_audit"] = _local("audit", "--cluster", CLUSTER, "--json", *local_args)
    out["local_quality"] = _local("quality", "--cluster", CLUSTER, *local_args)
    blind = None
    if standalone["blind"]:
        # started once the replay holds the cluster's cores: its driver starts meanwhile, its executors come
        # when the replay's go (the master hands an application's cores to the one waiting after it)
        _running_application(standalone["webui"], replay)
        out["blind_lake"] = standalone["private"] / "lake"  # the driver's private/, not the executors'
        blind = _start(standalone, "ingest", "--cluster", CLUSTER, "--log-dir", log, "--lake", out["blind_lake"],
                       "--conf", conf, "--master", master)
    out["replay"] = _finish(replay)
    audit = _start(standalone, "audit", "--cluster", CLUSTER, "--lake", lake, "--json")
    quality = _start(standalone, "quality", "--cluster", CLUSTER, "--lake", lake)
    out["audit"], out["quality"] = _finish(audit), _finish(quality)
    out["blind"] = _finish(blind) if blind is not None else None
    return out


def test_ingest_replay_audit_quality_on_two_executors_equal_a_local_run(runs):
    assert runs["local_ingest"][0] == runs["local_replay"][0] == 0
    assert runs["ingest"].returncode == 0, runs["ingest"].stderr[-3000:]
    assert runs["replay"].returncode == 0, runs["replay"].stderr[-3000:]
    # the CLI's --master, not the config's local default; buckets from the cluster's 2 cores
    assert f"16 buckets on {runs['master']}" in runs["replay"].stdout
    audit, quality = runs["audit"], runs["quality"]
    assert (audit.returncode, quality.returncode) == (runs["local_audit"][0], runs["local_quality"][0]) == (1, 0), \
        audit.stderr + quality.stdout
    findings, local_findings = json.loads(audit.stdout), json.loads(runs["local_audit"][1])
    assert findings["findings"] == local_findings["findings"]
    assert {f["code"] for f in findings["findings"]} >= {"DATA_LOSS_LIKELY", "LAST_REPLICA_STANDING"}
    lake, local = runs["lake"], runs["local"]
    tables = [t.name for t in catalog.TABLES if (Path(local) / t.name).is_dir()]
    assert {t.name for t in (RECORDS, catalog.PARTITION_STATE_HISTORY, catalog.VIOLATIONS,
                             catalog.DATA_QUALITY)} <= set(tables)
    for name in tables:
        assert _rows(str(lake), name) == _rows(str(local), name), name
    assert _rows(str(lake), RECORDS.name)  # not an empty success


def test_executors_that_cannot_see_the_lake_fail_the_ingest_loudly(runs):
    res = runs["blind"]
    if res is None:
        pytest.skip("unshare --mount --map-root-user is not permitted here: no folder the executors cannot see")
    assert res.returncode == 2, res.stdout + res.stderr[-3000:]
    # one line of ours (the rest of stderr is the JVM's log)
    ours = [line for line in res.stderr.splitlines() if line.startswith("kraft-audit")]
    assert len(ours) == 1 and ours[0].startswith(f"kraft-audit ingest: table {RECORDS.name}: the Spark tasks wrote "
                                                 "76 rows but the driver finds 0"), res.stderr[-3000:]
    # the tasks wrote the table's files into the table's folder on their own disk: the line names it
    assert ours[0].endswith(f"({runs['blind_lake'] / RECORDS.name})") and "Traceback" not in res.stderr
    assert not (runs["blind_lake"] / RECORDS.name).exists()  # nothing committed
