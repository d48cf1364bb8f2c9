"""``python -m bench``: the experiments (the main job) and the subcommands around them.

    python -m bench --experiment A|B [--out DIR] [--expect-device MODEL] [--shapes 1x128,7x781] [--cases ...]
    python -m bench --experiment A|B --resume DIR      (continue an interrupted run in its folder)
    python -m bench SUBCOMMAND --help                  (each subcommand's own options)

Without a GPU the experiments run in the Numba CUDA simulator on small cases, validate
correctness only and say so loudly. ``--expect-device`` makes a GPU of that model a hard
requirement (no simulator fallback).
"""

import argparse
import contextlib
import datetime
import importlib
import importlib.util
import json
import os
import signal
import sys
import traceback

from bench.environment import (PROTOCOL_DEVICE, DeviceMismatch, NoGpu, base_metadata, check_device, compile_record,
                               select_backend)

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
    "probe": ("bench.probe", "the measurement probes: fused, tiles, launch (GPU)"),
    "index": ("bench.results_index", "results/README.md generated from every results folder's metadata.json"),
    "dag-model": ("bench.dag_model", "the DAG's schedule modelled with a run's traced task durations: its span "
                                     "against the decision and hand-off costs (no GPU)"),
}


def protocol_cases():
    """numba_softmax/cases.py, loaded on its own.

    Importing it through its package would import Numba, which reads NUMBA_ENABLE_CUDASIM once:
    the backend must be chosen first (select_backend), and the help and the argument checks come
    before that. cases.py imports only numpy, so it loads alone.
    """
    if "numba_softmax.cases" in sys.modules:
        return sys.modules["numba_softmax.cases"]
    package = importlib.util.find_spec("numba_softmax")  # locates the package without running it
    path = os.path.join(os.path.dirname(package.origin), "cases.py")
    spec = importlib.util.spec_from_file_location("bench._protocol_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _subcommand_epilog():
    width = max(len(name) for name in SUBCOMMANDS)
    lines = ["subcommands (python -m bench SUBCOMMAND --help for each one's options):"]
    lines += [f"  {name.ljust(width)}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
    return "\n".join(lines)


def _simulator_epilog():
    cases = protocol_cases()
    EXPERIMENT_A_SIM_SHAPES, EXPERIMENT_B_SIM_CASES = cases.EXPERIMENT_A_SIM_SHAPES, cases.EXPERIMENT_B_SIM_CASES
    return (f"in the simulator (no GPU): Experiment A runs the shapes {_shape_list(EXPERIMENT_A_SIM_SHAPES)} "
            f"(or smaller ones, up to {SIM_MAX_ELEMENTS} elements), Experiment B the case(s) "
            f"{', '.join(name for name, _ in EXPERIMENT_B_SIM_CASES)}; the simulator runs one block at a time, "
            "so the protocol's shapes and cases would take hours there and are refused.")


def _shape_list(shapes):
    return ", ".join(f"{rows}x{cols}" for rows, cols in shapes)


def _sim_max_elements():
    return max(rows * cols for rows, cols in protocol_cases().EXPERIMENT_A_SIM_SHAPES)


SIM_MAX_ELEMENTS = _sim_max_elements()


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
    return run_experiment(args, gpu, argv, after_case=after_case)


# ---------------------------------------------------------------- arguments, before anything runs

def parse_shapes(text):
    """``"1x128,7x781"`` -> [(1, 128), (7, 781)]; a malformed entry raises ValueError naming it."""
    shapes = []
    for item in text.split(","):
        parts = item.strip().lower().split("x")
        try:
            rows, cols = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"--shapes: {item!r} is not ROWSxCOLUMNS (e.g. 4096x1024)") from None
        if rows <= 0 or cols <= 0:
            raise ValueError(f"--shapes: {item!r} needs positive rows and columns")
        shapes.append((rows, cols))
    return shapes


def argument_problem(args):
    """What is wrong with the arguments on any backend, or None."""
    cases = protocol_cases()
    EXPERIMENT_B_CASES, EXPERIMENT_B_SIM_CASES = cases.EXPERIMENT_B_CASES, cases.EXPERIMENT_B_SIM_CASES

    if args.resume and args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
        return f"--out {args.out} and --resume {args.resume} name different folders"
    if args.force and not args.resume:
        return "--force applies to --resume only"
    if args.shapes and args.experiment != "A":
        return "--shapes applies to Experiment A; Experiment B takes --cases"
    if args.cases and args.experiment != "B":
        return "--cases applies to Experiment B; Experiment A takes --shapes"
    if args.shapes:
        try:
            parse_shapes(args.shapes)
        except ValueError as exc:
            return (f"{exc}; the protocol's shapes: {_shape_list(cases.EXPERIMENT_A_SHAPES)}; in the simulator: "
                    f"{_shape_list(cases.EXPERIMENT_A_SIM_SHAPES)}")
    if args.cases:
        known = [c.name for c in EXPERIMENT_B_CASES] + [name for name, _ in EXPERIMENT_B_SIM_CASES]
        unknown = [name for name in args.cases.split(",") if name not in known]
        if unknown:
            return (f"--cases: unknown case(s) {unknown}; on a GPU: {', '.join(c.name for c in EXPERIMENT_B_CASES)}; "
                    f"in the simulator: {', '.join(name for name, _ in EXPERIMENT_B_SIM_CASES)}")
    return None


def simulator_problem(args):
    """Shapes and cases too large for the simulator, refused with what does run there, or None."""
    cases = protocol_cases()
    EXPERIMENT_A_SIM_SHAPES, EXPERIMENT_B_SIM_CASES = cases.EXPERIMENT_A_SIM_SHAPES, cases.EXPERIMENT_B_SIM_CASES
    EXPERIMENT_B_CASES = cases.EXPERIMENT_B_CASES

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
                    f"{_shape_list(EXPERIMENT_A_SIM_SHAPES)} or any shape up to {SIM_MAX_ELEMENTS} elements; "
                    "the protocol's shapes need a GPU")
    if args.cases:
        sim_names = [name for name, _ in EXPERIMENT_B_SIM_CASES]
        gpu_only = [name for name in args.cases.split(",") if name not in sim_names]
        if gpu_only:
            sizes = {c.name: int(c.row_lengths().sum()) for c in EXPERIMENT_B_CASES}
            described = ", ".join(f"{n} ({sizes[n]:,} elements)" for n in gpu_only)
            return (f"--cases {described}: GPU case(s), not run in the simulator ({why}). "
                    f"In the simulator run: {', '.join(sim_names)} (the default)")
    return None


