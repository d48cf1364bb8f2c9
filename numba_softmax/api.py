"""``softmax()``: the library call. Any array kind in place, any layout the kernels take, cached launch plans.

One call:

1. read the input where it lives (:mod:`.arrays`: numpy, Numba, torch, CuPy, any
   ``__cuda_array_interface__`` or DLPack object) and check kind, dtype and shape on the host, once, into an
   :class:`~.validation.Operand` the rest of the call uses (nothing is copied); ``out=`` (or the new result)
   the same way;
2. pick the launch stream (the caller's, else the input's own, else the legacy default stream);
3. take the cached :class:`LaunchPlan` for (method, check, pointers, shape, dim, strides, element types):
   the layout plan of both arrays (:mod:`.layout`: rows, or columns when ``dim`` is not the last),
   compiled kernels, arguments packed once, the status words and the alarm of the device-side check
   allocated once. Nothing is allocated when ``out=`` is given;
4. enqueue; when checked, synchronize and read the alarm (pinned host memory the kernel writes only when it
   finds something), raising ``ValueError`` with the first offending position; unchecked, return at once
   (asynchronous on the stream) unless the result has to come back to a numpy array.

A call that repeats an earlier one with the same Numba device arrays (the same objects, whose
pointer, shape and layout cannot change), ``out=``, dim, dtype, method, check and stream skips steps 1-3
(:class:`RepeatedCall`): at one row of 128 columns those steps cost about as much host time as
the launch itself. The same torch tensors with ``out=`` skip them too, after a look at each
tensor's pointer, shape, dtype and strides (a tensor can be resized or rebound in place) and,
without ``stream=``, at torch's current stream (the call runs there, and it can change between calls).

docs/api.md describes what each input kind returns, the layouts, the checks, masks, streams and caching.
"""

import weakref
from collections import OrderedDict

import numpy as np
from numba import cuda

from . import arrays
from .arrays import NUMPY, array_kind, device_view, new_like, resolve_stream, simulated_view
from .backend import SIMULATOR, invocation
from .device import gpu_present
from .element_types import STORAGE_DTYPES
from .kernels.auto_launch import auto_launches, check_launches
from .kernels.fused_row import fused_launches
from .kernels.row_stages import stages_launches
from .layout import Rows
from .validation import (STATUS_CLEAR, STATUS_WORDS, check_call, check_method_layout, check_out,
                         check_separate_host, plan_operands, read_operand, requested_type, status_error_at)

METHODS = ("auto", "fused", "stages")
#: Launch plans kept (least recently used dropped first): each holds packed arguments and, when
#: checked, 16 bytes of status and 4 bytes of pinned host memory; a numpy input's plan also holds
#: its two device staging arrays.
PLAN_CACHE_SIZE = 64

NO_GPU_MESSAGE = ("no CUDA device: numba_softmax found no CUDA driver or GPU on this machine; to run its "
                  "kernels on the CPU in the Numba CUDA simulator, set NUMBA_ENABLE_CUDASIM=1 before "
                  "starting Python")


class NoCudaDeviceError(RuntimeError):
    """No CUDA driver or GPU, and not the simulator: one line saying so and how to use the simulator."""


_gpu_confirmed = False


def require_device():
    """Raise :class:`NoCudaDeviceError` (one line, no driver traceback) unless a GPU or the simulator is there."""
    global _gpu_confirmed
    if _gpu_confirmed or SIMULATOR:
        return
    if not gpu_present():
        raise NoCudaDeviceError(NO_GPU_MESSAGE)
    _gpu_confirmed = True


