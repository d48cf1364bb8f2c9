"""What ``softmax()`` accepts: array kinds, read in place, and streams, without copying to the host.

Array kinds (docs/api.md has the table of what each gives back):

* ``numpy.ndarray``: host memory; copied to the device and the result copied back (a host
  array lives on the host, so that copy is the input's own cost);
* a Numba device array (or the simulator's stand-in for one);
* a PyTorch CUDA tensor: read through ``data_ptr()``, ``shape``, ``dtype`` and
  ``is_contiguous()`` (cheaper than building its ``__cuda_array_interface__`` dict on every call);
* a CuPy array, or any other object with ``__cuda_array_interface__``;
* any other object with ``__dlpack__`` on a CUDA device (its capsule is read with ctypes).

Every device kind is used in place: :func:`read_device` gives its pointer, shape, strides (in bytes;
None when C-contiguous) and dtype, and :func:`device_view` wraps a pointer, shape, strides and dtype as
a Numba device array that does not own the memory (what the launch layer packs), so a cached launch never
keeps the caller's array alive.

Streams (:func:`launch_stream_for`): a Numba stream, the launch layer's ``Stream``, a cuda-python
``CUstream``, any object with ``__cuda_stream__`` (cuda.core), a torch stream (``cuda_stream``), a
CuPy stream (``ptr``), or a raw handle (``int``). With no stream the call runs where the input's
own library would run it: torch's current stream for a tensor, the stream an array's
``__cuda_array_interface__`` names (CuPy's current stream), else the CUDA legacy default stream,
the one Numba, CuPy and PyTorch use when nobody chose a stream.
"""

import ctypes

import numpy as np
from numba import cuda

from .backend import SIMULATOR, SimulatorStream, launch_stream
from .contiguity import c_contiguous
from .element_types import STORAGE_DTYPES
from .launch.driver import Stream

FLOAT32 = np.dtype(np.float32)

NUMPY, NUMBA, TORCH, CUPY, CUDA_ARRAY_INTERFACE, DLPACK = (
    "numpy", "numba", "torch", "cupy", "cuda_array_interface", "dlpack")
#: The kinds that live on a device.
DEVICE_KINDS = (NUMBA, TORCH, CUPY, CUDA_ARRAY_INTERFACE, DLPACK)

_kind_of_type = {}


def array_kind(x):
    """One of the kinds above, or None for anything softmax() does not take (cached per type)."""
    cls = type(x)
    kind = _kind_of_type.get(cls)
    if kind is None:
        kind = _classify(x, cls)
        if kind is not None:
            _kind_of_type[cls] = kind
    return kind


def _classify(x, cls):
    module = cls.__module__.split(".")[0]
    if getattr(cls, "__cuda_ndarray__", False):       # Numba's device arrays, real or simulated
        return NUMBA
    if issubclass(cls, np.ndarray):
        return NUMPY
    if module == "torch" and hasattr(cls, "data_ptr"):
        return TORCH
    if hasattr(x, "__cuda_array_interface__"):       # a property, or set on each instance
        return CUPY if module == "cupy" else CUDA_ARRAY_INTERFACE
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        return DLPACK
    return None


def kind_error(x, what):
    return ValueError(f"{what}: must be a numpy array, a Numba device array, a CUDA tensor or array "
                      f"(__cuda_array_interface__ or DLPack), got {type(x).__module__}.{type(x).__name__}")


# ---- reading a device array in place ---------------------------------------------------------------

_typestr_dtype = {}


def _dtype_of_typestr(typestr):
    dtype = _typestr_dtype.get(typestr)
    if dtype is None:
        dtype = _typestr_dtype[typestr] = np.dtype(typestr)
    return dtype


def _strides_or_none(shape, strides, itemsize):
    """None for C-contiguous strides (the common case, compared without building anything), else a tuple."""
    return None if c_contiguous(shape, strides, itemsize) else tuple(strides)


def _read_numba(x):
    dtype, shape = x.dtype, x.shape
    strides = _strides_or_none(shape, x.strides, dtype.itemsize)
    if SIMULATOR:   # no device pointers there: the host buffer's address stands in for one
        return x.__array_interface__["data"][0], shape, strides, dtype, None
    data, stream = x.gpu_data, x.stream
    return (int(data.device_pointer) if data is not None else 0, shape, strides, dtype,
            int(stream.handle) if stream else None)


