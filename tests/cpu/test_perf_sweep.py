"""``python -m bench perf --sweep widths``: the widths, the rows rule, the checks, the goals, the report and the
command line, on the CPU (synthetic samples; the GPU run is the tool's)."""

import json

import numpy as np
import pytest

from bench.perf import main as perf_main
from bench.perf.peers import summarize_shape
from bench.perf.sweep import (CHECK_ELEMENTS, Problem, check_output, check_rows, estimate_seconds, fill_repeated,
                              fixture_tile, parse_dtypes, parse_widths, sweep_problems)
from bench.perf.sweep_report import (MET, MISSED, NOT_MEASURED, evaluate_sweep_goals, render_sweep, sweep_figure,
                                     write_outputs)
from numba_softmax.cases import (SWEEP_DTYPES, SWEEP_MAX_WIDTH, SWEEP_PROBLEM_BYTES, SWEEP_SMALL_WIDTHS, SWEEP_WIDTHS,
                                 nearest_multiple_of_8, sweep_rows)
from numba_softmax.element_types import to_bfloat16
from numba_softmax.oracle import oracle_softmax

VOCABULARIES = (32000, 32768, 50257, 128256, 151936, 152064, 256000)


def _is_prime(n):
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


def test_the_widths_cover_residues_primes_powers_neighbours_and_vocabularies():
    widths = SWEEP_WIDTHS
    assert len(widths) >= 40 and list(widths) == sorted(set(widths))
    assert widths[0] == 1 and widths[-1] == SWEEP_MAX_WIDTH == 262144
    assert {w % 8 for w in widths} == set(range(8))
    assert {w % 8 for w in widths if w >= 4096} == set(range(8))  # residues at a wide row too
    assert len([w for w in widths if _is_prime(w)]) >= 8
    assert {1 << k for k in (0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18)} <= set(widths)
    for k in (7, 10, 14, 15, 16):
        assert {(1 << k) - 1, (1 << k) + 1} <= set(widths)
    assert set(VOCABULARIES) <= set(widths)
    assert set(SWEEP_SMALL_WIDTHS) <= set(widths)


def test_every_misaligned_width_has_its_nearest_multiple_of_8():
    assert [nearest_multiple_of_8(w) for w in (64, 97, 100, 101, 4097, 4100, 4101, 4103, 50257)] == \
        [64, 96, 96, 104, 4096, 4096, 4104, 4104, 50256]
    lonely = [w for w in SWEEP_WIDTHS if w >= 64 and w % 8 and nearest_multiple_of_8(w) not in SWEEP_WIDTHS]
    assert lonely == []


@pytest.mark.parametrize("itemsize", [4, 2])
def test_the_rows_rule_moves_256_mib(itemsize):
    for width in SWEEP_WIDTHS:
        rows = sweep_rows(width, itemsize)
        assert rows >= 1
        moved = 2 * rows * width * itemsize
        assert abs(moved - SWEEP_PROBLEM_BYTES) <= width * itemsize or rows == 1, width
    assert sweep_rows(1024, 4) * 1024 * 4 * 2 == 256 * 2**20
    assert sweep_rows(262144, 2) == 256


def test_problems_run_small_first_then_widths_ascending_with_the_types_interleaved():
    problems = sweep_problems(["float32", "bfloat16"])
    small = [p for p in problems if p.small]
    large = [p for p in problems if not p.small]
    assert problems[:len(small)] == small
    assert len(large) == 2 * len(SWEEP_WIDTHS) and {p.rows for p in small} == {1, 8, 64}
    assert [p.width for p in large[::2]] == list(SWEEP_WIDTHS)
    assert [p.dtype for p in large[:4]] == ["float32", "bfloat16"] * 2
    assert all(p.nbytes == 2 * p.rows * p.width * p.itemsize for p in problems)
    subset = sweep_problems(["bfloat16"], [4097, 128])
    assert [p.name for p in subset] == ["bfloat16 1x128", "bfloat16 8x128", "bfloat16 64x128",
                                        f"bfloat16 {sweep_rows(128, 2)}x128", f"bfloat16 {sweep_rows(4097, 2)}x4097"]
    seconds = estimate_seconds(sweep_problems(list(SWEEP_DTYPES)), rounds=20)
    assert 60 < seconds < 420  # the whole sweep within 7 minutes on the model


def test_parse_widths_and_dtypes():
    assert parse_widths("1, 4097,262144") == [1, 4097, 262144]
    assert parse_dtypes("bfloat16") == ["bfloat16"]
    for text, message in (("0", "outside"), ("262145", "outside"), ("12,x", "not an integer"), ("5,5", "twice")):
        with pytest.raises(ValueError, match=message):
            parse_widths(text)
    for text, message in (("float16", "not one of"), ("float32,float32", "twice")):
        with pytest.raises(ValueError, match=message):
            parse_dtypes(text)


