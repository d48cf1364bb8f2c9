"""Softmax along a dimension that is not the last (numba_softmax/kernels/auto_columns.py), in the simulator and on
a GPU, against float64: the 3-D ``(outer, length, inner)`` arrays taken as rows ``(outer * inner, length)``.

The simulator runs every build on shapes of one or two blocks (a 256-thread block is 256 Python threads there);
a GPU runs every shape, wider grids and the registers and local memory of each build."""

import numpy as np
import pytest
from backends import skip_on_cudasim
from numba import cuda

from numba_softmax.backend import SIMULATOR, invocation, run_launches
from numba_softmax.element_types import STORAGE_DTYPES, from_float64, to_float64
from numba_softmax.kernels.auto_columns import (COLUMN_GEOMETRIES, FLOAT64_COLUMN_GEOMETRIES, ColumnGeometry,
                                                column_geometry, column_launches, geometry_column_launches)
from numba_softmax.kernels.column_controls import short_column_control_kernel
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.oracle import check_matrix
from numba_softmax.validation import STATUS_CLEAR, STATUS_WORDS

GPU_ONLY = skip_on_cudasim("too slow for the simulator (one Python thread per CUDA thread); a GPU runs it")
F32 = ("float32", "float32")
LENGTHS = (1, 3, 7, 64, 1000, 5000)
INNERS = (1, 3, 32, 100)
OUTERS = (1, 5)
#: Every element type, and pairs of two types (torch's dtype=).
PAIRS = (F32, ("float16", "float16"), ("bfloat16", "bfloat16"), ("float64", "float64"), ("float16", "float32"),
         ("bfloat16", "float32"), ("float32", "bfloat16"), ("float64", "float32"))
#: How an array lies in memory: a contiguous array, a slice of a larger buffer (misaligned start, every stride
#: padded), every other outer index of a buffer, every other inner index (no unit stride at all).
LAYOUTS = ("contiguous", "sliced", "outer_step", "inner_step")


def to_rows(a):
    """``(outer, length, inner)`` -> the columns as rows ``(outer * inner, length)``, row ``o * inner + i``."""
    return np.ascontiguousarray(np.asarray(a).transpose(0, 2, 1)).reshape(-1, a.shape[1])


def place(bits, layout):
    """A device array holding ``bits`` (a storage-type host array) laid out as ``layout`` names."""
    outer, length, inner = bits.shape
    if layout == "contiguous":
        return cuda.to_device(bits)
    if layout == "sliced":
        buffer = np.zeros((outer + 1, length + 2, inner + 5), dtype=bits.dtype)
        view = (slice(1, outer + 1), slice(1, length + 1), slice(3, inner + 3))
    elif layout == "outer_step":
        buffer = np.zeros((2 * outer, length, inner), dtype=bits.dtype)
        view = (slice(None, None, 2), slice(None), slice(None))
    else:
        buffer = np.zeros((outer, length, 2 * inner + 1), dtype=bits.dtype)
        view = (slice(None), slice(None), slice(1, None, 2))
    buffer[view] = bits
    return cuda.to_device(buffer)[view]


def run(values, types=F32, layouts=("contiguous", "contiguous"), geometry=None, checked=False, kernel=None):
    """softmax along axis 1 of ``values`` (float64, cast to ``types[0]``) into a NaN-filled y. Returns (x's bits,
    y's bits, status words or None) on the host; ``kernel``: launch that kernel with the geometry's launch."""
    bits = from_float64(values, types[0])
    d_x = place(bits, layouts[0])
    d_y = place(from_float64(np.full(values.shape, np.nan), types[1]), layouts[1])
    status = alarm = None
    if checked:
        status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
        alarm = cuda.to_device(np.zeros(1, dtype=np.int32))
    launches = (column_launches(d_x, d_y, status, alarm, types) if geometry is None
                else geometry_column_launches(geometry, d_x, d_y, status, alarm, types))
    if kernel is not None:
        launches = [KernelLaunch("control", kernel, launch.grid, launch.block, launch.args) for launch in launches]
    with np.errstate(invalid="ignore", over="ignore"):  # the simulator computes on the host: -inf - -inf
        run_launches(launches)
    if checked:
        assert alarm.copy_to_host()[0] == int(any(w != STATUS_CLEAR for w in status.copy_to_host()))
    return bits, np.ascontiguousarray(d_y.copy_to_host()), None if status is None else status.copy_to_host()


