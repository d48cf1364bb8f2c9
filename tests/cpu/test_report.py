"""summary.md content for tiny synthetic runs with hand-computed numbers."""

import json
from pathlib import Path

import pytest

from bench.artifacts import RunFolder
from bench.protocol import Measurement
from bench.report import write_summary

CASE = "4096x1024"
BYTES = 2 * 4096 * 1024 * 4  # logical input + output bytes, float32
METADATA = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132,
            "ratio_reference": {"A": "fused"}}
PASSED = {"experiment": "A", "variant": "fused", "mode": "stream", "case": CASE, "fixture": "pre0",
          "max_abs_err": 1e-9, "max_tol_ratio": 0.01, "max_row_sum_err": 1e-7,
          "finite_nonneg": True, "passed": True}
FAILED = {"experiment": "A", "variant": "separate", "mode": "graph", "case": "7x781", "fixture": "pre1",
          "max_abs_err": 1e-3, "max_tol_ratio": 50.0, "max_row_sum_err": 1e-7,
          "finite_nonneg": True, "passed": False, "note": "mask"}


def _timings():
    """(variant, mode, metric, per, values by round 0..2)."""
    table = [
        ("fused", "stream", "event_us", "invocation", [10, 12, 8]),
        ("separate", "stream", "event_us", "invocation", [40, 24, 36]),
        ("fused", "stream", "host_completion_us", "invocation", [20, 22, 18]),
        ("separate", "stream", "host_completion_us", "invocation", [50, 44, 60]),
        ("fused", "stream", "batch_enqueue_us", "batch", [64, 64, 64]),
        ("fused", "graph", "event_us", "invocation", [9, 9, 9]),
    ]
    records = []
    for variant, mode, metric, per, values in table:
        for rnd, value in enumerate(values):
            records.append(Measurement("A", CASE, variant, mode, "bench0", rnd, metric, value, per,
                                       bytes_moved=BYTES).to_record())
    for rnd, value in enumerate([5.0, 7.0]):
        records.append(Measurement("A", CASE, "none", "stream", "bench0", rnd,
                                   "sync_baseline_us", value, "invocation").to_record())
    return records


def _make_run(path, timings, cases=(FAILED, PASSED), metadata=METADATA):
    run = RunFolder(path)
    run.write_json("metadata.json", metadata)
    for record in cases:
        run.append_jsonl("cases.jsonl", record)
    for record in timings:
        run.append_jsonl("timings.jsonl", record)
    return run


def _rows(markdown):
    """Cells of every markdown table data/header row (separator rows skipped)."""
    rows = []
    for line in markdown.splitlines():
        if line.startswith("|") and not set(line) <= set("|-: "):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


@pytest.fixture
def summary(tmp_path):
    run = _make_run(tmp_path / "run", _timings(), cases=(PASSED, FAILED))
    return write_summary(run).read_text()


def test_case_table_has_hand_computed_stats_and_logical_gbps(summary):
    rows = _rows(summary)
    # fused events 8, 10, 12 -> median 10, p10 8.4, p90 11.6; 33554432 B / 10 us = 3355.4 GB/s
    # batch_enqueue 64 us per batch of 32 -> 2 us per invocation
    assert ["fused", "stream", "bench0", "20.000 / 18.400 / 21.600 (n=3)", "2.000 / 2.000 / 2.000 (n=3)",
            "-", "10.000 / 8.400 / 11.600 (n=3)", "3355.4"] in rows
    assert ["separate", "stream", "bench0", "50.000 / 45.200 / 58.000 (n=3)", "-", "-",
            "36.000 / 26.400 / 39.200 (n=3)", "932.1"] in rows
    assert ["fused", "graph", "bench0", "-", "-", "-", "9.000 / 9.000 / 9.000 (n=3)", "3728.3"] in rows
    assert "GB/s (logical bytes / event time)" in summary
    assert f"Logical bytes per invocation: {BYTES}." in summary


