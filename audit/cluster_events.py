"""Cluster-level events, read from the log itself, that explain many partition findings at once.

* **metadata gaps** (:mod:`audit.gaps`): no record for ``audit.metadata_gap_ms``; no controller wrote the log;
* **cluster down**: no registered broker is active (registered, unfenced, not in controlled shutdown:
  :func:`controller_core.brokers.active`) after one was -- a whole-cluster stop or restart, or the last
  broker of a small cluster going away.  Nothing can lead a partition meanwhile;
* **controller elections**: every LeaderChange control record after the first one of the log (the first only
  says who led when the log starts), with the Raft epoch before and after and how long the log was silent
  before it (a stalled or lost quorum).

A partition window that overlaps a gap or a cluster-down period is *attributed* to it: the cluster-level
finding reports the outage once, and an availability window (:data:`OUTAGE_WINDOWS`) is INFO unless the
partition stayed in that state for ``audit.long_window_ms`` outside the outage (:func:`attributed_severity`).  Both the vectorized finders
(:mod:`audit.violations`) and the scalar reference (:mod:`audit.scalar`) take the events from here.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit import frames as F
from audit.gaps import Gaps, Intervals, metadata_gaps
from controller_core import codes as C
from controller_core.brokers import active_rows
from lake import catalog

LEADER_CHANGE = "LEADER_CHANGE"


# ------------------------------------------------------------------------------------------ the events
@dataclass
class Down:
    """Cluster-down periods: no registered broker active."""

    first_offset: np.ndarray  # the broker record that left no broker active
    last_offset: np.ndarray  # the record that made one active again (-1: still down at the end)
    start_ms: np.ndarray
    end_ms: np.ndarray  # of that record, or the end of the log when still down
    time_ok: np.ndarray  # both times known
    open: np.ndarray
    brokers: list  # the registered brokers when it began

    def __len__(self) -> int:
        return len(self.first_offset)


@dataclass
class Elections:
    """Controller (Raft quorum) elections: LeaderChange records after the log's first."""

    offset: np.ndarray
    ms: np.ndarray
    leader: np.ndarray
    epoch: np.ndarray
    prev_leader: np.ndarray
    prev_epoch: np.ndarray
    silent_ms: np.ndarray  # since the record before it

    def __len__(self) -> int:
        return len(self.offset)


