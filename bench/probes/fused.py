"""Where does the fused kernel's time go? An ablation probe for the fused kernel's goals (GPU only).

Times, per shape, the shipped fused build, its nvcc twin, ablations of the same kernel
(same geometry, same loads/stores) that drop one piece at a time, and candidate builds: L2
prefetch variants, persistent software-pipelined rows (``pipe_*``: a block keeps DEPTH rows in
registers) and a ``redux.sync`` warp max (``redux``). Each variant is launched BATCH times back
to back over rotating input sets (more bytes than L2), between two CUDA events (the median
over REPS batches / BATCH is the per-launch device time), and once alone behind a delay
kernel, as ``bench perf`` times it (``single``: launch ramp and tail included).

    python -m bench probe fused [--shapes 4096x128,4096x1024] [--candidates-only] [--no-pipelined] [--out DIR]

Diagnostic only: the figures that count for the goals come from ``python -m bench perf``.

The variants here re-type the fused kernel on purpose (the duplicates tool flags them): an
ablation or a candidate must not touch the shipped builds in ``numba_softmax/kernels``, and a
candidate that wins is moved there and tested on the GPU like any kernel (the one-warp build
and the q1 prefetch came from here). results/probes/README.md names the commit of each
recorded probe output (older ones are in git history).
"""

import argparse

import numpy as np
from llvmlite import ir
from numba import cuda, float32, types, uint32
from numba.cuda import cgutils
from numba.cuda.extending import intrinsic

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.timing import DelaySampler, time_batches, time_single
from numba_softmax.kernels.fused_row import fused_kernel_for
from numba_softmax.kernels.vector_io import load_quad, store_quad
from numba_softmax.launch.driver import Invocation, Stream
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, QUAD, WARPS_PER_BLOCK,
                                    block_reduce_max, block_reduce_sum, f32_add, f32_div, f32_exp,
                                    f32_max, f32_sub, warp_reduce_max, warp_reduce_sum)

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "fused_probe.json"


