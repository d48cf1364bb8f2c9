"""Asynchronous bulk copies from global into shared memory, completed on an mbarrier (inline PTX, sm_90).

Hopper's copy engine (TMA) moves a contiguous span of global memory into a CTA's shared memory with no register
in between and reports its bytes to an mbarrier (64 bits of shared memory) whose phase the threads wait on. The
``_s{S}`` row geometries of :mod:`.auto_rows` use it (docs/auto_kernels.md, "Half of a row in shared memory"):

============================================  =====================================================================
name                                          PTX
============================================  =====================================================================
``mbarrier_init(bars, i, count)``             ``mbarrier.init.shared::cta.b64``
``fence_mbarrier_init()``                     ``fence.mbarrier_init.release.cluster``
``mbarrier_arrive(bars, i)``                  ``mbarrier.arrive.shared::cta.b64`` (a phase with no copy)
``bulk_copy_to_shared(bars, i, dst, src,``    ``mbarrier.arrive.expect_tx.shared::cta.b64`` +
``row, col, nbytes)``                         ``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes``
``mbarrier_try_wait(bars, i, parity)``        ``mbarrier.try_wait.parity.shared::cta.b64``: 1 once the phase of that
                                              parity has completed, else 0 (after the hardware's bounded wait)
``load_shared_quad(a, i)``                    ``ld.shared.v4.f32`` (``.v4.u16`` for 2-byte types): ``a[i:i + 4]``
``store_shared_quad(a, i, v0, v1, v2, v3)``   ``st.shared.v4.f32``
============================================  =====================================================================

``bars``: 1-D int64 shared array, one mbarrier each; ``dst``: 1-D shared array of ``src``'s element type
(float32, float16 or uint16 for bfloat16; the copy lands at its element 0); ``src[row, col]``: the first element
read; ``nbytes`` a multiple of 16, both addresses 16-byte aligned.
A count-1 barrier completes its phase once its one arrival has happened and every byte announced with it has
landed. GPU only (no copy engine in the simulator); how the intrinsics are built: docs/machine.md.
"""

from ..numerics import SIMULATOR

