"""``python -m bench perf --sweep widths --ops``: the log_softmax, backward and training-step problems, their bytes,
inputs, checks (with wrong outputs they must reject), goals and report, on the CPU (synthetic samples)."""

import json

import numpy as np
import pytest
from test_perf_sweep import _entry

from bench.perf import main as perf_main
from bench.perf.sweep import Problem, check_rows, fixture_tile, matrix_type, problem_builds, sweep_problems
from bench.perf.sweep_ops import (OPERATIONS, all_finite, check_op_output, copy_bytes, input_tiles,
                                  operation_candidates, parse_ops, ratio_pairs, reference)
from bench.perf.sweep_report import MET, MISSED, evaluate_sweep_goals, render_sweep, sweep_figure, write_outputs
from numba_softmax.cases import SWEEP_OPS, SWEEP_PROBLEM_BYTES, sweep_rows
from numba_softmax.element_types import STORAGE_DTYPES, from_float64, to_float64
from numba_softmax.oracle import oracle_softmax

TYPES = ("float32", "bfloat16")


def test_every_operation_declares_its_bytes_and_arrays():
    assert set(OPERATIONS) == set(SWEEP_OPS)
    for op in OPERATIONS.values():
        assert op.passes == SWEEP_OPS[op.name] >= len(op.inputs) + len(op.outputs) - (op.name == "softmax_train")
        assert 2 * op.slots >= op.passes  # room for the same-size copy in each buffer
        assert op.variants[0] == "auto" and op.variants[-1] == "copy"
    assert OPERATIONS["softmax_train"].passes == 5  # x read, y written, y and dy read, dx written
    assert copy_bytes(OPERATIONS["softmax_backward"], (10, 8), "float32") == 3 * 10 * 8 * 4 // 2


def test_parse_ops_names_each_bad_operation():
    assert parse_ops("softmax_backward, softmax_train") == ["softmax_backward", "softmax_train"]
    with pytest.raises(ValueError, match="'softmax_bwd' is not one of"):
        parse_ops("softmax,softmax_bwd")
    with pytest.raises(ValueError, match="twice"):
        parse_ops("log_softmax,log_softmax")


@pytest.mark.parametrize("op", sorted(SWEEP_OPS))
def test_each_problem_moves_256_mib(op):
    problems = sweep_problems(["float32", "bfloat16"], [1, 127, 4096, 262144], [op])
    for problem in problems:
        assert problem.op == op and problem.name.startswith("" if op == "softmax" else f"{op} ")
    for problem in (p for p in problems if not p.small):
        assert problem.rows == sweep_rows(problem.width, problem.itemsize, SWEEP_OPS[op])
        assert abs(problem.nbytes - SWEEP_PROBLEM_BYTES) <= SWEEP_OPS[op] * problem.width * problem.itemsize


def test_problems_of_several_operations_interleave_per_width():
    problems = sweep_problems(["float32"], [128, 4097], ["softmax_backward", "softmax_train"])
    large = [(p.width, p.op) for p in problems if not p.small]
    assert large == [(128, "softmax_backward"), (128, "softmax_train"), (4097, "softmax_backward"),
                     (4097, "softmax_train")]
    assert {p.op for p in problems if p.small} == {"softmax_backward", "softmax_train"}


def test_each_problem_warms_the_builds_it_launches():
    def kinds(op):
        return [(b[0], b[3]) for b in problem_builds(Problem("float32", 64, 4097, op=op))]
    assert kinds("softmax") == [("forward", "softmax")]
    assert kinds("log_softmax") == [("forward", "log_softmax")]
    assert kinds("log_softmax_backward") == [("backward", "log_softmax")]
    assert kinds("softmax_train") == [("forward", "softmax"), ("backward", "softmax")]


@pytest.mark.parametrize("dtype", TYPES)
def test_the_warm_up_compiles_for_the_type_the_launch_reads_off_an_array(dtype):
    """The parallel warm-up compiles each build for ``numba.typeof`` of a C-contiguous matrix of its storage type
    (what the launch layer keys on), so that the timed launch finds it in the cache."""
    import numba
    assert matrix_type(dtype) == numba.typeof(np.zeros((3, 5), STORAGE_DTYPES[dtype]))
    assert matrix_type(dtype).layout == "C" and matrix_type(dtype).ndim == 2


