"""``python -m bench sass --compare [--kernel NAME] [--out DIR]``: Numba's SASS beside nvcc's, offline.

Runs without a GPU. For every Numba kernel with an nvcc twin
(:data:`numba_softmax.peers.nvcc_twins.REFERENCE_KERNELS`):

* Numba side: the kernel's sm_90 PTX (:func:`numba_softmax.ptx.kernel_ptx`, as ``bench ptx``
  gets it) assembled by ptxas (``-v``, whole-program, as the driver builds it) into a cubin of its own;
* nvcc side: the twin's entry in ``reference_cu/build/<module>.cubin``
  (:func:`bench.reference_build.ensure_built`: built by nvcc with the project's policy flags);
* both disassembled by nvdisasm (``nvdisasm -c``; the ``nvidia-cuda-nvdisasm`` wheel of the
  ``sass`` extra: ``cuobjdump -sass`` of CUDA 13 calls nvdisasm itself, so nvdisasm is the one
  tool needed).

Per kernel, DIR gets ``<kernel>.numba.sass``, ``<kernel>.nvcc.sass`` and ``<kernel>.sass.md``:
static instruction counts by class (global loads and stores by width, float arithmetic,
shuffles, barriers, branches, integer address math split into 64-bit and 32-bit), registers
and stack (ptxas -v), an aligned diff (difflib) of the hot loop, and every difference that
can explain a time gap named with what it costs (:data:`NAMED_DIFFERENCES`). Plus
``sass_compare.json`` and ``sass_summary.md``. The counts are static (instructions in the
code), not executed instructions: a loop's body counts once.

Exit status: 0 when written, 2 when a tool is missing (with how to install it), a kernel is
unknown, or DIR is not empty (a comparison never writes over files it did not create).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

from tabulate import tabulate

from bench.artifacts import RunFolder
from bench.reference_build import (BUILD_DIR, BuildError, NvccNotFound, build_failure_exit, ensure_built,
                                   find_nvdisasm)
from numba_softmax.kernels.registry import KERNELS
from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS
from numba_softmax.ptx import find_ptxas, kernel_ptx
from numba_softmax.ptx_read import aligned_diff
from numba_softmax.sass_read import (ARCH, SassFunction, assemble, class_counts, disassemble, hot_loop, is_padding,
                                     loops, only_entry, token)

INSTALL_HINT = ('pip install -e ".[sass]" (the nvidia-cuda-nvdisasm wheel), or put a CUDA toolkit\'s nvdisasm '
                "on PATH or in $NVDISASM")


class ToolMissing(RuntimeError):
    """ptxas or nvdisasm is not installed."""


def tools():
    """{"ptxas": path, "nvdisasm": path}; raises :class:`ToolMissing` naming what to install."""
    ptxas, nvdisasm = find_ptxas(), find_nvdisasm()
    if ptxas is None:
        raise ToolMissing("ptxas not found (PATH, or the nvidia-cuda-nvcc wheel numba-cuda[cu12] installs)")
    if nvdisasm is None:
        raise ToolMissing(f"nvdisasm not found: {INSTALL_HINT}")
    return {"ptxas": ptxas, "nvdisasm": nvdisasm}


def tool_version(path):
    text = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    match = re.search(r"(V\d[\d.]+)", text)
    return match.group(1) if match else text.strip().splitlines()[-1:]


# ---- named differences --------------------------------------------------------------------

def _sum(counts, prefix):
    return sum(n for key, n in counts.items() if key.startswith(prefix))


def _division_subroutines(function):
    return sum(1 for name in function.subroutines if re.search(r"(div|rem)_[su]64", name))


#: (key, title, measure(counts, function, resources) -> number, what it costs).
NAMED_DIFFERENCES = (
    ("int64", "64-bit integer instruction parts (IMAD.WIDE, .X carries, .EX compares, 64-bit shifts)",
     lambda c, f, r: c.get("int width: 64-bit part", 0),
     "Numba indexes with intp (int64): every index, stride product and bound check is 64-bit, two or more "
     "32-bit SASS instructions each (a wide multiply, a carry add, an extended compare). nvcc's twin takes int64 "
     "sizes too but folds more of the index math into 32-bit offsets. More issue slots per element in the "
     "address path; it costs time where the kernel is issue-bound (short rows, the tile loops)."),
    ("int_total", "integer instructions (IMAD, IADD3, LEA, SHF, LOP3, ISETP, SEL, ...)",
     lambda c, f, r: _sum(c, "integer "),
     "Address and loop-control math. A difference here is index arithmetic the other compiler did not need."),
    ("compares", "integer compares (ISETP), incl. 64-bit ones",
     lambda c, f, r: c.get("integer ISETP", 0),
     "Bounds checks and loop tests; Numba adds the negative-index (wraparound) test of its array model "
     "wherever it cannot prove an index is non-negative, and its range loops test the trip count in 64 bits."),
    ("selects", "selects (SEL)",
     lambda c, f, r: c.get("integer SEL", 0),
     "Branch-free selects: Numba's wraparound (index < 0 ? index + extent : index) and floor-division "
     "fix-ups become SELs."),
    ("division", "64-bit integer division subroutines called",
     lambda c, f, r: _division_subroutines(f),
     "A 64-bit integer division or remainder (e.g. row = i // cols) is a call to a software routine of "
     "~70 instructions; a 32-bit one is a few IMAD.HI instructions."),
    ("predicated", "predicated instructions",
     lambda c, f, r: c.get("predicated", 0),
     "Guards: bounds tests turned into predicates rather than branches; extra ones are extra checks."),
    ("branches", "branch and control instructions (BRA, BSSY/BSYNC, EXIT, CALL, ...)",
     lambda c, f, r: _sum(c, "branch/control"),
     "Control flow: an extra branch in a loop is an extra issue and a possible divergence point; BSSY/BSYNC "
     "pairs mark divergent regions."),
    ("loads_wide", "global loads by width",
     lambda c, f, r: {k.split()[-1]: n for k, n in c.items() if k.startswith(("global load", "generic load"))},
     "Load width: one 128-bit load moves four floats per instruction; four 32-bit loads issue four times and "
     "keep more requests in flight per byte. A narrower load on one side is a likely time gap at memory-bound "
     "sizes."),
    ("stores_wide", "global stores by width",
     lambda c, f, r: {k.split()[-1]: n for k, n in c.items() if k.startswith(("global store", "generic store"))},
     "Store width, as for loads."),
    ("generic", "generic (not .global) memory accesses",
     lambda c, f, r: _sum(c, "generic "),
     "A generic access resolves its address space at run time; .global ones do not."),
    ("float", "float arithmetic (FFMA, FMUL, FADD, FMNMX, MUFU)",
     lambda c, f, r: {k: c.get(k, 0) for k in ("FFMA", "FMUL", "FADD", "FMNMX", "MUFU.EX2", "MUFU.RCP")},
     "Float work must agree (same algorithm, same policy); a difference here is a different computation."),
    ("shared", "shared memory loads / stores",
     lambda c, f, r: f"{c.get('shared load', 0)} / {c.get('shared store', 0)}",
     "Block reductions pass per-warp partials through shared memory; more shared loads for the same partials "
     "means they are read one float at a time (LDS) instead of four at once (LDS.128), usually because a loop "
     "over the warps was not unrolled."),
    ("loops", "loops (backward branches)", lambda c, f, r: len(loops(f)),
     "A loop one compiler unrolled and the other kept: loop control (compare, branch, counter) on every "
     "iteration, and loads that cannot be issued ahead of the loop's other work."),
    ("shuffles", "warp shuffles", lambda c, f, r: c.get("shuffle", 0),
     "Reduction steps; the same algorithm has the same number."),
    ("barriers", "block barriers (BAR)", lambda c, f, r: c.get("barrier", 0),
     "Block-wide synchronizations; each is a stall for the whole block."),
    ("registers", "registers per thread (ptxas -v)", lambda c, f, r: r.get("registers"),
     "Extra registers hold the extra index words; they matter where they change how many blocks an SM holds "
     "(next line)."),
    ("blocks_per_sm", "blocks per SM the registers allow (sm_90, at the launch's block size)",
     lambda c, f, r: register_limited_blocks(r.get("registers"), r.get("block_threads")),
     "Fewer resident blocks per SM means fewer loads in flight to hide DRAM latency: a likely time gap in a "
     "memory-bound kernel. (Registers only; shared memory limits nothing here.)"),
    ("stack", "stack frame bytes (ptxas -v)", lambda c, f, r: r.get("stack_frame_bytes"),
     "A stack frame means local memory traffic (spills or arrays the compiler could not keep in registers)."),
    ("total", "instructions (static, no NOP)", lambda c, f, r: c.get("instructions (no NOP)", 0),
     "Code size; with the loop bodies below it says where the extra instructions are."),
)


#: sm_90 register file and scheduling limits (CUDA occupancy rules: registers per thread allocated in
#: multiples of 8, per warp in units of 256; 64 warps and 32 blocks per SM).
SM_REGISTERS, SM_WARPS, SM_BLOCKS = 65536, 64, 32


def register_limited_blocks(registers, block_threads):
    """Resident blocks per SM allowed by registers and the warp and block limits (None when unknown)."""
    if not registers or not block_threads:
        return None
    per_warp = -(-(-(-registers // 8) * 8 * 32) // 256) * 256
    warps_per_block = -(-block_threads // 32)
    warps = min(SM_WARPS, SM_REGISTERS // per_warp)
    return min(SM_BLOCKS, warps // warps_per_block)


def block_threads_of(reference_kernel):
    """The launch's threads per block, from the twin's geometry text (e.g. "grid (rows,), block (256,)")."""
    match = re.search(r"block \((\d+),?\)", reference_kernel.geometry)
    if match is None:
        raise ValueError(f"{reference_kernel.entry}: no 'block (N,)' in its geometry {reference_kernel.geometry!r}")
    return int(match.group(1))


# ---- one kernel -----------------------------------------------------------------------------

@dataclass
class SassComparison:
    kernel: str
    reference_entry: str
    reference_source: str
    numba_function: str
    numba_counts: dict
    nvcc_counts: dict
    numba_resources: dict
    nvcc_resources: dict
    numba_loops: list
    nvcc_loops: list
    numba_hot_loop: dict
    nvcc_hot_loop: dict
    hot_loop_diff: list            # [(tag, numba token, nvcc token)]
    differences: list              # [{key, title, numba, nvcc, explanation}]
    same: list                     # keys whose numbers agree

    @property
    def identical_mix(self):
        return not self.differences

    def record(self):
        return dict(asdict(self), identical_mix=self.identical_mix)


def _loop_record(function, loop_range, body):
    return {"range": None if loop_range is None else [f"{loop_range[0]:04x}", f"{loop_range[1]:04x}"],
            "whole_kernel": loop_range is None, "instructions": sum(1 for i in body if not is_padding(i)),
            "counts": class_counts(body)}


def compare_functions(kernel, numba_fn, nvcc_fn, numba_resources, nvcc_resources, reference_entry="",
                      reference_source=""):
    """Count, find hot loops, diff them and name every difference between two disassembled kernels."""
    counts = {"numba": class_counts(numba_fn.instructions), "nvcc": class_counts(nvcc_fn.instructions)}
    hot = {"numba": hot_loop(numba_fn), "nvcc": hot_loop(nvcc_fn)}
    diff = aligned_diff([token(i) for i in hot["numba"][1]], [token(i) for i in hot["nvcc"][1]])
    differences, same = [], []
    for key, title, measure, explanation in NAMED_DIFFERENCES:
        left = measure(counts["numba"], numba_fn, numba_resources)
        right = measure(counts["nvcc"], nvcc_fn, nvcc_resources)
        if left == right:
            same.append(key)
        else:
            differences.append({"key": key, "title": title, "numba": left, "nvcc": right,
                                "explanation": explanation})
    # In the hot loop itself: the same named measures, restricted to the loop body.
    hot_counts = {side: class_counts(hot[side][1]) for side in hot}
    for key in ("int64", "compares", "selects", "predicated", "loads_wide", "total"):
        _, title, measure, explanation = next(d for d in NAMED_DIFFERENCES if d[0] == key)
        left = measure(hot_counts["numba"], SassFunction("loop"), {})
        right = measure(hot_counts["nvcc"], SassFunction("loop"), {})
        if left != right:
            differences.append({"key": f"hot_loop.{key}", "title": f"hot loop: {title}", "numba": left,
                                "nvcc": right, "explanation": explanation})
    return SassComparison(
        kernel=kernel, reference_entry=reference_entry, reference_source=reference_source,
        numba_function=numba_fn.name, numba_counts=counts["numba"], nvcc_counts=counts["nvcc"],
        numba_resources=numba_resources, nvcc_resources=nvcc_resources,
        numba_loops=[[f"{a:04x}", f"{b:04x}"] for a, b in loops(numba_fn)],
        nvcc_loops=[[f"{a:04x}", f"{b:04x}"] for a, b in loops(nvcc_fn)],
        numba_hot_loop=_loop_record(numba_fn, *hot["numba"]), nvcc_hot_loop=_loop_record(nvcc_fn, *hot["nvcc"]),
        hot_loop_diff=[list(row) for row in diff], differences=differences, same=same)


# ---- rendering ------------------------------------------------------------------------------

def _cell(value):
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
    return "-" if value is None else str(value)


def render_diff(rows, context=3):
    """The aligned diff as text: equal runs longer than 2*context shown by their ends only."""
    lines, i = [], 0
    while i < len(rows):
        j = i
        while j < len(rows) and rows[j][0] == "equal":
            j += 1
        run = j - i
        if run > 2 * context + 1:
            lines += [f"  {rows[k][1]}" for k in range(i, i + context)]
            lines.append(f"  ... {run - 2 * context} equal instructions ...")
            lines += [f"  {rows[k][1]}" for k in range(j - context, j)]
        else:
            lines += [f"  {rows[k][1]}" for k in range(i, j)]
        if j < len(rows):
            tag, left, right = rows[j]
            if left:
                lines.append(f"- {left}")
            if right:
                lines.append(f"+ {right}")
            j += 1
        i = j
    return "\n".join(lines)


def render_markdown(cmp):
    keys = sorted(set(cmp.numba_counts) | set(cmp.nvcc_counts))
    rows = [[k, cmp.numba_counts.get(k, 0), cmp.nvcc_counts.get(k, 0),
             "" if cmp.numba_counts.get(k, 0) == cmp.nvcc_counts.get(k, 0) else "differs"] for k in keys]
    lines = [f"# {cmp.kernel}: Numba's SASS beside nvcc's ({ARCH})", "",
             f"nvcc twin: `{cmp.reference_entry}` in `{cmp.reference_source}`; Numba's entry "
             f"`{cmp.numba_function}`. Static counts (a loop body counts once).", "",
             "## Differences that can explain a time gap", ""]
    if cmp.differences:
        for d in cmp.differences:
            lines.append(f"* **{d['title']}**: Numba {_cell(d['numba'])}, nvcc {_cell(d['nvcc'])}. "
                         f"{d['explanation']}")
    else:
        lines.append("None: the same instruction mix, registers and stack on both sides.")
    hot_n, hot_v = cmp.numba_hot_loop, cmp.nvcc_hot_loop
    lines += ["", "## Registers and stack (ptxas -v)", "",
              tabulate([[side, r.get("registers"), r.get("stack_frame_bytes"), r.get("spill_store_bytes"),
                         r.get("block_threads"), register_limited_blocks(r.get("registers"), r.get("block_threads"))]
                        for side, r in (("Numba", cmp.numba_resources), ("nvcc", cmp.nvcc_resources))],
                       headers=["", "registers", "stack B", "spill stores B", "threads per block",
                                "blocks per SM (registers)"], tablefmt="github"),
              "", "## Instruction counts by class (whole kernel)", "",
              tabulate(rows, headers=["class", "Numba", "nvcc", ""], tablefmt="github"), "",
              "## Hot loop", "",
              f"Loops (backward branches): Numba {len(cmp.numba_loops)}, nvcc {len(cmp.nvcc_loops)}. Hot loop (the "
              "loop with the most global memory instructions; the whole kernel when no loop has one): "
              f"Numba {_describe_loop(hot_n)}, nvcc {_describe_loop(hot_v)}.", "",
              "Aligned diff (difflib over opcodes with modifiers; `@P` marks a guarded instruction; `-` Numba "
              "only, `+` nvcc only):", "", "```diff", render_diff(cmp.hot_loop_diff), "```", ""]
    return "\n".join(lines)


def _describe_loop(record):
    where = "whole kernel" if record["whole_kernel"] else f"{record['range'][0]}..{record['range'][1]}"
    return f"{where}, {record['instructions']} instructions"


SUMMARY_HEADERS = ["kernel", "nvcc twin", "instr N/C", "int64 N/C", "int N/C", "ISETP N/C", "regs N/C",
                   "stack N/C", "LDG widths N/C", "hot loop N/C", "named differences"]


def summary_rows(comparisons):
    rows = []
    for c in comparisons:
        n, v = c.numba_counts, c.nvcc_counts

        def widths(counts):
            return " ".join(f"{k.split()[-1]}x{cnt}" for k, cnt in counts.items()
                            if k.startswith(("global load", "generic load"))) or "-"

        def ints(counts):
            return _sum(counts, "integer ")

        rows.append([c.kernel, c.reference_entry, f"{n['instructions (no NOP)']}/{v['instructions (no NOP)']}",
                     f"{n.get('int width: 64-bit part', 0)}/{v.get('int width: 64-bit part', 0)}",
                     f"{ints(n)}/{ints(v)}", f"{n.get('integer ISETP', 0)}/{v.get('integer ISETP', 0)}",
                     f"{c.numba_resources.get('registers')}/{c.nvcc_resources.get('registers')}",
                     f"{c.numba_resources.get('stack_frame_bytes')}/{c.nvcc_resources.get('stack_frame_bytes')}",
                     f"{widths(n)} / {widths(v)}",
                     f"{c.numba_hot_loop['instructions']}/{c.nvcc_hot_loop['instructions']}",
                     ", ".join(d["key"] for d in c.differences if "." not in d["key"]) or "none"])
    return rows


def render_summary(comparisons, versions):
    return "\n".join([
        f"# Numba vs nvcc in SASS ({ARCH}, offline)", "",
        f"Tools: ptxas {versions['ptxas']}, nvdisasm {versions['nvdisasm']}, nvcc {versions['nvcc']}. Static "
        "instruction counts of each kernel's cubin (Numba: ptxas on Numba's PTX; nvcc: the twin's entry in "
        "reference_cu/build). N/C = Numba/nvcc. int64 = parts of 64-bit integer operations; int = all integer "
        "instructions; hot loop = instructions in the loop with the most global memory instructions (the whole "
        "kernel when none). Each `<kernel>.sass.md` names every difference and what it can cost.", "",
        tabulate(summary_rows(comparisons), headers=SUMMARY_HEADERS, tablefmt="github"), ""])


# ---- the command -----------------------------------------------------------------------------

def numba_side(name, ptxas, nvdisasm, workdir):
    """Numba's kernel: PTX -> ptxas cubin -> disassembly. Returns (function, resources, cubin path)."""
    dispatcher, signature = KERNELS[name]
    cubin = os.path.join(workdir, f"{name}.numba.cubin")
    resources = assemble(kernel_ptx(dispatcher, signature), cubin, ptxas)
    return only_entry(disassemble(cubin, nvdisasm), name), resources, cubin


