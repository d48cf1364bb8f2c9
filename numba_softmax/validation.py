"""Input checks done on the host: kind, dtype, rank, layout, shape, row lengths. Nothing is copied.

The values themselves (NaN, +inf, rows with no finite entry) are checked on the device, by the
kernel or by one check pass before it (:mod:`numba_softmax.kernels.auto_rows`); the API turns
what the device recorded into a ``ValueError`` naming the first offending row and column.
Every check here raises a ``ValueError`` that names what is wrong and where.
"""

from typing import NamedTuple

import numpy as np

from .arrays import DEVICE_KINDS, FLOAT32, NUMPY, array_kind, kind_error, read_device
from .contiguity import c_contiguous
from .simulator import SIMULATOR

_OVERLAP = "out overlaps the input: softmax never writes its input; pass a separate out"


class Matrix(NamedTuple):
    """A matrix argument read and checked once, at the API boundary: what the rest of the call uses.

    Its dtype and strides are not kept: a ``Matrix`` is float32 and C-contiguous, or was refused.
    (A named tuple rather than a frozen dataclass: it is built on every call that misses the repeated-call
    shortcut, and a named tuple costs half as much to build.)
    """

    kind: str            # one of the kinds of :mod:`.arrays`
    pointer: int | None  # the device address; None for a numpy array (it is copied to the device)
    shape: tuple         # (rows, cols), both >= 1
    stream: int | None   # the stream the array names (its __cuda_array_interface__), or None


def is_device_array(x):
    """True for any device array softmax() takes (Numba, the simulator's, CAI, DLPack, torch CUDA)."""
    return array_kind(x) in DEVICE_KINDS


def check_matrix_layout(shape, dtype, contiguous, what="input"):
    """A (rows, cols) float32 C-contiguous matrix with rows >= 1 and cols >= 1; returns (rows, cols)."""
    if dtype != FLOAT32:
        raise ValueError(f"{what} must be float32, got {dtype}")
    if len(shape) != 2:
        raise ValueError(f"{what} must be 2-D (rows, columns), got {len(shape)}-D shape {tuple(shape)}")
    rows, cols = shape
    if rows == 0:
        raise ValueError(f"{what} has zero rows")
    if cols == 0:
        raise ValueError(f"{what} has empty rows (zero columns), first empty row is row 0")
    if not contiguous:
        raise ValueError(f"{what} must be C-contiguous (row-major, no gaps), got a strided array of shape "
                         f"{tuple(shape)}: pass a contiguous copy")
    return rows, cols


def _read(x, kind, what, stream_handle=None):
    """``(pointer or None, shape, dtype, c_contiguous, stream or None)`` of an array of any kind, read in place."""
    if kind is None:
        raise kind_error(x, what)
    if kind == NUMPY:
        return None, x.shape, x.dtype, c_contiguous(x.shape, x.strides, x.dtype.itemsize), None
    return read_device(x, kind, stream_handle)


def validate_matrix(x, what="input", stream_handle=None, kind=None):
    """Read and check a matrix of any kind softmax() takes (its values are checked on the device).

    Returns a :class:`Matrix`. ``stream_handle``: the launch stream, for a DLPack producer to order its
    work before; ``kind``: :func:`~.arrays.array_kind` of ``x`` where the caller has it already."""
    if kind is None:
        kind = array_kind(x)
    pointer, shape, dtype, contiguous, stream = _read(x, kind, what, stream_handle)
    if not (contiguous and dtype is FLOAT32 and len(shape) == 2 and shape[0] and shape[1]):
        shape = check_matrix_layout(shape, dtype, contiguous, what)   # raises, naming the reason
    return Matrix(kind, pointer, shape, stream)


def validate_out(out, source):
    """``out=`` of a call whose input is ``source`` (a :class:`Matrix`): the same kind of memory (host for
    a numpy input, any device kind for a device input) and the same shape. Returns its :class:`Matrix`."""
    kind = array_kind(out)
    if source.kind != NUMPY and kind == NUMPY:
        raise ValueError("out must be a device array for a device input (the result stays on the device)")
    matrix = validate_matrix(out, "out", kind=kind)
    if source.kind == NUMPY and kind != NUMPY:
        raise ValueError("out must be a numpy array for a numpy input (the result comes back to the host)")
    if matrix.shape != source.shape:
        raise ValueError(f"out must have the input's shape {source.shape}, got {matrix.shape}")
    return matrix


def check_separate(x_pointer, y_pointer, shape):
    """Raise unless the float32 matrices of ``shape`` at these two device addresses are apart."""
    nbytes = shape[0] * shape[1] * 4
    if x_pointer < y_pointer + nbytes and y_pointer < x_pointer + nbytes:
        raise ValueError(_OVERLAP)


