"""The cluster image at a point of a log's history: after offset N, or after the batches written by time T.

``image_at(log_dir, at_offset=N | at_time=T)`` replays a log directory through the one pipeline
(:mod:`controller_core.pipeline`) up to the point and returns the image there plus where the replay
stopped (:class:`Reached`).  The point follows Kafka's application order:

* ``at_offset`` N: every record up to and including N (a batch is cut at N if N falls inside it, with a
  note, since Kafka applies batches atomically);
* ``at_time`` T (epoch microseconds): the longest run of batches, from the start, whose timestamps are at
  or before T (a batch is applied whole or not at all);
* neither: the end of the log.

When older segments were deleted the replay starts from a snapshot covering the missing start: the newest
covering snapshot at or before the point.  A point before every covering snapshot, an offset past the end
of the log or a time before its first record raises :class:`PointError`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import pipeline
from controller_core.codec.arrowutil import from_numpy, to_numpy
from controller_core.gcpause import paused
from controller_core.image import MIGRATING, Cluster, Partition
from controller_core.logdir import SEGMENT, SNAPSHOT, LogFile, discover
from controller_core.replay import (Plan, as_kafka_starts, iter_file_records, kafka_start, last_segment_row,
                                    nothing_to_replay, plan, read_bridged, read_plan)
from controller_core.vector import fold

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class PointError(ValueError):
    """A point the log cannot show (before what it covers, past its end, a negative offset)."""


@dataclass
class Reached:
    """Where the replay stopped: the last log offset applied and its batch's timestamp in ms (None: no log
    record applied, e.g. the state is a snapshot's), and the snapshot it started from."""

    offset: int | None = None
    timestamp: int | None = None
    snapshot: LogFile | None = None


def fmt_ms(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def fmt_us(us: int) -> str:
    spec = "milliseconds" if us % 1000 == 0 else "microseconds"
    return (EPOCH + timedelta(microseconds=us)).isoformat(timespec=spec).replace("+00:00", "Z")


def _snapshot_header_ts(snap: LogFile) -> int:
    """lastContainedLogTimestamp of a snapshot (ms): the time of the last record it contains."""
    for rec in iter_file_records(snap, include_skipped=True):
        if rec.type == "SNAPSHOT_HEADER":
            return int(rec.data.get("lastContainedLogTimestamp", 0))
        break
    return 0


def plan_for(log_dir, at_offset: int | None, at_time: int | None) -> Plan:
    """The replay plan for a point: :func:`controller_core.replay.plan`, except that for a point before
    the newest covering snapshot an older covering snapshot at or before the point is used."""
    p = plan(log_dir)
    if p.snapshot is None:
        return p
    segments = [f for f in p.files if f.kind == SEGMENT]
    first = min((s.offset for s in segments), default=0)  # no segments: every snapshot is a candidate
    covering = sorted((f for f in discover(Path(log_dir)) if f.kind == SNAPSHOT and f.offset >= first),
                      key=lambda f: f.offset, reverse=True)
    if p.snapshot.offset < first:  # every snapshot ends before the records (replay.choose): the newest one only
        covering = [p.snapshot]
    for snap in covering:
        if at_offset is not None and snap.offset - 1 > at_offset:
            continue
        if at_time is not None and _snapshot_header_ts(snap) * 1000 > at_time:
            continue
        return Plan([snap] + segments, snap, snap.offset, p.snapshots)
    oldest = covering[-1]
    what = f"offset {at_offset}" if at_offset is not None else fmt_us(at_time)
    since = (f"offset {oldest.offset - 1}" if at_offset is not None
             else f"{fmt_ms(_snapshot_header_ts(oldest))} (offset {oldest.offset - 1})")
    raise PointError(f"{what} is before what the log covers: its segments start at offset {first}, so the replay "
                     f"starts from a snapshot, and the oldest one ({oldest.label}) holds the state as of {since}; no "
                     "earlier state can be rebuilt")


def _at_end(records: pa.Table, seg: np.ndarray, snapshot: LogFile | None) -> Reached:
    """Where the end of the log is: the last segment record and its batch's time (the batch's first record's), as
    :func:`cut` finds it for a point past everything -- from the last batch's rows only (a pass over every row's
    offsets, batches and times was most of a default ``describe``'s cut, and its fresh pages on a first call)."""
    reached = Reached(snapshot=snapshot)
    if not seg.any():
        return reached
    last = len(seg) - 1 - int(np.argmax(seg[::-1]))  # the last segment row
    batch = records.column("batch_base_offset")
    base = batch[last].as_py()
    first, step = last, 64
    while first > 0:  # back to the first row of its batch (a batch's rows are together; cut compares base offsets)
        lo = max(0, first - step)
        same = (to_numpy(batch.slice(lo, first - lo)) == base) & seg[lo:first]
        if not same.all():
            first = lo + int(np.flatnonzero(~same)[-1]) + 1
            break
        first, step = lo, step * 2
    ts = records.column("timestamp").slice(first, 1).cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64())
    reached.offset, reached.timestamp = int(records.column("offset")[last].as_py()), int(ts[0].as_py())
    return reached