def test_ratio_table_uses_paired_rounds_not_ratio_of_medians(summary):
    rows = _rows(summary)
    # event ratios separate/fused per round: 4, 2, 4.5 -> median 4 (ratio of medians would be 3.6)
    assert ["stream", "separate", "fused", "event_us", "3", "4.0000", "2.4000", "4.4000"] in rows
    # host ratios: 2.5, 2, 3.3333 -> median 2.5, p10 2.1, p90 2.5 + 0.8 * 0.8333
    assert ["stream", "separate", "fused", "host_completion_us", "3", "2.5000", "2.1000", "3.1667"] in rows
    assert ["graph", "separate", "fused", "event_us", "0", "-", "-", "-"] in rows
    assert "3.6000" not in summary


def test_baseline_is_reported_and_not_subtracted(summary):
    assert ["A", CASE, "none", "stream", "6.000 / 5.200 / 6.800 (n=2)"] in _rows(summary)
    assert "**not subtracted**" in summary


def test_correctness_counts_and_failures_first(summary):
    assert "**1 passed, 1 failed** of 2 correctness records." in summary
    status_rows = [r for r in _rows(summary) if r[0] in ("pass", "FAIL")]
    assert [r[0] for r in status_rows] == ["FAIL", "pass"]
    assert status_rows[0][:4] == ["FAIL", "A", "7x781", "separate"]
    assert status_rows[0][-1] == "note=mask"
    assert "NO TIMINGS" not in summary
    assert "not admissible" not in summary  # the failed case (7x781) has no timings


def test_metadata_is_listed(summary):
    rows = _rows(summary)
    assert ["device_name", "NVIDIA H100 80GB HBM3"] in rows
    assert ["sm_count", "132"] in rows


def test_summary_is_deterministic_across_record_order(tmp_path, summary):
    reversed_run = _make_run(tmp_path / "reversed", list(reversed(_timings())), cases=(PASSED, FAILED))
    assert write_summary(reversed_run).read_text() == summary
    assert write_summary(reversed_run).read_text() == summary


def test_failed_case_timings_are_flagged(tmp_path):
    failed_timed = {**FAILED, "case": CASE}
    run = _make_run(tmp_path / "run", _timings(), cases=(failed_timed,))
    text = write_summary(run).read_text()
    assert "FAILED correctness records; its timings are not admissible" in text


def test_missing_ratio_reference_is_stated(tmp_path):
    run = _make_run(tmp_path / "run", _timings(), metadata={"device_name": "x"})
    text = write_summary(run).read_text()
    assert "No ratio reference for experiment A" in text
    assert "4.0000" not in text


def test_no_timings_notice_is_loud_and_gives_the_reason(tmp_path):
    metadata = {"timing_disabled_reason": "CUDA simulator run: correctness only"}
    run = _make_run(tmp_path / "run", [], cases=(PASSED,), metadata=metadata)
    text = write_summary(run).read_text()
    assert "## NO TIMINGS WERE TAKEN" in text
    assert "> Reason: CUDA simulator run: correctness only" in text
    assert "MISSING FILE: timings.jsonl" in text
    assert "## Timings" not in text
    assert "**1 passed, 0 failed**" in text


def test_no_timings_without_a_reason_says_so(tmp_path):
    run = _make_run(tmp_path / "run", [], cases=(PASSED,), metadata={"device_name": "sim"})
    (tmp_path / "run" / "timings.jsonl").write_text("")  # present but empty
    text = write_summary(run).read_text()
    assert "## NO TIMINGS WERE TAKEN" in text
    assert "NOT RECORDED" in text
    assert "MISSING FILE" not in text


def test_best_mode_against_the_byte_floor(summary):
    # fused at 4096x1024: stream medians 10, graph 9 -> graph is the best mode; its floor is the
    # one-pass 8N = 33,554,432 bytes = 7.895 us at 4.25 TB/s -> 9 / 7.895 = 1.14x. "separate" is no
    # Experiment A variant: it has no floor and no row.
    text = summary.split("## Against the byte floor", 1)[1].split("\n## ", 1)[0]
    rows = [r for r in _rows(text) if r[0] == "A"]
    assert rows == [["A", CASE, "fused", "33,554,432", "7.9", "graph", "9.00", "1.14x", "-", "-"]]


