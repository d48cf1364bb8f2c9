"""Fused row softmax: one block per row, the row kept in registers.

Algorithm (stable softmax, one pass over global memory each way)::

    m = max_j x[j]            # block_reduce_max
    e_j = exp(x[j] - m)       # kept in registers
    z = sum_j e_j             # block_reduce_sum
    y[j] = e_j / z

Launch geometry
    grid  = (rows,)           one block per row
    block = (256,)            thread t owns the quads (4 consecutive columns) starting at
                              4*t, 4*(t+256), 4*(t+512), 4*(t+768) -- the numerics
                              policy's ownership rule, so a warp reads 512 contiguous bytes
    Each thread holds up to ``VALUES_PER_THREAD = 16`` values in a local array whose
    indices are compile-time constants after unrolling, so it lives in registers
    (check ``local_mem_per_thread == 0``). One build per width (1, 2 or 4 quads per
    thread: rows up to 1024, 2048, 4096 columns) so narrow rows run no dead iterations;
    a row longer than 4096 columns is rejected by the launcher, never truncated.
    Rows whose length is a multiple of 4 (and 16-byte aligned arrays) use 16-byte
    vector loads and stores (:mod:`.vector_io`); other widths (e.g. 7 x 781) load the
    same quads element by element, masked.

Bytes each launch must move
    read ``rows * cols * 4`` (x, once) + write ``rows * cols * 4`` (y, once).
    The intermediates (m, e, z) never leave the block: that is the point of the
    comparison with the four-stage path.

Shared memory: ``WARPS_PER_BLOCK`` float32 partials for the block reductions (32 B).

Bitwise contract: each thread accumulates its own elements in increasing column
order (quad by quad), then the block reduction of :mod:`numba_softmax.numerics`
combines; the four-stage path follows the same ownership and order, so both give
identical bits whichever build runs.
"""

from numba import cuda, float32

from ..launch.plan import KernelLaunch
from ..numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, QUAD, SIMULATOR, WARPS_PER_BLOCK,
                        block_reduce_max, block_reduce_sum, f32_add, f32_div,
                        f32_exp, f32_max, f32_sub)
from .vector_io import load_quad, store_quad

VALUES_PER_THREAD = 16
MAX_FUSED_COLUMNS = BLOCK_THREADS * VALUES_PER_THREAD
#: Compiled widths: quads (4 values) per thread. A row uses the smallest that holds it.
QUADS_PER_THREAD = (1, 2, 4)


def _make_fused_kernel(quads, vector):
    """The fused kernel for rows of up to ``quads * 4 * 256`` columns.

    ``quads`` and ``vector`` are compile-time constants: the loops unroll completely
    (the values stay in registers) and the unused path is pruned. ``vector`` selects
    16-byte loads/stores, valid only when the row length is a multiple of 4 and the
    array is 16-byte aligned (the launcher checks); otherwise the same quads are
    loaded element by element with a mask, in the same order.
    """
    QUADS = quads
    VALUES = quads * QUAD
    VECTOR = vector

    def fused_row_softmax(x, y):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        values = cuda.local.array(VALUES, float32)

        # Pass 1: load this thread's quads once (independent loads, all in flight
        # together) and reduce the maximum in increasing column order.
        local_max = NEG_INF
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                if base < cols:  # cols % 4 == 0: the whole quad is in the row
                    a, b, c, d = load_quad(x, row, base)
                    values[QUAD * q] = a
                    values[QUAD * q + 1] = b
                    values[QUAD * q + 2] = c
                    values[QUAD * q + 3] = d
                    local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        v = x[row, base + j]
                        values[QUAD * q + j] = v
                        local_max = f32_max(local_max, v)
        row_max = block_reduce_max(local_max, partials)

        # Pass 2: exponentiate in registers and reduce the sum, same order.
        local_sum = float32(0.0)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            for j in range(QUAD):
                if base + j < cols:
                    e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                    values[QUAD * q + j] = e
                    local_sum = f32_add(local_sum, e)
        row_sum = block_reduce_sum(local_sum, partials)

        # Pass 3: the only global write.
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                if base < cols:
                    store_quad(y, row, base,
                               f32_div(values[QUAD * q], row_sum), f32_div(values[QUAD * q + 1], row_sum),
                               f32_div(values[QUAD * q + 2], row_sum), f32_div(values[QUAD * q + 3], row_sum))
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        y[row, base + j] = f32_div(values[QUAD * q + j], row_sum)

    fused_row_softmax.__name__ = fused_row_softmax.__qualname__ = (
        f"fused_row_softmax_q{quads}{'_v4' if vector else ''}")
    return cuda.jit(**KERNEL_OPTIONS)(fused_row_softmax)


#: Every compiled width and load path: (quads, vector) -> dispatcher.
FUSED_KERNELS = {(q, v): _make_fused_kernel(q, v) for q in QUADS_PER_THREAD for v in (False, True)}
#: The widest scalar build (any row up to 4096 columns), e.g. for the PTX report.
fused_row_softmax = FUSED_KERNELS[(4, False)]


def _aligned16(array):
    if SIMULATOR:
        return False
    return array.__cuda_array_interface__["data"][0] % 16 == 0


def fused_kernel_for(x, y):
    """The build for this shape: fewest quads that hold the row; vector I/O when aligned."""
    cols = x.shape[1]
    quads = next(q for q in QUADS_PER_THREAD if cols <= q * QUAD * BLOCK_THREADS)
    vector = cols % QUAD == 0 and _aligned16(x) and _aligned16(y)
    return FUSED_KERNELS[(quads, vector)]


def fused_launches(x, y):
    """The single launch of the fused path for device arrays ``x`` -> ``y``."""
    rows, cols = x.shape
    if cols > MAX_FUSED_COLUMNS:
        raise ValueError(
            f"row too long for the fused kernel: {cols} columns > {MAX_FUSED_COLUMNS} "
            f"({BLOCK_THREADS} threads x {VALUES_PER_THREAD} values per thread); "
            "use method='stages' or the tiled softmax")
    return [KernelLaunch("fused_row_softmax", fused_kernel_for(x, y), (rows,), (BLOCK_THREADS,), (x, y))]
