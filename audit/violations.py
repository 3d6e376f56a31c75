"""Durability violations of a KRaft cluster, from its silver tables (the gold ``violations`` table).

``violations(tables, config, end_offset, end_time)`` reads the tables ``kraft-audit replay`` writes (or
:func:`audit.local.silver_tables` builds without Spark) and returns one row per finding
(``VIOLATION_SCHEMA``).  Two kinds of finding:

* **Windows** -- a maximal run of consecutive history rows of one partition satisfying a predicate.  It
  opens at the first row's offset / time and closes at the first row of the partition that does not
  satisfy it (its offset / valid-from time), or stays open at the end of the log (``last_offset`` null,
  ``open`` true, duration measured to ``end_time``).  A deleted partition closes its windows.
  UNDER_MIN_ISR, AT_MIN_ISR, OFFLINE, OFFLINE_NO_CANDIDATE, LAST_REPLICA_STANDING per partition;
  UNCLEAN_CONFIG and MIN_ISR_ABOVE_RF per topic.
* **Events** -- one record (``first_offset == last_offset``, duration 0): DATA_LOSS_LIKELY,
  UNCLEAN_ELECTION, ELR_MEMBER_FENCED_LEADER, MIN_ISR_CHANGE_CLEARED_ELR and every ``INV-*`` breach.

The predicates are evaluated over all partitions at once (NumPy arrays of the history sorted by
(topic, partition, offset), run starts / ends by shifted comparisons).  The evidence is written by the
compiled JSON writer and the partition windows' explanations a column at a time (``_window_texts``; the
per-window ``_window_text`` is its reference); the rarer findings still build their text in a Python loop
over the findings.  :mod:`audit.scalar` is the readable row-by-row reference of the window codes.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit import frames as F
from audit.cluster_events import ClusterEvents, attributed_severity, cluster_events
from audit.gaps import Gaps, excluded_ms
from controller_core import codes as C
from controller_core.codes import (
    AT_MIN_ISR, CLUSTER_DOWN, CONTROLLER_ELECTION, DATA_LOSS_LIKELY, DISKLESS_TOPIC, ELR_MEMBER_FENCED_LEADER, LAST_REPLICA_STANDING, METADATA_GAP, MIN_ISR_ABOVE_RF,
    MIN_ISR_CHANGE_CLEARED_ELR, OFFLINE, OFFLINE_NO_CANDIDATE, UNCLEAN_CONFIG, UNCLEAN_ELECTION, UNDER_MIN_ISR,
)
from controller_core.brokers import active_rows
from controller_core.codec.arrowutil import repeat_str
from controller_core.codec.jsonout import concat
from controller_core.codec.jsonwrite import objects_json
from controller_core.schema import F as F_
from controller_core.vector.recompute import padded
from lake import catalog

TS = pa.timestamp("us", tz="UTC")
EVIDENCE = pa.dictionary(pa.int32(), pa.string())
VIOLATION_SCHEMA = pa.schema([
    pa.field("cluster", pa.string()),  # filled by the caller
    pa.field("code", pa.string(), nullable=False),
    pa.field("severity", pa.string(), nullable=False),
    pa.field("topic", pa.string()),  # topic name
    pa.field("topic_id", pa.string()),
    pa.field("partition", pa.int32()),  # null for topic-level findings
    pa.field("first_offset", pa.int64(), nullable=False),
    pa.field("last_offset", pa.int64()),  # null while the window is still open at the end of the log
    pa.field("first_time", TS),
    pa.field("last_time", TS),
    pa.field("duration_ms", pa.int64()),  # to the close, or to the end of the log when open
    pa.field("open", pa.bool_(), nullable=False),
    pa.field("brokers", pa.list_(pa.int32())),
    # JSON, Kafka field names; dictionary-encoded while the audit holds them (a few distinct partition states
    # behind millions of findings: 1.7 GB of texts at 1 M partitions); the gold table stores strings
    pa.field("evidence_before", EVIDENCE),
    pa.field("evidence_after", EVIDENCE),
    pa.field("explanation", pa.string(), nullable=False),
    pa.field("incident_id", pa.string()),  # the incident that explains it (audit/incidents.py), null if none
])

LONG_WINDOW_CODES = C.long_window_codes()  # raised to ERROR past audit.long_window_ms
PCR = "PARTITION_CHANGE_RECORD"
CLEAR_ELR = "CLEAR_ELR_RECORD"
ERROR = C.ERROR


# ------------------------------------------------------------------------------------------- context
@dataclass
class Context:
    """Everything the finders share: the history arrays and, per history row, the topic settings and
    the broker states in effect at its offset."""

    h: F.History
    dictionary: pa.Array  # topic ids, sorted: code -> id
    names: list  # code -> topic name (None if unknown)
    m: np.ndarray  # effective min ISR at each history row (1 when unknown)
    configured: np.ndarray  # configured min.insync.replicas at each row (1 when unset)
    elr_on: np.ndarray
    cfg_row: np.ndarray  # index of the topic_config_history row in effect (-1 if none)
    topics: pa.Table  # topic_config_history
    t_code: np.ndarray  # its topic codes
    brokers: pa.Table  # broker_state_history
    b_id: np.ndarray
    b_off: np.ndarray
    b_active: np.ndarray
    b_new_incarnation: np.ndarray  # a RegisterBrokerRecord replacing an earlier incarnation
    b_down: np.ndarray  # the record left the broker not active (fence, controlled shutdown, unregister)
    b_cs: np.ndarray  # the record left the broker in controlled shutdown
    breaches: pa.Table | None
    severities: dict
    long_ms: int
    end_offset: int
    end_ms: int | None
    events: ClusterEvents  # gaps, cluster-down periods, controller elections (audit/cluster_events.py)
    min_ms: int  # audit.min_window_ms: shorter UNDER_MIN_ISR / OFFLINE windows are flaps
    diskless: np.ndarray  # the topic is leaderless / diskless at the row (image.DISKLESS_CONFIGS): no ISR rule judges it

    @property
    def gaps(self) -> Gaps:  # stretches of the log no controller wrote (audit/gaps.py)
        return self.events.gaps


def _context(tables: dict[str, pa.Table], config: dict, end_offset: int, end_time,
             events: ClusterEvents | None = None) -> Context:
    hist = tables[catalog.PARTITION_STATE_HISTORY.name]
    topics = tables[catalog.TOPIC_CONFIG_HISTORY.name]
    brokers = tables[catalog.BROKER_STATE_HISTORY.name]
    dictionary = F.topic_dictionary(hist.column("topic_id"), topics.column("topic_id"))
    h = F.history(hist, dictionary)

    t_code = F.codes(topics.column("topic_id"), dictionary)
    t_off = F.np_col(topics, "offset", None, np.int64)
    names: list = [None] * len(dictionary)
    for c, name in zip(t_code.tolist(), topics.column("topic_name").to_pylist()):
        if c >= 0 and name is not None:
            names[c] = name
    j = F.as_of(t_code, t_off, h.topic, h.offset)
    ok = j >= 0
    jj = np.maximum(j, 0)

    def tcol(name, default, dtype):
        vals = F.np_col(topics, name, default, dtype) if topics.num_rows else np.zeros(1, dtype)
        return np.where(ok, vals[jj] if topics.num_rows else default, default)

    b_id = F.np_col(brokers, "broker_id", None, np.int64)
    b_off = F.np_col(brokers, "offset", None, np.int64)
    active = active_rows(brokers)
    event = np.asarray(brokers.column("event").to_pylist(), dtype=object)
    is_reg = event == "REGISTER_BROKER_RECORD"
    # a new incarnation: the broker's previous registration had another incarnation id
    inc = np.asarray(brokers.column("incarnation_id").to_pylist(), dtype=object)
    order = np.lexsort((b_off, b_id))
    reg_rows = order[is_reg[order]]
    new_inc = np.zeros(len(b_id), bool)
    if len(reg_rows) > 1:
        same = b_id[reg_rows[1:]] == b_id[reg_rows[:-1]]
        new_inc[reg_rows[1:]] = same & (inc[reg_rows[1:]] != inc[reg_rows[:-1]])
    audit = config["audit"]
    end_ms = F.as_millis(end_time)
    return Context(h=h, dictionary=dictionary, names=names, m=tcol("effective_min_isr", 1, np.int64),
                   configured=tcol("min_insync_replicas", 1, np.int64), elr_on=tcol("elr_enabled", False, bool),
                   cfg_row=j, topics=topics, t_code=t_code, brokers=brokers, b_id=b_id, b_off=b_off,
                   b_active=active, b_new_incarnation=new_inc, b_down=~active,
                   b_cs=F.np_col(brokers, "in_controlled_shutdown", False, bool),
                   breaches=tables.get(catalog.INVARIANT_BREACHES.name),
                   # the registry's defaults under the config's: a config lacking a code still grades it
                   severities={**C.default_severities(C.FINDING), **audit["severities"]},
                   long_ms=int(audit.get("long_window_ms") or 0), end_offset=int(end_offset),
                   end_ms=end_ms, events=events or cluster_events(tables, config, end_ms),
                   min_ms=int(audit.get("min_window_ms") or 0), diskless=_diskless_rows(topics, ok, jj))


def _diskless_rows(topics: pa.Table, ok: np.ndarray, jj: np.ndarray) -> np.ndarray:
    """Per history row: its topic is leaderless / diskless (topic_config_history.diskless set; a table written
    before the column existed: never)."""
    if "diskless" not in topics.schema.names or not topics.num_rows:
        return np.zeros(len(ok), bool)
    dl = topics.column("diskless").is_valid().to_numpy(zero_copy_only=False)
    return ok & dl[jj]


# ------------------------------------------------------------------------------------------ evidence
def _states(ctx: Context, rows) -> list[dict | None]:
    """Partition state of history rows (Kafka field names); None for -1."""
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return []
    cols = ["replicas", "isr", "eligible_leader_replicas", "last_known_elr", "adding_replicas", "removing_replicas",
            "leader", "leader_epoch", "partition_epoch", "leader_recovery_state", "deleted"]
    t = ctx.h.take(cols, rows)
    vals = {c: t.column(c).to_pylist() for c in cols}
    out: list[dict | None] = []
    for k, r in enumerate(rows.tolist()):
        if r < 0:
            out.append(None)
        elif vals["deleted"][k]:
            out.append({"deleted": True})
        else:
            out.append({"replicas": vals["replicas"][k], "isr": vals["isr"][k],
                        "eligibleLeaderReplicas": vals["eligible_leader_replicas"][k] or [],
                        "lastKnownElr": vals["last_known_elr"][k] or [],
                        "addingReplicas": vals["adding_replicas"][k] or [],
                        "removingReplicas": vals["removing_replicas"][k] or [],
                        "leader": vals["leader"][k], "leaderEpoch": vals["leader_epoch"][k],
                        "partitionEpoch": vals["partition_epoch"][k],
                        "leaderRecoveryState": vals["leader_recovery_state"][k]})
    return out


def _json(x) -> str | None:
    return None if x is None else json.dumps(x, separators=(",", ":"))


# the partition state of _states, key for key, for the compiled JSON writer
_STATE_FIELDS = tuple(F_(name, t, "0+", nullable="0+") for name, t in (
    ("Replicas", "[]int32"), ("Isr", "[]int32"), ("EligibleLeaderReplicas", "[]int32"), ("LastKnownElr", "[]int32"),
    ("AddingReplicas", "[]int32"), ("RemovingReplicas", "[]int32"), ("Leader", "int32"), ("LeaderEpoch", "int32"),
    ("PartitionEpoch", "int32"), ("LeaderRecoveryState", "int8")))
_EMPTY_WHEN_NULL = ("eligible_leader_replicas", "last_known_elr", "adding_replicas", "removing_replicas")


def _evidence(ctx: Context, rows) -> pa.Array:
    """``[_json(s) for s in _states(ctx, rows)]`` as one dictionary-encoded string column: each distinct
    partition state written once by the compiled JSON writer (per finding in Python it was most of the
    audit's time at 100 k partitions and up; per finding compiled, 10 s for 9 M texts at 1 M partitions
    where 27 were distinct)."""
    rows = np.asarray(rows, np.int64)
    if not len(rows):
        return pa.array([], EVIDENCE)
    names = ["replicas", "isr", *_EMPTY_WHEN_NULL, "leader", "leader_epoch", "partition_epoch",
             "leader_recovery_state"]
    t = ctx.h.take(names + ["deleted"], rows)
    cols = {}
    for f, name in zip(_STATE_FIELDS, names):
        col = t.column(name).combine_chunks()
        if name in _EMPTY_WHEN_NULL:
            col = _nulls_as_empty(col)
        cols[f.json_name] = col
    deleted = pc.fill_null(t.column("deleted").combine_chunks(), False)
    first, inverse = _distinct_states(list(cols.values()), np.asarray(deleted.to_numpy(zero_copy_only=False), bool))
    if first is None:  # two states hashed alike (never seen): every row written
        first, inverse = np.arange(len(rows)), np.arange(len(rows))
    one = pa.array(first)
    text = objects_json({k: v.take(one) for k, v in cols.items()}, _STATE_FIELDS)
    text = pc.if_else(deleted.take(one), pa.scalar('{"deleted":true}'), text)
    return pa.DictionaryArray.from_arrays(pa.array(inverse.astype(np.int32), mask=rows < 0), text)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def _distinct_states(cols: list, deleted: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(a first row of each distinct state, each row's state number) over the state columns (lists and
    integers) and ``deleted``: rows hashed column by column, then checked to equal their state's first row
    exactly; (None, None) if two different states share a hash."""
    parts = [deleted.astype(np.int64)]
    for col in cols:
        if pa.types.is_list(col.type):
            mat, lens, _ = padded(col)
            parts += [lens.astype(np.int64)] + [mat[:, j].astype(np.int64) for j in range(mat.shape[1])]
        else:  # a null integer apart from every value
            parts.append(np.where(np.asarray(col.is_valid().to_numpy(zero_copy_only=False), bool),
                                  np.asarray(pc.fill_null(col, 0).to_numpy(zero_copy_only=False), np.int64),
                                  np.int64(-(1 << 40))))
    h = np.zeros(len(deleted), np.uint64)
    with np.errstate(over="ignore"):
        for p in parts:
            h = (h ^ p.view(np.uint64)) * _MIX
            h ^= h >> np.uint64(31)
    _, first, inverse = np.unique(h, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    at = first[inverse]
    if not all(np.array_equal(p[at], p) for p in parts):
        return None, None
    return first, inverse


def _tp(ctx: Context, code: int, partition: int | None) -> str:
    name = ctx.names[code] if 0 <= code < len(ctx.names) and ctx.names[code] else ctx.dictionary[code].as_py()
    return name if partition is None else f"{name}-{partition}"


def _dur(ms) -> str:
    if ms is None:
        return "an unknown time"
    s = ms / 1000
    if s < 120:
        return f"{ms} ms ({s:.1f} s)" if ms >= 1000 else f"{ms} ms"
    return f"{ms} ms ({s / 60:.1f} min)" if s < 7200 else f"{ms} ms ({s / 3600:.1f} h)"


# -------------------------------------------------------------------------------------------- output
def _table(n: int, **cols) -> pa.Table:
    """A VIOLATION_SCHEMA table of n rows from the given columns (absent ones null)."""
    arrays = []
    for f in VIOLATION_SCHEMA:
        v = cols.get(f.name)
        if v is None:
            arrays.append(pa.nulls(n, f.type))
        elif isinstance(v, (pa.Array, pa.ChunkedArray)):
            arrays.append((v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v).cast(f.type))
        elif isinstance(v, (str, bool)) or np.isscalar(v):
            arrays.append(pa.array([v] * n, f.type))
        elif isinstance(v, tuple):  # (values, valid mask)
            vals, ok = v
            if f.type == TS:
                arrays.append(pa.array(np.asarray(vals, np.int64), pa.int64(), mask=~np.asarray(ok, bool))
                              .cast(pa.timestamp("ms", tz="UTC")).cast(TS))
            else:
                arrays.append(pa.array(np.asarray(vals), f.type, mask=~np.asarray(ok, bool)))
        else:
            arrays.append(pa.array(v if not isinstance(v, np.ndarray) or f.type != pa.string() else v.tolist(),
                                   f.type))
    return pa.Table.from_arrays(arrays, schema=VIOLATION_SCHEMA)


def _window_times(ctx: Context, starts: np.ndarray, close: np.ndarray, code_long: bool, base: str,
                  partition: bool = True, code: str | None = None):
    """Offsets, times, duration, open flag and severity of windows opened at rows ``starts`` and closed
    at rows ``close`` (-1: open).  A partition's window (``partition``) shorter than ``min_window_ms`` is a
    flap and one overlapping a cluster outage is attributed to it: both INFO (audit/cluster_events.py)."""
    h = ctx.h
    is_open = close < 0
    c = np.maximum(close, 0)
    first_ms, first_ok = h.time[starts], h.time_ok[starts]
    last_ms, last_ok = h.time[c], h.time_ok[c] & ~is_open
    end = np.where(is_open, ctx.end_ms if ctx.end_ms is not None else 0, last_ms)
    end_ok = np.where(is_open, ctx.end_ms is not None, last_ok)
    dur_ok = first_ok & end_ok
    # the log cannot say what happened while no controller wrote it: that time is not part of the window
    excluded = np.where(dur_ok, excluded_ms(ctx.gaps, first_ms, end), 0)
    duration = np.where(dur_ok, end - first_ms - excluded, 0)
    sev = np.full(len(starts), base, dtype=object)
    if code_long and ctx.long_ms > 0:
        sev[dur_ok & (duration >= ctx.long_ms)] = ERROR
    attributed = np.zeros(len(starts), bool)
    if partition:
        if code_long and ctx.min_ms > 0:  # a flap: offline or under min ISR and back within moments
            sev[dur_ok & ~is_open & (duration < ctx.min_ms)] = C.INFO
        attributed, outside = ctx.events.attributed(first_ms, end)
        attributed &= dur_ok
        for k in np.flatnonzero(attributed).tolist():
            sev[k] = attributed_severity(code, sev[k], True, int(outside[k]), ctx.long_ms)
    return dict(first_offset=h.offset[starts], last_offset=(h.offset[c], ~is_open), first_time=(first_ms, first_ok),
                last_time=(last_ms, last_ok), duration_ms=(duration, dur_ok), open=is_open, severity=sev.tolist(),
                excluded_ms=excluded, attributed=attributed)  # not columns: for the explanation


def _dur_of(cols: dict, k: int) -> str:
    """Window k's duration as text, saying how much metadata-gap time it leaves out."""
    if not cols["duration_ms"][1][k]:
        return _dur(None)
    text = _dur(int(cols["duration_ms"][0][k]))
    gap = int(cols["excluded_ms"][k])
    text += f", not counting {_dur(gap)} in which no controller wrote the log" if gap else ""
    return text + (", across a cluster-wide outage (its CLUSTER_DOWN / METADATA_GAP finding)"
                   if cols["attributed"][k] else "")


# ------------------------------------------------------------------------------- partition windows
def window_predicates(ctx: Context) -> dict[str, np.ndarray]:
    """Per history row, whether each window code holds in the state after it."""
    h = ctx.h
    live = ~h.deleted & ~ctx.diskless  # a diskless topic's rows satisfy no ISR rule (DISKLESS_TOPIC)
    offline = live & (h.leader == -1)
    return {UNDER_MIN_ISR: live & (h.isr_len < ctx.m),
            # only while a replica is missing: a partition whose replica count equals its min ISR (RF 1,
            # min ISR 1) sits "at min ISR" by configuration, not because of an incident
            AT_MIN_ISR: live & (h.isr_len == ctx.m) & (h.isr_len < h.rf),
            OFFLINE: offline,
            OFFLINE_NO_CANDIDATE: offline & (h.isr_len == 0) & (h.elr_len == 0)}


def _window_text(code: str, tp: str, st: dict, prev: dict | None, m: int, first: int, last, dur: str) -> tuple:
    """(brokers, explanation) of a partition window."""
    isr, elr, reps = st["isr"] or [], st["eligibleLeaderReplicas"], st["replicas"] or []
    until = f"until offset {last}" if last is not None else "and is still open at the end of the log"
    since = f"from offset {first} {until} ({dur})"
    if code == UNDER_MIN_ISR:
        missing = [b for b in reps if b not in isr]
        return missing, (f"{tp} had {len(isr)} in-sync replica(s) {isr}, below its effective min ISR {m}, {since}: "
                         f"replicas {missing} were out of the ISR and acks=all producers failed.")
    if code == AT_MIN_ISR:
        return list(isr), (f"{tp} had exactly its effective min ISR {m} in sync ({isr}) {since}: losing any of "
                           f"them blocks acks=all producers.")
    prev_leader = prev.get("leader") if prev and not prev.get("deleted") else None
    if code == OFFLINE:
        who = [prev_leader] if prev_leader is not None and prev_leader >= 0 else []
        cands = sorted(set(isr) | set(elr))
        return who, (f"{tp} had no leader {since}" + (f" after broker {prev_leader} stopped leading it" if who else "")
                     + f"; clean candidates: ISR {isr}, ELR {elr}" + ("." if cands else " (none)."))
    lke = st["lastKnownElr"]
    return list(reps), (f"{tp} had no leader and an empty ISR and ELR {since}: only an unclean or recovery "
                        f"election among replicas {reps} (last known leader {lke}) could bring it back.")


def partition_windows(ctx: Context) -> list[pa.Table]:
    h = ctx.h
    out = []
    for code, pred in window_predicates(ctx).items():
        starts, ends = F.runs(pred, h.new_group)
        if not len(starts):
            continue
        close = h.next[ends]
        cols = _window_times(ctx, starts, close, code in LONG_WINDOW_CODES, ctx.severities[code], code=code)
        prev = h.prev[starts]
        brokers, texts = _window_texts(ctx, code, starts, close, prev, cols)
        out.append(_table(len(starts), code=code, topic=_names(ctx).take(pa.array(h.topic[starts])),
                          topic_id=ctx.dictionary.take(pa.array(h.topic[starts])), partition=h.partition[starts],
                          brokers=brokers, evidence_before=_evidence(ctx, prev), evidence_after=_evidence(ctx, starts),
                          explanation=texts, **cols))
    return out


# ------------------------------------------------------------------ window texts, a column at a time
# _window_text says the same per window and stays the readable reference (_window_texts_reference,
# tests/audit/test_window_texts.py):
# a Python string per finding was half the audit's time at 1 M partitions (4.5 M findings), and its Python
# lists of brokers a good part of its memory.
def _names(ctx: Context) -> pa.Array:
    """Topic name per topic code (null: the topic never had one)."""
    return pa.array(ctx.names, pa.string())


def _shown_tp(ctx: Context, rows: np.ndarray) -> pa.Array:
    """``_tp`` per history row: topic name (else its id) and partition."""
    shown = pa.array([n if n else ctx.dictionary[c].as_py() for c, n in enumerate(ctx.names)], pa.string())
    return concat(shown.take(pa.array(ctx.h.topic[rows])), "-", pc.cast(pa.array(ctx.h.partition[rows]), pa.string()))


def _list_text(lists: pa.Array) -> pa.Array:
    """Python's text of each list of broker ids (``[3, 4]``; null: ``[]``)."""
    inner = pc.binary_join(pc.cast(lists, pa.list_(pa.string())), ", ")
    return concat("[", pc.fill_null(inner, ""), "]")


def _lists_at(ctx: Context, rows: np.ndarray, name: str) -> pa.Array:
    """A list column of the history at ``rows``, nulls as empty lists."""
    return _nulls_as_empty(ctx.h.take([name], rows).column(0).combine_chunks())


def _nulls_as_empty(col: pa.Array) -> pa.Array:
    """A list column with its nulls as empty lists (what the texts and the evidence show for an absent list)."""
    if not col.null_count:
        return col
    empty = pa.ListArray.from_arrays(pa.array(np.zeros(len(col) + 1, np.int32)), pa.array([], col.type.value_type))
    return pc.if_else(col.is_null(), empty, col)


def _strings_of(values: list, inverse: np.ndarray) -> pa.Array:
    return pa.array(values, pa.string()).take(pa.array(inverse))


def _dur_texts(cols: dict) -> pa.Array:
    """``_dur_of`` per window, made once per distinct (duration, left-out gap, attributed) -- few next to the
    windows."""
    dur, ok = np.asarray(cols["duration_ms"][0], np.int64), np.asarray(cols["duration_ms"][1], bool)
    key = np.stack([np.where(ok, dur, -1), np.where(ok, np.asarray(cols["excluded_ms"], np.int64), 0),
                    np.asarray(cols["attributed"], np.int64) & ok, ok.astype(np.int64)], axis=1)
    uniq, inverse = F.unique_rows(key)
    one = {"duration_ms": (uniq[:, 0], uniq[:, 3].astype(bool)), "excluded_ms": uniq[:, 1],
           "attributed": uniq[:, 2].astype(bool)}
    return _strings_of([_dur_of(one, k) for k in range(len(uniq))], inverse.reshape(-1))


def _missing(ctx: Context, starts: np.ndarray, reps: pa.Array) -> pa.Array:
    """Per window, the replicas not in the ISR, in replica order (UNDER_MIN_ISR's brokers)."""
    mat, lens, _ = padded(reps)
    isr, isr_len = ctx.h.isr[starts], ctx.h.isr_len[starts]
    in_isr = np.zeros(mat.shape, bool)
    for j in range(isr.shape[1]):  # a few replica positions: column by column
        in_isr |= (mat == isr[:, j:j + 1]) & (j < isr_len)[:, None]
    keep = (np.arange(mat.shape[1])[None, :] < lens[:, None]) & ~in_isr
    offsets = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(mat[keep].astype(np.int32)))


