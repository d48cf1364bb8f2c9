"""log_softmax and the backward of softmax and log_softmax on rows of any width, alignment and element type.

The same tests run in the simulator (element-by-element quads, the same head / body / tail split) and on a GPU:
the float64 oracle with the declared tolerances (:func:`numba_softmax.oracle.check_scaled`), -inf masks, rows
whose starts are misaligned each by its own amount, the long-row path, and the negative control (a softmax
backward without its ``sum(dy * y)`` term), which the same check must reject.
"""

import numpy as np
import pytest
from numba import cuda
from test_auto_layouts import (GPU_ONLY, PACKED_ROWS, PAST_BODY, bits_reference, nan_output, packed_widths,
                               staged_rows, strided)

from numba_softmax.backend import SIMULATOR, run_launches
from numba_softmax.element_types import to_float64
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_backward import backward_launches
from numba_softmax.kernels.auto_backward_controls import dropped_sum_launches, own_sum_launches
from numba_softmax.kernels.auto_geometry import (NARROW_GEOMETRY, Geometry, backward_geometry, body_unit,
                                                 packed_geometry, packs_width)
from numba_softmax.kernels.auto_launch import auto_launches, geometry_launches
from numba_softmax.oracle import (check_scaled, oracle_log_softmax, oracle_log_softmax_backward, oracle_softmax,
                                  oracle_softmax_backward)
from numba_softmax.validation import STATUS_CLEAR, STATUS_MASKED_ROW, STATUS_WORDS

ROWS = 3 if SIMULATOR else 67
#: Residues mod 8, a narrow group's boundary and a block-per-row width; a GPU adds wide rows and the long-row
#: path's default geometry (the simulator runs one Python thread per CUDA thread: too slow there).
WIDTHS = [1, 3, 8, 13, 17, 130] + [pytest.param(w, marks=GPU_ONLY) for w in (781, 4099, 16385, 40003, 70001)]
TYPES = ("float32", "bfloat16", "float16", "float64")
#: A long-row geometry the simulator can run: 4 x 32 columns a chunk, so 130 columns cross chunks.
SMALL_LONG = "long_l32_q1"


def _gradients(rows, cols, seed):
    return np.random.default_rng(seed).standard_normal((rows, cols))


def _forward(values, form):
    """The float64 forward of ``values`` (softmax or log_softmax): what a backward gets as ``y``."""
    return oracle_softmax(values) if form == "softmax" else oracle_log_softmax(values)[0]


def run_backward(y, dy, element_type, form, at=((0, 0), (0, 0), (0, 0)), geometry=None, launches=backward_launches):
    """dx of float64 ``y`` and ``dy`` cast to ``element_type``, each placed at its (offset, pad); dx NaN-filled.
    Returns (y, dy as the kernel saw them, dx), on the host, in the storage type."""
    d_y = strided(y, element_type, *at[0])
    d_dy = strided(dy, element_type, *at[1])
    d_dx = nan_output(y.shape, element_type, *at[2])
    with np.errstate(invalid="ignore", over="ignore"):
        run_launches(launches(d_y, d_dy, d_dx, element_type, form, geometry=geometry))
    return d_y.copy_to_host(), d_dy.copy_to_host(), d_dx.copy_to_host()


