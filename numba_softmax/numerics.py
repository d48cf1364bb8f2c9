"""The one numerics policy every kernel in this project uses.

The protocol fixes one arithmetic policy for all custom kernels: IEEE float32, the
libdevice ``expf``, no fused multiply-add contraction (what nvcc does with
``--fmad=false``), IEEE round-to-nearest division, and block reductions that combine
values in one fixed order. Variants that share an algorithm then produce the same bits.

Why each piece looks the way it does
------------------------------------
* ``@cuda.jit(fastmath=False)`` alone does NOT stop contraction: NVVM contracts
  ``a*b + c`` into ``fma.rn.f32`` by default and the LTO link ignores ``-fma=0``
  (see docs/machine.md). So every add, subtract and multiply a kernel writes goes through
  :func:`f32_add`, :func:`f32_sub`, :func:`f32_mul`: on the GPU they are libdevice's
  ``__nv_fadd_rn`` / ``__nv_fsub_rn`` / ``__nv_fmul_rn``, which lower to ``add.rn.f32``
  / ``sub.rn.f32`` / ``mul.rn.f32``. The explicit rounding mode forbids ptxas from
  fusing them later, exactly like nvcc ``--fmad=false``.
* :func:`f32_exp` is ``math.exp`` on a float32, which Numba lowers to libdevice
  ``__nv_expf`` -- the same routine nvcc's ``expf`` uses (3 ``fma.rn``, 1 ``fma.rm``,
  one ``ex2.approx.ftz.f32``). Those fmas are part of expf's own algorithm, not
  contraction of our source; the PTX policy check (``numba_softmax.ptx``) accounts for
  exactly that signature.
* Division is plain ``/`` on float32 values: NVVM emits ``div.rn.f32`` (IEEE), as
  nvcc does with its default ``-prec-div=true``.
* Index division is :func:`udiv` (unsigned, one width), LLVM's ``udiv``: Numba's ``//`` keeps
  Python's rule for a zero divisor (a test and a branch per division, 3-4 SASS instructions on
  the kernel's critical path) where C's ``/`` has none. The callers divide only by a size they
  have just compared with a nonzero bound; NVVM still gives a 64-bit division its 32-bit fast
  path, as nvcc does.
* :func:`block_reduce_max` / :func:`block_reduce_sum` combine in one fixed order: each
  warp reduces its 32 lanes with an xor butterfly (offsets 16, 8, 4, 2, 1), then every
  thread folds the per-warp partials sequentially, warp 0 first. Floating-point
  addition is commutative, so all lanes of a warp end with the same bits, and the
  result does not depend on timing. Per-thread accumulation (before the block
  reduction) follows one ownership rule: in a row, thread t of the 256 owns the
  quads of 4 consecutive columns starting at ``QUAD * (t + 256 * q)``, q = 0, 1, ...,
  and folds its elements sequentially in increasing column order. Row kernels follow
  that rule (:func:`owned_columns` documents it on the host), so e.g. the four-stage
  path and the fused kernel agree bit for bit, and the fused kernel can load a quad
  with one 16-byte instruction. Experiment B's 1024-element tiles follow the same rule
  on 128-thread blocks (thread t owns the quads at ``QUAD * (t + 128 * q)``, q = 0, 1);
  :func:`block_reductions` builds the same reductions for such a block size.

Element types
-------------
Kernels read and write float32, float16, bfloat16 and float64 (:mod:`.element_types`). ``softmax(x, dtype=)``
follows torch: the input is cast to the output type first, then the operation runs. float16 and bfloat16 are
storage only: a value is converted exactly to float32 at the load (rounded to the output type first where the
cast loses bits), the policy above runs in float32, and the quotient is rounded once, to the nearest even, at
the store (``cvt.rn.f16.f32`` / ``cvt.rn.bf16.f32``). float64 results are computed in float64 with the same
policy in double precision (:data:`F64`: ``add.rn.f64``, ``mul.rn.f64``, libdevice ``exp``, ``div.rn.f64``,
the same reduction order); a float64 input cast to a 2-byte type is rounded through float32. Each kernel
takes the operations of its compute type from :func:`arithmetic` (:class:`Arithmetic`); the float32 ones are
the functions above, so float32 builds are unchanged by the other types.

log_softmax and the backward
----------------------------
The same policy covers them: log_softmax writes ``(x - m) - log z`` (two rounded subtractions, torch's order)
with libdevice ``logf`` (``__nv_logf``: :func:`f32_log`; float64 ``__nv_log``) once per row; its own fmas, and
the float64 log's ``rcp.approx.ftz.f64`` seed, are the only ones the PTX check allows besides ``expf``'s. The
backward computes ``s = sum(dy * y)`` (softmax) or ``sum(dy)`` (log_softmax) with every multiply and add rounded
on its own (no contraction: ``mul.rn`` then ``add.rn``, never ``fma``), in the forward's reduction order, then
``y * (dy - s)`` or ``dy - exp(y) * s``, again rounded operation by operation.

The Numba CUDA simulator has no libdevice and no warp shuffles. When
``NUMBA_ENABLE_CUDASIM=1`` the same names are bound to plain Python/NumPy float32
helpers, and the block reductions emulate the warp butterfly through shared memory
in the same combination order. The simulator is for logic only; its bits and speed
say nothing about the GPU.
"""

