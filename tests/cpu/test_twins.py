"""``--twins`` on a CPU: the Numba / nvcc table from hand-computed rounds, the pairing of variants, and the
simulator's clear refusal (the twins themselves run in tests/gpu/test_twins_bench_gpu.py)."""

import os
import subprocess
import sys

from bench.artifacts import RunFolder
from bench.protocol import Measurement
from bench.report import TWIN_PARITY, terminal_verdict, write_summary
from bench.protocol import TWIN_SUFFIX, twin_name, twin_pairs
from bench.twins import bitwise_groups

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASE = "4096x1024"


def _run(path, table, experiment="A", reference="fused", batches=()):
    """``table``: (variant, mode, event_us per round); ``batches``: (variant, mode, batch completion per round)."""
    run = RunFolder(path)
    run.write_json("metadata.json", {"experiment": experiment, "ratio_reference": {experiment: reference}})
    for metric, per, rows in (("event_us", "invocation", table), ("batch_completion_us", "batch", batches)):
        for variant, mode, values in rows:
            for rnd, value in enumerate(values):
                run.append_jsonl("timings.jsonl", Measurement(experiment, CASE, variant, mode, "bench0", rnd, metric,
                                                              value, per).to_record())
    run.append_jsonl("cases.jsonl", {"experiment": experiment, "case": CASE, "variant": "fused", "mode": "stream",
                                     "fixture": "bench0", "passed": True})
    return run


def _twin_rows(text):
    section = text.split("## Numba / nvcc\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| A ")]


def test_numba_over_nvcc_is_the_median_of_paired_round_ratios(tmp_path):
    # Per round fused / fused-nvcc: 10/5 = 2, 12/12 = 1, 9/10 = 0.9 -> median 1.0 (the ratio of the medians,
    # 10/10, agrees by accident; the p10 and p90 below only come from pairing).
    run = _run(tmp_path / "run", [
        ("fused", "stream", [10, 12, 9]), ("fused-nvcc", "stream", [5, 12, 10]),
        ("stages", "graph", [30, 33, 36]), ("stages-nvcc", "graph", [30, 30, 30]),
        ("fused", "graph", [8, 8, 8]),  # a mode without its twin: no row
    ])
    text = write_summary(run, plots=False).read_text()
    rows = _twin_rows(text)
    by_key = {(r[2], r[4]): r for r in rows}
    assert set(by_key) == {("fused", "stream"), ("stages", "graph")}
    fused = by_key[("fused", "stream")]
    assert fused[3] == "fused-nvcc" and fused[5] == "3"
    assert fused[6] == "1.0000" and fused[7] == "0.9200" and fused[8] == "1.8000"  # interpolated p10, p90
    assert fused[9] == "yes"
    assert fused[10:] == ["0", "-", "-", "-", "-"]  # no batch records: no batch ratio
    stages = by_key[("stages", "graph")]
    assert stages[6] == "1.1000" and stages[9] == "**no**"  # 33/30 > TWIN_PARITY
    assert TWIN_PARITY == 1.03
    assert "## Numba / nvcc" in terminal_verdict(run)


def test_the_batch_ratio_is_paired_per_round_beside_the_event_ratio(tmp_path):
    # Event ratios 1.2, 0.8, 1.0 (median 1.0: parity); batch values of 32 invocations: 330/320, 340/320, 331/320
    # per round -> ratios 1.03125, 1.0625, 1.034375 -> median 1.0344: above TWIN_PARITY, so this case is flagged.
    run = _run(tmp_path / "run", [("dag", "graph", [12, 8, 10]), ("dag-nvcc", "graph", [10, 10, 10])],
               experiment="B", reference="separate",
               batches=[("dag", "graph", [330, 340, 331]), ("dag-nvcc", "graph", [320, 320, 320])])
    section = write_summary(run, plots=False).read_text().split("## Numba / nvcc\n", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| B ")]
    assert len(rows) == 1 and rows[0][2:5] == ["dag", "dag-nvcc", "graph"]
    assert rows[0][5:10] == ["3", "1.0000", "0.8400", "1.1600", "yes"]
    assert rows[0][10:15] == ["3", "1.0344", "1.0319", "1.0569", "**no**"]


def test_no_twins_no_table(tmp_path):
    run = _run(tmp_path / "run", [("fused", "stream", [10, 12, 9]), ("stages", "stream", [20, 20, 20])])
    assert "Numba / nvcc" not in write_summary(run, plots=False).read_text()


def test_pairs_and_bitwise_groups_follow_the_suffix():
    assert twin_name("dag") == "dag" + TWIN_SUFFIX
    names = ["fused", "stages", "cudnn", "fused-nvcc", "stages-nvcc", "dag-floor"]
    assert twin_pairs(names) == [("fused", "fused-nvcc"), ("stages", "stages-nvcc")]

    class V:
        def __init__(self, name):
            self.name = name

    assert bitwise_groups([V(n) for n in names]) == (("fused", "fused-nvcc"), ("stages", "stages-nvcc"))
    assert twin_pairs(["fused", "cudnn"]) == []


def test_twins_in_the_simulator_are_refused_clearly_and_create_nothing(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    for experiment in ("A", "B"):
        out = tmp_path / f"run{experiment}"
        proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", experiment, "--twins", "--out",
                               str(out)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "--twins needs a GPU and nvcc" in proc.stderr
        assert not out.exists()
    assert list(tmp_path.iterdir()) == []
