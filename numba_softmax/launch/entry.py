"""The kernel entry the launch layer compiles: a kernel's own code behind a slim parameter block.

Numba passes an array argument to a kernel as its whole array struct: meminfo, parent, nitems,
itemsize, data, shape[nd] and strides[nd], 56 bytes for a vector and 72 for a matrix, of which a
kernel on C-contiguous arrays reads only the data pointer and the shape. A launch carries its
parameter block to the GPU, and on kernels of a few microseconds the block's size shows: the nvcc
twins given Numba's array layout were 1.05-1.07x the twins at 32x1024 and 128 tile rows, and 160
unused bytes in front of a twin's arguments cost 1.048x by themselves (docs/numba_vs_nvcc.md).

So on the GPU the launch layer does not launch a ``@cuda.jit`` kernel with Numba's array ABI. For
each kernel and argument types it compiles :func:`slim_entry`: a generated kernel whose parameters
are, for every array argument, its data pointer and its shape (int64, as Numba's own), and every
scalar argument as it is. The entry rebuilds each array from pointer and shape with Numba's own
``carray`` intrinsic (a C-contiguous view; strides follow from the shape) and calls the kernel's
Python function, compiled as a device function that NVVM inlines (``forceinline``): the body is
the kernel's own code, the same PTX instruction for instruction; only the ``.param`` list and
its loads change (tests/cpu/test_slim_entry.py compares them for every protocol kernel). A
matrix then costs 24 bytes, a vector 16. A strided array (``A`` layout: ``method="auto"``'s rows of any
row stride) also passes its strides in bytes, 40 bytes for a matrix, and is rebuilt with :func:`strided_array`.

The entry keeps the kernel's compile options (launch bounds, register cap, fastmath, line info),
its module and name (so its mangled entry name reads like the kernel's). The simulator launches
the ``@cuda.jit`` kernel itself (:mod:`numba_softmax.backend`); nothing here runs there.

(``numba.carray`` itself is not used: in numba-cuda 0.30.4 its ``inline="always"`` overload dropped
the statements after the call in some kernels, for example a store indexed by ``cuda.grid(1)``.
The intrinsic it wraps does not.)
"""

import numpy as np
from numba import cuda, types
from numba.cuda import cgutils
from numba.cuda.core.errors import TypingError
from numba.cuda.extending import intrinsic
from numba.cuda.np.arrayobj import get_cfarray_intrinsic, get_itemsize, make_array, populate_array

from ..contiguity import c_contiguous

#: Compile options a generated entry keeps from its kernel (the others describe a kernel being a kernel).
KEPT_OPTIONS = ("fastmath", "debug", "lineinfo", "opt", "link", "launch_bounds", "lto", "max_registers")

_c_array = get_cfarray_intrinsic("C", None)
_entries = {}  # (dispatcher, argument types) -> (entry, parameter types)
_bodies = {}  # dispatcher -> its body as a device function


class SlimEntryError(TypeError):
    """An argument type the slim entry cannot pass (an array that is neither C-contiguous nor strided)."""


@intrinsic
def strided_array(typingctx, data, shape, strides):
    """An ``A``-layout array over ``data`` with ``shape`` (elements) and ``strides`` (bytes), not owning it."""
    if not (isinstance(data, types.CPointer) and isinstance(shape, types.UniTuple)
            and isinstance(strides, types.UniTuple) and len(shape) == len(strides)):
        raise TypingError(f"strided_array: expected a pointer and two tuples of one length, got {data}, {shape}, "
                          f"{strides}")
    array_type = types.Array(data.dtype, len(shape), "A")

    def codegen(context, builder, sig, args):
        array = make_array(array_type)(context, builder)
        populate_array(array, data=args[0], shape=cgutils.unpack_tuple(builder, args[1]),
                       strides=cgutils.unpack_tuple(builder, args[2]),
                       itemsize=cgutils.intp_t(get_itemsize(context, array_type)), meminfo=None)
        return array._getvalue()

    return array_type(data, shape, strides), codegen