class LaunchPlan:
    """Everything one (method, check, x, y, layout, element types) needs, prepared once.

    ``x`` and ``y`` are device arrays the plan launches on, shaped as ``layout`` says (``(rows, cols)``
    for :class:`~.layout.Rows`, ``(outer, length, inner)`` for :class:`~.layout.Columns`): on a GPU, views
    that do not own the memory (the key's pointers are re-read from the caller's arrays on every call, so a
    hit always launches on memory the caller holds); in the simulator, views of the arrays themselves.
    ``where``: (shape, dim) of the call, for naming an offending element by its index.
    """

    def __init__(self, method, checked, x, y, types, layout, where, form="softmax"):
        self.method = method
        self.shape = tuple(x.shape)
        self.x, self.y = x, y
        self.layout, self.where = layout, where
        self.cached = False  # in the plan cache (cached_plan): a remembered call may use it
        self.status = self.alarm = self.alarm_word = None
        if checked:
            self.status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
            cuda.default_stream().synchronize()  # landed before a kernel on any other stream reads it
            # Pinned host memory the device writes through: the good path reads it without a copy, through
            # a plain numpy view (indexing Numba's mapped-array class costs several times more per call).
            self.alarm = cuda.mapped_array(1, dtype=np.int32)
            self.alarm[0] = 0
            self.alarm_word = np.asarray(self.alarm)
        self.check_pass = None
        if method == "auto" and isinstance(self.layout, Rows):
            launches = auto_launches(x, y, self.status, self.alarm, types, form)
        elif method == "auto":
            launches = column_launches(x, y, self.status, self.alarm, types, form)
        else:
            if checked:
                # The protocol's kernels are validated before they launch (-inf is refused there).
                self.check_pass = invocation("softmax-check",
                                             check_launches(x, self.status, self.alarm, allow_neg_inf=False))
            if method == "fused":
                launches = fused_launches(x, y)
            else:
                rows, cols = self.shape
                self.intermediates = (cuda.device_array(rows, dtype=np.float32),
                                      cuda.device_array((rows, cols), dtype=np.float32),
                                      cuda.device_array(rows, dtype=np.float32))
                launches = stages_launches(x, y, *self.intermediates)
        self.kernels = invocation(f"{form}-{method}", launches)

    def run(self, stream, where=None):
        """Enqueue on ``stream``; when checked, synchronize and raise what the device recorded (``where``:
        (shape, dim) of this call when it is not the plan's own)."""
        if self.check_pass is not None:
            self.check_pass.enqueue(stream)
            stream.synchronize()
            if self.alarm_word[0]:
                self._report(stream, where or self.where)
        self.kernels.enqueue(stream)
        if self.status is not None:
            stream.synchronize()
            if self.alarm_word[0]:
                self._report(stream, where or self.where)

    def _report(self, stream, where, what="x"):
        """The alarm is up: read and clear what the device recorded, and raise it."""
        words = self.status.copy_to_host(stream=stream.numba)
        stream.synchronize()
        # Clear for the next call before raising (the kernel never clears).
        self.status.copy_to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64), stream=stream.numba)
        stream.synchronize()
        self.alarm_word[0] = 0
        message = status_error_at(words, *where, self.layout, what)
        raise ValueError(message or f"{what}: the device check raised its alarm but recorded no position "
                                    f"(status words {list(words)})")


def column_launches(x, y, status, alarm, types, form="softmax"):
    """``method="auto"`` along a dimension before the last: the column kernel's launches on 3-D
    (outer, length, inner) arrays (its module is imported when first needed)."""
    from .kernels.auto_columns import column_launches as launches
    return launches(x, y, status, alarm, types, form)


_plans = OrderedDict()


def cached_plan(key, make):
    """The plan for ``key``, made by ``make()`` on a miss; least recently used dropped past the limit."""
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = make()
        plan.cached = True
        if len(_plans) > PLAN_CACHE_SIZE:
            _plans.popitem(last=False)[1].cached = False
    else:
        _plans.move_to_end(key)
    return plan


def clear_plans():
    """Drop every cached plan (their pinned and device memory is freed with them)."""
    for plan in _plans.values():
        plan.cached = False
    _plans.clear()
    _repeats.clear()


