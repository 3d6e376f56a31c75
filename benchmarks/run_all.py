#!/usr/bin/env python3
"""Every benchmark figure in one table, each against its baseline measured in the same run.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/run_all.py [--scale quick|full] [--only NAME...] [--json out.json]

One row per measurement: what, its input (records / partitions), our figure (records/s and seconds), the
baseline and its figure (measured in this run), the ratio, the target of issue 11, met or not, peak RSS
(the driver; for the Spark rows also the JVM, where local mode runs the executors as threads, and its
Python workers, sampled from /proc while the job runs) and the start-up time.  Every measurement runs in
fresh processes: the decode rows through ``bench_decode.py``'s functions (children pinned to one core with
``taskset``, as that script does), ``verify`` through ``bench_verify.figures``, the replay core, Spark replay
and end-to-end rows by running ``bench_replay.py``, ``bench_spark_replay.py`` and ``bench_e2e.py`` and
reading their printed lines.  A measurement that fails or cannot be parsed is a row with its error.

Measurements (``--only``): decode-summary, decode-columns, decode-typed, decode-jsonl, verify, describe, core,
core-invariants, startup, spark-replay, e2e.  ``--scale quick`` (default) uses a 20 k-partition fleet (~230 k
records; verify and describe a 5 k-partition one, ~60 k records, for their scalar baselines) and small slices for
the slow baselines, and runs end to end at 5 k and 20 k partitions (9 minutes on the 2-core box under a load average
of 11-17, most of it the two Spark sessions).  ``--scale
full`` is the real run: 100 k partitions (~1.15 M records) for decoding, verify and describe, the core at 1 M
partitions (``bench_replay.py``'s default), end to end at 100 k / 300 k / 1 M partitions and the Spark ingest
and replay rows from the 1 M run, where their target is set (simulating 300 k takes a while the first time;
inputs are cached in ``benchmarks/.cache``).
"""
from __future__ import annotations

import argparse
import compileall
import contextlib
import io
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HERE = Path(__file__).resolve().parent
EVENTS = 10
M = 1_000_000

# per scale: fleet sizes (partitions of the simulator's fleet-large scenario, 10 events) and repeats
SCALES = {
    "tiny": {  # for the test: seconds
        "decode": (2_000, 1), "repeat": 1, "columns_repeat": 1, "jsonl_repeat": 1, "limit": 2_000, "first_calls": 1,
        "verify": 2_000, "core": ["--partitions", "2000", "--groups", "1", "--scalar-slice", "2000"],
        "spark": 2_000, "e2e": [2_000], "spark_replay_script": False, "timeout": 600},
    "quick": {
        "decode": (20_000, 0), "repeat": 3, "columns_repeat": 2, "jsonl_repeat": 2, "limit": 50_000, "first_calls": 2,
        # verify and describe at 5 k partitions: their scalar baselines take minutes on a shared box at 20 k
        "verify": 5_000, "core": ["--partitions", "20000", "--groups", "2", "--scalar-slice", "2000"],
        "spark": 20_000, "e2e": [5_000, 20_000], "spark_replay_script": False, "timeout": 900},
    "full": {
        "decode": (100_000, 0), "repeat": 7, "columns_repeat": 3, "jsonl_repeat": 3, "limit": 300_000,
        # verify's and describe's first call in this many fresh processes (the row: their median; on this VM a first
        # call swings up to 2x with what ran before it)
        "first_calls": 3,
        "verify": 100_000, "core": [],  # bench_replay.py's defaults: 1 M partitions, 8 groups, 20 k scalar slice
        # the Spark jobs at 1 M partitions, where issue 11 sets their target (at 100 k their fixed costs -- a few
        # seconds of scheduling and commits -- outweigh 1-2 s of work): both rows from the e2e-1M run
        "spark": 1_000_000, "e2e": [100_000, 300_000, 1_000_000], "spark_replay_script": False, "timeout": 7200},
}

TINY_LOG_DIR = ROOT.parent / "shared" / "realdata" / "vasifvortex-pre3.3-fence" / "kafka1" / "__cluster_metadata-0"


# ------------------------------------------------------------------------------------------- rows
def row(name: str, what: str, **kw) -> dict:
    """One line of the table.  Keys (all optional but ``name``/``what``): records, partitions, seconds, rate
    (records/s), base_what, base_records, base_seconds, base_rate, versus (the ratio, in words), target, met
    (True/False/None), rss_driver_mb, rss_exec_mb, exec_detail, startup_s, note, error."""
    r = {"name": name, "what": what}
    r.update(kw)
    return r


def error_row(name: str, what: str, exc: BaseException) -> dict:
    return row(name, what, error=_reason(exc), met=None)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, subprocess.CalledProcessError):
        tail = (exc.stderr or "").strip().splitlines()
        return f"exit {exc.returncode}: " + (tail[-1] if tail else "no output")[:200]
    if isinstance(exc, subprocess.TimeoutExpired):
        return f"timed out after {exc.timeout:.0f} s"
    return f"{type(exc).__name__}: {exc}"[:240]


def fmt_rate(rate: float | None) -> str:
    if rate is None:
        return "-"
    if rate >= 1e6:
        return f"{rate / 1e6:.2f} M/s"
    if rate >= 1e3:
        return f"{rate / 1e3:.1f} k/s"
    return f"{rate:.0f}/s"