def slim_types(name, argtypes):
    """The entry's parameter types for a kernel's argument types: (pointer, shape...) per C-contiguous array,
    (pointer, shape..., strides...) per strided one."""
    slim = []
    for position, ty in enumerate(argtypes):
        if isinstance(ty, types.Array):
            if ty.layout not in ("C", "A"):
                raise SlimEntryError(f"{name}: argument {position} is a {ty} array; the launch layer passes "
                                     "C-contiguous (pointer and shape) or strided arrays (and strides) only")
            slim.append(types.CPointer(ty.dtype))
            slim.extend([types.int64] * (ty.ndim if ty.layout == "C" else 2 * ty.ndim))
        else:
            slim.append(ty)
    return tuple(slim)


#: Compile options the inlined body keeps: its instructions carry them (fastmath flags, line info).
BODY_OPTIONS = ("fastmath", "debug", "lineinfo", "opt")


def _options(dispatcher, names):
    return {name: dispatcher.targetoptions[name] for name in names if dispatcher.targetoptions.get(name) is not None}


def _body(dispatcher):
    """The kernel's Python function as a device function NVVM inlines into the entry."""
    if dispatcher not in _bodies:
        _bodies[dispatcher] = cuda.jit(device=True, forceinline=True, **_options(dispatcher, BODY_OPTIONS))(
            dispatcher.py_func)
    return _bodies[dispatcher]


def _entry_source(argtypes):
    params, rebuild, call = [], [], []
    for position, ty in enumerate(argtypes):
        if isinstance(ty, types.Array):
            shape = [f"shape{position}_{axis}" for axis in range(ty.ndim)]
            if ty.layout == "C":
                params += [f"data{position}", *shape]
                rebuild.append(f"    array{position} = c_array(data{position}, ({', '.join(shape)},))")
            else:
                strides = [f"stride{position}_{axis}" for axis in range(ty.ndim)]
                params += [f"data{position}", *shape, *strides]
                rebuild.append(f"    array{position} = strided_array(data{position}, ({', '.join(shape)},), "
                               f"({', '.join(strides)},))")
            call.append(f"array{position}")
        else:
            params.append(f"value{position}")
            call.append(f"value{position}")
    return (f"def entry({', '.join(params)}):\n" + "".join(line + "\n" for line in rebuild)
            + f"    body({', '.join(call)})\n")


def slim_entry(dispatcher, argtypes):
    """``(entry dispatcher, its parameter types)`` for ``dispatcher`` at ``argtypes`` (cached)."""
    key = (dispatcher, tuple(argtypes))
    if key not in _entries:
        function = dispatcher.py_func
        parameters = slim_types(function.__name__, key[1])
        namespace = {"c_array": _c_array, "strided_array": strided_array, "body": _body(dispatcher)}
        exec(_entry_source(key[1]), namespace)  # noqa: S102 - generated from the argument types only
        entry = namespace["entry"]
        entry.__name__, entry.__qualname__ = function.__name__, function.__qualname__
        entry.__module__, entry.__doc__ = function.__module__, function.__doc__
        _entries[key] = (cuda.jit(**_options(dispatcher, KEPT_OPTIONS))(entry), parameters)
    return _entries[key]


def array_members(value, strided=False):
    """``(data pointer, shape)`` of a C-contiguous device array, ``(data pointer, shape + strides)`` of a strided
    one (``strided``: the kernel takes an ``A``-layout array): what the entry takes for it."""
    iface = value.__cuda_array_interface__
    shape = tuple(int(extent) for extent in iface["shape"])
    itemsize = np.dtype(iface["typestr"]).itemsize
    strides = iface.get("strides")
    if strided:
        if strides is None:
            strides = tuple(int(np.prod(shape[i + 1:], dtype=np.int64)) * itemsize for i in range(len(shape)))
        return int(iface["data"][0]), shape + tuple(int(s) for s in strides)
    if strides is not None and not c_contiguous(shape, strides, itemsize):
        raise SlimEntryError(f"array argument with strides {tuple(strides)} for shape {shape} is not "
                             "C-contiguous; the launch layer passes pointer and shape only")
    return int(iface["data"][0]), shape
