"""The bench CLI end to end without a GPU: it must fall back to the simulator, say so
loudly, validate correctness, write the same files without timings, and exit 0."""

import json

import pytest
from backends import run_bench_in_simulator


@pytest.mark.parametrize("args", [["--experiment", "A", "--shapes", "1x128"],
                                  ["--experiment", "B", "--trace"]], ids=["A", "B"])
def test_cli_in_simulator_mode(args, tmp_path):
    proc, out = run_bench_in_simulator(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "NO CUDA GPU FOUND: running in the Numba CUDA SIMULATOR" in proc.stderr
    for name in ("metadata.json", "cases.jsonl", "bitwise.jsonl", "summary.md"):
        assert (out / name).exists(), name
    assert not (out / "timings.jsonl").exists()
    records = [json.loads(line) for line in (out / "cases.jsonl").read_text().splitlines()]
    assert records and all(r["passed"] for r in records)
    assert {r["fixture"] for r in records} == {"constant", "dominant", "random", "offset"}
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["backend"] == "simulator" and metadata["timing_disabled_reason"]
    summary = (out / "summary.md").read_text()
    assert "NO TIMINGS WERE TAKEN" in summary and "by design" in summary and "MISSING FILE" not in summary
    # the terminal ends with the verdict and the correctness count
    assert proc.stdout.splitlines()[-2].startswith(f"Correctness: **{len(records)} passed, 0 failed**")
    if "--trace" in args:
        traces = [json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines()]
        assert {t["scheduler"] for t in traces} == {"separate", "phased", "dag"}
        assert all(t["passed"] and t["output_passed"] for t in traces)
        assert "## Task traces" in summary and "### Where the time goes (trace builds)" in summary
        assert all(set(t["breakdown"]["duration_us"]) == {"A", "B", "C"} for t in traces)
        for t in traces:
            assert (out / t["csv"]).exists() and (out / t["perfetto"]).exists()


def test_cli_refuses_to_overwrite_a_run_folder(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "keep.txt").write_text("earlier results")
    proc, out = run_bench_in_simulator(["--experiment", "A", "--shapes", "1x128"], tmp_path)
    assert proc.returncode != 0 and "not empty" in proc.stderr
    assert (out / "keep.txt").read_text() == "earlier results"
