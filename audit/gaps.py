"""Metadata gaps: stretches of the log no controller wrote (the cluster was stopped or had no quorum).

An active controller appends at least a NoOpRecord every ~500 ms (KIP-595's leader heartbeat, KIP-631), so
two consecutive records farther apart than ``audit.metadata_gap_ms`` mean nobody was writing in between.
The log cannot say what happened then: partition windows leave gap time out of their durations, and each
gap is one METADATA_GAP finding instead of a flood of "offline for hours" ERRORs.

One definition, two forms: :func:`excluded_ms` (NumPy, for :mod:`audit.violations`) and
:func:`excluded_ms_one` (plain Python, for the scalar reference :mod:`audit.scalar`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass
class Intervals:
    """Disjoint time intervals [start, end] in ms, sorted."""

    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    @staticmethod
    def union(*pairs: tuple[np.ndarray, np.ndarray]) -> "Intervals":
        s = np.concatenate([np.asarray(a, np.int64) for a, _ in pairs]) if pairs else np.zeros(0, np.int64)
        e = np.concatenate([np.asarray(b, np.int64) for _, b in pairs]) if pairs else np.zeros(0, np.int64)
        if not len(s):
            return Intervals(s, e)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        # a new interval starts where it begins after everything before it has ended
        head = np.r_[True, s[1:] > reach[:-1]]
        group = np.cumsum(head) - 1
        ends = np.full(int(group[-1]) + 1, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(ends, group, e)
        return Intervals(s[head], ends)

    def covered(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per window [a, b], how much of it the intervals cover."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if not len(self):
            return np.zeros(len(a), np.int64)
        lens = self.end - self.start
        total = np.concatenate([[0], np.cumsum(lens)[:-1]])

        def before(t):
            k = np.searchsorted(self.start, t, side="right") - 1
            kk = np.maximum(k, 0)
            inside = np.clip(t - self.start[kk], 0, lens[kk])
            return np.where(k >= 0, total[kk] + inside, 0)

        return np.maximum(before(b) - before(a), 0)

    def touches(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Per window [a, b], whether any interval overlaps it or shares an instant with it (bounds
        included: a window the outage's first record opens is the outage's)."""
        a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
        if not len(self):
            return np.zeros(len(a), bool)
        k = np.searchsorted(self.start, b, side="right") - 1  # the last interval starting at or before b
        return (k >= 0) & (self.end[np.maximum(k, 0)] >= a)

    # the same two questions for one window, interval by interval (the scalar reference)
    def covered_one(self, a: int, b: int) -> int:
        return sum(max(0, min(e, b) - max(s, a)) for s, e in zip(self.start.tolist(), self.end.tolist()))

    def touches_one(self, a: int, b: int) -> bool:
        return any(s <= b and e >= a for s, e in zip(self.start.tolist(), self.end.tolist()))


@dataclass
class Gaps:
    start_ms: np.ndarray  # time of the last record before the gap
    end_ms: np.ndarray  # time of the first record after it
    before_offset: np.ndarray  # that record's offset
    after_offset: np.ndarray
    before_epoch: np.ndarray | None = None  # the Raft epoch (controller epoch) of those records' batches; -1
    after_epoch: np.ndarray | None = None  # when unknown

    def __len__(self) -> int:
        return len(self.start_ms)

    @property
    def intervals(self) -> "Intervals":
        """The gaps as time intervals (disjoint and sorted: consecutive records never overlap)."""
        return Intervals(self.start_ms, self.end_ms)


def metadata_gaps(record_times: pa.Table | None, threshold_ms: int) -> Gaps:
    """The gaps of a log's records (``offset``, ``timestamp``, ``record_type``: every segment record, NoOps
    included).  Only from the first NoOpRecord on: a controller without heartbeats (Kafka < 3.3, KIP-835)
    may be silent for hours while running, so silence proves nothing there."""
    empty = np.zeros(0, np.int64)
    if (record_times is None or not record_times.num_rows or threshold_ms <= 0
            or "record_type" not in record_times.column_names):
        return Gaps(empty, empty, empty, empty, empty, empty)
    noop = pc.fill_null(pc.equal(record_times.column("record_type"), "NO_OP_RECORD"), False)
    if not pc.any(noop).as_py():
        return Gaps(empty, empty, empty, empty, empty, empty)
    first_beat = pc.min(record_times.column("offset").filter(noop)).as_py()
    record_times = record_times.filter(pc.greater_equal(record_times.column("offset"), first_beat))
    ts = record_times.column("timestamp")
    ok = pc.is_valid(ts)
    off = np.asarray(record_times.column("offset").filter(ok).to_numpy(zero_copy_only=False), np.int64)
    epoch = (np.asarray(pc.fill_null(record_times.column("batch_leader_epoch").filter(ok), -1)
                        .to_numpy(zero_copy_only=False), np.int64)
             if "batch_leader_epoch" in record_times.column_names else np.full(len(off), -1, np.int64))
    ms = np.asarray(pc.cast(pc.cast(ts.filter(ok), pa.timestamp("ms", tz="UTC")), pa.int64())
                    .to_numpy(zero_copy_only=False), np.int64)
    order = np.argsort(off, kind="stable")
    off, ms, epoch = off[order], ms[order], epoch[order]
    # a clock that steps back is not a gap; the time runs on from the latest record seen
    ms = np.maximum.accumulate(ms) if len(ms) else ms
    at = np.flatnonzero(np.diff(ms) >= threshold_ms)
    return Gaps(ms[at], ms[at + 1], off[at], off[at + 1], epoch[at], epoch[at + 1])


def excluded_ms(gaps: Gaps, start_ms: np.ndarray, end_ms: np.ndarray) -> np.ndarray:
    """Per window [start, end], how much of it the gaps cover."""
    return gaps.intervals.covered(start_ms, end_ms)


def excluded_ms_one(gaps: Gaps, start_ms: int, end_ms: int) -> int:
    """:func:`excluded_ms` for one window, gap by gap."""
    return gaps.intervals.covered_one(start_ms, end_ms)
