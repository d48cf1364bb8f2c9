"""The compute-sanitizer driver's targets run in the simulator: each launches its kernels through the launch
layer and passes its check, and the out-of-bounds control really writes out of bounds (the simulator's
arrays check their indices). The tools themselves need a GPU: `python -m bench sanitize`."""

import pytest

from bench.sanitize_driver import run_target
from numba_softmax.kernels.sanitizer_controls import CONTROL_THREADS


@pytest.mark.parametrize("name", ["stages", "fused:fused_row_softmax_q1", "row-copy", "separate", "phased", "dag",
                                  "trace-dag", "floor-dag", "floor-separate"])
def test_a_target_runs_and_passes_its_check(name):
    assert run_target(name) is None


def test_a_vector_build_target_says_when_the_shape_runs_another_build():
    # The simulator takes no vector path (no 16-byte alignment there): the driver names what ran instead
    # of checking a build it did not run.
    assert run_target("fused:fused_row_softmax_q1_v4") == "shape (3, 1024) runs fused_row_softmax_q1, not " \
                                                          "fused_row_softmax_q1_v4"


def test_the_out_of_bounds_control_writes_past_the_end():
    with pytest.raises(IndexError, match=f"out of bounds for axis 0 with size {4 * CONTROL_THREADS}"):
        run_target("control:out-of-bounds")


def test_the_race_control_runs():
    assert run_target("control:shared-race") is None
