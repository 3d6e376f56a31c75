"""Bronze rows → the fixed-width arrays the compiled passes read (kernel-design.md, "the layout").

Everything a string or a nullable list would carry becomes an integer here, once per replay:

* topics, partitions, brokers, topic names, incarnations and config values get dense indexes;
* the six broker-id lists of partition records (replicas, isr, removing, adding, ELR, LastKnownElr) go to
  one int32 **tape**; a record points at each list with (start, length), length -1 for "unchanged" (null);
* Kafka's "unchanged" sentinels stay as recorded (leader -2, leaderRecoveryState -1);
* records are numbered into **batches** exactly as the scalar replay groups them (file, batch base offset).

The few cluster-level fields the typed columns normalise (a BrokerRegistrationChangeRecord's raw
``fenced`` / ``inControlledShutdown``, ZkMigrationState) are read from those records' JSON: there are
a handful per broker event, never per partition.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core import heap
from controller_core import threads as _threads
from controller_core.numba_cache import read_only
from controller_core.kernels.prefetch import load8
from controller_core.kernels import strcodes
from controller_core.codec.arrowutil import NUMPY_TYPES, column_ints, from_numpy, to_numpy
from controller_core.codec.bronze import by_type
from controller_core.image import MIGRATING, MIN_ISR, UNCLEAN, min_isr_value

# record kinds the invariant pass dispatches on
(OTHER, TOPIC, REMOVE_TOPIC, PARTITION, CHANGE, CLEAR_ELR, CONFIG, FEATURE, LEADER_CHANGE, ZK_MIGRATION, REGISTER,
 REG_CHANGE, FENCE, UNFENCE, UNREGISTER) = range(15)
KINDS = {
    "TOPIC_RECORD": TOPIC, "REMOVE_TOPIC_RECORD": REMOVE_TOPIC, "PARTITION_RECORD": PARTITION,
    "PARTITION_CHANGE_RECORD": CHANGE, "CLEAR_ELR_RECORD": CLEAR_ELR, "CONFIG_RECORD": CONFIG,
    "FEATURE_LEVEL_RECORD": FEATURE, "LEADER_CHANGE": LEADER_CHANGE, "ZK_MIGRATION_STATE_RECORD": ZK_MIGRATION,
    "REGISTER_BROKER_RECORD": REGISTER, "BROKER_REGISTRATION_CHANGE_RECORD": REG_CHANGE,
    "FENCE_BROKER_RECORD": FENCE, "UNFENCE_BROKER_RECORD": UNFENCE, "UNREGISTER_BROKER_RECORD": UNREGISTER,
}
# the partition lists, in tape-column order
LISTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas", "last_known_elr")
R, I, RM, AD, E, K = range(6)
MISSING = np.iinfo(np.int64).min  # an absent integer field (printed as None)
POSITIONS_32 = 1 << 31  # list positions into the tape are int32 below this many list entries, int64 from it
# config keys the rules resolve
CFG_OTHER, CFG_MIN_ISR, CFG_UNCLEAN = 0, 1, 2
FEAT_OTHER, FEAT_MV, FEAT_ELR = 0, 1, 2
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4


@dataclass
class Layout:
    """The arrays of one replay (see the module docstring); ``rec`` columns are per bronze row."""

    kind: np.ndarray  # int8
    batch: np.ndarray  # int64, non-decreasing
    snapshot: np.ndarray  # bool: read from a *.checkpoint file
    topic: np.ndarray  # int32 dense topic-id index, -1 none
    part: np.ndarray  # int32 dense partition index, -1 none
    name: np.ndarray  # int32 topic-name index (TopicRecord, ClearElr; -1 = none / all topics)
    ints: np.ndarray  # int32 [n, 5]: leader, leaderEpoch, partitionEpoch, leaderRecoveryState, #directories
    lists: np.ndarray  # int32 [n, 12] (int64 past 2^31 tape entries): (start, length) per LISTS entry into ``tape``
    tape: np.ndarray  # int32
    broker: np.ndarray  # int32 dense broker index, -1 none
    bints: np.ndarray  # int64 [n, 5]: broker id, epoch, incarnation, fenced (raw), inControlledShutdown (raw)
    # int64 [n, 5]: key code, resource kind, resource index, value (min ISR, feature level, new controller, ZK
    # migration under way: 1), value index (-1 null)
    cfg: np.ndarray
    part_topic: np.ndarray  # int32 per partition
    part_id: np.ndarray  # int32 per partition
    topic_p0: np.ndarray  # int32 per topic: its partition 0, -1 none
    topic_parts: np.ndarray  # int32: partitions grouped by topic (CSR with topic_parts_at)
    topic_parts_at: np.ndarray  # int64 [topics + 1]
    broker_ids: np.ndarray  # int64 sorted: the broker ids any broker record names
    broker_slot_ids: np.ndarray  # int64 per broker config resource: its name as an int (MISSING: "" or not an id)
    default_slot: int  # the broker config resource "" (cluster default), -1 none
    unclean_true: np.ndarray  # bool per config value index: the value reads "true"
    # for describing breaches
    topic_ids: list  # dense topic index -> topic id
    names: list  # name index -> topic name
    values: list  # config value index -> string
    n_names: int
    n_bslots: int
    # for the fold (kernels/fold_pass.py)
    offset: np.ndarray | None = None  # int64 per row
    topic_dict: pa.Array | None = None  # dense topic index -> topic id, as Arrow strings
    # directories, read only when a pass asks for them (:func:`with_directories`)
    dir_refs: np.ndarray | None = None  # [n, 2] (start, length) of each row's directories in the joined values
    dir_start: np.ndarray | None = None  # int64 per row into dir_codes (length: ints[:, 4], -1 null)
    dir_codes: np.ndarray | None = None  # int32 codes into dir_dict
    dir_dict: pa.Array | None = None  # distinct directory ids; always holds MIGRATING
    dir_mig: int = -1  # code of MIGRATING in dir_dict
    # the cluster fields being made on another thread (``build(cluster_beside=True)``): a future :func:`with_cluster`
    # collects
    beside: object = None


def _dense(col: pa.ChunkedArray, arrow: bool = False):
    """(index per row, -1 for null; the distinct values, in order of first appearance) of a string column (and
    the values as Arrow).  Chunk by chunk (:func:`_chunk_codes`), then one dictionary for all: joining the chunks
    first copied every string of the column (source_file, topic_id: 11.5 M strings on a 1 M-partition log)."""
    chunks = [c for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]) if len(c)]
    if not chunks:
        empty = pa.array([], pa.string())
        return (np.zeros(0, np.int32), [], empty) if arrow else (np.zeros(0, np.int32), [])
    idx = np.empty(sum(len(c) for c in chunks), np.int32)
    row0, found = 0, []
    for c in chunks:
        found.append(_chunk_codes(c, idx[row0:row0 + len(c)]))
        row0 += len(c)
    # the chunks' dictionaries joined in order and encoded: each value's first appearance overall (what
    # unify_dictionaries gives); each row's code then read through its chunk's small table, one take per row
    dicts = [d.cast(pa.string()) for d, _ in found]
    joined = pa.concat_arrays(dicts) if len(dicts) > 1 else dicts[0]
    enc = joined.dictionary_encode()
    to_global = to_numpy(enc.indices, np.int32)
    row0, base = 0, 0
    for c, d, (_, runs) in zip(chunks, dicts, found):
        lut = np.append(to_global[base:base + len(d)], np.int32(-1))  # (a code -1, null, reads the appended -1)
        if runs is not None:  # the rows hold run numbers, ``runs`` each run's code in the chunk's dictionary
            lut = lut[runs]
        if runs is not None or len(dicts) > 1 or len(d) != len(enc.dictionary):  # (else: the codes are the values')
            part = idx[row0:row0 + len(c)]
            np.take(lut, part, out=part)
        row0 += len(c)
        base += len(d)
    dictionary = enc.dictionary
    if arrow:
        return idx, dictionary.to_pylist(), dictionary
    return idx, dictionary.to_pylist()


# a chunk of strings is encoded run by run when its runs are at most this share of its rows (a replay's topic ids
# come in runs: the controller writes a broker's changes topic after topic; source_file is one run per file)
_RUNS_SHARE = 8


def _chunk_codes(c: pa.Array, out: np.ndarray) -> tuple[pa.Array, np.ndarray | None]:
    """One chunk's dictionary and its rows' codes into ``out``: (dictionary, None) with ``out`` the codes (-1 for
    null), or (dictionary, each run's code) with ``out`` each row's run.  A chunk read as codes (a Spark task's scan)
    as it is; a chunk of strings whose values come in runs: each run's first value encoded (equal neighbours found by
    comparing their bytes in one compiled loop, a sixth of hashing every string); other chunks hashed."""
    if pa.types.is_dictionary(c.type):
        out[:] = to_numpy(pc.fill_null(c.indices, -1), np.int32)
        return c.dictionary, None
    if c.type == pa.string() and len(c) >= 64:
        heads = _runs_of(c, out)
        if heads is not None:
            enc = c.take(from_numpy(heads)).dictionary_encode()
            return enc.dictionary, to_numpy(pc.fill_null(enc.indices, -1), np.int32)
    enc = c.dictionary_encode()
    out[:] = to_numpy(pc.fill_null(enc.indices, -1), np.int32)
    return enc.dictionary, None


def _runs_of(c: pa.Array, run: np.ndarray, share: int = _RUNS_SHARE) -> np.ndarray | None:
    """The first row of each run of equal values (nulls equal each other) of a string chunk, read where its strings
    lie, and each row's run number into ``run``; None when the runs are more than one in ``share`` rows."""
    bufs = c.buffers()
    offs = read_only(np.frombuffer(bufs[1], np.int32, count=len(c) + 1, offset=4 * c.offset))
    data = read_only(np.frombuffer(bufs[2], np.uint8)) if bufs[2] is not None and bufs[2].size else _NO_BITS
    heads = np.empty(len(c) // share + 1, np.int64)
    runs = _run_heads(offs, data, *_bits(c), c.null_count > 0, heads, run)
    return heads[:runs] if runs >= 0 else None


@njit(cache=True, nogil=True)
def _run_heads(offs, data, bm, bo, has_nulls, heads, run):
    """The first row of each run of equal values (nulls equal each other) of a string chunk into ``heads``, each
    row's run number into ``run``; returns the number of runs, or -1 as soon as they do not fit in ``heads``.  Equal
    neighbours are told by their length, then their bytes eight at a time (a topic id is 22 bytes: three loads)."""
    c = 0
    pv, ps, pl = False, 0, -1
    for r in range(len(offs) - 1):
        v = not has_nulls or _bit(bm, bo, r) == 1
        s = offs[r]
        n = offs[r + 1] - s
        new = r == 0 or v != pv or (v and n != pl)
        if not new and v:
            if n >= 8:  # a word at a time, the last word ending at the string's end (it may overlap the one before)
                q = 0
                while not new and q + 8 < n:
                    new = load8(data, s + q) != load8(data, ps + q)
                    q += 8
                new = new or load8(data, s + n - 8) != load8(data, ps + n - 8)
            else:
                for q in range(n):
                    if data[s + q] != data[ps + q]:
                        new = True
                        break
        if new:
            if c == len(heads):
                return -1
            heads[c] = r
            c += 1
        run[r] = c - 1
        pv, ps, pl = v, s, n
    return c


def _unset(col, is_p: np.ndarray, p_fill: int, fill: int, out: np.ndarray) -> np.ndarray:
    """An int32 field whose null reads ``p_fill`` in a PartitionRecord and ``fill`` elsewhere: chunk by chunk, its
    values and validity bits read where they lie in one compiled loop (filled, unpacked and masked in NumPy, the
    leader and recovery-state columns were a tenth of the layout).  ``out``: where to write it (a column of the
    layout's ``ints``: no array of its own copied there after)."""
    row0 = 0
    for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        if len(c) and c.null_count == len(c):
            out[row0:row0 + len(c)] = np.where(is_p[row0:row0 + len(c)], p_fill, fill)
        elif len(c):
            bm, bo = _bits(c)
            vals = read_only(np.frombuffer(c.buffers()[1], NUMPY_TYPES[c.type], count=len(c),
                                           offset=c.offset * c.type.bit_width // 8))
            _fill_ints(vals, bm, bo, c.null_count > 0, read_only(is_p), row0, p_fill, fill, out)
        row0 += len(c)
    return out


_NO_BITS = read_only(np.zeros(1, np.uint8))


def _bits(c) -> tuple[np.ndarray, int]:
    """A chunk's validity bitmap (read-only bytes) and the bit of its first row; a byte nothing reads when it has
    no null.  The compiled loops test the bits where they lie: unpacked to a bool per row first, they were a pass and
    an array per chunk and column."""
    if not c.null_count:
        return _NO_BITS, 0
    return read_only(np.frombuffer(c.buffers()[0], np.uint8)), c.offset


@njit(cache=True, nogil=True, inline="always")
def _bit(bm, bo, r):
    return (bm[(bo + r) >> 3] >> ((bo + r) & 7)) & 1


@njit(cache=True, nogil=True)
def _fill_ints(vals, bm, bo, has_nulls, is_p, row0, p_fill, fill, out):
    """``out[row0 + r]``: value r of a chunk, or for a null ``p_fill`` in a PartitionRecord's row, ``fill`` elsewhere."""
    for r in range(len(vals)):
        if has_nulls and not _bit(bm, bo, r):
            out[row0 + r] = p_fill if is_p[row0 + r] else fill
        else:
            out[row0 + r] = vals[r]


@njit(cache=True, nogil=True)
def _null_among(bm, bo, rows, row0, n):
    """Row ``r < n`` of a chunk is null (bits ``bm`` from bit ``bo``) where ``rows[row0 + r]``.  From the first byte
    boundary of the bits on, eight rows a byte: a byte of valid rows (the leader's and recovery state's columns are
    null on a few rows only) is not looked into."""
    r = 0
    while r < n and (bo + r) & 7:
        if rows[row0 + r] and not _bit(bm, bo, r):
            return True
        r += 1
    while r + 8 <= n:
        byte = bm[(bo + r) >> 3]
        if byte != 0xFF:
            for q in range(8):
                if rows[row0 + r + q] and not (byte >> q) & 1:
                    return True
        r += 8
    while r < n:
        if rows[row0 + r] and not _bit(bm, bo, r):
            return True
        r += 1
    return False


def null_among(col, rows: np.ndarray) -> bool:
    """Whether ``col`` is null on a row where ``rows`` (bool per row) is set: its validity bits tested where they
    lie (unpacked to a bool per row and masked, this was four passes over the rows per column)."""
    row0 = 0
    rows = read_only(np.ascontiguousarray(rows, np.bool_))
    for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        if c.null_count:
            bm, bo = _bits(c)
            if _null_among(bm, bo, rows, row0, len(c)):
                return True
        row0 += len(c)
    return False


def _valid_rows(col) -> np.ndarray:
    """The rows where ``col`` is not null, ascending (int64).  Read off the validity bits a byte at a time: a column
    few records carry (the topic names, the config resource names) is a bitmap of mostly zero bytes, and the bool
    per row of ``is_valid`` was a pass and an array of the whole column for a few thousand rows."""
    out, row0 = [], 0
    for c in (col.chunks if isinstance(col, pa.ChunkedArray) else [col]):
        n = len(c)
        if n and c.null_count == 0:
            out.append(np.arange(row0, row0 + n, dtype=np.int64))
        elif n and c.null_count < n:
            bits = np.frombuffer(c.buffers()[0], np.uint8, count=(c.offset + n + 7) // 8)
            some = np.flatnonzero(bits)  # the bytes holding a valid row
            at = (some[:, None] * 8 + np.arange(8)).ravel()
            at = at[np.unpackbits(bits[some], bitorder="little").view(np.bool_)] - c.offset
            out.append(at[(at >= 0) & (at < n)] + row0)
        row0 += n
    return np.concatenate(out) if out else np.zeros(0, np.int64)


def _chunks(col: pa.ChunkedArray) -> list:
    """The non-empty chunks of a column."""
    return [c for c in col.chunks if len(c)]


@njit(cache=True, nogil=True)
def _refs(offs, bm, bo, has_nulls, lists, row0, at, base):
    """(start, length or -1 for null) of each list of one chunk into ``lists[row0:, at:at + 2]`` (``bm``, ``bo``:
    the chunk's validity bits, :func:`_bits`)."""
    lo = offs[0]
    for r in range(len(offs) - 1):
        lists[row0 + r, at] = base + offs[r] - lo
        lists[row0 + r, at + 1] = offs[r + 1] - offs[r] if not has_nulls or _bit(bm, bo, r) else -1


def _fill_refs(chunks: list, lists: np.ndarray, at: int, base: int, tape_parts: list | None) -> int:
    """(start, length or -1 for null) of each row's list into its column's flattened values, chunk by chunk,
    written into ``lists[:, at:at + 2]``; the values are appended to ``tape_parts`` as the joined chunks would
    hold them (each chunk's referenced range).  Returns the new base."""
    row0 = 0
    for c in chunks:
        offs = _offsets(c)
        _refs(offs, *_bits(c), c.null_count > 0, lists, row0, at, base)
        lo, hi = int(offs[0]), int(offs[-1])
        if tape_parts is not None:
            tape_parts.append(np.asarray(c.values.slice(lo, hi - lo).to_numpy(zero_copy_only=False), np.int32))
        base += hi - lo
        row0 += len(c)
    return base


@njit(cache=True, nogil=True)
def _refs_rows(o0, o1, o2, o3, o4, o5, v0, v1, v2, v3, v4, v5, bo, nulls, lists, row0, base):
    """:func:`_refs` of the six lists of one chunk together: each row of ``lists`` written once (a pass per list
    wrote every row's line six times over); ``v0`` .. ``v5`` their validity bits, from bits ``bo`` (:func:`_bits`).
    Written out, no helper taking arrays: numba counts the references of every array a helper takes, at every call
    (kernels/borrow.py); ``_bit`` is inlined."""
    n0, n1, n2, n3, n4, n5 = nulls[0], nulls[1], nulls[2], nulls[3], nulls[4], nulls[5]
    c0, c1, c2, c3, c4, c5 = bo[0], bo[1], bo[2], bo[3], bo[4], bo[5]
    b0 = base[0] - o0[0]
    b1 = base[1] - o1[0]
    b2 = base[2] - o2[0]
    b3 = base[3] - o3[0]
    b4 = base[4] - o4[0]
    b5 = base[5] - o5[0]
    for r in range(len(o0) - 1):
        row = row0 + r
        lists[row, 0] = b0 + o0[r]
        lists[row, 1] = o0[r + 1] - o0[r] if not n0 or _bit(v0, c0, r) else -1
        lists[row, 2] = b1 + o1[r]
        lists[row, 3] = o1[r + 1] - o1[r] if not n1 or _bit(v1, c1, r) else -1
        lists[row, 4] = b2 + o2[r]
        lists[row, 5] = o2[r + 1] - o2[r] if not n2 or _bit(v2, c2, r) else -1
        lists[row, 6] = b3 + o3[r]
        lists[row, 7] = o3[r + 1] - o3[r] if not n3 or _bit(v3, c3, r) else -1
        lists[row, 8] = b4 + o4[r]
        lists[row, 9] = o4[r + 1] - o4[r] if not n4 or _bit(v4, c4, r) else -1
        lists[row, 10] = b5 + o5[r]
        lists[row, 11] = o5[r + 1] - o5[r] if not n5 or _bit(v5, c5, r) else -1


def _offsets(c) -> np.ndarray:
    """A list chunk's int32 offsets, read-only (one compiled signature, whatever the buffer allows)."""
    return read_only(np.frombuffer(c.buffers()[1], np.int32, count=len(c) + 1, offset=4 * c.offset))


def _fill_list_refs(chunked: list, offsets: list, lists: np.ndarray, tape_parts: list) -> None:
    """(start, length or -1) of every row's six lists (``LISTS``: their columns' chunks and each chunk's
    :func:`_offsets`) into ``lists``, their values appended to ``tape_parts`` list after list, as :func:`_fill_refs`
    column by column does -- in one pass over the rows when the six columns are chunked alike (a replay's input is:
    one table's chunks), else column by column."""
    if any([len(c) for c in cs] != [len(c) for c in chunked[0]] for cs in chunked):
        base = 0
        for k, cs in enumerate(chunked):
            base = _fill_refs(cs, lists, 2 * k, base, tape_parts)
        return
    sizes = np.array([[int(o[-1]) - int(o[0]) for o in offs] for offs in offsets], np.int64)
    starts = (np.cumsum(sizes.ravel()) - sizes.ravel()).reshape(sizes.shape)  # list after list, chunk after chunk
    row0 = 0
    for j in range(len(chunked[0])):
        chunk = [cs[j] for cs in chunked]
        nulls = np.array([c.null_count > 0 for c in chunk], np.bool_)
        bits = [_bits(c) for c in chunk]
        _refs_rows(*(offs[j] for offs in offsets), *(b[0] for b in bits), np.array([b[1] for b in bits], np.int64),
                   nulls, lists, row0, np.ascontiguousarray(starts[:, j]))
        row0 += len(chunk[0])
    for cs, offs in zip(chunked, offsets):
        for c, o in zip(cs, offs):
            lo, hi = int(o[0]), int(o[-1])
            tape_parts.append(np.asarray(c.values.slice(lo, hi - lo).to_numpy(zero_copy_only=False), np.int32))


def _kinds(records: pa.Table) -> np.ndarray:
    """Each row's record kind (codec/bronze.by_type: from the type numbers, or the names of an older lake)."""
    return by_type(records, KINDS, OTHER, np.int8)


def _canonical_int(name) -> int:
    try:
        v = int(name)
    except (TypeError, ValueError):
        return MISSING
    return v if str(v) == name else MISSING


def _partitions(topic: np.ndarray, pid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (topic, partition id) keys as ``topic << 32 | pid``, sorted, and each row's index among them: the
    sort :func:`_dense_partitions` leaves keys too sparse for its table to (and its reference in the tests)."""
    return np.unique(topic.astype(np.int64) * (1 << 32) + pid, return_inverse=True)


@njit(cache=True, nogil=True)
def _dense_partitions(kind, topic, pid, part):
    """:func:`_partitions` of the partition records' (topic, partition id) keys in three passes over the rows: the
    keys' extent (each keyed row marked 0 in ``part``, the others -1), a table over it marking those present
    (numbered in key order: topic, then partition id), each keyed row's number into ``part``.  Returns (partitions,
    their topics, their ids); (-1, ...) when the keys are too sparse for a table (the caller sorts them).  Its
    NumPy form was six passes and four arrays over the rows."""
    tmax, pmax, cnt = -1, -1, 0
    for r in range(len(kind)):
        k = kind[r]
        keyed = (k == PARTITION or k == CHANGE) and topic[r] >= 0 and pid[r] >= 0
        part[r] = 0 if keyed else -1
        if keyed:
            tmax = max(tmax, topic[r])
            pmax = max(pmax, pid[r])
            cnt += 1
    width = np.int64(pmax) + 1
    span = (np.int64(tmax) + 1) * width
    if cnt and span > 4 * cnt + 1024:
        return -1, np.zeros(0, np.int32), np.zeros(0, np.int32)
    slot = np.full(max(span, 1), -1, np.int64)
    for r in range(len(kind)):
        if part[r] == 0:
            slot[topic[r] * width + pid[r]] = 0
    c = 0
    for q in range(span):
        if slot[q] == 0:
            slot[q] = c
            c += 1
    part_topic = np.empty(c, np.int32)
    part_id = np.empty(c, np.int32)
    for q in range(span):
        if slot[q] >= 0:
            part_topic[slot[q]] = q // width
            part_id[slot[q]] = q % width
    for r in range(len(kind)):
        if part[r] == 0:
            part[r] = slot[topic[r] * width + pid[r]]
    return c, part_topic, part_id


def _rows(records: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(ints, lists, tape, offset, dir_refs): every row's epochs, count of directories and list references, the
    tape, the offsets, each row's (start, length) of its directories in the column's values joined -- what needs no
    record kind (``ints``' leader and LRS columns are left for :func:`build`)."""
    n = records.num_rows
    # Kafka's int32 fields and list positions in 32 bits: the two largest arrays of a replay (11.5 M rows on a
    # 1 M-partition log, 0.8 GB less than in int64, and a first call's fresh pages are most of the layout's time)
    ints = np.empty((n, 5), np.int32)
    column_ints(records.column("leader_epoch"), -1, np.int32, ints[:, 1])
    column_ints(records.column("partition_epoch"), -1, np.int32, ints[:, 2])
    # each list column's chunks and their offsets, read once (as Arrow scalars they were ~3 us each, ~1.5 ms a
    # 1.44 M-record replay of 40 chunks)
    chunked = [_chunks(records.column(col)) for col in LISTS + ("directories",)]
    offsets = [[_offsets(c) for c in cs] for cs in chunked]
    wide = sum(int(o[-1]) - int(o[0]) for offs in offsets for o in offs) >= POSITIONS_32
    pos = np.int64 if wide else np.int32
    refs = np.empty((n, 2), pos)
    _fill_refs(chunked[-1], refs, 0, 0, None)
    ints[:, 4] = refs[:, 1]

    lists = np.empty((n, 12), pos)
    tape_parts: list = []
    _fill_list_refs(chunked[:-1], offsets[:-1], lists, tape_parts)
    tape = np.concatenate(tape_parts) if tape_parts else np.zeros(0, np.int32)
    return ints, lists, tape, column_ints(records.column("offset"), 0), refs


def build(records: pa.Table, cluster: bool = True, threads: int = 1, cluster_beside: bool = False) -> Layout:
    """The layout of ``records`` (bronze rows in replay order; the types a replay skips are kind OTHER).
    ``cluster=False``: the partition fields only (what the fold reads); the batch, broker and config fields
    the invariant pass reads are None.  ``threads``: the list columns and the epochs are read on another thread
    (controller_core/threads.py) while this one reads the kinds, the topics and the partitions; with
    ``cluster_beside`` (and ``cluster=False``) the cluster fields too, from the moment the topic names are read,
    for :func:`with_cluster` to collect (the pipeline's invariant pass then starts as the layout ends)."""
    n = records.num_rows
    rows = _threads.pool(threads).submit(_rows, records) if _threads.worth(threads, n) else None
    kind = _kinds(records)

    topic, topic_ids, topic_dict = _dense(records.column("topic_id"), arrow=True)
    pid = column_ints(records.column("partition_id"), -1, np.int32)
    part = np.empty(n, np.int32)
    got = _dense_partitions(kind, topic, pid, part)
    if got[0] >= 0:
        part_topic, part_id = got[1], got[2]
    else:  # keys too sparse for a table over them: sorted (``part`` marks the keyed rows 0)
        has_part = part == 0
        uniq, inv = _partitions(topic[has_part], pid[has_part])
        part[has_part] = inv
        part_topic = (uniq >> 32).astype(np.int32)
        part_id = (uniq & 0xFFFFFFFF).astype(np.int32)
    n_topics = len(topic_ids)
    topic_p0 = np.full(n_topics, -1, np.int32)
    zero = np.flatnonzero(part_id == 0)
    topic_p0[part_topic[zero]] = zero
    order = np.argsort(part_topic, kind="stable").astype(np.int32)
    topic_parts_at = np.zeros(n_topics + 1, np.int64)
    np.add.at(topic_parts_at, part_topic.astype(np.int64) + 1, 1)
    topic_parts_at = np.cumsum(topic_parts_at)

    # topic names: TopicRecord / ClearElr names and topic config resources, one index space
    cfg_type = column_ints(records.column("config_resource_type"), -1)
    res_name = records.column("config_resource_name")
    # only the few rows naming a topic are joined (joining both string columns whole was most of this step)
    is_res = cfg_type == TOPIC_RESOURCE
    by_res = _valid_rows(res_name)
    by_name = _valid_rows(records.column("topic_name"))
    named = np.union1d(by_res[is_res[by_res]], by_name[~is_res[by_name]])
    at = pa.array(named, pa.int64())
    tnames = pc.if_else(pa.array(is_res[named]), res_name.take(at), records.column("topic_name").take(at))
    codes_named, names = _dense(pa.chunked_array([tnames], pa.string()))
    name = np.full(n, -1, np.int32)
    name[named] = codes_named
    if "" in names:  # ClearElrRecord's topicName "" means every topic: no name
        name[(kind == CLEAR_ELR) & (name == names.index(""))] = -1
    beside = (_threads.pool(threads).submit(_cluster, records, kind, name, cfg_type, res_name)
              if cluster_beside and not cluster and rows is not None else None)

    ints, lists, tape, offset, dir_refs = rows.result() if rows is not None else _rows(records)
    is_p = kind == PARTITION
    _unset(records.column("leader"), is_p, -1, -2, ints[:, 0])
    _unset(records.column("leader_recovery_state"), is_p, 0, -1, ints[:, 3])
    parts = dict(kind=kind, topic=topic, part=part, name=name, ints=ints, lists=lists, tape=tape, part_topic=part_topic,
                 part_id=part_id, topic_p0=topic_p0, topic_parts=order, topic_parts_at=topic_parts_at,
                 topic_ids=topic_ids, names=names, n_names=max(len(names), 1), offset=offset, topic_dict=topic_dict,
                 dir_refs=dir_refs)
    if not cluster:
        return Layout(**parts, **dict.fromkeys(_CLUSTER_FIELDS), beside=beside)
    return Layout(**parts, **_cluster(records, kind, name, cfg_type, res_name))


_CLUSTER_FIELDS = ("batch", "snapshot", "broker", "bints", "cfg", "broker_ids", "broker_slot_ids", "default_slot",
                   "unclean_true", "values", "n_bslots")


def with_cluster(lay: Layout, records: pa.Table) -> Layout:
    """``build(records)`` from ``lay = build(records, cluster=False)``: a new layout sharing ``lay``'s arrays, with
    the batch, broker and config fields the invariant pass reads (those made beside ``lay``'s others, when
    ``build(cluster_beside=True)`` started them).  ``lay`` itself is not changed (the fold reads it meanwhile); the
    new fields are arrays of their own, a ZkMigrationStateRecord's flag too, in ``cfg``."""
    if lay.batch is not None:
        return lay
    if lay.beside is not None:  # made beside the layout (``build(cluster_beside=True)``)
        fields = lay.beside.result()
    else:
        fields = _cluster(records, lay.kind, lay.name, column_ints(records.column("config_resource_type"), -1),
                          records.column("config_resource_name"))
    return dataclasses.replace(lay, **fields, beside=None)


def _batches(files: pa.ChunkedArray, bbo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(each row's batch number, whether its file is a snapshot): a batch is a row of rows with the same file and batch
    base offset.  The file names come in runs (a file's rows follow one another): each chunk's runs are found where the
    strings lie (:func:`_run_heads`), a run going on across a chunk's end told by its two names, and one compiled loop
    numbers the batches; coding every name first (:func:`_dense`: a dictionary over them, each row's code through its
    chunk's table) and comparing and summing in NumPy took twice as long.  A column not in runs is coded."""
    n = len(bbo)
    run = np.empty(n, np.int32)
    snap: list[bool] = []
    row0, last = 0, None
    for c in _chunks(files):
        if c.type != pa.string():
            return _batches_coded(files, bbo)
        heads = _runs_of(c, run[row0:row0 + len(c)], _RUNS_SHARE if len(c) >= 64 else 1)  # (short: any runs)
        if heads is None:
            return _batches_coded(files, bbo)
        names = c.take(from_numpy(heads)).to_pylist()
        first = len(snap) - 1 if snap and names[0] == last else len(snap)  # (a run going on from the chunk before)
        run[row0:row0 + len(c)] += first
        snap += [f is not None and f.endswith(".checkpoint") for f in names[1 if first < len(snap) else 0:]]
        row0, last = row0 + len(c), names[-1]
    batch = np.empty(n, np.int64)
    snapshot = np.empty(n, np.bool_)
    _number_batches(run, bbo, np.array(snap or [False], np.bool_), batch, snapshot)
    return batch, snapshot


@njit(cache=True, nogil=True)
def _number_batches(run, bbo, run_snap, batch, snapshot):
    b = -1
    for r in range(len(run)):
        if r == 0 or run[r] != run[r - 1] or bbo[r] != bbo[r - 1]:
            b += 1
        batch[r] = b
        snapshot[r] = run_snap[run[r]]


def _batches_coded(files: pa.ChunkedArray, bbo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_batches` through each row's file as a code (a column of codes, as a Spark task's scan reads it, or names
    not in runs); its reference in the tests."""
    codes, names = _dense(files)
    new_batch = np.ones(len(bbo), bool)
    if len(bbo) > 1:
        new_batch[1:] = (codes[1:] != codes[:-1]) | (bbo[1:] != bbo[:-1])
    batch = np.cumsum(new_batch, dtype=np.int64)  # (in place below: each temporary is fresh pages on a first call)
    batch -= 1
    snapshot = np.array([f.endswith(".checkpoint") for f in names] + [False], bool)[codes]  # -1: null
    return batch, snapshot


def _cluster(records: pa.Table, kind: np.ndarray, name: np.ndarray, cfg_type: np.ndarray, res_name) -> dict:
    """The batches and the broker, config, feature and controller fields (the invariant pass reads them).

    ``bints`` and ``cfg`` are read only on the rows of their kinds (broker records; configs, features,
    LeaderChange and ZkMigrationState): those few rows are filled, the rest stay zero pages the pass never touches
    (filling every row was 0.9 GB of writes on a 1 M-partition log; ``heap.zeros``: not even cleared)."""
    n = records.num_rows
    bbo = column_ints(records.column("batch_base_offset"), -1)
    batch, snapshot = _batches(records.column("source_file"), bbo)

    # brokers
    is_broker = (kind >= REGISTER) & (kind <= UNREGISTER)
    brows = np.flatnonzero(is_broker)
    on_broker = from_numpy(is_broker)  # the rows the broker fields are read from
    bid = column_ints(records.column("broker_id").filter(on_broker), MISSING)
    known = bid != MISSING
    broker_ids = np.unique(bid[known])
    broker = np.full(n, -1, np.int32)
    broker[brows[known]] = np.searchsorted(broker_ids, bid[known])
    bints = heap.zeros((n, 5), np.int64)
    bints[brows, 0] = bid
    bints[brows, 1] = column_ints(records.column("broker_epoch").filter(on_broker), MISSING)
    bints[brows, 2] = _dense(records.column("incarnation_id").filter(on_broker))[0]
    # RegisterBrokerRecord: absent fenced means fenced, absent inControlledShutdown means not (image._register)
    bints[brows, 3] = to_numpy(pc.fill_null(records.column("fenced").filter(on_broker), True), bool)
    bints[brows, 4] = to_numpy(pc.fill_null(records.column("in_controlled_shutdown").filter(on_broker), False), bool)
    cfg = heap.zeros((n, 5), np.int64)
    raw = np.flatnonzero((kind == REG_CHANGE) | (kind == ZK_MIGRATION))
    if len(raw):
        col = records.column("data_json")  # a few rows: ChunkedArray.take would first join every chunk
        texts = [col[int(i)].as_py() for i in raw] if len(raw) < 4096 else col.take(pa.array(raw)).to_pylist()
        for i, text in zip(raw, texts):
            d = json.loads(text) if text else {}
            if kind[i] == REG_CHANGE:
                bints[i, 3] = d.get("fenced", 0)
                bints[i, 4] = d.get("inControlledShutdown", 0)
            else:
                cfg[i, 3] = 1 if d.get("zkMigrationState") in (1, 3) else 0  # (not a cfg row: left alone below)

    # configs, features and LeaderChange, on their rows only
    is_cfg = (kind == CONFIG) | (kind == FEATURE) | (kind == LEADER_CHANGE)
    crows = np.flatnonzero(is_cfg)
    on_cfg = from_numpy(is_cfg)
    ckind, ctype = kind[crows], cfg_type[crows]
    cfg_name = records.column("config_name").filter(on_cfg)
    key = np.zeros(len(crows), np.int64)
    key[to_numpy(pc.fill_null(pc.equal(cfg_name, MIN_ISR), False), bool)] = CFG_MIN_ISR
    key[to_numpy(pc.fill_null(pc.equal(cfg_name, UNCLEAN), False), bool)] = CFG_UNCLEAN
    feat = records.column("feature_name").filter(on_cfg)
    fkey = np.zeros(len(crows), np.int64)
    fkey[to_numpy(pc.fill_null(pc.equal(feat, "metadata.version"), False), bool)] = FEAT_MV
    fkey[to_numpy(pc.fill_null(pc.equal(feat, "eligible.leader.replicas.version"), False), bool)] = FEAT_ELR
    cfg[crows, 0] = np.where(ckind == FEATURE, fkey, key)
    cfg[crows, 1] = ctype
    bres, bres_names = _dense(pc.if_else(from_numpy(ctype == BROKER_RESOURCE), res_name.filter(on_cfg).combine_chunks(),
                                         pa.scalar(None, pa.string())))
    cfg[crows, 2] = np.where(ctype == TOPIC_RESOURCE, name[crows], bres)
    vidx, values = _dense(records.column("config_value").filter(on_cfg))
    mins = np.array([min_isr_value(t) for t in values] or [1], np.int64)
    value_min = np.where(vidx >= 0, mins[np.maximum(vidx, 0)], MISSING)
    levels = column_ints(records.column("feature_level").filter(on_cfg), 0)
    leaders = column_ints(records.column("leader_id").filter(on_cfg), -1)  # LeaderChange: the new active controller
    cfg[crows, 3] = np.where(ckind == FEATURE, levels, np.where(ckind == LEADER_CHANGE, leaders, value_min))
    cfg[crows, 4] = vidx

    slot_ids = np.array([_canonical_int(s) for s in bres_names] or [0], np.int64)[:len(bres_names)]
    default = bres_names.index("") if "" in bres_names else -1
    unclean_true = np.array([t.strip().lower() == "true" for t in values] or [False], bool)
    return dict(batch=batch, snapshot=snapshot, broker=broker, bints=bints, cfg=cfg,
                broker_ids=broker_ids.astype(np.int64), broker_slot_ids=slot_ids, default_slot=default,
                unclean_true=unclean_true, values=values, n_bslots=max(len(bres_names), 1))


def with_directories(lay: Layout, records: pa.Table) -> Layout:
    """Fill the directory fields of ``lay`` (once): the ids of every row's directories as codes into one
    dictionary that also holds MIGRATING (the fold writes MIGRATING lists of its own, §1.2-4)."""
    if lay.dir_codes is not None:
        return lay
    encoded = strcodes.encode_values(_chunks(records.column("directories"))) if lay.dir_refs is not None else None
    if encoded is not None:  # each chunk's values where they lie, coded in one compiled loop (kernels/strcodes.py)
        codes, dictionary = encoded
        lay.dir_start = lay.dir_refs[:, 0].astype(np.int64)  # (the layout's own references into the joined values)
    else:
        arr = records.column("directories").combine_chunks() if records.num_rows else \
            pa.array([], pa.list_(pa.string()))
        if isinstance(arr, pa.ChunkedArray):
            arr = pa.array([], pa.list_(pa.string()))
        child = arr.values
        if len(child):
            enc = pc.dictionary_encode(child)
            codes = enc.indices.to_numpy(zero_copy_only=False).astype(np.int32)
            dictionary = enc.dictionary
        else:
            codes, dictionary = np.zeros(0, np.int32), pa.array([], pa.string())
        lay.dir_start = arr.offsets.to_numpy().astype(np.int64)[:-1]  # into the unsliced child, as .values is
    mig = pc.index(dictionary, MIGRATING).as_py()
    if mig < 0:
        dictionary = pa.concat_arrays([dictionary, pa.array([MIGRATING], pa.string())])
        mig = len(dictionary) - 1
    lay.dir_codes, lay.dir_dict, lay.dir_mig = codes, dictionary, int(mig)
    return lay
