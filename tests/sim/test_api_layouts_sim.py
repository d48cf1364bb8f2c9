"""softmax() on the shapes and types callers bring, in the Numba CUDA simulator: every element type against the
oracle with its tolerance, dtype= conversions, strided inputs and outputs (slices of wider buffers, starts off
16 bytes), N-D arrays along their last dimension, a dimension before the last, the check modes and what is
refused. The same on a GPU with torch tensors: tests/gpu/test_api_layouts_gpu.py."""

import numpy as np
import pytest
from numba import cuda

from numba_softmax import api, softmax
from numba_softmax.element_types import STORAGE_DTYPES, from_float64
from numba_softmax.oracle import check_matrix

RNG = np.random.default_rng(20261206)
TYPES = ("float32", "float16", "bfloat16", "float64")


def values(shape, element="float32"):
    """Random inputs held as ``element`` (bfloat16: its uint16 bits)."""
    return from_float64(RNG.standard_normal(shape) * 3, element)


def _host(y):
    return y if isinstance(y, np.ndarray) else y.copy_to_host()


def assert_softmax(y, x, types, dim=-1):
    """``y`` is softmax(x) along ``dim`` within the output type's tolerance (the oracle, row by row)."""
    y, x = np.moveaxis(_host(y), dim, -1), np.moveaxis(np.asarray(x), dim, -1)
    assert y.dtype == STORAGE_DTYPES[types[1]]
    result = check_matrix(y.reshape(-1, y.shape[-1]), x.reshape(-1, x.shape[-1]), types)
    assert result.passed, result.describe()


def _dtype_argument(element):
    """dtype= for ``element``: a bfloat16 input's uint16 bits are named by dtype='bfloat16'."""
    return "bfloat16" if element == "bfloat16" else None


@pytest.mark.parametrize("element", TYPES)
@pytest.mark.parametrize("kind", ["numpy", "numba"])
def test_every_element_type_against_the_oracle(kind, element):
    x = values((3, 40), element)
    y = softmax(x if kind == "numpy" else cuda.to_device(x), dtype=_dtype_argument(element))
    assert isinstance(y, np.ndarray) == (kind == "numpy")
    assert_softmax(y, x, (element, element))


@pytest.mark.parametrize("types, dtype", [
    (("float16", "float32"), np.float32),
    (("float32", "bfloat16"), "bfloat16"),
    (("float32", "float64"), np.dtype("float64")),
    (("float64", "float32"), "single"),
    (("float16", "float64"), np.float64),
])
def test_dtype_casts_the_input_first(types, dtype):
    x = values((3, 40), types[0])
    assert_softmax(softmax(cuda.to_device(x), dtype=dtype), x, types)
    out = cuda.device_array((3, 40), STORAGE_DTYPES[types[1]])
    assert softmax(cuda.to_device(x), dtype=dtype, out=out) is out
    assert_softmax(out, x, types)


def test_a_bfloat16_input_needs_dtype_and_gives_bfloat16():
    bits = values((2, 16), "bfloat16")
    with pytest.raises(ValueError, match="x: uint16 is read as bfloat16 bits only with dtype='bfloat16'"):
        softmax(bits)
    y = softmax(bits, dtype="bfloat16")
    assert y.dtype == np.uint16
    assert_softmax(y, bits, ("bfloat16", "bfloat16"))


def test_strided_rows_of_wider_buffers_in_and_out():
    """x = wide[:, 3:43] (a start 12 bytes past a 16-byte boundary), out the right half of another buffer."""
    wide = values((4, 64))
    d_wide = cuda.to_device(wide)
    assert_softmax(softmax(d_wide[:, 3:43]), wide[:, 3:43], ("float32", "float32"))
    target = cuda.to_device(np.full((4, 100), -1.0, np.float32))
    softmax(d_wide[:, 3:43], out=target[:, 51:91])
    written = target.copy_to_host()
    assert_softmax(written[:, 51:91], wide[:, 3:43], ("float32", "float32"))
    assert np.all(written[:, :51] == -1) and np.all(written[:, 91:] == -1)     # nothing else written
    every_other = cuda.to_device(values((8, 40)))
    assert_softmax(softmax(every_other[::2]), every_other.copy_to_host()[::2], ("float32", "float32"))


