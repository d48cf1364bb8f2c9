"""Thread block cluster primitives for the cluster row kernels of ``method="auto"`` (inline PTX, sm_90).

A cluster is a group of CTAs that Hopper schedules together on the SMs of one GPC: they can read and write each
other's shared memory and meet at a hardware barrier; numba-cuda has no API for either. How the cluster kernels use
these: docs/auto_kernels.md, "Rows in a thread block cluster"; how the intrinsics are built: docs/machine.md.

================================================  ==============================================================
name                                              PTX
================================================  ==============================================================
``cluster_arrive_relaxed()``                      ``barrier.cluster.arrive.relaxed``
``cluster_arrive()``                              ``barrier.cluster.arrive.release``
``cluster_wait()``                                ``barrier.cluster.wait.acquire``
``cluster_store_f32(shared, index, rank, v)``     ``mapa.shared::cluster.u32`` + ``st.shared::cluster.f32``
================================================  ==============================================================

``cluster_store_f32`` writes ``v`` into element ``index`` of the shared array ``shared`` of the cluster's CTA
``rank`` (its own copy of the same array): ``mapa`` maps the element's 32-bit shared-window address into that
CTA's window. The release arrive and acquire wait order every thread's shared-memory writes (remote ones
included) before the reads after the wait, in every CTA of the cluster. A CTA must not write into another's
shared memory before that CTA has started. GPU only: the simulator has no clusters.
"""

from ..numerics import SIMULATOR

if not SIMULATOR:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    _SHARED_ADDRSPACE = 3

    from .ordering import ptx_statement

    cluster_arrive_relaxed = ptx_statement("barrier.cluster.arrive.relaxed;")
    cluster_arrive = ptx_statement("barrier.cluster.arrive.release;")
    cluster_wait = ptx_statement("barrier.cluster.wait.acquire;")

    @intrinsic
    def cluster_store_f32(typingctx, shared, index, rank, value):
        """``shared[index] = value`` in the shared memory of the cluster's CTA ``rank``."""
        if not (isinstance(shared, types.Array) and shared.ndim == 1 and shared.dtype == types.float32):
            raise TypingError(f"cluster_store_f32: expected a 1-D float32 shared array, got {shared}")
        if not isinstance(index, types.Integer) or not isinstance(rank, types.Integer):
            raise TypingError(f"cluster_store_f32: expected integer index and rank, got {index}, {rank}")
        if value != types.float32:
            raise TypingError(f"cluster_store_f32: expected a float32 value, got {value}")

        def codegen(context, builder, sig, args):
            array_type, index_type, rank_type, _ = sig.args
            ary = context.make_array(array_type)(context, builder, value=args[0])
            idx = context.cast(builder, args[1], index_type, types.intp)
            ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)
            shared_ptr = builder.addrspacecast(ptr, ir.FloatType().as_pointer(_SHARED_ADDRSPACE))
            address = builder.ptrtoint(shared_ptr, ir.IntType(32))
            cta = context.cast(builder, args[2], rank_type, types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), ir.IntType(32), ir.FloatType()])
            asm = ir.InlineAsm(fnty, "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, $0, $1;\n"
                                     "st.shared::cluster.f32 [remote], $2;\n}",
                               "r,r,f,~{memory}", side_effect=True)
            builder.call(asm, [address, cta, args[3]])
            return context.get_dummy_value()

        return types.void(shared, index, rank, value), codegen

    __all__ = ["cluster_arrive_relaxed", "cluster_arrive", "cluster_wait", "cluster_store_f32"]
else:
    __all__ = []