def test_experiment_b_schedulers_get_the_one_read_floor_too():
    from bench.floors import H200_COPY_TBS, experiment_b_floors, one_read_floor_bytes, us_at, variant_floor_bytes
    floors = {r["case"]: r for r in experiment_b_floors()}
    case = floors["balanced-2048"]  # 2048 rows of 8192: N = 16M, T = 16384 tiles
    n, tiles, rows = 2048 * 8192, 16384, 2048
    assert one_read_floor_bytes("B", "balanced-2048") == 8 * n + 16 * tiles + 16 * rows == case["one_read_bytes"]
    assert variant_floor_bytes("B", "balanced-2048", "dag") == 12 * n + 16 * tiles + 16 * rows
    assert round(us_at(case["one_read_bytes"], H200_COPY_TBS), 1) == 31.7
    assert variant_floor_bytes("B", "balanced-2048", "dag-floor") is None  # an empty-work floor moves nothing
    assert one_read_floor_bytes("A", "4096x1024") is None


def test_experiment_b_schedulers_share_the_a_b_c_floor(tmp_path):
    records = []
    for variant, value in (("dag", 100.0), ("separate", 60.0), ("phased", 80.0)):
        for mode, extra in (("stream", 5.0), ("graph", 0.0)):
            records.append(Measurement("B", "balanced-2048", variant, mode, "random", 0, "event_us",
                                       value + extra, "invocation").to_record())
    text = write_summary(_make_run(tmp_path / "b", records, cases=()), plots=False).read_text()
    rows = [r for r in _rows(text.split("## Against the byte floor", 1)[1]) if r[0] == "B"]
    # 12N + 16T + 16R with N = 2048 x 8192, T = 16384 tiles, R = 2048 rows; 47.44 us at 4.25 TB/s
    assert [r[2] for r in rows] == ["separate", "phased", "dag"]
    assert {r[3] for r in rows} == {"201,621,504"} and {r[5] for r in rows} == {"graph"}
    assert [r[7] for r in rows] == [f"{v / 47.4403:.2f}x" for v in (60.0, 80.0, 100.0)]


# ---------------------------------------------------------------- the answer first

def test_verdict_leads_with_medians_paired_ratios_and_the_fastest(summary):
    verdict = summary.split("## Verdict, Experiment A", 1)[1].split("\n## ", 1)[0]
    assert summary.index("## Verdict") < summary.index("## Correctness") < summary.index("## Timings")
    rows = _rows(verdict)
    assert rows[0] == ["case", "variant", "stream event us (median)", "graph event us (median)",
                       "/ fused (stream, paired)", "/ fused (graph, paired)", "fastest", "checks"]
    # fused: stream median 10, graph 9 (its better mode) -> fastest; separate: 36, paired ratios 4, 2, 4.5 -> 4
    assert ["4096x1024", "fused", "10.00", "9.00", "1 (reference)", "1 (reference)", "**fastest**",
            "1/1 passed"] in rows
    assert ["4096x1024", "separate", "36.00", "-", "4.000", "-", "", "none recorded"] in rows
    assert "Correctness: **1 passed, 1 failed** of 2 correctness records" in verdict


def test_every_failure_is_listed_in_full_before_the_tables(summary):
    correctness = summary.split("## Correctness\n", 1)[1].split("\n## ", 1)[0]
    assert '- {"case": "7x781"' in correctness and '"note": "mask"' in correctness
    assert summary.index('- {"case": "7x781"') < summary.index("## Correctness records")


def test_terminal_verdict_is_the_summarys_verdict(tmp_path):
    from bench.report import terminal_verdict

    run = _make_run(tmp_path / "run", _timings(), cases=(PASSED, FAILED))
    text = write_summary(run).read_text()
    verdict = terminal_verdict(run)
    assert verdict.splitlines()[-1] == "Correctness: **1 passed, 1 failed** of 2 correctness records " \
                                       "(every failure is listed under Correctness)."
    table = [line for line in verdict.splitlines() if line.startswith("| 4096x1024")]
    assert table and all(line in text for line in table)


