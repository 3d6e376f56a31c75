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
files, stage = json.loads(sys.argv[1]), sys.argv[2]  # [(path, first offset)]
t0 = time.perf_counter(); n = batches = 0
for path, first in files:
    for chunk in iter_chunks(path, first_offset=first):
        n += len(chunk); batches += chunk.batches
        assert not chunk.quarantine, chunk.quarantine[:1]
        if stage == "bronze" and len(chunk):
            records_table(chunk, "bench", "f", "segment")
dt = time.perf_counter() - t0
print(json.dumps({"records": n, "batches": batches, "seconds": dt,
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


def _run(code: str, *args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    # taskset pins the child to one core where available: the figure is a one-core figure
    cmd = [sys.executable, "-c", code, *map(str, args)]
    if os.path.exists("/usr/bin/taskset"):
        cmd = ["taskset", "-c", "0"] + cmd
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, nargs="+", default=[100_000, 1_000_000],
                    help="fleet sizes (partitions of the simulated fleet-large scenario)")
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--mix", nargs="+", default=["snapshot", "changes"])
    ap.add_argument("--repeat", type=int, default=3, help="runs per case; best and median are printed")
    args = ap.parse_args(argv)
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
            files = json.dumps([(str(p), first) for p, first in paths])
            mb = sum(os.path.getsize(p) for p, _ in paths) / 1e6
            for stage in ("arrow", "bronze"):
                runs = [_run(CHILD, files, stage) for _ in range(args.repeat)]
                n = n or runs[0]["records"]
                assert all(r["records"] == n for r in runs), runs
                assert mix != "snapshot" or n > parts, (n, parts)  # a PartitionRecord per partition, and more
                secs = sorted(r["seconds"] for r in runs)
                best, median = secs[0], secs[len(secs) // 2]
                print(f"{mix:<9} {parts:>10,} {n:>10,} {mb:>7.1f} {stage:<7} {n / best:>11,.0f} {n / median:>11,.0f} "
                      f"{mb / best:>7.1f} {max(r['peak_rss_mb'] for r in runs):>11.0f}", flush=True)
        s = _run(SCALAR, paths[0][0], 100_000)
        v = _run(CHILD, files, "arrow")
        scalar_rate = s["records"] / s["seconds"]
        print(f"{mix:<9} scalar reference: {scalar_rate:,.0f} records/s; vectorized is "
              f"{(v['records'] / v['seconds']) / scalar_rate:.0f}x faster", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
