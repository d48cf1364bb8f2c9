"""method="auto" kernels (numba_softmax/kernels/auto_*.py), in the simulator and on a GPU, against float64.

The simulator runs every geometry's logic on a few rows: each width of the table up to 4096 columns (one fixture
family), the wider geometries' code with 64 lanes (a block of 512 threads is as many Python threads there), the
narrow and packed candidates, the long-row path in small chunks. A GPU runs more rows, both families, the wide
geometries themselves, every candidate, the vector builds, rows of 262,144 columns and the long-row perf shapes,
and reports each build's registers and local memory."""

import numpy as np
import pytest
from backends import skip_on_cudasim
from numba import cuda, float32

from numba_softmax.backend import SIMULATOR, invocation, run_launches
from numba_softmax.element_types import STORAGE_DTYPES
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_controls import cluster_control_kernel, shared_span_control_kernel
from numba_softmax.kernels.auto_geometry import (AUTO_TABLE, BODY_TABLE_FROM, CANDIDATE_GEOMETRIES, FLOAT64_LONG,
                                                 TABLE_GEOMETRIES, Geometry, auto_geometry, spill_budget,
                                                 table_geometry)
from numba_softmax.kernels.auto_launch import auto_launches, check_launches, geometry_launches
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import KERNEL_OPTIONS, NEG_INF, f32_add, f32_div, f32_exp, f32_max, f32_sub
from numba_softmax.oracle import check_matrix
from numba_softmax.validation import STATUS_CLEAR, STATUS_WORDS, status_error

GPU_ONLY = skip_on_cudasim("too slow for the simulator (one Python thread per CUDA thread); a GPU runs it")
CLUSTERS_ON_GPU = skip_on_cudasim("thread block clusters (distributed shared memory, cluster barriers) need a GPU")
COPY_ENGINE_ON_GPU = skip_on_cudasim("a row geometry with quads in shared memory needs the copy engine of a GPU")
#: Lanes of the simulator's stand-ins for the table's rows geometries above 128 lanes (see
#: test_wide_geometry_code_with_fewer_lanes).
STAND_IN_LANES = 64
FEWER_LANES_IN_SIM = skip_on_cudasim(f"a block of 512 or 1024 threads (as many Python threads); the simulator runs "
                                     f"the same kernel code with {STAND_IN_LANES} lanes "
                                     "(test_wide_geometry_code_with_fewer_lanes)")
ONE_FAMILY_IN_SIM = skip_on_cudasim("the simulator runs each width with one family (offset); a GPU runs both")
#: Rows per test matrix: a few in the simulator; on a GPU enough that narrow geometries fill several
#: blocks and leave a partial last block (67 is no multiple of any rows-per-block).
ROWS = 3 if SIMULATOR else 67

#: Every boundary of the table, one either side, and non-multiples of 4 (the scalar builds).
WIDTHS = (1, 2, 3, 4, 7, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513, 1023,
          1024, 1025)
#: The same for the block-per-row widths, with one fixture family (each costs seconds in the simulator).
BLOCK_WIDTHS = (2047, 2048, 2049, 4095, 4096, 4097)
#: Wider rows, on a GPU: the table's geometries of 512 and 1024 lanes (their code runs in the simulator with
#: STAND_IN_LANES lanes), then the long-row path (it runs in the simulator with small blocks and chunks).
WIDE = (8192, 8193, 16385)
GPU_WIDE_TABLE = (8191, 16383, 16384)
GPU_WIDE = (32767, 32768, 32769, 32772, 65536, 100003, 131068, 131072)


def _many_lanes(width):
    """The table's geometry for this width is a rows geometry of more than 128 lanes."""
    geometry = Geometry.parse(auto_geometry(width))
    return geometry.kind == "rows" and geometry.lanes > 128


def _param(width, gpu_only=False):
    marks = FEWER_LANES_IN_SIM if _many_lanes(width) else GPU_ONLY if gpu_only else ()
    return pytest.param(width, id=str(width), marks=marks)


def _table_params():
    """WIDTHS in both families, BLOCK_WIDTHS in one; the simulator runs one family and none of the table's
    geometries above 128 lanes (their code runs there in test_wide_geometry_code_with_fewer_lanes)."""
    params = [pytest.param(w, f, id=f"{w}-{f}", marks=ONE_FAMILY_IN_SIM if f == "random" else ())
              for w in WIDTHS for f in ("random", "offset")]
    return params + [pytest.param(w, "offset", id=f"{w}-offset", marks=FEWER_LANES_IN_SIM if _many_lanes(w) else ())
                     for w in BLOCK_WIDTHS]


