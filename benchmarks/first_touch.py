#!/usr/bin/env python3
"""What the first touch of fresh memory costs on this machine: a block of ``--mb`` MB written four times, each in a
fresh NumPy array (freed in between), with the system time and page faults of each.

On a VM whose guest has not used those pages since it booted (a Firecracker guest here) the first write costs
about 1.8 ms per MB and the later ones, which get pages the guest has used once, a thirtieth of it; on a machine
that has been up a while all four cost the same.  A command's first call on a large log pays it for every page
it allocates (benchmarks/README.md, session 36).

    python benchmarks/first_touch.py [--mb 500]
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=500)
    args = ap.parse_args(argv)
    for k in range(4):
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        block = np.ones(args.mb << 20, np.uint8)
        wall = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        print(f"write {k + 1}: {wall:.3f} s ({wall * 1000 / args.mb:.2f} ms/MB), system {r1.ru_stime - r0.ru_stime:.3f} s, "
              f"page faults {r1.ru_minflt - r0.ru_minflt:,}")
        del block
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
