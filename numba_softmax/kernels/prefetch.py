"""L2 prefetch of a whole row, one wave ahead (``cp.async.bulk.prefetch.L2``, sm_90).

A fused block asks the bulk-copy engine to pull the row of the block one *wave* later into L2, which keeps DRAM
busy during its own reductions and turns that later block's load into an L2 hit (why the fused kernel needs it:
docs/experiment_a.md, "Variants"). One thread issues one instruction per row; no register waits on it; values
are unchanged.

``prefetch_l2(a, offset, nbytes)``  ``cp.async.bulk.prefetch.L2.global [a.data + offset], nbytes``
                                    for any device array ``a``; ``offset`` (bytes from the
                                    array's start, which is 256-byte aligned) and ``nbytes``
                                    must be multiples of 16 and stay inside the array: the
                                    caller rounds (:func:`aligned_span` does it for a span of
                                    float32 elements)
``sm_id_bound()``                   ``mov.u32 %nsmid``: an upper bound of the SM ids (the SM
                                    count, or a little more where ids have holes); the wave
                                    size is 8 resident blocks per SM times this

Measured on the H200 (recorded in docs/attempts.md, fused kernel section): at 16384x1024 the q1 build went from
40.1 to 35.6 us; at 4096x4096 (16 KB rows, 6 resident blocks per SM) the same prefetch made the kernel 17%
slower, so only the narrow vector builds use it. In the simulator it does nothing and ``sm_id_bound`` is 1.
"""

from numba import cuda

from ..numerics import BLOCK_THREADS, SIMULATOR

#: Resident 256-thread blocks per SM when registers allow (2048 threads / 256): one wave is
#: this many blocks per SM, and the prefetch distance is one wave.
BLOCKS_PER_SM_WAVE = 2048 // BLOCK_THREADS

if SIMULATOR:

    # A prefetch is only a hint: doing nothing is a faithful emulation.
    def prefetch_l2(array, offset, nbytes):
        pass

    def sm_id_bound():
        return 1

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    @intrinsic
    def prefetch_l2(typingctx, array, offset, nbytes):
        """Ask the bulk-copy engine to bring ``nbytes`` at byte ``offset`` of ``array`` into L2."""
        if not isinstance(array, types.Array):
            raise TypingError(f"prefetch_l2: expected a device array, got {array}")
        if not (isinstance(offset, types.Integer) and isinstance(nbytes, types.Integer)):
            raise TypingError(f"prefetch_l2: expected integer offset and size, got {offset}, {nbytes}")

        def codegen(context, builder, sig, args):
            ary = context.make_array(sig.args[0])(context, builder, value=args[0])
            base = builder.ptrtoint(ary.data, ir.IntType(64))
            address = builder.add(base, context.cast(builder, args[1], sig.args[1], types.uint64))
            size = context.cast(builder, args[2], sig.args[2], types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "{ .reg .u64 g; cvta.to.global.u64 g, $0; "
                                     "cp.async.bulk.prefetch.L2.global [g], $1; }", "l,r", side_effect=True)
            builder.call(asm, [address, size])
            return context.get_dummy_value()

        return types.void(array, offset, nbytes), codegen

    @intrinsic
    def sm_id_bound(typingctx):
        """``%nsmid``: the SM ids are below this."""

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [])
            return builder.call(ir.InlineAsm(fnty, "mov.u32 $0, %nsmid;", "=r", side_effect=False), [])

        return types.uint32(), codegen


@cuda.jit(device=True, inline="always")
def prefetch_span_l2(array, first, count):
    """Prefetch float32 elements ``first .. first + count`` of the 1-D ``array`` into L2,
    widened to 16-byte boundaries and clipped to the array (the bulk prefetch's rules)."""
    lo = (first * 4) & ~15
    hi = min(((first + count) * 4 + 15) & ~15, (array.shape[0] * 4) & ~15)
    if hi > lo:
        prefetch_l2(array, lo, hi - lo)


__all__ = ["prefetch_l2", "prefetch_span_l2", "sm_id_bound"]
