"""``method="auto"``: a row softmax whose geometry is chosen per width, any row length, checks on the device.

The protocol's fused kernel (:mod:`.fused_row`) fixes one 256-thread block per row. These kernels keep its
numerics policy (every add, subtract and multiply through ``f32_add`` / ``f32_sub`` / ``f32_mul``, libdevice
``expf``, IEEE division, reductions that combine in one fixed order: an xor butterfly, then a sequential fold
of the warp partials, warp 0 first) and the same oracle tolerance, but choose the geometry per width as
Triton, QuACK, OneFlow and PyTorch do. docs/auto_kernels.md gives the table, the bytes and the reasons.

Row kernels (``rows_l{L}_q{Q}``): a row held in registers
    A group of ``L`` threads (a power of two, 4..1024) owns one row; lane ``t`` of the group owns the quads
    (4 consecutive columns) starting at ``4 * (t + L * q)``, q < Q, so the group reads contiguous 16-byte
    vectors and holds up to ``4 * L * Q`` columns in registers::

        m = max_j x[j]                 # group reduction
        e_j = exp(x[j] - m)            # in registers
        z = sum_j e_j                  # group reduction
        y[j] = e_j / z

    ``L <= 32``: a 256-thread block holds ``256 / L`` rows; the group reduces with shuffles alone (an xor
    butterfly over offsets L/2 .. 1 stays inside the group): no shared memory, no barrier. ``L > 32``: one
    row per ``L``-thread block; the warps' partials meet in shared memory (``L / 32`` floats).
    Bytes: read ``rows * cols * 4`` once, write the same once.

Half in shared memory (``rows_l{L}_q{Q}_s{S}``, ``cluster_l{L}_q{Q}_c{C}_s{S}``): two rows per SM
    A rows (or cluster) kernel of ``L > 32`` lanes whose threads own ``S`` more quads after their ``Q``
    register ones: ``4 L Q`` columns (per CTA) in registers, the next ``4 L S`` in the block's dynamic shared
    memory (``16 L S`` bytes). Thread 0 starts one bulk copy (:mod:`.bulk_copy`, the copy engine) of that
    contiguous span before the threads issue their own 16-byte loads; the threads wait on its mbarrier, read
    their shared quads with 16-byte shared loads, write the exponentials back there, and divide and store
    from there. Same order of operations, one exponential and one division per value. At the 64-register
    bound a block so holds twice the row its registers allow: 32768 columns in 512 lanes (two blocks per SM,
    one's reductions under the other's loads, where ``rows_l1024_q8`` holds an SM alone), 65536 in 1024
    lanes without a cluster. 16-byte builds only, GPU only.
    Bytes: read ``rows * cols * 4`` once (part of it through the copy engine), write the same once.

Cluster kernels (``cluster_l{L}_q{Q}_c{C}``): a row in the registers of a thread block cluster
    The row kernel with ``L > 32`` lanes, spread over the ``C`` CTAs of a cluster (:mod:`.cluster`): CTA
    ``rank`` holds columns ``4 L Q rank`` .. ``4 L Q (rank + 1) - 1``. Each reduction ends with a cluster
    stage: thread 0 of every CTA writes its CTA's result into slot ``rank`` of every CTA's shared array
    (distributed shared memory), a cluster barrier (release / acquire), and every thread folds the ``C``
    slots in rank order, so all CTAs hold the same bits. One exponential and one division per value, as
    the row kernels; rows up to ``4 L Q C`` columns (262,144 with 1024 lanes, 8 quads, 8 CTAs) read once.
    16-byte builds only (rows a multiple of 4 columns, aligned arrays); GPU only.
    Bytes: read ``rows * cols * 4`` once, write the same once.

Long-row kernels (``long_l{L}_q{Q}``): any row length
    One ``L``-thread block per row walks the row in chunks of ``4 * L * Q`` columns.
    Pass 1, chunk by chunk: load the chunk into registers, fold it into a running (max, sum) per thread --
    ``s = s * exp(m_old - m_new) + sum exp(x - m_new)``, one extra ``expf`` per chunk, not per element
    (the online softmax of Milakov and Gimelshein, as in PyTorch's ``cunn_SoftMaxForward`` and QuACK). Then
    the row max ``M`` is a block max, each thread rescales its sum to ``M`` and the row sum ``S`` is a block
    sum. Pass 2 walks the chunks in REVERSE order writing ``exp(x - M) / S``: the last chunk is still in
    registers (never read twice) and the chunks just before it are the ones most recently read, so the
    second read of x hits L2 as long as the bytes read by the resident blocks fit in it.
    Bytes: DRAM read ``rows * cols * 4`` (plus whatever of the second read misses L2), write the same once.

Masks and non-finite values
    ``-inf`` gets weight exactly 0 (``exp(-inf - m) == 0`` for finite ``m``); a row without a finite entry
    has ``m = -inf`` and gives NaN (``exp(-inf - (-inf))``), as ``torch.softmax`` does. Unchecked builds let
    NaN and +inf propagate (the row becomes NaN). Checked builds (``_checked``) produce the same output and
    record, on the error path only, the smallest flat index ``row * cols + col`` of a NaN or +inf in
    ``status[0]`` and the smallest fully masked row in ``status[1]`` (``cuda.atomic.min``), then store 1 into
    ``alarm[0]`` and fence at system scope. The row and cluster kernels test each row once, on its sum: a
    row of finite and -inf values sums terms in [0, 1], one of them exp(0) = 1, so only a NaN, a +inf or a
    row without a finite entry makes the sum NaN; then (error path only) each thread reads its values again
    and keeps one bit per value (its columns in increasing order), so the lowest set bit is its first
    offending column. The long-row kernels keep that mask per chunk as they go (a chunk of NaN alone would
    leave their running sum at 0). One atomic per offending thread (per chunk in the long-row path).

Check-only pass (``check_values``): one 256-thread block per row reads x once (16-byte loads where it can)
and writes nothing but the records above; ``allow_neg_inf=False`` treats -inf like +inf (the protocol's
``fused`` / ``stages`` paths reject it).

Builds: ``_v4`` (16-byte vector loads and stores; rows a multiple of 4 long, 16-byte aligned arrays) or
scalar masked loads of the same quads in the same order; the simulator always runs the scalar builds. Every
build has launch bounds that hold it to <= 64 registers per thread (>= 1024 resident threads per SM; checked
with ptxas: no spills), is compiled lazily, on its first launch, and the table's builds are registered for the
PTX policy check (``registry.AUTO_KERNELS``; tests/cpu/test_auto_kernels_ptx.py checks every candidate's).

Nothing here allocates, synchronizes or copies: launchers only build :class:`KernelLaunch` values.
"""

