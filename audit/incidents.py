"""Incidents: the audit's findings grouped by cause and time, so an operator reads one line per outage
instead of one per partition (the gold ``incidents`` table; each violation row names its incident).

Causes, tried in this order (a finding belongs to the first incident that explains it):

* ``CLUSTER_RESTART`` / ``METADATA_GAP`` -- CLUSTER_DOWN and METADATA_GAP findings closer than
  ``audit.incident_merge_ms`` form one incident (a restart when no broker was active, else a stretch no
  controller wrote).  It explains the partition findings that touch it and start no earlier than
  ``incident_merge_ms`` before it, the controller elections within ``incident_merge_ms`` of it, and the
  brokers that went down in that lead-up (an operator stopping a cluster stops its brokers one by one) with
  the findings that start in it.
* ``BROKER_DOWN`` / ``AZ_LOSS`` / ``BROKERS_DOWN`` -- a broker leaving the active set (fence, controlled
  shutdown, unregistration, a new registration) until it is active again; brokers going down within
  ``incident_merge_ms`` of each other, or while another is still down, are one incident.  All brokers of
  one rack (of a cluster with several racks) is an AZ loss.  It explains the partition findings that start
  while it lasts.  Created only when it explains something.
* ``UNCLEAN_ELECTION`` -- unclean elections and likely data losses nothing above explains, closer than
  ``incident_merge_ms``.

Topic configuration findings (UNCLEAN_CONFIG, MIN_ISR_ABOVE_RF, MIN_ISR_CHANGE_CLEARED_ELR) and findings
no cause explains stay outside incidents.  An incident's id is its first offset and cause: the same
incident in two audits of a growing log keeps its id (what ``--fail-on-new`` compares).

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit import frames as F
from audit.cluster_events import previous_active
from controller_core import codes as C
from controller_core.brokers import active_rows
from controller_core.codes import SEVERITIES
from lake import catalog

TS = pa.timestamp("us", tz="UTC")
CAUSES = tuple(C.INCIDENT_CAUSES)  # declared with the finding codes
CLUSTER_RESTART, METADATA_GAP, AZ_LOSS, BROKERS_DOWN, BROKER_DOWN, UNCLEAN_ELECTION = CAUSES
OUTSIDE = frozenset({C.UNCLEAN_CONFIG, C.MIN_ISR_ABOVE_RF, C.MIN_ISR_CHANGE_CLEARED_ELR})  # never in an incident
OUTAGES = frozenset({C.CLUSTER_DOWN, C.METADATA_GAP})
UNCLEAN = frozenset({C.UNCLEAN_ELECTION, C.DATA_LOSS_LIKELY})
RANK = {s: i for i, s in enumerate(SEVERITIES)}
FAR = np.iinfo(np.int64).max // 4

INCIDENT_SCHEMA = pa.schema([
    pa.field("cluster", pa.string()),  # filled by the caller
    pa.field("incident_id", pa.string(), nullable=False),
    pa.field("cause", pa.string(), nullable=False),
    pa.field("severity", pa.string(), nullable=False),  # the worst of its findings
    pa.field("first_offset", pa.int64(), nullable=False),
    pa.field("last_offset", pa.int64()),  # null while it is still going on at the end of the log
    pa.field("first_time", TS),
    pa.field("last_time", TS),
    pa.field("duration_ms", pa.int64()),
    pa.field("open", pa.bool_(), nullable=False),
    pa.field("brokers", pa.list_(pa.int32())),
    pa.field("partitions", pa.int64(), nullable=False),  # distinct partitions among its findings
    pa.field("findings", pa.int64(), nullable=False),
    pa.field("codes", pa.list_(pa.string())),  # the codes of its findings, most severe first
    pa.field("title", pa.string(), nullable=False),
])


def _dur(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    s = ms / 1000
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min" if s < 7200 else f"{s / 3600:.1f} h"


# ------------------------------------------------------------------------------------- broker downs
def broker_downs(brokers: pa.Table | None, end_ms: int | None) -> dict[str, np.ndarray]:
    """Every time a broker left the active set: its id, offset, time, how (the record), and when it was
    active again (offset -1 / time ``end_ms``: still down at the end)."""
    keys = ("broker", "offset", "ms", "up_offset", "up_ms", "how", "rack")
    if brokers is None or not brokers.num_rows:
        return {k: np.zeros(0, np.int64 if k not in ("how", "rack") else object) for k in keys}
    off = F.np_col(brokers, "offset", None, np.int64)
    bid = F.np_col(brokers, "broker_id", None, np.int64)
    ms, _ = F.millis(brokers.column("timestamp"))
    act = active_rows(brokers)
    event = np.asarray(brokers.column("event").to_pylist(), dtype=object)
    cs = F.np_col(brokers, "in_controlled_shutdown", False, bool)
    rack = np.asarray(brokers.column("rack").to_pylist(), dtype=object)
    order = np.lexsort((off, bid))
    off, bid, ms, act, event, cs, rack = (x[order] for x in (off, bid, ms, act, event, cs, rack))
    first = np.r_[True, bid[1:] != bid[:-1]]
    prev = previous_active(bid, off, act)
    down = np.flatnonzero(prev & ~act)
    up = np.flatnonzero(~prev & act & ~first)
    # the first "up" of the same broker after each down
    key_up = bid[up] * F.BIG + off[up]
    k = np.searchsorted(key_up, bid[down] * F.BIG + off[down], side="right")
    kk = np.minimum(k, max(len(up) - 1, 0))
    found = (k < len(up)) & (bid[up[kk]] == bid[down]) if len(up) else np.zeros(len(down), bool)
    up_off = np.where(found, off[up[kk]] if len(up) else -1, -1)
    up_ms = np.where(found, ms[up[kk]] if len(up) else 0, end_ms if end_ms is not None else FAR)
    how = np.where(event[down] == "FENCE_BROKER_RECORD", "fenced",
                   np.where(event[down] == "UNREGISTER_BROKER_RECORD", "unregistered",
                            np.where(event[down] == "REGISTER_BROKER_RECORD", "restarted",
                                     np.where(cs[down], "controlled shutdown", "fenced"))))
    return {"broker": bid[down], "offset": off[down], "ms": ms[down], "up_offset": up_off, "up_ms": up_ms,
            "how": how.astype(object), "rack": rack[down]}


def _racks(brokers: pa.Table | None) -> dict[int, str | None]:
    """Each broker's rack from its latest row that names one."""
    out: dict[int, str | None] = {}
    if brokers is None or not brokers.num_rows:
        return out
    t = brokers.select(["broker_id", "offset", "rack"]).sort_by([("offset", "ascending")])
    for b, r in zip(t.column("broker_id").to_pylist(), t.column("rack").to_pylist()):
        if r is not None or b not in out:
            out[b] = r
    return out


