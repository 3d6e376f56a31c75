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
    long_ms = int(config["audit"].get("long_window_ms") or 0)
    end_ms = as_millis(end_time)
    settings = _topic_settings(tables[catalog.TOPIC_CONFIG_HISTORY.name])
    rows = [r for r in tables[catalog.PARTITION_STATE_HISTORY.name].to_pylist() if not r.get("orphan")]
    rows.sort(key=lambda r: (r["topic_id"], r["partition_id"], r["offset"]))

    found: list[dict] = []
    open_windows: dict[str, dict] = {}  # code -> window being built for the current partition
    current = None

    def close(code: str, row: dict | None):
        w = open_windows.pop(code)
        if row is None:  # still open at the end of the log
            w["last_offset"], w["open"] = None, True
            end = end_ms
        else:
            w["last_offset"], w["open"] = row["offset"], False
            end = _ms(row["valid_from_timestamp"])
        start = w.pop("start_ms")
        w["duration_ms"] = end - start if start is not None and end is not None else None
        w["severity"] = severities[code]
        if code in LONG and long_ms > 0 and w["duration_ms"] is not None and w["duration_ms"] >= long_ms:
            w["severity"] = C.ERROR
        found.append(w)

    for row in rows:
        key = (row["topic_id"], row["partition_id"])
        if key != current:  # a new partition: whatever is still open stays open at the end of the log
            for code in list(open_windows):
                close(code, None)
            current = key
        s = _settings_at(settings.get(row["topic_id"], []), row["offset"])
        m = s["effective_min_isr"] if s and s["effective_min_isr"] is not None else 1
        elr_on = bool(s and s["elr_enabled"])
        holds: dict[str, bool] = {}
        if not row["deleted"]:
            isr = row["isr"] or []
            elr = row["eligible_leader_replicas"] or []
            leader = row["leader"]
            holds[UNDER_MIN_ISR] = len(isr) < m
            holds[AT_MIN_ISR] = len(isr) == m and len(isr) < len(row["replicas"] or [])
            holds[OFFLINE] = leader == -1
            holds[OFFLINE_NO_CANDIDATE] = leader == -1 and not isr and not elr
            # last replica standing: ELR off, min ISR >= 2, ISR = [x] with x leading; it goes on while the
            # ISR stays [x] and the partition is leaderless; another x starts another window
            exposed = not elr_on and m >= 2 and len(isr) == 1
            lrs = open_windows.get(LAST_REPLICA_STANDING)
            if lrs is not None and not (exposed and isr == lrs["brokers"] and leader in (isr[0], -1)):
                close(LAST_REPLICA_STANDING, row)
            holds[LAST_REPLICA_STANDING] = exposed and (
                leader == isr[0] or (LAST_REPLICA_STANDING in open_windows and leader == -1))
        for code in WINDOW_CODES:
            if holds.get(code):
                if code not in open_windows:
                    open_windows[code] = {
                        "code": code, "topic_id": row["topic_id"], "partition": row["partition_id"],
                        "first_offset": row["offset"], "start_ms": _ms(row["valid_from_timestamp"]),
                        "brokers": list(row["isr"]) if code == LAST_REPLICA_STANDING else []}
            elif code in open_windows:
                close(code, row)
    for code in list(open_windows):
        close(code, None)
    return found