def _window_texts(ctx: Context, code: str, starts: np.ndarray, close: np.ndarray, prev: np.ndarray,
                  cols: dict) -> tuple[pa.Array, pa.Array]:
    """(brokers, explanation) of every window of ``code``: what _window_text says, built as Arrow columns."""
    h, n = ctx.h, len(starts)
    tp = _shown_tp(ctx, starts)
    last = pc.cast(pa.array(h.offset[np.maximum(close, 0)]), pa.string())
    until = pc.if_else(pa.array(close >= 0), concat("until offset ", last),
                       repeat_str("and is still open at the end of the log", n))
    since = concat("from offset ", pc.cast(pa.array(h.offset[starts]), pa.string()), " ", until, " (",
                   _dur_texts(cols), ")")
    m = pc.cast(pa.array(np.asarray(ctx.m[starts], np.int64)), pa.string())
    isr = _lists_at(ctx, starts, "isr")
    if code == UNDER_MIN_ISR:
        missing = _missing(ctx, starts, _lists_at(ctx, starts, "replicas"))
        return missing, concat(tp, " had ", pc.cast(pc.list_value_length(isr), pa.string()), " in-sync replica(s) ",
                               _list_text(isr), ", below its effective min ISR ", m, ", ", since, ": replicas ",
                               _list_text(missing), " were out of the ISR and acks=all producers failed.")
    if code == AT_MIN_ISR:
        return isr, concat(tp, " had exactly its effective min ISR ", m, " in sync (", _list_text(isr), ") ", since,
                           ": losing any of them blocks acks=all producers.")
    if code == OFFLINE:
        elr = _lists_at(ctx, starts, "eligible_leader_replicas")
        p = np.maximum(prev, 0)
        leader = np.where((prev >= 0) & ~h.deleted[p], h.leader[p], -1)
        led = leader >= 0
        who = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(led)]).astype(np.int32)),
                                       pa.array(leader[led].astype(np.int32)))
        after = pc.if_else(pa.array(led), concat(" after broker ", pc.cast(pa.array(leader), pa.string()),
                                                 " stopped leading it"), repeat_str("", n))
        none = (pc.list_value_length(isr).to_numpy() == 0) & (pc.list_value_length(elr).to_numpy() == 0)
        end = pc.if_else(pa.array(none), repeat_str(" (none).", n), repeat_str(".", n))
        return who, concat(tp, " had no leader ", since, after, "; clean candidates: ISR ", _list_text(isr), ", ELR ",
                           _list_text(elr), end)
    reps = _lists_at(ctx, starts, "replicas")
    return reps, concat(tp, " had no leader and an empty ISR and ELR ", since, ": only an unclean or recovery "
                        "election among replicas ", _list_text(reps), " (last known leader ",
                        _list_text(_lists_at(ctx, starts, "last_known_elr")), ") could bring it back.")


