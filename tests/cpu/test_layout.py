"""The layout planner (numba_softmax/layout.py): shapes and strides -> rows or columns plans, or the reason
there is none. Strides in bytes, as numpy gives them; the plans' in elements."""

import numpy as np
import pytest

from numba_softmax.layout import Columns, Rows, merge, normalize_dim, plan_layout, plan_pair, self_overlapping


def plan(array, dim=-1, what="x"):
    return plan_layout(array.shape, array.strides, array.itemsize, dim, what)


def buffer(*shape, dtype=np.float32):
    return np.zeros(shape, dtype)


def test_a_c_contiguous_matrix_is_rows_of_its_width():
    assert plan(buffer(7, 781)) == Rows(7, 781, 781)
    assert plan(buffer(7, 781, dtype=np.float16)) == Rows(7, 781, 781)


def test_one_dimension_is_one_row():
    assert plan(buffer(50)) == Rows(1, 50, 50)
    with pytest.raises(ValueError, match="2 elements apart"):
        plan(buffer(100)[::2])


def test_rows_of_a_wider_buffer_keep_its_row_stride():
    wide = buffer(64, 2048)
    assert plan(wide[:, :1000]) == Rows(64, 1000, 2048)
    assert plan(wide[:, 3:1003]) == Rows(64, 1000, 2048)           # a start that is not 16-byte aligned
    assert plan(wide[::2, :1000]) == Rows(32, 1000, 4096)          # every other row


def test_leading_dimensions_merge_into_one_row_index():
    assert plan(buffer(2, 3, 5, 8)) == Rows(30, 8, 8)
    assert plan(buffer(2, 3, 16)[:, :, :8]) == Rows(6, 8, 16)
    assert plan(buffer(2, 6, 8)[:, ::2, :]) == Rows(6, 8, 16)
    assert plan(buffer(4, 1, 8)) == Rows(4, 8, 8)                  # extent-1 dimensions do not count
    assert plan(buffer(1, 1, 8)) == Rows(1, 8, 8)


def test_leading_dimensions_that_do_not_merge_are_refused():
    with pytest.raises(ValueError, match="do not merge into one row index"):
        plan(buffer(2, 3, 8)[:, :2, :])


def test_a_transposed_matrix_is_refused_along_its_last_dimension():
    with pytest.raises(ValueError, match=r"x: the elements along dim 1 are 7 elements apart"):
        plan(buffer(5, 7).T)


def test_a_transposed_matrix_along_its_first_dimension_is_rows():
    assert plan(buffer(5, 7).T, dim=0) == Rows(5, 7, 7)    # the softmax runs along the original rows


def test_a_dimension_before_the_last_is_a_columns_plan():
    assert plan(buffer(4, 6, 8), dim=1) == Columns(4, 6, 8, (48, 8, 1))
    assert plan(buffer(4, 6, 8), dim=0) == Columns(1, 4, 48, (192, 48, 1))
    assert plan(buffer(2, 3, 4, 5), dim=1) == Columns(2, 3, 20, (60, 20, 1))
    assert plan(buffer(6, 8), dim=0) == Columns(1, 6, 8, (48, 8, 1))
    assert plan(buffer(4, 6, 16)[:, :, :8], dim=1) == Columns(4, 6, 8, (96, 16, 1))
    with pytest.raises(ValueError, match="dimensions after dim 0"):
        plan(buffer(4, 6, 16)[:, :, :8], dim=0)


def test_dim_is_checked_and_normalized():
    assert normalize_dim(-1, 3) == 2 and normalize_dim(np.int64(1), 3) == 1
    for bad, message in ((3, "out of range for a 3-D array"), (-4, "out of range"), (1.0, "expected an integer"),
                         (True, "expected an integer"), (None, "expected an integer")):
        with pytest.raises(ValueError, match=message):
            normalize_dim(bad, 3)


@pytest.mark.parametrize("array, message", [
    (buffer(4, 8)[::-1], "negative stride"),
    (buffer(4, 8)[:, ::-1], "negative stride"),
    (buffer(0, 8), "zero-size dimension"),
    (buffer(3, 0), "zero-size dimension"),
    (buffer(2, 0, 4), "zero-size dimension"),
    (np.zeros((), np.float32), "0-D array"),
    (buffer(4, 16)[:, ::2], "2 elements apart"),
])
def test_what_cannot_be_planned_is_refused_with_the_reason(array, message):
    with pytest.raises(ValueError, match=message):
        plan(array)


def test_a_stride_of_part_of_an_element_is_refused():
    with pytest.raises(ValueError, match="not a whole number of 4-byte elements"):
        plan_layout((3, 8), (34, 4), 4, -1, "out")


def test_merge():
    assert merge((2, 3), (12, 4)) == (6, 4)
    assert merge((2, 3), (16, 4)) is None
    assert merge((1, 1), (0, 0)) == (1, None)
    assert merge((), ()) == (1, None)


def test_a_pair_shares_its_kind_of_plan():
    x, out = buffer(5, 7).T, buffer(7, 5)        # x's softmax axis is adjacent, out's is not
    x_plan, out_plan = plan_pair(x.shape, 0, (x.strides, 4), (out.strides, 4))
    assert x_plan == Columns(1, 7, 5, (35, 1, 7)) and out_plan == Columns(1, 7, 5, (35, 5, 1))
    out = buffer(5, 7, dtype=np.float16).T      # another element size, the same plan in elements
    assert plan_pair(x.shape, 0, (x.strides, 4), (out.strides, 2)) == (Rows(5, 7, 7), Rows(5, 7, 7))
    with pytest.raises(ValueError, match="out: the elements along dim 1"):
        plan_pair((4, 8), -1, (None, 4), (buffer(8, 4).T.strides, 4))


def test_self_overlap():
    assert not self_overlapping(Rows(4, 8, 8)) and not self_overlapping(Rows(1, 8, 0))
    assert self_overlapping(Rows(4, 8, 7)) and self_overlapping(Rows(4, 8, 0))
    assert not self_overlapping(Columns(4, 6, 8, (48, 8, 1)))
    assert self_overlapping(Columns(4, 6, 8, (48, 4, 1)))
    assert self_overlapping(Columns(4, 6, 8, (0, 8, 1)))