def test_x_and_out_may_interleave_in_one_buffer_but_not_overlap():
    buffer = cuda.to_device(values((4, 80)))
    x = buffer.copy_to_host()[:, :40]
    softmax(buffer[:, :40], out=buffer[:, 40:])
    assert_softmax(buffer.copy_to_host()[:, 40:], x, ("float32", "float32"))
    with pytest.raises(ValueError, match="out: overlaps x"):
        softmax(buffer[:, :40], out=buffer[:, 20:60])


def test_n_d_inputs_along_their_last_dimension_without_a_copy():
    x = values((2, 3, 20), "float16")
    assert_softmax(softmax(cuda.to_device(x)), x, ("float16", "float16"))
    assert_softmax(softmax(x), x, ("float16", "float16"))
    wide = values((2, 3, 32))
    d_wide = cuda.to_device(wide)
    out = cuda.device_array((2, 3, 20), np.float64)
    softmax(d_wide[:, :, 5:25], dtype="float64", out=out)             # leading dimensions merge: stride 32
    assert_softmax(out, wide[:, :, 5:25], ("float32", "float64"))
    one_d = values(50)                                                # one row
    assert_softmax(softmax(cuda.to_device(one_d)).copy_to_host()[None, :], one_d[None, :], ("float32", "float32"))
    assert_softmax(softmax(one_d[::2])[None, :], one_d[None, ::2], ("float32", "float32"))   # numpy: copied


def test_leading_dimensions_that_do_not_merge_are_refused_not_copied():
    d_x = cuda.to_device(values((2, 3, 8)))
    with pytest.raises(ValueError, match="do not merge into one row index of a uniform stride"):
        softmax(d_x[:, :2, :])
    with pytest.raises(ValueError, match="x: the elements along dim 1 are 4 elements apart"):
        softmax(cuda.to_device(values((8, 4))).T)


def test_a_numpy_array_of_any_strides_and_dim_is_copied_and_lands_in_out():
    x = values((3, 5, 7))
    for dim in (0, 1, -1):
        assert_softmax(softmax(x, dim=dim), x, ("float32", "float32"), dim)
    out = np.zeros((3, 5, 14), np.float16)[:, :, ::2]
    assert softmax(x[:, ::-1, :], dim=1, dtype=np.float16, out=out) is out
    assert_softmax(out, x[:, ::-1, :], ("float32", "float16"), 1)


def test_dim_along_a_transposed_matrix_is_rows_when_out_has_the_same_layout():
    x = values((20, 6))
    out = cuda.device_array((20, 6), np.float32)
    softmax(cuda.to_device(x).T, dim=0, out=out.T, check=True)      # the softmax along x's own rows
    assert_softmax(out, x, ("float32", "float32"))


def test_a_dimension_before_the_last_runs_the_column_kernel():
    x = values((3, 5, 8))
    for dim in (0, 1):
        assert_softmax(softmax(cuda.to_device(x), dim=dim), x, ("float32", "float32"), dim)
    wide = values((3, 5, 12))
    out = cuda.device_array((3, 5, 16), np.float32)[:, :, 2:10]
    softmax(cuda.to_device(wide)[:, :, :8], dim=1, out=out, check=True)
    assert_softmax(out, wide[:, :, :8], ("float32", "float32"), 1)
    x[2, 3, 6] = np.nan
    with pytest.raises(ValueError, match=r"at index \(2, 3, 6\)$"):
        softmax(cuda.to_device(x), dim=1, check=True)


def test_check_true_names_the_index_of_an_n_d_input():
    x = values((2, 3, 8))
    x[1, 2, 5] = np.nan
    message = r"x has a non-finite value \(NaN or infinity\) at index \(1, 2, 5\)$"
    with pytest.raises(ValueError, match=message):
        softmax(cuda.to_device(x), check=True)
    with pytest.raises(ValueError, match=message):
        softmax(x)                                  # numpy: checked by default
    with pytest.raises(ValueError, match=message):
        softmax(x, dim=1)                           # along another dimension: the same element
    x[1, 2, 5] = 0
    x[0, 1, :] = -np.inf
    with pytest.raises(ValueError, match=r"no finite entry along dim 2 at index \(0, 1, :\)"):
        softmax(x)
    masked = values((2, 3, 4))
    masked[0, :, 3] = -np.inf
    with pytest.raises(ValueError, match=r"no finite entry along dim 1 at index \(0, :, 3\)"):
        softmax(masked, dim=1)
    two_d = values((3, 8))
    two_d[2, 6] = np.inf
    with pytest.raises(ValueError, match=r"at row 2, column 6$"):
        softmax(cuda.to_device(two_d)[:, :], check=True)