def expect_columns(x_bits, y_bits, types=F32):
    """y is softmax along axis 1 of x: the oracle's tolerance on every column with a finite entry, exactly 0 at
    -inf, NaN on every column without a finite entry."""
    x_rows, y_rows = to_rows(x_bits), to_rows(y_bits)
    values, got = to_float64(x_rows, types[0]), to_float64(y_rows, types[1])
    has_finite = np.isfinite(values).any(axis=1)
    assert np.isnan(got[~has_finite]).all(), "a column without a finite entry must give NaN"
    if has_finite.any():
        result = check_matrix(y_rows[has_finite], x_rows[has_finite], types)
        assert result.passed, result.describe()
        assert (got[np.isneginf(values) & has_finite[:, None]] == 0).all(), "-inf got a nonzero weight"


def fixture(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape) * 3.0


def _fits_the_simulator(outer, length, inner):
    """Register builds (one thread per column, <= 2 blocks here) and online builds of up to 16 columns and 5,000
    elements (the simulator runs a 256-thread block as 256 Python threads: 15 columns of 5,000 took 250 s)."""
    return length <= 32 or (outer * inner <= 16 and outer * length * inner <= 5000)


def _shape_params():
    return [pytest.param(outer, length, inner, id=f"{outer}x{length}x{inner}",
                         marks=() if _fits_the_simulator(outer, length, inner) else GPU_ONLY)
            for outer in OUTERS for length in LENGTHS for inner in INNERS]


# ---- every shape, the table's build, against float64 ------------------------------------------------------

@pytest.mark.parametrize(("outer", "length", "inner"), _shape_params())
def test_shapes_against_float64(outer, length, inner):
    values = fixture((outer, length, inner), seed=length * 131 + inner)
    x, y, _ = run(values)
    expect_columns(x, y)
    # The checked build gives the same bits and records nothing on a clean input.
    _, y_checked, status = run(values, checked=True)
    assert np.array_equal(y.view(np.uint32), y_checked.view(np.uint32))
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS


def _geometry_params():
    """Each build on a shape that crosses its blocks and, online, its chunks and splits (two blocks each)."""
    shapes = {"columns_r4": (2, 4, 150), "columns_r8": (3, 5, 100), "columns_r16": (2, 16, 130),
              "columns_r32": (1, 29, 300), "columns_s1_c8": (3, 21, 100), "columns_s8_c8": (5, 45, 8),
              "columns_s32_c8": (3, 300, 3), "columns_s1_c4": (3, 21, 100), "columns_s8_c4": (5, 45, 8),
              "columns_s32_c4": (3, 300, 3)}
    params = [pytest.param(g, F32, shapes[g], id=g) for g in COLUMN_GEOMETRIES]
    params += [pytest.param(g, ("float64", "float64"), shapes[g], id=f"{g}-f64") for g in FLOAT64_COLUMN_GEOMETRIES]
    return params


@pytest.mark.parametrize(("geometry", "types", "shape"), _geometry_params())
def test_every_build_with_masks(geometry, types, shape):
    values = fixture(shape, seed=7)
    rng = np.random.default_rng(3)
    values[rng.random(shape) < 0.3] = -np.inf
    values[:, 0, :] = 1.5                    # every column keeps a finite entry ...
    values[0, :, 0] = -np.inf                # ... but this one: no finite entry
    values[0, -1, 1] = 80.0                  # the maximum last: every earlier sum is rescaled
    values[0, :-1, 2] = -np.inf              # the first chunks all -inf: the running sum starts late
    values[0, -1, 2] = 2.0
    x, y, status = run(values, types, ("sliced", "sliced"), geometry=geometry, checked=True)
    expect_columns(x, y, types)
    assert status[0] == STATUS_CLEAR and status[1] == 0
    _, y_unchecked, _ = run(values, types, ("sliced", "outer_step"), geometry=geometry)
    assert np.array_equal(y.view(np.uint8), y_unchecked.view(np.uint8))


