#!/usr/bin/env python3
"""``kraft-audit verify`` on a simulated fleet: the pipeline route it takes, against the scalar route it took
before the one-engine work (the scalar reference replaying and recomputing every record, then the scalar
invariant checker), on the same log in the same run.

Printed per route: wall seconds, records/s, and what it found (divergences, invariant breaches), plus the
pipeline's stages: decoding to bronze rows, fold + recompute + dating, and the §4 invariants -- the compiled
pass the pipeline uses, against the scalar checker it replaced (same records, same breaches required).

    python benchmarks/bench_verify.py [--partitions 100000] [--events 10] [--no-reference]

100 k partitions / 10 events is ~1.15 M records.
"""
from __future__ import annotations

import argparse
import io
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import inputs  # noqa: E402


def figures(partitions: int, events: int = 10, reference: bool = True, checker: bool = True, again: int = 0,
            warm_log_dir: str | None = None) -> dict:
    """The figures this script prints, as a dict (seconds; ``records`` rows): ``verify`` (``verify.run``: the
    command's first call in this process, after a call on ``warm_log_dir`` -- a tiny log: imports and the compiled
    code's cache, i.e. start-up -- when given), ``decode`` (bronze rows), ``core`` (pipeline without invariants),
    ``invariants`` (the compiled pass), with ``reference`` the ``scalar_route`` (the scalar reference replay and
    checker, ``verify_log_dir``) and, with ``checker`` too, ``scalar_checker`` (the scalar invariant checker
    alone); breaches and divergences found, ``verify_exit``, ``summary`` (verify's last line) and ``peak_rss_mb``
    of this process.  verify is timed before the stages: after them its arrays would land in memory they freed."""
    data, _ = inputs.fleet(partitions, events)

    from controller_core import pipeline
    from controller_core.replay import read_log_dir
    from jobs import verify

    out: dict = {"partitions": partitions, "events": events}
    if warm_log_dir is not None:
        verify.run(str(warm_log_dir), out=io.StringIO())
    t0 = time.perf_counter()
    text = io.StringIO()
    out["verify_exit"] = verify.run(str(data), out=text)
    out["verify"] = time.perf_counter() - t0
    out["summary"] = text.getvalue().splitlines()[-1]
    # ``again``: more calls in the same process, once the memory the first one used is the process's own
    out["verify_again"] = []
    for _ in range(again):
        t0 = time.perf_counter()
        verify.run(str(data), out=io.StringIO())
        out["verify_again"].append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    records, _ = read_log_dir(data)
    out["decode"] = time.perf_counter() - t0
    out["records"] = records.num_rows
    t0 = time.perf_counter()
    rep = pipeline.run(records, invariants=False)
    out["core"] = time.perf_counter() - t0
    del rep
    import pyarrow as pa
    import pyarrow.compute as pc

    from controller_core.kernels import invariants as compiled
    from controller_core.replay import SKIP

    replayed = records.filter(pc.invert(pc.is_in(records.column("record_type"), pa.array(sorted(SKIP)))))
    compiled.check(replayed.slice(0, 1000))  # compile (or load the cache) outside the timing
    t0 = time.perf_counter()
    out["compiled_breaches"] = len(compiled.check(replayed))
    out["invariants"] = time.perf_counter() - t0
    if reference and checker:
        from controller_core.image import Cluster
        from controller_core.rules.invariants import check_batches
        from controller_core.vector.explain import scalar_batches

        t0 = time.perf_counter()
        out["scalar_breaches"] = len(check_batches(scalar_batches(replayed, None), cluster=Cluster()))
        out["scalar_checker"] = time.perf_counter() - t0
    if reference:
        from controller_core.rules.invariants import InvariantChecker
        from controller_core.rules.verify import verify_log_dir

        t0 = time.perf_counter()
        ref = verify_log_dir(data, checker=InvariantChecker())
        out["scalar_route"] = time.perf_counter() - t0
        out["scalar_route_divergences"], out["scalar_route_breaches"] = len(ref.divergences), len(ref.breaches)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--partitions", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--no-reference", action="store_true", help="skip the scalar route (minutes at 1 M records)")
    args = ap.parse_args(argv)
    f = figures(args.partitions, args.events, reference=not args.no_reference)
    n = f["records"]
    t_decode, t_core, t_inv, t_verify = f["decode"], f["core"], f["invariants"], f["verify"]
    print(f"{args.partitions:,} partitions, {n:,} records (fleet-large, {args.events} events)")
    print(f"decode to bronze rows            {t_decode:8.1f} s  {n / t_decode:>12,.0f} records/s")
    print(f"pipeline, no invariants          {t_core:8.1f} s  {n / t_core:>12,.0f} records/s")
    print(f"invariants, compiled pass        {t_inv:8.1f} s  {n / t_inv:>12,.0f} records/s  "
          f"{f['compiled_breaches']} breaches")
    print(f"verify (pipeline + invariants)   {t_verify:8.1f} s  {n / t_verify:>12,.0f} records/s  exit {f['verify_exit']}")
    print(f"  {f['summary']}")
    if not args.no_reference:
        t_sinv = f["scalar_checker"]
        print(f"invariants, scalar checker       {t_sinv:8.1f} s  {n / t_sinv:>12,.0f} records/s  "
              f"{f['scalar_breaches']} breaches  (compiled pass {t_sinv / t_inv:.0f}x faster)")
        t_ref = f["scalar_route"]
        print(f"scalar route (before)            {t_ref:8.1f} s  {n / t_ref:>12,.0f} records/s  "
              f"{f['scalar_route_divergences']} divergences, {f['scalar_route_breaches']} breaches")
        print(f"verify speed-up over the scalar route: {t_ref / t_verify:.1f}x "
              f"(without invariants: {t_ref / (t_decode + t_core):.1f}x)")
    print(f"peak RSS {f['peak_rss_mb']:,.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
