"""softmax() and tiled_softmax() as a caller sees them, in the Numba CUDA simulator.

Every input kind the simulator has (numpy, Numba device arrays): what each returns, ``out=``
checks, the device-side check naming the first offending row and column, ``-inf`` masks against
float64, fully masked rows, ``check=False``, cached plans, streams. The same semantics on a GPU,
with CuPy and PyTorch inputs too: tests/gpu/test_api_gpu.py.
"""

import warnings

import numpy as np
import pytest
from numba import cuda

from numba_softmax import api, softmax, tiled_softmax
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.oracle import check_matrix, check_packed
from numba_softmax.tiled import TiledBuffers, build_layout

SHAPE = (4, 40)


def _device(x):
    return cuda.to_device(x)


def _host(y):
    return y if isinstance(y, np.ndarray) else y.copy_to_host()


def _masked_check(out, x):
    """Masked (-inf) entries get exactly 0; the rest is the softmax of the finite entries alone
    (the project's oracle and tolerance, row by row on the finite entries)."""
    out = _host(out)
    masked = np.isneginf(x)
    assert np.all(out[masked] == 0.0), "a -inf entry got a nonzero weight"
    lengths = (~masked).sum(axis=1)
    result = check_packed(out[~masked], x[~masked], lengths)
    assert result.passed, result.describe()


@pytest.mark.parametrize("method", ["auto", "fused", "stages"])
@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_each_kind_returns_its_own_kind_against_the_oracle(kind, method):
    x = matrix_fixture("random", SHAPE)
    y = softmax(x if kind == "numpy" else _device(x), method=method)
    assert isinstance(y, np.ndarray) == (kind == "numpy")
    assert check_matrix(_host(y), x).passed


@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_out_is_written_and_returned(kind):
    x = matrix_fixture("offset", SHAPE)
    out = np.full(SHAPE, np.nan, np.float32)
    if kind == "numba":
        out = _device(out)
    y = softmax(x if kind == "numpy" else _device(x), out=out)
    assert y is out
    assert check_matrix(_host(out), x).passed


def test_long_rows_go_to_the_long_row_path():
    # One row: any row past 4096 columns takes a block of 512 threads or more (as many Python threads here).
    x = matrix_fixture("random", (1, 4100))
    with pytest.raises(ValueError, match="row too long for the fused kernel"):
        softmax(x, method="fused")
    assert check_matrix(softmax(x), x).passed


@pytest.mark.parametrize("bad_out, message", [
    (lambda: cuda.device_array(SHAPE, np.float64), "out: dtype float64 is not the result's float32"),
    (lambda: cuda.device_array((4, 41), np.float32), r"out: must have x's shape \(4, 40\)"),
    (lambda: cuda.device_array((4, 80), np.float32)[:, ::2], "out: the elements along dim 1 are 2 elements apart"),
    (lambda: np.empty(SHAPE, np.float32), "out: must be a device array for a device input"),
])
def test_a_bad_device_out_is_rejected(bad_out, message):
    with pytest.raises(ValueError, match=message):
        softmax(_device(matrix_fixture("random", SHAPE)), out=bad_out())


def test_a_bad_host_out_is_rejected_and_a_strided_one_is_written():
    x = matrix_fixture("random", SHAPE)
    wide = np.zeros((4, 80), np.float32)
    every_other = wide[:, ::2]
    assert softmax(x, out=every_other) is every_other and check_matrix(every_other, x).passed
    assert np.all(wide[:, 1::2] == 0)
    with pytest.raises(ValueError, match="out: must be a numpy array for a numpy input"):
        softmax(x, out=cuda.device_array(SHAPE, np.float32))
    with pytest.raises(ValueError, match="out: overlaps x"):
        softmax(x, out=x)


def test_out_overlapping_a_device_input_is_rejected():
    d_x = _device(matrix_fixture("random", SHAPE))
    with pytest.raises(ValueError, match="out: overlaps x"):
        softmax(d_x, out=d_x)