def expect_backward(y, dy, dx, element_type, form):
    ref, scale = (oracle_softmax_backward if form == "softmax" else oracle_log_softmax_backward)(
        to_float64(y, element_type), to_float64(dy, element_type))
    passed, ratio, where = check_scaled(dx, ref, scale, element_type)
    assert passed, f"{form} backward ({element_type}): worst tolerance ratio {ratio:.3g} at (row, col) {where}"


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", TYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_backward_against_float64(width, element_type, form):
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    y, dy, dx = run_backward(_forward(values, form), _gradients(ROWS, width, width), element_type, form,
                             at=((1, 3), (1, 3), (1, 3)))
    expect_backward(y, dy, dx, element_type, form)


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
def test_backward_inputs_aligned_each_their_own_way_give_the_same_bits(form):
    """dy and dx whose rows are aligned unlike y's: element-by-element accesses, the same values."""
    width = 70
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    y, dy = _forward(values, form), _gradients(ROWS, width, 7)
    _, _, together = run_backward(y, dy, "float32", form, at=((2, 3), (2, 3), (2, 3)))
    _, _, apart = run_backward(y, dy, "float32", form, at=((2, 3), (1, 1), (3, 5)))
    assert np.array_equal(together.view(np.uint32), apart.view(np.uint32))


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", ["float32", "bfloat16", "float64"])
def test_backward_long_path_crosses_chunks(element_type, form):
    width = 301 if SIMULATOR else 9001
    geometry = SMALL_LONG if SIMULATOR else None
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    y, dy, dx = run_backward(_forward(values, form), _gradients(ROWS, width, 3), element_type, form,
                             at=((3, 1), (3, 1), (3, 1)),
                             geometry=geometry or ("long_l1024_q1" if element_type == "float64" else "long_l1024_q4"))
    expect_backward(y, dy, dx, element_type, form)


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
def test_backward_of_masked_rows(form):
    """Rows partly masked with -inf: the forward gives those columns 0 (softmax) or -inf (log_softmax); the
    softmax backward gives them a gradient of exactly 0, the log_softmax one exactly dy (torch's
    ``dy - exp(-inf) * s``), and the other columns their float64 value."""
    width = 40
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    values[:, ::3] = -np.inf
    y, dy = _forward(values, form), _gradients(ROWS, width, 5)
    y_seen, dy_seen, dx = run_backward(y, dy, "float32", form, at=((1, 0), (1, 0), (1, 0)))
    got = to_float64(dx, "float32")
    expected = 0 if form == "softmax" else to_float64(dy_seen, "float32")[:, ::3]
    assert (got[:, ::3] == expected).all(), "a masked column's gradient is not exact"
    expect_backward(y_seen, dy_seen, dx, "float32", form)


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
def test_backward_rows_geometry_holds_rows_a_few_columns_past_its_body(element_type, form):
    """As the forward's (test_auto_layouts): the widest row whose body fits the geometry, at every alignment of
    ``y`` (``dy`` and ``dx`` one element further: element-by-element accesses), one column more refused."""
    geometry = Geometry.parse(PAST_BODY)
    unit = body_unit(element_type)
    widest = geometry.max_columns + unit - 1
    values = matrix_fixture("random", (ROWS, widest)).astype(np.float64)
    y, dy = _forward(values, form), _gradients(ROWS, widest, unit)
    for offset in range(unit):
        got = run_backward(y, dy, element_type, form, at=((offset, 1), (offset, 1), (offset + 1, 0)),
                           geometry=PAST_BODY)
        expect_backward(*got, element_type, form)
    too_wide = strided(np.zeros((2, widest + 1)), element_type, 0, 0)
    with pytest.raises(ValueError, match=f"row too long for geometry {PAST_BODY}: {widest + 1} columns"):
        backward_launches(too_wide, too_wide, too_wide, element_type, form, geometry=PAST_BODY)


@GPU_ONLY
@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("width", [16393, 24577, 32771, 65539])
def test_cluster_backward_against_float64(width, form):
    """float32 rows past a block's registers in the CTAs of a cluster (3 to 8), misaligned each their own way, a
    column in five masked: the oracle passes it, and a build whose CTAs keep their own block's sum is rejected;
    2-byte rows of the same width keep the long-row path."""
    element_type = "float32"
    assert Geometry.parse(backward_geometry(width, "bfloat16")).kind == "long"
    geometry = backward_geometry(width, element_type)
    assert Geometry.parse(geometry).kind == "cluster", geometry
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    values[:, 2::5] = -np.inf
    y, dy = _forward(values, form), _gradients(ROWS, width, width)
    at = ((1, 3), (2, 1), (3, 2))
    y_seen, dy_seen, dx = run_backward(y, dy, element_type, form, at=at)
    expect_backward(y_seen, dy_seen, dx, element_type, form)
    if form == "softmax":
        assert (to_float64(dx, element_type)[:, 2::5] == 0).all()
    wrong = run_backward(y, dy, element_type, form, at=at, launches=own_sum_launches)
    with pytest.raises(AssertionError, match="worst tolerance ratio"):
        expect_backward(*wrong, element_type, form)


