"""Decode metadata log files (segments, snapshots, bootstrap.checkpoint) in bounded memory.

A file is read in windows of ``chunk_bytes``; each window's complete batches are verified (CRC32C)
and decoded with the vectorized decoder into a :class:`DecodedChunk`.  Bad bytes never stop the walk:
a batch that fails its checks becomes a :class:`Quarantine` entry naming the file and byte position,
the walk resynchronises on the next valid batch header, and the valid batches before and after are
decoded as usual.  Records that are malformed inside an intact batch are quarantined one by one.
"""
from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import struct
import sys
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

from controller_core.codec import batch as B
from controller_core.codec import errors as E
from controller_core.codec import vector as V
from controller_core.codec.arrowutil import from_numpy
from controller_core.codec.errors import DecodeError
from controller_core.records import (
    BY_API_KEY, BY_CONTROL_TYPE, UNKNOWN_CONTROL, UNKNOWN_METADATA, UNKNOWN_RECORD_TYPE, RecordDef, newest_layout,
)

_HEAD = struct.Struct(">qiib")  # baseOffset, batchLength, partitionLeaderEpoch, magic
_TAIL = struct.Struct(">IhiqqqhiI")
DEFAULT_CHUNK_BYTES = 16 << 20
MAX_BATCH_BYTES = 1 << 30  # larger declared lengths are garbage, not batches


@dataclass(frozen=True)
class Quarantine:
    """A span of a file that could not be decoded, and why."""

    file: str
    position: int
    length: int
    reason: str
    message: str

    @staticmethod
    def of(err: DecodeError, file: str) -> "Quarantine":
        return Quarantine(file, err.position, err.length, err.reason, f"{file} at byte {err.position}: {err.detail}")


@dataclass
class Group:
    """Decoded bodies of all records of one (record type, version) in a chunk."""

    rdef: RecordDef
    version: int
    rows: np.ndarray  # indices into the chunk's record arrays
    columns: dict[str, pa.Array]  # Kafka JSON key -> one value per row
    layout: int = -1  # the declared version the bodies were read with (a newer version: the newest declared)
    unknown_tagged_fields: pa.Array | None = None  # JSON text per row (null: none), None when no row has any

    def __post_init__(self):
        if self.layout < 0:
            self.layout = self.version


@dataclass
class DecodedChunk:
    file: str
    batches: int = 0
    # one entry per decoded record, in file order
    offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    timestamp: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_base_offset: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_timestamp: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    batch_leader_epoch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    is_control: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    type_code: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))  # index into type_names
    version: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))
    type_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # apiKey / control type
    groups: list[Group] = field(default_factory=list)
    quarantine: list[Quarantine] = field(default_factory=list)
    last_offset: int | None = None  # last offset of the window's batches (offset sequence check)

    def __len__(self) -> int:
        return len(self.offset)


# Dense codes for record types: metadata apiKeys as-is, control types at 100 + type.
CONTROL_CODE_BASE = 100
TYPE_NAMES: dict[int, str] = {k: r.type_name for k, r in BY_API_KEY.items()}
TYPE_NAMES.update({CONTROL_CODE_BASE + k: r.type_name for k, r in BY_CONTROL_TYPE.items()})
UNKNOWN_CODE = -1  # an apiKey or control type not declared (its number: DecodedChunk.type_id)
TYPE_NAMES[UNKNOWN_CODE] = UNKNOWN_RECORD_TYPE
# which type numbers are declared, as a table indexed by (control, type number): one gather per record (np.isin
# sorted both arrays each window)
_DECLARED = np.zeros((2, max(max(BY_API_KEY), max(BY_CONTROL_TYPE)) + 2), bool)
_DECLARED[0, sorted(BY_API_KEY)] = True
_DECLARED[1, sorted(BY_CONTROL_TYPE)] = True


def _declared(ctl: np.ndarray, type_id: np.ndarray) -> np.ndarray:
    """Whether each record's apiKey (a control record's type) is declared; any other number (negative, past the
    table) reads the table's last column, which is never declared."""
    last = _DECLARED.shape[1] - 1
    at = np.where((type_id >= 0) & (type_id < last), type_id, last)
    return _DECLARED[ctl.astype(np.intp), at]


# ------------------------------------------------------------------------------------ batch walk
def _plausible(buf, p: int, end: int) -> bool:
    """A v2 batch header with a sane length starts at p (CRC not checked)."""
    if p + B.HEADER_SIZE > end:
        return False
    _, blen, _, magic = _HEAD.unpack_from(buf, p)
    return magic == B.MAGIC_V2 and B.HEADER_SIZE - B.LOG_OVERHEAD <= blen <= MAX_BATCH_BYTES


def _find_next_batch(buf, start: int, end: int, at_eof: bool, scan_end: int | None = None) -> int:
    """Position of the next batch at or after ``start`` whose CRC verifies (or -1).

    ``scan_end``: only batches starting before it are looked for (a batch whose length is in doubt
    only needs the span it claims searched: batches never overlap).

    In a window that is not the file's last, a candidate running past the window cannot be verified
    here.  It is returned (for the next window, which starts there, to judge) only if no batch that
    does verify starts inside the span it claims: batches never overlap, so such a batch proves the
    candidate is garbage that merely has a 2 where a magic byte would be.
    """
    arr = np.frombuffer(buf, np.uint8, count=end)
    pending = -1  # an unverifiable candidate
    pending_end = -1
    limit = end if scan_end is None else min(end, scan_end + 16)
    for p in (np.flatnonzero(arr[start + 16:limit] == B.MAGIC_V2) + start).tolist():
        if pending >= 0 and p >= pending_end:
            break
        if p + B.HEADER_SIZE > end:
            break
        blen = struct.unpack_from(">i", buf, p + 8)[0]
        if blen < B.HEADER_SIZE - B.LOG_OVERHEAD or blen > MAX_BATCH_BYTES:
            continue
        if p + B.LOG_OVERHEAD + blen > end:
            if not at_eof and pending < 0:
                pending, pending_end = p, p + B.LOG_OVERHEAD + blen
            continue
        crc = struct.unpack_from(">I", buf, p + 17)[0]
        if B.crc32c(memoryview(buf)[p + B.CRC_START:p + B.LOG_OVERHEAD + blen]) == crc:
            return p
    if pending >= 0:
        return pending
    if scan_end is not None and scan_end + B.HEADER_SIZE < end:
        return -1
    if not at_eof and end - start > B.HEADER_SIZE:
        # a batch may start in the last bytes of the window, beyond what could be checked
        tail = np.flatnonzero(arr[max(start, end - B.HEADER_SIZE) + 16:end] == B.MAGIC_V2)
        if len(tail):
            return max(start, end - B.HEADER_SIZE) + int(tail[0])
    return -1


