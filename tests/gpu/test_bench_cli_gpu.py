"""The bench CLI end to end on a GPU: a short protocol run writes its files; a wrong device stops it."""

import json
import subprocess
import sys
from pathlib import Path

from numba import cuda


def _device_name():
    name = cuda.get_current_device().name
    return name.decode() if isinstance(name, bytes) else name


def test_short_protocol_run_end_to_end(tmp_path):
    token = _device_name().split()[-1]  # e.g. "H200"
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "1x128,7x781",
                           "--expect-device", token, "--out", str(out), "--no-arrays"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("metadata.json", "cases.jsonl", "timings.jsonl", "graphs.jsonl", "summary.md"):
        assert (out / name).exists(), name
    assert "event_us" in (out / "timings.jsonl").read_text()


def test_wrong_expected_device_stops_the_run(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "1x128",
                           "--expect-device", "NoSuchGPU", "--out", str(tmp_path / "r")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 3 and "expected a NoSuchGPU" in proc.stderr


def test_a_registered_variant_is_timed_in_the_same_rounds(tmp_path):
    """tests/variants/toy_rows.py beside the reference: every round shuffles its labels with fused's."""
    variant_file = Path(__file__).resolve().parents[1] / "variants" / "toy_rows.py"
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "7x781", "--no-cudnn",
                           "--variant-file", str(variant_file), "--variants", "toy-rows", "--out", str(out),
                           "--no-arrays"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for line in (out / "rounds.jsonl").read_text().splitlines():
        for order in json.loads(line)["orders"]:
            assert {"fused/stream", "fused/graph", "toy-rows/stream", "toy-rows/graph"} <= set(order)
    timed = {json.loads(line)["variant"] for line in (out / "timings.jsonl").read_text().splitlines()}
    assert {"fused", "toy-rows"} <= timed


def test_the_width_sweep_times_every_operation_against_its_peers(tmp_path):
    """``--sweep widths --ops`` at a narrow and a misaligned width: every operation's auto and copy are checked
    and timed (exit status 0: no check of ours failed), the peers that are installed beside them."""
    out = tmp_path / "sweep"
    ops = "softmax,log_softmax,softmax_backward,log_softmax_backward,softmax_train"
    proc = subprocess.run([sys.executable, "-m", "bench", "perf", "--sweep", "widths", "--ops", ops, "--widths",
                           "13,781", "--dtypes", "float32,bfloat16", "--rounds", "10", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "sweep.json").read_text())
    warmed = report["auto_builds"]  # compiled ahead in parallel processes, into the cache the run then reads
    assert warmed["builds"] == len(warmed["outcomes"]) > 0, warmed
    assert {(e["op"], e["dtype"], e["width"]) for e in report["problems"]} == {
        (op, dtype, width) for op in ops.split(",") for dtype in ("float32", "bfloat16") for width in (13, 781)}
    for entry in report["problems"]:
        for name in ("auto", "copy"):
            assert entry["variants"][name]["status"] == "timed", (entry["name"], name)
        if entry["op"] == "softmax_train":
            assert entry["variants"]["ops"]["status"] == "timed" and "ops_compiled" in entry["analysis"]["variants"]
    assert "## softmax_train, bfloat16: 256 MiB problems" in (out / "sweep.md").read_text()
