"""``narrow_l1_q1``: rows of at most 8 bytes, one thread per row, each element loaded once.

``auto`` runs it for every row of at most :data:`.auto_geometry.NARROW_ROW_BYTES` (float32 to 2 columns,
2-byte types to 4, float64 1). The numerics policy of every ``auto`` kernel (:mod:`..numerics`: libdevice
``exp``, IEEE division, no contraction), in one thread and in column order::

    v_j = x[row, j]  (j < cols)
    m = max_j v_j;  e_j = exp(v_j - m);  z = sum_j e_j;  y[row, j] = e_j / z     (log_softmax: v_j - m - log z)

Launch geometry: 256 threads per block, thread ``t`` of block ``b`` owns row ``256 b + t``; a warp's loads of
column ``j`` touch 32 consecutive rows (at 1-2 float32 columns, 128-256 contiguous bytes).
Bytes: ``rows * cols`` elements read once and written once.

Why not a ``rows_l1_q1`` (:mod:`.auto_rows`): a row of at most 8 bytes has no 16-byte aligned quad, so there every
element is an edge, read again by each of three passes over all of a lane's edge slots, while the empty quad
still takes four exponentials. Here each element is one scalar load into a register and one exponential,
in code built for the row's width (1, 2, or up to 4; measured 1.7-5.6x faster there: docs/auto_kernels.md).
Checked builds record the first NaN or +inf (a flat index) and a row without a finite entry, as every ``auto``
build does.
"""

from numba import cuda, int64

from ..numerics import KERNEL_OPTIONS, QUAD
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_parts import POS_INF, make_exp_sum, record_status, row_form
from .elements import element_io


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def every_column(cols):
    """The columns the sum takes: all of them (the negative control's part takes one fewer)."""
    return cols


def by_width(make_row, most):
    """``row_of(a, b, c, row, cols)``: ``make_row(n)(a, b, c, row, cols)`` with ``n`` 1, 2 or ``most``, the fewest
    values that hold a row of ``cols``: a row of one or two elements runs straight-line code, no slot past its end
    (every thread of a launch takes the same build: no divergence). The backward's narrow body uses it too."""
    ONE, TWO, MOST = make_row(1), make_row(2), make_row(most)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def row_of(a, b, c, row, cols):
        if cols == 1:
            ONE(a, b, c, row, cols)
        elif cols == 2:
            TWO(a, b, c, row, cols)
        else:
            MOST(a, b, c, row, cols)

    return row_of


def make_narrow_body(geometry, types, checked, form="softmax", summed=every_column):
    """``(body(x, y, status, alarm), block threads)`` of a ``narrow`` geometry for elements ``types`` = (in, out),
    writing ``form``'s output (:func:`.auto_parts.row_form`); ``summed(cols)``: the columns the sum takes (a
    negative control swaps it, :mod:`.auto_controls`)."""
    io = element_io(*types)
    A = io.arith
    MAX = A.max
    FORM = row_form(form, A)
    SCALE, OUT = FORM.scale, FORM.of_kept
    LOAD, STORE = io.load, io.store
    TYPE, NEG = A.numba_type, A.neg_inf
    VALUES = QUAD * geometry.quads
    BLOCK = geometry.block_threads
    CHECKED = checked
    SUMMED = summed

    def make_row(VALUES):
        """The row of one thread holding at most ``VALUES`` elements."""
        EXP_SUM = make_exp_sum(VALUES, A, FORM)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def narrow_row(x, y, checks, row, cols):
            status, alarm = checks
            values = cuda.local.array(VALUES, TYPE)
            row_max = NEG
            for j in range(VALUES):
                if j < cols:
                    values[j] = LOAD(x[row, j])
                    row_max = MAX(row_max, values[j])
            row_sum = EXP_SUM(values, row_max, SUMMED(cols))
            c = SCALE(row_sum)
            for j in range(VALUES):
                if j < cols:
                    y[row, j] = STORE(OUT(values[j], row_max, c))
            if CHECKED and not row_sum < POS_INF:
                # As in every auto build: the row is read again on the error path only.
                for j in range(VALUES):
                    if j < cols and not LOAD(x[row, j]) < POS_INF:
                        record_status(status, STATUS_NONFINITE, int64(row) * cols + j, alarm)
                        break
                if row_max == NEG:
                    record_status(status, STATUS_MASKED_ROW, int64(row), alarm)

        return narrow_row

    ROW_OF = by_width(make_row, VALUES)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        row = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        rows, cols = x.shape
        if row < rows:
            ROW_OF(x, y, (status, alarm), row, cols)

    return body, BLOCK
