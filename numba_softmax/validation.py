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
from .element_types import ELEMENT_TYPES, STORAGE_DTYPES
from .layout import Rows, check_shape, normalize_dim, plan_pair, self_overlapping
from .simulator import SIMULATOR

_OVERLAP = "out: overlaps x: softmax never writes its input; pass a separate out"
UINT16 = np.dtype(np.uint16)
#: The element type of each dtype an array reader gives (torch's and DLPack's bfloat16 come as a name).
_ELEMENTS = {np.dtype(np.float32): "float32", np.dtype(np.float16): "float16", np.dtype(np.float64): "float64",
             "bfloat16": "bfloat16"}
_REQUESTED = {}


class Operand(NamedTuple):
    """An array argument read once, at the API boundary, in place: what the rest of the call uses.
    (A named tuple rather than a frozen dataclass: it is built on every call that misses the repeated-call
    shortcut, and a named tuple costs half as much to build.)"""

    kind: str            # one of the kinds of :mod:`.arrays`
    pointer: int | None  # the device address (the simulator: the host buffer's); None for a numpy array
    shape: tuple
    strides: tuple | None  # in bytes; None when C-contiguous
    dtype: object        # a numpy dtype, or a name (torch's "bfloat16")
    stream: int | None   # the stream the array names (its __cuda_array_interface__), or None


def is_device_array(x):
    """True for any device array softmax() takes (Numba, the simulator's, CAI, DLPack, torch CUDA)."""
    return array_kind(x) in DEVICE_KINDS


def read_operand(x, what="x", stream_handle=None, kind=None):
    """Read an array of any kind softmax() takes, in place (its values are checked on the device).
    ``stream_handle``: the launch stream, for a DLPack producer to order its work before; ``kind``:
    :func:`~.arrays.array_kind` of ``x`` where the caller has it already."""
    if kind is None:
        kind = array_kind(x)
    if kind is None:
        raise kind_error(x, what)
    if kind == NUMPY:
        strides = None if c_contiguous(x.shape, x.strides, x.itemsize) else x.strides
        return Operand(kind, None, x.shape, strides, x.dtype, None)
    return Operand(kind, *read_device(x, kind, stream_handle))


def requested_type(dtype):
    """``dtype=`` as an element type name (None stays None): a numpy dtype or type, a name, or a torch dtype."""
    if dtype is None:
        return None
    try:
        found = _REQUESTED.get(dtype)
    except TypeError:  # unhashable: reported below
        found = None
    if found is not None:
        return found
    if type(dtype).__module__ == "torch":
        name = str(dtype).removeprefix("torch.")
    elif dtype == "bfloat16":
        name = "bfloat16"
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    if name not in ELEMENT_TYPES:
        raise ValueError(f"dtype: expected one of {', '.join(ELEMENT_TYPES)} (a numpy dtype, its name or a torch "
                         f"dtype), got {dtype!r}")
    _REQUESTED[dtype] = name
    return name


def element_type(dtype, requested, what="x"):
    """The element type of an array of ``dtype``. A uint16 array holds bfloat16 bits only when the requested
    type is bfloat16 (numpy, Numba and CuPy have no bfloat16 dtype; torch's bfloat16 tensors need no hint)."""
    element = _ELEMENTS.get(dtype)
    if element is not None:
        return element
    if dtype == UINT16:
        if requested == "bfloat16":
            return "bfloat16"
        raise ValueError(f"{what}: uint16 is read as bfloat16 bits only with dtype='bfloat16' (numpy, Numba and "
                         "CuPy have no bfloat16 dtype); any other uint16 array is refused")
    raise ValueError(f"{what}: dtype {dtype} is not one softmax takes (float32, float16, bfloat16, float64)")


def check_call(source, requested, dim, method):
    """``((in_type, out_type), dim in range(ndim))`` of a call on x read as ``source`` with ``dtype=`` read as
    ``requested``: x's shape, element type and ``dim``, and what the method takes."""
    check_shape(source.shape, "x")
    axis = normalize_dim(dim, len(source.shape))
    in_type = element_type(source.dtype, requested)
    types = (in_type, requested or in_type)
    check_method_layout(method, source, types, axis, "x")
    return types, axis


def check_out(dest, source, out_type):
    """``out=`` read as ``dest`` against the input ``source``: the same kind of memory (host for a numpy
    input, any device kind for a device input), the input's shape, the result's element type."""
    if source.kind != NUMPY and dest.kind == NUMPY:
        raise ValueError("out: must be a device array for a device input (the result stays on the device)")
    if source.kind == NUMPY and dest.kind != NUMPY:
        raise ValueError("out: must be a numpy array for a numpy input (the result comes back to the host)")
    if tuple(dest.shape) != tuple(source.shape):
        raise ValueError(f"out: must have x's shape {tuple(source.shape)}, got {tuple(dest.shape)}")
    if element_type(dest.dtype, out_type, "out") != out_type:
        raise ValueError(f"out: dtype {dest.dtype} is not the result's {out_type} (the result has dtype=, "
                         "else x's type)")


