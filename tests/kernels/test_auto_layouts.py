"""method="auto" on the rows users bring: any width, misaligned starts, strided rows, every element type.

Each row is a head (elements before its first 16-byte aligned one), aligned quads and a tail; a slice of a larger
buffer starting at column ``offset``, with ``pad`` more columns per row, gives every row its own alignment.
The same tests run in the simulator (element-by-element quads, the same head / body / tail split) and on a GPU.
"""

import numpy as np
import pytest
from backends import skip_on_cudasim
from numba import cuda

from numba_softmax.backend import SIMULATOR, run_launches
from numba_softmax.element_types import STORAGE_DTYPES, from_float64, to_float64
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_controls import narrow_short_sum_control_kernel, short_tail_control_kernel
from numba_softmax.kernels.auto_geometry import (AUTO_TABLE, BODY_TABLE_FROM, FORWARD_TABLE, NARROW_GEOMETRY,
                                                 PACKED_KIND_WIDTHS, STAGED_KINDS, Geometry, auto_geometry,
                                                 backward_geometry, body_columns, body_unit, group_shape,
                                                 packed_geometry, packs_width, table_geometry)
from numba_softmax.kernels.auto_launch import auto_launches, geometry_launches
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.oracle import check_matrix
from numba_softmax.validation import STATUS_CLEAR, STATUS_WORDS

GPU_ONLY = skip_on_cudasim("too slow for the simulator (one Python thread per CUDA thread); a GPU runs it")
ROWS = 3 if SIMULATOR else 67
#: Every residue of the width mod 8, the narrow geometries' boundaries, and a block-per-row width.
WIDTHS = (1, 2, 3, 5, 6, 7, 12, 13, 14, 15, 16, 17, 70, 517)
TYPE_WIDTHS = (3, 13, 70, 517)
PAIRS = (("bfloat16", "bfloat16"), ("float16", "float16"), ("float64", "float64"), ("float32", "bfloat16"),
         ("bfloat16", "float32"), ("float16", "float64"), ("float64", "float32"))


def strided(values, element_type, offset, pad):
    """A device view of ``values`` (float64, cast to ``element_type``) starting at column ``offset`` of a buffer
    ``offset + pad`` columns wider: rows whose starts are misaligned, each by its own amount."""
    rows, cols = values.shape
    buffer = np.zeros((rows, offset + cols + pad), dtype=STORAGE_DTYPES[element_type])
    buffer[:, offset:offset + cols] = from_float64(values, element_type)
    return cuda.to_device(buffer)[:, offset:offset + cols]


def nan_output(shape, element_type, offset, pad):
    return strided(np.full(shape, np.nan), element_type, offset, pad)


def run(values, types, x_at=(0, 0), y_at=(0, 0), geometry=None, checked=False):
    """softmax of ``values`` as ``types[0]`` placed at x_at = (offset, pad), into a NaN-filled y at y_at.
    Returns (x as the kernel saw it, y, status words or None), on the host, in their storage types."""
    d_x = strided(values, types[0], *x_at)
    d_y = nan_output(values.shape, types[1], *y_at)
    status = alarm = None
    if checked:
        status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
        alarm = cuda.to_device(np.zeros(1, dtype=np.int32))
    launches = (auto_launches(d_x, d_y, status, alarm, types) if geometry is None
                else geometry_launches(geometry, d_x, d_y, status, alarm, types))
    with np.errstate(invalid="ignore", over="ignore"):
        run_launches(launches)
    return d_x.copy_to_host(), d_y.copy_to_host(), None if status is None else status.copy_to_host()


def expect_softmax(x, y, types):
    """y is softmax(x) of ``types``: the oracle's tolerance on rows with a finite entry, exactly 0 at -inf, NaN on
    rows without a finite entry."""
    values = to_float64(x, types[0])
    got = to_float64(y, types[1])
    has_finite = np.isfinite(values).any(axis=1)
    assert np.isnan(got[~has_finite]).all(), "a row without a finite entry must give NaN"
    result = check_matrix(y[has_finite], x[has_finite], types)
    assert result.passed, result.describe()
    assert (got[np.isneginf(values) & has_finite[:, None]] == 0).all(), "-inf got a nonzero weight"


