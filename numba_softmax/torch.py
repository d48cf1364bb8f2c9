"""PyTorch operators: ``softmax`` and ``log_softmax`` with their backward, for training code and ``torch.compile``.

Registered with ``torch.library.custom_op`` in the ``numba_softmax`` namespace (CUDA tensors)::

    numba_softmax::softmax(Tensor x, SymInt dim, ScalarType? dtype) -> Tensor
    numba_softmax::log_softmax(Tensor x, SymInt dim, ScalarType? dtype) -> Tensor
    numba_softmax::softmax_backward(Tensor y, Tensor dy, SymInt dim) -> Tensor
    numba_softmax::log_softmax_backward(Tensor y, Tensor dy, SymInt dim) -> Tensor

each with a fake (meta) implementation, so ``torch.compile(fullgraph=True)`` traces them without a graph break,
and the forward two with ``register_autograd`` (the backward ops compute the gradient; ``dtype=`` casts it back to
the input's type, as torch's own). Every launch goes on torch's current stream and none waits for the GPU, so the
calls can be captured in a ``torch.cuda.CUDAGraph`` (after one call outside the capture compiles the kernels).

Layouts: the forward runs in place on any layout :mod:`numba_softmax.layout` plans (strided rows, N-D, ``dim``
before the last through the column kernel) and copies only what it cannot plan (``x.contiguous()``); the backward
runs on rows: ``dim`` not the last is moved there and back (two copies). Results are contiguous. A 0-D tensor
is taken as one element, an empty one gives an empty result, as torch does. No double backward.

This module imports torch; the rest of the package does not (``pip install "numba-softmax[torch]"``).
"""

from typing import Optional

import torch
from torch import Tensor

from . import api, backward
from .element_types import ELEMENT_TYPES
from .layout import Rows, plan_layout

NAMESPACE = "numba_softmax"
#: The element types the kernels take, as torch dtypes.
DTYPES = tuple(getattr(torch, name) for name in ELEMENT_TYPES)


def softmax(x: Tensor, dim: int = -1, dtype: Optional[torch.dtype] = None) -> Tensor:
    """``torch.softmax(x, dim, dtype=dtype)`` on the kernels of :mod:`numba_softmax` (autograd, ``torch.compile``
    and CUDA graphs: the module docstring)."""
    return torch.ops.numba_softmax.softmax(x, dim, dtype)


def log_softmax(x: Tensor, dim: int = -1, dtype: Optional[torch.dtype] = None) -> Tensor:
    """``torch.log_softmax(x, dim, dtype=dtype)`` on the kernels of :mod:`numba_softmax`."""
    return torch.ops.numba_softmax.log_softmax(x, dim, dtype)


# ---- host helpers -----------------------------------------------------------------------------------------------

def _planned(x, dim, rows_only):
    """The layout plan of ``x`` along ``dim`` (:class:`~numba_softmax.layout.Rows` or ``Columns``), or None where
    the kernels cannot take it as it is (``rows_only``: a ``Columns`` plan counts as None)."""
    size = x.element_size()
    try:
        plan = plan_layout(tuple(x.shape), tuple(s * size for s in x.stride()), size, dim, "x")
    except ValueError:
        return None
    return plan if isinstance(plan, Rows) or not rows_only else None


def _check_tensor(what, x):
    if x.dtype not in DTYPES:
        raise ValueError(f"{what}: dtype {x.dtype} is not one the kernels take ({', '.join(map(str, DTYPES))})")
    if x.device.type != "cuda":
        raise ValueError(f"{what}: a {x.device.type} tensor; numba_softmax's operators run on CUDA tensors")


def _forward(function, x, dim, dtype):
    _check_tensor("x", x)
    out_dtype = x.dtype if dtype is None else dtype
    if x.dim() == 0:
        return function(x.reshape(1), 0, dtype).reshape(())
    if x.numel() == 0:
        return torch.empty(x.shape, dtype=out_dtype, device=x.device)
    if _planned(x, dim, rows_only=False) is None:
        x = x.contiguous()
    return function(x, dim, dtype, check=False)


