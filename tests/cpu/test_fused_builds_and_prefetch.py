"""Which fused build a row gets, and where the L2 prefetch is (and is not), read from the PTX.

No GPU needed: the build choice reads only shapes and device pointers, and the PTX is
compiled offline. The GPU tests check the same builds bit for bit against the stages.
"""

import types

import pytest

from numba_softmax.kernels.fused_row import FUSED_BUILDS, MAX_FUSED_COLUMNS, fused_kernel_for
from numba_softmax.kernels.registry import KERNELS
from numba_softmax.kernels.tiles import separate_trace_kernels
from numba_softmax.ptx import instruction_histogram, kernel_ptx

PREFETCH = "cp.async.bulk.prefetch.L2.global"


def _device_array(cols, address):
    """What the launcher reads of a device array: its shape and its device pointer."""
    return types.SimpleNamespace(shape=(8, cols), __cuda_array_interface__={"data": (address, False)})


@pytest.mark.parametrize("cols, aligned, expected", [
    (4, True, "fused_row_softmax_w1_v4"), (128, True, "fused_row_softmax_w1_v4"),
    (132, True, "fused_row_softmax_q1_v4"), (1024, True, "fused_row_softmax_q1_v4"),
    (1028, True, "fused_row_softmax_q2_v4"), (4096, True, "fused_row_softmax_q4_v4"),
    (128, False, "fused_row_softmax_q1"),      # misaligned pointer: scalar loads
    (127, True, "fused_row_softmax_q1"),       # cols % 4 != 0: scalar loads
    (781, True, "fused_row_softmax_q1"), (2047, True, "fused_row_softmax_q2"),
    (4095, True, "fused_row_softmax_q4"),
])
def test_the_launcher_picks_the_narrowest_build_that_holds_the_row(cols, aligned, expected):
    address = 1 << 20 if aligned else (1 << 20) + 4
    x, y = _device_array(cols, address), _device_array(cols, 1 << 21)
    assert fused_kernel_for(x, y).py_func.__name__ == expected


def test_every_width_up_to_the_limit_has_a_build():
    assert max(b.max_columns for b in FUSED_BUILDS if not b.vector) == MAX_FUSED_COLUMNS
    assert {b.name for b in FUSED_BUILDS} <= set(KERNELS)


def _ptx(name):
    dispatcher, signature = KERNELS[name]
    return kernel_ptx(dispatcher, signature)


@pytest.mark.parametrize("name, prefetches", [
    ("fused_row_softmax_q1_v4", True), ("fused_row_softmax_q2_v4", False), ("fused_row_softmax_q4_v4", False),
    ("fused_row_softmax_w1_v4", False), ("fused_row_softmax_q1", False),
    ("tile_summary_kernel", True), ("tile_normalize_kernel", True), ("row_combine_kernel", False),
    ("persistent_tiles", True),
])
def test_the_l2_prefetch_is_where_it_was_measured_to_pay(name, prefetches):
    ptx = _ptx(name)
    assert (PREFETCH in ptx) is prefetches
    if prefetches:
        assert "%nsmid" in ptx or name == "persistent_tiles"  # persistent: next own tile, t + gridDim.x


def test_trace_builds_carry_no_prefetch():
    signatures = {name: KERNELS[name][1] for name in ("tile_summary_kernel", "row_combine_kernel",
                                                       "tile_normalize_kernel")}
    for kernel in separate_trace_kernels():
        base = kernel.py_func.__name__.removesuffix("_trace")
        assert PREFETCH not in kernel_ptx(kernel, signatures[base])


def test_the_one_warp_build_uses_no_barrier_and_no_shared_memory():
    ptx = _ptx("fused_row_softmax_w1_v4")
    hist = instruction_histogram(ptx)
    assert not any(op.startswith("bar.") for op in hist)
    assert not any(".shared" in op for op in hist)
    assert hist["shfl.sync.bfly.b32"] == 10          # two warp butterflies of 5 steps
    block = instruction_histogram(_ptx("fused_row_softmax_q1_v4"))
    assert block["bar.sync"] >= 2
