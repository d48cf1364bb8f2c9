import numpy as np
import pytest

from numba_softmax.validation import (Operand, check_out, check_separate, element_type, plan_operands, read_operand,
                                      requested_type, validate_packed)


def good(rows=3, cols=5, dtype=np.float32):
    return np.arange(rows * cols, dtype=dtype).reshape(rows, cols)


def test_a_numpy_array_is_read_and_not_scanned_on_the_host():
    """Values are checked on the device (tests/sim/test_api_sim.py): a NaN passes the host checks."""
    x = good()
    x[1, 2] = np.nan
    assert read_operand(x) == ("numpy", None, (3, 5), None, np.float32, None)
    assert read_operand(good(3, 10)[:, ::2]).strides == (40, 8)
    with pytest.raises(ValueError, match="x: must be a numpy array, a Numba device array"):
        read_operand([[1.0, 2.0]])


@pytest.mark.parametrize("dtype, name", [
    (np.float32, "float32"), (np.dtype("f2"), "float16"), ("float64", "float64"), ("half", "float16"),
    ("bfloat16", "bfloat16"), (None, None),
])
def test_dtype_names(dtype, name):
    assert requested_type(dtype) == name


@pytest.mark.parametrize("dtype", [np.int32, "int8", "complex64", "bf16", [1], 3.5])
def test_a_dtype_softmax_does_not_make_is_refused(dtype):
    with pytest.raises(ValueError, match="dtype: expected one of float32, float16, bfloat16, float64"):
        requested_type(dtype)


def test_element_types_and_bfloat16_bits():
    assert element_type(np.dtype(np.float16), None) == "float16"
    assert element_type("bfloat16", None) == "bfloat16"                 # torch's bfloat16, read by name
    assert element_type(np.dtype(np.uint16), "bfloat16") == "bfloat16"  # bits, named by dtype=
    for dtype, message in ((np.uint16, "uint16 is read as bfloat16 bits only with dtype='bfloat16'"),
                           (np.int64, "x: dtype int64 is not one"), (np.bool_, "x: dtype bool is not one"),
                           (np.complex128, "x: dtype complex128 is not one")):
        with pytest.raises(ValueError, match=message):
            element_type(np.dtype(dtype), "float32")


def test_packed_rows_validation():
    values = np.arange(10, dtype=np.float32)
    kind, pointer, lengths = validate_packed(values, [3, 7])
    assert (kind, pointer, lengths.dtype) == ("numpy", None, np.int64)
    with pytest.raises(ValueError, match="row 1 is empty"):
        validate_packed(values, [10, 0])
    with pytest.raises(ValueError, match="sum to 9 but values holds 10"):
        validate_packed(values, [3, 6])
    with pytest.raises(ValueError, match="zero rows"):
        validate_packed(values, np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        validate_packed(values, [3.0, 7.0])
    with pytest.raises(ValueError, match="must be 1-D"):
        validate_packed(values.reshape(2, 5), [3, 7])
    with pytest.raises(ValueError, match="must be contiguous"):
        validate_packed(np.arange(20, dtype=np.float32)[::2], [3, 7])


def _device(shape, pointer=0x7F0000000000, strides=None, dtype=np.float32):
    """A device array as read (never dereferenced here)."""
    return Operand("cuda_array_interface", pointer, shape, strides, np.dtype(dtype), None)


def test_out_is_checked_against_the_input():
    host = read_operand(good())
    check_out(read_operand(good()), host, "float32")
    with pytest.raises(ValueError, match=r"out: must have x's shape \(3, 5\), got \(4, 5\)"):
        check_out(read_operand(good(4, 5)), host, "float32")
    with pytest.raises(ValueError, match="out: must be a numpy array for a numpy input"):
        check_out(_device((3, 5)), host, "float32")
    with pytest.raises(ValueError, match="out: must be a device array for a device input"):
        check_out(host, _device((3, 5)), "float32")
    with pytest.raises(ValueError, match="out: dtype float16 is not the result's float32"):
        check_out(_device((3, 5), dtype=np.float16), _device((3, 5)), "float32")
    check_out(_device((3, 5), dtype=np.uint16), _device((3, 5)), "bfloat16")


def test_out_overlapping_the_input_is_refused():
    check_separate((0x1000, (3, 5), None, 4), (0x1000 + 3 * 5 * 4, (3, 5), None, 4))     # back to back: apart
    with pytest.raises(ValueError, match="out: overlaps x"):
        check_separate((0x1000, (3, 5), None, 4), (0x1000 + 3 * 5 * 4 - 4, (3, 5), None, 4))
    # Interleaved rows of one buffer: x = buffer[:, :5], out = buffer[:, 5:] are apart, out = buffer[:, 4:9] is not.
    check_separate((0x1000, (3, 5), (40, 4), 4), (0x1000 + 20, (3, 5), (40, 4), 4))
    with pytest.raises(ValueError, match="out: overlaps x"):
        check_separate((0x1000, (3, 5), (40, 4), 4), (0x1000 + 16, (3, 5), (40, 4), 4))
    # Element sizes differ: float16 out between float32 rows.
    check_separate((0x1000, (3, 4), (40, 4), 4), (0x1000 + 16, (3, 12), (40, 2), 2))
    with pytest.raises(ValueError, match="out: overlaps x"):
        check_separate((0x1000, (3, 4), (40, 4), 4), (0x1000 + 14, (3, 12), (40, 2), 2))


def test_plans_refuse_misaligned_and_self_overlapping_out():
    x = _device((4, 8), 0x1000)
    assert plan_operands(x, _device((4, 8), 0x2000), ("float32", "float32"), 1)[0] == (4, 8, 8)
    with pytest.raises(ValueError, match="out: the data does not start on a 4-byte boundary"):
        plan_operands(x, _device((4, 8), 0x2002), ("float32", "float32"), 1)
    with pytest.raises(ValueError, match="out: its elements overlap one another"):
        plan_operands(x, _device((4, 8), 0x2000, strides=(16, 4)), ("float32", "float32"), 1)
    with pytest.raises(ValueError, match="out: overlaps x"):
        plan_operands(x, _device((4, 8), 0x1000 + 64), ("float32", "float32"), 1)
