"""Device building blocks of ``method="auto"``'s kernels (:mod:`.auto_rows`): the reductions over the L threads
of a row, the error records of the checked builds, and the parts a row body is built from.

Reductions: an xor butterfly over offsets ``min(L, 32) / 2 .. 1`` (shuffles only, within the group of L lanes),
then for L > 32 a sequential fold of the warp partials, warp 0 first (``L / 32`` floats of shared memory) -- the
order of :mod:`numba_softmax.numerics`. A cluster geometry ends each reduction with :func:`make_cluster_fold`:
every CTA's result goes to a slot of every CTA's shared memory (4 bytes per CTA), folded in rank order.
Records (checked builds, error path only): ``cuda.atomic.min`` of the first flat index into ``status`` (the
record of ``validation.STATUS_*``), then ``alarm[0] = 1`` and a system-scope fence (the alarm may live in
mapped host memory).
"""

from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, uint32

from ..numerics import (KERNEL_OPTIONS, SIMULATOR, WARP_SIZE, block_reductions, f32_add, f32_div, f32_exp, f32_max,
                        reduction_pair)
from ..validation import STATUS_CLEAR

if not SIMULATOR:
    from .cluster import cluster_arrive, cluster_store_f32, cluster_wait

POS_INF = float32(np.inf)
U32_ZERO = np.uint32(0)
_U32_ONE = np.uint32(1)
#: A clear status word as the kernels compare it.
CLEAR_WORD = np.int64(STATUS_CLEAR)

# ---- reductions over the L threads of a row ---------------------------------------------------------------

def row_reductions(lanes, block):
    """``(row_max, row_sum)(value, partials)`` over each group of ``lanes`` consecutive threads of a
    ``block``-thread block (``lanes`` a power of two; ``lanes > 32`` only with ``lanes == block``).

    Order: the xor butterfly over offsets ``min(lanes, 32) / 2 .. 1`` (every lane ends with the same bits:
    each step combines ``(own, partner)`` and both operations are commutative), then for ``lanes > 32`` a
    sequential fold of the warp results, warp 0 first -- the order of :mod:`numba_softmax.numerics`.
    ``partials``: shared float32[max(1, lanes // 32)] (unused when ``lanes <= 32``).
    """
    if lanes & (lanes - 1) or not 1 <= lanes <= 1024 or (lanes > WARP_SIZE and lanes != block):
        raise ValueError(f"a row group needs a power-of-two lane count up to 1024, one row per block above "
                         f"32 lanes; got {lanes} lanes in a {block}-thread block")
    WIDTH = min(lanes, WARP_SIZE)
    WARPS = lanes // WARP_SIZE
    BLOCK = block

    if SIMULATOR:
        # No shuffles in the simulator: each butterfly step goes through shared memory, the same operands
        # in the same order as the GPU's shfl_xor steps.
        @cuda.jit(device=True)
        def reduce(value, partials, is_max):
            scratch = cuda.shared.array(BLOCK, float32)
            tid = cuda.threadIdx.x
            offset = WIDTH // 2
            while offset > 0:
                scratch[tid] = value
                cuda.syncthreads()
                other = scratch[tid ^ offset]
                cuda.syncthreads()
                value = f32_max(value, other) if is_max else f32_add(value, other)
                offset //= 2
            if WARPS > 1:
                if tid % WARP_SIZE == 0:
                    partials[tid // WARP_SIZE] = value
                cuda.syncthreads()
                value = partials[0]
                for w in range(1, WARPS):
                    value = f32_max(value, partials[w]) if is_max else f32_add(value, partials[w])
                cuda.syncthreads()
            return value

        return reduction_pair(reduce)

    if WARPS > 1:
        return block_reductions(lanes)

    def make(combine):
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def group_reduce(value, partials):
            offset = WIDTH // 2
            while offset > 0:
                value = combine(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
                offset //= 2
            return value
        return group_reduce

    return make(f32_max), make(f32_add)


# ---- the records of the checked builds --------------------------------------------------------------------

@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def record_status(status, word, value, alarm):
    """Error path only: keep the smallest ``value`` in ``status[word]``, raise the alarm, make it visible
    to the host (the alarm may live in mapped host memory)."""
    cuda.atomic.min(status, word, value)
    alarm[0] = 1
    cuda.threadfence_system()


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def bad_bit(value, k):
    """Bit ``k`` set when ``value`` is NaN or +inf: one comparison on the good path (``not (v < +inf)``).
    A thread's values k = 0, 1, ... are its columns in increasing order, so the lowest set bit of the
    mask is its first offending column; the mask costs one register where an int64 index cost two
    and the index arithmetic (the 1024-lane checked builds spilled with it)."""
    if value < POS_INF:
        return U32_ZERO
    return _U32_ONE << uint32(k)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def lowest_bit(mask):
    """Index of the lowest set bit of a non-zero mask."""
    return cuda.ffs(mask) - 1



# ---- the parts a row body is built from ---------------------------------------------------------------------

def make_cluster_publish(ctas):
    """``publish(value, slots, rank)``: thread 0 of every CTA writes its CTA's result into slot ``rank`` of every
    CTA's ``slots`` (distributed shared memory), then the cluster barrier (release / acquire)."""
    CTAS = ctas

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def cluster_publish(value, slots, rank):
        if cuda.threadIdx.x == 0:
            for j in range(CTAS):
                cluster_store_f32(slots, rank, j, value)
        cluster_arrive()
        cluster_wait()

    return cluster_publish


def make_cluster_fold(ctas):
    """The cluster stage of a reduction, ``fold(value, slots, rank, is_max)``: publish each CTA's result, then
    every thread folds the slots in rank order, rank 0 first, so every CTA gets the same bits."""
    CTAS = ctas
    publish = make_cluster_publish(ctas)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def cluster_fold(value, slots, rank, is_max):
        publish(value, slots, rank)
        value = slots[0]
        for j in range(1, CTAS):
            value = f32_max(value, slots[j]) if is_max else f32_add(value, slots[j])
        return value

    return cluster_fold


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def span_after_registers(cta_first, span_first):
    """The first column the bulk copy of a ``_s{S}`` geometry reads: the span's own."""
    return span_first


@dataclass(frozen=True)
class RowParts:
    """The device functions a row body is built from. The shipped builds use :data:`POLICY_PARTS`; the
    negative controls and diagnostic builds (:mod:`.auto_controls`) swap one of them."""
    exp: object           # exp(x), the policy's libdevice expf
    div: object           # a / b, IEEE
    cluster_fold: object  # ctas -> the cluster stage fold(value, slots, rank, is_max)
    span_source: object   # (cta_first, span_first) -> the first column the bulk copy reads


POLICY_PARTS = RowParts(f32_exp, f32_div, make_cluster_fold, span_after_registers)
