"""The replay pipeline: decoded records in, silver tables out.  Every command replays through here.

``run(records)`` takes the bronze rows of a replay (Arrow columns in replay order: bootstrap, the
starting snapshot, then segment records; a snapshot's rows dated at its end offset - 1) and returns
:class:`Replay`: the partition state history (dated, with the trigger of every change), the broker and
topic timelines, the divergences between what the log recorded and what the controller's rules
recompute, the invariant breaches of controller-rules §4, and the cluster image at the end.

Steps, in order:

1. fold every partition's records into its state history in one compiled pass
   (:mod:`controller_core.kernels.fold_pass`, over the dense layout of :mod:`controller_core.kernels.layout`
   that step 4 reads too; its result equals :mod:`controller_core.vector.fold`, the reference, which takes
   the input the pass does not -- counted in ``Replay.fold_fallback_partitions``);
2. build the broker and topic timelines from the few cluster-level records (:mod:`controller_core.timelines`);
3. recompute every PartitionChangeRecord from its trigger (:mod:`controller_core.vector.explain`: the trigger
   and context vectorized, the builder one compiled loop, :mod:`controller_core.kernels.recompute_pass`, whose
   reference is the NumPy builder :mod:`controller_core.vector.recompute`);
   the partitions holding a record the builder cannot reproduce go to the scalar reference
   (:mod:`controller_core.rules.verify`), which also names the divergences -- counted in
   ``Replay.scalar_partitions``;
   a findings-only replay (``history=False``: ``verify``) takes steps 1 and 3 in one pass that makes no history
   (:mod:`controller_core.kernels.judge_pass`, the same table as ``explain``'s), the general way where that pass
   leaves a record to the NumPy builder;
4. check the §4 invariants in one compiled pass over the records (:mod:`controller_core.kernels.invariants`;
   the scalar checker :mod:`controller_core.rules.invariants` is its reference in the tests);
5. date the history: valid-from / valid-to times from the segment records at those offsets.

On a process that may use more than one core (:mod:`controller_core.threads`) step 2 and step 4 run on other
threads beside steps 1 and 3, and the layout reads its list columns on one; the results are the same on one core
(``threads=1``, what a Spark task passes).

Callers: ``verify``, ``describe``, ``audit --log-dir`` / ``plan --log-dir`` (:func:`from_log_dir`), the
Spark replay (one call per partition bucket inside the executors) and the benchmarks.

Pure NumPy/Arrow/numba; never imports Spark or Delta.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core import threads as _threads
from controller_core import timelines, transactions, vendor
from controller_core.codec.arrowutil import (column_ints, equal, from_numpy, gather, nulls, plain, plain_schema,
                                             to_numpy)
from controller_core.gcpause import paused
from controller_core.image import Cluster
from controller_core.kernels import dating, fold_pass, judge_pass, layout
from controller_core.kernels import invariants as invariant_pass
from controller_core.numba_cache import read_only
from controller_core.replay import nothing_to_replay, read_log_dir
from controller_core.vector import fold
from controller_core.vector.explain import (EXPLAINED_SCHEMA, LABEL_TYPE, cluster_level_recs, explain,
                                            explain_unfolded, scalar_batches)

TS = pa.timestamp("us", tz="UTC")  # Spark's TimestampType, as read back from Delta
SEGMENT, SNAPSHOT = "segment", "snapshot"

# Replay.history: the fold's history (its repeated strings dictionary-encoded, fold.HISTORY_ENCODED) dated, with the
# trigger of each change (a few distinct labels, encoded too); HISTORY_DATED_SCHEMA is its plain form, the lake's
# partition_state_history (arrowutil.plain)
HISTORY_DATED_ENCODED = pa.schema(list(fold.HISTORY_ENCODED) + [
    pa.field("valid_from_timestamp", TS), pa.field("valid_to_timestamp", TS), pa.field("trigger", LABEL_TYPE)])
HISTORY_DATED_SCHEMA = plain_schema(HISTORY_DATED_ENCODED)
# the steps ``run(timings=...)`` times, in their order ("segment rows": which rows come from segments, the snapshots
# among the others; a findings-only replay's (verify's) one pass for the fold and the recompute, kernels/judge_pass.py,
# counts as "recompute", the order it reads the records in as "fold"; "dating": the triggers, the dating and what
# the replay returns made of them)
STEPS = ("segment rows", "layout", "fold", "timelines", "recompute", "scalar path", "invariants", "dating")
DIVERGENCE_SCHEMA = pa.schema([
    ("offset", pa.int64()), ("topic", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
    ("field", pa.string()), ("recorded", pa.string()), ("expected", pa.string()), ("trigger", pa.string()),
    ("rule", pa.string()), ("severity", pa.string()),
])
BREACH_SCHEMA = pa.schema([
    ("offset", pa.int64()), ("topic", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()),
    ("rule", pa.string()), ("severity", pa.string()), ("recorded", pa.string()), ("expected", pa.string()),
    ("message", pa.string()),
])


# what a findings-only replay (``history=False``) reads of the fold's table: the state before each change record
# (explain; its lists where the fold found them on the layout's tape, ``Fold.refs``), where it is (the scalar
# fallback) and the orphans; no list column, not the directories' and record types' strings
JUDGED_COLUMNS = frozenset(("topic_id", "partition_id", "offset", "leader", "leader_recovery_state", "orphan"))


@dataclass
class Replay:
    """What one replay produced (see the module docstring)."""

    history: pa.Table  # HISTORY_DATED_ENCODED (arrowutil.plain: HISTORY_DATED_SCHEMA)
    brokers: pa.Table  # timelines.BROKER_SCHEMA
    topics: pa.Table  # timelines.TOPIC_SCHEMA
    divergences: pa.Table  # DIVERGENCE_SCHEMA
    breaches: pa.Table  # BREACH_SCHEMA
    image: Cluster  # topics, brokers, configs, features and controller at the end (partitions: see image_at)
    explained: pa.Table  # per change record: offset, topic_id, partition_id, trigger, matched, modelled
    records: int = 0  # records replayed (NoOps and markers included)
    partition_changes: int = 0  # PartitionChangeRecords recomputed
    scalar_partitions: int = 0  # partitions handed to the scalar reference
    fold_fallback_partitions: int = 0  # partitions the compiled fold left to the NumPy fold (kernels/fold_pass.py)
    trigger_counts: dict[str, int] = field(default_factory=dict)  # how often each trigger explained a record
    start_offset: int = 0  # first log offset replayed after the starting snapshot (0: none)
    quarantine: list = field(default_factory=list)  # spans of the input that could not be decoded (from_log_dir)
    newer_kafka: list = field(default_factory=list)  # warnings: what a newer Kafka wrote (bronze.NewerKafka)
    notes: list = field(default_factory=list)  # how the log was read (replay.kafka_start_note, Gap.message)
    gaps: list = field(default_factory=list)  # runs of offsets no record holds (replay.Gap)


def run(records: pa.Table, *, elr_override: bool | None = None, invariants: bool = True, recompute: bool = True,
        context_topics: frozenset[str] = frozenset(), rejected: list | None = None, history: bool = True,
        state_only: bool = False, threads: int | None = None,
        cluster_timelines: tuple[pa.Table, pa.Table, Cluster] | None = None, timings: dict | None = None) -> Replay:
    """Replay ``records`` (bronze rows in replay order).

    ``elr_override``: whether eligible.leader.replicas.enable was on where the log cannot tell (MV >=
    4.0-IV1 without the feature record).  ``context_topics``: topics whose partition 0 rows are only
    context here (a Spark bucket that does not own them): used for decisions, never reported.
    ``rejected``: if given, receives (file, offset, record type, reason) of every record the image
    cannot apply (skipped by the replay; the invariants report them as INV-TOPIC-EXISTS & co.).
    ``recompute=False``: the state only (history, timelines, image), for a caller that shows the state at a point
    (``describe``): no change record is recomputed, so ``explained`` and ``divergences`` are empty and the history
    has no triggers.
    ``history=False``: the findings only (``verify``): the history is not dated and ``Replay.history`` is empty --
    the dated copy of every history row is the last and largest table a replay makes.
    ``state_only=True`` (with ``recompute=False``): ``Replay.history`` is the state at the end only --
    ``fold.state_at`` of the dated history, each existing partition's latest row --, folded without a row per
    record (``describe``, which shows one point: the records cut there).
    ``cluster_timelines``: (brokers, topics, image) of an earlier run over the same cluster-level records and
    partition 0s (a Spark task's buckets share them), not built again; the image is shared, not copied.
    ``timings``: if given, receives the CPU seconds of each step (:data:`STEPS`; added to what it holds) -- the
    profile the benchmarks print; a step's figure is its own with ``threads=1``, and with more it also counts what
    the other threads did meanwhile."""
    if state_only and recompute:
        raise ValueError("state_only replays the state without recomputing the changes (recompute=False)")
    # a Confluent Server log's metadata version read as Apache Kafka's (controller_core/vendor.py), its note kept
    records, notes = vendor.as_apache(records)
    with paused():  # no cycles made here; a full collection walked the ~150 k objects of the imports (45 ms)
        out = _run(records, elr_override, invariants, recompute, context_topics, rejected, history, state_only,
                   threads, cluster_timelines, fold._Clock(timings))
    out.notes = notes + out.notes
    return out


def segment_rows(records: pa.Table) -> np.ndarray:
    """Whether each record comes from a log segment (not a snapshot or bootstrap.checkpoint), as a NumPy bool."""
    return to_numpy(pc.fill_null(equal(records.column("source_kind"), SEGMENT), False), bool)


def _run(records: pa.Table, elr_override, invariants: bool, recompute: bool, context_topics: frozenset[str],
         rejected: list | None, history: bool, state_only: bool, threads: int | None,
         cluster_timelines: tuple | None, clock) -> Replay:
    total = records.num_rows
    threads = _threads.available() if threads is None else threads
    # NoOps, transaction markers and control records (replay.SKIP) stay in: no step folds them (the layout's
    # kind OTHER; the timelines and the scalar reference take rows by type), and filtering them out copied
    # every column of the replay (6 s of verify on a 1 M-partition log)
    # which rows come from segments, compared once: the dating reads it, and the snapshots are among the others
    seg = segment_rows(records)
    # the records of aborted or unended metadata transactions: never visible, never replayed (KIP-868)
    records, seg, dropped = transactions.outside(records, seg)
    snaps = frozenset()
    if not seg.all():  # (a log's segments only, the usual replay: no pass over the file names)
        other = records.select(["source_file", "source_kind"]).filter(from_numpy(~seg))
        snaps = frozenset(pc.unique(other.column("source_file").filter(
            equal(other.column("source_kind"), SNAPSHOT))).to_pylist())
    image = Cluster(elr_override=elr_override) if cluster_timelines is None else cluster_timelines[2]
    clock("segment rows")

    def timed_build() -> tuple[pa.Table, pa.Table]:
        if cluster_timelines is not None:
            return cluster_timelines[0], cluster_timelines[1]
        return timelines.build(cluster_level_recs(records, every_p0_record=rejected is not None), image, rejected)

    def check(full=None) -> list:
        full = full if full is not None else layout.with_cluster(lay, records)
        return invariant_pass.check(records, elr_override, full)

    # on a second core: the timelines (the few cluster-level records, in Python) while the layout and the fold run,
    # then the invariant pass (the records and the layout with its cluster fields, made beside the layout's other
    # fields) beside the fold and the recompute -- the compiled loops hold no GIL
    parallel = _threads.worth(threads, total)
    timed = _threads.pool(threads).submit(timed_build) if parallel else None
    # one layout for the fold and the invariant pass (whose cluster fields it makes on another thread meanwhile)
    lay = layout.build(records, cluster=False, threads=threads, cluster_beside=invariants and parallel)
    clock("layout")
    # (collected here: a pool thread waits on no other)
    checking = _threads.pool(threads).submit(check, layout.with_cluster(lay, records)) if invariants and parallel \
        else None
    # findings only (verify): the fold and the change builder in one pass, no history made (kernels/judge_pass.py)
    findings_only = not history and recompute and not state_only and rejected is None and not context_topics
    prepared = judge_pass.prepare(records, lay) if findings_only else None
    exp = folded = built = None
    if prepared is not None:
        clock("fold")
        built = timed.result() if timed is not None else timed_build()
        clock("timelines")
        exp = explain_unfolded(records, lay, prepared, *built)
        clock("recompute")
    if exp is None:
        folded = fold_pass.fold(records, lay, state_only=state_only, columns=None if history else JUDGED_COLUMNS,
                                last=_context_partitions(lay, context_topics))
        clock("fold")
        # (built once: building them applies the cluster-level records to ``image``)
        built = built or (timed.result() if timed is not None else timed_build())
        clock("timelines")
    brokers, topics = built
    if exp is None:
        if rejected is not None:
            _orphans(folded.orphans, records, rejected)
        if recompute:
            exp = explain(records, folded.history, brokers, topics, lay, folded.rows, folded.changes, folded.refs)
            clock("recompute")
        else:
            exp = EXPLAINED_SCHEMA.empty_table()
    todo, divergences, labels = _scalar_fallback(records, exp, elr_override, snaps)
    clock("scalar path")
    found = checking.result() if checking is not None else check() if invariants else []
    if invariants:
        clock("invariants")
    triggers = _triggers(exp, labels)
    # dated before the context rows go: the fold's row arrays describe the history as it is (each row's dates
    # and trigger are its own partition's, so dropping rows after changes no other row)
    if not history:
        dated = HISTORY_DATED_ENCODED.empty_table()
    elif folded.rows is None:
        dated = date_history(folded.history, records, triggers, seg=seg)
    else:
        dated = date_history(folded.history, records, triggers, rows=folded.rows, successor=folded.successor,
                             changes=folded.changes, seg=seg, offsets=lay.offset)
    if context_topics:
        divergences, found, (exp, dated, triggers) = _drop_context(context_topics, divergences, found,
                                                                   (exp, dated, triggers))
    counts = _label_counts(triggers.column("trigger"))
    clock("dating")
    return Replay(history=dated, brokers=brokers, topics=topics,
                  divergences=divergence_table(divergences), breaches=breach_table(found), image=image, explained=exp,
                  records=total, partition_changes=len(exp), scalar_partitions=len(todo), trigger_counts=counts,
                  fold_fallback_partitions=folded.fallback_partitions if folded is not None else 0, notes=dropped)


# what the audit reads of every segment record (NoOps and control records included): the clock an "as of"
# point resolves on, the heartbeats metadata gaps are measured by, the Raft epoch of each batch and the
# controller a LeaderChange names (controller elections)
RECORD_TIME_COLUMNS = ("offset", "timestamp", "record_type", "batch_leader_epoch", "leader_id")


def from_log_dir(log_dir: str | Path, times: bool = True, **kw) -> tuple[Replay, pa.Table | None]:
    """:func:`run` over a log directory's replay plan; also returns the segment records' times
    (:data:`RECORD_TIME_COLUMNS`; None with ``times=False``).  The spans that could
    not be decoded are in ``Replay.quarantine``."""
    quarantine: list = []
    notes: list = []
    gaps: list = []
    records, start_offset = read_log_dir(log_dir, quarantine, partition_json=False, notes=notes, gaps=gaps)
    if records is None:
        raise FileNotFoundError(nothing_to_replay(log_dir, quarantine))
    record_times = None
    if times:
        seg = equal(records.column("source_kind"), SEGMENT)
        record_times = plain(pa.table({"offset": records.column("offset").filter(seg),
                                       "timestamp": records.column("timestamp").filter(seg).cast(TS),
                                       **{c: records.column(c).filter(seg) for c in RECORD_TIME_COLUMNS[2:]}}))
    out = run(records, **kw)
    out.start_offset = start_offset
    out.quarantine = quarantine
    out.notes = notes + out.notes
    out.gaps = gaps
    from controller_core.codec.bronze import NewerKafka
    newer = NewerKafka()
    newer.add(records)
    out.newer_kafka = newer.lines()
    return out, record_times


# ------------------------------------------------------------------------------------------ steps
def _scalar_fallback(records: pa.Table, exp: pa.Table, elr_override, snaps) -> tuple[set, list, dict]:
    """The partitions holding a change the vectorized builder could not reproduce, replayed by the scalar
    reference: (those partitions, its divergences, its trigger label per (offset, topic id, partition))."""
    missed = np.flatnonzero(~to_numpy(exp.column("matched"), bool))
    if not len(missed):  # (the usual case: a filter of the whole table for no row was 1 ns a record)
        return set(), [], {}
    missed = exp.take(from_numpy(missed)).select(["topic_id", "partition_id"])
    todo = set(zip(missed.column("topic_id").to_pylist(), missed.column("partition_id").to_pylist()))
    if not todo:
        return todo, [], {}
    from controller_core.rules.verify import verify_batches

    rep = verify_batches(scalar_batches(records, todo), elr_override=elr_override, snapshot_files=snaps)
    return todo, rep.divergences, {(o, t, p): name for o, t, p, name in rep.explained}


def _context_partitions(lay, topics: frozenset[str]) -> np.ndarray | None:
    """The layout's partitions that are context only (partition 0 of ``topics``), as a mask; None when none."""
    if not topics or lay.topic_dict is None or not len(lay.topic_dict):
        return None
    theirs = to_numpy(pc.is_in(lay.topic_dict, pa.array(sorted(topics), pa.string())), bool)
    first = lay.topic_p0[theirs]
    mask = np.zeros(len(lay.part_id), bool)
    mask[first[first >= 0]] = True
    return mask


def _drop_context(topics: frozenset[str], divergences: list, found: list, tables: tuple[pa.Table, ...]):
    """Partition 0 of ``topics`` is only context here (another Spark bucket owns it): not reported, in the
    findings nor in ``tables`` (each with topic_id and partition_id columns)."""
    divergences = [d for d in divergences if not (d.partition == 0 and d.topic_id in topics)]
    found = [b for b in found if not (b.partition == 0 and b.topic_id in topics)]
    ctx = pa.array(sorted(topics), pa.string())

    def mine(t: pa.Table) -> pa.Table:
        # the ids looked up for partition 0's rows only, and the kept rows copied run by run: a lookup of every
        # row's id and a filter of the history's list columns were a quarter of a 1.4 M-row bucket's replay
        first = np.flatnonzero(column_ints(t.column("partition_id"), fill=-1) == 0)
        if not len(first):
            return t
        theirs = to_numpy(pc.is_in(t.column("topic_id").take(from_numpy(first)), ctx), bool)
        if not theirs.any():
            return t
        drop = first[theirs]  # ascending, distinct
        if drop[0] == t.num_rows - len(drop):  # the table's last rows (the fold put them last): the rest, uncopied
            return t.slice(0, int(drop[0]))
        keep = np.ones(t.num_rows, bool)
        keep[drop] = False
        return gather(t, np.flatnonzero(keep))

    return divergences, found, tuple(mine(t) for t in tables)


def _orphans(orphan: pa.Table, records: pa.Table, rejected: list) -> None:
    """Change records for partitions that do not exist (the fold's orphans: their offset, topic_id and
    partition_id, in the history's order) into ``rejected``."""
    if not orphan.num_rows:
        return
    seen = {(r[1], r[2]) for r in rejected}
    files = records.filter(pc.is_in(records.column("offset"), orphan.column("offset"))).select(
        ["offset", "record_type", "source_file"])
    where = {(o, t): f for o, t, f in zip(*(files.column(c).to_pylist() for c in ("offset", "record_type",
                                                                                   "source_file")))}
    for o, tid, pid in zip(*(orphan.column(c).to_pylist() for c in ("offset", "topic_id", "partition_id"))):
        rtype = "PARTITION_CHANGE_RECORD"
        if (o, rtype) not in seen:
            rejected.append((where.get((o, rtype)), o, rtype, f"PartitionChangeRecord for unknown partition "
                                                               f"{(tid, pid)}"))


def _label_counts(labels) -> dict[str, int]:
    """How often each trigger label was given (a label ending in "?", two events that could explain a record, is
    not counted), by name.  The replay's labels are dictionary codes: counted by code (Arrow's ``value_counts`` of
    the dictionary column took 5.8 ms for 1.31 M labels, ``dating.count`` of the codes 0.5)."""
    labels = labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels
    if pa.types.is_dictionary(labels.type):
        idx = labels.indices
        codes = to_numpy(idx) if not idx.null_count else \
            to_numpy(idx.fill_null(0), np.int64)[to_numpy(idx.is_valid(), bool)]  # (no null: the codes as they lie)
        per_code = np.zeros(len(labels.dictionary), np.int64)
        dating.count(read_only(np.ascontiguousarray(codes)), per_code)
        pairs = zip(labels.dictionary.to_pylist(), per_code.tolist())
    else:
        pairs = ((item["values"], item["counts"]) for item in pc.value_counts(labels.drop_null()).to_pylist())
    counts: dict[str, int] = {}
    for name, k in pairs:
        if k and name is not None and not name.endswith("?"):
            counts[name] = counts.get(name, 0) + k
    return counts


def _triggers(exp: pa.Table, scalar: dict) -> pa.Table:
    """(offset, topic_id, partition_id, trigger) per change record: the vectorized label where it
    reproduced the record, the scalar reference's elsewhere (only those few rows are looked up)."""
    trig = exp.column("trigger").combine_chunks()
    missed = np.flatnonzero(~to_numpy(exp.column("matched"), bool)) if scalar else np.zeros(0, np.int64)
    if len(missed):
        trig = trig.cast(pa.string())  # the scalar reference's labels may be new strings
        at = from_numpy(missed)
        keys = zip(*(exp.column(c).take(at).to_pylist() for c in ("offset", "topic_id", "partition_id")))
        names = [scalar.get(k, t) for k, t in zip(keys, trig.take(at).to_pylist())]
        mask = np.zeros(len(trig), bool)
        mask[missed] = True
        trig = pc.replace_with_mask(trig, from_numpy(mask), pa.array(names, pa.string()))
    return pa.table({"offset": exp.column("offset"), "topic_id": exp.column("topic_id"),
                     "partition_id": exp.column("partition_id"), "trigger": trig})


def date_history(history: pa.Table, records: pa.Table, triggers: pa.Table, *, rows: np.ndarray | None = None,
                 successor: np.ndarray | None = None, changes: np.ndarray | None = None, seg=None,
                 offsets: np.ndarray | None = None) -> pa.Table:
    """History rows with the time they became and stopped being valid (the timestamps of the segment
    records at ``offset`` / ``valid_to_offset``; null for a snapshot's state) and the trigger of
    each change record (null where there is none).

    The compiled fold's row arrays (:class:`controller_core.kernels.fold_pass.Fold`), when given, say where
    those records are without a search: ``rows``, the input row of each history row (so the record at its
    ``offset``), ``successor``, the history row whose offset is its ``valid_to_offset`` (-1: none), and
    ``changes``, the rows ``triggers`` labels.  ``seg``: whether each record comes from a segment (a NumPy bool per
    record), when the caller has compared ``source_kind`` already; ``offsets``: the records' offsets as int64, when
    the caller has them (the layout's)."""
    if seg is None:
        seg = segment_rows(records)
    if rows is not None and successor is not None:
        dated = _date_by_rows(history, records, seg, rows, successor, offsets)
        if dated is not None:
            return _dated(history, triggers, changes, *dated)
    s_off = np.asarray(records.column("offset").filter(from_numpy(seg)), np.int64)
    s_ts = records.column("timestamp").filter(from_numpy(seg)).cast(TS)
    order = np.argsort(s_off, kind="stable")
    s_off = s_off[order]
    # the times as int64 microseconds: a NumPy gather and a zero-copy view as timestamps, not Arrow takes and
    # an if_else per column (a timestamp a segment record lacks, should a caller's rows have one, stays null)
    s_us = to_numpy(pc.fill_null(s_ts.cast(pa.int64()), 0), np.int64)[order]
    s_known = to_numpy(s_ts.is_valid(), bool)[order] if s_ts.null_count else None

    find = _offset_finder(s_off)

    def at(offsets) -> pa.Array:
        if not len(s_off):
            return nulls(len(offsets), TS)
        j = find(np.asarray(pc.fill_null(offsets, -1), np.int64))
        k = np.maximum(j, 0)
        valid = j >= 0 if s_known is None else (j >= 0) & s_known[k]
        return from_numpy(s_us[k], valid).view(TS)

    return _dated(history, triggers, None, at(history.column("offset")), at(history.column("valid_to_offset")))


def _dated(history: pa.Table, triggers: pa.Table, changes, valid_from: pa.Array, valid_to: pa.Array) -> pa.Table:
    history = history.cast(fold.HISTORY_ENCODED)
    trigger = _place_triggers(history, triggers, changes)
    out = (history.append_column("valid_from_timestamp", valid_from)
           .append_column("valid_to_timestamp", valid_to)
           .append_column("trigger", trigger))
    return out.select(HISTORY_DATED_ENCODED.names).cast(HISTORY_DATED_ENCODED)


def _date_by_rows(history: pa.Table, records: pa.Table, seg, rows: np.ndarray, successor: np.ndarray,
                  offsets: np.ndarray | None = None):
    """(valid_from, valid_to) timestamps of the history rows whose input row and successor row the fold gave:
    the timestamp of a row's own record when that is a segment record, the successor's valid_from as its
    valid_to.  A row folded from a snapshot record takes the segment record at its offset, as the search does
    (none, on a log whose snapshot ends where its segments start).  None when the segment records' offsets are
    not strictly increasing (the search decides which of two records with one offset dates a row).  ``offsets``:
    the records' offsets, when the caller has them.  A log without snapshot rows (every record a segment's) reads
    its offsets as they are, and the times are scaled to microseconds in place: each copy of a column was fresh
    memory on a command's first call."""
    is_seg = seg
    if offsets is None or records.column("offset").null_count:
        offsets = column_ints(records.column("offset"), -1)
    every = bool(is_seg.all())
    s_rows = None if every else np.flatnonzero(is_seg)
    s_off = offsets if every else offsets[s_rows]
    if len(s_off) > 1 and not (s_off[1:] > s_off[:-1]).all():
        return None
    col = records.column("timestamp")
    scale = _US_PER.get(col.type.unit) if pa.types.is_timestamp(col.type) else None
    if scale is None:  # (nanoseconds: the cast's own truncation rules)
        col = col.cast(TS)
        scale = 1
    us = column_ints(col.cast(pa.int64()), 0)
    if scale != 1:
        us *= scale
    known = is_seg & to_numpy(col.is_valid(), bool) if col.null_count else is_seg
    if not every and len(s_rows):  # records of a snapshot (or bootstrap): the segment record at their offset
        other = np.flatnonzero(~is_seg)
        j = _offset_finder(s_off)(offsets[other])
        at = s_rows[np.maximum(j, 0)]
        us[other] = us[at]
        known = known.copy()
        known[other] = (j >= 0) & known[at]
    m = len(rows)
    from_us, from_ok, to_us, to_ok = np.empty(m, np.int64), np.empty(m, np.bool_), np.empty(m, np.int64), np.empty(
        m, np.bool_)
    dating.times(rows, successor, us, known, from_us, from_ok, to_us, to_ok)
    return from_numpy(from_us, from_ok).view(TS), from_numpy(to_us, to_ok).view(TS)


_US_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}  # microseconds per unit of a timestamp column


