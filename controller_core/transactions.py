"""Metadata transactions (KIP-868, Kafka 3.6+): the records a replay must not apply.

A controller writes a set of records too large for one Raft batch (a topic with many partitions, the bootstrap
records, a ZooKeeper migration) between a BeginTransactionRecord and an EndTransactionRecord.  Nothing between
the two is visible -- brokers apply the records to a delta and publish it only at the EndTransactionRecord --, and
when the controller fails over mid-transaction the new active controller writes an AbortTransactionRecord: the
records since the BeginTransactionRecord are discarded (the controller reverts its in-memory state to the
transaction's start, brokers drop the delta).  So a replay leaves out

* every record of an **aborted** transaction (after its BeginTransactionRecord, before its AbortTransactionRecord);
* every record of a transaction the log does **not end** (a log copied, or cut at a point, while the controller
  was writing one): not visible to any broker until an EndTransactionRecord that this log does not hold.

Only segment records are transactional (a snapshot is the committed state at its end offset).  Every replay applies
:func:`outside` to its rows (``pipeline.run``; the Spark replay's driver to the rows it sends to the tasks:
``jobs/replay``) and says what it left out in one note per transaction.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

BEGIN, END, ABORT = "BEGIN_TRANSACTION_RECORD", "END_TRANSACTION_RECORD", "ABORT_TRANSACTION_RECORD"
MARKERS = (BEGIN, END, ABORT)


@dataclass(frozen=True)
class Discarded:
    """The offsets of one transaction a replay leaves out: ``first``..``last`` (the records after its
    BeginTransactionRecord at ``begin``), aborted at ``abort`` or never ended (``abort`` None)."""

    begin: int
    first: int
    last: int
    abort: int | None

    @property
    def message(self) -> str:
        span = f"offsets {self.first}..{self.last}" if self.last > self.first else f"offset {self.first}"
        if self.abort is not None:
            return (f"note: {span}: a metadata transaction (BeginTransactionRecord at offset {self.begin}) aborted "
                    f"at offset {self.abort} (AbortTransactionRecord): not replayed, as Kafka discards them")
        return (f"note: {span}: a metadata transaction (BeginTransactionRecord at offset {self.begin}) not ended "
                "where the replay stops: not replayed, as no broker sees them before its EndTransactionRecord")


def discarded(markers: list[tuple[int, str]], last_offset: int | None) -> list[Discarded]:
    """The transactions to leave out, from the segment records' transaction markers (offset, record type) in log
    order and the last segment offset read.  A BeginTransactionRecord inside an open transaction (Kafka's
    controller never writes one; a damaged log might) leaves the open one unended: its records are discarded too."""
    out, begin = [], None
    for offset, kind in sorted(markers):
        if kind == BEGIN:
            if begin is not None and offset > begin + 1:  # a transaction never ended before another began
                out.append(Discarded(begin, begin + 1, offset - 1, None))
            begin = offset
        elif kind == ABORT and begin is not None:
            if offset > begin + 1:
                out.append(Discarded(begin, begin + 1, offset - 1, offset))
            begin = None
        elif kind == END:
            begin = None
    if begin is not None and last_offset is not None and last_offset > begin:
        out.append(Discarded(begin, begin + 1, last_offset, None))
    return out


def _markers_of(records: pa.Table, segment: np.ndarray) -> list[tuple[int, str]]:
    """(offset, record type) of the segment rows that are transaction markers.  Read where the type numbers lie,
    chunk by chunk (a replay asks on every run: a lookup of every row's type, ``bronze.by_type``, was 2 ns a record),
    then the few candidates one by one (a take of a chunked table joins every chunk first); by ``by_type`` on a
    table without type numbers (a lake written before them)."""
    from controller_core.codec.bronze import by_type
    from controller_core.records import BY_API_KEY, BY_TYPE_NAME

    names = records.column_names
    if "record_type_id" not in names or "is_control" not in names or records.column("record_type_id").null_count:
        code = by_type(records, {BEGIN: 1, END: 2, ABORT: 3}, 0, np.int8)
        at = np.flatnonzero(code)
        kinds = [(BEGIN, END, ABORT)[code[i] - 1] for i in at]
    else:
        keys = [BY_TYPE_NAME[t].api_key for t in MARKERS]
        at, row0 = [], 0
        for c in records.column("record_type_id").chunks:
            v = c.to_numpy(zero_copy_only=False)
            at.extend((np.flatnonzero((v >= min(keys)) & (v <= max(keys))) + row0).tolist())
            row0 += len(c)
        ids, control = records.column("record_type_id"), records.column("is_control")
        kinds = [None if control[i].as_py() else BY_API_KEY[ids[i].as_py()].type_name for i in at]
    offsets = records.column("offset")
    return [(offsets[int(i)].as_py(), k) for i, k in zip(at, kinds) if k in MARKERS and segment[i]]


def of_rows(records: pa.Table, segment: np.ndarray, last_offset: int | None = None) -> list[Discarded]:
    """:func:`discarded` of bronze rows (``segment``: which rows come from log segments).  ``last_offset``: the log's
    last segment offset when the rows do not end there (the Spark driver's cluster-level rows); else their own."""
    markers = _markers_of(records, segment)
    if not markers:
        return []
    # a transaction is open at the end when the last marker begins one: only then is the last offset needed (a pass
    # over the rows)
    if last_offset is None and max(markers)[1] == BEGIN:
        offsets = np.asarray(records.column("offset").to_numpy(zero_copy_only=False), np.int64)[segment]
        last_offset = int(offsets.max()) if len(offsets) else None
    return discarded(markers, last_offset)


def inside(offsets: np.ndarray, spans: list[Discarded]) -> np.ndarray:
    """Whether each offset lies in one of ``spans``."""
    hit = np.zeros(len(offsets), bool)
    for d in spans:
        hit |= (offsets >= d.first) & (offsets <= d.last)
    return hit


def outside(records: pa.Table, segment: np.ndarray) -> tuple[pa.Table, np.ndarray, list[str]]:
    """(rows, their ``segment`` flags, notes): ``records`` without the segment rows of discarded transactions
    (:func:`of_rows`), and one note for each; the rows as they are (not copied) when none is."""
    spans = of_rows(records, segment)
    if not spans:
        return records, segment, []
    offsets = np.asarray(records.column("offset").to_numpy(zero_copy_only=False), np.int64)
    keep = ~(inside(offsets, spans) & segment)
    return records.filter(pa.array(keep)), segment[keep], [d.message for d in spans]


def committed(batches):
    """The scalar reference of the rule, over (file, records of one batch) in replay order, as a broker reads the
    log: the records after a BeginTransactionRecord are held until its EndTransactionRecord (then passed on) or its
    AbortTransactionRecord (then dropped); those still held at the end, or when another transaction begins, are
    dropped.  The markers themselves pass (they change nothing); a batch is cut at each marker (the controller
    writes each marker in a batch of its own)."""
    held = None
    for lf, batch in batches:
        start = 0
        for i, rec in enumerate(batch):
            if rec.type not in MARKERS or lf.kind != "segment":
                continue
            before = batch[start:i]
            if before:
                if held is None:
                    yield lf, before
                else:
                    held.append((lf, before))
            if rec.type == END and held is not None:
                yield from held
            held = [] if rec.type == BEGIN else None
            yield lf, [rec]
            start = i + 1
        rest = batch[start:]
        if rest:
            if held is None:
                yield lf, rest
            else:
                held.append((lf, rest))
