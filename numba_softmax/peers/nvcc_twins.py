"""Launch the nvcc reference kernels (``reference_cu/``) through cuda-python, beside the Numba ones.

The CUDA C++ kernels in ``reference_cu/`` are the same algorithms as the Numba kernels (same
reduction order, launch geometry and argument meaning), compiled by nvcc into cubins
(``python -m bench build-reference``). This module only loads and submits them; it never
compiles anything and contains no kernels:

* :data:`REFERENCE_KERNELS` maps every Numba kernel name (``numba_softmax.kernels.registry``)
  to its C++ module and ``extern "C"`` entry, with the entry's argument list: the ONE table
  of that mapping (the PTX comparison uses it too);
* :class:`ReferenceLibrary` loads the cubins with ``cuModuleLoadData`` in Numba's primary
  context and takes each ``CUfunction`` with ``cuModuleGetFunction``;
* :class:`ReferenceLaunch` packs the arguments once (device pointers and integers, ctypes)
  and submits with ``cuLaunchKernel`` or ``cuLaunchCooperativeKernel``; it has the
  ``enqueue(stream)`` shape of :class:`~numba_softmax.launch.driver.PreparedLaunch`, so an
  :class:`~numba_softmax.launch.driver.Invocation` (and a captured graph) can hold it;
* ``reference_*_launches`` build the launch lists of every path from the same device
  buffers the Numba paths use (Experiment A matrices; :class:`numba_softmax.tiled.TiledBuffers`).

Argument conventions of the C++ entries (see each ``reference_cu/*.cu`` header comment):
arrays are raw device pointers to C-contiguous data; Experiment A sizes (``rows``, ``cols``)
are int64 like Numba's shapes; Experiment B counts (``rows``, ``n_tiles``, ``fifo_capacity``)
are int32 like the layout's task ids. Where the Numba kernel reads a size from an array's
shape, the C++ entry takes it as a trailing argument.
"""

import ctypes
import os
from dataclasses import dataclass

import numpy as np
from cuda.bindings import driver as cu

from ..contiguity import c_contiguous
from ..kernels import fused_row
from ..kernels.fused_row import MAX_FUSED_COLUMNS
from ..kernels.persistent import MODE_DAG, MODE_PHASED
from ..kernels.persistent.launch import INIT_MAX_BLOCKS
from ..kernels.tiles import TILE_THREADS, separate_launches
from ..launch.context import check, ensure_context
from ..launch.driver import ExtendedLaunchConfig, Invocation, device_sm_count, numba_array_members
from ..numerics import BLOCK_THREADS
from ..queue import DEFAULT_MAX_POLLS, TILES_PER_CLAIM

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BUILD_DIR = os.path.join(REPO_ROOT, "reference_cu", "build")


@dataclass(frozen=True)
class ReferenceKernel:
    module: str          # reference_cu/<module>.cu -> build/<module>.cubin / .ptx
    entry: str           # extern "C" entry point
    args: tuple          # ((name, kind), ...); kind: "f32*", "i32*", "i64*", "i32", "i64"
    cooperative: bool = False
    geometry: str = ""

    @property
    def source(self):
        return f"reference_cu/{self.module}.cu"


_A2 = (("rows", "i64"), ("cols", "i64"))

