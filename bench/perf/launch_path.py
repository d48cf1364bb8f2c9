"""Section 3 of ``python -m bench perf``: the launch path, ours against C++, and the API's own cost.

(a) Host enqueue per launch of an empty kernel <<<1, 32>>> through the harness
(``Invocation.enqueue``), launch + synchronize, and the same for a 1-node graph replay;
(b) the same with ``reference_cu/launch_timer.cu``, a C++ program built at run time with nvcc
that launches its empty kernel with ``cuLaunchKernel``; (a) and (b) alternate. (c) Host
completion of ONE replay of the fused (1, 128) graph against an empty-kernel graph.
(d) The API's overhead: host completion (call + synchronize) of ``softmax(x, out=y, stream=s, check=True)``
on Numba device arrays (``method="auto"``, ``check=True``, the defaults) against the launch
layer's own host completion of the same kernel (``auto_launches`` with its status words and
alarm, one ``Invocation.enqueue`` + synchronize), at 1x128 and 4096x4096; and the same call on
PyTorch CUDA tensors against it on Numba arrays. Shuffled paired rounds; each ratio is the median
of the per-round ratios (goals: API / launch layer <= 1.3 at 1x128 and <= 1.05 at 4096x4096;
torch / Numba <= 1.1).
"""

import ctypes
import json
import math
import os
import subprocess
import tempfile
import time

import numpy as np
from numba import cuda

from bench.perf.ceilings import log
from bench.protocol import BATCH
from bench.reference_build import find_nvcc as find
from bench.stats import paired_ratios, summarize
from bench.timing import host_rounds
from numba_softmax import softmax
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_launch import auto_launches
from numba_softmax.kernels.fused_row import fused_launches
from numba_softmax.kernels.tiles import empty_tile_kernel
from numba_softmax.launch.driver import Invocation
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.oracle import check_matrix
from numba_softmax.validation import STATUS_CLEAR, STATUS_WORDS

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCH_TIMER_SOURCE = os.path.join(REPO_ROOT, "reference_cu", "launch_timer.cu")

LAUNCH_ALTERNATIONS = 5
LAUNCH_BATCHES = 100
LAUNCH_WARMUP_BATCHES = 20
LAUNCH_METRICS = ("enqueue_per_launch", "launch_sync", "graph_enqueue", "graph_sync", "sync_no_work")
LAUNCH_GOAL_METRIC = "enqueue_per_launch"
GRAPH_COMPLETION_SHAPE = (1, 128)
GRAPH_COMPLETION_ROUNDS = 200
GRAPH_COMPLETION_WARMUPS = 20

NVCC_FLAGS = ("-O2", "-arch=sm_90", "-std=c++17")


def _now_us():
    return time.perf_counter_ns() / 1e3


def empty_kernel():
    """The empty kernel both launch paths time: the library's."""
    return empty_tile_kernel


def find_nvcc():
    """nvcc as the reference build finds it ($NVCC, PATH, $CUDA_HOME/bin, ... ; None if absent)."""
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


def python_launch_block(stream, empty_invocation, empty_graph, batches):
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


def measure_launch(sampler, args, report, notes, errors):
    launch = report["launch"] = {"batch": BATCH, "batches_per_block": LAUNCH_BATCHES,
                                 "alternations": LAUNCH_ALTERNATIONS, "kernel": "empty kernel <<<1, 32>>>"}
    empty = Invocation.from_launches("perf_empty", [KernelLaunch("perf_empty", empty_kernel(), (1,), (32,), ())])
    graph = CapturedGraph(empty, sampler.stream)
    launch["graph"] = graph.record()
    python_launch_block(sampler.stream, empty, graph, LAUNCH_WARMUP_BATCHES)  # warm-up
    # The launch timer is built in a temporary folder, removed after its runs (perf.json keeps the command).
    with tempfile.TemporaryDirectory(prefix="bench-perf-launch-timer-") as build_dir:
        nvcc = find_nvcc()
        binary = None
        if nvcc is None:
            launch["cpp_skipped"] = ("nvcc not found ($NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): the C++ "
                                     "launch timer (b) was not built, so the launch ratio is not measured")
            notes.append(launch["cpp_skipped"])
        else:
            try:
                log(f"building the launch timer with {nvcc}")
                launch["build"] = build_launch_timer(build_dir, nvcc)
                binary = launch["build"]["binary"]
            except Exception as exc:
                launch["error"] = f"launch timer build failed: {exc}"
                errors.append(launch["error"])
        python_blocks, cpp_blocks, cpp_meta = [], [], []
        for k in range(LAUNCH_ALTERNATIONS):
            python_blocks.append(python_launch_block(sampler.stream, empty, graph, LAUNCH_BATCHES))
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


