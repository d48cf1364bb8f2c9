"""``python -m bench perf``: ceilings, peers, launch path and the performance goals, in one GPU run.

    python -m bench perf [--out DIR] [--expect-device H200] [--shapes 4096x1024,...] [--rounds N]
                         [--input-sets auto|N] [--no-cudnn] [--no-torch] [--no-triton] [--no-launch]
    python -m bench perf --floors [--copy-tbs 4.25]      (byte floors table only; no GPU)

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

2. Peers, per shape (default: the protocol shapes with >= 4096 rows). Variants:
   ``fused`` (our fused row kernel through ``Invocation.from_launches(fused_launches(...))``, one
   ``cuLaunchKernel``), ``fused_graph`` (the same, stream-captured into a CUDA graph and replayed),
   ``cudnn`` (``CudnnSoftmax``: ACCURATE / INSTANCE), ``torch`` (``torch.softmax`` on float32
   CUDA tensors; optional), ``triton`` (the tutorial one-row-per-program kernel below; optional),
   ``row_copy`` (``numba_softmax.kernels.row_copy``: a copy in the fused kernel's own launch geometry,
   one 256-thread block per row, the same quads per thread, loads then stores, no arithmetic: the
   ceiling of that geometry), and ``copy`` (``cuMemcpyDtoDAsync`` of the same number of input bytes,
   a same-size ceiling).

   * Inputs rotate among input sets (x_i, y_i), i = counter mod n_sets, where the counter advances
     with EVERY timed invocation of every variant, so consecutive invocations never reuse a set.
     n_sets = max(4, smallest n with (n - 1) * set_bytes >= 1.5 * L2): between two uses of a set
     the other sets move at least 1.5x the L2 (60 MiB on the H200), so L2 does not flatter small
     shapes (4096x128 needs about 24 sets; the large shapes 4). ``--input-sets N`` forces N >= 4.
     All softmax variants of a set write the same y_i; every variant sees identical buffers.
   * Every variant's output is checked once against ``numba_softmax.oracle.check_matrix`` before
     timing (its output buffer is first filled with NaN, so an output that is not written fails);
     a variant that fails is reported and not timed. ``copy`` and ``row_copy`` are checked bit for bit.
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

4. Goals (printed last): fused >= 0.90 of the copy ceiling at 4096x4096 and 16384x1024 (fused =
   the stream-launched variant, like the peers, declared before any run; the detail also gives
   row_copy's fraction, i.e. whether the fused geometry can reach the goal at all); fused faster than each
   peer at every shape with >= 4096 rows (median paired ratio fused / peer < 1; the detail also gives
   row_copy / peer: at >= 1 not even a copy in the fused geometry beats the peer); launch ratio
   <= 1.3; (1, 128) graph completion ratio <= 1.2. PASS / MISS / NOT MEASURED (with the reason).

Everything GPU-independent (bytes, rotation count, ratios, goals, tables, the nvcc command, the
launch timer's JSON) is a pure function tested in tests/cpu/test_perf_tool.py.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import functools
import gc
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

from bench.floors import FACTS_COPY_TBS, experiment_a_floors, experiment_b_floors, shape_name
from bench.floors import us_at as _us_at
from bench.protocol import BATCH, round_orders
from bench.stats import paired_ratios, summarize

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCH_TIMER_SOURCE = os.path.join(REPO_ROOT, "reference_cu", "launch_timer.cu")

#: The protocol shapes with >= 4096 rows (the peers' shapes).
DEFAULT_SHAPES = ((4096, 128), (4096, 1024), (4096, 4096), (16384, 1024))
PEER_MIN_ROWS = 4096
COPY_GOAL_SHAPES = ((4096, 4096), (16384, 1024))
COPY_FRACTION_GOAL = 0.90
LAUNCH_RATIO_GOAL = 1.3
GRAPH_COMPLETION_GOAL = 1.2

FUSED, FUSED_GRAPH, CUDNN, TORCH, TRITON, COPY = "fused", "fused_graph", "cudnn", "torch", "triton", "copy"
ROW_COPY = "row_copy"
PEERS = (CUDNN, TORCH, TRITON)
VARIANTS = (FUSED, FUSED_GRAPH, CUDNN, TORCH, TRITON, ROW_COPY, COPY)
#: Variants checked bit for bit against the input (copies), not against the softmax oracle.
COPIES = (COPY, ROW_COPY)

MIN_ROUNDS = 30
DEFAULT_ROUNDS = 50
WARMUPS = 10
MIN_INPUT_SETS = 4
MAX_INPUT_SETS = 256
L2_TRAFFIC_FACTOR = 1.5
COPY_CEILING_BYTES = 1 << 30
COPY_CEILING_SAMPLES = 30
COPY_CEILING_WARMUPS = 5
EVENT_FLOOR_SAMPLES = 30
DELAY_MIN_US = 30.0
DELAY_FACTOR = 3.0
DELAY_MAX_US = 50_000.0
DELAY_NANOSLEEP_NS = 1000
DELAY_CALIBRATION_ITERATIONS = 200
#: A starved sample is retaken (delay doubled) at most this many times; the last one is kept.
STARVED_RETAKES = 4

LAUNCH_ALTERNATIONS = 5
LAUNCH_BATCHES = 100
LAUNCH_WARMUP_BATCHES = 20
LAUNCH_METRICS = ("enqueue_per_launch", "launch_sync", "graph_enqueue", "graph_sync", "sync_no_work")
LAUNCH_GOAL_METRIC = "enqueue_per_launch"
GRAPH_COMPLETION_SHAPE = (1, 128)
GRAPH_COMPLETION_ROUNDS = 200
GRAPH_COMPLETION_WARMUPS = 20

NVCC_FLAGS = ("-O2", "-arch=sm_90", "-std=c++17")

PASS, MISS, NOT_MEASURED = "PASS", "MISS", "NOT MEASURED"
SHAPE_MISSING = "shape not measured in this run (not requested, or it failed: see Errors)"


# =============================================================== pure helpers (tested on the CPU)

def parse_shape(text):
    try:
        rows, cols = (int(v) for v in text.strip().lower().split("x"))
    except ValueError:
        raise ValueError(f"bad shape {text!r}: expected ROWSxCOLS, e.g. 4096x1024") from None
    if rows < 1 or cols < 1:
        raise ValueError(f"bad shape {text!r}: rows and columns must be >= 1")
    return rows, cols


def parse_shapes(text):
    shapes = [parse_shape(t) for t in text.split(",") if t.strip()]
    if not shapes:
        raise ValueError("--shapes: no shape given")
    if len(set(shapes)) != len(shapes):
        raise ValueError(f"--shapes: duplicate shapes in {text!r}")
    return shapes


def logical_bytes(shape):
    """Softmax's logical traffic: the input read once and the output written once (float32)."""
    rows, cols = shape
    return 2 * rows * cols * 4


def bandwidth_tbs(nbytes, microseconds):
    """Bytes per microsecond -> TB/s (10^12 bytes per second)."""
    if microseconds <= 0:
        raise ValueError(f"bandwidth_tbs: time must be > 0, got {microseconds}")
    return nbytes / (microseconds * 1e-6) / 1e12


def input_sets_for(set_bytes, l2_bytes, minimum=MIN_INPUT_SETS, factor=L2_TRAFFIC_FACTOR, maximum=MAX_INPUT_SETS):
    """Input sets to rotate among: the other sets must move ``factor`` x L2 between two uses of one."""
    if set_bytes <= 0 or l2_bytes <= 0:
        raise ValueError("input_sets_for: sizes must be positive")
    needed = 1 + math.ceil(factor * l2_bytes / set_bytes)
    return int(min(maximum, max(minimum, needed)))


def next_power_of_2(n):
    if n < 1:
        raise ValueError(f"next_power_of_2: n must be >= 1, got {n}")
    return 1 << (int(n) - 1).bit_length()


def triton_num_warps(block_size):
    """The Triton tutorial's choice: 4 warps, 8 from 2048 columns, 16 from 4096."""
    if block_size >= 4096:
        return 16
    if block_size >= 2048:
        return 8
    return 4