#: Numba kernel name -> its nvcc reference. The one mapping table.
REFERENCE_KERNELS = {
    "row_max_stage": ReferenceKernel("row_stages", "row_max_stage",
                                     (("x", "f32*"), ("row_max", "f32*")) + _A2,
                                     geometry="grid (rows,), block (256,)"),
    "exp_stage": ReferenceKernel("row_stages", "exp_stage",
                                 (("x", "f32*"), ("row_max", "f32*"), ("exps", "f32*")) + _A2,
                                 geometry="grid (ceil(rows*cols/256),), block (256,)"),
    "row_sum_stage": ReferenceKernel("row_stages", "row_sum_stage",
                                     (("exps", "f32*"), ("row_sum", "f32*")) + _A2,
                                     geometry="grid (rows,), block (256,)"),
    "divide_stage": ReferenceKernel("row_stages", "divide_stage",
                                    (("exps", "f32*"), ("row_sum", "f32*"), ("y", "f32*")) + _A2,
                                    geometry="grid (ceil(rows*cols/256),), block (256,)"),
    "fused_row_softmax": ReferenceKernel("fused_row", "fused_row_softmax",
                                         (("x", "f32*"), ("y", "f32*")) + _A2,
                                         geometry="grid (rows,), block (256,)"),
    # Width/vector builds of the fused kernel (present when the ownership rule is the quad
    # rule, QUAD = 4: reference_cu/fused_row.cu compiles them only then).
    **{f"fused_row_softmax_q{q}{v}": ReferenceKernel("fused_row", f"fused_row_softmax_q{q}{v}",
                                                     (("x", "f32*"), ("y", "f32*")) + _A2,
                                                     geometry="grid (rows,), block (256,)"
                                                     + (", 16-byte aligned, cols % 4 == 0" if v else ""))
       for q in (1, 2, 4) for v in ("", "_v4")},
    "fused_row_softmax_w1_v4": ReferenceKernel("fused_row", "fused_row_softmax_w1_v4",
                                               (("x", "f32*"), ("y", "f32*")) + _A2,
                                               geometry="grid (rows,), block (256,), cols <= 128, "
                                                        "16-byte aligned, cols % 4 == 0"),
    "tile_summary_kernel": ReferenceKernel(
        "tiles", "tile_summary_kernel",
        (("values", "f32*"), ("tile_start", "i64*"), ("tile_len", "i32*"), ("tile_max", "f32*"),
         ("tile_sum", "f32*"), ("n_tiles", "i32"), ("n_values", "i64")),
        geometry="grid (n_tiles,), block (128,)"),
    "row_combine_kernel": ReferenceKernel(
        "tiles", "row_combine_kernel",
        (("row_first_tile", "i32*"), ("row_tile_count", "i32*"), ("tile_max", "f32*"),
         ("tile_sum", "f32*"), ("row_max", "f32*"), ("row_sum", "f32*"), ("rows", "i32")),
        geometry="grid (ceil(rows/4),), block (128,): one row per warp"),
    "tile_normalize_kernel": ReferenceKernel(
        "tiles", "tile_normalize_kernel",
        (("values", "f32*"), ("tile_row", "i32*"), ("tile_start", "i64*"), ("tile_len", "i32*"),
         ("row_max", "f32*"), ("row_sum", "f32*"), ("out", "f32*"), ("n_tiles", "i32"), ("n_values", "i64")),
        geometry="grid (n_tiles,), block (128,)"),
    "persistent_tiles": ReferenceKernel(
        "persistent", "persistent_tiles",
        (("mode", "i32"), ("values", "f32*"), ("out", "f32*"), ("tile_row", "i32*"),
         ("tile_start", "i64*"), ("tile_len", "i32*"), ("row_first_tile", "i32*"),
         ("row_tile_count", "i32*"), ("tile_max", "f32*"), ("tile_sum", "f32*"), ("row_max", "f32*"),
         ("row_sum", "f32*"), ("counters", "i32*"), ("row_arrivals", "i32*"), ("fifo_slots", "i32*"),
         ("paired_entries", "i32"), ("max_polls", "i32"), ("n_tiles", "i32"), ("rows", "i32"),
         ("fifo_capacity", "i32"), ("n_values", "i64")),
        cooperative=True, geometry="grid (workers,), block (128,), cooperative"),
    "init_queue_kernel": ReferenceKernel(
        "persistent", "init_queue_kernel",
        (("counters", "i32*"), ("row_arrivals", "i32*"), ("fifo_slots", "i32*"),
         ("rows", "i32"), ("fifo_capacity", "i32")),
        geometry="grid (min(ceil(fifo_capacity/256), 1024),), block (256,)"),
}