# ------------------------------------------------------------------------------------------ grouping
def _chain(start: np.ndarray, end: np.ndarray, after_start: int, after_end: int) -> np.ndarray:
    """Group numbers of intervals sorted by start: a new group where one starts more than ``after_start``
    after the previous one started and more than ``after_end`` after every earlier one ended."""
    if not len(start):
        return np.zeros(0, np.int64)
    reach = np.maximum.accumulate(end)
    new = np.r_[True, (start[1:] - start[:-1] > after_start) & (start[1:] > reach[:-1] + after_end)]
    return np.cumsum(new) - 1


class _Builder:
    def __init__(self, v: pa.Table, end_ms: int | None):
        self.v = v
        n = v.num_rows
        self.code = F.objects(v.column("code"))
        self.a, a_ok = F.millis(v.column("first_time"))
        b, b_ok = F.millis(v.column("last_time"))
        is_open = np.asarray(v.column("open").to_numpy(zero_copy_only=False), bool)
        self.b = np.where(is_open, end_ms if end_ms is not None else FAR, np.where(b_ok, b, self.a))
        self.ok = a_ok
        self.first_offset = F.np_col(v, "first_offset", None, np.int64)
        self.free = self.ok & ~np.isin(self.code, list(OUTSIDE))
        self.owner = np.full(n, -1, np.int64)
        self.groups: list[dict] = []

    def take(self, rows: np.ndarray, **group) -> None:
        rows = rows[self.free[rows]]
        if not len(rows):
            return
        g = len(self.groups)
        self.owner[rows] = g
        self.free[rows] = False
        self.groups.append(group)

    def cluster(self, merge_ms: int, downs: dict) -> np.ndarray:
        """Cluster incidents; returns the mask of broker downs that are part of one."""
        rows = np.flatnonzero(np.isin(self.code, list(OUTAGES)) & self.free)
        in_restart = np.zeros(len(downs["broker"]), bool)
        if not len(rows):
            return in_restart
        rows = rows[np.argsort(self.a[rows], kind="stable")]
        group = _chain(self.a[rows], self.b[rows], -1, merge_ms)  # outages closer than merge_ms
        for g in range(int(group[-1]) + 1):
            mine = rows[group == g]
            lo, hi = int(self.a[mine].min()), int(self.b[mine].max())
            restart = bool((self.code[mine] == C.CLUSTER_DOWN).any())
            # the brokers stopped in the lead-up to it belong to it
            lead = (downs["ms"] >= lo - merge_ms) & (downs["ms"] <= hi)
            in_restart |= lead
            start = min([lo] + downs["ms"][lead].tolist())
            # what starts in it (its lead-up included), or overlaps the outage having started shortly before
            touch = self.free & (self.a <= hi) & (((self.b >= lo) & (self.a >= start - merge_ms)) | (self.a >= start))
            elect = self.free & (self.code == C.CONTROLLER_ELECTION) & (self.a >= lo - merge_ms) & (
                self.a <= hi + merge_ms)
            members = np.unique(np.concatenate([mine, np.flatnonzero(touch | elect)]))
            self.take(members, cause=CLUSTER_RESTART if restart else METADATA_GAP,
                      brokers=sorted({int(x) for x in downs["broker"][lead]}
                                     | {b for r in mine.tolist() for b in (self.v.column("brokers")[r].as_py() or [])}),
                      how={})
        return in_restart

    def brokers(self, merge_ms: int, downs: dict, skip: np.ndarray, racks: dict) -> None:
        keep = np.flatnonzero(~skip)
        if not len(keep):
            return
        keep = keep[np.lexsort((downs["offset"][keep], downs["ms"][keep]))]
        s, e = downs["ms"][keep], downs["up_ms"][keep]
        group = _chain(s, e, merge_ms, 0)  # down within merge_ms of the previous, or while it is still down
        all_racks = {r for r in racks.values() if r is not None}
        for g in range(int(group[-1]) + 1):
            mine = keep[group == g]
            lo, hi = int(downs["ms"][mine].min()), int(downs["up_ms"][mine].max())
            rows = np.flatnonzero(self.free & (self.a >= lo) & (self.a <= hi) & ~np.isin(self.code, list(OUTAGES)))
            who = sorted({int(b) for b in downs["broker"][mine]})
            rack = {racks.get(b) for b in who}
            if len(who) == 1:
                cause = BROKER_DOWN
            elif (len(rack) == 1 and None not in rack and len(all_racks) >= 2
                  and set(who) == {b for b, r in racks.items() if r in rack}):
                cause = AZ_LOSS
            else:
                cause = BROKERS_DOWN
            how: dict[int, str] = {}
            for b, h in zip(downs["broker"][mine].tolist(), downs["how"][mine].tolist()):
                how.setdefault(int(b), h)
            self.take(rows, cause=cause, brokers=who, how=how, rack=next(iter(rack)) if cause == AZ_LOSS else None)

    def unclean(self, merge_ms: int) -> None:
        rows = np.flatnonzero(self.free & np.isin(self.code, list(UNCLEAN)))
        if not len(rows):
            return
        rows = rows[np.argsort(self.a[rows], kind="stable")]
        group = _chain(self.a[rows], self.a[rows], merge_ms, merge_ms)
        for g in range(int(group[-1]) + 1):
            mine = rows[group == g]
            who = sorted({b for r in mine.tolist() for b in (self.v.column("brokers")[r].as_py() or [])})
            self.take(mine, cause=UNCLEAN_ELECTION, brokers=who, how={})


