"""The program a profiler launches: one variant of one case, a few invocations, nothing timed.

    python -m bench.profile_driver --experiment A --case 4096x1024 --variant fused \\
        [--mode stream|graph] [--repeat 3] --record FILE.json --scratch DIR [--expect-device H100]

A variant named ``<variant>-nvcc`` is that variant's nvcc twin (the plan then loads the twins, as
``python -m bench --twins`` does), so ``python -m bench profile --variants stages,stages-nvcc``
profiles a Numba kernel and its twin with the same counters.

It builds the case with the SAME harness classes as the benchmark (the experiment's
plan: bench.experiment_a.MatrixCase / bench.experiment_b.TiledBenchCase, the launch
layer, the captured graph), loads the ``random`` fixture, runs the variant a couple of
times outside the profiled range (module loading, cuDNN warm-up), then brackets exactly
``--repeat`` invocations with ``cuProfilerStart``/``cuProfilerStop`` (the profiler runs
with ``--profile-from-start off``, so nothing else is captured), checks the output
against the oracle and writes a JSON record: device, logical bytes per invocation,
kernel resources the driver reports, the check result.

Exit status: 0 checked and passed; 1 the output failed the check; 2 no GPU; 3 wrong device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cuda.bindings import driver as cu

from bench import environment, experiment_a, experiment_b
from bench.artifacts import RunFolder, to_jsonable
from bench.environment import DeviceMismatch, check_expected_device
from bench.protocol import TWIN_SUFFIX
from numba_softmax.launch import driver
from numba_softmax.launch.graphs import CapturedGraph

PROFILED_FIXTURE = "random"


def parser():
    p = argparse.ArgumentParser(prog="python -m bench.profile_driver", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", choices=("A", "B"), required=True)
    p.add_argument("--case", required=True, help="an Experiment A shape (4096x1024) or an Experiment B case name")
    p.add_argument("--variant", required=True)
    p.add_argument("--mode", choices=("stream", "graph"), default="stream")
    p.add_argument("--repeat", type=int, default=3, help="profiled invocations")
    p.add_argument("--warmups", type=int, default=2, help="unprofiled invocations first")
    p.add_argument("--record", required=True, help="JSON record written here")
    p.add_argument("--scratch", required=True, help="folder for the plan's side files (workers/layouts)")
    p.add_argument("--expect-device", default="H100")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    record = {"experiment": args.experiment, "case": args.case, "variant": args.variant, "mode": args.mode,
              "repeat": args.repeat, "warmups": args.warmups, "fixture": PROFILED_FIXTURE}
    problem = environment.gpu_problem("a profiler")
    if problem:
        record["error"] = problem
        _write(args.record, record)
        print(f"error: {problem}", file=sys.stderr)
        return 2
    record["device"] = driver.device_record()
    try:
        check_expected_device(record["device"]["name"], args.expect_device)
    except DeviceMismatch as exc:
        record["error"] = str(exc)
        _write(args.record, record)
        print(f"error: {exc}", file=sys.stderr)
        return 3

    plan = experiment_a.EXPERIMENT_PLAN_A if args.experiment == "A" else experiment_b.EXPERIMENT_PLAN_B
    # A twin variant ("stages-nvcc", "separate-nvcc", ...) exists only in a plan built with the twins, as
    # under `python -m bench --twins`; profiling it beside its Numba variant compares what the memory system
    # sees of the two kernels (docs/numba_vs_nvcc.md).
    plan_args = argparse.Namespace(experiment=args.experiment, shapes=args.case if args.experiment == "A" else None,
                                   cases=args.case if args.experiment == "B" else None,
                                   no_cudnn=args.variant != "cudnn", no_arrays=True, expect_device=args.expect_device,
                                   twins=args.variant.endswith(TWIN_SUFFIX))
    metadata = {}
    stream, factories, notes = plan(plan_args, True, metadata, RunFolder(args.scratch, resume=True))
    record["notes"] = notes
    record["cudnn"] = metadata.get("cudnn")
    if len(factories) != 1:
        raise SystemExit(f"case {args.case!r} selected {len(factories)} cases")
    case = factories[0]()
    known = [v.name for v in case.variants]
    if args.variant not in known:
        record["error"] = f"variant {args.variant!r} is not one of {known} for case {case.name}"
        _write(args.record, record)
        print(f"error: {record['error']}", file=sys.stderr)
        return 2
    variant = case.variant(args.variant)
    record["bytes_moved_logical"] = case.bytes_moved
    if hasattr(variant.invocation, "kernel_resources"):
        record["kernel_resources"] = variant.invocation.kernel_resources()
    host_input = case.load_fixture(PROFILED_FIXTURE)

    submit = variant.invocation.enqueue
    graph = None
    if args.mode == "graph":
        graph = CapturedGraph(variant.invocation, stream)
        record["graph"] = graph.record()
        submit = graph.launch
    for _ in range(args.warmups):
        submit(stream)
        stream.synchronize()
        variant.verify_after_invocation()

    driver.check(cu.cuProfilerStart())
    try:
        for _ in range(args.repeat):
            submit(stream)
            stream.synchronize()
    finally:
        driver.check(cu.cuProfilerStop())
    variant.verify_after_invocation()
    result = case.reference(host_input).check(variant.read_outputs()["out"])
    record["check"] = result.record()
    if graph is not None:
        graph.close()
    _write(args.record, record)
    if not result.passed:
        print(f"error: the profiled output failed the check: {result.describe()}", file=sys.stderr)
        return 1
    return 0


def _write(path, record):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(to_jsonable(record), indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
