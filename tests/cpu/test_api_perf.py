"""The API goals of ``python -m bench perf`` from a report (pure: no GPU)."""

from bench.perf.goals import evaluate_goals
from bench.perf.launch_path import API_OVERHEAD_GOALS, TORCH_API_GOAL, api_goals


def _ratio(median):
    return {"n": 200, "median": median, "p10": median * 0.95, "p90": median * 1.05}


def _entry(shape, api_ratio, torch_ratio=None):
    entry = {"shape": list(shape), "api": {"median": 10.0}, "launch_layer": {"median": 10.0 / api_ratio},
             "ratio": _ratio(api_ratio)}
    if torch_ratio is not None:
        entry.update(torch_api={"median": 10.0 * torch_ratio}, torch_ratio=_ratio(torch_ratio))
    return entry


def _by_label(goals):
    return {g["goal"]: g for g in goals}


def test_each_api_goal_is_pass_or_miss_with_its_value_and_threshold():
    report = {"api_overhead": {"shapes": [_entry((1, 128), 1.25, 1.12), _entry((4096, 4096), 1.06, 1.01)]}}
    goals = api_goals(report)
    assert len(goals) == 2 * len(API_OVERHEAD_GOALS)
    by_shape = {}
    for goal in goals:
        by_shape.setdefault("torch" if goal["goal"].startswith("torch") else "api", []).append(goal)
    api_small, api_large = by_shape["api"]
    assert (api_small["status"], api_small["value"], api_small["threshold"]) == ("PASS", 1.25, 1.3)
    assert (api_large["status"], api_large["value"], api_large["threshold"]) == ("MISS", 1.06, 1.05)
    torch_small, torch_large = by_shape["torch"]
    assert (torch_small["status"], torch_small["threshold"]) == ("MISS", TORCH_API_GOAL)
    assert torch_large["status"] == "PASS"
    assert "1x128" in api_small["goal"] and "4096x4096" in api_large["goal"]


def test_what_was_not_measured_says_why():
    goals = api_goals({})
    assert {g["status"] for g in goals} == {"NOT MEASURED"}
    assert all(g["detail"] == "not run" for g in goals)
    report = {"api_overhead": {"torch_skipped": "--no-torch",
                               "shapes": [_entry((1, 128), 1.1), {"shape": [4096, 4096], "error": "oracle failed"}]}}
    goals = api_goals(report)
    torch = [g for g in goals if g["goal"].startswith("torch")]
    assert all(g["status"] == "NOT MEASURED" and g["detail"] == "--no-torch" for g in torch)
    large = next(g for g in goals if "4096x4096" in g["goal"] and not g["goal"].startswith("torch"))
    assert (large["status"], large["detail"]) == ("NOT MEASURED", "oracle failed")


def test_the_goals_table_of_bench_perf_carries_them():
    report = {"api_overhead": {"shapes": [_entry((1, 128), 1.2, 1.05), _entry((4096, 4096), 1.01, 1.0)]}}
    labels = _by_label(evaluate_goals(report))
    api = [g for label, g in labels.items() if label.startswith(("API overhead", "torch:"))]
    assert len(api) == 4 and all(g["status"] == "PASS" for g in api)


def test_the_torch_goal_names_the_call_without_a_stream_beside_it():
    entry = _entry((1, 128), 1.2, 1.05)
    entry.update(torch_api_current_stream={"median": 10.7}, torch_current_stream_ratio=_ratio(1.07))
    torch_small = next(g for g in api_goals({"api_overhead": {"shapes": [entry]}}) if g["goal"].startswith("torch"))
    assert torch_small["value"] == 1.05  # the goal stays the call with stream=
    assert "without stream= (torch's current stream) 10.70 us, ratio 1.070" in torch_small["detail"]
    assert "(p10 0.99" in torch_small["detail"] and ", p90 1.10" in torch_small["detail"]