# ---------------------------------------------------------------------------------------------- main
def group(violations: pa.Table, tables: dict[str, pa.Table], config: dict,
          end_ms: int | None) -> tuple[pa.Table, pa.Table]:
    """(violations with ``incident_id`` filled in, the incidents: INCIDENT_SCHEMA, most severe first, then
    in log order)."""
    merge_ms = int(config["audit"].get("incident_merge_ms") or 0)
    brokers = tables.get(catalog.BROKER_STATE_HISTORY.name)
    b = _Builder(violations, end_ms)
    downs = broker_downs(brokers, end_ms)
    in_restart = b.cluster(merge_ms, downs)
    b.brokers(merge_ms, downs, in_restart, _racks(brokers))
    b.unclean(merge_ms)
    rows = _incident_rows(b, violations, end_ms)
    ids = [r["incident_id"] for r in rows]
    owner = b.owner
    col = pa.array(ids, pa.string()).take(pa.array(owner, mask=owner < 0))
    out = violations.set_column(violations.schema.get_field_index("incident_id"), "incident_id", col)
    table = pa.Table.from_pylist(rows, schema=INCIDENT_SCHEMA)
    if table.num_rows:
        rank = pc.index_in(table.column("severity"), pa.array(list(SEVERITIES)))
        table = (table.append_column("_rank", rank).sort_by([("_rank", "ascending"), ("first_offset", "ascending")])
                 .drop_columns(["_rank"]))
    return out, table