@pytest.mark.parametrize("offset", [0, 1, 2, 3])
@pytest.mark.parametrize("width", WIDTHS)
def test_every_width_and_misaligned_start_float32(width, offset):
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    x, y, _ = run(values, ("float32", "float32"), x_at=(offset, 3), y_at=(offset, 3))
    expect_softmax(x, y, ("float32", "float32"))
    # y's rows aligned unlike x's: the quotients go out element by element, the same values.
    _, y_apart, _ = run(values, ("float32", "float32"), x_at=(offset, 3), y_at=((offset + 1) % 4, 2))
    assert np.array_equal(y.view(np.uint32), y_apart.view(np.uint32))


@pytest.mark.parametrize("offset", [1, 3, 5])
@pytest.mark.parametrize("width", TYPE_WIDTHS)
@pytest.mark.parametrize("types", PAIRS, ids=lambda t: f"{t[0]}-{t[1]}")
def test_every_element_type_against_float64(types, width, offset):
    values = matrix_fixture("offset", (ROWS, width)).astype(np.float64)
    x, y, _ = run(values, types, x_at=(offset, 7), y_at=(offset % 2, 1))
    expect_softmax(x, y, types)


@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float64", "float64")],
                         ids=lambda t: t[0])
@pytest.mark.parametrize("width", [13, 70])
def test_masks_and_fully_masked_rows_in_each_type(types, width):
    rng = np.random.default_rng(width)
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    values[rng.random(values.shape) < 0.3] = -np.inf
    values[:, 0] = -np.inf   # a head element masked
    values[:, -1] = 2.0      # a tail element finite: every row but the last keeps one
    values[ROWS - 1] = -np.inf
    x, y, status = run(values, types, x_at=(1, 2), y_at=(1, 2), checked=True)
    expect_softmax(x, y, types)
    assert status[0] == STATUS_CLEAR and status[1] == ROWS - 1


@pytest.mark.parametrize("column", [0, 2, 9, 11, 12], ids=lambda c: f"col{c}")
@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "float32")], ids=lambda t: t[0])
def test_checked_build_names_head_body_and_tail_positions(types, column):
    """Width 13 at offset 1: head columns 0-2 (bfloat16: 0-6), quads in between, the tail at the end."""
    values = matrix_fixture("random", (ROWS, 13)).astype(np.float64)
    values[1, column] = np.nan
    values[1, 12] = np.inf
    x, y, status = run(values, types, x_at=(1, 0), checked=True)
    assert status[0] == 13 + min(column, 12) and status[1] == STATUS_CLEAR
    assert np.isnan(to_float64(y[1], types[1])).all()
    keep = np.arange(ROWS) != 1
    expect_softmax(x[keep], y[keep], types)


@pytest.mark.parametrize("geometry", ["long_l32_q1", "long_l64_q2"])
@pytest.mark.parametrize("width", [5, 130, 1031])
@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float64", "float64")],
                         ids=lambda t: t[0])
def test_long_path_with_edges(types, width, geometry):
    values = matrix_fixture("offset", (ROWS, width)).astype(np.float64)
    if width > 200:
        values[0, :200] = -np.inf   # the head and the first chunks all -inf: the running sum starts late
        values[1, -2:] = 80.0       # the maximum in the tail: every earlier sum is rescaled
    x, y, _ = run(values, types, x_at=(3, 1), y_at=(2, 0), geometry=geometry)
    expect_softmax(x, y, types)


@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16")], ids=lambda t: t[0])
def test_long_path_a_nan_among_leading_masked_chunks_makes_the_row_nan(types):
    """A chunk of only -inf and NaN while the running max is still -inf (the max skips NaN): the NaN must still
    reach the sum, so the row is NaN (unchecked), as torch gives, though later chunks are finite."""
    values = matrix_fixture("offset", (ROWS, 1031)).astype(np.float64)
    values[0, :300] = -np.inf
    values[0, 150] = np.nan
    x, y, _ = run(values, types, x_at=(3, 1), geometry="long_l32_q1")
    assert np.isnan(to_float64(y[0], types[1])).all()
    expect_softmax(x[1:], y[1:], types)


@GPU_ONLY
@pytest.mark.parametrize("width", [8191, 16385, 32766, 32769, 65535, 100003, 131071, 262143])
@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32"),
                                   ("float64", "float64")], ids=lambda t: f"{t[0]}-{t[1]}")