# Loading numba costs a process 0.3-1 s here; the compiled walk saves ~2 us per batch and ~0.2 us per
# record of a long batch over the NumPy/Python walk, so it pays for itself from about this file size.
COMPILED_MIN_FILE_BYTES = 64 << 20


# A window (or a group of a record type) of fewer records is framed and decoded with NumPy even when numba is
# loaded: loading the compiled loops (codec/framing.py, codec/flat.py, decode's line writer) from numba's cache
# costs ~10-30 ms each, what they save on some 10^5 records; a small log's command starts sooner without them.
COMPILED_MIN_RECORDS = 4096


def _use_compiled(file_size: int) -> bool:
    """Walk a file's batches and record chains with the compiled walk (codec/walk.py): when numba is
    loaded already (``decode --summary``, the compiled kernels) or the file is large enough to pay for
    loading it.  Both ways find the same batches and records (tests/controller_core/codec/test_walk.py)."""
    return file_size >= COMPILED_MIN_FILE_BYTES or "numba" in sys.modules


_LEN = struct.Struct(">i")


def _fast_chain(buf, a: np.ndarray, pos: int, end: int, good: list[int], compiled: bool = False) -> int:
    """Accept the run of intact batches starting at ``pos``; return where the run stops.

    The common case -- a healthy log -- is one compiled pass (:func:`controller_core.codec.walk.intact_run`:
    header chain, magic bytes, CRC32C) if ``compiled``, else one length read per batch in Python plus
    vectorized header checks and one CRC32C call per batch.  The first batch that is not plainly intact
    stops the run; :func:`walk_batches` then handles it with full diagnostics.  The run is taken in
    blocks of batches growing from CHAIN_BLOCK: a window with many damaged batches costs each of them
    the batches up to the next damage, not the rest of the window.
    """
    block = CHAIN_BLOCK
    while True:
        n, stop = _chain_block(buf, a, pos, end, good, compiled, block)
        if n < block:
            return stop
        pos, block = stop, min(block * 2, CHAIN_BLOCK_MAX)


# The first block is small: a run that stops at the next batch (a log with damage every few batches) then
# costs a few length reads and CRCs, not CHAIN_BLOCK of them per damaged batch; doubling reaches the large
# blocks a healthy window wants after a dozen NumPy calls.
CHAIN_BLOCK, CHAIN_BLOCK_MAX = 8, 1 << 16


