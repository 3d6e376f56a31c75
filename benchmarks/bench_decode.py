#!/usr/bin/env python3
"""Decode throughput: metadata log -> Arrow columns, on one core.

The inputs are the simulator's ``fleet-large`` scenario at each ``--partitions`` size with ``--events``
timeline events (benchmarks/inputs.py, cached): mix ``snapshot`` is its newest ``.checkpoint`` (the whole
fleet's image, PartitionRecord-dominated), mix ``changes`` its log segments (a live log: the topic creations,
then mostly PartitionChangeRecords, heartbeats in their own batches).  For each mix and size a fresh
process decodes the files with the vectorized decoder (``iter_chunks``: bounded windows) and, for the
typed bronze rows including the Kafka-JSON ``data_json`` column (``records_table``), prints records/s,
MB/s and the process's peak RSS.  The first file decoded by the scalar reference reader (first
100,000 records) gives the speed-up.  Peak RSS at two sizes shows memory does not grow with the file.

    python benchmarks/bench_decode.py [--partitions 100000 1000000] [--events 10] [--mix snapshot changes]

``--summary`` measures ``decode --summary`` (batch walk + CRC32C + per-type counts) instead, on the
simulated fleet's log segment(s), on each real log of ../shared/realdata made of one-record batches
and on a heartbeat-heavy simulated segment (NoOp every 2 ms: ~612 k one-record batches): the compiled walk
(``jobs.decode.run(summary=True)``, codec/walk.py) against the previous summary path
(every window fully decoded into bronze rows and the types counted from them, as ``decode --summary``
did before the walk) and the scalar reference reader (pure Python + the crc32c package: the plain
decoder baseline), each in a fresh process pinned to one core, start-up excluded (best and median of
``--repeat`` runs in the process on the clock, and records per CPU-second of the best run by CPU time,
which a shared, loaded box disturbs less; the first call, which loads the cached compiled code, is
shown apart).
It also prints the walk's start-up: compile time with an empty numba cache, and the first output line
of ``decode --summary`` on a tiny log with the cache filled.

    python benchmarks/bench_decode.py --summary [--partitions 100000] [--events 10] [--repeat 7]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, os, resource, sys, time
import pyarrow.compute  # import cost is not decode cost
from controller_core.codec.logfile import iter_chunks
from controller_core.codec.bronze import records_table
from controller_core.replay import TYPED_ONLY
files, stage = json.loads(sys.argv[1]), sys.argv[2]  # [(path, first offset)]
calls = int(sys.argv[3]) if len(sys.argv) > 3 else 0  # further calls after the first, in this process

def once():
    n = batches = 0
    for path, first in files:
        for chunk in iter_chunks(path, first_offset=first):
            n += len(chunk); batches += chunk.batches
            assert not chunk.quarantine, chunk.quarantine[:1]
            if stage == "bronze" and len(chunk):
                records_table(chunk, "bench", "f", "segment")
            elif stage == "typed" and len(chunk):  # what a replay reads: partition records without data_json
                records_table(chunk, "bench", "f", "segment", TYPED_ONLY)
    return n, batches

def timed():
    t0 = time.perf_counter(); got = once(); return time.perf_counter() - t0, got

first, (n, batches) = timed()
best = min([timed()[0] for _ in range(calls)], default=first)
print(json.dumps({"records": n, "batches": batches, "seconds": best, "first": first,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

SCALAR = r"""
import json, sys, time
from controller_core.codec.batch import iter_batches_scalar
buf = open(sys.argv[1], "rb").read(); limit = int(sys.argv[2])
t0 = time.perf_counter(); n = 0
for _, recs in iter_batches_scalar(buf):
    n += len(recs)
    if n >= limit:
        break
print(json.dumps({"records": n, "seconds": time.perf_counter() - t0}))
"""


SUMMARY = r"""
import io, json, os, resource, sys, time
from collections import Counter
paths, how, repeat, limit = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def compiled():
    from jobs import decode
    out = io.StringIO()
    decode.run(paths, summary=True, out=out, err=io.StringIO())
    return sum(json.loads(line)["records"] for line in out.getvalue().splitlines())

