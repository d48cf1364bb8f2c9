"""``python -m bench perf`` (bench/perf/): everything that does not need a GPU.

Synthetic numbers drive the ratio / goal evaluation, the tables and the report; the C++ launch
timer (reference_cu/launch_timer.cu) is compiled with nvcc when nvcc is present, linked against a
stub libcuda generated from the object's undefined symbols (no driver here), and its ``--selftest``
mode (no CUDA call) is run to check that its JSON is what bench/perf/launch_path.py parses.
"""

import json
import os

import numpy as np
import pytest

from bench import timing
from bench.floors import experiment_a_floors, experiment_b_floors, shape_name
from bench.perf import launch_path
from bench.perf.ceilings import bandwidth_tbs, logical_bytes
from bench.perf.goals import MISS, NOT_MEASURED, PASS, evaluate_goals
from bench.perf.launch_path import (LAUNCH_METRICS, LaunchTimerOutputError, launch_comparison, nvcc_command,
                                    parse_launch_timer_output)
from bench.perf.peers import (COPY, CUDNN, FUSED, FUSED_GRAPH, LONG_SHAPES, MAX_INPUT_SETS, ROW_COPY, TORCH, TRITON,
                              input_sets_for, summarize_shape)
from bench.perf.render import floors_markdown, jsonable, markdown_table, render_markdown
from bench.protocol import BATCH
from bench.shapes import parse_shapes
from numba_softmax.peers.triton_softmax import next_power_of_2, num_warps
from bench.timing import DelaySampler, delay_iterations, delay_target_us, is_starved

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200_L2 = 62914560
NVCC = launch_path.find_nvcc()


# ------------------------------------------------------------------------------ small pure helpers

def test_parse_shapes():
    assert parse_shapes("4096x128, 16384X1024") == [(4096, 128), (16384, 1024)]
    for bad in ("", "4096", "4096x", "0x5", "axb", "4096x128,4096x128"):
        with pytest.raises(ValueError):
            parse_shapes(bad)


def test_logical_bytes_and_bandwidth():
    assert logical_bytes((4096, 4096)) == 134217728 == 2 * 4096 * 4096 * 4
    assert bandwidth_tbs(134217728, 40.0) == pytest.approx(3.3554432)
    assert bandwidth_tbs(2 * 2**30, 505.0) == pytest.approx(4.2524, rel=1e-4)
    with pytest.raises(ValueError):
        bandwidth_tbs(1, 0.0)


def test_input_sets_defeat_l2():
    # (n - 1) * set_bytes >= 1.5 * L2, at least 4
    assert input_sets_for(logical_bytes((4096, 128)), H200_L2) == 24       # 4 MiB sets: 23 * 4 = 92 >= 90 MiB
    assert input_sets_for(logical_bytes((4096, 1024)), H200_L2) == 4       # 3 * 32 = 96 MiB
    assert input_sets_for(logical_bytes((4096, 4096)), H200_L2) == 4
    assert input_sets_for(logical_bytes((16384, 1024)), H200_L2) == 4
    assert input_sets_for(1024, H200_L2) == MAX_INPUT_SETS
    for shape in ((4096, 128), (4096, 1024), (4096, 4096)):
        n = input_sets_for(logical_bytes(shape), H200_L2)
        assert (n - 1) * logical_bytes(shape) >= 1.5 * H200_L2


def test_triton_tutorial_geometry():
    assert [next_power_of_2(n) for n in (1, 128, 781, 1024, 1025, 4096)] == [1, 128, 1024, 1024, 2048, 4096]
    assert [num_warps(b) for b in (128, 1024, 2048, 4096, 8192)] == [4, 4, 8, 16, 16]


def test_delay_sizing_and_starvation():
    assert delay_target_us(1.0) == timing.DELAY_MIN_US
    assert delay_target_us(20.0) == 60.0
    assert delay_target_us(20.0, BATCH) == 3 * 20 * 32
    assert delay_target_us(1e9) == timing.DELAY_MAX_US
    assert delay_iterations(60.0, 0.5) == 120
    assert delay_iterations(1.0, 0.5) == 60          # clamped up to the minimum delay
    with pytest.raises(ValueError):
        delay_iterations(60.0, 0.0)
    assert is_starved(30.0, 29.9) and is_starved(30.0, 30.0) and not is_starved(29.0, 30.0)