def delay_iterations(target_us, us_per_iteration):
    """nanosleep iterations of the delay kernel for about ``target_us`` (clamped to the bounds)."""
    if us_per_iteration <= 0:
        raise ValueError(f"delay_iterations: us_per_iteration must be > 0, got {us_per_iteration}")
    target = min(DELAY_MAX_US, max(DELAY_MIN_US, target_us))
    return max(1, math.ceil(target / us_per_iteration))


def delay_target_us(host_window_us, invocations=1):
    return min(DELAY_MAX_US, max(DELAY_MIN_US, DELAY_FACTOR * host_window_us * invocations))


def is_starved(host_window_us, delay_gpu_us):
    """True when the host may not have finished enqueuing before the delay kernel ended."""
    return host_window_us >= delay_gpu_us


def find_nvcc():
    """nvcc as the reference build finds it ($NVCC, PATH, $CUDA_HOME/bin, ... ; None if absent)."""
    from bench.reference_build import find_nvcc as find
    return find()


def nvcc_command(nvcc, source, output, lib_dirs=()):
    """The launch timer's build: ``nvcc -O2 -arch=sm_90 -std=c++17 -o OUT SRC [-L DIR ...] -lcuda``."""
    cmd = [nvcc, *NVCC_FLAGS, "-o", output, source]
    for directory in lib_dirs:
        cmd.append(f"-L{directory}")
    cmd.append("-lcuda")
    return cmd


def stub_library_dirs(nvcc):
    """Toolkit folders holding the link-time stub ``libcuda.so`` (existing ones only)."""
    root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    candidates = [os.path.join(root, "lib64", "stubs"), os.path.join(root, "lib", "stubs")]
    targets = os.path.join(root, "targets")
    if os.path.isdir(targets):
        for name in sorted(os.listdir(targets)):
            candidates.append(os.path.join(targets, name, "lib", "stubs"))
    seen, found = set(), []
    for path in candidates:
        real = os.path.realpath(path)
        if real not in seen and os.path.isfile(os.path.join(path, "libcuda.so")):
            seen.add(real)
            found.append(path)
    return found


class LaunchTimerOutputError(ValueError):
    """The C++ launch timer printed something other than the JSON this module expects."""


def parse_launch_timer_output(text, rel_tol=1e-3):
    """Parse launch_timer's stdout; recompute every statistic from the raw samples.

    Returns ``{"meta": {...}, "metrics": {name: {"per", "samples_us", **summarize(samples)}}}``.
    Raises :class:`LaunchTimerOutputError` naming what is wrong (no JSON, a missing metric, no
    samples, a non-finite sample, or a median that disagrees with the recomputed one).
    """
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise LaunchTimerOutputError(f"launch_timer printed no JSON object; output was: {text[:500]!r}")
    try:
        data = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise LaunchTimerOutputError(f"launch_timer printed invalid JSON ({exc}); output was: {text[:500]!r}") from None
    if data.get("tool") != "launch_timer":
        raise LaunchTimerOutputError(f"not launch_timer output (tool={data.get('tool')!r})")
    if data.get("batch") != BATCH:
        raise LaunchTimerOutputError(f"launch_timer batch is {data.get('batch')!r}, expected {BATCH}")
    metrics = data.get("metrics")
    if not isinstance(metrics, dict):
        raise LaunchTimerOutputError("launch_timer output has no 'metrics' object")
    parsed = {}
    for name in LAUNCH_METRICS:
        if name not in metrics:
            raise LaunchTimerOutputError(f"launch_timer output lacks metric {name!r}")
        samples = metrics[name].get("samples_us")
        if not samples:
            raise LaunchTimerOutputError(f"launch_timer metric {name!r} has no samples")
        try:
            stats = summarize(samples)
        except ValueError as exc:
            raise LaunchTimerOutputError(f"launch_timer metric {name!r}: {exc}") from None
        for key in ("median", "p10", "p90"):
            printed = metrics[name].get(f"{key}_us")
            if printed is None or not math.isclose(printed, stats[key], rel_tol=rel_tol, abs_tol=1e-4):
                raise LaunchTimerOutputError(
                    f"launch_timer metric {name!r}: printed {key} {printed!r} != {stats[key]!r} recomputed "
                    "from its samples")
        parsed[name] = dict(stats, per=metrics[name].get("per"), samples_us=[float(v) for v in samples])
    meta = {k: v for k, v in data.items() if k != "metrics"}
    return {"meta": meta, "metrics": parsed}


def summarize_shape(rounds, variants, nbytes, copy_ceiling_tbs=None):
    """Statistics of one shape's rounds (see :func:`_measure_shape` for the record layout).

    ``variants``: the timed variant names. Returns ``{"variants": {name: {...}}, "ratios": {...}}``
    where ``ratios["fused/<v>"]`` is :func:`bench.stats.paired_ratios` of event_us (fused / v per
    round) and ``ratios["copy/fused"]`` / ``ratios["row_copy/fused"]`` the fused kernel's per-round
    fraction of a same-size copy / of a copy in its own launch geometry; ``ratios["row_copy/<peer>"]``
    whether even that copy is faster than the peer (>= 1: no kernel of this geometry can be).
    """
    out = {"variants": {}, "ratios": {}}
    for name in variants:
        samples = [r["samples"][name] for r in rounds if name in r["samples"]]
        if not samples:
            continue
        event = summarize([s["event_us"] for s in samples])
        entry = {
            "event_us": event,
            "bandwidth_tbs": bandwidth_tbs(nbytes, event["median"]),
            "starved_samples": sum(bool(s["starved"]) for s in samples),
            "samples": len(samples),
        }
        if copy_ceiling_tbs:
            entry["fraction_of_copy_ceiling"] = entry["bandwidth_tbs"] / copy_ceiling_tbs
        batch = [s["batch_event_us"] / s["batch_invocations"] for s in samples if "batch_event_us" in s]
        if batch:
            entry["batch_per_invocation_us"] = summarize(batch)
            entry["batch_starved_samples"] = sum(bool(s["batch_starved"]) for s in samples if "batch_event_us" in s)
        out["variants"][name] = entry
    event_rounds = [{name: s["event_us"] for name, s in r["samples"].items()} for r in rounds]
    if FUSED in out["variants"]:
        for name in variants:
            if name == FUSED or name in COPIES or name not in out["variants"]:
                continue
            out["ratios"][f"{FUSED}/{name}"] = paired_ratios(event_rounds, FUSED, name, "event_us")
        for copy in COPIES:
            if copy in out["variants"]:
                out["ratios"][f"{copy}/{FUSED}"] = paired_ratios(event_rounds, copy, FUSED, "event_us")
    if ROW_COPY in out["variants"]:  # could anything in the fused geometry beat this peer?
        for peer in PEERS:
            if peer in out["variants"]:
                out["ratios"][f"{ROW_COPY}/{peer}"] = paired_ratios(event_rounds, ROW_COPY, peer, "event_us")
    return out


def launch_comparison(python_blocks, cpp_blocks):
    """Python harness vs C++ launch timer, per metric, from alternating blocks.

    ``python_blocks`` / ``cpp_blocks``: lists (one entry per alternation, same length) of
    ``{metric: [samples_us]}``. Per metric: pooled summaries of each side, the per-alternation
    ratios of medians (python / C++) and their median (the reported ratio).
    """
    if len(python_blocks) != len(cpp_blocks) or not python_blocks:
        raise ValueError(f"launch_comparison: {len(python_blocks)} python blocks vs {len(cpp_blocks)} C++ blocks")
    result = {}
    for metric in LAUNCH_METRICS:
        ratios = []
        for py, cpp in zip(python_blocks, cpp_blocks, strict=True):
            ratios.append(summarize(py[metric])["median"] / summarize(cpp[metric])["median"])
        result[metric] = {
            "python": summarize([v for b in python_blocks for v in b[metric]]),
            "cpp": summarize([v for b in cpp_blocks for v in b[metric]]),
            "ratios_per_alternation": ratios,
            "ratio": summarize(ratios),
        }
    return result


def _goal(goal, status, value=None, threshold=None, detail=""):
    return {"goal": goal, "status": status, "value": value, "threshold": threshold, "detail": detail}


