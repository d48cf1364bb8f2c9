"""Section 4 of ``python -m bench perf``: the goals, evaluated from a report (pure; tested on the CPU).

fused >= 0.90 of the copy ceiling at 4096x4096 and 16384x1024; fused faster than each peer at
every protocol shape with >= 4096 rows; auto >= 0.92 of the copy ceiling at the same two shapes and
faster than each peer at those shapes and the long rows; launch ratio <= 1.3; the API's overhead and
torch / Numba ratios (:func:`bench.perf.launch_path.api_goals`); (1, 128) graph completion ratio <= 1.2.
Each goal is PASS, MISS or NOT MEASURED (with the reason).
"""

from bench.floors import shape_name
from bench.perf.launch_path import LAUNCH_GOAL_METRIC, api_goals
from bench.perf.peers import AUTO, DEFAULT_SHAPES, FUSED, LONG_SHAPES, PEER_MIN_ROWS, PEERS, ROW_COPY

COPY_GOAL_SHAPES = ((4096, 4096), (16384, 1024))
COPY_FRACTION_GOAL = 0.90
AUTO_COPY_FRACTION_GOAL = 0.92
LAUNCH_RATIO_GOAL = 1.3
GRAPH_COMPLETION_GOAL = 1.2

PASS, MISS, NOT_MEASURED = "PASS", "MISS", "NOT MEASURED"
SHAPE_MISSING = "shape not measured in this run (not requested, or it failed: see Errors)"


def _goal(goal, status, value=None, threshold=None, detail=""):
    return {"goal": goal, "status": status, "value": value, "threshold": threshold, "detail": detail}


def _shape_entry(report, shape):
    for entry in report.get("shapes", []):
        if tuple(entry["shape"]) == tuple(shape):
            return entry
    return None


def _variant_problem(entry, name):
    """Why a variant has no timing at this shape, or None when it was timed."""
    info = entry.get("variants", {}).get(name)
    if info is None:
        return f"{name} not run"
    if info.get("status") != "timed":
        return f"{name} {info.get('status')}: {info.get('reason', '')}".strip().rstrip(":")
    if name not in entry.get("analysis", {}).get("variants", {}):
        return f"{name} has no samples"
    return None


def _geometry_note(entry, ceiling_tbs):
    """The goal detail's word on the fused geometry's own ceiling (its row copy), '' when not timed."""
    if _variant_problem(entry, ROW_COPY):
        return ""
    row_copy = entry["analysis"]["variants"][ROW_COPY]
    fraction = row_copy["bandwidth_tbs"] / ceiling_tbs
    verdict = ("out of reach of this launch geometry" if fraction < COPY_FRACTION_GOAL
               else "within reach of this launch geometry")
    return (f"; a copy in the fused geometry (row_copy) {row_copy['event_us']['median']:.2f} us = "
            f"{fraction:.3f} of the ceiling: the goal is {verdict}")


def _peer_reach_note(entry, peer):
    """The peer goal detail's word on whether a copy in the fused geometry beats ``peer`` ('' when not timed)."""
    reach = entry["analysis"]["ratios"].get(f"{ROW_COPY}/{peer}")
    if reach is None:
        return ""
    verdict = ("even a copy in the fused geometry is not faster, out of reach of this launch geometry"
               if reach["median"] >= 1.0 else "within reach of this launch geometry")
    return f"; row_copy/{peer} {reach['median']:.3f}: {verdict}"


def _auto_goals(report, ceiling, expected_shapes):
    """auto >= 0.92 of the copy ceiling at the copy shapes; auto faster than each peer at every peer shape
    and at the long rows."""
    goals = []
    ceiling_tbs = ceiling.get("bandwidth_tbs")
    for shape in COPY_GOAL_SHAPES:
        label = f"auto >= {AUTO_COPY_FRACTION_GOAL:.2f} of copy bandwidth at {shape_name(shape)}"
        entry = _shape_entry(report, shape)
        if entry is None:
            goals.append(_goal(label, NOT_MEASURED, threshold=AUTO_COPY_FRACTION_GOAL, detail=SHAPE_MISSING))
            continue
        if not ceiling_tbs:
            goals.append(_goal(label, NOT_MEASURED, threshold=AUTO_COPY_FRACTION_GOAL,
                               detail=f"no copy ceiling: {ceiling.get('error', 'not measured')}"))
            continue
        problem = _variant_problem(entry, AUTO)
        if problem:
            goals.append(_goal(label, NOT_MEASURED, threshold=AUTO_COPY_FRACTION_GOAL, detail=problem))
            continue
        auto = entry["analysis"]["variants"][AUTO]
        fraction = auto["bandwidth_tbs"] / ceiling_tbs
        goals.append(_goal(label, PASS if fraction >= AUTO_COPY_FRACTION_GOAL else MISS, fraction,
                           AUTO_COPY_FRACTION_GOAL,
                           f"auto ({entry['variants'][AUTO].get('geometry', '?')}) "
                           f"{auto['event_us']['median']:.2f} us = "
                           f"{auto['bandwidth_tbs']:.2f} TB/s; copy ceiling {ceiling_tbs:.2f} TB/s"))
    measured_shapes = [tuple(e["shape"]) for e in report.get("shapes", [])]
    for shape in [s for s in expected_shapes if s not in measured_shapes] + measured_shapes:
        if shape[0] < PEER_MIN_ROWS and shape not in LONG_SHAPES:
            continue
        entry = _shape_entry(report, shape)
        for peer in PEERS:
            label = f"auto faster than {peer} at {shape_name(shape)}"
            if entry is None:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=SHAPE_MISSING))
                continue
            problem = _variant_problem(entry, AUTO) or _variant_problem(entry, peer)
            if problem:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=problem))
                continue
            ratio = entry["analysis"]["ratios"][f"{AUTO}/{peer}"]
            variants = entry["analysis"]["variants"]
            goals.append(_goal(label, PASS if ratio["median"] < 1.0 else MISS, ratio["median"], 1.0,
                               f"auto/{peer} median of {ratio['n']} paired rounds (p10 {ratio['p10']:.3f}, "
                               f"p90 {ratio['p90']:.3f}); medians {variants[AUTO]['event_us']['median']:.2f} vs "
                               f"{variants[peer]['event_us']['median']:.2f} us"))
    return goals


