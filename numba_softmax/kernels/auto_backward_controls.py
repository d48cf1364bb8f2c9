"""Negative controls of the backward kernels (:mod:`.auto_backward`): deliberately wrong builds the checks must
reject. Separate builds of the shipped body with one part swapped, never a branch in the shipped kernel.

``dropped_sum``: the softmax backward without its ``sum(dy * y)`` term, ``dx = y * dy`` (the gradient of the
exponentials alone, a classic slip): the oracle check of the kernel tests must fail on it.
"""

from numba import cuda

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS
from .auto_backward import GradientForm, backward_launches, gradient_form, make_backward_kernel
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


def dropped_sum_launches(y, dy, dx, element_type="float32", form="softmax", geometry=None):
    """:func:`.auto_backward.backward_launches`'s launch with the control's kernel in place of the shipped one."""
    if form != "softmax":
        raise ValueError("the dropped-sum control is a softmax backward")
    (launch,) = backward_launches(y, dy, dx, element_type, form, geometry)
    geometry = launch.name.removeprefix("auto_backward_")
    return [KernelLaunch(f"control_backward_dropped_sum_{geometry}", dropped_sum_kernel(geometry, element_type),
                         launch.grid, launch.block, launch.args)]
