"""Reading a metadata log directory back as an ordered stream of record batches, for replay.

A replay starts from offset 0 when the log is complete (bootstrap.checkpoint, then the segments from
offset 0); when older segments were deleted it starts from the newest snapshot that covers the
missing start and goes on with the records after the snapshot's end offset.  Where Kafka would not start from
those records -- its latest snapshot past the log's end or of a later epoch (:func:`kafka_start`) -- the replay starts
from that snapshot, as Kafka truncates the log to it.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec.bronze import records_table
from controller_core.codec.logfile import iter_chunks
from controller_core.codec.ranges import decode_files
from controller_core.gcpause import paused
from controller_core.logdir import BOOTSTRAP_KIND, SEGMENT, SNAPSHOT, LogFile, discover

# Records that change nothing an auditor replays (kept out of the JSON parsing path).
SKIP = frozenset({"NO_OP_RECORD", "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "ABORT_TRANSACTION_RECORD",
                  "SNAPSHOT_HEADER", "SNAPSHOT_FOOTER", "KRAFT_VERSION", "KRAFT_VOTERS",
                  "UNKNOWN_RECORD"})  # a newer Kafka's record of a type this build does not know (kept in bronze)


@dataclass
class Rec:
    offset: int
    timestamp: int  # ms
    batch: int  # base offset of the batch (records of one batch were written atomically)
    type: str
    version: int
    data: dict
    file: str


@dataclass
class Plan:
    files: list[LogFile]
    snapshot: LogFile | None  # the snapshot the replay starts from, if any
    start_offset: int  # first log offset replayed after the snapshot (0 without one)
    snapshots: list[LogFile] = field(default_factory=list)  # every snapshot of the directory, used or not


def plan(log_dir: str | Path) -> Plan:
    """Which files of a log directory to replay, in order (see the module docstring)."""
    return choose(discover(Path(log_dir)), str(log_dir))


def choose(files: list[LogFile], where: str = "the log") -> Plan:
    """The replay plan over known files (from a directory, or the source files of a bronze table)."""
    boots = [f for f in files if f.kind == BOOTSTRAP_KIND]
    segments = sorted((f for f in files if f.kind == SEGMENT), key=lambda f: f.offset)
    snapshots = [f for f in files if f.kind == SNAPSHOT]
    first = min((s.offset for s in segments), default=None)
    if first is None and snapshots:
        # a folder holding only snapshots: the newest one is the whole state
        snap = max(snapshots, key=lambda s: s.offset)
        return Plan([snap], snap, snap.offset, snapshots)
    if first is None or first == 0:
        return Plan(boots + segments, None, 0, snapshots)
    covering = [s for s in snapshots if s.offset >= first]
    if covering:
        snap = max(covering, key=lambda s: s.offset)
        return Plan([snap] + segments, snap, snap.offset, snapshots)
    if not snapshots:
        raise FileNotFoundError(f"{where}: the log starts at offset {first} and no snapshot covers the "
                                "missing start; the history before it is gone")
    # every snapshot ends before the first record: the offsets between the newest one and that record were lost (a
    # first segment emptied or deleted past every snapshot).  The newest snapshot still holds the state at its end,
    # so the replay starts there and the run of offsets after it is a Gap (find_gaps) every replay warns of -- as a
    # log directory's replay does when the emptied file is there to plan from (bridging), and as the lake, which
    # holds no row of an emptied file, now plans too
    snap = max(snapshots, key=lambda s: (s.offset, s.epoch))
    return Plan([snap] + segments, snap, snap.offset, snapshots)


def kafka_start(p: Plan, last_offset: int | None, last_epoch: int | None) -> LogFile | None:
    """The snapshot Kafka starts this log from instead of the plan's start, or None.  When it opens its metadata log
    (and after a follower fetched a snapshot), Kafka's KafkaMetadataLog.truncateToLatestSnapshot truncates the whole
    log to its latest snapshot (by end offset, then epoch) when that snapshot is of a later leader epoch than the log's
    last batch, or of the same epoch and past the log's end offset: what a follower leaves that stopped after fetching
    a snapshot from the leader and before truncating its own log.  Its segments then hold older records (or another
    epoch's) that no replica applies after the snapshot.  ``last_offset`` / ``last_epoch``: the offset and leader epoch
    of the last segment record the plan reads (None: it reads none)."""
    if not p.snapshots:
        return None
    latest = max(p.snapshots, key=lambda s: (s.offset, s.epoch))
    if last_offset is None:
        if p.snapshot is not None:
            return None  # nothing after the snapshot the plan starts from: the same start either way
        end, epoch = 0, 0  # segments from offset 0 with no record: an empty log (Kafka's epoch of none: 0)
    else:
        end, epoch = last_offset + 1, last_epoch if last_epoch is not None else 0
    if latest.epoch > epoch or (latest.epoch == epoch and latest.offset > end):
        return latest
    return None


def kafka_start_note(start: LogFile, last_offset: int | None, last_epoch: int | None) -> str:
    """What :func:`kafka_start` found, for the user: one line."""
    if last_offset is None:
        why = "the log holds no record"
    elif start.epoch > (last_epoch or 0):
        why = f"it is of leader epoch {start.epoch}, later than the log's last batch (epoch {last_epoch})"
    else:
        why = f"it is past the end of the log (last offset {last_offset})"
    return (f"note: replaying from snapshot {start.label}: {why}; Kafka truncates such a log to its latest snapshot "
            "when it opens it (a follower that stopped after fetching a snapshot leaves one), so the segments' records "
            "are not replayed")


def last_segment_row(records: pa.Table | None) -> tuple[int | None, int | None]:
    """(offset, batch leader epoch) of the last segment record among a read plan's rows -- its last row, since a plan
    reads its segments last and in offset order (None, None: no segment record)."""
    if records is None or not records.num_rows or records.column("source_kind")[-1].as_py() != SEGMENT:
        return None, None
    return records.column("offset")[-1].as_py(), records.column("batch_leader_epoch")[-1].as_py()


def iter_file_records(lf: LogFile, min_offset: int = 0, include_skipped: bool = False) -> Iterator[Rec]:
    """Records of one file in offset order (quarantined spans are simply absent)."""
    for chunk in iter_chunks(str(lf.path), lf.label, first_offset=lf.first_offset):
        if not len(chunk):
            continue
        t = records_table(chunk, "", lf.label, lf.kind)
        off, ts, batch, version = chunk.offset, chunk.timestamp, chunk.batch_base_offset, chunk.version
        types = t.column("record_type").to_pylist()
        keep = np.flatnonzero(off >= min_offset)
        if not len(keep):
            continue
        data = t.column("data_json").to_pylist()
        for i in keep.tolist():
            rtype = types[i]
            if rtype in SKIP and not include_skipped:
                continue
            yield Rec(int(off[i]), int(ts[i]), int(batch[i]), rtype, int(version[i]), json.loads(data[i]), lf.label)


def iter_batches(log_dir: str | Path, include_skipped: bool = False,
                 chosen: Plan | None = None) -> Iterator[tuple[LogFile, list[Rec]]]:
    """The replay as (file, records of one batch) in order, following :func:`plan` (or ``chosen``)."""
    p = chosen or plan(log_dir)
    for lf in p.files:
        min_offset = p.start_offset if lf.kind == SEGMENT else 0
        current: list[Rec] = []
        for rec in iter_file_records(lf, min_offset, include_skipped):
            if current and rec.batch != current[0].batch:
                yield lf, current
                current = []
            current.append(rec)
        if current:
            yield lf, current


# the record types whose Kafka JSON a replay never reads: the fold, the recompute and the invariant pass take
# their typed columns, and the few rows the scalar reference needs are rebuilt from those (explain.record_data)
TYPED_ONLY = frozenset({"PARTITION_RECORD", "PARTITION_CHANGE_RECORD"})


def read_log_dir(log_dir: str | Path, quarantine: list | None = None,
                 partition_json: bool = True, threads: int | None = None,
                 notes: list | None = None, gaps: list | None = None) -> tuple[pa.Table | None, int]:
    """The bronze rows a replay of a log directory reads (:func:`read_plan` of its :func:`plan`, from the snapshot
    Kafka would start from where :func:`kafka_start` finds one) and the first log offset replayed after the starting
    snapshot (0 without one).  ``notes`` receives a line for that start and a "warning: " line for each run of
    offsets no record holds (:class:`Gap`, into ``gaps`` too).  ``partition_json=False``: the rows as a replay reads them:
    ``data_json`` null on partition records (:data:`TYPED_ONLY`; writing it was a third of decoding), the record types
    dictionary-encoded (``bronze.REPLAY_SCHEMA``)."""
    p = plan(log_dir)
    found: list = []
    records = read_plan(p, quarantine, partition_json, threads, found)
    p, records, found = read_bridged(p, records, found, partition_json, threads, notes)
    settled, records = as_kafka_starts(p, records, quarantine, partition_json, threads, notes)
    if settled is p:  # (from the snapshot Kafka starts from, no segment record is read)
        if notes is not None:
            notes.extend(g.message for g in found)
        if gaps is not None:
            gaps.extend(found)
    return records, settled.start_offset


def from_snapshot(p: Plan, snap: LogFile) -> Plan:
    """The plan ``p`` started from ``snap`` instead: that snapshot, then the segments' records after it."""
    return Plan([snap] + [f for f in p.files if f.kind == SEGMENT], snap, snap.offset, p.snapshots)


def bridged(p: Plan, spans: dict, usable=lambda snap: True) -> tuple[Plan, list, LogFile | None]:
    """(plan, gaps, the snapshot it now starts from or None) of a replay whose segments hold ``spans`` (label ->
    (first, last) offset of the whole file): :func:`find_gaps`, then :func:`bridging` -- the rule
    :func:`read_log_dir` applies to what it reads, for a caller that knows the segments' offsets without reading them
    (the lake's replay, from its files' statistics)."""
    def clipped(plan: Plan) -> dict:
        return {label: (max(a, plan.start_offset), b) for label, (a, b) in spans.items() if b >= plan.start_offset}

    gaps = find_gaps(p, clipped(p))
    snap = bridging(p, gaps, usable)
    if snap is None:
        return p, gaps, None
    p = from_snapshot(p, snap)
    return p, find_gaps(p, clipped(p)), snap


def read_bridged(p: Plan, records: pa.Table | None, gaps: list, partition_json: bool = True,
                 threads: int | None = None, notes: list | None = None,
                 usable=lambda snap: True) -> tuple[Plan, pa.Table | None, list]:
    """(plan, rows, gaps) of a read plan that left ``gaps``: read again from the snapshot :func:`bridging` takes
    (``notes`` receives that line), as they are when it takes none.  The spans the first read could not decode were
    reported by it."""
    snap = bridging(p, gaps, usable)
    if snap is None:
        return p, records, gaps
    p, gaps = from_snapshot(p, snap), []
    records = read_plan(p, None, partition_json, threads, gaps)
    if notes is not None:
        notes.append(bridging_note(snap))
    return p, records, gaps


def bridging_note(snap: LogFile) -> str:
    return f"note: replaying from snapshot {snap.label}: the records before it are not all there"


def bridging(p: Plan, gaps: list, usable=lambda snap: True) -> LogFile | None:
    """The snapshot a replay whose plan left ``gaps`` starts from instead, or None.  A gap before every record read
    (the first segments emptied) is a log whose records start after it: the newest snapshot covering that start, as
    :func:`choose` takes for a log whose first segments were deleted (the lake's replay, which holds no row of an
    emptied file, plans it so).  Otherwise the newest snapshot ending inside the last gap it can shorten (one at the
    gap's end closes it): a snapshot holds the state at its end offset whatever records before it were lost, so the
    replay loses what the gap loses and nothing before it.  ``usable``: which snapshots may be taken (a replay to a
    point takes none past it)."""
    if gaps and gaps[0].at_start:
        covering = [s for s in p.snapshots if s.offset >= gaps[0].last + 1 and usable(s)]
        if covering:
            return max(covering, key=lambda s: (s.offset, s.epoch))
    for g in reversed(gaps):
        inside = [s for s in p.snapshots if g.first < s.offset <= g.last + 1 and usable(s)]
        if inside:
            return max(inside, key=lambda s: (s.offset, s.epoch))
    return None


def as_kafka_starts(p: Plan, records: pa.Table | None, quarantine: list | None = None, partition_json: bool = True,
                    threads: int | None = None, notes: list | None = None,
                    start: LogFile | None = None) -> tuple[Plan, pa.Table | None]:
    """(plan, rows) of a read plan from the snapshot :func:`kafka_start` finds (or ``start``, found already), else as
    they are.  The snapshot's rows are read when the plan did not start from it; the segment rows are dropped when it
    did (the records after it are another epoch's)."""
    last_offset, last_epoch = last_segment_row(records)
    start = start or kafka_start(p, last_offset, last_epoch)
    if start is None:
        return p, records
    settled = Plan([start], start, start.offset, p.snapshots)
    if start is p.snapshot:
        from controller_core.codec.arrowutil import equal

        rows = records.filter(pc.invert(pc.fill_null(equal(records.column("source_kind"), SEGMENT), False)))
    else:
        rows = read_plan(settled, quarantine, partition_json, threads)
    if rows is None or not rows.num_rows:
        return p, records  # (a snapshot that gives nothing: the log as it is)
    if notes is not None:
        notes.append(kafka_start_note(start, last_offset, last_epoch))
    return settled, rows


def nothing_to_replay(log_dir, spans: list) -> str:
    """Why a log directory gave no record: the first span that could not be decoded (file, byte, reason),
    or that it holds none."""
    if spans:
        q = spans[0]
        more = f" (and {len(spans) - 1} more spans)" if len(spans) > 1 else ""
        return f"{log_dir}: nothing could be decoded, no verdict: {q.message} [{q.reason}]{more}"
    return f"{log_dir}: no metadata records to replay"


@dataclass
class Gap:
    """Offsets a replay goes over with no record read: a KRaft log holds a record at every offset (nothing compacts
    it), so these were lost -- a segment emptied, deleted or cut, or damaged bytes quarantined."""

    first: int
    last: int
    file: str  # the segment whose first record follows the gap
    after: str  # what the replay read last before it (a file, or the snapshot it starts from)
    at_start: bool = False  # no segment record before it: the records read start after it

    def as_json(self) -> dict:
        """The gap as ``verify --json`` and ``audit --json`` list it (``missingOffsets``)."""
        return {"first": self.first, "last": self.last, "after": self.after, "before": self.file}

    @property
    def message(self) -> str:
        count = self.last - self.first + 1
        return (f"warning: offsets {self.first}..{self.last} are missing ({count} record{'s' * (count != 1)}): no "
                f"file read holds them between {self.after} and {self.file}; the changes written there are not "
                "replayed, and what follows may differ from what Kafka applied")


def read_plan(p: Plan, quarantine: list | None = None, partition_json: bool = True,
              threads: int | None = None, gaps: list | None = None) -> pa.Table | None:
    """The bronze rows of a replay plan's files, in replay order; rows of the starting snapshot are
    dated at the snapshot's end offset - 1 (the state they describe).  None when there is nothing.
    Spans that could not be decoded (:class:`~controller_core.codec.logfile.Quarantine`, naming the file
    and byte position) are left out and appended to ``quarantine`` when given; offsets between the plan's start and
    the segments' records, or between two segments, that no record holds (:class:`Gap`) to ``gaps``.  The files are
    decoded on ``threads`` threads (default: the cores this process may use; :mod:`controller_core.codec.ranges`)."""
    skip = frozenset() if partition_json else TYPED_ONLY
    kinds = {lf.label: lf.kind for lf in p.files}
    with paused():  # Arrow and NumPy objects by the thousand, no cycles: see gcpause
        decoded = decode_files([(str(lf.path), lf.label, lf.first_offset) for lf in p.files],
                               lambda chunk: records_table(chunk, "", chunk.file, kinds[chunk.file], skip,
                                                           lean=not partition_json), threads)
    parts = []
    spans: dict = {}  # each segment's (first, last) offset read
    for lf, got in zip(p.files, decoded):
        if quarantine is not None:
            quarantine.extend(got.quarantine)
        for t in got.results:
            if lf.kind == SEGMENT and p.start_offset:
                t = t.filter(pc.greater_equal(t.column("offset"), p.start_offset))
            if lf.kind == SNAPSHOT:
                i = t.schema.get_field_index("offset")
                t = t.set_column(i, t.schema.field(i), pa.array(np.full(t.num_rows, p.start_offset - 1, np.int64)))
            elif lf.kind == SEGMENT and t.num_rows:
                first, last = t.column("offset")[0].as_py(), t.column("offset")[-1].as_py()
                spans[lf.label] = (spans.get(lf.label, (first,))[0], last)
            parts.append(t)
    if gaps is not None:
        gaps.extend(find_gaps(p, spans))
    return pa.concat_tables(parts) if parts else None


def find_gaps(p: Plan, spans: dict) -> list[Gap]:
    """The runs of offsets no record holds (:class:`Gap`) from the plan's start on, given each segment's first and
    last offset read from there (``spans``: label -> (first, last); a segment that gave none is not in it)."""
    found = []
    start = p.snapshot.label if p.snapshot is not None else "the log's start"
    expected, after = p.start_offset, start
    for lf in p.files:
        if lf.kind != SEGMENT or lf.label not in spans:
            continue
        first, last = spans[lf.label]
        if first > expected:
            found.append(Gap(expected, first - 1, lf.label, after, at_start=not found and expected == p.start_offset
                             and after == start))
        expected, after = max(expected, last + 1), lf.label
    return found
