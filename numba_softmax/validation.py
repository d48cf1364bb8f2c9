"""Input validation, done on the host before anything is launched.

The protocol's scope is finite float32 inputs with non-empty rows. Anything else is
rejected with a ``ValueError`` that names the problem and, where there is one, the
first offending row and column.
"""

import numpy as np
from numba import cuda


def is_device_array(x):
    """True for a CUDA device array (or the simulator's stand-in for one)."""
    if hasattr(x, "__cuda_array_interface__"):
        return True
    return type(x).__name__ == "FakeCUDAArray"  # NUMBA_ENABLE_CUDASIM=1


def _host_view(x, what):
    """A host numpy view of ``x`` (device arrays are copied back for the value check)."""
    if type(x).__name__ == "FakeCUDAArray":
        return x.copy_to_host()
    if is_device_array(x):
        iface = x.__cuda_array_interface__
        dtype = np.dtype(iface["typestr"])
        shape = tuple(iface["shape"])
        strides = iface.get("strides")
        if dtype != np.float32:
            raise ValueError(f"{what} must be float32, got {dtype}")
        if strides is not None and strides != _c_strides(shape, dtype.itemsize):
            raise ValueError(f"{what} must be C-contiguous, got strides {strides} for shape {shape}")
        if not hasattr(x, "copy_to_host"):
            x = cuda.as_cuda_array(x)
        return np.asarray(x.copy_to_host())
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{what} must be a numpy array or a CUDA device array, got {type(x).__name__}")
    return x


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return tuple(reversed(strides))


def _first_nonfinite(host, what, row_lengths=None):
    bad = ~np.isfinite(host)
    if not bad.any():
        return
    flat = int(np.flatnonzero(bad.reshape(-1))[0])
    if row_lengths is None:
        row, col = divmod(flat, host.shape[1])
    else:
        starts = np.concatenate(([0], np.cumsum(row_lengths)[:-1]))
        row = int(np.searchsorted(starts, flat, side="right") - 1)
        col = flat - int(starts[row])
    value = host.reshape(-1)[flat]
    kind = "NaN" if np.isnan(value) else "infinity"
    raise ValueError(f"{what} contains {kind} at row {row}, column {col}: "
                     "only finite inputs are in scope")


def _float32_contiguous(x, what, ndim, rank_text):
    """Host view of ``x`` after the dtype, rank and layout checks shared by every input."""
    host = _host_view(x, what)
    if host.dtype != np.float32:
        raise ValueError(f"{what} must be float32, got {host.dtype}")
    if host.ndim != ndim:
        raise ValueError(f"{what} must be {rank_text}, got {host.ndim}-D shape {host.shape}")
    if not host.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous, got strides {host.strides} for shape {host.shape}")
    return host


def validate_matrix(x, what="input"):
    """Validate a (rows, cols) float32 C-contiguous matrix; return its host copy."""
    host = _float32_contiguous(x, what, 2, "2-D (rows, columns)")
    if host.shape[0] == 0:
        raise ValueError(f"{what} has zero rows")
    if host.shape[1] == 0:
        raise ValueError(f"{what} has empty rows (zero columns), first empty row is row 0")
    _first_nonfinite(host, what)
    return host


def validate_row_lengths(row_lengths):
    """A 1-D integer array of positive row lengths, returned as int64."""
    lengths = np.asarray(row_lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(f"row_lengths must be a 1-D integer array, got {lengths.dtype} shape {lengths.shape}")
    if lengths.size == 0:
        raise ValueError("row_lengths is empty: zero rows")
    empty = np.flatnonzero(lengths <= 0)
    if empty.size:
        raise ValueError(f"row {int(empty[0])} is empty (length {int(lengths[empty[0]])}); "
                         "every row needs at least one element")
    return lengths.astype(np.int64)


def validate_packed(values, row_lengths, what="values"):
    """Validate packed rows; return (host float32 values, int64 row lengths)."""
    host = _float32_contiguous(values, what, 1, "1-D packed rows")
    lengths = validate_row_lengths(row_lengths)
    if int(lengths.sum()) != host.size:
        raise ValueError(f"row lengths sum to {int(lengths.sum())} but {what} holds {host.size} elements")
    _first_nonfinite(host, what, lengths)
    return host, lengths
