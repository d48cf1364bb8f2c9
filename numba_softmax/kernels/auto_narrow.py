"""Rows of at most 12 bytes and C-contiguous rows of up to 8 elements: ``narrow_l1_q1`` (one thread per row, each
element loaded once), ``packed_l1_q<Q>`` (rows of 1, 2 or 4 elements read as whole quads across rows),
``groups_l1_q<Q>`` (rows of 3, 5, 6, 7 or 8 elements read as groups of whole rows that fill whole quads),
``staged_l1_q1`` and ``warpstaged_l1_q1`` (the same groups, loaded and stored through shared memory by the whole
block or by each warp: candidates, the block's in the table for float32 forwards of 5 and 7).

``auto`` runs one of them for every row of at most :data:`.auto_geometry.NARROW_ROW_BYTES` and 4 elements
(float32 to 3 columns, 2-byte types to 4, float64 1), for rows of 4 elements, and for the
:data:`.auto_geometry.GROUP_WIDTHS` of the element's size: packed or groups where every array is C-contiguous
with aligned quads (:func:`.auto_geometry.packs_width`), narrow otherwise (wider rows: the rows geometries).
The numerics policy of every ``auto`` kernel
(:mod:`..numerics`: libdevice ``exp``, IEEE division, no contraction), in one thread and in column order::

    v_j = x[row, j]  (j < cols)
    m = max_j v_j;  e_j = exp(v_j - m);  z = sum_j e_j;  y[row, j] = e_j / z     (log_softmax: v_j - m - log z)

Launch geometry. Narrow: 256 threads per block, thread ``t`` of block ``b`` owns row ``256 b + t``; a warp's loads
of column ``j`` touch 32 consecutive rows. Packed and groups: a group is the fewest whole rows that fill whole
quads (4 consecutive elements of memory): R = 4 / gcd(cols, 4) rows in P = cols / gcd(cols, 4) quads (1 column:
4 rows in one quad; 3 columns: 4 rows in 3 quads; :func:`.auto_geometry.group_shape`). Thread ``t`` of block
``b`` owns the groups ``256 (Q b + k) + t``, k < Q, each P vector loads and P vector stores (a warp's P accesses
cover 32 consecutive groups); the rows past the last whole group run as narrow rows. Bytes: ``rows * cols``
elements read once and written once.

Why not a ``rows_l1_q1`` (:mod:`.auto_rows`): a row of fewer than 8 elements has at most one 16-byte aligned
quad, so there nearly every element is an edge, read again by each of three passes over all of a lane's edge
slots. Here each row is computed from registers, in code built for the row's width: the same operations in the
same order in every geometry of this module, so their outputs are equal bit for bit. Packed and groups move 16
bytes or more per thread in vector accesses where narrow makes one scalar access per element
(docs/auto_kernels.md gives the measurements). Checked builds record the first NaN or +inf (a flat index) and a
row without a finite entry, as every ``auto`` build does.
"""

from numba import cuda, int64

from ..numerics import KERNEL_OPTIONS, NVVM_INLINE, QUAD, SIMULATOR
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE
from .auto_geometry import STAGED_KINDS, group_shape, stage_threads
from .auto_parts import POS_INF, make_exp_sum, record_status, row_form
from .elements import element_io
from .vector_io import load_packed_quad, put_quad, store_packed_quad


@cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
def every_column(cols):
    """The columns the sum takes: all of them (the negative control's part takes one fewer)."""
    return cols


@cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
def block_barrier():
    """The block's barrier (a stage of ``staged_l1_q1``)."""
    cuda.syncthreads()


@cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
def warp_barrier():
    """A warp's barrier (a stage of ``warpstaged_l1_q1``): ``syncwarp``; the simulator has none, and the block's
    serves there (every thread of a block reaches each barrier of a staged body)."""
    if SIMULATOR:
        cuda.syncthreads()
    else:
        cuda.syncwarp()


