"""``method="auto"``: row softmax kernels in the geometry chosen per width (:mod:`.auto_geometry`), any length.

The numerics policy of the protocol's fused kernel (``f32_*`` arithmetic, libdevice ``expf``, IEEE division,
reductions in one fixed order: an xor butterfly, then the warp partials folded warp 0 first) in every geometry::

    m = max_j x[j];  e_j = exp(x[j] - m);  z = sum_j e_j;  y[j] = e_j / z

``rows_l{L}_q{Q}``: a group of L threads owns a row, lane t the quads (4 columns) at 4 * (t + L * q), q < Q,
    held in registers. L <= 32: 256 / L rows per block, shuffles only; L > 32: one row per L-thread block.
``cluster_l{L}_q{Q}_c{C}``: that row spread over the C CTAs of a thread block cluster (:mod:`.cluster`);
    each reduction ends with an exchange of the CTAs' results through distributed shared memory.
``..._s{S}``: S more quads per thread in the block's dynamic shared memory (16 L S bytes), filled by one bulk
    copy (:mod:`.bulk_copy`) while the threads load their register quads.
``long_l{L}_q{Q}``: any length; one L-thread block walks the row in chunks of 4 L Q columns, an online
    (max, sum) first, then the outputs in reverse chunk order (the last chunk is still in registers).

Bytes: read ``rows * cols * 4`` once (the long path again what L2 no longer holds), write the same once.
Checked builds (``_checked``) give the same outputs and, on the error path only, record the first NaN or +inf
and the first row without a finite entry (``status``: ``validation.STATUS_*``) and raise ``alarm``; ``check_values``
is a pass that only checks. ``_v4`` builds move 16-byte quads, the others the same quads element by element;
launch bounds hold every build to <= 64 registers per thread. Negative controls and diagnostic builds:
:mod:`.auto_controls`; builds and launchers: :mod:`.auto_launch`; the reasons and measurements:
docs/auto_kernels.md.
"""

import numpy as np
from numba import cuda, float32, int64, uint64

from ..numerics import (KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, SIMULATOR, WARP_SIZE, bounded_kernel,
                        f32_add, f32_div, f32_exp, f32_max, f32_mul, f32_sub)
from .auto_geometry import MAX_QUADS
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_parts import (CLEAR_WORD, POLICY_PARTS, POS_INF, U32_ZERO, bad_bit, lowest_bit, record_status,
                         row_reductions)
from .vector_io import load_quad, make_store_quotients, put_quad, store_quad

if not SIMULATOR:
    from .bulk_copy import (bulk_copy_to_shared, fence_mbarrier_init, load_shared_quad, mbarrier_arrive,
                            mbarrier_init, mbarrier_try_wait, store_shared_quad)
    from .cluster import cluster_arrive_relaxed, cluster_wait

#: Alignment of a ``_s{S}`` geometry's dynamic shared array (the copy engine needs 16 bytes).
STAGED_ALIGNMENT = 128
#: Resident threads per SM every build must allow (launch bounds): 64 registers per thread at most.
MIN_THREADS_PER_SM = 1024
#: Threads per block of the check-only pass (one block per row).
CHECK_BLOCK_THREADS = 256
#: Warps of a check block (a module constant: Numba needs a shared array's size as one, not an expression).
CHECK_WARPS = CHECK_BLOCK_THREADS // WARP_SIZE


# ---- a thread's quads of a row: loads and the error path -------------------------------------------------

def _make_load_values(lanes, quads, vector):
    """``load_values(x, row, live, offset, lane, values) -> local max``: this lane's register quads."""
    QUADS = quads
    STRIDE = QUAD * lanes
    VECTOR = vector

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
                put_quad(values, QUAD * q, a, b, c, d)
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
            else:
                for j in range(QUAD):
                    v = NEG_INF
                    if live and base + j < cols:
                        v = x[uint64(row), uint64(base + j)]  # unsigned: no negative-index wraparound code
                    values[QUAD * q + j] = v
                    local_max = f32_max(local_max, v)
        return local_max

    return load_values


