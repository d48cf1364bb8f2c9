"""The kernels of training on the CPU (no GPU needed): the log_softmax forward builds and the backward builds of
softmax and log_softmax obey the numerics policy in their sm_90 PTX (libdevice ``logf`` once per thread in a
log_softmax forward, nothing contracted), hold their values in registers within the launch bounds, do the
arithmetic their formulas say, and the softmax PTX did not change for them; the registry holds them apart."""

import re

import pytest

from numba_softmax.kernels.auto_backward import (BACKWARD_PREFIXES, backward_geometry, backward_kernel,
                                                 backward_signature)
from numba_softmax.kernels.auto_backward_controls import dropped_sum_kernel, own_sum_kernel
from numba_softmax.kernels.auto_geometry import AUTO_TABLE, NARROW_GEOMETRY, Geometry, spill_budget
from numba_softmax.kernels.auto_launch import auto_kernel, log_geometry, signature
from numba_softmax.kernels.registry import AUTO_KERNELS, COLUMN_KERNELS, GRADIENT_KERNELS, KERNELS
from numba_softmax.ptx import check_policy, kernel_ptx, log_expansions
from ptx_checks import check_build, parallel_ptx_getter

ptx_of = parallel_ptx_getter("numba_softmax.kernels.registry:GRADIENT_KERNELS")
F32 = ("float32", "float32")


def _geometry_of(name):
    """(Geometry, float64?) of a registered build name."""
    match = re.search(r"((?:rows|long|narrow|packed|groups|staged)_l\d+_q\d+|cluster_l\d+_q\d+_c\d+)", name)
    return Geometry.parse(match.group(1)), "_f64" in name


@pytest.mark.parametrize("name", sorted(GRADIENT_KERNELS))
def test_build_obeys_the_numerics_policy_and_holds_its_values_in_registers(name):
    geometry, float64 = _geometry_of(name)
    check_build(name, ptx_of(name), GRADIENT_KERNELS[name][0], spill_budget(geometry, float64))


@pytest.mark.parametrize("form", ["softmax", "log_softmax"])
@pytest.mark.parametrize("geometry", ["staged_l1_q1", "warpstaged_l1_q1"])
def test_the_staged_candidate_backward_obeys_the_numerics_policy_within_its_spill_budget(geometry, form):
    """The staged candidates' float32 backward, timed by ``bench perf`` (not in the table, not registered)."""
    kernel = backward_kernel(geometry, "float32", form)
    check_build(kernel.py_func.__name__, kernel_ptx(kernel, backward_signature("float32")), kernel,
                spill_budget(geometry))


def test_a_log_softmax_row_is_one_exp_per_value_and_one_log():
    """rows_l32_q2: 8 values and ceil(6 edges / 32) = 1 edge slot a thread; the edge's exp is taken once for the
    sum (the log_softmax writes x - m - log z: no exp at the store, no division)."""
    name = "auto_log_rows_l32_q2"
    report = check_policy(name, ptx_of(name))
    assert log_expansions(name) == 1 and report.ok
    assert report.expf_count == 8 + 1 and report.divisions == {}
    assert report.fma_count == 4 * report.expf_count + 12  # 12: the logf expansion's own


@pytest.mark.parametrize("name, exps", [("auto_backward_rows_l32_q2", 0), ("auto_log_backward_rows_l32_q2", 8 + 1)])
def test_a_backward_row_does_what_its_formula_says(name, exps):
    """softmax: one multiply per term of the sum and two operations per output, no exp; log_softmax: one exp per
    output (its 8 values and 1 edge slot: at most 6 edge elements of float32 over 32 lanes); no division."""
    report = check_policy(name, ptx_of(name))
    assert report.ok and report.expf_count == exps and report.divisions == {}
    assert report.rounded_arith["mul"] >= 8 and report.rounded_arith["sub"] >= 8


@pytest.mark.parametrize("form, exps", [("softmax", 0), ("log_softmax", 1)])
@pytest.mark.parametrize("element_type", ["float32", "bfloat16"])
def test_a_narrow_backward_row_holds_its_values_and_does_what_its_formula_says(element_type, form, exps):
    """One thread per row: the numerics policy, registers only, and per value one term of the sum and one
    output (softmax: two multiplies, no exp; log_softmax: one exp each) in each of the row's three builds (1, 2
    and 4 values); no division."""
    geometry = NARROW_GEOMETRY
    kernel = backward_kernel(geometry, element_type, form)
    name = kernel.py_func.__name__
    ptx = kernel_ptx(kernel, backward_signature(element_type))
    check_build(name, ptx, kernel, 0)
    values = 1 + 2 + 4 * Geometry.parse(geometry).quads
    report = check_policy(name, ptx)
    assert report.expf_count == exps * values and report.divisions == {}
    assert report.rounded_arith["mul"] >= (2 if form == "softmax" else 1) * values


