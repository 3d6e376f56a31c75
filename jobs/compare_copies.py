"""``kraft-audit compare-copies DIR DIR...``: several nodes' copies of one ``__cluster_metadata`` log compared
batch by batch (base offset, leader epoch, CRC), without Spark.

Exit 0 when no copy contradicts another (identical, a prefix: a node that was down or lagging, or incomplete:
a copy lacking a segment, which the report names), 1 when two
copies hold different batches at an offset both have (a Raft safety violation, or a copy that is not of this
log), 2 when a path is not a metadata log.

``ingest`` compares copies by the same definitions (``copies.relate_batches``) when given several ``--log-dir`` or a
copy of a cluster bronze already holds, so that bronze keeps one row per offset.
"""
from __future__ import annotations

import json
import sys

from controller_core import copies
from jobs.common import CannotRun

PROG = "kraft-audit compare-copies"


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="+", metavar="DIR",
                   help="each node's data directory or __cluster_metadata-0 folder (two or more)")
    p.add_argument("--json", action="store_true", help='{"copies", "pairs", "mostComplete", "diverged"}')


def _text(doc: dict) -> str:
    lines = [f"{PROG}: {len(doc['copies'])} copies"]
    for c in doc["copies"]:
        span = f"offsets {c['firstOffset']}-{c['lastOffset']}" if c["batches"] else "no readable batch"
        lines.append(f"  {c['path']} (node {c['nodeId'] or '?'}): {span}, {c['batches']} batches, last epoch "
                     f"{c['lastEpoch']}, {len(c['snapshots'])} snapshot(s)")
        for u in c["unreadable"]:
            lines.append(f"    unreadable from byte {u['position']} of {u['file']}")
    lines.append("")
    for p in doc["pairs"]:
        head = f"  {p['a']} vs {p['b']}: {p['relation']}"
        if p["agreeUpTo"] is not None:
            head += f", the same batches up to offset {p['agreeUpTo']}"
        if p["onlyInA"] or p["onlyInB"]:
            head += f"; batches only in the first: {p['onlyInA']}, only in the second: {p['onlyInB']}"
        lines.append(head)
        for side_name, key in (("first", "a"), ("second", "b")):
            for lo, hi in (p["missing"] or {}).get(key, []):
                lines.append(f"    the {side_name} lacks offsets {lo}-{hi}")
        d = p["firstDifference"]
        if d:
            def side(s):
                return "no batch" if s is None else f"epoch {s['epoch']}, crc {s['crc']}, to offset {s['lastOffset']}"
            lines.append(f"    first difference at offset {d['offset']}: {side(d['a'])} vs {side(d['b'])}")
    lines += ["", f"Most complete: {doc['mostComplete']}",
              "Copies DIVERGE inside their common range (exit 1)" if doc["diverged"]
              else "No copy contradicts another (exit 0)"]
    return "\n".join(lines) + "\n"


def run(args, out=None) -> int:
    out = out or sys.stdout
    if len(args.paths) < 2:
        raise CannotRun("compare-copies needs two copies or more (DIR DIR...)", "paths")
    doc = copies.compare(args.paths)
    out.write(json.dumps(doc, indent=2) + "\n" if args.json else _text(doc))
    return 1 if doc["diverged"] else 0
