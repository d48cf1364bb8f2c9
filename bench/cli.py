"""``python -m bench``: the experiments (the main job) and the subcommands around them.

    python -m bench --experiment A|B [--out DIR] [--expect-device MODEL] [--shapes 1x128,7x781] [--cases ...]
    python -m bench --experiment A|B --resume DIR      (continue an interrupted run in its folder)
    python -m bench --experiment A --variant-file my_kernel.py --variants mine   (a variant beside the reference)
    python -m bench SUBCOMMAND --help                  (each subcommand's own options)

Without a GPU the experiments run in the Numba CUDA simulator on small cases, validate
correctness only and say so loudly. ``--expect-device`` makes a GPU of that model a hard
requirement (no simulator fallback).
"""

import argparse
import importlib
import os
import sys

from bench.environment import PROTOCOL_DEVICE, NoGpu, select_backend
from bench.probe import PROBES
from bench.shapes import parse_shapes, shape_list
from numba_softmax import cases  # numpy only: Numba is not imported before select_backend

DEFAULT_SEED = 20261019

#: Every subcommand: name -> (module whose ``main(argv)`` runs it, one line for ``--help``).
SUBCOMMANDS = {
    "ptx": ("bench.ptx_report", "every kernel's sm_90 PTX, compiled offline, against the numerics policy "
                                "(--compare: beside nvcc's)"),
    "sass": ("bench.sass", "every kernel's sm_90 SASS beside its nvcc twin's, offline (--compare; needs the "
                           "'sass' extra's nvdisasm)"),
    "build-reference": ("bench.reference_build", "nvcc: reference_cu/*.cu -> PTX + cubin (needs a checkout and nvcc)"),
    "build-kernels": ("bench.kernel_build", "every kernel the main job launches -> PTX, cubin, SASS, on a CPU "
                                            "(for --prebuilt)"),
    "cache": ("bench.cache", "the on-disk cache of compiled kernels: info, clear, warm (compile an experiment's "
                             "kernels in parallel processes; GPU)"),
    "report": ("bench.report", "rebuild summary.md and the plots of a run folder (never overwrites recorded files)"),
    "bundle": ("bench.bundle", "manifest.json (sha256 of every file) and a compact review tar.gz of a run folder"),
    "profile": ("bench.profile", "Nsight Compute / Nsight Systems profiles of the experiments' variants (GPU)"),
    "perf": ("bench.perf", "copy ceilings, peer kernels, launch path and the performance goals (GPU)"),
    "sanitize": ("bench.sanitize", "compute-sanitizer memcheck/racecheck/synccheck on every kernel, with "
                                   "negative controls (GPU)"),
    "probe": ("bench.probe", f"the measurement probes: {', '.join(PROBES)} (GPU)"),
    "index": ("bench.results_index", "results/README.md generated from every results folder's metadata.json"),
    "dag-model": ("bench.dag_model", "the DAG's schedule modelled with a run's traced task durations: its span "
                                     "against the decision and hand-off costs (no GPU)"),
}


