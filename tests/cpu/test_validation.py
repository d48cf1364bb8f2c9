import numpy as np
import pytest

from numba_softmax.validation import Matrix, check_separate, validate_matrix, validate_out, validate_packed


def good(rows=3, cols=5):
    return np.arange(rows * cols, dtype=np.float32).reshape(rows, cols)


@pytest.mark.parametrize("x, message", [
    (good().astype(np.float64), "must be float32, got float64"),
    (good().ravel(), "must be 2-D"),
    (np.asfortranarray(good(4, 4)), "C-contiguous"),
    (good()[:, ::2], "C-contiguous"),
    (np.zeros((0, 5), np.float32), "zero rows"),
    (np.zeros((3, 0), np.float32), "empty rows"),
    ([[1.0, 2.0]], "must be a numpy array, a Numba device array"),
])
def test_bad_matrices_are_rejected_with_the_reason(x, message):
    with pytest.raises(ValueError, match=message):
        validate_matrix(x)


def test_good_matrix_passes_and_is_not_scanned_on_the_host():
    """Values are checked on the device (tests/sim/test_api_sim.py): a NaN passes the host checks."""
    x = good()
    x[1, 2] = np.nan
    assert validate_matrix(x) == ("numpy", None, (3, 5), None)


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


class _DeviceMatrix:
    """A device array as its ``__cuda_array_interface__`` describes it (never dereferenced here)."""

    def __init__(self, shape, pointer=0x7F0000000000):
        self.__cuda_array_interface__ = {"shape": shape, "strides": None, "typestr": "<f4",
                                         "data": (pointer, False), "version": 3}


def test_out_is_checked_against_the_input():
    host = validate_matrix(good())
    assert isinstance(host, Matrix) and host.shape == (3, 5)
    assert validate_out(good(), host) == ("numpy", None, (3, 5), None)
    with pytest.raises(ValueError, match=r"out must have the input's shape \(3, 5\), got \(4, 5\)"):
        validate_out(good(4, 5), host)
    with pytest.raises(ValueError, match="out must be a numpy array for a numpy input"):
        validate_out(_DeviceMatrix((3, 5)), host)
    device = validate_matrix(_DeviceMatrix((3, 5)))
    assert device == ("cuda_array_interface", 0x7F0000000000, (3, 5), None)
    with pytest.raises(ValueError, match="out must be a device array for a device input"):
        validate_out(good(), device)
    with pytest.raises(ValueError, match="out must be a numpy array, a Numba device array"):
        validate_out([[1.0]], device)


def test_out_overlapping_the_input_is_refused():
    check_separate(0x1000, 0x1000 + 3 * 5 * 4, (3, 5))            # back to back: apart
    with pytest.raises(ValueError, match="out overlaps the input"):
        check_separate(0x1000, 0x1000 + 3 * 5 * 4 - 4, (3, 5))
