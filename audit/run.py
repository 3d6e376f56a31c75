"""One audit of one cluster: silver tables in, gold rows and an operator's summary out.

The silver tables come from the lake (``kraft-audit replay``) or straight from a log directory
(:func:`audit.local.silver_tables`); either way this module only sees Arrow tables:

* :func:`truncate` cuts the tables at an offset, for an audit "as of" a point in the past;
* :func:`state_at` gives every partition's and broker's state at that point;
* :func:`audit` computes the ``violations`` and, for every leaderless partition, the
  ``recovery_candidates`` (KIP-966 unclean recovery over the replicas' log info);
* :func:`summary_text` / :func:`summary_json` say what an operator has to act on.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit import frames
from audit import incidents as I
from audit import loginfo
from audit import recovery
from audit.cluster_events import cluster_events
from audit.violations import ORDER, violations
from controller_core.codes import SEVERITIES  # most severe first
from controller_core import timelines
from controller_core.vector import fold
from lake import catalog

RANK = {s: i for i, s in enumerate(SEVERITIES)}  # lower is more severe
# the history columns the audit reads: not the replicas' log directories nor the triggers (timelines show them),
# a third of the history's memory at 1 M partitions
HISTORY_COLUMNS = tuple(c for c in catalog.PARTITION_STATE_HISTORY.schema.names
                        if c not in ("directories", "trigger", catalog.CLUSTER))
TS = pa.timestamp("us", tz="UTC")


@dataclass
class AuditResult:
    violations: pa.Table  # VIOLATION_SCHEMA, incident_id filled in
    candidates: pa.Table  # recovery.CANDIDATE_SCHEMA
    partitions: pa.Table  # recovery.PARTITION_SCHEMA + topic: every live partition at the audited point
    brokers: pa.Table  # recovery.BROKER_SCHEMA at the audited point
    at_offset: int
    at_time: dt.datetime | None
    strategy: str
    incidents: pa.Table = None  # incidents.INCIDENT_SCHEMA, most severe first

    def worst(self) -> str | None:
        sev = set(pc.unique(self.violations.column("severity")).to_pylist())  # not a string per finding
        return next((s for s in SEVERITIES if s in sev), None)

    def fails(self, fail_on: str) -> bool:
        worst = self.worst()
        return worst is not None and RANK[worst] <= RANK[fail_on]


# ------------------------------------------------------------------------------------ as of a point
def offset_at_time(tables: dict[str, pa.Table], at_us: int) -> int | None:
    """The last offset written at or before ``at_us`` (epoch us): of any log record when the tables
    carry ``record_times``, else of the timelines' rows."""
    rt = tables.get("record_times")
    if rt is not None and rt.num_rows:
        ok = pc.fill_null(pc.less_equal(pc.cast(rt.column("timestamp"), TS).cast(pa.int64()), at_us), False)
        offs = pc.filter(rt.column("offset"), ok)
        return pc.max(offs).as_py() if len(offs) else None
    best = None
    for name, col in ((catalog.PARTITION_STATE_HISTORY.name, "valid_from_timestamp"),
                      (catalog.BROKER_STATE_HISTORY.name, "timestamp"),
                      (catalog.TOPIC_CONFIG_HISTORY.name, "timestamp")):
        t = tables.get(name)
        if t is None or not t.num_rows:
            continue
        ts = pc.cast(t.column(col), TS).cast(pa.int64())
        ok = pc.fill_null(pc.less_equal(ts, at_us), False)
        offs = pc.filter(t.column("offset"), ok)
        if len(offs):
            m = pc.max(offs).as_py()
            best = m if best is None else max(best, m)
    return best


def _cut(table: pa.Table, at: int) -> pa.Table:
    """Rows written at or before ``at``; a valid-to past ``at`` becomes open again."""
    table = table.filter(pc.less_equal(table.column("offset"), at))
    if "valid_to_offset" in table.column_names:
        later = pc.fill_null(pc.greater(table.column("valid_to_offset"), at), False)
        for col in ("valid_to_offset", "valid_to_timestamp"):
            if col in table.column_names:
                i = table.schema.get_field_index(col)
                table = table.set_column(i, col, pc.if_else(later, pa.scalar(None, table.schema.field(col).type),
                                                            table.column(col)))
    return table