# ---- the block reduction before the lean one (run-time warp count, int64 lane math) ----
def _make_old_reduce(combine):
    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def old_reduce(value, partials):
        offset = 16
        while offset > 0:
            value = combine(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
            offset //= 2
        lane = cuda.threadIdx.x % 32
        warp = cuda.threadIdx.x // 32
        if lane == 0:
            partials[warp] = value
        cuda.syncthreads()
        total = partials[0]
        for w in range(1, cuda.blockDim.x // 32):
            total = combine(total, partials[w])
        cuda.syncthreads()
        return total
    return old_reduce


old_reduce_max, old_reduce_sum = _make_old_reduce(f32_max), _make_old_reduce(f32_add)


# ---- non-default cache hints: ld.global.nc (read-only path), st.global.cs (streaming) ----
_F4 = ir.LiteralStructType([ir.FloatType()] * 4)


def _address(context, builder, array_type, array, index_types, indices):
    ary = context.make_array(array_type)(context, builder, value=array)
    idx = [context.cast(builder, v, t, types.intp) for t, v in zip(index_types, indices, strict=True)]
    ptr = cgutils.get_item_pointer(context, builder, array_type, ary, idx, wraparound=False)
    return builder.ptrtoint(ptr, ir.IntType(64))


@intrinsic
def load_quad_nc(typingctx, x, row, col):
    quad = types.UniTuple(types.float32, 4)

    def codegen(context, builder, sig, args):
        addr = _address(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
        asm = ir.InlineAsm(ir.FunctionType(_F4, [ir.IntType(64)]),
                           "{ .reg .u64 g; cvta.to.global.u64 g, $4; ld.global.nc.v4.f32 {$0,$1,$2,$3}, [g]; }",
                           "=f,=f,=f,=f,l", side_effect=False)
        out = builder.call(asm, [addr])
        return context.make_tuple(builder, quad, [builder.extract_value(out, k) for k in range(4)])

    return quad(x, row, col), codegen


@intrinsic
def store_quad_cs(typingctx, y, row, col, a, b, c, d):
    def codegen(context, builder, sig, args):
        addr = _address(context, builder, sig.args[0], args[0], sig.args[1:3], args[1:3])
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [ir.FloatType()] * 4),
                           "{ .reg .u64 g; cvta.to.global.u64 g, $0; st.global.cs.v4.f32 [g], {$1,$2,$3,$4}; }",
                           "l,f,f,f,f,~{memory}", side_effect=True)
        builder.call(asm, [addr] + list(args[3:]))
        return context.get_dummy_value()

    return types.void(y, row, col, a, b, c, d), codegen


def make_ablation(quads, stage, reduce="lean", io="plain", max_registers=None):
    """stage: 'copy' (load, store), 'max' (+ block max), 'exp_sum' (+ exp, block sum, store e),
    'full' (+ division: the shipped algorithm re-typed here). reduce: 'lean' (numerics now),
    'old' (the reduction before the lean one), 'twobuf' (lean, separate partials, no trailing barriers).
    io: 'plain' (vector_io) or 'nc_cs' (ld.global.nc / st.global.cs)."""
    QUADS = quads
    VALUES = quads * QUAD
    STAGE = {"copy": 0, "max": 1, "exp_sum": 2, "full": 3}[stage]
    OLD = reduce == "old"
    TWOBUF = reduce == "twobuf"
    NC = io == "nc_cs"

    def kernel(x, y):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        partials2 = cuda.shared.array(WARPS_PER_BLOCK, float32)
        values = cuda.local.array(VALUES, float32)
        local_max = NEG_INF
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                if NC:
                    a, b, c, d = load_quad_nc(x, row, base)
                else:
                    a, b, c, d = load_quad(x, row, base)
                values[QUAD * q] = a
                values[QUAD * q + 1] = b
                values[QUAD * q + 2] = c
                values[QUAD * q + 3] = d
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
        row_max = float32(0.0)
        if STAGE >= 1:
            if OLD:
                row_max = old_reduce_max(local_max, partials)
            elif TWOBUF:
                row_max = block_reduce_max_nobar(local_max, partials)
            else:
                row_max = block_reduce_max(local_max, partials)
        row_sum = float32(1.0)
        if STAGE >= 2:
            local_sum = float32(0.0)
            for q in range(QUADS):
                base = QUAD * (tid + q * BLOCK_THREADS)
                if base < cols:
                    for j in range(QUAD):
                        e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                        values[QUAD * q + j] = e
                        local_sum = f32_add(local_sum, e)
            if OLD:
                row_sum = old_reduce_sum(local_sum, partials)
            elif TWOBUF:
                row_sum = block_reduce_sum_nobar(local_sum, partials2)
            else:
                row_sum = block_reduce_sum(local_sum, partials)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                if STAGE >= 3:
                    a = f32_div(values[QUAD * q], row_sum)
                    b = f32_div(values[QUAD * q + 1], row_sum)
                    c = f32_div(values[QUAD * q + 2], row_sum)
                    d = f32_div(values[QUAD * q + 3], row_sum)
                elif STAGE == 1:
                    a = f32_sub(values[QUAD * q], row_max)
                    b = f32_sub(values[QUAD * q + 1], row_max)
                    c = f32_sub(values[QUAD * q + 2], row_max)
                    d = f32_sub(values[QUAD * q + 3], row_max)
                else:
                    a, b, c, d = values[QUAD * q], values[QUAD * q + 1], values[QUAD * q + 2], values[QUAD * q + 3]
                if NC:
                    store_quad_cs(y, row, base, a, b, c, d)
                else:
                    store_quad(y, row, base, a, b, c, d)

    kernel.__name__ = kernel.__qualname__ = f"probe_{stage}_{reduce}_{io}_q{quads}_r{max_registers or 0}"
    options = dict(KERNEL_OPTIONS)
    if max_registers:
        options["max_registers"] = max_registers
    return cuda.jit(**options)(kernel)


def _make_nobar_reduce(combine):
    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def reduce_nobar(value, partials):
        offset = 16
        while offset > 0:
            value = combine(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
            offset //= 2
        tid = uint32(cuda.threadIdx.x)
        if tid & np.uint32(31) == np.uint32(0):
            partials[tid >> np.uint32(5)] = value
        cuda.syncthreads()
        total = partials[0]
        for w in range(1, WARPS_PER_BLOCK):
            total = combine(total, partials[w])
        return total
    return reduce_nobar


block_reduce_max_nobar, block_reduce_sum_nobar = _make_nobar_reduce(f32_max), _make_nobar_reduce(f32_add)


#: probe variant -> (stage, reduce, io, max_registers)
PROBES = {
    "old_reduce": ("full", "old", "plain", None),
    "lean_retyped": ("full", "lean", "plain", None),
    "twobuf": ("full", "twobuf", "plain", None),
    "nc_cs": ("full", "lean", "nc_cs", None),
    "maxreg32": ("full", "lean", "plain", 32),
    "copy": ("copy", "lean", "plain", None),
    "max_only": ("max", "lean", "plain", None),
    "exp_sum": ("exp_sum", "lean", "plain", None),
}


@intrinsic
def prefetch_row_l2(typingctx, x, row, nbytes):
    """cp.async.bulk.prefetch.L2: one instruction asks the copy engine to pull nbytes of
    row ``row`` (from column 0) into L2; no registers wait on it."""

    def codegen(context, builder, sig, args):
        zero = context.get_constant(types.intp, 0)
        addr = _address(context, builder, sig.args[0], args[0], (sig.args[1], types.intp), (args[1], zero))
        size = context.cast(builder, args[2], sig.args[2], types.uint32)
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64), ir.IntType(32)]),
                           "{ .reg .u64 g; cvta.to.global.u64 g, $0; cp.async.bulk.prefetch.L2.global [g], $1; }",
                           "l,r", side_effect=True)
        builder.call(asm, [addr, size])
        return context.get_dummy_value()

    return types.void(x, row, nbytes), codegen