def check_separate_host(x, out):
    """Raise if two numpy arrays share memory."""
    if np.shares_memory(x, out):
        raise ValueError(_OVERLAP)


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
    """Kind and layout of packed rows (1-D float32, contiguous) and their lengths.

    Returns ``(kind, pointer or None for numpy, int64 row lengths)``; the values are checked on
    the device."""
    kind = array_kind(values)
    pointer, shape, dtype, contiguous, _stream = _read(values, kind, what)
    if dtype != FLOAT32:
        raise ValueError(f"{what} must be float32, got {dtype}")
    if len(shape) != 1:
        raise ValueError(f"{what} must be 1-D packed rows, got {len(shape)}-D shape {tuple(shape)}")
    if not contiguous:
        raise ValueError(f"{what} must be contiguous (packed rows back to back), got a strided array")
    lengths = validate_row_lengths(row_lengths)
    if int(lengths.sum()) != shape[0]:
        raise ValueError(f"row lengths sum to {int(lengths.sum())} but {what} holds {shape[0]} elements")
    return kind, pointer, lengths


def packed_position(flat_index, row_lengths):
    """(row, column) of a flat index into packed rows."""
    starts = np.concatenate(([0], np.cumsum(row_lengths)[:-1]))
    row = int(np.searchsorted(starts, flat_index, side="right") - 1)
    return row, int(flat_index - starts[row])


# ---- the kernel launchers' checks (kernels/auto_launch.py, kernels/fused_row.py) ---------------------------

#: The device status record a checked kernel (kernels/auto_rows.py) fills and :func:`status_error` reads: its
#: words and the value of a clear word.
STATUS_WORDS = 2
STATUS_CLEAR = np.iinfo(np.int64).max
#: status[0]: smallest flat index of a NaN or +inf (or -inf, in a check that allows no mask).
STATUS_NONFINITE = 0
#: status[1]: smallest row index whose entries are all -inf.
STATUS_MASKED_ROW = 1


def is_16_byte_aligned(array):
    """Whether the array's data starts on a 16-byte boundary (a device array, or a host array that only
    builds launches; never in the simulator, which has no vector builds)."""
    if SIMULATOR:
        return False
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    return interface is not None and interface["data"][0] % 16 == 0


def check_launch_matrix(name, array):
    """A 2-D float32 C-contiguous array with at least one row and one column, as a launcher takes it."""
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{name}: expected a 2-D array with at least one row and one column, got shape {shape}")
    if np.dtype(array.dtype) != np.float32:
        raise ValueError(f"{name}: expected float32, got {array.dtype}")
    strides = getattr(array, "strides", None)
    if strides is not None and not c_contiguous(shape, strides, 4):
        raise ValueError(f"{name}: expected a C-contiguous array, got strides {tuple(strides)} for shape {shape}")


def check_strided_rows(name, array):
    """A 2-D array of rows as the ``auto`` launchers take it: at least one row and one column, one element
    between columns, a row stride that is a whole number of elements, a start aligned to the element size."""
    shape = getattr(array, "shape", None)
    if shape is None or len(shape) != 2 or shape[0] < 1 or shape[1] < 1:
        raise ValueError(f"{name}: expected a 2-D array with at least one row and one column, got shape {shape}")
    itemsize = np.dtype(array.dtype).itemsize
    row_stride, column_stride = array.strides
    if column_stride != itemsize and shape[1] > 1:
        raise ValueError(f"{name}: expected one element ({itemsize} bytes) between columns, got a column stride "
                         f"of {column_stride} bytes")
    if row_stride % itemsize:
        raise ValueError(f"{name}: the row stride ({row_stride} bytes) is not a whole number of elements")
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    if interface is not None and interface["data"][0] % itemsize:
        raise ValueError(f"{name}: the data does not start on a {itemsize}-byte boundary (its element size)")


def check_status_buffers(status, alarm):
    """The device record of a checked launch: ``status`` int64[2] and ``alarm`` int32[1]."""
    if status is None or alarm is None:
        raise ValueError("a checked launch needs both status (int64[2]) and alarm (int32[1])")
    if tuple(status.shape) != (STATUS_WORDS,) or np.dtype(status.dtype) != np.int64:
        raise ValueError(f"status: expected int64[{STATUS_WORDS}], got {status.dtype}{list(status.shape)}")
    if tuple(alarm.shape) != (1,) or np.dtype(alarm.dtype) != np.int32:
        raise ValueError(f"alarm: expected int32[1], got {alarm.dtype}{list(alarm.shape)}")


def status_error(status_host, shape, what="input"):
    """The message naming the first offending element (or fully masked row), None when both words are
    clear. ``status_host``: the two status words on the host; ``shape``: (rows, cols) of the checked array."""
    words = [int(w) for w in np.asarray(status_host).reshape(-1)]
    if len(words) != STATUS_WORDS:
        raise ValueError(f"status: expected {STATUS_WORDS} words, got {len(words)}")
    cols = int(shape[1])
    if words[STATUS_NONFINITE] != STATUS_CLEAR:
        row, col = divmod(words[STATUS_NONFINITE], cols)
        return f"{what} has a non-finite value (NaN or infinity) at row {row}, column {col}"
    if words[STATUS_MASKED_ROW] != STATUS_CLEAR:
        return (f"{what} row {words[STATUS_MASKED_ROW]} has no finite entry (every value is -inf): its softmax "
                "is undefined (check=False gives NaN for it, as torch.softmax does)")
    return None
