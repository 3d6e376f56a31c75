#!/usr/bin/env python3
"""The four commands end to end on a real Spark standalone cluster, against the same run on local[2].

Starts a master and ``--workers`` workers of ``--cores`` cores each from the pip package's own scripts
(``bin/spark-class``), bound to 127.0.0.1; runs ``kraft-audit ingest``, ``replay`` (``--master
spark://...``), ``audit`` and ``quality`` on the simulated ``fleet-large`` fleet (benchmarks/inputs.py,
cached), each in its own process, and prints each command's wall time and its process's peak RSS (the
executors' JVMs and Python workers are the workers' children: their peak is sampled from /proc).  The
cluster is stopped by PID; then the same commands run on local[2] into a second lake (or ``--local-lake``
names one where they ran already) and every table of both lakes is compared row for row (sorted; the
columns saying when a run happened left out).

    python benchmarks/bench_standalone.py --partitions 100000 [--local-lake DIR] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import inputs  # noqa: E402

RUN_COLUMNS = {"replayed_at", "checked_at", "audited_at"}  # when a run happened, not what it found
CLUSTER = "fleet"
PAGE = resource.getpagesize()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workers_alive(webui: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui}/json/", timeout=5) as r:
            return sum(1 for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE")
    except (OSError, ValueError):
        return 0


class Cluster:
    """A standalone master and its workers, each the leader of its own process group."""

    def __init__(self, root: Path, workers: int, cores: int, memory: str):
        import pyspark

        self.procs: list[subprocess.Popen] = []
        spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
        port, self.webui = _free_port(), _free_port()
        self.master = f"spark://127.0.0.1:{port}"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        env.pop("PYTHONPATH", None)
        self._start(root / "master.log", env, [str(spark_class), "org.apache.spark.deploy.master.Master", "--host",
                                               "127.0.0.1", "--port", str(port), "--webui-port", str(self.webui)])
        for i in range(workers):
            self._start(root / f"worker{i}.log", env, [
                str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores),
                "--memory", memory, "--webui-port", "0", "--work-dir", str(root / f"work{i}"), self.master])
        deadline = time.monotonic() + 120
        while _workers_alive(self.webui) < workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                self.stop()
                raise SystemExit(f"the standalone cluster did not come up: see {root}/*.log")
            time.sleep(0.5)

    def _start(self, log: Path, env: dict, argv: list[str]) -> None:
        with open(log, "w") as fh:
            self.procs.append(subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _tree_rss(roots: list[int]) -> int:
    """Resident bytes of the processes under ``roots`` (their whole trees), from /proc."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            pages = int((d / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d.name))
        rss[int(d.name)] = pages * PAGE
    total, todo = 0, list(roots)
    while todo:
        pid = todo.pop()
        total += rss.get(pid, 0)
        todo += children.get(pid, [])
    return total


def _run(argv: list[str], env: dict, cluster_pids: list[int]) -> dict:
    """One command in its own process: wall time, exit code, the peak RSS of its process tree (the driver and,
    on local[2], its JVM) and of the cluster's workers' trees (their executors and Python workers), sampled
    every 0.2 s from /proc."""
    peak = {"driver": 0, "cluster": 0}
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "jobs.cli", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak["driver"] = max(peak["driver"], _tree_rss([proc.pid]))
            if cluster_pids:
                peak["cluster"] = max(peak["cluster"], _tree_rss(cluster_pids[1:]))  # the workers' trees
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    return {"command": argv[0], "exit": proc.returncode, "seconds": wall, "driver_peak": peak["driver"],
            "cluster_peak": peak["cluster"], "stderr": err[-2000:], "stdout": out[-3000:]}


def _commands(data: Path, lake: Path, conf: Path, master: str, env: dict, pids: list[int]) -> list[dict] | None:
    """ingest, replay, audit, quality (each its own process) with ``master``; None when one cannot run."""
    common = ["--cluster", CLUSTER, "--lake", str(lake), "--conf", str(conf)]
    rows = []
    for cmd in (["ingest", "--log-dir", str(data), "--master", master], ["replay", "--master", master],
                ["audit"], ["quality"]):
        r = _run([cmd[0], *common, *cmd[1:]], env, pids)
        rows.append(r)
        print(f"{r['command']:<8} {master:<24} exit {r['exit']}  {r['seconds']:7.1f} s  driver peak "
              f"{r['driver_peak'] / 2**30:5.2f} GiB" + (f"  cluster peak {r['cluster_peak'] / 2**30:5.2f} GiB"
                                                       if pids else ""), flush=True)
        if r["exit"] not in (0, 1):
            print(r["stderr"], file=sys.stderr)
            return None
    return rows