def test_wide_rows_misaligned_on_the_gpu(types, width):
    """The block-per-row, copy-engine and cluster geometries with heads and tails (float64: its own geometries)."""
    values = matrix_fixture("random", (4, width)).astype(np.float64)
    values[0, ::7] = -np.inf
    x, y, status = run(values, types, x_at=(1, 5), y_at=(1, 5), checked=True)
    expect_softmax(x, y, types)
    assert list(status) == [STATUS_CLEAR] * STATUS_WORDS
    _, y_apart, _ = run(values, types, x_at=(1, 5), y_at=(0, 0))
    assert np.array_equal(y.view(np.uint8), y_apart.view(np.uint8))


#: A rows geometry the simulator runs quickly: 8 lanes of one quad, 32 body columns.
PAST_BODY = "rows_l8_q1"


@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32"),
                                   ("float64", "float64")], ids=lambda t: "-".join(t))
def test_a_rows_geometry_holds_rows_a_few_columns_past_its_body(types):
    """A row whose body (its columns rounded down to a 16-byte unit) fits the geometry's 4 L Q columns runs
    there at every alignment of its start, the rest in the edge slots; one column more is refused."""
    geometry = Geometry.parse(PAST_BODY)
    unit = body_unit(types[0])
    widest = geometry.max_columns + unit - 1
    assert body_columns(widest, types[0]) == geometry.max_columns
    values = matrix_fixture("random", (ROWS, widest)).astype(np.float64)
    values[0, :3] = values[1, -3:] = -np.inf  # masked head and tail elements
    for offset in range(unit):  # every alignment of the rows' starts
        x, y, status = run(values, types, x_at=(offset, 1), y_at=(offset, 1), geometry=PAST_BODY, checked=True)
        expect_softmax(x, y, types)
        assert list(status) == [STATUS_CLEAR] * STATUS_WORDS
    too_wide = np.zeros((2, widest + 1), STORAGE_DTYPES[types[0]])
    with pytest.raises(ValueError, match=f"row too long for geometry {PAST_BODY}: {widest + 1} columns of "
                                         rf"{types[0]} \({widest + 1} of them in its body\) > 32"):
        geometry_launches(PAST_BODY, too_wide, np.zeros((2, widest + 1), STORAGE_DTYPES[types[1]]), types=types)


def test_a_forward_runs_its_own_entries_by_element_size_and_a_backward_the_table_s():
    """FORWARD_TABLE: the forward of rows whose wider element has that size, over the whole range of the entry it
    stands for (a mixed row goes by its wider element); a backward and a float64 row run the table's entry."""
    limits = [limit for limit, _ in AUTO_TABLE]
    sizes = {2: (("bfloat16",) * 2, ("float16",) * 2), 4: (("float32",) * 2, ("bfloat16", "float32"))}
    for size, entries in FORWARD_TABLE.items():
        for limit, name in entries.items():
            table = dict(AUTO_TABLE)[limit]
            previous = limits[limits.index(limit) - 1]
            for types in sizes[size]:
                edge = body_unit(types[0]) - 1  # columns past a limit from BODY_TABLE_FROM on go by the row's body
                first = previous + 1 + (edge if previous >= BODY_TABLE_FROM else 0)
                last = limit + (edge if limit >= BODY_TABLE_FROM else 0)
                assert {table_geometry(w, types) for w in range(first, last + 1)} == {name}
                assert table_geometry(first - 1, types) != name != table_geometry(last + 1, types)
                assert Geometry.parse(name).holds(last, types[0]) and name != table
                assert table_geometry(limit, types, inputs=2) == table
            assert table_geometry(limit, ("float64",) * 2) == table
            assert backward_geometry(limit, "bfloat16") == backward_geometry(limit, "float32")


def test_past_BODY_TABLE_FROM_the_table_holds_a_row_by_its_body_in_every_type():
    """A row up to 3 float32 (7 two-byte) columns past an entry's limit runs that entry; every width of every
    type runs a geometry that holds it (Geometry.holds)."""
    for limit, _ in AUTO_TABLE[:-1]:
        for types, extra in ((("float32",) * 2, 3), (("bfloat16",) * 2, 7), (("float16", "float32"), 7)):
            if limit >= BODY_TABLE_FROM:
                name = table_geometry(limit, types)
                assert table_geometry(limit + extra, types) == name != table_geometry(limit + extra + 1, types)
        for types in (("float32",) * 2, ("bfloat16",) * 2, ("float64",) * 2, ("float32", "bfloat16")):
            for width in range(max(1, limit - 2), limit + 10):
                assert Geometry.parse(auto_geometry(width, types)).holds(width, types[0]), (width, types)


