"""Softmax along a dimension that is not the last one, on the device: ``softmax(x, dim=d)`` of an N-D tensor
viewed as 3-D ``(outer, length, inner)`` (``outer``: the dimensions before ``d``, ``inner``: those after it),
softmax along axis 1 for each ``(outer, inner)`` pair -- a *column* of ``length`` values, ``inner`` elements
apart in a contiguous tensor. Nothing is transposed or copied: the kernels read and write the strided arrays.

Thread ``p`` of the grid (flattened over ``outer * inner``, ``o = p // inner``, ``i = p % inner``) owns column
``p``, so the 32 threads of a warp take 32 adjacent inner indices and every step along ``length`` is one
coalesced access per warp where the inner axis is contiguous (torch's "spatial" softmax does the same). Same
numerics policy as the row kernels (:mod:`.auto_rows`): the compute type of :func:`numerics.compute_type`,
libdevice ``exp``, IEEE division, every add / subtract / multiply rounded (no contraction)::

    m = max_l x[o, l, i];  z = sum_l exp(x[o, l, i] - m);  y[o, l, i] = exp(x[o, l, i] - m) / z

``columns_r{V}`` (``length <= V``): the column in V registers, read once, written once; positions past
    ``length`` hold -inf (weight +0). 256 columns per 256-thread block.
``columns_s{S}_c{C}`` (any length): S threads per column (256 / S columns per block), thread ``j`` of a column
    takes positions ``j, j + S, ...`` in chunks of C values: pass 1 a running (max, sum) per thread rescaled once
    per chunk (the online softmax of :mod:`.auto_long`), the S threads' pairs folded in shared memory in a fixed
    order (thread 0 first, so every thread of a column gets the same bits), pass 2 the outputs, last chunk
    first (still in registers). S > 1 keeps an SM busy when there are few columns and long ones.

Bytes: ``columns_r{V}`` reads ``outer * length * inner`` elements once and writes as many once; ``columns_s*``
reads them twice (the second time mostly from L2: a block's columns were just read) and writes once. Which build
runs (:data:`COLUMN_TABLE`, :func:`column_geometry`): the register build that holds ``length``, else the online
build whose S gives about 64 K threads or more; with ``inner == 1`` and unit strides along ``length`` the columns
are rows, and :func:`column_launches` gives the row kernels' launch (:func:`.auto_launch.auto_launches`).

Checked builds (``_checked``) give the same outputs and, on the error path only, record (``validation.STATUS_*``)
the first NaN or +inf as the flat index ``row * length + l`` of the columns taken as rows -- ``row = o * inner + i``
(the column's index ``p``), ``l`` its position along ``length``: the index into ``x.transpose(0, 2, 1)``
reshaped to ``(outer * inner, length)`` -- and the first column with no finite entry (``status[1] = row``).
Unchecked builds give NaN for a column with a NaN or +inf and for a column of -inf only; -inf gets weight 0.
Launch bounds keep every build at <= 64 registers. Arrays: 3-D, any strides that are whole elements, a start
aligned to the element size. The negative control (a column without its last position) is in
:mod:`.column_controls`; reasons: docs/auto_kernels.md ("Softmax along a dimension that is not the last").
"""

from dataclasses import dataclass

import numpy as np
from numba import cuda, int64, uint64

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS, udiv
from ..validation import STATUS_MASKED_ROW, STATUS_NONFINITE, check_status_buffers
from .auto_parts import FORMS, POS_INF, U32_ZERO, bad_bit, lowest_bit, make_exp_sum, record_status, row_form
from .auto_launch import auto_launches
from .auto_rows import FORM_PREFIXES, bounded_build, types_suffix
from .elements import STORAGE_DTYPES, check_storage, check_types, element_io, types_of

#: Threads per block of every column build.
COLUMN_BLOCK_THREADS = 256
#: Most values a thread holds in registers (a checked build keeps one bit per value of a chunk in 32 bits).
MAX_COLUMN_VALUES = 32
#: The kinds of column geometry: the column in registers, or any length in chunks.
COLUMN_KINDS = ("registers", "online")


