"""Experiment A kernels (fused row kernel, four stages, the row copy), in the simulator and on a GPU.

The simulator checks logic on the small shapes (it runs one block at a time, in Python); a GPU
runs every protocol shape and what only a GPU has (the launch layer, CUDA graphs, cuDNN, the
driver's resource counts, a race that needs real warps).
"""

import numpy as np
import pytest
from backends import skip_on_cudasim
from controls import no_max_launches
from numba import cuda

from numba_softmax import softmax
from numba_softmax.backend import SIMULATOR, invocation, run_launches, run_launches_with_dispatcher
from numba_softmax.cases import (EXPERIMENT_A_MASK_SHAPE, EXPERIMENT_A_SHAPES, EXPERIMENT_A_SIM_SHAPES,
                                 FIXTURE_FAMILIES)
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.fused_row import fused_kernel_for, fused_launches
from numba_softmax.kernels.row_copy import row_copy_launches
from numba_softmax.kernels.row_stages import stages_launches
from numba_softmax.oracle import check_matrix
from numba_softmax.validation import is_device_array

TOO_LARGE = skip_on_cudasim("a protocol shape; the simulator runs the small ones (numba_softmax.cases)")


def _shapes(shapes, simulated=EXPERIMENT_A_SIM_SHAPES, skips=None):
    """Shapes as test parameters: those the simulator cannot run in reasonable time skip there
    (``skips``: shape -> the mark to skip it with instead of TOO_LARGE)."""
    skips = skips or {}
    return [pytest.param(s, id=f"{s[0]}x{s[1]}", marks=() if s in simulated else skips.get(s, TOO_LARGE))
            for s in shapes]


#: The mask shape's columns on two rows: what the simulator runs of the mask shape in the oracle test (rows are
#: independent blocks, two already cross a block boundary; the 7 rows in 4 families took over a minute there).
#: A GPU runs both.
MASK_COLUMNS_ON_TWO_ROWS = (2, EXPERIMENT_A_MASK_SHAPE[1])
TWO_ROWS_IN_SIM = skip_on_cudasim("the simulator runs the mask shape's columns on 2 rows "
                                  f"({MASK_COLUMNS_ON_TWO_ROWS[0]}x{MASK_COLUMNS_ON_TWO_ROWS[1]})")
ORACLE_SHAPES = _shapes((*EXPERIMENT_A_SHAPES, MASK_COLUMNS_ON_TWO_ROWS),
                        simulated=[s for s in EXPERIMENT_A_SIM_SHAPES if s != EXPERIMENT_A_MASK_SHAPE]
                        + [MASK_COLUMNS_ON_TWO_ROWS],
                        skips={EXPERIMENT_A_MASK_SHAPE: TWO_ROWS_IN_SIM})


@pytest.mark.parametrize("family", FIXTURE_FAMILIES)
@pytest.mark.parametrize("shape", ORACLE_SHAPES)
def test_every_shape_and_fixture_against_the_oracle(shape, family):
    x = matrix_fixture(family, shape)
    fused = softmax(x, method="fused")
    stages = softmax(x, method="stages")
    for name, out in (("fused", fused), ("stages", stages)):
        result = check_matrix(out, x)
        assert result.passed, f"{name}: {result.describe()}"
    # Same algorithm, same combination order, same numerics policy: same bits.
    assert np.array_equal(fused.view(np.uint32), stages.view(np.uint32))


def test_masked_tail_is_written_and_nothing_past_it():
    x = matrix_fixture("dominant", (2, 300))
    out = np.full((2, 300), -1.0, dtype=np.float32)
    softmax(x, method="fused", out=out)
    assert np.all(out >= 0) and check_matrix(out, x).passed


def test_device_array_in_device_array_out():
    x = matrix_fixture("constant", (1, 128))
    y = softmax(cuda.to_device(x))
    assert is_device_array(y)
    assert check_matrix(y.copy_to_host(), x).passed


def test_row_too_long_for_fused_kernel_is_an_error_not_garbage():
    with pytest.raises(ValueError, match="row too long for the fused kernel: 4097 columns"):
        softmax(np.zeros((1, 4097), dtype=np.float32), method="fused")


def test_nan_is_rejected_before_launch():
    x = matrix_fixture("random", (2, 128))
    x[1, 7] = np.nan
    with pytest.raises(ValueError, match="at row 1, column 7"):
        softmax(x)