def _tiles(op_name, dtype, rows=12, width=37):
    problem = Problem(dtype, rows, width, op=op_name)
    tile = fixture_tile(problem)
    return problem, input_tiles(OPERATIONS[op_name], tile, dtype), check_rows(rows, width)


def _rounded(values, dtype):
    return from_float64(values, dtype)


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op_name", ["log_softmax", "softmax_backward", "log_softmax_backward", "softmax_train"])
def test_the_check_passes_the_right_output_and_rejects_wrong_ones(op_name, dtype):
    problem, tiles, sample = _tiles(op_name, dtype)
    op = OPERATIONS[op_name]
    assert set(tiles) == set(op.inputs) and all(t.shape == (12, 37) for t in tiles.values())
    ref, scale = reference(op, tiles, dtype)
    right = _rounded(ref, dtype)
    assert check_op_output(right, ref, scale, sample, dtype)["passed"]
    unwritten = right.copy()
    unwritten[5, 3] = _rounded(np.array(np.nan), dtype)
    record = check_op_output(unwritten, ref, scale, sample, dtype)
    assert not record["passed"] and not record["all_finite"] and record["worst_row"] == 5
    wrong = right.copy()
    wrong[4] = wrong[7]  # another row's values: finite, but not this row's
    assert not check_op_output(wrong, ref, scale, sample, dtype)["passed"]


@pytest.mark.parametrize("dtype", TYPES)
def test_a_backward_without_its_sum_term_is_rejected(dtype):
    """The negative control of the sweep's check: ``dx = y * dy`` (the ``sum(dy * y)`` term dropped)."""
    _, tiles, sample = _tiles("softmax_backward", dtype)
    ref, scale = reference(OPERATIONS["softmax_backward"], tiles, dtype)
    y, dy = (to_float64(tiles[name], dtype) for name in ("y", "dy"))
    record = check_op_output(_rounded(y * dy, dtype), ref, scale, sample, dtype)
    assert not record["passed"] and record["max_tol_ratio"] > 1


def test_a_training_step_is_checked_against_the_backward_of_its_rounded_forward():
    _, tiles, _ = _tiles("softmax_train", "bfloat16")
    ref, _ = reference(OPERATIONS["softmax_train"], tiles, "bfloat16")
    y = to_float64(from_float64(oracle_softmax(to_float64(tiles["x"], "bfloat16")), "bfloat16"), "bfloat16")
    dy = to_float64(tiles["dy"], "bfloat16")
    assert np.allclose(ref, y * (dy - (dy * y).sum(axis=1, keepdims=True)), rtol=0, atol=1e-15)


def test_all_finite_reads_bfloat16_bits():
    assert all_finite(np.array([0x3F80, 0xBF80, 0x7F7F], dtype=np.uint16))
    assert not all_finite(np.array([0x3F80, 0x7FC0], dtype=np.uint16))  # NaN
    assert not all_finite(np.array([0xFF80], dtype=np.uint16))  # -inf
    assert not all_finite(np.array([1.0, np.inf], dtype=np.float32))


# ---------------------------------------------------------------- goals and report

def _op_entry(op, dtype, width, medians, skipped=()):
    entry = _entry(dtype, width, medians, rows=sweep_rows(width, 4 if dtype == "float32" else 2, SWEEP_OPS[op]),
                   skipped=skipped)
    from bench.perf.sweep_ops import extra_ratios
    entry["analysis"]["ratios"].update(extra_ratios(op, entry["rounds"]))
    return dict(entry, op=op, name=f"{op} {entry['name']}")


def _ops_report(train_ops=60.0, compiled=60.5, backward=50.0):
    problems = []
    for dtype in TYPES:
        for width in (128, 4097, 131072):
            liger = ("liger",) if width == 131072 else ()
            train = {"auto": 58.0, "torch": 90.0, "ops": train_ops, "ops_compiled": compiled, "copy": 55.0}
            if not liger:
                train["liger"] = 80.0
            problems.append(_op_entry("softmax_train", dtype, width, train, skipped=liger))
            problems.append(_op_entry("softmax_backward", dtype, width,
                                      {"auto": backward, "torch": 60.0, "copy": 45.0}))
            problems.append(_op_entry("log_softmax", dtype, width, {"auto": 40.0, "torch": 44.0, "copy": 38.0}))
    return {"device": {"name": "NVIDIA H200"}, "argv": ["--sweep", "widths", "--ops", "softmax_train"],
            "protocol": {"dtypes": list(TYPES), "ops": ["log_softmax", "softmax_backward", "softmax_train"],
                         "rounds": 12, "seed": 1, "warmups": 10, "problem_bytes": 2**28},
            "problems": problems, "notes": [], "errors": [], "not_run": []}


