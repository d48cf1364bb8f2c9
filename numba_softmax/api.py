"""``softmax()``: the library call. Any array kind in place, checks on the device, cached launch plans.

One call:

1. read the input where it lives (:mod:`.arrays`: numpy, Numba, torch, CuPy, any
   ``__cuda_array_interface__`` or DLPack object) and check kind, dtype, rank, layout and shape on
   the host, once, into a :class:`~.validation.Matrix` the rest of the call uses (nothing is copied);
   ``out=`` (or the new result) the same way;
2. pick the launch stream (the caller's, else the input's own, else the legacy default stream);
3. take the cached :class:`LaunchPlan` for (method, check, input pointer, output pointer, shape):
   compiled kernels, arguments packed once, the status words and the alarm of the device-side
   check allocated once. Nothing is allocated when ``out=`` is given;
4. enqueue; with ``check=True`` synchronize and read the alarm (pinned host memory the kernel
   writes only when it finds something), raising ``ValueError`` with the first offending row and
   column; with ``check=False`` return at once (asynchronous on the stream) unless the result has
   to come back to a numpy array.

A call that repeats an earlier one with the same Numba device arrays (the same objects, whose
pointer, shape and layout cannot change), ``out=``, method, check and stream skips steps 1-3
(:class:`RepeatedCall`): at one row of 128 columns those steps cost about as much host time as
the launch itself. The same torch tensors with ``out=`` skip them too, after a look at each
tensor's pointer, shape, dtype and contiguity (a tensor can be resized or rebound in place) and,
without ``stream=``, at torch's current stream (the call runs there, and it can change between calls).

docs/api.md describes what each input kind returns, the checks, masks, streams and caching.
"""

import weakref
from collections import OrderedDict

import numpy as np
from numba import cuda

from . import arrays
from .arrays import NUMPY, array_kind, new_like, resolve_stream
from .backend import SIMULATOR, invocation
from .device import gpu_present
from .kernels.auto_launch import auto_launches, check_launches
from .kernels.fused_row import fused_launches
from .kernels.row_stages import stages_launches
from .validation import (STATUS_CLEAR, STATUS_WORDS, check_separate, check_separate_host, status_error,
                         validate_matrix, validate_out)

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
    """Everything one (method, check, x, y, shape) needs, prepared once.

    ``x`` and ``y`` are device arrays the plan launches on: on a GPU, views that do not own the
    memory (the key's pointers are re-read from the caller's arrays on every call, so a hit
    always launches on memory the caller holds); in the simulator, the arrays themselves.
    """

    def __init__(self, method, checked, x, y):
        self.method = method
        self.shape = tuple(x.shape)
        self.x, self.y = x, y
        self.cached = False  # in the plan cache (cached_plan): a remembered call may use it
        self.status = self.alarm = self.alarm_word = None
        if checked:
            self.status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
            # Pinned host memory the device writes through: the good path reads it without a copy, through
            # a plain numpy view (indexing Numba's mapped-array class costs several times more per call).
            self.alarm = cuda.mapped_array(1, dtype=np.int32)
            self.alarm[0] = 0
            self.alarm_word = np.asarray(self.alarm)
        self.check_pass = None
        rows, cols = self.shape
        if method == "auto":
            launches = auto_launches(x, y, self.status, self.alarm)
        else:
            if checked:
                # The protocol's kernels are validated before they launch (-inf is refused there).
                self.check_pass = invocation("softmax-check",
                                             check_launches(x, self.status, self.alarm, allow_neg_inf=False))
            if method == "fused":
                launches = fused_launches(x, y)
            else:
                self.intermediates = (cuda.device_array(rows, dtype=np.float32),
                                      cuda.device_array((rows, cols), dtype=np.float32),
                                      cuda.device_array(rows, dtype=np.float32))
                launches = stages_launches(x, y, *self.intermediates)
        self.kernels = invocation(f"softmax-{method}", launches)

    def run(self, stream, what="input"):
        """Enqueue on ``stream``; when checked, synchronize and raise what the device recorded."""
        if self.check_pass is not None:
            self.check_pass.enqueue(stream)
            stream.synchronize()
            if self.alarm_word[0]:
                self._report(stream, what)
        self.kernels.enqueue(stream)
        if self.status is not None:
            stream.synchronize()
            if self.alarm_word[0]:
                self._report(stream, what)

    def _report(self, stream, what):
        """The alarm is up: read and clear what the device recorded, and raise it."""
        words = self.status.copy_to_host(stream=stream.numba)
        stream.synchronize()
        # Clear for the next call before raising (the kernel never clears).
        self.status.copy_to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64), stream=stream.numba)
        stream.synchronize()
        self.alarm_word[0] = 0
        message = status_error(words, self.shape, what)
        raise ValueError(message or f"{what}: the device check raised its alarm but recorded no position "
                                    f"(status words {list(words)})")


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
    (``torch_layout`` set) each tensor's pointer, shape, dtype and contiguity are compared too, and
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
            x_pointer, y_pointer, shape, dtype, device, current = self.torch_layout
            return (x.data_ptr() == x_pointer and out.data_ptr() == y_pointer and x.shape == shape
                    and out.shape == shape and x.dtype is dtype and out.dtype is dtype and x.is_contiguous()
                    and out.is_contiguous()
                    # without stream=, torch's current stream then and now (it is where the call runs)
                    and (current is None or arrays.torch_current_stream(device) == current))
        return stream is not None or getattr(x, "stream", None) is self.x_stream


#: Remembered calls by (id(x), id(out), method, check, id(stream)); an entry is used only if it
#: still refers to those very objects (an id can be reused once its object is gone). Bounded like
#: the plans; the oldest entry is dropped first.
_repeats = {}


