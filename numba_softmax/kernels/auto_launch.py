"""``method="auto"``'s builds and launchers: one build per (geometry, 16-byte or scalar, checked or not), made
once and compiled by Numba on its first launch, and the :class:`KernelLaunch` values that run them.

``auto_launches`` runs the table's geometry for the width (:func:`.auto_geometry.auto_geometry`),
``geometry_launches`` any named one (``bench perf`` times the candidates through it), ``check_launches`` the
check-only pass. Grid: ``ceil(rows / rows per block) * CTAs per row`` blocks of the geometry's threads, with
its dynamic shared memory and cluster size. Nothing here allocates, synchronizes or copies.
"""

from ..launch_spec import KernelLaunch
from ..numerics import QUAD
from ..validation import check_launch_matrix, check_status_buffers, is_16_byte_aligned
from .auto_controls import fast_math_kernel
from .auto_geometry import TABLE_GEOMETRIES, Geometry, auto_geometry
from .auto_rows import CHECK_BLOCK_THREADS, make_auto_kernel, make_check_kernel

MATRIX = "float32[:, ::1]"
#: Numba signature of each kind of build (the launchers pass C-contiguous device arrays).
UNCHECKED_SIGNATURE = f"void({MATRIX}, {MATRIX})"
CHECKED_SIGNATURE = f"void({MATRIX}, {MATRIX}, int64[::1], int32[::1])"
CHECK_SIGNATURE = f"void({MATRIX}, int64[::1], int32[::1])"

_BUILDS = {}
_CHECK_BUILDS = {}


def auto_kernel(geometry, vector, checked):
    """The dispatcher of one build of ``geometry`` (a :class:`Geometry` or its name), made once."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    key = (geometry, bool(vector), bool(checked))
    if key not in _BUILDS:
        _BUILDS[key] = (fast_math_kernel if geometry.fast_math else make_auto_kernel)(*key)
    return _BUILDS[key]


def check_kernel(vector, allow_neg_inf):
    """The dispatcher of one build of the check-only pass, made once."""
    key = (bool(vector), bool(allow_neg_inf))
    if key not in _CHECK_BUILDS:
        _CHECK_BUILDS[key] = make_check_kernel(*key)
    return _CHECK_BUILDS[key]


def builds(geometries=TABLE_GEOMETRIES):
    """name -> (dispatcher, Numba signature) of every build (vector or scalar, checked or not) of
    ``geometries`` and of the check-only pass: what the PTX policy check compiles. The registry holds the
    table's (what the library launches); the CPU tests check every candidate's too."""
    found = {}
    for name in geometries:
        for vector in (True,) if Geometry.parse(name).vector_only else (False, True):
            for checked in (False, True):
                kernel = auto_kernel(name, vector, checked)
                found[kernel.py_func.__name__] = (kernel, CHECKED_SIGNATURE if checked else UNCHECKED_SIGNATURE)
    for vector in (False, True):
        for allow in (False, True):
            kernel = check_kernel(vector, allow)
            found[kernel.py_func.__name__] = (kernel, CHECK_SIGNATURE)
    return found


def _vector_rows(x, y):
    """Whether ``x`` and ``y`` take the 16-byte builds: rows a multiple of 4 long, both arrays 16-byte aligned."""
    return x.shape[1] % QUAD == 0 and is_16_byte_aligned(x) and is_16_byte_aligned(y)


def geometry_launches(geometry, x, y, status=None, alarm=None):
    """The single launch of one named geometry (``auto`` uses :func:`auto_launches`; ``bench perf``
    times the candidates through this). A ``rows`` geometry refuses a row it cannot hold."""
    if isinstance(geometry, str):
        geometry = Geometry.parse(geometry)
    check_launch_matrix("x", x)
    check_launch_matrix("y", y)
    if tuple(x.shape) != tuple(y.shape):
        raise ValueError(f"x and y must have one shape, got {tuple(x.shape)} and {tuple(y.shape)}")
    checked = status is not None or alarm is not None
    if checked:
        check_status_buffers(status, alarm)
    rows, cols = x.shape
    if geometry.max_columns is not None and cols > geometry.max_columns:
        raise ValueError(f"row too long for geometry {geometry.name}: {cols} columns > {geometry.max_columns}")
    vector = _vector_rows(x, y)
    if geometry.vector_only and not vector:
        raise ValueError(f"geometry {geometry.name} needs rows of a multiple of {QUAD} columns in 16-byte aligned "
                         f"arrays; got {cols} columns")
    kernel = auto_kernel(geometry, vector, checked)
    grid = (rows + geometry.rows_per_block - 1) // geometry.rows_per_block * geometry.ctas
    args = (x, y, status, alarm) if checked else (x, y)
    return [KernelLaunch(f"auto_{geometry.name}", kernel, (grid,), (geometry.block_threads,), args,
                         shared_bytes=geometry.shared_bytes, cluster=geometry.ctas)]


def auto_launches(x, y, status=None, alarm=None):
    """``method="auto"``: the launch of the table's geometry for this width (any width: the long-row path
    beyond the table). ``status is None``: unchecked; else checked (records into status and alarm)."""
    check_launch_matrix("x", x)
    check_launch_matrix("y", y)
    return geometry_launches(auto_geometry(x.shape[1], _vector_rows(x, y)), x, y, status, alarm)


def check_launches(x, status, alarm, allow_neg_inf):
    """The check-only pass over x (one read, records only)."""
    check_launch_matrix("x", x)
    check_status_buffers(status, alarm)
    rows, cols = x.shape
    kernel = check_kernel(cols % QUAD == 0 and is_16_byte_aligned(x), allow_neg_inf)
    return [KernelLaunch("check_values", kernel, (rows,), (CHECK_BLOCK_THREADS,), (x, status, alarm))]