def test_strided_arrays_the_launchers_refuse():
    with pytest.raises(ValueError, match="x: expected one element .8 bytes. between columns"):
        auto_launches(np.zeros((4, 8))[:, ::2], np.zeros((4, 4)))
    skewed = np.lib.stride_tricks.as_strided(np.zeros(40, np.float32), (2, 4), (18, 4))
    with pytest.raises(ValueError, match="x: the row stride .18 bytes. is not a whole number of elements"):
        auto_launches(skewed, np.zeros((2, 4), np.float32))


# ---- negative control: a tail that skips its last element --------------------------------------------------

def run_control(kernel, geometry, values, at=(1, 0)):
    """``(x, y)`` of a negative control ``kernel`` launched as ``geometry``'s build would be, float32 rows placed at
    ``at`` = (offset, pad) (default: one element off), after checking that the real build of the geometry passes on
    the same rows."""
    types = ("float32", "float32")
    x, y_real, _ = run(values, types, x_at=at, y_at=at, geometry=geometry)
    expect_softmax(x, y_real, types)
    d_x = strided(values, "float32", *at)
    d_y = nan_output(values.shape, "float32", *at)
    launch, = geometry_launches(geometry, d_x, d_y, types=types)
    run_launches([KernelLaunch("control", kernel, launch.grid, launch.block, launch.args)])
    return d_x.copy_to_host(), d_y.copy_to_host()


@pytest.mark.parametrize("width", [13, 70])
def test_negative_control_a_tail_without_its_last_element_is_rejected(width):
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    x, y = run_control(short_tail_control_kernel("rows_l32_q1"), "rows_l32_q1", values)
    assert np.isnan(y[:, -1]).any()  # never written (in the rows that have a tail)
    with pytest.raises(AssertionError, match="finite and non-negative: False"):
        expect_softmax(x, y, ("float32", "float32"))


# ---- the narrow geometry: every width it holds, misaligned, masked and checked --------------------------------

@pytest.mark.parametrize("types", [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32"),
                                   ("float64", "float64")], ids=lambda t: "-".join(t))
def test_narrow_rows_misaligned_masked_and_checked(types):
    """Every width the narrow geometry holds, rows starting misaligned in both arrays: masks, a row of -inf alone
    (recorded, NaN), then a NaN and a +inf (the first recorded as a flat index)."""
    geometry = NARROW_GEOMETRY
    for width in range(1, Geometry.parse(geometry).max_columns + 1):
        rng = np.random.default_rng(width)
        values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
        values[rng.random(values.shape) < 0.3] = -np.inf
        values[:, -1] = 2.0
        values[ROWS - 1] = -np.inf
        x, y, status = run(values, types, x_at=(1, 2), y_at=(3, 1), geometry=geometry, checked=True)
        expect_softmax(x, y, types)
        assert status[0] == STATUS_CLEAR and status[1] == ROWS - 1
        values[0, width - 1], values[1, 0] = np.nan, np.inf
        x, y, status = run(values, types, x_at=(1, 2), y_at=(3, 1), geometry=geometry, checked=True)
        assert status[0] == width - 1 and np.isnan(to_float64(y[:2], types[1])).all()


# ---- negative control: a narrow row whose sum leaves out its last element -----------------------------------

@pytest.mark.parametrize("width", [2, 4])
def test_negative_control_a_narrow_sum_without_its_last_element_is_rejected(width):
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    x, y = run_control(narrow_short_sum_control_kernel(NARROW_GEOMETRY), NARROW_GEOMETRY, values)
    with pytest.raises(AssertionError, match="failed|finite and non-negative: False"):
        expect_softmax(x, y, ("float32", "float32"))


# ---- packed rows: C-contiguous rows of 1 to 7 elements, read as whole quads across rows ------------------------

#: Row counts that leave every number of rows (0 to 3) past the last whole quad; on a GPU, over several blocks.
PACKED_ROWS = (8, 9, 10, 11) if SIMULATOR else (6144, 6145, 6146, 6147)


