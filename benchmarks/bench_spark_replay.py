#!/usr/bin/env python3
"""Wall time of the Spark replay job (bronze -> silver) on a simulated fleet.

The simulator's ``fleet-large`` scenario (benchmarks/inputs.py, cached; the input of bench_replay.py),
decoded into bronze ``metadata_records`` rows and written into a fresh lake, then ``jobs.replay.replay``
on a local[2] session.  Prints rows, seconds and records/s, and the driver's peak RSS.

    python benchmarks/bench_spark_replay.py [--partitions 100000] [--events 10] [--buckets 8]
        [--spark-writes executors|driver]

``--spark-writes driver``: the silver tables written the previous way (the driver streams every row into
delta-rs); ``executors`` (default): the tasks write the files, the driver commits their list.  The driver's peak
RSS is printed for the whole process and for the replay job alone (high-water mark reset before it).
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import inputs  # noqa: E402
from lake.config import load_config  # noqa: E402
from lake import catalog  # noqa: E402
from lake.delta import Lake  # noqa: E402
from jobs.replay import replay  # noqa: E402
from benchmarks.bench_e2e import reset_peak, stage_peak_mb  # noqa: E402
from lake.spark import get_spark  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=10, help="timeline events of the simulated fleet")
    ap.add_argument("--buckets", type=int, default=8)
    ap.add_argument("--no-invariants", action="store_true", help="skip the scalar invariant pass")
    ap.add_argument("--spark-writes", choices=("executors", "driver"), default="executors")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="kraft-bench-"))
    config = load_config(overrides={"lake": str(root / "lake"),
                                    "spark": {"master": "local[2]", "driver_memory": "6g", "shuffle_partitions": 8},
                                    "delta": {"spark_writes": args.spark_writes}})
    t0 = time.perf_counter()
    table = inputs.bronze(inputs.fleet(args.partitions, args.events)[0], cluster="bench")
    t1 = time.perf_counter()
    lake = Lake(config["lake"])
    records = catalog.METADATA_RECORDS
    lake.append_arrow(records.name, table.cast(table.schema), partition_by=records.partition_by)
    t2 = time.perf_counter()
    spark = get_spark(config)
    slake = Lake.from_config(config, spark)
    reset_peak()
    t3 = time.perf_counter()
    start = time.perf_counter()
    counts = replay(spark, slake, "bench", args.buckets, invariants=not args.no_invariants,
                    progress=lambda m: print(f"  {time.perf_counter() - start:6.1f} s  {m}", flush=True))
    t4 = time.perf_counter()
    print(f"{args.partitions:,} partitions, {table.num_rows:,} bronze records "
          f"(simulated (cached) and decoded in {t1 - t0:.1f} s, written to Delta in {t2 - t1:.1f} s)")
    what = "without invariants" if args.no_invariants else "with invariants"
    print(f"replay job ({what}, writes: {args.spark_writes}): {t4 - t3:.1f} s wall on local[2] -> "
          f"{table.num_rows / (t4 - t3):,.0f} records/s; driver peak RSS during the job {stage_peak_mb() or 0:,.0f} MB")
    for name, n in sorted(counts.items()):
        print(f"  {name:<28} {n:>12,}" if isinstance(n, int) else f"  {name:<28} {n:>12}")  # "mode" is a word
    print(f"driver peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
