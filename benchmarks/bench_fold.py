#!/usr/bin/env python3
"""Partition fold throughput: bronze rows -> partition_state_history (controller_core.vector.fold), one core.

The input is the simulator's ``fleet-large`` scenario (benchmarks/inputs.py, cached): ``--partitions``
partitions (1000 per topic, RF 3 over 6 brokers in 3 racks, explicit log directories as written at
MV 3.9) and ``--events`` timeline events (bounces, crashes, session timeouts, network partitions,
preferred elections: each writes PartitionChangeRecords for a large share of the partitions), decoded into
bronze rows as the ingest job writes them.  A fresh process pinned to one core times ``fold_partitions`` (best of
``--repeat``) with plain string columns (HISTORY_SCHEMA) and with ``dictionary_strings=True``, prints
records/s (first run and best run), user/sys CPU, peak RSS and the CPU seconds of each fold step;
once with the default allocators and once "tuned" (glibc keeps freed memory, Arrow uses the system
allocator, NumPy does not madvise huge pages): on this VM most of a cold run's sys time is page faults.  The scalar
reference (``image.merge`` record by record) on the first ``--scalar`` change records gives the speed ratio.

    python benchmarks/bench_fold.py [--partitions 1000000] [--events 10] [--scalar 200000]

``--compiled``: instead, the compiled fold (controller_core/kernels/fold_pass.py, numba) against the NumPy fold
on the same input in the same process (the records the pipeline folds: skipped types removed), both to the
plain HISTORY_SCHEMA table: records/s on the clock and records per CPU-second (best of ``--repeat``, after a
first call that loads the compiled code), given the layout (the pipeline with invariants: it builds the
layout once for the invariant pass and the fold) and with the partition part of the layout built for it
(``layout.build(cluster=False)``: the pipeline without invariants), the CPU seconds of each step, and
whether the tables are equal.

    python benchmarks/bench_fold.py --compiled --partitions 100000 [--repeat 5] [--pipeline]

``--pipeline`` adds ``pipeline.run`` (invariants on, the whole bronze input) with the compiled fold and with
the NumPy fold patched in its place.
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
import gc, json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
if os.environ.get("BENCH_NO_HUGEPAGE"):
    np._core.multiarray._set_madvise_hugepage(False)
from benchmarks import inputs
from controller_core.vector.fold import fold_partitions
partitions, events, repeat = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
table = inputs.bronze(inputs.fleet(partitions, events)[0])
gc.collect()
types = table.column("record_type").value_counts().to_pylist()
types = {t["values"]: t["counts"] for t in types}
out = {"rows": table.num_rows, "input_mb": table.nbytes / 2**20, "partition_records": types.get("PARTITION_RECORD", 0),
       "change_records": types.get("PARTITION_CHANGE_RECORD", 0),
       "rss_after_input_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
for label, kw in (("dictionary", {"dictionary_strings": True}), ("plain", {})):
    runs = []
    for i in range(repeat):
        steps = {}
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        h = fold_partitions(table, timings=steps, **kw)
        t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
        runs.append({"wall": t1 - t0, "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime,
                     "steps": steps})
        out[label + "_output_rows"], out[label + "_output_mb"] = h.num_rows, h.nbytes / 2**20
        del h
        gc.collect()
    out[label] = runs
    out[label + "_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

COMPILED = r"""
import gc, json, resource, sys, time
sys.path.insert(0, sys.argv[1])
import pyarrow as pa, pyarrow.compute as pc
from benchmarks import inputs
from controller_core.kernels import fold_pass, layout
from controller_core.replay import SKIP
from controller_core.vector.fold import fold_partitions
partitions, events, repeat, pipeline_too = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
table = inputs.bronze(inputs.fleet(partitions, events)[0])
table = table.filter(pc.invert(pc.is_in(table.column("record_type"), pa.array(sorted(SKIP)))))
gc.collect()
out = {"rows": table.num_rows}

def timed(f):
    runs = []
    for i in range(repeat + 1):  # the first call loads the compiled code (numba's cache) and warms the allocator
        steps = {}
        w0, c0 = time.perf_counter(), time.process_time()
        r = f(steps)
        runs.append({"wall": time.perf_counter() - w0, "cpu": time.process_time() - c0, "steps": steps})
        if i < repeat:
            del r
        gc.collect()
    return runs, r

