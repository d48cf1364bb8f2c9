"""Performance builds contain no trace code; trace builds do (sm_90 PTX, no GPU needed).

Compiled in a child process with the real CUDA target, like test_tiled_ptx.py.
"""

import re
import textwrap

import pytest
from backends import run_on_the_real_target

_CHILD = textwrap.dedent("""
    import json, sys
    from numba_softmax.kernels import tiles
    from numba_softmax.kernels.persistent import SIGNATURES, persistent_tiles
    from numba_softmax.kernels.persistent.diagnostics import persistent_trace_kernel
    from numba_softmax.ptx import kernel_ptx
    out = {}
    perf = (tiles.tile_summary_kernel, tiles.row_combine_kernel, tiles.tile_normalize_kernel)
    names = ("tile_summary_kernel", "row_combine_kernel", "tile_normalize_kernel")
    for name, perf_k, trace_k in zip(names, perf, tiles.separate_trace_kernels()):
        out[name] = [kernel_ptx(perf_k, tiles.SIGNATURES[name]), kernel_ptx(trace_k, tiles.SIGNATURES[name])]
    sig = SIGNATURES["persistent_tiles"]
    out["persistent_tiles"] = [kernel_ptx(persistent_tiles, sig), kernel_ptx(persistent_trace_kernel(), sig)]
    json.dump(out, open(sys.argv[1], "w"))
""")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    return run_on_the_real_target(_CHILD, tmp_path_factory.mktemp("ptx"))


def _trace_param_uses(ptx):
    """Instructions that touch the last kernel argument (the 2-D trace array: its pointer and two extents in
    the launch layer's slim entry)."""
    params = re.findall(r"\.param \.\w+ (\S+?_param_\d+)", ptx)
    trace_params = set(params[-3:])
    body = ptx[ptx.index("{"):]
    return [line for line in body.splitlines() if any(p in line for p in trace_params)]


KERNELS = ("tile_summary_kernel", "row_combine_kernel", "tile_normalize_kernel", "persistent_tiles")


@pytest.mark.parametrize("name", KERNELS)
def test_performance_build_has_no_trace_code(builds, name):
    perf, _ = builds[name]
    assert "%globaltimer" not in perf and "%smid" not in perf
    assert _trace_param_uses(perf) == []


@pytest.mark.parametrize("name", KERNELS)
def test_trace_build_reads_the_clock_and_writes_the_trace(builds, name):
    _, trace = builds[name]
    assert "%globaltimer" in trace and "%smid" in trace
    assert any("ld.param" in line for line in _trace_param_uses(trace))
    assert "atom.global.add.u64" in trace or "red.global.add.u64" in trace  # visit counter
