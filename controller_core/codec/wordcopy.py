"""Unaligned 8-byte loads and stores on uint8 arrays, for the compiled byte loops (the CRC walk, the JSON
writers).  A byte loop copies about half a byte per nanosecond on the 2.5 GHz cores measured; eight at a
time, the literal text around a decode line's values (two thirds of its bytes) stops dominating."""
from __future__ import annotations

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
