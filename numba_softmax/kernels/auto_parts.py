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
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, int64, uint32, uint64

from ..numerics import (F32, KERNEL_OPTIONS, QUAD, SIMULATOR, WARP_SIZE, block_reductions, f32_add, f32_div, f32_exp,
                        f32_max, reduction_pair)
from ..validation import STATUS_CLEAR, STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_geometry import body_unit
from .elements import STORAGE_DTYPES
from .vector_io import address_of, put_quad

if not SIMULATOR:
    from .cluster import cluster_arrive, cluster_arrive_relaxed, cluster_store_f32, cluster_wait

POS_INF = float32(np.inf)
U32_ZERO = np.uint32(0)
_U32_ONE = np.uint32(1)
#: A clear status word as the kernels compare it.
CLEAR_WORD = np.int64(STATUS_CLEAR)

# ---- reductions over the L threads of a row ---------------------------------------------------------------

def row_reductions(lanes, block, arith=F32):
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
    MAX, ADD, TYPE = arith.max, arith.add, arith.numba_type

    if SIMULATOR:
        # No shuffles in the simulator: each butterfly step goes through shared memory, the same operands
        # in the same order as the GPU's shfl_xor steps.
        @cuda.jit(device=True)
        def reduce(value, partials, is_max):
            scratch = cuda.shared.array(BLOCK, TYPE)
            tid = cuda.threadIdx.x
            offset = WIDTH // 2
            while offset > 0:
                scratch[tid] = value
                cuda.syncthreads()
                other = scratch[tid ^ offset]
                cuda.syncthreads()
                value = MAX(value, other) if is_max else ADD(value, other)
                offset //= 2
            if WARPS > 1:
                if tid % WARP_SIZE == 0:
                    partials[tid // WARP_SIZE] = value
                cuda.syncthreads()
                value = partials[0]
                for w in range(1, WARPS):
                    value = MAX(value, partials[w]) if is_max else ADD(value, partials[w])
                cuda.syncthreads()
            return value

        return reduction_pair(reduce)

    if WARPS > 1:
        return block_reductions(lanes, arith)

    def make(combine):
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def group_reduce(value, partials):
            offset = WIDTH // 2
            while offset > 0:
                value = combine(value, cuda.shfl_xor_sync(0xFFFFFFFF, value, offset))
                offset //= 2
            return value
        return group_reduce

    return make(MAX), make(ADD)


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

def make_row_place(lanes, rows_per_block, ctas, cta_columns):
    """``place()``: ``(lane, row, rank, offset)`` of this thread in a rows or cluster geometry: ``lanes`` threads
    a row and ``rows_per_block`` rows a block, or (``ctas > 1``) one row a cluster of ``ctas`` CTAs, CTA ``rank``
    holding the body columns from ``offset`` = ``rank * cta_columns`` on (0 and 0 outside a cluster). In a cluster
    it also arrives (relaxed) at the cluster barrier: every CTA has to have started before another writes into its
    shared memory, so the body waits (``cluster_wait``) just before its first cluster stage, the loads between."""
    LANES, ROWS, CTAS, CTA_COLUMNS = lanes, rows_per_block, ctas, cta_columns

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def place():
        tid = cuda.threadIdx.x
        lane = tid % LANES
        rank = 0
        offset = 0
        if CTAS > 1:
            cluster_arrive_relaxed()
            rank = cuda.blockIdx.x % CTAS
            offset = rank * CTA_COLUMNS
            row = cuda.blockIdx.x // CTAS
        else:
            row = cuda.blockIdx.x * ROWS + tid // LANES
        return lane, row, rank, offset

    return place


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


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def edges_of_row(head, cols, body_end):
    """The number of a row's edge elements: its head and its tail."""
    return head + cols - body_end


@dataclass(frozen=True)
class RowParts:
    """The device functions a row body is built from. The shipped builds use :data:`POLICY_PARTS`; the
    negative controls and diagnostic builds (:mod:`.auto_controls`) swap one of them."""
    exp: object           # exp(x), the policy's libdevice expf
    div: object           # a / b, IEEE
    cluster_fold: object  # ctas -> the cluster stage fold(value, slots, rank, is_max)
    span_source: object   # (cta_first, span_first) -> the first column the bulk copy reads
    edge_count: object    # (head, cols, body_end) -> the number of edge elements


POLICY_PARTS = RowParts(f32_exp, f32_div, make_cluster_fold, span_after_registers, edges_of_row)


# ---- what a row body writes: the softmax or the log_softmax of the row -----------------------------------------

#: The forms a row body computes: ``softmax`` ``y = exp(x - m) / z``, ``log_softmax`` ``y = (x - m) - log z``
#: (torch's order of the two subtractions), with m the row max and z = sum exp(x - m).
FORMS = ("softmax", "log_softmax")


class RowForm(NamedTuple):
    """The device functions that make a row body one form or the other (:func:`row_form`)."""
    name: str
    kept: object       # (v, e) -> what a value register holds after the sum pass: e = exp(v - m), or v itself
    scale: object      # z -> c: the softmax divides by z, the log_softmax subtracts log z
    of_kept: object    # (kept, m, c) -> the output of a value kept in a register
    of_value: object   # (v, m, c) -> the output of a value read again from x


def row_form(form, arith, exp=None, div=None):
    """The :class:`RowForm` of ``form`` in ``arith``'s compute type, with ``exp`` and ``div`` (default: the
    policy's; the negative controls swap one). The softmax keeps each exponential and divides it; the
    log_softmax keeps the input and subtracts ``m`` then ``log z`` (libdevice ``logf`` once per row)."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: expected one of {FORMS}")
    EXP = arith.exp if exp is None else exp
    DIV = arith.div if div is None else div
    SUB, LOG = arith.sub, arith.log
    if form == "softmax":
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def kept(v, e):
            return e

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def scale(z):
            return z

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def of_kept(k, m, c):
            return DIV(k, c)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def of_value(v, m, c):
            return DIV(EXP(SUB(v, m)), c)
    else:
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def kept(v, e):
            return v

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def scale(z):
            return LOG(z)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def of_kept(k, m, c):
            return SUB(SUB(k, m), c)

        of_value = of_kept
    return RowForm(form, kept, scale, of_kept, of_value)


def make_exp_sum(count, arith, form):
    """``exp_sum(values, m, terms)`` over a thread's ``count`` values in registers: ``e = exp(v - m)`` of the first
    ``terms``, each value replaced by ``form.kept(v, e)`` (a :class:`RowForm`), and the sum of the ``e`` in
    increasing order, returned. The builds that hold a whole row or column in one thread use it
    (:mod:`.auto_narrow`, :mod:`.auto_columns`)."""
    ADD, SUB, EXP, ZERO = arith.add, arith.sub, arith.exp, arith.zero
    KEPT = form.kept

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def exp_sum(values, m, terms):
        total = ZERO
        for j in range(count):
            if j < terms:
                e = EXP(SUB(values[j], m))
                values[j] = KEPT(values[j], e)
                total = ADD(total, e)
        return total

    return exp_sum


# ---- a row of any width and alignment: head, aligned quads, tail ---------------------------------------------

def make_row_span(element_type):
    """``row_span(x, row, cols) -> (head, body_end)`` for rows of ``element_type``: columns ``[0, head)`` come
    before the row's first 16-byte aligned element, ``[head, body_end)`` are whole aligned units (16 bytes, and
    at least one quad) read in quads, ``[body_end, cols)`` is the tail. Head and tail are the row's *edges*."""
    SHIFT = uint64(STORAGE_DTYPES[element_type].itemsize.bit_length() - 1)
    UNIT = body_unit(element_type)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def row_span(x, row, cols):
        misaligned = address_of(x, row, 0) & uint64(15)
        head = int64(((uint64(16) - misaligned) & uint64(15)) >> SHIFT)
        if head > cols:
            head = cols
        return head, head + (cols - head) // UNIT * UNIT

    return row_span


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def edge_column(e, head, body_end):
    """The column of a row's edge element ``e``: the head's ``e`` (``e < head``), else the tail's ``e - head``."""
    return e if e < head else body_end + (e - head)