import math

import numpy as np
from typing import NamedTuple

from numba import cuda, float32, float64, int32, uint32

from .element_types import ELEMENT_TYPES
from .simulator import SIMULATOR

#: Threads per block of every row kernel (the protocol's 256); tile tasks use 128 (kernels/tiles.py).
BLOCK_THREADS = 256
WARP_SIZE = 32
WARPS_PER_BLOCK = BLOCK_THREADS // WARP_SIZE
#: Byte alignment of a block reduction's shared ``partials``: 16-byte aligned, the fold reads the
#: warp partials four at a time (LDS.128), as nvcc does for its twins' ``__shared__`` arrays. The
#: simulator refuses an alignment (and has no shared-memory instructions to save).
PARTIALS_ALIGNMENT = None if SIMULATOR else 16
#: Consecutive columns a thread owns in a row reduction (one 16-byte vector).
QUAD = 4
#: Identity of the max reduction. Rows are never empty, so it never survives.
NEG_INF = float32(-np.inf)


def _check_block_threads(threads):
    """Warps in a block of ``threads`` threads (a positive multiple of 32, at most 1024)."""
    if threads % WARP_SIZE or not 0 < threads <= 1024:
        raise ValueError(f"block reductions need a multiple of {WARP_SIZE} threads up to 1024, got {threads}")
    return threads // WARP_SIZE

def compute_type(out_type):
    """The type a kernel computes in for results of ``out_type``: float64 for float64, else float32 (the input
    is first converted to ``out_type``, as ``torch.softmax(x, dtype=)`` casts it before the operation)."""
    if out_type not in ELEMENT_TYPES:
        raise ValueError(f"element type {out_type!r}: expected one of {ELEMENT_TYPES}")
    return "float64" if out_type == "float64" else "float32"


class Arithmetic(NamedTuple):
    """The policy's operations in one compute type: what a kernel body calls for every add, subtract,
    multiply, divide, exponential and max, and its constants."""
    name: str
    add: object
    sub: object
    mul: object
    div: object
    exp: object
    max: object
    numba_type: object
    neg_inf: object
    zero: object
    log: object


#: Options every kernel in this project is compiled with (explicit, per the protocol).
KERNEL_OPTIONS = {"fastmath": False}

#: How a device function of the packed bodies (kernels/auto_narrow.py) is inlined: by NVVM (``forceinline``), not
#: by Numba's IR inliner (``inline="always"``), whose copy of the callee's IR for each of a build's ~175 nested
#: inlines took minutes per build. The PTX is the same but for virtual register numbers (docs/ptx.md). The
#: simulator calls device functions as Python and takes neither option.
NVVM_INLINE = {} if SIMULATOR else {"forceinline": True}