#: Numba kernel name -> its twin's code in Numba's argument layout (each array as the members of
#: Numba's data model, at Numba's parameter offsets; ``reference_cu/numba_abi.cuh`` says why): a
#: diagnostic of ``python -m bench probe twins``, never an experiment variant. The arguments are the
#: Numba launch's own arrays.
NUMBA_ABI_TWINS = {
    "exp_stage": ReferenceKernel("row_stages", "exp_stage_numba_abi",
                                 (("x", "f32[:,::1]"), ("row_max", "f32[::1]"), ("exps", "f32[::1]")),
                                 geometry="grid (ceil(rows*cols/256),), block (256,)"),
    "divide_stage": ReferenceKernel("row_stages", "divide_stage_numba_abi",
                                    (("exps", "f32[:,::1]"), ("row_sum", "f32[::1]"), ("y", "f32[::1]")),
                                    geometry="grid (ceil(rows*cols/256),), block (256,)"),
    "tile_summary_kernel": ReferenceKernel(
        "tiles", "tile_summary_kernel_numba_abi",
        (("values", "f32[::1]"), ("tile_start", "i64[::1]"), ("tile_len", "i32[::1]"), ("tile_max", "f32[::1]"),
         ("tile_sum", "f32[::1]"), ("trace", "i64[:,::1]")),
        geometry="grid (n_tiles,), block (128,)"),
    "row_combine_kernel": ReferenceKernel(
        "tiles", "row_combine_kernel_numba_abi",
        (("row_first_tile", "i32[::1]"), ("row_tile_count", "i32[::1]"), ("tile_max", "f32[::1]"),
         ("tile_sum", "f32[::1]"), ("row_max", "f32[::1]"), ("row_sum", "f32[::1]"), ("trace", "i64[:,::1]")),
        geometry="grid (ceil(rows/4),), block (128,): one row per warp"),
    "tile_normalize_kernel": ReferenceKernel(
        "tiles", "tile_normalize_kernel_numba_abi",
        (("values", "f32[::1]"), ("tile_row", "i32[::1]"), ("tile_start", "i64[::1]"), ("tile_len", "i32[::1]"),
         ("row_max", "f32[::1]"), ("row_sum", "f32[::1]"), ("out", "f32[::1]"), ("trace", "i64[:,::1]")),
        geometry="grid (n_tiles,), block (128,)"),
}
#: Library keys of the Numba-layout entries (beside the twins' Numba kernel names).
NUMBA_ABI_PREFIX = "numba-abi:"

_POINTER_DTYPES = {"f32*": np.float32, "i32*": np.int32, "i64*": np.int64}
_SCALAR_TYPES = {"i32": ctypes.c_int32, "i64": ctypes.c_int64}
#: Numba's array arguments: kind -> (dtype, dimensions), C-contiguous.
_NUMBA_ARRAY_KINDS = {"f32[::1]": (np.float32, 1), "f32[:,::1]": (np.float32, 2), "i32[::1]": (np.int32, 1),
                      "i64[::1]": (np.int64, 1), "i64[:,::1]": (np.int64, 2)}


def pack_arguments(kernel, values):
    """ctypes values for ``kernel``'s argument list (device arrays checked for dtype and layout)."""
    if len(values) != len(kernel.args):
        raise TypeError(f"{kernel.entry}: expected {len(kernel.args)} arguments "
                        f"({', '.join(n for n, _ in kernel.args)}), got {len(values)}")
    packed = []
    for (name, kind), value in zip(kernel.args, values, strict=True):
        if kind in _NUMBA_ARRAY_KINDS:
            packed.append(_pack_numba_array(kernel, name, kind, value))
        elif kind in _POINTER_DTYPES:
            iface = getattr(value, "__cuda_array_interface__", None)
            if iface is None:
                raise TypeError(f"{kernel.entry}: argument {name} must be a device array, got {type(value)}")
            dtype = np.dtype(iface["typestr"])
            if dtype != np.dtype(_POINTER_DTYPES[kind]):
                raise TypeError(f"{kernel.entry}: argument {name} must be {np.dtype(_POINTER_DTYPES[kind])}, "
                                f"got {dtype}")
            _require_c_contiguous(kernel, name, iface, dtype)
            packed.append(ctypes.c_void_p(iface["data"][0]))
        else:
            packed.append(_SCALAR_TYPES[kind](int(value)))
    return packed


def _require_c_contiguous(kernel, name, iface, dtype):

    strides = iface.get("strides")
    if strides is not None and not c_contiguous(tuple(iface["shape"]), tuple(strides), dtype.itemsize):
        raise TypeError(f"{kernel.entry}: argument {name} must be C-contiguous")


def _pack_numba_array(kernel, name, kind, value):
    """One struct parameter holding exactly the members of Numba's own array ABI
    (:func:`~numba_softmax.launch.driver.numba_array_members`), in Numba's order."""

    dtype, ndim = _NUMBA_ARRAY_KINDS[kind]
    iface = getattr(value, "__cuda_array_interface__", None)
    if iface is None or np.dtype(iface["typestr"]) != np.dtype(dtype) or len(iface["shape"]) != ndim:
        raise TypeError(f"{kernel.entry}: argument {name} must be a {ndim}-D {np.dtype(dtype)} device array, got "
                        f"{getattr(value, 'shape', type(value))}")
    _require_c_contiguous(kernel, name, iface, np.dtype(dtype))
    members = []
    numba_array_members(value, members)
    blob = b"".join(bytes(member) for member in members)
    return (ctypes.c_char * len(blob)).from_buffer_copy(blob)