class _StarvingSampler(DelaySampler):
    """The sampler's retake logic with the GPU sample replaced: the host window is fixed; a
    sample is starved while the delay (iterations x 1 us) is shorter than it."""

    def __init__(self, window_us):
        self.us_per_iteration = 1.0
        self.window_us = window_us
        self.delays = []

    def sample(self, submits, iterations):
        self.delays.append(iterations)
        return {"event_us": 10.0, "delay_gpu_us": float(iterations), "host_window_us": self.window_us,
                "starved": is_starved(self.window_us, float(iterations))}


def test_starved_samples_are_retaken_with_a_longer_delay():
    sampler = _StarvingSampler(window_us=100.0)
    sample, retakes, iterations = sampler.sample_unstarved(["submit"], 30)
    assert not sample["starved"] and retakes == 2 and sampler.delays == [30, 60, 120]
    assert iterations == 120  # later rounds start from the delay that sufficed
    # a host window no delay can cover: bounded retakes, the last (starved) sample kept and said so
    sampler = _StarvingSampler(window_us=1e9)
    sample, retakes, _ = sampler.sample_unstarved(["submit"], 30)
    assert sample["starved"] and retakes == timing.STARVED_RETAKES
    assert len(sampler.delays) == timing.STARVED_RETAKES + 1


def test_nvcc_command():
    assert nvcc_command("/usr/bin/nvcc", "src/launch_timer.cu", "/tmp/x/launch_timer") == [
        "/usr/bin/nvcc", "-O2", "-arch=sm_90", "-std=c++17", "-o", "/tmp/x/launch_timer", "src/launch_timer.cu",
        "-lcuda"]
    cmd = nvcc_command("nvcc", "a.cu", "a", ["/opt/stubs", "/tmp/link"])
    assert cmd[-3:] == ["-L/opt/stubs", "-L/tmp/link", "-lcuda"]


def test_markdown_table_and_jsonable():
    text = markdown_table(["a", "b"], [[1, "x|y"]])
    assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | x\\|y |"]
    with pytest.raises(ValueError):
        markdown_table(["a"], [[1, 2]])
    assert jsonable({"a": float("nan"), "b": np.float32(1.5), "c": (np.int64(3),), 4: None}) == {
        "a": "nan", "b": 1.5, "c": [3], "4": None}
    json.dumps(jsonable({"x": [float("inf")]}), allow_nan=False)


# ------------------------------------------------------------------------------ launch timer JSON

def _timer_json(metrics=LAUNCH_METRICS, **overrides):
    body = {"tool": "launch_timer", "batch": BATCH, "batches": 3, "device_name": "X", "metrics": {}}
    for k, name in enumerate(metrics):
        samples = [1.0 + k, 2.0 + k, 4.0 + k]
        p10, p50, p90 = np.percentile(samples, [10, 50, 90])
        body["metrics"][name] = {"per": "x", "n": 3, "median_us": p50, "p10_us": p10, "p90_us": p90,
                                 "samples_us": samples}
    body.update(overrides)
    return json.dumps(body)


def test_parse_launch_timer_output_recomputes():
    parsed = parse_launch_timer_output("some banner\n" + _timer_json() + "\n")
    assert set(parsed["metrics"]) == set(LAUNCH_METRICS)
    m = parsed["metrics"]["enqueue_per_launch"]
    assert (m["median"], m["p10"], m["p90"], m["n"]) == (2.0, 1.2, pytest.approx(3.6), 3)
    assert m["samples_us"] == [1.0, 2.0, 4.0]
    assert parsed["meta"]["device_name"] == "X"


@pytest.mark.parametrize("text, message", [
    ("no json here", "no JSON"),
    ("{not json}", "invalid JSON"),
    (_timer_json(tool="other"), "not launch_timer"),
    (_timer_json(batch=16), "batch"),
    (_timer_json(metrics=LAUNCH_METRICS[:-1]), "lacks metric 'sync_no_work'"),
])
def test_parse_launch_timer_output_rejects(text, message):
    with pytest.raises(LaunchTimerOutputError, match=message):
        parse_launch_timer_output(text)


def test_parse_launch_timer_output_checks_printed_statistics():
    data = json.loads(_timer_json())
    data["metrics"]["launch_sync"]["median_us"] += 0.5
    with pytest.raises(LaunchTimerOutputError, match="printed median"):
        parse_launch_timer_output(json.dumps(data))
    data = json.loads(_timer_json())
    data["metrics"]["graph_sync"]["samples_us"] = []
    with pytest.raises(LaunchTimerOutputError, match="no samples"):
        parse_launch_timer_output(json.dumps(data))


