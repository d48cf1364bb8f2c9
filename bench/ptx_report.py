"""``python -m bench ptx [--kernel NAME] [--out DIR] [--compare]``: sm_90 PTX, policy, and nvcc beside Numba.

Runs without a GPU.

Without ``--compare``: writes ``<kernel>.ptx`` and ``policy.json`` into DIR and prints one line
per kernel; exits 1 when any kernel breaks the numerics policy.

With ``--compare``: builds (if needed) the nvcc reference kernels of ``reference_cu/``
(:mod:`bench.reference_build`) and puts each Numba kernel's PTX beside nvcc's PTX of the same
algorithm (the name mapping is :data:`numba_softmax.peers.nvcc_twins.REFERENCE_KERNELS`).
Per kernel, DIR gets ``<kernel>.numba.ptx``, ``<kernel>.nvcc.ptx`` and ``<kernel>.compare.md``:

* a normalized instruction histogram (opcode with all modifiers; registers, labels and
  immediates dropped) of both sides;
* an aligned diff (difflib) of the ARITHMETIC sequence: float add/sub/mul/fma/div/max/min/
  neg/ex2/cvt and the warp shuffles of the reductions (with their xor offsets), each token
  carrying the float constants it uses;
* a verdict: ``identical arithmetic``, or each difference named and explained;
* the non-arithmetic differences, named and explained (array-argument parameters and parameter
  loads, 64-bit index math, Numba's negative-index wraparound and floor-division code,
  generic vs global accesses, how the grid barrier is implemented, ...);
* nvcc's PTX checked against the same numerics policy (:func:`numba_softmax.ptx.check_policy`).

plus ``compare.json`` and ``compare_summary.md``, and prints the summary table. Where nvdisasm
is found, each report also counts the float SASS instructions ptxas makes of both PTX texts
(FFMA/FMUL/MUFU.EX2 must agree: evidence that ptxas contracted nothing). Exit status:
0 when every compared kernel has identical arithmetic, the same memory-ordering operations
(global atomics, acquire/release/relaxed accesses, fences, nanosleep) and both sides obey the
policy, 1 otherwise, 2 when nvcc is missing or a kernel is unknown.

One normalization, with its evidence computed per kernel: Numba compiles with NVVM's FMA
contraction on, so libdevice expf's internal ``add``/``mul`` come out unqualified
(``add.f32``, ``mul.f32``), while nvcc ``--fmad=false`` writes them ``add.rn.f32`` /
``mul.rn.f32``. In PTX an unqualified ``add``/``mul`` rounds to nearest even exactly like
``.rn``; the only difference is that ptxas MAY fuse an unqualified ``mul`` into an
unqualified ``add``/``sub`` that consumes it. The comparison therefore makes the default
``.rn`` explicit ONLY in a PTX where no unqualified mul feeds an unqualified add/sub
(``contraction_candidates`` is empty); otherwise the tokens stay as written and show up
as differences.
"""

import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field

from tabulate import tabulate

from numba_softmax.ptx_read import (NAMED_DIFFERENCES, aligned_diff, arithmetic_tokens, contraction_candidates,
                             defined_functions, ordering_tokens, parse_instructions, standalone_entry)
from bench.reference_build import (BUILD_DIR, BuildError, NvccNotFound, build_failure_exit, ensure_built,
                                   find_nvdisasm)
from numba_softmax.kernels.registry import KERNELS
from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS
from numba_softmax.ptx import check_policy, find_ptxas, kernel_ptx, ptxas_resources, run_ptxas

# ---- optional SASS evidence (needs ptxas and nvdisasm) ---------------------------------------

SASS_COUNTED = ("FFMA", "FMUL", "FADD", "FMNMX", "MUFU.EX2", "MUFU.RCP")


