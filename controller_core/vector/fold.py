"""Partition state history from bronze rows: the §1.2-1.4 replay of controller-rules.md over whole columns.

``fold_partitions(bronze) -> history`` turns the decoded records of a metadata log into one row per
partition state: the FULL registration of a partition after every record that changed it.  It is
``state.Cluster.apply`` / ``state.merge`` record by record, computed without a per-record Python loop:

1. **Events.**  Each PartitionRecord (P) and PartitionChangeRecord (C) is an event of its partition
   ``(topic_id, partition_id)``.  Two record types are expanded into synthetic events, one per partition
   they act on: a RemoveTopicRecord gives a tombstone (T) for every partition of the topic created
   before it; a ClearElrRecord gives a candidate (X) for every partition of the named topic (the topic
   id the name had at that offset, so a reused name is resolved correctly; ``""`` = every topic) that
   ever had a non-empty ELR or LastKnownElr before it.
2. **Order.**  Events are sorted by (partition, offset) with one ``np.sort`` of a packed int64 key.
3. **Segments.**  A P or a T starts a segment of its partition.  A segment started by a P is *live*;
   the rows of a segment started by a T (or before the partition's first P) are not.  A C in a
   non-live segment is an **orphan** (§1.3-2: merging into an unknown partition is an error): it is
   kept as a row flagged ``orphan`` with a null state, and does not break the chain of the others.
4. **Forward fill (§1.3 merge).**  For each field, the state after event ``i`` is the value written by
   the last event ``<= i`` that wrote the field: ``np.maximum.accumulate(where(written, i, -1))``.
   A P writes every field, so the fill never crosses a segment start.  Lists are then gathered by index
   (once per run of equal source when the field is rarely written, e.g. replicas).
5. **Epochs.**  LE = the segment's PartitionRecord leaderEpoch + number of C in the segment so far whose
   leader field is not -2 (§1.3: any value, the same leader or -1 included).  PE = its partitionEpoch +
   number of C so far + number of applied X so far (§1.3-1, §1.3-5).
6. **ClearElr (§1.3-5).**  An X applies only if the partition's ELR or LastKnownElr is non-empty just
   before it; it sets both to ``[]``.  Because an X that does not apply leaves them empty as well, every
   X writes ``[]`` in step 4 and only the epoch and the row depend on the check.  X rows that do not
   apply are dropped.
7. **Directories (§1.2-4, as ``state.merge``).**  Absent, empty or all-MIGRATING directories mean
   MIGRATING for every replica.  A change of replicas without directories keeps an explicit list of the
   same length; a length mismatch turns the directories into MIGRATING x len(replicas).
8. **Tombstones.**  A T that deletes a live partition is kept as a row with ``deleted = true`` and a null
   state (the partition is gone from that offset on); a T for a partition already gone is dropped.

Output (``HISTORY_SCHEMA``): one row per P, per C (orphans included, flagged), per partition an
applied ClearElr changed and per partition a RemoveTopic deleted, with ``record_type`` and ``offset``
naming the record that made the row, the full state after it, and ``valid_to_offset``: the offset of the
partition's next non-orphan row (null while current; after a tombstone, the re-creating PartitionRecord).
Rows are grouped by partition -- topics in order of first appearance in the input, then partition id --
and in offset order within a partition.  ``state_at(history, N)`` is the image after offset N.

Input rows must be in log order (they are sorted by offset, stably, if they are not); duplicate offsets
are kept in input order.  Only these columns are read: offset, record_type, topic_id, topic_name,
partition_id, replicas, isr, removing_replicas, adding_replicas, leader, leader_epoch, partition_epoch,
leader_recovery_state, directories, eligible_leader_replicas, last_known_elr.

Pure NumPy/Arrow; never imports Spark.
"""
from __future__ import annotations

import time
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec import bronze
from controller_core.codec.arrowutil import STRING_CODES, from_numpy, repeat_str
from controller_core.image import LEADER_UNCHANGED, MIGRATING

STR_LIST = pa.list_(pa.string())

STATE_COLUMNS = ["replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_epoch",
                 "partition_epoch", "leader_recovery_state", "directories", "eligible_leader_replicas",
                 "last_known_elr"]
HISTORY_SCHEMA = pa.schema([
    pa.field("topic_id", pa.string(), nullable=False),
    pa.field("partition_id", pa.int32(), nullable=False),
    pa.field("offset", pa.int64(), nullable=False),  # the record that produced this state
    pa.field("record_type", pa.string(), nullable=False),  # PARTITION[_CHANGE]_RECORD, CLEAR_ELR_RECORD, REMOVE_TOPIC_RECORD
    # the partition's state after the record, in the bronze columns' types (Kafka's field names)
    *(bronze.SCHEMA.field(name) for name in STATE_COLUMNS),
    pa.field("valid_to_offset", pa.int64()),  # offset of the partition's next state row; null = current
    pa.field("deleted", pa.bool_(), nullable=False),  # tombstone: RemoveTopicRecord deleted the partition
    pa.field("orphan", pa.bool_(), nullable=False),  # change record for a partition that does not exist
])
# the history as the replay hands it on (kernels/fold_pass.py, pipeline.run): the strings repeated row after row
# (topic id, record type, directory ids) dictionary-encoded, each distinct value made once -- on a 1 M-partition log
# they were a tenth of the core's time.  HISTORY_SCHEMA is its plain form: the lake's types, what Spark reads, and
# what fold_partitions returns unless asked for codes (arrowutil.plain turns the one into the other).
_ENCODED = {"topic_id": STRING_CODES, "record_type": STRING_CODES, "directories": pa.list_(STRING_CODES)}
HISTORY_ENCODED = pa.schema([f.with_type(_ENCODED.get(f.name, f.type)) for f in HISTORY_SCHEMA])
# event kinds
P, C, T, X = 0, 1, 2, 3
KIND_NAMES = ["PARTITION_RECORD", "PARTITION_CHANGE_RECORD", "REMOVE_TOPIC_RECORD", "CLEAR_ELR_RECORD"]
_TOPIC, _OTHER = 4, 5
_TYPE_CODES = {**{name: k for k, name in enumerate(KIND_NAMES)}, "TOPIC_RECORD": _TOPIC}

