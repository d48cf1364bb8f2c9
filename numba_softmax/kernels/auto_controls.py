"""Negative controls and diagnostic builds of ``method="auto"``'s kernels: never in the table, never registered.

Each is a shipped body (:func:`.auto_rows.make_rows_body`, :func:`.auto_narrow.make_narrow_body`) with one of
its parts (:class:`.auto_parts.RowParts`, the narrow body's ``summed``) swapped, so the shipped builds carry no
control or diagnostic switch:

* :func:`cluster_control_kernel` (tests only): a cluster geometry whose cluster stage keeps each CTA's own max
  and sum, so each CTA normalizes its own columns; the oracle must reject it (each row sums to about the
  number of CTAs).
* :func:`shared_span_control_kernel` (tests only): a ``_s{S}`` geometry whose bulk copy reads the CTA's
  register columns instead of the shared span's; every row still sums to 1, only the element-wise comparison
  against float64 rejects it (its PTX differs from the real build's only by the span's offset).
* :func:`short_tail_control_kernel` (tests only): a row whose tail skips its last element (never read, never
  written, not in the sum); the oracle must reject it on every width with a tail.
* :func:`narrow_short_sum_control_kernel` (tests only): a ``narrow`` geometry whose sum leaves out the row's
  last element (:mod:`.auto_narrow`'s ``summed`` part); the oracle must reject it on every width from 2.
* :func:`fast_math_kernel`: a ``*_fastmath`` geometry, Triton's approximate exponential and division instead
  of the policy's, to measure what the numerics policy costs (``bench perf --auto-geometries``).

The cluster and span controls are GPU only (clusters, the copy engine); the short-tail control and the fast-math
builds run wherever their geometry does (the simulator runs the policy's exponential and division).
"""

from dataclasses import replace

from numba import cuda

from ..numerics import KERNEL_OPTIONS, approx_div, approx_exp
from .auto_geometry import Geometry
from .auto_narrow import make_narrow_body, make_packed_body
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


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def edges_but_last(head, cols, body_end):
    """The wrong edge count: the tail without its last element."""
    count = head + cols - body_end
    return count - 1 if cols > body_end else count


NO_EXCHANGE_PARTS = replace(POLICY_PARTS, cluster_fold=make_own_result_fold)
SHORT_TAIL_PARTS = replace(POLICY_PARTS, edge_count=edges_but_last)
SPAN_FROM_REGISTERS_PARTS = replace(POLICY_PARTS, span_source=span_from_registers)
#: NOT the policy: the approximate exponential and division of the diagnostic builds.
FAST_MATH_PARTS = replace(POLICY_PARTS, exp=approx_exp, div=approx_div)


F32 = ("float32", "float32")


def _control_kernel(geometry, parts, suffix, types=F32):
    """The unchecked build of ``geometry`` with ``parts``, named ``auto_<geometry>[_<types>]<suffix>``."""
    body, block = make_rows_body(geometry, types, False, parts)
    return bounded_build(body, block, build_name(geometry, types, False) + suffix, False)


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


def short_tail_control_kernel(geometry="rows_l32_q1", types=F32):
    """Negative control: a rows geometry whose tail skips its last element."""
    geometry = Geometry.parse(geometry)
    if geometry.kind != "rows":
        raise ValueError(f"geometry {geometry.name}: the short-tail control is a rows geometry")
    return _control_kernel(geometry, SHORT_TAIL_PARTS, "_control_short_tail", types)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def all_but_the_last_column(cols):
    """The wrong columns for the sum: the row without its last element."""
    return cols - 1


def narrow_short_sum_control_kernel(geometry="narrow_l1_q1", types=F32):
    """Negative control: a narrow or packed geometry whose sum leaves out the row's last element."""
    geometry = Geometry.parse(geometry)
    if geometry.kind != "narrow" and not geometry.packed_widths:
        raise ValueError(f"geometry {geometry.name}: the short-sum control is a narrow, packed or groups geometry")
    make_body = make_narrow_body if geometry.kind == "narrow" else make_packed_body
    body, block = make_body(geometry, types, False, summed=all_but_the_last_column)
    return bounded_build(body, block, build_name(geometry, types, False) + "_control_short_sum", False)


def fast_math_kernel(geometry, types, checked):
    """The diagnostic build of a ``*_fastmath`` geometry (:attr:`.auto_geometry.Geometry.fast_math`)."""
    if not geometry.fast_math:
        raise ValueError(f"geometry {geometry.name}: not a fast-math geometry (name suffix _fastmath)")
    body, block = make_rows_body(geometry, types, checked, FAST_MATH_PARTS)
    return bounded_build(body, block, build_name(geometry, types, checked), checked)
