"""``method="auto"``'s long-row kernels ``long_l{L}_q{Q}``: rows of any length, in two passes.

One L-thread block per row walks the row's aligned body in chunks of ``4 L Q`` columns (lane t the quads at
``4 (t + L q)`` of each chunk, one vector access each), keeping a running (max, sum) per thread rescaled once per
chunk (the online softmax), then writes the outputs, last chunk first (it is still in registers, and the chunks
before it were read last). The row's head and tail elements (:func:`.auto_parts.make_row_span`) open the running
pair and are written last. Bytes: the row is read twice (the second time from L2 where it still holds it) and
written once. Checked builds record the first NaN or +inf of each offending thread and a row with no finite
entry (``validation.STATUS_*``).
"""

import numpy as np
from numba import cuda

from ..numerics import KERNEL_OPTIONS, PARTIALS_ALIGNMENT, QUAD, WARP_SIZE
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_parts import (POS_INF, U32_ZERO, bad_bit, lowest_bit, make_edges, make_load_values, make_quads_aligned,
                         make_record_edge, make_row_span, make_store_quad_at, record_status, row_form,
                         row_reductions)
from .elements import element_io


def make_long_body(geometry, types, checked, form="softmax"):
    """``(body(x, y, status, alarm), block threads)`` of a ``long`` geometry for elements ``types`` = (in, out),
    writing ``form``'s output (:func:`.auto_parts.row_form`)."""
    io = element_io(*types)
    A = io.arith
    ADD, SUB, MUL, AEXP, MAX = A.add, A.sub, A.mul, A.exp, A.max
    FORM = row_form(form, A)
    SCALE, OUT = FORM.scale, FORM.of_value
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    CHUNK = QUAD * LANES * QUADS
    STRIDE = QUAD * LANES
    WARPS = max(1, LANES // WARP_SIZE)
    CHECKED = checked
    TYPE, NEG, ZERO = A.numba_type, A.neg_inf, A.zero
    row_max_of, row_sum_of = row_reductions(LANES, LANES, A)
    load_values = make_load_values(LANES, QUADS, io)
    row_span = make_row_span(types[0])
    quads_aligned = make_quads_aligned(types[1])
    store_quad_at = make_store_quad_at(io)
    edge_max, edge_sum, store_edges = make_edges(LANES, io, form)
    record_edge = make_record_edge(LANES, io)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        row = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        cols = x.shape[1]
        head, body_end = row_span(x, row, cols)
        edge_count = head + cols - body_end
        chunks = (body_end - head + CHUNK - 1) // CHUNK
        partials = cuda.shared.array(WARPS, TYPE, alignment=PARTIALS_ALIGNMENT)
        values = cuda.local.array(VALUES, TYPE)

        # Pass 1: the edges open a running (max, sum) per thread; each chunk rescales it once.
        # (Edges all -inf: the sum is 0; a NaN edge makes it NaN even then, and the NaN reaches the row sum.)
        run_max = edge_max(x, row, lane, head, body_end, edge_count, NEG)
        run_sum = edge_sum(x, row, lane, head, body_end, edge_count, run_max if run_max != NEG else ZERO, ZERO)
        if CHECKED and not run_sum < POS_INF:  # a NaN or +inf among this lane's edges: its first one recorded
            record_edge(x, row, lane, head, body_end, edge_count, status, alarm)
        for c in range(chunks):
            start = head + c * CHUNK
            chunk_max = load_values(x, row, True, start, body_end, lane, values)
            if CHECKED:
                # Error path: one record per chunk of an offending thread; atomic min keeps the smallest.
                bad = U32_ZERO
                for k in range(VALUES):
                    bad |= bad_bit(values[k], k)  # quads past the body hold -inf: never bad
                if bad != U32_ZERO:
                    k = lowest_bit(bad)
                    record_status(status, STATUS_NONFINITE,
                                  row * cols + start + QUAD * lane + STRIDE * (k // QUAD) + k % QUAD, alarm)
            new_max = MAX(run_max, chunk_max)
            # Terms are taken against 0 while every value so far is -inf (exp(-inf - (-inf)) would be NaN): a
            # -inf adds 0 and the sum stays 0, a NaN (which the max skips) still reaches the sum.
            reference = new_max if new_max != NEG else ZERO
            if run_max != NEG:
                run_sum = MUL(run_sum, AEXP(SUB(run_max, new_max)))
            for k in range(VALUES):
                run_sum = ADD(run_sum, AEXP(SUB(values[k], reference)))
            run_max = new_max

        row_max = row_max_of(run_max, partials)
        scaled = run_sum  # 0, or NaN, while this lane has seen only -inf
        if run_max != NEG:
            scaled = MUL(run_sum, AEXP(SUB(run_max, row_max)))
        row_sum = row_sum_of(scaled, partials)
        if CHECKED:
            if lane == 0 and row_max == NEG:
                record_status(status, STATUS_MASKED_ROW, np.int64(row), alarm)

        # Pass 2, last chunk first: it is still in registers, and the chunks before it were read last.
        c = SCALE(row_sum)
        aligned = quads_aligned(y, row, head)
        for step in range(chunks):
            start = head + (chunks - 1 - step) * CHUNK
            if step > 0:
                load_values(x, row, True, start, body_end, lane, values)
            for q in range(QUADS):
                base = start + QUAD * lane + STRIDE * q
                if base < body_end:
                    store_quad_at(y, row, base, OUT(values[QUAD * q], row_max, c),
                                  OUT(values[QUAD * q + 1], row_max, c), OUT(values[QUAD * q + 2], row_max, c),
                                  OUT(values[QUAD * q + 3], row_max, c), aligned)
        store_edges(x, y, row, lane, head, body_end, edge_count, row_max, c)

    return body, LANES