def fmt_secs(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{s:.3f} s" if s < 1 else f"{s:.1f} s" if s < 1000 else f"{s:,.0f} s"


def fmt_count(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.0f} k" if n >= 1e4 else f"{n:,}"


def fmt_mb(mb: float | None) -> str:
    if mb is None:
        return "-"
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MB"


def speed(ours_s: float, base_s: float) -> str:
    """The ratio of two times of the same work, in words."""
    if not ours_s or not base_s:
        return "-"
    r = base_s / ours_s
    if r >= 1:
        return f"{r:.0f}x faster" if r >= 10 else f"{r:.1f}x faster"
    return f"{1 / r:.0f}x slower" if r <= 0.1 else f"{1 / r:.2f}x slower"


COLUMNS = [  # header, how a row shows it
    ("measurement", lambda r: r["name"]),
    ("what", lambda r: r["what"]),
    ("input rec / part", lambda r: f"{fmt_count(r.get('records'))} / {fmt_count(r.get('partitions'))}"),
    ("ours", lambda r: (f"{fmt_rate(r['rate'])} ({fmt_secs(r.get('seconds'))})" if r.get("rate")
                        else fmt_secs(r.get("seconds")))),
    ("baseline, same run", lambda r: r.get("base_what") or "-"),
    ("its figure", lambda r: (f"{fmt_rate(r['base_rate'])} ({fmt_secs(r.get('base_seconds'))})" if r.get("base_rate")
                              else fmt_secs(r.get("base_seconds")))),
    ("ratio", lambda r: r.get("versus") or "-"),
    ("target", lambda r: r.get("target") or "-"),
    ("met", lambda r: {True: "yes", False: "NO", None: "-"}[r.get("met")]),
    ("RSS driver", lambda r: fmt_mb(r.get("rss_driver_mb"))),
    ("RSS JVM+workers", lambda r: fmt_mb(r.get("rss_exec_mb")) if r.get("rss_exec_mb") is not None else "-"),
    ("start-up", lambda r: fmt_secs(r.get("startup_s"))),
]


LEGEND = """\
ours / its figure: records/s (seconds); ratio: the same work's time, ours against the baseline's (or their rates
  where the baseline ran on a slice); met: against the target of issue 11 (targets for a 1 M-record log are
  compared at the input shown).  Decode rows: fresh processes pinned to core 0 with taskset, as bench_decode.py
  does; verify, describe, core, Spark and e2e unpinned, as their scripts run.  RSS driver: peak RSS of the
  measuring process; RSS JVM+workers: the Spark JVM's peak (VmHWM; local mode runs the executors as its threads)
  + the largest sum of its Python workers' PSS (shared pages split), sampled from /proc every 0.5 s.
  start-up: interpreter start to exit on a tiny log (start-up rows), the first call in a fresh process (decode
  rows), the Spark script's wall time outside its timed stages (Spark rows)."""


def format_table(rows: list[dict]) -> str:
    """The rows as one fixed-width table; an error row shows its error after the input column."""
    cells = [[h for h, _ in COLUMNS]]
    errors = []
    for r in rows:
        if r.get("error"):
            line = [r["name"], r["what"], f"{fmt_count(r.get('records'))} / {fmt_count(r.get('partitions'))}",
                    "ERROR (see below)"] + ["-"] * (len(COLUMNS) - 4)
            errors.append(f"{r['name']}: {r['error']}")
        else:
            line = [str(fn(r)) for _, fn in COLUMNS]
        cells.append(line)
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    out = []
    for k, line in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    notes = [f"{r['name']}: {r['note']}" for r in rows if r.get("note") and not r.get("error")]
    if notes:
        out.append("")
        out += ["notes:"] + ["  " + n for n in notes]
    if errors:
        out.append("")
        out += ["errors:"] + ["  " + e for e in errors]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------- machine
def machine() -> dict:
    model = "?"
    mem = None
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo", encoding="utf-8"):
            if line.startswith("MemTotal"):
                mem = int(line.split()[1]) / 2**20
    except OSError:
        pass
    try:
        commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                                text=True).stdout.strip()
    except OSError:
        commit = "?"
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "nproc": os.cpu_count(),
            "cpu": model, "mem_gib": mem, "python": sys.version.split()[0], "commit": commit,
            "load_before": os.getloadavg()}


def header(m: dict, scale: str) -> str:
    mem = f", {m['mem_gib']:.1f} GiB" if m.get("mem_gib") else ""
    text = (f"kraft-audit benchmarks, scale {scale}: {m['date']}, commit {m['commit']}, Python {m['python']}\n"
            f"machine: {m['nproc']} CPUs ({m['cpu']}){mem}; load average before "
            + "/".join(f"{x:.2f}" for x in m["load_before"]))
    if m.get("load_after"):
        text += ", after " + "/".join(f"{x:.2f}" for x in m["load_after"])
    return text + " (1/5/15 min)"


# ------------------------------------------------------------------------------------------- processes
def _tree(root: int) -> list[int]:
    """root and its live descendants (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", encoding="utf-8") as fh:
                stat = fh.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _status(pid: int) -> dict:
    out = {}
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
            for line in fh:
                key, _, val = line.partition(":")
                if key == "Name":
                    out["name"] = val.strip()
                elif key in ("VmHWM", "VmRSS"):
                    out[key] = int(val.split()[0]) / 1024
    except OSError:
        pass
    return out


def _pss(pid: int) -> float | None:
    """Proportional set size of a process, MB (shared pages divided among their sharers), or None."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Sampler(threading.Thread):
    """Samples the process tree of ``pid`` every ``every`` seconds: the peak RSS (VmHWM) of the root and of
    every java descendant (Spark local mode: driver JVM with the executor threads), and the largest sum of
    the other descendants' proportional set sizes at one instant (the Python workers, forked from one daemon)."""

    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.root_mb = 0.0
        self.jvm_mb: dict[int, float] = {}
        self.workers_mb = 0.0
        self.tree_mb = 0.0  # the largest sum at one instant: root and JVM resident, workers proportional
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                workers = now = 0.0
                for p in _tree(self.pid):
                    st = _status(p)
                    if p == self.pid:
                        self.root_mb = max(self.root_mb, st.get("VmHWM", 0.0))
                        now += st.get("VmRSS", 0.0)
                    elif st.get("name") == "java":
                        self.jvm_mb[p] = max(self.jvm_mb.get(p, 0.0), st.get("VmHWM", 0.0))
                        now += st.get("VmRSS", 0.0)
                    else:  # forked from one daemon, the workers share pages: their proportional share
                        workers += _pss(p) if _pss(p) is not None else st.get("VmRSS", 0.0)
                self.workers_mb = max(self.workers_mb, workers)
                self.tree_mb = max(self.tree_mb, now + workers)
            except Exception:  # a sample lost is not a measurement lost
                pass
            self.done.wait(self.every)

    @property
    def exec_mb(self) -> float | None:
        jvm = max(self.jvm_mb.values(), default=0.0)
        return jvm + self.workers_mb if jvm else None


