"""Every registered kernel's sm_90 PTX obeys the numerics policy (no GPU needed)."""

import pytest

from controls import contracted_scale_add
from numba_softmax.kernels.registry import KERNELS
from numba_softmax.numerics import host_block_reduce
from numba_softmax.ptx import check_policy, kernel_ptx, ptxas_resources

_ptx_cache = {}


def ptx_of(name):
    if name not in _ptx_cache:
        dispatcher, signature = KERNELS[name]
        _ptx_cache[name] = kernel_ptx(dispatcher, signature)
    return _ptx_cache[name]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_obeys_policy(name):
    report = check_policy(name, ptx_of(name))
    assert report.ok, report.violations
    assert not report.local_memory


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_is_declared_fastmath_false(name):
    dispatcher, _ = KERNELS[name]
    assert dispatcher.targetoptions.get("fastmath") is False


def test_fused_kernel_arithmetic_is_what_the_policy_says():
    report = check_policy("fused_row_softmax", ptx_of("fused_row_softmax"))
    assert report.expf_count == 16          # one expf per register value, unrolled
    assert report.fma_count == 4 * 16       # only expf's own fmas
    assert report.rounded_arith["sub"] == 16
    assert report.divisions == {"div.rn.f32": 16}


def test_fused_kernel_keeps_its_values_in_registers():
    resources = ptxas_resources(ptx_of("fused_row_softmax"))
    if resources is None:
        pytest.skip("ptxas not installed: register/stack figures unavailable")
    assert resources["stack_frame_bytes"] == 0
    assert resources["spill_store_bytes"] == 0 and resources["spill_load_bytes"] == 0


def test_negative_control_contracted_fma_is_rejected():
    ptx = kernel_ptx(contracted_scale_add, "void(float32[::1], float32[::1])")
    report = check_policy("contracted_scale_add", ptx)
    assert not report.ok
    assert any("contraction" in v for v in report.violations)


def test_negative_control_ftz_and_approx_are_rejected():
    fake = "\tdiv.approx.ftz.f32 \t%f3, %f1, %f2;\n\tmul.f32 \t%f4, %f3, %f3;\n"
    report = check_policy("handwritten", fake)
    text = " ".join(report.violations)
    assert "flush-to-zero" in text and "approximate" in text and "div.rn.f32" in text
    assert "without rounding mode" in text


def test_host_model_of_block_reduction_order():
    import numpy as np
    values = np.random.default_rng(0).standard_normal(256).astype(np.float32)
    assert host_block_reduce(values, True) == values.max()
    # sequential summation generally differs in the last bits; the tree is the contract
    tree = host_block_reduce(values, False)
    assert abs(float(tree) - float(values.astype(np.float64).sum())) < 1e-4
