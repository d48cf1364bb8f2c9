"""The plain copy kernels that ``bench perf --copy-kernels`` times, on the CPU: their sm_90 PTX moves 16-byte
quads, every load of a step before its first store, nothing in local memory (no GPU needed)."""

import re

import pytest

from numba_softmax.kernels.stream_copy import SWEEP, parse, stream_copy_kernel
from numba_softmax.ptx import kernel_ptx, ptxas_resources

SIGNATURE = "void(float32[:, ::1], float32[:, ::1])"


@pytest.mark.parametrize("threads,unroll", sorted({parse(name)[:2] for name in SWEEP}))
def test_each_copy_moves_quads_loads_first_without_local_memory(threads, unroll):
    ptx = kernel_ptx(stream_copy_kernel(threads, unroll), SIGNATURE)
    ops = re.findall(r"\b(ld\.global\.v4\.f32|st\.global\.v4\.f32|ld\.local|st\.local)\b", ptx)
    assert "ld.local" not in ops and "st.local" not in ops
    # the loop may be peeled or unrolled by the compiler, but each step is U 16-byte loads, then U stores
    steps = "".join("L" if op.startswith("ld") else "S" for op in ops)
    assert re.fullmatch(f"(L{{{unroll}}}S{{{unroll}}})+", steps), steps
    resources = ptxas_resources(ptx)
    if resources is None:
        pytest.skip("ptxas is not installed: spills not checked")
    assert resources["spill_store_bytes"] == 0 and resources["stack_frame_bytes"] == 0, resources
