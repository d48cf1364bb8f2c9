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
    ([[1.0, 2.0]], "numpy array or a CUDA device array"),
])
def test_bad_matrices_are_rejected_with_the_reason(x, message):
    with pytest.raises(ValueError, match=message):
        validate_matrix(x)


@pytest.mark.parametrize("value, kind", [(np.nan, "NaN"), (np.inf, "infinity"), (-np.inf, "infinity")])
def test_nonfinite_values_name_the_first_offending_row_and_column(value, kind):
    x = good(4, 6)
    x[2, 3] = value
    x[3, 0] = value
    with pytest.raises(ValueError, match=f"{kind} at row 2, column 3"):
        validate_matrix(x)


def test_good_matrix_passes():
    x = good()
    assert validate_matrix(x) is x


def test_packed_rows_validation():
    values = np.arange(10, dtype=np.float32)
    host, lengths = validate_packed(values, [3, 7])
    assert lengths.dtype == np.int64
    with pytest.raises(ValueError, match="row 1 is empty"):
        validate_packed(values, [10, 0])
    with pytest.raises(ValueError, match="sum to 9 but values holds 10"):
        validate_packed(values, [3, 6])
    with pytest.raises(ValueError, match="zero rows"):
        validate_packed(values, np.array([], dtype=np.int64))
    with pytest.raises(ValueError, match="integer"):
        validate_packed(values, [3.0, 7.0])
    bad = values.copy()
    bad[5] = np.nan
    with pytest.raises(ValueError, match="NaN at row 1, column 2"):
        validate_packed(bad, [3, 7])