def previous():  # decode --summary before the walk: full decode, bronze rows, value_counts of record_type
    import pyarrow.compute as pc
    from controller_core.codec.bronze import records_table
    from controller_core.codec.logfile import iter_chunks
    from controller_core.logdir import expand
    n = 0
    for lf in expand(paths):
        types = {}
        for chunk in iter_chunks(str(lf.path), str(lf.path), first_offset=lf.first_offset):
            n += len(chunk)
            if len(chunk):
                table = records_table(chunk, "", lf.label, lf.kind)
                for t, k in zip(*pc.value_counts(table.column("record_type")).flatten()):
                    types[t.as_py()] = types.get(t.as_py(), 0) + k.as_py()
    return n

def scalar():  # the scalar reference reader (CRC by the crc32c package), first `limit` records of each file
    from controller_core.codec.batch import iter_batches_scalar
    n = 0
    for p in paths:
        types = Counter()
        with open(p, "rb") as fh:
            buf = fh.read()
        for _, recs in iter_batches_scalar(buf):
            types.update(r.type for r in recs)
            n += len(recs)
            if n >= limit:
                break
    return n

class _Lines:  # kraft-audit decode's output stream (a text stream over a binary one, like stdout): lines counted
    def __init__(self, fh):
        self.fh, self.n = fh, 0
        self.buffer = _Bytes(self, fh.buffer)
    def write(self, text):
        self.n += text.count("\n")
        self.fh.write(text)
    def flush(self):
        self.fh.flush()

class _Bytes:
    def __init__(self, lines, raw):
        self.lines, self.raw = lines, raw
    def write(self, data):
        import numpy as np
        self.lines.n += int(np.count_nonzero(np.frombuffer(data, np.uint8) == 10))
        self.raw.write(data)

def jsonl():  # kraft-audit decode (JSON Lines, every record), the output thrown away
    from jobs import decode
    with open(os.devnull, "w", encoding="utf-8") as fh:
        out = _Lines(fh)
        decode.run(paths, out=out, err=io.StringIO())
    return out.n

def scalar_jsonl():  # the scalar reference reader, each record dumped by json.dumps, first `limit` records
    from controller_core.codec.batch import iter_batches_scalar
    n = 0
    with open(os.devnull, "w", encoding="utf-8") as out:
        for p in paths:
            with open(p, "rb") as fh:
                buf = fh.read()
            for _, recs in iter_batches_scalar(buf):
                for r in recs:
                    out.write(json.dumps(r.to_json_dict()) + "\n")
                n += len(recs)
                if n >= limit:
                    break
    return n

run = {"compiled": compiled, "previous": previous, "scalar": scalar, "jsonl": jsonl, "scalar_jsonl": scalar_jsonl}[how]
t0 = time.perf_counter(); n = run(); first = time.perf_counter() - t0
times, cpu = [], []
for _ in range(repeat):
    t0, c0 = time.perf_counter(), time.process_time()
    assert run() == n
    times.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - c0)