class RepeatedCall:
    """A call with Numba device arrays (or torch tensors), remembered so that the same call again
    skips reading the arrays, checking them and looking up the plan: a Numba device array's pointer,
    shape, dtype and layout are fixed for its lifetime, so the same objects (held weakly: a freed
    array ends the shortcut, and another array at the same address is another object) with the
    same method, check and stream argument need the same plan on the same stream. A torch tensor
    can be resized or rebound in place (``resize_``, ``set_``, ``.data =``), so for tensors
    (``torch_layout`` set) each tensor's pointer, shape, dtype and strides are compared too, and
    without ``stream=`` torch's current stream on the tensor's device."""

    __slots__ = ("x", "out", "stream", "x_stream", "method", "check", "key", "plan", "target", "torch_layout")

    def __init__(self, x, out, stream, method, check, key, plan, target, torch_layout=None):
        self.x, self.out = weakref.ref(x), weakref.ref(out)
        self.stream, self.x_stream = stream, getattr(x, "stream", None)
        self.method, self.check, self.key, self.plan, self.target = method, check, key, plan, target
        self.torch_layout = torch_layout

    def matches(self, x, out, stream, method, check):
        if not (self.x() is x and self.out() is out and self.stream is stream and self.method == method
                and self.check == check):
            return False
        if self.torch_layout is not None:
            x_pointer, y_pointer, shape, x_dtype, y_dtype, x_strides, y_strides, device, current = self.torch_layout
            return (x.data_ptr() == x_pointer and out.data_ptr() == y_pointer and x.shape == shape
                    and out.shape == shape and x.dtype is x_dtype and out.dtype is y_dtype
                    # None: contiguous (the common case, the cheaper question)
                    and (x.is_contiguous() if x_strides is None else x.stride() == x_strides)
                    and (out.is_contiguous() if y_strides is None else out.stride() == y_strides)
                    # without stream=, torch's current stream then and now (it is where the call runs)
                    and (current is None or arrays.torch_current_stream(device) == current))
        return stream is not None or getattr(x, "stream", None) is self.x_stream


#: Remembered calls by (id(x), id(out), method, check, id(stream), dim, dtype, form); an entry is used only if it
#: still refers to those very objects (an id can be reused once its object is gone). Bounded like
#: the plans; the oldest entry is dropped first.
_repeats = {}


def _repeat_key(x, out, stream, method, check, dim, dtype, form="softmax"):
    return id(x), id(out), method, check, id(stream), dim, dtype, form


def remembered_call(x, out, stream, method, check, dim=-1, dtype=None, form="softmax"):
    """The :class:`RepeatedCall` remembered for these arguments, or None (for diagnostics)."""
    return _repeats.get(_repeat_key(x, out, stream, method, check, dim, dtype, form))


def _remember(x, out, stream, method, check, dim, dtype, key, plan, target, torch_layout=None, form="softmax"):
    """Remember a call with Numba arrays, or torch tensors and ``out=``, for :class:`RepeatedCall`."""
    try:
        entry = RepeatedCall(x, out, stream, method, check, key, plan, target, torch_layout)
        repeat_key = _repeat_key(x, out, stream, method, check, dim, dtype, form)
    except TypeError:  # an array type without weak references, an unhashable dtype: no shortcut
        return
    _repeats[repeat_key] = entry
    if len(_repeats) > PLAN_CACHE_SIZE:
        del _repeats[next(iter(_repeats))]


