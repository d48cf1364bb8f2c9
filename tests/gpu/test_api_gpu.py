"""softmax() on a GPU with the inputs CI cannot run: CuPy arrays and PyTorch CUDA tensors, streams of
every kind, -inf masks, fully masked rows, the long-row path, strided out rejected, the device-side
report of a non-finite value, and no host copy of a device input. Skips, with the reason, where
cupy or torch is missing."""

import numpy as np
import pytest
from numba import cuda

from numba_softmax import api, softmax, validation
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.oracle import check_matrix, check_packed

SHAPE = (64, 1000)
#: Streams a test passes by bare handle, kept alive for the session.
_alive = []


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def _cupy():
    return pytest.importorskip("cupy", reason="CuPy is not installed")


def _masked_check(out, x):
    masked = np.isneginf(x)
    assert np.all(out[masked] == 0.0), "a -inf entry got a nonzero weight"
    result = check_packed(out[~masked], x[~masked], (~masked).sum(axis=1))
    assert result.passed, result.describe()


def test_torch_tensor_in_torch_tensor_out_in_place():
    torch = _torch()
    x = matrix_fixture("random", SHAPE)
    t = torch.from_numpy(x).cuda()
    y = softmax(t, check=True)
    assert isinstance(y, torch.Tensor) and y.is_cuda and y.dtype == torch.float32
    assert check_matrix(y.cpu().numpy(), x).passed
    out = torch.full(SHAPE, float("nan"), device="cuda")
    assert softmax(t, out=out, check=True) is out
    assert torch.equal(out, y)
    assert torch.allclose(out, torch.softmax(t, dim=1), rtol=1e-5, atol=1e-7)


def test_cupy_array_in_cupy_array_out():
    cupy = _cupy()
    x = matrix_fixture("offset", SHAPE)
    c = cupy.asarray(x)
    y = softmax(c, check=True)
    assert isinstance(y, cupy.ndarray)
    assert check_matrix(cupy.asnumpy(y), x).passed
    out = cupy.empty(SHAPE, dtype=cupy.float32)
    assert softmax(c, out=out, method="fused", check=True) is out
    assert check_matrix(cupy.asnumpy(out), x).passed


def test_mixed_device_kinds_for_input_and_out():
    torch = _torch()
    x = matrix_fixture("random", SHAPE)
    out = cuda.device_array(SHAPE, np.float32)
    softmax(torch.from_numpy(x).cuda(), out=out, check=True)
    assert check_matrix(out.copy_to_host(), x).passed


def test_device_arrays_whose_rows_are_not_adjacent_elements_are_refused():
    torch = _torch()
    t = torch.from_numpy(matrix_fixture("random", SHAPE)).cuda()
    wide = torch.empty((SHAPE[0], 2 * SHAPE[1]), device="cuda")
    with pytest.raises(ValueError, match="out: the elements along dim 1 are 2 elements apart"):
        softmax(t, out=wide[:, ::2])
    with pytest.raises(ValueError, match=f"out: the elements along dim 1 are {SHAPE[0]} elements apart"):
        softmax(t, out=torch.empty(SHAPE[::-1], device="cuda").T)
    with pytest.raises(ValueError, match="x: the elements along dim 1 are 2 elements apart"):
        softmax(wide[:, ::2])
    with pytest.raises(ValueError, match="out: the elements along dim 1 are 2 elements apart"):
        softmax(cuda.to_device(matrix_fixture("random", SHAPE)),
                out=cuda.device_array((SHAPE[0], 2 * SHAPE[1]), np.float32)[:, ::2])


@pytest.mark.parametrize("kind", ["numba", "torch"])
@pytest.mark.parametrize("method", ["auto", "fused", "stages"])
def test_the_device_reports_the_first_non_finite_row_and_column(kind, method):
    x = matrix_fixture("random", SHAPE)
    x[37, 911] = np.nan
    x[37, 912] = np.inf
    x[50, 3] = np.nan
    if kind == "torch":
        torch = _torch()
        d_x, out = torch.from_numpy(x).cuda(), torch.zeros(SHAPE, device="cuda")
        read = lambda a: a.cpu().numpy()   # noqa: E731
    else:
        d_x, out = cuda.to_device(x), cuda.device_array(SHAPE, np.float32)
        read = lambda a: a.copy_to_host()  # noqa: E731
    with pytest.raises(ValueError, match=r"at row 37, column 911$"):
        softmax(d_x, out=out, method=method, check=True)
    assert np.array_equal(read(d_x), x, equal_nan=True)
    x[37, 911] = x[37, 912] = x[50, 3] = 0.25
    clean = torch.from_numpy(x).cuda() if kind == "torch" else cuda.to_device(x)
    softmax(clean, out=out, method=method, check=True)   # the cleared status words let a clean call through
    assert check_matrix(read(out), x).passed


