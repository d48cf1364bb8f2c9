"""``python -m bench``: the experiments, the offline PTX report, the summary rebuild.

    python -m bench --experiment A|B [--out DIR] [--expect-device H100] [--shapes 1x128,7x781]
    python -m bench --experiment A|B --resume DIR      (continue an interrupted run in its folder)
    python -m bench ptx [--kernel NAME] [--out DIR]
    python -m bench ptx --compare [--kernel NAME] [--out DIR]   (Numba's PTX beside nvcc's, reference_cu/)
    python -m bench build-reference [--out DIR]                 (nvcc: reference_cu/*.cu -> PTX + cubin)
    python -m bench report DIR
    python -m bench bundle DIR [--out FILE]             (manifest.json + compact review tar.gz)
    python -m bench profile --experiment A|B [--out DIR] [--cases ...]   (Nsight Compute, separate)
    python -m bench perf [--out DIR] [--expect-device H200]   (ceilings, peers, launch path, issue-8 goals)

Without a GPU the experiments run in the Numba CUDA simulator on small cases,
validate correctness only and say so loudly.
"""

import argparse
import datetime
import json
import os
import sys
import traceback

from bench.environment import DeviceMismatch, base_metadata, check_expected_device, select_backend

DEFAULT_SEED = 20261019


def _parse_shape(text):
    rows, cols = text.lower().split("x")
    return int(rows), int(cols)


def experiment_parser():
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", choices=("A", "B"), required=True)
    parser.add_argument("--out", help="run folder (default runs/<UTC time>-exp<X>)")
    parser.add_argument("--expect-device", default="H100",
                        help="device model the run is for; any other model stops the run (default H100)")
    parser.add_argument("--shapes", help="Experiment A only: comma-separated RxC shapes (default: the protocol's)")
    parser.add_argument("--cases", help="Experiment B only: comma-separated case names, e.g. balanced-128")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the per-round shuffles")
    parser.add_argument("--no-arrays", action="store_true", help="do not save inputs/outputs as .npy")
    parser.add_argument("--no-cudnn", action="store_true", help="Experiment A without the cuDNN variant")
    parser.add_argument("--trace", action="store_true",
                        help="Experiment B only: after the timing runs, run the trace builds on representative "
                             "cases and check task ordering (traces/*.csv, *.json for Perfetto, *.png)")
    parser.add_argument("--resume", metavar="DIR",
                        help="continue the interrupted run in DIR: same commit, device, experiment, seed, cases "
                             "and protocol required; completed cases are skipped, a partial case is redone")
    return parser


