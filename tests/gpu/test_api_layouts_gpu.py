"""softmax() on a GPU with torch tensors of every element type, strided, N-D and transposed, against
torch.softmax; and the default call does not wait for the GPU. Skips, with the reason, where torch is missing."""

import time

import numpy as np
import pytest
from numba import cuda

from numba_softmax import softmax
from numba_softmax.cases import TOLERANCES
from numba_softmax.kernels.ordering import globaltimer
from numba_softmax.oracle import check_matrix

TYPES = ("float32", "float16", "bfloat16", "float64")


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    return torch


def assert_close_to_torch(y, x, dim=-1, dtype=None):
    """``y`` is torch.softmax(x, dim, dtype) within the output type's tolerance (compared in float64)."""
    torch = _torch()
    # The float64 reference of the input as the output type holds it (dtype= casts the input first).
    ref = torch.softmax((x if dtype is None else x.to(dtype)).double(), dim=dim)
    expected = torch.softmax(x, dim=dim, dtype=dtype)
    assert y.dtype == expected.dtype and y.shape == x.shape
    tolerance = TOLERANCES[str(y.dtype).removeprefix("torch.")]
    err = (y.double() - ref).abs()
    assert bool((err <= tolerance.absolute + tolerance.relative * ref.abs()).all()), float(err.max())
    assert float((expected.double() - y.double()).abs().max()) <= 2 * (tolerance.absolute + tolerance.relative)


@pytest.mark.parametrize("name", TYPES)
def test_torch_tensors_of_every_type_against_torch_softmax(name):
    torch = _torch()
    dtype = getattr(torch, name)
    x = (torch.randn(64, 1000, device="cuda") * 3).to(dtype)
    y = softmax(x)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype
    torch.cuda.synchronize()
    assert_close_to_torch(y, x)


# (float64 -> float16 is left out: the kernels cast through float32, two roundings, and an input on a float16
# tie then differs from torch's direct cast by one float16 unit: more than the float16 tolerance downstream.)
@pytest.mark.parametrize("pair", [("float16", "float32"), ("bfloat16", "float32"), ("float32", "bfloat16"),
                                  ("float32", "float64"), ("float64", "float32"), ("float16", "float64")])
def test_dtype_casts_like_torch(pair):
    torch = _torch()
    x = (torch.randn(33, 781, device="cuda") * 3).to(getattr(torch, pair[0]))
    out_type = getattr(torch, pair[1])
    y = softmax(x, dtype=out_type)
    torch.cuda.synchronize()
    assert_close_to_torch(y, x, dtype=out_type)
    out = torch.empty(33, 781, dtype=out_type, device="cuda")
    assert softmax(x, dtype=pair[1], out=out, check=True) is out
    assert torch.equal(out, y)


def test_strided_n_d_and_transposed_tensors():
    torch = _torch()
    wide = torch.randn(64, 2048, device="cuda")
    assert_close_to_torch(softmax(wide[:, :1000], check=True), wide[:, :1000])
    assert_close_to_torch(softmax(wide[:, 3:1003], check=True), wide[:, 3:1003])    # 12 bytes past 16
    out = torch.full((64, 3000), float("nan"), device="cuda")
    softmax(wide[:, 1:1001], out=out[:, 1001:2001], check=True)
    assert_close_to_torch(out[:, 1001:2001], wide[:, 1:1001])
    assert out[:, :1001].isnan().all() and out[:, 2001:].isnan().all()          # nothing else written
    x = torch.randn(4, 8, 16, 300, device="cuda", dtype=torch.float16)
    assert_close_to_torch(softmax(x, check=True), x)
    assert_close_to_torch(softmax(x[:, :, ::2], check=True), x[:, :, ::2])            # merges: uniform stride
    t = torch.randn(300, 64, device="cuda")
    with pytest.raises(ValueError, match="x: the elements along dim 1 are 64 elements apart"):
        softmax(t.t())
    out = torch.empty(300, 64, device="cuda").t()                    # the same layout as t.t()
    assert_close_to_torch(softmax(t.t(), dim=0, out=out, check=True), t.t(), dim=0)


def test_a_dimension_before_the_last_against_torch():
    torch = _torch()
    x = torch.randn(8, 300, 64, device="cuda")
    for dim in (0, 1):
        assert_close_to_torch(softmax(x, dim=dim, check=True), x, dim=dim)
    assert_close_to_torch(softmax(x[:, :, :40], dim=1, dtype=torch.float16, check=True), x[:, :, :40], 1,
                          torch.float16)


@cuda.jit
def _spin(nanoseconds, done):
    start = globaltimer()
    while globaltimer() - start < nanoseconds:
        pass
    done[0] = 1


SPIN_NS = 200_000_000


def _time_behind_a_spin(call, stream):
    """Host seconds of ``call()`` made while a 200 ms spin kernel occupies ``stream``."""
    done = cuda.to_device(np.zeros(1, np.int32), stream=stream)
    stream.synchronize()
    _spin[1, 1, stream](np.uint64(SPIN_NS), done)
    start = time.perf_counter()
    call()
    elapsed = time.perf_counter() - start
    stream.synchronize()
    assert done.copy_to_host()[0] == 1
    return elapsed


def test_the_default_call_does_not_wait_for_the_gpu():
    x = np.random.default_rng(1).standard_normal((4096, 1024)).astype(np.float32)
    d_x, d_y = cuda.to_device(x), cuda.device_array(x.shape, np.float32)
    stream = cuda.stream()
    softmax(d_x, out=d_y, stream=stream)                        # warm: plan made, kernels compiled
    softmax(d_x, out=d_y, stream=stream, check=True)
    stream.synchronize()
    d_y.copy_to_device(np.full(x.shape, np.nan, np.float32))
    default = _time_behind_a_spin(lambda: softmax(d_x, out=d_y, stream=stream), stream)
    assert default < 0.05 * SPIN_NS / 1e9, f"the default call took {default * 1e3:.1f} ms behind a 200 ms spin"
    assert check_matrix(d_y.copy_to_host(), x).passed             # ran after the spin, on the stream
    # Negative control: the checked call waits for the stream, spin included.
    checked = _time_behind_a_spin(lambda: softmax(d_x, out=d_y, stream=stream, check=True), stream)
    assert checked > 0.5 * SPIN_NS / 1e9, f"the checked call took only {checked * 1e3:.1f} ms"