from dataclasses import dataclass

import numpy as np
from numba import cuda, float32, int64, uint32, uint64

from ..launch_spec import KernelLaunch
from ..numerics import (KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, SIMULATOR, WARP_SIZE, approx_div,
                        approx_exp, bounded_kernel, f32_add, f32_div, f32_exp, f32_max, f32_mul, f32_sub)
from .vector_io import load_quad, store_quad

if not SIMULATOR:
    from .bulk_copy import (bulk_copy_to_shared, fence_mbarrier_init, load_shared_quad, mbarrier_arrive,
                            mbarrier_init, mbarrier_try_wait, store_shared_quad)
    from .cluster import cluster_arrive, cluster_arrive_relaxed, cluster_store_f32, cluster_wait

#: Words of the device status record and the value of a clear word (see the module docstring).
STATUS_WORDS = 2
STATUS_CLEAR = np.iinfo(np.int64).max
#: status[0]: smallest flat index of a NaN or +inf (or -inf, in a check that allows no mask).
STATUS_NONFINITE = 0
#: status[1]: smallest row index whose entries are all -inf.
STATUS_MASKED_ROW = 1

POS_INF = float32(np.inf)
_U32_ZERO = np.uint32(0)
_U32_ONE = np.uint32(1)
_CLEAR = np.int64(STATUS_CLEAR)
#: Most quads per thread of any build: a checked build keeps one bit per value in a 32-bit mask.
MAX_QUADS = 8
#: Alignment of a ``_s{S}`` geometry's dynamic shared array (the copy engine needs 16 bytes).
STAGED_ALIGNMENT = 128
#: Threads per block of the row kernels whose rows take at most a warp (256 / L rows per block).
GROUP_BLOCK_THREADS = 256
#: Resident threads per SM every build must allow (launch bounds): 64 registers per thread at most.
MIN_THREADS_PER_SM = 1024
#: Threads per block of the check-only pass (one block per row).
CHECK_BLOCK_THREADS = 256
#: Warps of a check block (a module constant: Numba needs a shared array's size as one, not an expression).
CHECK_WARPS = CHECK_BLOCK_THREADS // WARP_SIZE


# ---- reductions over the L threads of a row ---------------------------------------------------------------

def _row_reductions(lanes, block):
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

        @cuda.jit(device=True)
        def row_max(value, partials):
            return reduce(value, partials, True)

        @cuda.jit(device=True)
        def row_sum(value, partials):
            return reduce(value, partials, False)

        return row_max, row_sum

    from ..numerics import block_reductions

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
def _record(status, word, value, alarm):
    """Error path only: keep the smallest ``value`` in ``status[word]``, raise the alarm, make it visible
    to the host (the alarm may live in mapped host memory)."""
    cuda.atomic.min(status, word, value)
    alarm[0] = 1
    cuda.threadfence_system()


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def _bad_bit(value, k):
    """Bit ``k`` set when ``value`` is NaN or +inf: one comparison on the good path (``not (v < +inf)``).
    A thread's values k = 0, 1, ... are its columns in increasing order, so the lowest set bit of the
    mask is its first offending column; the mask costs one register where an int64 index cost two
    and the index arithmetic (the 1024-lane checked builds spilled with it)."""
    if value < POS_INF:
        return _U32_ZERO
    return _U32_ONE << uint32(k)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def _lowest_bit(mask):
    """Index of the lowest set bit of a non-zero mask."""
    return cuda.ffs(mask) - 1


# ---- row kernels: a row in registers ----------------------------------------------------------------------