def spawn(cmd: list[str], timeout: float, pin: bool = False, sample: bool = False) -> dict:
    """Run ``cmd`` (pinned to core 0 with taskset if ``pin``): stdout, stderr, wall seconds, peak RSS of the
    process (wait4) and, with ``sample``, of its JVM and other descendants.  Raises CalledProcessError on a
    non-zero exit, TimeoutExpired after ``timeout`` seconds."""
    if pin and os.path.exists("/usr/bin/taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, cwd=str(ROOT))
        sampler = Sampler(p.pid) if sample else None
        if sampler:
            sampler.start()
        status = rusage = None
        deadline = t0 + timeout
        while True:
            pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                _kill_tree(p.pid)
                os.wait4(p.pid, 0)
                p.returncode = -9
                if sampler:
                    sampler.done.set()
                raise subprocess.TimeoutExpired(cmd, timeout)
            time.sleep(0.05)
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        if sampler:
            sampler.done.set()
            sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, cmd, stdout, stderr)
    res = {"stdout": stdout, "stderr": stderr, "wall": wall, "maxrss_mb": rusage.ru_maxrss / 1024}
    if sampler:
        res["driver_mb"] = sampler.root_mb or None
        res["exec_mb"] = sampler.exec_mb
        res["jvm_mb"] = max(sampler.jvm_mb.values(), default=None)
        res["workers_mb"] = sampler.workers_mb
        # a peak between two samples is missed; the root's own exact peak bounds the figure from below
        res["tree_mb"] = max(sampler.tree_mb, sampler.root_mb) or None
    return res


def _kill_tree(pid: int) -> None:
    for p in reversed(_tree(pid)):
        with contextlib.suppress(OSError):
            os.kill(p, 9)


def child(name: str, arg, timeout: float, pin: bool = False) -> tuple[dict, dict]:
    """A measurement of this file's CHILDREN in a fresh interpreter: (its JSON result, the process figures)."""
    proc = spawn([sys.executable, str(Path(__file__).resolve()), "--child", name, json.dumps(arg)], timeout, pin=pin)
    return json.loads(proc["stdout"].strip().splitlines()[-1]), proc


def script(name: str, args: list[str], timeout: float, sample: bool = False) -> dict:
    """Run one of the benchmark scripts (``name`` in benchmarks/) and return spawn's figures."""
    return spawn([sys.executable, str(HERE / name), *args], timeout, sample=sample)


def _find(pattern: str, text: str, what: str) -> re.Match:
    m = re.search(pattern, text, re.M)
    if not m:
        raise ValueError(f"cannot find {what} in the output ({pattern!r})")
    return m


def _num(s: str) -> float:
    return float(s.replace(",", ""))


# ------------------------------------------------------------------------------------------- children
# verify and describe: the measured call is the first of the command in its process (as a user runs it, start-up
# aside); this many more calls are timed for the notes
AGAIN = 2


def _more_first_calls(cfg: dict, name: str, arg: dict, key: str) -> list[float]:
    """The first call's seconds (``key`` of the child's result) in ``first_calls - 1`` more fresh processes."""
    return [child(name, arg, cfg["timeout"])[0][key] for _ in range(cfg.get("first_calls", 1) - 1)]


def _firsts(seconds: list) -> str:
    """The notes' words on the first calls the row's median is of."""
    if len(seconds) == 1:
        return "the first call in one fresh process"
    return (f"the median of the first call in {len(seconds)} fresh processes "
            f"({', '.join(fmt_secs(s) for s in seconds)})")


def _again(n: int, seconds: list) -> str:
    """The notes' words on the repeated calls."""
    if not seconds:
        return ""
    best = min(seconds)
    return (f"; the same call again in that process (its memory used once already): best of {len(seconds)} "
            f"{fmt_secs(best)}, {fmt_rate(n / best)}")


def _child_describe(arg) -> dict:
    """describe --log-dir (the image at the end of the log) after start-up, against the scalar reference
    reader + the scalar image replay (Cluster.apply record by record) of the same plan."""
    from benchmarks import inputs
    from controller_core.codec.batch import iter_batches_scalar
    from controller_core.heap import log_only_process
    from controller_core.image import Cluster
    from controller_core.logdir import SEGMENT
    from controller_core.replay import plan, read_log_dir
    from jobs.cli import main

    data, _ = inputs.fleet(arg["partitions"], EVENTS)
    log_only_process()  # as the kraft-audit executable sets its process up for a log-only command (jobs.cli.console)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["describe", "--log-dir", str(TINY_LOG_DIR if TINY_LOG_DIR.is_dir() else data)])  # imports: start-up
    warm = time.perf_counter() - t0
    records = read_log_dir(data)[0].num_rows
    text = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        code = main(["describe", "--log-dir", str(data)])
    seconds = time.perf_counter() - t0
    again = []  # the same call repeated: the memory the first one used is the process's own by then
    for _ in range(AGAIN):
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            main(["describe", "--log-dir", str(data)])
        again.append(time.perf_counter() - t0)
    out = {"records": records, "seconds": seconds, "exit": code, "lines": text.getvalue().count("\n"),
           "warm_up": warm, "again": again}
    if not arg.get("baseline", True):  # (one more first call for the median: the baseline is measured once)
        return out
    # the baseline: the scalar reader and Cluster.apply over the same files from the same starting point
    p = plan(data)
    t0 = time.perf_counter()
    cluster, n = Cluster(), 0
    for lf in p.files:
        with open(lf.path, "rb") as fh:
            buf = fh.read()
        low = p.start_offset if lf.kind == SEGMENT else 0
        for _, recs in iter_batches_scalar(buf):
            for r in recs:
                if r.offset >= low:
                    n += 1
                    with contextlib.suppress(Exception):  # describe skips what the image rejects, too
                        cluster.apply(r.type, r.data, r.offset)
    base = time.perf_counter() - t0
    return {**out, "base_records": n, "base_seconds": base, "partitions_seen": len(cluster.partitions)}