def check_method_layout(method, operand, types, dim, what="x"):
    """The protocol's kernels (``fused``, ``stages``) take float32 C-contiguous 2-D rows only (``dim``: in
    ``range(ndim)``)."""
    if method == "auto":
        return
    if types != ("float32", "float32"):
        raise ValueError(f"{what}: method={method!r} takes float32 in and out, got {types[0]} -> {types[1]}: use "
                         "method='auto'")
    if len(operand.shape) != 2 or operand.strides is not None or dim != 1:
        raise ValueError(f"{what}: method={method!r} takes C-contiguous 2-D arrays along their last dimension, "
                         f"got shape {tuple(operand.shape)}, strides {operand.strides}, dim {dim}: use "
                         "method='auto'")


def plan_operands(source, dest, types, dim):
    """The layout plans (:mod:`.layout`) of x and out, and every check that needs them: elements aligned,
    an out whose elements are apart, x and out apart. Raises ``ValueError`` naming the argument."""
    x_size, out_size = (STORAGE_DTYPES[t].itemsize for t in types)
    for what, operand, size in (("x", source, x_size), ("out", dest, out_size)):
        if operand.pointer is not None and operand.pointer % size:
            raise ValueError(f"{what}: the data does not start on a {size}-byte boundary (its element size)")
    x_plan, out_plan = plan_pair(source.shape, dim, (source.strides, x_size), (dest.strides, out_size))
    if self_overlapping(out_plan):
        raise ValueError(f"out: its elements overlap one another (strides {dest.strides} bytes): each would be "
                         "written more than once")
    if source.pointer is not None:
        check_separate((source.pointer, source.shape, source.strides, x_size),
                       (dest.pointer, dest.shape, dest.strides, out_size))
    return x_plan, out_plan


def _memory(pointer, shape, strides, itemsize):
    """A numpy array describing (never reading) the bytes of a device array: for ``np.shares_memory``."""
    interface = {"shape": tuple(shape), "strides": None if strides is None else tuple(strides),
                 "typestr": f"|V{itemsize}", "data": (pointer, True), "version": 3}
    return np.asarray(type("Described", (), {"__array_interface__": interface})())


def check_separate(x, out):
    """Raise unless the arrays ``(pointer, shape, strides in bytes or None, itemsize)`` share no byte
    (strided arrays that interleave are apart; numpy solves it exactly)."""
    if np.shares_memory(_memory(*x), _memory(*out), max_work=10**6):
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
    kind, pointer, shape, strides, dtype, _stream = read_operand(values, what)
    contiguous = strides is None
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


def quads_packed(array):
    """Whether a 2-D array's rows lie packed for quads read across rows (:mod:`.kernels.auto_narrow`): C-contiguous
    (a row stride of ``cols`` elements, or one row) and the data aligned to a quad of its elements (4 elements, at
    most 16 bytes)."""
    rows, cols = array.shape
    itemsize = np.dtype(array.dtype).itemsize
    row_stride, column_stride = array.strides
    if (rows > 1 and row_stride != cols * itemsize) or (cols > 1 and column_stride != itemsize):
        return False
    interface = getattr(array, "__cuda_array_interface__", None) or getattr(array, "__array_interface__", None)
    return interface is not None and interface["data"][0] % min(16, 4 * itemsize) == 0


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


def _index_text(index):
    return "(" + ", ".join(str(i) for i in index) + ("," if len(index) == 1 else "") + ")"


def status_error_at(status_host, shape, dim, plan, what="x"):
    """:func:`status_error` for an array of any ``shape`` whose softmax along ``dim`` ran as ``plan`` (a
    :class:`~.layout.Rows` or :class:`~.layout.Columns`): a 2-D array along its last dimension is named by row
    and column, any other by its N-D index (the softmax axis written ``:`` for a row with no finite entry)."""
    dim = normalize_dim(dim, len(shape))
    if len(shape) == 2 and dim == 1:
        return status_error(status_host, shape, what)
    words = [int(w) for w in np.asarray(status_host).reshape(-1)]
    others = [n for i, n in enumerate(shape) if i != dim]

    def index_of(line, position):
        """The N-D index of element ``position`` along the softmax axis of line ``line``."""
        if isinstance(plan, Rows):   # lines: the other dimensions in C order
            outer = [int(i) for i in np.unravel_index(line, others)] if others else []
            return (*outer[:dim], position, *outer[dim:])
        before, after = divmod(line, plan.inner)   # lines: (outer, inner) pairs
        head = [int(i) for i in np.unravel_index(before, shape[:dim])] if dim else []
        tail = [int(i) for i in np.unravel_index(after, shape[dim + 1:])] if dim + 1 < len(shape) else []
        return (*head, position, *tail)

    if words[STATUS_NONFINITE] != STATUS_CLEAR:
        # line * length + position: the row kernels' row * cols + col; the column kernel's (o * inner + i) *
        # length + l (its first offending element in that order)
        index = index_of(*divmod(words[STATUS_NONFINITE], plan.cols if isinstance(plan, Rows) else plan.length))
        return f"{what} has a non-finite value (NaN or infinity) at index {_index_text(index)}"
    if words[STATUS_MASKED_ROW] != STATUS_CLEAR:
        index = list(index_of(words[STATUS_MASKED_ROW], 0))
        index[dim] = ":"
        return (f"{what} has no finite entry along dim {dim} at index {_index_text(index)} (every value is -inf): "
                "its softmax is undefined (check=False gives NaN there, as torch.softmax does)")
    return None
