"""``kraft-audit timeline``: one partition's (or broker's) history in the terminal, one line per change, with
what triggered it, its offset and its time (no Spark).

    kraft-audit timeline --log-dir DIR --topic orders --partition 7 [--from T1] [--to T2]
    kraft-audit timeline --cluster NAME [--lake DIR] --broker 3

Partition lines come from ``partition_state_history`` (its ``trigger``: ``fence(3)``, ``controlled_shutdown(2)``,
``unclean_shutdown(1)``, ``alter_partition``, ``election(preferred)``, ``reassignment`` ...), broker lines from
``broker_state_history`` -- the silver tables of the lake, or of the log replayed in process.  Exit 0, or 2
when the topic, partition or broker never existed in the history read.
"""
from __future__ import annotations

import datetime as dt
import json
import sys

import pyarrow as pa
import pyarrow.compute as pc

from jobs.common import CannotRun, add_cluster_or_log_dir, change_what as _what, config_of, parse_time, partition_rows, warn_quarantined

PROG = "kraft-audit timeline"
TS = pa.timestamp("us", tz="UTC")


def add_arguments(p) -> None:
    add_cluster_or_log_dir(p, "replay a log directory in process (no lake, no Spark)")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--topic", help="the topic whose partitions to show (all of them without --partition): its name, "
                      "or its id (how findings name a topic whose TopicRecord was not read)")
    what.add_argument("--broker", type=int, help="a broker's registrations, fences, unfences, controlled shutdowns")
    p.add_argument("--partition", type=int, help="only this partition of --topic")
    p.add_argument("--from", dest="from_", metavar="T1", help="changes at or after T1 (ISO 8601 or epoch ms)")
    p.add_argument("--to", metavar="T2", help="changes at or before T2")
    p.add_argument("--json", action="store_true", help="one JSON object per change")


def _iso(v) -> str:
    return v.isoformat(timespec="milliseconds").replace("+00:00", "Z") if isinstance(v, dt.datetime) else "?"


def _ids(xs) -> str:
    return ",".join(map(str, xs)) if xs else "-"


def _window(table: pa.Table, column: str, lo: int | None, hi: int | None) -> pa.Table:
    us = pc.cast(pc.cast(table.column(column), TS), pa.int64())
    keep = pa.array([True] * table.num_rows)
    if lo is not None:
        keep = pc.and_(keep, pc.fill_null(pc.greater_equal(us, lo), False))
    if hi is not None:
        keep = pc.and_(keep, pc.fill_null(pc.less_equal(us, hi), False))
    return table.filter(keep)


def partition_lines(topic: str, rows: list[dict]) -> list[str]:
    out, current = [], None
    for r in rows:
        if r["partition_id"] != current:
            current = r["partition_id"]
            n = sum(1 for x in rows if x["partition_id"] == current)
            out.append(f"{topic}-{current} (topic id {r['topic_id']}): {n} change(s)")
            out.append("  OFFSET    TIME                      TRIGGER                   LEADER  EPOCH(L/P)  ISR"
                       "          ELR        LASTKNOWNELR  REPLICAS     ADDING/REMOVING  RECOVERY")
        if r.get("deleted"):
            out.append(f"  {r['offset']:<9} {_iso(r['valid_from_timestamp']):<25} deleted")
            continue
        moving = f"{_ids(r['adding_replicas'])}/{_ids(r['removing_replicas'])}"
        lrs = {0: "RECOVERED", 1: "RECOVERING"}.get(r["leader_recovery_state"], str(r["leader_recovery_state"]))
        out.append(f"  {r['offset']:<9} {_iso(r['valid_from_timestamp']):<25} {_what(r):<25} {r['leader']:<7} "
                   f"{str(r['leader_epoch']) + '/' + str(r['partition_epoch']):<11} {_ids(r['isr']):<12} "
                   f"{_ids(r['eligible_leader_replicas']):<10} {_ids(r['last_known_elr']):<13} "
                   f"{_ids(r['replicas']):<12} {moving:<16} {lrs}")
    return out


def _broker_what(r: dict) -> str:
    ev = r["event"]
    if ev == "REGISTER_BROKER_RECORD":
        state = "controlled shutdown" if r.get("in_controlled_shutdown") else "fenced" if r.get("fenced") else "active"
        return f"registered (epoch {r['broker_epoch']}, incarnation {r['incarnation_id']}), {state}"
    if ev == "UNREGISTER_BROKER_RECORD":
        return "unregistered"
    if not r.get("registered"):
        return "not registered"
    if r.get("in_controlled_shutdown"):
        return "controlled shutdown"
    return "fenced" if r.get("fenced") else "unfenced (active)"


def broker_lines(broker: int, rows: list[dict]) -> list[str]:
    out = [f"broker {broker}: {len(rows)} change(s)",
           "  OFFSET    TIME                      RECORD                               STATE"]
    for r in rows:
        out.append(f"  {r['offset']:<9} {_iso(r['timestamp']):<25} {r['event']:<36} {_broker_what(r)}")
    return out


def run(args, out=None, err=None) -> int:
    from lake import catalog, gold

    out, err = out or sys.stdout, err or sys.stderr
    if args.partition is not None and args.topic is None:
        raise CannotRun("--partition needs --topic", "--partition")
    lo = parse_time(args.from_, "--from") if args.from_ else None
    hi = parse_time(args.to, "--to") if args.to else None
    if args.log_dir:
        tables, _, _ = gold.silver_from_log_dir(args.log_dir, invariants=False)
        warn_quarantined(PROG, args.log_dir, err, tables.get("undecoded_spans") or [])
    else:
        from lake.delta import Lake

        lake = Lake(config_of(args)["lake"], None, backend="delta-rs")
        tables, _, _ = gold.silver_from_lake(lake, args.cluster)
    if args.topic is not None:
        rows = partition_rows(tables, args.topic, args.partition)
        if rows and (lo is not None or hi is not None):
            rows = _window(pa.Table.from_pylist(rows), "valid_from_timestamp", lo, hi).to_pylist()
        text = partition_lines(args.topic, rows)
    else:
        b = tables[catalog.BROKER_STATE_HISTORY.name]
        b = b.filter(pc.equal(b.column("broker_id"), args.broker))
        if not b.num_rows:
            raise CannotRun(f"broker {args.broker} is not in the history read", "--broker")
        b = _window(b, "timestamp", lo, hi).sort_by([("offset", "ascending")])
        rows = b.to_pylist()
        text = broker_lines(args.broker, rows)
    if args.json:
        for r in rows:
            out.write(json.dumps({k: (_iso(v) if isinstance(v, dt.datetime) else v) for k, v in r.items()}) + "\n")
    else:
        out.write("\n".join(text) + "\n")
    return 0