def test_launch_comparison_pairs_alternations():
    py = [{m: [4.0, 4.4, 4.2] for m in LAUNCH_METRICS}, {m: [5.0, 5.0, 5.0] for m in LAUNCH_METRICS}]
    cpp = [{m: [3.5, 3.5, 3.5] for m in LAUNCH_METRICS}, {m: [4.0, 4.0, 4.0] for m in LAUNCH_METRICS}]
    result = launch_comparison(py, cpp)
    r = result["enqueue_per_launch"]
    assert r["ratios_per_alternation"] == pytest.approx([4.2 / 3.5, 5.0 / 4.0])
    assert r["ratio"]["median"] == pytest.approx((1.2 + 1.25) / 2)
    assert r["python"]["n"] == 6 and r["cpp"]["median"] == pytest.approx(3.75)
    with pytest.raises(ValueError):
        launch_comparison(py, cpp[:1])


# ------------------------------------------------------------------------------ shapes, goals, report

def _rounds(medians, n=30, jitter=0.02, seed=0):
    """Synthetic rounds: variant -> event_us around its median, paired drift shared per round."""
    rng = np.random.default_rng(seed)
    rounds = []
    for r in range(n):
        drift = 1.0 + jitter * rng.standard_normal()
        samples = {}
        for name, median in medians.items():
            value = median * drift * (1.0 + 0.001 * rng.standard_normal())
            samples[name] = {"set": r % 4, "event_us": value, "delay_gpu_us": 100.0, "host_window_us": 20.0,
                             "starved": False, "batch_event_us": BATCH * value * 0.95,
                             "batch_invocations": BATCH, "batch_starved": False}
        rounds.append({"round": r, "order": list(medians), "samples": samples})
    return rounds


def _shape_entry(shape, medians, copy_tbs, statuses=None):
    statuses = statuses or {}
    timed = [v for v in medians if statuses.get(v, "timed") == "timed"]
    rounds = _rounds({v: medians[v] for v in timed})
    variants = {v: {"status": statuses.get(v, "timed"), "call": f"{v} call"} for v in medians}
    for v, status in statuses.items():
        variants[v] = {"status": status, "reason": "not installed" if status == "skipped" else "oracle failed"}
    return {"name": shape_name(shape), "shape": list(shape), "logical_bytes": logical_bytes(shape),
            "set_bytes": logical_bytes(shape), "l2_bytes": H200_L2, "input_sets": 4, "variants": variants,
            "rounds": rounds, "analysis": summarize_shape(rounds, timed, logical_bytes(shape), copy_tbs)}


def _report(copy_tbs=4.25):
    ceiling_us = 2 * 2**30 / (copy_tbs * 1e12) * 1e6
    big = {FUSED: 40.0, FUSED_GRAPH: 40.5, CUDNN: 47.0, TORCH: 58.0, TRITON: 37.0, ROW_COPY: 38.0, COPY: 33.0}
    fast = {FUSED: 31.0, FUSED_GRAPH: 31.2, CUDNN: 86.0, TORCH: 39.0, TRITON: 36.0, ROW_COPY: 30.0, COPY: 32.0}
    small = {FUSED: 3.0, FUSED_GRAPH: 3.1, CUDNN: 7.0, TORCH: 5.0, TRITON: 4.0, COPY: 2.5}
    return {
        "device": {"name": "NVIDIA H200"}, "argv": ["--expect-device", "H200"], "started_utc": "t0",
        "finished_utc": "t1", "git": {"commit": "abc"},
        "protocol": {"rounds": 30, "seed": 1},
        "copy_ceiling": {"bytes_per_copy": 2**30, "event_us": {"median": ceiling_us, "p10": ceiling_us,
                                                                 "p90": ceiling_us, "n": 30},
                         "bandwidth_tbs": copy_tbs},
        "shapes": [
            _shape_entry((4096, 128), small, copy_tbs, statuses={TORCH: "skipped"}),
            _shape_entry((4096, 4096), big, copy_tbs),
            _shape_entry((16384, 1024), fast, copy_tbs, statuses={TRITON: "failed check"}),
        ],
        "launch": {"comparison": launch_comparison(
            [{m: [4.4] for m in LAUNCH_METRICS}] * 3, [{m: [3.6] for m in LAUNCH_METRICS}] * 3),
            "python_blocks": [{}] * 3},
        "graph_completion": {"fused": {"median": 24.0, "p10": 23.0, "p90": 25.0, "n": 200},
                             "empty": {"median": 18.0, "p10": 17.0, "p90": 19.0, "n": 200},
                             "ratio": {"median": 24.0 / 18.0, "p10": 1.2, "p90": 1.4, "n": 200}},
        "notes": ["a note"], "errors": [],
    }