def _offset_finder(sorted_offsets: np.ndarray):
    """``find(q)``: the position of each offset of ``q`` in ``sorted_offsets`` (distinct, ascending), -1 where
    it is not there.  A log's offsets are nearly dense, so a table indexed by offset answers with one gather
    (a binary search per query was a tenth of the pipeline); so are a Spark bucket's, one in 16 or so of the
    log's (4 bytes per offset of the span); a sparser set is searched."""
    n = len(sorted_offsets)
    lo = int(sorted_offsets[0]) if n else 0
    span = int(sorted_offsets[-1]) - lo + 1 if n else 0
    if n and span <= 32 * n + 4096:
        table = np.full(span, -1, np.int32 if n < 1 << 31 else np.int64)
        table[sorted_offsets - lo] = np.arange(n)

        def find(q: np.ndarray) -> np.ndarray:
            k = q - lo
            inside = (k >= 0) & (k < span)
            return np.where(inside, table[np.where(inside, k, 0)], -1).astype(np.int64, copy=False)
        return find

    def search(q: np.ndarray) -> np.ndarray:
        if not n:
            return np.full(len(q), -1, np.int64)
        j = np.clip(np.searchsorted(sorted_offsets, q), 0, n - 1)
        return np.where(sorted_offsets[j] == q, j, -1)
    return search


