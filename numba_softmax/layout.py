"""Where an array's softmax lies in memory: shape, strides and ``dim`` -> a plan the kernels run without a copy.

Pure host code. The functions take strides in BYTES (as numpy, Numba and ``__cuda_array_interface__`` give
them) with the element size; a plan's strides are in ELEMENTS. Two plans:

* :class:`Rows` ``(rows, cols, row_stride)``: the softmax runs along rows of ``cols`` adjacent elements (one
  element apart) whose starts are ``row_stride`` elements apart (``method="auto"``'s row kernels). Every
  dimension but ``dim`` must merge into one row index of a uniform stride, and ``dim`` must have stride 1.
* :class:`Columns` ``(outer, length, inner, strides)``: the softmax runs along the middle axis of a 3-D view
  (``dim`` not the last one); the dimensions before ``dim`` merge into ``outer``, those after it into ``inner``,
  each with a uniform stride (the column kernel takes any strides; stride 1 on ``inner`` is the fast case).

What cannot be viewed so (dimensions that do not merge, a stride that is not a whole number of elements, a
negative stride, elements along the last dimension that are not adjacent, a zero-size dimension, a 0-D
array) is refused with a ``ValueError`` naming the argument and the reason: nothing is copied silently.
"""

from typing import NamedTuple


class Rows(NamedTuple):
    rows: int
    cols: int
    row_stride: int          # elements from one row's start to the next


class Columns(NamedTuple):
    outer: int
    length: int
    inner: int
    strides: tuple           # (outer, length, inner) strides in elements


def normalize_dim(dim, ndim):
    """``dim`` in ``range(ndim)`` (negative counts from the end); ValueError if it is out of range."""
    if dim.__class__ is int and -ndim <= dim < ndim:   # the common case, first (it runs on every call)
        return dim % ndim
    if isinstance(dim, bool) or not hasattr(dim, "__index__"):
        raise ValueError(f"dim: expected an integer, got {dim!r}")
    dim = dim.__index__()
    if not -ndim <= dim < ndim:
        raise ValueError(f"dim: {dim} is out of range for a {ndim}-D array (expected {-ndim} to {ndim - 1})")
    return dim % ndim


def check_shape(shape, what):
    """At least one dimension, none of them empty."""
    if len(shape) == 0:
        raise ValueError(f"{what}: a 0-D array (a scalar) has no dimension to take the softmax along")
    if 0 in shape:
        raise ValueError(f"{what}: shape {tuple(shape)} has a zero-size dimension: softmax needs at least one "
                         "element along every dimension")


def element_strides(shape, strides, itemsize, what):
    """Byte strides as element strides; refuses negative strides and strides of part of an element.
    ``strides`` None: C-contiguous. An extent-1 dimension's stride is never used (taken as 0)."""
    if strides is None:
        found, step = [], 1
        for extent in reversed(shape):
            found.append(step)
            step *= extent
        return tuple(reversed(found))
    found = []
    for extent, stride in zip(shape, strides, strict=True):
        if extent == 1:
            found.append(0)
            continue
        if stride < 0:
            raise ValueError(f"{what}: negative stride {stride} bytes (a reversed view) is not supported: pass a "
                             "copy with positive strides")
        if stride % itemsize:
            raise ValueError(f"{what}: stride {stride} bytes is not a whole number of {itemsize}-byte elements")
        found.append(stride // itemsize)
    return tuple(found)


def merge(shape, strides):
    """``(extent, stride)`` of dimensions merged into one index of a uniform stride, in their order; None when
    they do not merge. Extent-1 dimensions are ignored; no dimension of extent above 1: ``(1, None)``."""
    extent, stride = 1, None
    for n, s in zip(shape, strides, strict=True):
        if n == 1:
            continue
        if stride is not None and stride != s * n:
            return None
        extent, stride = extent * n, s
    return extent, stride


def rows_plan(shape, strides, dim, what):
    """The :class:`Rows` plan (element ``strides``), or a string saying why there is none."""
    cols = shape[dim]
    if cols > 1 and strides[dim] != 1:
        return (f"{what}: the elements along dim {dim} are {strides[dim]} elements apart; the softmax along "
                "the last dimension needs them adjacent (stride 1): pass a contiguous copy")
    others = [n for i, n in enumerate(shape) if i != dim]
    merged = merge(others, [s for i, s in enumerate(strides) if i != dim])
    if merged is None:
        return (f"{what}: the dimensions other than dim {dim} (shape {tuple(shape)}, strides {tuple(strides)} "
                "elements) do not merge into one row index of a uniform stride: pass a contiguous copy")
    rows, row_stride = merged
    return Rows(rows, cols, cols if row_stride is None else row_stride)


def columns_plan(shape, strides, dim, what):
    """The :class:`Columns` plan (element ``strides``) for ``dim`` before the last; ValueError if there is none."""
    outer = merge(shape[:dim], strides[:dim])
    inner = merge(shape[dim + 1:], strides[dim + 1:])
    if outer is None or inner is None:
        part = "before" if outer is None else "after"
        raise ValueError(f"{what}: the dimensions {part} dim {dim} (shape {tuple(shape)}, strides {tuple(strides)} "
                         "elements) do not merge into one index of a uniform stride: pass a contiguous copy")
    length = shape[dim]
    inner_stride = 1 if inner[1] is None else inner[1]
    outer_stride = length * inner[0] if outer[1] is None else outer[1]
    return Columns(outer[0], length, inner[0], (outer_stride, strides[dim], inner_stride))


def plan_layout(shape, strides, itemsize, dim, what="x"):
    """The plan for one array: :class:`Rows` where the softmax axis is adjacent in memory and the other
    dimensions merge, else (``dim`` not last) :class:`Columns`. ``strides`` in bytes (None: C-contiguous)."""
    check_shape(shape, what)
    dim = normalize_dim(dim, len(shape))
    found = element_strides(shape, strides, itemsize, what)
    plan = rows_plan(shape, found, dim, what)
    if not isinstance(plan, str):
        return plan
    if dim == len(shape) - 1:
        raise ValueError(plan)
    return columns_plan(shape, found, dim, what)


def plan_pair(shape, dim, x, out):
    """The plans of an input and its output of one ``shape``: both :class:`Rows` or both :class:`Columns` (the
    kernel walks both the same way). ``x``, ``out``: ``(strides in bytes or None, itemsize)`` each."""
    x_plan = plan_layout(shape, x[0], x[1], dim, "x")
    out_plan = plan_layout(shape, out[0], out[1], dim, "out")
    if type(x_plan) is type(out_plan):
        return x_plan, out_plan
    dim = normalize_dim(dim, len(shape))
    return (columns_plan(shape, element_strides(shape, x[0], x[1], "x"), dim, "x"),
            columns_plan(shape, element_strides(shape, out[0], out[1], "out"), dim, "out"))


def self_overlapping(plan):
    """Whether two elements of a plan share an address (rows closer than their length, a zero stride):
    such an ``out`` would be written twice at once."""
    if isinstance(plan, Rows):
        return plan.rows > 1 and plan.row_stride < plan.cols
    span = 1
    for stride, extent in sorted((s, n) for s, n in zip(plan.strides, plan[:3], strict=True) if n > 1):
        if stride < span:   # innermost first: each stride must step over everything inside it
            return True
        span += stride * (extent - 1)
    return False
