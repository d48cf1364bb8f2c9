"""numba_softmax.torch on a GPU: the operators against torch's own softmax and log_softmax, forward and backward, in
every element type, strided, N-D and along a dimension before the last; ``torch.library.opcheck``;
``torch.compile(fullgraph=True)``; capture in a CUDA graph; -inf masks; and a deliberately wrong backward that the
same gradient check rejects. Skips, with the reason, where torch or its CUDA device is missing."""

import time

import pytest

from numba_softmax.cases import TOLERANCES

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("PyTorch has no CUDA device", allow_module_level=True)

import numba_softmax.torch as ops  # noqa: E402  (after the skip: it registers the operators)

TYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
FORMS = {"softmax": (ops.softmax, torch.softmax), "log_softmax": (ops.log_softmax, torch.log_softmax)}


def _tolerance(dtype):
    return TOLERANCES[str(dtype).removeprefix("torch.")]


def assert_forward(got, x, form, dim=-1, dtype=None):
    """``got`` is torch's form of x (float64 reference of the input as the output type holds it) within the
    output type's tolerance, relative to the size of what the form subtracts (log_softmax) or of the value."""
    source = (x if dtype is None else x.to(dtype)).double()
    ref = FORMS[form][1](source, dim=dim)
    assert got.dtype == (x.dtype if dtype is None else dtype) and got.shape == x.shape
    tolerance = _tolerance(got.dtype)
    if form == "softmax":
        scale = ref.abs()
    else:
        shifted = source - source.amax(dim=dim, keepdim=True)
        scale = shifted.abs() + (ref - shifted).abs()
    err = (got.double() - ref).abs()
    finite = torch.isfinite(ref)
    assert bool(torch.equal(got.double()[~finite], ref[~finite])), "a -inf output differs"
    assert bool((err[finite] <= tolerance.absolute + tolerance.relative * scale[finite]).all()), float(err.max())


def assert_gradient(got, y, dy, form, dim=-1):
    """``got`` is the gradient of the form with respect to its input within the type's tolerance of the float64
    value from ``y`` and ``dy`` (scaled by the size of the terms, as :func:`numba_softmax.oracle.check_scaled`)."""
    y, dy = y.double(), dy.double()
    if form == "softmax":
        ref = y * (dy - (dy * y).sum(dim, keepdim=True))
        scale = y.abs() * (dy.abs() + (dy * y).abs().sum(dim, keepdim=True))
    else:
        ref = dy - y.exp() * dy.sum(dim, keepdim=True)
        scale = dy.abs() + y.exp() * dy.abs().sum(dim, keepdim=True)
    tolerance = _tolerance(got.dtype)
    err = (got.double() - ref).abs()
    assert bool((err <= tolerance.absolute + tolerance.relative * scale).all()), \
        f"{form} gradient: max error {float(err.max()):.3g}"


def _run(form, x, dim=-1, dtype=None):
    """Forward and backward through the operator: (y, dy, dx)."""
    x = x.detach().requires_grad_(True)
    y = FORMS[form][0](x, dim, dtype)
    dy = torch.randn_like(y)
    y.backward(dy)
    torch.cuda.synchronize()
    return y.detach(), dy, x.grad


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dtype", TYPES, ids=str)
@pytest.mark.parametrize("width", [1, 7, 129, 1000, 4099, 16385, 70001])
def test_forward_and_backward_against_torch(width, dtype, form):
    x = (torch.randn(17, width, device="cuda") * 3).to(dtype)
    y, dy, dx = _run(form, x)
    assert_forward(y, x, form)
    assert dx.dtype == dtype
    assert_gradient(dx, y, dy, form)


@pytest.mark.parametrize("form", FORMS)
def test_dtype_casts_the_input_first_and_the_gradient_back(form):
    """dtype=float32 of a bfloat16 input: a float32 result, and a gradient computed in float32 and rounded once to
    bfloat16 (torch's own: the backward of the cast)."""
    x = torch.randn(8, 300, device="cuda", dtype=torch.bfloat16)
    y, dy, dx = _run(form, x, dtype=torch.float32)
    assert_forward(y, x, form, dtype=torch.float32)
    assert dx.dtype == torch.bfloat16
    assert_gradient(dx, y, dy, form)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dim", [0, 1, 2])
def test_n_d_strided_and_dimensions_before_the_last(form, dim):
    base = torch.randn(6, 40, 130, device="cuda")
    x = base[:, ::2, 3:120]  # strided rows, a start off 16 bytes
    y, dy, dx = _run(form, x, dim=dim)
    assert_forward(y, x, form, dim=dim)
    assert_gradient(dx, y, dy, form, dim=dim)


