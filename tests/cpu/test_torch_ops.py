"""numba_softmax.torch without a GPU: on meta tensors (the fake implementations) the operators have their schema,
shapes and dtypes, the autograd wiring (a backward op per forward, the gradient cast back to the input's type),
``torch.library.opcheck``'s schema, fake-tensor, autograd-registration and AOT dispatch tests, and a
``torch.compile(fullgraph=True)`` trace without a graph break. The values: tests/gpu/test_torch_ops_gpu.py."""

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed")

import numba_softmax.torch as nst  # noqa: E402

META = {"device": "meta"}


def test_the_operators_are_registered_with_their_schema():
    assert str(torch.ops.numba_softmax.softmax.default._schema) == (
        "numba_softmax::softmax(Tensor x, SymInt dim, ScalarType? dtype) -> Tensor")
    assert str(torch.ops.numba_softmax.log_softmax_backward.default._schema) == (
        "numba_softmax::log_softmax_backward(Tensor y, Tensor dy, SymInt dim) -> Tensor")


@pytest.mark.parametrize("function", [nst.softmax, nst.log_softmax])
@pytest.mark.parametrize("dtype, out", [(torch.bfloat16, None), (torch.bfloat16, torch.float32),
                                        (torch.float64, torch.float16)], ids=str)
def test_shapes_dtypes_and_the_gradient_type(function, dtype, out):
    x = torch.empty(3, 5, 7, dtype=dtype, **META, requires_grad=True)
    y = function(x, 1, out)
    assert y.shape == x.shape and y.dtype == (out or dtype) and y.device.type == "meta"
    y.sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == dtype


@pytest.mark.parametrize("op, args", [
    ("softmax", lambda: (torch.empty(4, 8, **META, requires_grad=True), -1, None)),
    ("log_softmax", lambda: (torch.empty(4, 8, **META, dtype=torch.bfloat16, requires_grad=True), 0, torch.float32)),
    ("softmax_backward", lambda: (torch.empty(4, 8, **META), torch.empty(4, 8, **META), 1)),
    ("log_softmax_backward", lambda: (torch.empty(2, 3, 8, **META), torch.empty(2, 3, 8, **META), -1)),
])
def test_opcheck_on_meta_tensors(op, args):
    results = torch.library.opcheck(getattr(torch.ops.numba_softmax, op).default, args())
    assert set(results.values()) == {"SUCCESS"}, results


def test_torch_compile_traces_both_operators_without_a_graph_break():
    graphs = []

    def backend(graph, example_inputs):
        graphs.append(graph)
        return graph.forward

    def f(x):
        return nst.softmax(x, -1) * 2 + nst.log_softmax(x, 0, torch.float32)

    y = torch.compile(f, fullgraph=True, backend=backend)(torch.empty(4, 8, **META))
    assert y.shape == (4, 8) and len(graphs) == 1
    targets = {str(node.target) for node in graphs[0].graph.nodes if node.op == "call_function"}
    assert {"numba_softmax.softmax", "numba_softmax.log_softmax"} <= {t.removesuffix(".default") for t in targets}


def test_what_the_operators_refuse():
    with pytest.raises(NotImplementedError, match="'numba_softmax::softmax' with arguments from the 'CPU' backend"):
        nst.softmax(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="x: dtype torch.int32 is not one the kernels take"):
        nst._check_tensor("x", torch.zeros(2, 3, dtype=torch.int32))
    with pytest.raises(RuntimeError, match="dy: must have y's shape and dtype"):
        torch.ops.numba_softmax.softmax_backward(torch.zeros(2, 3, **META), torch.zeros(2, 4, **META), -1)


def test_the_fake_implementation_refuses_a_dim_out_of_range():
    with pytest.raises(RuntimeError, match="dim: 2 is out of range for a 2-D tensor"):
        nst.softmax(torch.empty(3, 4, **META), 2)