@pytest.mark.parametrize("argv, message", [
    (["--sweep", "widths", "--widths", "0"], "outside 1..262144"),
    (["--sweep", "widths", "--dtypes", "float64"], "not one of"),
    (["--sweep", "widths", "--rounds", "9"], "at least 10 rounds"),
    (["--sweep", "widths", "--shapes", "4096x128"], "--shapes is not an option"),
    (["--sweep", "widths", "--budget-s", "0"], "must be positive"),
    (["--sweep", "widths", "--report-only"], "needs --out"),
    (["--widths", "128"], "an option of --sweep widths"),
    (["--dtypes", "float32"], "an option of --sweep widths"),
])
def test_bad_sweep_options_stop_with_status_2(argv, message, capsys):
    assert perf_main(argv) == 2
    assert message in capsys.readouterr().err


def test_an_unknown_sweep_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        perf_main(["--sweep", "heights"])
    assert exc.value.code == 2


def test_check_rows_sample_the_first_last_and_spread_rows():
    assert list(check_rows(5, 1024)) == [0, 1, 2, 3, 4]
    rows = check_rows(sweep_rows(1, 4), 1)
    assert len(rows) == CHECK_ELEMENTS and rows[0] == 0 and rows[-1] == sweep_rows(1, 4) - 1
    assert list(check_rows(256, 262144)) == [0, 85, 170, 255]


def test_fill_repeated_copies_the_tile_down_the_rows():
    memory = bytearray(64 + 11 * 3)
    tile_at, dst, row_bytes = 0, 64, 3
    memory[0:9] = bytes(range(1, 10))  # a tile of 3 rows of 3 bytes

    def memcpy(to, source, nbytes):
        memory[to:to + nbytes] = memory[source:source + nbytes]
    fill_repeated(memcpy, dst, 11, row_bytes, tile_at, 3)
    rows = [bytes(memory[dst + i * 3: dst + i * 3 + 3]) for i in range(11)]
    assert rows == [bytes(memory[(i % 3) * 3:(i % 3) * 3 + 3]) for i in range(11)]
    fill_repeated(memcpy, dst, 2, row_bytes, tile_at, 3)  # fewer rows than the tile


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_check_output_passes_the_softmax_and_names_each_failure(dtype):
    problem = Problem(dtype, 40, 8)
    tile = fixture_tile(problem)
    assert len(tile) == 40
    x = tile[np.arange(problem.rows) % len(tile)]
    values = x.astype(np.float32) if dtype == "float32" else (x.astype(np.uint32) << 16).view(np.float32)
    ref = oracle_softmax(values)
    out = ref.astype(np.float32) if dtype == "float32" else to_bfloat16(ref)
    sample = check_rows(problem.rows, problem.width)
    types = (dtype, dtype)
    assert check_output(out, tile, sample, types)["passed"]
    unwritten = out.copy()
    unwritten[7, 3] = np.float32(np.nan) if dtype == "float32" else np.uint16(0x7FC0)
    record = check_output(unwritten, tile, sample, types)
    assert not record["passed"] and not record["all_written_finite_nonneg"]
    wrong = out.copy()
    wrong[5] = wrong[6]  # another row's softmax: finite, but not this row's
    assert not check_output(wrong, tile, sample, types)["passed"]
    assert check_output(x.copy(), tile, sample, types, copy=True)["passed"]
    assert not check_output(out, tile, sample, types, copy=True)["passed"]


# ---------------------------------------------------------------- goals and report on synthetic samples

def _entry(dtype, width, medians, rows=None, small=False, skipped=()):
    """A problem entry with 12 rounds of constant samples (us per variant) and its analysis."""
    rows = rows or sweep_rows(width, 4 if dtype == "float32" else 2)
    names = list(medians)
    rounds = [{"round": r, "order": names, "samples": {n: {"event_us": us * (1 + 0.001 * (r % 3)),
                                                           "starved": False} for n, us in medians.items()}}
              for r in range(12)]
    nbytes = 2 * rows * width * (4 if dtype == "float32" else 2)
    variants = {n: {"status": "timed", "call": f"{n} call"} for n in names}
    variants.update({n: {"status": "skipped", "reason": f"{n} does not run at {width}"} for n in skipped})
    return {"name": f"{dtype} {rows}x{width}", "dtype": dtype, "width": width, "rows": rows, "small": small,
            "logical_bytes": nbytes, "variants": variants, "rounds": rounds,
            "analysis": summarize_shape(rounds, names, nbytes)}


