"""``kraft-audit report``: one self-contained HTML file of an audit, for reading in a browser.

Data in (the silver tables, the :class:`audit.run.AuditResult`, the plan of :func:`audit.planning.plan_at`,
the history rows of the partitions in incidents, what was read), an HTML string out.  Everything the page
needs is inside it: styles, hand-written SVG plots and a little vanilla JavaScript (the partition search
box); it loads nothing from anywhere when opened.  Every string from the log is escaped
(:func:`html.escape`), and the embedded JSON index has every ``<`` written as ``\\u003c``, so no topic
name can end a ``<script>`` element or open a tag.

Bounded at a million partitions: the incidents list at most :data:`MAX_INCIDENTS` (each at most
:data:`MAX_EVIDENCE` findings), the partition timelines cover at most :data:`MAX_TIMELINES` partitions in
incidents, the plots are computed with NumPy and drawn at a fixed number of points, and the search index
holds whole partitions' histories up to ``max_index_rows`` rows (partitions with findings first); the
page says what it left out and which command shows it.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import datetime as dt
import html
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit.run import RANK, AuditResult, _ordered_findings, counts
from lake import catalog

GENERATOR = "kraft-audit report"  # <meta name="generator">: how `report -o` recognises a file it may overwrite
MAX_INCIDENTS = 200
MAX_EVIDENCE = 50
MAX_OUTSIDE = 100
MAX_TIMELINES = 20
MAX_BROKERS = 200
MAX_INDEX_ROWS = 100_000
PLOT_POINTS = 400
TS = pa.timestamp("us", tz="UTC")
INDEX_COLUMNS = ["offset", "timeMs", "trigger", "leader", "leaderEpoch", "partitionEpoch", "isr", "elr",
                 "lastKnownElr", "replicas", "adding", "removing", "recovery"]
STATE_COLOURS = {"active": "#3a9d5d", "controlled shutdown": "#e0a526", "fenced": "#d0533f",
                 "unregistered": "#b9b9b9"}


def e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _ms(t) -> int | None:
    if t is None:
        return None
    if isinstance(t, dt.datetime):
        return int(t.timestamp() * 1000)
    return int(t)


def _iso(ms) -> str:
    if ms is None:
        return "-"
    if isinstance(ms, dt.datetime):
        ms = _ms(ms)
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ids(xs) -> str:
    return ",".join(map(str, xs)) if xs else "-"


def _millis(col) -> np.ndarray:
    """Epoch ms of a timestamp column, nulls as -1."""
    return np.asarray(pc.fill_null(pc.cast(pc.cast(col, TS), pa.int64()), -1000), np.int64) // 1000


def embed_json(doc) -> str:
    """JSON safe inside ``<script type="application/json">``: no ``<``, ``>`` or ``&`` left to end the element."""
    s = json.dumps(doc, separators=(",", ":"), default=str)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ------------------------------------------------------------------------------------------- the data
def time_range(tables: dict, result: AuditResult) -> tuple[int, int]:
    """(first, last) epoch ms the page draws: from the first record's time to the audited point."""
    lo, hi = [], []
    for name, col in (("record_times", "timestamp"), (catalog.BROKER_STATE_HISTORY.name, "timestamp"),
                      (catalog.PARTITION_STATE_HISTORY.name, "valid_from_timestamp")):
        t = tables.get(name)
        if t is not None and t.num_rows:
            ms = _millis(t.column(col))
            ms = ms[ms >= 0]
            if len(ms):
                lo.append(int(ms.min()))
                hi.append(int(ms.max()))
    end = _ms(result.at_time)
    first = min(lo) if lo else (end or 0)
    last = end if end is not None else (max(hi) if hi else first)
    return first, max(last, first + 1)


def broker_intervals(brokers: pa.Table, end_ms: int, at_offset: int) -> tuple[dict, list]:
    """{broker: [(from ms, to ms, state, offset)]} from ``broker_state_history`` (state: active,
    controlled shutdown, fenced, unregistered), and the restarts: ``(broker, ms, offset, unclean)`` for every
    registration of a new incarnation after an earlier one (unclean: the broker was not in controlled
    shutdown, nor unregistered, just before it)."""
    b = brokers.filter(pc.less_equal(brokers.column("offset"), at_offset)).sort_by(
        [("broker_id", "ascending"), ("offset", "ascending")])
    rows = b.select(["broker_id", "offset", "timestamp", "event", "registered", "fenced", "in_controlled_shutdown",
                     "incarnation_id"]).to_pylist()
    out: dict[int, list] = {}
    restarts = []
    last: dict[int, dict] = {}
    for r in rows:
        bid = r["broker_id"]
        if not r["registered"]:
            state = "unregistered"
        elif r["in_controlled_shutdown"]:
            state = "controlled shutdown"
        elif r["fenced"]:
            state = "fenced"
        else:
            state = "active"
        ms = _ms(r["timestamp"])
        prev = last.get(bid)
        if r["event"] == "REGISTER_BROKER_RECORD" and prev is not None and prev["incarnation_id"] != r["incarnation_id"]:
            before = out[bid][-1][2] if out.get(bid) else None
            restarts.append((bid, ms, r["offset"], before not in ("controlled shutdown", "unregistered")))
        ivs = out.setdefault(bid, [])
        if ivs:
            ivs[-1][1] = ms
        if ivs and ivs[-1][2] == state:
            ivs[-1][1] = end_ms
        else:
            ivs.append([ms, end_ms, state, r["offset"]])
        last[bid] = r
    return out, restarts


