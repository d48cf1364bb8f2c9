"""``python -m bench perf``: ceilings, peers, launch path and the performance goals, in one GPU run.

    python -m bench perf [--out DIR] [--expect-device H200] [--shapes 4096x1024,...] [--rounds N]
                         [--input-sets auto|N] [--no-cudnn] [--no-torch] [--no-triton] [--no-launch]
                         [--auto-geometries table|none|NAME,NAME]
    python -m bench perf --floors [--copy-tbs 4.25]      (byte floors table only; no GPU)
    python -m bench perf --sweep widths [--ops softmax,log_softmax,softmax_backward,...] [--dtypes float32,bfloat16]
                         [--widths N,...] [--budget-s S] [--no-liger] [--report-only]
                                                        (auto against its peers across widths: bench/perf/sweep.py)

Prints a report (goals table last) and writes ``DIR/perf.json`` (every raw sample, the device
record, package versions) and ``DIR/perf.md`` (the printed report). Exit status: 0 when every
required measurement ran (a MISSED goal is a valid result); 1 when something required failed (an
oracle check of our fused kernel, cuDNN unavailable without ``--no-cudnn``, nvcc present but the
launch timer failed to build or run, any exception); 2 usage; 3 wrong device model; 4 no GPU.
perf.json / perf.md are written in every case where a GPU was found (after each section, too).

What is measured, and how
=========================

1. Ceilings. Device-to-device copy bandwidth: ``cuMemcpyDtoDAsync`` of 1 GiB on our non-blocking
   stream, CUDA events, 30 samples after 5 warm-ups; bandwidth = (bytes read + bytes written) /
   time = 2 GiB / time. The CUDA-event interval with nothing between the two events is recorded
   as the floor of every event figure (never subtracted).

2. Peers, per shape (default: the protocol shapes with >= 4096 rows, and the long rows 4096x8192,
   4096x16384, 4096x32768 and 1024x131072). Variants:
   ``fused`` (our fused row kernel through ``Invocation.from_launches(fused_launches(...))``, one
   ``cuLaunchKernel``; skipped, with the reason, for rows longer than it holds), ``fused_graph`` (the
   same, stream-captured into a CUDA graph and replayed), ``auto`` (``method="auto"``'s kernel for the
   width, unchecked: ``auto_launches``), ``auto:<geometry>`` (each other candidate geometry for the width,
   ``--auto-geometries``: the table's candidates by default, so that one run confirms or corrects the
   table; docs/auto_kernels.md),
   ``cudnn`` (``CudnnSoftmax``: ACCURATE / INSTANCE), ``torch`` (``torch.softmax`` on float32
   CUDA tensors; optional), ``triton`` (the tutorial one-row-per-program kernel below; optional),
   ``row_copy`` (``numba_softmax.kernels.row_copy``: a copy in the fused kernel's own launch geometry,
   one 256-thread block per row, the same quads per thread, loads then stores, no arithmetic: the
   ceiling of that geometry), ``copy`` (``cuMemcpyDtoDAsync`` of the same number of input bytes,
   a same-size ceiling), and with ``--copy-kernels`` ``copy_kernel:<name>`` (plain copy kernels of
   ``numba_softmax.kernels.stream_copy``, one pass or persistent, their block size and quads in flight
   per thread swept: what the common copy designs reach at this size, each against ``copy``).

   * Inputs rotate among input sets (x_i, y_i), i = counter mod n_sets, where the counter advances
     with EVERY timed invocation of every variant, so consecutive invocations never reuse a set.
     n_sets = max(4, smallest n with (n - 1) * set_bytes >= 1.5 * L2): between two uses of a set
     the other sets move at least 1.5x the L2 (60 MiB on the H200), so L2 does not flatter small
     shapes (4096x128 needs about 24 sets; the large shapes 4). ``--input-sets N`` forces N >= 4.
     All softmax variants of a set write the same y_i; every variant sees identical buffers.
   * Every variant's output is checked once against the float64 oracle (``numba_softmax.oracle``, its
     reference computed once per shape for every variant) before timing (its output buffer is first filled
     with NaN, so an output that is not written fails); a variant that fails is reported and not timed.
     The copies are checked bit for bit.
   * Warm-up: max(10, n_sets) invocations per variant. Then ``--rounds`` (default 50, >= 30)
     rounds; the variant order of each round is shuffled (``bench.protocol.round_orders``, seeded).
   * One sample = record event e0, enqueue a DELAY kernel (one block sleeping in ``nanosleep``),
     record e1, enqueue ONE invocation, record e2; event_us = e2 - e1. The delay kernel keeps the
     GPU busy while the host enqueues, so the interval is device time, not Python/library host
     overhead (torch and Triton take tens of microseconds of host time per call; without the delay
     the GPU would idle inside the interval). The delay is sized per variant (3x its measured host
     enqueue window, >= 30 us) and CHECKED per sample: host_window_us (host time from before e0 to
     after e2 was enqueued) >= delay_gpu_us (e1 - e0) marks the sample ``starved`` (the GPU may
     have waited for the host). A starved sample is retaken with that variant's delay doubled (up to
     4 times; the decision reads host and delay times only, never the measured interval); the
     retakes are counted, and a sample still starved after them is kept and counted.
   * Per round and variant also a batch sample: the same, with BATCH (32) invocations back to back
     (rotating sets) between e1 and e2; reported per invocation (back-to-back throughput).
   * Reported: median, p10, p90 of event_us; logical bandwidth (2 * rows * cols * 4 bytes / median);
     fraction of the 1 GiB copy ceiling; paired per-round ratios fused / variant (median, p10, p90
     of the per-round ratios), and copy / fused and row_copy / fused (the fused kernel's fraction of
     a same-size copy and of a copy in its own geometry).
   * torch and Triton run on OUR stream: ``torch.cuda.set_stream(torch.cuda.ExternalStream(ptr))``
     once (checked: torch's current stream is ours, and Triton's launcher stream is ours), so the
     events on our stream bracket their kernels like every other variant's. torch writes into our
     y_i through ``out=`` (``torch.softmax(x, 1, out=y)``; else ``torch._softmax(x, 1, False,
     out=y)``; only if neither exists, the allocating call, noted).

3. Launch path. (a) host enqueue per launch of an empty kernel <<<1, 32>>> through our harness
   (``Invocation.enqueue``) in batches of 32 (median per launch), launch + synchronize, and the same
   for a 1-node graph replay (``CapturedGraph``). (b) the same with ``reference_cu/launch_timer.cu``,
   a C++ program built here at run time (``nvcc -O2 -arch=sm_90 -std=c++17 ... -lcuda``) that
   launches its empty kernel with ``cuLaunchKernel``. (a) and (b) alternate 5 times (python block,
   C++ run, ...); the reported ratio is the median of the 5 per-alternation ratios of medians
   (goal <= 1.3). Without nvcc, (b) is skipped and said so. (c) host completion (enqueue +
   synchronize) of ONE replay of the fused (1, 128) graph vs an empty-kernel graph captured the same
   way, 200 shuffled rounds after 20 warm-ups; ratio = median of per-round ratios (goal <= 1.2).
   (d) the API's overhead: host completion of ``softmax(x, out=y, stream=s)`` (auto, checked) on Numba
   arrays against the launch layer's own enqueue + synchronize of the same kernel, at 1x128 and
   4096x4096 (goals <= 1.3 and <= 1.05), and the same call on torch tensors against Numba arrays
   (goal <= 1.1); 200 shuffled paired rounds after 20 warm-ups (``launch_path.measure_api_overhead``).

4. Goals (printed last): auto >= 0.92 of the copy ceiling at 4096x4096 and 16384x1024, and auto faster
   than each peer at every peer shape and the long rows; fused >= 0.90 of the copy ceiling at 4096x4096
   and 16384x1024 (fused =
   the stream-launched variant, like the peers, declared before any run; the detail also gives
   row_copy's fraction, i.e. whether the fused geometry can reach the goal at all); fused faster than each
   peer at every shape with >= 4096 rows (median paired ratio fused / peer < 1; the detail also gives
   row_copy / peer: at >= 1 not even a copy in the fused geometry beats the peer); launch ratio
   <= 1.3; (1, 128) graph completion ratio <= 1.2. PASS / MISS / NOT MEASURED (with the reason).

The package, by concern: :mod:`.ceilings` (1), :mod:`.peers` (2), :mod:`.launch_path` (3),
:mod:`.goals` (4), :mod:`.render` (perf.md, JSON, the byte floors); this module runs them in order.
``--sweep widths`` runs :mod:`.sweep` instead (its goals and report: :mod:`.sweep_report`).
The single-invocation sample behind a delay kernel is :class:`bench.timing.DelaySampler`.
Everything GPU-independent (bytes, rotation count, ratios, goals, tables, the nvcc command, the
launch timer's JSON) is a pure function tested in tests/cpu/test_perf_tool.py.
"""

