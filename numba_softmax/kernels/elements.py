"""Element types: how a kernel reads and writes float32, float16, bfloat16 and float64 arrays.

``element_io(in_type, out_type)`` gives the device functions a kernel body uses for one pair of types
(torch's ``softmax(x, dtype=out_type)``: the input is cast to ``out_type``, then the operation runs):

* ``load(raw)``: one raw element of x -> the compute type (:func:`numerics.compute_type`): widened exactly,
  rounded to ``out_type`` first where that cast loses bits (float32 -> bfloat16, float64 -> float32...);
* ``store(v)``: a compute-type value -> one raw element of y, rounded once, to nearest even;
* ``load_quad(x, row, col)`` / ``store_quad(y, row, col, a, b, c, d)``: four consecutive elements in one vector
  access (:mod:`.vector_io`), converted the same way;
* ``arith``: the numerics policy of the compute type.

float16 converts with ``cvt``; bfloat16 is a uint16 array to Numba: widening shifts its bits up by 16, rounding
adds ``0x7FFF`` plus the lowest kept bit and shifts down (a NaN stays a NaN). A float64 input cast to a 2-byte
type goes through float32 (two roundings; docs/numerics.md). The simulator runs the same conversions in numpy.
"""

from functools import cache
from typing import NamedTuple

import numpy as np
from numba import cuda, float32, float64, int32, types, uint32

from ..element_types import ELEMENT_TYPES, STORAGE_DTYPES, from_bfloat16, to_bfloat16
from ..numerics import KERNEL_OPTIONS, SIMULATOR, Arithmetic, arithmetic, compute_type
from .vector_io import load_quad, load_raw_quad, store_quad, store_raw_quad
#: Casts that lose nothing: a load widens without rounding through the output type.
_EXACT = {("float16", "float32"), ("bfloat16", "float32"), ("float16", "float64"), ("bfloat16", "float64"),
          ("float32", "float64")}


class ElementIO(NamedTuple):
    """The device functions of one (input type, output type) pair; see the module docstring."""
    in_type: str
    out_type: str
    arith: Arithmetic
    load: object
    store: object
    load_quad: object
    store_quad: object


def check_types(types, what="types"):
    """``(in_type, out_type)``, each one of :data:`ELEMENT_TYPES`."""
    if not (isinstance(types, tuple) and len(types) == 2 and all(t in ELEMENT_TYPES for t in types)):
        raise ValueError(f"{what}: expected (in_type, out_type) from {ELEMENT_TYPES}, got {types!r}")
    return types


def types_of(x, y):
    """``(in_type, out_type)`` read from two arrays' dtypes (float32, float16, float64; a bfloat16 array is a
    uint16 array and needs its types named)."""
    found = []
    for name, array in (("x", x), ("y", y)):
        dtype = np.dtype(array.dtype)
        match = [t for t, d in STORAGE_DTYPES.items() if d == dtype and t != "bfloat16"]
        if not match:
            raise ValueError(f"{name}: element type {dtype} is not float32, float16 or float64 "
                             "(a bfloat16 array is passed as uint16 with types=(in_type, out_type))")
        found.append(match[0])
    return tuple(found)


def check_storage(name, array, element_type):
    """Raise unless ``array``'s dtype stores ``element_type``."""
    if np.dtype(array.dtype) != STORAGE_DTYPES[element_type]:
        raise ValueError(f"{name}: a {element_type} array is stored as {STORAGE_DTYPES[element_type]}, "
                         f"got {np.dtype(array.dtype)}")


# ---- conversions: widen a raw element to float32 / float64 exactly, narrow a value to a raw element ----------

if SIMULATOR:

    _WIDEN = {"float32": lambda v: np.float32(v), "float16": lambda v: np.float32(np.float16(v)),
              "bfloat16": lambda v: from_bfloat16([v])[0], "float64": lambda v: np.float64(v)}
    _NARROW = {"float32": lambda v: np.float32(v), "float16": lambda v: np.float16(np.float32(v)),
               "bfloat16": lambda v: to_bfloat16([v])[0], "float64": lambda v: np.float64(v)}
    _TO = {"float32": lambda v: np.float32(v), "float64": lambda v: np.float64(v)}

else:
    from llvmlite import ir
    from numba.cuda import libdevice
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _same(v):
        return v

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _to_f32(v):
        return float32(v)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _to_f64(v):
        return float64(v)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _to_f16(v):
        return types.float16(float32(v))

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _widen_bf16(v):
        return libdevice.int_as_float(int32(uint32(v) << uint32(16)))

    @intrinsic
    def _cvt_bf16(typingctx, v):
        """``cvt.rn.bf16.f32``: a float32 rounded to the nearest even bfloat16 (a NaN stays a NaN), as its bits."""
        if v != types.float32:
            raise TypingError(f"_cvt_bf16: expected a float32, got {v}")

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(16), [ir.FloatType()]), "cvt.rn.bf16.f32 $0, $1;", "=h,f")
            return builder.call(asm, args)

        return types.uint16(v), codegen

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def _narrow_bf16(v):
        return _cvt_bf16(float32(v))

    _WIDEN = {"float32": _same, "float16": _to_f32, "bfloat16": _widen_bf16, "float64": _same}
    _NARROW = {"float32": _to_f32, "float16": _to_f16, "bfloat16": _narrow_bf16, "float64": _to_f64}
    _TO = {"float32": _to_f32, "float64": _to_f64}


def _make_load(in_type, out_type):
    """raw ``in_type`` element -> compute value, rounded through ``out_type`` where the cast loses bits."""
    if in_type == out_type or (in_type, out_type) in _EXACT:
        widen, to = _WIDEN[in_type], _TO[compute_type(out_type)]
        if in_type == out_type and in_type in ("float32", "float64"):
            return widen
        return cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)(lambda v: to(widen(v)))
    widen, narrow, widen_out = _WIDEN[in_type], _NARROW[out_type], _WIDEN[out_type]
    to = _TO[compute_type(out_type)]
    return cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)(lambda v: to(widen_out(narrow(widen(v)))))


@cache
def element_io(in_type, out_type):
    """The :class:`ElementIO` of one (input type, output type) pair, made once."""
    check_types((in_type, out_type))
    arith = arithmetic(compute_type(out_type))
    if (in_type, out_type) == ("float32", "float32") and not SIMULATOR:
        # The shipped float32 builds: the 16-byte accesses of vector_io themselves, no conversion.
        return ElementIO(in_type, out_type, arith, _same, _same, load_quad, store_quad)
    LOAD = _make_load(in_type, out_type)
    STORE = _NARROW[out_type]

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def load_converted_quad(x, row, col):
        a, b, c, d = load_raw_quad(x, row, col)
        return LOAD(a), LOAD(b), LOAD(c), LOAD(d)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_converted_quad(y, row, col, a, b, c, d):
        store_raw_quad(y, row, col, STORE(a), STORE(b), STORE(c), STORE(d))

    return ElementIO(in_type, out_type, arith, LOAD, STORE, load_converted_quad, store_converted_quad)
