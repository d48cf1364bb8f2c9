"""``method="auto"``'s builds and launchers: one build per (geometry, element types, checked or not), made once
and compiled on its first launch, and the :class:`KernelLaunch` values that run them.

``auto_launches`` runs the table's geometry for the width (:func:`.auto_geometry.auto_geometry`),
``geometry_launches`` any named one (``bench perf`` times the candidates through it), ``check_launches`` the
check-only pass of the protocol's paths. Arrays: 2-D, any row stride, one element between columns, any start
aligned to the element size; ``types=(in_type, out_type)`` (:mod:`.elements`; read from the dtypes when left
out). Grid: ``ceil(rows / rows per block) * CTAs per row`` blocks of the geometry's threads, with its dynamic
shared memory and cluster size. Nothing here allocates, synchronizes or copies.
"""

import numpy as np

from ..launch_spec import KernelLaunch
from ..numerics import QUAD
from ..validation import (check_launch_matrix, check_status_buffers, check_strided_rows, is_16_byte_aligned,
                          quads_packed)
from .auto_controls import fast_math_kernel
from .auto_geometry import (AUTO_TABLE, PACKED_WIDTHS, TABLE_GEOMETRIES, Geometry, auto_geometry, check_holds,
                            float64_geometry)
from .auto_narrow import packed_grid
from .auto_parts import FORMS
from .auto_rows import CHECK_BLOCK_THREADS, FORM_PREFIXES, make_auto_kernel, make_check_kernel
from .elements import STORAGE_DTYPES, check_storage, check_types, types_of

F32 = ("float32", "float32")
#: The check-only pass takes the protocol's float32 C-contiguous rows.
CHECK_SIGNATURE = "void(float32[:, ::1], int64[::1], int32[::1])"

_BUILDS = {}
_CHECK_BUILDS = {}


def signature(types, checked):
    """The Numba signature of a build for elements ``types``: strided 2-D arrays of their storage types."""
    x, y = (f"{STORAGE_DTYPES[t].name}[:, :]" for t in types)
    return f"void({x}, {y}, int64[::1], int32[::1])" if checked else f"void({x}, {y})"


def auto_kernel(geometry, types=F32, checked=False, form="softmax"):
    """The dispatcher of one build of ``geometry`` (a :class:`Geometry` or its name) writing ``form``
    (``"softmax"`` or ``"log_softmax"``), made once."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    if form not in FORMS:
        raise ValueError(f"form {form!r}: expected one of {FORMS}")
    key = (geometry, check_types(tuple(types)), bool(checked), form)
    if key not in _BUILDS:
        if geometry.fast_math:
            if form != "softmax":
                raise ValueError(f"geometry {geometry.name}: the fast-math diagnostic builds write the softmax only")
            _BUILDS[key] = fast_math_kernel(*key[:3])
        else:
            _BUILDS[key] = make_auto_kernel(*key)
    return _BUILDS[key]


def check_kernel(vector, allow_neg_inf):
    """The dispatcher of one build of the check-only pass, made once."""
    key = (bool(vector), bool(allow_neg_inf))
    if key not in _CHECK_BUILDS:
        _CHECK_BUILDS[key] = make_check_kernel(*key)
    return _CHECK_BUILDS[key]


def _geometries_for(types, geometries):
    """The geometries a pair of element types runs among ``geometries`` (float64: :func:`float64_geometry`'s)."""
    if "float64" in types:
        return sorted({float64_geometry(name) for name in geometries if not Geometry.parse(name).fast_math})
    return list(geometries)


#: The element types whose builds are all registered (the table's every geometry); the other pairs register one
#: geometry of each kind they run (their code differs from these by the element conversions only).
FULL_TYPES = (F32, ("bfloat16", "bfloat16"))
#: One geometry of each kind: narrow rows (shuffles), a block per row, shared memory, a cluster, the long path.
KIND_SAMPLES = ("rows_l8_q1", "rows_l128_q4", "rows_l512_q8_s8", "cluster_l512_q8_c4_s8", AUTO_TABLE[-1][1])
#: The log_softmax builds registered: every geometry it runs for float32 (checked or not), one narrow rows, one
#: block-per-row and the long geometry for the other element types (unchecked; their code differs from float32's
#: by the element conversions only).
LOG_SAMPLE_TYPES = (("bfloat16", "bfloat16"), ("float16", "float16"), ("float64", "float64"), ("bfloat16", "float32"))
LOG_KIND_SAMPLES = ("rows_l8_q1", "rows_l128_q4", AUTO_TABLE[-1][1])
SAMPLE_TYPES = (("float16", "float16"), ("float64", "float64"), ("bfloat16", "float32"), ("float32", "bfloat16"),
                ("float16", "float32"), ("float64", "float32"), ("float32", "float64"))


def builds(geometries=TABLE_GEOMETRIES):
    """name -> (dispatcher, Numba signature) of every build (checked or not) of ``geometries`` for the
    :data:`FULL_TYPES`, of :data:`KIND_SAMPLES` for the :data:`SAMPLE_TYPES`, and of the check-only pass:
    what the PTX policy check compiles. The registry holds the table's (what the library launches); the CPU
    tests check every candidate's too."""
    found = {}
    plan = [(types, geometries) for types in FULL_TYPES] + [(types, KIND_SAMPLES) for types in SAMPLE_TYPES]
    for types, names in plan:
        for name in _geometries_for(types, names):
            for checked in (False, True):
                kernel = auto_kernel(name, types, checked)
                found[kernel.py_func.__name__] = (kernel, signature(types, checked))
    for vector in (False, True):
        for allow in (False, True):
            kernel = check_kernel(vector, allow)
            found[kernel.py_func.__name__] = (kernel, CHECK_SIGNATURE)
    return found


def log_builds():
    """name -> (dispatcher, Numba signature) of the log_softmax builds: every geometry ``auto`` runs for float32,
    checked or not, and :data:`LOG_KIND_SAMPLES` for the :data:`LOG_SAMPLE_TYPES`, unchecked."""
    found = {}
    plan = [(F32, sorted({log_geometry(name) for name in TABLE_GEOMETRIES}), (False, True))]
    plan += [(types, LOG_KIND_SAMPLES, (False,)) for types in LOG_SAMPLE_TYPES]
    for types, names, checks in plan:
        for name in _geometries_for(types, names):
            for checked in checks:
                kernel = auto_kernel(name, types, checked, "log_softmax")
                found[kernel.py_func.__name__] = (kernel, signature(types, checked))
    return found


def _types(x, y, types):
    if types is None:
        return types_of(x, y)
    types = check_types(tuple(types))
    check_storage("x", x, types[0])
    check_storage("y", y, types[1])
    return types


def geometry_launches(geometry, x, y, status=None, alarm=None, types=None, form="softmax"):
    """The single launch of one named geometry writing ``form`` (``auto`` uses :func:`auto_launches`; ``bench
    perf`` times the candidates through this). A ``rows`` geometry refuses a row it cannot hold."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    types = _types(x, y, types)
    check_strided_rows("x", x)
    check_strided_rows("y", y)
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    checked = status is not None or alarm is not None
    if checked:
        check_status_buffers(status, alarm)
    rows, cols = x.shape
    check_holds(geometry, cols, types[0])
    kernel = auto_kernel(geometry, types, checked, form)
    if geometry.packed_widths:
        check_packed(geometry, cols, x=x, y=y)
        grid = packed_grid(geometry, rows, cols)
    else:
        grid = (rows + geometry.rows_per_block - 1) // geometry.rows_per_block * geometry.ctas
    args = (x, y, status, alarm) if checked else (x, y)
    shared_bytes = geometry.shared_bytes * STORAGE_DTYPES[types[0]].itemsize // 4
    return [KernelLaunch(f"{FORM_PREFIXES[form]}{geometry.name}", kernel, (grid,), (geometry.block_threads,), args,
                         shared_bytes=shared_bytes, cluster=geometry.ctas)]


def auto_launches(x, y, status=None, alarm=None, types=None, form="softmax"):
    """``method="auto"``: the launch of the table's geometry for this width (any width: the long-row path
    beyond the table) writing ``form``. ``status is None``: unchecked; else checked (records into status and
    alarm)."""
    types = _types(x, y, types)
    check_strided_rows("x", x)
    cols = x.shape[1]
    return geometry_launches(geometry_for(cols, types, form, packs(cols, x, y)), x, y, status, alarm, types, form)


def packs(cols, *arrays):
    """Whether rows of ``cols`` elements in ``arrays`` run a packed geometry: a width of
    :data:`.auto_geometry.PACKED_WIDTHS` and every array's rows packed (:func:`..validation.quads_packed`)."""
    return cols in PACKED_WIDTHS and all(quads_packed(a) for a in arrays)