def sass_counts(ptx, arch="sm_90"):
    """Static counts of float SASS instructions after ptxas (whole-program, :func:`numba_softmax.ptx.run_ptxas`;
    None without ptxas/nvdisasm)."""
    ptxas, nvdisasm = find_ptxas(), find_nvdisasm()
    if ptxas is None or nvdisasm is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        proc = run_ptxas(ptx, cubin, ptxas, arch)
        if proc.returncode != 0:
            return {"error": (proc.stdout + proc.stderr).strip()}
        text = subprocess.run([nvdisasm, "-c", cubin], capture_output=True, text=True).stdout
    ops = Counter(m.group(1) for m in re.finditer(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", text))
    counts = {}
    for name in SASS_COUNTED:
        counts[name] = sum(n for op, n in ops.items() if op == name or op.startswith(name + "."))
    return counts


def sass_note(numba_counts, nvcc_counts):
    """The contraction evidence in SASS: FFMA and FMUL counts must agree."""
    if not numba_counts or not nvcc_counts or "error" in numba_counts or "error" in nvcc_counts:
        return None
    same = all(numba_counts[k] == nvcc_counts[k] for k in ("FFMA", "FMUL", "MUFU.EX2"))
    figures = ", ".join(f"{k} {numba_counts[k]}/{nvcc_counts[k]}" for k in SASS_COUNTED)
    if same:
        return (f"SASS (ptxas on both PTX texts, static counts Numba/nvcc): {figures}. FFMA, FMUL and MUFU.EX2 "
                "agree: ptxas fused nothing on either side. Static FADD/FMNMX counts may differ where ptxas "
                "unrolls a loop differently: the warp-partials fold is a 32-bit loop with constant offsets in "
                "nvcc's PTX, which ptxas unrolls further, and a 64-bit range() loop with wraparound index code "
                "in Numba's; both execute the same PTX sequence of operations.")
    return (f"SASS (static counts Numba/nvcc): {figures}. FFMA/FMUL/MUFU.EX2 DIFFER: check for contraction "
            "by ptxas or a duplicated code path.")


# ---- one comparison -------------------------------------------------------------------------

@dataclass
class Comparison:
    kernel: str
    reference_entry: str
    reference_source: str
    numba_instructions: int = 0
    nvcc_instructions: int = 0
    numba_histogram: dict = field(default_factory=dict)
    nvcc_histogram: dict = field(default_factory=dict)
    numba_arithmetic: list = field(default_factory=list)
    nvcc_arithmetic: list = field(default_factory=list)
    diff: list = field(default_factory=list)
    arithmetic_identical: bool = False
    verdict: str = ""
    arithmetic_differences: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    named_differences: list = field(default_factory=list)
    numba_policy: dict = field(default_factory=dict)
    nvcc_policy: dict = field(default_factory=dict)
    numba_resources: dict = field(default_factory=dict)
    nvcc_resources: dict = field(default_factory=dict)
    contraction_candidates: dict = field(default_factory=dict)
    sass: dict = field(default_factory=dict)
    numba_ordering: list = field(default_factory=list)
    nvcc_ordering: list = field(default_factory=list)
    ordering_same_operations: bool = False
    ordering_verdict: str = ""
    ordering_differences: list = field(default_factory=list)
    #: The arithmetic sequences are the same but for whole runs of operations placed elsewhere
    #: (a code path, e.g. one mode of a persistent kernel, laid out in another order).
    arithmetic_moved_runs: list = field(default_factory=list)

    @property
    def ok(self):
        same_arithmetic = self.arithmetic_identical or bool(self.arithmetic_moved_runs)
        return bool(same_arithmetic and self.ordering_same_operations and self.numba_policy.get("ok")
                    and self.nvcc_policy.get("ok"))

    def record(self):
        return dict(asdict(self), ok=bool(self.ok))


#: Shortest run of operations that counts as a code path placed elsewhere: anything shorter that
#: moved is arithmetic reordered (a task body is well over a hundred operations).
MIN_MOVED_RUN = 32


def moved_runs(left, right, min_run=MIN_MOVED_RUN):
    """If ``right`` is ``left`` with two adjacent code paths swapped -- the differing middle of
    ``left`` is ``P + Q`` and that of ``right`` is ``Q + P``, each of ``P`` and ``Q`` a run of at
    least ``min_run`` operations kept in its own order -- return the two runs as (Numba start,
    nvcc start, length); else []. That is a layout choice (e.g. the modes of a persistent
    kernel placed in another order), not arithmetic reordered: anything shorter is reordering."""
    left, right = list(left), list(right)
    if left == right or len(left) != len(right):
        return []
    size = len(left)
    first = next(i for i in range(size) if left[i] != right[i])
    last = size - next(k for k in range(size) if left[-1 - k] != right[-1 - k])
    # The two runs may begin (or end) with the same operations, so the swapped window can reach a
    # little past the first (last) difference: widen it by up to one run on each side.
    for start in range(first, max(-1, first - min_run), -1):
        for end in range(last, min(size, last + min_run) + 1):
            window_left, window_right = left[start:end], right[start:end]
            n = len(window_left)
            for p in range(min_run, n - min_run + 1):
                if window_right[:n - p] == window_left[p:] and window_right[n - p:] == window_left[:p]:
                    return [(start, start + n - p, p), (start + p, start, n - p)]
    return []


def _describe_arithmetic_differences(left, right):
    """Name each non-equal chunk of the arithmetic alignment."""
    out = []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        a, b = Counter(left[i1:i2]), Counter(right[j1:j2])
        where = f"Numba #{i1}-{i2 - 1}" if i2 > i1 else f"Numba before #{i1}"
        where += f" / nvcc #{j1}-{j2 - 1}" if j2 > j1 else f" / nvcc before #{j1}"
        if a == b:
            out.append(f"{where}: the same {sum(a.values())} operations in a different order")
            continue
        only_numba = a - b
        only_nvcc = b - a
        parts = []
        if only_numba:
            parts.append("only Numba: " + ", ".join(f"{n} x {t}" for t, n in sorted(only_numba.items())))
        if only_nvcc:
            parts.append("only nvcc: " + ", ".join(f"{n} x {t}" for t, n in sorted(only_nvcc.items())))
        out.append(f"{where}: " + "; ".join(parts))
    total_a, total_b = Counter(left), Counter(right)
    if total_a == total_b and out:
        out.insert(0, "the two sequences contain exactly the same operations (same multiset); they differ "
                      "only in order: check whether the reordered operations are independent")
    elif out:
        extra_a, extra_b = total_a - total_b, total_b - total_a
        summary = []
        if extra_a:
            summary.append("Numba has more: " + ", ".join(f"{n} x {t}" for t, n in sorted(extra_a.items())))
        if extra_b:
            summary.append("nvcc has more: " + ", ".join(f"{n} x {t}" for t, n in sorted(extra_b.items())))
        out.insert(0, "operation counts differ (" + "; ".join(summary) + "): typically a loop unrolled a "
                      "different number of times, or one compiler duplicated a code path")
    return out


def compare_ptx(kernel, numba_ptx, nvcc_ptx, reference_entry="", reference_source=""):
    """Compare one kernel's PTX from Numba with nvcc's PTX of the same algorithm."""
    cmp = Comparison(kernel=kernel, reference_entry=reference_entry, reference_source=reference_source)
    left_ins, right_ins = parse_instructions(numba_ptx), parse_instructions(nvcc_ptx)
    cmp.numba_instructions, cmp.nvcc_instructions = len(left_ins), len(right_ins)
    left_hist, right_hist = Counter(i.opcode for i in left_ins), Counter(i.opcode for i in right_ins)
    cmp.numba_histogram, cmp.nvcc_histogram = dict(sorted(left_hist.items())), dict(sorted(right_hist.items()))

    cand_left, cand_right = contraction_candidates(left_ins), contraction_candidates(right_ins)
    cmp.contraction_candidates = {"numba": cand_left, "nvcc": cand_right}
    left, rew_left = arithmetic_tokens(left_ins, make_rounding_explicit=not cand_left)
    right, rew_right = arithmetic_tokens(right_ins, make_rounding_explicit=not cand_right)
    cmp.numba_arithmetic, cmp.nvcc_arithmetic = left, right
    cmp.diff = [list(row) for row in aligned_diff(left, right)]
    for side, count, cands in (("Numba", rew_left, cand_left), ("nvcc", rew_right, cand_right)):
        if count:
            cmp.notes.append(
                f"{side}: {count} unqualified add/sub/mul.f32 written with their default .rn for the comparison "
                f"(libdevice expf's internal add and mul under NVVM's default FMA contraction). Evidence that "
                f"this is the same arithmetic: no unqualified mul.f32 result feeds an unqualified add/sub.f32 "
                f"in this PTX ({len(cands)} contraction candidates), and ptxas never fuses an operation that "
                f"carries an explicit rounding modifier, so every such instruction executes as a separately "
                f"rounded round-to-nearest-even operation, as .rn does.")
        if cands:
            cmp.notes.append(f"{side}: {len(cands)} contraction candidates (ptxas MAY fuse them): "
                             + "; ".join(cands[:5]))
    cmp.arithmetic_identical = left == right
    cmp.arithmetic_moved_runs = [] if cmp.arithmetic_identical else [list(r) for r in moved_runs(left, right)]
    if cmp.arithmetic_identical:
        cmp.verdict = "identical arithmetic"
    elif cmp.arithmetic_moved_runs:
        cmp.arithmetic_differences = [
            f"Numba #{i}-{i + n - 1} is nvcc #{j}-{j + n - 1}: the same {n} operations in the same order, placed "
            "elsewhere (a code path laid out in another order)" for i, j, n in cmp.arithmetic_moved_runs]
        cmp.verdict = "identical arithmetic, code paths laid out in another order"
    else:
        cmp.arithmetic_differences = _describe_arithmetic_differences(left, right)
        cmp.verdict = "arithmetic differs: " + cmp.arithmetic_differences[0]

    cmp.numba_ordering, cmp.nvcc_ordering = ordering_tokens(left_ins), ordering_tokens(right_ins)
    cmp.ordering_same_operations = Counter(cmp.numba_ordering) == Counter(cmp.nvcc_ordering)
    if not cmp.numba_ordering and not cmp.nvcc_ordering:
        cmp.ordering_verdict = "none"
    elif cmp.numba_ordering == cmp.nvcc_ordering:
        cmp.ordering_verdict = "identical"
    elif cmp.ordering_same_operations:
        cmp.ordering_verdict = "same operations, different block layout"
        cmp.ordering_differences = [
            "the same atomics/acquire/release operations appear in a different text order: the compilers "
            "placed the basic blocks differently (e.g. the two watchdog error paths); program order within "
            "each path is the source's"] + _describe_arithmetic_differences(cmp.numba_ordering, cmp.nvcc_ordering)
    else:
        cmp.ordering_differences = _describe_arithmetic_differences(cmp.numba_ordering, cmp.nvcc_ordering)
        cmp.ordering_verdict = "DIFFERS: " + cmp.ordering_differences[0]

    for key, title, measure, explanation in NAMED_DIFFERENCES:
        a = measure(left_hist, left_ins, numba_ptx)
        b = measure(right_hist, right_ins, nvcc_ptx)
        if a != b:
            cmp.named_differences.append({"key": key, "what": title, "numba": a, "nvcc": b,
                                          "explanation": explanation})
    defined_l, externs_l = defined_functions(numba_ptx)
    defined_r, externs_r = defined_functions(nvcc_ptx)
    if defined_l or defined_r or externs_l or externs_r:
        cmp.notes.append(f"functions: Numba defines {defined_l or 'none'}, declares extern {externs_l or 'none'}; "
                         f"nvcc defines {defined_r or 'none'}, declares extern {externs_r or 'none'}")

    cmp.numba_policy = check_policy(kernel, numba_ptx).record()
    cmp.nvcc_policy = check_policy(reference_entry or kernel, nvcc_ptx).record()
    return cmp


# ---- rendering --------------------------------------------------------------------------------

def render_markdown(cmp):
    lines = [f"# {cmp.kernel}: Numba vs nvcc", "",
             f"* Numba kernel: `numba_softmax.kernels` `{cmp.kernel}` (numba-cuda NVVM, libdevice fadd/fsub/fmul_rn)",
             f"* nvcc reference: `{cmp.reference_source}` entry `{cmp.reference_entry}` "
             "(`--fmad=false`, no fast math)",
             f"* **verdict: {cmp.verdict}**", ""]
    if cmp.arithmetic_differences:
        lines += ["## Arithmetic differences", ""] + [f"* {d}" for d in cmp.arithmetic_differences] + [""]
    if cmp.notes:
        lines += ["## Notes", ""] + [f"* {n}" for n in cmp.notes] + [""]
    lines += ["## Memory-ordering operations (global atomics, acquire/release/relaxed, fences, nanosleep)", "",
              f"**{cmp.ordering_verdict}** ({len(cmp.numba_ordering)} Numba, {len(cmp.nvcc_ordering)} nvcc)", ""]
    lines += [f"* {d}" for d in cmp.ordering_differences] + ([""] if cmp.ordering_differences else [])
    if cmp.numba_ordering or cmp.nvcc_ordering:
        width_o = max(len(t) for t in cmp.numba_ordering + cmp.nvcc_ordering + ["Numba"])
        lines += ["```"] + [f"{ {'equal': ' ', 'replace': '~', 'delete': '-', 'insert': '+'}[tag]} {a:<{width_o}} | {b}"
                            for tag, a, b in aligned_diff(cmp.numba_ordering, cmp.nvcc_ordering)] + ["```", ""]
    lines += ["## Policy", "",
              tabulate([[side, "ok" if p["ok"] else "VIOLATES", p["expf_count"], p["fma_count"],
                         sum(p["rounded_arith"].values()), sum(p["unrounded_arith"].values()),
                         ", ".join(f"{k}:{v}" for k, v in p["divisions"].items()) or "-",
                         "; ".join(p["violations"]) or "-"]
                        for side, p in (("Numba", cmp.numba_policy), ("nvcc", cmp.nvcc_policy))],
                       headers=["side", "policy", "expf", "fma", "op.rn", "op (plain)", "div", "violations"],
                       tablefmt="github"), ""]
    if cmp.numba_resources or cmp.nvcc_resources:
        keys = ("registers", "stack_frame_bytes", "spill_store_bytes", "spill_load_bytes")
        lines += ["## ptxas -v (sm_90)", "",
                  tabulate([[side] + [r.get(k, "-") for k in keys]
                            for side, r in (("Numba", cmp.numba_resources), ("nvcc", cmp.nvcc_resources))],
                           headers=["side", "regs", "stack B", "spill store B", "spill load B"],
                           tablefmt="github"), ""]
    lines += ["## Named non-arithmetic differences", ""]
    if cmp.named_differences:
        lines += [tabulate([[d["what"], d["numba"], d["nvcc"], d["explanation"]] for d in cmp.named_differences],
                           headers=["what", "Numba", "nvcc", "why"], tablefmt="github"), ""]
    else:
        lines += ["none", ""]
    lines += ["## Arithmetic sequence, aligned (difflib)", "",
              f"{len(cmp.numba_arithmetic)} Numba tokens, {len(cmp.nvcc_arithmetic)} nvcc tokens.", "", "```"]
    width = max([len(r[1]) for r in cmp.diff] + [10])
    for tag, a, b in cmp.diff:
        mark = {"equal": " ", "replace": "~", "delete": "-", "insert": "+"}[tag]
        lines.append(f"{mark} {a:<{width}} | {b}")
    lines += ["```", "", "## Normalized instruction histogram", "",
              f"{cmp.numba_instructions} Numba instructions, {cmp.nvcc_instructions} nvcc instructions.", ""]
    rows = []
    for op in sorted(set(cmp.numba_histogram) | set(cmp.nvcc_histogram)):
        a, b = cmp.numba_histogram.get(op, 0), cmp.nvcc_histogram.get(op, 0)
        rows.append([op, a, b, b - a if a != b else ""])
    lines += [tabulate(rows, headers=["opcode", "Numba", "nvcc", "nvcc - Numba"], tablefmt="github"), ""]
    return "\n".join(lines)


def summary_rows(comparisons):
    rows = []
    for cmp in comparisons:
        named = ", ".join(d["key"] for d in cmp.named_differences) or "-"
        rows.append([cmp.kernel, f"{cmp.reference_source}:{cmp.reference_entry}", cmp.verdict,
                     cmp.ordering_verdict,
                     len(cmp.numba_arithmetic), len(cmp.nvcc_arithmetic),
                     "ok" if cmp.numba_policy.get("ok") else "VIOLATES",
                     "ok" if cmp.nvcc_policy.get("ok") else "VIOLATES",
                     f"{cmp.numba_resources.get('registers', '-')}/{cmp.nvcc_resources.get('registers', '-')}",
                     named])
    return rows


SUMMARY_HEADERS = ["kernel", "nvcc reference", "verdict", "ordering ops", "arith (Numba)", "arith (nvcc)",
                   "policy Numba",
                   "policy nvcc", "regs N/nvcc", "named non-arithmetic differences"]


def render_summary(comparisons, manifest):
    version = manifest.get("nvcc_version", {})
    lines = ["# Numba vs nvcc: PTX comparison (sm_90)", "",
             f"nvcc {version.get('version', version)} `{' '.join(manifest.get('flags', []))}`; "
             "Numba: numba-cuda with NVVM, `fastmath=False`, libdevice fadd/fsub/fmul_rn, expf, div.rn.", "",
             "## Kernel name mapping", "",
             tabulate([[name, k.source, k.entry, k.geometry] for name, k in REFERENCE_KERNELS.items()],
                      headers=["Numba kernel", "nvcc source", "entry", "launch geometry"], tablefmt="github"), "",
             "## Verdicts", "",
             tabulate(summary_rows(comparisons), headers=SUMMARY_HEADERS, tablefmt="github"), "",
             "`identical arithmetic`: the float operations (with their constants) and the reduction "
             "shuffles (with their offsets) form the same sequence in both PTX texts (register operands "
             "are not compared: tests/gpu/test_reference_cu_gpu.py checks the data flow bit for bit), after writing "
             "Numba's unqualified expf add/mul with their default `.rn` where no contraction is possible "
             "(see each kernel's notes). `ordering ops`: the global-memory atomics, acquire/release/relaxed "
             "accesses, fences and nanosleeps of the queue protocol, compared the same way (`same operations, "
             "different block layout`: equal multisets, basic blocks placed in another order). Everything else is "
             "named in each `<kernel>.compare.md`.", ""]
    return "\n".join(lines)


# ---- CLI ---------------------------------------------------------------------------------------

def run_compare(names, out_dir, build_dir=None, nvcc=None, sass=None):
    """Build the reference if needed, compare every kernel in ``names``; write files; return comparisons.

    ``sass``: also count float SASS instructions (ptxas + nvdisasm); None = when nvdisasm exists."""
    build = ensure_built(build_dir or BUILD_DIR, nvcc=nvcc)
    os.makedirs(out_dir, exist_ok=True)
    if sass is None:
        sass = find_nvdisasm() is not None
    module_ptx = {}
    comparisons = []
    for name in names:
        ref = REFERENCE_KERNELS[name]
        if ref.module not in module_ptx:
            with open(build.ptx[ref.module]) as handle:
                module_ptx[ref.module] = handle.read()
        nvcc_ptx = standalone_entry(module_ptx[ref.module], ref.entry)
        dispatcher, signature = KERNELS[name]
        numba_ptx = kernel_ptx(dispatcher, signature)
        cmp = compare_ptx(name, numba_ptx, nvcc_ptx, ref.entry, ref.source)
        cmp.numba_resources = ptxas_resources(numba_ptx) or {"note": "ptxas not installed"}
        cmp.nvcc_resources = dict(build.resources().get(ref.entry, {}))
        if sass:
            cmp.sass = {"numba": sass_counts(numba_ptx), "nvcc": sass_counts(nvcc_ptx)}
            note = sass_note(cmp.sass["numba"], cmp.sass["nvcc"])
            cmp.notes.append(note or f"SASS evidence unavailable: {cmp.sass}")
        for suffix, text in (("numba.ptx", numba_ptx), ("nvcc.ptx", nvcc_ptx), ("compare.md", render_markdown(cmp))):
            with open(os.path.join(out_dir, f"{name}.{suffix}"), "w") as handle:
                handle.write(text)
        comparisons.append(cmp)
    with open(os.path.join(out_dir, "compare.json"), "w") as handle:
        json.dump({"manifest": build.manifest, "kernels": [c.record() for c in comparisons]}, handle, indent=2)
    with open(os.path.join(out_dir, "compare_summary.md"), "w") as handle:
        handle.write(render_summary(comparisons, build.manifest))
    return comparisons


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m bench ptx", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kernel", action="append", help="kernel name (repeatable); default: all")
    parser.add_argument("--out", help="output folder (default ./ptx, or ./ptx-compare with --compare)")
    parser.add_argument("--compare", action="store_true",
                        help="put nvcc's PTX of reference_cu/ beside Numba's, kernel by kernel")
    parser.add_argument("--build-dir", help="--compare: reference build folder (default reference_cu/build)")
    parser.add_argument("--nvcc", help="--compare: nvcc to build the reference with")
    parser.add_argument("--no-sass", action="store_true",
                        help="--compare: skip the SASS counts (done when nvdisasm is found: $NVDISASM, PATH, "
                             "or the nvidia-cuda-nvdisasm wheel)")
    args = parser.parse_args(argv)



    names = args.kernel or sorted(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        print(f"unknown kernel(s) {unknown}; known: {sorted(KERNELS)}", file=sys.stderr)
        return 2
    if args.compare:
        missing = [n for n in names if n not in REFERENCE_KERNELS]
        if missing:
            print(f"no nvcc reference for {missing}: add it to reference_cu/ and REFERENCE_KERNELS",
                  file=sys.stderr)
            return 2
        out = args.out or "ptx-compare"
        try:
            comparisons = run_compare(names, out, args.build_dir, args.nvcc, sass=False if args.no_sass else None)
        except (NvccNotFound, BuildError) as exc:
            return build_failure_exit(exc, "the comparison needs nvcc (or a current reference_cu/build)")
        print(tabulate(summary_rows(comparisons), headers=SUMMARY_HEADERS, tablefmt="github"))
        for cmp in comparisons:
            for note in cmp.arithmetic_differences:
                print(f"  {cmp.kernel}: {note}", file=sys.stderr)
            if not cmp.ordering_same_operations:
                print(f"  {cmp.kernel}: ordering {cmp.ordering_verdict}", file=sys.stderr)
        print(f"\nper-kernel comparisons and compare_summary.md written to {os.path.abspath(out)}")
        return 0 if all(c.ok for c in comparisons) else 1


    out = args.out or "ptx"
    os.makedirs(out, exist_ok=True)
    reports, rows = [], []
    for name in names:
        dispatcher, signature = KERNELS[name]
        ptx = kernel_ptx(dispatcher, signature)
        with open(os.path.join(out, f"{name}.ptx"), "w") as handle:
            handle.write(ptx)
        report = check_policy(name, ptx)
        report.resources = ptxas_resources(ptx) or {"note": "ptxas not installed"}
        reports.append(report.record())
        res = report.resources
        rows.append([name, "ok" if report.ok else "VIOLATES", report.expf_count, report.fma_count,
                     sum(report.rounded_arith.values()), sum(report.unrounded_arith.values()),
                     ",".join(f"{k}:{v}" for k, v in report.divisions.items()) or "-",
                     res.get("registers", "-"), res.get("stack_frame_bytes", "-"),
                     res.get("spill_store_bytes", "-")])
        for violation in report.violations:
            print(f"  {name}: {violation}", file=sys.stderr)
    with open(os.path.join(out, "policy.json"), "w") as handle:
        json.dump(reports, handle, indent=2)
    print(tabulate(rows, headers=["kernel", "policy", "expf", "fma", "op.rn", "op (plain)", "div",
                                  "regs", "stack B", "spill B"], tablefmt="github"))
    print(f"\nPTX and policy.json written to {os.path.abspath(out)}")
    return 0 if all(r["ok"] for r in reports) else 1