def _shape_entry(report, shape):
    for entry in report.get("shapes", []):
        if tuple(entry["shape"]) == tuple(shape):
            return entry
    return None


def _variant_problem(entry, name):
    """Why a variant has no timing at this shape, or None when it was timed."""
    info = entry.get("variants", {}).get(name)
    if info is None:
        return f"{name} not run"
    if info.get("status") != "timed":
        return f"{name} {info.get('status')}: {info.get('reason', '')}".strip().rstrip(":")
    if name not in entry.get("analysis", {}).get("variants", {}):
        return f"{name} has no samples"
    return None


def _geometry_note(entry, ceiling_tbs):
    """The goal detail's word on the fused geometry's own ceiling (its row copy), '' when not timed."""
    if _variant_problem(entry, ROW_COPY):
        return ""
    row_copy = entry["analysis"]["variants"][ROW_COPY]
    fraction = row_copy["bandwidth_tbs"] / ceiling_tbs
    verdict = ("out of reach of this launch geometry" if fraction < COPY_FRACTION_GOAL
               else "within reach of this launch geometry")
    return (f"; a copy in the fused geometry (row_copy) {row_copy['event_us']['median']:.2f} us = "
            f"{fraction:.3f} of the ceiling: the goal is {verdict}")


def _peer_reach_note(entry, peer):
    """The peer goal detail's word on whether a copy in the fused geometry beats ``peer`` ('' when not timed)."""
    reach = entry["analysis"]["ratios"].get(f"{ROW_COPY}/{peer}")
    if reach is None:
        return ""
    verdict = ("even a copy in the fused geometry is not faster, out of reach of this launch geometry"
               if reach["median"] >= 1.0 else "within reach of this launch geometry")
    return f"; row_copy/{peer} {reach['median']:.3f}: {verdict}"


def evaluate_goals(report, expected_shapes=DEFAULT_SHAPES):
    """The goals table: a list of ``{goal, status, value, threshold, detail}`` (PASS / MISS / NOT MEASURED)."""
    goals = []
    ceiling = report.get("copy_ceiling") or {}
    ceiling_tbs = ceiling.get("bandwidth_tbs")
    for shape in COPY_GOAL_SHAPES:
        label = f"fused >= {COPY_FRACTION_GOAL:.2f} of copy bandwidth at {shape_name(shape)}"
        entry = _shape_entry(report, shape)
        if entry is None:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL, detail=SHAPE_MISSING))
            continue
        if not ceiling_tbs:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL,
                               detail=f"no copy ceiling: {ceiling.get('error', 'not measured')}"))
            continue
        problem = _variant_problem(entry, FUSED)
        if problem:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL, detail=problem))
            continue
        fused = entry["analysis"]["variants"][FUSED]
        fraction = fused["bandwidth_tbs"] / ceiling_tbs
        goals.append(_goal(label, PASS if fraction >= COPY_FRACTION_GOAL else MISS, fraction, COPY_FRACTION_GOAL,
                           f"fused {fused['event_us']['median']:.2f} us = {fused['bandwidth_tbs']:.2f} TB/s; "
                           f"copy ceiling {ceiling_tbs:.2f} TB/s" + _geometry_note(entry, ceiling_tbs)))
    measured_shapes = [tuple(e["shape"]) for e in report.get("shapes", [])]
    for shape in [s for s in expected_shapes if s not in measured_shapes] + measured_shapes:
        if shape[0] < PEER_MIN_ROWS:
            continue
        entry = _shape_entry(report, shape)
        for peer in PEERS:
            label = f"fused faster than {peer} at {shape_name(shape)}"
            if entry is None:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=SHAPE_MISSING))
                continue
            problem = _variant_problem(entry, FUSED) or _variant_problem(entry, peer)
            if problem:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=problem))
                continue
            ratio = entry["analysis"]["ratios"][f"{FUSED}/{peer}"]
            variants = entry["analysis"]["variants"]
            goals.append(_goal(label, PASS if ratio["median"] < 1.0 else MISS, ratio["median"], 1.0,
                               f"fused/{peer} median of {ratio['n']} paired rounds (p10 {ratio['p10']:.3f}, "
                               f"p90 {ratio['p90']:.3f}); medians {variants[FUSED]['event_us']['median']:.2f} vs "
                               f"{variants[peer]['event_us']['median']:.2f} us" + _peer_reach_note(entry, peer)))
    launch = report.get("launch") or {}
    label = f"launch: our enqueue per launch / C++ cuLaunchKernel <= {LAUNCH_RATIO_GOAL}"
    comparison = launch.get("comparison")
    if comparison:
        m = comparison[LAUNCH_GOAL_METRIC]
        ratio = m["ratio"]["median"]
        goals.append(_goal(label, PASS if ratio <= LAUNCH_RATIO_GOAL else MISS, ratio, LAUNCH_RATIO_GOAL,
                           f"python {m['python']['median']:.2f} us vs C++ {m['cpp']['median']:.2f} us per launch "
                           f"(median of {len(m['ratios_per_alternation'])} alternations)"))
    else:
        goals.append(_goal(label, NOT_MEASURED, threshold=LAUNCH_RATIO_GOAL,
                           detail=launch.get("cpp_skipped") or launch.get("error") or "not run"))
    completion = report.get("graph_completion") or {}
    label = f"(1,128) fused graph completion / empty-kernel graph <= {GRAPH_COMPLETION_GOAL}"
    ratio = completion.get("ratio")
    if ratio:
        fused, empty = completion["fused"], completion["empty"]
        goals.append(_goal(label, PASS if ratio["median"] <= GRAPH_COMPLETION_GOAL else MISS, ratio["median"],
                           GRAPH_COMPLETION_GOAL,
                           f"{fused['median']:.2f} vs {empty['median']:.2f} us host completion, median of "
                           f"{ratio['n']} paired rounds"))
    else:
        goals.append(_goal(label, NOT_MEASURED, threshold=GRAPH_COMPLETION_GOAL,
                           detail=completion.get("error") or "not run"))
    return goals


# ----------------------------------------------------------------- byte floors (PERFORMANCE.md)

def _fmt_us(us):
    return f"{us:.2f}" if us >= 1 else f"{us:.3g}"


def floors_markdown(copy_tbs=FACTS_COPY_TBS):
    """The two byte-floor tables of PERFORMANCE.md, timed at ``copy_tbs`` (read + write TB/s)."""
    a_rows = [[r["case"], f"{r['elements']:,}", f"{r['one_pass_bytes']:,}",
               _fmt_us(_us_at(r['one_pass_bytes'], copy_tbs)),
               f"{r['stages_bytes']:,}", _fmt_us(_us_at(r['stages_bytes'], copy_tbs))] for r in experiment_a_floors()]
    b_rows = [[r["case"], f"{r['elements']:,}", f"{r['tiles']:,}", f"{r['floor_bytes']:,}",
               _fmt_us(_us_at(r['floor_bytes'], copy_tbs)), f"{r['one_pass_bytes']:,}",
               _fmt_us(_us_at(r['one_pass_bytes'], copy_tbs))] for r in experiment_b_floors()]
    return "\n".join([
        f"Experiment A (time = bytes / {copy_tbs:g} TB/s copy bandwidth, read + write):",
        "",
        markdown_table(["case", "elements N", "fused / cuDNN floor 8N (B)", "us at copy BW",
                        "stages floor 24N + 16R (B)", "us at copy BW"], a_rows),
        "",
        f"Experiment B (separate, phased and dag share one floor; time at {copy_tbs:g} TB/s):",
        "",
        markdown_table(["case", "elements N", "tiles T", "A->B->C floor 12N + 16T + 16R (B)", "us at copy BW",
                        "one-pass bound 8N (B)", "us at copy BW"], b_rows),
    ])


# ----------------------------------------------------------------------------- formatting

