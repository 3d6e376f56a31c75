"""The scalar reference of the window codes: one history row at a time, reading like the definitions.

For each partition, its history rows in offset order; for each row, the state after it and the topic's
settings at its offset.  A window of a code opens at the first row where the code's condition holds and
closes at the first later row where it does not (or stays open).  Used to check the vectorized
:mod:`audit.violations` (same windows, offsets, durations and severities).
"""
from __future__ import annotations

import datetime as dt

import pyarrow as pa

from audit.frames import as_millis
from audit.cluster_events import ClusterEvents, attributed_severity, cluster_events
from audit.gaps import excluded_ms_one
from controller_core import codes as C
from controller_core.codes import AT_MIN_ISR, LAST_REPLICA_STANDING, OFFLINE, OFFLINE_NO_CANDIDATE, UNDER_MIN_ISR
from lake import catalog

WINDOW_CODES = (UNDER_MIN_ISR, AT_MIN_ISR, OFFLINE, OFFLINE_NO_CANDIDATE, LAST_REPLICA_STANDING)
LONG = C.long_window_codes()


def _ms(ts) -> int | None:
    if ts is None:
        return None
    if isinstance(ts, dt.datetime):
        return as_millis(ts)
    return int(ts)


def _topic_settings(topics: pa.Table) -> dict[str, list[dict]]:
    """topic id -> its topic_config_history rows in offset order."""
    out: dict[str, list[dict]] = {}
    for row in sorted(topics.to_pylist(), key=lambda r: r["offset"]):
        out.setdefault(row["topic_id"], []).append(row)
    return out


def _settings_at(rows: list[dict], offset: int) -> dict | None:
    found = None
    for row in rows:
        if row["offset"] <= offset:
            found = row
    return found


def violations_scalar(tables: dict[str, pa.Table], config: dict, end_offset: int, end_time) -> list[dict]:
    """The window findings as dicts: code, severity, topic_id, partition, first_offset, last_offset, open,
    duration_ms, brokers (the broker of LAST_REPLICA_STANDING; empty for the other codes)."""
    severities = {**C.default_severities(C.FINDING), **config["audit"]["severities"]}
    end_ms = as_millis(end_time)
    windows = _Windows(severities, int(config["audit"].get("long_window_ms") or 0), end_ms,
                       cluster_events(tables, config, end_ms), int(config["audit"].get("min_window_ms") or 0))
    settings = _topic_settings(tables[catalog.TOPIC_CONFIG_HISTORY.name])
    current = None
    for row in _history_rows(tables):
        key = (row["topic_id"], row["partition_id"])
        if key != current:  # a new partition: whatever is still open stays open at the end of the log
            windows.close_all()
            current = key
        s = _settings_at(settings.get(row["topic_id"], []), row["offset"])
        m = s["effective_min_isr"] if s and s["effective_min_isr"] is not None else 1
        elr_on = bool(s and s["elr_enabled"])
        holds: dict[str, bool] = {}
        if not row["deleted"] and not (s and s.get("diskless")):  # a diskless topic: no ISR rule (DISKLESS_TOPIC)
            lrs = windows.open.get(LAST_REPLICA_STANDING)
            if lrs is not None and not _continues_last_replica_standing(row, m, elr_on, lrs):
                windows.close(LAST_REPLICA_STANDING, row)
            holds = _conditions(row, m, elr_on, LAST_REPLICA_STANDING in windows.open)
        windows.follow(row, holds)
    windows.close_all()
    return windows.found


def _history_rows(tables: dict[str, pa.Table]) -> list[dict]:
    """partition_state_history without orphan rows, by partition, then in offset order."""
    rows = [r for r in tables[catalog.PARTITION_STATE_HISTORY.name].to_pylist() if not r.get("orphan")]
    rows.sort(key=lambda r: (r["topic_id"], r["partition_id"], r["offset"]))
    return rows