def by_width(make_row, widths):
    """``row_of(a, b, c, d, cols)``: ``make_row(n)(a, b, c, d, cols)`` with ``n`` the first of ``widths`` that is
    ``cols``, else the last: code built for each width (a row of one or two elements runs straight-line code, no
    slot past its end; every thread of a launch takes the same build: no divergence). The narrow rows take
    ``(1, 2, most)``, the packed geometries their widths; the backward's narrow body uses it too."""
    LAST = make_row(widths[-1])
    if len(widths) == 1:
        return LAST
    FIRST, REST, WIDTH = make_row(widths[0]), by_width(make_row, widths[1:]), widths[0]

    @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
    def row_of(a, b, c, d, cols):
        if cols == WIDTH:
            FIRST(a, b, c, d, cols)
        else:
            REST(a, b, c, d, cols)

    return row_of


def packed_grid(geometry, rows, cols):
    """Blocks of a packed launch over ``rows`` rows of ``cols`` elements: every group of whole rows (the last may
    be partial)."""
    group_rows = group_shape(cols)[0]
    groups = (rows + group_rows - 1) // group_rows
    per_block = geometry.quads * geometry.block_threads
    return (groups + per_block - 1) // per_block


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

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
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

    @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
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

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
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
    ROW_OF = by_width(make_narrow_rows(types, checked, form, summed), (1, 2, QUAD * geometry.quads))
    BLOCK = geometry.block_threads

    @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        row = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        rows, cols = x.shape
        if row < rows:
            ROW_OF(x, y, (status, alarm), row, cols)

    return body, BLOCK


def make_packed_groups(geometry, numba_type, make_group_parts, make_tail_row):
    """``groups_of(a, b, c, first, cols)``: the groups of a packed geometry's thread, the first at group ``first``
    and then every ``block threads`` (C-contiguous rows of :attr:`~.auto_geometry.Geometry.packed_widths`: a group
    is the fewest whole rows that fill whole quads, :func:`~.auto_geometry.group_shape`), in the build for the
    width (:func:`by_width`). ``make_group_parts(COLS)`` gives ``(load, compute, store)``, each called as
    ``part(a, b, c, held, k, row)``: ``load`` one group's inputs (P quads of each) into ``held`` (a thread's local
    array of ``numba_type``, two inputs of Q groups: 8 P Q values) at ``k`` (and ``k`` + 4 P Q), every load in
    flight before ``compute`` turns its rows (the group's first is ``row``) into outputs and ``store`` writes them
    as P vectors; ``make_tail_row(COLS)``: ``tail(a, b, c, row, COLS)``, the narrow row that each of the rows past
    the last whole group runs (fewer than a group's)."""
    GROUPS = geometry.quads
    BLOCK = geometry.block_threads
    TYPE = numba_type

    def make_groups(COLS):
        GROUP_ROWS, GROUP_QUADS = group_shape(COLS)
        HELD = 2 * GROUPS * GROUP_QUADS * QUAD
        SPAN = GROUP_QUADS * QUAD  # values of one input in a group
        LOAD, COMPUTE, STORE = make_group_parts(COLS)
        TAIL_ROW = make_tail_row(COLS)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def packed_groups(a, b, c, first, cols):
            rows = a.shape[0]
            whole = rows // GROUP_ROWS  # groups of whole rows; the rows past them are the tail
            held = cuda.local.array(HELD, TYPE)
            for k in range(GROUPS):
                g = first + k * BLOCK
                if g < whole:
                    LOAD(a, b, c, held, SPAN * k, g * GROUP_ROWS)
            for k in range(GROUPS):
                g = first + k * BLOCK
                if g < whole:
                    COMPUTE(a, b, c, held, SPAN * k, g * GROUP_ROWS)
                    STORE(a, b, c, held, SPAN * k, g * GROUP_ROWS)
                elif g == whole:
                    for r in range(GROUP_ROWS - 1):
                        if whole * GROUP_ROWS + r < rows:
                            TAIL_ROW(a, b, c, whole * GROUP_ROWS + r, COLS)

        return packed_groups

    return by_width(make_groups, geometry.packed_widths)