@dataclass(frozen=True)
class ColumnGeometry:
    """``registers``: one thread per column, ``values`` (V) registers, columns of up to V positions; ``online``:
    ``splits`` (S) threads per column, chunks of ``values`` (C) positions per thread, any length."""
    kind: str
    values: int
    splits: int = 1

    def __post_init__(self):
        if self.kind not in COLUMN_KINDS:
            raise ValueError(f"column geometry kind {self.kind!r}: expected one of {COLUMN_KINDS}")
        if not 1 <= self.values <= MAX_COLUMN_VALUES:
            raise ValueError(f"column geometry {self.name}: 1 to {MAX_COLUMN_VALUES} values per thread")
        if self.splits & (self.splits - 1) or not 1 <= self.splits <= COLUMN_BLOCK_THREADS:
            raise ValueError(f"column geometry {self.name}: threads per column must be a power of two up to "
                             f"{COLUMN_BLOCK_THREADS}")
        if self.kind == "registers" and self.splits != 1:
            raise ValueError(f"column geometry {self.name}: a register geometry takes one thread per column")

    @property
    def name(self):
        if self.kind == "registers":
            return f"columns_r{self.values}"
        return f"columns_s{self.splits}_c{self.values}"

    @property
    def max_length(self):
        """Longest column it takes (``None``: any)."""
        return self.values if self.kind == "registers" else None

    @property
    def spill_budget(self):
        """Bytes per thread a float32 or 2-byte build may spill: 16 for the online builds at the 64-register cap
        (offline ptxas keeps them in registers; the driver's compiler spilled 16 bytes at 1, 8 and 32 threads
        per column), else 0."""
        return 16 if self.kind == "online" else 0

    @property
    def columns_per_block(self):
        return COLUMN_BLOCK_THREADS // self.splits

    @classmethod
    def parse(cls, name):
        parts = name.split("_")
        geometry = None
        try:
            if len(parts) == 2 and parts[0] == "columns" and parts[1].startswith("r"):
                geometry = cls("registers", int(parts[1][1:]))
            elif len(parts) == 3 and parts[0] == "columns" and parts[1][:1] == "s" and parts[2][:1] == "c":
                geometry = cls("online", int(parts[2][1:]), int(parts[1][1:]))
        except ValueError as exc:
            if "column geometry" in str(exc):
                raise
        if geometry is None or geometry.name != name:
            raise ValueError(f"unknown column geometry {name!r}: expected columns_r<V> or columns_s<S>_c<C>, "
                             f"e.g. {COLUMN_TABLE[0][1]!r}")
        return geometry


# ---- which build runs -------------------------------------------------------------------------------------

#: The register build for columns of up to ``max_length`` positions (first match); longer ones run the online
#: build with :data:`COLUMN_SPLITS`. float64 values take two registers each: at most 8 (``FLOAT64_COLUMN_TABLE``).
COLUMN_TABLE = ((4, "columns_r4"), (8, "columns_r8"), (16, "columns_r16"), (32, "columns_r32"))
FLOAT64_COLUMN_TABLE = ((4, "columns_r4"), (8, "columns_r8"))
#: Online builds: (fewest columns, threads per column), first match. 64 K columns fill a GPU's SMs with one
#: thread each (132 SMs x 2048 threads is 270 K resident; a few waves of 256-thread blocks); fewer columns split
#: their length over 8 or 32 threads so that the grid still has thousands of warps.
COLUMN_SPLITS = ((65536, 1), (4096, 8), (0, 32))
#: Positions per chunk of an online build: 8 loads in flight per thread (float64: 4, its values take two registers).
ONLINE_CHUNK = 8
FLOAT64_ONLINE_CHUNK = 4