def reference_spec(name):
    """The table entry of a library key: a Numba kernel name (its twin) or ``NUMBA_ABI_PREFIX + name``."""
    if name.startswith(NUMBA_ABI_PREFIX):
        return NUMBA_ABI_TWINS[name[len(NUMBA_ABI_PREFIX):]]
    return REFERENCE_KERNELS[name]


#: What a :class:`ReferenceLibrary` loads: nvcc's cubins (compiled by nvcc's own ptxas), or nvcc's PTX,
#: which the driver compiles at load time as it compiles Numba's PTX (a control for the compiler back end).
IMAGES = ("cubin", "ptx")


class ReferenceLibrary:
    """The reference kernels, loaded once into Numba's primary context: the cubins, or with
    ``image="ptx"`` the PTX of the same build, compiled by the driver."""

    def __init__(self, build_dir=DEFAULT_BUILD_DIR, image="cubin"):

        if image not in IMAGES:
            raise ValueError(f"image must be one of {IMAGES}, not {image!r}")
        ensure_context()
        self.build_dir = build_dir
        self.image = image
        self._modules, self._functions, self._images = {}, {}, {}
        for module in sorted({k.module for k in REFERENCE_KERNELS.values()}):
            path = os.path.join(build_dir, f"{module}.{self.image}")
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} missing: run `python -m bench build-reference`")
            with open(path, "rb") as handle:
                data = handle.read()
            if self.image == "ptx":
                data += b"\0"  # PTX is loaded as text: the driver reads it up to a NUL
            self._images[module] = data  # keep the image alive while the module is loaded
            self._modules[module] = check(cu.cuModuleLoadData(data))
        #: Table entries this build does not contain (e.g. the fused width builds of a QUAD=1 build).
        self.missing = []
        entries = {**REFERENCE_KERNELS, **{NUMBA_ABI_PREFIX + n: k for n, k in NUMBA_ABI_TWINS.items()}}
        for name, kernel in entries.items():
            err, function = cu.cuModuleGetFunction(self._modules[kernel.module], kernel.entry.encode())
            if err == cu.CUresult.CUDA_ERROR_NOT_FOUND:
                self.missing.append(name)
                continue
            self._functions[name] = check((err, function))

    def has(self, name):
        return name in self._functions

    def function(self, name):
        if name not in self._functions:
            raise KeyError(f"reference entry for {name!r} not in the cubins of {self.build_dir} "
                           f"(missing: {self.missing})")
        return self._functions[name]

    def attributes(self, name):
        """Registers, local bytes, static shared bytes of the loaded entry (from the driver)."""

        attr = cu.CUfunction_attribute
        fn = self._functions[name]
        return {
            "entry": reference_spec(name).entry,
            "registers_per_thread": check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn)),
            "local_bytes_per_thread": check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn)),
            "static_shared_bytes": check(cu.cuFuncGetAttribute(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn)),
            "cooperative": reference_spec(name).cooperative,
        }

    def active_blocks_per_sm(self, name, block_threads, dynamic_shared_bytes=0):

        return check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            self._functions[name], block_threads, dynamic_shared_bytes))

    def cooperative_limit(self, name="persistent_tiles"):
        return int(self.active_blocks_per_sm(name, TILE_THREADS)) * int(device_sm_count())

    def close(self):
        for handle in self._modules.values():
            cu.cuModuleUnload(handle)
        self._modules.clear()
        self._functions.clear()


class _KernelInfo:
    """What :meth:`driver.Invocation.kernel_resources` reads from a prepared launch."""

    def __init__(self, library, name):
        self._library, self._name = library, name
        self.cooperative = reference_spec(name).cooperative

    def resources(self):
        return dict(self._library.attributes(self._name), source="nvcc reference")


@dataclass(frozen=True)
class _LaunchName:
    name: str


