"""``method="auto"``: row softmax kernels in the geometry chosen per width (:mod:`.auto_geometry`), any length,
any row stride and alignment, float32, float16, bfloat16 and float64 elements (:mod:`.elements`).

The numerics policy of the protocol's fused kernel (libdevice ``exp``, IEEE division, no contraction, reductions
in one fixed order: an xor butterfly, then the warp partials folded warp 0 first) in every geometry::

    m = max_j x[j];  e_j = exp(x[j] - m);  z = sum_j e_j;  y[j] = e_j / z

Each row is a head (the elements before its first 16-byte aligned one), a body of aligned quads (4 elements, one
vector access each) and a tail (:func:`.auto_parts.make_row_span`); the 3-14 edge elements go to the first lanes.
``rows_l{L}_q{Q}``: a group of L threads owns a row, lane t the body quads at ``head + 4 (t + L q)``, q < Q,
    in registers. L <= 32: 256 / L rows per block, shuffles only; L > 32: one row per L-thread block.
``cluster_l{L}_q{Q}_c{C}``: that row spread over the C CTAs of a thread block cluster (:mod:`.cluster`);
    each reduction ends with an exchange of the CTAs' results through distributed shared memory.
``..._s{S}``: S more quads per thread in the block's dynamic shared memory, filled by one bulk copy
    (:mod:`.bulk_copy`) while the threads load their register quads.
``long_l{L}_q{Q}`` (:mod:`.auto_long`): any length, an online (max, sum), then the outputs in reverse.

Bytes: read ``rows * cols`` elements once, write as many once. Checked builds (``_checked``) give the same outputs
and, on the error path only, record the first NaN or +inf and the first row without a finite entry (``status``:
``validation.STATUS_*``) and raise ``alarm``; ``check_values`` is a pass that only checks (the protocol's paths).
Launch bounds hold every build to <= 64 registers per thread. Negative controls and diagnostic builds:
:mod:`.auto_controls`; builds and launchers: :mod:`.auto_launch`; reasons and measurements: docs/auto_kernels.md.
"""

import numpy as np
from numba import cuda, float32, int64, uint64
from numba import types as numba_types

from ..numerics import (KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, SIMULATOR, WARP_SIZE, bounded_kernel,
                        f32_max)
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_parts import (CLEAR_WORD, POLICY_PARTS, POS_INF, make_edges, make_load_values, make_quads_aligned,
                         make_record_row, make_row_place, make_row_span, make_store_quad_at, make_store_outputs,
                         record_status, row_form, row_reductions)
from .auto_long import make_long_body
from .auto_narrow import make_narrow_body, make_packed_body
from .elements import STORAGE_DTYPES, element_io
from .vector_io import load_quad

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
#: The element a ``_s{S}`` geometry's shared span holds, per input type (the raw elements the bulk copy moves).
STAGED_TYPES = {"float32": float32, "float16": numba_types.float16, "bfloat16": numba_types.uint16}


# ---- row kernels: a row in registers (in a block, or in the CTAs of a cluster) ------------------------------

