"""The element types softmax reads and writes, on the host (numpy only): names, storage, bfloat16 bits.

float16 and bfloat16 are storage types: kernels compute in float32 and round once to the output type; float64
computes in float64 (:mod:`.numerics`). numpy has no bfloat16, so a bfloat16 array is held as its uint16 bits;
:func:`to_bfloat16` rounds to the nearest even (a NaN stays a NaN), as the kernels' stores do.
"""

import numpy as np

ELEMENT_TYPES = ("float32", "float16", "bfloat16", "float64")
#: The numpy dtype an array of each element type is held in (bfloat16: its bits).
STORAGE_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                  "bfloat16": np.dtype(np.uint16), "float64": np.dtype(np.float64)}
_BF16_NAN = np.uint16(0x7FC0)


def to_bfloat16(values):
    """bfloat16 bits (uint16) of ``values``, each rounded once from float32 to the nearest even."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(np.asarray(values, dtype=np.float32)), _BF16_NAN, rounded)


def from_bfloat16(bits):
    """float32 values of bfloat16 bits (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def to_float64(array, element_type):
    """The float64 values of an array of ``element_type`` (bfloat16 given as its bits)."""
    if element_type == "bfloat16":
        return from_bfloat16(array).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def from_float64(values, element_type):
    """``values`` rounded to ``element_type`` (bfloat16 through float32: two roundings), in its storage dtype."""
    if element_type == "bfloat16":
        return to_bfloat16(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(STORAGE_DTYPES[element_type])
