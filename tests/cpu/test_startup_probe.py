"""``python -m bench probe startup``: cold and warm runs of real processes against their own cache folder, the
goals and the report (the items themselves need a GPU; here a script stands in for them)."""

import sys

import pytest

from bench.probes import startup
from bench.probes.startup import (MARK, Item, RunFailed, error_record, evaluate_goal, measure_item, parse_items,
                                  render)

#: A process that says whether its cache folder held an entry when it started, and leaves one.
CACHE_AWARE = f"""
import json, os
folder = os.environ["NUMBA_SOFTMAX_CACHE_DIR"]
found = os.path.exists(os.path.join(folder, "entry"))
os.makedirs(folder, exist_ok=True)
open(os.path.join(folder, "entry"), "w").close()
print({MARK!r} + json.dumps({{"first_call_s": 0.0 if found else 1.0}}))
"""


def _item(code, goal=("warm", "first_call_s", 0.5, False, "toy goal")):
    return Item("toy", lambda folder: [sys.executable, "-c", code], goal)


def test_cold_runs_start_from_an_empty_cache_and_warm_runs_from_a_filled_one(tmp_path):
    samples = measure_item(_item(CACHE_AWARE), 2, str(tmp_path), timeout_s=60, log=lambda _: None)
    assert [s["first_call_s"] for s in samples["cold"]] == [1.0, 1.0]
    assert [s["first_call_s"] for s in samples["warm"]] == [0.0, 0.0]
    assert all(s["process_s"] > 0 for mode in samples.values() for s in mode)
    summary = startup.summarize_item(samples)
    assert summary["warm"]["first_call_s"]["median"] == 0.0 and summary["cold"]["first_call_s"]["median"] == 1.0
    assert evaluate_goal(_item(CACHE_AWARE), summary)["status"] == "MET"


#: A fill command: leaves the cache entry and a mark that it ran.
FILL = """
import os
folder = os.environ["NUMBA_SOFTMAX_CACHE_DIR"]
os.makedirs(folder, exist_ok=True)
for name in ("entry", "filled-in-parallel"):
    open(os.path.join(folder, name), "w").close()
"""


def test_warm_runs_alone_against_a_kept_cache_filled_once_by_the_parallel_command(tmp_path):
    item = Item("toy", lambda folder: [sys.executable, "-c", CACHE_AWARE], ("warm", "first_call_s", 0.5, False, "t"),
                lambda folder, jobs: [sys.executable, "-c", FILL])
    root = tmp_path / "caches"
    first = measure_item(item, 2, str(tmp_path / "a"), 60, lambda _: None, ("warm",), str(root), fill_jobs=4)
    assert first["cold"] == [] and len(first["fill"]) == 1
    assert [s["first_call_s"] for s in first["warm"]] == [0.0, 0.0]
    assert (root / "cache-toy" / "filled-in-parallel").exists()
    again = measure_item(item, 1, str(tmp_path / "b"), 60, lambda _: None, ("warm",), str(root), fill_jobs=4)
    assert again["fill"] == [] and [s["first_call_s"] for s in again["warm"]] == [0.0]
    serial = measure_item(item, 1, str(tmp_path / "c"), 60, lambda _: None, ("warm",), fill_jobs=1)
    assert len(serial["fill"]) == 1 and not (tmp_path / "c" / "cache-toy" / "filled-in-parallel").exists()
    summary = startup.summarize_item(first)
    assert summary["cold"] == {} and evaluate_goal(item, summary)["status"] == "MET"
    text = render({"device": "d", "runs": 2, "items": {"toy": {"samples": first, "summary": summary,
                                                                "goal": evaluate_goal(item, summary)}}})
    assert "| toy | cold | - | - |" in text and "The run that filled each cache for its warm runs: toy" in text


def test_each_modes_last_run_leaves_its_output_and_the_report_quotes_its_last_line(tmp_path):
    code = "import sys; print('collected'); print('3 passed in 1.0s'); print('note', file=sys.stderr)"
    samples = measure_item(_item(code), 2, str(tmp_path / "work"), 60, lambda _: None, log_dir=str(tmp_path))
    assert [s["last_line"] for s in samples["warm"]] == ["3 passed in 1.0s"] * 2
    assert (tmp_path / "toy-cold.log").read_text() == "collected\n3 passed in 1.0s\nnote\n"
    assert (tmp_path / "toy-warm.log").exists() and samples["fill"] == []  # the last cold run filled it
    summary = startup.summarize_item(samples)
    assert "last_line" not in summary["warm"]
    text = render({"device": "d", "runs": 2, "items": {"toy": {"samples": samples, "summary": summary,
                                                                "goal": evaluate_goal(_item(code), summary)}}})
    assert "- toy warm: `3 passed in 1.0s`" in text


