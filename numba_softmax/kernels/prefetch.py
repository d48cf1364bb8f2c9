"""L2 prefetch of a whole row, one wave ahead (``cp.async.bulk.prefetch.L2``, sm_90).

Why: a fused block is a short chain -- load, block max, exp, block sum, divide, store -- and
only its first step keeps DRAM busy. With 8 resident 256-thread blocks per SM, at 1024
columns an SM has at most 32 KB of loads in flight, about what the copy bandwidth times
the DRAM latency needs, and only while every block is in its load phase. A block that asks
the bulk-copy engine to pull the row of the block one *wave* later into L2 keeps DRAM
busy during its own reductions, and turns that later block's load into an L2 hit. One
thread issues one instruction per row; no register waits on it; values are unchanged.

``prefetch_row_l2(x, row, nbytes)``  ``cp.async.bulk.prefetch.L2.global [&x[row, 0]], nbytes``
                                    (nbytes a multiple of 16, the row 16-byte aligned: the
                                    vector builds' contract)
``sm_id_bound()``                   ``mov.u32 %nsmid``: an upper bound of the SM ids (the SM
                                    count, or a little more where ids have holes); the wave
                                    size is 8 resident blocks per SM times this

Measured on the H200 (tools/fused_probe.py, PERFORMANCE.md): at 16384x1024 the q1 build
went from 40.1 to 35.6 us; at 4096x4096 (16 KB rows, 6 resident blocks per SM) the same
prefetch made the kernel 17% slower, so only the narrow vector builds use it.

The simulator has neither instruction: there the names exist but raise (the vector builds
that call them are never chosen in the simulator).
"""

from ..numerics import SIMULATOR

if SIMULATOR:

    def prefetch_row_l2(x, row, nbytes):
        raise RuntimeError("cp.async.bulk.prefetch is not available in the simulator")

    def sm_id_bound():
        raise RuntimeError("%nsmid is not available in the simulator")

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    @intrinsic
    def prefetch_row_l2(typingctx, x, row, nbytes):
        """Ask the bulk-copy engine to bring ``nbytes`` of row ``row`` (from column 0) into L2."""
        if not (isinstance(x, types.Array) and x.ndim == 2 and x.dtype == types.float32):
            raise TypingError(f"prefetch_row_l2: expected a 2-D float32 array, got {x}")
        if not (isinstance(row, types.Integer) and isinstance(nbytes, types.Integer)):
            raise TypingError(f"prefetch_row_l2: expected integers, got {row}, {nbytes}")

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            indices = [context.cast(builder, args[1], sig.args[1], types.intp),
                       context.get_constant(types.intp, 0)]
            ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, indices, wraparound=False)
            address = builder.ptrtoint(ptr, ir.IntType(64))
            size = context.cast(builder, args[2], sig.args[2], types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "{ .reg .u64 g; cvta.to.global.u64 g, $0; "
                                     "cp.async.bulk.prefetch.L2.global [g], $1; }", "l,r", side_effect=True)
            builder.call(asm, [address, size])
            return context.get_dummy_value()

        return types.void(x, row, nbytes), codegen

    @intrinsic
    def sm_id_bound(typingctx):
        """``%nsmid``: the SM ids are below this."""

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [])
            return builder.call(ir.InlineAsm(fnty, "mov.u32 $0, %nsmid;", "=r", side_effect=False), [])

        return types.uint32(), codegen


__all__ = ["prefetch_row_l2", "sm_id_bound"]
