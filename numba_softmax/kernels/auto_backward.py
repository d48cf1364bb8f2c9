"""The backward of ``softmax`` and ``log_softmax`` along rows: ``dx`` from the forward's output ``y`` and the
gradient ``dy`` of the loss with respect to it, any width, row stride and alignment, float32, float16, bfloat16 and
float64 elements (float16 and bfloat16 computed in float32)::

    softmax:      s = sum_j dy[j] * y[j];   dx[j] = y[j] * (dy[j] - s)
    log_softmax:  s = sum_j dy[j];          dx[j] = dy[j] - exp(y[j]) * s

The numerics policy of the forward (:mod:`numba_softmax.numerics`): every add, subtract and multiply rounded on
its own (no contraction), libdevice ``exp``, the sum in the forward's order (a thread's values in increasing
column order, then its edge elements; an xor butterfly over its lanes; the warp partials folded warp 0 first).

Geometries (:func:`.auto_geometry.backward_geometry`), named as the forward's:

``rows_l{L}_q{Q}``: a group of L threads owns a row, lane t the body quads at ``head + 4 (t + L q)``, q < Q, of
    ``y`` and of ``dy`` in registers (2 * 4 Q values); L <= 32: 256 / L rows per block. Reads ``y`` and ``dy``
    once, writes ``dx`` once.
``cluster_l{L}_q{Q}_c{C}``: the rows geometry with the row spread over the C CTAs of a thread block cluster
    (GPU only; builds for float32 and 2-byte types, the table runs float32 rows in it), CTA ``rank`` holding body
    columns ``rank * 4 L Q`` on (the edges in rank 0); the sum ends with the forward's cluster stage. Reads ``y``
    and ``dy`` once, writes ``dx`` once.
``long_l{L}_q{Q}``: one L-thread block per row walks it in chunks of ``4 L Q`` columns: pass 1 the sum, pass 2
    ``dx``, last chunk first (still in registers; the chunks before it come again from L2 where it holds them).
``narrow_l1_q1``: rows of at most 4 columns, one thread per row (256 rows per block), each element of ``y``
    and ``dy`` one scalar load into a register, the sum in column order (the forward's :mod:`.auto_narrow`).
``packed_l1_q{Q}``, ``groups_l1_q{Q}``: C-contiguous rows of 1, 2 or 4 columns (3, 5, 6, 7 or 8), Q quads (groups
    of whole rows filling whole quads) of ``y`` and of ``dy`` per thread in vector loads across rows, each row
    computed as the narrow row (the forward's :mod:`.auto_narrow`).
``staged_l1_q1``, ``warpstaged_l1_q1``: the groups, ``y`` then ``dy`` moved through shared memory in coalesced
    accesses by the block or by each warp (candidates; the forward's :mod:`.auto_narrow`).

Each row is a head, a body of aligned quads placed by ``y``'s alignment, and a tail (:func:`.auto_parts.
make_row_span`); ``dy`` and ``dx`` take vector accesses where their quads are aligned as ``y``'s, else element
by element. Launch bounds hold every build to <= 64 registers per thread. The negative control (a softmax
backward without the ``s`` term) is in :mod:`.auto_backward_controls`.
"""

from typing import NamedTuple

from numba import cuda, float32, int64

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS, PARTIALS_ALIGNMENT, QUAD, SIMULATOR, WARP_SIZE, bounded_kernel
from ..validation import check_strided_rows
from .auto_geometry import (AUTO_TABLE, STAGED_KINDS, Geometry, backward_geometry, check_holds, group_shape,
                            packed_geometry)
from .auto_launch import check_packed, packs
from .auto_narrow import by_width, make_packed_groups, make_staged_groups, packed_grid
from .auto_parts import (FORMS, edge_column, make_cluster_fold, make_load_quad_at, make_quads_aligned,
                         make_row_place, make_row_span, make_store_quad_at, max_edges, row_reductions)
from .auto_rows import MIN_THREADS_PER_SM, types_suffix
from .elements import STORAGE_DTYPES, check_storage, check_types, element_io
from .vector_io import load_packed_quad, put_quad, store_packed_quad

if not SIMULATOR:
    from .cluster import cluster_wait


class GradientForm(NamedTuple):
    """The two device functions that make a backward body one form or the other (:func:`gradient_form`)."""
    name: str
    term: object   # (y, dy) -> a term of the row sum s
    grad: object   # (y, dy, s) -> dx