def _place_triggers(history: pa.Table, triggers: pa.Table, changes: np.ndarray | None = None) -> pa.Array:
    """The trigger of each history row (LABEL_TYPE): the ``triggers`` row with the same (offset, topic_id,
    partition_id), null where there is none.  A change record's offset names one record, so the offsets
    of ``triggers`` are distinct and a sorted search finds the candidate, whose partition is then checked;
    should they not be distinct, a hash join on the three keys.  ``changes``: the history rows of the change
    records that are not orphans, when the fold says which -- then ``triggers`` is ``explain``'s table of those
    rows, one row each in that order (the pipeline's own), and the labels are placed without a search."""
    placed = _aligned_triggers(history, triggers, changes)
    if placed is not None:
        return placed.cast(LABEL_TYPE)  # (a caller's own triggers may be strings)
    t_off = to_numpy(triggers.column("offset"), np.int64) if triggers.num_rows else np.zeros(0, np.int64)
    return _searched_triggers(history, triggers, t_off).cast(LABEL_TYPE)


def _searched_triggers(history: pa.Table, triggers: pa.Table, t_off: np.ndarray) -> pa.Array:
    n = history.num_rows
    triggers = triggers.set_column(triggers.schema.get_field_index("trigger"), "trigger",
                                   triggers.column("trigger").cast(pa.string()))
    order = np.argsort(t_off, kind="stable")
    sorted_off = t_off[order]
    if not len(t_off) or not n:
        return nulls(n, pa.string())
    if (sorted_off[1:] == sorted_off[:-1]).any():
        return _join_triggers(history, triggers)
    j = _offset_finder(sorted_off)(np.asarray(pc.fill_null(history.column("offset"), -1), np.int64))
    at = from_numpy(order[np.maximum(j, 0)])
    same = pc.and_(pc.and_(from_numpy(j >= 0),
                           pc.equal(history.column("topic_id"), triggers.column("topic_id").take(at))),
                   pc.equal(history.column("partition_id"), triggers.column("partition_id").take(at)))
    return pc.if_else(pc.fill_null(same, False), triggers.column("trigger").take(at), pa.scalar(None, pa.string()))