def bounded_kernel(kernel, threads, min_blocks_per_sm):
    """``kernel`` compiled with launch bounds: at most ``threads`` per block and registers few enough
    for ``min_blocks_per_sm`` such blocks on one SM (``.maxntid`` / ``.minnctapersm`` for ptxas). The
    simulator has no launch bounds and compiles it plainly."""
    if SIMULATOR:
        return cuda.jit(**KERNEL_OPTIONS)(kernel)
    return cuda.jit(launch_bounds=(threads, min_blocks_per_sm), **KERNEL_OPTIONS)(kernel)


def reduction_pair(reduce):
    """``(reduce_max, reduce_sum)(value, partials)`` from one simulator ``reduce(value, partials, is_max)``."""

    @cuda.jit(device=True)
    def reduce_max(value, partials):
        return reduce(value, partials, True)

    @cuda.jit(device=True)
    def reduce_sum(value, partials):
        return reduce(value, partials, False)

    return reduce_max, reduce_sum


if SIMULATOR:
    # ---- simulator bindings: same names, plain float32 arithmetic -------------------
    # Device functions (not plain functions) so the simulator hands them its fake
    # ``cuda`` module (shared arrays, syncthreads) when they run inside a kernel.

    @cuda.jit(device=True)
    def f32_add(a, b):
        return float32(np.float32(a) + np.float32(b))

    @cuda.jit(device=True)
    def f32_sub(a, b):
        return float32(np.float32(a) - np.float32(b))

    @cuda.jit(device=True)
    def f32_mul(a, b):
        return float32(np.float32(a) * np.float32(b))

    @cuda.jit(device=True)
    def f32_max(a, b):
        return float32(max(np.float32(a), np.float32(b)))

    @cuda.jit(device=True)
    def f32_exp(a):
        return float32(np.exp(np.float32(a)))

    @cuda.jit(device=True)
    def f32_div(a, b):
        return float32(np.float32(a) / np.float32(b))

    @cuda.jit(device=True)
    def f64_add(a, b):
        return float64(np.float64(a) + np.float64(b))

    @cuda.jit(device=True)
    def f64_sub(a, b):
        return float64(np.float64(a) - np.float64(b))

    @cuda.jit(device=True)
    def f64_mul(a, b):
        return float64(np.float64(a) * np.float64(b))

    @cuda.jit(device=True)
    def f64_max(a, b):
        return float64(max(np.float64(a), np.float64(b)))

    @cuda.jit(device=True)
    def f64_exp(a):
        return float64(np.exp(np.float64(a)))

    @cuda.jit(device=True)
    def f64_div(a, b):
        return float64(np.float64(a) / np.float64(b))

    @cuda.jit(device=True)
    def f32_log(a):
        return float32(np.log(np.float32(a)))

    @cuda.jit(device=True)
    def f64_log(a):
        return float64(np.log(np.float64(a)))

    # The simulator has no approximate instructions: the diagnostic fast-math builds run the policy's.
    approx_exp, approx_div = f32_exp, f32_div

    def udiv(a, b):
        return a // b

    def _make_sim_reductions(threads, max_op=f32_max, add_op=f32_add, value_type=float32):
        """Emulates the GPU helpers below: butterfly inside each warp, then a sequential fold
        of the warp partials over a block of ``threads`` threads. The in-place tree follows
        exactly lane 0's combination path of the xor butterfly."""
        nwarps = threads // WARP_SIZE
        MAX, ADD, TYPE = max_op, add_op, value_type

        @cuda.jit(device=True)
        def _combine(a, b, is_max):
            return MAX(a, b) if is_max else ADD(a, b)

        @cuda.jit(device=True)
        def block_reduce(value, partials, is_max):
            scratch = cuda.shared.array(BLOCK_THREADS, TYPE)
            tid = cuda.threadIdx.x
            scratch[tid] = value
            cuda.syncthreads()
            if tid == 0:
                for w in range(nwarps):
                    lanes = [scratch[w * WARP_SIZE + i] for i in range(WARP_SIZE)]
                    offset = WARP_SIZE // 2
                    while offset > 0:
                        for i in range(offset):
                            lanes[i] = _combine(lanes[i], lanes[i + offset], is_max)
                        offset //= 2
                    partials[w] = lanes[0]
                total = partials[0]
                for w in range(1, nwarps):
                    total = _combine(total, partials[w], is_max)
                scratch[0] = total
            cuda.syncthreads()
            result = scratch[0]
            cuda.syncthreads()
            return result

        return reduction_pair(block_reduce)

    block_reduce_max, block_reduce_sum = _make_sim_reductions(BLOCK_THREADS)

    @cuda.jit(device=True)
    def warp_reduce_max(value):
        raise NotImplementedError("warp shuffles do not exist in the simulator (warp builds are GPU only)")

    @cuda.jit(device=True)
    def warp_reduce_sum(value):
        raise NotImplementedError("warp shuffles do not exist in the simulator (warp builds are GPU only)")

    def block_reductions(threads, arith=None):
        _check_block_threads(threads)
        if arith is not None and arith.name != "float32":
            return _make_sim_reductions(threads, arith.max, arith.add, arith.numba_type)
        if threads == BLOCK_THREADS:
            return block_reduce_max, block_reduce_sum
        return _make_sim_reductions(threads)