@pytest.mark.parametrize("x, message", [
    (np.zeros((0, 5), np.float32), r"x: shape \(0, 5\) has a zero-size dimension"),
    (np.zeros((3, 0), np.float32), "zero-size dimension"),
    (np.zeros((3, 5), np.int32), "x: dtype int32 is not one softmax takes"),
    (np.zeros((), np.float32), "x: a 0-D array"),
    ([[1.0, 2.0]], "x: must be a numpy array, a Numba device array"),
])
def test_bad_inputs_are_rejected_on_the_host(x, message):
    with pytest.raises(ValueError, match=message):
        softmax(x)


def test_a_strided_device_input_is_rejected_not_copied():
    with pytest.raises(ValueError, match="x: the elements along dim 1 are 2 elements apart"):
        softmax(cuda.device_array((4, 80), np.float32)[:, ::2])


@pytest.mark.parametrize("method", ["auto", "fused", "stages"])
@pytest.mark.parametrize("kind", ["numpy", "numba"])
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_the_device_check_names_the_first_offending_row_and_column(kind, method, value):
    x = matrix_fixture("random", SHAPE)
    x[2, 17] = value
    x[3, 5] = value          # later in flat order: the report names (2, 17)
    original = x.copy()
    d_x = _device(x)
    with pytest.raises(ValueError, match=r"at row 2, column 17$"):
        softmax(x if kind == "numpy" else d_x, method=method, check=True)
    # Nothing the caller owns is modified (out aside).
    assert np.array_equal(_host(d_x), original, equal_nan=True)
    assert np.array_equal(x, original, equal_nan=True)


@pytest.mark.parametrize("method", ["auto", "fused", "stages"])
def test_a_non_finite_input_raises_the_value_error_and_warns_nothing(method):
    """The simulator's numpy arithmetic would warn on ``inf - inf``; the caller sees the ValueError only."""
    x = np.ones((2, 8), np.float32)
    x[1, 3] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # any warning fails the test (it would be raised instead)
        with pytest.raises(ValueError, match=r"at row 1, column 3$"):
            softmax(x, method=method)


def test_after_a_reported_error_the_same_plan_runs_clean_again():
    """The status words and the alarm are cleared after a report: the next clean call passes
    (and a second bad one is reported again, at its own position)."""
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = _device(x), cuda.device_array(SHAPE, np.float32)
    bad = x.copy()
    bad[1, 3] = np.nan
    d_x.copy_to_device(bad)
    with pytest.raises(ValueError, match="at row 1, column 3"):
        softmax(d_x, out=d_y, check=True)
    d_x.copy_to_device(x)
    softmax(d_x, out=d_y, check=True)
    assert check_matrix(d_y.copy_to_host(), x).passed
    bad = x.copy()
    bad[3, 39] = np.inf
    d_x.copy_to_device(bad)
    with pytest.raises(ValueError, match="at row 3, column 39"):
        softmax(d_x, out=d_y, check=True)


@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_neg_inf_masks_get_weight_exactly_zero(kind):
    x = matrix_fixture("random", SHAPE)
    x[0, :20] = -np.inf
    x[1, ::3] = -np.inf
    x[3, 39] = -np.inf
    y = softmax(x if kind == "numpy" else _device(x))
    _masked_check(y, x)
    _masked_check(softmax(x, check=False), x)


@pytest.mark.parametrize("method", ["fused", "stages"])
def test_the_protocol_kernels_refuse_neg_inf(method):
    x = matrix_fixture("random", SHAPE)
    x[1, 2] = -np.inf
    with pytest.raises(ValueError, match="at row 1, column 2"):
        softmax(x, method=method)


def test_a_fully_masked_row_raises_when_checked_and_is_nan_when_not():
    x = matrix_fixture("random", SHAPE)
    x[2, :] = -np.inf
    with pytest.raises(ValueError, match="row 2 has no finite entry"):
        softmax(_device(x), check=True)
    with np.errstate(invalid="ignore"):          # the simulator computes on the host
        y = softmax(x, check=False)
    assert np.all(np.isnan(y[2]))
    keep = np.ones(SHAPE[0], bool)
    keep[2] = False
    assert check_matrix(y[keep], x[keep]).passed


def test_check_false_lets_nan_propagate_without_raising():
    x = matrix_fixture("random", SHAPE)
    x[1, 4] = np.nan
    with np.errstate(invalid="ignore"):
        y = softmax(_device(x), check=False).copy_to_host()
    assert np.all(np.isnan(y[1]))
    rows = [0, 2, 3]
    assert check_matrix(y[rows], x[rows]).passed


