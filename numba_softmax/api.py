"""Public API of Experiment A: ``softmax`` (``tiled_softmax`` lives in :mod:`numba_softmax.tiled`)."""

import numpy as np
from numba import cuda

from .kernels.fused_row import fused_launches
from .kernels.row_stages import stages_launches
from .numerics import SIMULATOR
from .validation import is_device_array, validate_matrix

METHODS = ("fused", "stages")

_default_stream = None


def _stream(stream):
    """The launch-layer stream for a call (GPU only)."""
    global _default_stream
    from .launch.driver import Stream
    if stream is not None:
        return Stream.wrap(stream)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


def _run(launches, stream):
    """Submit launches: cuda-python launch layer on a GPU, Numba's dispatcher in the simulator."""
    if SIMULATOR:
        from .launch.plan import run_launches_with_dispatcher
        run_launches_with_dispatcher(launches)
        return
    from .launch.driver import Invocation
    launch_stream = _stream(stream)
    Invocation.from_launches("api", launches).enqueue(launch_stream)
    launch_stream.synchronize()


def softmax(x, method="fused", out=None, stream=None):
    """Row-wise stable softmax of a float32 C-contiguous 2-D array.

    ``x`` may be a numpy array (the result is a numpy array) or a CUDA device array
    (the result stays on the device). Inputs are validated before any launch: wrong
    dtype, rank or layout, zero rows, empty rows, NaN or infinity raise ``ValueError``.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")
    on_device = is_device_array(x)
    host = validate_matrix(x)
    rows, cols = host.shape
    d_x = x if on_device else cuda.to_device(host)
    if out is not None:
        validate_output(out, host.shape, on_device)
    d_y = out if (out is not None and on_device) else cuda.device_array((rows, cols), dtype=np.float32)
    if method == "fused":
        launches = fused_launches(d_x, d_y)
    else:
        launches = stages_launches(d_x, d_y,
                                   cuda.device_array(rows, dtype=np.float32),
                                   cuda.device_array((rows, cols), dtype=np.float32),
                                   cuda.device_array(rows, dtype=np.float32))
    _run(launches, stream)
    if on_device:
        return d_y
    if out is not None:
        d_y.copy_to_host(out)
        return out
    return d_y.copy_to_host()


def validate_output(out, shape, on_device):
    kind = "device array" if on_device else "numpy array"
    if is_device_array(out) != on_device:
        raise ValueError(f"out must be a {kind} like the input")
    dtype = np.dtype(out.dtype)
    if dtype != np.float32 or tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must be float32 with shape {tuple(shape)}, got {dtype} {tuple(out.shape)}")
    if not on_device and not out.flags.c_contiguous:
        raise ValueError("out must be C-contiguous")