def _by_goal(goals):
    return {g["goal"]: g for g in goals}


def test_summarize_shape_statistics_and_paired_ratios():
    entry = _report()["shapes"][1]
    analysis = entry["analysis"]
    fused = analysis["variants"][FUSED]
    assert fused["event_us"]["median"] == pytest.approx(40.0, rel=0.05)
    assert fused["bandwidth_tbs"] == pytest.approx(logical_bytes((4096, 4096)) / fused["event_us"]["median"] / 1e6)
    assert fused["fraction_of_copy_ceiling"] == pytest.approx(fused["bandwidth_tbs"] / 4.25)
    assert fused["batch_per_invocation_us"]["median"] == pytest.approx(0.95 * 40.0, rel=0.05)
    # the shared per-round drift cancels in the paired ratio
    assert analysis["ratios"]["fused/cudnn"]["median"] == pytest.approx(40.0 / 47.0, rel=0.005)
    assert analysis["ratios"]["copy/fused"]["median"] == pytest.approx(33.0 / 40.0, rel=0.005)
    assert analysis["ratios"]["row_copy/fused"]["median"] == pytest.approx(38.0 / 40.0, rel=0.005)
    assert "fused/copy" not in analysis["ratios"] and "fused/row_copy" not in analysis["ratios"]
    assert analysis["ratios"]["fused/cudnn"]["n"] == 30


def test_goals_pass_miss_and_not_measured():
    goals = evaluate_goals(_report())
    g = _by_goal(goals)
    # 4096x4096: 134 MB / 40 us = 3.36 TB/s = 0.79 of 4.25 -> MISS; 16384x1024 at 31 us: 1.02 -> PASS
    assert g["fused >= 0.90 of copy bandwidth at 4096x4096"]["status"] == MISS
    assert g["fused >= 0.90 of copy bandwidth at 4096x4096"]["value"] == pytest.approx(0.79, abs=0.03)
    assert g["fused >= 0.90 of copy bandwidth at 16384x1024"]["status"] == PASS
    # the row copy says whether the fused geometry could reach the goal at all: 134 MB / 38 us = 0.83 of the
    # ceiling at 4096x4096 (out of reach; the rounds' drift makes the median 38.1 us), 134 MB / 30 us = 1.05
    # at 16384x1024 (within reach)
    assert "(row_copy) 38.1" in g["fused >= 0.90 of copy bandwidth at 4096x4096"]["detail"]
    assert "us = 0.82" in g["fused >= 0.90 of copy bandwidth at 4096x4096"]["detail"]
    assert "out of reach of this launch geometry" in g["fused >= 0.90 of copy bandwidth at 4096x4096"]["detail"]
    assert "within reach of this launch geometry" in g["fused >= 0.90 of copy bandwidth at 16384x1024"]["detail"]
    assert g["fused faster than cudnn at 4096x4096"]["status"] == PASS
    # row copy 38 us vs Triton 37 us: nothing in the fused geometry beats Triton there; vs cuDNN (47 us) it could
    assert "row_copy/triton 1.02" in g["fused faster than triton at 4096x4096"]["detail"]
    assert "out of reach of this launch geometry" in g["fused faster than triton at 4096x4096"]["detail"]
    assert "row_copy/cudnn 0.80" in g["fused faster than cudnn at 4096x4096"]["detail"]
    assert "within reach" in g["fused faster than cudnn at 4096x4096"]["detail"]
    assert "row_copy" not in g["fused faster than cudnn at 4096x128"]["detail"]   # no row copy timed there
    assert g["fused faster than triton at 4096x4096"]["status"] == MISS          # 40 vs 37 us
    assert g["fused faster than torch at 4096x128"]["status"] == NOT_MEASURED    # skipped peer
    assert "not installed" in g["fused faster than torch at 4096x128"]["detail"]
    assert g["fused faster than triton at 16384x1024"]["status"] == NOT_MEASURED  # peer failed its check
    assert "failed check" in g["fused faster than triton at 16384x1024"]["detail"]
    # 4096x1024 was not in this run: every peer goal there says so
    assert g["fused faster than cudnn at 4096x1024"]["status"] == NOT_MEASURED
    assert g["launch: our enqueue per launch / C++ cuLaunchKernel <= 1.3"]["status"] == PASS   # 4.4 / 3.6 = 1.22
    assert g["launch: our enqueue per launch / C++ cuLaunchKernel <= 1.3"]["value"] == pytest.approx(4.4 / 3.6)
    assert g["(1,128) fused graph completion / empty-kernel graph <= 1.2"]["status"] == MISS  # 1.33
    # one goal per copy shape, per peer at the 4 protocol shapes, the launch ratio and the graph ratio; auto's:
    # one per copy shape, per peer at the 4 protocol shapes and the long-row shapes
    # and the API goals: overhead at 1x128 and 4096x4096, torch / Numba at both (NOT MEASURED here)
    assert len(goals) == 2 + 3 * 4 + 1 + 1 + 2 + 3 * (4 + len(LONG_SHAPES)) + 4
    assert {x["status"] for x in goals} <= {PASS, MISS, NOT_MEASURED}


