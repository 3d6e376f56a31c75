"""The cluster image at a point of a metadata log's history, replayed from a log directory (no Spark).

* ``at_offset``: the state after every record up to and including log offset N (a batch is cut at N if N
  falls inside it: a note on ``err`` says so, since Kafka applies batches atomically);
* ``at_time`` (epoch microseconds): the state after the longest run of batches, from the start, whose
  timestamps are at or before it (a batch is applied whole or not at all);
* neither: the end of the log.

When the older segments were deleted the replay starts from a snapshot covering the missing start: the
newest covering snapshot at or before the requested point.  A point before every covering snapshot, an
offset past the end of the log or a time before its first record raise :class:`PointError`.  Used by
``kraft-audit describe`` and by ``collect-log-info`` (a broker's own metadata replica).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from controller_core.image import Cluster, ReplayError
from controller_core.logdir import SEGMENT, SNAPSHOT, LogFile, discover
from controller_core.replay import Plan, Rec, iter_batches, iter_file_records, plan

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class PointError(ValueError):
    """A point the log cannot show (before what it covers, past its end, a negative offset)."""


def fmt_ms(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fmt_us(us: int) -> str:
    spec = "milliseconds" if us % 1000 == 0 else "microseconds"
    return (EPOCH + timedelta(microseconds=us)).isoformat(timespec=spec).replace("+00:00", "Z")


@dataclass
class Reached:
    """Where the replay stopped: the last log offset applied and its batch's timestamp (None: no log
    record applied, e.g. the state is a snapshot's), and the snapshot it started from."""

    offset: int | None = None
    timestamp: int | None = None
    snapshot: LogFile | None = None


def _snapshot_header_ts(snap: LogFile) -> int:
    """lastContainedLogTimestamp of a snapshot (ms): the time of the last record it contains."""
    for rec in iter_file_records(snap, include_skipped=True):
        if rec.type == "SNAPSHOT_HEADER":
            return int(rec.data.get("lastContainedLogTimestamp", 0))
        break
    return 0


def _files(log_dir, at_offset: int | None, at_time: int | None) -> tuple[list[LogFile], LogFile | None, int]:
    """Files to replay, the snapshot they start from and the first log offset after it.

    A complete log (its first segment starts at 0) is replayed from the start.  Otherwise
    :func:`controller_core.replay.plan` picks the newest snapshot covering the missing start; for a point
    before that one, an older covering snapshot at or before the point is used if there is one."""
    p = plan(log_dir)
    if p.snapshot is None:
        return p.files, None, 0
    segments = [f for f in p.files if f.kind == SEGMENT]
    first = min(s.offset for s in segments)
    covering = sorted((f for f in discover(Path(log_dir)) if f.kind == SNAPSHOT and f.offset >= first),
                      key=lambda f: f.offset, reverse=True)
    for snap in covering:
        if at_offset is not None and snap.offset - 1 > at_offset:
            continue
        if at_time is not None and _snapshot_header_ts(snap) * 1000 > at_time:
            continue
        return [snap] + segments, snap, snap.offset
    oldest = covering[-1]
    what = (f"offset {at_offset}" if at_offset is not None else f"{fmt_us(at_time)}")
    since = (f"offset {oldest.offset - 1}" if at_offset is not None
             else f"{fmt_ms(_snapshot_header_ts(oldest))} (offset {oldest.offset - 1})")
    raise PointError(f"{what} is before what the log covers: its segments start at offset {first}, so the "
                     f"replay starts from a snapshot, and the oldest one ({oldest.label}) holds the state as of "
                     f"{since}; no earlier state can be rebuilt")


def image_at(log_dir, at_offset: int | None = None, at_time: int | None = None, err=None,
             prog: str = "kraft-audit") -> tuple[Cluster, Reached]:
    """The cluster image at the requested point (``at_time`` in epoch microseconds).  Records the
    image rejects (:class:`ReplayError`) are reported on ``err`` (lines prefixed by ``prog``) and skipped."""
    err = err or sys.stderr
    if at_offset is not None and at_offset < 0:
        raise PointError(f"--at-offset {at_offset}: offsets start at 0")
    files, snap, start = _files(log_dir, at_offset, at_time)
    cluster = Cluster()
    reached = Reached(snapshot=snap)
    first_batch: tuple[int, int] | None = None  # (offset, timestamp) of the first log batch
    done = False

    def apply(recs: list[Rec]) -> None:
        for r in recs:
            try:
                cluster.apply(r.type, r.data, r.offset)
            except ReplayError as exc:
                print(f"{prog}: {r.file} offset {r.offset} ({r.type}): {exc}; record skipped", file=err)

    for lf, batch in iter_batches(log_dir, include_skipped=True, chosen=Plan(files, None, start)):
        if lf.kind != SEGMENT:  # bootstrap.checkpoint, snapshot: the starting image, whole
            apply(batch)
            continue
        head, ts = batch[0], batch[0].timestamp
        if first_batch is None:
            first_batch = (head.offset, ts)
        if at_time is not None:
            if ts * 1000 > at_time:
                done = True
                break
        elif at_offset is not None:
            if head.offset > at_offset:
                done = True
                break
            upto = [r for r in batch if r.offset <= at_offset]
            if len(upto) < len(batch):
                print(f"{prog}: note: offset {at_offset} is inside batch {head.offset}..{batch[-1].offset}, which "
                      "Kafka applies atomically; showing the state part-way through it", file=err)
            if upto[-1].offset == at_offset or len(upto) < len(batch):
                apply(upto)
                reached.offset, reached.timestamp = upto[-1].offset, ts
                done = True
                break
        apply(batch)
        reached.offset, reached.timestamp = batch[-1].offset, ts

    end = reached.offset if reached.offset is not None else (snap.offset - 1 if snap is not None else None)
    if at_offset is not None and not done and (end is None or at_offset > end):
        raise PointError(f"offset {at_offset} is past the end of the log "
                         f"({'it has no records' if end is None else f'last offset {end}'})")
    if at_time is not None and snap is None and first_batch is not None and reached.offset is None:
        raise PointError(f"{fmt_us(at_time)} is before the log's first record (offset {first_batch[0]}, written "
                         f"{fmt_ms(first_batch[1])})")
    return cluster, reached
