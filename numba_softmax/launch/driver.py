"""The GPU launch layer: Numba compiles, cuda-python submits.

Why not ``kernel[grid, block, stream](args)``? Numba's dispatcher re-types and
re-packs every argument on every call: about 31 us of host time per launch on the
H200 against about 4 us for a raw ``cuLaunchKernel`` (docs/machine.md). A benchmark of
kernels whose runtime is a few microseconds would measure Python. So:

1. :func:`compiled` (:mod:`.cached_kernel`) gives a ``@cuda.jit`` dispatcher's kernel once for the
   exact argument types: from the on-disk kernel cache, or compiled by Numba
   (:class:`.compiled_kernel.CompiledKernel`) and stored there; its ``CUfunction`` in Numba's context.
   What it compiles is the kernel's slim entry (:mod:`.entry`): the kernel's own code
   behind a parameter block of a pointer and a shape per array argument instead of
   Numba's whole array struct (a smaller block is a faster launch on short kernels).
2. :class:`PreparedLaunch` packs the arguments ONCE for fixed device pointers into
   a ``void**`` block laid out the way that entry expects (an array argument is its
   data pointer and shape[nd]), and keeps every ctypes object alive.
3. ``enqueue(stream)`` is then a single ``cuLaunchKernel`` (or
   ``cuLaunchCooperativeKernel`` for grid-synchronizing kernels) call.

Every timed call of every variant, cuDNN included, goes through :class:`Invocation`
on one non-blocking :class:`Stream`.

Works with cuda-bindings 12.x (this project's pin) and 13.x (the H200 image).
"""

import ctypes

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda, types

from .cached_kernel import compiled
from .context import check, ensure_context
from .entry import array_members

_SUCCESS = cu.CUresult.CUDA_SUCCESS


class Stream:
    """One non-blocking stream shared by every variant (never the legacy stream)."""

    def __init__(self):
        ensure_context()
        self.handle = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        self.ptr = int(self.handle)
        #: The same stream as Numba sees it, for copies and dispatcher launches.
        self.numba = cuda.external_stream(self.ptr)
        self._owned = True

    @classmethod
    def wrap(cls, numba_stream):
        """Use an existing Numba stream (the caller keeps ownership)."""
        self = cls.__new__(cls)
        self.ptr = int(numba_stream.handle.value if hasattr(numba_stream.handle, "value")
                       else numba_stream.handle)
        self.handle = cu.CUstream(self.ptr)
        self.numba = numba_stream
        self._owned = False
        return self

    def synchronize(self):
        check(cu.cuStreamSynchronize(self.handle))

    def close(self):
        if self.handle is not None and self._owned:
            check(cu.cuStreamDestroy(self.handle))
            self.handle = None


class Event:
    def __init__(self):
        self.handle = check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT))

    def record(self, stream):
        check(cu.cuEventRecord(self.handle, stream.handle))

    def synchronize(self):
        check(cu.cuEventSynchronize(self.handle))

    def elapsed_us_since(self, start):
        return 1e3 * check(cu.cuEventElapsedTime(start.handle, self.handle))


def flatten_argument(ty, value, out):
    """Append the ctypes values the kernel's slim entry (:mod:`.entry`) takes for one argument."""
    if isinstance(ty, types.Array):
        if not cuda.is_cuda_array(value):
            raise TypeError(f"kernel array argument must live on the device, got {type(value)}")
        data, extents = array_members(value, strided=ty.layout == "A")
        out.append(ctypes.c_void_p(data))
        out.extend(ctypes.c_int64(extent) for extent in extents)
    else:
        flatten_scalar(ty, value, out)


