"""``kraft-audit report``: the audit as one self-contained HTML file (no Spark; nothing loaded from the network
when it is opened).

    kraft-audit report --log-dir DIR -o report.html
    kraft-audit report --cluster NAME [--lake DIR] [--at-offset N | --at-time T] [--log-info PATH] -o report.html

Reads what ``audit`` and ``plan`` read (``lake.gold.load_sources``), runs the same audit, and writes
:func:`audit.report.render`'s page.  Exit 0 once the file is written -- the audit's verdict, and the exit code
``kraft-audit audit`` would give, are in the page, not the exit code -- and 2 when it cannot run.  ``-o`` never
replaces a file that is not an earlier report (recognised by its ``<meta name="generator">``).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs.common import CannotRun, add_source_arguments, at_offset_of, config_of, partition_rows, warn_quarantined

PROG = "kraft-audit report"


def add_arguments(p) -> None:
    add_source_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--fail-on", choices=["ERROR", "WARN", "INFO"],
                   help="the threshold of the verdict shown (default: conf audit.fail_on, as audit)")
    p.add_argument("--max-index-rows", type=int, default=None, metavar="N",
                   help="history rows in the page's partition search index (default 100000; whole partitions, "
                        "those with findings first)")


def version() -> str:
    """kraft-audit's installed version, else ``git describe`` of the checkout, else 'unknown'."""
    from importlib import metadata

    try:
        return metadata.version("kraft-audit")
    except metadata.PackageNotFoundError:
        pass
    try:
        got = subprocess.run(["git", "describe", "--always", "--dirty", "--tags"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=10)
        return got.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _check_output(path: str) -> Path:
    from audit.report import GENERATOR

    out = Path(path)
    if out.is_dir():
        raise CannotRun("is a directory; -o names the HTML file to write", f"-o {path}")
    if not out.parent.is_dir():
        raise CannotRun("its folder does not exist", f"-o {path}")
    if out.exists():
        with open(out, "rb") as f:
            head = f.read(4096)
        if f'<meta name="generator" content="{GENERATOR}">'.encode() not in head:
            raise CannotRun("exists and is not a kraft-audit report: not overwritten", f"-o {path}")
    return out


def _source(args, tables, end_offset, end_time, info, lake) -> dict:
    spans = tables.get("undecoded_spans") or []
    facts, files = [], []
    if args.log_dir:
        from controller_core.logdir import discover

        facts.append(("log directory", str(Path(args.log_dir).resolve())))
        for f in discover(Path(args.log_dir)):
            files.append({"file": f.label, "kind": f.kind, "bytes": f.path.stat().st_size})
    else:
        import pyarrow.compute as pc
        from lake import catalog

        facts += [("cluster", args.cluster), ("lake", str(lake.root))]
        flt = [("cluster", "=", args.cluster)]
        src = lake.read_arrow(catalog.METADATA_RECORDS.name, columns=["source_file", "source_kind"], filters=flt)
        if src.num_rows:  # the files ingested, with their records
            g = src.group_by(["source_file", "source_kind"]).aggregate([("source_file", "count")])
            files = sorted(({"file": r["source_file"], "kind": r["source_kind"], "records": r["source_file_count"]}
                            for r in g.to_pylist()), key=lambda f: f["file"])
        if lake.exists(catalog.QUARANTINE.name):
            q = lake.read_arrow(catalog.QUARANTINE.name, filters=flt)
            spans = [{"file": r["source_file"], "position": r["position"], "length": r["length"],
                      "message": r["message"]} for r in q.to_pylist()]
        rt = tables.get("record_times")
        if rt is not None and rt.num_rows:
            facts.append(("segment offsets", f"{pc.min(rt.column('offset')).as_py()}-{pc.max(rt.column('offset')).as_py()}"))
    when = end_time.isoformat().replace("+00:00", "Z") if hasattr(end_time, "isoformat") else end_time
    facts.append(("end of the log", f"offset {end_offset} ({when})"))
    if args.log_info:
        facts.append(("log info", ", ".join(args.log_info)))
    if info is not None and info.num_rows:
        import pyarrow.compute as pc

        facts.append(("log info files read", ", ".join(sorted(pc.unique(info.column("source_file")).to_pylist()))))
    spans = [s if isinstance(s, dict) else {"file": s.file, "position": s.position, "length": s.length,
                                            "message": s.message} for s in spans]
    # how the replay read the log (where it started, runs of missing offsets, a vendor's metadata version, discarded
    # metadata transactions): the lines a log directory's audit prints on stderr
    return {"facts": facts, "files": files, "quarantined": spans, "notes": list(tables.get("replay_notes") or [])}


def _latest_quality(lake, cluster: str | None):
    """The rows of the cluster's latest ``kraft-audit quality`` run (gold data_quality), or None."""
    import pyarrow.compute as pc

    from lake import catalog

    if lake is None or not lake.exists(catalog.DATA_QUALITY.name):
        return None
    t = lake.read_arrow(catalog.DATA_QUALITY.name, filters=[("cluster", "=", cluster)])
    if not t.num_rows:
        return None
    return t.filter(pc.equal(t.column("checked_at"), pc.max(t.column("checked_at"))))


def run(args, out=None, err=None) -> int:
    from audit import report
    from audit.planning import plan_at
    from audit.run import audit
    from lake import gold

    out, err = out or sys.stdout, err or sys.stderr
    max_rows = report.MAX_INDEX_ROWS if args.max_index_rows is None else args.max_index_rows
    if max_rows < 0:
        raise CannotRun(f"{max_rows}: a count of rows cannot be negative", "--max-index-rows")
    target = _check_output(args.output)
    config = config_of(args)
    tables, end_offset, end_time, info, lake = gold.load_sources(
        config, args.cluster, args.log_dir, args.log_info, warn=lambda m: print(f"{PROG}: {m}", file=err))
    warn_quarantined(PROG, args.log_dir, err, tables.get("undecoded_spans") or [])
    at = at_offset_of(args, tables)
    fail_on = args.fail_on or config["audit"]["fail_on"]
    result = audit(tables, config, end_offset, end_time, at_offset=at, log_info=info, strategy=args.strategy)
    plan = None
    if result.candidates.num_rows:  # leaderless partitions: the plan `kraft-audit plan` would write
        election = {"balanced": "longest_log_balanced", "aggressive": "longest_log_aggressive"}.get(result.strategy,
                                                                                                   "unclean")
        plan = plan_at(tables, end_offset, info, election, at_offset=at, strategy=result.strategy,
                       leader_epoch_check=config["audit"].get("leader_epoch_check", "strict"))
    cut = tables
    if at is not None and at < end_offset:
        from audit.run import truncate

        cut, _ = truncate(tables, at)
    wanted, total = report.incident_partitions(result)
    # (a damaged log's incident may name a partition without state of its own: its timeline is empty, not an error)
    timelines = [(f"{t}-{p}", partition_rows(cut, t, p, strict=False)) for t, p in wanted]
    page = report.render(cut, result, name=args.cluster or str(args.log_dir), fail_on=fail_on,
                         source=_source(args, tables, end_offset, end_time, info, lake), version=version(),
                         plan=plan, timelines=timelines, timelines_total=total, max_index_rows=max_rows,
                         quality=_latest_quality(lake, args.cluster))
    fd, tmp = tempfile.mkstemp(prefix=".kraft-audit-report-", suffix=".html", dir=target.parent)  # all or nothing
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    verdict = f"worst severity {result.worst() or 'none'}; audit would exit {1 if result.fails(fail_on) else 0}"
    out.write(f"{PROG}: wrote {target} ({target.stat().st_size} bytes; {result.incidents.num_rows} incidents, "
              f"{result.violations.num_rows} findings; {verdict})\n")
    return 0
