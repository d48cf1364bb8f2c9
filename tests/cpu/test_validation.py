import numpy as np
import pytest

from numba_softmax.validation import validate_matrix, validate_packed


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