def _backward(function, y, dy, dim):
    _check_tensor("y", y)
    if dy.dtype != y.dtype or dy.shape != y.shape:
        raise ValueError(f"dy: must have y's shape {tuple(y.shape)} and dtype {y.dtype}, got {tuple(dy.shape)} "
                         f"and {dy.dtype}")
    if y.dim() == 0:
        return _backward(function, y.reshape(1), dy.reshape(1), 0).reshape(())
    if y.numel() == 0:
        return torch.empty(y.shape, dtype=y.dtype, device=y.device)
    dim = dim % y.dim()
    if dim != y.dim() - 1:  # rows only: moved to the last dimension and back
        moved = _backward(function, y.movedim(dim, -1).contiguous(), dy.movedim(dim, -1).contiguous(), -1)
        return moved.movedim(-1, dim).contiguous()
    y = y if _planned(y, dim, rows_only=True) is not None else y.contiguous()
    dy = dy if _planned(dy, dim, rows_only=True) is not None else dy.contiguous()
    return function(y, dy, dim)


def _fake_forward(x, dim, dtype):
    ndim = max(1, x.dim())
    torch._check(-ndim <= dim < ndim, lambda: f"dim: {dim} is out of range for a {x.dim()}-D tensor")
    return torch.empty(x.shape, dtype=x.dtype if dtype is None else dtype, device=x.device)


def _fake_backward(y, dy, dim):
    torch._check(dy.shape == y.shape and dy.dtype == y.dtype, lambda: "dy: must have y's shape and dtype")
    return torch.empty(y.shape, dtype=y.dtype, device=y.device)


# ---- the operators ----------------------------------------------------------------------------------------------

@torch.library.custom_op(f"{NAMESPACE}::softmax", mutates_args=(), device_types="cuda")
def _softmax_op(x: Tensor, dim: int, dtype: Optional[torch.dtype]) -> Tensor:
    return _forward(api.softmax, x, dim, dtype)


@torch.library.custom_op(f"{NAMESPACE}::log_softmax", mutates_args=(), device_types="cuda")
def _log_softmax_op(x: Tensor, dim: int, dtype: Optional[torch.dtype]) -> Tensor:
    return _forward(api.log_softmax, x, dim, dtype)


@torch.library.custom_op(f"{NAMESPACE}::softmax_backward", mutates_args=(), device_types="cuda")
def _softmax_backward_op(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    return _backward(backward.softmax_backward, y, dy, dim)


@torch.library.custom_op(f"{NAMESPACE}::log_softmax_backward", mutates_args=(), device_types="cuda")
def _log_softmax_backward_op(y: Tensor, dy: Tensor, dim: int) -> Tensor:
    return _backward(backward.log_softmax_backward, y, dy, dim)


for _op in (_softmax_op, _log_softmax_op):
    _op.register_fake(_fake_forward)
for _op in (_softmax_backward_op, _log_softmax_backward_op):
    _op.register_fake(_fake_backward)


def _setup_context(ctx, inputs, output):
    x, dim, _ = inputs
    ctx.save_for_backward(output)
    ctx.dim = dim
    ctx.input_dtype = x.dtype


def _make_backward(gradient_op):
    def backward_of(ctx, grad):
        (y,) = ctx.saved_tensors
        dx = gradient_op(y, grad.to(y.dtype), ctx.dim)
        return dx.to(ctx.input_dtype), None, None
    return backward_of


_softmax_op.register_autograd(_make_backward(_softmax_backward_op), setup_context=_setup_context)
_log_softmax_op.register_autograd(_make_backward(_log_softmax_backward_op), setup_context=_setup_context)

__all__ = ["softmax", "log_softmax", "NAMESPACE"]