def column_geometry(columns, length, float64=False):
    """The geometry :func:`column_launches` runs for ``columns`` (= outer * inner) columns of ``length``."""
    for limit, name in FLOAT64_COLUMN_TABLE if float64 else COLUMN_TABLE:
        if length <= limit:
            return name
    splits = next(s for fewest, s in COLUMN_SPLITS if columns >= fewest)
    return ColumnGeometry("online", FLOAT64_ONLINE_CHUNK if float64 else ONLINE_CHUNK, splits).name


#: Every geometry with builds: the register table and the online builds of each split, per compute type.
COLUMN_GEOMETRIES = sorted({name for _, name in COLUMN_TABLE}
                           | {ColumnGeometry("online", ONLINE_CHUNK, s).name for _, s in COLUMN_SPLITS})
FLOAT64_COLUMN_GEOMETRIES = sorted({name for _, name in FLOAT64_COLUMN_TABLE}
                                   | {ColumnGeometry("online", FLOAT64_ONLINE_CHUNK, s).name
                                      for _, s in COLUMN_SPLITS})


# ---- the kernels -----------------------------------------------------------------------------------------------

@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def all_positions(length):
    """The positions of a column a build reads and writes: all of them."""
    return length


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def column_of(p, inner):
    """``(o, i)`` of column ``p`` (``p < outer * inner``), as unsigned indices (no wraparound code)."""
    o = udiv(uint64(p), uint64(inner))
    return o, uint64(p) - o * uint64(inner)


def make_record_column(io):
    """``record_column(x, o, i, p, length, column_max, status, alarm)``: the error path of a register build:
    the column's first NaN or +inf (flat index ``p * length + l``) and the column if it has no finite entry."""
    LOAD, NEG = io.load, io.arith.neg_inf

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def record_column(x, o, i, p, length, column_max, status, alarm):
        for l in range(length):  # noqa: E741 (a position along length)
            if not LOAD(x[o, uint64(l), i]) < POS_INF:
                record_status(status, STATUS_NONFINITE, int64(p) * length + l, alarm)
                break
        if column_max == NEG:
            record_status(status, STATUS_MASKED_ROW, int64(p), alarm)

    return record_column


def make_register_body(geometry, types, checked, positions=all_positions, form="softmax"):
    """``(body(x, y, status, alarm), block threads)`` of a ``columns_r{V}`` geometry for elements ``types``
    writing ``form`` (:func:`.auto_parts.row_form`): one thread per column, its ``V`` values in registers.
    ``positions(length)``: how many positions the build reads and writes (the negative control's differs)."""
    io = element_io(*types)
    A = io.arith
    MAX = A.max
    FORM = row_form(form, A)
    SCALE, OUT = FORM.scale, FORM.of_kept
    LOAD, STORE = io.load, io.store
    TYPE, NEG = A.numba_type, A.neg_inf
    VALUES = geometry.values
    COLUMNS = geometry.columns_per_block
    CHECKED = checked
    POSITIONS = positions
    EXP_SUM = make_exp_sum(VALUES, A, FORM)
    record_column = make_record_column(io)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        outer, length, inner = x.shape
        p = int64(cuda.blockIdx.x) * COLUMNS + cuda.threadIdx.x
        if p < outer * inner:  # no barrier in this build: a thread past the last column has nothing to do
            o, i = column_of(p, inner)
            used = POSITIONS(length)
            values = cuda.local.array(VALUES, TYPE)
            column_max = NEG
            for k in range(VALUES):  # independent loads, all in flight together
                v = NEG
                if k < used:
                    v = LOAD(x[o, uint64(k), i])
                values[k] = v
                column_max = MAX(column_max, v)
            column_sum = EXP_SUM(values, column_max, VALUES)  # -inf past the column: weight +0
            c = SCALE(column_sum)
            for k in range(VALUES):
                if k < used:
                    y[o, uint64(k), i] = STORE(OUT(values[k], column_max, c))
            if CHECKED:
                # As the row kernels: a column of finite and -inf values has a finite sum (one term is 1); a NaN,
                # a +inf or a column of -inf alone makes it NaN. Only then is the column read again.
                if not column_sum < POS_INF:
                    record_column(x, o, i, p, length, column_max, status, alarm)

    return body, COLUMN_BLOCK_THREADS


