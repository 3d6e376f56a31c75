"""``kraft-audit sql "SELECT ..."``: SQL over every table of the lake without starting Spark (DataFusion,
through delta-rs's ``QueryBuilder``).  Each table of the catalog that exists in the lake is registered under
its catalog name (``partition_state_history``, ``violations``, ``incidents`` ...); timestamps are UTC.

For lakes too big for one process, the same tables are Delta tables Spark SQL reads
(``spark.read.format("delta").load("<lake>/<table>")``), README "SQL over the lake".

Exit 0 with the result, 2 when the query cannot run (a syntax error, an unknown table or column: the
message names it and lists the tables there are).
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import sys

from jobs.common import CannotRun, config_of

PROG = "kraft-audit sql"


def add_arguments(p) -> None:
    p.add_argument("query", help="one SQL statement (DataFusion's dialect), over the catalog's table names")
    p.add_argument("--lake", help="lake root (default: conf lake, env KRAFT_AUDIT_LAKE)")
    p.add_argument("--conf", help="YAML file overriding conf/defaults.yaml")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table",
                   help="table (aligned text, default), csv (with a header) or json (one object per line)")
    p.add_argument("--max-rows", type=int, default=1000, help="rows printed as a table (default 1000; csv and json "
                   "print everything)")


def query(lake_root: str, sql: str):
    """The result of ``sql`` over the lake's tables, as an Arrow table."""
    from deltalake import QueryBuilder

    from lake import catalog
    from lake.delta import Lake, open_table

    lake = Lake(lake_root, None, backend="delta-rs")
    qb = QueryBuilder()
    present = []
    for t in catalog.TABLES:
        if lake.exists(t.name):
            qb.register(t.name, open_table(lake.path(t.name)))
            present.append(t.name)
    if not present:
        raise CannotRun(f"no table in {lake.root}: run kraft-audit ingest / replay / audit first", "--lake")
    try:
        import pyarrow as pa

        # delta-rs answers with an Arrow C stream (arro3): read it as a pyarrow table
        return pa.RecordBatchReader.from_stream(qb.execute(sql)).read_all()
    except Exception as exc:  # DataFusion's planning and execution errors: the user's query, not a bug
        first = " ".join(str(exc).split())
        raise CannotRun(f"{first[:400]} (tables: {', '.join(present)})", "query") from None


def _cell(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, dt.datetime):
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str)
    return str(v)


def _table_text(t, max_rows: int) -> str:
    rows = [[_cell(v) for v in r.values()] for r in t.slice(0, max_rows).to_pylist()]
    heads = t.column_names
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(heads)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    more = t.num_rows - len(rows)
    lines.append(f"({t.num_rows} row{'s' if t.num_rows != 1 else ''}"
                 + (f"; {more} not shown: --max-rows, or --format csv / json" if more > 0 else "") + ")")
    return "\n".join(lines) + "\n"


def run(args, out=None) -> int:
    out = out or sys.stdout
    if args.max_rows < 0:
        raise CannotRun(f"{args.max_rows}: a count of rows cannot be negative", "--max-rows")
    config = config_of(args)
    result = query(config["lake"], args.query)
    if args.format == "json":
        for r in result.to_pylist():
            out.write(json.dumps({k: _cell(v) if isinstance(v, dt.datetime) else v for k, v in r.items()},
                                 default=str) + "\n")
    elif args.format == "csv":
        w = csv.writer(out, lineterminator="\n")
        w.writerow(result.column_names)
        for r in result.to_pylist():
            w.writerow(["" if v is None else _cell(v) for v in r.values()])
    else:
        out.write(_table_text(result, args.max_rows))
    return 0
