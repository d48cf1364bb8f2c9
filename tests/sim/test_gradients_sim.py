"""log_softmax(), softmax_backward() and log_softmax_backward() in the Numba CUDA simulator: numpy and device
arrays, N-D inputs along any dimension, strided device rows, ``out=``, the plan cache, and what is refused with
the argument named. The kernels themselves: tests/kernels/test_auto_gradients.py; the torch operators on a GPU:
tests/gpu/test_torch_ops_gpu.py."""

import numpy as np
import pytest
from numba import cuda

from numba_softmax import api, log_softmax, log_softmax_backward, softmax, softmax_backward
from numba_softmax.element_types import from_float64, to_float64
from numba_softmax.oracle import (check_scaled, oracle_log_softmax, oracle_log_softmax_backward, oracle_softmax,
                                  oracle_softmax_backward)

RNG = np.random.default_rng(20261207)


def _rows_last(a, dim):
    a = np.moveaxis(np.asarray(a, dtype=np.float64), dim, -1)
    return a.reshape(-1, a.shape[-1])


def assert_log_softmax(y, x, element, dim=-1):
    y = y if isinstance(y, np.ndarray) else y.copy_to_host()
    ref, scale = oracle_log_softmax(_rows_last(to_float64(x, element), dim))
    passed, ratio, where = check_scaled(np.moveaxis(y, dim, -1).reshape(ref.shape), ref, scale, element)
    assert passed, f"worst tolerance ratio {ratio:.3g} at {where}"


def _gradient_case(shape, dim, form, element="float32"):
    """(y, dy) of ``element``: y the float64 forward of random inputs along ``dim``, dy random."""
    x = RNG.standard_normal(shape) * 2
    rows = _rows_last(x, dim)
    y = oracle_softmax(rows) if form == "softmax" else oracle_log_softmax(rows)[0]
    moved = np.moveaxis(x, dim, -1).shape
    y = np.moveaxis(y.reshape(moved), -1, dim)
    return from_float64(y, element), from_float64(RNG.standard_normal(shape), element)


def assert_gradient(dx, y, dy, form, element="float32", dim=-1):
    dx = dx if isinstance(dx, np.ndarray) else dx.copy_to_host()
    oracle = oracle_softmax_backward if form == "softmax" else oracle_log_softmax_backward
    ref, scale = oracle(_rows_last(to_float64(y, element), dim), _rows_last(to_float64(dy, element), dim))
    got = np.moveaxis(dx, dim, -1).reshape(ref.shape)
    passed, ratio, where = check_scaled(got, ref, scale, element)
    assert passed, f"{form} backward: worst tolerance ratio {ratio:.3g} at {where}"


@pytest.mark.parametrize("kind", ["numpy", "numba"])
@pytest.mark.parametrize("element", ["float32", "float64"])
def test_log_softmax_of_each_kind_against_float64(kind, element):
    x = from_float64(RNG.standard_normal((3, 37)) * 3, element)
    y = log_softmax(x if kind == "numpy" else cuda.to_device(x))
    assert isinstance(y, np.ndarray) == (kind == "numpy")
    assert_log_softmax(y, x, element)


def test_log_softmax_along_a_dimension_before_the_last_and_n_d():
    x = from_float64(RNG.standard_normal((2, 9, 5)), "float32")
    assert_log_softmax(log_softmax(cuda.to_device(x), dim=1), x, "float32", dim=1)
    assert_log_softmax(log_softmax(x, dim=0), x, "float32", dim=0)
    assert_log_softmax(log_softmax(cuda.to_device(x)), x, "float32")


def test_log_softmax_and_softmax_of_one_input_keep_their_own_plans():
    d_x = cuda.to_device(from_float64(RNG.standard_normal((2, 20)), "float32"))
    out = cuda.device_array((2, 20), np.float32)
    host = d_x.copy_to_host()
    for _ in range(2):  # the second round takes the remembered calls
        softmax(d_x, out=out)
        assert np.allclose(out.copy_to_host().sum(axis=1), 1, atol=1e-5)
        log_softmax(d_x, out=out)
        assert_log_softmax(out, host, "float32")


def test_log_softmax_check_true_names_the_offending_position():
    x = from_float64(RNG.standard_normal((3, 20)), "float32")
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match=r"row 1, column 7"):
        log_softmax(cuda.to_device(x), check=True)


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_backward_of_each_kind_against_float64(form, kind):
    y, dy = _gradient_case((3, 41), -1, form)
    function = softmax_backward if form == "softmax" else log_softmax_backward
    dx = function(y, dy) if kind == "numpy" else function(cuda.to_device(y), cuda.to_device(dy))
    assert isinstance(dx, np.ndarray) == (kind == "numpy")
    assert_gradient(dx, y, dy, form)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_backward_of_numpy_inputs_along_any_dimension(dim):
    y, dy = _gradient_case((4, 6, 5), dim, "softmax")
    assert_gradient(softmax_backward(y, dy, dim=dim), y, dy, "softmax", dim=dim)


def test_backward_of_strided_device_rows_into_out():
    """y, dy and out each a slice of its own wider buffer (rows apart by more than their length, starts off
    16 bytes, each its own way): no copy, written in place."""
    y, dy = _gradient_case((3, 30), -1, "softmax")
    buffers = [np.zeros((3, 37), np.float32) for _ in range(3)]
    buffers[0][:, 1:31], buffers[1][:, 3:33] = y, dy
    d_y, d_dy, d_out = (cuda.to_device(b) for b in buffers)
    out = d_out[:, 5:35]
    assert softmax_backward(d_y[:, 1:31], d_dy[:, 3:33], out=out) is out
    assert_gradient(out, y, dy, "softmax")
    untouched = d_out.copy_to_host()
    assert (untouched[:, :5] == 0).all() and (untouched[:, 35:] == 0).all()


def test_backward_refuses_what_it_cannot_take_naming_the_argument():
    y, dy = _gradient_case((3, 8), -1, "softmax")
    d_y = cuda.to_device(y)
    with pytest.raises(ValueError, match="dy: must have y's shape"):
        softmax_backward(d_y, cuda.to_device(np.ascontiguousarray(dy[:, :4])))
    with pytest.raises(ValueError, match="dy: dtype float64 is not y's float32"):
        softmax_backward(d_y, cuda.to_device(dy.astype(np.float64)))
    with pytest.raises(ValueError, match="dy: must live where y does"):
        softmax_backward(d_y, dy)
    with pytest.raises(ValueError, match="out: dtype float64 is not y's float32"):
        softmax_backward(d_y, cuda.to_device(dy), out=cuda.device_array((3, 8), np.float64))
    with pytest.raises(ValueError, match="dim"):
        softmax_backward(d_y, cuda.to_device(dy), dim=2)
    with pytest.raises(ValueError, match="out: overlaps dy"):
        d_dy = cuda.to_device(dy)
        softmax_backward(d_y, d_dy, out=d_dy)
    with pytest.raises(ValueError, match="the backward runs along rows"):
        softmax_backward(d_y, cuda.to_device(dy), dim=0)
    api.clear_plans()
