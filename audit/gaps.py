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
    def before_total(self) -> np.ndarray:
        """Gap time before each gap starts (the cumulative sum the exclusion is computed from)."""
        lens = self.end_ms - self.start_ms
        return np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else lens


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
    if not len(gaps):
        return np.zeros(len(start_ms), np.int64)
    total = gaps.before_total

    def covered_before(t: np.ndarray) -> np.ndarray:
        k = np.searchsorted(gaps.start_ms, t, side="right") - 1
        kk = np.maximum(k, 0)
        inside = np.clip(t - gaps.start_ms[kk], 0, gaps.end_ms[kk] - gaps.start_ms[kk])
        return np.where(k >= 0, total[kk] + inside, 0)

    return np.maximum(covered_before(np.asarray(end_ms, np.int64)) - covered_before(np.asarray(start_ms, np.int64)), 0)


def excluded_ms_one(gaps: Gaps, start_ms: int, end_ms: int) -> int:
    """:func:`excluded_ms` for one window, gap by gap."""
    out = 0
    for a, b in zip(gaps.start_ms.tolist(), gaps.end_ms.tolist()):
        out += max(0, min(b, end_ms) - max(a, start_ms))
    return out
