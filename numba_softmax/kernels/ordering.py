"""Device-scope acquire/release primitives for the DAG scheduler (inline PTX).

numba-cuda has only relaxed atomics and no acquire/release API (docs/machine.md, "numba-cuda 0.30.4", says how
these intrinsics are built and what the simulator runs instead); the DAG path of :mod:`.persistent` needs them:

===============================  ==========================================  =========
name                             PTX                                         returns
===============================  ==========================================  =========
``load_acquire_gpu(a, i)``       ``ld.acquire.gpu.global.u32``               a[i]
``load_relaxed_gpu(a, i)``       ``ld.relaxed.gpu.global.u32``               a[i]
``store_relaxed_gpu(a, i, v)``   ``st.relaxed.gpu.global.u32``               --
``fence_acq_rel_gpu()``          ``fence.acq_rel.gpu``                       --
``atomic_add_acq_rel_gpu(a,i,v)`` ``atom.acq_rel.gpu.global.add.u32``        old a[i]
``atomic_add_release_gpu(a,i,v)`` ``atom.release.gpu.global.add.u32``        old a[i]
``globaltimer()``                ``mov.u64 %globaltimer`` (trace builds)     uint64 ns
``smid()``                       ``mov.u32 %smid`` (trace builds)            uint32
``backoff(polls)``               ``nanosleep.u32`` 32, 64, 128, then 256 ns  --
``loop_nounroll()``              ``.pragma "nounroll"`` (loop body, first)   --
``wait_for_prerequisite_grid()`` ``griddepcontrol.wait``                     --
``let_dependent_grid_launch()``  ``griddepcontrol.launch_dependents``        --
===============================  ==========================================  =========

``a`` is a 1-D int32 / uint32 array, ``i`` an integer index; polls use the relaxed load. The last two are
programmatic dependent launch (sm_90; docs/experiment_b.md, "The schedulers").
"""

import time

from numba import cuda

from ..numerics import SIMULATOR

if SIMULATOR:

    @cuda.jit(device=True)
    def load_acquire_gpu(array, index):
        return array[index]

    @cuda.jit(device=True)
    def load_relaxed_gpu(array, index):
        return array[index]

    @cuda.jit(device=True)
    def store_relaxed_gpu(array, index, value):
        array[index] = value

    @cuda.jit(device=True)
    def fence_acq_rel_gpu():
        pass

    @cuda.jit(device=True)
    def atomic_add_acq_rel_gpu(array, index, value):
        return cuda.atomic.add(array, index, value)

    @cuda.jit(device=True)
    def atomic_add_release_gpu(array, index, value):
        return cuda.atomic.add(array, index, value)

    @cuda.jit(device=True)
    def globaltimer():
        # Host nanoseconds: the simulator runs blocks one after another, so trace
        # timestamps still show the order tasks ran in (never their GPU duration).
        return time.perf_counter_ns()

    @cuda.jit(device=True)
    def smid():
        return 0

    @cuda.jit(device=True)
    def backoff(polls):
        pass

    @cuda.jit(device=True)
    def pause_us(microseconds):
        pass

    @cuda.jit(device=True)
    def loop_nounroll():
        pass

    @cuda.jit(device=True)
    def wait_for_prerequisite_grid():
        pass  # the simulator runs launches one after another

    @cuda.jit(device=True)
    def let_dependent_grid_launch():
        pass