# ---------------------------------------------------------------- the main job

def _run_trace_step(args, run, stream, gpu, metadata):
    """Trace builds after every timing run (never inside one); returns the exit status."""
    from bench.trace_step import REPRESENTATIVE_CASES, run_traces
    from numba_softmax.cases import EXPERIMENT_B_CASES, EXPERIMENT_B_SIM_CASES
    from numba_softmax.oracle import AcceptanceError

    if args.experiment != "B":
        print("note: --trace applies to Experiment B only; ignored", file=sys.stderr)
        return 0
    if gpu:
        cases = [(c.name, c.row_lengths()) for c in EXPERIMENT_B_CASES if c.name in REPRESENTATIVE_CASES]
    else:
        cases = [(name, lengths) for name, lengths in EXPERIMENT_B_SIM_CASES]
    try:
        run_traces(run, stream, cases, gpu)
    except AcceptanceError as exc:
        print(f"\nTRACE CHECK FAILED (traces kept in {run.path_of('traces')}):\n{exc}", file=sys.stderr)
        metadata["stopped"] = str(exc)
        return 1
    return 0


def _device_banner(text):
    bar = "#" * 80
    return f"\n{bar}\n#  {text}\n{bar}\n"


def run_experiment(args, gpu, argv, after_case=None):
    from bench import resume as resuming
    from bench.artifacts import ProtectedFiles, RunFolder, recorded_files

    out = args.resume or args.out or os.path.join(
        "runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-exp{args.experiment}")
    stored = None
    if args.resume:
        if not os.path.isfile(os.path.join(out, "metadata.json")):
            print(f"error: --resume {out}: no metadata.json there, nothing to resume (not a run folder)",
                  file=sys.stderr)
            return 4
        if os.path.exists(os.path.join(out, "timings.jsonl.gz")):
            print(f"error: --resume {out}: its timings are stored compressed (timings.jsonl.gz): a finished, packed "
                  "run; resuming would write timings.jsonl beside it. Start a new run folder", file=sys.stderr)
            return 4
        recorded = recorded_files(out)
        if recorded and not getattr(args, "force", False):
            print(f"error: --resume {out}: {ProtectedFiles.describe(out, sorted(recorded)[:5], len(recorded))}; "
                  "resuming would change them. Pass --force to continue this folder anyway", file=sys.stderr)
            return 4
        run = RunFolder(out, resume=True)
        with open(run.path_of("metadata.json"), encoding="utf-8") as f:
            stored = json.load(f)
    metadata = base_metadata(gpu, argv)
    metadata["expected_device"] = args.expect_device
    metadata["seed"] = args.seed
    metadata.update(resuming.run_identity(args, gpu))
    if gpu:
        try:
            note = check_device(metadata["device"], args.expect_device)
        except DeviceMismatch as exc:  # before the folder exists: nothing is created
            print(f"error: {exc}", file=sys.stderr)
            return 3
        if note:
            metadata["device_note"] = note
            print(_device_banner(note), file=sys.stderr)
        if args.prebuilt:
            from bench.kernel_build import expected_keys
            from numba_softmax.launch.prebuilt import KernelStore, PrebuiltKernelError, activate
            try:
                missing = KernelStore(args.prebuilt).missing(expected_keys())
                if missing:
                    raise PrebuiltKernelError(f"{len(missing)} kernel(s) the run launches are not there: {missing}")
                store = activate(args.prebuilt)  # every module loaded now, before anything is allocated
            except PrebuiltKernelError as exc:
                print(f"error: --prebuilt {args.prebuilt}: {exc}", file=sys.stderr)
                return 3
            metadata["prebuilt"] = {"folder": store.folder, "kernels": len(store.records),
                                    "arch": store.manifest["arch"], "ptxas": store.manifest["ptxas"]}
    if stored is None:
        try:
            run = RunFolder(out)
        except (FileExistsError, NotADirectoryError) as exc:
            print(f"error: {exc} (a run never mixes its files with another's: give a new --out)", file=sys.stderr)
            return 2
    try:
        return _run_in_folder(args, gpu, run, metadata, stored, after_case)
    except BaseException as exc:
        # Whatever stops the run leaves the folder marked with why (never an empty or unmarked folder);
        # a resumed folder's first-session metadata is kept as it was.
        if stored is None and not run.path_of("metadata.json").exists():
            metadata["stopped"] = f"{type(exc).__name__}: {exc}"
            run.write_json("metadata.json", metadata)
        raise