def cut(records: pa.Table, at_offset: int | None, at_time: int | None, snapshot: LogFile | None,
        notes: list[str]) -> tuple[pa.Table, Reached]:
    """The rows of a replay (bootstrap and snapshot rows whole, then segment rows) up to the point."""
    seg = pipeline.segment_rows(records)
    if at_offset is None and at_time is None:
        return records, _at_end(records, seg, snapshot)
    rows = np.flatnonzero(seg)
    off = to_numpy(records.column("offset"))[rows]
    batch = to_numpy(records.column("batch_base_offset"))[rows]
    ts_ms = to_numpy(records.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()))[rows]
    head = np.ones(len(rows), bool)
    head[1:] = batch[1:] != batch[:-1]
    batch_no = np.cumsum(head) - 1
    batch_ts = ts_ms[head][batch_no]  # a batch's time: its first record's
    keep = len(rows)  # segment rows kept: a prefix
    done = False
    if at_time is not None:
        late = np.flatnonzero(head & (batch_ts * 1000 > at_time))
        if len(late):
            keep, done = int(late[0]), True
    elif at_offset is not None:
        after = np.flatnonzero(off > at_offset)
        if len(after):
            keep, done = int(after[0]), True
            if keep and not head[keep]:  # the point falls inside a batch
                start = int(np.flatnonzero(head[:keep])[-1])
                last = int(np.flatnonzero(batch_no == batch_no[keep])[-1])
                notes.append(f"note: offset {at_offset} is inside batch {off[start]}..{off[last]}, which Kafka applies "
                             "atomically; showing the state part-way through it")
        elif len(off) and off[-1] == at_offset:
            done = True
    reached = Reached(snapshot=snapshot)
    if keep:
        reached.offset, reached.timestamp = int(off[keep - 1]), int(batch_ts[keep - 1])
    end = reached.offset if reached.offset is not None else (snapshot.offset - 1 if snapshot is not None else None)
    if at_offset is not None and not done and (end is None or at_offset > end):
        raise PointError(f"offset {at_offset} is past the end of the log "
                         f"({'it has no records' if end is None else f'last offset {end}'})")
    if at_time is not None and snapshot is None and len(off) and reached.offset is None:
        raise PointError(f"{fmt_us(at_time)} is before the log's first record (offset {off[0]}, written "
                         f"{fmt_ms(int(batch_ts[0]))})")
    if keep == len(rows):  # the end of the log: every row (a filter would copy them all)
        return records, reached
    mask = ~seg
    mask[rows[:keep]] = True
    return records.filter(from_numpy(mask)), reached


def image_at(log_dir, at_offset: int | None = None, at_time: int | None = None, err=None,
             prog: str = "kraft-audit describe", quarantine: list | None = None) -> tuple[Cluster, Reached]:
    """The cluster image at the point (see the module docstring).  Records the image rejects (a change
    for an unknown partition, a topic created twice, ...) are reported on ``err`` and skipped.
    ``quarantine``: if given, receives the spans of the files read that could not be decoded."""
    image, history, reached = replay_to(log_dir, at_offset, at_time, err, prog, quarantine)
    return with_partitions(image, history), reached