out["numpy"], want = timed(lambda steps: fold_partitions(table, timings=steps))
out["layout"], lay = timed(lambda steps: layout.build(table))
out["layout_partitions"], _ = timed(lambda steps: layout.build(table, cluster=False))
out["compiled_given_layout"], got = timed(lambda steps: fold_pass.fold(table, lay, timings=steps))
out["compiled_with_layout"], got2 = timed(lambda steps: fold_pass.fold(table, layout.build(table, cluster=False),
                                                                      timings=steps))
if pipeline_too:  # the whole pipeline.run (invariants on) with the compiled fold, and with the NumPy fold in its place
    from controller_core import pipeline
    raw = inputs.bronze(inputs.fleet(partitions, events)[0])
    out["pipeline_compiled"], _ = timed(lambda steps: pipeline.run(raw))
    real = fold_pass.fold
    fold_pass.fold = lambda records, lay=None, timings=None: fold_pass.Fold(fold_partitions(records), 0)
    out["pipeline_numpy_fold"], _ = timed(lambda steps: pipeline.run(raw))
    fold_pass.fold = real
out["equal"] = got.history.equals(want) and got2.history.equals(want)
out["fallback_partitions"] = got.fallback_partitions
out["output_rows"] = want.num_rows
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

SCALAR = r"""
import json, sys, time
import pyarrow.compute as pc
sys.path.insert(0, sys.argv[1])
from benchmarks import inputs
from controller_core.image import Cluster, merge
partitions, events, limit = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
table = inputs.bronze(inputs.fleet(partitions, events)[0])
kinds = table.column("record_type").to_pylist()
first = kinds.index("PARTITION_CHANGE_RECORD")
# the image before the first change, and the next ``limit`` change records as image.merge takes them (JSON form;
# building them is not timed)
image = Cluster()
for kind, data in zip(kinds[:first], table.column("data_json").slice(0, first).to_pylist()):
    if kind in ("TOPIC_RECORD", "PARTITION_RECORD"):
        image.apply(kind, json.loads(data))
later = table.slice(first)
later = later.filter(pc.equal(later.column("record_type"), "PARTITION_CHANGE_RECORD")).slice(0, limit)
recs = [json.loads(d) for d in later.column("data_json").to_pylist()]
state = image.partitions
t0 = time.perf_counter()
for d in recs:
    k = (d["topicId"], d["partitionId"])
    state[k] = merge(state[k], d)
dt = time.perf_counter() - t0
print(json.dumps({"records": len(recs), "seconds": dt}))
"""


TUNED = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40), "ARROW_DEFAULT_MEMORY_POOL": "system",
         "BENCH_NO_HUGEPAGE": "1"}