def _repeat_key(x, out, stream, method, check):
    return id(x), id(out), method, check, id(stream)


def remembered_call(x, out, stream, method, check):
    """The :class:`RepeatedCall` remembered for these arguments, or None (for diagnostics)."""
    return _repeats.get(_repeat_key(x, out, stream, method, check))


def _remember(x, out, stream, method, check, key, plan, target, torch_layout=None):
    """Remember a call with Numba arrays, or torch tensors and ``out=``, for :class:`RepeatedCall`."""
    try:
        entry = RepeatedCall(x, out, stream, method, check, key, plan, target, torch_layout)
    except TypeError:  # an array type without weak references: no shortcut
        return
    _repeats[_repeat_key(x, out, stream, method, check)] = entry
    if len(_repeats) > PLAN_CACHE_SIZE:
        del _repeats[next(iter(_repeats))]


def softmax(x, method="auto", out=None, stream=None, check=True):
    """Row-wise softmax of a float32 C-contiguous (rows, cols) array, on the GPU, in place.

    ``x``: a numpy array (result: numpy), a Numba device array (result: Numba device array), a
    PyTorch CUDA tensor (result: torch tensor), a CuPy array (result: CuPy array), or any other
    object with ``__cuda_array_interface__`` or DLPack on a CUDA device (result: Numba device
    array). Device inputs are used in place, never copied to the host.

    ``out``: where to write (returned): same shape, float32, C-contiguous, on the device for a
    device input (any device kind) or a numpy array for a numpy input; must not overlap ``x``.

    ``method``: ``"auto"`` (the fastest kernel for the width, any row length, ``-inf`` entries
    get weight 0), or the protocol's ``"fused"`` (rows up to 4096 columns) and ``"stages"``
    (finite inputs only).

    ``check=True``: NaN or +inf, or (auto) a row with no finite entry, raise ``ValueError`` naming
    the first offending row and column, found on the device; the call synchronizes its stream to
    report. ``check=False``: no check (NaN propagates; a fully masked row gives NaN) and, for a
    device input, no synchronization: the call returns once the work is queued.

    ``stream``: a Numba, cuda-python, cuda.core, torch or CuPy stream or a handle (int). Without
    one: torch's current stream for a tensor, the stream the input's ``__cuda_array_interface__``
    names, else the legacy default stream.
    """
    # Only calls that passed every check below are remembered, so a bad method or check misses here and
    # gets its own error below (an unhashable one too: the key cannot be looked up).
    try:
        repeat = _repeats.get((id(x), id(out), method, check, id(stream)))  # _repeat_key, inline: one call less
    except TypeError:
        repeat = None
    if repeat is not None and repeat.plan.cached and repeat.matches(x, out, stream, method, check):
        # (clear_plans() and eviction uncache the plan, which ends the shortcut)
        _plans.move_to_end(repeat.key)
        repeat.plan.run(repeat.target)
        return out
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    if not _gpu_confirmed:
        require_device()
    kind = array_kind(x)
    if kind == NUMPY:
        return _softmax_host(x, method, out, stream, check)
    handle = arrays.stream_handle(stream) if stream is not None and kind == arrays.DLPACK else None
    source = validate_matrix(x, "input", handle, kind)
    target = resolve_stream(stream, x, kind, source.stream)
    result = new_like(x, kind, source.shape, target.numba) if out is None else out
    dest = validate_out(result, source)
    x_pointer, y_pointer, shape = source.pointer, dest.pointer, source.shape
    if SIMULATOR:
        # No device pointers there: the plan holds the arrays, keyed by their host buffers.
        x_pointer, y_pointer = _simulated_address(x), _simulated_address(result)
    key = (method, check, x_pointer, y_pointer, shape)
    plan = _plans.get(key)
    if plan is None:
        plan = cached_plan(key, lambda: _device_plan(method, check, x, result, x_pointer, y_pointer, shape))
    else:
        _plans.move_to_end(key)
    if kind == arrays.NUMBA and dest.kind == arrays.NUMBA:
        _remember(x, result, stream, method, check, key, plan, target)
    elif kind == arrays.TORCH and dest.kind == arrays.TORCH and out is not None:
        device = x.get_device()
        current = None if stream is not None else arrays.torch_current_stream(device)
        _remember(x, result, stream, method, check, key, plan, target,
                  (x_pointer, y_pointer, x.shape, x.dtype, device, current))
    plan.run(target)
    return result


def _simulated_address(array):
    return array.__array_interface__["data"][0]


def _device_plan(method, check, x, y, x_pointer, y_pointer, shape):
    check_separate(x_pointer, y_pointer, shape)
    if SIMULATOR:
        return LaunchPlan(method, check, x, y)
    return LaunchPlan(method, check, arrays.device_view(x_pointer, shape), arrays.device_view(y_pointer, shape))


def _softmax_host(x, method, out, stream, check):
    """A numpy input: copied into the plan's own device arrays, the result copied back; synchronizes."""
    source = validate_matrix(x, "input", kind=NUMPY)
    shape = source.shape
    if out is not None:
        validate_out(out, source)
        check_separate_host(x, out)
    target = resolve_stream(stream, x, NUMPY, None)
    plan = cached_plan((method, check, NUMPY, shape), lambda: LaunchPlan(
        method, check, cuda.device_array(shape, dtype=np.float32), cuda.device_array(shape, dtype=np.float32)))
    plan.x.copy_to_device(x, stream=target.numba)
    plan.run(target)
    result = np.empty(shape, dtype=np.float32) if out is None else out
    plan.y.copy_to_host(result, stream=target.numba)
    target.synchronize()
    return result