def truncate(tables: dict[str, pa.Table], at: int) -> tuple[dict[str, pa.Table], dt.datetime | None]:
    """The tables as a replay through offset ``at`` would have written them, and the time of that point."""
    out = dict(tables)
    for name in (catalog.PARTITION_STATE_HISTORY.name, catalog.BROKER_STATE_HISTORY.name,
                 catalog.TOPIC_CONFIG_HISTORY.name, catalog.INVARIANT_BREACHES.name, "record_times"):
        if name in out:
            out[name] = _cut(out[name], at)
    when = None
    rt = tables.get("record_times")
    if rt is not None and rt.num_rows:  # the time of the last record at or before ``at`` (NoOps count)
        upto = rt.filter(pc.less_equal(rt.column("offset"), at))
        if upto.num_rows:
            return out, pc.max(pc.cast(upto.column("timestamp"), TS)).as_py()
    for name, col in ((catalog.PARTITION_STATE_HISTORY.name, "valid_from_timestamp"),
                      (catalog.BROKER_STATE_HISTORY.name, "timestamp"),
                      (catalog.TOPIC_CONFIG_HISTORY.name, "timestamp")):
        t = out.get(name)
        if t is not None and t.num_rows:
            m = pc.max(pc.cast(t.column(col), TS)).as_py()
            when = m if when is None or (m is not None and m > when) else when
    return out, when


def state_at(tables: dict[str, pa.Table]) -> tuple[pa.Table, pa.Table]:
    """(partitions, brokers) at the end of the (possibly truncated) tables, in recovery's schemas."""
    hist = fold.state_at(tables[catalog.PARTITION_STATE_HISTORY.name])
    topics = timelines.current(tables[catalog.TOPIC_CONFIG_HISTORY.name])
    names = dict(zip(topics.column("topic_id").to_pylist(), topics.column("topic_name").to_pylist()))
    parts = pa.table({
        "topic_id": hist.column("topic_id"),
        "topic": pa.array([names.get(t) for t in hist.column("topic_id").to_pylist()], pa.string()),
        "partition": hist.column("partition_id").cast(pa.int32()),
        **{c: hist.column(s) for c, s in (("replicas", "replicas"), ("isr", "isr"),
                                          ("eligible_leader_replicas", "eligible_leader_replicas"),
                                          ("last_known_elr", "last_known_elr"))},
        "leader": hist.column("leader"), "leader_epoch": hist.column("leader_epoch"),
        "leader_recovery_state": hist.column("leader_recovery_state"),
    })
    parts = parts.sort_by([("topic", "ascending"), ("partition", "ascending")])
    b = timelines.current(tables[catalog.BROKER_STATE_HISTORY.name])
    brokers = pa.table({
        "broker_id": b.column("broker_id"),
        "registered": pc.fill_null(b.column("registered"), False),
        "broker_epoch": pc.fill_null(b.column("broker_epoch"), -1),
        "fenced": pc.fill_null(b.column("fenced"), True),
        "in_controlled_shutdown": pc.fill_null(b.column("in_controlled_shutdown"), False),
    }).cast(recovery.BROKER_SCHEMA)
    return parts, brokers


def log_info_as_of(info: pa.Table | None, at_offset: int | None) -> pa.Table:
    """The replies usable at ``at_offset``: one captured after that point describes a later state than
    the one being recovered (replies without a capture offset are kept)."""
    if info is None:
        return loginfo.LOG_INFO_SCHEMA.empty_table()
    if at_offset is None or "collected_at_offset" not in info.column_names:
        return info
    late = pc.fill_null(pc.greater(info.column("collected_at_offset"), at_offset), False)
    return info.filter(pc.invert(late))