def _read_interface(x):
    desc = x.__cuda_array_interface__
    if desc.get("mask") is not None:
        raise ValueError("masked arrays (__cuda_array_interface__ 'mask') are not supported")
    shape = tuple(desc["shape"])
    dtype = _dtype_of_typestr(desc["typestr"])
    strides = desc.get("strides")
    if strides is not None:
        strides = _strides_or_none(shape, strides, dtype.itemsize)
    return desc["data"][0], shape, strides, dtype, desc.get("stream")


_torch_dtypes = {}


def _read_torch(x):
    if not x.is_cuda:
        raise ValueError(f"a torch tensor on {x.device} is not on a CUDA device: pass a CUDA tensor, "
                         "or x.numpy() for a host array")
    dtype = _torch_dtypes.get(x.dtype)
    if dtype is None:
        name = str(x.dtype).replace("torch.", "")
        dtype = _torch_dtypes[x.dtype] = np.dtype(name) if hasattr(np, name) else name
    if x.is_contiguous():
        return x.data_ptr(), tuple(x.shape), None, dtype, None
    itemsize = x.element_size()
    return x.data_ptr(), tuple(x.shape), tuple(s * itemsize for s in x.stride()), dtype, None


_DLPACK_CUDA, _DLPACK_CUDA_MANAGED, _DLPACK_FLOAT, _DLPACK_BFLOAT = 2, 13, 2, 4


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor)))]

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype, _capsule_rename.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]


def _read_dlpack(x, stream_handle=None):
    """Read a DLPack (unversioned ``dltensor``) capsule; ``stream_handle`` is the stream the
    launch will use, so the producer orders its pending work before it (DLPack's contract)."""
    device_type, _device_id = x.__dlpack_device__()
    if device_type not in (_DLPACK_CUDA, _DLPACK_CUDA_MANAGED):
        raise ValueError(f"a DLPack array on device type {device_type} is not on a CUDA device")
    # DLPack: 1 is the legacy default stream (0 is not allowed for CUDA).
    capsule = x.__dlpack__(stream=1 if not stream_handle else stream_handle)
    managed = ctypes.cast(_capsule_pointer(capsule, b"dltensor"), ctypes.POINTER(_DLManagedTensor))
    tensor = managed.contents.dl_tensor
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    code, bits, lanes = tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes
    if code == _DLPACK_FLOAT and lanes == 1 and bits in (16, 32, 64):
        dtype = np.dtype(f"f{bits // 8}")
    elif code == _DLPACK_BFLOAT and lanes == 1 and bits == 16:
        dtype = "bfloat16"
    else:
        dtype = f"DLPack (code {code}, {bits} bits, {lanes} lanes)"
    itemsize = bits // 8 * lanes
    strides = None
    if tensor.strides:
        strides = _strides_or_none(shape, [tensor.strides[i] * itemsize for i in range(tensor.ndim)], itemsize)
    pointer = (tensor.data or 0) + tensor.byte_offset
    # The data belongs to ``x`` (the caller holds it); the capsule is done with.
    _capsule_rename(capsule, b"used_dltensor")
    if managed.contents.deleter:
        managed.contents.deleter(managed)
    return pointer, shape, strides, dtype, None


_READERS = {NUMBA: _read_numba, TORCH: _read_torch, CUPY: _read_interface,
            CUDA_ARRAY_INTERFACE: _read_interface}


def read_device(x, kind, stream_handle=None):
    """``(pointer, shape, strides in bytes or None when C-contiguous, dtype, stream the array names or None)``
    of a device array, read in place (nothing copied). dtype: a numpy dtype, or the name of a torch or DLPack
    type numpy lacks (``"bfloat16"``)."""
    if kind == DLPACK:
        return _read_dlpack(x, stream_handle)
    return _READERS[kind](x)