def check_packed(geometry, cols, **arrays):
    """Raise unless rows of ``cols`` elements in ``arrays`` (name -> array) can run the packed ``geometry``."""
    if cols not in geometry.packed_widths:
        raise ValueError(f"geometry {geometry.name}: rows of {cols} columns; it takes rows of "
                         f"{', '.join(map(str, geometry.packed_widths))} columns")
    if geometry.kind != "packed" and any(np.dtype(a.dtype) == np.float64 for a in arrays.values()):
        raise ValueError(f"geometry {geometry.name}: float64 rows of {cols} columns run the narrow or rows "
                         "geometries (a group of 7 columns would hold 56 float64 values a thread in a backward)")
    for name, array in arrays.items():
        if not quads_packed(array):
            raise ValueError(f"geometry {geometry.name}: {name} must be C-contiguous with its data aligned to "
                             f"{min(16, 4 * np.dtype(array.dtype).itemsize)} bytes (a quad of its elements)")


def geometry_for(cols, types, form="softmax", packed=False):
    """The geometry :func:`auto_launches` runs for rows of ``cols`` elements of ``types`` writing ``form``
    (``packed``: the arrays allow a packed geometry, :func:`packs`): the log_softmax runs the rows geometries in
    registers and the long-row path beyond (:func:`log_geometry`)."""
    name = auto_geometry(cols, types, packed)
    return name if form == "softmax" else log_geometry(name)


def log_geometry(name):
    """The geometry the log_softmax runs where the softmax runs ``name``: the same, but the long-row path in
    place of a cluster or ``_s{S}`` one (those write the softmax only)."""
    return AUTO_TABLE[-1][1] if Geometry.parse(name).gpu_only else name


def check_launches(x, status, alarm, allow_neg_inf):
    """The check-only pass over x (one read, records only): float32 C-contiguous rows."""
    check_launch_matrix("x", x)
    check_status_buffers(status, alarm)
    rows, cols = x.shape
    kernel = check_kernel(cols % QUAD == 0 and is_16_byte_aligned(x), allow_neg_inf)
    return [KernelLaunch("check_values", kernel, (rows,), (CHECK_BLOCK_THREADS,), (x, status, alarm))]

