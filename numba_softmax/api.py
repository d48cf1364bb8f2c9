"""Public API of Experiment A: ``softmax`` (``tiled_softmax`` lives in :mod:`numba_softmax.tiled`)."""

import numpy as np
from numba import cuda

from .kernels.fused_row import fused_launches
from .kernels.row_stages import stages_launches
from .backend import run_launches
from .validation import is_device_array, validate_matrix

METHODS = ("fused", "stages")

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
    run_launches(launches, stream, name=f"softmax-{method}")
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