def make_online_body(geometry, types, checked, positions=all_positions, form="softmax"):
    """``(body(x, y, status, alarm), block threads)`` of a ``columns_s{S}_c{C}`` geometry: thread ``j = tid //
    (256 / S)`` of column ``tid % (256 / S)`` (a warp: adjacent columns) takes positions ``j + S t``, chunk ``c``
    its ``t`` in ``[c C, c C + C)``."""
    io = element_io(*types)
    A = io.arith
    ADD, SUB, MUL, EXP, MAX = A.add, A.sub, A.mul, A.exp, A.max
    FORM = row_form(form, A)
    SCALE, OUT = FORM.scale, FORM.of_value
    LOAD, STORE = io.load, io.store
    TYPE, NEG, ZERO = A.numba_type, A.neg_inf, A.zero
    CHUNK = geometry.values
    SPLITS = geometry.splits
    COLUMNS = geometry.columns_per_block
    CHECKED = checked
    POSITIONS = positions

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_chunk(x, o, i, lane, c, count, values):
        """This thread's chunk ``c`` into ``values`` (-inf past its ``count`` positions) and its max."""
        chunk_max = NEG
        for k in range(CHUNK):
            t = c * CHUNK + k
            v = NEG
            if t < count:
                v = LOAD(x[o, uint64(lane + SPLITS * t), i])
            values[k] = v
            chunk_max = MAX(chunk_max, v)
        return chunk_max

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def body(x, y, status, alarm):
        outer, length, inner = x.shape
        tid = cuda.threadIdx.x
        lane = tid // COLUMNS
        p = int64(cuda.blockIdx.x) * COLUMNS + tid % COLUMNS
        o = i = uint64(0)
        count = int64(0)  # this thread's positions: lane, lane + S, ... below used
        used = POSITIONS(length)
        if p < outer * inner:  # a thread past the last column still reaches the barrier below
            o, i = column_of(p, inner)
            if lane < used:
                count = (used - lane + SPLITS - 1) // SPLITS
        chunks = (count + CHUNK - 1) // CHUNK
        values = cuda.local.array(CHUNK, TYPE)

        # Pass 1: a running (max, sum), rescaled once per chunk. While the max is -inf the terms are taken
        # against 0 instead (exp(-inf - (-inf)) would be NaN): -inf adds +0, a NaN still makes the sum NaN.
        run_max = NEG
        run_sum = ZERO
        recorded = False
        for c in range(chunks):
            chunk_max = load_chunk(x, o, i, lane, c, count, values)
            if CHECKED and not recorded:
                bad = U32_ZERO
                for k in range(CHUNK):
                    bad |= bad_bit(values[k], k)  # positions past count hold -inf: never bad
                if bad != U32_ZERO:  # error path: this thread's first NaN or +inf
                    t = c * CHUNK + lowest_bit(bad)
                    record_status(status, STATUS_NONFINITE, p * length + lane + SPLITS * t, alarm)
                    recorded = True
            new_max = MAX(run_max, chunk_max)
            if run_max != NEG:
                run_sum = MUL(run_sum, EXP(SUB(run_max, new_max)))
            reference = new_max if new_max != NEG else ZERO
            for k in range(CHUNK):
                run_sum = ADD(run_sum, EXP(SUB(values[k], reference)))
            run_max = new_max

        column_max = run_max
        column_sum = run_sum
        if SPLITS > 1:
            # The S threads' pairs, folded in thread order by every thread of the column: the same bits in each.
            maxes = cuda.shared.array(COLUMN_BLOCK_THREADS, TYPE)
            sums = cuda.shared.array(COLUMN_BLOCK_THREADS, TYPE)
            maxes[tid] = run_max
            sums[tid] = run_sum
            cuda.syncthreads()
            column = tid % COLUMNS
            column_max = maxes[column]
            for j in range(1, SPLITS):
                column_max = MAX(column_max, maxes[column + COLUMNS * j])
            column_sum = ZERO
            for j in range(SPLITS):
                m = maxes[column + COLUMNS * j]
                s = sums[column + COLUMNS * j]
                if m != NEG:  # else s is 0 (or NaN) as it is
                    s = MUL(s, EXP(SUB(m, column_max)))
                column_sum = ADD(column_sum, s)
        if CHECKED:
            if lane == 0 and p < outer * inner and column_max == NEG:
                record_status(status, STATUS_MASKED_ROW, p, alarm)

        # Pass 2, last chunk first: it is still in registers.
        scale = SCALE(column_sum)
        for step in range(chunks):
            c = chunks - 1 - step
            if step > 0:
                load_chunk(x, o, i, lane, c, count, values)
            for k in range(CHUNK):
                t = c * CHUNK + k
                if t < count:
                    y[o, uint64(lane + SPLITS * t), i] = STORE(OUT(values[k], column_max, scale))

    return body, COLUMN_BLOCK_THREADS