def test_the_check_rejects_a_backward_without_its_sum_term():
    width = 70
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    y, dy = _forward(values, "softmax"), _gradients(ROWS, width, 9)
    y_seen, dy_seen, dx = run_backward(y, dy, "float32", "softmax", launches=dropped_sum_launches)
    with pytest.raises(AssertionError, match="worst tolerance ratio"):
        expect_backward(y_seen, dy_seen, dx, "float32", "softmax")


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", TYPES)
def test_narrow_backward_at_every_width_it_holds(element_type, form):
    """One thread per row: every width up to 4 Q, rows misaligned each their own way, a masked column; the
    dropped-sum control of the same geometry is rejected from width 2 (at width 1 ``y`` is 1 and ``s`` is ``dy``:
    its gradient is 0 in exact arithmetic, as the control's ``dy * y`` is not)."""
    geometry = NARROW_GEOMETRY
    for width in range(1, Geometry.parse(geometry).max_columns + 1):
        values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
        if width > 2:
            values[:, 1] = -np.inf
        y, dy = _forward(values, form), _gradients(ROWS, width, width)
        seen = run_backward(y, dy, element_type, form, at=((1, 3), (2, 1), (3, 2)), geometry=geometry)
        expect_backward(*seen, element_type, form)
        if form == "softmax" and element_type == "float32":
            wrong = run_backward(y, dy, element_type, form, geometry=geometry, launches=dropped_sum_launches)
            with pytest.raises(AssertionError, match="worst tolerance ratio"):
                expect_backward(*wrong, element_type, form)


#: Every (element type, width) a packed backward takes: one test each, so parallel workers share them.
PACKED_BACKWARD_CASES = [(t, w) for t in TYPES for w in packed_widths(t)]


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type, width", PACKED_BACKWARD_CASES,
                         ids=[f"{t}-{w}" for t, w in PACKED_BACKWARD_CASES])
def test_packed_backward_equals_the_narrow_backward_bit_for_bit(element_type, width, form):
    """C-contiguous rows of every packed width (1 to 7), every count of rows past the last whole group, a masked
    column: the packed geometry (``auto``'s at the widths the table runs packed) passes the oracle and gives the
    narrow rows' bits; the dropped-sum control of the packed geometry is rejected from width 2."""
    types = (element_type, element_type)
    for rows in PACKED_ROWS:
        values = matrix_fixture("random", (rows, width)).astype(np.float64)
        if width > 2:
            values[:, 1] = -np.inf
        y, dy = _forward(values, form), _gradients(rows, width, rows + width)
        geometry = packed_geometry(width, types, inputs=2)
        launch, = backward_launches(strided(y, element_type, 0, 0), strided(dy, element_type, 0, 0),
                                    nan_output(y.shape, element_type, 0, 0), element_type, form)
        assert launch.name.endswith(geometry) == packs_width(width, types, inputs=2), launch.name
        seen = run_backward(y, dy, element_type, form, geometry=geometry)
        expect_backward(*seen, element_type, form)
        reference, some = bits_reference(width)
        if reference:
            _, _, narrow = run_backward(y[:some], dy[:some], element_type, form, geometry=reference)
            assert np.array_equal(seen[2][:some].view(np.uint8), narrow.view(np.uint8)), (width, rows)
        if form == "softmax" and element_type == "float32" and width > 1:
            wrong = run_backward(y, dy, element_type, form, launches=dropped_sum_launches)
            with pytest.raises(AssertionError, match="worst tolerance ratio"):
                expect_backward(*wrong, element_type, form)


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
@pytest.mark.parametrize("geometry", ["staged_l1_q1", "warpstaged_l1_q1"])
def test_staged_backward_equals_the_groups_backward_bit_for_bit(geometry, element_type, form):
    """The groups' ``y`` and ``dy`` staged through shared memory by the block (``staged_l1_q1``) or by each warp
    (``warpstaged_l1_q1``): at every width it takes, every count of rows past the last whole group, a partial
    second warp and a masked column, the oracle passes and ``dx`` is ``groups_l1_q1``'s bit for bit."""
    for width in Geometry.parse(geometry).packed_widths:
        for rows in (*PACKED_ROWS, staged_rows(width)):
            values = matrix_fixture("random", (rows, width)).astype(np.float64)
            values[:, 1] = -np.inf
            y, dy = _forward(values, form), _gradients(rows, width, rows * width)
            seen = run_backward(y, dy, element_type, form, geometry=geometry)
            expect_backward(*seen, element_type, form)
            _, _, groups = run_backward(y, dy, element_type, form, geometry="groups_l1_q1")
            assert np.array_equal(seen[2].view(np.uint8), groups.view(np.uint8)), (width, rows)