@dataclass
class ClusterEvents:
    gaps: Gaps
    down: Down
    elections: Elections
    outages: Intervals  # gaps and cluster-down periods, merged: what partition windows are attributed to

    def attributed(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(attributed, time outside every outage) of windows [a, b] (ms)."""
        return self.outages.touches(a, b), (np.asarray(b, np.int64) - np.asarray(a, np.int64)
                                            - self.outages.covered(a, b))


# the availability windows an outage explains.  Not LAST_REPLICA_STANDING: its exposure (one replica left
# holding committed data) began before the outage and is what makes a crash in it lose data
OUTAGE_WINDOWS = frozenset({C.UNDER_MIN_ISR, C.AT_MIN_ISR, C.OFFLINE, C.OFFLINE_NO_CANDIDATE})


def attributed_severity(code: str, severity: str, attributed: bool, outside_ms: int, long_ms: int) -> str:
    """The severity of a partition window given its attribution: an availability window that overlaps an
    outage is INFO (the outage is the finding) unless the partition stayed so for ``long_ms`` outside of it."""
    if code in OUTAGE_WINDOWS and attributed and (long_ms <= 0 or outside_ms < long_ms):
        return C.INFO
    return severity


def _empty_down() -> Down:
    z = np.zeros(0, np.int64)
    return Down(z, z, z, z, np.zeros(0, bool), np.zeros(0, bool), [])


def previous_active(bid: np.ndarray, order_key: np.ndarray, act: np.ndarray) -> np.ndarray:
    """Per broker_state_history row, whether the same broker was active after its previous row (``order_key``:
    the rows' order, e.g. their offsets; False for a broker's first row)."""
    n = len(bid)
    by_broker = np.lexsort((np.arange(n), order_key, bid))
    prev = np.zeros(n, bool)
    if n:
        same = bid[by_broker][1:] == bid[by_broker][:-1]
        prev[by_broker[1:]] = np.where(same, act[by_broker[:-1]], False)
    return prev


def cluster_down(brokers: pa.Table, end_ms: int | None) -> Down:
    """The periods after a broker record left no registered broker active, once one had been."""
    if brokers is None or not brokers.num_rows:
        return _empty_down()
    off = F.np_col(brokers, "offset", None, np.int64)
    bid = F.np_col(brokers, "broker_id", None, np.int64)
    ms, ms_ok = F.millis(brokers.column("timestamp"))
    act = active_rows(brokers)
    reg = F.np_col(brokers, "registered", False, bool)
    order = np.argsort(off, kind="stable")
    off, bid, ms, ms_ok, act, reg = off[order], bid[order], ms[order], ms_ok[order], act[order], reg[order]
    # each row's change to the number of active brokers: its state against the same broker's row before
    prev = previous_active(bid, np.arange(len(off)), act)
    count = np.cumsum(act.astype(np.int64) - prev.astype(np.int64))
    # the count after the last record at each offset decides (a snapshot lists every broker at one offset)
    last = np.r_[off[1:] != off[:-1], True]
    g_off, g_cnt, g_ms, g_ok = off[last], count[last], ms[last], ms_ok[last]
    seen = np.maximum.accumulate(g_cnt > 0)
    down = (g_cnt == 0) & np.r_[False, seen[:-1]]
    starts = np.flatnonzero(down & ~np.r_[False, down[:-1]])
    if not len(starts):
        return _empty_down()
    ends = np.flatnonzero(~down & np.r_[False, down[:-1]])  # the first group active again after each run
    k = np.searchsorted(ends, starts)
    is_open = k >= len(ends)
    close = np.where(is_open, 0, ends[np.minimum(k, max(len(ends) - 1, 0))] if len(ends) else 0)
    end_ms_ = np.where(is_open, end_ms if end_ms is not None else 0, g_ms[close])
    ok = g_ok[starts] & np.where(is_open, end_ms is not None, g_ok[close])
    who = []
    group_end = np.flatnonzero(last)  # row index (offset order) of each offset group's last row
    for s in starts.tolist():  # outages are few: the registered brokers at each one's start
        upto = group_end[s] + 1
        lo = np.lexsort((np.arange(upto), bid[:upto]))
        tail = np.r_[bid[lo][1:] != bid[lo][:-1], True]
        latest = lo[tail]
        who.append(sorted(int(b) for b in bid[latest][reg[latest]]))
    return Down(first_offset=g_off[starts], last_offset=np.where(is_open, -1, g_off[close]), start_ms=g_ms[starts],
                end_ms=end_ms_.astype(np.int64), time_ok=ok, open=is_open, brokers=who)


def controller_elections(record_times: pa.Table | None) -> Elections:
    z = np.zeros(0, np.int64)
    empty = Elections(z, z, z, z, z, z, z)
    if (record_times is None or not record_times.num_rows or "leader_id" not in record_times.column_names
            or "record_type" not in record_times.column_names):
        return empty
    rt = record_times.filter(pc.is_valid(record_times.column("timestamp")))
    off = F.np_col(rt, "offset", None, np.int64)
    ms, _ = F.millis(rt.column("timestamp"))
    order = np.argsort(off, kind="stable")
    off, ms = off[order], ms[order]
    # a mask, not the record types as Python strings: a million-partition log has ~10 M of them
    is_lc = np.asarray(pc.fill_null(pc.equal(rt.column("record_type"), LEADER_CHANGE), False)
                       .to_numpy(zero_copy_only=False), bool)[order]
    leader = F.np_col(rt, "leader_id", -1, np.int64)[order]
    epoch = (F.np_col(rt, "batch_leader_epoch", -1, np.int64)[order] if "batch_leader_epoch" in rt.column_names
             else np.full(len(off), -1, np.int64))
    lc = np.flatnonzero(is_lc)
    if len(lc) < 2:
        return empty
    cur, prv = lc[1:], lc[:-1]
    silent = np.where(cur > 0, ms[cur] - ms[np.maximum(cur - 1, 0)], 0)
    return Elections(offset=off[cur], ms=ms[cur], leader=leader[cur], epoch=epoch[cur], prev_leader=leader[prv],
                     prev_epoch=epoch[prv], silent_ms=np.maximum(silent, 0))


def cluster_events(tables: dict[str, pa.Table], config: dict, end_ms: int | None) -> ClusterEvents:
    audit = config["audit"]
    gaps = metadata_gaps(tables.get("record_times"), int(audit.get("metadata_gap_ms") or 0))
    down = cluster_down(tables.get(catalog.BROKER_STATE_HISTORY.name), end_ms)
    ok = down.time_ok
    outages = Intervals.union((gaps.start_ms, gaps.end_ms), (down.start_ms[ok], down.end_ms[ok]))
    return ClusterEvents(gaps=gaps, down=down, elections=controller_elections(tables.get("record_times")),
                         outages=outages)