def _effective_min_isr(h: pa.Table, topics: pa.Table) -> np.ndarray:
    """Each history row's topic's effective min ISR as of the row's offset (the last topic config row at or
    before it; 1 when none)."""
    if not h.num_rows:
        return np.zeros(0, np.int64)
    t = topics.filter(pc.invert(pc.is_null(topics.column("effective_min_isr"))))
    if not t.num_rows:
        return np.ones(h.num_rows, np.int64)
    uniq = pc.unique(pa.concat_arrays([pc.cast(t.column("topic_id"), pa.string()).combine_chunks(),
                                       pc.cast(h.column("topic_id"), pa.string()).combine_chunks()]))
    ct = np.asarray(pc.index_in(t.column("topic_id"), value_set=uniq), np.int64)
    ch = np.asarray(pc.index_in(h.column("topic_id"), value_set=uniq), np.int64)
    ot = np.asarray(t.column("offset"), np.int64)
    oh = np.asarray(h.column("offset"), np.int64)
    span = int(max(ot.max(), oh.max())) + 2
    kt, kh = ct * span + ot, ch * span + oh  # topics x offsets stays far below 2**63 for any real log
    order = np.argsort(kt, kind="stable")
    kt, vals = kt[order], np.asarray(t.column("effective_min_isr"), np.int64)[order]
    pos = np.searchsorted(kt, kh, side="right") - 1
    ok = pos >= 0
    same = np.zeros(len(kh), bool)
    same[ok] = ct[order][pos[ok]] == ch[ok]
    return np.where(same, vals[np.clip(pos, 0, None)], 1)