@intrinsic
def prefetch_line_l2(typingctx, x, row, col):
    """prefetch.global.L2 of the 128-byte line holding x[row, col]."""

    def codegen(context, builder, sig, args):
        addr = _address(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
        asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]),
                           "{ .reg .u64 g; cvta.to.global.u64 g, $0; prefetch.global.L2 [g]; }",
                           "l", side_effect=True)
        builder.call(asm, [addr])
        return context.get_dummy_value()

    return types.void(x, row, col), codegen


# ---- the warp stage of the MAX reductions as one redux.sync (sm_80+: integer max over a warp).
# A float's bits, with the magnitude bits flipped when the sign is set, order like the float
# (-inf < ... < -0 < +0 < ... < +inf), so an int32 max of those keys, mapped back, is the float
# max: exact, like every max, so the same row max as the butterfly (up to the sign of a zero
# max, which no output can show: exp(x - (+-0)) is the same for every x). The sum keeps the
# butterfly: its order is the numerics policy.
@intrinsic
def warp_max_s32(typingctx, value):
    def codegen(context, builder, sig, args):
        asm = ir.InlineAsm(ir.FunctionType(ir.IntType(32), [ir.IntType(32)]),
                           "redux.sync.max.s32 $0, $1, 0xffffffff;", "=r,r", side_effect=False)
        return builder.call(asm, [args[0]])

    return types.int32(types.int32), codegen


@intrinsic
def float_bits(typingctx, value):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(types.float32), codegen


@intrinsic
def bits_float(typingctx, value):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def warp_max_redux(value):
    bits = float_bits(value)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    top = warp_max_s32(key)
    return bits_float(top ^ ((top >> 31) & 0x7FFFFFFF))


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def block_max_redux(value, partials):
    value = warp_max_redux(value)
    tid = uint32(cuda.threadIdx.x)
    if tid & uint32(31) == uint32(0):
        partials[tid >> uint32(5)] = value
    cuda.syncthreads()
    total = partials[0]
    for w in range(1, WARPS_PER_BLOCK):
        total = f32_max(total, partials[w])
    cuda.syncthreads()
    return total


