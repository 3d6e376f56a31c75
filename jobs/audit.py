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

import pyarrow.compute as pc

from lake.files import return_freed_memory
from lake.lock import GOLD, holding
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
    p.add_argument("--fail-on-new", action="store_true",
                   help="exit 1 only for findings at or above --fail-on that the previous audit of the end of the "
                        "log (recorded in the lake) did not have: a scheduled audit pages on news only")


def run(args, out=None, err=None) -> int:
    from audit.run import HISTORY_COLUMNS, audit, summary_json, summary_text
    from lake import gold

    out, err = out or sys.stdout, err or sys.stderr
    return_freed_memory()
    if args.limit < 0:
        raise CannotRun(f"{args.limit}: a count of findings to list cannot be negative", "--limit")
    config = config_of(args)
    tables, end_offset, end_time, info, lake = gold.load_sources(
        config, args.cluster, args.log_dir, args.log_info, warn=lambda m: print(f"{PROG}: {m}", file=err),
        history_columns=HISTORY_COLUMNS)
    warn_quarantined(PROG, args.log_dir, err, tables.get("undecoded_spans") or [])  # what the replay could not decode
    gaps = tables.get("missing_offsets") or []  # (warned of by the replay; listed in --json as verify lists them)
    at = at_offset_of(args, tables)
    at_end = args.at_offset is None and args.at_time is None
    if args.fail_on_new and (lake is None or not at_end):
        raise CannotRun("compares with the previous audit of the end of the log, recorded in the lake: needs "
                        "--cluster and no --at-offset / --at-time", "--fail-on-new")
    fail_on = args.fail_on or config["audit"]["fail_on"]
    result = audit(tables, config, end_offset, end_time, at_offset=at, log_info=info, strategy=args.strategy)
    if args.cluster:  # the rows name their cluster in the output as in the gold tables (a log directory: none)
        result.violations, result.incidents = (_of_cluster(t, args.cluster)
                                               for t in (result.violations, result.incidents))
    del tables  # the silver history (GBs at a million partitions) is not needed to write and show the result
    news = None
    if lake is not None:
        with holding(config, args.cluster, "audit", GOLD):  # two audits of a cluster: one after the other
            news = _record_run(lake, args, config, result, info, end_offset, at_end, fail_on)
    name = args.cluster or args.log_dir
    # the findings from a run of missing offsets on were replayed without the changes written there: counted and
    # marked, so a gap's consequences are told from the cluster's faults (as verify marks its own)
    gap_end = min(g.last for g in gaps) if gaps else None
    after = 0 if gap_end is None else int(pc.sum(pc.greater(result.violations.column("first_offset"), gap_end))
                                           .as_py() or 0)
    if args.json:
        doc = summary_json(result, name, fail_on, None if args.all else args.limit)
        if gaps:
            doc["missingOffsets"] = [g.as_json() for g in gaps]
            doc["findingsAfterMissingOffsets"] = after
            for f in doc["findings"]:
                if f["first_offset"] > gap_end:
                    f["afterMissingOffsets"] = True
        if news is not None:
            doc.update(_news_json(news, args.limit if not args.all else None))
        out.write(json.dumps(doc, default=str, indent=2) + "\n")
    else:
        out.write(summary_text(result, name, fail_on, args.limit))
        if gaps:
            runs = ", ".join(f"{g.first}..{g.last}" for g in gaps)
            out.write(f"{after} of the findings follow offsets no file holds ({runs}): replayed without the changes "
                      "written there, they may be the gap's consequences\n")
        if news is not None:
            out.write(_news_text(news, args.limit))
    if args.fail_on_new:
        return 1 if _fails(news[1], fail_on) or _fails(news[3], fail_on) else 0
    return 1 if result.fails(fail_on) else 0


def _of_cluster(rows, cluster: str):
    from controller_core.codec.arrowutil import repeat_str

    return rows.set_column(rows.schema.get_field_index("cluster"), "cluster", repeat_str(cluster, rows.num_rows))


def _fails(rows, fail_on: str) -> bool:
    """Whether any finding or incident is at or above ``fail_on``."""
    from audit.run import RANK

    return any(RANK[s] <= RANK[fail_on] for s in pc.unique(rows.column("severity")).to_pylist())


def _news_json(news, limit) -> dict:
    previous, new, run_id, incidents = news
    rows = new.slice(0, limit) if limit is not None else new
    inc = incidents.slice(0, limit) if limit is not None else incidents
    return {"runId": run_id, "previousRunId": previous["run_id"] if previous else None,
            "newIncidentsTotal": incidents.num_rows,
            "newIncidents": [{k: r[k] for k in ("severity", "incident_id", "cause", "first_offset", "findings", "title")}
                             for r in inc.to_pylist()],
            "newFindingsTotal": new.num_rows,
            "newFindings": [{k: r[k] for k in ("severity", "code", "topic", "partition", "first_offset",
                                               "explanation")} for r in rows.to_pylist()]}


def _news_text(news, limit: int) -> str:
    from audit.run import incident_lines

    previous, new, run_id, incidents = news
    since = (f"the previous audit of the end of the log (run {previous['run_id']}, offset {previous['at_offset']})"
             if previous else "no previous audit of the end of the log")
    lines = ["", f"Run {run_id}; new since {since}: {incidents.num_rows} incidents, {new.num_rows} findings"]
    lines += incident_lines(incidents, limit)
    for r in new.slice(0, limit).to_pylist():
        lines.append(f"  [{r['severity']}] {r['code']} @{r['first_offset']}: {r['explanation']}")
    if new.num_rows > limit:
        lines.append(f"  ... {new.num_rows - limit} more: --json --all, or the violations table of this run")
    return "\n".join(lines) + "\n"


def _record_run(lake, args, config, result, info, end_offset, at_end, fail_on) -> tuple:
    """Write this run's gold rows; what is new since the previous audit of the end of the log."""
    from lake import gold

    run = gold.AuditRun(args.cluster, result.at_offset, result.at_time, end_offset, at_end, fail_on, result.strategy,
                        json.dumps({"audit": config["audit"],
                                    "log_info": sorted(pc.unique(info.column("source_file")).to_pylist())},
                                   default=str, sort_keys=True))
    previous = gold.previous_run(lake, args.cluster)
    seen = gold.run_findings(lake, args.cluster, previous["run_id"]) if previous else None
    seen_incidents = gold.run_incidents(lake, args.cluster, previous["run_id"]) if previous else None
    news = (previous, gold.new_since(result.violations, seen), run.run_id,
            gold.new_incidents(result.incidents, seen_incidents))
    gold.write_gold(lake, run, result, previous, news[1].num_rows)
    return news