def _chain_block(buf, a: np.ndarray, pos: int, end: int, good: list[int], compiled: bool, limit: int):
    """Up to ``limit`` batches of the run from ``pos``: (batches taken, where the run stops)."""
    if compiled:
        from controller_core.codec import walk

        out = np.empty(min(limit, (end - pos) // B.HEADER_SIZE + 1), np.int64)
        n, stop = walk.intact_run(a, pos, end, walk.HAS_SSE42, out)
        good.extend(out[:n].tolist())
        return int(n), int(stop)
    starts = []
    unpack = _LEN.unpack_from
    lo = B.HEADER_SIZE - B.LOG_OVERHEAD
    while pos + B.HEADER_SIZE <= end and len(starts) < limit:
        blen = unpack(buf, pos + 8)[0]
        nxt = pos + B.LOG_OVERHEAD + blen
        if blen < lo or nxt > end or blen > MAX_BATCH_BYTES:
            break
        starts.append(pos)
        pos = nxt
    if not starts:
        return 0, pos
    sp = np.array(starts, np.int64)
    size = V.be(a, sp + 8, "int32").astype(np.int64) + B.LOG_OVERHEAD
    mv = memoryview(buf)
    crc32c = B.crc32c
    actual = np.fromiter((crc32c(mv[s + B.CRC_START:s + n]) for s, n in zip(starts, size.tolist())), np.uint32,
                         count=len(starts))
    fine = (a[sp + 16] == B.MAGIC_V2) & (actual == V.be(a, sp + 17, "uint32"))
    if fine.all():
        good.extend(starts)
        return len(starts), pos
    first_bad = int(np.argmin(fine))
    good.extend(starts[:first_bad])
    return first_bad, starts[first_bad]


def walk_batches(buf, end: int, at_eof: bool, file: str, base: int = 0, a: np.ndarray | None = None,
                 compiled: bool = False):
    """Verify the batches in buf[0:end] (file position ``base``).

    Returns (valid batch positions, quarantined spans, position where the walk stopped).  When
    ``at_eof`` is false, a batch running past ``end`` stops the walk there (the caller reads on from
    that position); at the end of the file it is a truncated batch.
    """
    good: list[int] = []
    bad: list[Quarantine] = []
    pos = 0
    mv = memoryview(buf)
    crc32c = B.crc32c

    a = V.padded(buf) if a is None else a

    def skip_garbage(reason: str, why: str) -> int:
        nxt = _find_next_batch(buf, pos + 1, end, at_eof)
        if nxt < 0:
            nxt = end if at_eof else max(pos + 1, end - B.HEADER_SIZE)
        bad.append(Quarantine(file, base + pos, nxt - pos, reason,
                              f"{file} at byte {base + pos}: {why}; skipped {nxt - pos} bytes to the next valid batch"))
        return nxt

    while pos < end:
        pos = _fast_chain(buf, a, pos, end, good, compiled)
        remaining = end - pos
        if remaining <= 0:
            break
        if remaining < B.HEADER_SIZE:
            if not at_eof:
                break
            bad.append(Quarantine(file, base + pos, remaining, E.TRUNCATED_BATCH,
                                  f"{file} at byte {base + pos}: {remaining} bytes left at the end of the file, "
                                  f"too few for a batch header ({B.HEADER_SIZE})"))
            return good, bad, end
        _, blen, _, magic = _HEAD.unpack_from(buf, pos)
        size = blen + B.LOG_OVERHEAD
        if magic != B.MAGIC_V2:
            pos = skip_garbage(E.UNSUPPORTED_MAGIC if magic in (0, 1) else E.GARBAGE,
                               f"no record batch v2 header (magic byte {magic})")
            continue
        if blen < B.HEADER_SIZE - B.LOG_OVERHEAD or blen > MAX_BATCH_BYTES:
            pos = skip_garbage(E.BAD_BATCH_HEADER, f"impossible batchLength {blen}")
            continue
        if size > remaining:
            if not at_eof:
                break
            nxt = _find_next_batch(buf, pos + 1, end, at_eof)  # a damaged length may claim too much
            stop = end if nxt < 0 else nxt
            bad.append(Quarantine(file, base + pos, stop - pos, E.TRUNCATED_BATCH,
                                  f"{file} at byte {base + pos}: batch declares {size} bytes but the file has only "
                                  f"{remaining} left"))
            pos = stop
            continue
        stored = struct.unpack_from(">I", buf, pos + 17)[0]
        actual = crc32c(mv[pos + B.CRC_START:pos + size])
        if actual != stored:
            stop = pos + size
            # The length may be what is damaged (it is not covered by the CRC): a batch that verifies
            # inside the span it claims proves it, and the walk resynchronises there, losing only this
            # batch.  No such batch: the span is skipped whole, unless what follows it is no batch
            # header either (then on to the next batch that verifies).
            nxt = _find_next_batch(buf, pos + 1, end, at_eof, scan_end=stop)
            if 0 <= nxt < stop:
                stop = nxt
            elif stop < end and (at_eof or stop + B.HEADER_SIZE <= end) and not _plausible(buf, stop, end):
                # (a header cut by the window's end is judged by the next window, which starts there)
                nxt = _find_next_batch(buf, stop, end, at_eof)
                stop = end if nxt < 0 else nxt
            bad.append(Quarantine(file, base + pos, stop - pos, E.CRC_MISMATCH,
                                  f"{file} at byte {base + pos}: CRC32C mismatch, stored {stored:#010x}, "
                                  f"computed {actual:#010x}"))
            pos = stop
            continue
        good.append(pos)
        pos += size
    return good, bad, pos


# ----------------------------------------------------------------------------------- record walk
LOCKSTEP_MIN = 128  # below this many batches still walking, a plain Python loop is cheaper
# The smallest record a batch can hold: its length varint, attributes, timestampDelta, offsetDelta, key
# length, value length and header count, one byte each (real records are longer: the bound only has to
# be one no valid record is below).
MIN_RECORD_BYTES = 7


def _record_positions(buf, a: np.ndarray, batches: list[int], file: str, base: int, bad: list[Quarantine],
                      compiled: bool = False):
    """Find every record of the given batches: (start, body start, end, batch index) arrays, and the
    positions of the batches kept.  Compressed batches and batches whose records do not add up to their
    length are quarantined.

    Records of one batch form a chain (each starts where the previous ends).  The chains are walked by
    one compiled pass (:func:`controller_core.codec.walk.record_chains`) if ``compiled``, else
    vectorized: the chains of different batches are independent, so the k-th record of every batch is
    found in one step; only the last few long batches finish in a Python loop.
    """
    bpos = np.array(batches, np.int64)
    bend = bpos + B.LOG_OVERHEAD + V.be(a, bpos + 8, "int32").astype(np.int64)
    attrs = V.be(a, bpos + 21, "int16")
    count = V.be(a, bpos + 57, "int32").astype(np.int64)
    # Bounded before anything is walked or allocated: a record takes at least MIN_RECORD_BYTES of its
    # batch, so a count the batch's bytes cannot hold is damage (a crafted batch may carry a valid CRC).
    impossible = (count < 0) | (count > (bend - bpos - B.HEADER_SIZE) // MIN_RECORD_BYTES)
    broken = _compressed(attrs, bpos, bend, file, base, bad)
    for i in np.flatnonzero(impossible & ~broken).tolist():
        bad.append(Quarantine(file, base + int(bpos[i]), int(bend[i] - bpos[i]), E.MALFORMED_RECORD,
                              f"{file} at byte {base + int(bpos[i])}: recordsCount {int(count[i])} cannot fit in the "
                              f"batch's {int(bend[i] - bpos[i] - B.HEADER_SIZE)} bytes of records"))
    broken |= impossible
    count = np.where(impossible, 0, count)
    if compiled:
        rpos, rbody, rend, rown = _compiled_chains(a, bpos, bend, count, broken)
    else:
        rpos, rbody, rend, rown = _vectorized_chains(buf, a, bpos, bend, count, broken)
    for i in np.flatnonzero(broken & ((attrs & B.ATTR_COMPRESSION_MASK) == 0) & ~impossible).tolist():
        bad.append(Quarantine(file, base + int(bpos[i]), int(bend[i] - bpos[i]), E.MALFORMED_RECORD,
                              f"{file} at byte {base + int(bpos[i])}: the records of this batch do not add up to "
                              f"its length (recordsCount {int(count[i])})"))
    return rpos, rbody, rend, rown, bpos[~broken]


def _compiled_chains(a, bpos, bend, count, broken):
    from controller_core.codec import walk

    # every record takes at least one byte of its batch
    room = int(np.minimum(np.maximum(count, 0), bend - bpos - B.HEADER_SIZE)[~broken].sum())
    rpos, rbody, rend, rown = (np.empty(room, np.int64) for _ in range(4))
    n = walk.record_chains(a, bpos, bend, count, broken, rpos, rbody, rend, rown)
    return rpos[:n], rbody[:n], rend[:n], rown[:n]


def _vectorized_chains(buf, a, bpos, bend, count, broken):
    """The record chains (as :func:`_compiled_chains`) with NumPy and a Python loop; ``broken`` is
    marked in place."""
    cur = bpos + B.HEADER_SIZE
    found, k, active = _lockstep_chains(a, cur, bend, count, broken)
    tail_starts, tail_owner = _straggler_starts(buf, active, k, cur, bend, count, broken)
    if tail_starts:
        ts = np.array(tail_starts, np.int64)
        to = np.array(tail_owner, np.int64)
        ln, q, ok = V.uvarint(a, ts)
        e = q + V.zigzag(ln)
        broken[to[~ok | (e < q) | (e > bend[to])]] = True
        found.append((ts, q, e, to))
    # the records must fill their batch exactly
    broken |= (cur != bend) & (count >= 0)
    return _kept_records(found, broken)


def _compressed(attrs: np.ndarray, bpos: np.ndarray, bend: np.ndarray, file: str, base: int,
                bad: list[Quarantine]) -> np.ndarray:
    """Batches whose attributes say they are compressed: quarantined (KRaft writes none)."""
    broken = np.zeros(len(bpos), bool)
    for i in np.flatnonzero(attrs & B.ATTR_COMPRESSION_MASK).tolist():
        codec = B.COMPRESSION_NAMES.get(int(attrs[i]) & 7, int(attrs[i]) & 7)
        broken[i] = True
        bad.append(Quarantine(file, base + int(bpos[i]), int(bend[i] - bpos[i]), E.COMPRESSED_BATCH,
                              f"{file} at byte {base + int(bpos[i])}: batch is {codec}-compressed; KRaft metadata "
                              "logs are written uncompressed and kraft-audit does not decompress them"))
    return broken


def _lockstep_chains(a: np.ndarray, cur: np.ndarray, bend: np.ndarray, count: np.ndarray, broken: np.ndarray):
    """Walk the record chains of all batches together, the k-th record of every batch per step, while
    enough batches are still walking.  Returns ([(starts, bodies, ends, batch)], steps taken, the batches
    left to walk); ``cur`` is advanced and ``broken`` marked in place."""
    found = []
    k = 0
    active = np.flatnonzero((count > 0) & ~broken)
    while len(active) >= LOCKSTEP_MIN:
        p = cur[active]
        ln, q, ok = V.uvarint(a, p)
        e = q + V.zigzag(ln)
        fine = ok & (e >= q) & (e <= bend[active])
        broken[active[~fine]] = True
        act = active[fine]
        found.append((p[fine], q[fine], e[fine], act))
        cur[act] = e[fine]
        k += 1
        active = act[count[act] > k]
    return found, k, active


def _straggler_starts(buf, active: np.ndarray, k: int, cur: np.ndarray, bend: np.ndarray, count: np.ndarray,
                      broken: np.ndarray) -> tuple[list[int], list[int]]:
    """The rest of the chains of the few long batches still walking (as in snapshots), in plain Python,
    collecting only record starts and their batch; lengths and bodies are re-read vectorized."""
    tail_starts: list[int] = []
    tail_owner: list[int] = []
    for i in active.tolist():
        p, end_i = int(cur[i]), int(bend[i])
        n0 = len(tail_starts)
        append = tail_starts.append
        for _ in range(int(count[i]) - k):
            if p >= end_i:
                broken[i] = True
                break
            append(p)
            b = buf[p]
            if b < 0x80:
                ln = (b >> 1) ^ -(b & 1)
                q = p + 1
            else:
                b2 = buf[p + 1] if p + 1 < end_i else 0x80
                if b2 < 0x80:
                    ln = (b & 0x7F) | (b2 << 7)
                    ln = (ln >> 1) ^ -(ln & 1)
                    q = p + 2
                else:
                    try:
                        ln, q = B.read_uvarint(buf, p, end_i)
                    except DecodeError:
                        broken[i] = True
                        break
                    ln = (ln >> 1) ^ -(ln & 1)
            if ln < 0:  # a chain never goes back: a negative length breaks the batch
                broken[i] = True
                break
            p = q + ln
        tail_owner.extend([i] * (len(tail_starts) - n0))
        cur[i] = p
    return tail_starts, tail_owner


def _kept_records(found: list, broken: np.ndarray):
    """The records of the intact batches in file order, with batches renumbered densely over those kept."""
    if not found:
        z = np.zeros(0, np.int64)
        return z, z, z, z
    rpos, rbody, rend, rown = (np.concatenate(x) for x in zip(*found))
    keep = ~broken[rown]
    order = np.argsort(rpos[keep], kind="stable")  # file order
    rpos, rbody, rend, rown = (x[keep][order] for x in (rpos, rbody, rend, rown))
    kept = np.flatnonzero(~broken)
    remap = np.full(len(broken), -1, np.int64)
    remap[kept] = np.arange(len(kept))
    return rpos, rbody, rend, remap[rown]


LOOKAHEAD = 8  # batches after a jump in the offsets looked at to tell a gap from a damaged baseOffset


def check_offsets(a: np.ndarray, batches: list[int], prev_last: int | None, file: str, base: int,
                  bad: list[Quarantine], next_first: int | None = None) -> tuple[list[int], int | None]:
    """Keep the batches whose offsets continue the log; quarantine the others.

    The batch CRC does not cover baseOffset (nor batchLength and partitionLeaderEpoch), so a flipped
    bit there passes the CRC.  A Raft log's offsets are contiguous: every batch starts one after the
    last offset of the batch before it.  A healthy window is checked in one vectorized comparison; a
    window with a break is walked batch by batch from the first break:

    * a batch that goes back (its baseOffset at or before the last offset kept) is a duplicate or has a
      damaged baseOffset: quarantined, the batches after it are judged against the ones kept;
    * a batch that jumps ahead is kept when the batch after it continues from it (two batches agreeing
      is the evidence), or when bytes quarantined just before it explain the missing offsets; it is
      quarantined as carrying a damaged baseOffset otherwise, and also when the next batch continues
      as if this one had started where it should, or one of the LOOKAHEAD batches after it falls back
      into the offsets it skipped.  The batch after a window's last is the next window's first:
      ``next_first`` is its baseOffset (read ahead, not yet verified); at the end of the file, with
      nothing after it, the last batch is quarantined only for an impossible jump (over 2^31 offsets);
    * with no known offset before the window, the first batch is kept unless the two batches after it
      agree with each other but not with it (and no quarantined bytes between them explain it).

    Returns the kept batches and the last offset they reach.
    """
    if not batches:
        return batches, prev_last
    bp = np.array(batches, np.int64)
    first = V.be(a, bp, "int64").astype(np.int64)
    delta = V.be(a, bp + 23, "int32").astype(np.int64)
    last = first + np.maximum(delta, 0)
    before = np.empty(len(bp), np.int64)  # last offset of the previous batch
    before[1:] = last[:-1]
    before[0] = prev_last if prev_last is not None else first[0] - 1
    breaks = (first != before + 1) | (delta < 0)
    if not breaks.any():
        return batches, int(last[-1])
    keep = np.ones(len(bp), bool)
    start = int(np.argmax(breaks))
    if start == 1 and prev_last is None:  # nothing before the window: the first batch is as suspect as the second
        start = 0
    expected = None if start == 0 and prev_last is None else int(before[start]) + 1
    # where (in the window) quarantined spans start: offsets missing after such a span are explained
    spans = sorted(q.position - base for q in bad)
    ends = (bp + B.LOG_OVERHEAD + V.be(a, bp + 8, "int32").astype(np.int64)).tolist()
    kept_end = 0 if start == 0 else ends[start - 1]

    def lost_between(lo: int, hi: int) -> bool:
        k = bisect.bisect_left(spans, lo)
        return k < len(spans) and spans[k] < hi

    def reject(i: int, why: str) -> None:
        keep[i] = False
        size = ends[i] - int(bp[i])
        bad.append(Quarantine(file, base + int(bp[i]), size, E.BAD_BATCH_HEADER,
                              f"{file} at byte {base + int(bp[i])}: baseOffset {int(first[i])} {why}; the field is "
                              f"not covered by the batch CRC"))

    n = len(bp)
    ahead = first if next_first is None else np.append(first, np.int64(next_first))  # look-ahead only
    # the batches between two breaks continue each other: once the first of them is kept, all are
    breaks_at = np.flatnonzero(breaks).tolist()
    i = start - 1
    while i + 1 < n:
        i += 1
        f, lo = int(first[i]), int(last[i])
        if delta[i] < 0:
            reject(i, f"with lastOffsetDelta {int(delta[i])} (negative)")
            continue
        nxt_ok = i + 1 < len(ahead) and int(ahead[i + 1]) == lo + 1
        if expected is None:
            lost_after = i + 1 < n and lost_between(ends[i], int(bp[i + 1]))
            if not nxt_ok and not lost_after and i + 2 < n and int(first[i + 2]) == int(last[i + 1]) + 1:
                reject(i, "disagrees with the batches after it")
                continue
        elif f < expected:
            reject(i, f"goes back (the log is at offset {expected - 1} already): a duplicated batch or a damaged "
                      "baseOffset")
            continue
        elif f > expected:
            gap = lost_between(kept_end, int(bp[i]))
            follows_expected = i + 1 < len(ahead) and int(ahead[i + 1]) == expected + (lo - f) + 1
            # a batch shortly after that falls back into the gap: the log goes on there, so this batch
            # (and any after it agreeing with it) carries a damaged baseOffset
            back = ahead[i + 1:i + 1 + LOOKAHEAD]
            falls_back = bool(((back >= expected) & (back < f)).any())
            if i + 1 == len(ahead):  # nothing after it to agree or disagree: only an impossible jump is damage
                damaged = f - expected > (1 << 31)
            else:
                damaged = falls_back or (not nxt_ok and (follows_expected or not gap))
            if damaged:
                reject(i, f"breaks the log's offset sequence (the previous batch ends at {expected - 1})")
                continue
        k = bisect.bisect_right(breaks_at, i)
        j = breaks_at[k] if k < len(breaks_at) else n  # the next break after this batch
        expected = int(last[j - 1]) + 1
        kept_end = ends[j - 1]
        i = j - 1
    bad.sort(key=lambda q: q.position)
    kept_last = last[keep]
    return bp[keep].tolist(), int(kept_last[-1]) if len(kept_last) else prev_last


def decode_window(buf, a: np.ndarray, batches: list[int], file: str, base: int, bad: list[Quarantine],
                  prev_last: int | None = None, compiled: bool = False,
                  next_first: int | None = None) -> DecodedChunk:
    """Decode the given (CRC-valid) batches of a window into a chunk."""
    chunk = DecodedChunk(file=file, quarantine=bad, batches=0)
    batches, chunk.last_offset = check_offsets(a, batches, prev_last, file, base, bad, next_first)
    if not batches:
        return chunk
    rpos, body, rend, rbatch, bpos = _record_positions(buf, a, batches, file, base, bad, compiled)
    chunk.batches = len(bpos)
    if len(bpos) == 0:
        return chunk
    b_base, b_epoch, b_ts, b_ctl = _batch_headers(a, bpos)
    ctl = b_ctl[rbatch]
    framed = compiled and len(body) >= COMPILED_MIN_RECORDS
    if framed:
        r, type_code, version, bstart, unframed, outside = _compiled_framing(a, body, rend, rbatch, bpos, ctl)
    else:
        r = _record_framing(a, body, rend)
        type_code, version, bstart, unframed = _message_framing(a, ctl, r)
    type_id = np.where(ctl, type_code - CONTROL_CODE_BASE, type_code)
    known = _declared(ctl, type_id)
    type_code = np.where(known, type_code, UNKNOWN_CODE)
    # a version that does not fit bronze's int16 record_version: left to the scalar reader (quarantined)
    scalar = r.scalar | unframed | (version > 0x7FFF) | (type_id > 0x7FFF)  # (an apiKey is an int16 too)
    # framing varints that run past the record's value (a value shorter than its own header): the scalar
    # reader names it; the vectorized groups would read a negative length
    scalar |= bstart > r.vpos + np.maximum(r.vlen, 0)
    outside = (outside if framed else _outside_batch(a, bpos, rbatch, r)) & ~scalar

    chunk.offset = b_base[rbatch] + r.off_delta
    chunk.position = rpos + base
    chunk.timestamp = b_ts[rbatch] + r.ts_delta
    chunk.batch_base_offset = b_base[rbatch]
    chunk.batch_position = bpos[rbatch] + base
    chunk.batch_timestamp = b_ts[rbatch]
    chunk.batch_leader_epoch = b_epoch[rbatch]
    chunk.is_control = ctl
    chunk.type_code = type_code.astype(np.int32)
    chunk.version = version.astype(np.int16)
    chunk.type_id = type_id

    skip = scalar | outside
    _decode_groups(chunk, a, type_code, version, bstart, r.vpos + np.maximum(r.vlen, 0), skip, type_id, ctl,
                   compiled)
    scalar = skip & ~outside
    keep = ~outside
    for i in np.flatnonzero(outside).tolist():
        b = int(bpos[rbatch[i]])
        lod = int(V.be(a, np.array([b + 23]), "int32")[0])
        bad.append(Quarantine(file, base + int(rpos[i]), int(rend[i] - rpos[i]), E.MALFORMED_RECORD,
                              f"{file} at byte {base + int(rpos[i])}: offsetDelta {int(r.off_delta[i])} / "
                              f"timestampDelta {int(r.ts_delta[i])} outside the batch at byte {base + b} "
                              f"(lastOffsetDelta {lod}, baseTimestamp {int(b_ts[rbatch[i]])}, maxTimestamp "
                              f"{int(V.be(a, np.array([b + 35]), 'int64')[0])})"))
    # The scalar reader names the error of every record the vectorized path could not take.
    for i in np.flatnonzero(scalar).tolist():
        keep[i] = False
        err = _scalar_error(buf, bool(ctl[i]), int(r.kpos[i]), int(r.klen[i]), int(r.vpos[i]), int(r.vlen[i]),
                            int(rpos[i]), int(rend[i]))
        bad.append(Quarantine(file, base + int(rpos[i]), int(rend[i] - rpos[i]), err.reason,
                              f"{file} at byte {base + int(rpos[i])} (offset {int(chunk.offset[i])}): {err.detail}"))
    if not keep.all():
        bad.sort(key=lambda q: q.position)
        _drop_rows(chunk, keep)
    return chunk


def _outside_batch(a: np.ndarray, bpos: np.ndarray, rbatch: np.ndarray, r: "_Framing") -> np.ndarray:
    """Records whose offsetDelta or timestamp the batch header contradicts (a crafted batch can carry
    a valid CRC): offsetDelta below 0, above lastOffsetDelta or not after the record before it in
    the batch; timestampDelta below 0 or past maxTimestamp (when maxTimestamp is not below
    baseTimestamp)."""
    lod = V.be(a, bpos + 23, "int32").astype(np.int64)[rbatch]
    b_ts = V.be(a, bpos + 27, "int64").astype(np.int64)[rbatch]
    m_ts = V.be(a, bpos + 35, "int64").astype(np.int64)[rbatch]
    off = r.off_delta
    out_of_range = (off < 0) | (off > lod)
    bad = out_of_range | (r.ts_delta < 0) | ((m_ts >= b_ts) & (r.ts_delta > m_ts - b_ts))
    # each in-range offsetDelta after the in-range one before it in its batch (the bad one costs itself)
    ok = np.flatnonzero(~out_of_range)
    if len(ok) > 1:
        back = (rbatch[ok[1:]] == rbatch[ok[:-1]]) & (off[ok[1:]] <= off[ok[:-1]])
        bad[ok[1:][back]] = True
    return bad


def _compiled_framing(a: np.ndarray, body: np.ndarray, rend: np.ndarray, rbatch: np.ndarray, bpos: np.ndarray,
                      ctl: np.ndarray):
    """:func:`_record_framing`, :func:`_message_framing` and :func:`_outside_batch` in one compiled loop
    (codec/framing.py): the same arrays."""
    from controller_core.codec import framing

    n = len(body)
    ts, off, kpos, klen, vpos, vlen, code, version, bstart = (np.empty(n, np.int64) for _ in range(9))
    not_taken, unframed, outside = (np.empty(n, bool) for _ in range(3))
    framing.frame(a, body, rend, rbatch.astype(np.int64, copy=False), bpos, ctl, ts, off, kpos, klen, vpos, vlen,
                  not_taken, code, version, bstart, unframed, outside)
    return _Framing(ts, off, kpos, klen, vpos, vlen, not_taken), code, version, bstart, unframed, outside


def _batch_headers(a: np.ndarray, bpos: np.ndarray):
    """(baseOffset, partitionLeaderEpoch, baseTimestamp, is control) of each batch from its header."""
    hdr = V.fixed(a, bpos, B.HEADER_SIZE)
    b_base = hdr[:, 0:8].copy().view(">i8").ravel().astype(np.int64)
    b_epoch = hdr[:, 12:16].copy().view(">i4").ravel().astype(np.int32)
    b_attr = hdr[:, 21:23].copy().view(">i2").ravel()
    b_ts = hdr[:, 27:35].copy().view(">i8").ravel().astype(np.int64)
    return b_base, b_epoch, b_ts, (b_attr & B.ATTR_CONTROL) != 0


@dataclass
class _Framing:
    """Each record's framing: attributes(1) tsDelta(varlong) offsetDelta key value headers."""

    ts_delta: np.ndarray
    off_delta: np.ndarray
    kpos: np.ndarray
    klen: np.ndarray
    vpos: np.ndarray
    vlen: np.ndarray
    scalar: np.ndarray  # framing the vectorized path does not take: left to the scalar reader


def _record_framing(a: np.ndarray, body: np.ndarray, rend: np.ndarray) -> _Framing:
    ok = np.ones(len(body), bool)
    p = body + 1
    ts_delta, p, o = V.varint(a, p, 10)
    ok &= o
    off_delta, p, o = V.varint(a, p)
    ok &= o
    klen, p, o = V.varint(a, p)
    ok &= o
    kpos = p
    # A key or value length running past the record stops at its end: the record is then left to the
    # scalar reader (p != rend below) instead of reading beyond the buffer.
    p = np.minimum(p + np.maximum(klen, 0), rend)
    vlen, p, o = V.varint(a, p)
    ok &= o
    vpos = p
    p = np.minimum(p + np.maximum(vlen, 0), rend)
    nhdr, p, o = V.varint(a, p)
    ok &= o & (vlen >= 0)
    # Headers are never written in metadata logs; records that carry them go to the scalar reader.
    return _Framing(ts_delta, off_delta, kpos, klen, vpos, vlen, ~ok | (nhdr != 0) | (p != rend))


def _message_framing(a: np.ndarray, ctl: np.ndarray, r: _Framing):
    """(type code, version, where the message body starts, framing not taken) of each record's value:
    a metadata record is frameVersion, apiKey, version (unsigned varints); a control record's key is
    (int16 version, int16 type) and its value starts with the message's int16 Version."""
    frame, q, o1 = V.uvarint(a, r.vpos)
    api, q, o2 = V.uvarint(a, q)
    ver, q, o3 = V.uvarint(a, q)
    ctype = V.be(a, r.kpos + 2, "int16").astype(np.int64)
    cver = V.be(a, r.vpos, "int16").astype(np.int64)
    type_code = np.where(ctl, CONTROL_CODE_BASE + ctype, api.astype(np.int64))
    version = np.where(ctl, cver, ver.astype(np.int64))
    bstart = np.where(ctl, r.vpos, q)
    bad = np.where(ctl, (r.klen != 4) | (r.vlen < 2), ~(o1 & o2 & o3) | (frame != B.METADATA_FRAME_VERSION))
    return type_code, version, bstart, bad


def _decode_groups(chunk: DecodedChunk, a: np.ndarray, type_code, version, bstart, vend, scalar: np.ndarray,
                   type_id=None, ctl=None, compiled: bool = False) -> None:
    """Decode the records of each (record type, version) at once into ``chunk.groups``; a record whose
    fields do not end where its value does is marked ``scalar``.  A version above the newest declared is
    read with the newest declared layout (README "Newer Kafka"); a record of an undeclared type
    (``UNKNOWN_CODE``) becomes a group of its type number and value bytes.  ``compiled``: the groups of flat
    record types are decoded by the compiled loop of codec/flat.py (same columns; numba is loaded anyway)."""
    if compiled:
        from controller_core.codec import flat
    keys = type_code * 256 + np.clip(version, 0, 255)
    for key in distinct(keys[~scalar]).tolist():
        rows = np.flatnonzero((keys == key) & ~scalar)
        code, v = divmod(key, 256)
        if code == UNKNOWN_CODE:
            for control, rdef in ((False, UNKNOWN_METADATA), (True, UNKNOWN_CONTROL)):
                sel = rows[ctl[rows] == control]
                if len(sel):
                    data, offsets = V.gather_ranges(a, bstart[sel], vend[sel] - bstart[sel])
                    value = pa.Array.from_buffers(pa.binary(), len(sel), [None, pa.py_buffer(offsets),
                                                                          pa.py_buffer(data)])
                    cols = {rdef.fields[0].json_name: from_numpy(type_id[sel].astype(np.int32)), "value": value}
                    chunk.groups.append(Group(rdef, v, sel, cols))
            continue
        rdef = BY_CONTROL_TYPE.get(code - CONTROL_CODE_BASE) if code >= CONTROL_CODE_BASE else BY_API_KEY.get(code)
        neg = version[rows] < 0  # (a control record's int16 version)
        if neg.any():
            scalar[rows[neg]] = True
            rows = rows[~neg]
        if rdef is None or v < rdef.valid_versions.lo or not len(rows):
            scalar[rows] = True
            continue
        layout = newest_layout(rdef, v)
        pl = flat.plan(rdef, layout) if compiled and len(rows) >= COMPILED_MIN_RECORDS else None
        cols = None if pl is None else flat.decode(a, bstart[rows], vend[rows], pl)
        if cols is not None:  # every body plainly regular: the compiled loop's columns
            chunk.groups.append(Group(rdef, v, rows, cols, layout))
            continue
        cur = V.Cursor(a, bstart[rows].copy(), vend[rows], np.ones(len(rows), bool))
        unknown: list = []
        cols = V.decode_struct(cur, rdef.fields, layout, unknown)
        fine = cur.ok & (cur.pos == cur.end)
        extra = V.unknown_tags(a, len(rows), unknown, fine) if unknown else None
        if not fine.all():
            scalar[rows[~fine]] = True
            sel = from_numpy(np.flatnonzero(fine))
            cols = {k: c.take(sel) for k, c in cols.items()}
            extra = None if extra is None else extra.take(sel)
            rows = rows[fine]
        chunk.groups.append(Group(rdef, v, rows, cols, layout, extra))


def distinct(small: np.ndarray) -> np.ndarray:
    """np.unique of integers spanning a small range (type codes, (type, version) keys): a count per value
    instead of a hash table (a tenth of the time on a chunk of a million records)."""
    if not len(small):
        return small
    lo = int(small.min())
    return np.flatnonzero(np.bincount(small - lo)) + lo


def _scalar_error(buf, ctl, kpos, klen, vpos, vlen, rpos, rend) -> DecodeError:
    try:
        if vlen < 0 or vpos + vlen > rend:
            raise DecodeError(E.MALFORMED_RECORD, "record value overruns the record", rpos)
        B.decode_value(buf, ctl, kpos, klen, vpos, vlen, rpos)
    except DecodeError as exc:
        return exc
    return DecodeError(E.MALFORMED_RECORD, "record framing (headers or length) is not what KRaft writes", rpos)


def _drop_rows(chunk: DecodedChunk, keep: np.ndarray) -> None:
    remap = np.cumsum(keep) - 1
    for name in ("offset", "position", "timestamp", "batch_base_offset", "batch_position", "batch_timestamp",
                 "batch_leader_epoch", "is_control", "type_code", "version", "type_id"):
        setattr(chunk, name, getattr(chunk, name)[keep])
    for g in chunk.groups:
        g.rows = remap[g.rows]


# ------------------------------------------------------------------------------------- file level
def iter_chunks(path: str, label: str | None = None, start: int = 0, end: int | None = None,
                chunk_bytes: int = DEFAULT_CHUNK_BYTES, first_offset: int | None = None,
                fast=None) -> Iterator[DecodedChunk]:
    """Decode the batches of a file that start in [start, end), window by window.

    Memory is bounded by about ``chunk_bytes`` (or one batch, if a batch is larger).  ``start`` must
    be a batch boundary: 0, or a position from :func:`split_points`.  ``first_offset``, when known
    (a segment's base offset, 0 for a snapshot), is the offset the first batch must start at.

    ``fast(buf, at_eof, prev_last)``, if given, is tried first on every window (``end`` must be the
    file's end; the file is then memory-mapped and ``buf`` is a view) unless a garbage span of the
    window before may go on in it: it returns ``(item, stop, last offset)`` -- the item is yielded
    instead of a chunk -- or None, and the window is decoded here as usual.  So the windows, and
    everything the decoder reports about a window it gets, are the same with or without it.
    """
    prev_last = None if first_offset is None else first_offset - 1
    label = label or path
    size = os.path.getsize(path)
    end = size if end is None else min(end, size)
    if size == 0:
        yield DecodedChunk(file=label, quarantine=[Quarantine(
            label, 0, 0, E.EMPTY_FILE, f"{label} at byte 0: the file is empty (a segment is empty only while it "
                                       "is the freshly rolled active segment; a snapshot never is)")])
        return
    compiled = _use_compiled(size)
    carry: Quarantine | None = None  # a garbage span reaching the window's end may go on in the next
    with open(path, "rb") as fh, _mapped(fh, fast is not None and end == size) as view:
        pos = start
        while pos < end:
            buf = _read(fh, view, pos, max(chunk_bytes, B.HEADER_SIZE))
            if len(buf) >= B.LOG_OVERHEAD:  # a window always holds its whole first batch
                blen = struct.unpack_from(">i", buf, 8)[0]
                if len(buf) < blen + B.LOG_OVERHEAD <= MAX_BATCH_BYTES:
                    buf = _read(fh, view, pos, blen + B.LOG_OVERHEAD)
            at_eof = pos + len(buf) >= size
            if view is not None and carry is None:
                taken = fast(buf, at_eof, prev_last)
                if taken is not None:
                    item, stop, prev_last = taken
                    yield item
                    pos += max(stop, 1)
                    continue
            buf = bytes(buf)  # the decoder below works on bytes
            a = V.padded(buf)
            good, bad, stop = walk_batches(buf, len(buf), at_eof, label, pos, a, compiled)
            good = [g for g in good if pos + g < end]
            bad = [q for q in bad if q.position < end]
            if carry is not None:
                if bad and bad[0].position == carry.position + carry.length and bad[0].reason in _SKIPPED:
                    bad[0] = _merge(carry, bad[0])
                else:
                    bad.insert(0, carry)
                carry = None
            if not at_eof and bad and bad[-1].reason in _SKIPPED and bad[-1].position + bad[-1].length == pos + stop:
                carry = bad.pop()
            if pos == 0 and at_eof and not good and bad and all(q.position + q.length >= size or q.reason != E.CRC_MISMATCH
                                                                 for q in bad):
                first = bad[0].message.split(": ", 1)[1]
                yield DecodedChunk(file=label, quarantine=[Quarantine(
                    label, 0, size, E.NOT_A_LOG,
                    f"{label} at byte 0: not a Kafka log: no intact record batch anywhere in its {size} bytes "
                    f"(first problem: {first})")])
                return
            chunk = decode_window(buf, a, good, label, pos, bad, prev_last, compiled,
                                  None if at_eof else _peek_base_offset(fh, view, pos + stop, size))
            prev_last = chunk.last_offset
            yield chunk
            pos += max(stop, 1)
    if carry is not None:
        yield DecodedChunk(file=label, quarantine=[carry])


_SKIPPED = (E.GARBAGE, E.BAD_BATCH_HEADER, E.UNSUPPORTED_MAGIC)


@contextlib.contextmanager
def _mapped(fh, wanted: bool):
    """A memoryview of the whole file, memory-mapped (for the ``fast`` reader: its windows are views,
    not copies), or None."""
    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if wanted else None
    except (OSError, ValueError):  # a file that cannot be mapped is read window by window
        mm = None
    if mm is None:
        yield None
        return
    view = memoryview(mm)
    try:
        yield view
    finally:
        with contextlib.suppress(BufferError):  # a window still referenced: unmapped when collected
            view.release()
            mm.close()


def _peek_base_offset(fh, view, pos: int, size: int) -> int | None:
    """The baseOffset field at ``pos`` (the batch the next window starts with), or None past the end."""
    if pos + 8 > size:
        return None
    return struct.unpack(">q", bytes(_read(fh, view, pos, 8)))[0]


def _read(fh, view, pos: int, n: int):
    """Up to n bytes of the file from pos: a slice of the mapped view, or read."""
    if view is not None:
        return view[pos:pos + n]
    fh.seek(pos)
    return fh.read(n)


def _merge(a: Quarantine, b: Quarantine) -> Quarantine:
    """One quarantine entry for two adjacent skipped spans (split only by a read window)."""
    n = a.length + b.length
    head = a.message.rsplit("; skipped", 1)[0]
    return Quarantine(a.file, a.position, n, a.reason, f"{head}; skipped {n} bytes to the next valid batch")


def split_points(path: str, target_bytes: int) -> list[int]:
    """Batch-boundary positions that cut a file into ranges of about ``target_bytes``.

    Only batch headers are read.  If the header chain is broken the rest of the file stays in one range,
    whose reader resynchronises by itself.  A file large enough for the compiled loops is walked by
    :func:`controller_core.codec.walk.chain_points` over its mapping (a log of one-record batches has a batch
    every ~100 bytes: a seek and a read each took seconds a gigabyte); a smaller one by seeking from header to
    header here.
    """
    size = os.path.getsize(path)
    points = [0]
    if size <= target_bytes:
        return points
    if _use_compiled(size):
        from controller_core.codec import walk

        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            a = np.frombuffer(mm, np.uint8)
            out = np.empty(size // max(target_bytes, 1) + 1, np.int64)
            m = walk.chain_points(a, target_bytes, out)
            del a  # the mapping closes only once no view of it is left
        return points + out[:m].tolist()
    with open(path, "rb") as fh:
        pos = 0
        nxt = target_bytes
        while pos + 12 <= size:
            fh.seek(pos + 8)
            raw = fh.read(4)
            blen = struct.unpack(">i", raw)[0]
            if blen < B.HEADER_SIZE - B.LOG_OVERHEAD or blen > MAX_BATCH_BYTES:
                break
            pos += blen + 12
            if pos >= nxt and pos < size:
                points.append(pos)
                nxt = pos + target_bytes
    return points