def make_candidate(quads, prefetch, redux=False):
    """The shipped algorithm plus an L2 prefetch of row ``row + distance`` (the row a block
    one 'wave' later will load). prefetch: 'bulk' (thread 0, one cp.async.bulk.prefetch of the
    row), 'lines' (one prefetch.global.L2 per 128-byte line), 'narrow' (no prefetch; cols <= 128:
    warps 1-7 own no column and leave at once, warp 0 reduces with shuffles only -- exact, since
    the other warps' partials are the identities -inf and +0), 'plain' (no prefetch, the block
    build). ``redux``: the max reduction's warp stage as one redux.sync (:func:`warp_max_redux`)."""
    QUADS = quads
    VALUES = quads * QUAD
    MODE = {"bulk": 0, "lines": 1, "narrow": 2, "narrow_bulk": 3, "plain": 4}[prefetch]
    NARROW = MODE in (2, 3)
    REDUX = redux

    def kernel(x, y, distance):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        rows = x.shape[0]
        cols = x.shape[1]
        if NARROW:
            if tid >= 32:
                return
            if MODE == 3 and tid == 0:
                if row + distance < rows:
                    prefetch_row_l2(x, row + distance, cols * 4)
            base = QUAD * tid
            a = b = c = d = NEG_INF
            if base < cols:
                a, b, c, d = load_quad(x, row, base)
            m = f32_max(f32_max(f32_max(f32_max(NEG_INF, a), b), c), d)
            if REDUX:
                m = warp_max_redux(m)
            else:
                offset = 16
                while offset > 0:
                    m = f32_max(m, cuda.shfl_xor_sync(0xFFFFFFFF, m, offset))
                    offset //= 2
            z = float32(0.0)
            if base < cols:
                a = f32_exp(f32_sub(a, m))
                b = f32_exp(f32_sub(b, m))
                c = f32_exp(f32_sub(c, m))
                d = f32_exp(f32_sub(d, m))
                z = f32_add(f32_add(f32_add(f32_add(z, a), b), c), d)
            offset = 16
            while offset > 0:
                z = f32_add(z, cuda.shfl_xor_sync(0xFFFFFFFF, z, offset))
                offset //= 2
            if base < cols:
                store_quad(y, row, base, f32_div(a, z), f32_div(b, z), f32_div(c, z), f32_div(d, z))
            return
        ahead = row + distance
        if MODE != 4 and ahead < rows:
            if MODE == 0:
                if tid == 0:
                    prefetch_row_l2(x, ahead, cols * 4)
            else:
                if tid % 8 == 0:
                    for q in range(QUADS):
                        base = QUAD * (tid + q * BLOCK_THREADS)
                        if base < cols:
                            prefetch_line_l2(x, ahead, base)
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        values = cuda.local.array(VALUES, float32)
        local_max = NEG_INF
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                a, b, c, d = load_quad(x, row, base)
                values[QUAD * q] = a
                values[QUAD * q + 1] = b
                values[QUAD * q + 2] = c
                values[QUAD * q + 3] = d
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
        row_max = block_max_redux(local_max, partials) if REDUX else block_reduce_max(local_max, partials)
        local_sum = float32(0.0)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                for j in range(QUAD):
                    e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                    values[QUAD * q + j] = e
                    local_sum = f32_add(local_sum, e)
        row_sum = block_reduce_sum(local_sum, partials)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                store_quad(y, row, base, f32_div(values[QUAD * q], row_sum), f32_div(values[QUAD * q + 1], row_sum),
                           f32_div(values[QUAD * q + 2], row_sum), f32_div(values[QUAD * q + 3], row_sum))

    kernel.__name__ = kernel.__qualname__ = f"candidate_{prefetch}_q{quads}{'_redux' if redux else ''}"
    return cuda.jit(**KERNEL_OPTIONS)(kernel)


#: candidate -> (prefetch mode, distance in units of the shipped kernel's resident blocks)
CANDIDATES = {"bulk_x1": ("bulk", 1.0), "bulk_x2": ("bulk", 2.0), "bulk_x0.5": ("bulk", 0.5),
              "lines_x1": ("lines", 1.0), "narrow": ("narrow", 0.0), "narrow_bulk_x1": ("narrow_bulk", 1.0),
              "narrow_bulk_x2": ("narrow_bulk", 2.0)}
_CANDIDATE_KERNELS = {}


def candidate_kernel(quads, mode, redux=False):
    if (quads, mode, redux) not in _CANDIDATE_KERNELS:
        _CANDIDATE_KERNELS[(quads, mode, redux)] = make_candidate(quads, mode, redux)
    return _CANDIDATE_KERNELS[(quads, mode, redux)]