def evaluate_goals(report, expected_shapes=DEFAULT_SHAPES):
    """The goals table: a list of ``{goal, status, value, threshold, detail}`` (PASS / MISS / NOT MEASURED)."""
    goals = []
    ceiling = report.get("copy_ceiling") or {}
    ceiling_tbs = ceiling.get("bandwidth_tbs")
    for shape in COPY_GOAL_SHAPES:
        label = f"fused >= {COPY_FRACTION_GOAL:.2f} of copy bandwidth at {shape_name(shape)}"
        entry = _shape_entry(report, shape)
        if entry is None:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL, detail=SHAPE_MISSING))
            continue
        if not ceiling_tbs:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL,
                               detail=f"no copy ceiling: {ceiling.get('error', 'not measured')}"))
            continue
        problem = _variant_problem(entry, FUSED)
        if problem:
            goals.append(_goal(label, NOT_MEASURED, threshold=COPY_FRACTION_GOAL, detail=problem))
            continue
        fused = entry["analysis"]["variants"][FUSED]
        fraction = fused["bandwidth_tbs"] / ceiling_tbs
        goals.append(_goal(label, PASS if fraction >= COPY_FRACTION_GOAL else MISS, fraction, COPY_FRACTION_GOAL,
                           f"fused {fused['event_us']['median']:.2f} us = {fused['bandwidth_tbs']:.2f} TB/s; "
                           f"copy ceiling {ceiling_tbs:.2f} TB/s" + _geometry_note(entry, ceiling_tbs)))
    measured_shapes = [tuple(e["shape"]) for e in report.get("shapes", [])]
    for shape in [s for s in expected_shapes if s not in measured_shapes] + measured_shapes:
        if shape[0] < PEER_MIN_ROWS or shape in LONG_SHAPES:   # the fused kernel holds rows up to 4096
            continue
        entry = _shape_entry(report, shape)
        for peer in PEERS:
            label = f"fused faster than {peer} at {shape_name(shape)}"
            if entry is None:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=SHAPE_MISSING))
                continue
            problem = _variant_problem(entry, FUSED) or _variant_problem(entry, peer)
            if problem:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=problem))
                continue
            ratio = entry["analysis"]["ratios"][f"{FUSED}/{peer}"]
            variants = entry["analysis"]["variants"]
            goals.append(_goal(label, PASS if ratio["median"] < 1.0 else MISS, ratio["median"], 1.0,
                               f"fused/{peer} median of {ratio['n']} paired rounds (p10 {ratio['p10']:.3f}, "
                               f"p90 {ratio['p90']:.3f}); medians {variants[FUSED]['event_us']['median']:.2f} vs "
                               f"{variants[peer]['event_us']['median']:.2f} us" + _peer_reach_note(entry, peer)))
    goals.extend(_auto_goals(report, ceiling, expected_shapes))
    goals.extend(api_goals(report))
    launch = report.get("launch") or {}
    label = f"launch: our enqueue per launch / C++ cuLaunchKernel <= {LAUNCH_RATIO_GOAL}"
    comparison = launch.get("comparison")
    if comparison:
        m = comparison[LAUNCH_GOAL_METRIC]
        ratio = m["ratio"]["median"]
        goals.append(_goal(label, PASS if ratio <= LAUNCH_RATIO_GOAL else MISS, ratio, LAUNCH_RATIO_GOAL,
                           f"python {m['python']['median']:.2f} us vs C++ {m['cpp']['median']:.2f} us per launch "
                           f"(median of {len(m['ratios_per_alternation'])} alternations)"))
    else:
        goals.append(_goal(label, NOT_MEASURED, threshold=LAUNCH_RATIO_GOAL,
                           detail=launch.get("cpp_skipped") or launch.get("error") or "not run"))
    completion = report.get("graph_completion") or {}
    label = f"(1,128) fused graph completion / empty-kernel graph <= {GRAPH_COMPLETION_GOAL}"
    ratio = completion.get("ratio")
    if ratio:
        fused, empty = completion["fused"], completion["empty"]
        goals.append(_goal(label, PASS if ratio["median"] <= GRAPH_COMPLETION_GOAL else MISS, ratio["median"],
                           GRAPH_COMPLETION_GOAL,
                           f"{fused['median']:.2f} vs {empty['median']:.2f} us host completion, median of "
                           f"{ratio['n']} paired rounds"))
    else:
        goals.append(_goal(label, NOT_MEASURED, threshold=GRAPH_COMPLETION_GOAL,
                           detail=completion.get("error") or "not run"))
    return goals