def _child_verify(arg) -> dict:
    from benchmarks import bench_verify as bv
    from controller_core.heap import log_only_process

    log_only_process()  # as the kraft-audit executable sets its process up for a log-only command (jobs.cli.console)

    return bv.figures(arg["partitions"], EVENTS, reference=arg.get("reference", True), checker=False, again=AGAIN,
                      warm_log_dir=TINY_LOG_DIR if TINY_LOG_DIR.is_dir() else None)


def _child_inproc_replay(arg) -> dict:
    """The in-process baseline of the Spark replay: the same bronze rows, pipeline.run with invariants, one call."""
    from benchmarks import inputs
    from controller_core import pipeline

    table = inputs.bronze(inputs.fleet(arg["partitions"], EVENTS)[0], cluster="bench")
    pipeline.run(table.slice(0, 2000), invariants=True)  # imports and the compiled code's cache: start-up
    t0 = time.perf_counter()
    rep = pipeline.run(table, invariants=True)
    return {"records": table.num_rows, "seconds": time.perf_counter() - t0, "divergence_rows": rep.divergences.num_rows}


CHILDREN = {"describe": _child_describe, "verify": _child_verify, "inproc-replay": _child_inproc_replay}


# ------------------------------------------------------------------------------------------- measurements
def _fleet(partitions: int, seed: int = 0):
    from benchmarks import inputs

    return inputs.fleet(partitions, EVENTS, seed)


def m_decode_summary(cfg: dict) -> list[dict]:
    from benchmarks import bench_decode, inputs

    parts, seed = cfg["decode"]
    what = "decode --summary (compiled walk + CRC32C + counts), 1 core"
    try:
        data, _ = _fleet(parts, seed)
        paths = [str(p) for p in inputs.segments(data)]
        ours = bench_decode.summary_figures(paths, "compiled", cfg["repeat"])
        base = bench_decode.summary_figures(paths, "scalar", 1, cfg["limit"])
    except Exception as exc:  # noqa: BLE001 - the row says what failed
        return [error_row("decode-summary", what, exc)]
    rate, brate = ours["records"] / ours["best"], base["records"] / base["best"]
    return [row("decode-summary", what, records=ours["records"], partitions=parts, seconds=ours["best"], rate=rate,
                base_what=f"scalar reader, first {base['records']:,} rec", base_records=base["records"],
                base_seconds=base["best"], base_rate=brate, versus=f"{rate / brate:.0f}x faster",
                target=">= 10 M rec/s", met=rate >= 10 * M, rss_driver_mb=ours["peak_rss_mb"],
                startup_s=ours["first"],
                note=f"best of {cfg['repeat']} calls in one process (median {fmt_rate(ours['records'] / ours['median'])}, "
                     f"{fmt_rate(ours['records'] / ours['cpu'])} per CPU-second); start-up = the first call, "
                     "imports and numba's cache load included")]


def _decode_rows(cfg: dict, name: str, stage: str, what: str, note: str) -> list[dict]:
    """A row of decoding the fleet's segments into bronze rows (``stage`` of bench_decode.decode_figures)."""
    from benchmarks import bench_decode, inputs

    parts, seed = cfg["decode"]
    try:
        data, _ = _fleet(parts, seed)
        segs = inputs.segments(data)
        ours = bench_decode.decode_figures([(str(p), int(p.stem)) for p in segs], stage, cfg["columns_repeat"],
                                           calls=2)
        base = bench_decode.scalar_figures(str(segs[0]), cfg["limit"])
    except Exception as exc:  # noqa: BLE001
        return [error_row(name, what, exc)]
    rate, brate = ours["records"] / ours["best"], base["records"] / base["seconds"]
    return [row(name, what, records=ours["records"], partitions=parts, seconds=ours["best"], rate=rate,
                base_what=f"scalar reader, first {base['records']:,} rec", base_records=base["records"],
                base_seconds=base["seconds"], base_rate=brate, versus=f"{rate / brate:.0f}x faster",
                target=">= 3 M rec/s/core", met=rate >= 3 * M, rss_driver_mb=ours["peak_rss_mb"],
                startup_s=ours["first"], note=note.format(first=ours["first"], repeat=cfg["columns_repeat"]))]


def m_decode_columns(cfg: dict) -> list[dict]:
    return _decode_rows(cfg, "decode-columns", "bronze", "decode to typed columns (iter_chunks + bronze rows), 1 core",
                        "best of 2 calls after the first in each of {repeat} fresh processes (the first call, "
                        "{first:.3f} s, pays numba's cache load and fresh pages: start-up); the scalar reader decodes "
                        "the bodies into dicts, no Arrow")