def _aligned_triggers(history: pa.Table, triggers: pa.Table, changes: np.ndarray | None = None) -> pa.Array | None:
    """The replay's own case, without a search: ``triggers`` has one row per change row of ``history`` (its
    PartitionChangeRecord rows that are not orphans, in order: what ``explain`` labels), so the labels are
    scattered onto those rows.  With ``changes`` (the fold's list of those rows) that holds by construction;
    without, the change rows are found by type, and None when the offsets and partition ids say the rows do not
    line up (a caller's own triggers; an offset names one record, so the topic ids (strings) are not compared as
    well)."""
    if changes is None:
        change = np.asarray(pc.fill_null(pc.equal(history.column("record_type"), "PARTITION_CHANGE_RECORD"),
                                          False), bool)
        change &= ~np.asarray(history.column("orphan"), bool)
        rows = np.flatnonzero(change)
        t_off = to_numpy(triggers.column("offset"), np.int64) if triggers.num_rows else np.zeros(0, np.int64)
        if len(rows) != len(t_off) or not np.array_equal(to_numpy(history.column("offset"), np.int64)[rows], t_off):
            return None
        pid = to_numpy(pc.fill_null(history.column("partition_id"), -1), np.int64)[rows]
        if not np.array_equal(pid, to_numpy(pc.fill_null(triggers.column("partition_id"), -1), np.int64)):
            return None
    else:
        if len(changes) != triggers.num_rows:
            return None
        rows = changes
        change = None
    labels = triggers.column("trigger")
    labels = labels.combine_chunks() if isinstance(labels, pa.ChunkedArray) else labels
    n = history.num_rows
    if pa.types.is_dictionary(labels.type) and not labels.null_count:  # the replay's: its codes placed, no take
        codes, bits = np.zeros(n, np.int32), np.zeros((n + 7) // 8, np.uint8)
        dating.place(np.ascontiguousarray(rows, np.int64), to_numpy(labels.indices, np.int32), codes, bits)
        placed = pa.Array.from_buffers(pa.int32(), n, [pa.py_buffer(bits), pa.py_buffer(codes)])
        return pa.DictionaryArray.from_arrays(placed, labels.dictionary, safe=False)  # (codes of that dictionary)
    if change is None:
        change = np.zeros(n, bool)
        change[rows] = True
    at = np.cumsum(change) - 1
    return labels.take(from_numpy(at, change))


def _join_triggers(history: pa.Table, triggers: pa.Table) -> pa.Array:
    # Arrow joins carry no list columns: join the keys with a row number, then place the triggers
    keys = plain(history.select(["offset", "topic_id", "partition_id"])).append_column(
        "_row", pa.array(np.arange(history.num_rows, dtype=np.int64)))
    hit = keys.join(plain(triggers), ["offset", "topic_id", "partition_id"], join_type="inner")
    trigger = nulls(history.num_rows, pa.string())
    if hit.num_rows:
        placed = np.full(history.num_rows, -1, np.int64)
        placed[np.asarray(hit.column("_row"), np.int64)] = np.arange(hit.num_rows)
        names = hit.column("trigger").combine_chunks()
        trigger = pc.if_else(from_numpy(placed >= 0), names.take(from_numpy(np.maximum(placed, 0))),
                             pa.scalar(None, pa.string()))
    return trigger


def divergence_table(divs) -> pa.Table:
    return pa.Table.from_pylist([
        {"offset": d.offset, "topic": d.topic, "topic_id": d.topic_id, "partition": d.partition, "field": d.field,
         "recorded": json.dumps(d.recorded), "expected": json.dumps(d.expected), "trigger": d.trigger,
         "rule": d.rule, "severity": d.severity} for d in divs], schema=DIVERGENCE_SCHEMA)


def breach_table(found) -> pa.Table:
    return pa.Table.from_pylist([
        {"offset": b.offset, "topic": b.topic, "topic_id": b.topic_id, "partition": b.partition, "rule": b.rule,
         "severity": b.severity, "recorded": json.dumps(b.recorded, default=str),
         "expected": json.dumps(b.expected, default=str), "message": b.message} for b in found], schema=BREACH_SCHEMA)