class ReferenceLaunch:
    """One reference kernel launch, packed once for fixed device pointers."""

    def __init__(self, library, name, grid, block, args, label=None, programmatic=False):

        self.name = name
        self.spec = reference_spec(name)
        self.cooperative = self.spec.cooperative  # read by Invocation.kernel_resources, like PreparedLaunch's
        self.function = library.function(name)
        self.kernel = _KernelInfo(library, name)
        self.launch = _LaunchName(label or f"{name}[nvcc]")
        # The launch holds its arrays: the packed values are raw device pointers, and an array freed
        # while a launch (or a graph captured from it) still points at it is a write into freed memory.
        self.args = tuple(args)
        self._values = pack_arguments(self.spec, args)
        self._pointers = (ctypes.c_void_p * len(self._values))(*[ctypes.addressof(v) for v in self._values])
        self._params = ctypes.addressof(self._pointers)
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.block = tuple(block) + (1,) * (3 - len(block))
        if self.spec.cooperative:
            blocks = self.grid[0] * self.grid[1] * self.grid[2]
            limit = library.cooperative_limit(name)
            if blocks > limit:
                raise ValueError(f"{name}: cooperative grid of {blocks} blocks exceeds the co-residency "
                                 f"limit {limit}")
        self._cu = cu
        #: A programmatic dependent of the launch ahead of it (KernelLaunch.programmatic), submitted with
        #: ``cuLaunchKernelEx``; its configuration is built once per stream.
        self.programmatic = programmatic
        self._extended = self._stream = None

    def enqueue(self, stream):
        if self.programmatic:
            if stream is not self._stream:
                self._stream = stream
                self._extended = ExtendedLaunchConfig(self.grid, self.block, 0, stream.handle,
                                                      self.spec.cooperative, 1, True)
            err, = self._cu.cuLaunchKernelEx(self._extended.config, self.function, self._params, 0)
        elif self.spec.cooperative:
            err, = self._cu.cuLaunchCooperativeKernel(self.function, *self.grid, *self.block, 0,
                                                      stream.handle, self._params)
        else:
            err, = self._cu.cuLaunchKernel(self.function, *self.grid, *self.block, 0, stream.handle,
                                           self._params, 0)
        if err != self._cu.CUresult.CUDA_SUCCESS:
            check((err,))


def reference_invocation(name, launches):
    """An :class:`~numba_softmax.launch.driver.Invocation` of reference launches."""
    return Invocation(name, [launch.enqueue for launch in launches], launches)


# ---- launch lists (same geometry as the Numba launch lists) -----------------------------

def _elementwise_blocks(rows, cols):
    return (rows * cols + BLOCK_THREADS - 1) // BLOCK_THREADS


def reference_stages_launches(library, x, y, row_max, exps, row_sum):
    """The four stages on device arrays (Numba: ``kernels.row_stages.stages_launches``)."""
    rows, cols = x.shape
    block = (BLOCK_THREADS,)
    blocks = _elementwise_blocks(rows, cols)
    return [
        ReferenceLaunch(library, "row_max_stage", (rows,), block, (x, row_max, rows, cols)),
        ReferenceLaunch(library, "exp_stage", (blocks,), block, (x, row_max, exps, rows, cols)),
        ReferenceLaunch(library, "row_sum_stage", (rows,), block, (exps, row_sum, rows, cols)),
        ReferenceLaunch(library, "divide_stage", (blocks,), block, (exps, row_sum, y, rows, cols)),
    ]


def numba_fused_kernel_name(x, y):
    """Name of the fused build Numba's launcher picks for these arrays (``fused_row_softmax``
    where the kernel module has a single build)."""
    chooser = getattr(fused_row, "fused_kernel_for", None)
    if chooser is None:
        return "fused_row_softmax"
    return chooser(x, y).py_func.__name__


def reference_fused_launches(library, x, y, name=None):
    """The fused row kernel (Numba: ``kernels.fused_row.fused_launches``; same column limit).

    ``name``: the build to run; default the one Numba's launcher picks for ``x``, ``y``.
    """
    rows, cols = x.shape
    if cols > MAX_FUSED_COLUMNS:
        raise ValueError(f"row too long for the fused kernel: {cols} columns > {MAX_FUSED_COLUMNS}")
    name = name or numba_fused_kernel_name(x, y)
    return [ReferenceLaunch(library, name, (rows,), (BLOCK_THREADS,), (x, y, rows, cols))]