def _make_rows_kernel(lanes, quads, vector, checked, ctas=1, exchange=True, fast_math=False, shared_quads=0,
                      span_source=None):
    """A row in registers: ``lanes`` threads per row, ``quads`` quads each; with ``ctas > 1`` (the cluster
    kernels) the row is spread over the ``ctas`` CTAs of a thread block cluster, CTA ``rank`` holding
    columns ``rank * 4 * lanes * quads`` on, and the two reductions end with a cluster stage (below).
    ``shared_quads > 0`` (the ``_s{S}`` geometries): each thread owns ``shared_quads`` more quads after its
    register ones, held in the block's dynamic shared memory, where the copy engine brings them.
    ``exchange=False`` (a negative control only): the cluster stage keeps each CTA's own result.
    ``span_source="registers"`` (a negative control only): the bulk copy fills the shared span from the CTA's
    register columns instead of the span's own.
    ``fast_math=True`` (a diagnostic ``*_fastmath`` geometry only): Triton's approximate exponential and
    division instead of the policy's, to measure what the policy costs."""
    EXP, DIV = (approx_exp, approx_div) if fast_math else (f32_exp, f32_div)
    LANES = lanes
    QUADS = quads
    VALUES = quads * QUAD
    BLOCK = max(lanes, GROUP_BLOCK_THREADS) if lanes <= WARP_SIZE else lanes
    ROWS = BLOCK // LANES
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    VECTOR = vector
    CHECKED = checked
    CTAS = ctas
    EXCHANGE = exchange
    CTA_COLUMNS = QUAD * LANES * QUADS
    SHARED_QUADS = shared_quads
    ALL_QUADS = QUADS + SHARED_QUADS
    if span_source not in (None, "registers") or (span_source and not SHARED_QUADS):
        raise ValueError(f"span_source {span_source!r}: None, or 'registers' for a negative control of a "
                         "geometry with quads in shared memory")
    SPAN_FROM_REGISTERS = span_source == "registers"
    if SHARED_QUADS and (SIMULATOR or LANES <= WARP_SIZE or not VECTOR):
        raise ValueError("a row geometry with quads in shared memory needs a GPU (the copy engine), one row per "
                         f"block (more than {WARP_SIZE} lanes; got {LANES}) and 16-byte quads")
    if CTAS > 1 and (SIMULATOR or ROWS != 1 or not VECTOR):
        raise ValueError("cluster kernels need a GPU (the simulator has no clusters), one row per CTA (more than "
                         f"{WARP_SIZE} lanes; got {LANES}) and 16-byte quads (a scalar build spills its 64-bit "
                         "column arithmetic at 32 values per thread)")
    row_max_of, row_sum_of = _row_reductions(LANES, BLOCK)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def cluster_fold(value, exchange, rank, is_max):
        """The cluster stage of a reduction: thread 0 of every CTA writes its CTA's result into slot
        ``rank`` of every CTA's ``exchange``; after the barrier (release / acquire) each thread folds the
        slots in rank order, rank 0 first, so every CTA gets the same bits."""
        if cuda.threadIdx.x == 0:
            for j in range(CTAS):
                cluster_store_f32(exchange, rank, j, value)
        cluster_arrive()
        cluster_wait()
        if not EXCHANGE:
            return value  # negative control: the other CTAs' results are never read
        value = exchange[0]
        for j in range(1, CTAS):
            value = f32_max(value, exchange[j]) if is_max else f32_add(value, exchange[j])
        return value

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def record_row(x, row, offset, lane, row_max, rank, status, alarm):
        """Error path of a checked build: this thread's first NaN or +inf (its values read again, in
        the order it holds them), and the row if it has no finite entry (lane 0 of rank 0 only)."""
        cols = x.shape[1]
        for first in range(0, ALL_QUADS, MAX_QUADS):  # one 32-bit mask per 8 quads, the lowest columns first
            bad = _U32_ZERO
            for q in range(first, min(first + MAX_QUADS, ALL_QUADS)):
                base = offset + QUAD * lane + STRIDE * q
                for j in range(QUAD):
                    if base + j < cols:
                        bad |= _bad_bit(x[uint64(row), uint64(base + j)], QUAD * (q - first) + j)
            if bad != _U32_ZERO:
                k = _lowest_bit(bad) + QUAD * first
                _record(status, STATUS_NONFINITE,
                        row * cols + offset + QUAD * lane + STRIDE * (k // QUAD) + k % QUAD, alarm)
                break
        if lane == 0 and rank == 0 and row_max == NEG_INF:
            _record(status, STATUS_MASKED_ROW, np.int64(row), alarm)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_values(x, row, live, offset, lane, values):
        """This lane's register quads of the row into ``values`` (independent loads, all in flight together)
        and their max, folded in increasing column order. Columns past the row, and every column of a group
        past the last row (``live`` false), hold -inf: they add exp(-inf - m) = +0 later."""
        cols = x.shape[1]
        local_max = NEG_INF
        for q in range(QUADS):
            base = offset + QUAD * lane + STRIDE * q
            if VECTOR:
                a = b = c = d = NEG_INF
                if live and base < cols:  # cols % 4 == 0: the whole quad is in the row
                    a, b, c, d = load_quad(x, row, base)
                values[QUAD * q] = a
                values[QUAD * q + 1] = b
                values[QUAD * q + 2] = c
                values[QUAD * q + 3] = d
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
            else:
                for j in range(QUAD):
                    v = NEG_INF
                    if live and base + j < cols:
                        v = x[uint64(row), uint64(base + j)]  # unsigned: no negative-index wraparound code
                    values[QUAD * q + j] = v
                    local_max = f32_max(local_max, v)
        return local_max

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        tid = cuda.threadIdx.x
        lane = tid % LANES
        rank = 0
        offset = 0  # the first column this CTA holds
        if CTAS > 1:
            # Every CTA of the cluster has to have started before another writes into its shared memory:
            # arrive now, wait just before the first remote store (the loads and the block max between).
            cluster_arrive_relaxed()
            rank = cuda.blockIdx.x % CTAS
            offset = rank * CTA_COLUMNS
            row = cuda.blockIdx.x // CTAS
        else:
            row = cuda.blockIdx.x * ROWS + tid // LANES
        rows, cols = x.shape
        live = row < rows  # a group past the last row still takes part in the shuffles and barriers
        partials = cuda.shared.array(WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        maxes = cuda.shared.array(CTAS, float32)
        sums = cuda.shared.array(CTAS, float32)
        values = cuda.local.array(VALUES, float32)

        local_max = load_values(x, row, live, offset, lane, values)
        row_max = row_max_of(local_max, partials)
        if CTAS > 1:
            cluster_wait()  # every CTA has started (the arrive above)
            row_max = cluster_fold(row_max, maxes, rank, True)

        local_sum = float32(0.0)
        if live:  # a group past the last row has nothing to exponentiate (its max is -inf)
            for k in range(VALUES):
                e = EXP(f32_sub(values[k], row_max))
                values[k] = e
                local_sum = f32_add(local_sum, e)
        row_sum = row_sum_of(local_sum, partials)
        if CTAS > 1:
            row_sum = cluster_fold(row_sum, sums, rank, False)

        if live:
            for q in range(QUADS):
                base = offset + QUAD * lane + STRIDE * q
                if VECTOR:
                    if base < cols:
                        store_quad(y, row, base,
                                   DIV(values[QUAD * q], row_sum), DIV(values[QUAD * q + 1], row_sum),
                                   DIV(values[QUAD * q + 2], row_sum), DIV(values[QUAD * q + 3], row_sum))
                else:
                    for j in range(QUAD):
                        if base + j < cols:
                            y[uint64(row), uint64(base + j)] = DIV(values[QUAD * q + j], row_sum)
        if CHECKED:
            # The good path tests the row once: every term exp(x - m) of a row of finite and -inf values
            # lies in [0, 1] and one is exp(0) = 1, so its sum is finite; a NaN, a +inf (m = +inf, a term
            # exp(inf - inf)) or a row of -inf alone (exp(-inf - (-inf))) makes it NaN. Only then is the
            # thread's part of the row read again to name the first offending column: after the stores,
            # where its values no longer hold registers (before them, the scalar q8 builds spilled).
            if live and not row_sum < POS_INF:
                record_row(x, row, offset, lane, row_max, rank, status, alarm)

    if not SHARED_QUADS:
        return body, BLOCK, ROWS

    REGISTER_COLUMNS = QUAD * LANES * QUADS  # of a CTA's columns: the first in registers, the rest in shared memory
    CTA_SPAN = QUAD * LANES * ALL_QUADS

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def staged_body(x, y, status, alarm):
        """One row per block (per cluster with CTAS > 1, CTA ``rank`` holding columns ``rank * CTA_SPAN`` on):
        quads 0 .. QUADS - 1 of each thread in registers, its next SHARED_QUADS quads (the rest of the CTA's
        columns, one contiguous span) in dynamic shared memory."""
        tid = cuda.threadIdx.x
        rank = 0
        if CTAS > 1:
            cluster_arrive_relaxed()  # as in ``body``: every CTA started before the first remote store
            rank = cuda.blockIdx.x % CTAS
            row = cuda.blockIdx.x // CTAS
        else:
            row = cuda.blockIdx.x
        offset = rank * CTA_SPAN
        cols = x.shape[1]
        partials = cuda.shared.array(WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        maxes = cuda.shared.array(CTAS, float32)
        sums = cuda.shared.array(CTAS, float32)
        staged = cuda.shared.array(0, float32, alignment=STAGED_ALIGNMENT)  # dynamic: 16 * LANES * SHARED_QUADS B
        bars = cuda.shared.array(1, int64)
        values = cuda.local.array(VALUES, float32)
        first = offset + REGISTER_COLUMNS  # the shared span's first column
        end = min(cols, offset + CTA_SPAN)

        # Thread 0 starts the copy of the shared span before anyone loads: its bytes travel while every
        # thread's own 16-byte loads do, and they take no register.
        if tid == 0:
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
            if end > first:
                source = offset if SPAN_FROM_REGISTERS else first  # the control copies the wrong columns
                bulk_copy_to_shared(bars, 0, staged, x, row, source, (end - first) * 4)
            else:
                mbarrier_arrive(bars, 0)
        local_max = load_values(x, row, True, offset, tid, values)
        cuda.syncthreads()  # the barrier's initialization before anyone waits on it
        while mbarrier_try_wait(bars, 0, 0) == 0:
            pass
        for s in range(SHARED_QUADS):  # each thread reads only its own quads: no barrier between the passes
            i = QUAD * tid + STRIDE * s
            if first + i < cols:
                a, b, c, d = load_shared_quad(staged, i)
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
        row_max = row_max_of(local_max, partials)
        if CTAS > 1:
            cluster_wait()
            row_max = cluster_fold(row_max, maxes, rank, True)

        # Exponentials in the ownership order (register quads, then shared ones); a shared quad's go back
        # where it came from. Quads past the row add nothing (exp(-inf - m) = +0 in registers, skipped here).
        local_sum = float32(0.0)
        for k in range(VALUES):
            e = EXP(f32_sub(values[k], row_max))
            values[k] = e
            local_sum = f32_add(local_sum, e)
        for s in range(SHARED_QUADS):
            i = QUAD * tid + STRIDE * s
            if first + i < cols:
                a, b, c, d = load_shared_quad(staged, i)
                a = EXP(f32_sub(a, row_max))
                b = EXP(f32_sub(b, row_max))
                c = EXP(f32_sub(c, row_max))
                d = EXP(f32_sub(d, row_max))
                local_sum = f32_add(f32_add(f32_add(f32_add(local_sum, a), b), c), d)
                store_shared_quad(staged, i, a, b, c, d)
        row_sum = row_sum_of(local_sum, partials)
        if CTAS > 1:
            row_sum = cluster_fold(row_sum, sums, rank, False)

        for q in range(QUADS):
            base = offset + QUAD * tid + STRIDE * q
            if base < cols:
                store_quad(y, row, base, DIV(values[QUAD * q], row_sum), DIV(values[QUAD * q + 1], row_sum),
                           DIV(values[QUAD * q + 2], row_sum), DIV(values[QUAD * q + 3], row_sum))
        for s in range(SHARED_QUADS):
            i = QUAD * tid + STRIDE * s
            if first + i < cols:
                a, b, c, d = load_shared_quad(staged, i)
                store_quad(y, row, first + i, DIV(a, row_sum), DIV(b, row_sum), DIV(c, row_sum), DIV(d, row_sum))
        if CHECKED:
            if not row_sum < POS_INF:  # the test of the row kernels above
                record_row(x, row, offset, tid, row_max, rank, status, alarm)

    return staged_body, BLOCK, ROWS


# ---- long-row kernels: any length, two passes, the second in reverse ---------------------------------------

def _make_long_kernel(lanes, quads, vector, checked):
    LANES = lanes
    QUADS = quads
    VALUES = quads * QUAD
    CHUNK = QUAD * LANES * QUADS
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    VECTOR = vector
    CHECKED = checked
    row_max_of, row_sum_of = _row_reductions(LANES, LANES)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_chunk(x, row, start, values):
        """This thread's quads of the chunk at column ``start`` into ``values``; -inf past the row."""
        cols = x.shape[1]
        lane = cuda.threadIdx.x
        for q in range(QUADS):
            base = start + QUAD * lane + STRIDE * q
            if VECTOR:
                a = b = c = d = NEG_INF
                if base < cols:
                    a, b, c, d = load_quad(x, row, base)
                values[QUAD * q] = a
                values[QUAD * q + 1] = b
                values[QUAD * q + 2] = c
                values[QUAD * q + 3] = d
            else:
                for j in range(QUAD):
                    v = NEG_INF
                    if base + j < cols:
                        v = x[uint64(row), uint64(base + j)]  # unsigned: no negative-index wraparound code
                    values[QUAD * q + j] = v

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        row = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        cols = x.shape[1]
        chunks = (cols + CHUNK - 1) // CHUNK
        partials = cuda.shared.array(WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        values = cuda.local.array(VALUES, float32)

        # Pass 1: a running (max, sum) per thread, rescaled once per chunk.
        run_max = NEG_INF
        run_sum = float32(0.0)
        for c in range(chunks):
            start = c * CHUNK
            load_chunk(x, row, start, values)
            chunk_max = NEG_INF
            bad = _U32_ZERO
            for k in range(VALUES):
                chunk_max = f32_max(chunk_max, values[k])
                if CHECKED:
                    bad |= _bad_bit(values[k], k)  # columns past the row hold -inf: never bad
            if CHECKED:
                # Error path: one record per chunk of an offending thread; atomic min keeps the smallest.
                if bad != _U32_ZERO:
                    k = _lowest_bit(bad)
                    _record(status, STATUS_NONFINITE,
                            row * cols + start + QUAD * lane + STRIDE * (k // QUAD) + k % QUAD, alarm)
            new_max = f32_max(run_max, chunk_max)
            # While every value so far is -inf the sum stays 0 (exp(-inf - (-inf)) would be NaN).
            if new_max != NEG_INF:
                if run_max != NEG_INF:
                    run_sum = f32_mul(run_sum, f32_exp(f32_sub(run_max, new_max)))
                for k in range(VALUES):
                    run_sum = f32_add(run_sum, f32_exp(f32_sub(values[k], new_max)))
                run_max = new_max

        row_max = row_max_of(run_max, partials)
        scaled = float32(0.0)
        if run_max != NEG_INF:
            scaled = f32_mul(run_sum, f32_exp(f32_sub(run_max, row_max)))
        row_sum = row_sum_of(scaled, partials)
        if CHECKED:
            if lane == 0 and row_max == NEG_INF:
                _record(status, STATUS_MASKED_ROW, np.int64(row), alarm)

        # Pass 2, last chunk first: it is still in registers, and the chunks before it were read last.
        for step in range(chunks):
            start = (chunks - 1 - step) * CHUNK
            if step > 0:
                load_chunk(x, row, start, values)
            for q in range(QUADS):
                base = start + QUAD * lane + STRIDE * q
                if VECTOR:
                    if base < cols:
                        store_quad(y, row, base,
                                   f32_div(f32_exp(f32_sub(values[QUAD * q], row_max)), row_sum),
                                   f32_div(f32_exp(f32_sub(values[QUAD * q + 1], row_max)), row_sum),
                                   f32_div(f32_exp(f32_sub(values[QUAD * q + 2], row_max)), row_sum),
                                   f32_div(f32_exp(f32_sub(values[QUAD * q + 3], row_max)), row_sum))
                else:
                    for j in range(QUAD):
                        if base + j < cols:
                            e = f32_exp(f32_sub(values[QUAD * q + j], row_max))
                            y[uint64(row), uint64(base + j)] = f32_div(e, row_sum)

    return body, LANES, 1


# ---- the check-only pass ----------------------------------------------------------------------------------

def _make_check_kernel(vector, allow_neg_inf):
    VECTOR = vector
    ALLOW_NEG_INF = allow_neg_inf
    STRIDE = QUAD * CHECK_BLOCK_THREADS
    row_max_of, _ = _row_reductions(CHECK_BLOCK_THREADS, CHECK_BLOCK_THREADS)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def bad(v):
        if ALLOW_NEG_INF:
            return not (v < POS_INF)
        return not (NEG_INF < v < POS_INF)

    def check_values(x, status, alarm):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        cols = x.shape[1]
        partials = cuda.shared.array(CHECK_WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        first = _CLEAR
        local_max = NEG_INF
        for base in range(QUAD * tid, cols, STRIDE):
            if VECTOR:
                a, b, c, d = load_quad(x, row, base)
                flat = row * cols + base
                if first == _CLEAR:
                    if bad(a):
                        first = flat
                    elif bad(b):
                        first = flat + 1
                    elif bad(c):
                        first = flat + 2
                    elif bad(d):
                        first = flat + 3
                if ALLOW_NEG_INF:
                    local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        v = x[uint64(row), uint64(base + j)]  # unsigned: no negative-index wraparound code
                        if first == _CLEAR and bad(v):
                            first = row * cols + base + j
                        if ALLOW_NEG_INF:
                            local_max = f32_max(local_max, v)
        if first != _CLEAR:
            _record(status, STATUS_NONFINITE, first, alarm)
        if ALLOW_NEG_INF:
            row_max = row_max_of(local_max, partials)
            if tid == 0 and row_max == NEG_INF:
                _record(status, STATUS_MASKED_ROW, np.int64(row), alarm)

    check_values.__name__ = check_values.__qualname__ = (
        f"check_values{'_neg_inf' if allow_neg_inf else '_finite'}{'_v4' if vector else ''}")
    return cuda.jit(**KERNEL_OPTIONS)(check_values)


# ---- builds and the table ---------------------------------------------------------------------------------

_MAKERS = {"rows": _make_rows_kernel, "cluster": _make_rows_kernel, "long": _make_long_kernel}
#: Name suffix of a diagnostic fast-math geometry (:attr:`Geometry.fast_math`).
FAST_MATH_SUFFIX = "_fastmath"
#: Most CTAs of a cluster geometry: the portable cluster size (larger ones need an opt-in attribute).
MAX_CLUSTER_CTAS = 8
#: Most quads per thread in shared memory: 16 KiB per 256 lanes (two 512-lane blocks hold 128 KiB).
MAX_SHARED_QUADS = 16


@dataclass(frozen=True)
class Geometry:
    """One selectable geometry: ``kind`` ``rows`` (a row in registers), ``cluster`` (a row in the registers
    of the ``ctas`` CTAs of a thread block cluster) or ``long`` (any length)."""
    kind: str
    lanes: int      # threads per row (per CTA of the cluster)
    quads: int      # quads (4 values) per thread: per row (rows, cluster) or per chunk (long)
    ctas: int = 1   # CTAs per row (cluster only)
    #: A diagnostic build with Triton's approximate exponential and division (name suffix ``_fastmath``):
    #: never in the table, it measures what the numerics policy costs (``bench perf --auto-geometries``).
    fast_math: bool = False
    #: Quads per thread held in dynamic shared memory after the register ones (``rows`` only, name suffix
    #: ``_s{S}``): a block holds twice the row its registers allow, so an SM keeps two such rows in flight.
    shared_quads: int = 0

    def __post_init__(self):
        if self.kind not in _MAKERS:
            raise ValueError(f"geometry kind {self.kind!r}: expected one of {sorted(_MAKERS)}")
        if self.lanes & (self.lanes - 1) or not 1 <= self.lanes <= 1024:
            raise ValueError(f"geometry {self.name}: lanes must be a power of two from 1 to 1024")
        if not 1 <= self.quads <= MAX_QUADS:
            # A checked build keeps one bit per value in a 32-bit mask.
            raise ValueError(f"geometry {self.name}: quads must be 1 to {MAX_QUADS} (at most 32 values per thread)")
        if self.kind == "cluster" and not (2 <= self.ctas <= MAX_CLUSTER_CTAS and self.lanes > WARP_SIZE):
            raise ValueError(f"geometry {self.name}: a cluster holds 2 to {MAX_CLUSTER_CTAS} CTAs (the portable "
                             f"cluster size) of more than {WARP_SIZE} lanes")
        if self.kind != "cluster" and self.ctas != 1:
            raise ValueError(f"geometry {self.name}: only a cluster geometry spreads a row over several CTAs")
        if self.shared_quads and not (self.kind in ("rows", "cluster") and self.lanes > WARP_SIZE
                                      and 1 <= self.shared_quads <= MAX_SHARED_QUADS):
            raise ValueError(f"geometry {self.name}: quads in shared memory (1 to {MAX_SHARED_QUADS}) are for a rows "
                             f"or cluster geometry of more than {WARP_SIZE} lanes")
        if self.fast_math and self.kind == "long":
            raise ValueError(f"geometry {self.name}: the fast-math diagnostic builds are row and cluster geometries")

    @property
    def name(self):
        return (f"{self.kind}_l{self.lanes}_q{self.quads}" + (f"_c{self.ctas}" if self.kind == "cluster" else "")
                + (f"_s{self.shared_quads}" if self.shared_quads else "")
                + (FAST_MATH_SUFFIX if self.fast_math else ""))

    @property
    def max_columns(self):
        """Widest row it takes (``None``: any)."""
        return None if self.kind == "long" else QUAD * self.lanes * (self.quads + self.shared_quads) * self.ctas

    @property
    def shared_bytes(self):
        """Dynamic shared memory per block (the ``_s{S}`` geometries' quads)."""
        return 4 * QUAD * self.lanes * self.shared_quads

    @property
    def block_threads(self):
        return max(self.lanes, GROUP_BLOCK_THREADS) if self.kind == "rows" and self.lanes <= WARP_SIZE \
            else self.lanes

    @property
    def rows_per_block(self):
        return self.block_threads // self.lanes

    @property
    def vector_only(self):
        """A cluster or ``_s{S}`` geometry has 16-byte builds only (rows of a multiple of 4 columns, 16-byte
        aligned: the copy engine's rule), on a GPU only."""
        return self.kind == "cluster" or self.shared_quads > 0

    @classmethod
    def parse(cls, name):
        fast_math = name.endswith(FAST_MATH_SUFFIX)
        try:
            kind, lanes, quads, *rest = name.removesuffix(FAST_MATH_SUFFIX).split("_")
            extra = {"c": "ctas", "s": "shared_quads"}
            options = {extra[part[0]]: int(part[1:]) for part in rest}
            if len(options) != len(rest):
                raise ValueError(name)
            geometry = cls(kind, int(lanes.removeprefix("l")), int(quads.removeprefix("q")), fast_math=fast_math,
                           **options)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            if "geometry" in str(exc):
                raise
            geometry = None
        if geometry is None or geometry.name != name:
            raise ValueError(f"unknown auto geometry {name!r}: expected rows_l<L>_q<Q>[_s<S>], "
                             f"cluster_l<L>_q<Q>_c<C> or long_l<L>_q<Q> (a row or cluster one with "
                             f"{FAST_MATH_SUFFIX!r}: a diagnostic fast-math build), e.g. {AUTO_TABLE[0][1]!r}; "
                             f"candidates: {sorted(CANDIDATE_GEOMETRIES)}")
        return geometry


def _build_name(geometry, vector, checked):
    return f"auto_{geometry.name}{'_v4' if vector else ''}{'_checked' if checked else ''}"


def _make_build(geometry, vector, checked, exchange=True, span_source=None):
    """One build of ``geometry``; ``exchange=False`` and ``span_source`` only for the negative controls."""
    options = {"ctas": geometry.ctas, "exchange": exchange} if geometry.kind == "cluster" else {}
    if geometry.fast_math:
        options["fast_math"] = True
    if geometry.shared_quads:
        options["shared_quads"] = geometry.shared_quads
        options["span_source"] = span_source
    body, block, _ = _MAKERS[geometry.kind](geometry.lanes, geometry.quads, vector, checked, **options)
    if checked:
        def kernel(x, y, status, alarm):
            body(x, y, status, alarm)
    else:
        def kernel(x, y):
            body(x, y, None, None)
    kernel.__name__ = kernel.__qualname__ = (_build_name(geometry, vector, checked)
                                             + ("" if exchange else "_control_no_exchange")
                                             + (f"_control_span_from_{span_source}" if span_source else ""))
    # Launch bounds: at least 1024 resident threads per SM, i.e. ptxas keeps <= 64 registers per thread
    # (a 1024-thread block could not launch with more; smaller blocks would otherwise take up to 128 and
    # halve the warps in flight that hide DRAM latency).
    return bounded_kernel(kernel, block, max(1, MIN_THREADS_PER_SM // block))


#: Which geometry ``auto`` runs for a row of up to ``max_columns`` (first match); wider rows: the last.
#: Narrow rows: a group of L <= 32 lanes per row, several rows per block, shuffles only; wide rows: more
#: threads per row, 16-32 values per thread in registers; from 16,385 columns half of them in shared memory,
#: to 262,144 the row in the 2-8 CTAs of a thread block cluster (both 16-byte rows on a GPU), beyond (and
#: otherwise) the long-row path (docs/auto_kernels.md).
AUTO_TABLE = (
    (16, "rows_l4_q1"),
    (32, "rows_l8_q1"),
    (64, "rows_l16_q1"),
    (128, "rows_l32_q1"),
    (256, "rows_l32_q2"),
    (512, "rows_l32_q4"),
    (1024, "rows_l128_q2"),  # measured: 11.86 / 35.06 us vs rows_l32_q8 12.18 / 36.29 (4096 / 16384 rows)
    (2048, "rows_l128_q4"),
    (4096, "rows_l128_q8"),
    # 32 values per thread and fewer lanes: two or more blocks per SM, one's reductions under another's loads.
    (8192, "rows_l256_q8"),  # measured: 68.2 / 51.8 us vs rows_l512_q4 72.3 / 63.1 (4096x8192 / 4096x6144)
    (16384, "rows_l512_q8"),  # measured: 132.8 / 100.2 us vs rows_l1024_q4 175.2 / 154.9 (4096x16384 / 12288)
    # Half of each thread's quads in shared memory (16-byte rows on a GPU; else the long path): two rows per SM
    # where their registers alone would hold one.
    (32768, "rows_l512_q8_s8"),  # measured: 268.4 us vs rows_l1024_q8 274.3 (4096 rows)
    (65536, "rows_l1024_q8_s8"),  # measured: 279.0 us vs cluster_l512_q8_c4 314.2 (2048 rows)
    # Beyond, the row in a thread block cluster, half of each thread's quads in shared memory too:
    (131072, "cluster_l512_q8_c4_s8"),  # measured: 291.6 us vs cluster_l512_q8_c8 324.7 (1024 rows)
    (262144, "cluster_l512_q8_c8_s8"),  # measured: 301.0 us vs cluster_l1024_q8_c8 368.6 (512 rows)
    (None, "long_l1024_q4"),
)
#: The registers-only geometry a 16-byte-only entry gives way to where it cannot run (see :func:`auto_geometry`).
SCALAR_FALLBACK = {"rows_l512_q8_s8": "rows_l1024_q8"}
#: The alternatives one GPU run times beside the table's choice (``bench perf`` variants ``auto:<name>``),
#: by the widths they are meant for. docs/auto_kernels.md gives the prediction for each.
CANDIDATES = {
    128: ("rows_l32_q1", "rows_l16_q2", "rows_l8_q4"),
    1024: ("rows_l32_q8", "rows_l64_q4", "rows_l128_q2"),
    4096: ("rows_l128_q8", "rows_l256_q4", "rows_l512_q2", "rows_l1024_q1", "rows_l64_q8_s8"),
    8192: ("rows_l512_q4", "rows_l1024_q2", "rows_l128_q8_s8"),
    16384: ("rows_l1024_q4", "rows_l256_q8_s8"),
    32768: ("long_l512_q4", "long_l1024_q4", "rows_l1024_q8", "cluster_l512_q8_c2"),
    65536: ("long_l1024_q4", "cluster_l1024_q8_c2", "cluster_l512_q8_c4", "cluster_l512_q8_c2_s8"),
    131072: ("long_l1024_q4", "long_l512_q4", "cluster_l1024_q8_c4", "cluster_l512_q8_c8", "cluster_l1024_q8_c2_s8"),
    262144: ("long_l1024_q4", "cluster_l1024_q8_c8", "cluster_l1024_q8_c4_s8"),
}
#: Every geometry that has builds: the table's and the candidates'.
CANDIDATE_GEOMETRIES = sorted({name for _, name in AUTO_TABLE} | {n for names in CANDIDATES.values() for n in names})

_BUILDS = {}


def cluster_control_kernel(geometry="cluster_l512_q8_c2"):
    """Negative control (tests only; never in the table): the 16-byte unchecked build of a cluster
    geometry whose reductions keep each CTA's own max and sum, so each CTA normalizes its own columns.
    The oracle must reject it (each row sums to about the number of CTAs)."""
    return _make_build(Geometry.parse(geometry), True, False, exchange=False)


def shared_span_control_kernel(geometry="rows_l512_q8_s8"):
    """Negative control (tests only; never in the table): the 16-byte unchecked build of a geometry with
    quads in shared memory whose bulk copy reads the CTA's register columns instead of the shared span's,
    so the span's columns are normalized from the wrong values. The oracle must reject it."""
    return _make_build(Geometry.parse(geometry), True, False, span_source="registers")


def auto_kernel(geometry, vector, checked):
    """The dispatcher of one build (made once, compiled by Numba on its first launch)."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    key = (geometry, bool(vector), bool(checked))
    if key not in _BUILDS:
        _BUILDS[key] = _make_build(*key)
    return _BUILDS[key]


_CHECK_BUILDS = {}


def check_kernel(vector, allow_neg_inf):
    key = (bool(vector), bool(allow_neg_inf))
    if key not in _CHECK_BUILDS:
        _CHECK_BUILDS[key] = _make_check_kernel(*key)
    return _CHECK_BUILDS[key]


MATRIX = "float32[:, ::1]"
#: Numba signature of each kind of build (the launchers pass C-contiguous device arrays).
UNCHECKED_SIGNATURE = f"void({MATRIX}, {MATRIX})"
CHECKED_SIGNATURE = f"void({MATRIX}, {MATRIX}, int64[::1], int32[::1])"
CHECK_SIGNATURE = f"void({MATRIX}, int64[::1], int32[::1])"
#: The geometries ``auto`` launches (the table's).
TABLE_GEOMETRIES = sorted({name for _, name in AUTO_TABLE} | set(SCALAR_FALLBACK.values()))


def builds(geometries=TABLE_GEOMETRIES):
    """name -> (dispatcher, Numba signature) of every build (vector or scalar, checked or not) of
    ``geometries`` and of the check-only pass: what the PTX policy check compiles. The registry holds the
    table's (what the library launches); the CPU tests check every candidate's too."""
    found = {}
    for name in geometries:
        for vector in (True,) if Geometry.parse(name).vector_only else (False, True):
            for checked in (False, True):
                kernel = auto_kernel(name, vector, checked)
                found[kernel.py_func.__name__] = (kernel, CHECKED_SIGNATURE if checked else UNCHECKED_SIGNATURE)
    for vector in (False, True):
        for allow in (False, True):
            kernel = check_kernel(vector, allow)
            found[kernel.py_func.__name__] = (kernel, CHECK_SIGNATURE)
    return found


# ---- launchers --------------------------------------------------------------------------------------------

def _aligned16(array):
    """Whether the array's data starts on a 16-byte boundary (a device array, or a host array that only
    builds launches; never in the simulator, which has no vector builds)."""
    if SIMULATOR:
        return False
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    return interface is not None and interface["data"][0] % 16 == 0


def _check_matrix(name, array):
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{name}: expected a 2-D array with at least one row and one column, got shape {shape}")
    if np.dtype(array.dtype) != np.float32:
        raise ValueError(f"{name}: expected float32, got {array.dtype}")
    strides = getattr(array, "strides", None)
    # A dimension of length 1 is never stepped over: its stride does not matter (torch may report any).
    contiguous = (shape[1] * 4, 4)
    if strides is not None and any(n > 1 and s != c for n, s, c in zip(shape, strides, contiguous, strict=True)):
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {tuple(strides)} for shape {shape}")


def _check_status(status, alarm):
    if status is None or alarm is None:
        raise ValueError("a checked launch needs both status (int64[2]) and alarm (int32[1])")
    if tuple(status.shape) != (STATUS_WORDS,) or np.dtype(status.dtype) != np.int64:
        raise ValueError(f"status: expected int64[{STATUS_WORDS}], got {status.dtype}{list(status.shape)}")
    if tuple(alarm.shape) != (1,) or np.dtype(alarm.dtype) != np.int32:
        raise ValueError(f"alarm: expected int32[1], got {alarm.dtype}{list(alarm.shape)}")


def table_geometry(cols):
    """The geometry :data:`AUTO_TABLE` names for rows of ``cols`` columns."""
    return next(name for limit, name in AUTO_TABLE if limit is None or cols <= limit)


def auto_geometry(cols, vector=True):
    """The geometry ``auto`` runs for rows of ``cols`` columns: the table's, except that a 16-byte-only
    geometry (cluster, ``_s{S}``: GPU only) gives way, for rows that are not 16-byte quads
    (``vector=False``) and in the simulator, to its :data:`SCALAR_FALLBACK` or else the long-row path (the
    table's last entry)."""
    name = table_geometry(cols)
    if Geometry.parse(name).vector_only and (SIMULATOR or not vector):
        return SCALAR_FALLBACK.get(name, AUTO_TABLE[-1][1])
    return name


def geometry_launches(geometry, x, y, status=None, alarm=None):
    """The single launch of one named geometry (``auto`` uses :func:`auto_launches`; ``bench perf``
    times the candidates through this). A ``rows`` geometry refuses a row it cannot hold."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    _check_matrix("x", x)
    _check_matrix("y", y)
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    checked = status is not None or alarm is not None
    if checked:
        _check_status(status, alarm)
    rows, cols = x.shape
    if geometry.max_columns is not None and cols > geometry.max_columns:
        raise ValueError(f"row too long for geometry {geometry.name}: {cols} columns > {geometry.max_columns}")
    vector = cols % QUAD == 0 and _aligned16(x) and _aligned16(y)
    if geometry.vector_only and not vector:
        raise ValueError(f"geometry {geometry.name} needs rows of a multiple of {QUAD} columns in 16-byte aligned "
                         f"arrays; got {cols} columns")
    kernel = auto_kernel(geometry, vector, checked)
    grid = (rows + geometry.rows_per_block - 1) // geometry.rows_per_block * geometry.ctas
    args = (x, y, status, alarm) if checked else (x, y)
    return [KernelLaunch(f"auto_{geometry.name}", kernel, (grid,), (geometry.block_threads,), args,
                         shared_bytes=geometry.shared_bytes, cluster=geometry.ctas)]


def auto_launches(x, y, status=None, alarm=None):
    """``method="auto"``: the launch of the table's geometry for this width (any width: the long-row path
    beyond the table). ``status is None``: unchecked; else checked (see the module docstring)."""
    _check_matrix("x", x)
    _check_matrix("y", y)
    cols = x.shape[1]
    vector = cols % QUAD == 0 and _aligned16(x) and _aligned16(y)
    return geometry_launches(auto_geometry(cols, vector), x, y, status, alarm)


def check_launches(x, status, alarm, allow_neg_inf):
    """The check-only pass over x (one read, records only)."""
    _check_matrix("x", x)
    _check_status(status, alarm)
    rows, cols = x.shape
    kernel = check_kernel(cols % QUAD == 0 and _aligned16(x), allow_neg_inf)
    return [KernelLaunch("check_values", kernel, (rows,), (CHECK_BLOCK_THREADS,), (x, status, alarm))]


def status_error(status_host, shape, what="input"):
    """The message naming the first offending element (or fully masked row), None when both words are
    clear. ``status_host``: the two status words on the host; ``shape``: (rows, cols) of the checked array."""
    words = [int(w) for w in np.asarray(status_host).reshape(-1)]
    if len(words) != STATUS_WORDS:
        raise ValueError(f"status: expected {STATUS_WORDS} words, got {len(words)}")
    cols = int(shape[1])
    if words[STATUS_NONFINITE] != STATUS_CLEAR:
        row, col = divmod(words[STATUS_NONFINITE], cols)
        return f"{what} has a non-finite value (NaN or infinity) at row {row}, column {col}"
    if words[STATUS_MASKED_ROW] != STATUS_CLEAR:
        return (f"{what} row {words[STATUS_MASKED_ROW]} has no finite entry (every value is -inf): its softmax "
                "is undefined (check=False gives NaN for it, as torch.softmax does)")
    return None


__all__ = ["STATUS_WORDS", "STATUS_CLEAR", "AUTO_TABLE", "CANDIDATES", "CANDIDATE_GEOMETRIES", "TABLE_GEOMETRIES",
           "Geometry", "table_geometry", "auto_geometry", "auto_kernel", "check_kernel", "builds", "auto_launches",
           "geometry_launches",
           "check_launches", "status_error"]
