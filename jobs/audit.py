"""``kraft-audit audit``: the durability audit of one cluster (gold ``violations`` and
``recovery_candidates``), a summary an operator can act on, and an exit code for schedulers.

    kraft-audit audit --cluster NAME [--lake DIR]      reads the silver tables of `kraft-audit replay`
    kraft-audit audit --log-dir DIR                    replays the log itself (no lake, no Spark)

Exit codes: 0 no finding at or above --fail-on (default from conf: ERROR), 1 findings at or above
it, 2 the audit could not run (missing tables, bad arguments: raised, made one line by jobs.cli).
"""
from __future__ import annotations

import json
import sys

from jobs.common import CannotRun, add_source_arguments, at_offset_of, config_of, warn_quarantined

PROG = "kraft-audit audit"


def add_arguments(p) -> None:
    add_source_arguments(p)
    p.add_argument("--fail-on", choices=["ERROR", "WARN", "INFO"], help="exit 1 at or above this severity")
    p.add_argument("--json", action="store_true", help="one JSON document: counts, the most severe findings, "
                   "recovery candidates (bounded by --limit; --all lists everything)")
    p.add_argument("--limit", type=int, default=20,
                   help="findings (and leaderless partitions) listed in the summary (default 20)")
    p.add_argument("--all", action="store_true", help="list every finding and candidate (--json)")


def run(args, out=None, err=None) -> int:
    from audit.run import audit, summary_json, summary_text
    from lake import gold

    out, err = out or sys.stdout, err or sys.stderr
    if args.limit < 0:
        raise CannotRun(f"{args.limit}: a count of findings to list cannot be negative", "--limit")
    config = config_of(args)
    warn_quarantined(PROG, args.log_dir, err)
    tables, end_offset, end_time, info, lake = gold.load_sources(
        config, args.cluster, args.log_dir, args.log_info, warn=lambda m: print(f"{PROG}: {m}", file=err))
    at = at_offset_of(args, tables)
    fail_on = args.fail_on or config["audit"]["fail_on"]
    result = audit(tables, config, end_offset, end_time, at_offset=at, log_info=info, strategy=args.strategy)
    if lake is not None:
        gold.write_gold(lake, args.cluster, result)
    name = args.cluster or args.log_dir
    if args.json:
        doc = summary_json(result, name, fail_on, None if args.all else args.limit)
        out.write(json.dumps(doc, default=str, indent=2) + "\n")
    else:
        out.write(summary_text(result, name, fail_on, args.limit))
    return 1 if result.fails(fail_on) else 0
