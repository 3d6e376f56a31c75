"""Two LLVM operations numba does not offer: ``prefetch`` and ``load8``.

``prefetch(a, i)``: ask the CPU to bring element ``i`` of array ``a`` into its caches, without waiting for it.

A compiled pass that reads rows in an order the memory does not follow (the change builder reads each record's
layout row while it walks the history, grouped by partition) waits about a hundred nanoseconds on every such
row; a load issued for a row some records ahead overlaps those waits.  A plain load cannot do that: it holds
its instruction until the data comes, and the loop's body is longer than what the core keeps in flight.
``llvm.prefetch`` is a hint with no result and no fault (an address past the array is harmless), so the pass
stays correct whatever the hint does.  Under ``NUMBA_DISABLE_JIT=1`` it does nothing.
"""
from __future__ import annotations

from numba import config, types
from numba.extending import intrinsic

if config.DISABLE_JIT:
    def prefetch(a, i):
        return None
else:
    @intrinsic
    def prefetch(typingctx, a, i):
        if not (isinstance(a, types.Array) and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            from llvmlite import ir

            ary = context.make_array(sig.args[0])(context, builder, args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [index]), ir.IntType(8).as_pointer())
            i32 = ir.IntType(32)
            fn = builder.module.declare_intrinsic(
                "llvm.prefetch", fnty=ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), i32, i32, i32]))
            # read (0), keep in all cache levels (3), data cache (1)
            builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.none(a, i), codegen


if config.DISABLE_JIT:
    def load8(a, i):
        return int.from_bytes(bytes(a[i:i + 8]), "little")
else:
    @intrinsic
    def load8(typingctx, a, i):
        """The eight bytes of the uint8 array ``a`` from byte ``i`` as one uint64 (little-endian), wherever they lie:
        comparing strings a word at a time instead of a byte at a time.  The caller keeps ``i + 8`` within the
        array (there is no bounds check)."""
        if not (isinstance(a, types.Array) and a.dtype == types.uint8 and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            from llvmlite import ir

            ary = context.make_array(sig.args[0])(context, builder, args[0])
            index = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = builder.bitcast(builder.gep(ary.data, [index]), ir.IntType(64).as_pointer())
            return builder.load(ptr, align=1)

        return types.uint64(a, i), codegen