def softmax(x, dim=-1, dtype=None, *, method="auto", out=None, stream=None, check=None):
    """Softmax of ``x`` along ``dim``, on the GPU, in place where ``x`` lives (torch's ``softmax(x, dim, dtype=)``).

    ``x``: a numpy array (result: numpy), a Numba device array (result: Numba device array), a PyTorch CUDA
    tensor (result: torch tensor), a CuPy array (result: CuPy array), or any other object with
    ``__cuda_array_interface__`` or DLPack on a CUDA device (result: Numba device array), of float32,
    float16, bfloat16 (a torch tensor; elsewhere uint16 bits with ``dtype="bfloat16"``) or float64, 1-D or
    more, strided as :mod:`.layout` takes without a copy. Device inputs are never copied.

    ``dim``: the dimension the softmax runs along (negative counts from the end).
    ``dtype``: the result's type (float32, float16, bfloat16, float64: a numpy dtype, its name or a torch
    dtype); None keeps x's. The input is cast to it first; float16 and bfloat16 compute in float32.

    ``method``: ``"auto"`` (any width, ``-inf`` entries get weight 0), or the protocol's ``"fused"`` (rows up to
    4096 columns) and ``"stages"`` (finite inputs only), which take float32 C-contiguous 2-D arrays only.

    ``out``: where to write (returned): x's shape, the result's type, any layout the kernels take, on the device
    for a device input (any device kind) or a numpy array for a numpy input; must not overlap ``x``.

    ``check``: None (default) checks a numpy input and not a device input; True: NaN or +inf, or (auto) a softmax
    with no finite entry, raise ``ValueError`` naming the first offending position, found on the device (the
    call synchronizes its stream); False: no check (NaN propagates, a fully masked softmax gives NaN) and, for a
    device input, the call returns once the work is queued.

    ``stream``: a Numba, cuda-python, cuda.core, torch or CuPy stream or a handle (int). Without one: torch's
    current stream for a tensor, the stream the input's ``__cuda_array_interface__`` names, else the legacy
    default stream.
    """
    return _call("softmax", x, dim, dtype, method, out, stream, check)


def log_softmax(x, dim=-1, dtype=None, *, out=None, stream=None, check=None):
    """log_softmax of ``x`` along ``dim`` (torch's ``log_softmax(x, dim, dtype=)``): ``(x - max) - log(sum(exp(x -
    max)))`` per row, in the numerics policy (libdevice ``exp`` and ``log``), with :func:`softmax`'s inputs,
    layouts, ``dtype``, ``out``, ``stream`` and ``check`` (``method="auto"``'s kernels: any width; a ``-inf``
    entry gives ``-inf``, a row without a finite entry NaN unless checked). Rows past the register geometries
    (more than 16,384 columns) run the long-row path, which reads x twice."""
    return _call("log_softmax", x, dim, dtype, "auto", out, stream, check)


def _call(form, x, dim, dtype, method, out, stream, check):
    """:func:`softmax` or :func:`log_softmax` (``form``)."""
    # Only calls that passed every check below are remembered, so a bad argument misses here and gets its own
    # error below (an unhashable one too: the key cannot be looked up).
    try:
        repeat = _repeats.get((id(x), id(out), method, check, id(stream), dim, dtype, form))  # _repeat_key, inline
    except TypeError:
        repeat = None
    if repeat is not None and repeat.plan.cached and repeat.matches(x, out, stream, method, check):
        # (clear_plans() and eviction uncache the plan, which ends the shortcut)
        _plans.move_to_end(repeat.key)
        repeat.plan.run(repeat.target)
        return out
    if method not in METHODS:
        raise ValueError(f"method: unknown method {method!r}; expected one of {METHODS}")
    if check not in (None, True, False):
        raise ValueError(f"check: expected None, True or False, got {check!r}")
    if not _gpu_confirmed:
        require_device()
    kind = array_kind(x)
    requested = requested_type(dtype)
    if kind == NUMPY:
        return _softmax_host(x, dim, requested, method, out, stream, check is None or bool(check), form)
    handle = arrays.stream_handle(stream) if stream is not None and kind == arrays.DLPACK else None
    source = read_operand(x, "x", handle, kind)
    types, axis = check_call(source, requested, dim, method)
    target = resolve_stream(stream, x, kind, source.stream)
    result = new_like(x, kind, source.shape, types[1], target.numba) if out is None else out
    dest = read_operand(result, "out")
    check_out(dest, source, types[1])
    check_method_layout(method, dest, types, axis, "out")
    checked = bool(check)
    key = (form, method, checked, source.pointer, dest.pointer, source.shape, axis, source.strides, dest.strides,
           types)
    plan = _plans.get(key)
    if plan is None:
        plan = cached_plan(key, lambda: _device_plan(method, checked, x, result, source, dest, types, axis, form))
    else:
        _plans.move_to_end(key)
    if kind == arrays.NUMBA and dest.kind == arrays.NUMBA:
        _remember(x, result, stream, method, check, dim, dtype, key, plan, target, form=form)
    elif kind == arrays.TORCH and dest.kind == arrays.TORCH and out is not None:
        device = x.get_device()
        current = None if stream is not None else arrays.torch_current_stream(device)
        _remember(x, result, stream, method, check, dim, dtype, key, plan, target,
                  (source.pointer, dest.pointer, x.shape, x.dtype, out.dtype,
                   None if source.strides is None else x.stride(), None if dest.strides is None else out.stride(),
                   device, current), form)
    plan.run(target)
    return result


