"""``kraft-audit audit``: the durability audit of one cluster (gold ``violations`` and
``recovery_candidates``), a summary an operator can act on, and an exit code for schedulers.

    kraft-audit audit --cluster NAME [--lake DIR]      reads the silver tables of `kraft-audit replay`
    kraft-audit audit --log-dir DIR                    replays the log itself (no lake, no Spark)

Exit codes: 0 no finding at or above --fail-on (default from conf: ERROR), 1 findings at or above
it, 2 the audit could not run (missing tables, bad arguments).
"""
from __future__ import annotations

import json
import sys

from lake.config import load_config

PROG = "kraft-audit audit"


def add_source_arguments(p) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--cluster", help="cluster name in the lake (after kraft-audit ingest + replay)")
    src.add_argument("--log-dir", help="audit a log directory directly (replays it; no lake, no Spark)")
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--at-offset", type=int, metavar="N", help="audit the history through offset N (default: end)")
    at.add_argument("--at-time", metavar="T", help="audit the history through time T (ISO 8601 or epoch ms)")
    p.add_argument("--log-info", action="append", metavar="PATH",
                   help="GetReplicaLogInfo JSON files or folders of them (default with --cluster: the "
                        "replica_log_info table)")
    p.add_argument("--strategy", choices=["balanced", "aggressive", "none"],
                   help="KIP-966 unclean recovery strategy for leaderless partitions (default: conf)")


def add_arguments(p) -> None:
    add_source_arguments(p)
    p.add_argument("--fail-on", choices=["ERROR", "WARN", "INFO"], help="exit 1 at or above this severity")
    p.add_argument("--json", action="store_true", help="one JSON document: counts, findings, recovery candidates")
    p.add_argument("--limit", type=int, default=20, help="findings listed in the text summary (default 20)")


def load(args, config):
    """(tables, end offset, end time, log info, lake or None) for --cluster or --log-dir."""
    from audit import loginfo
    from lake import gold

    lake = None
    if args.log_dir:
        tables, end_offset, end_time = gold.silver_from_log_dir(args.log_dir)
        info = loginfo.LOG_INFO_SCHEMA.empty_table()
    else:
        from lake.delta import Lake

        lake = Lake(config["lake"], None, backend="delta-rs")
        tables, end_offset, end_time = gold.silver_from_lake(lake, args.cluster)
        info = gold.log_info_from_lake(lake, args.cluster)
    if args.log_info:
        rows, bad = loginfo.read_log_info(gold.log_info_files(args.log_info))
        for q in bad.to_pylist():
            print(f"{PROG}: ignored {q['source_file']} {q['json_path']}: {q['reason']}", file=sys.stderr)
        info = rows
    return tables, end_offset, end_time, gold.newest_first(info), lake


def resolve_at(args, tables) -> int | None:
    from audit.run import offset_at_time
    from jobs.describe import parse_time

    if args.at_time is None:
        return args.at_offset
    at_us = parse_time(args.at_time)
    at = offset_at_time(tables, at_us)
    if at is None:
        raise ValueError(f"--at-time {args.at_time}: before the first record of the history")
    return at


def prepare(args, prog: str, err):
    """What ``audit`` and ``plan`` both start from: (config, tables, end offset, end time, log info, lake
    or None, audited offset or None); None after printing why when the inputs cannot be read."""
    from lake import gold

    config = load_config(args.conf, {"lake": args.lake} if getattr(args, "lake", None) else None)
    try:
        tables, end_offset, end_time, info, lake = load(args, config)
        return config, tables, end_offset, end_time, info, lake, resolve_at(args, tables)
    except (gold.GoldError, ValueError) as exc:
        print(f"{prog}: {exc}", file=err)
        return None


def run(args, out=None, err=None) -> int:
    from audit.run import audit, summary_json, summary_text
    from lake import gold

    out, err = out or sys.stdout, err or sys.stderr
    ready = prepare(args, PROG, err)
    if ready is None:
        return 2
    config, tables, end_offset, end_time, info, lake, at = ready
    fail_on = args.fail_on or config["audit"]["fail_on"]
    result = audit(tables, config, end_offset, end_time, at_offset=at, log_info=info, strategy=args.strategy)
    if lake is not None:
        gold.write_gold(lake, args.cluster, result)
    name = args.cluster or args.log_dir
    if args.json:
        out.write(json.dumps(summary_json(result, name, fail_on), default=str, indent=2) + "\n")
    else:
        out.write(summary_text(result, name, fail_on, args.limit))
    return 1 if result.fails(fail_on) else 0