def run_compare(names, out, build_dir=None, nvcc=None):
    """Compare every kernel of ``names``; write into the new (or empty) folder ``out``; return comparisons."""
    found = tools()
    folder = RunFolder(out)  # refuses a non-empty folder: nothing already there is overwritten
    build = ensure_built(build_dir or BUILD_DIR, nvcc=nvcc)
    nvcc_functions = {}
    comparisons = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in names:
            ref = REFERENCE_KERNELS[name]
            if ref.module not in nvcc_functions:
                nvcc_functions[ref.module] = disassemble(build.cubin[ref.module], found["nvdisasm"])
            if ref.entry not in nvcc_functions[ref.module]:
                raise KeyError(f"{ref.entry} not in {build.cubin[ref.module]} "
                               f"(has {sorted(nvcc_functions[ref.module])})")
            nvcc_fn = nvcc_functions[ref.module][ref.entry]
            numba_fn, numba_resources, _ = numba_side(name, found["ptxas"], found["nvdisasm"], workdir)
            nvcc_resources = {k: v for k, v in build.resources().get(ref.entry, {}).items() if k != "module"}
            numba_resources["block_threads"] = nvcc_resources["block_threads"] = block_threads_of(ref)
            cmp = compare_functions(name, numba_fn, nvcc_fn, numba_resources, nvcc_resources, ref.entry,
                                    ref.source)
            folder.write_text(f"{name}.numba.sass", numba_fn.text())
            folder.write_text(f"{name}.nvcc.sass", nvcc_fn.text())
            folder.write_text(f"{name}.sass.md", render_markdown(cmp))
            comparisons.append(cmp)
    versions = {"ptxas": tool_version(found["ptxas"]), "nvdisasm": tool_version(found["nvdisasm"]),
                "nvcc": build.manifest.get("nvcc_version", {}).get("version")}
    folder.write_json("sass_compare.json", {
        "arch": ARCH, "tools": versions, "nvcc_flags": build.manifest.get("flags"),
        "kernels": [c.record() for c in comparisons]})
    folder.write_text("sass_summary.md", render_summary(comparisons, versions))
    return comparisons


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m bench sass", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compare", action="store_true", required=True,
                        help="put each Numba kernel's SASS beside its nvcc twin's (the only mode)")
    parser.add_argument("--kernel", action="append", help="kernel name (repeatable); default: every kernel "
                                                          "with an nvcc twin")
    parser.add_argument("--out", default="sass-compare", help="a new or empty folder (default ./sass-compare)")
    parser.add_argument("--build-dir", help="reference build folder (default reference_cu/build)")
    parser.add_argument("--nvcc", help="nvcc to build the reference with when the build is stale")
    args = parser.parse_args(argv)



    names = args.kernel or sorted(n for n in KERNELS if n in REFERENCE_KERNELS)
    unknown = [n for n in names if n not in KERNELS or n not in REFERENCE_KERNELS]
    if unknown:
        print(f"error: no Numba kernel with an nvcc twin named {unknown}; known: "
              f"{sorted(n for n in KERNELS if n in REFERENCE_KERNELS)}", file=sys.stderr)
        return 2
    try:
        comparisons = run_compare(names, args.out, args.build_dir, args.nvcc)
    except ToolMissing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (FileExistsError, NotADirectoryError) as exc:
        print(f"error: --out {args.out}: {exc} (give a new folder: the comparison never writes over files it "
              "did not create)", file=sys.stderr)
        return 2
    except (NvccNotFound, BuildError) as exc:
        return build_failure_exit(exc, "the comparison needs nvcc (or a current reference_cu/build)")
    print(tabulate(summary_rows(comparisons), headers=SUMMARY_HEADERS, tablefmt="github"))
    print(f"\nper-kernel SASS, <kernel>.sass.md and sass_summary.md written to {os.path.abspath(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