def markdown_table(headers, rows):
    def cell(value):
        return str(value).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row {row!r} has {len(row)} cells, expected {len(headers)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def _f(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(stats, digits=2):
    if not stats:
        return "-"
    return f"{stats['median']:.{digits}f} [{stats['p10']:.{digits}f}, {stats['p90']:.{digits}f}]"


def goals_table(goals):
    rows = [[g["goal"], g["status"], _f(g["value"], 3), _f(g["threshold"], 2), g["detail"]] for g in goals]
    return markdown_table(["goal", "status", "measured", "threshold", "numbers"], rows)


def render_markdown(report):
    """perf.md (and the printed report): ceilings, peers, launch path, notes, errors, goals last."""
    device = report.get("device") or {}
    lines = [f"# python -m bench perf: {device.get('name', 'unknown device')}", "",
             f"started {report.get('started_utc')}, finished {report.get('finished_utc')}; "
             f"command `{' '.join(['python -m bench perf', *report.get('argv', [])])}`; "
             f"commit {(report.get('git') or {}).get('commit')}", ""]
    protocol = report.get("protocol") or {}
    if protocol:
        lines += [f"Protocol: {protocol.get('rounds')} shuffled rounds (seed {protocol.get('seed')}) after "
                  f"max({WARMUPS}, sets) warm-ups per variant; one event-timed invocation per variant per round "
                  f"behind a delay kernel (device time; samples whose host enqueue window reached the delay are "
                  f"counted as starved); batch = {BATCH} back-to-back invocations; statistics: median "
                  f"[p10, p90]; ratios: median [p10, p90] of per-round ratios.", ""]

    lines += ["## 1. Ceilings (this run)", ""]
    ceiling = report.get("copy_ceiling") or {}
    floor = report.get("event_floor") or {}
    rows = []
    if ceiling.get("event_us"):
        gib = ceiling["bytes_per_copy"] / 2**30
        rows.append([f"device-to-device copy, {gib:g} GiB (cuMemcpyDtoDAsync, our stream)",
                     _spread(ceiling["event_us"]), f"{ceiling['bandwidth_tbs']:.3f} TB/s (read + write)"])
    elif ceiling.get("error"):
        rows.append(["device-to-device copy", "FAILED", ceiling["error"]])
    if floor.get("event_us"):
        rows.append(["CUDA event interval, nothing between (floor of every event figure, never subtracted)",
                     _spread(floor["event_us"], 3), ""])
    if rows:
        lines += [markdown_table(["ceiling", "us: median [p10, p90]", "bandwidth"], rows), ""]
    delay = report.get("delay_kernel") or {}
    if delay.get("us_per_iteration"):
        lines += [f"Delay kernel: {delay['us_per_iteration']:.3f} us per nanosleep({DELAY_NANOSLEEP_NS}) "
                  "iteration.", ""]

    lines += ["## 2. Peers", ""]
    for entry in report.get("shapes", []):
        analysis = entry.get("analysis") or {"variants": {}, "ratios": {}}
        lines += [f"### {entry['name']}", "",
                  f"logical bytes {entry['logical_bytes']:,} (2 x rows x cols x 4); {entry.get('input_sets')} input "
                  f"sets of {entry.get('set_bytes', 0) / 2**20:.1f} MiB (x + y) rotating; "
                  f"L2 {entry.get('l2_bytes', 0) / 2**20:.0f} MiB", ""]
        rows = []
        for name in VARIANTS:
            info = entry.get("variants", {}).get(name)
            if info is None:
                continue
            stats = analysis["variants"].get(name)
            if stats is None:
                rows.append([name, info.get("status", "?"), "-", "-", "-", "-", "-", info.get("reason", "")])
                continue
            if name == FUSED:
                ratio_text = "1"
            elif name in COPIES:
                r = analysis["ratios"].get(f"{name}/{FUSED}")
                ratio_text = f"{name}/fused {_spread(r, 3)}" if r else "-"
            else:
                r = analysis["ratios"].get(f"{FUSED}/{name}")
                ratio_text = _spread(r, 3) if r else "-"
            starved = f"{stats['starved_samples']}/{stats['samples']}"
            if "batch_starved_samples" in stats:
                starved += f", batch {stats['batch_starved_samples']}/{stats['samples']}"
            rows.append([name, info.get("status"), _spread(stats["event_us"]),
                         f"{stats['bandwidth_tbs']:.3f}", _f(stats.get("fraction_of_copy_ceiling"), 3),
                         ratio_text, _spread(stats.get("batch_per_invocation_us")), starved])
        lines += [markdown_table(["variant", "status", "event us: median [p10, p90]", "logical TB/s",
                                  "of copy ceiling", "fused / variant (paired)", f"batch of {BATCH}: us per invocation",
                                  "starved samples"], rows), ""]
        for name in VARIANTS:
            info = entry.get("variants", {}).get(name) or {}
            if info.get("call"):
                lines.append(f"- {name}: {info['call']}")
        lines.append("")

    lines += ["## 3. Launch path", ""]
    launch = report.get("launch") or {}
    comparison = launch.get("comparison")
    python_only = launch.get("python")
    if comparison:
        rows = [[m, _spread(c["python"]), _spread(c["cpp"]), _spread(c["ratio"], 3)] for m, c in comparison.items()]
        lines += [markdown_table(["metric (us)", "our harness (Invocation / CapturedGraph)",
                                  "C++ launch_timer (cuLaunchKernel / cuGraphLaunch)",
                                  "ratio ours / C++ (per-alternation ratios of medians, "
                                  f"n={len(launch.get('python_blocks', []))})"],
                                 rows), ""]
    elif python_only:
        rows = [[m, _spread(s)] for m, s in python_only.items()]
        lines += [markdown_table(["metric (us)", "our harness"], rows), ""]
    for key in ("cpp_skipped", "error"):
        if launch.get(key):
            lines += [f"**{key.replace('_', ' ')}:** {launch[key]}", ""]
    if launch.get("build"):
        lines += [f"launch_timer built with: `{' '.join(launch['build']['command'])}`", ""]
    completion = report.get("graph_completion") or {}
    if completion.get("ratio"):
        lines += [markdown_table(
            ["(1,128) graph replay, host completion (enqueue + synchronize)", "us: median [p10, p90]"],
            [["fused (1,128) graph", _spread(completion["fused"])],
             ["empty-kernel graph", _spread(completion["empty"])],
             ["paired ratio fused / empty", _spread(completion["ratio"], 3)]]), ""]
    elif completion.get("error"):
        lines += [f"**(1,128) graph completion failed:** {completion['error']}", ""]

    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    if report.get("errors"):
        lines += ["## Errors", ""] + [f"- {e}" for e in report["errors"]] + [""]
    lines += ["## Goals", "", goals_table(report.get("goals") or evaluate_goals(report)), ""]
    return "\n".join(lines)


def jsonable(value):
    """Make ``value`` strict JSON (non-finite floats become strings, numpy scalars Python numbers)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


# ================================================================================ GPU part

def _now_us():
    return time.perf_counter_ns() / 1e3


def _log(message):
    print(f"[perf] {message}", file=sys.stderr, flush=True)


class _Kernels:
    """The two trivial kernels of this tool (compiled lazily, after the GPU check)."""

    def __init__(self):
        from numba import cuda

        @cuda.jit
        def perf_empty_kernel():
            pass

        @cuda.jit
        def perf_delay_kernel(iterations):
            for _ in range(iterations):
                cuda.nanosleep(DELAY_NANOSLEEP_NS)

        self.empty = perf_empty_kernel
        self.delay = perf_delay_kernel


tl = None  # triton.language, bound by _triton_kernel() (Triton resolves a kernel's globals at compile time)


@functools.cache
def _triton_kernel():
    """The tutorial's one-row-per-program softmax (imports Triton; ImportError when absent)."""
    global tl
    import triton
    import triton.language as triton_language
    tl = triton_language

    @triton.jit
    def perf_triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                                   BLOCK_SIZE: tl.constexpr):
        row_idx = tl.program_id(0)
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf"))
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)

    return triton, perf_triton_softmax_kernel