def _exposed(row: dict, m: int, elr_on: bool) -> bool:
    """One ISR member left while min ISR >= 2 and ELR is off: losing it loses the committed data."""
    return not elr_on and m >= 2 and len(row["isr"] or []) == 1


def _continues_last_replica_standing(row: dict, m: int, elr_on: bool, window: dict) -> bool:
    """A last-replica-standing window goes on while the ISR stays [x] and x leads or nobody does; another
    x starts another window."""
    isr = row["isr"] or []
    return _exposed(row, m, elr_on) and isr == window["brokers"] and row["leader"] in (isr[0], -1)


def _conditions(row: dict, m: int, elr_on: bool, lrs_open: bool) -> dict[str, bool]:
    """Whether each window code's condition holds on a live partition's state (min ISR ``m``).  LAST_REPLICA
    _STANDING starts with x leading an exposed ISR [x] and only continues (``lrs_open``) while leaderless."""
    isr = row["isr"] or []
    elr = row["eligible_leader_replicas"] or []
    leader = row["leader"]
    return {
        UNDER_MIN_ISR: len(isr) < m,
        AT_MIN_ISR: len(isr) == m and len(isr) < len(row["replicas"] or []),
        OFFLINE: leader == -1,
        OFFLINE_NO_CANDIDATE: leader == -1 and not isr and not elr,
        LAST_REPLICA_STANDING: _exposed(row, m, elr_on) and (leader == isr[0] or (lrs_open and leader == -1)),
    }


class _Windows:
    """The windows open on the current partition (code -> window being built) and the finished ones."""

    def __init__(self, severities: dict[str, str], long_ms: int, end_ms: int | None, events: ClusterEvents,
                 min_ms: int):
        self.severities, self.long_ms, self.end_ms, self.events, self.min_ms = (severities, long_ms, end_ms, events,
                                                                                min_ms)
        self.open: dict[str, dict] = {}
        self.found: list[dict] = []

    def follow(self, row: dict, holds: dict[str, bool]) -> None:
        """Open the window of each code that starts holding at ``row``; close those that stop."""
        for code in WINDOW_CODES:
            if holds.get(code):
                if code not in self.open:
                    self.open[code] = {
                        "code": code, "topic_id": row["topic_id"], "partition": row["partition_id"],
                        "first_offset": row["offset"], "start_ms": _ms(row["valid_from_timestamp"]),
                        "brokers": list(row["isr"]) if code == LAST_REPLICA_STANDING else []}
            elif code in self.open:
                self.close(code, row)

    def close(self, code: str, row: dict | None) -> None:
        """End the window at ``row``, or leave it open at the end of the log (``row`` None)."""
        w = self.open.pop(code)
        if row is None:
            w["last_offset"], w["open"] = None, True
            end = self.end_ms
        else:
            w["last_offset"], w["open"] = row["offset"], False
            end = _ms(row["valid_from_timestamp"])
        start = w.pop("start_ms")
        # time no controller wrote the log is not part of the window (audit/gaps.py)
        known = start is not None and end is not None
        w["duration_ms"] = end - start - excluded_ms_one(self.events.gaps, start, end) if known else None
        w["severity"] = self._severity(code, w["duration_ms"])
        if known and code in LONG and self.min_ms > 0 and not w["open"] and w["duration_ms"] < self.min_ms:
            w["severity"] = C.INFO  # a flap
        if known and self.events.outages.touches_one(start, end):  # inside a cluster outage: the outage is the finding
            outside = end - start - self.events.outages.covered_one(start, end)
            w["severity"] = attributed_severity(code, w["severity"], True, outside, self.long_ms)
        self.found.append(w)

    def close_all(self) -> None:
        for code in list(self.open):
            self.close(code, None)

    def _severity(self, code: str, duration_ms: int | None) -> str:
        """The configured severity; ERROR for a window of a long-window code lasting long_window_ms or more."""
        if code in LONG and self.long_ms > 0 and duration_ms is not None and duration_ms >= self.long_ms:
            return C.ERROR
        return self.severities[code]
