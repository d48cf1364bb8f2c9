"""Softmax as four explicit stages, each its own kernel writing its intermediate.

An educational decomposition, not an optimized baseline: every stage is a separate pass over global memory,
which is exactly what the fused kernel avoids.

Stages and launch geometry
    1. ``row_max_stage``   grid (rows,), block (256,): m[r] = max_j x[r, j]
    2. ``exp_stage``       grid (ceil(rows*cols/256),), block (256,), one element per
                           thread: e[r, j] = exp(x[r, j] - m[r])
    3. ``row_sum_stage``   grid (rows,), block (256,): z[r] = sum_j e[r, j]
    4. ``divide_stage``    same geometry as 2: y[r, j] = e[r, j] / z[r]

Bytes each stage must move (N = rows * cols, 4-byte floats)
    1. read 4N, write 4 rows        2. read 4N (+ m), write 4N
    3. read 4N, write 4 rows        4. read 4N (+ z), write 4N
    Total about 24N bytes against the fused kernel's 8N.

Bitwise contract: the row reductions follow the fused kernel's ownership rule and order, the elementwise stages
use the same ``exp(x - m)`` and IEEE division, so this path reproduces the fused kernel's output bit for bit
(tested on the GPU; docs/experiment_a.md, "The numerics policy"). Written to compile close to its nvcc twin:
``uint64`` indices, signed ``while`` row loops, flat ``(rows * cols,)`` outputs and :func:`numba_softmax.numerics.udiv`
in the elementwise stages (why: docs/numba_vs_nvcc.md, "How the row stages closed most of their gap").
"""

from numba import cuda, float32, int64, uint32, uint64

from ..launch_spec import KernelLaunch
from ..numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, WARPS_PER_BLOCK,
                        block_reduce_max, block_reduce_sum, f32_add, f32_div,
                        f32_exp, f32_max, f32_sub, udiv)


@cuda.jit(**KERNEL_OPTIONS)
def row_max_stage(x, row_max):
    row = uint64(cuda.blockIdx.x)
    tid = cuda.threadIdx.x
    partials = cuda.shared.array(WARPS_PER_BLOCK, float32, alignment=PARTIALS_ALIGNMENT)
    cols = x.shape[1]
    local_max = NEG_INF
    base = int64(QUAD * tid)
    while base < cols:  # the ownership rule
        for j in range(QUAD):
            if base + j < cols:
                local_max = f32_max(local_max, x[row, uint64(base + j)])
        base += QUAD * BLOCK_THREADS
    m = block_reduce_max(local_max, partials)
    if tid == 0:
        row_max[row] = m


@cuda.jit(**KERNEL_OPTIONS)
def exp_stage(x, row_max, exps):
    i = uint64(uint32(cuda.blockIdx.x)) * uint32(cuda.blockDim.x) + uint32(cuda.threadIdx.x)
    cols = uint64(x.shape[1])
    # exps is the flat view of the (rows, cols) intermediate: element i, whose address shares
    # x[row, col]'s (i * 4), with no shape of its own to compare. cols > 0 once i is below the
    # element count, so udiv needs no zero-divisor branch.
    if i < uint64(x.shape[0]) * cols:
        row = udiv(i, cols)
        col = i - row * cols
        exps[i] = f32_exp(f32_sub(x[row, col], row_max[row]))


@cuda.jit(**KERNEL_OPTIONS)
def row_sum_stage(exps, row_sum):
    row = uint64(cuda.blockIdx.x)
    tid = cuda.threadIdx.x
    partials = cuda.shared.array(WARPS_PER_BLOCK, float32, alignment=PARTIALS_ALIGNMENT)
    cols = exps.shape[1]
    local_sum = float32(0.0)
    base = int64(QUAD * tid)
    while base < cols:  # the ownership rule
        for j in range(QUAD):
            if base + j < cols:
                local_sum = f32_add(local_sum, exps[row, uint64(base + j)])
        base += QUAD * BLOCK_THREADS
    z = block_reduce_sum(local_sum, partials)
    if tid == 0:
        row_sum[row] = z


@cuda.jit(**KERNEL_OPTIONS)
def divide_stage(exps, row_sum, y):
    i = uint64(uint32(cuda.blockIdx.x)) * uint32(cuda.blockDim.x) + uint32(cuda.threadIdx.x)
    cols = uint64(exps.shape[1])
    if i < uint64(exps.shape[0]) * cols:  # y flat, as exps in exp_stage
        row = udiv(i, cols)
        col = i - row * cols
        y[i] = f32_div(exps[row, col], row_sum[row])


def stages_launches(x, y, row_max, exps, row_sum):
    """The four launches of the staged path; intermediates are caller-owned buffers."""
    rows, cols = x.shape
    elementwise_blocks = (rows * cols + BLOCK_THREADS - 1) // BLOCK_THREADS
    block = (BLOCK_THREADS,)
    flat_exps, flat_y = exps.reshape(rows * cols), y.reshape(rows * cols)  # views: the element-wise outputs
    return [
        KernelLaunch("row_max_stage", row_max_stage, (rows,), block, (x, row_max)),
        KernelLaunch("exp_stage", exp_stage, (elementwise_blocks,), block, (x, row_max, flat_exps)),
        KernelLaunch("row_sum_stage", row_sum_stage, (rows,), block, (exps, row_sum)),
        KernelLaunch("divide_stage", divide_stage, (elementwise_blocks,), block, (exps, row_sum, flat_y)),
    ]
