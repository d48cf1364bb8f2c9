"""``python -m bench``: the experiments, the offline PTX report, the summary rebuild.

    python -m bench --experiment A|B [--out DIR] [--expect-device H100] [--shapes 1x128,7x781]
    python -m bench ptx [--kernel NAME] [--out DIR]
    python -m bench report DIR

Without a GPU the experiments run in the Numba CUDA simulator on small cases,
validate correctness only and say so loudly.
"""

import argparse
import datetime
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
    return parser


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "ptx":
        from bench.ptx_report import main as ptx_main
        return ptx_main(argv[1:])
    if argv and argv[0] == "report":
        from bench.artifacts import RunFolder
        from bench.report import write_summary
        if len(argv) != 2:
            print("usage: python -m bench report DIR", file=sys.stderr)
            return 2
        print(write_summary(RunFolder(argv[1], resume=True)))
        return 0
    args = experiment_parser().parse_args(argv)
    gpu = select_backend()
    return run_experiment(args, gpu, argv)


def run_experiment(args, gpu, argv):
    from tqdm import tqdm

    from bench.artifacts import RunFolder
    from bench.report import write_summary
    from numba_softmax.oracle import AcceptanceError

    out = args.out or os.path.join(
        "runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-exp{args.experiment}")
    run = RunFolder(out)
    metadata = base_metadata(gpu, argv)
    metadata["expected_device"] = args.expect_device
    metadata["seed"] = args.seed
    if gpu:
        try:
            check_expected_device(metadata["device"]["name"], args.expect_device)
        except DeviceMismatch as exc:
            metadata["stopped"] = str(exc)
            run.write_json("metadata.json", metadata)
            print(f"error: {exc}", file=sys.stderr)
            return 3
    if args.experiment == "A":
        from bench.experiment_a import EXPERIMENT_PLAN_A as plan
    else:
        from bench.experiment_b import EXPERIMENT_PLAN_B as plan
    stream, cases, notes = plan(args, gpu, metadata, run)
    metadata["ratio_reference"] = {args.experiment: plan.ratio_reference}
    metadata["notes"] = notes
    run.write_json("metadata.json", metadata)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    from bench.runner import run_case
    status = 0
    progress = tqdm(cases, desc=f"experiment {args.experiment}", unit="case")
    for index, make_case in enumerate(progress):
        case = make_case()
        progress.set_postfix_str(case.name)
        try:
            run_case(case, run, stream, gpu=gpu, seed=args.seed + index, save_arrays=not args.no_arrays)
        except AcceptanceError as exc:
            print(f"\nREQUIRED CHECK FAILED, stopping (everything written so far is kept in {out}):\n{exc}",
                  file=sys.stderr)
            metadata["stopped"] = str(exc)
            status = 1
        except Exception as exc:  # keep what was written, record why we stopped
            metadata["stopped"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
            status = 1
        run.append_jsonl("progress.jsonl", {"case": case.name, "completed": status == 0})
        if status:
            break
    metadata["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    run.write_json("metadata.json", metadata)
    summary = write_summary(run)
    print(f"{'completed' if status == 0 else 'STOPPED'}: {summary}")
    if not gpu:
        print("(simulator run: correctness only, no timings)", file=sys.stderr)
    return status
