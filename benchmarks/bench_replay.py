#!/usr/bin/env python3
"""Replay + recompute throughput of the vectorized controller core, and the scalar reference.

The input is the simulator's ``fleet-large`` scenario (benchmarks/inputs.py, cached; default 1,000,000
partitions of RF 3 over 6 brokers, 10 timeline events: ~10 M change records), its log decoded into
bronze rows and split by topic into groups, as the Spark job processes partition groups (each group: its
topics' records plus every cluster-level record).  The events are what Kafka's controller writes for
bounces (controlled shutdown, restart), crashes, session timeouts and network partitions (fences with
their ISR removals and leader moves, unfences, the followers' AlterPartition catch-ups) and preferred
elections (controller-rules §2).  Per group the core runs fold (partition history) and explain
(vectorized recomputation); records it cannot explain go to the scalar reference.  Printed:
records/s of fold, explain and both, the share explained by the vectorized path, divergences, peak
RSS, and the scalar reference (verify_batches) on a slice for the speed ratio.

    python benchmarks/bench_replay.py [--partitions 1000000] [--events 10] [--groups 8]
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import inputs  # noqa: E402
from controller_core import timelines  # noqa: E402
from controller_core.vector import fold
from controller_core.vector.explain import cluster_level_recs, explain, scalar_batches  # noqa: E402
from controller_core.rules.verify import verify_batches  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=1_000_000)
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--scalar-slice", type=int, default=20000,
                    help="partitions of the smaller fleet replayed by the scalar reference")
    args = ap.parse_args(argv)
    totals = {"records": 0, "changes": 0, "fold": 0.0, "explain": 0.0, "gen": 0.0, "explained": 0, "div": 0}
    t0 = time.perf_counter()
    groups = inputs.topic_groups(inputs.bronze(inputs.fleet(args.partitions, args.events)[0]), args.groups)
    totals["gen"] += time.perf_counter() - t0
    for g in range(args.groups):
        t0 = time.perf_counter()
        table, groups[g] = groups[g], None
        t1 = time.perf_counter()
        history = fold.fold_partitions(table)
        t2 = time.perf_counter()
        brokers, topics = timelines.build(cluster_level_recs(table))
        exp = explain(table, history, brokers, topics)
        t3 = time.perf_counter()
        matched = exp.column("matched").to_numpy(zero_copy_only=False)
        missed = exp.filter(pa.array(~matched))
        todo = set(zip(missed.column("topic_id").to_pylist(), missed.column("partition_id").to_pylist()))
        if todo:
            totals["div"] += len(verify_batches(scalar_batches(table, todo)).divergences)
        totals["records"] += table.num_rows
        totals["changes"] += len(exp)
        totals["explained"] += int(matched.sum())
        totals["gen"] += t1 - t0
        totals["fold"] += t2 - t1
        totals["explain"] += t3 - t2
        print(f"group {g}: {table.num_rows:,} records ({len(exp):,} changes), fold {t2 - t1:.2f} s, "
              f"timelines+explain {t3 - t2:.2f} s, unexplained {len(exp) - int(matched.sum())}", flush=True)
    rec, ch = totals["records"], totals["changes"]
    core = totals["fold"] + totals["explain"]
    print(f"\n{args.partitions:,} partitions, {rec:,} records ({ch:,} PartitionChangeRecords) in {args.groups} groups")
    print(f"fold      {rec / totals['fold']:>14,.0f} records/s")
    print(f"explain   {ch / totals['explain']:>14,.0f} change records/s (timelines + primary triggers + vectorized builder)")
    print(f"core      {rec / core:>14,.0f} records/s (fold + explain, one core)")
    print(f"explained by the vectorized path: {totals['explained'] / max(ch, 1):.4%}; divergences {totals['div']}")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB; "
          f"simulation (cached) and decoding to bronze rows {totals['gen']:.1f} s (not counted)")
    # the scalar reference and the vectorized core on the same smaller cluster
    small = inputs.bronze(inputs.fleet(args.scalar_slice, args.events, seed=1)[0])
    t0 = time.perf_counter()
    h = fold.fold_partitions(small)
    b, tp = timelines.build(cluster_level_recs(small))
    explain(small, h, b, tp)
    vec = time.perf_counter() - t0
    batches = scalar_batches(small, {(t, p) for t, p in zip(small.column("topic_id").to_pylist(),
                                                            small.column("partition_id").to_pylist()) if t})
    t0 = time.perf_counter()
    rep = verify_batches(batches)
    dt = time.perf_counter() - t0
    print(f"same {args.scalar_slice:,}-partition cluster ({small.num_rows:,} records): scalar reference "
          f"{small.num_rows / dt:,.0f} records/s ({len(rep.divergences)} divergences), vectorized core "
          f"{small.num_rows / vec:,.0f} records/s: {dt / vec:.0f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
