"""Negative controls of the backward kernels (:mod:`.auto_backward`): deliberately wrong builds the checks must
reject. Separate builds of the shipped body with one part swapped, never a branch in the shipped kernel.

``dropped_sum``: the softmax backward without its ``sum(dy * y)`` term, ``dx = y * dy`` (the gradient of the
exponentials alone, a classic slip): the oracle check of the kernel tests must fail on it.

``own_sum`` (GPU only): a cluster backward whose CTAs each keep their own block's sum instead of the row's (the
cluster exchange skipped): every CTA's gradient uses a partial sum, which the oracle check must reject.
"""

from numba import cuda

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS
from .auto_backward import GradientForm, backward_launches, gradient_form, make_backward_kernel
from .auto_controls import make_own_result_fold
from .auto_geometry import Geometry
from .elements import element_io

_BUILDS = {}


def dropped_sum_kernel(geometry, element_type="float32"):
    """The softmax backward of ``geometry`` whose gradient ignores the row sum: ``dx = y * dy``."""
    geometry = Geometry.parse(geometry) if isinstance(geometry, str) else geometry
    key = (geometry, element_type)
    if key not in _BUILDS:
        A = element_io(element_type, element_type).arith
        MUL = A.mul

        @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
        def grad_without_sum(y, g, s):
            return MUL(y, g)

        wrong = GradientForm("softmax", gradient_form("softmax", A).term, grad_without_sum)
        _BUILDS[key] = make_backward_kernel(geometry, element_type, "softmax", wrong,
                                            name=f"control_backward_dropped_sum_{geometry.name}")
    return _BUILDS[key]


def own_sum_kernel(geometry, element_type="float32", form="softmax"):
    """The backward of a cluster ``geometry`` whose CTAs each keep their own block's sum."""
    geometry = Geometry.parse(geometry) if isinstance(geometry, str) else geometry
    if geometry.kind != "cluster":
        raise ValueError(f"geometry {geometry.name}: the own-sum control needs a cluster geometry")
    key = (geometry, element_type, form, "own_sum")
    if key not in _BUILDS:
        _BUILDS[key] = make_backward_kernel(geometry, element_type, form, name=f"control_backward_own_sum_"
                                            f"{geometry.name}", cluster_fold=make_own_result_fold)
    return _BUILDS[key]


def _control_launches(prefix, kernel_of, y, dy, dx, element_type, form, geometry):
    """:func:`.auto_backward.backward_launches`'s launch with ``kernel_of(geometry name)`` in its place."""
    (launch,) = backward_launches(y, dy, dx, element_type, form, geometry)
    geometry = launch.name.split("backward_", 1)[1]
    return [KernelLaunch(f"{prefix}{geometry}", kernel_of(geometry), launch.grid, launch.block, launch.args,
                         cluster=launch.cluster)]


def dropped_sum_launches(y, dy, dx, element_type="float32", form="softmax", geometry=None):
    """:func:`.auto_backward.backward_launches`'s launch with the dropped-sum control in place of the shipped
    kernel."""
    if form != "softmax":
        raise ValueError("the dropped-sum control is a softmax backward")
    return _control_launches("control_backward_dropped_sum_", lambda g: dropped_sum_kernel(g, element_type),
                             y, dy, dx, element_type, form, geometry)


def own_sum_launches(y, dy, dx, element_type="float32", form="softmax", geometry=None):
    """:func:`.auto_backward.backward_launches`'s launch (a cluster geometry) with the own-sum control in place of
    the shipped kernel."""
    return _control_launches("control_backward_own_sum_", lambda g: own_sum_kernel(g, element_type, form),
                             y, dy, dx, element_type, form, geometry)