def make_staged_groups(geometry, numba_type, make_group_parts, make_tail_row, load, store, inputs=1):
    """``groups_of(a, b, c)`` of a staged geometry: the groups of ``groups_l1_q1`` (thread ``t`` of block ``b``
    owns group ``256 b + t``, its rows computed by the same ``compute`` part of :func:`make_packed_groups`'s
    ``make_group_parts``, bit for bit), their quads moved through shared memory so that every global access is
    coalesced. ``inputs`` 1 (a forward: ``a`` in, ``b`` out) or 2 (a backward: ``a`` and ``b`` in, ``c`` out);
    ``load`` / ``store``: an element's conversion to and from the compute type.

    The threads that stage together (a stage: the block in ``staged_l1_q1``, each warp in ``warpstaged_l1_q1``,
    :func:`.auto_geometry.stage_threads`) own ``S`` consecutive groups, ``S P`` quads, loaded by lane (stage
    thread ``t`` takes quads ``t, t + S, ...``: a warp's load covers consecutive memory), converted, and component
    ``c`` of quad ``n`` goes to ``staged[c B P + S P w + n]`` (``B`` threads a block, ``w`` the stage in it: so
    the block's quads are in block order in each component's part); after a barrier of the stage each thread
    reads its own group's quads ``P tid + p`` (32 lanes P words apart: P is 3, 5 or 7, odd, so no bank is hit
    twice). A backward stages ``b`` the same way after ``a``. The thread computes its rows in
    registers and writes the outputs back to its own quads; after a barrier the stage stores them as it loaded.
    The rows past the last whole group run as narrow rows (``make_tail_row``). A warp's barrier (``syncwarp``)
    holds none of the block's other warps: their loads, arithmetic and stores overlap. Shared memory: ``4 P``
    compute-type values a thread of the block, one array sized for the widest width (28 KiB at 7 columns)."""
    TYPE = numba_type
    BLOCK = geometry.block_threads
    STAGE = stage_threads(geometry)
    STAGED = QUAD * BLOCK * max(group_shape(cols)[1] for cols in geometry.packed_widths)
    TWO = inputs == 2
    LOAD, STORE = load, store
    if STAGE == BLOCK:
        BARRIER = block_barrier

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def place():
            """The thread's stage in its block and its index in the stage."""
            return 0, cuda.threadIdx.x
    else:
        BARRIER = warp_barrier

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def place():  # a stage is a warp (STAGE == WARP_SIZE): its index in it is the lane
            return cuda.threadIdx.x // STAGE, cuda.laneid

    def make_groups(COLS):
        GROUP_ROWS, P = group_shape(COLS)
        C = BLOCK * P  # the stride of a quad's components: each is the block's P quads
        SPAN = QUAD * P
        HELD = SPAN * inputs  # a's group, then b's
        OUT = SPAN if TWO else 0  # where ``compute`` leaves the outputs in ``held``
        COMPUTE = make_group_parts(COLS)[1]
        TAIL_ROW = make_tail_row(COLS)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def stage_in(source, staged, base, top, quads, t):
            for i in range(P):
                n = t + STAGE * i
                if n < quads:
                    a, b, c, d = load_packed_quad(source, top + QUAD * n // COLS, QUAD * n % COLS)
                    o = base + n
                    staged[o], staged[C + o], staged[2 * C + o], staged[3 * C + o] = LOAD(a), LOAD(b), LOAD(c), \
                        LOAD(d)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def stage_out(target, staged, base, top, quads, t):
            for i in range(P):
                n = t + STAGE * i
                if n < quads:
                    o = base + n
                    store_packed_quad(target, top + QUAD * n // COLS, QUAD * n % COLS, STORE(staged[o]),
                                      STORE(staged[C + o]), STORE(staged[2 * C + o]), STORE(staged[3 * C + o]))

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def take_group(held, k, staged):
            for p in range(P):
                n = P * cuda.threadIdx.x + p
                put_quad(held, k + QUAD * p, staged[n], staged[C + n], staged[2 * C + n], staged[3 * C + n])

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def give_group(held, k, staged):
            for p in range(P):
                n = P * cuda.threadIdx.x + p
                i = k + QUAD * p
                staged[n], staged[C + n], staged[2 * C + n], staged[3 * C + n] = held[i], held[i + 1], \
                    held[i + 2], held[i + 3]

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def staged_groups(a, b, c, staged, cols):
            rows = a.shape[0]
            whole = rows // GROUP_ROWS
            stage, t = place()
            first = cuda.blockIdx.x * BLOCK + stage * STAGE  # the stage's first group
            quads = min(whole - first, STAGE) * P  # of whole groups in this stage (may be <= 0)
            top = first * GROUP_ROWS
            base = STAGE * P * stage  # the stage's quads in each component's part of the array
            g = first + t
            held = cuda.local.array(HELD, TYPE)
            stage_in(a, staged, base, top, quads, t)
            BARRIER()
            if g < whole:
                take_group(held, 0, staged)
            if TWO:
                BARRIER()
                stage_in(b, staged, base, top, quads, t)
                BARRIER()
                if g < whole:
                    take_group(held, SPAN, staged)
            if g < whole:
                COMPUTE(a, b, c, held, 0, g * GROUP_ROWS)
                give_group(held, OUT, staged)
            elif g == whole:
                for r in range(GROUP_ROWS - 1):
                    if whole * GROUP_ROWS + r < rows:
                        TAIL_ROW(a, b, c, whole * GROUP_ROWS + r, COLS)
            BARRIER()
            stage_out(c if TWO else b, staged, base, top, quads, t)

        return staged_groups

    ROW_OF = by_width(make_groups, geometry.packed_widths)

    @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
    def groups_of(a, b, c):
        staged = cuda.shared.array(STAGED, TYPE)
        ROW_OF(a, b, c, staged, a.shape[1])

    return groups_of


def make_packed_body(geometry, types, checked, form="softmax", summed=every_column):
    """``(body(x, y, status, alarm), block threads)`` of a ``packed``, ``groups`` or staged geometry: C-contiguous
    rows of its widths, ``Q`` groups per thread, each group's P quads one vector load each (``staged`` /
    ``warpstaged``: loaded by the block / by each warp, :func:`make_staged_groups`), its rows computed as the narrow
    row is (the same operations, bit for bit) and stored as P vectors; the rows past the last whole group run as
    narrow rows (``summed``: as :func:`make_narrow_body`)."""
    row_of_values, check_row, io = make_narrow_parts(types, checked, form, summed)
    LOAD, STORE, TYPE = io.load, io.store, io.arith.numba_type

    def make_group_parts(COLS):
        GROUP_ROWS, GROUP_QUADS = group_shape(COLS)
        OUTPUTS = row_of_values(COLS)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def load(x, y, checks, held, k, row):
            for q in range(GROUP_QUADS):
                a, b, c, d = load_packed_quad(x, row, QUAD * q)
                put_quad(held, k + QUAD * q, LOAD(a), LOAD(b), LOAD(c), LOAD(d))

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def compute(x, y, checks, held, k, row):
            for r in range(GROUP_ROWS):
                values = cuda.local.array(COLS, TYPE)
                for j in range(COLS):
                    values[j] = held[k + COLS * r + j]
                row_max, row_sum = OUTPUTS(values, COLS)
                for j in range(COLS):
                    held[k + COLS * r + j] = values[j]
                check_row(x, checks, row + r, COLS, row_max, row_sum)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def store(x, y, checks, held, k, row):
            for q in range(GROUP_QUADS):
                i = k + QUAD * q
                store_packed_quad(y, row, QUAD * q, STORE(held[i]), STORE(held[i + 1]), STORE(held[i + 2]),
                                  STORE(held[i + 3]))

        return load, compute, store

    tail_row = make_narrow_rows(types, checked, form, summed)
    if geometry.kind in STAGED_KINDS:
        STAGED_OF = make_staged_groups(geometry, TYPE, make_group_parts, tail_row, LOAD, STORE)

        @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
        def staged_body(x, y, status, alarm):
            STAGED_OF(x, y, (status, alarm))

        return staged_body, geometry.block_threads
    GROUPS_OF = make_packed_groups(geometry, TYPE, make_group_parts, tail_row)
    STEP = geometry.quads * geometry.block_threads

    @cuda.jit(device=True, **NVVM_INLINE, **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        GROUPS_OF(x, y, (status, alarm), cuda.blockIdx.x * STEP + cuda.threadIdx.x, x.shape[1])

    return body, geometry.block_threads
