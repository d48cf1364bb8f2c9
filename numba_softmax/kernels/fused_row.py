"""Fused row softmax: one block per row, the row kept in registers.

Algorithm (stable softmax, one pass over global memory each way)::

    m = max_j x[j]; e_j = exp(x[j] - m) (kept in registers); z = sum_j e_j; y[j] = e_j / z

Launch geometry: grid (rows,), block (256,). Thread t owns the quads (4 consecutive columns) at 4*t,
4*(t+256), 4*(t+512), 4*(t+768), the ownership rule of :mod:`numba_softmax.numerics` (a warp reads 512
contiguous bytes), and holds up to ``VALUES_PER_THREAD = 16`` values in a local array indexed by constants,
so it lives in registers (check ``local_mem_per_thread == 0``); a row over 4096 columns is rejected, never cut.

Builds (``FUSED_BUILDS``; the launcher picks the first that holds the row; why: docs/experiment_a.md)
    ``fused_row_softmax_w1_v4``      cols <= 128: warp 0 alone, shuffles only (no shared memory, no barrier)
    ``fused_row_softmax_q1_v4``      cols <= 1024, + L2 prefetch of row ``row + 8 * %nsmid`` (:mod:`.prefetch`)
    ``fused_row_softmax_q{2,4}_v4``  cols <= 2048 / 4096
    ``fused_row_softmax_q{1,2,4}``   any other width or alignment: the same quads, element by element, masked
    The ``_v4`` builds (rows a multiple of 4, 16-byte aligned arrays) move each quad with one 16-byte load
    and store (:mod:`.vector_io`).

Bytes each launch must move: read ``rows * cols * 4`` (x, once) + write ``rows * cols * 4`` (y, once); m, e
and z never leave the block. Shared memory: ``WARPS_PER_BLOCK`` float32 partials (32 B). Every build gives the
bits of the four stages (:mod:`.row_stages`; docs/experiment_a.md, "The numerics policy").
"""

from dataclasses import dataclass

from numba import cuda, float32, uint64

from ..launch_spec import KernelLaunch
from ..numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, WARPS_PER_BLOCK,
                        block_reduce_max, block_reduce_sum, f32_add, f32_div,
                        f32_exp, f32_max, f32_sub, warp_reduce_max, warp_reduce_sum)
from ..validation import is_16_byte_aligned
from .prefetch import BLOCKS_PER_SM_WAVE, prefetch_l2, sm_id_bound
from .vector_io import load_quad, make_store_quotients, put_quad, store_quad

VALUES_PER_THREAD = 16
MAX_FUSED_COLUMNS = BLOCK_THREADS * VALUES_PER_THREAD
#: Compiled widths: quads (4 values) per thread. A row uses the smallest that holds it.
QUADS_PER_THREAD = (1, 2, 4)
#: Vector widths whose build prefetches the row one wave ahead (measured: PERFORMANCE.md).
PREFETCH_QUADS = (1,)
#: Widest row the one-warp build takes: 32 lanes x one quad.
WARP_BUILD_COLUMNS = 32 * QUAD


def _make_fused_kernel(quads, vector, prefetch=False):
    """The fused kernel for rows of up to ``quads * 4 * 256`` columns.

    ``quads``, ``vector`` and ``prefetch`` are compile-time constants: the loops unroll
    completely (the values stay in registers) and the unused paths are pruned. ``vector``
    selects 16-byte loads/stores, valid only when the row length is a multiple of 4 and
    the array is 16-byte aligned (the launcher checks); otherwise the same quads are
    loaded element by element with a mask, in the same order. ``prefetch`` (vector builds
    only: the bulk prefetch needs 16-byte aligned rows) adds the one-wave-ahead L2 prefetch.
    """
    QUADS = quads
    VALUES = quads * QUAD
    VECTOR = vector
    PREFETCH = prefetch and vector
    store_quotients = make_store_quotients(QUADS, QUAD * BLOCK_THREADS, VECTOR, f32_div)

    def fused_row_softmax(x, y):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        # The scalar builds index with unsigned copies: no negative-index (wraparound) code from
        # Numba's array model, no sign extension (the vector builds' load_quad skips wraparound already).
        urow = uint64(row)
        if PREFETCH:
            # The block one wave later (8 resident blocks per SM) loads row `ahead`: start
            # its DRAM read now, while this block spends its time in barriers and shuffles.
            if tid == 0:
                ahead = row + BLOCKS_PER_SM_WAVE * sm_id_bound()
                if ahead < x.shape[0]:
                    prefetch_l2(x, ahead * cols * 4, cols * 4)  # cols % 4 == 0: 16-byte multiples
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32, alignment=PARTIALS_ALIGNMENT)
        values = cuda.local.array(VALUES, float32)

        # Pass 1: load this thread's quads once (independent loads, all in flight
        # together) and reduce the maximum in increasing column order.
        local_max = NEG_INF
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                if base < cols:  # cols % 4 == 0: the whole quad is in the row
                    a, b, c, d = load_quad(x, row, base)
                    put_quad(values, QUAD * q, a, b, c, d)
                    local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        v = x[urow, uint64(base + j)]
                        values[QUAD * q + j] = v
                        local_max = f32_max(local_max, v)
        row_max = block_reduce_max(local_max, partials)

        # Pass 2: exponentiate in registers and reduce the sum, same order.
        local_sum = float32(0.0)
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                # cols % 4 == 0: one test per quad, not one branch per element.
                if base < cols:
                    for j in range(QUAD):
                        e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                        values[QUAD * q + j] = e
                        local_sum = f32_add(local_sum, e)
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                        values[QUAD * q + j] = e
                        local_sum = f32_add(local_sum, e)
        row_sum = block_reduce_sum(local_sum, partials)

        # Pass 3: the only global write.
        store_quotients(y, row, cols, QUAD * tid, values, row_sum)

    fused_row_softmax.__name__ = fused_row_softmax.__qualname__ = (
        f"fused_row_softmax_q{quads}{'_v4' if vector else ''}")
    return cuda.jit(**KERNEL_OPTIONS)(fused_row_softmax)


