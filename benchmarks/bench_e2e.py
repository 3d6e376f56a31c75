#!/usr/bin/env python3
"""End-to-end figures on a simulated fleet (the `fleet-large` scenario): generate, decode, replay with
the vectorized core on one core and audit in process, then the Spark jobs (ingest, replay) on local[2] and
the ``audit --json`` and ``quality`` commands on their lake (``jobs.cli``, as a scheduler runs them).

    python benchmarks/bench_e2e.py [--partitions 100000] [--events 10] [--seed 0] [--no-spark] [--spark-only]
        [--spark-writes executors|driver]

The fleet is generated once per (partitions, events, seed) into benchmarks/.cache/ and reused.
Prints one line per stage: seconds, records/s, and the process's peak RSS so far; the Spark jobs also the
driver's peak RSS during that job alone (the kernel's high-water mark reset before it, /proc/self/clear_refs).
``--spark-writes driver`` writes the Spark jobs' tables the previous way (the driver streams every row into
delta-rs), ``executors`` (the default) as now (the tasks write the files, the driver commits their list).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> None:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux); no-op elsewhere."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def stage_peak_mb() -> float | None:
    """VmHWM (the peak RSS since the last reset_peak), MB."""
    try:
        for row in open("/proc/self/status"):
            if row.startswith("VmHWM:"):
                return int(row.split()[1]) / 1024
    except OSError:
        pass
    return None


def line(stage: str, seconds: float, records: int | None = None, extra: str = "") -> None:
    rate = f"{records / seconds:>12,.0f} rec/s" if records and seconds > 0 else " " * 18
    print(f"{stage:<42} {seconds:>8.1f} s {rate}  peak RSS {rss_mb():>7,.0f} MB  {extra}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-spark", action="store_true", help="skip the Spark ingest and replay jobs")
    ap.add_argument("--buckets", type=int, default=None,
                    help="replay buckets (default: the replay job's own, transforms.silver.default_buckets)")
    ap.add_argument("--spark-only", action="store_true", help="only the Spark ingest and replay jobs")
    ap.add_argument("--spark-writes", choices=("executors", "driver"), default="executors",
                    help="who writes the Spark jobs' data files (delta.spark_writes)")
    args = ap.parse_args(argv)

    from benchmarks.inputs import fleet

    data, stats = fleet(args.partitions, args.events, args.seed)
    n = stats["records"]
    line("simulate fleet-large", stats["seconds"], n, f"{stats['bytes'] / 1e6:,.0f} MB log, "
         f"{len(stats['snapshots'])} snapshots (cached: {data})")

    if not args.spark_only:
        in_process(data, n)
    if args.no_spark:
        return 0
    spark_jobs(data, args.buckets, args.spark_writes)
    return 0


def ingest_in_process(data: Path) -> None:
    """The Spark ingest's work without Spark: every split of the log directory (its plan, ingest.split_bytes)
    decoded into bronze rows and written as data files by the very function a Spark task runs, the splits shared
    by as many threads as this process has cores (the decoder's loops and Parquet's writer hold no GIL: the same
    cores local[2] gives the job); the baseline of the Spark ingest (the same files, nothing committed)."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow as pa

    from controller_core import threads
    from jobs.ingest import plan_splits
    from lake import files as LF
    from lake.config import load_config
    from transforms import bronze as T

    splits = plan_splits(str(data), "fleet", int(load_config()["ingest"]["split_bytes"]))
    out = Path(tempfile.mkdtemp(prefix="kraft-e2e-ingest-"))
    target = T.records_schema()

    def one(split) -> int:
        run = T._decode_and_write(LF.write_task(str(out), target, ["cluster"], "inproc"))
        rows = 0
        for batch in run(iter([pa.RecordBatch.from_pylist([dict(zip(T.SPLIT_NAMES, split))])])):
            rows += sum(int(json.loads(b)["rows"]) for k, b in zip(*(batch.column(i).to_pylist() for i in (0, 1)))
                        if k == "split")
        return rows

    cores = threads.available()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=cores) as pool:
        rows = sum(pool.map(one, splits))
    line(f"ingest in process (the Spark tasks' decode + write of {len(splits)} splits, {cores} threads)",
         time.perf_counter() - t0, rows)
    shutil.rmtree(out, ignore_errors=True)


