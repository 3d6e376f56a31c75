#!/usr/bin/env python3
"""Replay + recompute throughput of the vectorized controller core, and the scalar reference.

The input is the simulator's ``fleet-large`` scenario (benchmarks/inputs.py, cached; default 1,000,000
partitions of RF 3 over 6 brokers, 10 timeline events: ~10 M change records), its log decoded into
bronze rows and split by topic into groups, as the Spark job processes partition groups (each group: its
topics' records plus every cluster-level record).  The events are what Kafka's controller writes for
bounces (controlled shutdown, restart), crashes, session timeouts and network partitions (fences with
their ISR removals and leader moves, unfences, the followers' AlterPartition catch-ups) and preferred
elections (controller-rules §2).  Per group the replay pipeline (controller_core/pipeline.run) folds (the
compiled fold, kernels/fold_pass.py; ``bench_fold.py --compiled`` compares it with the NumPy fold),
recomputes every change (partitions it cannot explain go to the scalar reference) and dates the history;
``--invariants`` adds the §4 checks.  Start-up is not counted: the kernels are loaded from numba's cache (or
compiled) before the first group, as issue 11 measures the core.  Printed: records/s, the CPU ns a record of each
step of the replay (``pipeline.run(timings=...)``: where the time went), the partitions left to the scalar path,
divergences, peak RSS, and the scalar reference (verify_batches) on a slice for the speed ratio.

    python benchmarks/bench_replay.py [--partitions 1000000] [--events 10] [--groups 8] [--invariants] [--threads 1]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import inputs  # noqa: E402
from controller_core import pipeline  # noqa: E402
from controller_core.kernels import warm  # noqa: E402
from controller_core.rules.invariants import InvariantChecker  # noqa: E402
from controller_core.rules.verify import verify_batches  # noqa: E402
from controller_core.vector.explain import scalar_batches  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--invariants", action="store_true",
                    help="also check the §4 invariants (the compiled invariant pass)")
    ap.add_argument("--threads", type=int, default=1,
                    help="cores pipeline.run may use (default 1: the figure is records per second per core)")
    ap.add_argument("--scalar-slice", type=int, default=20000,
                    help="partitions of the smaller fleet replayed by the scalar reference")
    args = ap.parse_args(argv)
    totals = {"records": 0, "changes": 0, "core": 0.0, "gen": 0.0, "scalar": 0, "div": 0, "breaches": 0,
              "fold_fallback": 0}
    steps: dict = {}  # CPU seconds of each step of pipeline.run, over the groups (pipeline.STEPS)
    t0 = time.perf_counter()
    groups = inputs.topic_groups(inputs.bronze(inputs.fleet(args.partitions, args.events)[0]), args.groups)
    totals["gen"] += time.perf_counter() - t0
    # start-up excluded, as issue 11 measures the core: the kernels' machine code loaded from numba's cache first
    # (kernels.warm, on tiny inputs; 0.1 s of the first group's time otherwise), as any command's first call has
    t0 = time.perf_counter()
    warm()
    totals["warm"] = time.perf_counter() - t0
    for g in range(args.groups):
        table, groups[g] = groups[g], None
        t1 = time.perf_counter()
        rep = pipeline.run(table, invariants=args.invariants, threads=args.threads, timings=steps)
        t2 = time.perf_counter()
        totals["records"] += table.num_rows
        totals["changes"] += rep.partition_changes
        totals["scalar"] += rep.scalar_partitions
        totals["fold_fallback"] += rep.fold_fallback_partitions
        totals["div"] += rep.divergences.num_rows
        totals["breaches"] += rep.breaches.num_rows
        totals["core"] += t2 - t1
        print(f"group {g}: {table.num_rows:,} records ({rep.partition_changes:,} changes) in {t2 - t1:.2f} s, "
              f"{rep.scalar_partitions} partitions on the scalar path", flush=True)
        del rep
    rec, ch = totals["records"], totals["changes"]
    what = "fold + recompute + invariants" if args.invariants else "fold + recompute + dating, no invariants"
    print(f"\n{args.partitions:,} partitions, {rec:,} records ({ch:,} PartitionChangeRecords) in {args.groups} groups")
    cores = "one core" if args.threads == 1 else f"{args.threads} threads"
    print(f"pipeline  {rec / totals['core']:>14,.0f} records/s ({what}, {cores})")
    print(f"steps (CPU ns a record{'' if args.threads == 1 else ', the other threads counted where the main one is'}): "
          + ", ".join(f"{name} {steps[name] * 1e9 / rec:.0f}" for name in pipeline.STEPS if name in steps))
    print(f"scalar path: {totals['scalar']} partitions; divergences {totals['div']}; breaches {totals['breaches']}; "
          f"partitions the compiled fold left to the NumPy fold: {totals['fold_fallback']}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB; "
          f"simulation (cached) and decoding to bronze rows {totals['gen']:.1f} s, loading the kernels "
          f"{totals['warm']:.2f} s (not counted)")
    # the scalar reference and the pipeline on the same smaller cluster
    small = inputs.bronze(inputs.fleet(args.scalar_slice, args.events, seed=1)[0])
    # (with --invariants both check the §4 invariants: the scalar reference through its InvariantChecker)
    t0 = time.perf_counter()
    pipeline.run(small, invariants=args.invariants, threads=args.threads)
    vec = time.perf_counter() - t0
    batches = scalar_batches(small, {(t, p) for t, p in zip(small.column("topic_id").to_pylist(),
                                                            small.column("partition_id").to_pylist()) if t})
    t0 = time.perf_counter()
    ref = verify_batches(batches, InvariantChecker() if args.invariants else None)
    dt = time.perf_counter() - t0
    print(f"same {args.scalar_slice:,}-partition cluster ({small.num_rows:,} records): scalar reference "
          f"{small.num_rows / dt:,.0f} records/s ({len(ref.divergences)} divergences), pipeline "
          f"{'with' if args.invariants else 'without'} invariants {small.num_rows / vec:,.0f} records/s: "
          f"{dt / vec:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