def _goals(report):
    return {(g["goal"].split()[0], g["dtype"]): g for g in evaluate_sweep_goals(report)}


def test_operation_goals_met():
    goals = _goals(_ops_report())
    assert {key[0] for key in goals} == {"L1", "L3", "B1", "B2", "B3", "B4"}
    assert ("B2", "bfloat16") not in goals  # the copy goal of a backward is float32's
    assert {g["status"] for g in goals.values()} == {MET}
    assert goals[("B3", "float32")]["value"] == pytest.approx(60.0 / 80.0, rel=1e-2)
    assert "Liger not measured at 1 widths (131072)" in goals[("B3", "float32")]["detail"]
    assert goals[("B4", "bfloat16")]["value"] == pytest.approx(60.5 / 60.0, rel=1e-2)


def test_operation_goals_missed():
    goals = _goals(_ops_report(train_ops=85.0, compiled=90.0, backward=62.0))
    assert goals[("B1", "float32")]["status"] == MISSED and "worst 1.033" in goals[("B1", "float32")]["detail"]
    assert goals[("B2", "float32")]["status"] == MISSED  # 45 / 62 < 0.85
    assert goals[("B3", "bfloat16")]["status"] == MISSED and goals[("B4", "float32")]["status"] == MISSED
    report = _ops_report()
    for entry in report["problems"]:
        if entry["op"] == "softmax_train" and entry["width"] == 4097 and entry["dtype"] == "float32":
            del entry["analysis"]["variants"]["ops"]
    goal = _goals(report)[("B3", "float32")]
    assert goal["status"] == MISSED and "the operator not timed at [4097]" in goal["detail"]


