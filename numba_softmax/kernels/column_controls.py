"""The negative control of the column kernels (:mod:`.auto_columns`): never in the table, never registered.

:func:`short_column_control_kernel` (tests only) is the shipped column body with its ``positions`` part swapped:
each column's last position is never read, never written and not in the sum. Its arithmetic obeys the numerics
policy (a CPU test checks its PTX), so only the oracle can reject it (tests/kernels/test_auto_columns.py). Apart
from :mod:`.auto_controls` because the column launcher builds on :mod:`.auto_launch`, which imports that module.
"""

from numba import cuda

from ..numerics import KERNEL_OPTIONS
from .auto_columns import ColumnGeometry, build_name, make_column_body
from .auto_rows import bounded_build

F32 = ("float32", "float32")


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def positions_but_last(length):
    """The wrong number of a column's positions: all but the last."""
    return length - 1 if length > 1 else length


def short_column_control_kernel(geometry="columns_s8_c8", types=F32):
    """Negative control: a column geometry whose columns skip their last position."""
    geometry = ColumnGeometry.parse(geometry)
    body, block = make_column_body(geometry, types, False, positions_but_last)
    return bounded_build(body, block, build_name(geometry, types, False) + "_control_short_column", False)