def test_a_device_other_than_the_protocols_is_said_loudly(tmp_path):
    metadata = dict(METADATA, backend="gpu", device={"name": "NVIDIA H200", "compute_capability": [9, 0]})
    text = write_summary(_make_run(tmp_path / "run", _timings(), metadata=metadata), plots=False).read_text()
    assert "> **NOT THE PROTOCOL'S H100: this run measures 'NVIDIA H200'**" in text.split("## Verdict")[0]
    h100 = dict(metadata, device={"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0]})
    assert "NOT THE PROTOCOL" not in write_summary(_make_run(tmp_path / "h100", _timings(), metadata=h100),
                                                   plots=False).read_text()


def test_a_stopped_run_says_why_at_the_top(tmp_path):
    metadata = dict(METADATA, stopped="AcceptanceError: A 7x781 fixture constant: out of tolerance")
    text = write_summary(_make_run(tmp_path / "run", _timings(), metadata=metadata), plots=False).read_text()
    assert text.index("**STOPPED before completing: AcceptanceError") < text.index("## Verdict")


def test_a_run_killed_between_cases_says_which_did_not_complete(tmp_path):
    from bench.report import terminal_verdict
    metadata = dict(METADATA, case_names=["4096x1024", "4096x4096", "7x781"])
    run = _make_run(tmp_path / "run", _timings(), metadata=metadata)
    run.append_jsonl("progress.jsonl", {"case": "4096x1024", "completed": True})
    text = write_summary(run, plots=False).read_text()
    banner = ("**INCOMPLETE: 2 of 3 cases did not complete (4096x4096, 7x781) and the run recorded no reason "
              "(the process was killed or its machine went away); progress.jsonl says which did**")
    assert banner in text and text.index(banner) < text.index("## Verdict")
    assert banner in terminal_verdict(run)
    run.append_jsonl("progress.jsonl", {"case": "4096x4096", "completed": True})
    run.append_jsonl("progress.jsonl", {"case": "7x781", "completed": True})
    assert "INCOMPLETE" not in write_summary(run, plots=False, force=True).read_text()


def test_simulator_summary_says_no_timings_by_design_not_missing_file(tmp_path):
    metadata = {"backend": "simulator", "timing_disabled_reason": "no CUDA GPU", "experiment": "A"}
    text = write_summary(_make_run(tmp_path / "run", [], cases=(PASSED,), metadata=metadata)).read_text()
    assert "MISSING FILE" not in text
    assert "timings are not taken in the Numba CUDA simulator, by design" in text
    assert ["4096x1024", "fused", "1/1 passed"] in _rows(text.split("## Verdict, Experiment A", 1)[1])


# ---------------------------------------------------------------- the report command never loses evidence

def _snapshot(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("make", ["missing", "no-metadata", "file"])
def test_report_acts_only_on_a_run_folder_and_creates_nothing(tmp_path, capsys, make):
    from bench.cli import main

    target = tmp_path / "target"
    if make == "no-metadata":
        target.mkdir()
        (target / "cases.jsonl").write_text("")
    elif make == "file":
        target.write_text("a file")
    before = _snapshot(tmp_path)
    assert main(["report", str(target)]) == 2
    assert "error: report:" in capsys.readouterr().err
    assert _snapshot(tmp_path) == before


def test_report_help_prints_help_and_creates_nothing(tmp_path, monkeypatch, capsys):
    from bench.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["report", "--help"])
    assert exc.value.code == 0 and "usage: python -m bench report" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_report_refuses_a_folder_that_is_not_an_experiment_run(tmp_path, capsys):
    from bench.cli import main

    run = RunFolder(tmp_path / "perf")
    run.write_json("metadata.json", {"kind": "perf"})
    run.write_text("perf.md", "# perf\n")
    assert main(["report", str(run.path)]) == 2
    assert "not an experiment run" in capsys.readouterr().err
    assert sorted(p.name for p in run.path.iterdir()) == ["metadata.json", "perf.md"]


def test_a_summary_recorded_in_the_manifest_is_replaced_only_with_force(tmp_path, capsys):
    from bench.bundle import bundle
    from bench.cli import main

    run = _make_run(tmp_path / "run", _timings(), metadata=dict(METADATA, experiment="A"))
    run.write_text("summary.md", "# the committed summary\n")
    bundle(run.path, tmp_path / "run.tar.gz")
    before = _snapshot(run.path)
    assert main(["report", str(run.path), "--no-plots"]) == 2
    assert "summary.md recorded by hash in manifest.json" in capsys.readouterr().err
    assert _snapshot(run.path) == before
    assert main(["report", str(run.path), "--no-plots", "--out", str(tmp_path / "elsewhere")]) == 0
    assert "## Verdict" in (tmp_path / "elsewhere" / "summary.md").read_text() and _snapshot(run.path) == before
    assert main(["report", str(run.path), "--no-plots", "--force"]) == 0
    assert "## Verdict" in (run.path / "summary.md").read_text()


def test_report_reads_timings_jsonl_gz(tmp_path):
    import gzip

    run = _make_run(tmp_path / "run", _timings())
    data = run.path_of("timings.jsonl").read_bytes()
    run.path_of("timings.jsonl").unlink()
    run.path_of("timings.jsonl.gz").write_bytes(gzip.compress(data))
    text = write_summary(run, plots=False).read_text()
    assert "NO TIMINGS" not in text and "MISSING FILE" not in text
    assert ["stream", "separate", "fused", "event_us", "3", "4.0000", "2.4000", "4.4000"] in _rows(text)


COMMITTED = sorted(p.parent for p in (Path(__file__).resolve().parents[2] / "results").rglob("metadata.json"))


@pytest.mark.skipif(not COMMITTED, reason="no results folder with metadata.json in this checkout")
@pytest.mark.parametrize("folder", COMMITTED, ids=[p.name for p in COMMITTED])
def test_report_on_a_copy_of_a_committed_folder_leaves_it_byte_identical(tmp_path, folder, capsys):
    import shutil

    from bench.cli import main

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    committed = _snapshot(folder)
    assert _snapshot(copy) == committed
    status = main(["report", str(copy), "--no-plots"])
    assert _snapshot(copy) == committed, f"report {folder.name} changed a committed file (exit {status})"
    metadata = json.loads((folder / "metadata.json").read_text())
    if metadata.get("experiment") in ("A", "B") and any(folder.glob("timings.jsonl*")):
        # and what it would write elsewhere holds the committed timings (read from timings.jsonl.gz)
        assert main(["report", str(copy), "--no-plots", "--out", str(tmp_path / "out")]) == 0
        text = (tmp_path / "out" / "summary.md").read_text()
        assert "NO TIMINGS" not in text and "MISSING FILE" not in text and "/ " in text.split("## Verdict")[1]


def test_experiment_b_floors_are_never_the_fastest(tmp_path):
    records = []
    for variant, value in (("separate", 60.0), ("separate-floor", 5.0), ("dag", 50.0), ("dag-floor", 8.0)):
        for rnd in range(3):
            records.append(Measurement("B", "balanced-128", variant, "stream", "random", rnd, "event_us", value,
                                       "invocation").to_record())
    cases = [{"experiment": "B", "case": "balanced-128", "variant": v, "passed": True} for v in ("separate", "dag")]
    metadata = {"ratio_reference": {"B": "separate"}, "experiment": "B"}
    text = write_summary(_make_run(tmp_path / "b", records, cases=cases, metadata=metadata), plots=False).read_text()
    rows = _rows(text.split("## Verdict, Experiment B", 1)[1].split("\n## ", 1)[0])
    assert [r[1] for r in rows[1:]] == ["separate", "separate-floor", "dag", "dag-floor"]
    assert rows[3] == ["balanced-128", "dag", "50.00", "0.833", "**fastest**", "1/1 passed"]
    assert rows[2][-2:] == ["", "none recorded"]  # 5 us, but a floor runs no task: never the fastest
