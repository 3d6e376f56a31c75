"""``kraft-audit simulate SCENARIO -o DIR [--seed N] [--param k=v ...]``: write a simulated KRaft data
directory with planted incidents and their ground truth (``simulator`` package).

``-o DIR`` must be new, empty, or a directory an earlier ``simulate`` wrote (it holds the
``.kraft-audit-simulated`` marker, ``simulator.writer.MARKER``): anything else -- a real broker's data
directory above all -- is refused with exit 2 and left untouched.  Rewriting its own output removes only the
files the earlier run listed in the marker."""
from __future__ import annotations

import json
import sys
import time


def add_arguments(p) -> None:
    p.add_argument("scenario", nargs="?", help="built-in scenario name or a scenario YAML file")
    p.add_argument("-o", "--out", help="output data directory")
    p.add_argument("--seed", type=int, default=0, help="random seed (same seed => same bytes)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a scenario key or a 'generate' key (e.g. partitions=100000); repeatable")
    p.add_argument("--list", action="store_true", help="print the built-in scenarios (name and what each shows) and exit")


def main(args, out=None) -> int:
    from simulator.engine import simulate
    from simulator.scenario import ScenarioError, builtin_names, description, load
    from simulator.writer import check_output, seal_output

    out = out or sys.stdout
    if args.list:
        names = builtin_names()
        width = max(map(len, names))
        for name in names:
            out.write(f"{name:<{width}}  {description(name)}\n")
        return 0
    if not args.scenario or not args.out:
        sys.stderr.write("kraft-audit simulate: SCENARIO and -o DIR are required (or --list)\n")
        return 2
    params = {}
    for item in args.param:
        if "=" not in item:
            sys.stderr.write(f"kraft-audit simulate: --param {item!r}: expected KEY=VALUE\n")
            return 2
        k, v = item.split("=", 1)
        params[k.strip()] = v.strip()
    try:
        sc = load(args.scenario, params)
    except ScenarioError as e:
        sys.stderr.write(f"kraft-audit simulate: {e}\n")
        return 2
    kept = check_output(args.out)  # before any work: never into a directory it did not write (exit 2)
    t0 = time.perf_counter()
    info = simulate(sc, args.out, seed=args.seed)
    seal_output(args.out, kept)  # the marker lists what this run wrote: the next run removes only those
    info["seconds"] = round(time.perf_counter() - t0, 3)
    info["scenario"] = sc["name"]
    info["out"] = str(args.out)
    out.write(json.dumps(info) + "\n")
    return 0


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(prog="kraft-audit simulate")
    add_arguments(ap)
    sys.exit(main(ap.parse_args()))