def test_copy_goals_name_the_same_size_copy():
    # 4096x4096: the same-size copy takes 33 us = 0.957 of the ceiling (it could reach 0.90); at 37 us (0.854) even the
    # copy engine is below the goal, and the detail says so; without a timed copy the detail leaves it out
    goal = "fused >= 0.90 of copy bandwidth at 4096x4096"
    assert "the same-size copy 33.0" in _by_goal(evaluate_goals(_report()))[goal]["detail"]
    assert "the copy engine reaches the goal at this size" in _by_goal(evaluate_goals(_report()))[goal]["detail"]
    report = _report()
    big = {FUSED: 40.0, FUSED_GRAPH: 40.5, CUDNN: 47.0, TORCH: 58.0, TRITON: 37.0, ROW_COPY: 38.0, COPY: 37.0}
    report["shapes"][1] = _shape_entry((4096, 4096), big, 4.25)
    detail = _by_goal(evaluate_goals(report))[goal]["detail"]
    assert "= 0.85" in detail and "even the copy engine is below the goal at this size" in detail
    report["shapes"][1] = _shape_entry((4096, 4096), big, 4.25, statuses={COPY: "skipped"})
    assert "same-size copy" not in _by_goal(evaluate_goals(report))[goal]["detail"]


def test_copy_kernels_are_read_against_the_copy_engine_and_named_by_the_auto_copy_goal():
    """Plain copy kernels (--copy-kernels) are copies: no fused or auto ratio against them, their own paired
    ratio against the copy engine, and the auto copy goal's detail names the fastest of them."""
    from bench.perf.peers import AUTO, COPY_KERNEL_PREFIX
    one, two = COPY_KERNEL_PREFIX + "copy_t256_u4", COPY_KERNEL_PREFIX + "copy_t256_u4_b8"
    medians = {FUSED: 40.0, AUTO: 36.0, TRITON: 37.0, COPY: 35.0, one: 34.5, two: 36.5}
    report = _report()
    report["shapes"][1] = _shape_entry((4096, 4096), medians, 4.25)
    ratios = report["shapes"][1]["analysis"]["ratios"]
    assert ratios[f"{one}/copy"]["median"] == pytest.approx(34.5 / 35.0, rel=0.005)
    assert f"auto/{one}" not in ratios and f"fused/{one}" not in ratios and f"{one}/fused" not in ratios
    detail = _by_goal(evaluate_goals(report))["auto >= 0.92 of copy bandwidth at 4096x4096"]["detail"]
    assert f"the fastest of 2 copy kernels ({one}) 34.5" in detail
    assert "no copy design timed reaches the goal at this size" in detail  # 134 MB / 34.5 us = 0.915 of 4.25
    text = render_markdown(report)
    assert f"| {one} | timed |" in text and "kernel/copy 0.98" in text


def test_copy_kernel_names_are_checked():
    from bench.perf.peers import copy_kernels_for
    from numba_softmax.kernels.stream_copy import SWEEP, parse
    assert copy_kernels_for("none") == [] and copy_kernels_for("sweep") == list(SWEEP)
    assert parse("copy_t256_u4_b8") == (256, 4, 8) and parse("copy_t1024_u1") == (1024, 1, 0)
    for bad, message in (("copy_t256", "expected copy_t<T>_u<U>"), ("copy_t96_u4", "power of two"),
                         ("copy_t256_u9", "1 to 8"), ("copy_t1024_u2_b4", "resident threads")):
        with pytest.raises(ValueError, match=message):
            copy_kernels_for(f"copy_t128_u1,{bad}")