def _run(code: str, *args, env_extra: dict | None = None) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", **(env_extra or {}))
    cmd = [sys.executable, "-c", code, str(ROOT), *map(str, args)]
    if os.path.exists("/usr/bin/taskset"):  # the figure is a one-core figure
        cmd = ["taskset", "-c", "0"] + cmd
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--scalar", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compiled", action="store_true", help="the compiled fold against the NumPy fold")
    ap.add_argument("--pipeline", action="store_true",
                    help="with --compiled: also pipeline.run (invariants on) with either fold")
    args = ap.parse_args()
    from benchmarks import inputs

    data, stats = inputs.fleet(args.partitions, args.events)  # simulated here once, read by the children
    print(f"input: fleet-large, {args.partitions:,} partitions, {args.events} events: {stats['records']:,} records "
          f"(simulated in {stats['seconds']:.0f} s; {data})")
    if args.compiled:
        compiled(args)
        return
    best_rate = {}
    for config, extra in (("default allocator", None), ("tuned allocator", TUNED)):
        r = _run(CHILD, args.partitions, args.events, args.repeat, env_extra=extra)
        n = r["rows"]
        print(f"== {config}" + ("" if extra is None else " (" + " ".join(f"{k}={v}" for k, v in extra.items()) + ")"))
        print(f"input: {n:,} bronze rows ({r['partition_records']:,} PartitionRecords, "
              f"{r['change_records']:,} PartitionChangeRecords), {r['input_mb']:.0f} MiB of Arrow; "
              f"peak RSS after building it {r['rss_after_input_mb']:.0f} MiB")
        for label in ("dictionary", "plain"):
            runs = r[label]
            best = min(runs, key=lambda x: x["wall"])
            cold = runs[0]
            best_rate[(config, label)] = n / best["wall"]
            print(f"  fold {label:10s}: first run {cold['wall']:5.2f} s (user {cold['user']:.2f} + sys {cold['sys']:.2f}); "
                  f"best of {len(runs)} {best['wall']:5.2f} s (user {best['user']:.2f} + sys {best['sys']:.2f}) = "
                  f"{n / best['wall'] / 1e6:.2f} M records/s; output {r[label + '_output_rows']:,} rows, "
                  f"{r[label + '_output_mb']:.0f} MiB; peak RSS {r[label + '_peak_rss_mb']:.0f} MiB")
        steps = min(r["plain"], key=lambda x: x["wall"])["steps"]
        total = sum(steps.values())
        print(f"  where the time goes (best plain run, CPU seconds per step, total {total:.2f} s):")
        for step, sec in sorted(steps.items(), key=lambda kv: -kv[1]):
            print(f"    {sec:6.3f} s  {100 * sec / total:4.1f} %  {step}")
    sc = _run(SCALAR, args.partitions, args.events, args.scalar)
    rate = sc["records"] / sc["seconds"]
    print(f"scalar image.merge loop: {sc['records']:,} records in {sc['seconds']:.2f} s = "
          f"{rate / 1e6:.3f} M records/s; "
          "fold/scalar: " + ", ".join(f"{c} {l} {v / rate:.0f}x" for (c, l), v in best_rate.items()))


def compiled(args) -> None:
    r = _run(COMPILED, args.partitions, args.events, args.repeat, int(args.pipeline))
    n = r["rows"]
    print(f"{n:,} records folded (skipped types removed) into {r['output_rows']:,} history rows; one core; "
          f"best and median of {args.repeat} after a first call; tables equal: {r['equal']}; "
          f"partitions left to the NumPy fold: {r['fallback_partitions']}; peak RSS {r['peak_rss_mb']:,.0f} MiB")
    print(f"{'':40s} {'best s':>7s} {'median s':>8s} {'records/s':>12s} {'CPU s':>6s} {'rec/CPU-s':>12s} "
          f"{'1st call s':>10s}")
    rates = {}
    for key, label in (("numpy", "NumPy fold (vector/fold.py)"), ("layout", "layout.build (full)"),
                       ("layout_partitions", "layout.build(cluster=False)"),
                       ("compiled_given_layout", "compiled fold, layout given"),
                       ("compiled_with_layout", "compiled fold + partition layout"),
                       ("pipeline_compiled", "pipeline.run, compiled fold"),
                       ("pipeline_numpy_fold", "pipeline.run, NumPy fold in its place")):
        if key not in r:
            continue
        runs = r[key][1:]
        best = min(runs, key=lambda x: x["wall"])
        med = sorted(x["wall"] for x in runs)[len(runs) // 2]
        cpu = min(x["cpu"] for x in runs)
        rates[key] = (n / best["wall"], n / cpu)
        print(f"{label:40s} {best['wall']:7.3f} {med:8.3f} {n / best['wall']:12,.0f} {cpu:6.3f} {n / cpu:12,.0f} "
              f"{r[key][0]['wall']:10.3f}")
    for key in ("compiled_given_layout", "compiled_with_layout"):
        print(f"  {key}: {rates[key][0] / rates['numpy'][0]:.1f}x the NumPy fold on the clock, "
              f"{rates[key][1] / rates['numpy'][1]:.1f}x per CPU-second")
    steps = min(r["compiled_given_layout"][1:], key=lambda x: x["cpu"])["steps"]
    total = sum(steps.values())
    print(f"  compiled fold, layout given, CPU seconds per step (best run, total {total:.3f} s):")
    for step, sec in steps.items():
        print(f"    {sec:6.3f} s  {100 * sec / max(total, 1e-9):4.1f} %  {step}")


if __name__ == "__main__":
    main()
