"""Section 4 of ``python -m bench perf``: the goals, evaluated from a report (pure; tested on the CPU).

fused >= 0.90 of the copy ceiling at 4096x4096 and 16384x1024; fused faster than each peer at
every protocol shape with >= 4096 rows; auto >= 0.92 of the copy ceiling at the same two shapes and
faster than each peer at those shapes and the long rows; launch ratio <= 1.3; the API's overhead and
torch / Numba ratios (:func:`bench.perf.launch_path.api_goals`); (1, 128) graph completion ratio <= 1.2.
Each goal is PASS, MISS or NOT MEASURED (with the reason).
"""

from bench.floors import shape_name
from bench.perf.launch_path import LAUNCH_GOAL_METRIC, api_goals
from bench.perf.peers import (AUTO, COPY, COPY_KERNEL_PREFIX, DEFAULT_SHAPES, FUSED, LONG_SHAPES, PEER_MIN_ROWS, PEERS,
                              ROW_COPY)

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


def _copy_note(entry, variant, what, ceiling_tbs, threshold, below, above):
    """The copy goal detail's word on a copy timed in the same rounds ('' when it was not timed): ``variant``
    (``what`` in words) as a fraction of the ceiling, then ``below`` or ``above`` against ``threshold``."""
    if _variant_problem(entry, variant):
        return ""
    copy = entry["analysis"]["variants"][variant]
    fraction = copy["bandwidth_tbs"] / ceiling_tbs
    return (f"; {what} {copy['event_us']['median']:.2f} us = {fraction:.3f} of the ceiling: "
            f"{below if fraction < threshold else above}")


def _reach_notes(entry, variant, ceiling_tbs, threshold):
    """What bounds a copy goal: the same-size copy (cuMemcpyDtoDAsync of the input's bytes: below the goal, even
    the copy engine does not move these bytes that fast) and, for the fused kernel, a copy in its geometry."""
    notes = _copy_note(entry, COPY, "the same-size copy", ceiling_tbs, threshold,
                       "even the copy engine is below the goal at this size",
                       "the copy engine reaches the goal at this size")
    kernels = [name for name in entry.get("analysis", {}).get("variants", {}) if name.startswith(COPY_KERNEL_PREFIX)]
    if kernels:
        fastest = min(kernels, key=lambda name: entry["analysis"]["variants"][name]["event_us"]["median"])
        notes += _copy_note(entry, fastest, f"the fastest of {len(kernels)} copy kernels ({fastest})", ceiling_tbs,
                            threshold, "no copy design timed reaches the goal at this size",
                            "a copy kernel reaches the goal at this size")
    if variant == FUSED:
        notes += _copy_note(entry, ROW_COPY, "a copy in the fused geometry (row_copy)", ceiling_tbs, threshold,
                            "the goal is out of reach of this launch geometry",
                            "the goal is within reach of this launch geometry")
    return notes


def _peer_reach_note(entry, peer):
    """The peer goal detail's word on whether a copy in the fused geometry beats ``peer`` ('' when not timed)."""
    reach = entry["analysis"]["ratios"].get(f"{ROW_COPY}/{peer}")
    if reach is None:
        return ""
    verdict = ("even a copy in the fused geometry is not faster, out of reach of this launch geometry"
               if reach["median"] >= 1.0 else "within reach of this launch geometry")
    return f"; row_copy/{peer} {reach['median']:.3f}: {verdict}"


def _copy_fraction_goals(report, ceiling, variant, threshold, describe):
    """``variant >= threshold`` of the copy ceiling at each copy-goal shape; ``describe(entry, timing)``
    words the measured time."""
    goals = []
    ceiling_tbs = ceiling.get("bandwidth_tbs")
    for shape in COPY_GOAL_SHAPES:
        label = f"{variant} >= {threshold:.2f} of copy bandwidth at {shape_name(shape)}"
        entry = _shape_entry(report, shape)
        if entry is None:
            goals.append(_goal(label, NOT_MEASURED, threshold=threshold, detail=SHAPE_MISSING))
            continue
        if not ceiling_tbs:
            goals.append(_goal(label, NOT_MEASURED, threshold=threshold,
                               detail=f"no copy ceiling: {ceiling.get('error', 'not measured')}"))
            continue
        problem = _variant_problem(entry, variant)
        if problem:
            goals.append(_goal(label, NOT_MEASURED, threshold=threshold, detail=problem))
            continue
        timing = entry["analysis"]["variants"][variant]
        fraction = timing["bandwidth_tbs"] / ceiling_tbs
        goals.append(_goal(label, PASS if fraction >= threshold else MISS, fraction, threshold,
                           f"{describe(entry, timing)} {timing['event_us']['median']:.2f} us = "
                           f"{timing['bandwidth_tbs']:.2f} TB/s; copy ceiling {ceiling_tbs:.2f} TB/s"
                           + _reach_notes(entry, variant, ceiling_tbs, threshold)))
    return goals


def _peer_goals(report, variant, expected_shapes, takes_shape):
    """``variant`` faster than each peer (paired per-round ratio median < 1) at every measured or expected
    shape ``takes_shape`` accepts."""
    goals = []
    measured_shapes = [tuple(e["shape"]) for e in report.get("shapes", [])]
    for shape in [s for s in expected_shapes if s not in measured_shapes] + measured_shapes:
        if not takes_shape(shape):
            continue
        entry = _shape_entry(report, shape)
        for peer in PEERS:
            label = f"{variant} faster than {peer} at {shape_name(shape)}"
            if entry is None:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=SHAPE_MISSING))
                continue
            problem = _variant_problem(entry, variant) or _variant_problem(entry, peer)
            if problem:
                goals.append(_goal(label, NOT_MEASURED, threshold=1.0, detail=problem))
                continue
            ratio = entry["analysis"]["ratios"][f"{variant}/{peer}"]
            variants = entry["analysis"]["variants"]
            goals.append(_goal(label, PASS if ratio["median"] < 1.0 else MISS, ratio["median"], 1.0,
                               f"{variant}/{peer} median of {ratio['n']} paired rounds (p10 {ratio['p10']:.3f}, "
                               f"p90 {ratio['p90']:.3f}); medians {variants[variant]['event_us']['median']:.2f} vs "
                               f"{variants[peer]['event_us']['median']:.2f} us"
                               + (_peer_reach_note(entry, peer) if variant == FUSED else "")))
    return goals


def evaluate_goals(report, expected_shapes=DEFAULT_SHAPES):
    """The goals table: a list of ``{goal, status, value, threshold, detail}`` (PASS / MISS / NOT MEASURED)."""
    ceiling = report.get("copy_ceiling") or {}
    goals = _copy_fraction_goals(report, ceiling, FUSED, COPY_FRACTION_GOAL, lambda entry, timing: "fused")
    # the fused kernel holds rows up to 4096 columns: no goal at the long rows
    goals.extend(_peer_goals(report, FUSED, expected_shapes,
                             lambda shape: shape[0] >= PEER_MIN_ROWS and shape not in LONG_SHAPES))
    goals.extend(_copy_fraction_goals(
        report, ceiling, AUTO, AUTO_COPY_FRACTION_GOAL,
        lambda entry, timing: f"auto ({entry['variants'][AUTO].get('geometry', '?')})"))
    goals.extend(_peer_goals(report, AUTO, expected_shapes,
                             lambda shape: shape[0] >= PEER_MIN_ROWS or shape in LONG_SHAPES))
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