import argparse
import datetime
import gc
import json
import os
import sys
import traceback

from bench.artifacts import default_run_folder
from bench.environment import DeviceMismatch, check_expected_device, gpu_problem, run_header
from bench.floors import H200_COPY_TBS, shape_name
from bench.perf.ceilings import log, measure_copy_ceiling, measure_event_floor
from bench.perf.goals import evaluate_goals
from bench.perf.launch_path import measure_api_overhead, measure_graph_completion, measure_launch
from bench.perf.peers import (DEFAULT_ROUNDS, DEFAULT_SHAPES, L2_TRAFFIC_FACTOR, MIN_INPUT_SETS, MIN_ROUNDS, WARMUPS,
                              copy_kernels_for, measure_shape)
from bench.perf.render import floors_markdown, jsonable, render_markdown
from bench.perf.sweep import (SWEEP_BUDGET_S, SWEEP_MIN_ROUNDS, SWEEP_ROUNDS, parse_dtypes, parse_widths, report_only,
                              run_sweep)
from bench.perf.sweep_ops import parse_ops
from bench.protocol import BATCH
from bench.shapes import parse_shapes
from bench.timing import DELAY_FACTOR, DELAY_MAX_US, DELAY_MIN_US, DelaySampler
from numba_softmax.kernels.auto_geometry import Geometry