times.sort()
print(json.dumps({"records": n, "first": first, "best": times[0], "median": times[len(times) // 2],
                  "cpu": min(cpu), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

STARTUP = r"""
import sys, time
t0 = time.perf_counter()
from jobs.cli import main
main(["decode", "--summary", sys.argv[1]])
sys.stderr.write("%f" % (time.perf_counter() - t0))
"""


def _run(code: str, *args, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    # taskset pins the child to one core where available: the figure is a one-core figure
    cmd = [sys.executable, "-c", code, *map(str, args)]
    if os.path.exists("/usr/bin/taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def summary_figures(paths: list[str], how: str, repeat: int, limit: int = 300_000) -> dict:
    """One way of counting or dumping ``paths`` in a fresh process pinned to one core (SUMMARY above): ``how`` is
    ``compiled`` (decode --summary), ``previous``, ``scalar`` (the scalar reference reader, first ``limit``
    records), ``jsonl`` (kraft-audit decode to JSON Lines) or ``scalar_jsonl`` (the scalar reader + json.dumps,
    first ``limit`` records).  Returns records, first (seconds of the first call, imports included), best and
    median (seconds of ``repeat`` further calls), cpu (CPU seconds of the fastest) and peak_rss_mb."""
    return _run(SUMMARY, json.dumps(paths), how, repeat, limit)


def decode_figures(files: list[tuple[str, int]], stage: str, repeat: int, calls: int = 0) -> dict:
    """Decoding ``files`` [(path, first offset)] with ``iter_chunks`` (``stage`` ``arrow``), into bronze rows
    (``bronze``) or into the bronze rows a replay reads (``typed``: partition records without ``data_json``), ``repeat`` fresh processes pinned to one core (CHILD above), each timing its first call and,
    with ``calls``, the best of that many further calls (the first pays numba's cache load and fresh pages: a
    start-up cost): records, batches, best and median seconds of the processes' figures, ``first`` (the fastest
    first call), peak_rss_mb (the largest of the runs) and the runs."""
    runs = [_run(CHILD, json.dumps(files), stage, calls) for _ in range(repeat)]
    secs = sorted(r["seconds"] for r in runs)
    return {"records": runs[0]["records"], "batches": runs[0]["batches"], "best": secs[0],
            "median": secs[len(secs) // 2], "first": min(r["first"] for r in runs),
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs), "runs": runs}


def scalar_figures(path: str, limit: int) -> dict:
    """The scalar reference reader on the first ``limit`` records of ``path`` (SCALAR above): records, seconds."""
    return _run(SCALAR, path, limit)


ONE_RECORD_BATCH_LOGS = [  # real metadata logs that are mostly one-record batches (NoOp heartbeats)
    "induswargods-elr-mv4.2/kafka-data/__cluster_metadata-0/00000000000000000000.log",
    "ogs59-3broker-mv3.7/kafka-1/__cluster_metadata-0/00000000000000000000.log",
    "arthurarutunyan04-2segments-mv4.0/kafka-data/__cluster_metadata-0/00000000000000000000.log",
    "arthurarutunyan04-2segments-mv4.0/kafka-data/__cluster_metadata-0/00000000000000005151.log",
    "mavila01-3broker-mv3.9/kafka1/__cluster_metadata-0/00000000000000000000.log",
]


def summary_main(args) -> int:
    """decode --summary: compiled walk vs the previous path vs the scalar reference reader."""
    import tempfile

    from benchmarks import inputs

    realdata = ROOT.parent / "shared" / "realdata"
    cases = []
    for parts in args.partitions:
        data, stats = inputs.fleet(parts, args.events)
        segs = [str(p) for p in inputs.segments(data)]
        cases.append((f"fleet-{parts} segment", segs, stats["batches"]))
    data, stats = _heartbeat_fleet()
    cases.append(("heartbeat segment (2 ms NoOps)", [str(p) for p in inputs.segments(data)], stats["batches"]))
    for rel in ONE_RECORD_BATCH_LOGS:
        cases.append((rel.split("/", 1)[0][:24] + "/" + rel.rsplit("/", 1)[1][-9:], [str(realdata / rel)], None))
    print(f"{'input':<36} {'records':>10} {'MB':>6} {'path':<9} {'best rec/s':>12} {'median':>12} {'rec/CPU-s':>12} "
          f"{'MB/s':>7} {'1st call s':>10} {'vs scalar':>9}")
    for name, paths, _ in cases:
        mb = sum(os.path.getsize(p) for p in paths) / 1e6
        repeat = {"compiled": args.repeat, "previous": min(args.repeat, 3), "scalar": 1}
        rows = {how: summary_figures(paths, how, repeat[how], 300_000) for how in repeat}
        scalar_rate = rows["scalar"]["records"] / rows["scalar"]["best"]
        for how, r in rows.items():
            rate, med = r["records"] / r["best"], r["records"] / r["median"]
            share = r["records"] / rows["compiled"]["records"]
            per_cpu = r["records"] / max(r["cpu"], 1e-9)
            print(f"{name:<36} {r['records']:>10,} {mb * share:>6.1f} {how:<9} {rate:>12,.0f} {med:>12,.0f} "
                  f"{per_cpu:>12,.0f} {mb * share / r['best']:>7.0f} {r['first']:>10.3f} {rate / scalar_rate:>8.1f}x",
                  flush=True)
    # start-up: compile with an empty cache, then the first output line with the cache filled
    tiny = str(realdata / "vasifvortex-pre3.3-fence/kafka1/__cluster_metadata-0/00000000000000000000.log")
    with tempfile.TemporaryDirectory() as cache:
        cold = _wall(tiny, NUMBA_CACHE_DIR=cache)
        warm = min(_wall(tiny, NUMBA_CACHE_DIR=cache) for _ in range(3))
    print(f"start-up, decode --summary of a {os.path.getsize(tiny):,}-byte log, interpreter start included: "
          f"{cold:.2f} s with an empty numba cache (compiling), {warm:.2f} s cached", flush=True)
    return 0


def _heartbeat_fleet():
    """A large simulated segment of one-record batches, like the real logs: fleet-large at 1,000
    partitions and 10 events with a NoOp heartbeat every 2 ms (~612 k batches, 45 MB); cached."""
    from benchmarks import inputs
    from simulator.fleet import simulate_fleet

    out = inputs.CACHE / "heartbeats-1000-10-2ms-0"
    stats_file = out / "bench-stats.json"
    if not stats_file.is_file():
        import shutil

        shutil.rmtree(out, ignore_errors=True)
        stats_file.parent.mkdir(parents=True, exist_ok=True)
        stats_file.write_text(json.dumps(simulate_fleet(out, 1000, 10, 0, heartbeat_interval_ms=2)))
    return out, json.loads(stats_file.read_text())


def _wall(path: str, **env_extra: str) -> float:
    """Seconds from starting the process to its exit (the output is one line)."""
    import time

    env = dict(os.environ, PYTHONPATH=str(ROOT), **env_extra)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", STARTUP, path], check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, nargs="+", default=None,
                    help="fleet sizes (partitions of the simulated fleet-large scenario; default 100000 1000000, "
                         "with --summary 100000)")
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--mix", nargs="+", default=["snapshot", "changes"])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; best and median are printed "
                                                          "(--summary: runs inside the process, default 7)")
    ap.add_argument("--summary", action="store_true", help="measure decode --summary (see above)")
    args = ap.parse_args(argv)
    if args.summary:
        args.partitions = args.partitions or [100_000]
        args.repeat = args.repeat if "--repeat" in (argv or sys.argv) else 7
        return summary_main(args)
    args.partitions = args.partitions or [100_000, 1_000_000]
    from benchmarks import inputs

    print(f"{'mix':<9} {'partitions':>10} {'records':>10} {'MB':>7} {'stage':<7} {'best rec/s':>11} {'median':>11} "
          f"{'MB/s':>7} {'peak RSS MB':>11}")
    for mix in args.mix:
        for parts in args.partitions:
            data, stats = inputs.fleet(parts, args.events)
            if mix == "snapshot":
                paths, n = [(inputs.snapshot(data), 0)], None
            else:  # every record the simulator wrote to the log
                paths, n = [(p, int(p.stem)) for p in inputs.segments(data)], stats["records"]
            files = [(str(p), first) for p, first in paths]
            mb = sum(os.path.getsize(p) for p, _ in paths) / 1e6
            for stage in ("arrow", "bronze"):
                fig = decode_figures(files, stage, args.repeat)
                runs = fig["runs"]
                n = n or runs[0]["records"]
                assert all(r["records"] == n for r in runs), runs
                assert mix != "snapshot" or n > parts, (n, parts)  # a PartitionRecord per partition, and more
                best, median = fig["best"], fig["median"]
                print(f"{mix:<9} {parts:>10,} {n:>10,} {mb:>7.1f} {stage:<7} {n / best:>11,.0f} {n / median:>11,.0f} "
                      f"{mb / best:>7.1f} {fig['peak_rss_mb']:>11.0f}", flush=True)
        s = scalar_figures(str(paths[0][0]), 100_000)
        v = _run(CHILD, json.dumps(files), "arrow")
        scalar_rate = s["records"] / s["seconds"]
        print(f"{mix:<9} scalar reference: {scalar_rate:,.0f} records/s; vectorized is "
              f"{(v['records'] / v['seconds']) / scalar_rate:.0f}x faster", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