def build_name(geometry, types, checked, form="softmax"):
    """``auto_[log_]<geometry>[_<types>][_checked]``: the kernel's name (its PTX entry, the registry's key)."""
    return f"{FORM_PREFIXES[form]}{geometry.name}{types_suffix(types)}{'_checked' if checked else ''}"


def make_column_body(geometry, types, checked, positions=all_positions, form="softmax"):
    """The body of ``geometry`` (a :class:`ColumnGeometry`) for ``types`` writing ``form``: ``(body, block
    threads)``."""
    maker = make_register_body if geometry.kind == "registers" else make_online_body
    return maker(geometry, types, checked, positions, form)


def make_column_kernel(geometry, types, checked, form="softmax"):
    """The shipped build of ``geometry`` for elements ``types`` writing ``form`` (made once by
    :func:`column_kernel`)."""
    body, block = make_column_body(geometry, types, checked, form=form)
    return bounded_build(body, block, build_name(geometry, types, checked, form), checked)


# ---- builds and launchers ---------------------------------------------------------------------------------

F32 = ("float32", "float32")
#: Every pair of element types has a build of every geometry its compute type runs (a build compiles only when
#: it is first launched or checked).
_BUILDS = {}


def column_kernel(geometry, types=F32, checked=False, form="softmax"):
    """The dispatcher of one build of ``geometry`` (a :class:`ColumnGeometry` or its name) writing ``form``,
    made once."""
    if isinstance(geometry, str):
        geometry = ColumnGeometry.parse(geometry)
    if form not in FORMS:
        raise ValueError(f"form {form!r}: expected one of {FORMS}")
    key = (geometry, check_types(tuple(types)), bool(checked), form)
    if key not in _BUILDS:
        _BUILDS[key] = make_column_kernel(*key)
    return _BUILDS[key]


def column_signature(types, checked):
    """The Numba signature of a build: strided 3-D arrays of the storage types."""
    x, y = (f"{STORAGE_DTYPES[t].name}[:, :, :]" for t in types)
    return f"void({x}, {y}, int64[::1], int32[::1])" if checked else f"void({x}, {y})"


#: The pairs whose every geometry is registered; the other pairs register one register and one online build.
FULL_COLUMN_TYPES = (F32, ("bfloat16", "bfloat16"), ("float64", "float64"))
SAMPLE_COLUMN_TYPES = (("float16", "float16"), ("float16", "float32"), ("bfloat16", "float32"),
                       ("float32", "bfloat16"), ("float64", "float32"), ("float32", "float64"))


def _geometries_for(types):
    return FLOAT64_COLUMN_GEOMETRIES if "float64" in types else COLUMN_GEOMETRIES


