"""Registered variants through ``python -m bench --variants`` in the simulator: a variant from a file in the
tests folder runs beside the experiment's own variants (its reference among them), is validated on every
fixture, is compared bit for bit where the protocol requires it, and is among what the timed rounds shuffle;
a wrong one stops the run, named (docs/extending.md)."""

import json
import os

from backends import run_bench_in_simulator

from bench import runner, variants

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANT_FILES = os.path.join(ROOT, "tests", "variants")
FIXTURES = {"constant", "dominant", "random", "offset"}


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _file(name):
    return os.path.join(VARIANT_FILES, name)


def test_a_kernel_variant_runs_beside_the_reference(tmp_path):
    proc, out = run_bench_in_simulator(["--experiment", "A", "--shapes", "3x40", "--variant-file",
                                        _file("toy_rows.py"), "--variants", "toy-rows"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = _records(out / "cases.jsonl")
    assert all(r["passed"] for r in checked)
    for name in ("fused", "stages", "toy-rows"):
        assert {r["fixture"] for r in checked if r["variant"] == name} == FIXTURES, name
    # toy-rows folds each row in another order: the oracle checks it, no bitwise group holds it
    assert all("toy-rows" not in (r["reference"], r["variant"]) for r in _records(out / "bitwise.jsonl"))
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["variants"]["toy-rows"]["source"] == _file("toy_rows.py")
    assert metadata["options"]["variants"] == "toy-rows"
    assert "| toy-rows " in (out / "summary.md").read_text()


def test_a_wrong_kernel_variant_stops_the_run_named(tmp_path):
    proc, out = run_bench_in_simulator(["--experiment", "A", "--shapes", "3x40", "--variant-file",
                                        _file("toy_wrong.py"), "--variants", "toy-drops-last-column"], tmp_path)
    assert proc.returncode == 1
    assert "REQUIRED CHECK FAILED" in proc.stderr and "toy-drops-last-column/stream" in proc.stderr
    failed = [r for r in _records(out / "cases.jsonl") if not r["passed"]]
    assert [r["variant"] for r in failed] == ["toy-drops-last-column"]
    assert "toy-drops-last-column" in json.loads((out / "metadata.json").read_text())["stopped"]


def test_an_unknown_variant_lists_the_available_ones_and_creates_nothing(tmp_path):
    proc, out = run_bench_in_simulator(["--experiment", "A", "--shapes", "3x40", "--variant-file",
                                        _file("toy_rows.py"), "--variants", "toy-row"], tmp_path)
    assert proc.returncode == 2
    assert "unknown Experiment A variant(s) toy-row; available: toy-rows" in proc.stderr
    assert not out.exists()


def test_a_scheduler_variant_matches_the_schedulers_bit_for_bit(tmp_path):
    proc, out = run_bench_in_simulator(["--experiment", "B", "--variant-file", _file("toy_scheduler.py"),
                                        "--variants", "toy-dag-half-workers"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    checked = [r for r in _records(out / "cases.jsonl") if r["variant"] == "toy-dag-half-workers"]
    assert {r["fixture"] for r in checked} == FIXTURES and all(r["passed"] for r in checked)
    compared = [r for r in _records(out / "bitwise.jsonl") if r["variant"] == "toy-dag-half-workers"]
    assert {r["fixture"] for r in compared} == FIXTURES
    assert all(r["reference"] == "separate" and r["equal"] and "row_sum" in r["compared"] for r in compared)


def test_the_timed_rounds_hold_the_variant_beside_the_reference():
    """What the GPU's shuffled rounds shuffle (bench/runner.py time_case: one label per submitter)."""
    from bench.experiment_a import MatrixCase
    from numba_softmax import backend

    added = variants.select("A", ["toy-rows"], [_file("toy_rows.py")])
    case = MatrixCase((3, 40), backend.stream(), gpu=False, added=added)
    assert {"fused", "toy-rows"} <= {name for name, _mode in runner._submitters(case, {})}
