"""The check every registered kernel build goes through on the CPU (tests/cpu/test_*_kernels_ptx.py): the numerics
policy in its sm_90 PTX, no local memory in the PTX, ``fastmath=False``, and under ptxas at most 64 registers
(the launch bounds: >= 1024 resident threads per SM) with no spill beyond the build's declared budget."""

import pytest

from numba_softmax.ptx import check_policy, ptxas_resources


def check_build(name, ptx, dispatcher, spill_budget):
    """Assert the policy, registers and spills of build ``name`` (skips the ptxas part without ptxas)."""
    report = check_policy(name, ptx)
    assert report.ok, report.violations
    assert not report.local_memory
    assert dispatcher.targetoptions.get("fastmath") is False
    resources = ptxas_resources(ptx)
    if resources is None:
        pytest.skip("ptxas is not installed: registers and spills not checked")
    assert "error" not in resources, resources
    assert resources["registers"] <= 64, resources
    assert resources["spill_store_bytes"] <= spill_budget, resources
    assert resources["spill_load_bytes"] <= 8 * spill_budget, resources
    if not spill_budget:
        assert resources["stack_frame_bytes"] == 0, resources
