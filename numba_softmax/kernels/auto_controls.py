"""Negative controls and diagnostic builds of ``method="auto"``'s kernels: never in the table, never registered.

Each is the shipped row body (:func:`.auto_rows.make_rows_body`) with one of its parts
(:class:`.auto_parts.RowParts`) swapped, so the shipped builds carry no control or diagnostic switch:

* :func:`cluster_control_kernel` (tests only): a cluster geometry whose cluster stage keeps each CTA's own max
  and sum, so each CTA normalizes its own columns; the oracle must reject it (each row sums to about the
  number of CTAs).
* :func:`shared_span_control_kernel` (tests only): a ``_s{S}`` geometry whose bulk copy reads the CTA's
  register columns instead of the shared span's; every row still sums to 1, only the element-wise comparison
  against float64 rejects it (its PTX differs from the real build's only by the span's offset).
* :func:`fast_math_kernel`: a ``*_fastmath`` geometry, Triton's approximate exponential and division instead
  of the policy's, to measure what the numerics policy costs (``bench perf --auto-geometries``).

All are 16-byte builds of one row per block (or cluster) and GPU only, except the fast-math builds, which take
the rows and cluster geometries in every build the shipped ones have (the simulator runs the policy there).
"""

from dataclasses import replace

from numba import cuda

from ..numerics import KERNEL_OPTIONS, approx_div, approx_exp
from .auto_geometry import Geometry
from .auto_parts import POLICY_PARTS, make_cluster_publish
from .auto_rows import bounded_build, build_name, make_rows_body


def make_own_result_fold(ctas):
    """A cluster stage that publishes each CTA's result and then keeps its own (never reads the others')."""
    publish = make_cluster_publish(ctas)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def own_result(value, slots, rank, is_max):
        publish(value, slots, rank)
        return value

    return own_result


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def span_from_registers(cta_first, span_first):
    """The wrong first column for the bulk copy: the CTA's first register column."""
    return cta_first


NO_EXCHANGE_PARTS = replace(POLICY_PARTS, cluster_fold=make_own_result_fold)
SPAN_FROM_REGISTERS_PARTS = replace(POLICY_PARTS, span_source=span_from_registers)
#: NOT the policy: the approximate exponential and division of the diagnostic builds.
FAST_MATH_PARTS = replace(POLICY_PARTS, exp=approx_exp, div=approx_div)


def _control_kernel(geometry, parts, suffix):
    """The 16-byte unchecked build of ``geometry`` with ``parts``, named ``auto_<geometry>_v4<suffix>``."""
    body, block = make_rows_body(geometry, True, False, parts)
    return bounded_build(body, block, build_name(geometry, True, False) + suffix, False)


def cluster_control_kernel(geometry="cluster_l512_q8_c2"):
    """Negative control: a cluster geometry whose reductions keep each CTA's own max and sum."""
    geometry = Geometry.parse(geometry)
    if geometry.kind != "cluster":
        raise ValueError(f"geometry {geometry.name}: the exchange control needs a cluster geometry")
    return _control_kernel(geometry, NO_EXCHANGE_PARTS, "_control_no_exchange")


def shared_span_control_kernel(geometry="rows_l512_q8_s8"):
    """Negative control: a ``_s{S}`` geometry whose bulk copy fills the shared span from the wrong columns."""
    geometry = Geometry.parse(geometry)
    if not geometry.shared_quads:
        raise ValueError(f"geometry {geometry.name}: the span control needs quads in shared memory (_s<S>)")
    return _control_kernel(geometry, SPAN_FROM_REGISTERS_PARTS, "_control_span_from_registers")


def fast_math_kernel(geometry, vector, checked):
    """The diagnostic build of a ``*_fastmath`` geometry (:attr:`.auto_geometry.Geometry.fast_math`)."""
    if not geometry.fast_math:
        raise ValueError(f"geometry {geometry.name}: not a fast-math geometry (name suffix _fastmath)")
    body, block = make_rows_body(geometry, vector, checked, FAST_MATH_PARTS)
    return bounded_build(body, block, build_name(geometry, vector, checked), checked)