def redux_variants(xs, ys, resident):
    """Invocations of the redux candidate: the shipped build's shape (one-warp for rows of <= 128
    columns, else q1 with the shipped one-wave prefetch, q2/q4 without) with the redux max."""
    rows, cols = xs[0].shape
    quads = quads_for(cols)
    mode = "narrow" if cols <= 32 * QUAD else ("bulk" if quads == 1 else "plain")
    kernel = candidate_kernel(quads, mode, redux=True)
    return [Invocation.from_launches("redux", [KernelLaunch("redux", kernel, (rows,), (BLOCK_THREADS,),
                                                            (x, y, resident))])
            for x, y in zip(xs, ys, strict=True)]


# ---- persistent, software-pipelined rows: a block owns rows blockIdx.x, + grid, + 2 grid, ...
# and keeps DEPTH of them in registers (DEPTH x VALUES <= 16 values per thread): while it reduces
# one row, the loads of the next DEPTH - 1 are in flight. Same per-row operations and order as
# the shipped builds, so the same bits. grid = the resident blocks, balanced (see pipelined_grid).
def make_pipelined(quads, depth, warp_only=False, l2_ahead=False, max_registers=None):
    QUADS = quads
    VALUES = quads * QUAD
    DEPTH = depth
    WARP = warp_only
    L2_AHEAD = l2_ahead
    SLOTS = depth * quads * QUAD
    assert DEPTH * VALUES <= 16 and 1 <= DEPTH <= 4 and (not WARP or quads == 1)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_slot(x, values, offset, r, tid, cols):
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                a, b, c, d = load_quad(x, r, base)
                values[offset + QUAD * q] = a
                values[offset + QUAD * q + 1] = b
                values[offset + QUAD * q + 2] = c
                values[offset + QUAD * q + 3] = d

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def row_step(x, y, values, offset, r, step, rows, cols, tid, partials):
        if r >= rows:
            return
        if L2_AHEAD and tid == 0:
            ahead = r + (DEPTH + 1) * step
            if ahead < rows:
                prefetch_row_l2(x, ahead, cols * 4)
        local_max = NEG_INF
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                for j in range(QUAD):
                    local_max = f32_max(local_max, values[offset + QUAD * q + j])
        if WARP:
            row_max = warp_reduce_max(local_max)
        else:
            row_max = block_reduce_max(local_max, partials)
        local_sum = float32(0.0)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                for j in range(QUAD):
                    e = f32_exp(f32_sub(values[offset + QUAD * q + j], row_max))
                    values[offset + QUAD * q + j] = e
                    local_sum = f32_add(local_sum, e)
        if WARP:
            row_sum = warp_reduce_sum(local_sum)
        else:
            row_sum = block_reduce_sum(local_sum, partials)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if base < cols:
                store_quad(y, r, base, f32_div(values[offset + QUAD * q], row_sum),
                           f32_div(values[offset + QUAD * q + 1], row_sum),
                           f32_div(values[offset + QUAD * q + 2], row_sum),
                           f32_div(values[offset + QUAD * q + 3], row_sum))
        refill = r + DEPTH * step
        if refill < rows:
            load_slot(x, values, offset, refill, tid, cols)

    def kernel(x, y):
        tid = cuda.threadIdx.x
        if WARP and tid >= 32:
            return
        rows = x.shape[0]
        cols = x.shape[1]
        step = cuda.gridDim.x
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        values = cuda.local.array(SLOTS, float32)
        row = cuda.blockIdx.x
        for s in range(DEPTH):
            if row + s * step < rows:
                load_slot(x, values, s * VALUES, row + s * step, tid, cols)
        while row < rows:
            row_step(x, y, values, 0, row, step, rows, cols, tid, partials)
            if DEPTH > 1:
                row_step(x, y, values, VALUES, row + step, step, rows, cols, tid, partials)
            if DEPTH > 2:
                row_step(x, y, values, 2 * VALUES, row + 2 * step, step, rows, cols, tid, partials)
            if DEPTH > 3:
                row_step(x, y, values, 3 * VALUES, row + 3 * step, step, rows, cols, tid, partials)
            row += DEPTH * step

    kernel.__name__ = kernel.__qualname__ = (
        f"pipelined_{'w1' if WARP else f'q{quads}'}_d{depth}{'_l2' if L2_AHEAD else ''}")
    options = dict(KERNEL_OPTIONS, **({"max_registers": max_registers} if max_registers else {}))
    return cuda.jit(**options)(kernel)