def gradient_form(form, arith):
    """The :class:`GradientForm` of ``form`` in ``arith``'s compute type."""
    if form not in FORMS:
        raise ValueError(f"form {form!r}: expected one of {FORMS}")
    SUB, MUL, EXP = arith.sub, arith.mul, arith.exp
    if form == "softmax":
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def term(y, g):
            return MUL(g, y)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def grad(y, g, s):
            return MUL(y, SUB(g, s))
    else:
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def term(y, g):
            return g

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def grad(y, g, s):
            return SUB(g, MUL(EXP(y), s))
    return GradientForm(form, term, grad)


def make_narrow_backward_rows(element_type, gradient):
    """``(make_row(values_count), gradients(count))``: ``make_row(n)`` is the narrow row of one thread
    (``narrow_row(y, dy, dx, row, cols)``: each element of ``y`` and ``dy`` one scalar load into a register, the
    sum in column order); ``gradients(n)(ys, gs, cols)`` turns the first ``cols`` of ``n`` held values of ``dy``
    into ``dx`` in place, the packed quads' rows too."""
    io = element_io(element_type, element_type)
    A = io.arith
    ADD, TYPE, ZERO = A.add, A.numba_type, A.zero
    LOAD, STORE = io.load, io.store
    TERM, GRAD = gradient.term, gradient.grad

    def gradients(COUNT):
        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def row_gradients(ys, gs, cols):
            s = ZERO
            for j in range(COUNT):
                if j < cols:
                    s = ADD(s, TERM(ys[j], gs[j]))
            for j in range(COUNT):
                if j < cols:
                    gs[j] = GRAD(ys[j], gs[j], s)

        return row_gradients

    def make_narrow_row(VALUES):
        """A row of at most ``VALUES`` elements in one thread."""
        GRADIENTS = gradients(VALUES)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def narrow_row(y, dy, dx, row, cols):
            ys = cuda.local.array(VALUES, TYPE)
            gs = cuda.local.array(VALUES, TYPE)
            for j in range(VALUES):  # independent loads, all in flight together
                if j < cols:
                    ys[j] = LOAD(y[row, j])
                    gs[j] = LOAD(dy[row, j])
            GRADIENTS(ys, gs, cols)
            for j in range(VALUES):
                if j < cols:
                    dx[row, j] = STORE(gs[j])

        return narrow_row

    return make_narrow_row, gradients


def make_narrow_backward_body(geometry, element_type, gradient):
    """``(body(y, dy, dx), block threads)`` of the ``narrow`` geometry: one thread per row of at most 4 elements,
    in the row's build for its width (:func:`.auto_narrow.by_width`)."""
    make_narrow_row, _ = make_narrow_backward_rows(element_type, gradient)
    narrow_row_of = by_width(make_narrow_row, (1, 2, geometry.quads * QUAD))
    BLOCK = geometry.block_threads

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def narrow_body(y, dy, dx):
        row = cuda.blockIdx.x * BLOCK + cuda.threadIdx.x
        rows, cols = y.shape
        if row < rows:
            narrow_row_of(y, dy, dx, row, cols)

    return narrow_body, BLOCK


def make_packed_backward_body(geometry, element_type, gradient):
    """``(body(y, dy, dx), block threads)`` of a ``packed`` or ``groups`` geometry
    (:func:`.auto_narrow.make_packed_groups`): C-contiguous rows of its widths, ``Q`` groups of ``y`` and of ``dy``
    per thread in vector loads (P quads each), each group's rows computed as the narrow row is and ``dx`` stored
    as P vectors; the rows past the last whole group run as narrow rows. A ``staged`` geometry: the same groups,
    ``y`` then ``dy`` loaded and ``dx`` stored by the block through shared memory
    (:func:`.auto_narrow.make_staged_groups`)."""
    make_narrow_row, gradients = make_narrow_backward_rows(element_type, gradient)
    io = element_io(element_type, element_type)
    LOAD, STORE, TYPE = io.load, io.store, io.arith.numba_type

    def make_group_parts(COLS):
        GROUP_ROWS, GROUP_QUADS = group_shape(COLS)
        HALF = geometry.quads * GROUP_QUADS * QUAD  # y's values, then dy's (dx's once computed)
        GRADIENTS = gradients(COLS)

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def load(y, dy, dx, held, k, row):
            for q in range(GROUP_QUADS):
                a, b, c, d = load_packed_quad(y, row, QUAD * q)
                put_quad(held, k + QUAD * q, LOAD(a), LOAD(b), LOAD(c), LOAD(d))
                a, b, c, d = load_packed_quad(dy, row, QUAD * q)
                put_quad(held, HALF + k + QUAD * q, LOAD(a), LOAD(b), LOAD(c), LOAD(d))

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def compute(y, dy, dx, held, k, row):
            for r in range(GROUP_ROWS):
                ys = cuda.local.array(COLS, TYPE)
                gs = cuda.local.array(COLS, TYPE)
                for j in range(COLS):
                    ys[j] = held[k + COLS * r + j]
                    gs[j] = held[HALF + k + COLS * r + j]
                GRADIENTS(ys, gs, COLS)
                for j in range(COLS):
                    held[HALF + k + COLS * r + j] = gs[j]

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def store(y, dy, dx, held, k, row):
            for q in range(GROUP_QUADS):
                i = HALF + k + QUAD * q
                store_packed_quad(dx, row, QUAD * q, STORE(held[i]), STORE(held[i + 1]), STORE(held[i + 2]),
                                  STORE(held[i + 3]))

        return load, compute, store

    if geometry.kind in STAGED_KINDS:
        return make_staged_groups(geometry, TYPE, make_group_parts, make_narrow_row, LOAD, STORE, inputs=2), \
            geometry.block_threads
    groups_of = make_packed_groups(geometry, TYPE, make_group_parts, make_narrow_row)
    STEP = geometry.quads * geometry.block_threads

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def packed_body(y, dy, dx):
        groups_of(y, dy, dx, cuda.blockIdx.x * STEP + cuda.threadIdx.x, y.shape[1])

    return packed_body, geometry.block_threads