else:
    # ---- GPU bindings ----------------------------------------------------------------
    from numba.cuda import libdevice

    f32_add = libdevice.fadd_rn
    f32_sub = libdevice.fsub_rn
    f32_mul = libdevice.fmul_rn
    f32_max = libdevice.fmaxf

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f32_exp(a):
        return math.exp(a)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f32_div(a, b):
        return a / b

    # float64: the same policy in double precision (``add.rn.f64``..., libdevice ``exp``, ``div.rn.f64``).
    f64_add = libdevice.dadd_rn
    f64_mul = libdevice.dmul_rn

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f64_sub(a, b):
        return libdevice.dadd_rn(a, -b)  # libdevice has no dsub_rn; a - b is a + (-b), exactly

    f64_max = libdevice.fmax

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f64_exp(a):
        return math.exp(a)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f64_div(a, b):
        return a / b

    # log_softmax's log of the row sum: libdevice ``__nv_logf`` / ``__nv_log`` (``math.log``), as nvcc's ``logf``.
    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f32_log(a):
        return math.log(a)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def f64_log(a):
        return math.log(a)

    # NOT the policy: the approximate exponential (``ex2.approx`` of x log2(e)) and division (``div.approx``)
    # Triton's softmax uses. Only the diagnostic ``*_fastmath`` auto geometries call them, to measure what the
    # policy's IEEE ``expf`` and division cost (docs/auto_kernels.md); no registered kernel does, and the PTX
    # policy check rejects them.
    approx_exp = libdevice.fast_expf
    approx_div = libdevice.fast_fdividef

    from numba import types
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    @intrinsic
    def udiv(typingctx, a, b):
        """``a // b`` for two unsigned integers of one width, without the zero-divisor branch
        (the caller guarantees ``b != 0``)."""
        if not (isinstance(a, types.Integer) and not a.signed and a == b):
            raise TypingError(f"udiv: expected two unsigned integers of one width, got {a} and {b}")

        def codegen(context, builder, sig, args):
            return builder.udiv(*args)

        return a(a, b), codegen

    _FULL_MASK = 0xFFFFFFFF
    _u32 = uint32
    _LANE_MASK = np.uint32(WARP_SIZE - 1)
    _WARP_SHIFT = np.uint32(5)
    _U32_ZERO = np.uint32(0)

    def _make_reductions(combine, name, warps=WARPS_PER_BLOCK):
        """The warp and block reductions for one combining operation (max, add), one order,
        for blocks of ``warps`` warps (a compile-time constant of the fold)."""
        WARPS = warps

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def warp_reduce(value):
            offset = WARP_SIZE // 2
            while offset > 0:
                value = combine(value, cuda.shfl_xor_sync(_FULL_MASK, value, offset))
                offset //= 2
            return value

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def block_reduce(value, partials):
            value = warp_reduce(value)
            # Unsigned lane/warp arithmetic and a compile-time warp count: no signed floor
            # division, no negative-index wraparound, and a fully unrolled fold. With the
            # run-time ``blockDim.x // 32`` bound and int64 indices, this fold alone cost
            # ~150 integer SASS instructions per thread and made the fused kernel 2x slower
            # (PERFORMANCE.md). The block has exactly WARPS warps.
            tid = _u32(cuda.threadIdx.x)
            if tid & _LANE_MASK == _U32_ZERO:
                partials[tid >> _WARP_SHIFT] = value
            cuda.syncthreads()
            total = partials[0]
            for w in range(1, WARPS):
                total = combine(total, partials[w])
            # The partials array is reused by the next reduction: nobody may overwrite it
            # before every thread has read it.
            cuda.syncthreads()
            return total

        warp_reduce.__doc__ = f"{name} over the 32 lanes of a warp (xor butterfly); every lane gets it."
        block_reduce.__doc__ = f"{name} over a block of {warps} warps. ``partials``: shared float32[{warps}]."
        return warp_reduce, block_reduce

    warp_reduce_max, block_reduce_max = _make_reductions(f32_max, "Max")
    warp_reduce_sum, block_reduce_sum = _make_reductions(f32_add, "Sum")

    def block_reductions(threads, arith=None):
        """``(block_reduce_max, block_reduce_sum)`` for blocks of ``threads`` threads (a
        multiple of 32): the same butterfly and the same sequential fold of the warp
        partials, warp 0 first, over ``threads // 32`` partials (of ``arith``'s type: float32 by default)."""
        if threads == BLOCK_THREADS and (arith is None or arith.name == "float32"):
            return block_reduce_max, block_reduce_sum
        warps = _check_block_threads(threads)
        max_op, add_op = (f32_max, f32_add) if arith is None else (arith.max, arith.add)
        return _make_reductions(max_op, "Max", warps)[1], _make_reductions(add_op, "Sum", warps)[1]


