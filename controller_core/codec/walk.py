"""Compiled batch walk: the hot loops of ``decode --summary`` and of the full decoder's batch walk.

One pass over a window of a log file (a NumPy uint8 view of its bytes) that does, for every record
batch, what :func:`controller_core.codec.logfile.walk_batches` and ``decode_window`` do for an
intact log: read the v2 header, check the CRC32C of the bytes after the crc field, check the offset
sequence, walk the record chain, read each record's framing (metadata: frameVersion, apiKey, version;
control: the control type of the key and the int16 version of the value) and step over the body
field by field as its schema declares it, so a record is counted only if the full decoder would
decode it too.

The walk never reports an error.  It answers "this window is regular" -- and then its counts and
positions equal the full decoder's -- or "something here is irregular" (bad CRC, truncated or
impossible batch, compressed batch, broken offset sequence, record framing KRaft does not write,
unknown type or version, a body that does not parse, a non-ASCII string) together with the kind and
byte position of the first irregularity.  The caller then hands the whole window to the Python path,
so every quarantine entry and error message stays exactly what that path prints.  The checks are
deliberately stricter than the Python path's (e.g. strings must be ASCII instead of UTF-8): a false
"irregular" only costs speed, a false "regular" would change output.

The full decoder (``logfile.py``) uses two of the pieces on their own: :func:`intact_run` (the run of
batches whose headers chain and whose magic and CRC32C are right) and :func:`record_chains` (where
each record of those batches starts and ends); its diagnostics stay in Python.

Everything here is ``@njit(cache=True, nogil=True)`` over integers and arrays only; with
``NUMBA_DISABLE_JIT=1`` the same functions run as plain Python (slowly), which is how a test keeps
the logic debuggable.  CRC32C uses the CPU's SSE4.2 ``crc32`` instruction when the host has it and a
slicing-by-8 table otherwise (both give the ``crc32c`` package's result).  Measurements behind the
shape of the code: benchmarks/README.md.
"""
from __future__ import annotations

import platform
from dataclasses import dataclass

import numpy as np
from numba import njit, types
from numba.core import config
from numba.core.extending import intrinsic

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)
from controller_core.codec.wordcopy import load_u64le
from controller_core.records import BY_API_KEY, BY_CONTROL_TYPE

# The functions the kernels call, record by record.  ``_nrt=False``: they take arrays but never
# allocate, and without it numba increments and decrements each array argument's reference count
# (atomic instructions) on every call -- measured at about 13 ns per array per call, more than the
# walk of a whole heartbeat record.  ``cache=True``: a second process loads them instead of compiling.
helper = njit(cache=True, nogil=True, _nrt=False)

# Batch layout (see controller_core/codec/batch.py); repeated as plain ints so the kernels see constants.
HEADER_SIZE = 61
LOG_OVERHEAD = 12
CRC_START = 21
MAX_BATCH_BYTES = 1 << 30  # as logfile.MAX_BATCH_BYTES: larger declared lengths are garbage
CONTROL_CODE_BASE = 100  # as logfile.CONTROL_CODE_BASE: control record types get codes 100 + type
N_CODES = CONTROL_CODE_BASE + 64
N_VERSIONS = 64

# Why a window was not taken (the first irregularity found); OK means the walk reached its end.
OK = 0
BAD_MAGIC = 1
BAD_LENGTH = 2
TRUNCATED = 3
CRC = 4
COMPRESSED = 5
OFFSET_SEQUENCE = 6
RECORD_FRAMING = 7
UNKNOWN_TYPE = 8
BODY = 9
RECORD_COUNT = 10
STATUS_NAMES = ("ok", "bad magic", "bad length", "truncated", "crc mismatch", "compressed", "offset sequence",
                "record framing", "unknown type or version", "body", "record count")

# Columns of the per-batch output (int64 each).
B_POS, B_BASE_OFFSET, B_LENGTH, B_EPOCH, B_CRC, B_ATTRS, B_LAST_DELTA, B_TIMESTAMP, B_COUNT = range(9)
B_COLUMNS = 9
# Columns of the per-record output (int64 each).
R_POS, R_OFFSET, R_CODE, R_VERSION, R_VALUE_POS, R_VALUE_LEN, R_BATCH, R_TS_DELTA = range(8)
R_COLUMNS = 8


# ------------------------------------------------------------------------------------------- CRC32C
def _crc_tables() -> np.ndarray:
    """Slicing-by-8 tables of the reflected Castagnoli polynomial: T[k][b] is the CRC of byte b
    followed by k zero bytes, so eight table look-ups advance the CRC by eight bytes."""
    t = np.zeros((8, 256), np.int64)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        t[0, b] = c
    for k in range(1, 8):
        for b in range(256):
            prev = int(t[k - 1, b])
            t[k, b] = (prev >> 8) ^ int(t[0, prev & 0xFF])
    return t