def packed_widths(element_type):
    """Every width a packed geometry takes for ``element_type`` (groups of rows take float32 and 2-byte types)."""
    kinds = ("packed",) if element_type == "float64" else ("packed", "groups")
    return sorted(w for kind in kinds for w in PACKED_KIND_WIDTHS[kind])


PACKED_TYPES = [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float32"), ("float64", "float64")]
#: Every (types, width) a packed geometry takes: one test each, so parallel workers share them.
PACKED_CASES = [(types, width) for types in PACKED_TYPES for width in packed_widths(types[0])]


def bits_reference(width):
    """``(geometry, rows)``: what gives the bits a packed geometry's rows of ``width`` must equal. To 4 columns the
    narrow geometry over every row (``rows`` None); wider (rows the narrow geometry does not hold), the packed
    geometry's own narrow rows: its first ``rows`` = R - 1 rows launched alone, fewer than a group, all of them
    the tail (:func:`~numba_softmax.kernels.auto_geometry.group_shape`). ``(None, 0)`` where a group is one row
    (8 columns): no rows run narrow there, and the oracle alone checks them."""
    if width <= 4:
        return NARROW_GEOMETRY, None
    tail = group_shape(width)[0] - 1
    return (packed_geometry(width, ("float32", "float32")), tail) if tail else (None, 0)


@pytest.mark.parametrize("types, width", PACKED_CASES, ids=[f"{'-'.join(t)}-{w}" for t, w in PACKED_CASES])
def test_packed_rows_equal_the_narrow_rows_bit_for_bit(types, width):
    """C-contiguous rows of every packed width (1 to 7), every count of rows past the last whole group: the packed
    geometry (``auto``'s at the widths the table runs packed); its output passes the oracle and equals the narrow
    rows' bits, masks, a row of -inf alone (recorded, NaN), a NaN and a +inf (the first recorded as a flat index)
    included."""
    geometry = packed_geometry(width, types)
    for rows in PACKED_ROWS:
        rng = np.random.default_rng(rows * width)
        values = matrix_fixture("random", (rows, width)).astype(np.float64)
        values[rng.random(values.shape) < 0.3] = -np.inf
        values[:, -1] = 2.0
        values[rows - 1] = -np.inf
        launch, = auto_launches(strided(values, types[0], 0, 0), nan_output(values.shape, types[1], 0, 0),
                                types=types)
        assert launch.name.endswith(geometry) == packs_width(width, types), launch.name
        x, y, status = run(values, types, geometry=geometry, checked=True)
        expect_softmax(x, y, types)
        assert status[0] == STATUS_CLEAR and status[1] == rows - 1
        reference, some = bits_reference(width)
        if reference:
            _, y_narrow, _ = run(values[:some], types, geometry=reference)
            assert np.array_equal(y[:some].view(np.uint8), y_narrow.view(np.uint8)), (width, rows)
        values[0, width - 1], values[1, 0] = np.nan, np.inf
        x, y, status = run(values, types, geometry=geometry, checked=True)
        assert status[0] == width - 1 and np.isnan(to_float64(y[:2], types[1])).all()


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
@pytest.mark.parametrize("geometry", ["packed_l1_q1", "packed_l1_q2", "packed_l1_q4", "groups_l1_q1", "staged_l1_q1",
                                      "warpstaged_l1_q1"])
def test_every_packed_geometry_at_every_width(geometry, element_type, form):
    """Each packed geometry ``bench perf`` times, float32 and bfloat16, both forms: the narrow geometry's bits."""
    types = (element_type, element_type)
    for width in Geometry.parse(geometry).packed_widths:
        rows = PACKED_ROWS[-1]
        values = matrix_fixture("random", (rows, width)).astype(np.float64)
        outputs = []
        reference, some = bits_reference(width)
        runs = [(geometry, values)] + ([(reference, values[:some])] if reference else [])
        for name, part in runs:
            d_x, d_y = strided(part, types[0], 0, 0), nan_output(part.shape, types[1], 0, 0)
            with np.errstate(invalid="ignore", over="ignore"):
                run_launches(geometry_launches(name, d_x, d_y, types=types, form=form))
            outputs.append(d_y.copy_to_host())
        if reference:
            assert np.array_equal(outputs[0][:some].view(np.uint8), outputs[1].view(np.uint8)), (types, width)
        assert np.isfinite(to_float64(outputs[0], types[1])).all()


#: Rows of groups of ``width`` that fill a block's first warp and part of its second (every block on a GPU), and
#: one row past the last whole group.
def staged_rows(width):
    return group_shape(width)[0] * ((3 * 256 if not SIMULATOR else 0) + 32 + 5) + 1


@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
@pytest.mark.parametrize("geometry", STAGED_KINDS)
def test_staged_forwards_equal_the_groups_bit_for_bit(geometry, element_type):
    """The groups staged by the block (``staged_l1_q1``) or by each warp (``warpstaged_l1_q1``), several stages of
    whole groups, a partial one and a row past them, at every width: ``groups_l1_q1``'s bits, both forms."""
    types = (element_type, element_type)
    for width in PACKED_KIND_WIDTHS[geometry]:
        values = matrix_fixture("random", (staged_rows(width), width)).astype(np.float64)
        values[:, 1] = -np.inf
        for form in ("softmax", "log_softmax"):
            outputs = []
            for name in (f"{geometry}_l1_q1", "groups_l1_q1"):
                d_x, d_y = strided(values, types[0], 0, 0), nan_output(values.shape, types[1], 0, 0)
                run_launches(geometry_launches(name, d_x, d_y, types=types, form=form))
                outputs.append(d_y.copy_to_host())
            assert np.array_equal(outputs[0].view(np.uint8), outputs[1].view(np.uint8)), (geometry, width, form)


def test_rows_that_are_not_packed_run_the_narrow_geometry():
    """A row stride wider than the row or a misaligned start: ``auto`` runs the narrow geometry, and a packed
    geometry named for them, or for a width it does not take, is refused with the reason."""
    values = matrix_fixture("random", (PACKED_ROWS[0], 2)).astype(np.float64)
    for x_at in ((0, 1), (1, 0)):
        d_x, d_y = strided(values, "float32", *x_at), nan_output(values.shape, "float32", 0, 0)
        launch, = auto_launches(d_x, d_y)
        assert launch.name == f"auto_{NARROW_GEOMETRY}"
        with pytest.raises(ValueError, match="x must be C-contiguous with its data aligned to 16 bytes"):
            geometry_launches("packed_l1_q1", d_x, d_y)
    three = matrix_fixture("random", (PACKED_ROWS[0], 3)).astype(np.float64)
    d_x, d_y = strided(three, "bfloat16", 0, 0), nan_output(three.shape, "bfloat16", 0, 0)
    assert auto_launches(d_x, d_y, types=("bfloat16", "bfloat16"))[0].name == "auto_groups_l1_q1"
    with pytest.raises(ValueError, match="rows of 3 columns; it takes rows of 1, 2, 4 columns"):
        geometry_launches("packed_l1_q2", d_x, d_y, types=("bfloat16", "bfloat16"))
    d_x, d_y = strided(three, "float32", 0, 1), nan_output(three.shape, "float32", 0, 0)
    with pytest.raises(ValueError, match="x must be C-contiguous"):
        geometry_launches("groups_l1_q1", d_x, d_y)
    d_x, d_y = strided(three, "float64", 0, 0), nan_output(three.shape, "float64", 0, 0)
    assert auto_launches(d_x, d_y)[0].name == "auto_rows_l1_q1"  # a float64 group would spill: the rows geometry
    with pytest.raises(ValueError, match="float64 rows of 3 columns run the narrow or rows geometries"):
        geometry_launches("groups_l1_q1", d_x, d_y, types=("float64", "float64"))


@pytest.mark.parametrize("geometry, width", [("packed_l1_q1", 1), ("packed_l1_q1", 2), ("groups_l1_q1", 3),
                                             ("groups_l1_q1", 7), ("groups_l1_q1", 8), ("staged_l1_q1", 5),
                                             ("staged_l1_q1", 7), ("warpstaged_l1_q1", 5), ("warpstaged_l1_q1", 7)])
def test_negative_control_a_packed_sum_without_its_last_element_is_rejected(geometry, width):
    """The short-sum control in the packed geometries: its groups and the rows past them are rejected."""
    values = matrix_fixture("random", (PACKED_ROWS[-1], width)).astype(np.float64)
    x, y = run_control(narrow_short_sum_control_kernel(geometry), geometry, values, at=(0, 0))
    with pytest.raises(AssertionError, match="failed|finite and non-negative: False"):
        expect_softmax(x, y, ("float32", "float32"))