def _device(x):
    return cuda.to_device(x)


def _status():
    return (cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64)),
            cuda.to_device(np.zeros(1, dtype=np.int32)))


def run(x, geometry=None, checked=False):
    """softmax(x) through one geometry (None: the table's); y starts as NaN so that a value not written
    shows. Returns (y, status words, alarm) on the host (status and alarm None when unchecked)."""
    d_x = _device(x)
    d_y = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
    status, alarm = _status() if checked else (None, None)
    launches = (auto_launches(d_x, d_y, status, alarm) if geometry is None
                else geometry_launches(geometry, d_x, d_y, status, alarm))
    with np.errstate(invalid="ignore", over="ignore"):  # the simulator computes on the host: -inf - -inf
        run_launches(launches)
    if not checked:
        return d_y.copy_to_host(), None, None
    return d_y.copy_to_host(), status.copy_to_host(), alarm.copy_to_host()


def expect_softmax(y, x):
    """y is softmax(x) as torch defines it: within the oracle's tolerance on every row with a finite entry,
    exactly 0 where x is -inf, and NaN on every row without a finite entry."""
    has_finite = np.isfinite(x).any(axis=1)
    assert np.isnan(y[~has_finite]).all(), "a row without a finite entry must give NaN"
    if has_finite.any():
        result = check_matrix(y[has_finite], x[has_finite])
        assert result.passed, result.describe()
        masked = np.isneginf(x) & has_finite[:, None]
        assert (y[masked] == 0).all(), f"-inf got a nonzero weight at {np.argwhere(masked & (y != 0))[:4]}"


def with_masks(x, seed, fraction=0.3):
    """x with about ``fraction`` of its entries -inf, every row keeping at least one finite entry."""
    rng = np.random.default_rng(seed)
    x = x.copy()
    x[rng.random(x.shape) < fraction] = -np.inf
    keep = rng.integers(0, x.shape[1], size=x.shape[0])
    x[np.arange(x.shape[0]), keep] = np.float32(rng.standard_normal())
    return x


# ---- the table against float64 ----------------------------------------------------------------------------

@pytest.mark.parametrize(("width", "family"), _table_params())
def test_auto_against_float64(width, family):
    x = matrix_fixture(family, (ROWS, width))
    y, _, _ = run(x)
    expect_softmax(y, x)
    # The checked build gives the same bits and records nothing on a clean input.
    y_checked, status, alarm = run(x, checked=True)
    assert np.array_equal(y.view(np.uint32), y_checked.view(np.uint32))
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS and alarm[0] == 0


@pytest.mark.parametrize("width", [_param(w) for w in WIDE]
                         + [_param(w, gpu_only=True) for w in GPU_WIDE_TABLE + GPU_WIDE])
def test_wide_rows_against_float64(width):
    x = with_masks(matrix_fixture("offset", (ROWS, width)), seed=width, fraction=0.1)
    y, _, _ = run(x)
    expect_softmax(y, x)


