"""Fused row softmax: one block per row, the row kept in registers.

Algorithm (stable softmax, one pass over global memory each way)::

    m = max_j x[j]            # block_reduce_max
    e_j = exp(x[j] - m)       # kept in registers
    z = sum_j e_j             # block_reduce_sum
    y[j] = e_j / z

Launch geometry
    grid  = (rows,)           one block per row
    block = (256,)            thread t owns columns t, t+256, t+512, ... (coalesced)
    Each thread holds up to ``VALUES_PER_THREAD = 16`` values in a local array whose
    indices are compile-time constants after unrolling, so it lives in registers
    (check ``local_mem_per_thread == 0``). Rows up to 256 * 16 = 4096 columns; a
    longer row is rejected by the launcher, never truncated. Columns that are not a
    multiple of 256 (e.g. 7 x 781) are masked per element.

Bytes each launch must move
    read ``rows * cols * 4`` (x, once) + write ``rows * cols * 4`` (y, once).
    The intermediates (m, e, z) never leave the block: that is the point of the
    comparison with the four-stage path.

Shared memory: ``WARPS_PER_BLOCK`` float32 partials for the block reductions (32 B).

Bitwise contract: each thread accumulates its own elements in increasing column
order, then the block reduction of :mod:`numba_softmax.numerics` combines; the
four-stage path follows the same order, so both give identical bits.
"""

from numba import cuda, float32

from ..launch.plan import KernelLaunch
from ..numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, WARPS_PER_BLOCK,
                        block_reduce_max, block_reduce_sum, f32_add, f32_div,
                        f32_exp, f32_max, f32_sub)

VALUES_PER_THREAD = 16
MAX_FUSED_COLUMNS = BLOCK_THREADS * VALUES_PER_THREAD


@cuda.jit(**KERNEL_OPTIONS)
def fused_row_softmax(x, y):
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    cols = x.shape[1]
    partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
    values = cuda.local.array(VALUES_PER_THREAD, float32)

    # Pass 1: load this thread's columns once (all loads independent, so they are
    # in flight together) and reduce the maximum.
    local_max = NEG_INF
    for k in range(VALUES_PER_THREAD):
        col = tid + k * BLOCK_THREADS
        if col < cols:
            v = x[row, col]
            values[k] = v
            local_max = f32_max(local_max, v)
    row_max = block_reduce_max(local_max, partials)

    # Pass 2: exponentiate in registers and reduce the sum.
    local_sum = float32(0.0)
    for k in range(VALUES_PER_THREAD):
        col = tid + k * BLOCK_THREADS
        if col < cols:
            e = f32_exp(f32_sub(values[k], row_max))
            values[k] = e
            local_sum = f32_add(local_sum, e)
    row_sum = block_reduce_sum(local_sum, partials)

    # Pass 3: the only global write.
    for k in range(VALUES_PER_THREAD):
        col = tid + k * BLOCK_THREADS
        if col < cols:
            y[row, col] = f32_div(values[k], row_sum)


def fused_launches(x, y):
    """The single launch of the fused path for device arrays ``x`` -> ``y``."""
    rows, cols = x.shape
    if cols > MAX_FUSED_COLUMNS:
        raise ValueError(
            f"row too long for the fused kernel: {cols} columns > {MAX_FUSED_COLUMNS} "
            f"({BLOCK_THREADS} threads x {VALUES_PER_THREAD} values per thread); "
            "use method='stages' or the tiled softmax")
    return [KernelLaunch("fused_row_softmax", fused_row_softmax, (rows,), (BLOCK_THREADS,), (x, y))]