def _subcommand_epilog():
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["subcommands (python -m bench SUBCOMMAND --help for each one's options):"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
    return "\n".join(lines)


SIM_MAX_ELEMENTS = max(rows * cols for rows, cols in cases.EXPERIMENT_A_SIM_SHAPES)
SIM_CASE_NAMES = [name for name, _ in cases.EXPERIMENT_B_SIM_CASES]
GPU_CASE_NAMES = [case.name for case in cases.EXPERIMENT_B_CASES]


def _simulator_epilog():
    return (f"in the simulator (no GPU): Experiment A runs the shapes {shape_list(cases.EXPERIMENT_A_SIM_SHAPES)} "
            f"(or smaller ones, up to {SIM_MAX_ELEMENTS} elements), Experiment B the case(s) "
            f"{', '.join(SIM_CASE_NAMES)}; the simulator runs one block at a time, "
            "so the protocol's shapes and cases would take hours there and are refused.")


def experiment_parser():
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     epilog=_subcommand_epilog() + "\n\n" + _simulator_epilog(),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", choices=("A", "B"), required=True)
    parser.add_argument("--out", help="run folder (default runs/<UTC time>-exp<X>)")
    parser.add_argument("--expect-device", metavar="MODEL",
                        help="the GPU model the run is for (e.g. H100): any other device, or no GPU at all, stops "
                             f"the run before it starts. Default: any Hopper-class GPU (sm_90+), recorded, with a "
                             f"loud note when it is not the protocol's {PROTOCOL_DEVICE}; without a GPU, the simulator")
    parser.add_argument("--shapes", help="Experiment A only: comma-separated RxC shapes (default: the protocol's; "
                                         "in the simulator: the small ones listed below)")
    parser.add_argument("--cases", help="Experiment B only: comma-separated case names, e.g. balanced-128 "
                                        "(in the simulator: the case(s) listed below)")
    parser.add_argument("--variants", metavar="NAME[,NAME...]",
                        help="registered variants to run beside the experiment's own (its reference among them), "
                             "validated, compared and timed in the same rounds (docs/extending.md)")
    parser.add_argument("--variant-file", metavar="PATH", action="append",
                        help="a Python file that registers variants (repeatable); bench/variants/ is always loaded")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the per-round shuffles")
    parser.add_argument("--no-arrays", action="store_true", help="do not save inputs/outputs as .npy")
    parser.add_argument("--no-cudnn", action="store_true",
                        help="Experiment A without the cuDNN variant (otherwise a cuDNN that does not load stops "
                             "the run)")
    parser.add_argument("--trace", action="store_true",
                        help="Experiment B only: after the timing runs, run the trace builds on representative "
                             "cases and check task ordering (traces/*.csv, *.json for Perfetto, *.png)")
    parser.add_argument("--resume", metavar="DIR",
                        help="continue the interrupted run in DIR: same commit, device, experiment, seed, cases "
                             "and protocol required; completed cases are skipped, a partial case is redone")
    parser.add_argument("--force", action="store_true",
                        help="--resume only: continue a folder whose manifest.json records its files (a bundled run)")
    parser.add_argument("--prebuilt", metavar="DIR",
                        help="GPU only: load every kernel from DIR (python -m bench build-kernels) and compile none; "
                             "a kernel missing there, or built for another device, stops the run before it starts")
    parser.add_argument("--twins", action="store_true",
                        help="GPU only: every Numba variant's nvcc twin (reference_cu/, built by nvcc) joins the same "
                             "rounds as '<variant>-nvcc', validated and compared bit for bit with its Numba variant "
                             "first; the summary adds a Numba / nvcc table of paired ratios")
    parser.add_argument("--no-summary", action="store_true",
                        help="write the records only; summary.md and the plots come later from "
                             "python -m bench report DIR (the Modal app draws them on a CPU)")
    return parser


#: The checkout's folder a subcommand reads (bench runs from a checkout; docs/install.md), and when.
CHECKOUT_FOLDERS = {"build-reference": ("reference_cu", None), "ptx": ("reference_cu", "--compare"),
                    "sass": ("reference_cu", None),
                    "perf": ("reference_cu", None)}
CHECKOUT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkout_problem(name, argv, root=CHECKOUT_ROOT):
    """Why the subcommand cannot run from this tree (a folder of the checkout is missing), or None."""
    folder, only_with = CHECKOUT_FOLDERS.get(name, (None, None))
    if folder is None or (only_with is not None and only_with not in argv) or "--help" in argv or "-h" in argv:
        return None
    if os.path.isdir(os.path.join(root, folder)):
        return None
    what = f"`python -m bench {name}{' ' + only_with if only_with else ''}`"
    return (f"{what} needs a checkout of the repository: it reads {folder}/, which is not at "
            f"{os.path.join(root, folder)} (run it from a git clone; see docs/install.md)")


def run_subcommand(name, argv):
    """Import the subcommand's module only now: a missing optional module fails alone, clearly."""
    problem = checkout_problem(name, argv)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    module_name = SUBCOMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        print(f"error: `python -m bench {name}` is not available in this checkout ({module_name} is missing)",
              file=sys.stderr)
        return 2
    return module.main(argv)


def main(argv=None, *, after_case=None):
    """``after_case(name, completed)``, if given, is called after each case's records are written
    (the Modal app commits its Volume there)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        return run_subcommand(argv[0], argv[1:])
    if argv and not argv[0].startswith("-"):
        print(f"error: unknown subcommand {argv[0]!r}; known: {', '.join(SUBCOMMANDS)} "
              "(or --experiment A|B for the main job; python -m bench --help)", file=sys.stderr)
        return 2
    args = experiment_parser().parse_args(argv)
    problem = argument_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        gpu = select_backend(require_gpu_for=args.expect_device)
    except NoGpu as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if not gpu and args.prebuilt:
        print("error: --prebuilt loads cubins on a GPU; without one the simulator compiles nothing to load",
              file=sys.stderr)
        return 2
    if not gpu:
        problem = simulator_problem(args)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    # Numba reads NUMBA_ENABLE_CUDASIM once, at import: the experiments' modules load after select_backend.
    from bench.experiment import run_experiment
    return run_experiment(args, gpu, argv, after_case=after_case)


# ---------------------------------------------------------------- arguments, before anything runs

def argument_problem(args):
    """What is wrong with the arguments on any backend, or None."""
    if args.resume and args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
        return f"--out {args.out} and --resume {args.resume} name different folders"
    if args.force and not args.resume:
        return "--force applies to --resume only"
    if args.shapes and args.experiment != "A":
        return "--shapes applies to Experiment A; Experiment B takes --cases"
    if args.cases and args.experiment != "B":
        return "--cases applies to Experiment B; Experiment A takes --shapes"
    problem = variants_problem(args)
    if problem:
        return problem
    if args.shapes:
        try:
            parse_shapes(args.shapes)
        except ValueError as exc:
            return (f"{exc}; the protocol's shapes: {shape_list(cases.EXPERIMENT_A_SHAPES)}; in the simulator: "
                    f"{shape_list(cases.EXPERIMENT_A_SIM_SHAPES)}")
    if args.cases:
        unknown = [name for name in args.cases.split(",") if name not in GPU_CASE_NAMES + SIM_CASE_NAMES]
        if unknown:
            return (f"--cases: unknown case(s) {unknown}; on a GPU: {', '.join(GPU_CASE_NAMES)}; "
                    f"in the simulator: {', '.join(SIM_CASE_NAMES)}")
    return None


def variants_problem(args):
    """What is wrong with ``--variants`` and ``--variant-file`` before anything is loaded, or None (a name
    that no file registers is refused later, once the files are loaded: bench/variants/)."""
    text, files = getattr(args, "variants", None), getattr(args, "variant_file", None) or []
    names = text.split(",") if text is not None else []
    if text is not None and (not all(names) or len(set(names)) != len(names)):
        return f"--variants {text!r}: give distinct, comma-separated names"
    if files and not names:
        return "--variant-file loads variants; --variants names the ones to run"
    missing = [path for path in files if not os.path.isfile(path)]
    if missing:
        return f"--variant-file: no such file {', '.join(missing)}"
    return None


def simulator_problem(args):
    """Shapes and cases too large for the simulator, refused with what does run there, or None."""
    if getattr(args, "twins", False):
        return ("--twins needs a GPU and nvcc: the twins are nvcc-built cubins (reference_cu/) launched with the "
                "CUDA driver, which the simulator cannot run; run without --twins here, or on a GPU machine "
                "(nvcc, or a current reference_cu/build from `python -m bench build-reference`)")
    why = ("the simulator runs one block at a time in Python (about 45 ms per block), so the protocol's sizes "
           "would take hours")
    if args.shapes:
        large = [f"{r}x{c}" for r, c in parse_shapes(args.shapes) if r * c > SIM_MAX_ELEMENTS]
        if large:
            return (f"--shapes {', '.join(large)}: too large for the simulator ({why}). In the simulator run "
                    f"{shape_list(cases.EXPERIMENT_A_SIM_SHAPES)} or any shape up to {SIM_MAX_ELEMENTS} elements; "
                    "the protocol's shapes need a GPU")
    if args.cases:
        gpu_only = [name for name in args.cases.split(",") if name not in SIM_CASE_NAMES]
        if gpu_only:
            sizes = {c.name: int(c.row_lengths().sum()) for c in cases.EXPERIMENT_B_CASES}
            described = ", ".join(f"{n} ({sizes[n]:,} elements)" for n in gpu_only)
            return (f"--cases {described}: GPU case(s), not run in the simulator ({why}). "
                    f"In the simulator run: {', '.join(SIM_CASE_NAMES)} (the default)")
    return None


