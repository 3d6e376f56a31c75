"""Unaligned 8-byte loads and stores on uint8 arrays, for the compiled byte loops (the CRC walk, the JSON
writers).  A byte loop copies about half a byte per nanosecond on the 2.5 GHz cores measured; eight at a
time, the literal text around a decode line's values (two thirds of its bytes) stops dominating."""
from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.core import config
from numba.core.extending import intrinsic

from controller_core import numba_cache  # noqa: F401  (kernels shipped in a zip cache across jobs)


@intrinsic
def load_u64le(typingctx, arr, idx):
    """Eight bytes of a uint8 array at any (unaligned) index as one little-endian load (no bounds check)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None
    sig = types.uint64(arr, idx)

    def codegen(context, builder, signature, args):
        from llvmlite import ir

        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(ptr, align=1)

    return sig, codegen


@intrinsic
def store_u64le(typingctx, arr, idx, value):
    """Eight bytes stored into a uint8 array at any (unaligned) index (no bounds check)."""
    if not (isinstance(arr, types.Array) and arr.dtype == types.uint8 and isinstance(idx, types.Integer)):
        return None
    sig = types.void(arr, idx, types.uint64)

    def codegen(context, builder, signature, args):
        from llvmlite import ir

        ary = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), ir.IntType(64).as_pointer())
        builder.store(args[2], ptr, align=1)
        return context.get_dummy_value()

    return sig, codegen


def _copy_bytes_python(out, pos, src, s, e):
    """copy_bytes as plain Python (NUMBA_DISABLE_JIT=1: an intrinsic has no Python body)."""
    out[pos:pos + e - s] = src[s:e]
    return pos + e - s


@njit(cache=True, inline="always")
def _copy_bytes(out, pos, src, s, e):
    """src[s:e] to out at pos, eight bytes at a time and the tail byte by byte (never touching a byte outside
    either range); returns the position after it."""
    m = e - s
    q = 0
    while q + 8 <= m:
        store_u64le(out, pos + q, load_u64le(src, s + q))
        q += 8
    while q < m:
        out[pos + q] = src[s + q]
        q += 1
    return pos + m


copy_bytes = _copy_bytes_python if config.DISABLE_JIT else _copy_bytes


def _copy_within_python(out, pos, src, s, e, lim):
    """copy_within as plain Python (NUMBA_DISABLE_JIT=1)."""
    return _copy_bytes_python(out, pos, src, s, e)


@njit(cache=True, inline="always")
def _copy_within(out, pos, src, s, e, lim):
    """src[s:e] to out at pos in whole words when ``out`` has room for them before ``lim`` and ``src`` past ``e``:
    the bytes past the copy, up to the next multiple of eight, get whatever follows in ``src`` -- for writers that go
    on writing from the returned position up to ``lim`` (their text overwrites them).  Else :func:`copy_bytes`."""
    m = e - s
    w = (m + 7) & ~7
    if pos + w <= lim and s + w <= len(src):
        q = 0
        while q < w:
            store_u64le(out, pos + q, load_u64le(src, s + q))
            q += 8
        return pos + m
    return _copy_bytes(out, pos, src, s, e)


copy_within = _copy_within_python if config.DISABLE_JIT else _copy_within


def _equal16_python(a, p, q):
    return bytes(a[p:p + 16]) == bytes(a[q:q + 16])


@njit(cache=True, inline="always")
def _equal16(a, p, q):
    """The 16 bytes at ``a[p]`` equal those at ``a[q]`` (a uuid): two word compares."""
    return load_u64le(a, p) == load_u64le(a, q) and load_u64le(a, p + 8) == load_u64le(a, q + 8)


def _copy22_python(out, w, src, s):
    out[w:w + 22] = src[s:s + 22]


@njit(cache=True, inline="always")
def _copy22(out, w, src, s):
    """22 bytes (a uuid's text) from ``src[s]`` to ``out[w]`` in three word stores, the last overlapping the second:
    not a byte outside either range is touched (the ranges must not overlap)."""
    a, b, c = load_u64le(src, s), load_u64le(src, s + 8), load_u64le(src, s + 14)
    store_u64le(out, w, a)
    store_u64le(out, w + 8, b)
    store_u64le(out, w + 14, c)


equal16 = _equal16_python if config.DISABLE_JIT else _equal16
copy22 = _copy22_python if config.DISABLE_JIT else _copy22


@njit(cache=True, nogil=True)
def _spell(codes, t_off, t_data, offsets, out):
    n = len(codes)
    for i in range(n):
        c = codes[i]
        copy_within(out, offsets[i], t_data, t_off[c], t_off[c + 1], offsets[n])


def spelled(texts: list[bytes], codes: np.ndarray):
    """(int32 offsets, bytes) of a string column whose row i is ``texts[codes[i]]`` (a record type's name per
    record: what ``take`` over a few short strings gives, in one pass of word stores); None past 32-bit offsets."""
    lens = np.array([len(t) for t in texts], np.int64)
    offsets = np.zeros(len(codes) + 1, np.int64)
    np.cumsum(lens[codes], out=offsets[1:])
    if offsets[-1] >= 1 << 31:
        return None
    t_off = np.zeros(len(texts) + 1, np.int64)
    np.cumsum(lens, out=t_off[1:])
    out = np.empty(int(offsets[-1]), np.uint8)
    _spell(np.ascontiguousarray(codes, np.int64), t_off, np.frombuffer(b"".join(texts) + bytes(8), np.uint8), offsets,
           out)
    return offsets.astype(np.int32), out
