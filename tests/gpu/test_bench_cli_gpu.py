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