def _violations_in_chunks(tables, config, end_offset, end_time, chunk_rows: int) -> pa.Table:
    """``violations`` over groups of topics, each at most about ``chunk_rows`` history rows, so the
    working arrays of a million-partition cluster never exist all at once.  Every finding is local to a
    topic name (a partition's windows, a topic's settings, a breach naming it), so a topic's whole
    history -- under every id its name had -- goes to one chunk; breaches naming no topic go to the
    first.  Same rows as one call, in the same order."""
    hist = tables[catalog.PARTITION_STATE_HISTORY.name]
    if chunk_rows <= 0 or hist.num_rows <= chunk_rows:
        return violations(tables, config, end_offset, end_time)
    # the cluster's events once (every chunk's partition windows read them) and its own findings (gaps,
    # outages, controller elections) once, not once per chunk
    events = cluster_events(tables, config, frames.as_millis(end_time))
    parts = [violations(tables, config, end_offset, end_time, topics=False, events=events)]
    import zlib

    k = -(-hist.num_rows // chunk_rows)
    topics = tables[catalog.TOPIC_CONFIG_HISTORY.name]
    name_of = dict(zip(topics.column("topic_id").to_pylist(), topics.column("topic_name").to_pylist()))

    def chunk_of(names) -> np.ndarray:
        return np.array([zlib.crc32((n or "").encode()) % k for n in names], np.int64)

    # per distinct topic id, not per row: a Python string per history row was gigabytes at 1 M partitions
    enc = hist.column("topic_id").combine_chunks().dictionary_encode()
    h_chunk = chunk_of([name_of.get(t) or t for t in enc.dictionary.to_pylist()])[
        np.asarray(enc.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)]
    del enc
    t_chunk = chunk_of([name_of.get(t) or t for t in topics.column("topic_id").to_pylist()])
    breaches = tables.get(catalog.INVARIANT_BREACHES.name)
    b_chunk = None
    if breaches is not None and breaches.num_rows:
        b_names = breaches.column("topic").to_pylist()
        b_chunk = np.where([n is None for n in b_names], 0, chunk_of(b_names))
    for c in range(k):
        part = dict(tables)
        part[catalog.PARTITION_STATE_HISTORY.name] = hist.filter(pa.array(h_chunk == c))
        part[catalog.TOPIC_CONFIG_HISTORY.name] = topics.filter(pa.array(t_chunk == c))
        if b_chunk is not None:
            part[catalog.INVARIANT_BREACHES.name] = breaches.filter(pa.array(b_chunk == c))
        parts.append(violations(part, config, end_offset, end_time, cluster=False, events=events))
        del part
    return frames.sorted_rows(parts, ORDER)


# ------------------------------------------------------------------------------------------ the audit
def audit(tables: dict[str, pa.Table], config: dict, end_offset: int, end_time, *, at_offset: int | None = None,
          log_info: pa.Table | None = None, strategy: str | None = None) -> AuditResult:
    """Violations over the history up to ``at_offset`` (default: the end of the log) and recovery
    candidates for the partitions leaderless at that point."""
    conf = config["audit"]
    strategy = strategy or conf["recovery_strategy"]
    at_time = end_time
    if at_offset is not None and at_offset < end_offset:
        tables, at_time = truncate(tables, at_offset)
        end_offset = at_offset
    found = _violations_in_chunks(tables, config, end_offset, at_time, int(conf.get("chunk_rows") or 0))
    if at_offset is not None and end_offset == at_offset:  # "still open" means at the audited point here
        text = found.column("explanation")
        for a, b in (("at the end of the log", f"at offset {at_offset}"), ("to the end of the log", f"to offset {at_offset}")):
            text = pc.replace_substring(text, a, b)
        found = found.set_column(found.schema.get_field_index("explanation"), "explanation", text)
    found, incidents = I.group(found, tables, config, frames.as_millis(at_time))
    parts, brokers = state_at(tables)
    info = log_info_as_of(log_info, at_offset)
    cands = recovery.recovery_candidates_table(parts, brokers, info, strategy,
                                               conf.get("leader_epoch_check", "strict"))
    if isinstance(at_time, (int, np.integer)):
        at_time = dt.datetime.fromtimestamp(int(at_time) / 1000, dt.timezone.utc)
    return AuditResult(found, cands, parts, brokers, end_offset, at_time, strategy, incidents)


# -------------------------------------------------------------------------------------------- output
def counts(result: AuditResult) -> list[dict]:
    """Findings and distinct partitions per (severity, code), most severe first (a topic-level finding
    counts its topic once)."""
    v = result.violations
    if not v.num_rows:
        return []
    where = pc.binary_join_element_wise(v.column("topic"),
                                        pc.fill_null(pc.cast(v.column("partition"), pa.string()), ""), "-")
    g = (pa.table({"severity": v.column("severity"), "code": v.column("code"), "where": where})
         .group_by(["severity", "code"]).aggregate([("code", "count"), ("where", "count_distinct")]))
    rows = [{"severity": r["severity"], "code": r["code"], "findings": r["code_count"],
             "partitions": r["where_count_distinct"]} for r in g.to_pylist()]
    return sorted(rows, key=lambda r: (RANK.get(r["severity"], 9), r["code"]))


def _ordered_findings(result: AuditResult, min_severity: str, limit: int | None = None,
                      outside: bool = False) -> tuple[list[dict], int]:
    """(the first ``limit`` findings at or above ``min_severity``, how many there are): most severe
    first; within a severity what is still going on first, then in log order.  ``outside``: only those
    no incident explains."""
    v = result.violations
    keep = pc.is_in(v.column("severity"), pa.array([s for s in SEVERITIES if RANK[s] <= RANK[min_severity]]))
    if outside:
        keep = pc.and_(keep, pc.is_null(v.column("incident_id")))
    rows = np.flatnonzero(np.asarray(keep.to_numpy(zero_copy_only=False), bool))
    # the order from the key columns of the kept rows alone, then only the listed rows taken: sorting the
    # whole table copied every finding's texts (gigabytes at a million partitions) to list twenty of them
    keys = frames.take_rows(v.select(["severity", "open", "first_offset", "code", "topic", "partition"]), rows)
    keys = pa.table({"_rank": pc.fill_null(pc.index_in(keys.column("severity"), pa.array(SEVERITIES)), len(SEVERITIES)),
                     "open": keys.column("open"), "first_offset": keys.column("first_offset"), "code": keys.column("code"),
                     "_topic": pc.fill_null(keys.column("topic"), ""), "_part": pc.fill_null(keys.column("partition"), -1)})
    order = pc.sort_indices(keys, sort_keys=[("_rank", "ascending"), ("open", "descending"),
                                             ("first_offset", "ascending"), ("code", "ascending"),
                                             ("_topic", "ascending"), ("_part", "ascending")])
    if limit is not None:
        order = order.slice(0, limit)
    return frames.take_rows(v, rows[np.asarray(order, np.int64)]).to_pylist(), len(rows)


def summary_json(result: AuditResult, cluster: str | None, fail_on: str, limit: int | None = None) -> dict:
    """The audit as one JSON document.  ``limit``: list only the ``limit`` most severe findings and the
    recovery candidates of the first ``limit`` leaderless partitions (None: everything).  The counts are
    always complete; ``findingsTotal`` / ``leaderlessPartitions`` say how much was left out -- at 100 k
    partitions the full list is hundreds of MB, the gold tables hold it anyway."""
    def iso(x):
        return x.isoformat().replace("+00:00", "Z") if isinstance(x, dt.datetime) else x

    listed, total = _ordered_findings(result, "INFO", limit)
    cands = result.candidates
    key = pc.binary_join_element_wise(pc.fill_null(cands.column("topic_id"), ""),
                                      pc.cast(pc.fill_null(cands.column("partition"), -1), pa.string()), "-")
    partitions = pc.unique(key)
    if limit is not None and len(partitions) > limit:
        cands = cands.filter(pc.is_in(key, partitions.slice(0, limit)))
    inc = result.incidents
    listed_inc = inc.slice(0, limit) if limit is not None else inc
    return {
        "cluster": cluster, "atOffset": result.at_offset, "atTime": iso(result.at_time),
        "worstSeverity": result.worst(), "failOn": fail_on, "failed": result.fails(fail_on),
        "incidentsTotal": inc.num_rows,
        "incidents": [{k: iso(v) for k, v in r.items()} for r in listed_inc.to_pylist()],
        "findingsOutsideIncidents": result.violations.column("incident_id").null_count,
        "counts": counts(result),
        "findingsTotal": total, "findingsListed": len(listed),
        "findings": [{k: iso(v) for k, v in r.items()} for r in listed],
        "recoveryStrategy": result.strategy,
        "leaderlessPartitions": len(partitions),
        "recoveryCandidates": cands.to_pylist(),
    }


def _iso(x) -> str:
    return x.isoformat().replace("+00:00", "Z") if isinstance(x, dt.datetime) else "?"


def incident_lines(incidents: pa.Table, limit: int) -> list[str]:
    """One line per incident (the first ``limit``): severity, id, when, its title, how many findings."""
    lines = []
    for r in incidents.slice(0, limit).to_pylist():
        span = f"offsets {r['first_offset']}-{r['last_offset']}" if r["last_offset"] is not None else \
            f"from offset {r['first_offset']}"
        lines.append(f"  [{r['severity']}] {r['incident_id']} {_iso(r['first_time'])} ({span}): {r['title']}; "
                     f"{r['findings']} finding(s): {', '.join(r['codes'])}")
    if incidents.num_rows > limit:
        lines.append(f"  ... {incidents.num_rows - limit} more: --json, or the incidents table")
    return lines


def summary_text(result: AuditResult, cluster: str | None, fail_on: str, limit: int = 20) -> str:
    """The operator's summary: incidents first, then the findings no incident explains, then the counts."""
    lines = [f"kraft-audit audit: {cluster or 'log directory'} through offset {result.at_offset} "
             f"({_iso(result.at_time)})", ""]
    inc = result.incidents
    if inc.num_rows:
        lines.append(f"Incidents ({inc.num_rows}, most severe first; each explains the findings listed in it):")
        lines += incident_lines(inc, limit)
        lines.append("")
    act, n_act = _ordered_findings(result, "WARN", limit, outside=True)
    if act:
        lines.append(f"To act on, outside incidents ({n_act} findings at WARN or above, most severe first):")
        for r in act:
            lines.append(f"  [{r['severity']}] {r['code']} @{r['first_offset']}: {r['explanation']}")
        if n_act > limit:
            lines.append(f"  ... {n_act - limit} more: --json, or the violations table")
        lines.append("")
    table = counts(result)
    if not table:
        lines.append("No findings.")
    else:
        lines.append("All findings:")
        lines.append(f"  {'SEVERITY':<8} {'CODE':<30} {'FINDINGS':>8} {'PARTITIONS':>10}")
        for r in table:
            lines.append(f"  {r['severity']:<8} {r['code']:<30} {r['findings']:>8} {r['partitions']:>10}")
    by_partition: dict[tuple, list[dict]] = {}  # candidate rows per leaderless partition, in rank order
    for r in result.candidates.to_pylist():
        by_partition.setdefault((r["topic"] or r["topic_id"], r["partition"]), []).append(r)
    if by_partition:
        lines += ["", f"Leaderless partitions at offset {result.at_offset}: {len(by_partition)}; "
                  f"recovery strategy {result.strategy}:"]
        for key, cands in list(by_partition.items())[:limit]:
            best = next((c for c in cands if c["recommended"]), None)
            if best is not None:
                lost = best["estimated_records_lost"]
                lines.append(f"  {key[0]}-{key[1]}: recover from broker {best['broker']} ({best['kind']}"
                             + (f", ~{lost} records behind the longest log" if lost else "") + f"): {best['note']}")
            else:
                lines.append(f"  {key[0]}-{key[1]}: no recommendation: {cands[0]['note']}")
        if len(by_partition) > limit:
            lines.append(f"  ... {len(by_partition) - limit} more: --json, or the recovery_candidates table")
        lines.append("  kraft-audit plan --election-type ... writes the kafka-leader-election.sh / "
                     "kafka-reassign-partitions.sh files")
    worst = result.worst()
    lines += ["", f"Worst severity: {worst or 'none'}; --fail-on {fail_on}: "
              + ("FAIL (exit 1)" if result.fails(fail_on) else "pass (exit 0)")]
    return "\n".join(lines) + "\n"