def _report(auto_at_4097=66.0, torch=70.0):
    problems = []
    for dtype in ("float32", "bfloat16"):
        for width in (128, 4096, 4097, 262144):
            auto = auto_at_4097 if width == 4097 else 64.0
            medians = {"auto": auto, "torch": torch, "copy": 60.0, "liger": 80.0}
            skipped = ("triton",) if width == 262144 else ()
            if width != 262144:
                medians["triton"] = 65.0
            problems.append(_entry(dtype, width, medians, skipped=skipped))
        problems.append(_entry(dtype, 128, {"auto": 3.0, "torch": 5.0, "copy": 2.0}, rows=8, small=True))
    return {"device": {"name": "NVIDIA H200"}, "argv": ["--sweep", "widths"], "protocol": {
        "dtypes": ["float32", "bfloat16"], "rounds": 12, "seed": 1, "warmups": 10, "problem_bytes": 2**28},
        "problems": problems, "notes": ["a note"], "errors": [], "not_run": []}


def _goals(report):
    return {(g["goal"].split()[0] + (" worst" if "worst" in g["goal"] else ""), g["dtype"]): g
            for g in evaluate_sweep_goals(report)}


def test_goals_met_on_a_fast_auto():
    goals = _goals(_report(auto_at_4097=64.5))
    assert {g["status"] for g in goals.values()} == {MET}
    g4 = goals[("G4", "float32")]
    assert g4["value"] == pytest.approx(64.5 / 4097 / (64.0 / 4096), rel=1e-3) and "4097" in g4["detail"]
    assert goals[("G2", "float32")]["value"] == pytest.approx(64.0 / 65.0, rel=1e-2)


def test_goals_missed_name_the_worst_width():
    goals = _goals(_report(auto_at_4097=75.0, torch=70.0))
    g1 = goals[("G1", "bfloat16")]
    assert g1["status"] == MISSED and "worst 1.071 at width 4097" in g1["detail"]
    assert goals[("G2 worst", "float32")]["status"] == MISSED  # 75 / 65 > 1.10
    assert goals[("G3", "float32")]["status"] == MISSED and "4097" in goals[("G3", "float32")]["detail"]
    assert goals[("G4", "float32")]["status"] == MISSED and "against 4096" in goals[("G4", "float32")]["detail"]


def test_goals_not_measured_without_the_peer():
    report = _report()
    for entry in report["problems"]:
        entry["analysis"]["ratios"] = {k: v for k, v in entry["analysis"]["ratios"].items() if "triton" not in k}
    goals = _goals(report)
    assert goals[("G2", "float32")]["status"] == NOT_MEASURED
    assert "not measured at 4 widths" in goals[("G2", "float32")]["detail"]


def test_report_and_plot_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    report = _report(auto_at_4097=75.0)
    markdown = write_outputs(str(tmp_path), report, plot=True)
    assert markdown == (tmp_path / "sweep.md").read_text()
    assert "## Goals" in markdown and "MISSED" in markdown and "## float32: 256 MiB problems" in markdown
    assert "## bfloat16: small problems (latency)" in markdown and "triton skipped: triton does not run" in markdown
    assert "| 4097 |" in markdown and "auto/torch" in markdown
    stored = json.loads((tmp_path / "sweep.json").read_text())
    assert len(stored["problems"]) == 10 and stored["goals"]
    png = tmp_path / "sweep.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size < 300_000
    assert len(sweep_figure(report).axes) == 2
    (tmp_path / "sweep.md").unlink()
    assert perf_main(["--sweep", "widths", "--report-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "sweep.md").read_text() == render_sweep(dict(stored, goals=evaluate_sweep_goals(stored)))


def test_the_results_index_reads_a_sweep_folder(tmp_path):
    from bench.results_index import render_index
    folder = tmp_path / "results" / "perf" / "sweep"
    folder.mkdir(parents=True)
    (folder / "metadata.json").write_text(json.dumps({
        "kind": "perf_sweep", "device": "NVIDIA H200", "commit": "abc1234", "date": "2026-12-06",
        "command": "python -m bench perf --sweep widths --expect-device H200 --out DIR"}))
    write_outputs(str(folder), _report(auto_at_4097=75.0), plot=False)
    row = next(line for line in render_index(tmp_path / "results").splitlines() if "perf/sweep/" in line)
    assert "| perf_sweep |" in row and "width sweep goals: 3 MET, 7 MISSED, 0 NOT MEASURED" in row


def test_without_matplotlib_the_report_says_the_plot_was_not_drawn(tmp_path, monkeypatch):
    import bench.plots
    monkeypatch.setattr(bench.plots, "matplotlib_available", lambda: "matplotlib is not installed")
    markdown = write_outputs(str(tmp_path), _report(), plot=True)
    assert "## Goals" in markdown and "sweep.png was not drawn" in markdown and not (tmp_path / "sweep.png").exists()
    assert "plot_failure" in json.loads((tmp_path / "sweep.json").read_text())