def make_rows_body(geometry, types, checked, parts=POLICY_PARTS, form="softmax"):
    """``(body(x, y, status, alarm), block threads)`` of a ``rows`` or ``cluster`` geometry for elements of
    ``types`` = (in, out), writing ``form``'s output (:func:`.auto_parts.row_form`): ``geometry.lanes`` threads
    per row, ``geometry.quads`` quads each in registers; with
    ``ctas > 1`` the row is spread over the CTAs of a cluster, CTA ``rank`` holding body columns
    ``rank * 4 * lanes * quads`` on (the edges in rank 0), and both reductions end with the cluster stage.
    A ``_s{S}`` geometry's body is :func:`_make_staged_body`'s."""
    io = element_io(*types)
    A = io.arith
    ADD, SUB = A.add, A.sub
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    BLOCK = geometry.block_threads
    ROWS = geometry.rows_per_block
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    CHECKED = checked
    CTAS = geometry.ctas
    CTA_COLUMNS = QUAD * LANES * QUADS
    TYPE, ZERO = A.numba_type, A.zero
    EXP, DIV = (parts.exp, parts.div) if A.name == "float32" else (A.exp, A.div)
    EDGE_COUNT = parts.edge_count
    if geometry.shared_quads and (SIMULATOR or LANES <= WARP_SIZE):
        raise ValueError("a row geometry with quads in shared memory needs a GPU (the copy engine) and one row per "
                         f"block (more than {WARP_SIZE} lanes; got {LANES})")
    if CTAS > 1 and (SIMULATOR or ROWS != 1 or A.name != "float32"):
        raise ValueError("cluster kernels need a GPU (the simulator has no clusters), one row per CTA (more than "
                         f"{WARP_SIZE} lanes; got {LANES}) and float32 arithmetic")
    if geometry.shared_quads:
        if form != "softmax":
            raise ValueError(f"geometry {geometry.name}: a _s<S> geometry writes the softmax only, not {form!r}")
        return _make_staged_body(geometry, types, checked, parts)
    FORM = row_form(form, A, EXP, DIV)
    KEPT, SCALE = FORM.kept, FORM.scale
    row_max_of, row_sum_of = row_reductions(LANES, BLOCK, A)
    cluster_fold = parts.cluster_fold(CTAS)
    load_values = make_load_values(LANES, QUADS, io)
    store_outputs = make_store_outputs(QUADS, STRIDE, io, FORM.of_kept)
    row_span = make_row_span(types[0])
    quads_aligned = make_quads_aligned(types[1])
    edge_max, edge_sum, store_edges = make_edges(LANES, io, form)
    record_row = make_record_row(LANES, QUADS, io)
    place = make_row_place(LANES, ROWS, CTAS, CTA_COLUMNS)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        lane, row, rank, offset = place()  # in a cluster: arrived; waits before the first remote store
        rows, cols = x.shape
        live = row < rows  # a group past the last row still takes part in the shuffles and barriers
        partials = cuda.shared.array(WARPS, TYPE, alignment=PARTIALS_ALIGNMENT)
        maxes = cuda.shared.array(CTAS, float32)
        sums = cuda.shared.array(CTAS, float32)
        values = cuda.local.array(VALUES, TYPE)
        head = body_end = edge_count = int64(0)
        if live:
            head, body_end = row_span(x, row, cols)
            if rank == 0:
                edge_count = EDGE_COUNT(head, cols, body_end)

        local_max = load_values(x, row, live, head + offset, body_end, lane, values)
        local_max = edge_max(x, row, lane, head, body_end, edge_count, local_max)
        row_max = row_max_of(local_max, partials)
        if CTAS > 1:
            cluster_wait()  # every CTA has started (place() arrived)
            row_max = cluster_fold(row_max, maxes, rank, True)

        local_sum = ZERO
        if live:  # a group past the last row has nothing to exponentiate (its max is -inf)
            for k in range(VALUES):
                e = EXP(SUB(values[k], row_max))
                values[k] = KEPT(values[k], e)
                local_sum = ADD(local_sum, e)
            local_sum = edge_sum(x, row, lane, head, body_end, edge_count, row_max, local_sum)
        row_sum = row_sum_of(local_sum, partials)
        if CTAS > 1:
            row_sum = cluster_fold(row_sum, sums, rank, False)

        if live:
            c = SCALE(row_sum)
            store_outputs(y, row, body_end, head + offset + QUAD * lane, values, row_max, c,
                          quads_aligned(y, row, head))
            store_edges(x, y, row, lane, head, body_end, edge_count, row_max, c)
        if CHECKED:
            # The good path tests the row once: every term exp(x - m) of a row of finite and -inf values
            # lies in [0, 1] and one is exp(0) = 1, so its sum is finite; a NaN, a +inf (m = +inf, a term
            # exp(inf - inf)) or a row of -inf alone (exp(-inf - (-inf))) makes it NaN. Only then is the
            # thread's part of the row read again to name the first offending column: after the stores,
            # where its values no longer hold registers.
            if live and not row_sum < POS_INF:
                record_row(x, row, lane, head + offset, body_end, edge_count, head, row_max,
                           lane == 0 and rank == 0, status, alarm)

    return body, BLOCK