def measure_graph_completion(sampler, args, report, errors):
    section = report["graph_completion"] = {"shape": list(GRAPH_COMPLETION_SHAPE), "rounds": GRAPH_COMPLETION_ROUNDS,
                                            "warmups": GRAPH_COMPLETION_WARMUPS}
    host = matrix_fixture("random-0", GRAPH_COMPLETION_SHAPE)
    d_x = cuda.to_device(host, stream=sampler.stream.numba)
    d_y = cuda.to_device(np.full(GRAPH_COMPLETION_SHAPE, np.nan, dtype=np.float32), stream=sampler.stream.numba)
    sampler.stream.synchronize()
    fused = CapturedGraph(Invocation.from_launches("fused-1x128", fused_launches(d_x, d_y)), sampler.stream)
    empty = CapturedGraph(Invocation.from_launches(
        "perf_empty", [KernelLaunch("perf_empty", empty_kernel(), (1,), (32,), ())]), sampler.stream)
    section["graphs"] = {"fused": fused.record(), "empty": empty.record()}
    d_y.copy_to_device(np.full(GRAPH_COMPLETION_SHAPE, np.nan, dtype=np.float32), stream=sampler.stream.numba)
    sampler.stream.synchronize()
    fused.launch(sampler.stream)
    sampler.stream.synchronize()
    check = check_matrix(d_y.copy_to_host(), host)
    section["check"] = dict(check.record(), description=check.describe())
    if not check.passed:
        section["error"] = f"fused (1,128) graph failed the oracle check: {check.describe()}"
        errors.append(section["error"])
        return
    graphs = {"fused": fused, "empty": empty}
    for _ in range(GRAPH_COMPLETION_WARMUPS):
        for g in graphs.values():
            g.launch(sampler.stream)
            sampler.stream.synchronize()
    rounds = host_rounds({name: lambda g=g: (g.launch(sampler.stream), sampler.stream.synchronize())
                          for name, g in graphs.items()}, GRAPH_COMPLETION_ROUNDS, seed=args.seed + 1000)
    section["samples"] = rounds
    values = [r["host_completion_us"] for r in rounds]
    section["fused"] = summarize([v["fused"] for v in values])
    section["empty"] = summarize([v["empty"] for v in values])
    section["ratio"] = paired_ratios(values, "fused", "empty", "host_completion_us")
    fused.close()
    empty.close()


API_OVERHEAD_GOALS = {(1, 128): 1.3, (4096, 4096): 1.05}
TORCH_API_GOAL = 1.1
API_ROUNDS = 200
API_WARMUPS = 20


def measure_api_overhead(sampler, args, report, errors):
    """(d): ``softmax()`` against the launch layer, and a torch tensor against a Numba array."""
    section = report["api_overhead"] = {"rounds": API_ROUNDS, "warmups": API_WARMUPS, "shapes": [],
                                        "api_call": "softmax(x, out=y, stream=s, check=True) (it synchronizes "
                                                    "to report, so the result is complete when it returns)",
                                        "api_unchecked_call": "softmax(x, out=y, stream=s, check=False) + "
                                                              "s.synchronize()",
                                        "launch_layer_call": "Invocation(auto_launches(x, y, status, alarm))"
                                                             ".enqueue(s) + s.synchronize()"}
    torch = None
    if args.no_torch:
        section["torch_skipped"] = "--no-torch"
    else:
        try:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("torch.cuda.is_available() is False")
        except Exception as exc:
            torch = None
            section["torch_skipped"] = f"torch unavailable: {type(exc).__name__}: {exc}"
    for shape in API_OVERHEAD_GOALS:
        entry = {"shape": list(shape)}
        section["shapes"].append(entry)
        _api_overhead_shape(entry, shape, sampler.stream, torch, args.seed + 2000 + shape[1], errors)


