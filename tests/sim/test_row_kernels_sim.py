"""Experiment A kernels in the Numba CUDA simulator (logic only, tiny cases)."""

import numpy as np
import pytest

from controls import no_max_launches
from numba_softmax import softmax
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.numerics import SIMULATOR
from numba_softmax.oracle import check_matrix

SHAPES = [(1, 128), (7, 781)]


def test_running_in_the_simulator():
    assert SIMULATOR


@pytest.mark.parametrize("method", ["fused", "stages"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("family", ["random", "offset"])
def test_softmax_matches_the_oracle(method, shape, family):
    x = matrix_fixture(family, shape)
    result = check_matrix(softmax(x, method=method), x)
    assert result.passed, result.describe()


def test_masked_tail_is_written_and_nothing_past_it():
    x = matrix_fixture("dominant", (2, 300))
    out = np.full((2, 300), -1.0, dtype=np.float32)
    softmax(x, method="fused", out=out)
    assert np.all(out >= 0) and check_matrix(out, x).passed


def test_device_array_in_device_array_out():
    from numba import cuda
    x = matrix_fixture("constant", (1, 128))
    y = softmax(cuda.to_device(x))
    assert type(y).__name__ == "FakeCUDAArray"
    assert check_matrix(y.copy_to_host(), x).passed


def test_row_too_long_for_fused_kernel_is_an_error_not_garbage():
    with pytest.raises(ValueError, match="row too long for the fused kernel: 4097 columns"):
        softmax(np.zeros((1, 4097), dtype=np.float32), method="fused")


def test_nan_is_rejected_before_launch():
    x = matrix_fixture("random", (2, 128))
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match="NaN at row 1, column 7"):
        softmax(x)


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        softmax(matrix_fixture("random", (1, 128)), method="magic")


def test_negative_control_without_max_subtraction_is_rejected():
    from numba import cuda

    from numba_softmax.launch.plan import run_launches_with_dispatcher
    x = matrix_fixture("offset", (1, 128))
    d_y = cuda.device_array((1, 128), dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        run_launches_with_dispatcher(no_max_launches(cuda.to_device(x), d_y))
    result = check_matrix(d_y.copy_to_host(), x)
    assert not result.passed and not result.finite_nonneg


@pytest.mark.parametrize("shape", [(7, 781), (2, 128), (3, 2053)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_row_copy_in_the_fused_geometry_copies_every_bit(shape):
    from numba import cuda

    from numba_softmax.kernels.row_copy import row_copy_launches
    from numba_softmax.launch.plan import run_launches_with_dispatcher
    x = matrix_fixture("random", shape)
    d_y = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
    launches = row_copy_launches(cuda.to_device(x), d_y)
    assert launches[0].grid == (shape[0],) and launches[0].block == (256,)
    run_launches_with_dispatcher(launches)
    assert np.array_equal(d_y.copy_to_host().view(np.uint32), x.view(np.uint32))


def test_row_copy_refuses_what_the_fused_geometry_cannot_hold():
    from numba_softmax.kernels.row_copy import row_copy_launches
    with pytest.raises(ValueError, match="4097 columns > 4096"):
        row_copy_launches(np.zeros((1, 4097), np.float32), np.zeros((1, 4097), np.float32))
    with pytest.raises(ValueError, match="one shape"):
        row_copy_launches(np.zeros((2, 8), np.float32), np.zeros((2, 9), np.float32))
