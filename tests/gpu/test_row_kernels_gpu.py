"""Experiment A kernels and the launch layer on a real GPU."""

import subprocess
import sys

import numpy as np
import pytest

from numba_softmax.cases import EXPERIMENT_A_SHAPES, FIXTURE_FAMILIES
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.oracle import check_matrix


@pytest.mark.parametrize("family", FIXTURE_FAMILIES)
@pytest.mark.parametrize("shape", EXPERIMENT_A_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_seed_shape_and_fixture_against_the_oracle(shape, family):
    from numba_softmax import softmax
    x = matrix_fixture(family, shape)
    fused = softmax(x, method="fused")
    stages = softmax(x, method="stages")
    for name, out in (("fused", fused), ("stages", stages)):
        result = check_matrix(out, x)
        assert result.passed, f"{name}: {result.describe()}"
    # Same algorithm, same combination order, same numerics policy: same bits.
    assert np.array_equal(fused.view(np.uint32), stages.view(np.uint32))


def test_launch_layer_matches_numba_dispatcher(stream):
    from numba import cuda

    from numba_softmax.kernels.fused_row import fused_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.plan import run_launches_with_dispatcher
    x = matrix_fixture("random", (4096, 1024))
    d_x = cuda.to_device(x)
    d_a = cuda.device_array_like(d_x)
    d_b = cuda.device_array_like(d_x)
    Invocation.from_launches("fused", fused_launches(d_x, d_a)).enqueue(stream)
    stream.synchronize()
    run_launches_with_dispatcher(fused_launches(d_x, d_b))
    cuda.synchronize()
    assert np.array_equal(d_a.copy_to_host(), d_b.copy_to_host())


@pytest.mark.parametrize("method", ["fused", "stages"])
def test_graph_replay_reads_the_current_input(stream, method):
    from numba import cuda

    from numba_softmax.kernels.fused_row import fused_launches
    from numba_softmax.kernels.row_stages import stages_launches
    from numba_softmax.launch.driver import Invocation
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
    invocation = Invocation.from_launches(method, launches)
    graph = CapturedGraph(invocation, stream)
    record = graph.record()
    assert record["node_types"] == {"kernel": len(launches)}
    for family in ("random", "offset", "dominant"):
        x = matrix_fixture(family, shape)
        d_x.copy_to_device(x, stream=stream.numba)
        graph.launch(stream)
        stream.synchronize()
        assert check_matrix(d_y.copy_to_host(), x).passed, family
    graph.close()


def test_cudnn_accurate_instance_against_the_oracle(stream, evidence):
    from numba import cuda

    from numba_softmax.peers import cudnn
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.graphs import CapturedGraph
    library = cudnn.load_cudnn()
    shape = (4096, 1024)
    x = matrix_fixture("offset", shape)
    d_x = cuda.to_device(x)
    d_y = cuda.device_array(shape, np.float32)
    softmax = cudnn.CudnnSoftmax(*shape, stream.ptr)
    x_ptr, y_ptr = d_x.__cuda_array_interface__["data"][0], d_y.__cuda_array_interface__["data"][0]
    softmax.forward(x_ptr, y_ptr)
    stream.synchronize()
    assert check_matrix(d_y.copy_to_host(), x).passed
    graph = CapturedGraph(Invocation("cudnn", [lambda s: softmax.forward(x_ptr, y_ptr)]), stream)
    evidence["cudnn"] = {"version": library.version, "path": library.path, "graph": graph.record()}
    x2 = matrix_fixture("random", shape)
    d_x.copy_to_device(x2, stream=stream.numba)
    graph.launch(stream)
    stream.synchronize()
    assert check_matrix(d_y.copy_to_host(), x2).passed
    graph.close()
    softmax.close()


def test_kernel_resources_as_the_driver_reports_them(evidence):
    from numba import cuda

    from numba_softmax.kernels.fused_row import fused_launches
    from numba_softmax.kernels.row_stages import stages_launches
    from numba_softmax.launch.driver import Invocation
    shape = (16, 4096)
    d_x = cuda.to_device(matrix_fixture("random", shape))
    launches = fused_launches(d_x, cuda.device_array(shape, np.float32)) + stages_launches(
        d_x, cuda.device_array(shape, np.float32), cuda.device_array(16, np.float32),
        cuda.device_array(shape, np.float32), cuda.device_array(16, np.float32))
    resources = Invocation.from_launches("all", launches).kernel_resources()
    evidence["kernel_resources"] = resources
    fused = next(r for r in resources if r["launch"] == "fused_row_softmax")
    assert fused["local_bytes_per_thread"] == 0, "the fused kernel spills its register array"
    assert all(r["local_bytes_per_thread"] == 0 for r in resources)


@pytest.mark.parametrize("shape", EXPERIMENT_A_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_row_copy_in_the_fused_geometry(shape, stream):
    """bench perf's geometry ceiling: the build mirrors the fused one, copies every bit, holds no local memory."""
    from numba import cuda

    from numba_softmax.kernels.fused_row import fused_kernel_for
    from numba_softmax.kernels.row_copy import row_copy_launches
    from numba_softmax.launch.driver import Invocation
    x = matrix_fixture("random", shape)
    d_x = cuda.to_device(x)
    d_y = cuda.to_device(np.full(shape, np.nan, dtype=np.float32))
    launches = row_copy_launches(d_x, d_y)
    fused_name = fused_kernel_for(d_x, d_y).py_func.__name__
    copy_name = launches[0].kernel.py_func.__name__
    assert copy_name == fused_name.replace("fused_row_softmax", "row_copy"), (copy_name, fused_name)
    invocation = Invocation.from_launches("row_copy", launches)
    invocation.enqueue(stream)
    stream.synchronize()
    assert np.array_equal(d_y.copy_to_host().view(np.uint32), x.view(np.uint32))
    assert invocation.kernel_resources()[0]["local_bytes_per_thread"] == 0


def test_negative_control_missing_barrier_is_rejected():
    from controls import missing_barrier_launches
    from numba import cuda

    from numba_softmax.launch.plan import run_launches_with_dispatcher
    x = matrix_fixture("random", (64, 4096))
    d_y = cuda.device_array(x.shape, np.float32)
    run_launches_with_dispatcher(missing_barrier_launches(cuda.to_device(x), d_y))
    cuda.synchronize()
    assert not check_matrix(d_y.copy_to_host(), x).passed


def test_negative_control_without_max_subtraction_is_rejected():
    from controls import no_max_launches
    from numba import cuda

    from numba_softmax.launch.plan import run_launches_with_dispatcher
    x = matrix_fixture("offset", (32, 1024))
    d_y = cuda.device_array(x.shape, np.float32)
    run_launches_with_dispatcher(no_max_launches(cuda.to_device(x), d_y))
    cuda.synchronize()
    result = check_matrix(d_y.copy_to_host(), x)
    assert not result.passed and not result.finite_nonneg


def _device_name():
    from numba import cuda
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def test_short_protocol_run_end_to_end(tmp_path):
    token = _device_name().split()[-1]  # e.g. "H200"
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "1x128,7x781",
                           "--expect-device", token, "--out", str(out), "--no-arrays"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("metadata.json", "cases.jsonl", "timings.jsonl", "graphs.jsonl", "summary.md"):
        assert (out / name).exists(), name
    assert "event_us" in (out / "timings.jsonl").read_text()


def test_wrong_expected_device_stops_the_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "1x128",
                           "--expect-device", "NoSuchGPU", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "expected a NoSuchGPU" in proc.stderr