# ---- the log_softmax forward ----------------------------------------------------------------------------------

def run_log_softmax(values, types, at=((0, 0), (0, 0)), geometry=None, checked=False):
    d_x = strided(values, types[0], *at[0])
    d_y = nan_output(values.shape, types[1], *at[1])
    status = alarm = None
    if checked:
        status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
        alarm = cuda.to_device(np.zeros(1, dtype=np.int32))
    launches = (auto_launches(d_x, d_y, status, alarm, types, "log_softmax") if geometry is None
                else geometry_launches(geometry, d_x, d_y, status, alarm, types, "log_softmax"))
    with np.errstate(invalid="ignore", over="ignore"):
        run_launches(launches)
    return d_x.copy_to_host(), d_y.copy_to_host(), None if status is None else status.copy_to_host()


def expect_log_softmax(x, y, types):
    """y is log_softmax(x) (one element type in and out) within the type's tolerance of the float64 value."""
    ref, scale = oracle_log_softmax(to_float64(x, types[0]))
    passed, ratio, where = check_scaled(y, ref, scale, types[1])
    assert passed, f"log_softmax {types}: worst tolerance ratio {ratio:.3g} at (row, col) {where}"


@pytest.mark.parametrize("element_type", TYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_log_softmax_against_float64(width, element_type):
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    x, y, _ = run_log_softmax(values, (element_type, element_type), at=((1, 3), (2, 1)))
    expect_log_softmax(x, y, (element_type, element_type))


@pytest.mark.parametrize("geometry", [SMALL_LONG, "rows_l8_q1", NARROW_GEOMETRY,
                                      pytest.param("long_l1024_q4", marks=GPU_ONLY)])
def test_log_softmax_geometries_and_masks(geometry):
    """-inf columns give -inf, a row of -inf alone NaN (as torch), the rest the float64 value; the checked
    build of the same geometry writes the same bits."""
    width = min(30, Geometry.parse(geometry).max_columns or 30)
    values = matrix_fixture("random", (ROWS, width)).astype(np.float64)
    values[:, 1::4] = -np.inf
    values[-1] = -np.inf
    x, y, _ = run_log_softmax(values, ("float32", "float32"), geometry=geometry)
    got = to_float64(y, "float32")
    assert np.isneginf(got[:-1, 1::4]).all() and np.isnan(got[-1]).all()
    expect_log_softmax(x[:-1], y[:-1], ("float32", "float32"))
    _, y_checked, status = run_log_softmax(values, ("float32", "float32"), geometry=geometry, checked=True)
    assert np.array_equal(y.view(np.uint32), y_checked.view(np.uint32))
    assert status[STATUS_MASKED_ROW] == ROWS - 1, "the checked build names the row without a finite entry"


@GPU_ONLY
@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
def test_log_softmax_of_rows_past_the_register_geometries(element_type):
    values = matrix_fixture("random", (4, 40000)).astype(np.float64)
    x, y, _ = run_log_softmax(values, (element_type, element_type), at=((3, 1), (3, 1)))
    expect_log_softmax(x, y, (element_type, element_type))