@pytest.mark.parametrize("form", FORMS)
def test_masked_rows_forward_and_backward(form):
    """Columns masked with -inf: weight 0 (log: -inf) forward; gradient 0 (log: dy) backward."""
    x = torch.randn(9, 257, device="cuda")
    x[:, ::5] = float("-inf")
    y, dy, dx = _run(form, x)
    assert_forward(y, x, form)
    expected = torch.zeros_like(dy[:, ::5]) if form == "softmax" else dy[:, ::5]
    assert torch.equal(dx[:, ::5], expected)
    assert_gradient(dx, y, dy, form)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_on_each_operator(dtype):
    x = torch.randn(5, 300, device="cuda", dtype=dtype, requires_grad=True)
    y = torch.softmax(x.detach().float(), -1).to(dtype)
    dy = torch.randn_like(y)
    cases = [(torch.ops.numba_softmax.softmax.default, (x, -1, None)),
             (torch.ops.numba_softmax.softmax.default, (x, 0, torch.float32)),
             (torch.ops.numba_softmax.log_softmax.default, (x, -1, None)),
             (torch.ops.numba_softmax.softmax_backward.default, (y, dy, -1)),
             (torch.ops.numba_softmax.log_softmax_backward.default, (y.log(), dy, 1))]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_torch_compile_fullgraph_matches_eager():
    def loss(x, target):
        p = ops.softmax(x, -1)
        logp = ops.log_softmax(x, -1)
        return (p * p).sum() + torch.nn.functional.nll_loss(logp, target)

    x = torch.randn(64, 1000, device="cuda", requires_grad=True)
    target = torch.randint(0, 1000, (64,), device="cuda")
    eager = loss(x, target)
    (eager_grad,) = torch.autograd.grad(eager, x)
    compiled = torch.compile(loss, fullgraph=True)
    got = compiled(x, target)
    (got_grad,) = torch.autograd.grad(got, x)
    assert torch.allclose(got, eager, rtol=1e-6, atol=1e-6)
    assert torch.allclose(got_grad, eager_grad, rtol=1e-5, atol=1e-7)


def test_capture_in_a_cuda_graph_and_replay_on_new_values():
    x = torch.randn(32, 777, device="cuda", requires_grad=True)
    dy = torch.randn(32, 777, device="cuda")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture: compiles the kernels, caches the plans
        for _ in range(2):
            x.grad = None
            ops.log_softmax(x, -1).backward(dy)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    x.grad = None
    with torch.cuda.graph(graph):
        y = ops.log_softmax(x, -1)
        y.backward(dy)
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
        dy.copy_(torch.randn_like(dy))
    graph.replay()
    torch.cuda.synchronize()
    assert_forward(y.detach(), x.detach(), "log_softmax")
    assert_gradient(x.grad, y.detach(), dy, "log_softmax")


def test_the_operators_do_not_wait_for_the_gpu():
    x = torch.randn(64, 1024, device="cuda", requires_grad=True)
    ops.softmax(x, -1).backward(torch.ones_like(x))  # compiled and planned
    torch.cuda.synchronize()
    torch.cuda._sleep(2_000_000_000)  # keeps the stream busy about a second: longer than a loaded host's calls
    start = time.perf_counter()
    y = ops.softmax(x, -1)
    y.backward(torch.ones_like(y))
    host = time.perf_counter() - start
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert busy, f"the calls returned after the GPU was done ({host * 1e3:.1f} ms of host time)"


# ---- a negative control: a backward without its sum term ------------------------------------------------------

@torch.library.custom_op("numba_softmax_tests::wrong_softmax", mutates_args=(), device_types="cuda")
def _wrong_softmax(x: torch.Tensor) -> torch.Tensor:
    return ops.softmax(x, -1)


def _wrong_backward(ctx, grad):
    (y,) = ctx.saved_tensors
    return y * grad  # drops the sum(dy * y) term


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


_wrong_softmax.register_autograd(_wrong_backward, setup_context=_save_output)


def test_the_gradient_check_rejects_a_backward_without_its_sum_term():
    x = torch.randn(8, 300, device="cuda", requires_grad=True)
    y = _wrong_softmax(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    with pytest.raises(AssertionError, match="softmax gradient"):
        assert_gradient(x.grad, y.detach(), dy, "softmax")
