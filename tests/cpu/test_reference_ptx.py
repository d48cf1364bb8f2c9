"""Numba's PTX beside nvcc's (reference_cu/): same arithmetic, same policy (no GPU needed).

The comparison runs as ``python -m bench ptx --compare`` in a child process (the real CUDA
target, whether or not this pytest process imported numba in simulator mode) and is read
back from its ``compare.json``. Needs nvcc (or a current ``reference_cu/build``); skipped
with the reason otherwise.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from numba_softmax.ptx_read import (arithmetic_tokens, contraction_candidates, extract_entry, ordering_tokens,
                             parse_instructions)
from bench.ptx_report import compare_ptx
from bench.reference_build import (BUILD_DIR, MODULES, NVCC_FLAGS, REFERENCE_DIR, find_nvcc, nvcc_flags,
                                   stale_reason)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NVCC = find_nvcc()
HAVE_BUILD = stale_reason(BUILD_DIR) is None
needs_reference = pytest.mark.skipif(
    NVCC is None and not HAVE_BUILD,
    reason="nvcc not found ($NVCC, PATH, /usr/local/cuda/bin) and no current reference_cu/build: "
           "the nvcc reference kernels cannot be built here")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found: cannot compile the negative control")

#: Experiment A kernels: the four stages and every fused build (names as registered).
STAGES = ("row_max_stage", "exp_stage", "row_sum_stage", "divide_stage")


def _is_experiment_a(name):
    return name in STAGES or name.startswith("fused_row_softmax")


@pytest.fixture(scope="module")
def comparison(tmp_path_factory, reference_build_dir):
    out = tmp_path_factory.mktemp("ptx-compare")
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    proc = subprocess.run([sys.executable, "-m", "bench", "ptx", "--compare", "--out", str(out),
                           "--build-dir", reference_build_dir],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    report_path = out / "compare.json"
    assert report_path.exists(), f"no compare.json (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    with open(report_path) as handle:
        report = json.load(handle)
    registered = subprocess.run(
        [sys.executable, "-c", "import json; from numba_softmax.kernels.registry import KERNELS; "
                               "print(json.dumps(sorted(KERNELS)))"],
        cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    return {"proc": proc, "out": out, "report": report,
            "kernels": {k["kernel"]: k for k in report["kernels"]}, "registered": json.loads(registered)}


@needs_reference
def test_every_registered_kernel_is_compared(comparison):
    assert comparison["proc"].returncode == 0, comparison["proc"].stdout + comparison["proc"].stderr
    assert sorted(comparison["kernels"]) == comparison["registered"]
    for name in comparison["registered"]:
        for suffix in ("numba.ptx", "nvcc.ptx", "compare.md"):
            assert (comparison["out"] / f"{name}.{suffix}").exists(), (name, suffix)
    summary = (comparison["out"] / "compare_summary.md").read_text()
    assert "Kernel name mapping" in summary and "identical arithmetic" in summary


@needs_reference
def test_experiment_a_arithmetic_is_identical(comparison):
    names = [n for n in comparison["registered"] if _is_experiment_a(n)]
    assert set(STAGES) <= set(names) and any(n.startswith("fused_row_softmax") for n in names)
    for name in names:
        k = comparison["kernels"][name]
        assert k["arithmetic_identical"], (
            f"{name}: {k['verdict']}\n" + "\n".join(k["arithmetic_differences"])
            + f"\nsee {comparison['out'] / (name + '.compare.md')}")
        assert k["verdict"] == "identical arithmetic"


@needs_reference
def test_experiment_b_arithmetic_is_identical(comparison):
    for name, k in comparison["kernels"].items():
        if not _is_experiment_a(name):
            # The persistent kernel's modes are code paths the two compilers may lay out in another
            # order: whole runs placed elsewhere, each run identical (bench.ptx_report.moved_runs).
            assert k["arithmetic_identical"] or k["arithmetic_moved_runs"], (
                f"{name}: {k['verdict']}\n" + "\n".join(k["arithmetic_differences"]))


@needs_reference
def test_queue_protocol_uses_the_same_memory_operations(comparison):
    """Global atomics, acquire/release/relaxed accesses, fences and nanosleeps: the same
    multiset on both sides (the text order may differ only by basic-block placement)."""
    for name, k in comparison["kernels"].items():
        assert k["ordering_same_operations"], f"{name}: {k['ordering_verdict']}\n" + "\n".join(
            k["ordering_differences"])
    persistent = comparison["kernels"]["persistent_tiles"]
    ops = " ".join(persistent["nvcc_ordering"])
    for op in ("ld.acquire.gpu.global.u32", "ld.relaxed.gpu.global.u32", "st.relaxed.gpu.global.u32",
               "fence.acq_rel.gpu",
               "atom.acq_rel.gpu.global.add.u32", "atom.release.gpu.global.add.u32", "nanosleep"):
        assert op in ops, op


@needs_reference
def test_nvcc_ptx_obeys_the_same_policy(comparison):
    for name, k in comparison["kernels"].items():
        policy = k["nvcc_policy"]
        assert policy["ok"], f"{name} (nvcc): {policy['violations']}"
        assert not policy["local_memory"], f"{name} (nvcc) uses local memory"
        # --fmad=false: nvcc writes every add/sub/mul with .rn, expf's own included.
        assert sum(policy["unrounded_arith"].values()) == 0, (name, policy["unrounded_arith"])
        assert policy["fma_count"] == 4 * policy["expf_count"], name
        assert k["numba_policy"]["ok"], f"{name} (Numba): {k['numba_policy']['violations']}"


@needs_reference
def test_the_only_normalization_is_justified(comparison):
    """Numba's unqualified expf add/mul are read as .rn only where no fusable pair exists."""
    for name, k in comparison["kernels"].items():
        assert k["contraction_candidates"] == {"numba": [], "nvcc": []}, (name, k["contraction_candidates"])
        policy = k["numba_policy"]
        # Exactly expf's own unqualified add and mul, nothing of ours.
        assert policy["unrounded_arith"] == {"add": policy["expf_count"], "sub": 0, "mul": policy["expf_count"]}


