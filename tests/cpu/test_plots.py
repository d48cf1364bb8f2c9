"""Report plots: built from the artifacts alone, linked from summary.md, optional matplotlib."""

import struct
import sys
from pathlib import Path

import pytest

from bench.artifacts import RunFolder
from bench.protocol import Measurement
from bench.report import write_summary

ROOT = Path(__file__).resolve().parents[2]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _synthetic_run(path, experiment, variants, reference, cases=("4096x1024", "7x781")):
    run = RunFolder(path)
    run.write_json("metadata.json", {"ratio_reference": {experiment: reference}})
    for case in cases:
        for v_index, variant in enumerate(variants):
            for mode in ("stream", "graph"):
                for rnd in range(5):
                    base = 10.0 * (v_index + 1) + rnd + (0 if mode == "graph" else 3)
                    for metric in ("event_us", "host_completion_us"):
                        run.append_jsonl("timings.jsonl", Measurement(
                            experiment, case, variant, mode, "random", rnd, metric, base, "invocation",
                            bytes_moved=2 * 4096 * 1024 * 4).to_record())
        run.append_jsonl("cases.jsonl", {"experiment": experiment, "case": case, "variant": variants[0],
                                         "mode": "stream", "fixture": "random", "passed": True})
    return run


@pytest.fixture
def needs_matplotlib():
    pytest.importorskip("matplotlib", reason="matplotlib (the 'plots' extra, in 'test') is not installed")


def test_experiment_a_plots_exist_and_are_linked(tmp_path, needs_matplotlib):
    run = _synthetic_run(tmp_path / "run", "A", ("cudnn", "fused", "stages"), "fused")
    summary = write_summary(run).read_text()
    for name in ("A_gbps.png", "A_latency.png", "A_ratios.png"):
        path = run.path / "plots" / name
        width, height = _png_size(path)
        assert width >= 600 and height >= 300 and path.stat().st_size > 10_000
        assert f"](plots/{name})" in summary
    assert summary.index("## Plots") < summary.index("## Timings")


def test_experiment_b_has_no_bandwidth_plot(tmp_path, needs_matplotlib):
    run = _synthetic_run(tmp_path / "run", "B", ("dag", "phased", "separate"), "separate",
                         cases=("balanced-128", "ragged-128"))
    summary = write_summary(run).read_text()
    assert sorted(p.name for p in (run.path / "plots").iterdir()) == ["B_latency.png", "B_ratios.png"]
    assert "](plots/B_ratios.png)" in summary and "B_gbps" not in summary


def test_without_matplotlib_the_report_still_works_and_says_so(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    run = _synthetic_run(tmp_path / "run", "A", ("fused", "stages"), "fused")
    summary = write_summary(run).read_text()
    assert "Plots skipped: matplotlib is not installed" in summary
    assert not (run.path / "plots").exists()
    assert "## Timings" in summary  # the tables are all there


def test_no_timings_no_plots_section(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.write_json("metadata.json", {"timing_disabled_reason": "simulator"})
    run.append_jsonl("cases.jsonl", {"experiment": "A", "case": "1x128", "passed": True})
    summary = write_summary(run).read_text()
    assert "## Plots" not in summary and not (run.path / "plots").exists()


@pytest.mark.parametrize("folder, names", [
    ("experiment_A", ("A_gbps.png", "A_latency.png", "A_ratios.png")),
    ("experiment_B", ("B_latency.png", "B_ratios.png")),
])
def test_plots_from_committed_h200_results(tmp_path, folder, names, needs_matplotlib):
    source = ROOT / "results" / folder
    if not (source / "timings.jsonl.gz").is_file():
        pytest.skip(f"{source} holds no timings.jsonl.gz in this checkout")
    out = tmp_path / "out"
    summary = write_summary(RunFolder(source, resume=True), out=out).read_text()  # reads timings.jsonl.gz
    for name in names:
        width, height = _png_size(out / "plots" / name)
        assert width >= 800 and height >= 400
        assert f"](plots/{name})" in summary