def fused_row_softmax_w1_v4(x, y):
    """Rows of at most 128 columns, vector: warp 0 alone (see the module docstring).

    Same operations in the same order as the block build for these rows: lane t owns
    columns 4t..4t+3, folds them in column order, and the warp butterfly combines the
    lanes; the cross-warp fold is skipped because it would only combine identities.
    """
    tid = cuda.threadIdx.x
    if tid >= 32:
        return  # warps 1-7 own no column of a row this short
    row = cuda.blockIdx.x
    cols = x.shape[1]
    base = QUAD * tid
    a = b = c = d = NEG_INF
    if base < cols:
        a, b, c, d = load_quad(x, row, base)
    row_max = warp_reduce_max(f32_max(f32_max(f32_max(f32_max(NEG_INF, a), b), c), d))
    local_sum = float32(0.0)
    if base < cols:
        a = f32_exp(f32_sub(a, row_max))
        b = f32_exp(f32_sub(b, row_max))
        c = f32_exp(f32_sub(c, row_max))
        d = f32_exp(f32_sub(d, row_max))
        local_sum = f32_add(f32_add(f32_add(f32_add(local_sum, a), b), c), d)
    row_sum = warp_reduce_sum(local_sum)
    if base < cols:
        store_quad(y, row, base, f32_div(a, row_sum), f32_div(b, row_sum), f32_div(c, row_sum),
                   f32_div(d, row_sum))


fused_row_softmax_w1_v4 = cuda.jit(**KERNEL_OPTIONS)(fused_row_softmax_w1_v4)


@dataclass(frozen=True)
class FusedBuild:
    """One compiled build and the rows it takes."""
    kernel: object        # the numba.cuda dispatcher
    max_columns: int
    vector: bool          # needs cols % 4 == 0 and 16-byte aligned x, y

    @property
    def name(self):
        return self.kernel.py_func.__name__


#: Every build, in the launcher's order of preference (the first that takes the row runs).
FUSED_BUILDS = (
    [FusedBuild(fused_row_softmax_w1_v4, WARP_BUILD_COLUMNS, True)]
    + [FusedBuild(_make_fused_kernel(q, True, prefetch=q in PREFETCH_QUADS), q * QUAD * BLOCK_THREADS, True)
       for q in QUADS_PER_THREAD]
    + [FusedBuild(_make_fused_kernel(q, False), q * QUAD * BLOCK_THREADS, False) for q in QUADS_PER_THREAD])
#: build name -> dispatcher.
FUSED_KERNELS = {build.name: build.kernel for build in FUSED_BUILDS}
#: The widest scalar build (any row up to 4096 columns), e.g. for the PTX report.
fused_row_softmax = FUSED_KERNELS["fused_row_softmax_q4"]


def fused_kernel_for(x, y):
    """The build for this shape: the first of ``FUSED_BUILDS`` that holds the row, a vector
    build when the rows are a multiple of 4 long and both arrays 16-byte aligned."""
    cols = x.shape[1]
    vector = cols % QUAD == 0 and is_16_byte_aligned(x) and is_16_byte_aligned(y)
    return next(b.kernel for b in FUSED_BUILDS if cols <= b.max_columns and (vector or not b.vector))


def fused_launches(x, y):
    """The single launch of the fused path for device arrays ``x`` -> ``y``."""
    rows, cols = x.shape
    if cols > MAX_FUSED_COLUMNS:
        raise ValueError(
            f"row too long for the fused kernel: {cols} columns > {MAX_FUSED_COLUMNS} "
            f"({BLOCK_THREADS} threads x {VALUES_PER_THREAD} values per thread); "
            "use method='stages' or the tiled softmax")
    return [KernelLaunch("fused_row_softmax", fused_kernel_for(x, y), (rows,), (BLOCK_THREADS,), (x, y))]