@contextlib.contextmanager
def terminate_raises():
    """Within it, SIGTERM (``timeout``, a container being stopped) raises SystemExit in the main thread, so a
    run records the case it was stopped in (metadata ``stopped``) instead of vanishing mid-case; the
    previous handler comes back on the way out. Elsewhere than the main thread it changes nothing."""
    def terminated(signum, frame):
        raise SystemExit(f"terminated by {signal.Signals(signum).name}")

    try:
        previous = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_in_folder(args, gpu, run, metadata, stored, after_case):
    from tqdm import tqdm

    from bench import resume as resuming
    from bench.report import terminal_verdict, write_summary
    from bench.runner import run_case
    from numba_softmax.oracle import AcceptanceError

    out = str(run.path)
    skip = set()
    if stored is not None:
        try:
            resuming.check_compatible(stored, metadata)
            resume_plan = resuming.plan_resume(run.path, metadata["case_names"])
        except resuming.ResumeRefused as exc:
            print(f"error: --resume {out}: {exc}", file=sys.stderr)
            return 4
    if args.experiment == "A":
        from bench.experiment_a import EXPERIMENT_PLAN_A as plan
    else:
        from bench.experiment_b import EXPERIMENT_PLAN_B as plan
    try:
        stream, cases, notes = plan(args, gpu, metadata, run)
    except Exception as exc:
        if stored is not None:
            raise
        metadata["stopped"] = f"{type(exc).__name__}: {exc}"
        run.write_json("metadata.json", metadata)
        print(f"error: {exc}\n(the run folder {out} is marked stopped with this reason)", file=sys.stderr)
        return 1
    metadata["ratio_reference"] = {args.experiment: plan.ratio_reference}
    metadata["notes"] = notes
    if stored is not None:
        try:
            resuming.check_compatible_after_plan(stored, metadata)
        except resuming.ResumeRefused as exc:
            print(f"error: --resume {out}: {exc}", file=sys.stderr)
            return 4
        dropped = resuming.drop_partial_cases(run.path, resume_plan.interrupted, args.experiment)
        skip = set(resume_plan.completed)
        print(f"resuming {out}: {len(resume_plan.completed)} completed case(s) kept and skipped "
              f"{resume_plan.completed}; interrupted case(s) redone {resume_plan.interrupted}; "
              f"to run {resume_plan.to_run}; backups of rewritten files in {dropped['backup']}", file=sys.stderr)
        metadata = resuming.merged_metadata(stored, metadata, resume_plan, dropped)
    run.write_json("metadata.json", metadata)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    status = 0
    progress = tqdm(cases, desc=f"experiment {args.experiment}", unit="case")
    case_names = metadata["case_names"]
    if len(cases) != len(case_names):
        raise RuntimeError(f"the plan built {len(cases)} cases but {len(case_names)} were expected: {case_names}")
    with terminate_raises():
        for index, make_case in enumerate(progress):
            if case_names[index] in skip:  # completed in an earlier session of this run (--resume)
                continue
            progress.set_postfix_str(f"{case_names[index]}: building")
            stopped_by = None
            case_name = case_names[index]
            try:
                case = make_case()
                if case.name != case_name:
                    raise RuntimeError(f"case {index} is {case.name!r}, expected {case_name!r} "
                                       "(bench/resume.py planned_case_names disagrees with the plan)")

                def step(what, case_name=case_name):
                    progress.set_postfix_str(f"{case_name}: {what}")

                run_case(case, run, stream, gpu=gpu, seed=args.seed + index, save_arrays=not args.no_arrays,
                         on_step=step)
            except AcceptanceError as exc:
                print(f"\nREQUIRED CHECK FAILED, stopping (everything written so far is kept in {out}):\n{exc}",
                      file=sys.stderr)
                metadata["stopped"] = str(exc)
                stopped_by = resuming.STOPPED_BY_REQUIRED_CHECK
                status = 1
            except Exception as exc:  # keep what was written, record why we stopped
                metadata["stopped"] = f"{type(exc).__name__}: {exc}"
                traceback.print_exc()
                stopped_by = "error"
                status = 1
            except BaseException as exc:  # interrupted (Ctrl-C, a killed container): say so, then stop
                metadata["stopped"] = f"interrupted in case {case_name}: {type(exc).__name__} {exc}".rstrip()
                run.write_json("metadata.json", metadata)
                raise
            record = {"case": case_name, "completed": status == 0}
            if stopped_by:
                record["stopped_by"] = stopped_by
            run.append_jsonl("progress.jsonl", record)
            if after_case is not None:
                after_case(case_name, status == 0)
            if status:
                break
    progress.close()
    if status == 0 and args.trace:
        status = _run_trace_step(args, run, stream, gpu, metadata)
    metadata["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    metadata["kernel_compiles"] = compile_record()
    run.write_json("metadata.json", metadata)
    print(terminal_verdict(run))
    if args.no_summary:
        print(f"{'completed' if status == 0 else 'STOPPED'}: {out} (summary: python -m bench report {out})")
    else:
        summary = write_summary(run, force=True)  # the run's own summary, written by the run itself
        print(f"{'completed' if status == 0 else 'STOPPED'}: {summary}")
    if not gpu:
        print("(simulator run: correctness only, no timings)", file=sys.stderr)
    return status