def m_decode_typed(cfg: dict) -> list[dict]:
    return _decode_rows(cfg, "decode-typed", "typed", "decode to the replay's typed columns (no partition JSON), 1 core",
                        "what verify, describe, audit --log-dir and the Spark replay read (replay.TYPED_ONLY: "
                        "partition records without data_json); as decode-columns otherwise")


def m_decode_jsonl(cfg: dict) -> list[dict]:
    from benchmarks import bench_decode, inputs

    parts, seed = cfg["decode"]
    what = "kraft-audit decode to JSON Lines (to /dev/null), 1 core"
    try:
        data, _ = _fleet(parts, seed)
        paths = [str(p) for p in inputs.segments(data)]
        ours = bench_decode.summary_figures(paths, "jsonl", cfg["jsonl_repeat"])
        base = bench_decode.summary_figures(paths, "scalar_jsonl", 1, cfg["limit"])
    except Exception as exc:  # noqa: BLE001
        return [error_row("decode-jsonl", what, exc)]
    rate, brate = ours["records"] / ours["best"], base["records"] / base["best"]
    return [row("decode-jsonl", what, records=ours["records"], partitions=parts, seconds=ours["best"], rate=rate,
                base_what=f"scalar reader + json.dumps, first {base['records']:,} rec", base_records=base["records"],
                base_seconds=base["best"], base_rate=brate, versus=f"{rate / brate:.1f}x faster",
                target=">= 1 M rec/s", met=rate >= M, rss_driver_mb=ours["peak_rss_mb"], startup_s=ours["first"],
                note="ours writes decode's full line (offset, type, version, data, file, position, batch fields); "
                     "the baseline only {offset, type, version, data}; start-up = the first call")]


def m_verify(cfg: dict) -> list[dict]:
    parts = cfg["verify"]
    what = "verify --log-dir in process, after start-up"
    try:
        f, proc = child("verify", {"partitions": parts}, cfg["timeout"])
        firsts = [f["verify"]] + _more_first_calls(cfg, "verify", {"partitions": parts, "reference": False}, "verify")
    except Exception as exc:  # noqa: BLE001
        return [error_row("verify", what, exc)]
    n = f["records"]
    first = statistics.median(firsts)
    return [row("verify", what, records=n, partitions=parts, seconds=first, rate=n / first,
                base_what="scalar route (scalar reader, replay, checker)", base_records=n,
                base_seconds=f["scalar_route"], base_rate=n / f["scalar_route"],
                versus=speed(first, f["scalar_route"]), target=">= 3 M rec/s (1 M-rec log)",
                met=n / first >= 3 * M, rss_driver_mb=proc["maxrss_mb"],
                note=f"verify exit {f['verify_exit']}; {_firsts(firsts)}; stages: decode {fmt_secs(f['decode'])}, "
                     f"pipeline without invariants {fmt_secs(f['core'])}, compiled invariant pass "
                     f"{fmt_secs(f['invariants'])}; the scalar route found {f['scalar_route_divergences']} "
                     f"divergences, {f['scalar_route_breaches']} breaches{_again(n, f.get('verify_again', []))}; "
                     "start-up: see startup-verify")]


def m_describe(cfg: dict) -> list[dict]:
    parts = cfg["verify"]
    what = "describe --log-dir in process, after start-up"
    try:
        f, proc = child("describe", {"partitions": parts}, cfg["timeout"])
        firsts = [f["seconds"]] + _more_first_calls(cfg, "describe", {"partitions": parts, "baseline": False},
                                                    "seconds")
    except Exception as exc:  # noqa: BLE001
        return [error_row("describe", what, exc)]
    n = f["records"]
    first = statistics.median(firsts)
    return [row("describe", what, records=n, partitions=parts, seconds=first, rate=n / first,
                base_what="scalar reader + Cluster.apply per record", base_records=f["base_records"],
                base_seconds=f["base_seconds"], base_rate=f["base_records"] / f["base_seconds"],
                versus=speed(first / n, f["base_seconds"] / f["base_records"]),
                target=">= 3 M rec/s (1 M-rec log)", met=n / first >= 3 * M, rss_driver_mb=proc["maxrss_mb"],
                note=f"exit {f['exit']}, {f['lines']:,} lines printed; {_firsts(firsts)}"
                     f"{_again(n, f.get('again', []))}; start-up: see startup-describe")]


def core_figures(text: str) -> dict:
    """bench_replay.py's printed figures: partitions, records, rate (the pipeline's records/s), and the scalar
    reference's fleet: base_partitions, base_records, base_rate, same_rate (the pipeline on that fleet)."""
    m = _find(r"^([\d,]+) partitions, ([\d,]+) records", text, "the input line")
    rate = _num(_find(r"^pipeline\s+([\d,]+) records/s", text, "the pipeline's rate").group(1))
    s = _find(r"same ([\d,]+)-partition cluster \(([\d,]+) records\): scalar reference ([\d,]+) records/s.*"
              r"pipeline with(?:out)? invariants ([\d,]+) records/s", text, "the scalar reference line")
    steps = re.search(r"^steps \(CPU ns a record[^)]*\): (.*)$", text, re.M)  # (bench_replay's profile)
    return {"partitions": int(_num(m.group(1))), "records": int(_num(m.group(2))), "rate": rate,
            "base_partitions": int(_num(s.group(1))), "base_records": int(_num(s.group(2))),
            "base_rate": _num(s.group(3)), "same_rate": _num(s.group(4)),
            "steps": steps.group(1) if steps else None}