def _parser():
    parser = argparse.ArgumentParser(prog="python -m bench perf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="output folder (default runs/<UTC time>-perf)")
    parser.add_argument("--expect-device", default="H100",
                        help="device model the run is for; any other model stops the run (default H100)")
    parser.add_argument("--shapes", help="comma-separated RxC shapes (default: "
                                         + ",".join(shape_name(s) for s in DEFAULT_SHAPES) + ")")
    parser.add_argument("--rounds", type=int,
                        help=f"shuffled rounds per shape (default {DEFAULT_ROUNDS}, >= {MIN_ROUNDS}; with --sweep: "
                             f"per problem, default {SWEEP_ROUNDS}, >= {SWEEP_MIN_ROUNDS})")
    parser.add_argument("--input-sets", default="auto",
                        help=f"input sets to rotate among: auto (>= {MIN_INPUT_SETS}, enough to defeat L2) or N >= 4")
    parser.add_argument("--seed", type=int, default=20261019, help="seed of the per-round shuffles")
    parser.add_argument("--no-cudnn", action="store_true", help="skip the cuDNN peer")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch peer")
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton peer")
    parser.add_argument("--no-launch", action="store_true", help="skip the launch-path section (3)")
    parser.add_argument("--auto-geometries", default=None,
                        help="candidate geometries timed beside auto: table (the candidates for each width in "
                             "numba_softmax/kernels/auto_geometry.py), none, or comma-separated names such as "
                             "rows_l16_q2,long_l512_q4 (default: table; with --sweep: none, and the softmax only)")
    parser.add_argument("--copy-kernels", default="none",
                        help="plain copy kernels timed at every shape beside the copy engine: none, sweep (the "
                             "designs of numba_softmax/kernels/stream_copy.py), or comma-separated names such as "
                             "copy_t256_u4,copy_t256_u4_b8")
    parser.add_argument("--sweep", choices=("widths",),
                        help="widths: auto against torch, Triton, Liger, cuDNN and a same-size copy across the widths "
                             "of numba_softmax/cases.py SWEEP_WIDTHS (sweep.json, sweep.md, sweep.png)")
    parser.add_argument("--ops", help="--sweep: comma-separated operations (default softmax): softmax, log_softmax, "
                                      "softmax_backward, log_softmax_backward, softmax_train (bench/perf/sweep_ops.py)")
    parser.add_argument("--dtypes", help="--sweep: comma-separated element types (default float32,bfloat16)")
    parser.add_argument("--widths", help="--sweep: comma-separated widths to run (merged into an existing "
                                         "DIR/sweep.json; default: every sweep width and the small problems)")
    parser.add_argument("--budget-s", type=float, default=SWEEP_BUDGET_S,
                        help=f"--sweep: start no problem after this many seconds (default {SWEEP_BUDGET_S:g})")
    parser.add_argument("--no-liger", action="store_true", help="--sweep: skip the Liger-Kernel peer")
    parser.add_argument("--report-only", action="store_true",
                        help="--sweep: write sweep.md and sweep.png again from --out's sweep.json (no GPU)")
    parser.add_argument("--floors", action="store_true", help="print the byte-floor tables and exit (no GPU)")
    parser.add_argument("--copy-tbs", type=float, default=H200_COPY_TBS, help="copy bandwidth for --floors")
    return parser


def _write(out_dir, report):
    """perf.json and perf.md from the report so far; a bug in the goals or the rendering still leaves
    perf.json (with the traceback) behind."""
    try:
        report = dict(report, goals=evaluate_goals(report))
        markdown = render_markdown(report)
    except Exception:
        failure = traceback.format_exc()
        report = dict(report, report_failure=failure)
        markdown = f"# python -m bench perf\n\nrendering the report FAILED:\n\n```\n{failure}```\n"
    tmp = os.path.join(out_dir, "perf.json.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(jsonable(report), handle, indent=1, allow_nan=False)
    os.replace(tmp, os.path.join(out_dir, "perf.json"))
    with open(os.path.join(out_dir, "perf.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    return markdown


def check_auto_geometries(option):
    """``--auto-geometries``: "table", "none", or names each of a geometry (ValueError naming a bad one)."""
    if option not in ("table", "none"):
        for name in option.split(","):
            Geometry.parse(name.strip())
    return option


def _sweep(args, argv):
    """``--sweep widths``: options checked here (status 2 on a bad one), then :func:`bench.perf.sweep.run_sweep`."""
    try:
        if args.shapes:
            raise ValueError("--shapes is not an option of --sweep widths (its problems: --widths, --dtypes)")
        args.dtypes = parse_dtypes(args.dtypes or "float32,bfloat16")
        args.ops = parse_ops(args.ops or "softmax")
        args.widths = parse_widths(args.widths) if args.widths else None
        args.auto_geometries = check_auto_geometries(args.auto_geometries or "none")
        args.rounds = SWEEP_ROUNDS if args.rounds is None else args.rounds
        if args.rounds < SWEEP_MIN_ROUNDS:
            raise ValueError(f"--rounds {args.rounds}: the sweep needs at least {SWEEP_MIN_ROUNDS} rounds")
        if args.budget_s <= 0:
            raise ValueError(f"--budget-s {args.budget_s:g}: must be positive")
        if args.report_only and not args.out:
            raise ValueError("--report-only needs --out DIR (the folder of sweep.json)")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.report_only:
        return report_only(args.out)
    return run_sweep(args, argv, args.out or default_run_folder("sweep"))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)

    if args.floors:
        print(floors_markdown(args.copy_tbs))
        return 0
    if args.sweep:
        return _sweep(args, argv)
    try:
        for option in ("ops", "dtypes", "widths", "report_only", "no_liger"):
            if getattr(args, option):
                raise ValueError(f"--{option.replace('_', '-')} is an option of --sweep widths")
        args.rounds = DEFAULT_ROUNDS if args.rounds is None else args.rounds
        shapes = parse_shapes(args.shapes) if args.shapes else list(DEFAULT_SHAPES)
        args.auto_geometries = check_auto_geometries(args.auto_geometries or "table")
        copy_kernels_for(args.copy_kernels)  # a bad name stops the run here, before any GPU work
        if args.rounds < MIN_ROUNDS:
            raise ValueError(f"--rounds {args.rounds}: at least {MIN_ROUNDS} rounds are required")
        if args.input_sets == "auto":
            args.input_sets = None
        else:
            args.input_sets = int(args.input_sets)
            if args.input_sets < MIN_INPUT_SETS:
                raise ValueError(f"--input-sets {args.input_sets}: at least {MIN_INPUT_SETS} are required")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    problem = gpu_problem("python -m bench perf")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 4

    out_dir = args.out or default_run_folder("perf")
    os.makedirs(out_dir, exist_ok=True)
    notes, errors = [], []
    report = {**run_header("python -m bench perf", argv, args.expect_device),
              "protocol": {"rounds": args.rounds, "seed": args.seed, "warmups": WARMUPS, "batch": BATCH,
                           "input_sets": args.input_sets or "auto", "l2_traffic_factor": L2_TRAFFIC_FACTOR,
                           "delay": {"min_us": DELAY_MIN_US, "factor": DELAY_FACTOR, "max_us": DELAY_MAX_US},
                           "percentiles": "numpy linear", "shapes": [list(s) for s in shapes]},
              "notes": notes, "errors": errors, "shapes": []}
    args.report = report
    try:
        check_expected_device(report["device"]["name"], args.expect_device)
    except DeviceMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        report["stopped"] = str(exc)
        _write(out_dir, report)
        return 3
    log(f"device {report['device']['name']}; writing to {out_dir}")

    def section(name, fn):
        # The cyclic garbage collector stays off while a section times (as in timeit): a
        # collection in the middle of an enqueue loop would be charged to the harness.
        gc.collect()
        gc.disable()
        try:
            fn()
        except Exception as exc:
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
            report.setdefault("tracebacks", []).append(traceback.format_exc())
            traceback.print_exc()
        finally:
            gc.enable()
        _write(out_dir, report)

    try:
        sampler = DelaySampler()
    except Exception as exc:
        errors.append(f"setting up the stream, events and kernels failed: {type(exc).__name__}: {exc}")
        report["tracebacks"] = [traceback.format_exc()]
        traceback.print_exc()
        print(_write(out_dir, report))
        return 1
    section("delay kernel", lambda: report.__setitem__("delay_kernel", sampler.calibrate_delay()))
    if sampler.us_per_iteration:
        log("ceilings: 1 GiB device-to-device copy, event floor")
        section("copy ceiling", lambda: report.__setitem__("copy_ceiling", measure_copy_ceiling(sampler)))
        section("event floor", lambda: report.__setitem__("event_floor", measure_event_floor(sampler)))
        for index, shape in enumerate(shapes):
            section(f"shape {shape_name(shape)}",
                    lambda index=index, shape=shape: report["shapes"].append(
                        measure_shape(sampler, shape, index, args, notes, errors)))
    if args.no_launch:
        notes.append("launch path (section 3) skipped: --no-launch")
    else:
        log("launch path: python harness vs C++ launch timer")
        section("launch path", lambda: measure_launch(sampler, args, report, notes, errors))
        log("(1,128) graph completion")
        section("graph completion", lambda: measure_graph_completion(sampler, args, report, errors))
        log("API overhead: softmax() against the launch layer, torch tensors against Numba arrays")
        section("API overhead", lambda: measure_api_overhead(sampler, args, report, errors))
    report["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    markdown = _write(out_dir, report)
    print(markdown)
    print(f"wrote {os.path.join(out_dir, 'perf.json')} and {os.path.join(out_dir, 'perf.md')}", file=sys.stderr)
    if errors:
        print(f"ERRORS ({len(errors)}), exit status 1:\n" + "\n".join(f"  - {e}" for e in errors), file=sys.stderr)
        return 1
    return 0