def main(argv=None, *, after_case=None):
    """``after_case(name, completed)``, if given, is called after each case's records are written
    (the Modal app commits its Volume there)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "ptx":
        from bench.ptx_report import main as ptx_main
        return ptx_main(argv[1:])
    if argv and argv[0] == "build-reference":
        from bench.reference_build import main as build_reference_main
        return build_reference_main(argv[1:])
    if argv and argv[0] == "report":
        from bench.artifacts import RunFolder
        from bench.report import write_summary
        if len(argv) != 2:
            print("usage: python -m bench report DIR", file=sys.stderr)
            return 2
        print(write_summary(RunFolder(argv[1], resume=True)))
        return 0
    if argv and argv[0] == "bundle":
        from bench.bundle import main as bundle_main
        return bundle_main(argv[1:])
    if argv and argv[0] == "perf":
        from bench.perf import main as perf_main
        return perf_main(argv[1:])
    if argv and argv[0] == "profile":
        from bench.profile import main as profile_main
        return profile_main(argv[1:])
    args = experiment_parser().parse_args(argv)
    if args.resume and args.out and os.path.abspath(args.out) != os.path.abspath(args.resume):
        print(f"error: --out {args.out} and --resume {args.resume} name different folders", file=sys.stderr)
        return 2
    gpu = select_backend()
    return run_experiment(args, gpu, argv, after_case=after_case)


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


def run_experiment(args, gpu, argv, after_case=None):
    from tqdm import tqdm

    from bench.artifacts import RunFolder
    from bench.report import write_summary
    from numba_softmax.oracle import AcceptanceError

    from bench import resume as resuming

    out = args.resume or args.out or os.path.join(
        "runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-exp{args.experiment}")
    stored = None
    if args.resume:
        if not os.path.isfile(os.path.join(out, "metadata.json")):
            print(f"error: --resume {out}: no metadata.json there, nothing to resume", file=sys.stderr)
            return 4
        run = RunFolder(out, resume=True)
        with open(run.path_of("metadata.json"), encoding="utf-8") as f:
            stored = json.load(f)
    else:
        run = RunFolder(out)
    metadata = base_metadata(gpu, argv)
    metadata["expected_device"] = args.expect_device
    metadata["seed"] = args.seed
    metadata.update(resuming.run_identity(args, gpu))
    if gpu:
        try:
            check_expected_device(metadata["device"]["name"], args.expect_device)
        except DeviceMismatch as exc:
            print(f"error: {exc}", file=sys.stderr)
            if stored is None:  # a resumed folder keeps its own metadata untouched
                metadata["stopped"] = str(exc)
                run.write_json("metadata.json", metadata)
            return 3
    skip = set()
    if stored is not None:
        try:
            resuming.check_compatible(stored, metadata)
            resume_plan = resuming.plan_resume(run.path, metadata["case_names"])
        except resuming.ResumeRefused as exc:
            print(f"error: --resume {out}: {exc}", file=sys.stderr)
            return 4
        dropped = resuming.drop_partial_cases(run.path, resume_plan.interrupted, args.experiment)
        skip = set(resume_plan.completed)
        print(f"resuming {out}: {len(resume_plan.completed)} completed case(s) kept and skipped "
              f"{resume_plan.completed}; interrupted case(s) redone {resume_plan.interrupted}; "
              f"to run {resume_plan.to_run}; backups of rewritten files in {dropped['backup']}", file=sys.stderr)
    if args.experiment == "A":
        from bench.experiment_a import EXPERIMENT_PLAN_A as plan
    else:
        from bench.experiment_b import EXPERIMENT_PLAN_B as plan
    stream, cases, notes = plan(args, gpu, metadata, run)
    metadata["ratio_reference"] = {args.experiment: plan.ratio_reference}
    metadata["notes"] = notes
    if stored is not None:
        try:
            resuming.check_compatible_after_plan(stored, metadata)
        except resuming.ResumeRefused as exc:
            print(f"error: --resume {out}: {exc}", file=sys.stderr)
            return 4
        metadata = resuming.merged_metadata(stored, metadata, resume_plan, dropped)
    run.write_json("metadata.json", metadata)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    from bench.runner import run_case
    status = 0
    progress = tqdm(cases, desc=f"experiment {args.experiment}", unit="case")
    case_names = metadata["case_names"]
    if len(cases) != len(case_names):
        raise RuntimeError(f"the plan built {len(cases)} cases but {len(case_names)} were expected: {case_names}")
    for index, make_case in enumerate(progress):
        if case_names[index] in skip:  # completed in an earlier session of this run (--resume)
            continue
        case = make_case()
        if case.name != case_names[index]:
            raise RuntimeError(f"case {index} is {case.name!r}, expected {case_names[index]!r} "
                               "(bench/resume.py planned_case_names disagrees with the plan)")
        progress.set_postfix_str(case.name)
        stopped_by = None
        try:
            run_case(case, run, stream, gpu=gpu, seed=args.seed + index, save_arrays=not args.no_arrays)
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
        record = {"case": case.name, "completed": status == 0}
        if stopped_by:
            record["stopped_by"] = stopped_by
        run.append_jsonl("progress.jsonl", record)
        if after_case is not None:
            after_case(case.name, status == 0)
        if status:
            break
    if status == 0 and args.trace:
        status = _run_trace_step(args, run, stream, gpu, metadata)
    metadata["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    run.write_json("metadata.json", metadata)
    summary = write_summary(run)
    print(f"{'completed' if status == 0 else 'STOPPED'}: {summary}")
    if not gpu:
        print("(simulator run: correctness only, no timings)", file=sys.stderr)
    return status