def test_the_default_does_not_check_a_device_input():
    x = values((3, 8))
    x[1, 4] = np.nan
    with np.errstate(invalid="ignore"):
        y = softmax(cuda.to_device(x)).copy_to_host()        # no ValueError: the row is NaN, as torch
        assert np.all(np.isnan(y[1]))
        with pytest.raises(ValueError, match="at row 1, column 4"):
            softmax(cuda.to_device(x), check=True)
        assert np.all(np.isnan(softmax(x, check=False)[1]))   # numpy: checked unless check=False
    with pytest.raises(ValueError, match="check: expected None, True or False, got 'yes'"):
        softmax(x, check="yes")


@pytest.mark.parametrize("x, kwargs, message", [
    (np.zeros((3, 4), np.int32), {}, "x: dtype int32 is not one softmax takes"),
    (np.zeros((3, 4), np.complex64), {}, "x: dtype complex64 is not one softmax takes"),
    (np.zeros((3, 4), bool), {}, "x: dtype bool is not one softmax takes"),
    (np.zeros((3, 0), np.float32), {}, r"x: shape \(3, 0\) has a zero-size dimension"),
    (np.zeros((0, 2, 4), np.float32), {}, "zero-size dimension"),
    (np.zeros((), np.float32), {}, "x: a 0-D array"),
    (np.zeros((3, 4), np.float32), {"dim": 2}, r"dim: 2 is out of range for a 2-D array \(expected -2 to 1\)"),
    (np.zeros((3, 4), np.float32), {"dim": "last"}, "dim: expected an integer"),
    (np.zeros((3, 4), np.float32), {"dtype": np.int8}, "dtype: expected one of float32, float16, bfloat16"),
    (np.zeros((3, 4), np.float32), {"dtype": "float64", "method": "fused"}, "x: method='fused' takes float32"),
    (np.zeros((2, 3, 4), np.float32), {"method": "stages"}, "x: method='stages' takes C-contiguous 2-D arrays"),
    (np.zeros((3, 4), np.float32), {"out": np.zeros((3, 4), np.float16)}, "out: dtype float16 is not the result's"),
])
def test_bad_arguments_are_refused_with_the_argument_named(x, kwargs, message):
    with pytest.raises(ValueError, match=message):
        softmax(x, **kwargs)
    if x.ndim and x.size and x.dtype.kind == "f" and "out" not in kwargs:   # the same refusal for a device x
        with pytest.raises(ValueError, match=message):
            softmax(cuda.to_device(x), **kwargs)


def test_a_bad_device_out_is_refused():
    d_x = cuda.to_device(values((4, 8)))
    with pytest.raises(ValueError, match="out: the elements along dim 1 are 2 elements apart"):
        softmax(d_x, out=cuda.device_array((4, 16), np.float32)[:, ::2])
    with pytest.raises(ValueError, match="negative stride"):
        softmax(d_x, out=cuda.device_array((4, 8), np.float32)[::-1])
    with pytest.raises(ValueError, match=r"out: must have x's shape \(4, 8\), got \(2, 4, 4\)"):
        softmax(d_x, out=cuda.device_array((2, 4, 4), np.float32))
    with pytest.raises(ValueError, match="x: method='fused' takes C-contiguous 2-D arrays"):
        softmax(d_x[:, :4], method="fused")


def test_repeated_strided_calls_keep_their_own_plans():
    api.clear_plans()
    wide = values((4, 32))
    d_wide = cuda.to_device(wide)
    x, y16, y32 = d_wide[:, :12], cuda.device_array((4, 12), np.float16), cuda.device_array((4, 12), np.float32)
    for _ in range(2):
        softmax(x, dtype="float16", out=y16)
        softmax(x, out=y32)
    assert len(api._plans) == 2 and len(api._repeats) == 2
    assert_softmax(y16, wide[:, :12], ("float32", "float16"))
    assert_softmax(y32, wide[:, :12], ("float32", "float32"))