# ---- layouts and element types ----------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 7, 33), (2, 100, 5)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_views(layout, shape):
    values = fixture(shape, seed=11)
    x, y, _ = run(values, F32, (layout, "contiguous"))
    expect_columns(x, y)
    _, y_strided, _ = run(values, F32, ("contiguous", layout))  # the same bits into a strided output
    assert np.array_equal(y.view(np.uint32), y_strided.view(np.uint32))


@pytest.mark.parametrize("shape", [(2, 7, 33), (2, 100, 5)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("types", PAIRS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_every_element_type_against_float64(types, shape):
    values = fixture(shape, seed=5)
    values[1, 3, :] = -np.inf
    x, y, status = run(values, types, ("sliced", "inner_step"), checked=True)
    expect_columns(x, y, types)
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS


# ---- checked builds: the first offending position, fully masked columns ------------------------------------

@pytest.mark.parametrize(("geometry", "length"), [("columns_r8", 7), ("columns_s1_c8", 30), ("columns_s8_c8", 45),
                                                  ("columns_s32_c8", 100), (None, 20)])
@pytest.mark.parametrize("types", [F32, ("bfloat16", "bfloat16"), ("float64", "float64")], ids=lambda t: t[0])
def test_checked_build_records_the_first_position(types, geometry, length):
    if types[0] == "float64" and geometry is not None and geometry.endswith("_c8"):
        geometry = geometry.replace("_c8", "_c4")
    outer, inner = 2, 3
    values = fixture((outer, length, inner), seed=length)
    values[0, length - 1, 1] = np.inf        # column 1: +inf last ...
    values[0, length - 3, 1] = np.nan        # ... and a NaN before it (another thread of a split column)
    values[1, 0, 0] = np.nan                 # column 3: a NaN first
    values[1, :, 2] = -np.inf                # column 5: -inf only ...
    values[1, length // 2, 2] = np.nan       # ... but a NaN: recorded, and no finite entry
    x, y, status = run(values, types, ("sliced", "contiguous"), geometry=geometry, checked=True)
    assert status[0] == 1 * length + (length - 3), status
    assert status[1] == 5, status
    rows = to_rows(to_float64(y, types[1]))
    assert np.isnan(rows[[1, 3, 5]]).all()   # NaN and +inf propagate to their columns, as torch.softmax
    keep = np.ones(outer * inner, dtype=bool)
    keep[[1, 3, 5]] = False
    expect_columns_rows = check_matrix(to_rows(y)[keep], to_rows(x)[keep], types)
    assert expect_columns_rows.passed, expect_columns_rows.describe()
    _, y_unchecked, _ = run(values, types, ("sliced", "contiguous"), geometry=geometry)
    assert np.array_equal(y.view(np.uint8), y_unchecked.view(np.uint8))


def test_a_single_finite_entry_gets_weight_exactly_one():
    values = np.full((2, 50, 3), -np.inf)
    values[:, 17, :] = -3.5
    for geometry in ("columns_s1_c8", "columns_s8_c8", None):
        _, y, _ = run(values, geometry=geometry)
        assert (y[:, 17, :] == 1).all() and (np.delete(y, 17, axis=1) == 0).all()


# ---- the table and the launchers' checks ------------------------------------------------------------------

def test_the_table_picks_registers_then_splits_by_column_count():
    assert column_geometry(10**6, 1) == "columns_r4" and column_geometry(1, 8) == "columns_r8"
    assert column_geometry(5, 32) == "columns_r32" and column_geometry(5, 33) == "columns_s32_c8"
    assert column_geometry(4096, 1000) == "columns_s8_c8" and column_geometry(65536, 33) == "columns_s1_c8"
    assert column_geometry(10, 9, float64=True) == "columns_s32_c4"
    assert column_geometry(10**5, 8, float64=True) == "columns_r8"
    for name in COLUMN_GEOMETRIES + FLOAT64_COLUMN_GEOMETRIES:
        assert ColumnGeometry.parse(name).name == name


def test_bad_arguments_are_named():
    x = np.zeros((2, 8, 4), np.float32)
    with pytest.raises(ValueError, match="x: expected a 3-D array .outer, length, inner."):
        column_launches(np.zeros((8, 4), np.float32), np.zeros((8, 4), np.float32))
    with pytest.raises(ValueError, match="x and y must have one shape"):
        column_launches(x, np.zeros((2, 8, 5), np.float32))
    skewed = np.lib.stride_tricks.as_strided(np.zeros(100, np.float32), (2, 8, 4), (130, 16, 4))
    with pytest.raises(ValueError, match="x: strides .130, 16, 4. .bytes. are not whole numbers of elements"):
        column_launches(skewed, x)
    with pytest.raises(ValueError, match="y: a bfloat16 array is stored as uint16"):
        column_launches(x, x.copy(), types=("float32", "bfloat16"))
    with pytest.raises(ValueError, match="column too long for geometry columns_r4: 8 positions > 4"):
        geometry_column_launches("columns_r4", x, x.copy())
    with pytest.raises(ValueError, match="unknown column geometry 'columns_q4'"):
        geometry_column_launches("columns_q4", x, x.copy())
    with pytest.raises(ValueError, match="needs both status"):
        column_launches(x, x.copy(), np.zeros(2, np.int64))
    launch, = column_launches(x, x.copy())
    assert launch.name == "auto_columns_r8" and launch.grid == (1,) and launch.block == (256,)
    launch, = column_launches(np.zeros((3, 50, 1000), np.float32), np.zeros((3, 50, 1000), np.float32))
    assert launch.name == "auto_columns_s32_c8" and launch.grid == (375,)  # 3000 columns, 8 per block
    # inner == 1, unit strides along length: the columns are rows, and the row kernels run them.
    rows = np.zeros((4, 1000, 1), np.float32)
    launch, = column_launches(rows, rows.copy())
    assert launch.name.startswith("auto_rows") and launch.args[0].shape == (4, 1000)
    launch, = column_launches(rows, np.zeros((4, 1000, 2), np.float32)[:, :, :1])
    assert launch.name == "auto_columns_s32_c8"  # y's positions two elements apart: the column kernel


# ---- negative control: a column without its last position -------------------------------------------------

@pytest.mark.parametrize("geometry", ["columns_r8", "columns_s8_c8"])
def test_negative_control_a_column_without_its_last_position_is_rejected(geometry):
    shape = (2, 8 if geometry == "columns_r8" else 45, 5)
    values = fixture(shape, seed=2)
    x, y, _ = run(values, geometry=geometry, kernel=short_column_control_kernel(geometry))
    assert np.isnan(y[:, -1, :]).all()       # never written
    with pytest.raises(AssertionError, match="finite and non-negative: False"):
        expect_columns(x, y)
    _, y_real, _ = run(values, geometry=geometry)
    expect_columns(x, y_real)


# ---- what only a GPU has ----------------------------------------------------------------------------------

@GPU_ONLY
@pytest.mark.parametrize("shape", [(64, 500, 1024), (16, 33, 4096), (4, 100003, 3), (1, 3, 1 << 20),
                                   (2, 20000, 100), (1000, 64, 7)], ids=lambda s: "x".join(map(str, s)))
def test_wide_grids_on_the_gpu(shape):
    values = fixture(shape, seed=1)
    values[0, ::7, 0] = -np.inf
    x, y, status = run(values, F32, ("sliced", "contiguous"), checked=True)
    expect_columns(x, y)
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS


@skip_on_cudasim("no driver to report registers and local memory")
def test_every_build_holds_its_values_in_registers(evidence):
    """No local memory beyond the geometry's spill budget for every float32 and bfloat16 build, checked or not."""
    records, spilled = [], []
    for types in (F32, ("bfloat16", "bfloat16")):
        for name in COLUMN_GEOMETRIES:
            length = ColumnGeometry.parse(name).max_length or 100
            dtype = STORAGE_DTYPES[types[0]]
            for checked in (False, True):
                status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64)) if checked else None
                alarm = cuda.to_device(np.zeros(1, dtype=np.int32)) if checked else None
                launches = geometry_column_launches(name, cuda.device_array((2, length, 3), dtype),
                                                    cuda.device_array((2, length, 3), dtype), status, alarm, types)
                found = invocation(f"{name}-{types[0]}-{checked}", launches).kernel_resources()
                budget = ColumnGeometry.parse(name).spill_budget
                spilled += [r for r in found if r["local_bytes_per_thread"] > budget]
                records += found
    evidence["column_kernel_resources"] = records
    assert not spilled, spilled


def test_the_process_runs_the_backend_its_half_names(backend_name):
    assert SIMULATOR == (backend_name == "sim")