def test_the_report_has_a_table_and_a_panel_per_operation_and_type(tmp_path):
    pytest.importorskip("matplotlib")
    report = _ops_report()
    markdown = write_outputs(str(tmp_path), report, plot=True)
    for title in ("softmax_train, float32: 256 MiB problems", "softmax_backward, bfloat16: 256 MiB problems",
                  "log_softmax, float32: 256 MiB problems"):
        assert f"## {title}" in markdown
    assert "ops/liger" in markdown and "ops_compiled/ops" in markdown and "liger skipped" in markdown
    assert len(sweep_figure(report).axes) == 6
    stored = json.loads((tmp_path / "sweep.json").read_text())
    assert perf_main(["--sweep", "widths", "--report-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "sweep.md").read_text() == render_sweep(dict(stored, goals=evaluate_sweep_goals(stored)))


def test_the_table_columns_follow_the_operation():
    assert ratio_pairs("softmax_train", OPERATIONS["softmax_train"].variants) == [
        ("auto", "torch"), ("auto", "liger"), ("auto", "ops"), ("auto", "ops_compiled"), ("copy", "auto"),
        ("ops", "liger"), ("ops", "torch"), ("ops_compiled", "ops")]


def test_the_command_line_refuses_ops_outside_the_sweep(capsys):
    assert perf_main(["--ops", "softmax_backward"]) == 2
    assert "--ops is an option of --sweep widths" in capsys.readouterr().err
    assert perf_main(["--sweep", "widths", "--ops", "backward"]) == 2
    assert "'backward' is not one of" in capsys.readouterr().err


# ---------------------------------------------------------------- auto's candidate geometries in the sweep

def test_the_sweep_warms_and_reports_the_candidate_geometries():
    builds = problem_builds(Problem("float32", 4096, 8), "table")
    assert [b[1] for b in builds] == ["rows_l2_q1", "rows_l1_q2", "rows_l4_q1", "groups_l1_q1"]  # then CANDIDATES[8]
    assert problem_builds(Problem("float32", 4096, 8), "none") == builds[:1]
    backward = problem_builds(Problem("float32", 64, 8, op="log_softmax_backward"), "table")
    assert backward == tuple(("backward", g, "float32", "log_softmax") for g in ("rows_l2_q1", "rows_l1_q2",
                                                                                "rows_l4_q1", "groups_l1_q1"))
    assert [b[:2] for b in problem_builds(Problem("float32", 64, 8, op="softmax_train"), "table")] == [
        ("forward", "rows_l2_q1"), ("backward", "rows_l2_q1")]  # a training step times no candidate
    # The log_softmax and the backward have no cluster or shared-memory builds: those candidates are the softmax's.
    wide = [b[1] for b in problem_builds(Problem("float32", 64, 131072, op="log_softmax"), "table")]
    assert wide == ["long_l1024_q4", "long_l512_q4", "long_l1024_q2"]
    # At 4 columns, on the sweep's C-contiguous arrays, auto runs a packed geometry (a bfloat16 forward two quads a
    # thread, the others one): each operation times the others beside it.
    for op in ("softmax", "log_softmax", "softmax_backward"):
        assert [b[1] for b in problem_builds(Problem("float32", 64, 4, op=op), "table")] == [
            "packed_l1_q1", "narrow_l1_q1", "rows_l1_q1", "packed_l1_q2"]
    for op, own, other in (("softmax", "packed_l1_q2", "packed_l1_q1"), ("softmax_backward", "packed_l1_q1",
                                                                          "packed_l1_q2")):
        assert [b[1] for b in problem_builds(Problem("bfloat16", 64, 4, op=op), "table")] == [
            own, "narrow_l1_q1", "rows_l1_q1", other]
    # 8 quads a thread: more than a backward holds; rows_l256_q4 is its own geometry at 4096 columns.
    assert operation_candidates("softmax_backward", 4096, "float32",
                                ["rows_l128_q8", "rows_l256_q4", "rows_l512_q2"]) == ["rows_l512_q2"]
    entry = _entry("float32", 8, {"auto": 150.0, "auto:rows_l1_q2": 100.0, "copy": 90.0})
    entry["variants"]["auto"]["geometry"] = "rows_l4_q1"
    report = {"device": {"name": "NVIDIA H200"}, "protocol": {"dtypes": ["float32"], "rounds": 12},
              "problems": [entry]}
    markdown = render_sweep(report)
    row = next(line for line in markdown.splitlines() if "| rows_l1_q2 |" in line)
    assert row.startswith("| softmax | float32 | 8 |") and "rows_l4_q1" in row and "| 1.500 [" in row


def test_the_command_line_checks_the_candidate_names(capsys):
    assert perf_main(["--sweep", "widths", "--auto-geometries", "rows_l3_q1", "--report-only", "--out", "x"]) == 2
    assert "rows_l3_q1" in capsys.readouterr().err


def test_torch_peers_take_the_first_out_form_that_runs_else_allocate():
    """The torch peers' forms on CPU tensors (the logic is the device's): a failing out= form is recorded and
    skipped; with none left, the allocating form runs and set 0's result is read back."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    from bench.perf.peers import torch_out_variant
    sampler = SimpleNamespace(stream=SimpleNamespace(synchronize=lambda: None))
    xs = [torch.randn(3, 5, dtype=torch.float64) for _ in range(2)]
    ys = [torch.empty(3, 5, dtype=torch.float64) for _ in range(2)]

    def broken(x, y):
        raise RuntimeError("no such overload")
    forms = [("broken(x, out=y)", broken), ("torch.softmax(x, 1, out=y)", lambda x, y: torch.softmax(x, 1, out=y)),
             ("torch.softmax(x, 1)", lambda x: torch.softmax(x, 1))]
    variant = torch_out_variant("torch", sampler, forms, lambda i: (xs[i], ys[i]), 2)
    assert variant.call.startswith("torch.softmax(x, 1, out=y)") and variant.read_output is None
    assert variant.extra["out_form_failures"] == ["broken(x, out=y): RuntimeError: no such overload"]
    variant.submits[1](None)
    assert torch.allclose(ys[1], torch.softmax(xs[1], 1))
    allocating = torch_out_variant("torch", sampler, [forms[0], forms[2]], lambda i: (xs[i], ys[i]), 2)
    assert "allocating" in allocating.call
    allocating.submits[0](None)
    assert np.allclose(allocating.read_output(), torch.softmax(xs[0], 1).numpy())