def test_goals_without_measurements_say_why():
    report = _report()
    report["copy_ceiling"] = {"error": "RuntimeError: boom"}
    report["launch"] = {"cpp_skipped": "nvcc not found"}
    report["graph_completion"] = {"error": "fused (1,128) graph failed the oracle check"}
    report["shapes"][1]["variants"][FUSED] = {"status": "failed check", "reason": "worst ratio 3.2"}
    g = _by_goal(evaluate_goals(report))
    assert g["fused >= 0.90 of copy bandwidth at 4096x4096"]["status"] == NOT_MEASURED
    assert "boom" in g["fused >= 0.90 of copy bandwidth at 4096x4096"]["detail"]
    assert g["fused faster than cudnn at 4096x4096"]["status"] == NOT_MEASURED
    assert "worst ratio 3.2" in g["fused faster than cudnn at 4096x4096"]["detail"]
    assert g["launch: our enqueue per launch / C++ cuLaunchKernel <= 1.3"]["detail"] == "nvcc not found"
    assert "oracle" in g["(1,128) fused graph completion / empty-kernel graph <= 1.2"]["detail"]
    empty = evaluate_goals({})
    assert all(x["status"] == NOT_MEASURED for x in empty)


def test_render_markdown_goals_last():
    report = _report()
    text = render_markdown(report)
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings[0] == "## 1. Ceilings (this run)" and headings[-1] == "## Goals"
    goals_part = text.split("## Goals", 1)[1]
    assert "| fused faster than triton at 4096x4096 | MISS |" in goals_part
    assert "| fused >= 0.90 of copy bandwidth at 16384x1024 | PASS |" in goals_part
    assert "### 4096x4096" in text and "4.250 TB/s" in text
    assert "| torch | skipped |" in text and "not installed" in text
    assert "a note" in text
    report["errors"] = ["cuDNN unavailable"]
    assert "## Errors" in render_markdown(report)


def test_render_markdown_partial_report():
    text = render_markdown({"device": {"name": "NVIDIA H200"}, "shapes": [], "notes": [], "errors": ["x"]})
    assert text.rstrip().splitlines()[-1].startswith("| (1,128) fused graph completion")


# ------------------------------------------------------------------------------ byte floors

def test_byte_floors():
    a = {r["case"]: r for r in experiment_a_floors()}
    assert a["4096x4096"]["one_pass_bytes"] == 8 * 4096 * 4096
    assert a["4096x4096"]["stages_bytes"] == 24 * 4096 * 4096 + 16 * 4096
    assert a["7x781"]["one_pass_bytes"] == 8 * 7 * 781
    b = {r["case"]: r for r in experiment_b_floors()}
    # balanced: 8192-element rows (8 tiles); ragged: per 8 rows 36864 + 7 x 4096 (36 + 28 tiles): same totals
    for name in ("balanced-2048", "ragged-2048"):
        assert (b[name]["elements"], b[name]["tiles"], b[name]["rows"]) == (2048 * 8192, 2048 * 8, 2048)
        assert b[name]["floor_bytes"] == 12 * 2048 * 8192 + 16 * 2048 * 8 + 16 * 2048 == 201_621_504
    text = floors_markdown(4.25)
    assert "| 4096x4096 | 16,777,216 | 134,217,728 | 31.58 |" in text
    assert "| balanced-2048 | 16,777,216 | 16,384 | 201,621,504 | 47.44 |" in text


def test_performance_md_skeleton():
    path = os.path.join(REPO, "PERFORMANCE.md")
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    for heading in ("## Ceilings and byte floors", "## Where each kernel stands", "## How to reproduce"):
        assert heading in text
    # the floors in PERFORMANCE.md are the ones this module computes
    assert "| 4096x4096 | 16,777,216 | 134,217,728 | 31.58 |" in text
    assert "| ragged-2048 | 16,777,216 | 16,384 | 201,621,504 | 47.44 |" in text
    # every attempt (docs/attempts.md) carries its prediction, a measured outcome (none left pending) and a commit
    with open(os.path.join(REPO, "docs", "attempts.md"), encoding="utf-8") as handle:
        rows = [line for line in handle.read().splitlines() if line.startswith("| ") and not line.startswith("| ---")
                and not line.startswith("| attempt |")]
    assert len(rows) >= 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 4 and all(cells), row
        assert "pending" not in cells[2], row


# ------------------------------------------------------------------------------ command line