def test_a_failing_process_stops_the_item_with_its_output(tmp_path):
    with pytest.raises(RunFailed, match=r"exit status 3 after \d+\.\d s\nbroken"):
        measure_item(_item("import sys; print('broken'); sys.exit(3)"), 1, str(tmp_path), timeout_s=60,
                     log=lambda _: None)


def test_a_run_past_its_time_is_interrupted_and_keeps_what_it_printed_then(tmp_path):
    code = ("import time\ntry:\n    print('started', flush=True); time.sleep(60)\n"
            "except KeyboardInterrupt:\n    print('slowest durations')\n")
    with pytest.raises(RunFailed, match=r"still running after 1 s \(--timeout-s\), interrupted\nstarted\nslowest"):
        measure_item(_item(code), 1, str(tmp_path), timeout_s=1, modes=("cold",), log=lambda _: None,
                     log_dir=str(tmp_path))
    assert (tmp_path / "toy-cold.log").read_text().splitlines() == ["started", "slowest durations"]


def test_goals_absolute_relative_and_unmeasured():
    summary = {"cold": {"process_s": {"median": 10.0, "p10": 9.0, "p90": 11.0}},
               "warm": {"process_s": {"median": 5.0, "p10": 4.0, "p90": 6.0}}}
    relative = ("warm", "process_s", 0.6, True, "warm <= 0.6 of cold")
    assert evaluate_goal(_item("", relative), summary) == {"goal": "warm <= 0.6 of cold", "status": "MET",
                                                          "value": 0.5, "bound": 0.6}
    absolute = ("warm", "process_s", 4.0, False, "warm <= 4 s")
    assert evaluate_goal(_item("", absolute), summary)["status"] == "MISSED"
    assert evaluate_goal(_item("", ("warm", "first_call_s", 1, False, "t")), summary)["status"] == "NOT MEASURED"


def test_the_items_and_the_report():
    assert parse_items("all") == list(startup.ITEMS)
    assert parse_items("first-dag, experiment-b-128") == ["first-dag", "experiment-b-128"]
    with pytest.raises(ValueError, match="unknown nope"):
        parse_items("first-dag,nope")
    argv = startup.ITEMS["experiment-b-128"].argv("/tmp/x")
    assert argv[1:] == ["-m", "bench", "--experiment", "B", "--cases", "balanced-128", "--no-arrays", "--out", "/tmp/x"]
    summary = {mode: {"process_s": {"median": 2.0, "p10": 1.5, "p90": 2.5}} for mode in ("cold", "warm")}
    results = {"device": "NVIDIA H200", "runs": 5, "items": {"experiment-b-128": {
        "summary": summary, "goal": evaluate_goal(startup.ITEMS["experiment-b-128"], summary)}}}
    text = render(results)
    assert "| python -m bench --experiment B --cases balanced-128 <= 8 s | MET | 2.000 | 8 |" in text
    assert "| experiment-b-128 | warm | 2.000 [1.500, 2.500] | - |" in text
    error = RunFailed("gpu-tests: still running after 320 s (--timeout-s), interrupted\n" + "a warning\n" * 1000)
    stopped = render(dict(results, error=error_record(error)))  # a long output: its end kept, the first line too
    assert "Stopped: gpu-tests: still running after 320 s (--timeout-s), interrupted\n" in stopped
    assert len(error_record(error)) < 3100 and error_record(error).endswith("a warning\n")


def test_without_a_gpu_the_probe_stops_before_running(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(startup, "require_gpu", lambda parser: parser.error("needs a CUDA GPU: none found"))
    with pytest.raises(SystemExit) as exit_:
        startup.main(["--out", str(tmp_path / "out")])
    assert exit_.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        startup.main(["--items", "nope", "--out", str(tmp_path)])
    for bad in (["--modes", "hot"], ["--fill-jobs", "0"]):
        with pytest.raises(SystemExit):
            startup.main(bad + ["--out", str(tmp_path / "bad")])
        assert "--" + bad[0].strip("-") in capsys.readouterr().err