class _Gpu:
    def __init__(self):
        from numba_softmax.launch.driver import Event, Stream
        self.stream = Stream()
        self.events = [Event() for _ in range(3)]
        self.kernels = _Kernels()
        self._delays = {}
        self.us_per_iteration = None

    def delay(self, iterations):
        inv = self._delays.get(iterations)
        if inv is None:
            from numba_softmax.launch.driver import Invocation
            from numba_softmax.launch.plan import KernelLaunch
            inv = Invocation.from_launches("perf_delay", [KernelLaunch(
                "perf_delay", self.kernels.delay, (1,), (32,), (np.int64(iterations),))])
            self._delays[iterations] = inv
        return inv

    def sample(self, submits, delay_iterations_):
        """e0, delay, e1, submits..., e2 -> event_us (e1..e2), delay_gpu_us (e0..e1), host window."""
        e0, e1, e2 = self.events
        stream = self.stream
        delay = self.delay(delay_iterations_)
        h0 = _now_us()
        e0.record(stream)
        delay.enqueue(stream)
        e1.record(stream)
        for submit in submits:
            submit(stream)
        e2.record(stream)
        h1 = _now_us()
        e2.synchronize()
        event = e2.elapsed_us_since(e1)
        delay_gpu = e1.elapsed_us_since(e0)
        return {"event_us": event, "delay_gpu_us": delay_gpu, "host_window_us": h1 - h0,
                "starved": is_starved(h1 - h0, delay_gpu)}

    def calibrate_delay(self):
        samples = [self.sample([], DELAY_CALIBRATION_ITERATIONS)["delay_gpu_us"] for _ in range(7)]
        # floor at 1 ns per iteration: a nanosleep that returned at once must not make the sizing divide by 0
        self.us_per_iteration = max(1e-3, float(np.median(samples)) / DELAY_CALIBRATION_ITERATIONS)
        return {"iterations": DELAY_CALIBRATION_ITERATIONS, "delay_gpu_us": samples,
                "us_per_iteration": self.us_per_iteration}

    def iterations_for(self, host_window_us, invocations=1):
        return delay_iterations(delay_target_us(host_window_us, invocations), self.us_per_iteration)

    def host_window_us(self, submit, count=5):
        """Median host time of enqueuing ``submit`` (GPU idle, stream synchronized around)."""
        values = []
        for _ in range(count):
            self.stream.synchronize()
            t0 = _now_us()
            submit(self.stream)
            values.append(_now_us() - t0)
        self.stream.synchronize()
        return float(np.median(values))


def _device_ptr(array):
    return int(array.__cuda_array_interface__["data"][0])


def _memcpy_submit(dst, src, nbytes):
    from cuda.bindings import driver as cu

    from numba_softmax.launch.driver import check
    dst_ptr, src_ptr = cu.CUdeviceptr(dst), cu.CUdeviceptr(src)

    def submit(stream):
        check(cu.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, stream.handle))
    return submit


def _measure_copy_ceiling(gpu):
    from numba import cuda
    n = COPY_CEILING_BYTES // 4
    src = cuda.device_array(n, dtype=np.float32)
    dst = cuda.device_array(n, dtype=np.float32)
    try:
        submit = _memcpy_submit(_device_ptr(dst), _device_ptr(src), COPY_CEILING_BYTES)
        for _ in range(COPY_CEILING_WARMUPS):
            submit(gpu.stream)
        gpu.stream.synchronize()
        iterations = gpu.iterations_for(gpu.host_window_us(submit))
        samples = [gpu.sample([submit], iterations) for _ in range(COPY_CEILING_SAMPLES)]
    finally:
        del src, dst
    event = summarize([s["event_us"] for s in samples])
    return {"bytes_per_copy": COPY_CEILING_BYTES, "bytes_moved": 2 * COPY_CEILING_BYTES,
            "warmups": COPY_CEILING_WARMUPS, "delay_iterations": iterations, "samples": samples,
            "event_us": event, "bandwidth_tbs": bandwidth_tbs(2 * COPY_CEILING_BYTES, event["median"]),
            "starved_samples": sum(s["starved"] for s in samples)}


def _measure_event_floor(gpu):
    iterations = gpu.iterations_for(5.0)
    samples = [gpu.sample([], iterations) for _ in range(EVENT_FLOOR_SAMPLES)]
    return {"samples": samples, "event_us": summarize([s["event_us"] for s in samples])}


class _Variant:
    def __init__(self, name, submits, call, read_output=None):
        self.name = name
        self.submits = submits          # one callable(stream) per input set
        self.call = call
        self.read_output = read_output  # set 0's output as a host array (after a synchronize)
        self.status = "timed"
        self.reason = ""
        self.extra = {}


def _check_variant(gpu, variant, d_out0, host_x0, kind="softmax"):
    """Fill set 0's output with NaN, run the variant once on set 0, check it. Returns a record."""
    from numba_softmax.oracle import check_matrix
    stream = gpu.stream
    d_out0.copy_to_device(np.full(d_out0.shape, np.nan, dtype=np.float32), stream=stream.numba)
    stream.synchronize()
    variant.submits[0](stream)
    stream.synchronize()
    out = variant.read_output() if variant.read_output else d_out0.copy_to_host(stream=stream.numba)
    stream.synchronize()
    if kind == "copy":
        passed = bool(np.array_equal(out.view(np.uint32), host_x0.view(np.uint32)))
        return {"passed": passed, "kind": "bitwise copy of the input"}
    result = check_matrix(out, host_x0)
    record = result.record()
    record["kind"] = "oracle check_matrix"
    record["description"] = result.describe()
    return record


def _torch_variant(gpu, d_x, d_y, shape):
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    external = torch.cuda.ExternalStream(gpu.stream.ptr)
    torch.cuda.set_stream(external)
    if torch.cuda.current_stream().cuda_stream != gpu.stream.ptr:
        raise RuntimeError("torch's current stream is not our stream after torch.cuda.set_stream")
    tx = [torch.as_tensor(d, device="cuda") for d in d_x]
    ty = [torch.as_tensor(d, device="cuda") for d in d_y]
    for t, d in zip(tx + ty, list(d_x) + list(d_y), strict=True):
        if t.data_ptr() != _device_ptr(d) or t.dtype != torch.float32 or tuple(t.shape) != tuple(shape):
            raise RuntimeError("torch.as_tensor did not wrap our device buffer in place")
    forms = [
        ("torch.softmax(x, 1, out=y)", lambda x, y: torch.softmax(x, 1, out=y)),
        ("torch._softmax(x, 1, False, out=y)", lambda x, y: torch._softmax(x, 1, False, out=y)),
    ]
    failures = []
    for text, fn in forms:
        try:
            fn(tx[0], ty[0])
            gpu.stream.synchronize()
        except (TypeError, RuntimeError) as exc:
            failures.append(f"{text}: {type(exc).__name__}: {exc}")
            continue
        submits = [lambda s, x=x, y=y, fn=fn: fn(x, y) for x, y in zip(tx, ty, strict=True)]
        variant = _Variant(TORCH, submits,
                           f"{text} on torch.cuda.ExternalStream(our stream) (torch {torch.__version__})")
        variant.extra["out_form_failures"] = failures
        variant.keep = (tx, ty, external)
        return variant
    # Neither out= form exists: the allocating call, its output read back from the last result.
    last = {}

    def alloc(s, x, i):
        last[i] = torch.softmax(x, 1)
    submits = [lambda s, x=x, i=i: alloc(s, x, i) for i, x in enumerate(tx)]
    variant = _Variant(TORCH, submits, f"torch.softmax(x, 1) (allocating: no out= form worked: {failures}; "
                                       f"torch {torch.__version__})",
                       read_output=lambda: last[0].cpu().numpy())
    variant.keep = (tx, ty, external, last)
    return variant