def _window_texts_reference(ctx: Context, code: str, starts: np.ndarray, close: np.ndarray, prev: np.ndarray,
                            cols: dict) -> tuple[list, list]:
    """_window_texts one window at a time through _window_text (the reference the tests hold it to)."""
    h = ctx.h
    a = _values(ctx, starts, ("isr", "eligible_leader_replicas", "replicas", "last_known_elr"))
    b = _values(ctx, prev, ("leader", "deleted"))
    brokers, texts = [], []
    for k, s in enumerate(starts.tolist()):
        last = int(h.offset[close[k]]) if close[k] >= 0 else None
        after = {"isr": a["isr"][k], "eligibleLeaderReplicas": a["eligible_leader_replicas"][k] or [],
                 "replicas": a["replicas"][k], "lastKnownElr": a["last_known_elr"][k] or []}
        before = (None if prev[k] < 0 else {"deleted": True} if b["deleted"][k] else {"leader": b["leader"][k]})
        who, text = _window_text(code, _tp(ctx, int(h.topic[s]), int(h.partition[s])), after, before,
                                 int(ctx.m[s]), int(h.offset[s]), last, _dur_of(cols, k))
        brokers.append(who)
        texts.append(text)
    return brokers, texts


def _values(ctx: Context, rows: np.ndarray, names: tuple) -> dict[str, list]:
    """Columns of history rows as Python lists (row -1: the first row's values, never read)."""
    t = ctx.h.take(list(names), rows)
    return {c: t.column(c).to_pylist() for c in names}