def max_edges(element_type):
    """Most edge elements of a row of ``element_type``: a head and a tail of fewer than a 16-byte unit each."""
    return (16 // STORAGE_DTYPES[element_type].itemsize - 1) + (body_unit(element_type) - 1)


def make_edges(lanes, io, form="softmax"):
    """The edge elements of a row, spread over its ``lanes`` threads (element ``e`` to lane ``e % lanes``, up to
    ``ceil(max_edges / lanes)`` each): ``(edge_max, edge_sum, store_edges)``. Edge ``e < head`` is column ``e``;
    the others are the tail, ``body_end + e - head`` on. They are read from x at each use (a few elements a row,
    from L1) rather than held in registers through the reductions. ``store_edges`` writes ``form``'s output
    (``c``: the form's scale of the row sum)."""
    LANES = lanes
    SLOTS = -(-max_edges(io.in_type) // lanes)
    LOAD, STORE, A = io.load, io.store, io.arith
    ADD, SUB, AEXP, MAX = A.add, A.sub, A.exp, A.max
    OUT = row_form(form, A).of_value

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def edge_max(x, row, lane, head, body_end, count, local_max):
        """``local_max`` folded with this lane's edges."""
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                local_max = MAX(local_max, LOAD(x[row, edge_column(e, head, body_end)]))
        return local_max

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def edge_sum(x, row, lane, head, body_end, count, row_max, local_sum):
        """``local_sum`` plus exp(edge - row_max) of this lane's edges (after the thread's quads)."""
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                local_sum = ADD(local_sum, AEXP(SUB(LOAD(x[row, edge_column(e, head, body_end)]), row_max)))
        return local_sum

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_edges(x, y, row, lane, head, body_end, count, row_max, c):
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                column = edge_column(e, head, body_end)
                y[row, column] = STORE(OUT(LOAD(x[row, column]), row_max, c))

    return edge_max, edge_sum, store_edges


def make_record_edge(lanes, io):
    """``record_edge(x, row, lane, head, body_end, count, status, alarm)``: the error path of a checked build for
    this lane's edges: its first NaN or +inf among them, as a flat index ``row * cols + column``."""
    LANES = lanes
    SLOTS = -(-max_edges(io.in_type) // lanes)
    LOAD = io.load

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def record_edge(x, row, lane, head, body_end, count, status, alarm):
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                column = edge_column(e, head, body_end)
                if not LOAD(x[row, column]) < POS_INF:
                    record_status(status, STATUS_NONFINITE, int64(row) * x.shape[1] + column, alarm)
                    return

    return record_edge


def make_load_quad_at(io):
    """``load_quad_at(x, row, col, aligned) -> (a, b, c, d)``: four elements of ``x[row, col:col + 4]`` as compute
    values, one vector load when x's quads are ``aligned``, else element by element (a second input of a
    kernel whose quads are placed by another array's alignment)."""
    LOAD, LOAD_QUAD = io.load, io.load_quad

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_quad_at(x, row, col, aligned):
        if aligned:
            return LOAD_QUAD(x, row, col)
        return LOAD(x[row, col]), LOAD(x[row, col + 1]), LOAD(x[row, col + 2]), LOAD(x[row, col + 3])

    return load_quad_at


def make_store_quad_at(io):
    """``store_quad_at(y, row, col, a, b, c, d, aligned)``: four compute-type values into ``y[row, col:col + 4]``,
    one vector store when y's quads are ``aligned``, else element by element."""
    STORE, STORE_QUAD = io.store, io.store_quad

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_quad_at(y, row, col, a, b, c, d, aligned):
        if aligned:
            STORE_QUAD(y, row, col, a, b, c, d)
        else:
            y[row, col] = STORE(a)
            y[row, col + 1] = STORE(b)
            y[row, col + 2] = STORE(c)
            y[row, col + 3] = STORE(d)

    return store_quad_at


def make_store_outputs(quads, stride, io, out):
    """``store_outputs(y, row, end, first, values, row_max, c, aligned)``: a thread's ``quads`` quads of kept
    values as outputs ``out(kept, row_max, c)`` (:attr:`RowForm.of_kept`) into row ``row`` of ``y``, quad ``q``
    at column ``first + stride * q``, quads from ``end`` on skipped (:func:`make_store_quad_at`)."""
    QUADS, STRIDE, OUT = quads, stride, out
    store_quad_at = make_store_quad_at(io)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_outputs(y, row, end, first, values, row_max, c, aligned):
        for q in range(QUADS):
            base = first + STRIDE * q
            if base < end:
                store_quad_at(y, row, base, OUT(values[QUAD * q], row_max, c),
                              OUT(values[QUAD * q + 1], row_max, c), OUT(values[QUAD * q + 2], row_max, c),
                              OUT(values[QUAD * q + 3], row_max, c), aligned)

    return store_outputs


def make_quads_aligned(out_type):
    """``quads_aligned(y, row, head)``: whether y's row holds its quads at addresses a vector store takes
    (its column ``head`` aligned like x's): else the quotients go out element by element."""
    ALIGN = uint64(min(16, QUAD * STORAGE_DTYPES[out_type].itemsize) - 1)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def quads_aligned(y, row, head):
        return address_of(y, row, head) & ALIGN == uint64(0)

    return quads_aligned


def make_record_row(lanes, quads, io):
    """``record_row(x, row, lane, start, body_end, edges_count, head, row_max, first_lane, status, alarm)``: the
    error path of a checked build. This thread's first NaN or +inf (its quads from column ``start``, then its
    edges) is recorded as a flat index ``row * cols + column``, and the row if it has no finite entry (the
    thread with ``first_lane`` set only)."""
    QUADS, STRIDE, LANES = quads, QUAD * lanes, lanes
    SLOTS = -(-max_edges(io.in_type) // lanes)
    LOAD, NEG_INF = io.load, io.arith.neg_inf

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def record_row(x, row, lane, start, body_end, count, head, row_max, first_lane, status, alarm):
        cols = x.shape[1]
        first = CLEAR_WORD
        for q in range(QUADS):
            base = start + QUAD * lane + STRIDE * q
            if first == CLEAR_WORD and base < body_end:
                for j in range(QUAD):
                    if first == CLEAR_WORD and not LOAD(x[row, base + j]) < POS_INF:
                        first = int64(base + j)
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                column = int64(e if e < head else body_end + (e - head))
                if not LOAD(x[row, column]) < POS_INF and column < first:
                    first = column
        if first != CLEAR_WORD:
            record_status(status, STATUS_NONFINITE, int64(row) * cols + first, alarm)
        if first_lane and row_max == NEG_INF:
            record_status(status, STATUS_MASKED_ROW, int64(row), alarm)

    return record_row


def make_load_values(lanes, quads, io):
    """``load_values(x, row, live, start, body_end, lane, values) -> local max``: this lane's register quads."""
    QUADS = quads
    STRIDE = QUAD * lanes
    LOAD_QUAD, A = io.load_quad, io.arith
    MAX = A.max
    NEG = A.neg_inf

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_values(x, row, live, start, body_end, lane, values):
        """This lane's body quads from column ``start`` into ``values`` (independent loads, all in flight
        together) and their max, in increasing column order. Quads past the body, and every quad of a group
        past the last row (``live`` false), hold -inf: they add exp(-inf - m) = +0 later."""
        local_max = NEG
        for q in range(QUADS):
            base = start + QUAD * lane + STRIDE * q
            a = b = c = d = NEG
            if live and base < body_end:  # the body is whole quads
                a, b, c, d = LOAD_QUAD(x, row, base)
            put_quad(values, QUAD * q, a, b, c, d)
            local_max = MAX(MAX(MAX(MAX(local_max, a), b), c), d)
        return local_max

    return load_values
