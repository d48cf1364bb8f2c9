"""Rows of at most 8 bytes: ``narrow_l1_q1`` (one thread per row, each element loaded once) and
``packed_l1_q<Q>`` (C-contiguous rows of 1, 2 or 4 elements read as whole quads across rows).

``auto`` runs one of them for every row of at most :data:`.auto_geometry.NARROW_ROW_BYTES` (float32 to 2 columns,
2-byte types to 4, float64 1): packed where the rows fill quads (1, 2 or 4 columns) and both arrays are
C-contiguous with aligned quads, narrow otherwise. The numerics policy of every ``auto`` kernel
(:mod:`..numerics`: libdevice ``exp``, IEEE division, no contraction), in one thread and in column order::

    v_j = x[row, j]  (j < cols)
    m = max_j v_j;  e_j = exp(v_j - m);  z = sum_j e_j;  y[row, j] = e_j / z     (log_softmax: v_j - m - log z)

Launch geometry. Narrow: 256 threads per block, thread ``t`` of block ``b`` owns row ``256 b + t``; a warp's loads
of column ``j`` touch 32 consecutive rows. Packed: thread ``t`` of block ``b`` owns the quads (4 consecutive
elements of memory, ``4 / cols`` whole rows) ``256 (Q b + k) + t``, k < Q, each one vector load and one vector
store (a warp moves 32 consecutive quads per access); the rows past the last whole quad run as narrow rows.
Bytes: ``rows * cols`` elements read once and written once.

Why not a ``rows_l1_q1`` (:mod:`.auto_rows`): a row of at most 8 bytes has no 16-byte aligned quad, so there every
element is an edge, read again by each of three passes over all of a lane's edge slots, while the empty quad
still takes four exponentials. Here each row is computed from registers, in code built for the row's width (1, 2,
or up to 4): the same operations in the same order in both geometries, so their outputs are equal bit for bit.
Packed moves 16 bytes of x per thread in vector accesses where narrow makes one scalar access per element
(docs/auto_kernels.md gives both measurements). Checked builds record the first NaN or +inf (a flat index) and a
row without a finite entry, as every ``auto`` build does.
"""

from numba import cuda, int64

from ..numerics import KERNEL_OPTIONS, QUAD
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_parts import POS_INF, make_exp_sum, record_status, row_form
from .elements import element_io
from .vector_io import load_packed_quad, put_quad, store_packed_quad


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def every_column(cols):
    """The columns the sum takes: all of them (the negative control's part takes one fewer)."""
    return cols


def by_width(make_row, most):
    """``row_of(a, b, c, d, cols)``: ``make_row(n)(a, b, c, d, cols)`` with ``n`` 1, 2 or ``most``, the fewest
    values that hold a row of ``cols``: a row of one or two elements runs straight-line code, no slot past its end
    (every thread of a launch takes the same build: no divergence). The backward's narrow body uses it too."""
    ONE, TWO, MOST = make_row(1), make_row(2), make_row(most)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def row_of(a, b, c, d, cols):
        if cols == 1:
            ONE(a, b, c, d, cols)
        elif cols == 2:
            TWO(a, b, c, d, cols)
        else:
            MOST(a, b, c, d, cols)

    return row_of


def packed_grid(geometry, rows, cols):
    """Blocks of a packed launch over ``rows`` rows of ``cols`` elements: every quad (the last may be partial)."""
    quads = (rows * cols + QUAD - 1) // QUAD
    per_block = geometry.quads * geometry.block_threads
    return (quads + per_block - 1) // per_block


def make_narrow_parts(types, checked, form, summed):
    """``(row_of_values(count), check_row, io)``: ``row_of_values(count)(values, cols)`` turns the first ``cols``
    of a thread's ``count`` values in place into ``form``'s outputs, returning ``(m, z)``; ``check_row(x, checks,
    row, cols, m, z)``: in a checked build, what a row with a NaN, +inf or no finite entry records (the row read
    again, on the error path only)."""
    io = element_io(*types)
    A = io.arith
    MAX, NEG = A.max, A.neg_inf
    FORM = row_form(form, A)
    SCALE, OUT = FORM.scale, FORM.of_kept
    LOAD = io.load
    CHECKED = checked
    SUMMED = summed

    def row_of_values(COUNT):
        EXP_SUM = make_exp_sum(COUNT, A, FORM)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def outputs(values, cols):
            row_max = NEG
            for j in range(COUNT):
                if j < cols:
                    row_max = MAX(row_max, values[j])
            row_sum = EXP_SUM(values, row_max, SUMMED(cols))
            c = SCALE(row_sum)
            for j in range(COUNT):
                if j < cols:
                    values[j] = OUT(values[j], row_max, c)
            return row_max, row_sum

        return outputs

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def check_row(x, checks, row, cols, row_max, row_sum):
        if CHECKED and not row_sum < POS_INF:
            status, alarm = checks
            for j in range(cols):
                if not LOAD(x[row, j]) < POS_INF:
                    record_status(status, STATUS_NONFINITE, int64(row) * cols + j, alarm)
                    break
            if row_max == NEG:
                record_status(status, STATUS_MASKED_ROW, int64(row), alarm)

    return row_of_values, check_row, io