#: Kernels that run the warp-level row combine B: its sequential fold broadcasts each
#: lane's term with an indexed shuffle (``shfl.sync.idx``); no other kernel may have one.
ROW_COMBINE_KERNELS = {"row_combine_kernel", "persistent_tiles"}


@needs_reference
def test_reductions_use_the_same_butterfly(comparison):
    for name, k in comparison["kernels"].items():
        shuffles = [t for t in k["nvcc_arithmetic"] if t.startswith("shfl")]
        butterfly = [t for t in shuffles if t.startswith("shfl.sync.bfly")]
        offsets = [t.split("offset ")[1].rstrip("]") for t in butterfly]
        assert len(offsets) % 5 == 0, (name, offsets)
        assert offsets == ["16", "8", "4", "2", "1"] * (len(offsets) // 5), (name, offsets)
        broadcasts = [t for t in shuffles if t not in butterfly]
        assert all(t.startswith("shfl.sync.idx") for t in broadcasts), (name, broadcasts)
        assert bool(broadcasts) == (name in ROW_COMBINE_KERNELS), (name, broadcasts)
        numba_shuffles = [t for t in k["numba_arithmetic"] if t.startswith("shfl")]
        if k["arithmetic_moved_runs"]:  # code paths laid out in another order: the same shuffles
            assert sorted(shuffles) == sorted(numba_shuffles), name
        else:
            assert shuffles == numba_shuffles, name


@needs_reference
def test_build_manifest_records_the_policy_flags(reference_build_dir):
    from bench.reference_build import ensure_built
    build = ensure_built(reference_build_dir)
    flags = build.manifest["flags"]
    assert flags == nvcc_flags()
    for flag in ("--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true", "-arch=sm_90"):
        assert flag in flags
    assert not any("fast_math" in f or "fast-math" in f for f in flags)
    assert set(NVCC_FLAGS) <= set(flags)
    for module in MODULES:
        assert os.path.getsize(build.cubin[module]) > 0 and os.path.getsize(build.ptx[module]) > 0
    for entry, res in build.resources().items():
        assert res["stack_frame_bytes"] == 0 and res["spill_store_bytes"] == 0, (entry, res)


# ---- the comparison has teeth ---------------------------------------------------------------

_PTX = """
.visible .entry k(
	.param .u64 k_param_0
)
{
	mov.u32 	%r1, 16;
	mov.u32 	%r2, 8;
	shfl.sync.bfly.b32 	%r3|%p1, %r0, %r1, 31, -1;
	mov.f32 	%f9, 0f3F000000;
	fma.rn.f32 	%f3, %f1, %f9, %f2;
	shfl.sync.bfly.b32 	%r4|%p2, %r3, %r2, 31, -1;
	MULADD
	div.rn.f32 	%f6, %f5, %f4;
	ret;
}
"""


def _kernel(muladd):
    return _PTX.replace("MULADD", muladd)


def test_identical_text_is_identical_arithmetic():
    ptx = _kernel("mul.rn.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    cmp = compare_ptx("k", ptx, ptx, "k", "k.cu")
    assert cmp.arithmetic_identical and cmp.verdict == "identical arithmetic"
    assert cmp.nvcc_arithmetic[0] == "shfl.sync.bfly.b32 [offset 16]"
    assert "fma.rn.f32 [0F3F000000]" in cmp.nvcc_arithmetic


def test_swapped_butterfly_offsets_are_a_difference():
    ptx = _kernel("mul.rn.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    swapped = ptx.replace("%r1, 16;", "%r1, 1;")
    cmp = compare_ptx("k", ptx, swapped, "k", "k.cu")
    assert not cmp.arithmetic_identical
    assert any("offset 16" in d and "offset 1]" in d for d in cmp.arithmetic_differences)


def test_a_fusable_pair_is_not_normalized():
    numba = _kernel("mul.f32 \t%f4, %f3, %f3;\n\tadd.f32 \t%f5, %f4, %f1;")
    nvcc = _kernel("mul.rn.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    assert contraction_candidates(parse_instructions(numba)) == ["add.f32 \t%f5, %f4, %f1"]
    cmp = compare_ptx("k", numba, nvcc, "k", "k.cu")
    assert not cmp.arithmetic_identical
    assert "add.f32" in cmp.numba_arithmetic


def test_an_unfusable_plain_op_is_read_as_rn():
    # expf's pattern: the plain mul feeds a .rn add (which ptxas never fuses).
    numba = _kernel("mul.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    nvcc = _kernel("mul.rn.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    tokens, rewritten = arithmetic_tokens(parse_instructions(numba), make_rounding_explicit=True)
    assert rewritten == 1 and "mul.rn.f32" in tokens
    cmp = compare_ptx("k", numba, nvcc, "k", "k.cu")
    assert cmp.arithmetic_identical and any("default .rn" in n for n in cmp.notes)


def test_a_fused_multiply_add_is_a_difference():
    numba = _kernel("mul.rn.f32 \t%f4, %f3, %f3;\n\tadd.rn.f32 \t%f5, %f4, %f1;")
    nvcc = _kernel("fma.rn.f32 \t%f5, %f3, %f3, %f1;")
    cmp = compare_ptx("k", numba, nvcc, "k", "k.cu")
    assert not cmp.arithmetic_identical
    assert not cmp.nvcc_policy["ok"]  # one fma more than expf accounts for


def test_a_different_claim_protocol_is_a_difference():
    """A CAS claim where the other side has a ticket (atomicAdd): the ordering check objects."""
    body = ("atom.global.add.u32 \t%r5, [%rd1], 1;\n\tld.acquire.gpu.global.u32 %r6, [%rd2];\n\t"
            "st.release.gpu.global.u32 [%rd2], %r6;")
    ptx = _kernel(body)
    cas = _kernel(body.replace("atom.global.add.u32 \t%r5, [%rd1], 1;", "atom.global.cas.b32 \t%r5, [%rd1], %r7, %r8;"))
    same = compare_ptx("k", ptx, ptx, "k", "k.cu")
    assert same.ordering_verdict == "identical" and same.ordering_same_operations
    cmp = compare_ptx("k", ptx, cas, "k", "k.cu")
    assert not cmp.ordering_same_operations and cmp.ordering_verdict.startswith("DIFFERS")
    assert cmp.arithmetic_identical  # the arithmetic check alone would not have seen it


def test_ordering_constants_follow_a_reused_register_within_its_basic_block():
    """A CAS's expected 0 in a register the compiler also uses for other values (a phi): the
    mov just before it, in the same block, makes it the constant; across a label it is not."""
    shared = ("mov.u32 \t%r9, 1;\n$L__BB0_1:\n\tmov.u32 \t%r9, 0;\n\t"
              "atom.global.cas.b32 \t%r5, [%rd1], %r9, %r8;")
    joined = ("mov.u32 \t%r9, 0;\n$L__BB0_1:\n\t"
              "atom.global.cas.b32 \t%r5, [%rd1], %r9, %r8;\n\tmov.u32 \t%r9, 1;")
    single = "mov.u32 \t%r9, 0;\n\tatom.global.cas.b32 \t%r5, [%rd1], %r9, %r8;"
    assert ordering_tokens(parse_instructions(shared)) == ["atom.global.cas.b32 [0]"]
    assert ordering_tokens(parse_instructions(joined)) == ["atom.global.cas.b32"]  # two writes, other block
    assert ordering_tokens(parse_instructions(single)) == ["atom.global.cas.b32 [0]"]  # its only write


def test_extract_entry_takes_one_entry_of_a_module():
    module = _PTX.replace("MULADD", "") + _PTX.replace(".entry k(", ".entry k2(").replace("MULADD", "neg.f32 %f1, %f1;")
    first, second = extract_entry(module, "k"), extract_entry(module, "k2")
    assert ".entry k(" in first and "neg.f32" not in first
    assert ".entry k2(" in second and "neg.f32" in second
    with pytest.raises(KeyError):
        extract_entry(module, "missing")


@needs_nvcc
def test_negative_control_contracted_reference_is_rejected(tmp_path):
    """A term-by-term fold ``z + s * exp(..)`` (what a thread-level row combine does) compiled
    with --fmad=true becomes an fma; the comparison and the policy must both object. The
    shipped kernels give nvcc no mul feeding an add any more (B folds shuffled terms), so the
    control is a small module of its own on the same numerics header."""
    from bench.reference_build import ptx_of_module
    source_dir = tmp_path / "src"
    source_dir.mkdir()
    header = os.path.join(REFERENCE_DIR, "numerics.cuh")
    (source_dir / "scaled_sum.cu").write_text(
        f'#include "{header}"\n'
        'extern "C" __global__ void scaled_sum(const float* s, const float* m_t, float m, int n, float* out) {\n'
        "    float z = 0.0f;\n"
        "    for (int k = 0; k < n; ++k) { z = f32_add(z, f32_mul(s[k], f32_exp(f32_sub(m_t[k], m)))); }\n"
        "    *out = z;\n"
        "}\n")
    flags = [f if f != "--fmad=false" else "--fmad=true" for f in nvcc_flags()]
    contracted = ptx_of_module("scaled_sum", str(tmp_path / "fmad"), flags=flags, reference_dir=str(source_dir))
    current = ptx_of_module("scaled_sum", str(tmp_path / "policy"), reference_dir=str(source_dir))
    cmp = compare_ptx("scaled_sum", extract_entry(current, "scaled_sum"),
                      extract_entry(contracted, "scaled_sum"), "scaled_sum", "scaled_sum.cu")
    assert not cmp.arithmetic_identical
    assert not cmp.nvcc_policy["ok"] and any("contraction" in v for v in cmp.nvcc_policy["violations"])
    assert compare_ptx("scaled_sum", extract_entry(current, "scaled_sum"), extract_entry(current, "scaled_sum"),
                       "scaled_sum", "scaled_sum.cu").nvcc_policy["ok"]  # under the policy flags: passes


def test_reference_sources_exist():
    for module in MODULES:
        assert os.path.exists(os.path.join(REFERENCE_DIR, f"{module}.cu"))
    assert os.path.exists(os.path.join(REFERENCE_DIR, "README.md"))


# ---- the loader's argument table matches the C++ entries ----------------------------------------

@needs_reference
def test_argument_table_matches_every_entrys_parameters(reference_build_dir):
    """REFERENCE_KERNELS (what the GPU harness packs) against the .param list nvcc emitted."""
    import re

    from bench.reference_build import ensure_built
    from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS
    build = ensure_built(reference_build_dir)
    widths = {"f32*": 64, "i32*": 64, "i64*": 64, "i64": 64, "i32": 32}
    found = 0
    for name, ref in REFERENCE_KERNELS.items():
        with open(build.ptx[ref.module]) as handle:
            module = handle.read()
        try:
            entry = extract_entry(module, ref.entry)
        except KeyError:
            assert name.startswith("fused_row_softmax_q"), f"{ref.entry} missing from {ref.module}.ptx"
            continue  # width builds exist only when the ownership rule is the quad rule
        found += 1
        header = entry[:entry.index(")")]
        params = re.findall(r"\.param\s+\.[bsu](\d+)\s+\w+", header)
        assert [int(p) for p in params] == [widths[kind] for _, kind in ref.args], (name, params, ref.args)
    assert found >= 10


@needs_reference
def test_numba_layout_entries_read_where_numbas_kernels_read(reference_build_dir):
    """NUMBA_ABI_TWINS: the parameter block of Numba's kernel in Numba's own array ABI (``array_abi_ptx``: what
    a ``kernel[grid, block](...)`` call passes, not the slim entry the launch layer launches), byte for byte in
    size; every parameter byte offset the entry reads is one Numba's kernel reads, and both read the same 64-byte
    blocks of constant bank 0 (sm_90 puts the parameters at c[0x0][0x210], as the SASS shows)."""
    import re

    from bench.reference_build import ensure_built
    from numba_softmax.kernels.registry import KERNELS
    from numba_softmax.peers.nvcc_twins import NUMBA_ABI_TWINS
    from numba_softmax.ptx import array_abi_ptx
    build = ensure_built(reference_build_dir)
    assert set(NUMBA_ABI_TWINS) == {"exp_stage", "divide_stage", "tile_summary_kernel", "row_combine_kernel",
                                    "tile_normalize_kernel"}
    for name, ref in NUMBA_ABI_TWINS.items():
        numba = array_abi_ptx(*KERNELS[name])
        numba_entry = numba[numba.index(".entry"):]
        numba_header = numba_entry[:numba_entry.index(")")]
        numba_bytes = 8 * len(re.findall(r"\.param\s+\.u64", numba_header))
        numba_read = {8 * int(i) for i in re.findall(r"ld\.param\.\w+\s+%\w+,\s*\[\w+_param_(\d+)\]", numba_entry)}
        with open(build.ptx[ref.module]) as handle:
            twin = extract_entry(handle.read(), ref.entry)
        sizes = [int(n) for n in re.findall(r"\.param\s+\.align\s+8\s+\.b8\s+\w+\[(\d+)\]", twin[:twin.index(")")])]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        twin_read = {int(starts[int(j)]) + int(off or 0)
                     for j, off in re.findall(r"ld\.param\.\w+\s+%\w+,\s*\[\w+_param_(\d+)(?:\+(\d+))?\]", twin)}
        assert sum(sizes) == numba_bytes, (name, sizes, numba_bytes)
        assert twin_read <= numba_read, (name, sorted(twin_read), sorted(numba_read))
        blocks = ({(0x210 + b) // 64 for b in twin_read}, {(0x210 + b) // 64 for b in numba_read})
        assert blocks[0] == blocks[1], (name, sorted(twin_read), sorted(numba_read))


def test_numba_layout_arguments_are_packed_as_numbas_data_model():
    from numba_softmax.peers.nvcc_twins import NUMBA_ABI_TWINS, pack_arguments

    def words(packed):
        return np.frombuffer(bytes(packed), np.int64).tolist()

    spec = NUMBA_ABI_TWINS["exp_stage"]
    x = _FakeDeviceArray(np.float32, (4, 8), ptr=0x1000)
    m = _FakeDeviceArray(np.float32, (4,), ptr=0x2000)
    e = _FakeDeviceArray(np.float32, (32,), ptr=0x3000)
    packed_x, packed_m, packed_e = pack_arguments(spec, (x, m, e))
    # meminfo, parent, nitems, itemsize, data, shape, strides: Numba's own array ABI (a kernel[grid, block] call).
    assert words(packed_x) == [0, 0, 32, 4, 0x1000, 4, 8, 32, 4]
    assert words(packed_m) == [0, 0, 4, 4, 0x2000, 4, 4]
    assert words(packed_e) == [0, 0, 32, 4, 0x3000, 32, 4]
    x_1d = _FakeDeviceArray(np.float32, (32,))
    trace = pack_arguments(NUMBA_ABI_TWINS["tile_summary_kernel"], (
        x_1d, _FakeDeviceArray(np.int64, (4,)), _FakeDeviceArray(np.int32, (4,)), m, m,
        _FakeDeviceArray(np.int64, (1, 2), ptr=0x4000)))[-1]
    assert words(trace) == [0, 0, 2, 8, 0x4000, 1, 2, 16, 8]
    with pytest.raises(TypeError, match="tile_start must be a 1-D int64 device array"):
        pack_arguments(NUMBA_ABI_TWINS["tile_summary_kernel"], (x_1d, m, m, m, m, m))
    with pytest.raises(TypeError, match="must be a 1-D float32 device array"):
        pack_arguments(spec, (x, m, _FakeDeviceArray(np.float32, (4, 8))))
    with pytest.raises(TypeError, match="C-contiguous"):
        pack_arguments(spec, (_FakeDeviceArray(np.float32, (4, 8), strides=(4, 16)), m, e))


class _FakeDeviceArray:
    def __init__(self, dtype, shape, strides=None, ptr=0x1000):
        self.__cuda_array_interface__ = {"typestr": np.dtype(dtype).str, "shape": shape, "strides": strides,
                                         "data": (ptr, False), "version": 3}


def test_pack_arguments_checks_dtypes_layout_and_count():
    import ctypes

    from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS, pack_arguments
    spec = REFERENCE_KERNELS["exp_stage"]
    x = _FakeDeviceArray(np.float32, (4, 8), ptr=0x1000)
    m = _FakeDeviceArray(np.float32, (4,), ptr=0x2000)
    e = _FakeDeviceArray(np.float32, (4, 8), strides=(32, 4), ptr=0x3000)
    packed = pack_arguments(spec, (x, m, e, 4, 8))
    assert [type(v) for v in packed] == [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2
    assert [v.value for v in packed] == [0x1000, 0x2000, 0x3000, 4, 8]
    with pytest.raises(TypeError, match="must be float32"):
        pack_arguments(spec, (_FakeDeviceArray(np.float64, (4, 8)), m, e, 4, 8))
    with pytest.raises(TypeError, match="C-contiguous"):
        pack_arguments(spec, (x, m, _FakeDeviceArray(np.float32, (4, 8), strides=(4, 16)), 4, 8))
    with pytest.raises(TypeError, match="expected 5 arguments"):
        pack_arguments(spec, (x, m, e, 4))
    with pytest.raises(TypeError, match="device array"):
        pack_arguments(spec, (np.zeros((4, 8), np.float32), m, e, 4, 8))


def test_every_mapping_names_a_source_that_exists():
    from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS
    for name, ref in REFERENCE_KERNELS.items():
        assert ref.module in MODULES, name
        assert os.path.exists(os.path.join(REPO, ref.source)), name


def test_a_code_path_placed_elsewhere_is_told_apart_from_reordered_arithmetic():
    from bench.ptx_report import MIN_MOVED_RUN, moved_runs
    path = [f"op{i}" for i in range(MIN_MOVED_RUN)]
    other = [f"other{i}" for i in range(MIN_MOVED_RUN + 3)]
    # Two code paths placed in the other order: both runs found, each kept whole.
    assert moved_runs(["x"] + other + path + ["z"], ["x"] + path + other + ["z"]) == [
        (1, 1 + MIN_MOVED_RUN, len(other)), (1 + len(other), 1, MIN_MOVED_RUN)]
    # One operation moved, two swapped, a short run moved, or a run that changed inside: reordered.
    assert moved_runs(["a", "b", "c", "d"], ["a", "c", "b", "d"]) == []
    assert moved_runs(["x", "y"] + path, path + ["x", "y"]) == []
    assert moved_runs(other + path, path[1:] + other + path[:1]) == []
    assert moved_runs(other + path, list(reversed(path)) + other) == []


def test_a_failed_reference_build_is_one_error_line_and_its_exit_code(capsys):
    from bench.reference_build import BuildError, NvccNotFound, build_failure_exit
    assert build_failure_exit(NvccNotFound("nvcc not found"), "the comparison needs nvcc") == 2
    assert capsys.readouterr().err == "error: nvcc not found; the comparison needs nvcc\n"
    assert build_failure_exit(BuildError("ptxas failed on tiles.cu")) == 1
    assert capsys.readouterr().err == "error: ptxas failed on tiles.cu\n"
    with pytest.raises(ValueError):                      # anything else is not a build failure
        build_failure_exit(ValueError("bad argument"))


def test_a_reference_library_refuses_an_unknown_image():
    # "cubin" (nvcc's ptxas) or "ptx" (the driver compiles it, as Numba's PTX): anything else is named, before any
    # CUDA call, so the check holds on a machine without a GPU.
    from numba_softmax.peers.nvcc_twins import IMAGES, ReferenceLibrary

    assert IMAGES == ("cubin", "ptx")
    with pytest.raises(ValueError, match=r"image must be one of \('cubin', 'ptx'\), not 'sass'"):
        ReferenceLibrary("/nonexistent", image="sass")
