"""Ground truth: the findings the simulated history must produce, grouped by the timeline event that
planted them.

Windows (under min ISR, offline, last replica standing, ...) are opened and closed from the simulator's
own partition state after every batch.  Point findings (unclean elections, data loss, config exposures) are
added by the engine when it writes them.

Cluster events (/work/scratch/incidents-spec.md, issue 12): the truth also watches the log itself --

* METADATA_GAP: two consecutive batches at least ``metadata_gap_ms`` apart, counted from the first NoOp;
* CLUSTER_DOWN: no broker active (registered, unfenced, not in controlled shutdown) after one was;
* CONTROLLER_ELECTION (INFO): every LeaderChange after the log's first.

A window's duration leaves gap time out; a window that overlaps a cluster event (or opens or closes at an
instant inside one, bounds included) and lasts less than ``long_window_ms`` outside of them is INFO, and so
is a closed UNDER_MIN_ISR / OFFLINE window shorter than ``min_window_ms``.  A window closed in one batch is
judged when the next batch is written (a gap starting at its close is only known then).

Each incident's ``cause`` is the cause of the audit incident its trigger makes under the spec's incident
rules (CLUSTER_RESTART, METADATA_GAP, BROKER_DOWN, BROKERS_DOWN, AZ_LOSS, UNCLEAN_ELECTION), or None:

1. it owns a cluster event, or took a broker down within ``incident_merge_ms`` before one (the lead-up of a
   cluster stopped broker by broker): the cause of the cluster incident (merged cluster events) holding it;
2. else it took a broker from active to not active outside a cluster incident, and that broker incident
   explains a partition finding: the broker incident's cause;
3. else it planted an UNCLEAN_ELECTION / DATA_LOSS_LIKELY explained by no cluster or broker incident;
4. else None (produce, lagging_follower, config changes, elections without loss, ...).
"""
from __future__ import annotations

from array import array
from bisect import bisect_left
from datetime import datetime, timezone

SEVERITY_RANK = {"INFO": 0, "WARN": 1, "ERROR": 2}

WINDOW_CODES = ("UNDER_MIN_ISR", "AT_MIN_ISR", "OFFLINE", "OFFLINE_NO_CANDIDATE", "LAST_REPLICA_STANDING",
                "INV-OFFLINE-NO-CANDIDATE", "INV-LKE-NEGATIVE")
FIXED = {"AT_MIN_ISR": "INFO", "OFFLINE_NO_CANDIDATE": "ERROR", "LAST_REPLICA_STANDING": "WARN",
         "INV-OFFLINE-NO-CANDIDATE": "WARN", "INV-LKE-NEGATIVE": "WARN"}
# findings about a topic's configuration: the audit reports them once per topic (partition null)
TOPIC_CODES = ("UNCLEAN_CONFIG", "MIN_ISR_ABOVE_RF", "MIN_ISR_CHANGE_CLEARED_ELR")
LONG_CODES = ("UNDER_MIN_ISR", "OFFLINE")  # WARN, ERROR once the window lasts long_window_ms
# the availability windows a cluster outage explains (audit/cluster_events.OUTAGE_WINDOWS); a last replica
# standing exposure began before the outage and keeps its WARN
ATTRIBUTABLE = ("UNDER_MIN_ISR", "AT_MIN_ISR", "OFFLINE", "OFFLINE_NO_CANDIDATE")
# cluster-level findings: topic and partition null
CLUSTER_CODES = {"METADATA_GAP": "WARN", "CLUSTER_DOWN": "WARN", "CONTROLLER_ELECTION": "INFO"}
UNCLEAN_CODES = ("UNCLEAN_ELECTION", "DATA_LOSS_LIKELY")
ORPHAN = -3  # incident of a cluster event no timeline event owns (created when needed)