def make_backward_body(geometry, element_type, form, gradient=None, cluster_fold=make_cluster_fold):
    """``(body(y, dy, dx), block threads)`` of a ``rows``, ``cluster``, ``long``, ``narrow``, ``packed``,
    ``groups``, ``staged`` or ``warpstaged`` geometry for ``element_type`` arrays (``gradient``: the
    :class:`GradientForm`, default ``form``'s; ``cluster_fold``: ``ctas ->`` the cluster stage of the sum; the
    negative controls pass their own)."""
    if geometry.shared_quads or geometry.fast_math:
        raise ValueError(f"geometry {geometry.name}: a backward runs a rows_l<L>_q<Q>, cluster_l<L>_q<Q>_c<C>, "
                         "long_l<L>_q<Q>, narrow_l1_q1, packed_l1_q<Q>, groups_l1_q<Q>, staged_l1_q1 or "
                         "warpstaged_l1_q1 geometry")
    if geometry.ctas > 1 and (SIMULATOR or element_type == "float64"):
        raise ValueError(f"geometry {geometry.name}: a cluster backward needs a GPU (the simulator has no clusters) "
                         f"and float32 arithmetic (float32, float16 or bfloat16 elements; got {element_type})")
    io = element_io(element_type, element_type)
    A = io.arith
    ADD, TYPE, ZERO = A.add, A.numba_type, A.zero
    LOAD, STORE, LOAD_QUAD = io.load, io.store, io.load_quad
    gradient = gradient_form(form, A) if gradient is None else gradient
    if geometry.kind == "narrow":
        return make_narrow_backward_body(geometry, element_type, gradient)
    if geometry.packed_widths:
        return make_packed_backward_body(geometry, element_type, gradient)
    TERM, GRAD = gradient.term, gradient.grad
    LONG = geometry.kind == "long"
    LANES = geometry.lanes
    QUADS = geometry.quads
    VALUES = QUADS * QUAD
    CHUNK = QUAD * LANES * QUADS
    STRIDE = QUAD * LANES
    BLOCK = LANES if LONG else geometry.block_threads
    ROWS = 1 if LONG else geometry.rows_per_block
    WARPS = max(1, LANES // WARP_SIZE)
    CTAS = geometry.ctas
    CTA_COLUMNS = QUAD * LANES * QUADS
    SLOTS = -(-max_edges(element_type) // LANES)
    _, row_sum_of = row_reductions(LANES, BLOCK, A)
    fold = cluster_fold(CTAS)
    place = make_row_place(LANES, ROWS, CTAS, CTA_COLUMNS)
    row_span = make_row_span(element_type)
    quads_aligned = make_quads_aligned(element_type)
    load_quad_at = make_load_quad_at(io)
    store_quad_at = make_store_quad_at(io)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_pairs(y, dy, row, live, start, body_end, lane, ys, gs, dy_aligned, local):
        """This lane's quads of y and dy from column ``start`` into ``ys`` / ``gs`` (all loads in flight
        together), their terms added to ``local`` in increasing column order."""
        for q in range(QUADS):
            base = start + QUAD * lane + STRIDE * q
            a = b = c = d = ZERO
            e = f = g = h = ZERO
            if live and base < body_end:  # the body is whole quads
                a, b, c, d = LOAD_QUAD(y, row, base)
                e, f, g, h = load_quad_at(dy, row, base, dy_aligned)
            put_quad(ys, QUAD * q, a, b, c, d)
            put_quad(gs, QUAD * q, e, f, g, h)
        for q in range(QUADS):
            if live and start + QUAD * lane + STRIDE * q < body_end:
                for j in range(QUAD):
                    local = ADD(local, TERM(ys[QUAD * q + j], gs[QUAD * q + j]))
        return local

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_grads(dx, row, start, body_end, lane, ys, gs, s, dx_aligned):
        for q in range(QUADS):
            base = start + QUAD * lane + STRIDE * q
            if base < body_end:
                k = QUAD * q
                store_quad_at(dx, row, base, GRAD(ys[k], gs[k], s), GRAD(ys[k + 1], gs[k + 1], s),
                              GRAD(ys[k + 2], gs[k + 2], s), GRAD(ys[k + 3], gs[k + 3], s), dx_aligned)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def edge_terms(y, dy, row, lane, head, body_end, count, local):
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                column = edge_column(e, head, body_end)
                local = ADD(local, TERM(LOAD(y[row, column]), LOAD(dy[row, column])))
        return local

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_edge_grads(y, dy, dx, row, lane, head, body_end, count, s):
        for k in range(SLOTS):
            e = lane + LANES * k
            if e < count:
                column = edge_column(e, head, body_end)
                dx[row, column] = STORE(GRAD(LOAD(y[row, column]), LOAD(dy[row, column]), s))

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def rows_body(y, dy, dx):
        lane, row, rank, offset = place()  # in a cluster: arrived; waits before the cluster stage
        rows, cols = y.shape
        live = row < rows  # a group past the last row still takes part in the shuffles and barriers
        partials = cuda.shared.array(WARPS, TYPE, alignment=PARTIALS_ALIGNMENT)
        ys = cuda.local.array(VALUES, TYPE)
        gs = cuda.local.array(VALUES, TYPE)
        head = body_end = edge_count = int64(0)
        dy_aligned = dx_aligned = False
        if live:
            head, body_end = row_span(y, row, cols)
            if rank == 0:
                edge_count = head + cols - body_end
            dy_aligned = quads_aligned(dy, row, head)
            dx_aligned = quads_aligned(dx, row, head)
        local = load_pairs(y, dy, row, live, head + offset, body_end, lane, ys, gs, dy_aligned, ZERO)
        if live:
            local = edge_terms(y, dy, row, lane, head, body_end, edge_count, local)
        s = row_sum_of(local, partials)
        if CTAS > 1:
            cluster_wait()  # every CTA has started (place() arrived)
            sums = cuda.shared.array(CTAS, float32)  # slot j: CTA j's block sum
            s = fold(s, sums, rank, False)
        if live:
            store_grads(dx, row, head + offset, body_end, lane, ys, gs, s, dx_aligned)
            store_edge_grads(y, dy, dx, row, lane, head, body_end, edge_count, s)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def long_body(y, dy, dx):
        row = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        cols = y.shape[1]
        head, body_end = row_span(y, row, cols)
        edge_count = head + cols - body_end
        chunks = (body_end - head + CHUNK - 1) // CHUNK
        partials = cuda.shared.array(WARPS, TYPE, alignment=PARTIALS_ALIGNMENT)
        ys = cuda.local.array(VALUES, TYPE)
        gs = cuda.local.array(VALUES, TYPE)
        dy_aligned = quads_aligned(dy, row, head)
        dx_aligned = quads_aligned(dx, row, head)
        local = ZERO
        for c in range(chunks):
            local = load_pairs(y, dy, row, True, head + c * CHUNK, body_end, lane, ys, gs, dy_aligned, local)
        local = edge_terms(y, dy, row, lane, head, body_end, edge_count, local)
        s = row_sum_of(local, partials)
        for step in range(chunks):  # last chunk first: it is still in registers
            start = head + (chunks - 1 - step) * CHUNK
            if step > 0:
                load_pairs(y, dy, row, True, start, body_end, lane, ys, gs, dy_aligned, ZERO)
            store_grads(dx, row, start, body_end, lane, ys, gs, s, dx_aligned)
        store_edge_grads(y, dy, dx, row, lane, head, body_end, edge_count, s)

    return (long_body if LONG else rows_body), BLOCK


#: The kernel name prefix of each form's backward builds.
BACKWARD_PREFIXES = {"softmax": "auto_backward_", "log_softmax": "auto_log_backward_"}


def backward_build_name(geometry, element_type, form):
    """``auto_[log_]backward_<geometry>[_<type>]``: the kernel's name (its PTX entry)."""
    return f"{BACKWARD_PREFIXES[form]}{geometry.name}{types_suffix((element_type, element_type))}"


def make_backward_kernel(geometry, element_type, form, gradient=None, name=None, cluster_fold=make_cluster_fold):
    """The build of ``geometry`` for ``element_type`` arrays ``(y, dy, dx)`` (launch bounds: <= 64 registers)."""
    body, block = make_backward_body(geometry, element_type, form, gradient, cluster_fold)

    def kernel(y, dy, dx):
        body(y, dy, dx)

    kernel.__name__ = kernel.__qualname__ = name or backward_build_name(geometry, element_type, form)
    return bounded_kernel(kernel, block, max(1, MIN_THREADS_PER_SM // block))


_BUILDS = {}


def backward_kernel(geometry, element_type="float32", form="softmax"):
    """The dispatcher of one backward build, made once (compiled on its first launch)."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    check_types((element_type, element_type), "element_type")
    key = (geometry, element_type, form)
    if key not in _BUILDS:
        _BUILDS[key] = make_backward_kernel(*key)
    return _BUILDS[key]


def backward_signature(element_type):
    """The Numba signature of a backward build: three strided 2-D arrays of the element's storage type."""
    array = f"{STORAGE_DTYPES[element_type].name}[:, :]"
    return f"void({array}, {array}, {array})"


def backward_launches(y, dy, dx, element_type, form="softmax", geometry=None):
    """The launch of the backward of ``form`` over 2-D ``element_type`` arrays of one shape (any row stride, one
    element between columns): ``geometry`` (a name), or the one :func:`.auto_geometry.backward_geometry` picks."""
    for name, array in (("y", y), ("dy", dy), ("dx", dx)):
        check_storage(name, array, element_type)
        check_strided_rows(name, array)
    if not tuple(y.shape) == tuple(dy.shape) == tuple(dx.shape):
        raise ValueError(f"y, dy and dx must have one shape, got {tuple(y.shape)}, {tuple(dy.shape)} and "
                         f"{tuple(dx.shape)}")
    rows, cols = y.shape
    if geometry is None:
        geometry = backward_geometry(cols, element_type, packs(cols, y, dy, dx))
    geometry = Geometry.parse(geometry)
    check_holds(geometry, cols, element_type)
    kernel = backward_kernel(geometry, element_type, form)
    if geometry.packed_widths:
        check_packed(geometry, cols, y=y, dy=dy, dx=dx)
        grid = packed_grid(geometry, rows, cols)
    else:
        rows_per_block = 1 if geometry.kind == "long" else geometry.rows_per_block
        grid = (rows + rows_per_block - 1) // rows_per_block * geometry.ctas
    block = geometry.lanes if geometry.kind == "long" else geometry.block_threads
    return [KernelLaunch(f"{BACKWARD_PREFIXES[form]}{geometry.name}", kernel, (grid,), (block,), (y, dy, dx),
                         cluster=geometry.ctas)]


#: The element type whose backward builds are all registered (every geometry the table maps to); the others
#: register a narrow rows, a block-per-row and the long geometry each.
FULL_TYPES = ("float32",)
SAMPLE_TYPES = ("bfloat16", "float16", "float64")


def backward_builds():
    """name -> (dispatcher, Numba signature) of the backward builds ``auto`` runs: what the PTX policy check
    compiles."""
    widths = [limit for limit, _ in AUTO_TABLE if limit is not None] + [AUTO_TABLE[-2][0] * 2]
    found = {}
    for element_type in FULL_TYPES + SAMPLE_TYPES:
        names = sorted({backward_geometry(cols, element_type) for cols in widths})
        if element_type in SAMPLE_TYPES:
            names = [names[0], "rows_l8_q1", names[-1]]
        names += [backward_geometry(1, element_type, packed=True)]
        if element_type != "float64":  # groups hold float32 and 2-byte rows (auto_launch.check_packed)
            names += [packed_geometry(3, (element_type,) * 2, 2)]
        for name in names:
            for form in FORMS:
                kernel = backward_kernel(name, element_type, form)
                found[kernel.py_func.__name__] = (kernel, backward_signature(element_type))
    return found
