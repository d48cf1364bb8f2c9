"""Every registered kernel's sm_90 PTX obeys the numerics policy (no GPU needed)."""

import pytest

from controls import contracted_scale_add
from numba_softmax.kernels.registry import KERNELS
from numba_softmax.numerics import host_block_reduce
from numba_softmax.ptx import check_policy, instruction_histogram, kernel_ptx, ptx_getter, ptxas_resources

ptx_of = ptx_getter(KERNELS)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_kernel_obeys_policy(name):
    report = check_policy(name, ptx_of(name))
    assert report.ok, report.violations
    assert not report.local_memory


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_every_kernel_is_declared_fastmath_false(name):
    dispatcher, _ = KERNELS[name]
    assert dispatcher.targetoptions.get("fastmath") is False


@pytest.mark.parametrize("name", ["fused_row_softmax_q4", "fused_row_softmax_q4_v4"])
def test_fused_kernel_arithmetic_is_what_the_policy_says(name):
    report = check_policy(name, ptx_of(name))
    assert report.expf_count == 16          # one expf per register value, unrolled
    assert report.fma_count == 4 * 16       # only expf's own fmas
    assert report.rounded_arith["sub"] == 16
    assert report.divisions == {"div.rn.f32": 16}


@pytest.mark.parametrize("name", ["fused_row_softmax_q4", "fused_row_softmax_q4_v4"])
def test_fused_kernel_keeps_its_values_in_registers(name):
    resources = ptxas_resources(ptx_of(name))
    if resources is None:
        pytest.skip("ptxas not installed: register/stack figures unavailable")
    assert resources["stack_frame_bytes"] == 0
    assert resources["spill_store_bytes"] == 0 and resources["spill_load_bytes"] == 0


@pytest.mark.parametrize("quads", [1, 2, 4])
def test_vector_builds_move_quads_with_16_byte_instructions(quads):
    hist = instruction_histogram(ptx_of(f"fused_row_softmax_q{quads}_v4"))
    assert hist["ld.global.v4.f32"] == quads and hist["st.global.v4.f32"] == quads
    assert hist.get("ld.global.f32", 0) == 0 and hist.get("st.global.f32", 0) == 0
    scalar = instruction_histogram(ptx_of(f"fused_row_softmax_q{quads}"))
    assert scalar["ld.global.f32"] == 4 * quads and scalar.get("ld.global.v4.f32", 0) == 0


def test_ownership_rule_covers_each_column_once_in_increasing_order():
    from numba_softmax.numerics import BLOCK_THREADS, owned_columns
    for cols in (1, 128, 781, 1024, 4096):
        owned = [owned_columns(t, cols) for t in range(BLOCK_THREADS)]
        assert sorted(c for cols_t in owned for c in cols_t) == list(range(cols))
        assert all(cols_t == sorted(cols_t) for cols_t in owned)
    assert owned_columns(1, 4096) == [4, 5, 6, 7, 1028, 1029, 1030, 1031, 2052, 2053, 2054, 2055,
                                      3076, 3077, 3078, 3079]


def test_tile_tasks_follow_the_same_rule_on_128_threads():
    from numba_softmax.kernels.tiles import MAX_TILE_ELEMENTS, TILE_THREADS, TILE_VALUES
    from numba_softmax.numerics import owned_columns
    assert (TILE_THREADS, TILE_VALUES, MAX_TILE_ELEMENTS) == (128, 8, 1024)
    assert owned_columns(1, 1024, TILE_THREADS) == [4, 5, 6, 7, 516, 517, 518, 519]
    owned = [owned_columns(t, 1000, TILE_THREADS) for t in range(TILE_THREADS)]
    assert sorted(c for cols_t in owned for c in cols_t) == list(range(1000))
    assert max(len(cols_t) for cols_t in owned) == TILE_VALUES


@pytest.mark.parametrize("threads", [0, 100, 2048])
def test_block_reductions_need_whole_warps(threads):
    from numba_softmax.numerics import block_reductions
    with pytest.raises(ValueError, match="multiple of 32"):
        block_reductions(threads)


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