def test_unknown_method():
    with pytest.raises(ValueError, match="unknown method"):
        softmax(matrix_fixture("random", (1, 128)), method="magic")


def test_negative_control_without_max_subtraction_is_rejected():
    x = matrix_fixture("offset", (4, 1024))
    d_y = cuda.device_array(x.shape, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):  # the simulator computes exp on the host
        run_launches(no_max_launches(cuda.to_device(x), d_y))
    result = check_matrix(d_y.copy_to_host(), x)
    assert not result.passed and not result.finite_nonneg


@pytest.mark.parametrize("shape", _shapes(((2, 128), (3, 2053), *EXPERIMENT_A_SHAPES)))
def test_row_copy_in_the_fused_geometry_copies_every_bit(shape, stream):
    """bench perf's geometry ceiling: the build mirrors the fused one and copies every bit."""
    x = matrix_fixture("random", shape)
    d_x = cuda.to_device(x)
    d_y = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
    launches = row_copy_launches(d_x, d_y)
    assert launches[0].grid == (shape[0],) and launches[0].block == (256,)
    fused_name = fused_kernel_for(d_x, d_y).py_func.__name__
    copy_name = launches[0].kernel.py_func.__name__
    assert copy_name == fused_name.replace("fused_row_softmax", "row_copy"), (copy_name, fused_name)
    invocation("row_copy", launches).enqueue(stream)
    stream.synchronize()
    assert np.array_equal(d_y.copy_to_host().view(np.uint32), x.view(np.uint32))


@skip_on_cudasim("the copy kernels move 16-byte quads, which the simulator has no intrinsic for")
@pytest.mark.parametrize("name", ["copy_t128_u1", "copy_t256_u8", "copy_t1024_u4", "copy_t256_u4_b8",
                                  "copy_t1024_u2_b2"])
@pytest.mark.parametrize("shape", [(3, 4), (7, 1028), (4096, 4096)])
def test_copy_kernels_copy_every_bit(name, shape, stream):
    """bench perf's plain copy kernels: every quad of the flat matrix once, whether the grid covers it in one
    pass (the last chunk partly past the end) or strides over it (few blocks, many chunks each)."""
    from numba_softmax.kernels.stream_copy import stream_copy_launches
    x = matrix_fixture("random", shape)
    d_y = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
    launches = stream_copy_launches(name, cuda.to_device(x), d_y, cuda.get_current_device().MULTIPROCESSOR_COUNT)
    invocation(name, launches).enqueue(stream)
    stream.synchronize()
    assert np.array_equal(d_y.copy_to_host().view(np.uint32), x.view(np.uint32))


def test_copy_kernels_refuse_rows_that_are_not_quads():
    from numba_softmax.kernels.stream_copy import stream_copy_launches
    with pytest.raises(ValueError, match="multiple of 4 long"):
        stream_copy_launches("copy_t256_u4", np.zeros((2, 6), np.float32), np.zeros((2, 6), np.float32), 132)
    with pytest.raises(ValueError, match="one shape"):
        stream_copy_launches("copy_t256_u4", np.zeros((2, 8), np.float32), np.zeros((4, 4), np.float32), 132)


def test_row_copy_refuses_what_the_fused_geometry_cannot_hold():
    with pytest.raises(ValueError, match="4097 columns > 4096"):
        row_copy_launches(np.zeros((1, 4097), np.float32), np.zeros((1, 4097), np.float32))
    with pytest.raises(ValueError, match="one shape"):
        row_copy_launches(np.zeros((2, 8), np.float32), np.zeros((2, 9), np.float32))


# ---- what only a GPU has -------------------------------------------------------------------------

@skip_on_cudasim("no launch layer: launches go through Numba's dispatcher there")
def test_launch_layer_matches_numba_dispatcher(stream):
    x = matrix_fixture("random", (4096, 1024))
    d_x = cuda.to_device(x)
    d_a = cuda.device_array_like(d_x)
    d_b = cuda.device_array_like(d_x)
    invocation("fused", fused_launches(d_x, d_a)).enqueue(stream)
    stream.synchronize()
    run_launches_with_dispatcher(fused_launches(d_x, d_b))
    cuda.synchronize()
    assert np.array_equal(d_a.copy_to_host(), d_b.copy_to_host())