CRC_TABLES = _crc_tables()


def _host_has_sse42() -> bool:
    if config.DISABLE_JIT or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        from llvmlite import binding as llvm

        return bool(llvm.get_host_cpu_features().get("sse4.2", False))
    except Exception:  # an llvmlite that cannot tell: the table is always correct
        return False


HAS_SSE42 = _host_has_sse42()


@helper
def crc32c_table(a, start, end):
    """CRC32C of a[start:end], slicing-by-8 (any CPU, and plain Python under NUMBA_DISABLE_JIT)."""
    t = CRC_TABLES
    c = np.int64(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        one = c ^ (np.int64(a[i]) | (np.int64(a[i + 1]) << 8) | (np.int64(a[i + 2]) << 16)
                   | (np.int64(a[i + 3]) << 24))
        c = (t[7, one & 0xFF] ^ t[6, (one >> 8) & 0xFF] ^ t[5, (one >> 16) & 0xFF] ^ t[4, (one >> 24) & 0xFF]
             ^ t[3, a[i + 4]] ^ t[2, a[i + 5]] ^ t[1, a[i + 6]] ^ t[0, a[i + 7]])
        i += 8
    while i < end:
        c = (c >> 8) ^ t[0, (c ^ np.int64(a[i])) & 0xFF]
        i += 1
    return c ^ 0xFFFFFFFF


@intrinsic
def _sse42_crc64(typingctx, crc, word):
    """The SSE4.2 ``crc32`` instruction on 8 bytes.  On a host without SSE4.2 it lowers to a stub that
    is never called (HAS_SSE42 is false there), so the module still compiles everywhere."""
    sig = types.uint64(types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        if not HAS_SSE42:
            return args[0]
        from llvmlite import ir

        i64 = ir.IntType(64)
        fn = builder.module.declare_intrinsic("llvm.x86.sse42.crc32.64.64", fnty=ir.FunctionType(i64, [i64, i64]))
        return builder.call(fn, args)

    return sig, codegen


@intrinsic
def _sse42_crc8(typingctx, crc, byte):
    """The SSE4.2 ``crc32`` instruction on one byte (the tail of a buffer)."""
    sig = types.uint32(types.uint32, types.uint8)

    def codegen(context, builder, signature, args):
        if not HAS_SSE42:
            return args[0]
        from llvmlite import ir

        i32, i8 = ir.IntType(32), ir.IntType(8)
        fn = builder.module.declare_intrinsic("llvm.x86.sse42.crc32.32.8", fnty=ir.FunctionType(i32, [i32, i8]))
        return builder.call(fn, args)

    return sig, codegen


@helper
def crc32c_hw(a, start, end):
    """CRC32C of a[start:end] with the CPU's crc32 instruction (only call when HAS_SSE42)."""
    c = np.uint64(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        c = _sse42_crc64(c, load_u64le(a, i))
        i += 8
    c32 = np.uint32(c)
    while i < end:
        c32 = _sse42_crc8(c32, a[i])
        i += 1
    return np.int64(c32 ^ np.uint32(0xFFFFFFFF))


@njit(cache=True, nogil=True)
def first_bad_crc(a, bpos, n):
    """Index of the first of the batches at ``bpos[:n]`` whose stored CRC32C (header byte 17) does not
    match the bytes after it, or -1 (only call when HAS_SSE42).

    The CRCs of four batches are computed together: a small batch's CRC is a chain of dependent crc32
    instructions (3 cycles each), four independent chains keep the CPU's crc32 unit busy.  Measured on
    a log of one-record batches: 25 ns -> ~8 ns per batch."""
    state = np.empty(4, np.uint64)
    start = np.empty(4, np.int64)
    stop = np.empty(4, np.int64)
    k = 0
    while k < n:
        g = min(4, n - k)
        words = np.int64(1) << 40
        for j in range(g):
            p = bpos[k + j]
            start[j] = p + CRC_START
            stop[j] = p + LOG_OVERHEAD + _be32(a, p + 8)
            state[j] = np.uint64(0xFFFFFFFF)
            words = min(words, (stop[j] - start[j]) // 8)
        if g == 4:
            c0, c1, c2, c3 = state[0], state[1], state[2], state[3]
            s0, s1, s2, s3 = start[0], start[1], start[2], start[3]
            for w in range(words):
                o = 8 * w
                c0 = _sse42_crc64(c0, load_u64le(a, s0 + o))
                c1 = _sse42_crc64(c1, load_u64le(a, s1 + o))
                c2 = _sse42_crc64(c2, load_u64le(a, s2 + o))
                c3 = _sse42_crc64(c3, load_u64le(a, s3 + o))
            state[0], state[1], state[2], state[3] = c0, c1, c2, c3
            for j in range(4):
                start[j] += 8 * words
        for j in range(g):  # the rest of each batch on its own
            c = state[j]
            i = start[j]
            while i + 8 <= stop[j]:
                c = _sse42_crc64(c, load_u64le(a, i))
                i += 8
            c32 = np.uint32(c)
            while i < stop[j]:
                c32 = _sse42_crc8(c32, a[i])
                i += 1
            if np.int64(c32 ^ np.uint32(0xFFFFFFFF)) != (_be32(a, bpos[k + j] + 17) & 0xFFFFFFFF):
                return k + j
        k += g
    return -1


@helper
def crc32c(a, start, end, hw):
    if hw:
        return crc32c_hw(a, start, end)
    return crc32c_table(a, start, end)


def crc32c_of(data, hw: bool | None = None) -> int:
    """CRC32C of a bytes-like object (the same value as the ``crc32c`` package)."""
    a = np.frombuffer(data, np.uint8)
    return int(crc32c(a, 0, len(a), HAS_SSE42 if hw is None else (hw and HAS_SSE42)))


# ------------------------------------------------------------------------------ fixed-width reads
@helper
def _be16(a, p):
    v = (np.int64(a[p]) << 8) | np.int64(a[p + 1])
    return v - 0x10000 if v >= 0x8000 else v


@helper
def _be32(a, p):
    v = (np.int64(a[p]) << 24) | (np.int64(a[p + 1]) << 16) | (np.int64(a[p + 2]) << 8) | np.int64(a[p + 3])
    return v - 0x100000000 if v >= 0x80000000 else v


@helper
def _be64(a, p):
    hi = _be32(a, p)
    lo = _be32(a, p + 4) & 0xFFFFFFFF
    return (hi << 32) | lo


@helper
def _uvarint(a, p, limit, max_bytes):
    """(value, next position); next position -1 if the varint runs past ``limit`` or is longer than
    ``max_bytes`` (Kafka writes at most 5 bytes for an int, 10 for a long).  Values of 10-byte
    varlongs wrap in int64 like Kafka's long."""
    if p < limit and a[p] < 0x80:  # nearly every varint of a metadata log is one byte
        return np.int64(a[p]), np.int64(p + 1)
    # A while loop bounded by the stop position: a ``for i in range(max_bytes)`` loop with early
    # returns compiled ~10x slower here for max_bytes=10 (measured), even on one-byte varints.
    v = np.int64(0)
    shift = np.int64(0)
    i = p
    stop = min(limit, p + max_bytes)
    while i < stop:
        b = np.int64(a[i])
        v |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return v, i
        shift += 7
    return np.int64(0), np.int64(-1)


@helper
def _zigzag(v):
    return (v >> 1) ^ -(v & 1) if v >= 0 else ((v >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(v & 1)


# -------------------------------------------------------------------------------------- batch walk
@helper
def _walk_batches(a, end, at_eof, prev_last, has_prev, check_crc, bpos, bout, want):
    """The batch headers (and, if ``check_crc``, each batch's CRC): (batches, stop position, status,
    position of the irregularity or -1, last offset); the position of every batch into ``bpos``, and
    with ``want`` one row per batch into ``bout`` (B_* columns).

    ``prev_last`` is the last offset before the window (checked only if ``has_prev``); when the window
    is not the file's last (``at_eof`` false), a batch running past ``end`` ends the walk there, as the
    next window starts at it."""
    pos = np.int64(0)
    n = 0
    last = np.int64(prev_last)
    have = has_prev
    while True:
        rem = end - pos
        if rem == 0:
            return n, pos, OK, -1, last
        if rem < HEADER_SIZE:
            if at_eof:
                return n, pos, TRUNCATED, pos, last
            return n, pos, OK, -1, last
        blen = _be32(a, pos + 8)
        if a[pos + 16] != 2:
            return n, pos, BAD_MAGIC, pos, last
        if blen < HEADER_SIZE - LOG_OVERHEAD or blen > MAX_BATCH_BYTES:
            return n, pos, BAD_LENGTH, pos, last
        size = blen + LOG_OVERHEAD
        if size > rem:
            if at_eof:
                return n, pos, TRUNCATED, pos, last
            return n, pos, OK, -1, last
        stored = _be32(a, pos + 17) & 0xFFFFFFFF
        if check_crc and crc32c_table(a, pos + CRC_START, pos + size) != stored:
            return n, pos, CRC, pos, last
        attrs = _be16(a, pos + 21)
        if attrs & 0x07:
            return n, pos, COMPRESSED, pos, last
        base = _be64(a, pos)
        if have and base != last + 1:  # the full path decides from the neighbours; not ours to judge
            return n, pos, OFFSET_SEQUENCE, pos, last
        count = _be32(a, pos + 57)
        if count <= 0:
            return n, pos, RECORD_COUNT, pos, last
        last_delta = _be32(a, pos + 23)
        bpos[n] = pos
        if want:
            bout[n, B_POS] = pos
            bout[n, B_BASE_OFFSET] = base
            bout[n, B_LENGTH] = blen
            bout[n, B_EPOCH] = _be32(a, pos + 12)
            bout[n, B_CRC] = stored
            bout[n, B_ATTRS] = attrs
            bout[n, B_LAST_DELTA] = last_delta
            bout[n, B_TIMESTAMP] = _be64(a, pos + 27)
            bout[n, B_COUNT] = count
        last = base + last_delta
        have = True
        n += 1
        pos += size


@njit(cache=True, nogil=True)
def walk_window(a, end, at_eof, prev_last, has_prev, hw, prog, counts, bpos, bout, rout, want):
    """Walk the batches of a[0:end] as ``logfile.walk_batches`` + ``check_offsets`` + ``decode_window``
    would accept them: first every batch header (their positions into ``bpos``, end // HEADER_SIZE + 1
    long), then the CRCs (``hw``: four batches at a time with the crc32 instruction; else by table in
    the header loop), then the records of those batches (the headers are read again from the bytes,
    still in cache), which must fill each batch exactly.  Adds one to ``counts[type code]`` per record;
    with ``want`` also writes one row per batch into ``bout`` (B_* columns, as long as ``bpos``) and
    per record into ``rout`` (R_* columns).  Returns (batches, records, stop position, status, position of the
    first irregularity or -1, last offset); after an irregularity the counts are partial (the caller
    hands the window to the full decoder).

    The record loop is written out here rather than in a function called per batch: numba's call of a
    function taking several arrays cost ~50 ns (measured), as much as the walk of a one-record batch.
    """
    n, stop, status, at, last = _walk_batches(a, end, at_eof, prev_last, has_prev, not hw, bpos, bout, want)
    if hw:
        bad = first_bad_crc(a, bpos, n)
        if bad >= 0:
            return bad, 0, bpos[bad], CRC, bpos[bad], last
    nrec = 0
    bend = np.int64(0)
    for i in range(n):
        bstart = bend
        bend = bstart + LOG_OVERHEAD + _be32(a, bstart + 8)
        ctl = (a[bstart + 22] & 0x20) != 0
        base = _be64(a, bstart)
        p = bstart + HEADER_SIZE
        count = _be32(a, bstart + 57)
        # what the full decoder checks each record against (offsetDelta inside the batch, timestamp in
        # [baseTimestamp, maxTimestamp]): regular only as KRaft writes it, offsetDelta = the record's
        # index and timestampDelta 0; anything else goes to the full decoder
        if count != _be32(a, bstart + 23) + 1:
            return i, nrec, bstart, RECORD_COUNT, bstart, last
        odd = np.int64(0)
        for k in range(count):
            rpos = p
            code = np.int64(-1)
            if not ctl:  # the common shape first, without the chain of varint reads
                code, version, vpos, vlen, off_delta, ts_delta, rend = _plain_record(a, p, bend, prog)
            if code < 0:
                ln, q = _uvarint(a, p, bend, 5)
                if q < 0:
                    return i, nrec, bstart, RECORD_FRAMING, rpos, last
                ln = _zigzag(ln)
                if ln < 1 or q + ln > bend:
                    return i, nrec, bstart, RECORD_FRAMING, rpos, last
                rend = q + ln
                st, code, version, vpos, vlen, off_delta, ts_delta = _record(a, q + 1, rend, ctl, prog)
                if st != OK:
                    return i, nrec, bstart, st, rpos, last
            odd |= (off_delta ^ k) | ts_delta  # no branch per record: judged once per batch
            if want:
                rout[nrec, R_POS] = rpos
                rout[nrec, R_OFFSET] = base + off_delta
                rout[nrec, R_CODE] = code
                rout[nrec, R_VERSION] = version
                rout[nrec, R_VALUE_POS] = vpos
                rout[nrec, R_VALUE_LEN] = vlen
                rout[nrec, R_BATCH] = i
                rout[nrec, R_TS_DELTA] = ts_delta
            counts[code] += 1
            nrec += 1
            p = rend
        if p != bend:
            return i, nrec, bstart, RECORD_FRAMING, bstart, last
        if odd != 0:  # an offsetDelta that is not the record's index, or a timestamp not the batch's
            return i, nrec, bstart, RECORD_FRAMING, bstart, last
    return n, nrec, stop, status, at, last


@helper
def _plain_record(a, p, bend, prog):
    """A metadata record whose framing varints are all one byte (length, timestampDelta, offsetDelta,
    valueLength, apiKey, version), with a null key and no headers -- nearly every record KRaft writes.
    Their places are then known, so they are read at once instead of one after the other.  Returns
    (type code, version, value position, value length, offset delta, timestamp delta, record end), or
    a type code of -1 when the record has another shape or anything fails: the general path then
    reads it again and names the irregularity."""
    m = np.int64(-1)
    if p + 10 > bend:
        return m, m, m, m, m, m, m
    ln, ts, off, key, vl = np.int64(a[p]), np.int64(a[p + 2]), np.int64(a[p + 3]), a[p + 4], np.int64(a[p + 5])
    if (ln | ts | off | vl) >= 0x80 or key != 1:  # key 1 = zigzag(-1): null
        return m, m, m, m, m, m, m
    rend = p + 1 + (ln >> 1)
    vpos = p + 6
    vlen = vl >> 1
    vend = vpos + vlen
    if (ln & 1) or (vl & 1) or vlen < 3 or rend > bend or vend + 1 != rend or a[vend] != 0:
        return m, m, m, m, m, m, m
    code, version = np.int64(a[vpos + 1]), np.int64(a[vpos + 2])
    if a[vpos] != 1 or code >= CONTROL_CODE_BASE or version >= N_VERSIONS:
        return m, m, m, m, m, m, m
    pc = prog[code * N_VERSIONS + version]
    body = vpos + 3
    if pc < 0:
        return m, m, m, m, m, m, m
    empty = prog[pc] == OP_TAGS and prog[pc + 1] == 0 and prog[pc + 2] == OP_RET
    if not (empty and body + 1 == vend and a[body] == 0) and skip_struct(a, body, vend, prog, pc) != vend:
        return m, m, m, m, m, m, m
    return code, version, vpos, vlen, _zigzag(off), _zigzag(ts), rend


@njit(cache=True, nogil=True)
def chain_points(a, target, out):
    """Batch-boundary positions about ``target`` bytes apart along the header chain of a whole file ``a``
    (``logfile.split_points``): the first boundary at or past ``target``, then at or past that one plus
    ``target``, ... , never the file's end; the chain stops at a header that declares an impossible length.
    Reads only each batch's length field.  Writes into ``out`` (at most its length) and returns the count."""
    size = len(a)
    pos = 0
    nxt = target
    m = 0
    while pos + LOG_OVERHEAD <= size and m < len(out):
        blen = _be32(a, pos + 8)
        if blen < HEADER_SIZE - LOG_OVERHEAD or blen > MAX_BATCH_BYTES:
            break
        pos += blen + LOG_OVERHEAD
        if pos >= nxt and pos < size:
            out[m] = pos
            m += 1
            nxt = pos + target
    return m


@njit(cache=True, nogil=True)
def intact_run(a, pos, end, hw, out):
    """The run of intact batches of a[0:end] starting at ``pos``, as ``logfile._fast_chain`` defines
    it for the full decoder: batches follow each other while each header fits and declares a sane
    length that ends by ``end``; the run stops before the first of them whose magic byte or CRC32C is
    wrong.  Writes the batch positions into ``out`` (at most its length) and returns (count, where the
    run stops: the bad batch, or the end of the chain or of ``out``)."""
    m = 0
    while pos + HEADER_SIZE <= end and m < len(out):  # at most len(out) batches: the caller goes on after them
        blen = _be32(a, pos + 8)
        nxt = pos + LOG_OVERHEAD + blen
        if blen < HEADER_SIZE - LOG_OVERHEAD or nxt > end or blen > MAX_BATCH_BYTES:
            break
        out[m] = pos
        m += 1
        pos = nxt
    first = m  # the first batch of the chain with a wrong magic byte or CRC
    for j in range(m):
        p = out[j]
        if a[p + 16] != 2 or (not hw and crc32c_table(a, p + CRC_START, p + LOG_OVERHEAD + _be32(a, p + 8))
                              != (_be32(a, p + 17) & 0xFFFFFFFF)):
            first = j
            break
    if hw:
        bad = first_bad_crc(a, out, first)
        if bad >= 0:
            first = bad
    return first, (pos if first == m else out[first])


@njit(cache=True, nogil=True)
def record_chains(a, bpos, bend, count, broken, rstart, rbody, rend, rown):
    """The record chains of the batches at ``bpos`` (ending at ``bend``, holding ``count`` records), as
    ``logfile._record_positions`` defines them for the full decoder: from the end of the header, each
    record is a length varint and that many bytes, and the records must fill the batch exactly.  A
    batch whose chain breaks is marked in ``broken`` (batches already marked are skipped).  Writes each
    record of the other batches, in file order: its start, the start of its body (after the length),
    its end and the index of its batch among the unbroken ones; returns how many."""
    nrec = 0
    kept = 0
    for i in range(len(bpos)):
        if broken[i]:
            continue
        first = nrec
        p = bpos[i] + HEADER_SIZE
        end = bend[i]
        for _ in range(count[i]):
            if p >= end:
                broken[i] = True
                break
            ln, q = _uvarint(a, p, end, 5)
            e = q + _zigzag(ln)
            if q < 0 or e < q or e > end:
                broken[i] = True
                break
            rstart[nrec] = p
            rbody[nrec] = q
            rend[nrec] = e
            rown[nrec] = kept
            nrec += 1
            p = e
        if not broken[i] and p != end:
            broken[i] = True
        if broken[i]:
            nrec = first
        else:
            kept += 1
    return nrec


# ------------------------------------------------------------------------------- body programs
# A message body is checked by a small program derived from its schema declaration, one program per
# (record type, version), all in one int32 array.  A struct is a run of field ops ending in OP_TAGS
# (its tagged-field section) and OP_RET; a tagged field's value is a run of one field op and OP_RET.
OP_RET, OP_FIXED, OP_STRING, OP_BYTES, OP_ARRAY_FIXED, OP_ARRAY_STRING, OP_ARRAY_BYTES, OP_ARRAY_STRUCT, \
    OP_STRUCT, OP_TAGS = range(10)
_WIDTH = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "bool": 1,
          "uuid": 16}


class _ProgramBuilder:
    def __init__(self):
        self.code: list[int] = []

    def struct(self, fields, version: int) -> int:
        """Emit the program of a struct at ``version`` (its nested parts first); returns its start."""
        ops: list[int] = []
        tags: list[tuple[int, int]] = []
        for f in fields:
            if not f.present_in(version):
                continue
            if f.is_tagged_in(version):
                tags.append((f.tag, self.value(f, version)))
            else:
                ops += self._field_ops(f, version)
        start = len(self.code)
        self.code += ops
        self.code += [OP_TAGS, len(tags)]
        for tag, pc in sorted(tags):
            self.code += [tag, pc]
        self.code.append(OP_RET)
        return start

    def value(self, f, version: int) -> int:
        ops = self._field_ops(f, version)
        start = len(self.code)
        self.code += ops + [OP_RET]
        return start

    def _field_ops(self, f, version: int) -> list[int]:
        nullable = int(f.is_nullable_in(version))
        et = f.element_type
        if f.is_struct:
            sub = self.struct(f.fields, version)
            return [OP_ARRAY_STRUCT, nullable, sub] if f.is_array else [OP_STRUCT, sub]
        if f.is_array:
            if et == "string":
                return [OP_ARRAY_STRING, nullable]
            if et == "bytes":
                return [OP_ARRAY_BYTES, nullable]
            return [OP_ARRAY_FIXED, nullable, _WIDTH[et]]
        if et == "string":
            return [OP_STRING, nullable]
        if et == "bytes":
            return [OP_BYTES, nullable]
        return [OP_FIXED, _WIDTH[et]]


def _programs() -> np.ndarray:
    """One int32 array: the program start of every [type code, version] (-1 = not a known type and
    version, irregular to the walk) at code * N_VERSIONS + version, then the programs.  One array, as
    every array argument adds to the cost of a call in the hot loop."""
    pb = _ProgramBuilder()
    pb.code = [-1] * (N_CODES * N_VERSIONS)
    table = pb.code
    defs = [(k, r) for k, r in BY_API_KEY.items()] + [(CONTROL_CODE_BASE + k, r) for k, r in BY_CONTROL_TYPE.items()]
    for code, rdef in defs:
        if not 0 <= code < N_CODES or (not rdef.is_control and code >= CONTROL_CODE_BASE):
            continue  # an apiKey >= 100 would collide with the control codes: irregular to the walk
        for v in range(N_VERSIONS):
            if v in rdef.valid_versions:
                table[code * N_VERSIONS + v] = pb.struct(rdef.fields, v)
    return np.array(pb.code, np.int32)


PROGRAMS = _programs()


@helper
def _compact_len(a, p, limit, nullable):
    """A compact length (uvarint N+1; 0 = null) that must fit before ``limit``: (length or -1 for
    null, next position or -1 when irregular)."""
    v, q = _uvarint(a, p, limit, 5)
    if q < 0:
        return np.int64(0), np.int64(-1)
    n = v - 1
    if n < 0:
        if nullable:
            return np.int64(-1), q
        return np.int64(0), np.int64(-1)
    if n > limit - q:
        return np.int64(0), np.int64(-1)
    return n, q


@helper
def _ascii(a, p, n):
    for i in range(p, p + n):
        if a[i] >= 0x80:
            return False
    return True


@helper
def skip_struct(a, p, limit, prog, pc):
    """Step over one struct (or tagged value) whose program starts at ``pc``; returns the position
    after it, or -1 if it does not parse as the full decoder would accept it."""
    while True:
        op = prog[pc]
        if op == OP_RET:
            return p
        if op == OP_FIXED:
            p += prog[pc + 1]
            if p > limit:
                return np.int64(-1)
            pc += 2
        elif op == OP_STRING or op == OP_BYTES:
            n, p = _compact_len(a, p, limit, prog[pc + 1] != 0)
            if p < 0:
                return np.int64(-1)
            if n > 0:
                if op == OP_STRING and not _ascii(a, p, n):  # UTF-8 beyond ASCII: left to the full path
                    return np.int64(-1)
                p += n
            pc += 2
        elif op == OP_ARRAY_FIXED:
            n, p = _compact_len(a, p, limit, prog[pc + 1] != 0)
            if p < 0:
                return np.int64(-1)
            if n > 0:
                p += n * prog[pc + 2]
                if p > limit:
                    return np.int64(-1)
            pc += 3
        elif op == OP_ARRAY_STRING or op == OP_ARRAY_BYTES:
            n, p = _compact_len(a, p, limit, prog[pc + 1] != 0)
            if p < 0:
                return np.int64(-1)
            for _ in range(max(n, 0)):
                m, p = _compact_len(a, p, limit, False)
                if p < 0:
                    return np.int64(-1)
                if op == OP_ARRAY_STRING and not _ascii(a, p, m):
                    return np.int64(-1)
                p += m
            pc += 2
        elif op == OP_ARRAY_STRUCT:
            n, p = _compact_len(a, p, limit, prog[pc + 1] != 0)
            if p < 0:
                return np.int64(-1)
            for _ in range(max(n, 0)):
                p = skip_struct(a, p, limit, prog, prog[pc + 2])
                if p < 0:
                    return np.int64(-1)
            pc += 3
        elif op == OP_STRUCT:
            p = skip_struct(a, p, limit, prog, prog[pc + 1])
            if p < 0:
                return np.int64(-1)
            pc += 2
        elif op == OP_TAGS:
            # count, then (tag, size, value) in increasing tag order; a known tag's value must fill its
            # size exactly, unknown tags are skipped (as the decoders do)
            ntags, p = _uvarint(a, p, limit, 5)
            if p < 0:
                return np.int64(-1)
            last = np.int64(-1)
            known = prog[pc + 1]
            for _ in range(ntags):
                tag, p = _uvarint(a, p, limit, 5)
                if p < 0:
                    return np.int64(-1)
                size, p = _uvarint(a, p, limit, 5)
                if p < 0 or tag <= last or size > limit - p:
                    return np.int64(-1)
                last = tag
                for k in range(known):
                    if prog[pc + 2 + 2 * k] == tag:
                        if skip_struct(a, p, p + size, prog, prog[pc + 3 + 2 * k]) != p + size:
                            return np.int64(-1)
                p += size
            pc += 2 + 2 * known
        else:
            return np.int64(-1)


# ------------------------------------------------------------------------------------- record walk
@helper
def _record(a, p, rend, ctl, prog):
    """One record after its length and attributes byte: timestampDelta, offsetDelta, key, value, no
    headers, then the value's type, version and body.  Returns (status, type code, version, value
    position, value length, offset delta, timestamp delta)."""
    z = np.int64(0)
    ts, p = _uvarint(a, p, rend, 10)
    if p < 0:
        return RECORD_FRAMING, z, z, z, z, z, z
    off, p = _uvarint(a, p, rend, 5)
    if p < 0:
        return RECORD_FRAMING, z, z, z, z, z, z
    klen, p = _uvarint(a, p, rend, 5)
    if p < 0:
        return RECORD_FRAMING, z, z, z, z, z, z
    klen = _zigzag(klen)
    kpos = p
    if klen < -1 or klen > rend - p:
        return RECORD_FRAMING, z, z, z, z, z, z
    p += max(klen, 0)
    vlen, p = _uvarint(a, p, rend, 5)
    if p < 0:
        return RECORD_FRAMING, z, z, z, z, z, z
    vlen = _zigzag(vlen)
    vpos = p
    if vlen < 0 or vlen > rend - p:
        return RECORD_FRAMING, z, z, z, z, z, z
    p += vlen
    nh, p = _uvarint(a, p, rend, 5)
    if p != rend or nh != 0:  # headers are never written in metadata logs
        return RECORD_FRAMING, z, z, z, z, z, z
    vend = vpos + vlen
    if ctl:
        if klen != 4 or vlen < 2:
            return RECORD_FRAMING, z, z, z, z, z, z
        code = CONTROL_CODE_BASE + _be16(a, kpos + 2)
        version = _be16(a, vpos)
        body = vpos
        if code < CONTROL_CODE_BASE:
            return UNKNOWN_TYPE, z, z, z, z, z, z
    else:
        frame, q = _uvarint(a, vpos, vend, 5)
        if q < 0 or frame != 1:
            return RECORD_FRAMING, z, z, z, z, z, z
        code, q = _uvarint(a, q, vend, 5)
        if q < 0:
            return RECORD_FRAMING, z, z, z, z, z, z
        version, q = _uvarint(a, q, vend, 5)
        if q < 0:
            return RECORD_FRAMING, z, z, z, z, z, z
        body = q
        if code >= CONTROL_CODE_BASE:  # would collide with the control codes
            return UNKNOWN_TYPE, z, z, z, z, z, z
    if code >= N_CODES or version < 0 or version >= N_VERSIONS:
        return UNKNOWN_TYPE, z, z, z, z, z, z
    pc = prog[code * N_VERSIONS + version]
    if pc < 0:
        return UNKNOWN_TYPE, z, z, z, z, z, z
    # A body of no fields and no tagged fields (NoOp, the heartbeat that fills real logs) is checked
    # here; a call of the interpreter costs more than the rest of the record.
    empty = prog[pc] == OP_TAGS and prog[pc + 1] == 0 and prog[pc + 2] == OP_RET
    if not (empty and body + 1 == vend and a[body] == 0) and skip_struct(a, body, vend, prog, pc) != vend:
        return BODY, z, z, z, z, z, z
    return OK, code, version, vpos, vlen, _zigzag(off), _zigzag(ts)


# --------------------------------------------------------------------------------- Python surface
@dataclass
class Walk:
    """What the walk found in a window: the batches and records it took, and whether it took all."""

    status: int  # OK, or the kind of the first irregularity
    irregular_at: int  # byte position of that irregularity in the window, or -1
    stop: int  # where the next window starts (the window's end when at EOF)
    last_offset: int  # last offset of the batches taken (prev_last if none)
    batches: int
    batch_rows: np.ndarray | None  # (batches, B_COLUMNS) int64, when asked for
    records: int
    counts: np.ndarray  # records per type code
    record_rows: np.ndarray | None  # (records, R_COLUMNS) int64, when asked for

    @property
    def regular(self) -> bool:
        return self.status == OK


MIN_RECORD_BYTES = 10  # length, attributes, timestampDelta, offsetDelta, key, value (>= 4), headers


def walk(buf, at_eof: bool = True, prev_last: int | None = None, records: bool = False,
         hw: bool | None = None, scratch: np.ndarray | None = None) -> Walk:
    """Run the compiled walk over one window of a file (bytes-like or uint8 array).  ``scratch`` (int64,
    reused across windows if long enough) holds the batch positions."""
    a = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    end = len(a)
    hw = HAS_SSE42 if hw is None else (hw and HAS_SSE42)
    rows = end // HEADER_SIZE + 1
    bpos = scratch if scratch is not None and len(scratch) >= rows else np.empty(rows, np.int64)
    # per-batch and per-record rows only when asked for: a summary writes nothing but the counts
    bout = np.empty((end // HEADER_SIZE + 1 if records else 0, B_COLUMNS), np.int64)
    rout = np.empty((end // MIN_RECORD_BYTES + 1 if records else 0, R_COLUMNS), np.int64)
    counts = np.zeros(N_CODES, np.int64)
    has_prev = prev_last is not None
    n, nrec, stop, status, at, last = walk_window(a, end, at_eof, prev_last if has_prev else 0, has_prev, hw,
                                                  PROGRAMS, counts, bpos, bout, rout, records)
    return Walk(int(status), int(at), int(stop), int(last) if (has_prev or n) else -1, int(n),
                bout[:n] if records else None, int(nrec), counts, rout[:nrec] if records else None)


@dataclass
class WindowSummary:
    """Batches, records and records per type code of a window the walk took whole."""

    batches: int
    records: int
    counts: np.ndarray


class SummaryWalk:
    """The ``fast`` reader of :func:`controller_core.codec.logfile.iter_chunks` for ``decode --summary``:
    a regular window becomes a :class:`WindowSummary`; any other window is left to the full decoder
    (``fallbacks`` counts them by the kind of their first irregularity, e.g. "compressed")."""

    def __init__(self, hw: bool | None = None):
        self.hw = HAS_SSE42 if hw is None else (hw and HAS_SSE42)
        self.fallbacks: dict[str, int] = {}
        self.windows = 0
        self._positions = np.empty(0, np.int64)

    def __call__(self, buf, at_eof: bool, prev_last: int | None):
        if len(self._positions) < len(buf) // HEADER_SIZE + 1:  # reused: no fresh pages per window
            self._positions = np.empty(len(buf) // HEADER_SIZE + 1, np.int64)
        w = walk(buf, at_eof, prev_last, hw=self.hw, scratch=self._positions)
        if not w.regular or w.batches == 0:
            name = STATUS_NAMES[w.status] if not w.regular else "no batch"
            self.fallbacks[name] = self.fallbacks.get(name, 0) + 1
            return None
        self.windows += 1
        return WindowSummary(w.batches, w.records, w.counts), w.stop, w.last_offset