def _step(start: np.ndarray, end: np.ndarray, lo: int, hi: int, points: int) -> list[tuple[int, int]]:
    """The count of intervals [start, end) open over time (end -1: still open), as ``points`` buckets of
    [lo, hi] each holding the largest count inside it (no peak is lost to the drawing): [(bucket start ms, n)]."""
    w = max(1, -(-(hi - lo) // points))
    edges = lo + w * np.arange(points, dtype=np.int64)
    if not len(start):
        return [(int(x), 0) for x in edges]
    t = np.concatenate([start, end[end >= 0]])
    d = np.concatenate([np.ones(len(start), np.int64), -np.ones(int((end >= 0).sum()), np.int64)])
    order = np.argsort(t, kind="stable")
    t, d = t[order], d[order]
    uniq, first = np.unique(t, return_index=True)
    level = np.cumsum(d)[np.r_[first[1:] - 1, len(t) - 1]] if len(t) else np.zeros(0, np.int64)
    at = np.searchsorted(uniq, edges, side="right") - 1
    carried = np.where(at >= 0, level[np.clip(at, 0, None)], 0)
    inside = (uniq >= lo) & (uniq <= hi)
    b = np.clip((uniq[inside] - lo) // w, 0, points - 1)
    peak = carried.copy()
    np.maximum.at(peak, b, level[inside])
    return list(zip(edges.tolist(), peak.tolist()))


def availability_series(tables: dict, lo: int, hi: int, at_offset: int, points: int = PLOT_POINTS) -> dict:
    """Under-min-ISR and offline partitions over time, from ``partition_state_history`` and the topics'
    effective min ISR: each history row is a state from its valid-from to its valid-to time."""
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    h = h.filter(pc.less_equal(h.column("offset"), at_offset))
    if "orphan" in h.column_names:
        h = h.filter(pc.invert(pc.fill_null(h.column("orphan"), False)))
    h = h.filter(pc.invert(pc.fill_null(h.column("deleted"), False)))
    start = _millis(h.column("valid_from_timestamp"))
    end = _millis(h.column("valid_to_timestamp"))
    vt = np.asarray(pc.fill_null(h.column("valid_to_offset"), -1), np.int64)
    end = np.where((vt < 0) | (vt > at_offset), -1, end)  # open at the audited point
    isr = np.asarray(pc.fill_null(pc.list_value_length(h.column("isr")), 0), np.int64)
    mins = _effective_min_isr(h, tables[catalog.TOPIC_CONFIG_HISTORY.name])
    offline = np.asarray(pc.fill_null(h.column("leader"), -1), np.int64) < 0
    under = isr < mins
    return {"under": _step(start[under], end[under], lo, hi, points),
            "offline": _step(start[offline], end[offline], lo, hi, points)}


def changes_per_bin(tables: dict, lo: int, hi: int, at_offset: int) -> tuple[int, list[tuple[int, int]]]:
    """(bin width in minutes, [(bin start ms, partition changes)]): at most 240 bins of whole minutes."""
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    ms = _millis(h.filter(pc.less_equal(h.column("offset"), at_offset)).column("valid_from_timestamp"))
    minutes = max(1, -(-(hi - lo) // (60_000 * 240)))
    w = 60_000 * minutes
    start = lo - lo % w
    n = max(1, int(-(-(hi + 1 - start) // w)))
    ms = ms[(ms >= start) & (ms <= hi)]
    counts_ = np.bincount((ms - start) // w, minlength=n)[:n] if len(ms) else np.zeros(n, np.int64)
    return minutes, [(start + i * w, int(c)) for i, c in enumerate(counts_)]


def records_per_type(tables: dict, at_offset: int) -> list[tuple[str, int]]:
    rt = tables.get("record_times")
    if rt is None or not rt.num_rows:
        return []
    rt = rt.filter(pc.less_equal(rt.column("offset"), at_offset))
    vc = pc.value_counts(rt.column("record_type")).to_pylist()
    return sorted(((r["values"] or "?", r["counts"]) for r in vc), key=lambda x: -x[1])


def incident_partitions(result: AuditResult, limit: int = MAX_TIMELINES) -> tuple[list[tuple[str, int]], int]:
    """(the partitions of incidents, most severe incident first, at most ``limit``; how many there are)."""
    v = result.violations
    v = v.filter(pc.and_(pc.invert(pc.is_null(v.column("incident_id"))), pc.invert(pc.is_null(v.column("partition")))))
    if not v.num_rows:
        return [], 0
    order = {i: n for n, i in enumerate(result.incidents.column("incident_id").to_pylist())}
    inc = np.asarray([order.get(i, len(order)) for i in v.column("incident_id").to_pylist()], np.int64)
    keyed = v.select(["topic", "partition", "first_offset"]).append_column("_i", pa.array(inc))
    keyed = keyed.sort_by([("_i", "ascending"), ("first_offset", "ascending")])
    seen, out = set(), []
    for t, p in zip(keyed.column("topic").to_pylist(), keyed.column("partition").to_pylist()):
        if t is not None and (t, p) not in seen:
            seen.add((t, p))
            out.append((t, p))
    return out[:limit], len(out)


def _row_list(r: dict) -> list:
    from_ms = _ms(r["valid_from_timestamp"])
    trig = "deleted" if r.get("deleted") else (r.get("trigger") or
                                               ("created" if r["record_type"] == "PARTITION_RECORD" else "change"))
    return [r["offset"], from_ms, trig, r["leader"], r["leader_epoch"], r["partition_epoch"], r["isr"] or [],
            r["eligible_leader_replicas"] or [], r["last_known_elr"] or [], r["replicas"] or [],
            r["adding_replicas"] or [], r["removing_replicas"] or [], r["leader_recovery_state"]]


def partition_index(tables: dict, result: AuditResult, at_offset: int, max_rows: int = MAX_INDEX_ROWS) -> dict:
    """Every partition's history rows, compact (``INDEX_COLUMNS``), for the search box: whole partitions up to
    ``max_rows`` rows, those with findings first, then by topic name and partition."""
    h = tables[catalog.PARTITION_STATE_HISTORY.name]
    h = h.filter(pc.less_equal(h.column("offset"), at_offset))
    if "orphan" in h.column_names:
        h = h.filter(pc.invert(pc.fill_null(h.column("orphan"), False)))
    topics = tables[catalog.TOPIC_CONFIG_HISTORY.name].sort_by([("offset", "ascending")])
    name_of = dict(zip(topics.column("topic_id").to_pylist(), topics.column("topic_name").to_pylist()))
    ids = pc.unique(h.column("topic_id"))
    id_list = ids.to_pylist()
    code = np.asarray(pc.index_in(h.column("topic_id"), value_set=ids), np.int64)
    part = np.asarray(h.column("partition_id"), np.int64)
    key = code * (1 << 32) + part
    keys, inverse, sizes = np.unique(key, return_inverse=True, return_counts=True)
    total_rows = int(h.num_rows)
    # priority: partitions with findings, then by topic name, partition
    v = result.violations.filter(pc.invert(pc.is_null(result.violations.column("partition"))))
    flagged = set()
    if v.num_rows:
        vcode = np.asarray(pc.fill_null(pc.index_in(v.column("topic_id"), value_set=ids), -1), np.int64)
        vkey = vcode * (1 << 32) + np.asarray(v.column("partition"), np.int64)
        flagged = np.isin(keys, vkey[vcode >= 0])
    else:
        flagged = np.zeros(len(keys), bool)
    names = np.asarray([name_of.get(id_list[int(k >> 32)]) or id_list[int(k >> 32)] for k in keys.tolist()], object)
    order = np.lexsort((keys & 0xFFFFFFFF, names, ~flagged))
    fits = np.cumsum(sizes[order]) <= max_rows
    chosen = order[fits] if fits.all() else order[:int(np.argmin(fits))]
    keep = np.isin(inverse, chosen)
    sub = h.filter(pa.array(keep))
    sub = sub.append_column("_k", pa.array(key[keep])).sort_by([("_k", "ascending"), ("offset", "ascending")])
    parts: dict[str, list] = {}
    for r in sub.drop_columns(["_k"]).to_pylist():
        name = name_of.get(r["topic_id"]) or r["topic_id"]
        parts.setdefault(f"{name}-{r['partition_id']}", []).append(_row_list(r))
    return {"columns": INDEX_COLUMNS, "partitions": parts, "totalPartitions": int(len(keys)),
            "indexedPartitions": len(parts), "totalRows": total_rows, "indexedRows": int(sub.num_rows),
            "maxRows": max_rows, "complete": len(parts) == len(keys)}


# ----------------------------------------------------------------------------------------------- SVG
W, LEFT, RIGHT = 960, 110, 20


def _x(ms: int, lo: int, hi: int) -> float:
    return round(LEFT + (ms - lo) / (hi - lo) * (W - LEFT - RIGHT), 1)


def _time_label(ms: int, span: int) -> str:
    t = dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc)
    return t.strftime("%m-%d %H:%M" if span > 86_400_000 else "%H:%M:%S")


def _axis(lo: int, hi: int, y: int, top: int) -> list[str]:
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}" class="axis"/>']
    for i in range(6):
        ms = lo + (hi - lo) * i // 5
        x = _x(ms, lo, hi)
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{y}" class="grid"/>')
        out.append(f'<text x="{x}" y="{y + 14}" class="tick" text-anchor="middle">{e(_time_label(ms, hi - lo))}</text>')
    return out


def broker_svg(intervals: dict, restarts: list, gaps: list, elections: list, lo: int, hi: int) -> str:
    bids = sorted(intervals)[:MAX_BROKERS]
    row, top = 22, 10
    height = top + row * len(bids) + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="broker-timeline" width="{W}" height="{height}" '
           f'viewBox="0 0 {W} {height}" role="img" aria-label="broker timeline">']
    for a, b, why in gaps:
        x1, x2 = _x(max(a, lo), lo, hi), _x(min(b, hi), lo, hi)
        out.append(f'<rect x="{x1}" y="{top}" width="{max(1.0, x2 - x1)}" height="{row * len(bids)}" class="gap">'
                   f'<title>{e(why)}</title></rect>')
    for i, bid in enumerate(bids):
        y = top + i * row
        out.append(f'<text x="{LEFT - 8}" y="{y + 15}" text-anchor="end" class="label">broker {e(bid)}</text>')
        for a, b, state, off in intervals[bid]:
            a, b = max(a, lo), min(b, hi)
            if b < a:
                continue
            x1, x2 = _x(a, lo, hi), _x(b, lo, hi)
            out.append(f'<rect x="{x1}" y="{y + 3}" width="{max(0.8, round(x2 - x1, 1))}" height="{row - 6}" '
                       f'fill="{STATE_COLOURS[state]}" data-state="{e(state)}"><title>broker {e(bid)}: {e(state)} '
                       f'from {e(_iso(a))} (offset {e(off)}) to {e(_iso(b))}</title></rect>')
    for bid, ms, off, unclean in restarts:
        if bid not in bids:
            continue
        y, x = top + bids.index(bid) * row, _x(ms, lo, hi)
        kind = "unclean restart" if unclean else "restart"
        out.append(f'<path d="M{x} {y + 1} l5 -0 l-5 10 l-5 -10 z" class="{"unclean" if unclean else "restart"}">'
                   f'<title>broker {e(bid)}: {kind} (new incarnation registered at offset {e(off)}, {e(_iso(ms))})'
                   f'</title></path>')
    for ms, off, why in elections:
        x = _x(ms, lo, hi)
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{top + row * len(bids)}" class="election">'
                   f'<title>{e(why)}</title></line>')
    out += _axis(lo, hi, top + row * len(bids) + 4, top)
    out.append("</svg>")
    return "".join(out)


def step_svg(series: list[tuple[str, str, list]], lo: int, hi: int, ident: str, label: str) -> str:
    """Step lines: series = [(name, colour, [(ms, n)])]."""
    top, h = 10, 150
    peak = max([n for _, _, s in series for _, n in s] + [1])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="{e(ident)}" width="{W}" height="{top + h + 40}" '
           f'viewBox="0 0 {W} {top + h + 40}" role="img" aria-label="{e(label)}">']
    out.append(f'<text x="{LEFT - 8}" y="{top + 10}" text-anchor="end" class="tick">{peak}</text>')
    out.append(f'<text x="{LEFT - 8}" y="{top + h}" text-anchor="end" class="tick">0</text>')
    for k, (name, colour, pts) in enumerate(series):
        d = []
        for i, (ms, n) in enumerate(pts):
            x = _x(ms, lo, hi)
            y = round(top + h - n / peak * h, 1)
            x2 = _x(pts[i + 1][0], lo, hi) if i + 1 < len(pts) else W - RIGHT
            d.append(f"{x},{y} {x2},{y}")
        out.append(f'<polyline points="{" ".join(d)}" fill="none" stroke="{colour}" stroke-width="1.6">'
                   f'<title>{e(name)} (at most {max([n for _, n in pts] + [0])})</title></polyline>')
        out.append(f'<text x="{LEFT + 10 + 220 * k}" y="{top + 12}" fill="{colour}" class="label">{e(name)}</text>')
    out += _axis(lo, hi, top + h, top)
    out.append("</svg>")
    return "".join(out)


def bars_svg(bins: list[tuple[int, int]], lo: int, hi: int, minutes: int) -> str:
    top, h = 10, 120
    peak = max([n for _, n in bins] + [1])
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="changes-per-minute" width="{W}" height="{top + h + 40}" '
           f'viewBox="0 0 {W} {top + h + 40}" role="img" aria-label="partition changes per {minutes} min">',
           f'<text x="{LEFT - 8}" y="{top + 10}" text-anchor="end" class="tick">{peak}</text>']
    w = 60_000 * minutes
    for ms, n in bins:
        if not n:
            continue
        x1, x2 = _x(max(ms, lo), lo, hi), _x(min(ms + w, hi), lo, hi)
        bh = round(n / peak * h, 1)
        out.append(f'<rect x="{x1}" y="{round(top + h - bh, 1)}" width="{max(1.0, round(x2 - x1 - 1, 1))}" height="{bh}" '
                   f'class="bar"><title>{n} change(s) from {e(_iso(ms))}</title></rect>')
    out += _axis(lo, hi, top + h, top)
    out.append("</svg>")
    return "".join(out)


def types_svg(types: list[tuple[str, int]]) -> str:
    row = 18
    height = row * len(types) + 10
    peak = max([n for _, n in types] + [1])
    left = 330
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" id="records-per-type" width="{W}" height="{height}" '
           f'viewBox="0 0 {W} {height}" role="img" aria-label="records per type">']
    for i, (name, n) in enumerate(types):
        y = 5 + i * row
        bw = round(n / peak * (W - left - 90), 1)
        out.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end" class="label">{e(name)}</text>'
                   f'<rect x="{left}" y="{y + 2}" width="{max(1.0, bw)}" height="{row - 5}" class="bar">'
                   f'<title>{e(name)}: {n}</title></rect>'
                   f'<text x="{left + bw + 6}" y="{y + 13}" class="tick">{n}</text>')
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------------------------------------- HTML
CSS = """tr.bad td{background:#fde8e8}

body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1000px;padding:16px;color:#222}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0;font-size:12.5px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f4f4f4}code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.sev{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px;font-weight:600}
.ERROR{background:#c0392b}.WARN{background:#d68910}.INFO{background:#5d6d7e}
.verdict{border:2px solid #aaa;border-radius:6px;padding:10px 14px;margin:10px 0}
.verdict.fail{border-color:#c0392b;background:#fdf2f1}.verdict.pass{border-color:#3a9d5d;background:#f1faf4}
details{border:1px solid #ddd;border-radius:4px;margin:6px 0;padding:4px 8px}summary{cursor:pointer}
.note{color:#666;font-size:12.5px}.axis{stroke:#888}.grid{stroke:#eee}.tick{font-size:10px;fill:#555}
.label{font-size:11px;fill:#333}.bar{fill:#4a78b5}.gap{fill:#9b59b6;opacity:.18}.election{stroke:#8e44ad;stroke-width:1.5;stroke-dasharray:3 2}
.unclean{fill:#000}.restart{fill:#fff;stroke:#000}.legend span{display:inline-block;margin-right:14px}
.sw{display:inline-block;width:12px;height:10px;margin-right:4px;vertical-align:middle}
#search-box{width:320px;padding:4px}svg{max-width:100%;height:auto}
tr.changed td.isr{background:#fff6d6}
"""

JS = """
(function () {
  var el = document.getElementById('partition-index');
  var index = JSON.parse(el.textContent);
  var keys = Object.keys(index.partitions);
  var cols = index.columns;
  var box = document.getElementById('search-box');
  var out = document.getElementById('search-results');
  function iso(ms) { return ms == null ? '-' : new Date(ms).toISOString(); }
  function ids(xs) { return xs && xs.length ? xs.join(',') : '-'; }
  function cell(tr, text, cls) {
    var td = document.createElement('td'); td.textContent = text; if (cls) td.className = cls; tr.appendChild(td);
  }
  function table(name, rows) {
    var wrap = document.createElement('div');
    wrap.className = 'search-partition';
    wrap.setAttribute('data-partition', name);
    var h = document.createElement('h3'); h.textContent = name + ': ' + rows.length + ' change(s)'; wrap.appendChild(h);
    var t = document.createElement('table'); var hr = document.createElement('tr');
    ['offset', 'time', 'trigger', 'leader', 'epoch (L/P)', 'ISR', 'ELR', 'LastKnownElr', 'replicas',
     'adding/removing', 'recovery'].forEach(function (c) {
      var th = document.createElement('th'); th.textContent = c; hr.appendChild(th); });
    t.appendChild(hr);
    rows.forEach(function (r) {
      var tr = document.createElement('tr');
      cell(tr, String(r[0])); cell(tr, iso(r[1])); cell(tr, r[2]); cell(tr, String(r[3]));
      cell(tr, r[4] + '/' + r[5]); cell(tr, ids(r[6]), 'isr'); cell(tr, ids(r[7])); cell(tr, ids(r[8]));
      cell(tr, ids(r[9])); cell(tr, ids(r[10]) + '/' + ids(r[11]));
      cell(tr, r[12] === 0 ? 'RECOVERED' : r[12] === 1 ? 'RECOVERING' : String(r[12]));
      t.appendChild(tr);
    });
    wrap.appendChild(t);
    return wrap;
  }
  function say(text) { var p = document.createElement('p'); p.className = 'note'; p.textContent = text; out.appendChild(p); }
  function search() {
    var q = box.value.trim();
    while (out.firstChild) out.removeChild(out.firstChild);
    if (!q) return;
    var hits = index.partitions[q] ? [q] : keys.filter(function (k) { return k.indexOf(q) !== -1; });
    if (!hits.length) {
      say('No partition matching "' + q + '" in this report\\'s index' + (index.complete ? '.' :
          ' (it holds ' + index.indexedPartitions + ' of ' + index.totalPartitions + ' partitions): run ' +
          'kraft-audit timeline --topic TOPIC --partition N with the same input.'));
      return;
    }
    if (hits.length > 20) say(hits.length + ' partitions match; the first 20 are shown. Type more of the name.');
    hits.slice(0, 20).forEach(function (k) { out.appendChild(table(k, index.partitions[k])); });
  }
  box.addEventListener('input', search);
  document.getElementById('search-form').addEventListener('submit', function (ev) { ev.preventDefault(); search(); });
})();
"""


def _sev(s) -> str:
    return f'<span class="sev {e(s)}">{e(s)}</span>'


def _findings_table(rows: list[dict]) -> str:
    out = ["<table><tr><th>severity</th><th>code</th><th>partition</th><th>offsets</th><th>from</th>"
           "<th>duration</th><th>explanation</th></tr>"]
    for r in rows:
        where = (f"{r['topic']}-{r['partition']}" if r.get("partition") is not None else (r.get("topic") or "cluster"))
        offs = f"{r['first_offset']}-{r['last_offset'] if r['last_offset'] is not None else 'open'}"
        dur = f"{r['duration_ms'] / 1000:.1f} s" if r.get("duration_ms") is not None else "-"
        out.append(f"<tr class=\"finding\" data-code=\"{e(r['code'])}\"><td>{_sev(r['severity'])}</td><td>{e(r['code'])}</td>"
                   f"<td class=\"mono\">{e(where)}</td><td>{e(offs)}</td><td>{e(_iso(r['first_time']))}</td>"
                   f"<td>{e(dur)}</td><td>{e(r['explanation'])}</td></tr>")
    out.append("</table>")
    return "".join(out)


def _incidents_html(result: AuditResult) -> str:
    inc = result.incidents
    if inc is None or not inc.num_rows:
        return "<p>No incidents.</p>"
    v = result.violations.filter(pc.invert(pc.is_null(result.violations.column("incident_id"))))
    shown = inc.slice(0, MAX_INCIDENTS).to_pylist()
    ids = pa.array([r["incident_id"] for r in shown], pa.string())
    v = v.filter(pc.is_in(v.column("incident_id"), value_set=ids))
    rank = pc.fill_null(pc.index_in(v.column("severity"), pa.array(list(RANK))), len(RANK))
    v = v.append_column("_i", pc.index_in(v.column("incident_id"), value_set=ids)).append_column("_r", rank)
    v = v.sort_by([("_i", "ascending"), ("_r", "ascending"), ("first_offset", "ascending")])
    idx = np.asarray(v.column("_i"), np.int64)
    starts = np.searchsorted(idx, np.arange(len(shown)))
    ends = np.searchsorted(idx, np.arange(len(shown)), side="right")
    out = []
    for k, r in enumerate(shown):
        a, b = int(starts[k]), int(ends[k])
        ev = v.slice(a, min(b - a, MAX_EVIDENCE)).drop_columns(["_i", "_r"]).to_pylist()
        span = f"offsets {r['first_offset']}-{r['last_offset']}" if r["last_offset"] is not None else \
            f"from offset {r['first_offset']}, still going on"
        more = (f'<p class="note">{b - a - MAX_EVIDENCE} more findings: <code>kraft-audit audit --json --all</code>, '
                f'or the violations table.</p>') if b - a > MAX_EVIDENCE else ""
        out.append(f'<details class="incident" data-incident="{e(r["incident_id"])}" data-cause="{e(r["cause"])}">'
                   f'<summary>{_sev(r["severity"])} <b>{e(r["cause"])}</b> <code>{e(r["incident_id"])}</code> '
                   f'{e(_iso(r["first_time"]))} ({e(span)}): {e(r["title"])}; {e(r["findings"])} finding(s): '
                   f'{e(", ".join(r["codes"] or []))}</summary>'
                   f'<p>Brokers: {e(_ids(r["brokers"]))}; partitions affected: {e(r["partitions"])}.</p>'
                   f'{_findings_table(ev)}{more}</details>')
    if inc.num_rows > MAX_INCIDENTS:
        out.append(f'<p class="note">{inc.num_rows - MAX_INCIDENTS} more incidents: <code>kraft-audit audit --json '
                   f'--all</code>, or the incidents table.</p>')
    return "".join(out)


def _timeline_table(name: str, rows: list[dict]) -> str:
    out = [f'<div class="partition-timeline" data-partition="{e(name)}"><h3>{e(name)}: {len(rows)} change(s)</h3>'
           "<table><tr><th>offset</th><th>time</th><th>trigger</th><th>leader</th><th>epoch (L/P)</th><th>ISR</th>"
           "<th>ELR</th><th>LastKnownElr</th><th>replicas</th><th>adding/removing</th><th>recovery</th></tr>"]
    prev = None
    for r in rows:
        x = _row_list(r)
        changed = prev is not None and x[6] != prev[6]
        rec = {0: "RECOVERED", 1: "RECOVERING"}.get(x[12], str(x[12]))
        out.append(f'<tr class="change{" changed" if changed else ""}"><td>{e(x[0])}</td><td>{e(_iso(x[1]))}</td>'
                   f'<td>{e(x[2])}</td><td>{e(x[3])}</td><td>{e(x[4])}/{e(x[5])}</td><td class="isr">{e(_ids(x[6]))}</td>'
                   f'<td>{e(_ids(x[7]))}</td><td>{e(_ids(x[8]))}</td><td>{e(_ids(x[9]))}</td>'
                   f'<td>{e(_ids(x[10]))}/{e(_ids(x[11]))}</td><td>{e(rec)}</td></tr>')
        prev = x
    out.append("</table></div>")
    return "".join(out)


def _recovery_html(result: AuditResult, plan: dict | None) -> str:
    c = result.candidates
    if not c.num_rows:
        return f"<p>No leaderless partition at offset {e(result.at_offset)}: nothing to recover.</p>"
    rows = c.to_pylist()
    out = [f"<p>Leaderless partitions at offset {e(result.at_offset)}; recovery strategy {e(result.strategy)}.</p>",
           "<table id=\"candidates\"><tr><th>partition</th><th>broker</th><th>rank</th><th>recommended</th><th>kind</th>"
           "<th>ISR/ELR/LastKnownElr</th><th>alive</th><th>last written leader epoch</th><th>log end offset</th>"
           "<th>est. records lost</th><th>excluded</th><th>note</th></tr>"]
    for r in rows[:500]:
        member = "/".join("yes" if r[k] else "no" for k in ("in_isr", "in_elr", "in_last_known_elr"))
        out.append(f"<tr><td class=\"mono\">{e(r['topic'] or r['topic_id'])}-{e(r['partition'])}</td><td>{e(r['broker'])}</td>"
                   f"<td>{e(r['rank'])}</td><td>{'yes' if r['recommended'] else ''}</td><td>{e(r['kind'])}</td>"
                   f"<td>{e(member)}</td><td>{'yes' if r['alive_now'] else 'no'}</td>"
                   f"<td>{e(r['last_written_leader_epoch'])}</td><td>{e(r['log_end_offset'])}</td>"
                   f"<td>{e(r['estimated_records_lost'])}</td><td>{e(r['excluded_reason'])}</td><td>{e(r['note'])}</td></tr>")
    out.append("</table>")
    if len(rows) > 500:
        out.append(f'<p class="note">{len(rows) - 500} more candidate rows: <code>kraft-audit audit --json --all</code>.</p>')
    if plan is not None:
        out.append(f"<h3>The plan: <code>kraft-audit plan --election-type {e(plan['electionType'])}</code></h3>")
        if plan["commands"]:
            out.append("<p>Write the files with <code>kraft-audit plan ... -o DIR</code>, then run in this order "
                       "from DIR:</p><pre class=\"mono\" id=\"plan-commands\">"
                       + "\n".join(e(c) for c in plan["commands"]) + "</pre>")
        else:
            out.append("<p>Nothing to run.</p>")
        if plan["partitions"]:
            out.append("<table id=\"plan-steps\"><tr><th>partition</th><th>leader now</th><th>new leader</th>"
                       "<th>step</th><th>estimated records lost</th><th>caveat</th></tr>")
            for p in plan["partitions"][:500]:
                for s in p.get("steps") or []:
                    lost = "unknown" if s["estimatedRecordsLost"] is None else s["estimatedRecordsLost"]
                    out.append(f"<tr><td class=\"mono\">{e(p['topic'])}-{e(p['partition'])}</td><td>{e(p['leader'])}</td>"
                               f"<td>{e(p['newLeader'])}</td><td>{e(s['step'])}</td><td>{e(lost)}</td>"
                               f"<td>{e(p.get('caveat') or '')}</td></tr>")
            out.append("</table>")
        for s in plan["skipped"][:200]:
            out.append(f"<p class=\"note\">Left out: {e(s['topic'])}-{e(s['partition'])}: {e(s['reason'])}</p>")
    return "".join(out)


def _inputs_html(source: dict, result: AuditResult) -> str:
    out = ["<table id=\"inputs\">"]
    for k, v in source.get("facts", []):
        out.append(f"<tr><th>{e(k)}</th><td class=\"mono\">{e(v)}</td></tr>")
    out.append(f"<tr><th>audited through</th><td>offset {e(result.at_offset)} ({e(_iso(result.at_time))})</td></tr>")
    spans = source.get("quarantined") or []
    q = sum(s["length"] for s in spans)
    out.append(f"<tr><th>quarantined</th><td>{e(q)} bytes in {len(spans)} span(s) not replayed</td></tr>")
    notes = source.get("notes") or []
    if notes:  # how the replay read the log: what a reader must know before trusting the findings
        items = "".join(f"<li>{e(n)}</li>" for n in notes)
        out.append(f"<tr><th>how the log was read</th><td><ul id=\"replay-notes\">{items}</ul></td></tr>")
    out.append("</table>")
    files = source.get("files") or []
    if files:
        size = "bytes" if "bytes" in files[0] else "records"
        out.append("<details><summary>Files read (" + str(len(files)) + ")</summary><table id=\"files\"><tr><th>file</th>"
                   f"<th>kind</th><th>{size}</th></tr>")
        for f in files[:2000]:
            out.append(f"<tr><td class=\"mono\">{e(f['file'])}</td><td>{e(f['kind'])}</td><td>{e(f.get(size))}</td></tr>")
        if len(files) > 2000:
            out.append(f"<tr><td colspan=\"3\">... {len(files) - 2000} more</td></tr>")
        out.append("</table></details>")
    if spans:
        out.append("<table id=\"quarantine\"><tr><th>file</th><th>position</th><th>bytes</th><th>reason</th></tr>")
        for s in spans[:500]:
            out.append(f"<tr><td class=\"mono\">{e(s['file'])}</td><td>{e(s['position'])}</td><td>{e(s['length'])}</td>"
                       f"<td>{e(s['message'])}</td></tr>")
        out.append("</table>")
    return "".join(out)


def _quality_html(quality: pa.Table | None) -> str:
    """The latest ``kraft-audit quality`` run of the cluster (gold data_quality), failed expectations first."""
    if quality is None or not quality.num_rows:
        return ('<p class="note" id="quality-none">No data-quality results: the Great Expectations suites run on the '
                "lake's tables, <code>kraft-audit quality --cluster NAME</code>, after ingest and replay.</p>")
    rows = sorted(quality.to_pylist(), key=lambda r: (bool(r["success"]), r["table"] or "", r["expectation"] or ""))
    met = sum(1 for r in rows if r["success"])
    when = rows[0].get("checked_at")
    out = [f'<p id="quality-summary">{met} of {len(rows)} expectations met (checked {e(_iso(_ms(when)))}).</p>',
           "<table><tr><th>result</th><th>table</th><th>expectation</th><th>severity</th><th>unexpected</th>"
           "<th>sample</th></tr>"]
    for r in rows:
        ok = "met" if r["success"] else "FAILED"
        out.append(f'<tr class="{"ok" if r["success"] else "bad"}"><td>{ok}</td><td>{e(r["table"])}</td>'
                   f'<td>{e(r["expectation"])} {e(r["kwargs"] or "")}</td><td>{e(r["severity"])}</td>'
                   f'<td>{e(r["unexpected_count"])}</td><td>{e((r["unexpected_sample"] or "")[:200])}</td></tr>')
    out.append("</table>")
    return "".join(out)


def render(tables: dict, result: AuditResult, *, name: str, fail_on: str, source: dict, version: str,
           plan: dict | None, timelines: list[tuple[str, list[dict]]], timelines_total: int,
           max_index_rows: int = MAX_INDEX_ROWS, quality: pa.Table | None = None) -> str:
    """The report.  ``timelines``: (``topic-partition``, its history rows as ``kraft-audit timeline`` reads them)
    for the partitions of :func:`incident_partitions`; ``source``: ``facts`` [(label, value)], ``files`` [{file,
    kind, bytes or records}], ``quarantined`` [{file, position, length, message}]."""
    at = result.at_offset
    lo, hi = time_range(tables, result)
    worst = result.worst()
    fails = result.fails(fail_on)
    code = 1 if fails else 0
    intervals, restarts = broker_intervals(tables[catalog.BROKER_STATE_HISTORY.name], hi, at)
    v = result.violations
    gaps, elections = [], []
    for r in v.filter(pc.is_in(v.column("code"), pa.array(["METADATA_GAP", "CONTROLLER_ELECTION"]))).to_pylist():
        if r["code"] == "METADATA_GAP":
            end = _ms(r["last_time"]) if r["last_time"] is not None else hi
            gaps.append((_ms(r["first_time"]), end, f"metadata gap: {r['explanation']}"))
        else:
            elections.append((_ms(r["first_time"]), r["first_offset"], f"controller election: {r['explanation']}"))
    avail = availability_series(tables, lo, hi, at)
    minutes, bins = changes_per_bin(tables, lo, hi, at)
    types = records_per_type(tables, at)
    index = partition_index(tables, result, at, max_index_rows)
    outside, n_outside = _ordered_findings(result, "WARN", MAX_OUTSIDE, outside=True)
    verdict = (f"Worst severity <b>{e(worst or 'none')}</b>; at <code>--fail-on {e(fail_on)}</code> "
               f"<code>kraft-audit audit</code> exits <b id=\"audit-exit-code\">{code}</b> "
               f"({'findings at or above the threshold' if fails else 'nothing at or above the threshold'}).")
    p = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="generator" content="{GENERATOR}">',
         '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
         'script-src \'unsafe-inline\'; img-src data:">',
         f"<title>kraft-audit report: {e(name)}</title><style>{CSS}</style></head><body>",
         f"<h1>kraft-audit report: {e(name)}</h1>",
         f'<p class="note">Through offset {e(at)} ({e(_iso(result.at_time))}); kraft-audit {e(version)}. '
         "This file loads nothing from the network.</p>",
         f'<div class="verdict {"fail" if fails else "pass"}" id="verdict">{verdict}<br><span class="note">'
         "<code>kraft-audit report</code> itself exits 0 once this file is written; the verdict is this line."
         "</span></div>",
         f'<h2 id="incidents">Incidents ({result.incidents.num_rows})</h2>',
         '<p class="note">Most severe first; open one to see its findings, the evidence.</p>',
         _incidents_html(result)]
    p.append(f"<h2>Findings outside incidents ({n_outside} at WARN or above)</h2>")
    p.append(_findings_table(outside) if outside else "<p>None.</p>")
    if n_outside > MAX_OUTSIDE:
        p.append(f'<p class="note">{n_outside - MAX_OUTSIDE} more: <code>kraft-audit audit --json --all</code>.</p>')
    p.append("<details><summary>All findings, counted</summary><table id=\"counts\"><tr><th>severity</th><th>code</th>"
             "<th>findings</th><th>partitions</th></tr>")
    for r in counts(result):
        p.append(f"<tr><td>{_sev(r['severity'])}</td><td>{e(r['code'])}</td><td>{r['findings']}</td>"
                 f"<td>{r['partitions']}</td></tr>")
    p.append("</table></details>")
    legend = "".join(f'<span><i class="sw" style="background:{c}"></i>{e(s)}</span>' for s, c in STATE_COLOURS.items())
    p += ["<h2>Brokers</h2>",
          f'<p class="legend">{legend}<span>▼ black: unclean restart (new incarnation, no controlled shutdown), '
          'white: restart</span><span><i class="sw" style="background:#9b59b6;opacity:.3"></i>metadata gap</span><span>┆ controller election</span></p>',
          broker_svg(intervals, restarts, gaps, elections, lo, hi)]
    if len(intervals) > MAX_BROKERS:
        p.append(f'<p class="note">The first {MAX_BROKERS} of {len(intervals)} brokers; '
                 "<code>kraft-audit timeline --broker N</code> for any other.</p>")
    p += ["<h2>Partitions over time</h2>",
          '<p class="note">Under min ISR: |ISR| below the topic\'s effective min ISR as of each change; offline: no '
          "leader. Each point is the most partitions at once within its slice of time.</p>",
          step_svg([("under min ISR", "#d68910", avail["under"]), ("offline", "#c0392b", avail["offline"])],
                   lo, hi, "availability", "under-min-ISR and offline partitions"),
          f"<h3>Partition changes per {minutes} minute{'s' if minutes > 1 else ''}</h3>",
          bars_svg(bins, lo, hi, minutes),
          "<h3>Records per type (log segments)</h3>", types_svg(types) if types else "<p>No segment records.</p>"]
    p.append(f"<h2>Partitions in incidents ({timelines_total})</h2>")
    p.append('<p class="note">Every change with its record offset and trigger, as <code>kraft-audit timeline</code> '
             "prints it; rows where the ISR changed are highlighted.</p>")
    p += [_timeline_table(n, rows) for n, rows in timelines]
    if timelines_total > len(timelines):
        p.append(f'<p class="note">{timelines_total - len(timelines)} more partitions in incidents: use the search '
                 "below or <code>kraft-audit timeline</code>.</p>")
    idx_note = (f"All {index['totalPartitions']} partitions ({index['totalRows']} changes) are in this file's index."
                if index["complete"] else
                f"This file's index holds {index['indexedPartitions']} of {index['totalPartitions']} partitions "
                f"({index['indexedRows']} of {index['totalRows']} changes, at most {index['maxRows']}: those with "
                "findings first); for any other run <code>kraft-audit timeline --topic T --partition N</code>.")
    p += ["<h2>Find a partition</h2>",
          '<form id="search-form"><input id="search-box" type="search" placeholder="topic-partition, e.g. payments-0" '
          'autocomplete="off"> <button type="submit">Show</button></form>',
          f'<p class="note" id="index-note">{idx_note}</p><div id="search-results"></div>',
          f"<h2>Recovery</h2>{_recovery_html(result, plan)}",
          f'<h2 id="quality">Data quality</h2>{_quality_html(quality)}',
          f"<h2>Inputs</h2>{_inputs_html(source, result)}",
          f'<p class="note">kraft-audit {e(version)}</p>',
          f'<script type="application/json" id="partition-index">{embed_json(index)}</script>',
          f"<script>{JS}</script></body></html>"]
    return "\n".join(p)