def _triton_variant(gpu, d_x, d_y, shape):
    import torch
    triton, kernel = _triton_kernel()
    rows, cols = shape
    if torch.cuda.current_stream().cuda_stream != gpu.stream.ptr:
        torch.cuda.set_stream(torch.cuda.ExternalStream(gpu.stream.ptr))
    try:
        from triton.runtime import driver as triton_driver
        triton_stream = triton_driver.active.get_current_stream(torch.cuda.current_device())
        stream_check = "triton.runtime.driver.active.get_current_stream()"
    except Exception:  # older/newer Triton: it launches on torch's current stream
        triton_stream = torch.cuda.current_stream().cuda_stream
        stream_check = "torch.cuda.current_stream() (Triton's launcher stream API not found)"
    if int(triton_stream) != gpu.stream.ptr:
        raise RuntimeError(f"Triton would launch on stream {triton_stream:#x}, not ours ({gpu.stream.ptr:#x})")
    tx = [torch.as_tensor(d, device="cuda") for d in d_x]
    ty = [torch.as_tensor(d, device="cuda") for d in d_y]
    block = next_power_of_2(cols)
    warps = triton_num_warps(block)

    def launch(s, x, y):
        kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK_SIZE=block, num_warps=warps)
    submits = [lambda s, x=x, y=y: launch(s, x, y) for x, y in zip(tx, ty, strict=True)]
    variant = _Variant(TRITON, submits, f"tutorial softmax kernel, grid ({rows},), BLOCK_SIZE={block}, "
                                        f"num_warps={warps} (triton {triton.__version__}; stream checked via "
                                        f"{stream_check})")
    variant.keep = (tx, ty)
    return variant


def _note_once(notes, message):
    if message not in notes:
        notes.append(message)


def _build_variants(gpu, shape, d_x, d_y, args, notes, errors, skipped):
    """The variants to check and time at this shape; ``skipped[name]`` = why a peer is absent."""
    from numba_softmax.kernels.fused_row import MAX_FUSED_COLUMNS, fused_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.graphs import CapturedGraph

    rows, cols = shape
    variants = []
    if cols <= MAX_FUSED_COLUMNS:
        invocations = [Invocation.from_launches(f"fused-{i}", fused_launches(x, y)) for i, (x, y)
                       in enumerate(zip(d_x, d_y, strict=True))]
        fused = _Variant(FUSED, [inv.enqueue for inv in invocations],
                         "Invocation.from_launches(fused_launches(x, y)).enqueue: one cuLaunchKernel")
        fused.extra["kernel_resources"] = invocations[0].kernel_resources()
        variants.append(fused)
        graphs = [CapturedGraph(inv, gpu.stream) for inv in invocations]
        fused_graph = _Variant(FUSED_GRAPH, [g.launch for g in graphs],
                               "CapturedGraph(fused invocation).launch: one cuGraphLaunch")
        fused_graph.extra["graph"] = graphs[0].record()
        fused_graph.keep = graphs
        variants.append(fused_graph)
    else:
        errors.append(f"{shape_name(shape)}: {cols} columns > {MAX_FUSED_COLUMNS}, the fused kernel cannot run")
    if args.no_cudnn:
        skipped[CUDNN] = "--no-cudnn"
        _note_once(notes, "cuDNN peer skipped: --no-cudnn")
    else:
        try:
            from numba_softmax.peers.cudnn import CudnnSoftmax
            softmax = CudnnSoftmax(rows, cols, gpu.stream.ptr)
            ptrs = [(_device_ptr(x), _device_ptr(y)) for x, y in zip(d_x, d_y, strict=True)]
            submits = [lambda s, xp=xp, yp=yp: softmax.forward(xp, yp) for xp, yp in ptrs]
            for _ in range(3):  # cuDNN's first call loads its kernels
                submits[0](gpu.stream)
            gpu.stream.synchronize()
            variant = _Variant(CUDNN, submits, f"cudnnSoftmaxForward ACCURATE/INSTANCE (cuDNN "
                                               f"{softmax.lib.version_string}, {softmax.lib.path})")
            variant.library = softmax
            variants.append(variant)
        except Exception as exc:
            skipped[CUDNN] = f"unavailable: {type(exc).__name__}: {exc}"
            errors.append(f"{shape_name(shape)}: cuDNN unavailable (pass --no-cudnn to skip it): "
                          f"{type(exc).__name__}: {exc}")
    for name, enabled, factory in ((TORCH, not args.no_torch, _torch_variant),
                                   (TRITON, not args.no_triton, _triton_variant)):
        if not enabled:
            skipped[name] = f"--no-{name}"
            _note_once(notes, f"{name} peer skipped: --no-{name}")
            continue
        try:
            variants.append(factory(gpu, d_x, d_y, shape))
        except ImportError as exc:
            skipped[name] = f"not installed ({exc})"
            _note_once(notes, f"{name} peer skipped: not installed ({exc})")
        except Exception as exc:  # installed but unusable: say so loudly (exit status 1)
            skipped[name] = f"set-up failed: {type(exc).__name__}: {exc}"
            errors.append(f"{shape_name(shape)}: {name} is installed but could not be set up, not timed "
                          f"(pass --no-{name} to skip it): {type(exc).__name__}: {exc}")
    if cols <= MAX_FUSED_COLUMNS:
        from numba_softmax.kernels.row_copy import row_copy_launches
        launches = [row_copy_launches(x, y) for x, y in zip(d_x, d_y, strict=True)]
        invocations = [Invocation.from_launches(f"row-copy-{i}", ls) for i, ls in enumerate(launches)]
        build = launches[0][0].kernel.py_func.__name__
        row_copy = _Variant(ROW_COPY, [inv.enqueue for inv in invocations],
                            f"{build}: a copy in the fused kernel's launch geometry (one 256-thread block "
                            "per row, the same quads per thread, loads then stores)")
        row_copy.extra["kernel_resources"] = invocations[0].kernel_resources()
        variants.append(row_copy)
    nbytes = rows * cols * 4
    variants.append(_Variant(COPY, [_memcpy_submit(_device_ptr(y), _device_ptr(x), nbytes)
                                    for x, y in zip(d_x, d_y, strict=True)],
                             f"cuMemcpyDtoDAsync of the {nbytes:,}-byte input (same-size copy ceiling)"))
    return variants


def _measure_shape(gpu, shape, index, args, notes, errors):
    from numba import cuda

    from numba_softmax.fixtures import matrix_fixture
    from numba_softmax.launch.driver import device_record

    rows, cols = shape
    l2 = device_record()["l2_cache_bytes"]
    set_bytes = logical_bytes(shape)
    n_sets = args.input_sets if args.input_sets else input_sets_for(set_bytes, l2)
    entry = {"name": shape_name(shape), "shape": [rows, cols], "logical_bytes": logical_bytes(shape),
             "set_bytes": set_bytes, "l2_bytes": l2, "input_sets": n_sets,
             "fixtures": [f"random-{i}" for i in range(n_sets)], "variants": {}}
    _log(f"{entry['name']}: {n_sets} input sets, building variants")
    hosts = [matrix_fixture(f"random-{i}", shape) for i in range(n_sets)]
    d_x = [cuda.to_device(h, stream=gpu.stream.numba) for h in hosts]
    d_y = [cuda.device_array(shape, dtype=np.float32) for _ in range(n_sets)]
    gpu.stream.synchronize()
    skipped = {}
    variants = _build_variants(gpu, shape, d_x, d_y, args, notes, errors, skipped)
    for name, reason in skipped.items():
        entry["variants"][name] = {"status": "skipped", "reason": reason}

    timed = []
    for variant in variants:
        record = entry["variants"][variant.name] = {"call": variant.call, **variant.extra}
        try:
            check = _check_variant(gpu, variant, d_y[0], hosts[0], "copy" if variant.name in COPIES else "softmax")
        except Exception as exc:
            check = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
        record["check"] = check
        if not check["passed"]:
            record["status"] = "failed check"
            record["reason"] = check.get("description") or check.get("error") or "output differs"
            message = f"{entry['name']}: {variant.name} failed its check before timing, not timed: {record['reason']}"
            (errors if variant.name in (FUSED, FUSED_GRAPH, *COPIES) else notes).append(message)
            _log(message)
            continue
        record["status"] = "timed"
        timed.append(variant)

    counter = 0
    for variant in timed:  # warm-up, then the host enqueue window that sizes the delay kernel
        for _ in range(max(WARMUPS, n_sets)):
            variant.submits[counter % n_sets](gpu.stream)
            counter += 1
        gpu.stream.synchronize()
        window = gpu.host_window_us(variant.submits[counter % n_sets])
        variant.delay_single = gpu.iterations_for(window)
        variant.delay_batch = gpu.iterations_for(window, BATCH)
        entry["variants"][variant.name].update(host_enqueue_us=window, delay_iterations=variant.delay_single,
                                               batch_delay_iterations=variant.delay_batch)

    names = [v.name for v in timed]
    by_name = {v.name: v for v in timed}
    orders = round_orders(names, args.rounds, seed=args.seed + index) if names else []
    rounds = []
    _log(f"{entry['name']}: {args.rounds} rounds of {names}")
    for r, order in enumerate(orders):
        record = {"round": r, "order": order, "samples": {}}
        for name in order:
            variant = by_name[name]
            first = counter % n_sets
            single, retakes = _sample_unstarved(gpu, variant, "delay_single", [variant.submits[first]])
            counter += 1
            batch_first = counter % n_sets
            batch, batch_retakes = _sample_unstarved(
                gpu, variant, "delay_batch", [variant.submits[(batch_first + k) % n_sets] for k in range(BATCH)])
            counter += BATCH
            record["samples"][name] = {
                "set": first, **single, "retakes": retakes,
                "batch_first_set": batch_first, "batch_invocations": BATCH, "batch_event_us": batch["event_us"],
                "batch_delay_gpu_us": batch["delay_gpu_us"], "batch_host_window_us": batch["host_window_us"],
                "batch_starved": batch["starved"], "batch_retakes": batch_retakes}
        rounds.append(record)
    entry["rounds"] = rounds
    copy_tbs = (args.report.get("copy_ceiling") or {}).get("bandwidth_tbs")
    entry["analysis"] = summarize_shape(rounds, names, entry["logical_bytes"], copy_tbs)
    starved = sum(s["starved"] for r in rounds for s in r["samples"].values())
    retaken = sum(s.get("retakes", 0) + s.get("batch_retakes", 0) for r in rounds for s in r["samples"].values())
    if retaken:
        notes.append(f"{entry['name']}: {retaken} starved samples were retaken with a longer delay kernel")
    if starved:
        notes.append(f"{entry['name']}: {starved} single-invocation samples still had a host enqueue window >= "
                     "the delay kernel's duration after the retakes (the GPU may have waited for the host); "
                     "kept, counted in the table")
    for variant in variants:
        library = getattr(variant, "library", None)
        if library is not None:
            library.close()
        for graph in getattr(variant, "keep", ()) if variant.name == FUSED_GRAPH else ():
            graph.close()
    return entry