def _core_row(cfg: dict, name: str, what: str, args: list[str]) -> list[dict]:
    try:
        proc = script("bench_replay.py", cfg["core"] + args, cfg["timeout"])
        f = core_figures(proc["stdout"])
    except Exception as exc:  # noqa: BLE001
        return [error_row(name, what, exc)]
    n, rate, bn, brate = f["records"], f["rate"], f["base_records"], f["base_rate"]
    return [row(name, what, records=n, partitions=f["partitions"], seconds=n / rate, rate=rate,
                base_what=f"scalar reference, {fmt_count(f['base_partitions'])}-part. fleet", base_records=bn,
                base_seconds=bn / brate, base_rate=brate, versus=f"{f['same_rate'] / brate:.0f}x faster",
                target=">= 10 M rec/s/core", met=rate >= 10 * M, rss_driver_mb=proc["maxrss_mb"],
                note=f"the ratio is on the baseline's {bn:,}-record fleet, where the pipeline ran at "
                     f"{fmt_rate(f['same_rate'])}; not pinned (bench_replay.py does not pin); start-up excluded: the "
                     f"kernels loaded from numba's cache first (kernels.warm; until session 46 the first group paid "
                     f"it, ~0.1 s)" + (f"; CPU ns a record by step: {f['steps']}" if f["steps"] else ""))]


def m_core(cfg: dict) -> list[dict]:
    return _core_row(cfg, "core", "replay core: pipeline.run, no invariants (bench_replay.py)", [])


def m_core_invariants(cfg: dict) -> list[dict]:
    """The core as issue 11's target counts it: fold, recompute and the §4 invariants (the compiled invariant pass,
    on the same core: one thread), history output; its baseline is the scalar reference with its InvariantChecker."""
    return _core_row(cfg, "core-invariants", "replay core with the §4 invariants, one thread (bench_replay.py "
                     "--invariants)", ["--invariants"])


def _compile_project() -> None:
    """Write the bytecode of the project's packages (compileall writes it whatever PYTHONDONTWRITEBYTECODE
    says; unchanged modules are left as they are)."""
    for package in ("controller_core", "audit", "lake", "jobs", "transforms", "simulator", "conf"):
        compileall.compile_dir(str(ROOT / package), quiet=2)


def _startup_cmd(argv: list[str]) -> list[str]:
    code = "import sys; from jobs.cli import console; sys.argv = ['kraft-audit'] + sys.argv[1:]; console()"
    return [sys.executable, "-c", code, *argv]


def m_startup(cfg: dict) -> list[dict]:
    if TINY_LOG_DIR.is_dir():
        log_dir = TINY_LOG_DIR
        log = next(TINY_LOG_DIR.glob("*.log"))
    else:  # no real logs next to the checkout: the smallest simulated fleet
        from benchmarks import inputs

        data, _ = _fleet(2_000, 1)
        log_dir, log = data, inputs.segments(data)[0]
    repeat = 3
    # an installed copy has its bytecode (pip compiles it); a checkout writes it on the first run -- unless
    # PYTHONDONTWRITEBYTECODE is set, as on this sandbox, where every run compiled the changed modules again
    # (~60 ms of verify's start-up): compile the project's modules as an install would, once, before timing
    _compile_project()

    def best(cmd: list[str]) -> float:
        """Best wall time of ``repeat`` runs, interpreter start to exit (exit 1: verify's findings, still timed)."""
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                 timeout=120)
            times.append(time.perf_counter() - t0)
            if res.returncode not in (0, 1):
                raise subprocess.CalledProcessError(res.returncode, cmd, res.stdout, res.stderr)
        return min(times)

    try:
        interp, interp_err = best([sys.executable, "-c", "pass"]), None
    except Exception as exc:  # noqa: BLE001
        interp, interp_err = None, exc
    rows = []
    for name, argv in (("startup-verify", ["verify", "--log-dir", str(log_dir)]),
                       ("startup-describe", ["describe", "--log-dir", str(log_dir)]),
                       ("startup-decode-summary", ["decode", "--summary", str(log)])):
        what = f"kraft-audit {argv[0]}{' --summary' if argv[0] == 'decode' else ''} on a tiny log, interpreter to exit"
        try:
            if interp is None:
                raise interp_err
            t = best(_startup_cmd(argv))
        except Exception as exc:  # noqa: BLE001
            rows.append(error_row(name, what, exc))
            continue
        rows.append(row(name, what, seconds=t, base_what="interpreter alone (python -c pass)", base_seconds=interp,
                        versus=f"+{t - interp:.2f} s", target="<= 1 s", met=t <= 1.0, startup_s=t,
                        note=f"best of {repeat}; {os.path.getsize(log):,}-byte log ({log.name}); the project's bytecode "
                             "compiled first, as an install has it"
                             if name == "startup-decode-summary" else None))
    return rows


def _spark_inproc(parts: int, timeout: float) -> tuple[dict, dict]:
    return child("inproc-replay", {"partitions": parts}, timeout)


def _replay_in_e2e(cfg: dict) -> bool:
    """Whether the spark-replay row comes from the e2e run (quick: one Spark session fewer) instead of
    bench_spark_replay.py's own run."""
    return not cfg["spark_replay_script"] and "e2e" in cfg["_measured"]


def spark_replay_figures(text: str) -> dict:
    """bench_spark_replay.py's printed figures: records, prepare (seconds to decode and write the bronze
    table), seconds (the replay job) and driver_mb (the largest driver peak it prints: the whole process, and
    the job's own where the script resets the high-water mark before the job; None if none)."""
    n = int(_num(_find(r"^[\d,]+ partitions, ([\d,]+) bronze records", text, "the input line").group(1)))
    pre = _find(r"decoded in ([\d.]+) s, written to Delta in ([\d.]+) s", text, "the preparation times")
    secs = _num(_find(r"^replay job \([^)]*\): ([\d.]+) s wall", text, "the replay job's time").group(1))
    drv = [_num(x) for x in re.findall(r"driver peak RSS (?:during the job )?([\d,]+) MB", text)]
    return {"records": n, "prepare": _num(pre.group(1)) + _num(pre.group(2)), "seconds": secs,
            "driver_mb": max(drv, default=None)}


