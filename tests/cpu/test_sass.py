"""``python -m bench sass --compare``: Numba's SASS beside nvcc's, with real ptxas and nvdisasm (no GPU).

Skipped with the reason when ptxas or nvdisasm is missing (nvdisasm: the ``sass`` extra,
``pip install -e ".[sass]"``). The negative controls assemble two hand-written kernels that differ
only in load width (and only in index width) and require the comparison to name that difference;
the positive control compares a kernel with itself and requires no difference at all.
"""

import json
import os
import subprocess
import sys

import pytest

from bench import sass
from numba_softmax import sass_read as sass_parse
from bench.reference_build import BUILD_DIR, find_nvcc, stale_reason

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tools_or_none():
    try:
        return sass.tools()
    except sass.ToolMissing as exc:
        return str(exc)


TOOLS = _tools_or_none()
needs_tools = pytest.mark.skipif(not isinstance(TOOLS, dict), reason=f"{TOOLS}")
needs_reference = pytest.mark.skipif(
    find_nvcc() is None and stale_reason(BUILD_DIR) is not None,
    reason="nvcc not found and no current reference_cu/build: the nvcc twins cannot be built here")

_HEADER = ".version 8.0\n.target sm_90\n.address_size 64\n"


def _copy_kernel(name, body, index_width=32):
    """A kernel copying 4 floats per thread from x to y; ``body`` is the load/store part."""
    if index_width == 32:
        index = "mov.u32 %r1, %tid.x;\nmul.wide.u32 %rd5, %r1, 16;"
    else:  # the thread index widened first, the offset computed in 64 bits (Numba's intp style)
        index = "mov.u32 %r1, %tid.x;\ncvt.u64.u32 %rd6, %r1;\nmul.lo.s64 %rd5, %rd6, 16;"
    return _HEADER + f""".visible .entry {name}(.param .u64 x, .param .u64 y)
{{
  .reg .b64 %rd<8>;
  .reg .f32 %f<5>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [x];
  ld.param.u64 %rd2, [y];
  cvta.to.global.u64 %rd3, %rd1;
  cvta.to.global.u64 %rd4, %rd2;
  {index}
  add.s64 %rd3, %rd3, %rd5;
  add.s64 %rd4, %rd4, %rd5;
  {body}
  ret;
}}
"""


VECTOR_BODY = """ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd3];
  st.global.v4.f32 [%rd4], {%f1, %f2, %f3, %f4};"""
SCALAR_BODY = "\n  ".join([f"ld.global.f32 %f{i + 1}, [%rd3+{4 * i}];" for i in range(4)]
                           + [f"st.global.f32 [%rd4+{4 * i}], %f{i + 1};" for i in range(4)])


def _disassembled(ptx, tmp_path, name):
    cubin = tmp_path / f"{name}.cubin"
    resources = sass_parse.assemble(ptx, cubin, TOOLS["ptxas"])
    return sass_parse.only_entry(sass_parse.disassemble(cubin, TOOLS["nvdisasm"]), name), resources


def test_never_executed_filler_is_padding_not_the_operation_it_names():
    """ptxas pads with ``@!PT LDS RZ, [RZ]`` (predicated on never-true): counted as padding like a NOP, not
    as a shared load, so two kernels differing only in filler count the same real instructions."""
    line = "        /*1c20*/              @!PT LDS RZ, [RZ] ;"
    match = sass_parse._INSTRUCTION.search(line)
    assert (match.group(2) or "").strip() == "@!PT" and match.group(3) == "LDS"
    instructions = [sass_parse.SassInstruction(0x00, "", "LDS.128", "R4, [R2]"),
                    sass_parse.SassInstruction(0x10, "@!PT", "LDS", "RZ, [RZ]"),
                    sass_parse.SassInstruction(0x20, "", "NOP", ""),
                    sass_parse.SassInstruction(0x30, "@P0", "LDS", "R6, [R3]"),
                    sass_parse.SassInstruction(0x40, "", "EXIT", "")]
    counts = sass_parse.class_counts(instructions)
    assert counts["shared load"] == 2 and counts["predicated"] == 1
    assert counts["NOP"] == 2 and counts["instructions (no NOP)"] == 3
    assert sass_parse.is_padding(instructions[1]) and not sass_parse.is_padding(instructions[3])


@needs_tools
def test_negative_control_load_width_is_named(tmp_path):
    wide, wide_res = _disassembled(_copy_kernel("copy_v4", VECTOR_BODY), tmp_path, "copy_v4")
    narrow, narrow_res = _disassembled(_copy_kernel("copy_f32", SCALAR_BODY), tmp_path, "copy_f32")
    counts = sass_parse.class_counts(wide.instructions)
    assert counts["global load 128-bit"] == 1 and counts["global store 128-bit"] == 1
    assert sass_parse.class_counts(narrow.instructions)["global load 32-bit"] == 4
    cmp = sass.compare_functions("copy", narrow, wide, narrow_res, wide_res)
    named = {d["key"]: d for d in cmp.differences}
    assert named["loads_wide"]["numba"] == {"32-bit": 4} and named["loads_wide"]["nvcc"] == {"128-bit": 1}
    assert "stores_wide" in named and not cmp.identical_mix
    text = sass.render_markdown(cmp)
    assert "global loads by width" in text and "LDG.E.128" in text