@skip_on_cudasim("no CUDA graphs")
@pytest.mark.parametrize("method", ["fused", "stages"])
def test_graph_replay_reads_the_current_input(stream, method):
    from numba_softmax.launch.graphs import CapturedGraph
    shape = (32, 1024)
    d_x = cuda.device_array(shape, np.float32)
    d_y = cuda.device_array(shape, np.float32)
    if method == "fused":
        launches = fused_launches(d_x, d_y)
    else:
        rows = shape[0]
        launches = stages_launches(d_x, d_y, cuda.device_array(rows, np.float32),
                                   cuda.device_array(shape, np.float32), cuda.device_array(rows, np.float32))
    graph = CapturedGraph(invocation(method, launches), stream)
    record = graph.record()
    assert record["node_types"] == {"kernel": len(launches)}
    for family in ("random", "offset", "dominant"):
        x = matrix_fixture(family, shape)
        d_x.copy_to_device(x, stream=stream.numba)
        graph.launch(stream)
        stream.synchronize()
        assert check_matrix(d_y.copy_to_host(), x).passed, family
    graph.close()


@skip_on_cudasim("no cuDNN")
def test_cudnn_accurate_instance_against_the_oracle(stream, evidence):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.graphs import CapturedGraph
    from numba_softmax.peers import cudnn
    library = cudnn.load_cudnn()
    shape = (4096, 1024)
    x = matrix_fixture("offset", shape)
    d_x = cuda.to_device(x)
    d_y = cuda.device_array(shape, np.float32)
    softmax_forward = cudnn.CudnnSoftmax(*shape, stream.ptr)
    x_ptr, y_ptr = d_x.__cuda_array_interface__["data"][0], d_y.__cuda_array_interface__["data"][0]
    softmax_forward.forward(x_ptr, y_ptr)
    stream.synchronize()
    assert check_matrix(d_y.copy_to_host(), x).passed
    graph = CapturedGraph(Invocation("cudnn", [lambda s: softmax_forward.forward(x_ptr, y_ptr)]), stream)
    evidence["cudnn"] = {"version": library.version, "path": library.path, "graph": graph.record()}
    x2 = matrix_fixture("random", shape)
    d_x.copy_to_device(x2, stream=stream.numba)
    graph.launch(stream)
    stream.synchronize()
    assert check_matrix(d_y.copy_to_host(), x2).passed
    graph.close()
    softmax_forward.close()


@skip_on_cudasim("no driver to report registers and local memory")
def test_kernel_resources_as_the_driver_reports_them(evidence):
    shape = (16, 4096)
    d_x = cuda.to_device(matrix_fixture("random", shape))
    launches = fused_launches(d_x, cuda.device_array(shape, np.float32)) + stages_launches(
        d_x, cuda.device_array(shape, np.float32), cuda.device_array(16, np.float32),
        cuda.device_array(shape, np.float32), cuda.device_array(16, np.float32))
    resources = invocation("all", launches).kernel_resources()
    evidence["kernel_resources"] = resources
    fused = next(r for r in resources if r["launch"] == "fused_row_softmax")
    assert fused["local_bytes_per_thread"] == 0, "the fused kernel spills its register array"
    assert all(r["local_bytes_per_thread"] == 0 for r in resources)


@skip_on_cudasim("no driver to report local memory")
@pytest.mark.parametrize("shape", _shapes(EXPERIMENT_A_SHAPES))
def test_row_copy_holds_no_local_memory(shape):
    d_x = cuda.device_array(shape, np.float32)
    prepared = invocation("row_copy", row_copy_launches(d_x, cuda.device_array(shape, np.float32)))
    assert prepared.kernel_resources()[0]["local_bytes_per_thread"] == 0


@skip_on_cudasim("the race needs warps that really run at the same time (the control sleeps in one warp)")
def test_negative_control_missing_barrier_is_rejected():
    from controls import missing_barrier_launches
    x = matrix_fixture("random", (64, 4096))
    d_y = cuda.device_array(x.shape, np.float32)
    run_launches_with_dispatcher(missing_barrier_launches(cuda.to_device(x), d_y))
    cuda.synchronize()
    assert not check_matrix(d_y.copy_to_host(), x).passed


def test_the_process_runs_the_backend_its_half_names(backend_name):
    """The [sim] half runs in the simulator and the [gpu] half on the real target (the harness, checked)."""
    assert SIMULATOR == (backend_name == "sim")