def replay_to(log_dir, at_offset: int | None = None, at_time: int | None = None, err=None,
              prog: str = "kraft-audit describe", quarantine: list | None = None) -> tuple[Cluster, pa.Table, Reached]:
    """:func:`image_at`'s replay without making the partitions Python objects: the image (its partitions not
    filled in), the partitions' state at the point (``fold.state_at`` of the history up to it: each existing
    partition's latest row, dated; ``pipeline.run(state_only=True)``), and where the point fell.
    :func:`with_partitions` puts that state into the image."""
    err = err or sys.stderr
    if at_offset is not None and at_offset < 0:
        raise PointError(f"--at-offset {at_offset}: offsets start at 0")
    p = plan_for(log_dir, at_offset, at_time)
    spans: list = []
    gaps: list = []
    records = read_plan(p, spans, partition_json=False, gaps=gaps)
    notes: list[str] = []

    def reaches(snap: LogFile) -> bool:  # the point is at or after the state ``snap`` holds
        return (at_offset is None and at_time is None or at_offset is not None and at_offset >= snap.offset - 1
                or at_time is not None and at_time >= _snapshot_header_ts(snap) * 1000)

    # a snapshot across a gap of the segments (replay.bridging), as every replay of the directory starts from it
    p, records, gaps = read_bridged(p, records, gaps, False, notes=notes, usable=reaches)
    # where Kafka would start the log from its latest snapshot instead (replay.kafka_start): the state at a point from
    # that snapshot's end on is the snapshot's; a point before it is still read off the segments' records
    start = kafka_start(p, *last_segment_row(records))
    if start is not None and reaches(start):
        p, records = as_kafka_starts(p, records, spans, False, notes=notes, start=start)
        gaps = []  # (no segment record read from there)
    if quarantine is not None:
        quarantine.extend(spans)
    if records is None:
        raise PointError(nothing_to_replay(log_dir, spans))
    for g in gaps:
        if at_offset is not None and g.first <= at_offset <= g.last:
            nearest = f"offset {g.first - 1} or {g.last + 1} can" if g.first else f"offset {g.last + 1} can"
            raise PointError(f"offset {at_offset} is among offsets no file holds ({g.first}..{g.last}, before "
                             f"{g.file}): the state there cannot be rebuilt; {nearest}")
    records, reached = cut(records, at_offset, at_time, p.snapshot, notes)
    # the gaps the replay went over on its way to the point (replay.Gap)
    notes += [g.message for g in gaps if reached.offset is not None and g.first <= reached.offset]
    rejected: list = []
    # the state, not its causes, and only at the point: the records are cut there
    rep = pipeline.run(records, invariants=False, recompute=False, rejected=rejected, state_only=True)
    for note in notes + rep.notes:
        print(f"{prog}: {note}", file=err)
    for label, offset, rtype, why in sorted(rejected, key=lambda r: r[1]):
        print(f"{prog}: {label} offset {offset} ({rtype}): {why}; record skipped", file=err)
    return rep.image, rep.history, reached


def with_partitions(image: Cluster, history: pa.Table) -> Cluster:
    """``image`` with every live partition's latest state from ``history``."""
    image.partitions = {}
    state = fold.state_at(history)
    with paused():  # a million lists, no cycles: see gcpause
        # column by column, then zipped: a dict per row (Table.to_pylist) was most of describe's time
        cols = [state.column(c).to_pylist() for c in (
            "topic_id", "partition_id", "replicas", "isr", "leader", "leader_epoch", "partition_epoch",
            "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr",
            "leader_recovery_state")]
        topics = image.topics
        for tid, pid, rep, isr, leader, le, pe, rm, ad, elr, lke, lrs, dirs in zip(*cols, _named_dirs(state)):
            if tid not in topics:
                continue
            image.partitions[(tid, pid)] = Partition(tid, pid, rep, isr, leader, le, pe, rm or [], ad or [],
                                                     elr or [], lke or [], lrs,
                                                     [MIGRATING] * len(rep) if dirs is None else dirs)
    return image


def _named_dirs(state: pa.Table) -> list:
    """What ``image.replica_dirs`` makes of each row's directories, decided for every row at once: the list
    where one names a directory, None where every replica's is MIGRATING (null, empty or all MIGRATING: most
    partitions below MV 3.7-IV2, and the fold's own MIGRATING lists)."""
    col = state.column("directories").combine_chunks() if state.num_rows else None
    if col is None or not len(col.values):
        return [None] * state.num_rows
    parent = to_numpy(pc.list_parent_indices(col), np.int64)
    named = to_numpy(pc.not_equal(pc.list_flatten(col), MIGRATING), bool)
    rows = np.flatnonzero(np.bincount(parent[named], minlength=len(col)) > 0)
    out = [None] * len(col)
    for r, dirs in zip(rows.tolist(), col.take(from_numpy(rows)).to_pylist()):
        out[r] = dirs
    return out