@needs_tools
def test_negative_control_index_width_is_named(tmp_path):
    narrow, narrow_res = _disassembled(_copy_kernel("copy32", VECTOR_BODY), tmp_path, "copy32")
    wide, wide_res = _disassembled(_copy_kernel("copy64", VECTOR_BODY, index_width=64), tmp_path, "copy64")
    cmp = sass.compare_functions("copy", wide, narrow, wide_res, narrow_res)
    assert cmp.differences, "a 64-bit index computation must not compare equal to a 32-bit one"
    assert cmp.numba_counts["instructions (no NOP)"] != cmp.nvcc_counts["instructions (no NOP)"] or any(
        d["key"] in ("int64", "int_total") for d in cmp.differences)


@needs_tools
def test_positive_control_same_kernel_no_difference(tmp_path):
    left, res = _disassembled(_copy_kernel("same", VECTOR_BODY), tmp_path, "same")
    cmp = sass.compare_functions("same", left, left, res, res)
    assert cmp.identical_mix and cmp.differences == []
    assert all(tag == "equal" for tag, _, _ in cmp.hot_loop_diff)


@needs_tools
def test_hot_loop_is_the_loop_with_the_memory_accesses(tmp_path):
    loop = _HEADER + """.visible .entry looped(.param .u64 x, .param .u32 n)
{
  .reg .b64 %rd<6>;
  .reg .f32 %f<4>;
  .reg .b32 %r<4>;
  .reg .pred %p<2>;
  ld.param.u64 %rd1, [x];
  ld.param.u32 %r2, [n];
  cvta.to.global.u64 %rd2, %rd1;
  mov.u32 %r1, %tid.x;
LOOP:
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd2, %rd3;
  ld.global.f32 %f1, [%rd4];
  add.rn.f32 %f2, %f1, %f1;
  st.global.f32 [%rd4], %f2;
  add.s32 %r1, %r1, 256;
  setp.lt.u32 %p1, %r1, %r2;
  @%p1 bra LOOP;
  ret;
}
"""
    function, _ = _disassembled(loop, tmp_path, "looped")
    assert len(sass_parse.loops(function)) == 1
    loop_range, body = sass_parse.hot_loop(function)
    assert loop_range is not None
    assert {i.base for i in body} >= {"LDG", "STG", "BRA"}
    assert len(body) < len(function.instructions)


def _run_bench(args, env=None):
    env = dict(os.environ if env is None else env)
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # the real CUDA target: ptxas needs Numba's real PTX
    return subprocess.run([sys.executable, "-m", "bench", "sass", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)


@needs_tools
@needs_reference
def test_compare_writes_every_file_and_names_numba_differences(tmp_path, reference_build_dir):
    out = tmp_path / "sass"
    kernels = ("fused_row_softmax_q4", "tile_summary_kernel")
    proc = _run_bench(["--compare", "--out", str(out), "--build-dir", reference_build_dir,
                       *[a for k in kernels for a in ("--kernel", k)]])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "sass_compare.json").read_text())
    assert [k["kernel"] for k in report["kernels"]] == list(kernels)
    assert report["tools"]["nvdisasm"] and report["tools"]["ptxas"] and "/" not in json.dumps(report["tools"])
    for name in kernels:
        for suffix in ("numba.sass", "nvcc.sass", "sass.md"):
            assert (out / f"{name}.{suffix}").stat().st_size > 0, (name, suffix)
    by_name = {k["kernel"]: k for k in report["kernels"]}
    fused = by_name["fused_row_softmax_q4"]
    # Same algorithm, same policy: the float work agrees; the address math does not.
    for op in ("FFMA", "FMUL", "MUFU.EX2", "shuffle"):
        assert fused["numba_counts"].get(op, 0) == fused["nvcc_counts"].get(op, 0), op
    assert "int_total" in {d["key"] for d in fused["differences"]}
    assert "Numba vs nvcc in SASS" in (out / "sass_summary.md").read_text()


@needs_tools
def test_refuses_a_folder_it_did_not_create(tmp_path):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "evidence.txt").write_text("keep me")
    proc = _run_bench(["--compare", "--kernel", "divide_stage", "--out", str(out)])
    assert proc.returncode == 2 and "never writes over" in proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["evidence.txt"]
    assert (out / "evidence.txt").read_text() == "keep me"


def test_unknown_kernel_is_refused(tmp_path):
    proc = _run_bench(["--compare", "--kernel", "no_such_kernel", "--out", str(tmp_path / "x")])
    assert proc.returncode == 2 and "no_such_kernel" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_missing_nvdisasm_says_how_to_install(tmp_path):
    code = ("import sys, bench.sass as s; s.find_nvdisasm = lambda: None; "
            "sys.exit(s.main(['--compare', '--out', sys.argv[1]]))")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert 'pip install -e ".[sass]"' in proc.stderr and "nvdisasm" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_register_limited_blocks_follow_the_allocation_rules():
    # sm_90: 64K registers, 8-register steps per thread, 256-register units per warp, 64 warps, 32 blocks.
    assert sass.register_limited_blocks(32, 256) == 8      # 1024 per warp -> 64 warps -> 8 blocks
    assert sass.register_limited_blocks(33, 256) == 6      # 40 -> 1280 per warp -> 51 warps -> 6 blocks
    assert sass.register_limited_blocks(46, 256) == 5      # 48 -> 1536 -> 42 warps -> 5 blocks
    assert sass.register_limited_blocks(36, 128) == 12     # 40 -> 51 warps -> 12 blocks of 4 warps
    assert sass.register_limited_blocks(16, 32) == 32      # the block limit
    assert sass.register_limited_blocks(None, 256) is None