def _make_record_row(lanes, quads):
    """``record_row(x, row, offset, lane, row_max, rank, status, alarm)``: the error path of a checked build."""
    ALL_QUADS = quads
    STRIDE = QUAD * lanes

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def record_row(x, row, offset, lane, row_max, rank, status, alarm):
        """This thread's first NaN or +inf (its values read again, in the order it holds them), and the row
        if it has no finite entry (lane 0 of rank 0 only)."""
        cols = x.shape[1]
        for first in range(0, ALL_QUADS, MAX_QUADS):  # one 32-bit mask per 8 quads, the lowest columns first
            bad = U32_ZERO
            for q in range(first, min(first + MAX_QUADS, ALL_QUADS)):
                base = offset + QUAD * lane + STRIDE * q
                for j in range(QUAD):
                    if base + j < cols:
                        bad |= bad_bit(x[uint64(row), uint64(base + j)], QUAD * (q - first) + j)
            if bad != U32_ZERO:
                k = lowest_bit(bad) + QUAD * first
                record_status(status, STATUS_NONFINITE,
                              row * cols + offset + QUAD * lane + STRIDE * (k // QUAD) + k % QUAD, alarm)
                break
        if lane == 0 and rank == 0 and row_max == NEG_INF:
            record_status(status, STATUS_MASKED_ROW, np.int64(row), alarm)

    return record_row


# ---- row kernels: a row in registers (in a block, or in the CTAs of a cluster) ------------------------------

def make_rows_body(geometry, vector, checked, parts=POLICY_PARTS):
    """``(body(x, y, status, alarm), block threads)`` of a ``rows`` or ``cluster`` geometry: ``geometry.lanes``
    threads per row, ``geometry.quads`` quads each in registers; with ``ctas > 1`` the row is spread over the
    CTAs of a cluster, CTA ``rank`` holding columns ``rank * 4 * lanes * quads`` on, and both reductions end
    with the cluster stage. A ``_s{S}`` geometry's body is :func:`_make_staged_body`'s."""
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    BLOCK = geometry.block_threads
    ROWS = geometry.rows_per_block
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    VECTOR = vector
    CHECKED = checked
    CTAS = geometry.ctas
    CTA_COLUMNS = QUAD * LANES * QUADS
    EXP, DIV = parts.exp, parts.div
    if geometry.shared_quads and (SIMULATOR or LANES <= WARP_SIZE or not VECTOR):
        raise ValueError("a row geometry with quads in shared memory needs a GPU (the copy engine), one row per "
                         f"block (more than {WARP_SIZE} lanes; got {LANES}) and 16-byte quads")
    if CTAS > 1 and (SIMULATOR or ROWS != 1 or not VECTOR):
        raise ValueError("cluster kernels need a GPU (the simulator has no clusters), one row per CTA (more than "
                         f"{WARP_SIZE} lanes; got {LANES}) and 16-byte quads (a scalar build spills its 64-bit "
                         "column arithmetic at 32 values per thread)")
    if geometry.shared_quads:
        return _make_staged_body(geometry, checked, parts)
    row_max_of, row_sum_of = row_reductions(LANES, BLOCK)
    cluster_fold = parts.cluster_fold(CTAS)
    load_values = _make_load_values(LANES, QUADS, VECTOR)
    store_quotients = make_store_quotients(QUADS, STRIDE, VECTOR, DIV)
    record_row = _make_record_row(LANES, QUADS)

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
            store_quotients(y, row, cols, offset + QUAD * lane, values, row_sum)
        if CHECKED:
            # The good path tests the row once: every term exp(x - m) of a row of finite and -inf values
            # lies in [0, 1] and one is exp(0) = 1, so its sum is finite; a NaN, a +inf (m = +inf, a term
            # exp(inf - inf)) or a row of -inf alone (exp(-inf - (-inf))) makes it NaN. Only then is the
            # thread's part of the row read again to name the first offending column: after the stores,
            # where its values no longer hold registers (before them, the scalar q8 builds spilled).
            if live and not row_sum < POS_INF:
                record_row(x, row, offset, lane, row_max, rank, status, alarm)

    return body, BLOCK


def _make_staged_body(geometry, checked, parts):
    """The body of a ``_s{S}`` geometry (16-byte builds, GPU only): one row per block (per cluster with
    ``ctas > 1``, CTA ``rank`` holding columns ``rank * CTA_SPAN`` on), quads 0 .. QUADS - 1 of each thread in
    registers, its next SHARED_QUADS quads (the rest of the CTA's columns, one contiguous span) in dynamic
    shared memory, where one bulk copy brings them."""
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    BLOCK = geometry.block_threads
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    CHECKED = checked
    CTAS = geometry.ctas
    SHARED_QUADS = geometry.shared_quads
    REGISTER_COLUMNS = QUAD * LANES * QUADS  # of a CTA's columns: the first in registers, the rest in shared memory
    CTA_SPAN = QUAD * LANES * (QUADS + SHARED_QUADS)
    EXP, DIV, span_source = parts.exp, parts.div, parts.span_source
    row_max_of, row_sum_of = row_reductions(LANES, BLOCK)
    cluster_fold = parts.cluster_fold(CTAS)
    load_values = _make_load_values(LANES, QUADS, True)
    record_row = _make_record_row(LANES, QUADS + SHARED_QUADS)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def staged_body(x, y, status, alarm):
        tid = cuda.threadIdx.x
        rank = 0
        if CTAS > 1:
            cluster_arrive_relaxed()  # as in the rows body: every CTA started before the first remote store
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
                bulk_copy_to_shared(bars, 0, staged, x, row, span_source(offset, first), (end - first) * 4)
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
            if not row_sum < POS_INF:  # the test of the rows body
                record_row(x, row, offset, tid, row_max, rank, status, alarm)

    return staged_body, BLOCK


# ---- long-row kernels: any length, two passes, the second in reverse ---------------------------------------

def make_long_body(geometry, vector, checked):
    """``(body(x, y, status, alarm), block threads)`` of a ``long`` geometry: one ``geometry.lanes``-thread
    block per row walks it in chunks of ``4 * lanes * quads`` columns, a running (max, sum) per thread
    rescaled once per chunk (the online softmax), then the outputs, last chunk first."""
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    CHUNK = QUAD * LANES * QUADS
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    VECTOR = vector
    CHECKED = checked
    row_max_of, row_sum_of = row_reductions(LANES, LANES)

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
                put_quad(values, QUAD * q, a, b, c, d)
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
            bad = U32_ZERO
            for k in range(VALUES):
                chunk_max = f32_max(chunk_max, values[k])
                if CHECKED:
                    bad |= bad_bit(values[k], k)  # columns past the row hold -inf: never bad
            if CHECKED:
                # Error path: one record per chunk of an offending thread; atomic min keeps the smallest.
                if bad != U32_ZERO:
                    k = lowest_bit(bad)
                    record_status(status, STATUS_NONFINITE,
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
                record_status(status, STATUS_MASKED_ROW, np.int64(row), alarm)

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

    return body, LANES


# ---- the check-only pass ----------------------------------------------------------------------------------

def make_check_kernel(vector, allow_neg_inf):
    """``check_values(x, status, alarm)``: one 256-thread block per row reads x once and records its first NaN
    or +inf (and its row if no entry is finite); ``allow_neg_inf=False`` treats -inf like +inf (the protocol's
    ``fused`` / ``stages`` paths reject it). Writes nothing else."""
    VECTOR = vector
    ALLOW_NEG_INF = allow_neg_inf
    STRIDE = QUAD * CHECK_BLOCK_THREADS
    row_max_of, _ = row_reductions(CHECK_BLOCK_THREADS, CHECK_BLOCK_THREADS)

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
        first = CLEAR_WORD
        local_max = NEG_INF
        for base in range(QUAD * tid, cols, STRIDE):
            if VECTOR:
                a, b, c, d = load_quad(x, row, base)
                flat = row * cols + base
                if first == CLEAR_WORD:
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
                        if first == CLEAR_WORD and bad(v):
                            first = row * cols + base + j
                        if ALLOW_NEG_INF:
                            local_max = f32_max(local_max, v)
        if first != CLEAR_WORD:
            record_status(status, STATUS_NONFINITE, first, alarm)
        if ALLOW_NEG_INF:
            row_max = row_max_of(local_max, partials)
            if tid == 0 and row_max == NEG_INF:
                record_status(status, STATUS_MASKED_ROW, np.int64(row), alarm)

    check_values.__name__ = check_values.__qualname__ = (
        f"check_values{'_neg_inf' if allow_neg_inf else '_finite'}{'_v4' if vector else ''}")
    return cuda.jit(**KERNEL_OPTIONS)(check_values)



# ---- a build: a body in a kernel with launch bounds ---------------------------------------------------------

def build_name(geometry, vector, checked):
    """``auto_<geometry>[_v4][_checked]``: the kernel's name (its PTX entry, the registry's key)."""
    return f"auto_{geometry.name}{'_v4' if vector else ''}{'_checked' if checked else ''}"


def bounded_build(body, block, name, checked):
    """The kernel ``name`` around ``body``: ``(x, y, status, alarm)`` checked, ``(x, y)`` unchecked. Launch
    bounds: at least 1024 resident threads per SM, i.e. ptxas keeps <= 64 registers per thread (a 1024-thread
    block could not launch with more; smaller blocks would otherwise take up to 128 and halve the warps in
    flight that hide DRAM latency)."""
    if checked:
        def kernel(x, y, status, alarm):
            body(x, y, status, alarm)
    else:
        def kernel(x, y):
            body(x, y, None, None)
    kernel.__name__ = kernel.__qualname__ = name
    return bounded_kernel(kernel, block, max(1, MIN_THREADS_PER_SM // block))


def make_auto_kernel(geometry, vector, checked):
    """The shipped build of ``geometry`` (made once by :func:`.auto_launch.auto_kernel`, compiled by Numba on its
    first launch). The ``_fastmath`` diagnostic geometries are built by :mod:`.auto_controls`."""
    if geometry.fast_math:
        raise ValueError(f"geometry {geometry.name}: a diagnostic fast-math build (auto_controls.fast_math_kernel)")
    maker = make_long_body if geometry.kind == "long" else make_rows_body
    body, block = maker(geometry, vector, checked)
    return bounded_build(body, block, build_name(geometry, vector, checked), checked)