# ------------------------------------------------------------------- last replica standing (KIP-966)
def last_replica_predicate(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    """(holds, breaks): ELR off, min ISR >= 2 and ISR = [x] with x leading, continued while ISR stays [x]
    and the partition is leaderless.  A change of x starts a new window."""
    h = ctx.h
    x = h.isr[:, 0] if h.n else np.zeros(0, np.int64)
    base = ~h.deleted & ~ctx.diskless & ~ctx.elr_on & (ctx.m >= 2) & (h.isr_len == 1) & ((h.leader == x) | (h.leader == -1))
    breaks = h.new_group.copy()
    breaks[1:] |= x[1:] != x[:-1]
    # a run must start with x leading: drop its leading leaderless rows
    starts, _ = F.runs(base, breaks)
    run_start = np.full(h.n, -1, np.int64)
    run_start[starts] = starts
    run_start = np.maximum.accumulate(run_start) if h.n else run_start
    led = np.maximum.accumulate(np.where(base & (h.leader == x), np.arange(h.n), -1)) if h.n else run_start
    return base & (led >= run_start), breaks


def last_replica(ctx: Context) -> list[pa.Table]:
    h = ctx.h
    holds, breaks = last_replica_predicate(ctx)
    starts, ends = F.runs(holds, breaks)
    if not len(starts):
        return []
    close = h.next[ends]
    code = LAST_REPLICA_STANDING
    cols = _window_times(ctx, starts, close, code in LONG_WINDOW_CODES, ctx.severities[code], code=code)
    texts, brokers = [], []
    for k, s in enumerate(starts.tolist()):
        x = int(h.isr[s, 0])
        last = int(h.offset[close[k]]) if close[k] >= 0 else None
        until = f"until offset {last}" if last is not None else "and still at the end of the log"
        texts.append(f"{_tp(ctx, int(h.topic[s]), int(h.partition[s]))}: ISR shrank to its leader alone [{x}] at "
                     f"offset {h.offset[s]} with effective min ISR {ctx.m[s]} and ELR off, {until} ({_dur_of(cols, k)}): "
                     f"an unclean shutdown of broker {x} now loses committed data (KIP-966 last replica standing).")
        brokers.append([x])
    out = [_table(len(starts), code=code, topic=[ctx.names[t] for t in h.topic[starts]],
                  topic_id=ctx.dictionary.take(pa.array(h.topic[starts])), partition=h.partition[starts],
                  brokers=brokers, evidence_before=_evidence(ctx, h.prev[starts]),
                  evidence_after=_evidence(ctx, starts),
                  explanation=texts, **cols)]
    loss = _data_loss(ctx, holds, breaks, starts)
    if loss is not None:
        out.append(loss)
    return out


def _data_loss(ctx: Context, holds: np.ndarray, breaks: np.ndarray, starts: np.ndarray) -> pa.Table | None:
    """DATA_LOSS_LIKELY: inside a last-replica-standing window of broker x, x is re-elected (leader -1 -> x)
    after re-registering with a new incarnation (an unclean restart) since the window opened."""
    h = ctx.h
    x = h.isr[:, 0] if h.n else np.zeros(0, np.int64)
    p = np.maximum(h.prev, 0)
    reelected = holds & ~breaks & (h.prev >= 0) & holds[p] & (h.leader == x) & (h.leader[p] == -1)
    rows = np.flatnonzero(reelected)
    if not len(rows):
        return None
    run_start = np.full(h.n, -1, np.int64)
    run_start[starts] = starts
    run_start = np.maximum.accumulate(run_start)
    found = []
    for r in rows.tolist():  # re-elections inside exposure windows are rare: a loop over them
        b, s = int(x[r]), int(run_start[r])
        lo, hi = int(h.offset[s]), int(h.offset[r])
        regs = np.flatnonzero((ctx.b_id == b) & ctx.b_new_incarnation & (ctx.b_off > lo) & (ctx.b_off < hi))
        if not len(regs):
            continue
        reg = int(ctx.b_off[regs].max())
        downs = np.flatnonzero((ctx.b_id == b) & ctx.b_down & (ctx.b_off > lo) & (ctx.b_off <= reg))
        if len(downs) and ctx.b_cs[downs[np.argmin(ctx.b_off[downs])]]:
            continue  # it went down by a controlled shutdown: a clean stop keeps its log, the restart loses nothing
        leaderless = s + int(np.argmax(h.leader[s:r + 1] == -1))
        crash = int(ctx.b_off[downs].min()) if len(downs) else int(h.offset[leaderless])
        found.append((r, s, b, crash, reg, int(h.offset[leaderless])))
    if not found:
        return None
    r_ = np.array([f[0] for f in found])
    texts = [f"{_tp(ctx, int(h.topic[r]), int(h.partition[r]))}: broker {b} was the last in-sync replica since "
             f"offset {h.offset[s]} (ISR [{b}], effective min ISR {ctx.m[r]}, ELR off), went down at offset {crash} "
             f"(partition leaderless from offset {gone}), re-registered with a new incarnation (unclean restart) at "
             f"offset {reg} and was re-elected leader at offset {h.offset[r]}: records it lost are gone from every "
             f"replica once the followers truncate to it."
             for r, s, b, crash, reg, gone in found]
    ms, ok = h.time[r_], h.time_ok[r_]
    return _table(len(r_), code=DATA_LOSS_LIKELY, severity=ctx.severities[DATA_LOSS_LIKELY],
                  topic=[ctx.names[t] for t in h.topic[r_]], topic_id=ctx.dictionary.take(pa.array(h.topic[r_])),
                  partition=h.partition[r_], first_offset=h.offset[r_], last_offset=(h.offset[r_], np.ones(len(r_), bool)),
                  first_time=(ms, ok), last_time=(ms, ok), duration_ms=(np.zeros(len(r_), np.int64), ok), open=False,
                  brokers=[[f[2]] for f in found], evidence_before=_evidence(ctx, h.prev[r_]),
                  evidence_after=_evidence(ctx, r_), explanation=texts)


# ------------------------------------------------------------------------------------------ elections
def _new_leader_rows(ctx: Context):
    h = ctx.h
    p = np.maximum(h.prev, 0)
    changed = (h.prev >= 0) & ~h.deleted & ~h.deleted[p] & ~ctx.diskless & (h.record_type == PCR) & (h.leader >= 0)
    in_isr = F.member(h.isr[p], h.isr_len[p], h.leader) if h.n else np.zeros(0, bool)
    in_elr = F.member(h.elr[p], h.elr_len[p], h.leader) if h.n else np.zeros(0, bool)
    return p, changed, in_isr, in_elr


def unclean_election_mask(ctx: Context) -> np.ndarray:
    """§2.6-5 over all change records (``invariants.is_unclean_election`` vectorized): a new leader that
    forms ISR [leader] without having been in the previous ISR, nor in the previous ELR unless the record
    also enters RECOVERING; or any record entering RECOVERING."""
    h = ctx.h
    p, cand, in_isr, in_elr = _new_leader_rows(ctx)
    sole = (h.isr_len == 1) & (h.isr[:, 0] == h.leader) if h.n else np.zeros(0, bool)
    entered = (h.lrs[p] != 1) & (h.lrs == 1)
    moved = h.leader != h.leader[p]
    return cand & ((moved & sole & ~in_isr & (~in_elr | entered)) | entered)


def _event_table(ctx: Context, code: str, rows: np.ndarray, brokers: list, texts: list) -> pa.Table:
    h = ctx.h
    ms, ok = h.time[rows], h.time_ok[rows]
    return _table(len(rows), code=code, severity=ctx.severities[code], topic=[ctx.names[t] for t in h.topic[rows]],
                  topic_id=ctx.dictionary.take(pa.array(h.topic[rows])), partition=h.partition[rows],
                  first_offset=h.offset[rows], last_offset=(h.offset[rows], np.ones(len(rows), bool)),
                  first_time=(ms, ok), last_time=(ms, ok), duration_ms=(np.zeros(len(rows), np.int64), ok),
                  open=False, brokers=brokers, evidence_before=_evidence(ctx, h.prev[rows]),
                  evidence_after=_evidence(ctx, rows), explanation=texts)


def unclean_elections(ctx: Context) -> list[pa.Table]:
    h = ctx.h
    rows = np.flatnonzero(unclean_election_mask(ctx))
    if not len(rows):
        return []
    before = _states(ctx, h.prev[rows])
    brokers, texts = [], []
    for r, b in zip(rows.tolist(), before):
        leader = int(h.leader[r])
        lost = sorted((set(b["isr"] or []) | set(b["eligibleLeaderReplicas"])) - {leader})
        brokers.append(lost)
        lkl = b["lastKnownElr"] == [leader] and not b["isr"] and not b["eligibleLeaderReplicas"]
        via = "as the last known leader after ISR and ELR emptied" if lkl else "from outside the ISR and ELR"
        loss = (f"records acknowledged only by brokers {lost} may be lost" if lost else
                f"records broker {leader} did not hold (e.g. lost in an unclean shutdown) are gone")
        texts.append(f"{_tp(ctx, int(h.topic[r]), int(h.partition[r]))}: broker {leader} was elected leader uncleanly "
                     f"at offset {h.offset[r]} {via} (previous ISR {b['isr']}, ELR {b['eligibleLeaderReplicas']}, "
                     f"LastKnownElr {b['lastKnownElr']}, leader {b['leader']}): {loss}.")
    return [_event_table(ctx, UNCLEAN_ELECTION, rows, brokers, texts)]


def elr_fenced_leaders(ctx: Context) -> list[pa.Table]:
    """A leader newly taken from ELR or the last-known-leader path while it was not active (fenced, in
    controlled shutdown or unregistered at the record's offset)."""
    h = ctx.h
    p, cand, _in_isr, in_elr = _new_leader_rows(ctx)
    moved = cand & (h.leader != h.leader[p])
    lkl = (h.lke_len[p] == 1) & (h.lke[p, 0] == h.leader) & (h.isr_len[p] == 0) if h.n else np.zeros(0, bool)
    rows = np.flatnonzero(moved & (in_elr | lkl))
    if not len(rows):
        return []
    j = F.as_of(ctx.b_id, ctx.b_off, h.leader[rows], h.offset[rows])
    active = np.where(j >= 0, ctx.b_active[np.maximum(j, 0)] if len(ctx.b_active) else False, False)
    state = np.where(j < 0, "unregistered", "not active")
    keep = ~active
    rows, state = rows[keep], state[keep]
    if not len(rows):
        return []
    texts = [f"{_tp(ctx, int(h.topic[r]), int(h.partition[r]))}: broker {h.leader[r]} became leader at offset "
             f"{h.offset[r]} from the " + ("ELR" if in_elr[r] else "last known leader") + f" while it was {st} "
             "(fenced, in controlled shutdown or unregistered): the partition waits for it to return."
             for r, st in zip(rows.tolist(), state.tolist())]
    return [_event_table(ctx, ELR_MEMBER_FENCED_LEADER, rows, [[int(h.leader[r])] for r in rows], texts)]


# ------------------------------------------------------------------------------------ topic findings
def _topic_order(ctx: Context):
    t = ctx.topics
    off = F.np_col(t, "offset", None, np.int64)
    order = np.lexsort((off, ctx.t_code))
    code = ctx.t_code[order]
    breaks = np.ones(len(order), bool)
    if len(order):
        breaks[1:] = code[1:] != code[:-1]
    return order, off[order], code, breaks


def _config_runs(ctx: Context, setting: np.ndarray):
    """The runs of each topic's topic_config_history rows (in topic, offset order) where ``setting`` (per row, in
    table order) holds and the topic is not deleted: (order, off, code, starts, close, ms, ok, is_open, c, dur,
    dur_ok), or None when there is none.  ``close``: the row ending a run (-1: open to the end of the log)."""
    t = ctx.topics
    order, off, code, breaks = _topic_order(ctx)
    if not len(order):
        return None
    on = setting[order] & ~F.np_col(t, "deleted", False, bool)[order]
    starts, ends = F.runs(on, breaks)
    if not len(starts):
        return None
    nxt = ends + 1
    close = np.where((nxt < len(order)) & ~np.concatenate([breaks[1:], [True]])[ends], nxt, -1)
    ms, ok = F.millis(t.column("timestamp"))
    ms, ok = ms[order], ok[order]
    is_open = close < 0
    c = np.maximum(close, 0)
    end = np.where(is_open, ctx.end_ms or 0, ms[c])
    dur_ok = ok[starts] & np.where(is_open, ctx.end_ms is not None, ok[c])
    dur = np.where(dur_ok, end - ms[starts], 0)
    return order, off, code, starts, close, ms, ok, is_open, c, dur, dur_ok


def unclean_config(ctx: Context) -> list[pa.Table]:
    t = ctx.topics
    found = _config_runs(ctx, F.np_col(t, "unclean_leader_election_enable", False, bool))
    if found is None:
        return []
    order, off, code, starts, close, ms, ok, is_open, c, dur, dur_ok = found
    rows = order[starts]
    cfg = [{"uncleanLeaderElectionEnable": True, "minInsyncReplicas": m, "effectiveMinIsr": e}
           for m, e in zip(t.column("min_insync_replicas").take(pa.array(rows)).to_pylist(),
                           t.column("effective_min_isr").take(pa.array(rows)).to_pylist())]
    texts = [f"topic {_tp(ctx, int(code[s]), None)} resolves unclean.leader.election.enable=true from offset {off[s]} "
             + (f"until offset {off[close[k]]}" if close[k] >= 0 else "to the end of the log")
             + ": a leaderless partition may elect an out-of-sync replica and lose acknowledged records."
             for k, s in enumerate(starts.tolist())]
    return [_table(len(starts), code=UNCLEAN_CONFIG, severity=ctx.severities[UNCLEAN_CONFIG],
                   topic=[ctx.names[int(x)] for x in code[starts]], topic_id=ctx.dictionary.take(pa.array(code[starts])),
                   first_offset=off[starts], last_offset=(off[c], ~is_open), first_time=(ms[starts], ok[starts]),
                   last_time=(ms[c], ok[c] & ~is_open), duration_ms=(dur, dur_ok), open=is_open, brokers=[[]] * len(starts),
                   evidence_after=[_json(x) for x in cfg], explanation=texts)]


def diskless_topics(ctx: Context) -> list[pa.Table]:
    """DISKLESS_TOPIC: one INFO window per run of a topic's topic_config_history rows that resolve a leaderless /
    diskless config (image.DISKLESS_CONFIGS), saying why the ISR rules leave its partitions alone."""
    t = ctx.topics
    if "diskless" not in t.schema.names:
        return []
    found = _config_runs(ctx, t.column("diskless").is_valid().to_numpy(zero_copy_only=False))
    if found is None:
        return []
    order, off, code, starts, close, ms, ok, is_open, c, dur, dur_ok = found
    key = t.column("diskless").to_pylist()
    rows = order[starts]
    # partitions per topic: the distinct (topic, partition) pairs of the history, counted per topic
    parts: dict[int, int] = {}
    if ctx.h.n:
        # the history is sorted by (topic, partition, offset): a partition's first row starts its group
        parts = {int(x): int(n) for x, n in zip(*np.unique(ctx.h.topic[ctx.h.new_group], return_counts=True))}
    texts = []
    for k, s in enumerate(starts.tolist()):
        tc = int(code[s])
        npart = parts.get(tc, 0)
        texts.append(f"topic {_tp(ctx, tc, None)} is leaderless / diskless ({key[int(rows[k])]}=true) from offset {off[s]} "
                     + (f"until offset {off[close[k]]}" if close[k] >= 0 else "to the end of the log")
                     + f": its records live in object storage, not in the replicas' logs, so its {npart} partitions are "
                     "not judged by the ISR rules (UNDER_MIN_ISR, AT_MIN_ISR, OFFLINE, OFFLINE_NO_CANDIDATE, "
                     "LAST_REPLICA_STANDING, DATA_LOSS_LIKELY, UNCLEAN_ELECTION, ELR_MEMBER_FENCED_LEADER, "
                     "MIN_ISR_ABOVE_RF).")
    return [_table(len(starts), code=DISKLESS_TOPIC, severity=ctx.severities[DISKLESS_TOPIC],
                   topic=[ctx.names[int(x)] for x in code[starts]], topic_id=ctx.dictionary.take(pa.array(code[starts])),
                   first_offset=off[starts], last_offset=(off[c], ~is_open), first_time=(ms[starts], ok[starts]),
                   last_time=(ms[c], ok[c] & ~is_open), duration_ms=(dur, dur_ok), open=is_open, brokers=[[]] * len(starts),
                   evidence_after=[_json({key[int(r)]: "true"}) for r in rows.tolist()], explanation=texts)]


def min_isr_above_rf(ctx: Context) -> list[pa.Table]:
    """Partition windows where the configured min.insync.replicas exceeds the partition's replica count,
    merged per topic and configured value."""
    h = ctx.h
    pred = ~h.deleted & ~ctx.diskless & (ctx.configured > h.rf)
    starts, ends = F.runs(pred, h.new_group | np.concatenate([[True], ctx.configured[1:] != ctx.configured[:-1]])
                          if h.n else h.new_group)
    if not len(starts):
        return []
    close = h.next[ends]
    # one finding per (topic, configured value): earliest start, latest close (open if any is)
    key = h.topic[starts] * 1024 + np.minimum(ctx.configured[starts], 1023)
    uniq, inv = np.unique(key, return_inverse=True)
    out_rows = []
    for g in range(len(uniq)):  # one loop step per finding
        members = np.flatnonzero(inv == g)
        s = starts[members]
        first = s[np.argmin(h.offset[s])]
        cl = close[members]
        parts = sorted(set(h.partition[s].tolist()))
        last = -1 if (cl < 0).any() else cl[np.argmax(h.offset[cl])]
        out_rows.append((first, last, parts, sorted(set(h.rf[s].tolist()))))
    firsts = np.array([r[0] for r in out_rows])
    lasts = np.array([r[1] for r in out_rows])
    cols = _window_times(ctx, firsts, lasts, MIN_ISR_ABOVE_RF in LONG_WINDOW_CODES,
                         ctx.severities[MIN_ISR_ABOVE_RF], partition=False)
    texts = [f"topic {_tp(ctx, int(h.topic[f]), None)} sets min.insync.replicas={ctx.configured[f]} above the "
             f"replication factor {rfs} of {len(parts)} partition(s) {parts[:10]}{'...' if len(parts) > 10 else ''} "
             f"from offset {h.offset[f]}: the controller silently caps it at partition 0's replica count "
             f"(effective min ISR {ctx.m[f]})."
             for f, _l, parts, rfs in out_rows]
    cfg = [{"minInsyncReplicas": int(ctx.configured[f]), "effectiveMinIsr": int(ctx.m[f]), "replicationFactors": rfs,
            "partitions": parts} for f, _l, parts, rfs in out_rows]
    return [_table(len(firsts), code=MIN_ISR_ABOVE_RF, topic=[ctx.names[t] for t in h.topic[firsts]],
                   topic_id=ctx.dictionary.take(pa.array(h.topic[firsts])), brokers=[[]] * len(firsts),
                   evidence_after=[_json(x) for x in cfg], explanation=texts, **cols)]


def cleared_elr(ctx: Context) -> list[pa.Table]:
    """MIN_ISR_CHANGE_CLEARED_ELR: the partitions a ClearElrRecord emptied, one finding per topic and record,
    with the min.insync.replicas change it followed."""
    h = ctx.h
    rows = np.flatnonzero(h.record_type == CLEAR_ELR)
    if not len(rows):
        return []
    key = h.topic[rows] * F.BIG + h.offset[rows]
    uniq, first_idx = np.unique(key, return_index=True)
    heads = rows[first_idx]
    before = _states(ctx, h.prev[rows])
    # the configured value before / after, from the topic timeline
    t = ctx.topics
    t_off = F.np_col(t, "offset", None, np.int64)
    t_min = F.np_col(t, "min_insync_replicas", 1, np.int64)
    texts, brokers, evidence = [], [], []
    for hd in heads.tolist():
        grp = np.flatnonzero((h.topic[rows] == h.topic[hd]) & (h.offset[rows] == h.offset[hd]))
        parts = sorted(int(h.partition[rows[g]]) for g in grp)
        who = sorted({b for g in grp for b in (before[g] or {}).get("eligibleLeaderReplicas", [])
                      + (before[g] or {}).get("lastKnownElr", []) if b >= 0})
        same = np.flatnonzero((ctx.t_code == h.topic[hd]) & (t_off <= h.offset[hd]))
        same = same[np.argsort(t_off[same], kind="stable")]
        change = None
        for k in range(len(same) - 1, 0, -1):
            if t_min[same[k]] != t_min[same[k - 1]]:
                change = (int(t_off[same[k]]), int(t_min[same[k - 1]]), int(t_min[same[k]]))
                break
        what = (f"after min.insync.replicas changed from {change[1]} to {change[2]} at offset {change[0]}"
                if change else "after a min.insync.replicas change")
        texts.append(f"topic {_tp(ctx, int(h.topic[hd]), None)}: the ClearElrRecord at offset {h.offset[hd]} {what} "
                     f"emptied the ELR / LastKnownElr of {len(parts)} partition(s) {parts[:10]}: brokers {who} are no "
                     "longer clean leader candidates.")
        brokers.append(who)
        evidence.append({"minInsyncReplicas": change[2] if change else None, "partitions": parts})
    ms, ok = h.time[heads], h.time_ok[heads]
    return [_table(len(heads), code=MIN_ISR_CHANGE_CLEARED_ELR, severity=ctx.severities[MIN_ISR_CHANGE_CLEARED_ELR],
                   topic=[ctx.names[x] for x in h.topic[heads]], topic_id=ctx.dictionary.take(pa.array(h.topic[heads])),
                   first_offset=h.offset[heads], last_offset=(h.offset[heads], np.ones(len(heads), bool)),
                   first_time=(ms, ok), last_time=(ms, ok), duration_ms=(np.zeros(len(heads), np.int64), ok),
                   open=False, brokers=brokers, evidence_after=[_json(x) for x in evidence], explanation=texts)]


# ----------------------------------------------------------------------------------------- breaches
def _time_at(ctx: Context, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The time of the last record at or before each offset that any silver table dates."""
    parts_off, parts_ms = [ctx.h.offset[ctx.h.time_ok]], [ctx.h.time[ctx.h.time_ok]]
    for t in (ctx.brokers, ctx.topics):
        if t.num_rows:
            ms, ok = F.millis(t.column("timestamp"))
            parts_off.append(F.np_col(t, "offset", None, np.int64)[ok])
            parts_ms.append(ms[ok])
    off, ms = np.concatenate(parts_off), np.concatenate(parts_ms)
    order = np.argsort(off, kind="stable")
    off, ms = off[order], ms[order]
    j = np.searchsorted(off, offsets, side="right") - 1
    return np.where(j >= 0, ms[np.maximum(j, 0)] if len(ms) else 0, 0), j >= 0


def breaches(ctx: Context) -> list[pa.Table]:
    b = ctx.breaches
    if b is None or not b.num_rows:
        return []
    h = ctx.h
    off = F.np_col(b, "offset", None, np.int64)
    # a topic name -> the id it had at the breach's offset (names can be reused after a deletion)
    t_names = np.asarray(ctx.topics.column("topic_name").to_pylist(), dtype=object)
    t_off = F.np_col(ctx.topics, "offset", None, np.int64)
    code = np.full(b.num_rows, -1, np.int64)
    for i, (name, o) in enumerate(zip(b.column("topic").to_pylist(), off.tolist())):
        cand = np.flatnonzero((t_names == name) & (t_off <= o))
        if len(cand):
            code[i] = ctx.t_code[cand[np.argmax(t_off[cand])]]
        elif name is not None:  # the checker names a topic it does not know by its id
            code[i] = F.codes(pa.array([name], pa.string()), ctx.dictionary)[0]
    part = F.np_col(b, "partition", -1, np.int64)
    # the breach's partition as a group number (rows are sorted by topic code, then partition)
    group = np.cumsum(h.new_group) - 1
    heads = np.flatnonzero(h.new_group)
    head_key = h.topic[heads] * (1 << 31) + h.partition[heads]
    q = code * (1 << 31) + part
    g = np.clip(np.searchsorted(head_key, q), 0, max(len(heads) - 1, 0))
    known = (code >= 0) & (part >= 0) & (len(heads) > 0)
    known &= head_key[g] == q if len(heads) else False
    qg = np.where(known, g, -1)
    after = np.where(known, F.as_of(group, h.offset, qg, off), -1)
    before = np.where(known, F.as_of(group, h.offset, qg, off, strict=True), -1)
    ms, ok = _time_at(ctx, off)
    return [_table(b.num_rows, code=b.column("rule"), severity=b.column("severity"), topic=b.column("topic"),
                   topic_id=[ctx.dictionary[c].as_py() if c >= 0 else None for c in code.tolist()],
                   partition=(part, part >= 0), first_offset=off, last_offset=(off, np.ones(len(off), bool)),
                   first_time=(ms, ok), last_time=(ms, ok), duration_ms=(np.zeros(len(off), np.int64), ok), open=False,
                   brokers=[[]] * b.num_rows, evidence_before=_evidence(ctx, before),
                   evidence_after=_evidence(ctx, after), explanation=b.column("message"))]


# ---------------------------------------------------------------------------------- cluster findings
def _epoch(e) -> str:
    return "unknown" if e is None or e < 0 else str(int(e))


def metadata_gap_findings(ctx: Context) -> list[pa.Table]:
    """One METADATA_GAP per stretch of the log no controller wrote."""
    g = ctx.gaps
    n = len(g)
    if not n:
        return []
    dur = g.end_ms - g.start_ms
    eb = g.before_epoch if g.before_epoch is not None else np.full(n, -1)
    ea = g.after_epoch if g.after_epoch is not None else np.full(n, -1)
    texts = []
    for d, a, b, x, y in zip(dur.tolist(), g.before_offset.tolist(), g.after_offset.tolist(), eb.tolist(), ea.tolist()):
        who = (f"controller epoch {_epoch(x)} before, {_epoch(y)} after" if x != y else
               f"the same controller epoch {_epoch(x)} on both sides: its leader stalled")
        texts.append(f"no metadata record for {_dur(int(d))} between offset {a} and offset {b} ({who}): no active "
                     f"controller wrote the log (the cluster was stopped or had no quorum); what happened meanwhile is "
                     f"unknown, and the partition windows across it leave this time out of their durations.")
    ok = np.ones(n, bool)
    evidence = [_json({"lastOffsetBefore": int(a), "firstOffsetAfter": int(b), "controllerEpochBefore": int(x),
                       "controllerEpochAfter": int(y)})
                for a, b, x, y in zip(g.before_offset.tolist(), g.after_offset.tolist(), eb.tolist(), ea.tolist())]
    return [_table(n, code=METADATA_GAP, first_offset=g.before_offset, last_offset=(g.after_offset, ok),
                   first_time=(g.start_ms, ok), last_time=(g.end_ms, ok), duration_ms=(dur, ok),
                   open=np.zeros(n, bool), brokers=[[]] * n, evidence_before=evidence,
                   severity=[ctx.severities[METADATA_GAP]] * n, explanation=texts)]


def cluster_down_findings(ctx: Context) -> list[pa.Table]:
    """One CLUSTER_DOWN per period in which no registered broker was active."""
    d = ctx.events.down
    n = len(d)
    if not n:
        return []
    dur = d.end_ms - d.start_ms - excluded_ms(ctx.gaps, d.start_ms, d.end_ms)
    texts = []
    for k in range(n):
        until = (f"until offset {int(d.last_offset[k])}" if not d.open[k] else "and still at the end of the log")
        gap = int(excluded_ms(ctx.gaps, d.start_ms[k:k + 1], d.end_ms[k:k + 1])[0]) if d.time_ok[k] else 0
        how = _dur(int(dur[k])) if d.time_ok[k] else _dur(None)
        how += f", plus {_dur(gap)} in which no controller wrote the log" if gap else ""
        texts.append(f"no registered broker was active from offset {int(d.first_offset[k])} {until} ({how}): brokers "
                     f"{d.brokers[k]} were fenced, in controlled shutdown or gone, so no partition could have a "
                     f"leader; the partition windows inside this outage are reported as INFO.")
    ok = d.time_ok
    return [_table(n, code=CLUSTER_DOWN, first_offset=d.first_offset, last_offset=(d.last_offset, ~d.open),
                   first_time=(d.start_ms, ok), last_time=(d.end_ms, ok & ~d.open), duration_ms=(dur, ok),
                   open=d.open, brokers=d.brokers, severity=[ctx.severities[CLUSTER_DOWN]] * n, explanation=texts,
                   evidence_after=[_json({"registeredBrokers": b, "activeBrokers": []}) for b in d.brokers])]


def controller_election_findings(ctx: Context) -> list[pa.Table]:
    """One CONTROLLER_ELECTION per LeaderChange after the log's first."""
    e = ctx.events.elections
    n = len(e)
    if not n:
        return []
    texts = [f"the metadata quorum elected node {int(b)} active controller at offset {int(o)} (epoch {_epoch(y)}; "
             f"before: node {int(a)}, epoch {_epoch(x)}); the log was silent for {_dur(int(q))} before it."
             for o, a, b, x, y, q in zip(e.offset.tolist(), e.prev_leader.tolist(), e.leader.tolist(),
                                         e.prev_epoch.tolist(), e.epoch.tolist(), e.silent_ms.tolist())]
    ok = np.ones(n, bool)
    return [_table(n, code=CONTROLLER_ELECTION, first_offset=e.offset, last_offset=(e.offset, ok),
                   first_time=(e.ms, ok), last_time=(e.ms, ok), duration_ms=(np.zeros(n, np.int64), ok),
                   open=np.zeros(n, bool), brokers=[[int(b)] for b in e.leader.tolist()],
                   severity=[ctx.severities[CONTROLLER_ELECTION]] * n, explanation=texts,
                   evidence_before=[_json({"leaderId": int(a), "leaderEpoch": int(x)})
                                    for a, x in zip(e.prev_leader.tolist(), e.prev_epoch.tolist())],
                   evidence_after=[_json({"leaderId": int(b), "leaderEpoch": int(y)})
                                   for b, y in zip(e.leader.tolist(), e.epoch.tolist())])]


# ---------------------------------------------------------------------------------------------- main
# per topic: a chunk of topics (audit.run) runs these; the cluster's findings are computed once
FINDERS = (partition_windows, last_replica, unclean_elections, elr_fenced_leaders, unclean_config, min_isr_above_rf,
           cleared_elr, breaches, diskless_topics)
CLUSTER_FINDERS = (metadata_gap_findings, cluster_down_findings, controller_election_findings)


def violations(tables: dict[str, pa.Table], config: dict, end_offset: int, end_time, *, cluster: bool = True,
               topics: bool = True, events: ClusterEvents | None = None) -> pa.Table:
    """The durability violations of one cluster (``VIOLATION_SCHEMA``, ``cluster`` null), ordered by
    first offset, code, topic and partition.

    ``tables``: partition_state_history, broker_state_history, topic_config_history and (optional)
    invariant_breaches as Arrow tables; ``config``: the loaded configuration (``audit.severities``,
    ``audit.long_window_ms``); ``end_offset`` / ``end_time`` (epoch ms or datetime): the end of the log,
    where open windows are measured to.  ``cluster`` / ``topics``: the cluster-level findings
    (:data:`CLUSTER_FINDERS`) / the per-topic ones (:data:`FINDERS`); ``events``: the cluster's events
    (:func:`cluster_events`) when the caller has them already (one per audit, not one per chunk)."""
    if not topics:  # the cluster's findings read no partition history: none is indexed for them
        tables = {**tables, **{t.name: tables[t.name].slice(0, 0)
                               for t in (catalog.PARTITION_STATE_HISTORY, catalog.TOPIC_CONFIG_HISTORY)}}
    ctx = _context(tables, config, end_offset, end_time, events)
    finders = (FINDERS if topics else ()) + (CLUSTER_FINDERS if cluster else ())
    parts = [t for finder in finders for t in finder(ctx)]
    del ctx
    if not parts:
        return VIOLATION_SCHEMA.empty_table()
    return F.sorted_rows(parts, ORDER)


ORDER = (("first_offset", "ascending"), ("code", "ascending"), ("topic_id", "ascending"), ("partition", "ascending"))