def test_neg_inf_masks_and_fully_masked_rows_against_float64_and_torch():
    torch = _torch()
    x = matrix_fixture("random", SHAPE)
    x[0, :999] = -np.inf
    x[1, ::2] = -np.inf
    x[5, 17] = -np.inf
    t = torch.from_numpy(x).cuda()
    y = softmax(t, check=True).cpu().numpy()
    _masked_check(y, x)
    assert np.allclose(y, torch.softmax(t, dim=1).cpu().numpy(), rtol=1e-5, atol=1e-7)
    x[9, :] = -np.inf
    t = torch.from_numpy(x).cuda()
    with pytest.raises(ValueError, match="row 9 has no finite entry"):
        softmax(t, check=True)
    y = softmax(t, check=False)
    torch.cuda.synchronize()
    assert torch.isnan(y[9]).all() and torch.isnan(torch.softmax(t, dim=1)[9]).all()


def test_long_rows_through_auto_against_float64():
    torch = _torch()
    x = matrix_fixture("random", (3, 262144))
    x[1, 5::7] = -np.inf
    y = softmax(torch.from_numpy(x).cuda(), check=True).cpu().numpy()
    _masked_check(y, x)


def _stream_kinds():
    """(name, make) for every stream kind softmax() takes; make() -> (stream, handle)."""
    def numba_stream():
        s = cuda.stream()
        return s, int(s.handle)

    def cuda_python():
        from cuda.bindings import driver as cu
        s = cu.cuStreamCreate(1)[1]
        return s, int(s)

    def handle():
        s = cuda.stream()
        _alive.append(s)              # a bare handle does not keep its stream alive
        return int(s.handle), int(s.handle)

    def torch_stream():
        s = _torch().cuda.Stream()
        return s, s.cuda_stream

    def cupy_stream():
        s = _cupy().cuda.Stream(non_blocking=True)
        return s, s.ptr

    def cuda_core():
        try:
            from cuda import core
            core.Device  # noqa: B018  (cuda.core >= 0.4; older releases have it under .experimental)
        except (ImportError, AttributeError):
            core = pytest.importorskip("cuda.core.experimental", reason="cuda.core is not installed")
        device = core.Device()
        device.set_current()
        s = device.create_stream()
        return s, int(s.handle)

    return [("numba", numba_stream), ("cuda-python", cuda_python), ("int", handle), ("torch", torch_stream),
            ("cupy", cupy_stream), ("cuda.core", cuda_core)]


@pytest.mark.parametrize("name, make", _stream_kinds(), ids=[n for n, _ in _stream_kinds()])
def test_every_stream_kind_runs_on_that_stream(name, make):
    from numba_softmax.arrays import launch_stream_for
    stream, handle = make()
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = cuda.to_device(x), cuda.device_array(SHAPE, np.float32)
    softmax(d_x, out=d_y, stream=stream, check=False)     # asynchronous: queued on `stream`
    launch_stream_for(handle).synchronize()
    assert check_matrix(d_y.copy_to_host(), x).passed
    softmax(d_x, out=d_y, stream=stream, check=True)                  # checked: synchronizes itself