def in_process(data: Path, n: int) -> None:
    from controller_core.codec.logfile import iter_chunks
    from controller_core.logdir import discover

    t0 = time.perf_counter()
    decoded = 0
    for lf in discover(data):
        if lf.kind == "segment":
            for chunk in iter_chunks(str(lf.path), lf.label, first_offset=lf.first_offset):
                decoded += len(chunk)
    line("decode segments (vectorized, 1 core)", time.perf_counter() - t0, decoded)
    ingest_in_process(data)

    from controller_core import pipeline

    t0 = time.perf_counter()
    rep, _ = pipeline.from_log_dir(data, invariants=False)
    line("replay + recompute (pipeline, no invariants, 1 core)", time.perf_counter() - t0, rep.records,
         f"{rep.partition_changes:,} changes, {rep.divergences.num_rows} divergences, "
         f"{rep.scalar_partitions} partitions on the scalar path")
    del rep
    gc.collect()

    from audit.run import audit
    from lake import catalog, gold
    from lake.config import load_config

    config = load_config()
    t0 = time.perf_counter()
    tables, end_offset, end_time = gold.silver_from_log_dir(str(data), invariants=False)
    line("silver tables in process (no invariants)", time.perf_counter() - t0, n)
    t0 = time.perf_counter()
    result = audit(tables, config, end_offset, end_time)
    rows = tables[catalog.PARTITION_STATE_HISTORY.name].num_rows
    line("audit (violations + recovery)", time.perf_counter() - t0, rows,
         f"{result.violations.num_rows:,} findings over {rows:,} history rows")

    del tables, result
    gc.collect()


def spark_jobs(data: Path, buckets: int, spark_writes: str = "executors") -> None:
    from lake import catalog
    from lake.config import load_config
    from jobs.ingest import ingest
    from lake.delta import Lake
    from jobs.replay import replay
    from lake.spark import get_spark

    root = Path(tempfile.mkdtemp(prefix="kraft-e2e-"))
    sconf = load_config(overrides={"lake": str(root / "lake"),
                                   "spark": {"master": "local[2]", "driver_memory": "6g", "shuffle_partitions": 8},
                                   "delta": {"spark_writes": spark_writes}})
    from jobs.cli import main as cli_main

    spark = get_spark(sconf)
    lake = Lake.from_config(sconf, spark)
    reset_peak()
    t0 = time.perf_counter()
    res = ingest(spark, lake, "fleet", str(data), int(sconf["ingest"]["split_bytes"]))
    records = res.records_seen
    line(f"Spark ingest (local[2], writes: {spark_writes})", time.perf_counter() - t0, res.records_seen,
         f"driver peak RSS during the job {stage_peak_mb() or 0:,.0f} MB")
    reset_peak()
    t0 = time.perf_counter()
    from transforms.silver import default_buckets

    buckets = buckets or default_buckets(spark)  # what `kraft-audit replay` uses when replay.buckets is unset
    counts = replay(spark, lake, "fleet", buckets, invariants=True)
    line(f"Spark replay (local[2], invariants, writes: {spark_writes})", time.perf_counter() - t0, res.records_seen,
         f"{counts.get(catalog.PARTITION_STATE_HISTORY.name, 0):,} history rows, "
         f"{counts.get(catalog.DIVERGENCES.name, 0)} divergences, {buckets} buckets; "
         f"driver peak RSS during the job {stage_peak_mb() or 0:,.0f} MB")
    spark.stop()
    # the audit and the data-quality checks as a scheduler runs them: the commands themselves, on the lake
    # (the audit writes its gold tables), their output to a buffer; each with its own peak
    for stage, argv in (("audit job (kraft-audit audit --json)", ["audit", "--json"]),
                        ("quality job (kraft-audit quality)", ["quality"])):
        reset_peak()
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = cli_main([*argv, "--cluster", "fleet", "--lake", sconf["lake"]])
        seconds = time.perf_counter() - t0
        if code not in (0, 1):
            raise SystemExit(f"{stage}: exit {code}")
        what = (f"{json.loads(out.getvalue())['findingsTotal']:,} findings" if argv[0] == "audit"
                else out.getvalue().strip().splitlines()[-1] if out.getvalue().strip() else "")
        line(stage, seconds, records, f"exit {code}, {what}; driver peak RSS during the job {stage_peak_mb() or 0:,.0f} MB")
    shutil.rmtree(root, ignore_errors=True)
    print("(peak RSS is this driver process; Spark's JVM and Python workers are separate processes)")


if __name__ == "__main__":
    sys.exit(main())