def test_the_log_policy_rejects_a_log_it_does_not_expect():
    """A forward softmax build's PTX checked as if it had no log is fine; a log_softmax build's PTX checked under
    a softmax name (no log expected) is rejected: its logf's fmas count as contraction."""
    assert check_policy("auto_rows_l32_q2", kernel_ptx(*AUTO_KERNELS["auto_rows_l32_q2"])).ok
    report = check_policy("auto_rows_l32_q2", ptx_of("auto_log_rows_l32_q2"))
    assert not report.ok and any("fma" in v for v in report.violations)


def test_the_softmax_builds_are_the_same_code_as_before_the_forms():
    """The form (softmax or log_softmax) is a build parameter: a softmax build of the same geometry and types
    is made by the same maker as before, and its name carries no form."""
    assert auto_kernel("rows_l32_q2", F32, False) is auto_kernel("rows_l32_q2", F32, False, "softmax")
    assert auto_kernel("rows_l32_q2").py_func.__name__ == "auto_rows_l32_q2"
    assert auto_kernel("rows_l32_q2", F32, False, "log_softmax").py_func.__name__ == "auto_log_rows_l32_q2"


def test_geometries_of_the_gradients():
    assert log_geometry("rows_l512_q8") == "rows_l512_q8"
    assert log_geometry("cluster_l512_q8_c4_s8") == log_geometry("rows_l512_q8_s8") == AUTO_TABLE[-1][1]
    assert backward_geometry(1024) == "rows_l128_q2" and backward_geometry(4096) == "rows_l256_q4"
    # A row a few columns past a limit as the forward's table (BODY_TABLE_FROM): its body fits the entry below.
    assert backward_geometry(16384) == backward_geometry(16387) == "rows_l1024_q4"
    assert backward_geometry(16388) == "cluster_l512_q4_c3" and backward_geometry(32769) == "cluster_l512_q4_c4"
    assert backward_geometry(65539) == "cluster_l512_q4_c8" and backward_geometry(65540) == "long_l1024_q4"
    assert backward_geometry(32769, "bfloat16") == "long_l1024_q4"  # 2-byte rows measured faster there
    assert backward_geometry(16391, "bfloat16") == "rows_l1024_q4" != backward_geometry(16392, "bfloat16")
    assert backward_geometry(16385, "float64") == "long_l1024_q1"
    assert backward_geometry(4096, "float64") == "rows_l1024_q1"
    assert backward_geometry(8192, "float64") == "long_l1024_q1"
    assert backward_geometry(2) == backward_geometry(4, "bfloat16") == NARROW_GEOMETRY  # as the forward's


def test_registry_holds_the_gradient_builds_apart_from_the_other_kernels():
    names = set(GRADIENT_KERNELS)
    for cols in [limit for limit, _ in AUTO_TABLE if limit is not None]:
        for prefix in BACKWARD_PREFIXES.values():
            assert f"{prefix}{backward_geometry(cols)}" in names, cols
    assert "auto_log_long_l1024_q4" in names and "auto_log_rows_l512_q8_checked" in names
    assert not names & (set(KERNELS) | set(AUTO_KERNELS) | set(COLUMN_KERNELS))
    assert not [name for name in names if "control" in name]


def test_the_negative_control_obeys_the_policy_too():
    """It is wrong in its formula (no sum term), not in its arithmetic: only the oracle rejects it
    (tests/kernels/test_auto_gradients.py)."""
    control = kernel_ptx(dropped_sum_kernel("rows_l32_q2"), backward_signature("float32"))
    assert check_policy("control", control).ok
    assert kernel_ptx(backward_kernel("rows_l32_q2"), backward_signature("float32")) != control
    own_sum = kernel_ptx(own_sum_kernel("cluster_l512_q4_c3"), backward_signature("float32"))
    assert check_policy("control", own_sum).ok
    assert kernel_ptx(backward_kernel("cluster_l512_q4_c3"), backward_signature("float32")) != own_sum


def test_a_log_softmax_build_takes_the_forward_signature():
    assert GRADIENT_KERNELS["auto_log_rows_l8_q1_checked"][1] == signature(F32, True)