def _sample_unstarved(gpu, variant, delay_attr, submits):
    """One sample of ``submits``. A starved one (the host was still enqueuing when the delay
    kernel ended, so the interval may contain host time) is retaken on the same input sets
    with the variant's delay doubled, up to STARVED_RETAKES times. The decision reads only
    host and delay times, never the measured interval. Returns (sample, retakes); the
    variant keeps the longer delay for later rounds."""
    sample = gpu.sample(submits, getattr(variant, delay_attr))
    retakes = 0
    while sample["starved"] and retakes < STARVED_RETAKES:
        setattr(variant, delay_attr, min(getattr(variant, delay_attr) * 2,
                                         delay_iterations(DELAY_MAX_US, gpu.us_per_iteration)))
        sample = gpu.sample(submits, getattr(variant, delay_attr))
        retakes += 1
    return sample, retakes


def _per_call_in_batches(call, stream, batches):
    """Host time per call of ``call(stream)``, BATCH calls back to back, idle stream around each batch."""
    values = []
    for _ in range(batches):
        stream.synchronize()
        t0 = _now_us()
        for _ in range(BATCH):
            call(stream)
        t1 = _now_us()
        stream.synchronize()
        values.append((t1 - t0) / BATCH)
    return values


def _call_and_synchronize(call, stream, batches):
    """Host time of one ``call(stream)`` plus the synchronize that waits for it."""
    values = []
    for _ in range(batches):
        t0 = _now_us()
        call(stream)
        stream.synchronize()
        values.append(_now_us() - t0)
    return values


def _python_launch_block(gpu, empty_invocation, empty_graph, batches):
    stream = gpu.stream
    enqueue, replay = empty_invocation.enqueue, empty_graph.launch
    samples = {
        "enqueue_per_launch": _per_call_in_batches(enqueue, stream, batches),
        "launch_sync": _call_and_synchronize(enqueue, stream, batches),
        "graph_enqueue": _per_call_in_batches(replay, stream, batches),
        "graph_sync": _call_and_synchronize(replay, stream, batches),
    }
    sync_no_work = []
    for _ in range(batches):
        stream.synchronize()
        t0 = _now_us()
        stream.synchronize()
        sync_no_work.append(_now_us() - t0)
    samples["sync_no_work"] = sync_no_work
    return samples


def _libcuda_symlink_dir(out_dir):
    """A folder holding ``libcuda.so`` -> the libcuda.so.1 this process loaded (None if not found)."""
    try:
        ctypes.CDLL("libcuda.so.1")
        with open("/proc/self/maps") as handle:
            paths = [line.split()[-1] for line in handle if len(line.split()) >= 6]
    except OSError:
        return None
    real = next((p for p in paths if os.path.basename(p).startswith("libcuda.so")), None)
    if real is None:
        return None
    link_dir = os.path.join(out_dir, "libcuda-link")
    os.makedirs(link_dir, exist_ok=True)
    link = os.path.join(link_dir, "libcuda.so")
    if not os.path.lexists(link):
        os.symlink(real, link)
    return link_dir


def _link_options(nvcc, out_dir):
    """Library folders to try for ``-lcuda``, in order: none (the system's), the toolkit's stubs, a
    symlink to the driver library this process runs with."""
    yield []
    for directory in stub_library_dirs(nvcc):
        yield [directory]
    link_dir = _libcuda_symlink_dir(out_dir)
    if link_dir:
        yield [link_dir]


def build_launch_timer(out_dir, nvcc):
    """Build reference_cu/launch_timer.cu into ``out_dir``; returns {"binary", "command", "attempts", ...}.

    Raises RuntimeError carrying every attempt's command and output when no link option works.
    """
    binary = os.path.join(out_dir, "launch_timer")
    attempts = []
    for lib_dirs in _link_options(nvcc, out_dir):
        cmd = nvcc_command(nvcc, LAUNCH_TIMER_SOURCE, binary, lib_dirs)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        attempts.append({"command": cmd, "returncode": proc.returncode,
                         "output": (proc.stdout + proc.stderr)[-4000:]})
        if proc.returncode == 0:
            version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()
            return {"binary": binary, "command": cmd, "attempts": attempts, "nvcc": nvcc,
                    "nvcc_version": version.splitlines()[-1] if version else None}
    raise RuntimeError("could not build reference_cu/launch_timer.cu:\n" + "\n".join(
        f"$ {' '.join(a['command'])}\n(exit {a['returncode']}) {a['output']}" for a in attempts))


