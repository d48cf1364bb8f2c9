"""``softmax_backward()`` and ``log_softmax_backward()``: the gradient with respect to the input of
:func:`~.api.softmax` and :func:`~.api.log_softmax`, from their output ``y`` and the gradient ``dy`` with respect
to it (torch's ``_softmax_backward_data`` / ``_log_softmax_backward_data``)::

    softmax:      dx = y * (dy - sum(dy * y))        log_softmax:  dx = dy - exp(y) * sum(dy)

the sums along ``dim``. ``y``, ``dy`` and ``dx`` have one shape and one element type (float32, float16, bfloat16
computed in float32, float64). Device inputs (any kind :func:`~.api.softmax` takes) are never copied and each
may have its own strides, as long as every dimension but ``dim`` merges into one row index and ``dim`` is
adjacent in memory (:class:`~.layout.Rows`); a numpy input is copied to the device and back (any ``dim``). Launch
plans are cached as the forward's are; the call returns once the work is queued (a numpy input: once it is back).
The kernels: :mod:`.kernels.auto_backward`.
"""

import numpy as np
from numba import cuda

from . import api
from .arrays import NUMPY, array_kind, new_like, resolve_stream
from .backend import invocation
from .element_types import STORAGE_DTYPES
from .kernels.auto_backward import backward_launches
from .layout import Rows, check_shape, normalize_dim, plan_layout, self_overlapping
from .validation import check_separate, element_type, read_operand


def softmax_backward(y, dy, dim=-1, *, out=None, stream=None):
    """The gradient of :func:`~.api.softmax` with respect to its input: ``y * (dy - sum(dy * y, dim))``.

    ``y``: the softmax output; ``dy``: the gradient with respect to it (its shape and element type); ``out``:
    where to write (returned), else a new array of ``y``'s kind. ``stream``: as :func:`~.api.softmax`'s."""
    return _backward("softmax", y, dy, dim, out, stream)


def log_softmax_backward(y, dy, dim=-1, *, out=None, stream=None):
    """The gradient of :func:`~.api.log_softmax` with respect to its input: ``dy - exp(y) * sum(dy, dim)``.

    ``y``: the log_softmax output; ``dy``: the gradient with respect to it; ``out``, ``stream``: as
    :func:`softmax_backward`'s."""
    return _backward("log_softmax", y, dy, dim, out, stream)


class BackwardPlan:
    """One (form, pointers, shape, strides, element type) prepared once: the row views and the packed launch."""

    def __init__(self, form, y, dy, dx, element):
        self.cached = False
        self.kernels = invocation(f"{form}-backward", backward_launches(y, dy, dx, element, form))

    def run(self, stream):
        self.kernels.enqueue(stream)


def _operands(y, dy, out, dim, kind):
    """``(y, dy, out)`` read as operands, their element type and ``dim`` in range; ValueError naming what is wrong."""
    source = read_operand(y, "y", kind=kind)
    gradient = read_operand(dy, "dy")
    check_shape(source.shape, "y")
    axis = normalize_dim(dim, len(source.shape))
    element = element_type(source.dtype, None, "y")
    dest = None if out is None else read_operand(out, "out")
    for what, operand in (("dy", gradient), ("out", dest)):
        if operand is None:
            continue
        if (operand.kind == NUMPY) != (source.kind == NUMPY):
            raise ValueError(f"{what}: must live where y does (numpy arrays for a numpy y, else device arrays)")
        if tuple(operand.shape) != tuple(source.shape):
            raise ValueError(f"{what}: must have y's shape {tuple(source.shape)}, got {tuple(operand.shape)}")
        if element_type(operand.dtype, element, what) != element:
            raise ValueError(f"{what}: dtype {operand.dtype} is not y's {element}")
    return source, gradient, dest, element, axis


def _backward(form, y, dy, dim, out, stream):
    api.require_device()
    kind = array_kind(y)
    source, gradient, dest, element, axis = _operands(y, dy, out, dim, kind)
    if kind == NUMPY:
        return _backward_host(form, y, dy, out, axis, element, stream)
    target = resolve_stream(stream, y, kind, source.stream)
    result = new_like(y, kind, source.shape, element, target.numba) if out is None else out
    if dest is None:
        dest = read_operand(result, "out")
    key = ("backward", form, source.pointer, gradient.pointer, dest.pointer, source.shape, axis, source.strides,
           gradient.strides, dest.strides, element)
    plan = api.cached_plan(key, lambda: _device_plan(form, (y, dy, result), (source, gradient, dest), element, axis))
    plan.run(target)
    return result


def _device_plan(form, arrays, operands, element, axis):
    size = STORAGE_DTYPES[element].itemsize
    views, layouts = [], []
    for what, array, operand in zip(("y", "dy", "out"), arrays, operands, strict=True):
        if operand.pointer % size:
            raise ValueError(f"{what}: the data does not start on a {size}-byte boundary (its element size)")
        layout = plan_layout(operand.shape, operand.strides, size, axis, what)
        if not isinstance(layout, Rows):
            raise ValueError(f"{what}: the backward runs along rows: dim {axis} must be adjacent in memory and the "
                             "other dimensions must merge into one row index (e.g. pass "
                             f"x.movedim({axis}, -1).contiguous() and move the result back)")
        views.append(api.layout_view(array, operand, layout, element))
        layouts.append(layout)
    if self_overlapping(layouts[2]):
        raise ValueError(f"out: its elements overlap one another (strides {operands[2].strides} bytes)")
    for what, operand in (("y", operands[0]), ("dy", operands[1])):
        try:
            check_separate((operand.pointer, operand.shape, operand.strides, size),
                           (operands[2].pointer, operands[2].shape, operands[2].strides, size))
        except ValueError:
            raise ValueError(f"out: overlaps {what}: the backward never writes its inputs; pass a separate out") \
                from None
    return BackwardPlan(form, *views, element)


def _backward_host(form, y, dy, out, axis, element, stream):
    """numpy inputs: the rows copied to the device, the gradient copied back into y's shape."""
    target = resolve_stream(stream, y, NUMPY, None)
    storage = STORAGE_DTYPES[element]
    rows_first = [np.moveaxis(np.asarray(a, dtype=storage), axis, -1) for a in (y, dy)]
    cols = y.shape[axis]
    rows = y.size // cols
    d_y, d_dy = (cuda.to_device(np.ascontiguousarray(a).reshape(rows, cols), stream=target.numba)
                 for a in rows_first)
    d_dx = cuda.device_array((rows, cols), dtype=storage, stream=target.numba)
    invocation(f"{form}-backward", backward_launches(d_y, d_dy, d_dx, element, form)).enqueue(target)
    result = d_dx.copy_to_host(stream=target.numba)
    target.synchronize()
    shaped = np.moveaxis(result.reshape(rows_first[0].shape), -1, axis)
    if out is None:
        return np.ascontiguousarray(shaped)
    out[...] = shaped
    return out
