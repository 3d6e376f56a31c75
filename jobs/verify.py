"""``kraft-audit verify``: replay a log directory, recompute every controller decision, check every
invariant, without Spark.  Exit 1 when anything diverges or an ERROR-severity invariant breaks: the
quick integrity check to run on a log before trusting anything else."""
from __future__ import annotations

import json
import sys

from controller_core.rules.verify import verify_log_dir


def _checker():
    from controller_core.rules.invariants import InvariantChecker
    return InvariantChecker()


def run(log_dir: str, as_json: bool = False, elr: str | None = None, out=None) -> int:
    out = out or sys.stdout
    override = None if elr in (None, "auto") else elr == "on"
    rep = verify_log_dir(log_dir, checker=_checker(), elr_override=override)
    failed = bool(rep.divergences) or any(b.severity == "ERROR" for b in rep.breaches)
    if as_json:
        out.write(json.dumps(rep.to_json(), ensure_ascii=False) + "\n")
        return 1 if failed else 0
    for d in rep.divergences:
        out.write(f"DIVERGENCE offset={d.offset} topic={d.topic} partition={d.partition} field={d.field} "
                  f"recorded={json.dumps(d.recorded)} expected={json.dumps(d.expected)} trigger={d.trigger} "
                  f"rule={d.rule}\n")
    for b in rep.breaches:
        out.write(f"{b.severity} {b.rule} offset={b.offset} topic={b.topic} partition={b.partition} "
                  f"recorded={json.dumps(b.recorded, default=str)} expected={json.dumps(b.expected, default=str)} "
                  f"{b.message}\n")
    errors = sum(b.severity == "ERROR" for b in rep.breaches)
    start = f" from the snapshot at offset {rep.start_offset}" if rep.start_offset else ""
    out.write(f"kraft-audit verify: {rep.records} records{start}, {rep.partition_changes} partition changes "
              f"recomputed, {len(rep.divergences)} divergences, {errors} ERROR / "
              f"{len(rep.breaches) - errors} WARN+INFO invariant findings\n")
    return 1 if failed else 0