def test_repeated_calls_with_out_reuse_one_plan_and_allocate_nothing(monkeypatch):
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = _device(x), cuda.device_array(SHAPE, np.float32)
    api.clear_plans()
    softmax(d_x, out=d_y)
    plans = dict(api._plans)
    assert len(plans) == 1

    def no_allocation(*args, **kwargs):
        raise AssertionError("softmax allocated device memory on a repeated call with out=")

    for name in ("device_array", "to_device", "mapped_array", "device_array_like"):
        monkeypatch.setattr(cuda, name, no_allocation)
    for _ in range(3):
        assert softmax(d_x, out=d_y) is d_y
    assert dict(api._plans) == plans
    monkeypatch.undo()
    assert check_matrix(d_y.copy_to_host(), x).passed
    # Negative control: a call without out= must allocate (the patch would catch it).
    for name in ("device_array",):
        monkeypatch.setattr(cuda, name, no_allocation)
    with pytest.raises(AssertionError, match="allocated device memory"):
        softmax(d_x)


def test_a_device_input_is_never_copied_to_the_host(monkeypatch):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = _device(x), cuda.device_array(SHAPE, np.float32)

    def no_host_copy(self, *args, **kwargs):
        raise AssertionError("a device array was copied to the host")

    monkeypatch.setattr(FakeCUDAArray, "copy_to_host", no_host_copy)
    softmax(d_x, out=d_y)
    softmax(d_x, out=d_y, method="fused")
    with pytest.raises(AssertionError, match="copied to the host"):
        d_y.copy_to_host()          # the patch is live: a copy would have been caught
    monkeypatch.undo()
    assert check_matrix(d_y.copy_to_host(), x).passed


def test_the_plan_cache_is_bounded(monkeypatch):
    # A bound of 3 here: each call is a simulated launch (filling the real 64 took most of a minute); the
    # same eviction code drops the oldest plan. tests/gpu/test_api_gpu.py fills the real bound.
    monkeypatch.setattr(api, "PLAN_CACHE_SIZE", 3)
    api.clear_plans()
    for _ in range(api.PLAN_CACHE_SIZE + 5):
        softmax(_device(matrix_fixture("random", (1, 8))))
    assert len(api._plans) == api.PLAN_CACHE_SIZE


def test_an_evicted_plan_ends_the_shortcut_of_its_remembered_call(monkeypatch):
    from numba_softmax import arrays, validation
    monkeypatch.setattr(api, "PLAN_CACHE_SIZE", 2)
    api.clear_plans()
    x = matrix_fixture("random", (2, 8))
    dx, dy = _device(x), _device(np.zeros((2, 8), np.float32))
    softmax(dx, out=dy)
    first = _only_repeat().plan
    assert first.cached
    for _ in range(api.PLAN_CACHE_SIZE):  # two other calls push the first plan out
        softmax(_device(matrix_fixture("offset", (1, 8))), out=_device(np.zeros((1, 8), np.float32)))
    assert not first.cached and all(plan.cached for plan in api._plans.values())
    reads = []
    real_read = arrays.read_device
    monkeypatch.setattr(validation, "read_device", lambda *a, **k: reads.append(1) or real_read(*a, **k))
    dy.copy_to_device(np.zeros((2, 8), np.float32))
    softmax(dx, out=dy)
    assert reads == [1, 1]                                # the full path: both arrays read again
    assert check_matrix(_host(dy), x).passed


def test_streams_and_their_kinds():
    x = matrix_fixture("random", SHAPE)
    assert check_matrix(softmax(x, stream=cuda.stream()), x).passed
    assert check_matrix(_host(softmax(_device(x), stream=cuda.stream(), check=False)), x).passed
    with pytest.raises(ValueError, match="stream must be"):
        softmax(x, stream="the default one")


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method 'magic'"):
        softmax(matrix_fixture("random", SHAPE), method="magic")
    x = _device(matrix_fixture("random", SHAPE))
    with pytest.raises(ValueError, match=r"unknown method \['auto'\]"):   # not a hashing error
        softmax(x, out=_device(np.zeros(SHAPE, np.float32)), method=["auto"])


# ---- tiled_softmax ------------------------------------------------------------------------------

LENGTHS = np.array([5, 37, 12])
TILE = 16