else:
    from llvmlite import ir
    from numba import types, uint32
    from numba.cuda.core.errors import TypingError
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    _GLOBAL_ADDRSPACE = 1

    def _check_word_array(name, array, index):
        if not (isinstance(array, types.Array) and array.ndim == 1):
            raise TypingError(f"{name}: expected a 1-D array, got {array}")
        if array.dtype not in (types.int32, types.uint32):
            raise TypingError(f"{name}: expected an int32 or uint32 array, got {array.dtype}")
        if not isinstance(index, types.Integer):
            raise TypingError(f"{name}: expected an integer index, got {index}")

    def _global_pointer(context, builder, array_type, array, index_type, index):
        """addrspace(1) pointer to ``array[index]`` (generic -> global conversion)."""
        ary = context.make_array(array_type)(context, builder, value=array)
        idx = context.cast(builder, index, index_type, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)
        element = context.get_value_type(array_type.dtype)
        return builder.addrspacecast(ptr, element.as_pointer(_GLOBAL_ADDRSPACE))

    def _check_word_value(name, array, index, value):
        _check_word_array(name, array, index)
        if not isinstance(value, types.Integer):
            raise TypingError(f"{name}: expected an integer value, got {value}")

    def _pointer_and_word(context, builder, sig, args):
        """The global pointer to ``array[index]`` and ``value`` as the array's word type (a store's or an add's)."""
        array_type, index_type, value_type = sig.args
        ptr = _global_pointer(context, builder, array_type, args[0], index_type, args[1])
        return ptr, context.cast(builder, args[2], value_type, array_type.dtype)

    def _word_type():
        return ir.IntType(32)

    def _make_load(name, ptx):
        @intrinsic
        def load(typingctx, array, index):
            _check_word_array(name, array, index)

            def codegen(context, builder, sig, args):
                array_type, index_type = sig.args
                ptr = _global_pointer(context, builder, array_type, args[0], index_type, args[1])
                fnty = ir.FunctionType(_word_type(), [ptr.type])
                asm = ir.InlineAsm(fnty, f"{ptx} $0, [$1];", "=r,l,~{memory}", side_effect=True)
                return builder.call(asm, [ptr])

            return array.dtype(array, index), codegen

        return load

    def _make_store(name, ptx):
        @intrinsic
        def store(typingctx, array, index, value):
            _check_word_value(name, array, index, value)

            def codegen(context, builder, sig, args):
                ptr, word = _pointer_and_word(context, builder, sig, args)
                fnty = ir.FunctionType(ir.VoidType(), [ptr.type, _word_type()])
                asm = ir.InlineAsm(fnty, f"{ptx} [$0], $1;", "l,r,~{memory}", side_effect=True)
                builder.call(asm, [ptr, word])
                return context.get_dummy_value()

            return types.void(array, index, value), codegen

        return store

    def _make_atomic_add(name, ptx):
        @intrinsic
        def atomic_add(typingctx, array, index, value):
            _check_word_value(name, array, index, value)

            def codegen(context, builder, sig, args):
                ptr, word = _pointer_and_word(context, builder, sig, args)
                fnty = ir.FunctionType(_word_type(), [ptr.type, _word_type()])
                asm = ir.InlineAsm(fnty, f"{ptx} $0, [$1], $2;", "=r,l,r,~{memory}",
                                   side_effect=True)
                return builder.call(asm, [ptr, word])

            return array.dtype(array, index, value), codegen

        return atomic_add

    load_acquire_gpu = _make_load("load_acquire_gpu", "ld.acquire.gpu.global.u32")
    load_relaxed_gpu = _make_load("load_relaxed_gpu", "ld.relaxed.gpu.global.u32")
    store_relaxed_gpu = _make_store("store_relaxed_gpu", "st.relaxed.gpu.global.u32")
    atomic_add_acq_rel_gpu = _make_atomic_add("atomic_add_acq_rel_gpu",
                                              "atom.acq_rel.gpu.global.add.u32")
    atomic_add_release_gpu = _make_atomic_add("atomic_add_release_gpu",
                                              "atom.release.gpu.global.add.u32")

    def ptx_statement(ptx):
        """An intrinsic taking no argument that emits the PTX statement ``ptx`` (side effect, memory clobber)."""
        @intrinsic
        def statement(typingctx):
            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.VoidType(), [])
                builder.call(ir.InlineAsm(fnty, ptx, "~{memory}", side_effect=True), [])
                return context.get_dummy_value()
            return types.void(), codegen
        return statement

    # Followed by a relaxed store, the fence is a release pattern (PTX memory model), so one fence can
    # release several flags written after it.
    fence_acq_rel_gpu = ptx_statement("fence.acq_rel.gpu;")
    wait_for_prerequisite_grid = ptx_statement("griddepcontrol.wait;")
    let_dependent_grid_launch = ptx_statement("griddepcontrol.launch_dependents;")

    @intrinsic
    def loop_nounroll(typingctx):
        """``.pragma "nounroll";`` as the first statement of a loop body: it lands in the loop's header
        block, and ptxas keeps that loop rolled, as nvcc's ``#pragma unroll 1`` asks it to (NVVM passes
        the statement through; a rolled loop in Numba's PTX is otherwise unrolled 4x by ptxas)."""
        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            # llvmlite writes the asm text into the IR as it is: the quotes go in as LLVM's escape \22.
            # No memory clobber: the pragma orders nothing.
            builder.call(ir.InlineAsm(fnty, '.pragma \\22nounroll\\22;', "", side_effect=True), [])
            return context.get_dummy_value()
        return types.void(), codegen

    @intrinsic
    def globaltimer(typingctx):
        """Nanosecond global timer (trace builds only)."""

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            asm = ir.InlineAsm(fnty, "mov.u64 $0, %globaltimer;", "=l", side_effect=True)
            return builder.call(asm, [])

        return types.uint64(), codegen

    @intrinsic
    def smid(typingctx):
        """The SM this thread runs on (trace builds only; never infer it from blockIdx)."""

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(32), [])
            asm = ir.InlineAsm(fnty, "mov.u32 $0, %smid;", "=r", side_effect=True)
            return builder.call(asm, [])

        return types.uint32(), codegen

    @cuda.jit(device=True)
    def pause_us(microseconds):
        """Sleep about ``microseconds`` (negative controls only: widens a race window)."""
        for _ in range(microseconds):
            cuda.nanosleep(uint32(1000))

    @cuda.jit(device=True, inline="always")
    def backoff(polls):
        """Sleep a little while spinning: 32, 64, 128, then 256 ns per poll."""
        shift = polls if polls < 3 else 3
        cuda.nanosleep(uint32(32 << shift))


__all__ = ["load_acquire_gpu", "load_relaxed_gpu", "store_relaxed_gpu", "fence_acq_rel_gpu",
           "atomic_add_acq_rel_gpu", "atomic_add_release_gpu", "globaltimer", "smid", "backoff", "pause_us",
           "loop_nounroll", "wait_for_prerequisite_grid", "let_dependent_grid_launch"]