def make_narrow_rows(types, checked, form, summed):
    """``make_row(values_count)``: the narrow row of one thread (``narrow_row(x, y, checks, row, cols)``)."""
    row_of_values, check_row, io = make_narrow_parts(types, checked, form, summed)
    LOAD, STORE, TYPE = io.load, io.store, io.arith.numba_type

    def make_row(VALUES):
        """The row of one thread holding at most ``VALUES`` elements."""
        OUTPUTS = row_of_values(VALUES)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def narrow_row(x, y, checks, row, cols):
            values = cuda.local.array(VALUES, TYPE)
            for j in range(VALUES):
                if j < cols:
                    values[j] = LOAD(x[row, j])
            row_max, row_sum = OUTPUTS(values, cols)
            for j in range(VALUES):
                if j < cols:
                    y[row, j] = STORE(values[j])
            check_row(x, checks, row, cols, row_max, row_sum)

        return narrow_row

    return make_row


def make_narrow_body(geometry, types, checked, form="softmax", summed=every_column):
    """``(body(x, y, status, alarm), block threads)`` of a ``narrow`` geometry for elements ``types`` = (in, out),
    writing ``form``'s output (:func:`.auto_parts.row_form`); ``summed(cols)``: the columns the sum takes (a
    negative control swaps it, :mod:`.auto_controls`)."""
    ROW_OF = by_width(make_narrow_rows(types, checked, form, summed), QUAD * geometry.quads)
    BLOCK = geometry.block_threads

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        row = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        rows, cols = x.shape
        if row < rows:
            ROW_OF(x, y, (status, alarm), row, cols)

    return body, BLOCK


def make_packed_quads(geometry, numba_type, make_quad_parts, make_tail_row):
    """``quads_of(a, b, c, first, cols)``: the quads of a packed geometry's thread, the first at quad ``first`` and
    then every ``block threads`` (C-contiguous rows of 1, 2 or 4 elements: whole rows in each quad), in the build
    for the width (:func:`by_width`). ``make_quad_parts(COLS)`` gives ``(load, compute, store)``, each called as
    ``part(a, b, c, held, k, row)``: ``load`` one quad's inputs into ``held`` (a thread's local array of
    ``numba_type``, 8 Q values) at ``k`` (and ``k`` + 4 Q), every load in flight before ``compute`` turns its rows
    (the quad's first is ``row``) into outputs and ``store`` writes them as one vector; ``make_tail_row(COLS)``:
    ``tail(a, b, c, row, COLS)``, the narrow row that each of the rows past the last whole quad runs (fewer than a
    quad's)."""
    QUADS = geometry.quads
    HELD = 2 * QUADS * QUAD
    BLOCK = geometry.block_threads
    TYPE = numba_type

    def make_quads(COLS):
        PER_QUAD = QUAD // COLS
        LOAD, COMPUTE, STORE = make_quad_parts(COLS)
        TAIL_ROW = make_tail_row(COLS)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def packed_quads(a, b, c, first, cols):
            rows = a.shape[0]
            whole = rows // PER_QUAD  # quads of whole rows; the rows past them are the tail
            held = cuda.local.array(HELD, TYPE)
            for k in range(QUADS):
                q = first + k * BLOCK
                if q < whole:
                    LOAD(a, b, c, held, QUAD * k, q * PER_QUAD)
            for k in range(QUADS):
                q = first + k * BLOCK
                if q < whole:
                    COMPUTE(a, b, c, held, QUAD * k, q * PER_QUAD)
                    STORE(a, b, c, held, QUAD * k, q * PER_QUAD)
                elif q == whole:
                    for r in range(PER_QUAD - 1):
                        if whole * PER_QUAD + r < rows:
                            TAIL_ROW(a, b, c, whole * PER_QUAD + r, COLS)

        return packed_quads

    return by_width(make_quads, QUAD)


def make_packed_body(geometry, types, checked, form="softmax", summed=every_column):
    """``(body(x, y, status, alarm), block threads)`` of a ``packed`` geometry: C-contiguous rows of 1, 2 or 4
    elements, ``Q`` quads per thread, each quad one vector load of ``4 / cols`` whole rows computed as the narrow
    row is (the same operations, bit for bit) and one vector store; the rows past the last whole quad run as
    narrow rows (``summed``: as :func:`make_narrow_body`)."""
    row_of_values, check_row, io = make_narrow_parts(types, checked, form, summed)
    LOAD, STORE, TYPE = io.load, io.store, io.arith.numba_type
    BLOCK = geometry.block_threads

    def make_quad_parts(COLS):
        PER_QUAD = QUAD // COLS
        OUTPUTS = row_of_values(COLS)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def load(x, y, checks, held, k, row):
            a, b, c, d = load_packed_quad(x, row, 0)
            put_quad(held, k, LOAD(a), LOAD(b), LOAD(c), LOAD(d))

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def compute(x, y, checks, held, k, row):
            for r in range(PER_QUAD):
                values = cuda.local.array(COLS, TYPE)
                for j in range(COLS):
                    values[j] = held[k + COLS * r + j]
                row_max, row_sum = OUTPUTS(values, COLS)
                for j in range(COLS):
                    held[k + COLS * r + j] = values[j]
                check_row(x, checks, row + r, COLS, row_max, row_sum)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def store(x, y, checks, held, k, row):
            store_packed_quad(y, row, 0, STORE(held[k]), STORE(held[k + 1]), STORE(held[k + 2]), STORE(held[k + 3]))

        return load, compute, store

    QUADS_OF = make_packed_quads(geometry, TYPE, make_quad_parts, make_narrow_rows(types, checked, form, summed))
    STEP = geometry.quads * BLOCK

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        QUADS_OF(x, y, (status, alarm), cuda.blockIdx.x * STEP + cuda.threadIdx.x, x.shape[1])

    return body, BLOCK
