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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from controller_core.codec import bronze
from controller_core.codec.arrowutil import from_numpy, repeat_str
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

    def __init__(self, out: np.ndarray | None, valid: np.ndarray, row_s: np.ndarray):
        self.out, self.valid, self.row_s = out, valid, row_s
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
    if as_dictionary:
        return pa.DictionaryArray.from_arrays(from_numpy(codes.astype(np.int32)), dictionary)
    widest = int(pc.max(pc.utf8_length(dictionary)).as_py() or 0) if len(dictionary) else 0
    step = max(1, _MAX_CHUNK_BYTES // max(widest, 1))
    idx = from_numpy(codes.astype(np.int32))
    if len(codes) <= step:
        return dictionary.take(idx)
    return pa.chunked_array([dictionary.take(idx.slice(i, step)) for i in range(0, len(codes), step)], pa.string())


_REPEATED: dict[str, pa.Array] = {}
_REPEATED_MAX_BYTES = 1 << 30


def _repeated(text: str, n: int) -> pa.Array:
    """``text`` n times as a string array.  Arrow arrays are immutable, so the longest one built so far
    is kept and sliced (zero-copy): a fold writes MIGRATING for every replica of every row, and
    filling (and faulting in) those hundreds of MB again for every group is a large share of its cost."""
    arr = _REPEATED.get(text)
    if arr is None or len(arr) < n:
        arr = repeat_str(text, n)
        if n * max(len(text), 1) <= _REPEATED_MAX_BYTES:
            _REPEATED[text] = arr
    return arr.slice(0, n)


def _string_lists(off: np.ndarray, codes: np.ndarray, valid: np.ndarray, dictionary: pa.Array,
                  as_dictionary: bool) -> pa.Array | pa.ChunkedArray:
    mask = None if valid.all() else from_numpy(~valid)
    if as_dictionary:
        child = pa.DictionaryArray.from_arrays(from_numpy(codes.astype(np.int32)), dictionary)
        return pa.ListArray.from_arrays(from_numpy(off.astype(np.int32)), child, mask=mask)
    widest = int(pc.max(pc.utf8_length(dictionary)).as_py() or 0) if len(dictionary) else 0
    if len(codes) * max(widest, 1) <= _MAX_CHUNK_BYTES:
        if len(codes) and not (codes != codes[0]).any():  # one value (e.g. every directory MIGRATING)
            child = _repeated(dictionary[int(codes[0])].as_py(), len(codes))
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
    n = table.num_rows
    if n == 0:
        return _empty(dictionary_strings)
    offset = _raw(table.column("offset"), np.int64)
    if (offset[1:] < offset[:-1]).any():
        order = np.argsort(offset, kind="stable")
        table = table.take(from_numpy(order))
        offset = _raw(table.column("offset"), np.int64)
    rtype = _record_types(table.column("record_type"))
    is_p = rtype == P
    is_c = rtype == C
    rel = np.flatnonzero(is_p | is_c)
    if not len(rel):
        return _empty(dictionary_strings)

    clock("record types")

    # ---- keys: (topic code, partition id)
    tenc = pc.dictionary_encode(_array(table.column("topic_id")))
    tcode_all = _raw(tenc.indices, np.int32)
    tcodes = tcode_all[rel].astype(np.int64)
    pid_all = _raw(table.column("partition_id"), np.int32)
    pid = pid_all[rel].astype(np.int64)
    pmin = int(pid.min())
    width = int(pid.max()) - pmin + 1
    key = tcodes * width + (pid - pmin)

    clock("partition keys")

    # ---- which fields each record writes (§1.3 "unchanged" encodings)
    cols = {f: _Lists(table.column(f)) for f in LISTS}
    leader_in = _raw(table.column("leader"), np.int32)
    lrs_in = _raw(table.column("leader_recovery_state"), np.int8)
    dir_col = _array(table.column("directories"))
    dir_enc = pc.dictionary_encode(dir_col.values) if len(dir_col.values) else pa.array([], pa.string()).dictionary_encode()
    dir_dict = dir_enc.dictionary
    found = pc.index(dir_dict, MIGRATING).as_py()
    if found < 0:
        dir_dict = pa.concat_arrays([dir_dict, pa.array([MIGRATING], pa.string())])
        found = len(dir_dict) - 1
    mig = found
    dcodes = np.asarray(dir_enc.indices.to_numpy(zero_copy_only=False), np.int32) if len(dir_col.values) else \
        np.zeros(0, np.int32)
    dirs = _Lists(dir_col, values=dcodes)

    rel_c = is_c[rel]
    p_rows = np.flatnonzero(~rel_c)
    if n < 2**31 - 1:
        rel = rel.astype(np.int32)  # PartitionRecords, as indices into rel
    wm = np.where(rel_c, np.uint16(C << KIND_SHIFT), np.uint16(ALL_FIELDS | (P << KIND_SHIFT)))
    written_by_changes = 0
    writes = dict.fromkeys(BIT, len(p_rows))  # events writing each field (decides runs vs direct gathers)
    p_bits = from_numpy(is_p)
    for f, col in [(f, cols[f]) for f in LISTS] + [("directories", dirs)]:
        if col.n_valid == 0:
            continue  # no record writes it (the PartitionRecords' null means [])
        # non-null values outside PartitionRecords are change records writing the field (bronze: other
        # record types leave partition columns null); counted on the validity bitmap
        p_valid = len(p_rows) if col.arr.null_count == 0 else \
            int(pc.sum(pc.and_(col.arr.is_valid(), p_bits)).as_py() or 0)
        if p_valid == len(p_rows) and f not in ("eligible_leader_replicas", "last_known_elr"):
            col.mask_nulls = False  # values come from PartitionRecords (non-null) or from changes that wrote it
        if col.n_valid == p_valid:
            continue
        w = rel_c if col.valid is None else col.valid[rel] & rel_c
        nw = int(np.count_nonzero(w))
        if nw:
            wm |= w.astype(np.uint16) * np.uint16(BIT[f])
            written_by_changes |= BIT[f]
            writes[f] += nw
    for f, w in (("leader", leader_in[rel] != LEADER_UNCHANGED), ("leader_recovery_state", lrs_in[rel] != NO_LRS_CHANGE)):
        w &= rel_c
        nw = int(np.count_nonzero(w))
        if nw:
            wm |= w.astype(np.uint16) * np.uint16(BIT[f])
            written_by_changes |= BIT[f]
            writes[f] += nw

    clock("write masks")

    # ---- synthetic events: tombstones (RemoveTopic) and ClearElr candidates
    syn_key, syn_pos, syn_mask = [], [], []
    rem = np.flatnonzero(rtype == T)
    if len(rem):
        ukeys, ufirst = _first_by_key(key[p_rows], rel[p_rows])
        rtopic = np.where(_valid(_array(tenc.indices))[rem], tcode_all[rem], -2).astype(np.int64)
        k, pos = _expand(ukeys, ufirst, width, rem, rtopic)
        syn_key.append(k); syn_pos.append(pos); syn_mask.append(np.full(len(k), T << KIND_SHIFT, np.uint16))
    clr = np.flatnonzero(rtype == X)
    if len(clr):
        elr_any = (cols["eligible_leader_replicas"].lens(rel) > 0) | (cols["last_known_elr"].lens(rel) > 0)
        ukeys, ufirst = _first_by_key(key[elr_any], rel[elr_any])
        k, pos = _expand(ukeys, ufirst, width, clr, _clear_elr_topics(table, rtype, tcode_all, clr))
        syn_key.append(k); syn_pos.append(pos)
        syn_mask.append(np.full(len(k), (X << KIND_SHIFT) | BIT["eligible_leader_replicas"] | BIT["last_known_elr"],
                                np.uint16))
        written_by_changes |= BIT["eligible_leader_replicas"] | BIT["last_known_elr"]

    # ---- all events in log order (seq), then sorted by (partition, seq)
    R = len(rel)
    S = sum(len(k) for k in syn_key)
    if S:
        skey, spos, smask = (np.concatenate(a) for a in (syn_key, syn_pos, syn_mask))
        o = np.argsort(spos, kind="stable")
        skey, spos, smask = skey[o], spos[o], smask[o]
        ins = np.searchsorted(rel, spos)
        seq_syn = ins + np.arange(S)
        seq_real = np.arange(R) + np.cumsum(np.bincount(ins, minlength=R + 1))[:R]
        E = R + S
        ekey = np.empty(E, np.int64); ekey[seq_real] = key; ekey[seq_syn] = skey
        erow = np.empty(E, rel.dtype); erow[seq_real] = rel; erow[seq_syn] = spos
        emask = np.empty(E, np.uint16); emask[seq_real] = wm; emask[seq_syn] = smask
    else:
        E, ekey, erow, emask = R, key, rel, wm
    clock("tombstone and ClearElr events")
    sb = max(int(E).bit_length(), 1)
    if int(ekey.max()).bit_length() + sb <= 63:
        packed = (ekey << sb) | np.arange(E, dtype=np.int64)
        packed.sort()
        perm = packed & ((1 << sb) - 1)
        key_s = packed >> sb
        del packed
    else:
        perm = np.lexsort((np.arange(E), ekey))
        key_s = ekey[perm]
    row_s = erow[perm]
    mask_s = emask[perm]
    del perm, ekey, erow, emask, key, wm
    kind_s = (mask_s >> KIND_SHIFT).astype(np.int8)
    is_P, is_C, is_T, is_X = (kind_s == P), (kind_s == C), (kind_s == T), (kind_s == X)

    clock("sort by partition")

    # ---- segments: a P or a T (or a partition's first event) starts one; live iff started by a P
    keystart = np.empty(E, bool)
    keystart[0] = True
    np.not_equal(key_s[1:], key_s[:-1], out=keystart[1:])
    barrier = _last_true(is_P | is_T | keystart if S else is_P | keystart)
    live = is_P[barrier]

    # ---- forward fill: the event that last wrote each field
    def source(bit: int) -> np.ndarray:
        if not written_by_changes & bit:
            return barrier  # only PartitionRecords write it
        return _last_true((mask_s & bit) != 0)

    src = {f: source(b) for f, b in BIT.items()}

    clock("segments and forward fill")

    # ---- ClearElr candidates apply only if ELR or LastKnownElr is non-empty just before them
    keep = None
    x_applies = None
    if S and is_X.any():
        x_applies = np.zeros(E, bool)
        xs = np.flatnonzero(is_X)
        before = xs - 1
        prev_elr = cols["eligible_leader_replicas"].lens(row_s[src["eligible_leader_replicas"][before]]) > 0
        prev_lke = cols["last_known_elr"].lens(row_s[src["last_known_elr"][before]]) > 0
        x_applies[xs] = live[xs] & (prev_elr | prev_lke)
        keep = ~is_X | x_applies
    if S and is_T.any():
        ts = np.flatnonzero(is_T)
        eff = (ts > 0) & ~keystart[ts] & live[np.maximum(ts - 1, 0)]
        drop_t = np.zeros(E, bool)
        drop_t[ts[~eff]] = True
        keep = ~drop_t if keep is None else keep & ~drop_t

    # ---- epochs (§1.3-1: PE +1 per change; LE +1 per leader field != -2)
    p_at = np.flatnonzero(is_P)
    le_in = _raw(table.column("leader_epoch"), np.int32)
    pe_in = _raw(table.column("partition_epoch"), np.int32)
    base = np.zeros(E, np.int32)
    base[p_at] = le_in[row_s[p_at]]
    bumps = np.cumsum(is_C & ((mask_s & BIT["leader"]) != 0), dtype=np.int32)
    leader_epoch = base[barrier]
    leader_epoch += bumps
    leader_epoch -= bumps[barrier]
    base[p_at] = pe_in[row_s[p_at]]
    bumps = np.cumsum(is_C if x_applies is None else is_C | x_applies, dtype=np.int32)
    partition_epoch = base[barrier]
    partition_epoch += bumps
    partition_epoch -= bumps[barrier]
    del base, bumps, p_at

    clock("ClearElr check and epochs")

    # ---- directories (§1.2-4 and state.merge): explicit list, or MIGRATING x len(replicas)
    cs = np.zeros(len(dcodes) + 1, np.int64)
    np.cumsum(dcodes != mig, out=cs[1:])

    def has_real(rows):  # the row's directories hold a non-MIGRATING id
        starts, lens = dirs.starts_lens(rows)
        return (cs[starts + lens] - cs[starts]) > 0

    a = src["directories"]
    reset = None
    if written_by_changes & BIT["replicas"]:
        # a replicas-only change whose length differs from an explicit list resets it to MIGRATING
        b = np.flatnonzero(((mask_s & BIT["replicas"]) != 0) & ((mask_s & BIT["directories"]) == 0))
        ab = row_s[a[b]]
        mism = b[has_real(ab) & (cols["replicas"].lens(row_s[b]) != dirs.lens(ab))]
        if len(mism):
            flag = np.zeros(E, bool)
            flag[mism] = True
            reset = _last_true(flag) > a

    # ---- output rows
    out = None
    if keep is not None and not keep.all():
        out = np.flatnonzero(keep)
    o = _Output(out, None, row_s)
    key_o, row_o, kind_o, live_o = o.sel(key_s), o.sel(row_s), o.sel(kind_s), o.sel(live)
    o.valid = live_o
    m = len(key_o)
    orphan = (kind_o == C) & ~live_o
    deleted = kind_o == T
    offset_o = offset[row_o]
    del key_s, kind_s, is_P, is_C, is_T, is_X, keystart

    # valid_to_offset: the next non-orphan row of the same partition
    valid_to = np.zeros(m, np.int64)
    has_next = np.zeros(m, bool)
    chain = np.flatnonzero(~orphan) if orphan.any() else None
    ck = key_o if chain is None else key_o[chain]
    co = offset_o if chain is None else offset_o[chain]
    nxt = np.zeros(len(ck), bool)
    np.equal(ck[1:], ck[:-1], out=nxt[:-1])
    vt = np.zeros(len(ck), np.int64)
    vt[:-1] = co[1:]
    if chain is None:
        valid_to, has_next = vt, nxt
    else:
        valid_to[chain], has_next[chain] = vt, nxt

    clock("output rows and valid_to_offset")

    columns: dict[str, pa.Array] = {}
    tc = key_o // width
    columns["topic_id"] = _strings(tenc.dictionary, tc, dictionary_strings)
    columns["partition_id"] = from_numpy((key_o - tc * width + pmin).astype(np.int32))
    columns["offset"] = from_numpy(offset_o)
    columns["record_type"] = _strings(pa.array(KIND_NAMES), kind_o, dictionary_strings)
    del tc, key_o, row_o, kind_o
    clock("topic_id, partition_id, offset, record_type")
    rep_off = None
    dense = {f: 2 * k > E for f, k in writes.items()}
    for f in ("replicas", "isr", "removing_replicas", "adding_replicas"):
        off, vals = o.list_field(cols[f], src[f], dense[f])
        if f == "replicas":
            rep_off = off
        columns[f] = _list_array(off, vals, live_o)
    clock("replicas, isr, removing, adding")
    columns["leader"] = from_numpy(o.scalar_field(leader_in, src["leader"], dense["leader"]), live_o)
    columns["leader_epoch"] = from_numpy(o.sel(leader_epoch), live_o)
    columns["partition_epoch"] = from_numpy(o.sel(partition_epoch), live_o)
    columns["leader_recovery_state"] = from_numpy(o.scalar_field(lrs_in, src["leader_recovery_state"]), live_o)
    clock("leader, epochs, recovery state")
    columns["directories"] = _directories(o, dirs, a, reset, has_real, np.diff(rep_off), mig, dir_dict,
                                          dictionary_strings)
    clock("directories")
    for f in ("eligible_leader_replicas", "last_known_elr"):
        off, vals = o.list_field(cols[f], src[f], dense[f])
        columns[f] = _list_array(off, vals, live_o)
    columns["valid_to_offset"] = from_numpy(valid_to, has_next)
    columns["deleted"] = from_numpy(deleted)
    columns["orphan"] = from_numpy(orphan)
    result = pa.Table.from_pydict(columns, schema=_schema(dictionary_strings))
    clock("elr, last_known_elr, table")
    return result


def _directories(o: _Output, dirs: _Lists, a, reset, has_real, rep_len, mig: int, dictionary: pa.Array,
                 as_dictionary: bool):
    """Per output row: the explicit list written by event ``a`` if it holds a real directory id and no
    replicas change reset it since, else MIGRATING x len(replicas); null where the state is null."""
    s, starts, runlen, su = o.runs(a)
    explicit = np.repeat(has_real(o.row_s[np.maximum(su, 0)]) & (su >= 0), runlen)
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
    return _string_lists(off, codes, valid, dictionary, as_dictionary)


def _schema(dictionary_strings: bool) -> pa.Schema:
    if not dictionary_strings:
        return HISTORY_SCHEMA
    d = pa.dictionary(pa.int32(), pa.string())
    return (HISTORY_SCHEMA.set(0, pa.field("topic_id", d, nullable=False))
            .set(3, pa.field("record_type", d, nullable=False))
            .set(12, pa.field("directories", pa.list_(d))))


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