def _make_staged_body(geometry, types, checked, parts):
    """The body of a ``_s{S}`` geometry (GPU only): one row per block (per cluster with ``ctas > 1``, CTA
    ``rank`` holding body columns ``rank * CTA_SPAN`` on), quads 0 .. QUADS - 1 of each thread in registers, its
    next SHARED_QUADS quads (the rest of the CTA's body columns, one contiguous span) in dynamic shared memory,
    where one bulk copy brings them. float32 exponentials go back where they came from; a 2-byte type's span
    holds its raw elements, so their exponentials are computed again at the store."""
    io = element_io(*types)
    A = io.arith
    ADD, SUB = A.add, A.sub
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
    ITEMSIZE = STORAGE_DTYPES[types[0]].itemsize
    if types[0] not in STAGED_TYPES or A.name != "float32":
        raise ValueError(f"a _s<S> geometry stages float32, float16 or bfloat16 rows computed in float32, "
                         f"not {types}")
    STAGED_TYPE = STAGED_TYPES[types[0]]
    EXPS_IN_PLACE = types == ("float32", "float32")
    LOAD = io.load
    EXP, DIV, span_source, EDGE_COUNT = parts.exp, parts.div, parts.span_source, parts.edge_count
    row_max_of, row_sum_of = row_reductions(LANES, BLOCK)
    cluster_fold = parts.cluster_fold(CTAS)
    load_values = make_load_values(LANES, QUADS, io)
    row_span = make_row_span(types[0])
    quads_aligned = make_quads_aligned(types[1])
    edge_max, edge_sum, store_edges = make_edges(LANES, io)
    record_row = make_record_row(LANES, QUADS + SHARED_QUADS, io)
    store_quad_at = make_store_quad_at(io)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def staged_quad(staged, i):
        a, b, c, d = load_shared_quad(staged, i)
        return LOAD(a), LOAD(b), LOAD(c), LOAD(d)

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
        cols = x.shape[1]
        head, body_end = row_span(x, row, cols)
        edge_count = EDGE_COUNT(head, cols, body_end) if rank == 0 else int64(0)
        offset = head + rank * CTA_SPAN
        partials = cuda.shared.array(WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        maxes = cuda.shared.array(CTAS, float32)
        sums = cuda.shared.array(CTAS, float32)
        staged = cuda.shared.array(0, STAGED_TYPE, alignment=STAGED_ALIGNMENT)  # dynamic: the span's elements
        bars = cuda.shared.array(1, int64)
        values = cuda.local.array(VALUES, float32)
        first = offset + REGISTER_COLUMNS  # the shared span's first column (16-byte aligned: head + whole units)
        end = min(body_end, offset + CTA_SPAN)

        # Thread 0 starts the copy of the shared span before anyone loads: its bytes travel while every
        # thread's own vector loads do, and they take no register.
        if tid == 0:
            mbarrier_init(bars, 0, 1)
            fence_mbarrier_init()
            if end > first:
                bulk_copy_to_shared(bars, 0, staged, x, row, span_source(offset, first), (end - first) * ITEMSIZE)
            else:
                mbarrier_arrive(bars, 0)
        local_max = load_values(x, row, True, offset, body_end, tid, values)
        local_max = edge_max(x, row, tid, head, body_end, edge_count, local_max)
        cuda.syncthreads()  # the barrier's initialization before anyone waits on it
        while mbarrier_try_wait(bars, 0, 0) == 0:
            pass
        for s in range(SHARED_QUADS):  # each thread reads only its own quads: no barrier between the passes
            i = QUAD * tid + STRIDE * s
            if first + i < end:
                a, b, c, d = staged_quad(staged, i)
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, a), b), c), d)
        row_max = row_max_of(local_max, partials)
        if CTAS > 1:
            cluster_wait()
            row_max = cluster_fold(row_max, maxes, rank, True)

        # Exponentials in the ownership order (register quads, shared ones, edges). Quads past the row add
        # nothing (exp(-inf - m) = +0 in registers, skipped here).
        local_sum = float32(0.0)
        for k in range(VALUES):
            e = EXP(SUB(values[k], row_max))
            values[k] = e
            local_sum = ADD(local_sum, e)
        for s in range(SHARED_QUADS):
            i = QUAD * tid + STRIDE * s
            if first + i < end:
                a, b, c, d = staged_quad(staged, i)
                a = EXP(SUB(a, row_max))
                b = EXP(SUB(b, row_max))
                c = EXP(SUB(c, row_max))
                d = EXP(SUB(d, row_max))
                local_sum = ADD(ADD(ADD(ADD(local_sum, a), b), c), d)
                if EXPS_IN_PLACE:
                    store_shared_quad(staged, i, a, b, c, d)
        local_sum = edge_sum(x, row, tid, head, body_end, edge_count, row_max, local_sum)
        row_sum = row_sum_of(local_sum, partials)
        if CTAS > 1:
            row_sum = cluster_fold(row_sum, sums, rank, False)

        aligned = quads_aligned(y, row, head)
        for q in range(QUADS):
            base = offset + QUAD * tid + STRIDE * q
            if base < body_end:
                a = DIV(values[QUAD * q], row_sum)
                b = DIV(values[QUAD * q + 1], row_sum)
                c = DIV(values[QUAD * q + 2], row_sum)
                d = DIV(values[QUAD * q + 3], row_sum)
                store_quad_at(y, row, base, a, b, c, d, aligned)
        for s in range(SHARED_QUADS):
            i = QUAD * tid + STRIDE * s
            if first + i < end:
                a, b, c, d = staged_quad(staged, i)
                if not EXPS_IN_PLACE:
                    a = EXP(SUB(a, row_max))
                    b = EXP(SUB(b, row_max))
                    c = EXP(SUB(c, row_max))
                    d = EXP(SUB(d, row_max))
                store_quad_at(y, row, first + i, DIV(a, row_sum), DIV(b, row_sum), DIV(c, row_sum),
                              DIV(d, row_sum), aligned)
        store_edges(x, y, row, tid, head, body_end, edge_count, row_max, row_sum)
        if CHECKED:
            if not row_sum < POS_INF:  # the test of the rows body
                record_row(x, row, tid, offset, body_end, edge_count, head, row_max, tid == 0 and rank == 0,
                           status, alarm)

    return staged_body, BLOCK


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