def test_check_false_with_a_stream_returns_before_the_kernel_finishes():
    """Asynchrony, observed: a sleeping kernel queued first on the stream keeps the softmax behind it
    from finishing; the call returns anyway (the stream is still busy), and with check=True it waits."""
    from cuda.bindings import driver as cu

    @cuda.jit
    def sleep(ns):
        for _ in range(ns // 1_000_000):
            cuda.nanosleep(1_000_000)

    stream = cuda.stream()
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = cuda.to_device(x), cuda.device_array(SHAPE, np.float32)
    softmax(d_x, out=d_y, stream=stream, check=True)                  # plan made, kernels compiled
    sleep[1, 1, stream](200_000_000)                      # 0.2 s
    softmax(d_x, out=d_y, stream=stream, check=False)
    busy = cu.cuStreamQuery(cu.CUstream(int(stream.handle)))[0]
    assert busy == cu.CUresult.CUDA_ERROR_NOT_READY, "check=False waited for the stream"
    sleep[1, 1, stream](200_000_000)
    softmax(d_x, out=d_y, stream=stream, check=True)
    assert cu.cuStreamQuery(cu.CUstream(int(stream.handle)))[0] == cu.CUresult.CUDA_SUCCESS
    assert check_matrix(d_y.copy_to_host(), x).passed


def test_torch_current_stream_is_used_without_a_stream():
    torch = _torch()
    x = matrix_fixture("random", SHAPE)
    t, out = torch.from_numpy(x).cuda(), torch.empty(SHAPE, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        t2 = t * 1.0                  # produced on `side`, consumed there by softmax, no sync between
        softmax(t2, out=out, check=False)
    side.synchronize()
    assert check_matrix(out.cpu().numpy(), x).passed


def test_repeated_calls_reuse_the_plan_and_never_copy_to_the_host(monkeypatch):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray
    x = matrix_fixture("random", SHAPE)
    d_x, d_y = cuda.to_device(x), cuda.device_array(SHAPE, np.float32)
    api.clear_plans()
    softmax(d_x, out=d_y, check=True)
    plans = dict(api._plans)

    def forbidden(*args, **kwargs):
        raise AssertionError("allocated or copied to the host on a repeated call")

    for name in ("device_array", "to_device", "mapped_array", "pinned_array"):
        monkeypatch.setattr(cuda, name, forbidden)
    monkeypatch.setattr(DeviceNDArray, "copy_to_host", forbidden)
    for _ in range(5):
        softmax(d_x, out=d_y, check=True)
    assert dict(api._plans) == plans
    with pytest.raises(AssertionError, match="copied to the host"):
        d_y.copy_to_host()            # the patch is live
    monkeypatch.undo()
    assert check_matrix(d_y.copy_to_host(), x).passed


def test_the_plan_cache_is_bounded_at_its_real_size():
    """PLAN_CACHE_SIZE + 5 different calls keep PLAN_CACHE_SIZE plans (the simulator's test fills a bound of
    3: each of its calls is a simulated launch)."""
    api.clear_plans()
    held = []  # the arrays stay alive: a freed one's pointer could come back and hit an earlier plan
    for _ in range(api.PLAN_CACHE_SIZE + 5):
        d_x = cuda.to_device(matrix_fixture("random", (1, 8)))
        held.append((d_x, softmax(d_x, check=True)))
    assert len(api._plans) == api.PLAN_CACHE_SIZE


def test_tiled_softmax_keeps_a_device_input_on_the_device(monkeypatch):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from numba_softmax import tiled_softmax
    from numba_softmax.fixtures import packed_fixture
    from numba_softmax.tiled import TiledBuffers, build_layout
    torch = _torch()
    lengths = np.array([5000, 1, 20000, 777])
    values = packed_fixture("random", lengths)
    buffers = TiledBuffers.allocate(build_layout(lengths))
    tiled_softmax(torch.from_numpy(values).cuda(), lengths, "separate", buffers=buffers)   # prepared once

    def no_host_copy(self, *args, **kwargs):
        raise AssertionError("copied to the host")

    monkeypatch.setattr(DeviceNDArray, "copy_to_host", no_host_copy)
    for scheduler in ("separate", "phased"):
        result = tiled_softmax(torch.from_numpy(values).cuda(), lengths, scheduler, buffers=buffers)
        assert result.out is buffers.out
    monkeypatch.undo()
    assert check_packed(result.out.copy_to_host(), values, lengths).passed
    values[5000 + 1 + 123] = np.nan
    with pytest.raises(ValueError, match="at row 2, column 123"):
        tiled_softmax(torch.from_numpy(values).cuda(), lengths, "dag", buffers=buffers)


def test_the_repeated_call_shortcut_releases_a_freed_array():
    """The shortcut holds the previous call's arrays weakly (the plan's views do not own them):
    deleting the caller's input frees it, and a new input then takes the full path."""
    import gc
    api.clear_plans()
    x = matrix_fixture("random", (8, 256))
    dx, dy = cuda.to_device(x), cuda.device_array((8, 256), dtype=np.float32)
    softmax(dx, out=dy, check=True)
    softmax(dx, out=dy, check=True)                                  # the shortcut
    assert check_matrix(dy.copy_to_host(), x).passed
    del dx
    gc.collect()
    remembered = [r for r in api._repeats.values() if r.out() is dy]
    assert remembered and all(r.x() is None for r in remembered)
    x2 = matrix_fixture("offset", (8, 256))
    softmax(cuda.to_device(x2), out=dy, check=True)
    assert check_matrix(dy.copy_to_host(), x2).passed


def test_a_repeated_torch_call_without_a_stream_follows_torchs_current_stream(monkeypatch):
    """Without stream=, a remembered torch call runs on torch's current stream as it is at each call:
    repeated under the same current stream it takes the shortcut (no array reads), and inside
    ``with torch.cuda.stream(side)`` it runs on ``side``, ordered after side's pending copy into the
    input (on the stream remembered before, it would read the input before that copy lands)."""
    torch = _torch()
    api.clear_plans()
    x, x2 = matrix_fixture("random", SHAPE), matrix_fixture("offset", SHAPE)
    t_x, t_y = torch.from_numpy(x).cuda(), torch.empty(SHAPE, device="cuda")
    softmax(t_x, out=t_y, check=True)
    reads = []
    real_read = validation.read_device
    monkeypatch.setattr(validation, "read_device", lambda *a: reads.append(a) or real_read(*a))
    softmax(t_x, out=t_y, check=True)
    assert reads == [] and check_matrix(t_y.cpu().numpy(), x).passed  # the shortcut
    side = torch.cuda.Stream()
    pending = torch.from_numpy(x2).pin_memory()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)                  # keeps the copy below pending for a while
        t_x.copy_(pending, non_blocking=True)
        softmax(t_x, out=t_y, check=False)
        assert len(reads) == 2                          # the current stream changed: the full path
        softmax(t_x, out=t_y, check=False)
        assert len(reads) == 2                          # and it is remembered for that stream
    side.synchronize()
    assert check_matrix(t_y.cpu().numpy(), x2).passed


def test_a_repeated_torch_call_with_a_stream_takes_the_shortcut_and_follows_a_rebound_tensor():
    """Torch tensors with an explicit stream are remembered like Numba arrays, but a tensor can be rebound
    or resized in place: the shortcut must follow its new storage and see its new shape. (Without the
    pointer and shape looks, the third call would write the old storage and the fourth would not raise.)"""
    from numba_softmax.launch.driver import Stream
    torch = _torch()
    api.clear_plans()
    stream = Stream()
    x = matrix_fixture("random", SHAPE)
    t_x = torch.from_numpy(x).cuda()
    t_y = torch.empty(SHAPE, device="cuda")
    softmax(t_x, out=t_y, stream=stream, check=True)
    softmax(t_x, out=t_y, stream=stream, check=True)                 # the shortcut
    assert [r.out() for r in api._repeats.values()] == [t_y]
    assert check_matrix(t_y.cpu().numpy(), x).passed
    first = t_y.view(SHAPE)                              # keeps the first storage alive
    t_y.set_(torch.full(SHAPE, float("nan"), device="cuda"))   # rebound: the same object, new storage
    x2 = matrix_fixture("offset", SHAPE)
    t_x.copy_(torch.from_numpy(x2))
    torch.cuda.synchronize()
    softmax(t_x, out=t_y, stream=stream, check=True)
    assert check_matrix(t_y.cpu().numpy(), x2).passed
    assert check_matrix(first.cpu().numpy(), x).passed  # the first storage was not written again
    t_x.resize_(SHAPE[0] // 2, SHAPE[1])                 # the same pointer, a smaller shape
    with pytest.raises(ValueError, match="out: must have x's shape"):
        softmax(t_x, out=t_y, stream=stream, check=True)