def _api_overhead_shape(entry, shape, stream, torch, seed, errors):
    host = matrix_fixture("random-0", shape)
    d_x = cuda.to_device(host, stream=stream.numba)
    d_y = cuda.device_array(shape, dtype=np.float32, stream=stream.numba)
    d_ref = cuda.device_array(shape, dtype=np.float32, stream=stream.numba)
    status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64), stream=stream.numba)
    alarm = cuda.mapped_array(1, dtype=np.int32)
    alarm[0] = 0
    stream.synchronize()
    launch_layer = Invocation.from_launches("auto-checked", auto_launches(d_x, d_ref, status, alarm))
    # Each call returns when its result is complete on the device: the checked softmax() synchronizes
    # itself to report (a second synchronize would time an idle stream's ~2 us driver call too);
    # the unchecked one and the launch layer are followed by one synchronize.
    calls = {"api": lambda: softmax(d_x, out=d_y, stream=stream, check=True),
             "api_unchecked": lambda: (softmax(d_x, out=d_y, stream=stream, check=False), stream.synchronize()),
             "launch_layer": lambda: (launch_layer.enqueue(stream), stream.synchronize())}
    read = {"api": d_y.copy_to_host, "api_unchecked": d_y.copy_to_host, "launch_layer": d_ref.copy_to_host}
    if torch is not None:
        t_x = torch.as_tensor(host, device="cuda")
        t_y = torch.empty(shape, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        calls["torch_api"] = lambda: softmax(t_x, out=t_y, stream=stream, check=True)
        read["torch_api"] = lambda: t_y.cpu().numpy()
        # The same tensors without stream=: the call runs on torch's current stream, set to ours below.
        calls["torch_api_current_stream"] = lambda: softmax(t_x, out=t_y, check=True)
        read["torch_api_current_stream"] = lambda: t_y.cpu().numpy()
        previous = torch.cuda.current_stream()
        torch.cuda.set_stream(torch.cuda.ExternalStream(stream.ptr))
        try:
            _time_api_calls(entry, calls, read, host, stream, alarm, seed, errors)
        finally:
            torch.cuda.set_stream(previous)
    else:
        _time_api_calls(entry, calls, read, host, stream, alarm, seed, errors)


def _time_api_calls(entry, calls, read, host, stream, alarm, seed, errors):
    """Check each call's result once, then time them in shuffled paired rounds (host completion)."""
    shape = host.shape
    entry["variants"] = sorted(calls)
    checks = entry["checks"] = {}
    for name, call in calls.items():
        call()
        stream.synchronize()
        check = check_matrix(read[name](), host)
        checks[name] = dict(check.record(), description=check.describe())
        if not check.passed:
            entry["error"] = f"{name} at {shape_text(shape)} failed the oracle check: {check.describe()}"
            errors.append(entry["error"])
            return
    if alarm[0]:
        entry["error"] = f"the launch layer's checked kernel raised its alarm at {shape_text(shape)}"
        errors.append(entry["error"])
        return
    for _ in range(API_WARMUPS):
        for call in calls.values():
            call()
    rounds = host_rounds(calls, API_ROUNDS, seed=seed)
    entry["samples"] = rounds
    for name in calls:
        entry[name] = summarize([r["host_completion_us"][name] for r in rounds])
    values = [r["host_completion_us"] for r in rounds]
    entry["ratio"] = paired_ratios(values, "api", "launch_layer", "host_completion_us")
    entry["unchecked_ratio"] = paired_ratios(values, "api_unchecked", "launch_layer", "host_completion_us")
    if "torch_api" in calls:
        entry["torch_ratio"] = paired_ratios(values, "torch_api", "api", "host_completion_us")
        entry["torch_current_stream_ratio"] = paired_ratios(values, "torch_api_current_stream", "api",
                                                            "host_completion_us")


def shape_text(shape):
    return f"{shape[0]}x{shape[1]}"


def api_goals(report):
    """The API goals as rows of the goals table (``{goal, status, value, threshold, detail}``)."""
    section = report.get("api_overhead") or {}
    entries = {tuple(e["shape"]): e for e in section.get("shapes", [])}
    goals = []

    def goal(label, ratio, threshold, detail, missing):
        if ratio is None:
            return {"goal": label, "status": "NOT MEASURED", "value": None, "threshold": threshold,
                    "detail": missing}
        return {"goal": label, "status": "PASS" if ratio["median"] <= threshold else "MISS",
                "value": ratio["median"], "threshold": threshold, "detail": detail}

    for shape, threshold in API_OVERHEAD_GOALS.items():
        entry = entries.get(shape, {})
        ratio = entry.get("ratio")
        detail = missing = entry.get("error") or ("not run" if not section else "shape not measured")
        if ratio:
            detail = (f"softmax() {entry['api']['median']:.2f} us vs launch layer {entry['launch_layer']['median']:.2f}"
                      f" us host completion, {_rounds_text(ratio)}"
                      + _beside(entry, "api_unchecked", "unchecked_ratio", "check=False + synchronize"))
        goals.append(goal(f"API overhead: softmax(device array, out=) / launch layer, host completion at "
                          f"{shape_text(shape)} <= {threshold}", ratio, threshold, detail, missing))
    for shape in API_OVERHEAD_GOALS:
        entry = entries.get(shape, {})
        ratio = entry.get("torch_ratio")
        detail = missing = (section.get("torch_skipped") or entry.get("error")
                            or ("not run" if not section else "shape not measured"))
        if ratio:
            detail = (f"torch tensor {entry['torch_api']['median']:.2f} us vs Numba array {entry['api']['median']:.2f}"
                      f" us host completion through auto, {_rounds_text(ratio)}"
                      + _beside(entry, "torch_api_current_stream", "torch_current_stream_ratio",
                                "without stream= (torch's current stream)"))
        goals.append(goal(f"torch: softmax(torch tensor) / softmax(Numba array) at {shape_text(shape)} "
                          f"<= {TORCH_API_GOAL}", ratio, TORCH_API_GOAL, detail, missing))
    return goals


def _rounds_text(ratio):
    return f"median of {ratio['n']} paired rounds (p10 {ratio['p10']:.3f}, p90 {ratio['p90']:.3f})"


def _beside(entry, variant, ratio_key, label):
    """A variant timed beside a goal's two sides, for its detail ('' where it was not)."""
    ratio = entry.get(ratio_key)
    return f"; {label} {entry[variant]['median']:.2f} us, ratio {ratio['median']:.3f}" if ratio else ""