def numba_array_members(value, out):
    """Append Numba's own kernel ABI for a device array (meminfo, parent, nitems, itemsize, data,
    shape[nd], strides[nd]): what ``kernel[grid, block](...)`` passes; the nvcc twins' entries in
    Numba's layout take it (a diagnostic of what that layout costs)."""
    if not cuda.is_cuda_array(value):
        raise TypeError(f"kernel array argument must live on the device, got {type(value)}")
    iface = value.__cuda_array_interface__
    itemsize = np.dtype(iface["typestr"]).itemsize
    shape = tuple(iface["shape"])
    strides = iface.get("strides") or tuple(
        int(np.prod(shape[i + 1:], dtype=np.int64)) * itemsize for i in range(len(shape)))
    out.append(ctypes.c_void_p(0))             # meminfo
    out.append(ctypes.c_void_p(0))             # parent
    out.append(ctypes.c_int64(int(np.prod(shape, dtype=np.int64))))  # nitems
    out.append(ctypes.c_int64(itemsize))
    out.append(ctypes.c_void_p(iface["data"][0]))
    out.extend(ctypes.c_int64(s) for s in shape)
    out.extend(ctypes.c_int64(s) for s in strides)


def flatten_scalar(ty, value, out):
    """Append one scalar kernel argument as its ctypes value."""
    if isinstance(ty, types.Integer):
        out.append(getattr(ctypes, f"c_{ty}")(int(value)))
    elif ty == types.float32:
        out.append(ctypes.c_float(value))
    elif ty == types.float64:
        out.append(ctypes.c_double(value))
    elif ty == types.boolean:
        out.append(ctypes.c_uint8(bool(value)))
    else:
        raise TypeError(f"unsupported kernel argument type {ty}")


class ExtendedLaunchConfig:
    """``cuLaunchKernelEx``'s configuration of one launch: its geometry and its attributes (cooperative,
    a cluster of ``cluster`` CTAs along x, programmatic stream serialization). Kept alive as long as a
    launch may use it: the configuration points at the attribute array."""

    def __init__(self, grid, block, shared_bytes, stream_handle, cooperative=False, cluster=1, programmatic=False):
        attributes = []
        if cooperative:
            attribute = cu.CUlaunchAttribute()
            attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attribute.value.cooperative = 1
            attributes.append(attribute)
        if cluster > 1:
            attribute = cu.CUlaunchAttribute()
            attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster, 1, 1
            attributes.append(attribute)
        if programmatic:
            attribute = cu.CUlaunchAttribute()
            attribute.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attribute.value.programmaticStreamSerializationAllowed = 1
            attributes.append(attribute)
        config = cu.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid
        config.blockDimX, config.blockDimY, config.blockDimZ = block
        config.sharedMemBytes = shared_bytes
        config.hStream = stream_handle
        config.attrs = attributes
        config.numAttrs = len(attributes)
        self.attributes = attributes
        self.config = config


#: Dynamic shared memory a launch may use without opting in (48 KiB on every CUDA device).
DEFAULT_DYNAMIC_SHARED_LIMIT = 48 * 1024