def _incident_rows(b: _Builder, v: pa.Table, end_ms: int | None) -> list[dict]:
    if not b.groups:
        return []
    sev = F.objects(v.column("severity"))
    topic = F.codes(v.column("topic_id"), F.topic_dictionary(v.column("topic_id")))
    part = F.np_col(v, "partition", -1, np.int64)
    where = np.where(part >= 0, (topic + 1) * (1 << 32) + part, -1)  # one number per partition
    last_off = np.where(pc.is_valid(v.column("last_offset")).to_numpy(zero_copy_only=False),
                        F.np_col(v, "last_offset", 0, np.int64), b.first_offset)
    is_open = np.asarray(v.column("open").to_numpy(zero_copy_only=False), bool)
    order = np.argsort(b.owner, kind="stable")
    owners = b.owner[order]
    out = []
    for g, info in enumerate(b.groups):
        lo_i, hi_i = np.searchsorted(owners, g), np.searchsorted(owners, g, side="right")
        rows = order[lo_i:hi_i]
        codes = sorted(set(b.code[rows].tolist()), key=lambda c: (min(RANK[s] for s in sev[rows][b.code[rows] == c]), c))
        worst = min(sev[rows].tolist(), key=lambda s: RANK[s])
        first = int(b.first_offset[rows].min())
        going = bool(is_open[rows].any())
        last = None if going else int(last_off[rows].max())
        start, stop = int(b.a[rows].min()), int(b.b[rows].max())
        dur = None if stop >= FAR else stop - start
        parts = np.unique(where[rows][where[rows] >= 0])
        cause = info["cause"]
        out.append({
            "incident_id": f"{first}-{cause}", "cause": cause, "severity": worst, "first_offset": first,
            "last_offset": last, "first_time": start * 1000, "last_time": None if going or dur is None else stop * 1000,
            "duration_ms": dur, "open": going, "brokers": info["brokers"], "partitions": len(parts),
            "findings": len(rows), "codes": codes,
            "title": _title(cause, info, b, rows, len(parts), dur, going)})
    for r in out:  # microseconds, as the schema's timestamps
        r["first_time"] = pa.scalar(r["first_time"], pa.int64()).cast(TS) if r["first_time"] is not None else None
        if r["last_time"] is not None:
            r["last_time"] = pa.scalar(r["last_time"], pa.int64()).cast(TS)
    return out


def _title(cause: str, info: dict, b: _Builder, rows: np.ndarray, n_parts: int, dur: int | None, going: bool) -> str:
    """One line an operator reads first."""
    how_long = ("still going on at the end of the log" if going else f"for {_dur(dur)}")
    extra = ""
    if (b.code[rows] == C.UNCLEAN_ELECTION).any() and cause != UNCLEAN_ELECTION:
        extra += "; unclean election(s)"
    if (b.code[rows] == C.DATA_LOSS_LIKELY).any() and cause != UNCLEAN_ELECTION:
        extra += "; likely data loss"
    affected = f"{n_parts} partition(s) affected" if n_parts else "no partition finding"
    who = info["brokers"]
    if cause in (CLUSTER_RESTART, METADATA_GAP):
        is_gap = b.code[rows] == C.METADATA_GAP
        gap = int((b.b[rows][is_gap] - b.a[rows][is_gap]).sum())
        down = (b.code[rows] == C.CLUSTER_DOWN).any()
        parts = []
        if down:
            parts.append(f"no broker active (brokers {who} stopped)")
        if gap:
            parts.append(f"no controller wrote the log for {_dur(gap)}")
        elections = int((b.code[rows] == C.CONTROLLER_ELECTION).sum())
        if elections:
            parts.append(f"{elections} controller election(s)")
        head = "cluster restart" if cause == CLUSTER_RESTART else "metadata quorum down"
        return f"{head} {how_long}: {', '.join(parts)}{extra}; {affected}"
    if cause == UNCLEAN_ELECTION:
        n = int((b.code[rows] == C.UNCLEAN_ELECTION).sum())
        lost = int((b.code[rows] == C.DATA_LOSS_LIKELY).sum())
        what = [x for x in (f"{n} unclean election(s)" if n else "", f"{lost} likely data loss(es)" if lost else "") if x]
        return f"{' and '.join(what)}; {affected}"
    how = info.get("how", {})
    ways = ", ".join(f"{x} {how[x]}" for x in who)
    head = (f"rack {info.get('rack')} lost: brokers {ways}" if cause == AZ_LOSS else
            f"broker {ways}" if cause == BROKER_DOWN else f"brokers {ways}")
    return f"{head} {how_long}{extra}; {affected}"
