"""The main job: one experiment run into its folder (``python -m bench --experiment A|B``; bench/cli.py checks
the arguments and chooses the backend first, then imports this module).

Every case is planned by bench/experiment_a.py or experiment_b.py, run by bench/runner.py and appended to the
run folder as it completes; ``--resume`` continues an interrupted folder (bench/resume.py).
"""

import argparse
import contextlib
import datetime
import json
import os
import signal
import sys
import traceback
import warnings

import numba
from tqdm import tqdm

from bench import resume as resuming
from bench import variants as registered_variants
from bench.artifacts import ProtectedFiles, RunFolder, default_run_folder, recorded_files
from bench.environment import DeviceMismatch, base_metadata, check_device, compile_record
from bench.experiment_a import EXPERIMENT_PLAN_A
from bench.experiment_b import EXPERIMENT_PLAN_B
from bench.report import terminal_verdict, write_summary
from bench.runner import run_case
from bench.trace_step import REPRESENTATIVE_CASES, run_traces
from numba_softmax.backend import SIMULATOR
from numba_softmax.cases import EXPERIMENT_B_CASES, EXPERIMENT_B_SCHEDULERS, EXPERIMENT_B_SIM_CASES
from numba_softmax.launch.prebuilt import KernelStore, PrebuiltKernelError, activate, kernel_key
from numba_softmax.oracle import AcceptanceError
from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches

#: Where the simulator's atomics add (numba-cuda's simulator/kernelapi.py), as warnings name its module.
SIMULATOR_ATOMICS_MODULE = r".*cuda\.simulator\.kernelapi$"


def _run_trace_step(args, run, stream, gpu, metadata):
    """Trace builds after every timing run (never inside one); returns the exit status."""
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
    out = args.resume or args.out or default_run_folder(f"exp{args.experiment}")
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
    try:
        added = registered_variants.chosen(args)
    except registered_variants.VariantError as exc:  # before the folder exists: nothing is created
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if added:
        metadata["variants"] = registered_variants.record(added)
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
            # GPU only: kernel_build loads the kernel registry, whose builds the simulator cannot make.
            from bench.kernel_build import expected_keys
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
        with simulator_wraparound_quiet(gpu):
            return _run_in_folder(args, gpu, run, metadata, stored, after_case)
    except BaseException as exc:
        # Whatever stops the run leaves the folder marked with why (never an empty or unmarked folder);
        # a resumed folder's first-session metadata is kept as it was.
        if stored is None and not run.path_of("metadata.json").exists():
            metadata["stopped"] = f"{type(exc).__name__}: {exc}"
            run.write_json("metadata.json", metadata)
        raise


@contextlib.contextmanager
def simulator_wraparound_quiet(gpu):
    """In the simulator, no ``RuntimeWarning: overflow encountered in scalar add`` from its atomics: the phased
    scheduler's grid-barrier word flips its top bit by int32 wraparound (``flip_add``), as ``atom.add`` does on
    the GPU, and the simulator's numpy add reports that intended wraparound as an overflow. Only that warning."""
    with warnings.catch_warnings():
        if not gpu:
            warnings.filterwarnings("ignore", message="overflow encountered in scalar add", category=RuntimeWarning,
                                    module=SIMULATOR_ATOMICS_MODULE)
        yield


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
    out = str(run.path)
    skip = set()
    if stored is not None:
        try:
            resuming.check_compatible(stored, metadata)
            resume_plan = resuming.plan_resume(run.path, metadata["case_names"])
        except resuming.ResumeRefused as exc:
            print(f"error: --resume {out}: {exc}", file=sys.stderr)
            return 4
    plan = EXPERIMENT_PLAN_A if args.experiment == "A" else EXPERIMENT_PLAN_B
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


def run_launch_keys(scratch) -> list[str]:
    """The key of every kernel launch the main job's plans build (both experiments, every variant, and
    the trace builds), read from the launches themselves. Runs in the simulator or on a GPU."""

    def key(launch):
        launch = getattr(launch, "launch", launch)  # a GPU invocation holds prepared launches
        return kernel_key(launch.kernel, tuple(numba.typeof(a) for a in launch.args))

    keys = set()
    gpu = not SIMULATOR
    run = RunFolder(scratch)
    for experiment, plan in (("A", EXPERIMENT_PLAN_A), ("B", EXPERIMENT_PLAN_B)):
        args = argparse.Namespace(experiment=experiment, shapes=None, cases=None, no_cudnn=True, no_arrays=True,
                                   expect_device=None, trace=False)
        _stream, factories, _notes = plan(args, gpu, {}, run)
        for make in factories:
            for variant in make().variants:
                keys.update(key(launch) for launch in variant.invocation.launches)
    _name, lengths = EXPERIMENT_B_SIM_CASES[0]
    traced = TiledBuffers.allocate(build_layout(lengths), trace=True)
    for scheduler in EXPERIMENT_B_SCHEDULERS:
        keys.update(key(launch) for launch in tiled_launches(scheduler, traced, 1, trace=True))
    return sorted(keys)