def run_launch_timer(binary, batches=LAUNCH_BATCHES, warmup=LAUNCH_WARMUP_BATCHES):
    proc = subprocess.run([binary, str(batches), str(warmup)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{binary} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return parse_launch_timer_output(proc.stdout)


def _measure_launch(gpu, args, report, notes, errors):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.graphs import CapturedGraph
    from numba_softmax.launch.plan import KernelLaunch

    launch = report["launch"] = {"batch": BATCH, "batches_per_block": LAUNCH_BATCHES,
                                 "alternations": LAUNCH_ALTERNATIONS, "kernel": "empty kernel <<<1, 32>>>"}
    empty = Invocation.from_launches("perf_empty", [KernelLaunch("perf_empty", gpu.kernels.empty, (1,), (32,), ())])
    graph = CapturedGraph(empty, gpu.stream)
    launch["graph"] = graph.record()
    _python_launch_block(gpu, empty, graph, LAUNCH_WARMUP_BATCHES)  # warm-up
    nvcc = find_nvcc()
    binary = None
    if nvcc is None:
        launch["cpp_skipped"] = ("nvcc not found ($NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): the C++ "
                                 "launch timer (b) was not built, so the launch ratio is not measured")
        notes.append(launch["cpp_skipped"])
    else:
        try:
            build_dir = tempfile.mkdtemp(prefix="bench-perf-launch-timer-")
            _log(f"building the launch timer with {nvcc}")
            launch["build"] = build_launch_timer(build_dir, nvcc)
            binary = launch["build"]["binary"]
        except Exception as exc:
            launch["error"] = f"launch timer build failed: {exc}"
            errors.append(launch["error"])
    python_blocks, cpp_blocks, cpp_meta = [], [], []
    for k in range(LAUNCH_ALTERNATIONS):
        python_blocks.append(_python_launch_block(gpu, empty, graph, LAUNCH_BATCHES))
        if binary:
            try:
                parsed = run_launch_timer(binary)
            except Exception as exc:
                launch["error"] = f"launch timer run {k} failed: {type(exc).__name__}: {exc}"
                errors.append(launch["error"])
                binary = None
                continue
            cpp_blocks.append({m: parsed["metrics"][m]["samples_us"] for m in LAUNCH_METRICS})
            cpp_meta.append(parsed["meta"])
    launch["python_blocks"] = python_blocks
    launch["cpp_blocks"] = cpp_blocks
    launch["cpp_meta"] = cpp_meta
    launch["python"] = {m: summarize([v for b in python_blocks for v in b[m]]) for m in LAUNCH_METRICS}
    if cpp_blocks and len(cpp_blocks) == len(python_blocks):
        launch["comparison"] = launch_comparison(python_blocks, cpp_blocks)
    graph.close()


def _measure_graph_completion(gpu, args, report, errors):
    from numba import cuda

    from numba_softmax.fixtures import matrix_fixture
    from numba_softmax.kernels.fused_row import fused_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch.graphs import CapturedGraph
    from numba_softmax.launch.plan import KernelLaunch
    from numba_softmax.oracle import check_matrix

    section = report["graph_completion"] = {"shape": list(GRAPH_COMPLETION_SHAPE), "rounds": GRAPH_COMPLETION_ROUNDS,
                                            "warmups": GRAPH_COMPLETION_WARMUPS}
    host = matrix_fixture("random-0", GRAPH_COMPLETION_SHAPE)
    d_x = cuda.to_device(host, stream=gpu.stream.numba)
    d_y = cuda.to_device(np.full(GRAPH_COMPLETION_SHAPE, np.nan, dtype=np.float32), stream=gpu.stream.numba)
    gpu.stream.synchronize()
    fused = CapturedGraph(Invocation.from_launches("fused-1x128", fused_launches(d_x, d_y)), gpu.stream)
    empty = CapturedGraph(Invocation.from_launches(
        "perf_empty", [KernelLaunch("perf_empty", gpu.kernels.empty, (1,), (32,), ())]), gpu.stream)
    section["graphs"] = {"fused": fused.record(), "empty": empty.record()}
    d_y.copy_to_device(np.full(GRAPH_COMPLETION_SHAPE, np.nan, dtype=np.float32), stream=gpu.stream.numba)
    gpu.stream.synchronize()
    fused.launch(gpu.stream)
    gpu.stream.synchronize()
    check = check_matrix(d_y.copy_to_host(), host)
    section["check"] = dict(check.record(), description=check.describe())
    if not check.passed:
        section["error"] = f"fused (1,128) graph failed the oracle check: {check.describe()}"
        errors.append(section["error"])
        return
    graphs = {"fused": fused, "empty": empty}
    for _ in range(GRAPH_COMPLETION_WARMUPS):
        for g in graphs.values():
            g.launch(gpu.stream)
            gpu.stream.synchronize()
    rounds = []
    for order in round_orders(list(graphs), GRAPH_COMPLETION_ROUNDS, seed=args.seed + 1000):
        values = {}
        for name in order:
            t0 = _now_us()
            graphs[name].launch(gpu.stream)
            gpu.stream.synchronize()
            values[name] = _now_us() - t0
        rounds.append({"order": order, "host_completion_us": values})
    section["samples"] = rounds
    values = [r["host_completion_us"] for r in rounds]
    section["fused"] = summarize([v["fused"] for v in values])
    section["empty"] = summarize([v["empty"] for v in values])
    section["ratio"] = paired_ratios(values, "fused", "empty", "host_completion_us")
    fused.close()
    empty.close()


def _parser():
    parser = argparse.ArgumentParser(prog="python -m bench perf", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="output folder (default runs/<UTC time>-perf)")
    parser.add_argument("--expect-device", default="H100",
                        help="device model the run is for; any other model stops the run (default H100)")
    parser.add_argument("--shapes", help="comma-separated RxC shapes (default: "
                                         + ",".join(shape_name(s) for s in DEFAULT_SHAPES) + ")")
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS,
                        help=f"shuffled rounds per shape (>= {MIN_ROUNDS})")
    parser.add_argument("--input-sets", default="auto",
                        help=f"input sets to rotate among: auto (>= {MIN_INPUT_SETS}, enough to defeat L2) or N >= 4")
    parser.add_argument("--seed", type=int, default=20261019, help="seed of the per-round shuffles")
    parser.add_argument("--no-cudnn", action="store_true", help="skip the cuDNN peer")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch peer")
    parser.add_argument("--no-triton", action="store_true", help="skip the Triton peer")
    parser.add_argument("--no-launch", action="store_true", help="skip the launch-path section (3)")
    parser.add_argument("--floors", action="store_true", help="print the byte-floor tables and exit (no GPU)")
    parser.add_argument("--copy-tbs", type=float, default=FACTS_COPY_TBS, help="copy bandwidth for --floors")
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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.floors:
        print(floors_markdown(args.copy_tbs))
        return 0
    try:
        shapes = parse_shapes(args.shapes) if args.shapes else list(DEFAULT_SHAPES)
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

    from bench.environment import (DeviceMismatch, check_expected_device, git_state, gpu_present,
                                   nvidia_smi_record, package_versions)
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        print("error: python -m bench perf measures a GPU; NUMBA_ENABLE_CUDASIM=1 is set (the simulator has no "
              "timings). Unset it and run on a machine with a CUDA GPU.", file=sys.stderr)
        return 4
    if not gpu_present():
        print("error: python -m bench perf needs a CUDA GPU, and none was found (libcuda.so.1 missing, cuInit "
              "failed or no device). Nothing was measured.", file=sys.stderr)
        return 4

    from numba_softmax.launch.driver import device_record
    out_dir = args.out or os.path.join(
        "runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-perf")
    os.makedirs(out_dir, exist_ok=True)
    notes, errors = [], []
    report = {"tool": "python -m bench perf", "schema": 1, "argv": argv,
              "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
              "expected_device": args.expect_device, "device": device_record(), "packages": package_versions(),
              "git": git_state(), "nvidia_smi": nvidia_smi_record(), "python": sys.version.split()[0],
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
    _log(f"device {report['device']['name']}; writing to {out_dir}")

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
        gpu = _Gpu()
    except Exception as exc:
        errors.append(f"setting up the stream, events and kernels failed: {type(exc).__name__}: {exc}")
        report["tracebacks"] = [traceback.format_exc()]
        traceback.print_exc()
        print(_write(out_dir, report))
        return 1
    section("delay kernel", lambda: report.__setitem__("delay_kernel", gpu.calibrate_delay()))
    if gpu.us_per_iteration:
        _log("ceilings: 1 GiB device-to-device copy, event floor")
        section("copy ceiling", lambda: report.__setitem__("copy_ceiling", _measure_copy_ceiling(gpu)))
        section("event floor", lambda: report.__setitem__("event_floor", _measure_event_floor(gpu)))
        for index, shape in enumerate(shapes):
            section(f"shape {shape_name(shape)}",
                    lambda index=index, shape=shape: report["shapes"].append(
                        _measure_shape(gpu, shape, index, args, notes, errors)))
    if args.no_launch:
        notes.append("launch path (section 3) skipped: --no-launch")
    else:
        _log("launch path: python harness vs C++ launch timer")
        section("launch path", lambda: _measure_launch(gpu, args, report, notes, errors))
        _log("(1,128) graph completion")
        section("graph completion", lambda: _measure_graph_completion(gpu, args, report, errors))
    report["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    markdown = _write(out_dir, report)
    print(markdown)
    print(f"wrote {os.path.join(out_dir, 'perf.json')} and {os.path.join(out_dir, 'perf.md')}", file=sys.stderr)
    if errors:
        print(f"ERRORS ({len(errors)}), exit status 1:\n" + "\n".join(f"  - {e}" for e in errors), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