# one bit per state field: "this event writes the field"; bits 9-10 hold the event kind
LISTS = ("isr", "replicas", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")
BIT = {"isr": 1, "leader": 2, "replicas": 4, "removing_replicas": 8, "adding_replicas": 16,
       "leader_recovery_state": 32, "directories": 64, "eligible_leader_replicas": 128, "last_known_elr": 256}
ALL_FIELDS = 511
ELR_BITS = BIT["eligible_leader_replicas"] | BIT["last_known_elr"]
KIND_SHIFT = 9
NO_LRS_CHANGE = -1
_MAX_CHUNK_BYTES = (1 << 31) - 1  # int32 offsets of a string array


# ------------------------------------------------------------------------------------------ columns
def _array(col) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    return col


def _raw(col, dtype) -> np.ndarray:
    """The values buffer of a fixed-width column as NumPy, nulls included as whatever they hold."""
    arr = _array(col)
    if len(arr) == 0:
        return np.zeros(0, dtype)
    buf = arr.buffers()[1]
    return np.frombuffer(buf, dtype, count=arr.offset + len(arr))[arr.offset:]


def _valid(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


class _Lists:
    """A list column read lazily: starts and lengths are computed only at the rows asked for; null = []."""

    def __init__(self, col, values=None):
        arr = self.arr = _array(col)
        self.offs = np.asarray(arr.offsets)  # int32, n + 1, into the unsliced child
        self.n_valid = len(arr) - arr.null_count
        self.empty = len(arr) == 0 or int(self.offs[0]) == int(self.offs[-1])  # every list is []
        self.values = values if values is not None else (
            np.asarray(arr.values.to_numpy(zero_copy_only=False), np.int32) if len(arr.values) else np.zeros(0, np.int32))
        self._valid = None
        # False once it is known that every row a value can come from is non-null (skip the null test)
        self.mask_nulls = arr.null_count > 0

    @property
    def valid(self) -> np.ndarray | None:
        if self._valid is None and self.arr.null_count:
            self._valid = _valid(self.arr)
        return self._valid

    def starts_lens(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts = self.offs[rows]
        lens = self.offs[rows + 1] - starts
        if self.mask_nulls:
            lens *= self.valid[rows]
        return starts, lens

    def lens(self, rows: np.ndarray) -> np.ndarray:
        return self.starts_lens(rows)[1]


def _record_types(col) -> np.ndarray:
    """Record type code per row (P, C, T = RemoveTopic, X = ClearElr, _TOPIC, _OTHER)."""
    arr = _array(col)
    if pa.types.is_dictionary(arr.type):
        names = arr.dictionary.to_pylist()
        lut = np.array([_TYPE_CODES.get(s, _OTHER) for s in names] or [_OTHER], np.int8)
        return lut[np.asarray(arr.indices.fill_null(0).to_numpy(zero_copy_only=False), np.int64)]
    # change records dominate a live log: one comparison for them, a hash only over the rest
    is_c = pc.fill_null(pc.equal(arr, KIND_NAMES[C]), False).to_numpy(zero_copy_only=False)
    out = np.full(len(arr), C, np.int8)
    rest = np.flatnonzero(~is_c)
    if len(rest):
        out[rest] = _record_types(pc.dictionary_encode(arr.take(from_numpy(rest))))
    return out


# ----------------------------------------------------------------------------------- small kernels
def _last_true(flag: np.ndarray) -> np.ndarray:
    """Index of the last True at or before each position (-1 if none)."""
    dt = np.int32 if len(flag) < 2**31 - 1 else np.int64
    idx = np.where(flag, np.arange(len(flag), dtype=dt), dt(-1))
    return np.maximum.accumulate(idx, out=idx)


def _run_starts(src: np.ndarray) -> np.ndarray:
    if not len(src):
        return np.zeros(0, np.int64)
    change = np.empty(len(src), bool)
    change[0] = True
    np.not_equal(src[1:], src[:-1], out=change[1:])
    return np.flatnonzero(change)


def _ranges(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, element indices) of the concatenation of ranges [starts[i], starts[i] + lens[i]).

    Indices fit int32 (they index a list child, whose offsets are int32)."""
    out_off = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=out_off[1:])
    total = int(out_off[-1])
    if total == 0:
        return out_off, np.zeros(0, np.int32)
    starts = starts.astype(np.int32, copy=False)
    w = int(lens[0])
    if w and total == w * len(lens) and (lens == w).all():
        return out_off, (starts[:, None] + np.arange(w, dtype=np.int32)).ravel()
    # +1 per element, and at each range's first element the jump from the previous range's last
    nz = lens > 0
    first, st, ln = out_off[:-1], starts, lens
    if not nz.all():
        first, st, ln = first[nz], st[nz], ln[nz]
    jump = st.copy()
    jump[1:] -= st[:-1] + (ln[:-1] - 1).astype(np.int32)
    idx = np.ones(total, np.int32)
    idx[first] = jump
    return out_off, np.cumsum(idx, out=idx)


def _gather_lists(col: _Lists, rows: np.ndarray, ok: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, values) of the lists of input ``rows``; rows where ``ok`` is False give []."""
    starts, lens = col.starts_lens(rows)
    if ok is not None:
        lens *= ok
    out_off, idx = _ranges(starts, lens)
    return out_off, col.values[idx]


def _expand_runs(off: np.ndarray, vals: np.ndarray, runlen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Repeat list ``u`` of (off, vals) ``runlen[u]`` times (sequential memory access)."""
    lens = np.diff(off)
    out_lens = np.repeat(lens, runlen)
    if not len(vals):
        return np.zeros(len(out_lens) + 1, np.int64), vals
    w = int(lens[0]) if len(lens) else 0
    if w and (lens == w).all():
        out_vals = np.repeat(vals.reshape(-1, w), runlen, axis=0).ravel()
        return np.arange(len(out_lens) + 1, dtype=np.int64) * w, out_vals
    run_id = np.repeat(np.arange(len(runlen), dtype=np.int64), runlen)
    out_off, idx = _ranges(off[:-1][run_id], out_lens)
    return out_off, vals[idx]


class _Output:
    """The output rows (a selection of the sorted events) and, per field source, its runs: output rows
    whose value comes from the same event.  Fields written only by PartitionRecords share one source."""

    def __init__(self, out: np.ndarray | None, live: np.ndarray, row_s: np.ndarray):
        self.out, self.row_s = out, row_s
        self.valid = self.sel(live)  # the state exists (is not null) in live segments only
        self._runs: dict[int, tuple] = {}

    def sel(self, v: np.ndarray) -> np.ndarray:
        return v if self.out is None else v[self.out]

    def runs(self, src: np.ndarray):
        """(source per output row, -1 where invalid; run starts; run lengths; source per run)."""
        hit = self._runs.get(id(src))
        if hit is None or hit[0] is not src:
            s = np.where(self.valid, self.sel(src), -1)
            starts = _run_starts(s)
            runlen = np.diff(np.append(starts, len(s)))
            hit = (src, s, starts, runlen, s[starts])
            self._runs[id(src)] = hit
        return hit[1:]

    def dense(self, src: np.ndarray) -> np.ndarray:
        """Source per output row, -1 where invalid (no runs: for fields most events write)."""
        return np.where(self.valid, self.sel(src), np.int32(-1))

    def list_field(self, col: _Lists, src: np.ndarray, dense: bool = False):
        """(offsets, values) of a list field whose value was written by sorted event ``src``."""
        if col.empty:
            return np.zeros(len(self.valid) + 1, np.int64), np.zeros(0, np.int32)
        if not dense:
            s, starts, runlen, su = self.runs(src)
            if 2 * len(starts) < len(s):  # sparse writes: gather once per run, then repeat
                ok = su >= 0
                off, vals = _gather_lists(col, self.row_s[np.maximum(su, 0)], ok)
                return _expand_runs(off, vals, runlen)
        else:
            s = self.dense(src)
        return _gather_lists(col, self.row_s[np.maximum(s, 0)], None if self.valid.all() else s >= 0)

    def scalar_field(self, values: np.ndarray, src: np.ndarray, dense: bool = False) -> np.ndarray:
        if not dense:
            s, starts, runlen, su = self.runs(src)
            if 2 * len(starts) < len(s):
                return np.repeat(values[self.row_s[np.maximum(su, 0)]], runlen)
        else:
            s = self.dense(src)
        return values[self.row_s[np.maximum(s, 0)]]


def _list_array(off: np.ndarray, vals: np.ndarray, valid: np.ndarray) -> pa.Array:
    """list<int32> from offsets and values; null where not ``valid`` (those rows hold [])."""
    mask = None if valid.all() else from_numpy(~valid)
    return pa.ListArray.from_arrays(from_numpy(off.astype(np.int32)), from_numpy(np.ascontiguousarray(vals, np.int32)),
                                    mask=mask)


def _strings(dictionary: pa.Array, codes: np.ndarray, as_dictionary: bool) -> pa.Array | pa.ChunkedArray:
    """dictionary[codes] as a string array (chunked so that no chunk overflows int32 offsets)."""
    if as_dictionary:  # (the codes are the fold's own, each within the dictionary: not checked again, row by row)
        return pa.DictionaryArray.from_arrays(from_numpy(codes.astype(np.int32, copy=False)), dictionary, safe=False)
    widest = int(pc.max(pc.utf8_length(dictionary)).as_py() or 0) if len(dictionary) else 0
    step = max(1, _MAX_CHUNK_BYTES // max(widest, 1))
    idx = from_numpy(codes.astype(np.int32))
    if len(codes) <= step:
        return dictionary.take(idx)
    return pa.chunked_array([dictionary.take(idx.slice(i, step)) for i in range(0, len(codes), step)], pa.string())


def _string_lists(off: np.ndarray, codes: np.ndarray, valid: np.ndarray, dictionary: pa.Array,
                  as_dictionary: bool) -> pa.Array | pa.ChunkedArray:
    mask = None if valid.all() else from_numpy(~valid)
    if as_dictionary:  # (as _strings: the codes not checked again)
        child = pa.DictionaryArray.from_arrays(from_numpy(codes.astype(np.int32, copy=False)), dictionary, safe=False)
        return pa.ListArray.from_arrays(from_numpy(off.astype(np.int32, copy=False)), child, mask=mask)
    widest = int(pc.max(pc.utf8_length(dictionary)).as_py() or 0) if len(dictionary) else 0
    if len(codes) * max(widest, 1) <= _MAX_CHUNK_BYTES:
        if len(codes) and not (codes != codes[0]).any():  # one value (e.g. every directory MIGRATING)
            child = repeat_str(dictionary[int(codes[0])].as_py(), len(codes))  # (kept: the same text every group)
        else:
            child = dictionary.take(from_numpy(codes.astype(np.int32)))
        return pa.ListArray.from_arrays(from_numpy(off.astype(np.int32)), child, mask=mask)
    # split rows so that each chunk's string bytes fit int32 offsets
    per = max(1, _MAX_CHUNK_BYTES // max(widest, 1))
    cuts = [0]
    while cuts[-1] < len(off) - 1:
        cuts.append(int(np.searchsorted(off, off[cuts[-1]] + per, side="right")) - 1)
        if cuts[-1] <= cuts[-2]:
            cuts[-1] = cuts[-2] + 1
    chunks = []
    for a, b in zip(cuts, cuts[1:]):
        sub = off[a:b + 1] - off[a]
        child = dictionary.take(from_numpy(codes[off[a]:off[b]].astype(np.int32)))
        chunks.append(pa.ListArray.from_arrays(from_numpy(sub.astype(np.int32)), child,
                                               mask=None if mask is None else mask.slice(a, b - a)))
    return pa.chunked_array(chunks, STR_LIST)


# ----------------------------------------------------------------------------- synthetic events
def _expand(ukeys: np.ndarray, ufirst: np.ndarray, width: int, qpos: np.ndarray, qtopic: np.ndarray):
    """For each query (row qpos, topic code qtopic; -1 = every topic, -2 = none): the keys of that topic
    whose first qualifying event is before qpos.  Returns (keys, positions)."""
    n = len(ukeys)
    lo = np.where(qtopic == -1, 0, np.searchsorted(ukeys, np.maximum(qtopic, 0) * width))
    hi = np.where(qtopic == -1, n, np.searchsorted(ukeys, (np.maximum(qtopic, 0) + 1) * width))
    hi = np.where(qtopic == -2, lo, hi)
    cnt = hi - lo
    total = int(cnt.sum())
    if total == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    q = np.repeat(np.arange(len(qpos)), cnt)
    _, k = _ranges(lo, cnt)
    keep = ufirst[k] < qpos[q]
    return ukeys[k][keep], qpos[q][keep]


def _first_by_key(keys: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct keys (sorted) and the first (smallest) position of each; pos is ascending."""
    if not len(keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    ukeys, first = np.unique(keys, return_index=True)
    return ukeys, pos[first]


def _clear_elr_topics(table: pa.Table, rtype: np.ndarray, tcode: np.ndarray, clr: np.ndarray) -> np.ndarray:
    """Topic code each ClearElrRecord names at its offset (-1 = all topics, -2 = no such topic).

    The name is looked up among the TopicRecords before the ClearElrRecord, the latest one winning: a
    name reused after a RemoveTopicRecord resolves to the new topic id (the old id's partitions are
    deleted by then anyway)."""
    names = table.column("topic_name")
    cname = _array(names.take(from_numpy(clr)))
    out = np.full(len(clr), -2, np.int64)
    every = ~_valid(cname) | (pc.fill_null(pc.utf8_length(cname), 0).to_numpy(zero_copy_only=False) == 0)
    out[every] = -1
    tr = np.flatnonzero(rtype == _TOPIC)
    if not len(tr) or every.all():
        return out
    tname = _array(names.take(from_numpy(tr)))
    enc = pc.dictionary_encode(pa.concat_arrays([tname.cast(pa.string()), cname.cast(pa.string())]))
    ncode = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
    nt, nc = ncode[:len(tr)], ncode[len(tr):]
    span = int(max(tr.max(), clr.max())) + 1
    skey = nt * span + tr
    order = np.argsort(skey)
    skey, tr_sorted = skey[order], tr[order]
    i = np.searchsorted(skey, nc * span + clr) - 1
    hit = (i >= 0) & (skey[np.maximum(i, 0)] // span == nc) & (nc >= 0) & ~every
    out[hit] = tcode[tr_sorted[i[hit]]]
    return out


# ------------------------------------------------------------------------------------------ fold
class _Clock:
    """CPU seconds per step into ``out`` (nothing when ``out`` is None)."""

    def __init__(self, out: dict | None):
        self.out = out
        self.t = time.process_time()

    def __call__(self, step: str) -> None:
        if self.out is not None:
            now = time.process_time()
            self.out[step] = self.out.get(step, 0.0) + now - self.t
            self.t = now


def fold_partitions(table: pa.Table, *, dictionary_strings: bool = False, timings: dict | None = None) -> pa.Table:
    """The partition state history of bronze rows (see the module docstring).

    ``dictionary_strings=True`` returns topic_id, record_type and the directory strings dictionary-encoded
    (same values; ``.cast(HISTORY_SCHEMA)`` gives the plain schema): materialising ~22-byte UUID strings
    for every replica of every row is most of the cost of a large fold, and Parquet writers
    dictionary-encode them again anyway.  ``timings``, if given, receives the CPU seconds of each step.
    """
    clock = _Clock(timings)
    if table.num_rows == 0:
        return _empty(dictionary_strings)
    table, offset = _in_offset_order(table)
    rtype = _record_types(table.column("record_type"))
    rel = _partition_record_rows(rtype)
    if not len(rel):
        return _empty(dictionary_strings)
    clock("record types")

    keys, key = _partition_keys(table, rel)
    clock("partition keys")

    cols = _StateColumns(table)
    rel_c = rtype[rel] == C
    mask, changed, writes = _write_masks(cols, rel, rel_c, rtype == P)
    clock("write masks")

    synthetic, synthetic_writes = _synthetic_events(table, rtype, keys, key, cols, rel, rel_c)
    changed |= synthetic_writes
    key, row, mask = _log_order(key, rel, mask, synthetic)
    clock("tombstone and ClearElr events")
    ev = _sort_by_partition(key, row, mask, synthetic=len(row) > len(rel))
    del key, row, mask, synthetic  # as large as the sorted events: not kept through the steps below
    clock("sort by partition")

    seg = _segments(ev)
    src = _last_writers(ev, seg, changed)
    clock("segments and forward fill")

    x_applies = _clear_elr_applies(ev, seg, src, cols)
    keep = _rows_kept(ev, seg, x_applies)
    leader_epoch, partition_epoch = _epochs(table, ev, seg, x_applies)
    clock("ClearElr check and epochs")

    reset = _directory_resets(ev, cols, src["directories"], changed)
    o, key_o, kind_o, row_o = _output_rows(ev, seg, keep)
    dense = {f: 2 * k > len(ev.key) for f, k in writes.items()}  # most events write it: gather per row
    del ev, seg
    orphan = (kind_o == C) & ~o.valid
    deleted = kind_o == T
    offset_o = offset[row_o]
    valid_to, has_next = _valid_to(key_o, offset_o, orphan)
    clock("output rows and valid_to_offset")

    columns = _record_columns(keys, key_o, kind_o, offset_o, dictionary_strings)
    del key_o, kind_o, row_o
    clock("topic_id, partition_id, offset, record_type")
    replica_columns, replicas_len = _replica_columns(o, cols, src, dense)
    columns.update(replica_columns)
    clock("replicas, isr, removing, adding")
    columns.update(_leader_columns(o, cols, src, dense, leader_epoch, partition_epoch))
    clock("leader, epochs, recovery state")
    columns["directories"] = _directories(o, cols.dirs, src["directories"], reset, replicas_len, dictionary_strings)
    clock("directories")
    columns.update(_elr_columns(o, cols, src, dense))
    columns["valid_to_offset"] = from_numpy(valid_to, has_next)
    columns["deleted"] = from_numpy(deleted)
    columns["orphan"] = from_numpy(orphan)
    result = pa.Table.from_pydict(columns, schema=_schema(dictionary_strings))
    clock("elr, last_known_elr, table")
    return result


# ------------------------------------------------------------------- step 1: events from the records
def _in_offset_order(table: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The input and its offsets, stably sorted by offset if it is not in log order already."""
    offset = _raw(table.column("offset"), np.int64)
    if (offset[1:] < offset[:-1]).any():
        table = table.take(from_numpy(np.argsort(offset, kind="stable")))
        offset = _raw(table.column("offset"), np.int64)
    return table, offset


def _partition_record_rows(rtype: np.ndarray) -> np.ndarray:
    """Input rows of the PartitionRecords and PartitionChangeRecords (the real events)."""
    rel = np.flatnonzero((rtype == P) | (rtype == C))
    # every per-event row index derives from these: int32 halves their memory
    return rel.astype(np.int32) if len(rtype) < 2**31 - 1 else rel


class _PartitionKeys:
    """How a partition ``(topic_id, partition_id)`` is one int64 key: topic code * width + partition id - pmin,
    topic codes in order of first appearance, so that sorted keys are in output order."""

    def __init__(self, topics: pa.DictionaryArray, pmin: int, width: int):
        self.topics = topics.dictionary
        self.topic_indices = topics.indices
        self.topic_code = _raw(topics.indices, np.int32)  # per input row
        self.pmin, self.width = pmin, width

    def topic_at(self, rows: np.ndarray) -> np.ndarray:
        """Topic code of input rows; -2 where the row names no topic."""
        return np.where(_valid(_array(self.topic_indices))[rows], self.topic_code[rows], -2).astype(np.int64)


def _partition_keys(table: pa.Table, rel: np.ndarray) -> tuple[_PartitionKeys, np.ndarray]:
    """The key encoding, and the key of each real event."""
    topics = pc.dictionary_encode(_array(table.column("topic_id")))
    pid = _raw(table.column("partition_id"), np.int32)[rel].astype(np.int64)
    pmin = int(pid.min())
    keys = _PartitionKeys(topics, pmin, int(pid.max()) - pmin + 1)
    return keys, keys.topic_code[rel].astype(np.int64) * keys.width + (pid - pmin)


class _Directories(_Lists):
    """The directories column as codes into ``dictionary``, which holds MIGRATING (code ``mig``) even when
    the input never spells it: the fold writes MIGRATING lists of its own (§1.2-4)."""

    def __init__(self, col):
        arr = _array(col)
        if len(arr.values):
            enc = pc.dictionary_encode(arr.values)
            codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), np.int32)
        else:
            enc, codes = pa.array([], pa.string()).dictionary_encode(), np.zeros(0, np.int32)
        super().__init__(arr, values=codes)
        self.dictionary = enc.dictionary
        self.mig = pc.index(self.dictionary, MIGRATING).as_py()
        if self.mig < 0:
            self.dictionary = pa.concat_arrays([self.dictionary, pa.array([MIGRATING], pa.string())])
            self.mig = len(self.dictionary) - 1
        self._real_before = None

    def has_real(self, rows: np.ndarray) -> np.ndarray:
        """Whether each row's list names a directory other than MIGRATING (§1.2-4: an all-MIGRATING list
        means MIGRATING for every replica, whatever its length)."""
        if self._real_before is None:  # prefix counts answer "any real id in the range" for every row at once
            self._real_before = np.zeros(len(self.values) + 1, np.int64)
            np.cumsum(self.values != self.mig, out=self._real_before[1:])
        starts, lens = self.starts_lens(rows)
        return (self._real_before[starts + lens] - self._real_before[starts]) > 0


class _StateColumns:
    """The input's partition state columns (§1.1): lists read lazily, leader and leader recovery state as
    raw values (their "unchanged" encodings -2 and -1 included), directories as codes."""

    def __init__(self, table: pa.Table):
        self.lists = {f: _Lists(table.column(f)) for f in LISTS}
        self.leader = _raw(table.column("leader"), np.int32)
        self.lrs = _raw(table.column("leader_recovery_state"), np.int8)
        self.dirs = _Directories(table.column("directories"))


def _write_masks(cols: _StateColumns, rel: np.ndarray, rel_c: np.ndarray, is_p: np.ndarray):
    """Per real event, its kind and one bit per field it writes: a PartitionRecord writes every field (§1.2-1),
    a change record the fields not in their §1.3 "unchanged" encoding.  Also returns the bits that some
    change record writes (a field none writes comes from the segment's PartitionRecord) and the number of
    events writing each field."""
    n_p = len(rel) - int(np.count_nonzero(rel_c))
    mask = np.where(rel_c, np.uint16(C << KIND_SHIFT), np.uint16(ALL_FIELDS | (P << KIND_SHIFT)))
    changed = 0
    writes = dict.fromkeys(BIT, n_p)  # decides runs vs direct gathers at output
    for f, w in _change_writes(cols, rel, rel_c, is_p, n_p):
        nw = int(np.count_nonzero(w))
        if nw:
            mask |= w.astype(np.uint16) * np.uint16(BIT[f])
            changed |= BIT[f]
            writes[f] += nw
    return mask, changed, writes


def _change_writes(cols: _StateColumns, rel: np.ndarray, rel_c: np.ndarray, is_p: np.ndarray, n_p: int):
    """(field, which real events are change records writing it): lists unchanged when null, leader when -2
    (LEADER_UNCHANGED), leader recovery state when -1."""
    p_bits = from_numpy(is_p)
    for f, col in [*cols.lists.items(), ("directories", cols.dirs)]:
        if col.n_valid == 0:
            continue  # no record writes it (the PartitionRecords' null means [])
        # non-null values outside PartitionRecords are change records writing the field (bronze: other
        # record types leave partition columns null); counted on the validity bitmap
        p_valid = n_p if col.arr.null_count == 0 else int(pc.sum(pc.and_(col.arr.is_valid(), p_bits)).as_py() or 0)
        # values then come from PartitionRecords (non-null) or from changes that wrote it, so reads can skip
        # the null test; not for the ELR lists, which a ClearElr event writes from its own (null) row as []
        if p_valid == n_p and f not in ("eligible_leader_replicas", "last_known_elr"):
            col.mask_nulls = False
        if col.n_valid > p_valid:
            yield f, rel_c if col.valid is None else col.valid[rel] & rel_c
    yield "leader", (cols.leader[rel] != LEADER_UNCHANGED) & rel_c
    yield "leader_recovery_state", (cols.lrs[rel] != NO_LRS_CHANGE) & rel_c


def _synthetic_events(table: pa.Table, rtype: np.ndarray, keys: _PartitionKeys, key: np.ndarray,
                      cols: _StateColumns, rel: np.ndarray, rel_c: np.ndarray) -> tuple[list, int]:
    """The tombstones (T) and ClearElr candidates (X) as [(keys, input rows, masks)], and the field bits
    they write: a ClearElr writes [] to ELR and LastKnownElr (step 6: whether it applies or not)."""
    found, writes = [], 0
    rem = np.flatnonzero(rtype == T)
    if len(rem):
        k, pos = _tombstones(keys, key, rel, rel_c, rem)
        found.append((k, pos, np.full(len(k), T << KIND_SHIFT, np.uint16)))
    clr = np.flatnonzero(rtype == X)
    if len(clr):
        k, pos = _clear_elr_candidates(table, rtype, keys, key, cols, rel, clr)
        found.append((k, pos, np.full(len(k), (X << KIND_SHIFT) | ELR_BITS, np.uint16)))
        writes = ELR_BITS
    return found, writes


def _tombstones(keys: _PartitionKeys, key: np.ndarray, rel: np.ndarray, rel_c: np.ndarray, rem: np.ndarray):
    """(keys, rows) of a T per partition of each RemoveTopicRecord's topic created (first P) before it (§1.4)."""
    p_rows = np.flatnonzero(~rel_c)
    ukeys, ufirst = _first_by_key(key[p_rows], rel[p_rows])
    return _expand(ukeys, ufirst, keys.width, rem, keys.topic_at(rem))


def _clear_elr_candidates(table: pa.Table, rtype: np.ndarray, keys: _PartitionKeys, key: np.ndarray,
                          cols: _StateColumns, rel: np.ndarray, clr: np.ndarray):
    """(keys, rows) of an X per partition of each ClearElrRecord's topic (by name at its offset; "" = all)
    that had a non-empty ELR or LastKnownElr in some event before it (§1.3-5; whether it still has one
    is decided after the sort)."""
    elr_any = (cols.lists["eligible_leader_replicas"].lens(rel) > 0) | (cols.lists["last_known_elr"].lens(rel) > 0)
    ukeys, ufirst = _first_by_key(key[elr_any], rel[elr_any])
    return _expand(ukeys, ufirst, keys.width, clr, _clear_elr_topics(table, rtype, keys.topic_code, clr))


def _log_order(key: np.ndarray, rel: np.ndarray, mask: np.ndarray, synthetic: list):
    """(key, input row, mask) of the real and synthetic events in log order: a record's synthetic events
    take its place among the real ones, in the order they were generated."""
    S = sum(len(k) for k, _, _ in synthetic)
    if not S:
        return key, rel, mask
    skey, spos, smask = (np.concatenate(a) for a in zip(*synthetic))
    o = np.argsort(spos, kind="stable")
    skey, spos, smask = skey[o], spos[o], smask[o]
    R = len(rel)
    ins = np.searchsorted(rel, spos)
    seq_syn = ins + np.arange(S)
    seq_real = np.arange(R) + np.cumsum(np.bincount(ins, minlength=R + 1))[:R]
    ekey = np.empty(R + S, np.int64); ekey[seq_real] = key; ekey[seq_syn] = skey
    erow = np.empty(R + S, rel.dtype); erow[seq_real] = rel; erow[seq_syn] = spos
    emask = np.empty(R + S, np.uint16); emask[seq_real] = mask; emask[seq_syn] = smask
    return ekey, erow, emask


# ------------------------------------------------------------------------- steps 2-3: order, segments
class _Events:
    """The events sorted by (partition, log order): key, input row, field/kind mask, kind and its flags.
    ``synthetic``: whether any T or X is among them."""

    def __init__(self, key: np.ndarray, row: np.ndarray, mask: np.ndarray, synthetic: bool):
        self.key, self.row, self.mask, self.synthetic = key, row, mask, synthetic
        kind = self.kind = (mask >> KIND_SHIFT).astype(np.int8)
        self.is_p, self.is_c, self.is_t, self.is_x = (kind == P), (kind == C), (kind == T), (kind == X)


def _sort_by_partition(key: np.ndarray, row: np.ndarray, mask: np.ndarray, synthetic: bool) -> _Events:
    """Step 2: one np.sort of (key, log position) packed into an int64 when it fits (a lexsort otherwise)."""
    E = len(key)
    sb = max(int(E).bit_length(), 1)
    if int(key.max()).bit_length() + sb <= 63:
        packed = (key << sb) | np.arange(E, dtype=np.int64)
        packed.sort()
        perm = packed & ((1 << sb) - 1)
        key_s = packed >> sb
        del packed
    else:
        perm = np.lexsort((np.arange(E), key))
        key_s = key[perm]
    return _Events(key_s, row[perm], mask[perm], synthetic)


class _Segments(NamedTuple):
    keystart: np.ndarray  # the partition's first event
    barrier: np.ndarray  # index of the event that started each event's segment
    live: np.ndarray  # the segment was started by a PartitionRecord: the partition exists


def _segments(ev: _Events) -> _Segments:
    """Step 3: a P, a T or a partition's first event starts a segment; it is live iff a P started it."""
    keystart = np.empty(len(ev.key), bool)
    keystart[0] = True
    np.not_equal(ev.key[1:], ev.key[:-1], out=keystart[1:])
    barrier = _last_true(ev.is_p | ev.is_t | keystart if ev.synthetic else ev.is_p | keystart)
    return _Segments(keystart, barrier, ev.is_p[barrier])


# ---------------------------------------------------------------- steps 4-8: the state after each event
def _last_writers(ev: _Events, seg: _Segments, changed: int) -> dict[str, np.ndarray]:
    """Step 4 (§1.3 merge): per field, the event whose value each event's state holds (the last one at or
    before it that wrote the field).  A P writes every field, so this never crosses a segment start; a
    field no change writes is the segment's P, one shared array."""
    return {f: _last_true((ev.mask & bit) != 0) if changed & bit else seg.barrier for f, bit in BIT.items()}


def _clear_elr_applies(ev: _Events, seg: _Segments, src: dict, cols: _StateColumns) -> np.ndarray | None:
    """Step 6 (§1.3-5): per event, whether it is an X that applies -- its partition exists and has a
    non-empty ELR or LastKnownElr just before it.  None when there is no X."""
    if not (ev.synthetic and ev.is_x.any()):
        return None
    x_applies = np.zeros(len(ev.key), bool)
    xs = np.flatnonzero(ev.is_x)
    before = xs - 1
    prev_elr = cols.lists["eligible_leader_replicas"].lens(ev.row[src["eligible_leader_replicas"][before]]) > 0
    prev_lke = cols.lists["last_known_elr"].lens(ev.row[src["last_known_elr"][before]]) > 0
    x_applies[xs] = seg.live[xs] & (prev_elr | prev_lke)
    return x_applies


def _rows_kept(ev: _Events, seg: _Segments, x_applies: np.ndarray | None) -> np.ndarray | None:
    """The events that are output rows: every P and C (orphans too), an X that applies, and a T that deletes
    a live partition (step 8; a T of a partition already gone changes nothing).  None: all of them."""
    keep = None if x_applies is None else ~ev.is_x | x_applies
    if ev.synthetic and ev.is_t.any():
        ts = np.flatnonzero(ev.is_t)
        deletes = (ts > 0) & ~seg.keystart[ts] & seg.live[np.maximum(ts - 1, 0)]
        drop_t = np.zeros(len(ev.key), bool)
        drop_t[ts[~deletes]] = True
        keep = ~drop_t if keep is None else keep & ~drop_t
    return keep


def _epochs(table: pa.Table, ev: _Events, seg: _Segments, x_applies: np.ndarray | None):
    """Step 5 (§1.3-1, §1.3-5): (leader epoch, partition epoch) after each event.  LE: the segment's
    PartitionRecord value + change records so far whose leader field is not -2; PE: its value + change
    records so far + ClearElrs applied so far."""
    p_at = np.flatnonzero(ev.is_p)
    base = np.zeros(len(ev.key), np.int32)  # segments no P started stay 0: their rows are null
    le_in = _raw(table.column("leader_epoch"), np.int32)
    leader_epoch = _from_segment_start(base, p_at, le_in[ev.row[p_at]], seg.barrier,
                                       ev.is_c & ((ev.mask & BIT["leader"]) != 0))
    pe_in = _raw(table.column("partition_epoch"), np.int32)
    partition_epoch = _from_segment_start(base, p_at, pe_in[ev.row[p_at]], seg.barrier,
                                          ev.is_c if x_applies is None else ev.is_c | x_applies)
    return leader_epoch, partition_epoch


def _from_segment_start(base: np.ndarray, p_at: np.ndarray, at_p: np.ndarray, barrier: np.ndarray,
                        bump: np.ndarray) -> np.ndarray:
    """The value at each event's segment start (``at_p`` at the P events ``p_at``) plus the events
    flagged ``bump`` since, itself included.  Overwrites ``base`` at ``p_at``."""
    base[p_at] = at_p
    bumps = np.cumsum(bump, dtype=np.int32)
    out = base[barrier]
    out += bumps
    out -= bumps[barrier]
    return out


def _directory_resets(ev: _Events, cols: _StateColumns, a: np.ndarray, changed: int) -> np.ndarray | None:
    """Step 7 (state.merge): a change of replicas without directories keeps an explicit directory list
    only if the lengths match, else turns them into MIGRATING x len(replicas).  Per event, whether such a
    reset happened since ``a`` (the event that last wrote directories); None if none did."""
    if not changed & BIT["replicas"]:
        return None
    dirs = cols.dirs
    b = np.flatnonzero(((ev.mask & BIT["replicas"]) != 0) & ((ev.mask & BIT["directories"]) == 0))
    ab = ev.row[a[b]]
    mism = b[dirs.has_real(ab) & (cols.lists["replicas"].lens(ev.row[b]) != dirs.lens(ab))]
    if not len(mism):
        return None
    flag = np.zeros(len(ev.key), bool)
    flag[mism] = True
    return _last_true(flag) > a


# -------------------------------------------------------------------------------------- output rows
def _output_rows(ev: _Events, seg: _Segments, keep: np.ndarray | None):
    """The output rows among the events (state null outside live segments), with their keys, kinds and
    input rows."""
    o = _Output(None if keep is None or keep.all() else np.flatnonzero(keep), seg.live, ev.row)
    return o, o.sel(ev.key), o.sel(ev.kind), o.sel(ev.row)


def _valid_to(key_o: np.ndarray, offset_o: np.ndarray, orphan: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """valid_to_offset per row (and whether it has one): the offset of the partition's next row.  Orphans
    are outside the chain: they neither end the state before them nor have one to end."""
    m = len(key_o)
    chain = np.flatnonzero(~orphan) if orphan.any() else None
    ck = key_o if chain is None else key_o[chain]
    co = offset_o if chain is None else offset_o[chain]
    nxt = np.zeros(len(ck), bool)
    np.equal(ck[1:], ck[:-1], out=nxt[:-1])
    vt = np.zeros(len(ck), np.int64)
    vt[:-1] = co[1:]
    if chain is None:
        return vt, nxt
    valid_to = np.zeros(m, np.int64)
    has_next = np.zeros(m, bool)
    valid_to[chain], has_next[chain] = vt, nxt
    return valid_to, has_next


def _record_columns(keys: _PartitionKeys, key_o: np.ndarray, kind_o: np.ndarray, offset_o: np.ndarray,
                    as_dictionary: bool) -> dict[str, pa.Array]:
    """topic_id, partition_id, offset and record_type: the partition and the record that made each row."""
    tc = key_o // keys.width
    return {"topic_id": _strings(keys.topics, tc, as_dictionary),
            "partition_id": from_numpy((key_o - tc * keys.width + keys.pmin).astype(np.int32)),
            "offset": from_numpy(offset_o),
            "record_type": _strings(pa.array(KIND_NAMES), kind_o, as_dictionary)}


def _replica_columns(o: _Output, cols: _StateColumns, src: dict, dense: dict):
    """replicas, isr, removing_replicas, adding_replicas; and the length of replicas per row (the length
    of a MIGRATING directory list)."""
    columns, replicas_len = {}, None
    for f in ("replicas", "isr", "removing_replicas", "adding_replicas"):
        off, vals = o.list_field(cols.lists[f], src[f], dense[f])
        if f == "replicas":
            replicas_len = np.diff(off)
        columns[f] = _list_array(off, vals, o.valid)
    return columns, replicas_len


def _leader_columns(o: _Output, cols: _StateColumns, src: dict, dense: dict, leader_epoch: np.ndarray,
                    partition_epoch: np.ndarray) -> dict[str, pa.Array]:
    return {"leader": from_numpy(o.scalar_field(cols.leader, src["leader"], dense["leader"]), o.valid),
            "leader_epoch": from_numpy(o.sel(leader_epoch), o.valid),
            "partition_epoch": from_numpy(o.sel(partition_epoch), o.valid),
            "leader_recovery_state": from_numpy(o.scalar_field(cols.lrs, src["leader_recovery_state"]), o.valid)}


def _elr_columns(o: _Output, cols: _StateColumns, src: dict, dense: dict) -> dict[str, pa.Array]:
    return {f: _list_array(*o.list_field(cols.lists[f], src[f], dense[f]), o.valid)
            for f in ("eligible_leader_replicas", "last_known_elr")}


def _directories(o: _Output, dirs: _Directories, a: np.ndarray, reset: np.ndarray | None, rep_len: np.ndarray,
                 as_dictionary: bool):
    """Per output row: the explicit list written by event ``a`` if it holds a real directory id and no
    replicas change reset it since, else MIGRATING x len(replicas); null where the state is null."""
    mig = dirs.mig
    s, starts, runlen, su = o.runs(a)
    explicit = np.repeat(dirs.has_real(o.row_s[np.maximum(su, 0)]) & (su >= 0), runlen)
    if reset is not None:
        explicit &= ~o.sel(reset)
    valid = o.valid
    migr = valid & ~explicit
    if not migr.any():
        off, codes = o.list_field(dirs, a)
    elif not explicit.any():
        lens = np.where(migr, rep_len, 0)
        off = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        codes = np.broadcast_to(np.int32(mig), (int(off[-1]),))  # every directory MIGRATING
    else:
        r = o.row_s[np.maximum(s, 0)]
        st, ln = dirs.starts_lens(r)
        lens = np.where(explicit, ln, np.where(migr, rep_len, 0))
        ext = np.append(dirs.values, np.int32(mig))
        off, idx = _ranges(np.where(explicit, st, 0), lens)
        idx[np.repeat(migr, lens)] = len(ext) - 1
        codes = ext[idx]
    return _string_lists(off, codes, valid, dirs.dictionary, as_dictionary)


def _schema(dictionary_strings: bool) -> pa.Schema:
    return HISTORY_ENCODED if dictionary_strings else HISTORY_SCHEMA


def _empty(dictionary_strings: bool) -> pa.Table:
    return _schema(dictionary_strings).empty_table()


# --------------------------------------------------------------------------------------- queries
def state_at(history: pa.Table, offset: int | None = None) -> pa.Table:
    """The partitions that exist after the record at ``offset`` (None: the end of the history): per
    partition, the latest state row at or before ``offset`` (not a tombstone, not an orphan), sorted as
    the history is.  The one definition of "partition state at a point"."""
    vt = history.column("valid_to_offset")
    if offset is None:
        current = pc.is_null(vt)
    else:
        current = pc.and_(pc.less_equal(history.column("offset"), offset), pc.fill_null(pc.greater(vt, offset), True))
    keep = pc.and_(current, pc.invert(pc.or_(history.column("deleted"), history.column("orphan"))))
    return history.filter(keep)