def iso(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _overlap(a0: int, a1: int, b0: int, b1: int) -> int:
    return max(0, min(a1, b1) - max(a0, b0))


class Incident:
    def __init__(self, idx: int, kind: str, description: str, time_ms: int, brokers: list[int]):
        self.idx, self.kind, self.description, self.time_ms = idx, kind, description, time_ms
        self.brokers = sorted(set(brokers))
        self.first_offset: int | None = None
        self.last_offset: int | None = None
        self.findings: dict[tuple[str, str | None, int | None], str] = {}  # (code, topic, partition) -> severity
        self.cause: str | None = None

    def add(self, code: str, severity: str, topic: str | None, partition: int | None) -> None:
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
                "cause": self.cause,
                "expectedFindings": [{"code": c, "severity": s, "topic": t, "partition": p}
                                     for (c, t, p), s in sorted(self.findings.items(),
                                                                key=lambda kv: (kv[0][1] is not None, kv[0][1] or "",
                                                                                -1 if kv[0][2] is None
                                                                                else kv[0][2], kv[0][0]))]}


class Truth:
    def __init__(self, long_window_ms: int, include_info: bool = True, metadata_gap_ms: int = 30000,
                 min_window_ms: int = 1000, incident_merge_ms: int = 60000, clock=None):
        self.long_window_ms = long_window_ms
        self.include_info = include_info
        self.metadata_gap_ms, self.min_window_ms, self.merge_ms = metadata_gap_ms, min_window_ms, incident_merge_ms
        self.clock = clock or (lambda: self.last_ts or 0)
        self.incidents: dict[int, Incident] = {}
        self.open: dict[tuple[str, int], dict[str, tuple[int, int]]] = {}  # key -> code -> (start ms, idx)
        # the log's clock: the previous batch (time, last offset); NoOps seen (gaps only count from the first)
        self.last_ts: int | None = None
        self.beat_seen = False
        self.gap_owner: int | None = None  # the incident that stopped the quorum (set by the engine)
        # cluster events: (code, start ms, end ms or None while open, owning incident)
        self.gaps: list[tuple[int, int]] = []
        self.downs: list[list] = []  # [start, end or None]
        self.cluster_events: list[list] = []
        self.ever_active = False
        self.active: frozenset = frozenset()
        self.down_since: dict[int, tuple[int, int]] = {}  # broker -> (time it stopped being active, incident)
        self.broker_downs: list[tuple[int, int, int | None, int]] = []  # (broker, start, end or None, incident)
        self.elections: list[tuple[int, int]] = []  # CONTROLLER_ELECTION (time, incident)
        self.pending: list[tuple] = []  # windows closed in the latest batch, judged at the next one
        self.finding_times = array("q")  # start of every partition finding (explained by an incident?)
        self.unclean: list[tuple[int, int]] = []  # (time, incident) of UNCLEAN_ELECTION / DATA_LOSS_LIKELY

    def incident(self, idx: int) -> Incident | None:
        return self.incidents.get(idx)

    # ------------------------------------------------------------------------------------ the log's clock
    def note_batch(self, idx: int, base: int, count: int, ts: int | None = None) -> None:
        if ts is not None:
            if self.beat_seen and self.last_ts is not None and ts - self.last_ts >= self.metadata_gap_ms:
                owner = self.gap_owner if self.gap_owner is not None else idx
                self.gaps.append((self.last_ts, ts))
                self.cluster_events.append(["METADATA_GAP", self.last_ts, ts, self._owner(owner)])
                self._cluster_finding(owner, "METADATA_GAP")
            self.flush()
            self.last_ts = ts
        inc = self.incidents.get(idx)
        if inc is not None:
            if inc.first_offset is None:
                inc.first_offset = base
            inc.last_offset = base + count - 1

    def _owner(self, idx: int) -> int:
        if idx not in self.incidents:
            if ORPHAN not in self.incidents:
                self.incidents[ORPHAN] = Incident(ORPHAN, "cluster", "cluster events no timeline event planted",
                                                  self.clock(), [])
            return ORPHAN
        return idx

    def _cluster_finding(self, idx: int, code: str) -> None:
        sev = CLUSTER_CODES[code]
        if sev == "INFO" and not self.include_info:
            return
        self.incidents[self._owner(idx)].add(code, sev, None, None)

    def brokers_active(self, active: frozenset, now: int, idx: int) -> None:
        """The brokers active after a batch that wrote broker records."""
        if active == self.active:
            return
        for b in self.active - active:
            self.down_since[b] = (now, idx)
        for b in active - self.active:
            if b in self.down_since:
                start, owner = self.down_since.pop(b)
                self.broker_downs.append((b, start, now, owner))
        self.active = active
        if active:
            self.ever_active = True
            if self.downs and self.downs[-1][1] is None:
                self.downs[-1][1] = now
                self.cluster_events[self._down_event][2] = now
        elif self.ever_active and not (self.downs and self.downs[-1][1] is None):
            self.downs.append([now, None])
            self._down_event = len(self.cluster_events)
            self.cluster_events.append(["CLUSTER_DOWN", now, None, self._owner(idx)])
            self._cluster_finding(idx, "CLUSTER_DOWN")

    def controller_election(self, now: int, idx: int) -> None:
        self.elections.append((now, idx))
        self._cluster_finding(idx, "CONTROLLER_ELECTION")

    # ------------------------------------------------------------------------------------ findings
    def point(self, idx: int, code: str, severity: str, topic: str, partition: int) -> None:
        if code not in TOPIC_CODES and code not in WINDOW_CODES:
            t = self.clock()
            self.finding_times.append(t)
            if code in UNCLEAN_CODES:
                self.unclean.append((t, idx))
        self._add(idx, code, severity, topic, partition)

    def _add(self, idx, code, severity, topic, partition) -> None:
        if severity == "INFO" and not self.include_info:
            return
        inc = self.incidents.get(idx)
        if inc is not None:
            inc.add(code, severity, topic, partition)

    def unlisted_finding(self, now: int) -> None:
        """A finding not listed (an AT_MIN_ISR window while INFO is off) may start now: incidents explain it."""
        self.finding_times.append(now)

    def observe(self, key, topic: str, partition: int, flags: set[str], now: int, idx: int) -> None:
        """The partition's conditions after a batch (``flags`` = codes currently true)."""
        cur = self.open.setdefault(key, {})
        for code in list(cur):
            if code not in flags:
                self._close(key, topic, partition, code, now)
        for code in flags:
            if code not in cur:
                cur[code] = (now, idx)
                self.finding_times.append(now)
        if not cur:
            self.open.pop(key, None)

    def forget(self, key, topic: str, partition: int, now: int, is_open: bool = False) -> None:
        for code in list(self.open.get(key, {})):
            self._close(key, topic, partition, code, now, is_open)
        self.open.pop(key, None)

    def _close(self, key, topic, partition, code, now, is_open: bool = False) -> None:
        start, idx = self.open[key].pop(code)
        self.pending.append((idx, code, topic, partition, start, now, is_open))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for idx, code, topic, partition, start, end, is_open in pending:
            self._add(idx, code, self.severity(code, start, end, is_open), topic, partition)

    def severity(self, code: str, start: int, end: int, is_open: bool) -> str:
        """A window's severity under the spec: gap time left out, attribution to cluster events, flaps."""
        gap = sum(_overlap(start, end, a, b) for a, b in self.gaps) if self.gaps else 0
        duration = end - start - gap
        if code in LONG_CODES:
            sev = "ERROR" if duration >= self.long_window_ms else "WARN"
            if not is_open and duration < self.min_window_ms:
                sev = "INFO"
        else:
            sev = FIXED[code]
        if sev != "INFO" and code in ATTRIBUTABLE and (self.gaps or self.downs):
            events = [(a, b) for a, b in self.gaps]
            downs = [(a, end if b is None else b) for a, b in self.downs]
            events += downs
            if any(_overlap(start, end, a, b) > 0 or a <= start <= b or a <= end <= b for a, b in events):
                down = 0
                for a, b in downs:
                    lo, hi = max(start, a), min(end, b)
                    if hi > lo:
                        down += hi - lo - sum(_overlap(lo, hi, g0, g1) for g0, g1 in self.gaps)
                if duration - down < self.long_window_ms:
                    sev = "INFO"
        return sev

    # ------------------------------------------------------------------------------------ end of the log
    def finish(self, now: int, names, racks: dict | None = None) -> None:
        self.flush()
        for key in list(self.open):
            topic, partition = names(key)
            self.forget(key, topic, partition, now, is_open=True)
        self.flush()
        self.assign_causes(now, racks or {})

    def assign_causes(self, end: int, racks: dict) -> None:
        """Each incident's ``cause`` (see the module docstring)."""
        merge = self.merge_ms
        times = sorted(self.finding_times)

        def explains(lo: int, hi: int) -> bool:
            i = bisect_left(times, lo)
            return i < len(times) and times[i] <= hi

        # cluster incidents: cluster events within merge_ms of each other
        groups: list[list] = []  # [start, end, has CLUSTER_DOWN, owners]
        for code, a, b, owner in sorted(self.cluster_events, key=lambda e: e[1]):
            b = end if b is None else b
            if groups and a <= groups[-1][1] + merge:
                g = groups[-1]
                g[1], g[2] = max(g[1], b), g[2] or code == "CLUSTER_DOWN"
                g[3].add(owner)
            else:
                groups.append([a, b, code == "CLUSTER_DOWN", {owner}])
        # brokers stopped within merge_ms before a cluster incident (its lead-up: a cluster is stopped broker by
        # broker) belong to it
        downs = list(self.broker_downs) + [(b, s, None, owner) for b, (s, owner) in self.down_since.items()]
        lead = [d for d in downs if any(g[0] - merge <= d[1] <= g[1] for g in groups)]
        for g in groups:
            cause = "CLUSTER_RESTART" if g[2] else "METADATA_GAP"
            mine = [d for d in lead if g[0] - merge <= d[1] <= g[1]]
            for owner in g[3] | {d[3] for d in mine}:
                if owner in self.incidents:
                    self.incidents[owner].cause = cause
            g[0] = min([g[0]] + [d[1] for d in mine])
        # broker incidents: brokers leaving "active" outside a cluster incident and its lead-up
        downs = sorted((d for d in downs if d not in lead), key=lambda d: d[1])
        bgroups: list[list] = []  # [first start, last start, end (None: open), brokers, owners]
        for b, s, e, owner in downs:
            g = bgroups[-1] if bgroups else None
            if g is not None and (s - g[1] <= merge or g[2] is None or s <= g[2]):
                g[1] = s
                g[2] = None if (g[2] is None or e is None) else max(g[2], e)
                g[3].add(b)
                g[4].add(owner)
            else:
                bgroups.append([s, s, e, {b}, {owner}])
        n_racks = len({r for r in racks.values()})
        made = []
        for s, _, e, brokers, owners in bgroups:
            hi = end if e is None else e
            if not explains(s, hi):
                continue  # an incident is only made when it explains a finding
            made.append((s, hi))
            rack = {racks.get(b) for b in brokers}
            if len(brokers) == 1:
                cause = "BROKER_DOWN"
            elif len(rack) == 1 and n_racks >= 2 and brokers == {b for b, r in racks.items() if r in rack}:
                cause = "AZ_LOSS"
            else:
                cause = "BROKERS_DOWN"
            for owner in owners:
                inc = self.incidents.get(owner)
                if inc is not None and inc.cause is None:
                    inc.cause = cause
        # unclean incidents: unclean elections / likely data loss nothing above explains
        spans = [(g[0], g[1]) for g in groups] + made
        for t, owner in self.unclean:
            inc = self.incidents.get(owner)
            if inc is not None and inc.cause is None and not any(a <= t <= b for a, b in spans):
                inc.cause = "UNCLEAN_ELECTION"