def layout_view(array, operand, layout, element):
    """The device array a plan launches on: ``array``'s memory shaped as ``layout`` (elements of ``element``)."""
    storage = STORAGE_DTYPES[element]
    size = storage.itemsize
    if isinstance(layout, Rows):
        shape = (layout.rows, layout.cols)
        strides = None if layout.row_stride == layout.cols else (layout.row_stride * size, size)
    else:
        shape, strides = tuple(layout[:3]), tuple(s * size for s in layout.strides)
    if SIMULATOR:
        return simulated_view(array, shape, strides or (shape[1] * size, size))
    return device_view(operand.pointer, shape, strides, storage)


def _device_plan(method, checked, x, y, source, dest, types, dim, form):
    x_layout, y_layout = plan_operands(source, dest, types, dim)
    return LaunchPlan(method, checked, layout_view(x, source, x_layout, types[0]),
                      layout_view(y, dest, y_layout, types[1]), types, x_layout, (tuple(source.shape), dim), form)


def _softmax_host(x, dim, requested, method, out, stream, checked, form="softmax"):
    """A numpy input: its softmax rows copied into the plan's own device arrays, the result copied back into
    x's shape (``out`` of any strides); synchronizes."""
    source = read_operand(x, "x", kind=NUMPY)
    types, dim = check_call(source, requested, dim, method)
    if out is not None:
        dest = read_operand(out, "out")
        check_out(dest, source, types[1])
        check_method_layout(method, dest, types, dim, "out")
        check_separate_host(x, out)
    target = resolve_stream(stream, x, NUMPY, None)
    last = dim == x.ndim - 1
    rows_first = x if last else np.moveaxis(x, dim, -1)
    cols = x.shape[dim]
    rows = x.size // cols
    storage = [STORAGE_DTYPES[t] for t in types]
    plan = cached_plan((form, method, checked, NUMPY, (rows, cols), types), lambda: LaunchPlan(
        method, checked, cuda.device_array((rows, cols), dtype=storage[0]),
        cuda.device_array((rows, cols), dtype=storage[1]), types, Rows(rows, cols, cols), (x.shape, dim), form))
    plan.x.copy_to_device(np.ascontiguousarray(rows_first).reshape(rows, cols), stream=target.numba)
    plan.run(target, (x.shape, dim))
    if out is not None and last and dest.strides is None:
        plan.y.copy_to_host(out.reshape(rows, cols), stream=target.numba)   # a view of out: no extra copy
        target.synchronize()
        return out
    result = np.empty((rows, cols), dtype=storage[1])
    plan.y.copy_to_host(result, stream=target.numba)
    target.synchronize()
    shaped = np.moveaxis(result.reshape(rows_first.shape), -1, dim)
    if out is None:
        return np.ascontiguousarray(shaped)
    out[...] = shaped
    return out