def reference_separate_launches(library, buffers):
    """The separate scheduler's three launches over :class:`numba_softmax.tiled.TiledBuffers`,
    with the grids and blocks of the Numba launches (``kernels.tiles.separate_launches``)."""
    b = buffers
    geometry = {launch.name: (launch.grid, launch.block) for launch in separate_launches(buffers)}
    args = {
        "tile_summary_kernel": (b.values, b.tile_start, b.tile_len, b.tile_max, b.tile_sum, b.n_tiles,
                                b.values.shape[0]),
        "row_combine_kernel": (b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum, b.row_max, b.row_sum,
                               b.rows),
        "tile_normalize_kernel": (b.values, b.tile_row, b.tile_start, b.tile_len, b.row_max, b.row_sum, b.out,
                                  b.n_tiles, b.values.shape[0]),
    }
    return [ReferenceLaunch(library, name, *geometry[name], arguments) for name, arguments in args.items()]


def reference_persistent_args(mode, buffers, max_polls):
    b = buffers
    return (mode, b.values, b.out, b.tile_row, b.tile_start, b.tile_len, b.row_first_tile, b.row_tile_count,
            b.tile_max, b.tile_sum, b.row_max, b.row_sum, b.counters, b.row_arrivals, b.fifo_slots,
            b.layout.fifo_entries(TILES_PER_CLAIM), max_polls, b.n_tiles, b.rows, b.layout.fifo_capacity,
            b.values.shape[0])


def reference_worker_count(library, buffers, workers=None):
    """Cooperative occupancy x SMs of the reference kernel, capped by the A tiles (or ``workers``)."""
    limit = library.cooperative_limit("persistent_tiles")
    chosen = min(limit, buffers.n_tiles) if workers is None else int(workers)
    if not 1 <= chosen <= limit:
        raise ValueError(f"workers={chosen} outside [1, {limit}] (the reference kernel's co-residency limit)")
    return chosen


def reference_phased_launches(library, buffers, workers, max_polls=None):
    polls = DEFAULT_MAX_POLLS if max_polls is None else max_polls
    return [ReferenceLaunch(library, "persistent_tiles", (workers,), (TILE_THREADS,),
                            reference_persistent_args(MODE_PHASED, buffers, polls),
                            label="persistent_tiles[phased][nvcc]")]


def reference_init_queue_launch(library, buffers):
    b = buffers
    capacity = b.layout.fifo_capacity
    blocks = min(max(1, (capacity + BLOCK_THREADS - 1) // BLOCK_THREADS), INIT_MAX_BLOCKS)
    return ReferenceLaunch(library, "init_queue_kernel", (blocks,), (BLOCK_THREADS,),
                           (b.counters, b.row_arrivals, b.fifo_slots, b.rows, capacity))


def reference_dag_launches(library, buffers, workers, max_polls=None):
    polls = DEFAULT_MAX_POLLS if max_polls is None else max_polls
    return [reference_init_queue_launch(library, buffers),
            ReferenceLaunch(library, "persistent_tiles", (workers,), (TILE_THREADS,),
                            reference_persistent_args(MODE_DAG, buffers, polls),
                            label="persistent_tiles[dag][nvcc]", programmatic=True)]


def reference_tiled_launches(library, scheduler, buffers, workers=None, max_polls=None):
    """The reference launch list of one Experiment B scheduler ("separate", "phased", "dag")."""
    if scheduler == "separate":
        return reference_separate_launches(library, buffers)
    chosen = reference_worker_count(library, buffers, workers)
    if scheduler == "phased":
        return reference_phased_launches(library, buffers, chosen, max_polls)
    if scheduler == "dag":
        return reference_dag_launches(library, buffers, chosen, max_polls)
    raise ValueError(f"unknown scheduler {scheduler!r}")


__all__ = ["REFERENCE_KERNELS", "NUMBA_ABI_TWINS", "NUMBA_ABI_PREFIX", "reference_spec", "ReferenceKernel",
           "ReferenceLibrary", "ReferenceLaunch", "pack_arguments",
           "reference_invocation", "reference_stages_launches", "reference_fused_launches",
           "reference_separate_launches", "reference_phased_launches", "reference_dag_launches",
           "reference_init_queue_launch", "reference_tiled_launches", "reference_worker_count",
           "numba_fused_kernel_name",
           "DEFAULT_BUILD_DIR"]
