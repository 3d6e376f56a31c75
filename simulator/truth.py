"""Ground truth: the findings the simulated history must produce, grouped by the timeline event that
planted them.

Windows (under min ISR, offline, last replica standing, ...) are opened and closed from the simulator's
own partition state after every batch; a window that reaches ``long_window_ms`` is an ERROR.  Point
findings (unclean elections, data loss, config exposures) are added by the engine when it writes them.
"""
from __future__ import annotations

from datetime import datetime, timezone

SEVERITY_RANK = {"INFO": 0, "WARN": 1, "ERROR": 2}

WINDOW_CODES = ("UNDER_MIN_ISR", "AT_MIN_ISR", "OFFLINE", "OFFLINE_NO_CANDIDATE", "LAST_REPLICA_STANDING",
                "INV-OFFLINE-NO-CANDIDATE", "INV-LKE-NEGATIVE")
FIXED = {"AT_MIN_ISR": "INFO", "OFFLINE_NO_CANDIDATE": "ERROR", "LAST_REPLICA_STANDING": "WARN",
         "INV-OFFLINE-NO-CANDIDATE": "WARN", "INV-LKE-NEGATIVE": "WARN"}
# findings about a topic's configuration: the audit reports them once per topic (partition null)
TOPIC_CODES = ("UNCLEAN_CONFIG", "MIN_ISR_ABOVE_RF", "MIN_ISR_CHANGE_CLEARED_ELR")
LONG_CODES = ("UNDER_MIN_ISR", "OFFLINE")  # WARN, ERROR once the window lasts long_window_ms


def iso(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class Incident:
    def __init__(self, idx: int, kind: str, description: str, time_ms: int, brokers: list[int]):
        self.idx, self.kind, self.description, self.time_ms = idx, kind, description, time_ms
        self.brokers = sorted(set(brokers))
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.findings: dict[tuple[str, str, int], str] = {}  # (code, topic, partition) -> severity

    def add(self, code: str, severity: str, topic: str, partition: int | None) -> None:
        if code in TOPIC_CODES:  # a topic's setting, not a partition's state: one finding per topic
            partition = None
        key = (code, topic, partition)
        old = self.findings.get(key)
        if old is None or SEVERITY_RANK[severity] > SEVERITY_RANK[old]:
            self.findings[key] = severity

    def to_json(self) -> dict:
        parts = sorted({(t, p) for _, t, p in self.findings if p is not None})
        return {"kind": self.kind, "description": self.description,
                "partitions": [{"topic": t, "partition": p} for t, p in parts], "brokers": self.brokers,
                "firstOffset": self.first_offset, "lastOffset": self.last_offset, "time": iso(self.time_ms),
                "expectedFindings": [{"code": c, "severity": s, "topic": t, "partition": p}
                                     for (c, t, p), s in sorted(self.findings.items(),
                                                                key=lambda kv: (kv[0][1], -1 if kv[0][2] is None
                                                                                else kv[0][2], kv[0][0]))]}


class Truth:
    def __init__(self, long_window_ms: int, include_info: bool = True):
        self.long_window_ms = long_window_ms
        self.include_info = include_info
        self.incidents: dict[int, Incident] = {}
        self.open: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}  # key -> code -> (start ms, idx)

    def incident(self, idx: int) -> Incident | None:
        return self.incidents.get(idx)

    def note_batch(self, idx: int, base: int, count: int) -> None:
        inc = self.incidents.get(idx)
        if inc is not None:
            if inc.first_offset is None:
                inc.first_offset = base
            inc.last_offset = base + count - 1

    def point(self, idx: int, code: str, severity: str, topic: str, partition: int) -> None:
        if severity == "INFO" and not self.include_info:
            return
        inc = self.incidents.get(idx)
        if inc is not None:
            inc.add(code, severity, topic, partition)

    def observe(self, key, topic: str, partition: int, flags: set[str], now: int, idx: int) -> None:
        """The partition's conditions after a batch (``flags`` = codes currently true)."""
        cur = self.open.setdefault(key, {})
        for code in list(cur):
            if code not in flags:
                self._close(key, topic, partition, code, now)
        for code in flags:
            if code not in cur:
                cur[code] = (now, idx)
        if not cur:
            self.open.pop(key, None)

    def forget(self, key, topic: str, partition: int, now: int) -> None:
        for code in list(self.open.get(key, {})):
            self._close(key, topic, partition, code, now)
        self.open.pop(key, None)

    def _close(self, key, topic, partition, code, now) -> None:
        start, idx = self.open[key].pop(code)
        if code in LONG_CODES:
            sev = "ERROR" if now - start >= self.long_window_ms else "WARN"
        else:
            sev = FIXED[code]
        self.point(idx, code, sev, topic, partition)

    def finish(self, now: int, names) -> None:
        for key in list(self.open):
            topic, partition = names(key)
            self.forget(key, topic, partition, now)