def _stand_in_params():
    """The rows geometries with STAND_IN_LANES lanes and the quads of each table geometry above 128 lanes."""
    stand_ins = sorted({Geometry("rows", STAND_IN_LANES, g.quads).name for g in map(Geometry.parse, TABLE_GEOMETRIES)
                        if g.kind == "rows" and g.lanes > 128})
    params = []
    for name in stand_ins:
        full = Geometry.parse(name).max_columns
        # The full row, a partial last quad, and one column past half (lane 0 alone holds a value in the upper
        # quads: the table's first width of rows_l256_q8, rows_l512_q8 and rows_l1024_q8, scaled down).
        params += [pytest.param(name, w, id=f"{name}-{w}") for w in (full, full - 1, full // 2 + 1)]
    return params


@pytest.mark.parametrize(("geometry", "width"), _stand_in_params())
def test_wide_geometry_code_with_fewer_lanes(geometry, width):
    """The table's rows geometries of 512 and 1024 lanes run on a GPU only (test_wide_rows_against_float64):
    their kernel is the rows kernel with more lanes than a warp (one row per block, the warps' partials in
    shared memory) and the same quads per thread, so with STAND_IN_LANES lanes the simulator runs the same
    code on the same pattern of full, partial and empty quads."""
    x = with_masks(matrix_fixture("offset", (1 if SIMULATOR else ROWS, width)), seed=width, fraction=0.1)
    y, _, _ = run(x, geometry)
    expect_softmax(y, x)


@GPU_ONLY
def test_262144_columns_against_float64():
    """The longest row asked for, four rows, checked and unchecked. GPU only: one such row took over ten
    minutes in the simulator (1024 Python threads per block); the simulator runs the same long-row code
    with small blocks and chunks (test_long_path_crosses_chunks)."""
    x = matrix_fixture("random", (4, 262144))
    x[0, ::7] = -np.inf
    assert auto_geometry(262144) == "cluster_l512_q8_c8_s8"
    y, _, _ = run(x)
    expect_softmax(y, x)
    if not SIMULATOR:
        y_checked, status, alarm = run(x, checked=True)
        assert np.array_equal(y.view(np.uint32), y_checked.view(np.uint32))
        assert list(status) == [STATUS_CLEAR] * STATUS_WORDS and alarm[0] == 0


@GPU_ONLY
@pytest.mark.parametrize("shape", [(3, 262143), (4096, 32768), (1024, 131072)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_long_row_shapes_on_the_gpu(shape):
    x = matrix_fixture("offset", shape)
    y, _, _ = run(x)
    expect_softmax(y, x)


def test_the_table_covers_every_width_once():
    limits = [limit for limit, _ in AUTO_TABLE]
    assert limits[-1] is None and limits[:-1] == sorted(limits[:-1]) and table_geometry(10**7) == AUTO_TABLE[-1][1]
    for limit, name in AUTO_TABLE[:-1]:  # as a backward reads it (a forward's own entries: FORWARD_TABLE)
        geometry = Geometry.parse(name)
        if geometry.kind in ("rows", "cluster"):
            assert geometry.max_columns == limit, name
        last = limit + 3 if limit >= BODY_TABLE_FROM else limit  # float32 rows whose body fits (test_auto_layouts)
        assert [table_geometry(w, inputs=2) == name for w in (limit, last, last + 1)] == [True, True, False], name


def test_a_gpu_only_entry_gives_way_in_the_simulator_and_float64_has_its_own_geometries():
    """Cluster and copy-engine geometries run on a GPU only: the simulator takes the long-row path instead.
    Rows with a float64 side hold at most two quads per thread."""
    assert table_geometry(131072) == "cluster_l512_q8_c4_s8"
    assert auto_geometry(131072) == (AUTO_TABLE[-1][1] if SIMULATOR else "cluster_l512_q8_c4_s8")
    assert auto_geometry(32768) == (AUTO_TABLE[-1][1] if SIMULATOR else "rows_l512_q8_s8")
    assert auto_geometry(4096, ("float64",) * 2) == "rows_l512_q2"
    assert auto_geometry(512, ("float64",) * 2) == "rows_l64_q2"
    assert auto_geometry(16384, ("float64",) * 2) == auto_geometry(131072, ("float64",) * 2) == FLOAT64_LONG
    for limit, name in AUTO_TABLE[:-1]:
        geometry = Geometry.parse(auto_geometry(limit, ("float64",) * 2))
        assert geometry.quads <= 2 and (geometry.max_columns is None or geometry.max_columns >= limit), name


# ---- every candidate geometry -----------------------------------------------------------------------------

def _candidate_params():
    params = []
    for name in CANDIDATE_GEOMETRIES:
        geometry = Geometry.parse(name)
        if geometry.shared_quads:
            # Full, one quad short, one quad into the (first CTA's) shared span, no shared span at all, and for
            # a cluster one quad into the second CTA's columns (16-byte rows only).
            registers = 4 * geometry.lanes * geometry.quads
            widths = (geometry.max_columns, geometry.max_columns - 4, registers + 4, registers - 4)
            if geometry.ctas > 1:
                widths += (geometry.max_columns // geometry.ctas + 4,)
            params += [pytest.param(name, w, id=f"{name}-{w}", marks=COPY_ENGINE_ON_GPU) for w in widths]
            continue
        if geometry.kind == "cluster":
            # Full, one quad short, and one quad into the second CTA's columns (the others hold only -inf).
            cta = geometry.max_columns // geometry.ctas
            params += [pytest.param(name, w, id=f"{name}-{w}", marks=CLUSTERS_ON_GPU)
                       for w in (geometry.max_columns, geometry.max_columns - 4, cta + 4)]
            continue
        if geometry.kind in ("rows", "narrow") or geometry.packed_widths:  # full, one short, a misaligned middle
            full = geometry.max_columns  # (1 if narrow; packed: every width it takes)
            widths = geometry.packed_widths or sorted(
                {full, full - 1, min(full // 2 + 3, full)} | ({1} if full <= 8 else set()), reverse=True)
        else:
            chunk = 4 * geometry.lanes * geometry.quads
            widths = (2 * chunk, 3 * chunk + 5)
        # The simulator runs the narrow ones; the wider ones' geometries run there through the table's tests.
        slow = geometry.lanes >= 512 or max(widths) > 1100
        params += [pytest.param(name, w, id=f"{name}-{w}", marks=GPU_ONLY if slow else ()) for w in widths]
    return params


@pytest.mark.parametrize(("geometry", "width"), _candidate_params())
def test_candidate_geometry_against_float64(geometry, width):
    x = with_masks(matrix_fixture("random", (ROWS, width)), seed=width)
    y, status, alarm = run(x, geometry, checked=True)
    expect_softmax(y, x)
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS and alarm[0] == 0


def test_a_rows_geometry_refuses_a_row_it_cannot_hold():
    x = np.zeros((2, 132), dtype=np.float32)
    with pytest.raises(ValueError, match=r"rows_l32_q1: 132 columns of float32 \(132 of them in its body\) > 128"):
        geometry_launches("rows_l32_q1", x, x.copy())
    with pytest.raises(ValueError, match="unknown auto geometry 'rows_32'"):
        geometry_launches("rows_32", x, x.copy())
    with pytest.raises(ValueError, match="lanes must be a power of two"):
        geometry_launches("rows_l24_q1", x, x.copy())
    with pytest.raises(ValueError, match="quads must be 1 to 8"):
        geometry_launches("long_l32_q9", x, x.copy())
    with pytest.raises(ValueError, match="a cluster holds 2 to 8 CTAs"):
        geometry_launches("cluster_l512_q8_c16", x, x.copy())
    with pytest.raises(ValueError, match="a cluster holds 2 to 8 CTAs .* of more than 32 lanes"):
        geometry_launches("cluster_l32_q8_c2", x, x.copy())
    with pytest.raises(ValueError, match="only a cluster geometry spreads a row"):
        Geometry("rows", 512, 8, 2)
    assert Geometry.parse("cluster_l512_q8_c2").max_columns == 32768
    assert Geometry.parse("rows_l512_q8_s8").max_columns == 32768
    assert Geometry.parse("rows_l512_q8_s8").shared_bytes == 65536
    with pytest.raises(ValueError, match="quads in shared memory .* are for a rows or cluster geometry of more than "
                                         "32 lanes"):
        geometry_launches("rows_l32_q8_s8", x, x.copy())
    with pytest.raises(ValueError, match="quads in shared memory"):
        geometry_launches("long_l512_q8_s8", x, x.copy())
    assert Geometry.parse("cluster_l1024_q8_c2_s8").max_columns == 131072
    with pytest.raises(ValueError, match="unknown auto geometry 'rows_l512_q8_x8'"):
        geometry_launches("rows_l512_q8_x8", x, x.copy())


@CLUSTERS_ON_GPU
def test_a_cluster_geometry_refuses_a_row_it_cannot_hold():
    wide = cuda.device_array((2, 32772), np.float32)
    with pytest.raises(ValueError, match=r"cluster_l512_q8_c2: 32772 columns of float32 \(32772 of them in its body\)"):
        geometry_launches("cluster_l512_q8_c2", wide, cuda.device_array((2, 32772), np.float32))


@CLUSTERS_ON_GPU
@pytest.mark.parametrize("geometry", ["cluster_l512_q8_c2", "cluster_l1024_q8_c4"])
def test_cluster_records_and_masks_across_its_ctas(geometry):
    """The first non-finite value in a later CTA's columns, a row whose second CTA holds only -inf and a
    row with no finite entry, through the checked build: records, NaN rows and exact zeros as the rows kernels."""
    g = Geometry.parse(geometry)
    cta = g.max_columns // g.ctas
    width = g.max_columns
    x = matrix_fixture("random", (ROWS, width))
    x[1, cta:] = -np.inf                     # CTA 1 has no finite value: its sum is 0, its outputs exactly 0
    x[2, cta + 5] = np.nan                   # the first offending value, in CTA 1's columns
    x[2, width - 1] = np.inf
    x[3, :] = -np.inf                        # no finite entry anywhere in the cluster
    y, status, alarm = run(x, geometry, checked=True)
    assert status[0] == 2 * width + cta + 5 and status[1] == 3 and alarm[0] == 1
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()
    keep = np.ones(ROWS, dtype=bool)
    keep[[2, 3]] = False
    expect_softmax(y[keep], x[keep])


@COPY_ENGINE_ON_GPU
@pytest.mark.parametrize("geometry", ["rows_l256_q8_s8", "rows_l512_q8_s8", "cluster_l256_q8_c2_s8"])
def test_shared_span_records_and_masks(geometry):
    """The first non-finite value in the shared span, a row whose shared span holds only -inf, a row with no
    finite entry and one whose only finite entry is in the span, through the checked build."""
    g = Geometry.parse(geometry)
    registers = 4 * g.lanes * g.quads
    width = g.max_columns
    x = matrix_fixture("random", (ROWS, width))
    x[1, registers:] = -np.inf               # the span's values get weight exactly 0
    x[2, registers + 4 * g.lanes + 5] = np.nan   # the first offending value: a thread's second shared quad
    x[2, width - 1] = np.inf
    x[3, :] = -np.inf                        # no finite entry
    x[4, :] = -np.inf
    x[4, width - 2] = np.float32(3.0)        # the one finite entry, in the span: weight exactly 1
    y, status, alarm = run(x, geometry, checked=True)
    assert status[0] == 2 * width + registers + 4 * g.lanes + 5 and status[1] == 3 and alarm[0] == 1
    assert np.isnan(y[2]).all() and np.isnan(y[3]).all()
    assert y[4, width - 2] == 1.0 and not y[4, :width - 2].any() and y[4, width - 1] == 0.0
    keep = np.ones(ROWS, dtype=bool)
    keep[[2, 3]] = False
    expect_softmax(y[keep], x[keep])
    y_unchecked, _, _ = run(x, geometry)
    assert np.array_equal(y.view(np.uint32), y_unchecked.view(np.uint32))


# ---- the long-row path's chunks, cheaply: small blocks, small chunks --------------------------------------

SMALL_LONG = ("long_l32_q1", "long_l64_q2")   # chunks of 128 and 512 columns


@pytest.mark.parametrize("geometry", SMALL_LONG)
@pytest.mark.parametrize("width", [1, 5, 127, 128, 129, 1000, 1031])
def test_long_path_crosses_chunks(geometry, width):
    x = matrix_fixture("offset", (ROWS, width))
    if width > 200:
        x[0, :200] = -np.inf          # the first chunk(s) all -inf: the running sum starts late
        x[1, -3:] = np.float32(80.0)  # the maximum in the last chunk: every earlier sum is rescaled
    y, _, _ = run(x, geometry)
    expect_softmax(y, x)


@pytest.mark.parametrize("geometry", [None, *SMALL_LONG])
def test_nonfinite_recorded_at_the_first_row_and_column(geometry):
    width = 700
    x = matrix_fixture("random", (ROWS, width))
    x[ROWS - 1, 650] = np.nan
    x[ROWS - 1, 433] = np.inf
    x[ROWS - 1, 9] = -np.inf        # a mask, not an error
    x[ROWS - 2, 5] = np.nan
    y, status, alarm = run(x, geometry, checked=True)
    assert status[0] == (ROWS - 2) * width + 5 and status[1] == STATUS_CLEAR and alarm[0] == 1
    assert status_error(status, x.shape) == \
        f"input has a non-finite value (NaN or infinity) at row {ROWS - 2}, column 5"
    # check=False: the same outputs, NaN and +inf propagate to their rows (as torch.softmax), others are right.
    y_unchecked, _, _ = run(x, geometry)
    assert np.array_equal(y.view(np.uint32), y_unchecked.view(np.uint32))
    assert np.isnan(y[ROWS - 2:]).all()
    expect_softmax(y[:ROWS - 2], x[:ROWS - 2])


@pytest.mark.parametrize("geometry", [None, "rows_l16_q1", "rows_l32_q2", *SMALL_LONG])
@pytest.mark.parametrize("pattern", ["inf alone", "nan alone", "nan among -inf", "all nan", "two lanes"])
def test_every_kind_of_bad_row_is_caught_by_the_row_test(geometry, pattern):
    """The row and cluster kernels test a row once, on its sum; each way a row can go wrong makes that sum
    NaN, and the error path names the first offending column (the smallest of several threads' findings)."""
    width = 61
    x = matrix_fixture("random", (ROWS, width))
    row = ROWS // 2
    expect_column, expect_masked = {"inf alone": (17, False), "nan alone": (40, False),
                                    "nan among -inf": (23, True), "all nan": (0, True),
                                    "two lanes": (6, False)}[pattern]
    if pattern == "inf alone":
        x[row, 17] = np.inf
    elif pattern == "nan alone":
        x[row, 40] = np.nan
    elif pattern == "nan among -inf":
        x[row] = -np.inf
        x[row, 23] = np.nan
    elif pattern == "all nan":
        x[row] = np.nan
    else:  # columns held by different threads of the row; the smaller wins
        x[row, 57] = np.nan
        x[row, 6] = np.inf
    y, status, alarm = run(x, geometry, checked=True)
    assert alarm[0] == 1 and status[0] == row * width + expect_column, (status, pattern)
    assert status[1] == (row if expect_masked else STATUS_CLEAR)
    y_unchecked, _, _ = run(x, geometry)
    assert np.array_equal(y.view(np.uint32), y_unchecked.view(np.uint32))
    others = np.arange(ROWS) != row
    expect_softmax(y[others], x[others])


@pytest.mark.parametrize("geometry", [None, "rows_l8_q1", *SMALL_LONG])
@pytest.mark.parametrize("width", [3, 40, 300])
def test_masks_weight_zero_and_fully_masked_rows(geometry, width):
    if geometry is not None and geometry.startswith("rows") and width > Geometry.parse(geometry).max_columns:
        pytest.skip(f"{geometry} holds rows of up to {Geometry.parse(geometry).max_columns} columns")
    x = with_masks(matrix_fixture("random", (ROWS, width)), seed=width)
    x[ROWS - 1] = -np.inf           # no finite entry
    y, _, _ = run(x, geometry)
    expect_softmax(y, x)            # that row NaN, -inf elsewhere exactly 0
    y_checked, status, alarm = run(x, geometry, checked=True)
    assert status[0] == STATUS_CLEAR and status[1] == ROWS - 1 and alarm[0] == 1
    assert np.array_equal(y.view(np.uint32), y_checked.view(np.uint32))
    assert status_error(status, x.shape).startswith(f"input row {ROWS - 1} has no finite entry")


def test_a_single_finite_entry_gets_weight_exactly_one():
    x = np.full((ROWS, 37), -np.inf, dtype=np.float32)
    x[:, 11] = np.float32(-3.5)
    y, _, _ = run(x)
    assert (y[:, 11] == 1).all() and (np.delete(y, 11, axis=1) == 0).all()


# ---- the check-only pass ----------------------------------------------------------------------------------

@pytest.mark.parametrize("width", [7, 256, 1030])
def test_check_pass_records_and_writes_nothing_else(width):
    x = matrix_fixture("random", (ROWS, width))
    x[ROWS - 1, width - 1] = -np.inf
    x[ROWS - 2] = -np.inf
    d_x = _device(x)
    for allow_neg_inf, expected in ((True, [STATUS_CLEAR, ROWS - 2]), (False, [(ROWS - 2) * width, STATUS_CLEAR])):
        status, alarm = _status()
        run_launches(check_launches(d_x, status, alarm, allow_neg_inf))
        assert list(status.copy_to_host()) == expected and alarm.copy_to_host()[0] == 1, allow_neg_inf
    assert np.array_equal(d_x.copy_to_host().view(np.uint32), x.view(np.uint32))
    x[ROWS - 1, 3] = np.nan
    status, alarm = _status()
    run_launches(check_launches(_device(x), status, alarm, True))
    assert list(status.copy_to_host()) == [(ROWS - 1) * width + 3, ROWS - 2]
    clean = matrix_fixture("offset", (ROWS, width))
    status, alarm = _status()
    run_launches(check_launches(_device(clean), status, alarm, False))
    assert list(status.copy_to_host()) == [STATUS_CLEAR] * STATUS_WORDS and alarm.copy_to_host()[0] == 0


def test_status_error_messages():
    clear = np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64)
    assert status_error(clear, (4, 10)) is None
    assert status_error(np.array([23, STATUS_CLEAR]), (4, 10), "x") == \
        "x has a non-finite value (NaN or infinity) at row 2, column 3"
    assert status_error(np.array([STATUS_CLEAR, 3]), (4, 10)).startswith("input row 3 has no finite entry")
    with pytest.raises(ValueError, match="expected 2 words"):
        status_error(np.zeros(3, np.int64), (4, 10))


def test_bad_arguments_are_named():
    x = np.zeros((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="x: element type int32 is not float32, float16 or float64"):
        auto_launches(np.zeros((4, 8), np.int32), x)
    with pytest.raises(ValueError, match="y: expected one element .4 bytes. between columns, got a column stride "
                                         "of 8 bytes"):
        auto_launches(x, np.zeros((4, 16), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="y: a bfloat16 array is stored as uint16, got float32"):
        auto_launches(x, x.copy(), types=("float32", "bfloat16"))
    with pytest.raises(ValueError, match="types: expected .in_type, out_type. from"):
        auto_launches(x, x.copy(), types=("float32", "int8"))
    with pytest.raises(ValueError, match="x and y must have one shape"):
        auto_launches(x, np.zeros((4, 9), np.float32))
    with pytest.raises(ValueError, match="status: expected int64"):
        auto_launches(x, x.copy(), np.zeros(2, np.int32), np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="needs both status"):
        auto_launches(x, x.copy(), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="at least one row and one column"):
        auto_launches(np.zeros((0, 8), np.float32), np.zeros((0, 8), np.float32))
    # A dimension of length 1 is never stepped over: any stride there is contiguous enough.
    one_row = np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (1, 8), (4, 4))
    assert auto_launches(one_row, np.zeros((1, 8), np.float32))[0].grid == (1,)


# ---- negative controls: wrong kernels the checks above must reject ----------------------------------------

DROP_TAIL, MASK_LEAK = 1, 2


@cuda.jit(**KERNEL_OPTIONS)
def _wrong_softmax(x, y, mode):
    """One thread per row. DROP_TAIL: the last partial quad is neither read nor written (what a vector
    build that forgot the tail would do). MASK_LEAK: -inf counts as max - 20, a weight of about 2e-9 --
    inside the oracle's absolute tolerance, so only the exact-zero test catches it."""
    row = cuda.grid(1)
    if row >= x.shape[0]:
        return
    cols = x.shape[1]
    used = cols - cols % 4 if mode == DROP_TAIL else cols
    m = NEG_INF
    for c in range(used):
        m = f32_max(m, x[row, c])
    s = float32(0.0)
    for c in range(used):
        v = x[row, c]
        if mode == MASK_LEAK and v == NEG_INF:
            v = f32_sub(m, float32(20.0))
        s = f32_add(s, f32_exp(f32_sub(v, m)))
    for c in range(used):
        v = x[row, c]
        if mode == MASK_LEAK and v == NEG_INF:
            v = f32_sub(m, float32(20.0))
        y[row, c] = f32_div(f32_exp(f32_sub(v, m)), s)


def _run_wrong(x, mode):
    d_y = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
    run_launches([KernelLaunch("wrong_softmax", _wrong_softmax, ((x.shape[0] + 31) // 32,), (32,),
                               (_device(x), d_y, mode))])
    return d_y.copy_to_host()


def test_negative_control_dropping_the_last_partial_quad_is_rejected():
    x = matrix_fixture("random", (ROWS, 130))
    with pytest.raises(AssertionError, match="failed|finite and non-negative: False"):
        expect_softmax(_run_wrong(x, DROP_TAIL), x)


def test_negative_control_giving_minus_inf_a_weight_is_rejected():
    x = with_masks(matrix_fixture("random", (ROWS, 64)), seed=1)
    y = _run_wrong(x, MASK_LEAK)
    assert check_matrix(y, x).passed  # the tolerance alone would accept it ...
    with pytest.raises(AssertionError, match="-inf got a nonzero weight"):
        expect_softmax(y, x)          # ... the exact-zero test does not


@CLUSTERS_ON_GPU
def test_negative_control_a_cluster_without_its_exchange_is_rejected():
    """Each CTA of a 2-CTA cluster normalizing its own half of the row: every row sums to about 2, which the
    oracle must reject; the same launch through the real build passes."""
    x = matrix_fixture("random", (ROWS, 32768))
    d_y = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
    launch, = geometry_launches("cluster_l512_q8_c2", _device(x), d_y)
    run_launches([KernelLaunch("control", cluster_control_kernel(), launch.grid, launch.block, launch.args,
                               cluster=launch.cluster)])
    y = d_y.copy_to_host()
    assert np.allclose(y.astype(np.float64).sum(axis=1), 2.0, rtol=1e-3)
    result = check_matrix(y, x)
    assert not result.passed and result.max_row_sum_err == pytest.approx(1.0, abs=1e-3), result.describe()
    expect_softmax(run(x, "cluster_l512_q8_c2")[0], x)


@COPY_ENGINE_ON_GPU
@pytest.mark.parametrize("geometry", ["rows_l512_q8_s8", "cluster_l256_q8_c2_s8"])
def test_negative_control_a_shared_span_copied_from_the_register_columns_is_rejected(geometry):
    """The bulk copy filling each CTA's shared span from its register columns instead: the span's columns
    get the register columns' weights, so every row still sums to 1 (its sum counts each register value
    twice, and so do its outputs) and only the element-wise comparison can reject it; the same launch
    through the real build passes."""
    g = Geometry.parse(geometry)
    registers = 4 * g.lanes * g.quads
    x = matrix_fixture("random", (ROWS, g.max_columns))
    d_y = cuda.to_device(np.full(x.shape, np.nan, dtype=np.float32))
    launch, = geometry_launches(geometry, _device(x), d_y)
    run_launches([KernelLaunch("control", shared_span_control_kernel(geometry), launch.grid, launch.block,
                               launch.args, shared_bytes=launch.shared_bytes, cluster=launch.cluster)])
    y = d_y.copy_to_host()
    span = x.shape[1] // g.ctas  # each CTA's columns: the register ones, then the span
    first = y[:, :span]
    assert np.array_equal(first[:, registers:], first[:, :registers])  # the span repeats the register columns
    result = check_matrix(y, x)
    assert not result.passed and result.max_row_sum_err < 1e-4, result.describe()
    expect_softmax(run(x, geometry)[0], x)


# ---- what only a GPU has ----------------------------------------------------------------------------------

#: The register test's builds (float32 candidates, bfloat16 table, float64), one test each: workers share them.
REGISTER_PLAN = ([(name, ("float32", "float32")) for name in CANDIDATE_GEOMETRIES]
                 + [(name, ("bfloat16", "bfloat16")) for name in TABLE_GEOMETRIES]
                 + [(name, ("float64", "float32"))
                    for name in sorted({auto_geometry(limit, ("float64",) * 2) for limit, _ in AUTO_TABLE[:-1]})])


@skip_on_cudasim("no driver to report registers and local memory")
@pytest.mark.parametrize("checked", [False, True], ids=["unchecked", "checked"])
@pytest.mark.parametrize("name, types", REGISTER_PLAN, ids=[f"{name}-{types[0]}" for name, types in REGISTER_PLAN])
def test_every_build_holds_its_values_in_registers(name, types, checked, evidence):
    """No local memory beyond auto_geometry.spill_budget: float32/bfloat16 candidates, float64 geometries."""
    geometry = Geometry.parse(name)
    cols = geometry.max_columns or 4 * geometry.lanes * geometry.quads * 2
    d_x, d_y = (cuda.device_array((1, cols), STORAGE_DTYPES[t]) for t in types)
    launches = geometry_launches(name, d_x, d_y, *(_status() if checked else (None, None)), types)
    records = invocation(f"{name}-{types[0]}", launches).kernel_resources()
    evidence.setdefault(f"auto_kernel_resources_{'checked' if checked else 'unchecked'}", []).extend(records)
    budget = spill_budget(name, driver=True)  # of this geometry's own kernel; any other launch none
    assert not [r for r in records if r["local_bytes_per_thread"] > (budget if r["launch"] == f"auto_{name}" else 0)]


def test_the_process_runs_the_backend_its_half_names(backend_name):
    assert SIMULATOR == (backend_name == "sim")