def column_builds():
    """name -> (dispatcher, Numba signature) of every checked and unchecked build of every geometry for the
    :data:`FULL_COLUMN_TYPES`, and of a register and an online geometry for the :data:`SAMPLE_COLUMN_TYPES`."""
    found = {}
    plan = [(types, _geometries_for(types)) for types in FULL_COLUMN_TYPES]
    plan += [(types, [_geometries_for(types)[0], _geometries_for(types)[-1]]) for types in SAMPLE_COLUMN_TYPES]
    for types, names in plan:
        for name in names:
            for checked in (False, True):
                kernel = column_kernel(name, types, checked)
                found[kernel.py_func.__name__] = (kernel, column_signature(types, checked))
    return found


def check_columns_array(name, array):
    """A 3-D array ``(outer, length, inner)`` as :func:`column_launches` takes it: every extent >= 1, strides
    that are whole elements, a start aligned to the element size."""
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"{name}: expected a 3-D array (outer, length, inner), every extent >= 1, got shape {shape}")
    itemsize = np.dtype(array.dtype).itemsize
    strides = tuple(array.strides)
    if any(stride % itemsize for stride in strides):
        raise ValueError(f"{name}: strides {strides} (bytes) are not whole numbers of elements ({itemsize} bytes)")
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    if interface is not None and interface["data"][0] % itemsize:
        raise ValueError(f"{name}: the data does not start on a {itemsize}-byte boundary (its element size)")


def column_launches(x, y, status=None, alarm=None, types=None, form="softmax"):
    """The launch of softmax along axis 1 of the 3-D ``x`` ``(outer, length, inner)`` into ``y`` (the same shape,
    any strides): the geometry of :func:`column_geometry`, or the row kernels' where the columns are rows (``inner
    == 1``, x and y one element apart along ``length``). ``status is None``: unchecked; else checked (records
    into status and alarm). ``types=(in_type, out_type)`` (read from the dtypes when left out). Nothing here
    allocates, synchronizes or copies."""
    if types is None:
        types = types_of(x, y)
    else:
        types = check_types(tuple(types))
        check_storage("x", x, types[0])
        check_storage("y", y, types[1])
    check_columns_array("x", x)
    check_columns_array("y", y)
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    outer, length, inner = x.shape
    itemsize = (STORAGE_DTYPES[types[0]].itemsize, STORAGE_DTYPES[types[1]].itemsize)
    if inner == 1 and (length == 1 or (x.strides[1], y.strides[1]) == itemsize):
        # Columns one element apart are rows: the row kernels read them in 16-byte quads, a warp per row or more,
        # where one thread per column would read 32 rows at once. The records are the same (row o, column l).
        return auto_launches(x[:, :, 0], y[:, :, 0], status, alarm, types, form)
    return geometry_column_launches(column_geometry(outer * inner, length, "float64" in types), x, y, status, alarm,
                                    types, form)


def geometry_column_launches(geometry, x, y, status=None, alarm=None, types=None, form="softmax"):
    """The single launch of one named column geometry (:func:`column_launches` picks one; tests and ``bench``
    name them). A register geometry refuses a column longer than it holds."""
    if isinstance(geometry, str):
        geometry = ColumnGeometry.parse(geometry)
    types = types_of(x, y) if types is None else check_types(tuple(types))
    checked = status is not None or alarm is not None
    if checked:
        check_status_buffers(status, alarm)
    outer, length, inner = x.shape
    if geometry.max_length is not None and length > geometry.max_length:
        raise ValueError(f"column too long for geometry {geometry.name}: {length} positions > {geometry.max_length}")
    kernel = column_kernel(geometry, types, checked, form)
    grid = (outer * inner + geometry.columns_per_block - 1) // geometry.columns_per_block
    args = (x, y, status, alarm) if checked else (x, y)
    return [KernelLaunch(f"{FORM_PREFIXES[form]}{geometry.name}", kernel, (grid,), (COLUMN_BLOCK_THREADS,), args)]