F32 = Arithmetic("float32", f32_add, f32_sub, f32_mul, f32_div, f32_exp, f32_max, float32, NEG_INF, float32(0.0),
                 f32_log)
F64 = Arithmetic("float64", f64_add, f64_sub, f64_mul, f64_div, f64_exp, f64_max, float64, float64(-np.inf),
                 float64(0.0), f64_log)


def arithmetic(compute):
    """The :class:`Arithmetic` of a compute type (``"float32"`` or ``"float64"``)."""
    if compute not in ("float32", "float64"):
        raise ValueError(f"compute type {compute!r}: expected 'float32' or 'float64'")
    return F32 if compute == "float32" else F64


def owned_columns(tid, cols, threads=BLOCK_THREADS):
    """Columns thread ``tid`` of a ``threads``-thread row (or tile) reduction owns, in the
    order it folds them."""
    return [base + j for base in range(QUAD * tid, cols, QUAD * threads)
            for j in range(QUAD) if base + j < cols]


def host_block_reduce(values, is_max):
    """The same combination order on the host, in float32 (for tests and docs).

    ``values`` holds one float32 per thread (length a multiple of 32).
    """
    values = np.asarray(values, dtype=np.float32)
    op = np.maximum if is_max else np.add
    partials = []
    for w in range(len(values) // WARP_SIZE):
        lanes = list(values[w * WARP_SIZE:(w + 1) * WARP_SIZE])
        offset = WARP_SIZE // 2
        while offset > 0:
            for i in range(offset):
                lanes[i] = np.float32(op(lanes[i], lanes[i + offset]))
            offset //= 2
        partials.append(lanes[0])
    total = partials[0]
    for p in partials[1:]:
        total = np.float32(op(total, p))
    return total


__all__ = [
    "BLOCK_THREADS", "WARP_SIZE", "WARPS_PER_BLOCK", "QUAD", "owned_columns", "NEG_INF", "SIMULATOR", "KERNEL_OPTIONS",
    "NVVM_INLINE",
    "f32_add", "f32_sub", "f32_mul", "f32_max", "f32_exp", "f32_div", "udiv", "approx_exp", "approx_div",
    "warp_reduce_max", "warp_reduce_sum", "block_reduce_max", "block_reduce_sum", "block_reductions",
    "host_block_reduce", "int32", "ELEMENT_TYPES", "compute_type", "Arithmetic", "arithmetic", "F32", "F64",
    "f64_add", "f64_sub", "f64_mul", "f64_max", "f64_exp", "f64_div", "f32_log", "f64_log",
]