def compare(a: str, b: str, same_cluster: bool = True) -> list[tuple[str, int, int, bool]]:
    """Every table of lake ``a`` against lake ``b``: (table, rows a, rows b, equal).  Each side's rows are put in
    the order of the table's key, then compared a column at a time (a 1 M-partition lake's bronze, all columns
    of both sides at once, does not fit in this machine's memory).  The columns saying when a run happened are
    left out, and with ``same_cluster`` false the cluster's name and what is derived from it (an audit run's
    id)."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from lake import catalog

    ignore = set(RUN_COLUMNS) | (set() if same_cluster else {catalog.CLUSTER, catalog.RUN_ID, "previous_run_id"})
    out = []
    for t in catalog.TABLES:
        pa_, pb = Path(a) / t.name, Path(b) / t.name
        if not (pa_.is_dir() or pb.is_dir()):
            continue
        if not (pa_.is_dir() and pb.is_dir()):
            out.append((t.name, -1, -1, False))
            continue
        da, db = DeltaTable(str(pa_)), DeltaTable(str(pb))
        schema = pa.schema(da.schema().to_arrow())
        names = [n for n in schema.names if n not in ignore]
        keys = [c for c in t.key if c in names] or [n for n in names if not pa.types.is_nested(schema.field(n).type)]

        def order(dt):
            k = dt.to_pyarrow_table(columns=keys)
            return k.num_rows, pc.sort_indices(k, sort_keys=[(c, "ascending") for c in keys])

        (na, oa), (nb, ob) = order(da), order(db)
        same = na == nb
        wide = {pa.string(): pa.large_string(), pa.binary(): pa.large_binary()}

        def column(dt, name, at):  # taking from gigabytes of strings needs 64-bit offsets
            col = dt.to_pyarrow_table(columns=[name]).column(0)
            return (col.cast(wide[col.type]) if col.type in wide else col).take(at)

        for name in names if same else []:
            ca, cb = column(da, name, oa), column(db, name, ob)
            if not ca.equals(cb):
                same = False
                break
        out.append((t.name, na, nb, same))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1, help="cores per worker")
    ap.add_argument("--worker-memory", default="4g", help="memory per worker (its executor gets it)")
    ap.add_argument("--local-lake", help="a lake where the same fleet went through the commands on local[2]")
    ap.add_argument("--local-cluster", default=CLUSTER, help="the cluster's name in --local-lake (default: %(default)s)")
    ap.add_argument("--compare-only", metavar="LAKE", help="no run: compare LAKE (the cluster's, kept with --keep) "
                    "with --local-lake")
    ap.add_argument("--keep", help="keep the cluster's lake in this folder (default: a temporary one, removed)")
    args = ap.parse_args(argv)
    if args.compare_only:
        return _report(compare(args.compare_only, args.local_lake, args.local_cluster == CLUSTER))
    data, _ = inputs.fleet(args.partitions, args.events)
    work = Path(tempfile.mkdtemp(prefix="kraft-audit-standalone-"))
    lake = Path(args.keep) if args.keep else work / "lake"
    conf = work / "standalone.yaml"
    conf.write_text(f"spark:\n  conf:\n    spark.executor.memory: {args.worker_memory}\n")
    cluster = Cluster(work, args.workers, args.cores, args.worker_memory)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        rows = _commands(data, lake, conf, cluster.master, env, cluster.pids())
    finally:
        cluster.stop()
    if rows is None:
        return 1
    total = sum(r["seconds"] for r in rows)
    print(f"{args.partitions:,} partitions on {args.workers} workers x {args.cores} core(s): ingest + replay + "
          f"audit + quality {total:.1f} s ({total / 60:.1f} min); replay said: "
          + next((ln.strip() for ln in rows[1]["stdout"].splitlines() if "buckets on" in ln), "?") + "\n")
    local = args.local_lake
    if local is None:
        local = str(work / "local-lake")
        rows = _commands(data, Path(local), conf, "local[2]", env, [])
        if rows is None:
            return 1
        total = sum(r["seconds"] for r in rows)
        print(f"the same on local[2]: {total:.1f} s ({total / 60:.1f} min)\n")
    code = _report(compare(str(lake), local, args.local_lake is None or args.local_cluster == CLUSTER))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return code


def _report(result: list) -> int:
    for name, ra, rb, same in result:
        verdict = "equal" if same else "DIFFERENT"
        print(f"  {name:<28} {ra:>12,} rows on the cluster  {rb:>12,} rows on local[2]  {verdict}")
    equal = all(same for *_, same in result)
    print("every table equal to the local run" if equal else "TABLES DIFFER")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