def m_spark_replay(cfg: dict) -> list[dict]:
    parts = cfg["spark"]
    what = "Spark replay job, local[2], invariants (bench_spark_replay.py)"
    if _replay_in_e2e(cfg):
        return []  # m_e2e makes the row
    try:
        proc = script("bench_spark_replay.py", ["--partitions", str(parts)], cfg["timeout"], sample=True)
        f = spark_replay_figures(proc["stdout"])
        base, _ = _spark_inproc(parts, cfg["timeout"])
    except Exception as exc:  # noqa: BLE001
        return [error_row("spark-replay", what, exc)]
    n, secs = f["records"], f["seconds"]
    startup = proc["wall"] - f["prepare"] - secs
    driver = max(f["driver_mb"] or 0, proc.get("driver_mb") or 0) or None
    ratio = secs / base["seconds"]
    return [row("spark-replay", what, records=n, partitions=parts, seconds=secs, rate=n / secs,
                base_what="in process: pipeline.run, invariants, 1 call", base_records=base["records"],
                base_seconds=base["seconds"], base_rate=base["records"] / base["seconds"],
                versus=speed(secs, base["seconds"]), target="<= 2x in-process", met=ratio <= 2.0,
                rss_driver_mb=driver, rss_exec_mb=proc.get("exec_mb"), startup_s=startup,
                note=f"JVM {fmt_mb(proc.get('jvm_mb'))} + Python workers {fmt_mb(proc.get('workers_mb'))} (sampled "
                     "every 0.5 s); start-up ~ the script's wall time minus its timed stages (interpreter, imports, "
                     "Spark session start and stop)")]


E2E_STAGE = re.compile(r"^(?P<stage>\S.*?)\s+(?P<sec>[\d.]+) s\s+(?:(?P<rate>[\d,]+) rec/s)?\s*peak RSS\s+"
                       r"(?P<rss>[\d,]+) MB", re.M)


def e2e_stages(text: str) -> dict[str, tuple[float, float]]:
    """bench_e2e.py's stage lines as {stage: (seconds, driver peak RSS MB so far)}."""
    return {m.group("stage").strip(): (_num(m.group("sec")), _num(m.group("rss"))) for m in E2E_STAGE.finditer(text)}


def _stage(stages: dict, prefix: str) -> float:
    for k, (s, _) in stages.items():
        if k.startswith(prefix):
            return s
    raise ValueError(f"bench_e2e.py printed no '{prefix}' stage (stages: {sorted(stages)})")


def m_e2e(cfg: dict) -> list[dict]:
    rows, per_m = [], {}
    ingest_scale = cfg["spark"] if cfg["spark"] in cfg["e2e"] else cfg["e2e"][-1]  # the Spark ingest row's run
    for parts in cfg["e2e"]:
        name = f"e2e-{parts // 1000}k" if parts < M else f"e2e-{parts // M}M"
        what = "end to end: Spark ingest + replay, audit + quality jobs (bench_e2e.py --spark-only)"
        stats = HERE / ".cache" / f"fleet-{parts}-{EVENTS}-0" / "bench-stats.json"
        try:
            # two processes, so that the Spark run's driver peak is its own: the in-process stages first (they
            # simulate the fleet if it is not cached), then the Spark jobs
            local_proc = script("bench_e2e.py", ["--partitions", str(parts), "--no-spark"], cfg["timeout"])
            local_stages = e2e_stages(local_proc["stdout"])
            decode = _stage(local_stages, "decode segments")
            inproc_ingest = _stage(local_stages, "ingest in process")
            local = _stage(local_stages, "silver tables in process") + _stage(local_stages, "audit (violations")
            cached = stats.is_file()
            proc = script("bench_e2e.py", ["--partitions", str(parts), "--spark-only"], cfg["timeout"], sample=True)
            stages = e2e_stages(proc["stdout"])
            n = json.loads(stats.read_text())["records"]
            ingest, replay = _stage(stages, "Spark ingest"), _stage(stages, "Spark replay")
            audit, quality = _stage(stages, "audit job"), _stage(stages, "quality job")
            spark = ingest + replay + audit + quality
        except Exception as exc:  # noqa: BLE001
            rows.append(error_row(name, what, exc))
            continue
        driver = max([rss for _, rss in stages.values()] + [proc.get("driver_mb") or 0])
        together = proc.get("tree_mb") or driver + (proc.get("exec_mb") or 0)
        local_mb = max([rss for _, rss in local_stages.values()] + [local_proc["maxrss_mb"]])
        # start-up: what the stages do not cover (a simulation counts as a stage only if it ran in this process)
        startup = proc["wall"] - sum(sec for k, (sec, _) in stages.items() if not (cached and k.startswith("simulate")))
        total_mb = driver + (proc.get("exec_mb") or 0)  # each process at its own peak: an upper bound
        per_m[parts] = spark / n * M
        big = parts >= M
        rows.append(row(name, what, records=n, partitions=parts, seconds=spark, rate=n / spark,
                        base_what="in process: silver tables + audit", base_records=n, base_seconds=local,
                        base_rate=n / local, versus=speed(spark, local),
                        target="<= 5 min, <= 8 GiB" if big else "linear (see e2e-linearity)",
                        met=(spark <= 300 and together <= 8 * 1024) if big else None,
                        rss_driver_mb=driver, rss_exec_mb=proc.get("exec_mb"), startup_s=startup,
                        note=f"{spark / n * M:.1f} s per million records; ingest {fmt_secs(ingest)}, replay "
                             f"{fmt_secs(replay)}, audit {fmt_secs(audit)}, quality {fmt_secs(quality)}; peak memory "
                             f"{fmt_mb(together)}: the largest sum of every process's resident memory at one instant "
                             f"(sampled every 0.5 s; the driver alone at its exact peak), against {fmt_mb(total_mb)} "
                             "for each process at its own peak, which do not coincide; JVM "
                             f"{fmt_mb(proc.get('jvm_mb'))} + Python workers "
                             f"{fmt_mb(proc.get('workers_mb'))}; the in-process run (--no-spark, its own process, "
                             f"peak RSS {fmt_mb(local_mb)}) skips the invariants, the Spark replay checks them; "
                             "start-up ~ the --spark-only run's wall time minus its stages (interpreter, imports, "
                             "Spark session start and stop)"))
        if parts == ingest_scale:
            rows.append(row("spark-ingest", "Spark ingest job, local[2] (bench_e2e.py)", records=n, partitions=parts,
                            seconds=ingest, rate=n / ingest,
                            base_what="in process: the tasks' decode + write of every split, a thread per core",
                            base_records=n, base_seconds=inproc_ingest, base_rate=n / inproc_ingest,
                            versus=speed(ingest, inproc_ingest), target="<= 2x in-process",
                            met=ingest / inproc_ingest <= 2.0, rss_driver_mb=driver, rss_exec_mb=proc.get("exec_mb"),
                            note=f"measured in the {name} runs; the job also commits the bronze Delta table; "
                                 f"decoding the segments alone (no bronze rows, no files) takes {fmt_secs(decode)} "
                                 f"in process, 1 core ({speed(ingest, decode)})"))
            if _replay_in_e2e(cfg):
                try:
                    base, _ = _spark_inproc(parts, cfg["timeout"])
                except Exception as exc:  # noqa: BLE001
                    rows.append(error_row("spark-replay", "Spark replay job, local[2], invariants (bench_e2e.py)", exc))
                else:
                    rows.append(row("spark-replay", "Spark replay job, local[2], invariants (bench_e2e.py)", records=n,
                                    partitions=parts, seconds=replay, rate=n / replay,
                                    base_what="in process: pipeline.run, invariants, 1 call",
                                    base_records=base["records"], base_seconds=base["seconds"],
                                    base_rate=base["records"] / base["seconds"], versus=speed(replay, base["seconds"]),
                                    target="<= 2x in-process", met=replay / base["seconds"] <= 2.0,
                                    rss_driver_mb=driver, rss_exec_mb=proc.get("exec_mb"),
                                    note=f"measured in the {name} runs (at this scale bench_spark_replay.py is not run "
                                         "separately: one Spark session fewer)"))
    if len(per_m) >= 2:
        small, large = min(per_m), max(per_m)
        growth = per_m[large] / per_m[small]
        rows.append(row("e2e-linearity", "Spark end to end, seconds per million records by scale",
                        records=None, partitions=large, seconds=None,
                        versus=", ".join(f"{fmt_count(p)}: {s:.1f}" for p, s in sorted(per_m.items())),
                        target="largest <= 1.3x smallest", met=growth <= 1.3,
                        note=f"seconds per million records {', '.join(f'{p:,} partitions {s:.1f}' for p, s in sorted(per_m.items()))}: "
                             f"the largest scale costs {growth:.2f}x the smallest per record (1.0 = linear; below 1, "
                             "fixed costs such as the JVM's start weigh on the small scales)"))
    return rows