#: Short names of the element types in kernel names.
SHORT_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64"}


def types_suffix(types):
    """``""`` for float32 in and out, ``_bf16`` for one type in and out, ``_bf16_f32`` for a pair."""
    if types == ("float32", "float32"):
        return ""
    return "_" + "_".join(SHORT_TYPES[t] for t in (types[:1] if types[0] == types[1] else types))


#: The kernel name prefix of each form's builds.
FORM_PREFIXES = {"softmax": "auto_", "log_softmax": "auto_log_"}


def build_name(geometry, types, checked, form="softmax"):
    """``auto_[log_]<geometry>[_<types>][_checked]``: the kernel's name (its PTX entry, the registry's key)."""
    return f"{FORM_PREFIXES[form]}{geometry.name}{types_suffix(types)}{'_checked' if checked else ''}"


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


def make_auto_kernel(geometry, types, checked, form="softmax"):
    """The shipped build of ``geometry`` for elements ``types`` = (in, out) writing ``form`` (``"softmax"`` or
    ``"log_softmax"``; made once by :func:`.auto_launch.auto_kernel`, compiled on its first launch). The
    ``_fastmath`` diagnostic geometries are built by :mod:`.auto_controls`."""
    if geometry.fast_math:
        raise ValueError(f"geometry {geometry.name}: a diagnostic fast-math build (auto_controls.fast_math_kernel)")
    if geometry.kind == "long":
        body, block = make_long_body(geometry, types, checked, form)
    elif geometry.kind == "narrow":
        body, block = make_narrow_body(geometry, types, checked, form)
    elif geometry.packed_widths:
        body, block = make_packed_body(geometry, types, checked, form)
    else:
        body, block = make_rows_body(geometry, types, checked, form=form)
    return bounded_build(body, block, build_name(geometry, types, checked, form), checked)