if not SIMULATOR:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    from .ordering import ptx_statement

    _SHARED = 3

    def _element_pointer(context, builder, array_type, array, index, index_type):
        ary = context.make_array(array_type)(context, builder, value=array)
        idx = context.cast(builder, index, index_type, types.intp)
        return cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)

    def _shared_address(context, builder, array_type, array, index, index_type):
        """The 32-bit shared-window address of ``array[index]``."""
        ptr = _element_pointer(context, builder, array_type, array, index, index_type)
        return builder.ptrtoint(builder.addrspacecast(ptr, ptr.type.pointee.as_pointer(_SHARED)), ir.IntType(32))

    def _shared_quad_pointer(context, builder, array_type, array, index, index_type):
        ptr = _element_pointer(context, builder, array_type, array, index, index_type)
        quad = ir.VectorType(context.get_value_type(array_type.dtype), 4)
        return builder.addrspacecast(builder.bitcast(ptr, quad.as_pointer()), quad.as_pointer(_SHARED))

    #: Element types a bulk copy moves and a shared quad holds (bfloat16 as its uint16 bits).
    _ELEMENTS = (types.float32, types.float16, types.uint16)

    def _check_bars(name, bars, index):
        if not (isinstance(bars, types.Array) and bars.ndim == 1 and bars.dtype == types.int64):
            raise TypingError(f"{name}: expected a 1-D int64 shared array of mbarriers, got {bars}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"{name}: expected an integer barrier index, got {index}")

    def _check_shared_floats(name, array, index, elements=(types.float32,)):
        if not (isinstance(array, types.Array) and array.ndim == 1 and array.dtype in elements):
            raise TypingError(f"{name}: expected a 1-D shared array of {[str(e) for e in elements]}, got {array}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"{name}: expected an integer index, got {index}")

    fence_mbarrier_init = ptx_statement("fence.mbarrier_init.release.cluster;")

    @intrinsic
    def mbarrier_init(typingctx, bars, index, count):
        """Initialize mbarrier ``bars[index]`` for ``count`` arrivals per phase (one thread, before use)."""
        _check_bars("mbarrier_init", bars, index)

        def codegen(context, builder, sig, args):
            address = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            n = context.cast(builder, args[2], sig.args[2], types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "mbarrier.init.shared::cta.b64 [$0], $1;", "r,r,~{memory}", side_effect=True)
            builder.call(asm, [address, n])
            return context.get_dummy_value()

        return types.void(bars, index, count), codegen

    @intrinsic
    def mbarrier_arrive(typingctx, bars, index):
        """One arrival on ``bars[index]`` with no bytes: completes a phase that has no copy."""
        _check_bars("mbarrier_arrive", bars, index)

        def codegen(context, builder, sig, args):
            address = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [$0];\n}",
                               "r,~{memory}", side_effect=True)
            builder.call(asm, [address])
            return context.get_dummy_value()

        return types.void(bars, index), codegen

    @intrinsic
    def bulk_copy_to_shared(typingctx, bars, index, dst, src, row, col, nbytes):
        """Arrive on ``bars[index]`` announcing ``nbytes`` and start the copy of ``nbytes`` from ``src[row,
        col]`` on (global, 2-D) to ``dst[0:]`` (shared) that completes them."""
        _check_bars("bulk_copy_to_shared", bars, index)
        if not (isinstance(src, types.Array) and src.ndim == 2 and src.dtype in _ELEMENTS):
            raise TypingError(f"bulk_copy_to_shared: expected a 2-D float32, float16 or uint16 src array, got {src}")
        if not (isinstance(dst, types.Array) and dst.ndim == 1 and dst.dtype == src.dtype):
            raise TypingError(f"bulk_copy_to_shared: expected a 1-D shared dst array of {src.dtype}, got {dst}")
        if not all(isinstance(v, types.Integer) for v in (row, col, nbytes)):
            raise TypingError("bulk_copy_to_shared: expected integer row, column and size")

        def codegen(context, builder, sig, args):
            bar = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            to = _shared_address(context, builder, sig.args[2], args[2], context.get_constant(types.intp, 0),
                                 types.intp)
            src_ary = context.make_array(sig.args[3])(context, builder, value=args[3])
            idx = [context.cast(builder, v, t, types.intp) for v, t in zip(args[4:6], sig.args[4:6], strict=True)]
            src_ptr = cgutils.get_item_pointer(context, builder, sig.args[3], src_ary, idx, wraparound=False)
            source = builder.ptrtoint(src_ptr, ir.IntType(64))
            size = context.cast(builder, args[6], sig.args[6], types.uint32)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(32), ir.IntType(32), ir.IntType(64), ir.IntType(32)])
            asm = ir.InlineAsm(
                fnty,
                "{\n.reg .b64 state;\n.reg .u64 g;\n"
                "mbarrier.arrive.expect_tx.shared::cta.b64 state, [$0], $3;\n"
                "cvta.to.global.u64 g, $2;\n"
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$1], [g], $3, [$0];\n}",
                "r,r,l,r,~{memory}", side_effect=True)
            builder.call(asm, [bar, to, source, size])
            return context.get_dummy_value()

        return types.void(bars, index, dst, src, row, col, nbytes), codegen

    @intrinsic
    def mbarrier_try_wait(typingctx, bars, index, parity):
        """1 once the phase of ``parity`` (0 or 1) of ``bars[index]`` has completed, else 0 after the
        hardware's bounded wait: callers loop."""
        _check_bars("mbarrier_try_wait", bars, index)

        def codegen(context, builder, sig, args):
            address = _shared_address(context, builder, sig.args[0], args[0], args[1], sig.args[1])
            phase = context.cast(builder, args[2], sig.args[2], types.uint32)
            fnty = ir.FunctionType(ir.IntType(32), [ir.IntType(32), ir.IntType(32)])
            asm = ir.InlineAsm(fnty, "{\n.reg .pred done;\nmbarrier.try_wait.parity.shared::cta.b64 done, [$1], $2;\n"
                                     "selp.u32 $0, 1, 0, done;\n}", "=r,r,r,~{memory}", side_effect=True)
            return builder.call(asm, [address, phase])

        return types.uint32(bars, index, parity), codegen

    @intrinsic
    def load_shared_quad(typingctx, array, index):
        """``(a[i], a[i + 1], a[i + 2], a[i + 3])`` of a shared array of float32 (one 16-byte load) or of a 2-byte
        type (one 8-byte load); ``i`` a multiple of 4."""
        _check_shared_floats("load_shared_quad", array, index, _ELEMENTS)

        def codegen(context, builder, sig, args):
            vector = builder.load(_shared_quad_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1]),
                                  align=4 * sig.args[0].dtype.bitwidth // 8)
            lanes = [builder.extract_element(vector, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return types.UniTuple(array.dtype, 4)(array, index), codegen

    @intrinsic
    def store_shared_quad(typingctx, array, index, a, b, c, d):
        """``a[i:i + 4] = (a, b, c, d)`` in a 16-byte aligned float32 shared array, one 16-byte store."""
        _check_shared_floats("store_shared_quad", array, index)
        for value in (a, b, c, d):
            if value != types.float32:
                raise TypingError(f"store_shared_quad: expected float32 values, got {value}")

        def codegen(context, builder, sig, args):
            vector = ir.Constant(ir.VectorType(ir.FloatType(), 4), ir.Undefined)
            for k in range(4):
                vector = builder.insert_element(vector, args[2 + k], ir.Constant(ir.IntType(32), k))
            builder.store(vector, _shared_quad_pointer(context, builder, sig.args[0], args[0], args[1], sig.args[1]),
                          align=16)
            return context.get_dummy_value()

        return types.void(array, index, a, b, c, d), codegen

    __all__ = ["mbarrier_init", "fence_mbarrier_init", "mbarrier_arrive", "bulk_copy_to_shared", "mbarrier_try_wait",
               "load_shared_quad", "store_shared_quad"]
else:
    __all__ = []