MEASUREMENTS = {
    "decode-summary": m_decode_summary,
    "decode-columns": m_decode_columns,
    "decode-typed": m_decode_typed,
    "decode-jsonl": m_decode_jsonl,
    "verify": m_verify,
    "describe": m_describe,
    "core": m_core,
    "core-invariants": m_core_invariants,
    "startup": m_startup,
    "spark-replay": m_spark_replay,
    "e2e": m_e2e,
}


def linearity_line(rows: list[dict]) -> str | None:
    for r in rows:
        if r["name"] == "e2e-linearity" and not r.get("error"):
            return "e2e linearity: " + r["note"]
    return None


def run(scale: str, only: list[str] | None = None, progress=None) -> tuple[dict, list[dict]]:
    """Run the measurements (all, or ``only``) at ``scale``: (machine, rows)."""
    cfg = dict(SCALES[scale], _measured=[n for n in MEASUREMENTS if not only or n in only])
    m = machine()
    rows: list[dict] = []
    for name, fn in MEASUREMENTS.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        try:
            got = fn(cfg)
        except Exception as exc:  # noqa: BLE001 - a measurement never takes the table down
            got = [error_row(name, name, exc)]
        rows += got
        if progress:
            progress(f"{name}: {time.perf_counter() - t0:.0f} s")
    starts = {r["name"]: r.get("seconds") for r in rows if r["name"].startswith("startup-") and not r.get("error")}
    for r in rows:  # verify and describe: their start-up is the start-up row's figure
        if r["name"] in ("verify", "describe") and r.get("startup_s") is None:
            r["startup_s"] = starts.get("startup-" + r["name"])
    m["load_after"] = os.getloadavg()
    return m, rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", choices=sorted(SCALES), default="quick",
                    help="quick (default: minutes), full (the real run), tiny (the test's)")
    ap.add_argument("--only", nargs="+", choices=sorted(MEASUREMENTS), metavar="NAME",
                    help="only these measurements: " + ", ".join(MEASUREMENTS))
    ap.add_argument("--json", metavar="FILE", help="also write the machine and the rows as JSON")
    ap.add_argument("--child", nargs=2, metavar=("NAME", "ARG"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(CHILDREN[args.child[0]](json.loads(args.child[1]))))
        return 0
    m, rows = run(args.scale, args.only, progress=lambda s: print(s, file=sys.stderr, flush=True))
    print(header(m, args.scale))
    print()
    print(format_table(rows))
    print()
    print(LEGEND)
    line = linearity_line(rows)
    if line:
        print()
        print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({"scale": args.scale, "machine": m, "rows": rows}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