def pipelined_grid(rows, resident, depth):
    """Blocks for a pipelined launch: at most the resident blocks, and the rows spread so every
    block makes the same number of DEPTH-row rounds (16384 rows over 1056 slots: 1024 blocks x 16)."""
    rounds = -(-rows // (resident * depth))
    return min(rows, -(-rows // (rounds * depth)))


#: pipelined candidate -> (warp_only, depth, L2 prefetch after the pipeline, max_registers); q1 for
#: rows of <= 1024 columns, w1 (warp 0 alone) for rows of <= 128, q2 for <= 2048 (8 + 8 values).
PIPELINED = {"pipe_d1": (False, 1, False, None), "pipe_d2": (False, 2, False, 40),
             "pipe_d2_l2": (False, 2, True, 40), "pipe_d4": (False, 4, False, None),
             "pipe_w1_d2": (True, 2, False, 40), "pipe_w1_d4": (True, 4, False, None)}
_PIPELINED_KERNELS = {}


def pipelined_kernel(quads, depth, warp_only, l2_ahead, max_registers):
    key = (quads, depth, warp_only, l2_ahead, max_registers)
    if key not in _PIPELINED_KERNELS:
        _PIPELINED_KERNELS[key] = make_pipelined(quads, depth, warp_only, l2_ahead, max_registers)
    return _PIPELINED_KERNELS[key]


def pipelined_variants(name, xs, ys):
    """Invocations of pipelined candidate ``name`` over the input sets (None where it does not fit
    the shape), the grid sized from the compiled kernel's occupancy."""
    warp_only, depth, l2_ahead, max_registers = PIPELINED[name]
    rows, cols = xs[0].shape
    quads = quads_for(cols)
    if (warp_only and cols > 32 * QUAD) or (not warp_only and cols <= 32 * QUAD) or depth * quads * QUAD > 16:
        return None
    kernel = pipelined_kernel(quads, depth, warp_only, l2_ahead, max_registers)
    probe = Invocation.from_launches(name, [KernelLaunch(name, kernel, (1,), (BLOCK_THREADS,), (xs[0], ys[0]))])
    resident = (probe.launches[0].kernel.active_blocks_per_sm(BLOCK_THREADS)
                * cuda.get_current_device().MULTIPROCESSOR_COUNT)
    grid = pipelined_grid(rows, resident, depth)
    return [Invocation.from_launches(name, [KernelLaunch(name, kernel, (grid,), (BLOCK_THREADS,), (x, y))])
            for x, y in zip(xs, ys, strict=True)]


_BUILT = {}


def probe_kernel(quads, name):
    key = (quads, name)
    if key not in _BUILT:
        stage, reduce, io, regs = PROBES[name]
        _BUILT[key] = make_ablation(quads, stage, reduce, io, regs)
    return _BUILT[key]


def quads_for(cols):
    return next(q for q in (1, 2, 4) if cols <= q * QUAD * BLOCK_THREADS)


def time_variant(stream, invocations, sampler=None):
    """Per-launch device time over the rotating input sets: back to back (batched), and with
    ``sampler`` (a calibrated :class:`bench.timing.DelaySampler`) also one launch alone behind a delay kernel."""
    def enqueue(st, i):
        invocations[i % len(invocations)].enqueue(st)
    stats = time_batches(stream, enqueue)
    if sampler is not None:
        stats.update(time_single(sampler, enqueue))
    return stats


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe fused", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="4096x128,4096x1024,16384x1024,4096x4096")
    parser.add_argument("--out", default=None)
    parser.add_argument("--candidates-only", action="store_true", help="skip the ablations")
    parser.add_argument("--no-pipelined", action="store_true", help="skip the pipelined row candidates")
    parser.add_argument("--reference-build", default=None, help="nvcc cubins dir (built here when absent)")
    args = parser.parse_args(argv)
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    stream = Stream()
    sampler = DelaySampler()
    sampler.calibrate_delay()
    l2 = cuda.get_current_device().L2_CACHE_SIZE
    library = None
    try:
        from bench import reference_build
        from numba_softmax.peers.nvcc_twins import ReferenceLibrary, reference_fused_launches
        build_dir = args.reference_build or "/tmp/probe_reference_build"
        reference_build.ensure_built(build_dir)
        library = ReferenceLibrary(build_dir)
    except Exception as exc:  # noqa: BLE001 -- the twin is optional in a probe
        print(f"nvcc twin unavailable: {exc}")
    results = []
    for text in args.shapes.split(","):
        rows, cols = (int(v) for v in text.split("x"))
        nbytes = rows * cols * 4
        sets = max(2, min(16, int(np.ceil(3 * l2 / (2 * nbytes)))))
        rng = np.random.default_rng(0)
        xs = [cuda.to_device(rng.standard_normal((rows, cols), dtype=np.float32)) for _ in range(sets)]
        ys = [cuda.device_array((rows, cols), np.float32) for _ in range(sets)]
        q = quads_for(cols)
        variants = {
            "shipped": [Invocation.from_launches("f", [KernelLaunch("f", fused_kernel_for(x, y), (rows,),
                                                                    (BLOCK_THREADS,), (x, y))])
                        for x, y in zip(xs, ys, strict=True)],
        }
        if library is not None:
            variants["nvcc_twin"] = [Invocation("n", [launch.enqueue for launch in ls], ls) for ls in
                                     (reference_fused_launches(library, x, y) for x, y in zip(xs, ys, strict=True))]
        resident = (variants["shipped"][0].launches[0].kernel.active_blocks_per_sm(BLOCK_THREADS)
                    * cuda.get_current_device().MULTIPROCESSOR_COUNT)
        for cand, (mode, factor) in CANDIDATES.items():
            if mode.startswith("narrow") and cols > 32 * QUAD:
                continue
            distance = int(resident * factor)
            variants[cand] = [
                Invocation.from_launches(cand, [KernelLaunch(cand, candidate_kernel(q, mode), (rows,),
                                                             (BLOCK_THREADS,), (x, y, distance))])
                for x, y in zip(xs, ys, strict=True)]
        variants["redux"] = redux_variants(xs, ys, resident)
        for name in PIPELINED if not args.no_pipelined else ():
            invocations = pipelined_variants(name, xs, ys)
            if invocations is not None:
                variants[name] = invocations
        for probe in PROBES if not args.candidates_only else ():
            variants[probe] = [
                Invocation.from_launches(probe, [KernelLaunch(probe, probe_kernel(q, probe), (rows,),
                                                              (BLOCK_THREADS,), (x, y))])
                for x, y in zip(xs, ys, strict=True)]
        for name, invocations in variants.items():
            stats = time_variant(stream, invocations, sampler)
            stats.update(shape=text, variant=name, tbs=2 * nbytes / stats["median_us"] / 1e6, sets=sets)
            resources = invocations[0].kernel_resources()[0]
            stats["regs"] = resources.get("registers_per_thread")
            stats["local_bytes"] = resources.get("local_bytes_per_thread")
            stats["grid"] = resources.get("grid")
            results.append(stats)
            print(f"{text:>11} {name:<16} {stats['median_us']:8.2f} us [{stats['p10_us']:.2f}, "
                  f"{stats['p90_us']:.2f}]  {stats['tbs']:.3f} TB/s  single {stats['single_median_us']:.2f} "
                  f"[{stats['single_p10_us']:.2f}, {stats['single_p90_us']:.2f}]  regs={stats.get('regs')} "
                  f"grid={stats['grid']}", flush=True)
        # a correctness glance: every full-softmax variant gives the shipped bits
        variants["shipped"][0].enqueue(stream)
        stream.synchronize()
        y_shipped = ys[0].copy_to_host()
        full = [n for n in variants
                if n in ("nvcc_twin", "redux", *CANDIDATES, *PIPELINED) or (n in PROBES and PROBES[n][0] == "full")]
        for name in full:
            ys[0].copy_to_device(np.full((rows, cols), np.nan, dtype=np.float32))  # an unwritten row must fail
            variants[name][0].enqueue(stream)
            stream.synchronize()
            same = np.array_equal(y_shipped, ys[0].copy_to_host())
            results.append({"shape": text, "variant": name, "bitwise_equal_to_shipped": same})
            print(f"{text:>11} {name} == shipped bitwise: {same}")
    write_results(args.out, RESULTS_FILE, results)