def test_tiled_device_input_gives_device_results_and_reuses_buffers():
    values = packed_fixture("random", LENGTHS)
    host = tiled_softmax(values, LENGTHS, tile_elements=TILE)
    assert isinstance(host.out, np.ndarray) and isinstance(host.row_sum, np.ndarray)
    buffers = TiledBuffers.allocate(build_layout(LENGTHS, TILE))
    first = tiled_softmax(_device(values), LENGTHS, tile_elements=TILE, buffers=buffers)
    assert not isinstance(first.out, np.ndarray) and first.out is buffers.out
    assert check_packed(first.out.copy_to_host(), values, LENGTHS).passed
    assert np.array_equal(first.row_sum.copy_to_host(), host.row_sum)
    invocations = dict(buffers.invocations)
    other = packed_fixture("offset", LENGTHS)
    second = tiled_softmax(_device(other), LENGTHS, tile_elements=TILE, buffers=buffers)
    assert check_packed(second.out.copy_to_host(), other, LENGTHS).passed
    assert buffers.invocations == invocations          # prepared once, reused


@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_tiled_check_names_the_packed_row_and_column(kind):
    values = packed_fixture("random", LENGTHS)
    values[5 + 20] = np.nan
    values[5 + 30] = np.inf
    with pytest.raises(ValueError, match="at row 1, column 20"):
        tiled_softmax(values if kind == "numpy" else _device(values), LENGTHS, tile_elements=TILE)
    values[5 + 20] = 0.5
    values[5 + 30] = -np.inf
    with pytest.raises(ValueError, match="at row 1, column 30"):
        tiled_softmax(values, LENGTHS, tile_elements=TILE)


def _only_repeat():
    (entry,) = api._repeats.values()
    return entry


def test_a_repeated_call_skips_the_checks_and_still_writes_the_right_out(monkeypatch):
    from numba_softmax import arrays, validation
    api.clear_plans()
    x = matrix_fixture("random", SHAPE)
    dx, dy = _device(x), _device(np.zeros(SHAPE, np.float32))
    softmax(dx, out=dy)
    reads = []
    real_read = arrays.read_device
    monkeypatch.setattr(validation, "read_device", lambda *a, **k: reads.append(1) or real_read(*a, **k))
    dy.copy_to_device(np.zeros(SHAPE, np.float32))
    assert softmax(dx, out=dy) is dy
    assert reads == []                                   # the same call again: no array read
    assert check_matrix(_host(dy), x).passed
    # Negative controls: any difference takes the full path and a plan of its own.
    other = _device(np.zeros(SHAPE, np.float32))
    softmax(dx, out=other)                               # another out object
    assert len(reads) == 2 and check_matrix(_host(other), x).passed
    softmax(dx, out=other, check=False)                  # another check
    softmax(dx, out=other, method="fused")               # another method
    assert len(reads) == 6
    x2 = matrix_fixture("offset", SHAPE)
    dx2 = _device(x2)
    softmax(dx2, out=other)                              # another input: its own result, not dx's
    assert check_matrix(_host(other), x2).passed
    assert len(reads) == 8
    softmax(dx2, out=other)                              # repeated: the shortcut again
    assert len(reads) == 8
    softmax(dx, out=dy)                                  # an earlier call, after others: still remembered
    assert len(reads) == 8
    api.clear_plans()                                    # a dropped plan ends the shortcut
    softmax(dx2, out=other)
    assert len(reads) == 10


def test_a_new_array_never_takes_the_previous_calls_shortcut():
    """The shortcut holds its arrays weakly and compares objects, not addresses: a new input (even
    one at a freed array's address) takes the full path. (Here the simulator's plan holds its arrays;
    tests/gpu/test_api_gpu.py checks that a freed array is released.)"""
    api.clear_plans()
    x = matrix_fixture("random", SHAPE)
    dx, dy = _device(x), _device(np.zeros(SHAPE, np.float32))
    softmax(dx, out=dy)
    assert _only_repeat().x() is dx and _only_repeat().out() is dy
    x2 = matrix_fixture("offset", SHAPE)
    dx2 = _device(x2)
    softmax(dx2, out=dy)
    assert any(r.x() is dx2 for r in api._repeats.values())
    assert check_matrix(_host(dy), x2).passed