class PreparedLaunch:
    """A :class:`~numba_softmax.launch_spec.KernelLaunch` packed once for fixed pointers."""

    def __init__(self, launch):
        self.launch = launch
        self.kernel = compiled(launch.kernel, launch.args)
        self._values = []
        for ty, value in zip(self.kernel.argtypes, launch.args, strict=True):
            flatten_argument(ty, value, self._values)
        self._pointers = (ctypes.c_void_p * len(self._values))(
            *[ctypes.addressof(v) for v in self._values])
        self._params = ctypes.addressof(self._pointers)
        self.grid = tuple(launch.grid) + (1,) * (3 - len(launch.grid))
        self.block = tuple(launch.block) + (1,) * (3 - len(launch.block))
        self.cooperative = bool(self.kernel.cooperative or getattr(launch, "cooperative", False))
        self.cluster = int(getattr(launch, "cluster", 1))
        if self.cluster > 1 and (self.cooperative or self.grid[0] % self.cluster):
            raise ValueError(f"{launch.name}: a cluster launch of {self.cluster} CTAs needs a grid that is a "
                             f"multiple of it (got {self.grid[0]}) and no cooperative launch")
        self.programmatic = bool(getattr(launch, "programmatic", False))
        self._extended = self.cluster > 1 or self.programmatic
        self._submit = (cu.cuLaunchKernelEx if self._extended
                        else cu.cuLaunchCooperativeKernel if self.cooperative else cu.cuLaunchKernel)
        threads = self.block[0] * self.block[1] * self.block[2]
        if launch.shared_bytes > DEFAULT_DYNAMIC_SHARED_LIMIT:
            # More than 48 KiB of dynamic shared memory is an opt-in per function (up to the device's
            # per-block limit, 227 KiB on Hopper): without it the launch fails.
            check(cu.cuFuncSetAttribute(
                self.kernel.function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                launch.shared_bytes))
        if self.cooperative:
            limit = self.kernel.active_blocks_per_sm(threads, launch.shared_bytes) * device_sm_count()
            blocks = self.grid[0] * self.grid[1] * self.grid[2]
            if blocks > limit:
                raise ValueError(f"{launch.name}: cooperative grid of {blocks} blocks exceeds the "
                                 f"co-residency limit {limit}")
        self._stream = None
        self._arguments = None

    def _bind(self, stream):
        # The whole argument tuple of the driver call, built once per stream: the hot path
        # below is one call with prebuilt arguments (host enqueue per launch is a goal of ``bench perf``).
        self._stream = stream
        if self._extended:
            self._config = ExtendedLaunchConfig(self.grid, self.block, self.launch.shared_bytes, stream.handle,
                                                self.cooperative, self.cluster, self.programmatic)
            self._arguments = (self._config.config, self.kernel.function, self._params, 0)
            return
        extra = () if self.cooperative else (0,)
        self._arguments = (self.kernel.function, *self.grid, *self.block, self.launch.shared_bytes,
                           stream.handle, self._params, *extra)

    def enqueue(self, stream):
        if stream is not self._stream:
            self._bind(stream)
        err, = self._submit(*self._arguments)
        if err is not _SUCCESS:
            check((err,))


class Invocation:
    """One variant's complete invocation: prepared launches (and host-API steps).

    ``steps`` are callables taking the stream, called in order. A prepared kernel
    launch is one such step; a library call such as cuDNN's forward is another.
    """

    def __init__(self, name, steps, launches=()):
        self.name = name
        self.steps = list(steps)
        self.launches = list(launches)
        if len(self.steps) == 1:
            # One step (the common case: one kernel, or one library call): enqueue IS that
            # step, without the loop and the extra Python frame.
            self.enqueue = self.steps[0]

    @classmethod
    def from_launches(cls, name, launches):
        prepared = [PreparedLaunch(launch) for launch in launches]
        return cls(name, [p.enqueue for p in prepared], prepared)

    def enqueue(self, stream):
        for step in self.steps:
            step(stream)

    def kernel_resources(self):
        return [dict(p.kernel.resources(), launch=p.launch.name, cooperative=p.cooperative,
                     grid=list(p.grid), block=list(p.block)) for p in self.launches]


def device_sm_count():
    return ensure_context().device.MULTIPROCESSOR_COUNT


def device_record():
    """Facts about the current device, read from the driver (never assumed)."""
    ctx = ensure_context()
    dev = ctx.device
    attr = cu.CUdevice_attribute
    handle = check(cu.cuDeviceGet(dev.id))

    def get(name):
        return check(cu.cuDeviceGetAttribute(getattr(attr, name), handle))

    free, total = check(cu.cuMemGetInfo())
    return {
        "name": dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name),
        "compute_capability": list(dev.compute_capability),
        "sm_count": get("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        "l2_cache_bytes": get("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        "max_shared_per_block_optin": get("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        "clock_rate_khz": get("CU_DEVICE_ATTRIBUTE_CLOCK_RATE"),
        "memory_clock_rate_khz": get("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE"),
        "memory_bus_width_bits": get("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH"),
        "cooperative_launch": get("CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH"),
        "total_memory_bytes": int(total),
        "free_memory_bytes_at_start": int(free),
        "driver_version": check(cu.cuDriverGetVersion()),
    }