def device_view(pointer, shape, strides, dtype):
    """A Numba device array of ``dtype`` over ``pointer`` with ``shape`` and byte ``strides`` (None:
    C-contiguous) that does not own the memory (the caller's array does): what a cached launch packs."""
    desc = {"shape": tuple(shape), "strides": None if strides is None else tuple(strides),
            "data": (pointer, False), "typestr": np.dtype(dtype).str, "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=None, sync=False)


def simulated_view(array, shape, strides):
    """In the simulator: a view of a (simulated) device array's own buffer with ``shape`` and byte ``strides``
    from its first element (what :func:`device_view` is on a GPU)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    base = array._ary if isinstance(array, FakeCUDAArray) else np.asarray(array)
    return FakeCUDAArray(np.lib.stride_tricks.as_strided(base, shape=tuple(shape), strides=tuple(strides)))


def new_like(x, kind, shape, element, numba_stream=0):
    """A new C-contiguous result of element type ``element`` of the input's own kind where that is cheap: a
    torch tensor on the same device, a CuPy array, else a Numba device array (bfloat16: uint16 bits, except
    torch's own bfloat16)."""
    if kind == TORCH:
        import torch
        return torch.empty(shape, dtype=getattr(torch, element), device=x.device)
    dtype = STORAGE_DTYPES[element]
    if kind == CUPY:
        import cupy
        with cupy.cuda.Device(x.device.id):
            return cupy.empty(shape, dtype=dtype)
    return cuda.device_array(shape, dtype=dtype, stream=numba_stream)


# ---- streams ---------------------------------------------------------------------------------------

def stream_handle(stream):
    """The raw ``CUstream`` handle (an int) of any stream kind softmax() takes; ValueError otherwise."""
    if isinstance(stream, bool):
        raise ValueError(f"stream must be a CUDA stream or a stream handle, got {stream!r}")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "ptr") and isinstance(stream.ptr, int):          # launch layer, CuPy
        return stream.ptr
    if hasattr(stream, "__cuda_stream__"):                               # cuda.core, Numba
        return int(stream.__cuda_stream__()[1])
    if hasattr(stream, "cuda_stream"):                                   # torch
        return int(stream.cuda_stream)
    if hasattr(stream, "handle"):                                        # older Numba
        handle = stream.handle
        return int(handle.value or 0) if hasattr(handle, "value") else int(handle)
    if type(stream).__name__ == "CUstream":                              # cuda-python
        return int(stream)
    raise ValueError(f"stream must be a Numba, cuda-python, cuda.core, torch or CuPy stream or a stream "
                     f"handle (int), got {type(stream).__module__}.{type(stream).__name__}")


_wrapped_streams = {}
_SIMULATOR_STREAM = SimulatorStream()


def launch_stream_for(handle):
    """The launch layer's stream for a raw handle, one object per handle (a prepared launch binds
    its arguments to a stream object once, so the same object must come back every call)."""
    if SIMULATOR:
        return _SIMULATOR_STREAM
    stream = _wrapped_streams.get(handle)
    if stream is None:
        stream = _wrapped_streams[handle] = launch_stream() if handle == 0 else Stream.wrap(
            cuda.external_stream(handle))
    return stream


def resolve_stream(stream, x, kind, array_stream):
    """The launch stream of one call: ``stream`` when given; else the input's own (torch's
    current stream, the stream its ``__cuda_array_interface__`` names), else the legacy default."""
    if SIMULATOR:
        # Every launch runs synchronously there; a stream is still checked for its kind.
        if stream is not None and not hasattr(stream, "synchronize"):
            stream_handle(stream)
        return _SIMULATOR_STREAM
    if stream is not None:
        if isinstance(stream, Stream):
            return stream
        return launch_stream_for(stream_handle(stream))
    if kind == TORCH:
        return launch_stream_for(torch_current_stream(x.get_device()))
    return launch_stream_for(array_stream or 0)


_raw_torch_stream = None


def torch_current_stream(device_index):
    """The handle of torch's current stream on a device: torch's own raw read (what Triton's launcher
    calls; ~0.1 us) where this torch has it, else through a ``torch.cuda.Stream`` object (a few us)."""
    global _raw_torch_stream
    if _raw_torch_stream is None:
        import torch
        _raw_torch_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
            lambda index: torch.cuda.current_stream(index).cuda_stream)
    return _raw_torch_stream(device_index)

