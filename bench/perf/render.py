"""How ``python -m bench perf`` reports: perf.md (printed too), strict JSON, the byte-floor tables."""

import math

import numpy as np

from bench.floors import H200_COPY_TBS, experiment_a_floors, experiment_b_floors
from bench.floors import us_at as _us_at
from bench.perf.goals import evaluate_goals
from bench.perf.peers import COPIES, FUSED, VARIANTS, WARMUPS, is_copy
from bench.protocol import BATCH
from bench.timing import DELAY_NANOSLEEP_NS


def _fmt_us(us):
    return f"{us:.2f}" if us >= 1 else f"{us:.3g}"


def floors_markdown(copy_tbs=H200_COPY_TBS):
    """The two byte-floor tables of PERFORMANCE.md, timed at ``copy_tbs`` (read + write TB/s)."""
    a_rows = [[r["case"], f"{r['elements']:,}", f"{r['one_pass_bytes']:,}",
               _fmt_us(_us_at(r['one_pass_bytes'], copy_tbs)),
               f"{r['stages_bytes']:,}", _fmt_us(_us_at(r['stages_bytes'], copy_tbs))] for r in experiment_a_floors()]
    b_rows = [[r["case"], f"{r['elements']:,}", f"{r['tiles']:,}", f"{r['floor_bytes']:,}",
               _fmt_us(_us_at(r['floor_bytes'], copy_tbs)), f"{r['one_pass_bytes']:,}",
               _fmt_us(_us_at(r['one_pass_bytes'], copy_tbs))] for r in experiment_b_floors()]
    return "\n".join([
        f"Experiment A (time = bytes / {copy_tbs:g} TB/s copy bandwidth, read + write):",
        "",
        markdown_table(["case", "elements N", "fused / cuDNN floor 8N (B)", "us at copy BW",
                        "stages floor 24N + 16R (B)", "us at copy BW"], a_rows),
        "",
        f"Experiment B (separate, phased and dag share one floor; time at {copy_tbs:g} TB/s):",
        "",
        markdown_table(["case", "elements N", "tiles T", "A->B->C floor 12N + 16T + 16R (B)", "us at copy BW",
                        "one-pass bound 8N (B)", "us at copy BW"], b_rows),
    ])


def markdown_table(headers, rows):
    def cell(value):
        return str(value).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"markdown_table: row {row!r} has {len(row)} cells, expected {len(headers)}")
        lines.append("| " + " | ".join(cell(v) for v in row) + " |")
    return "\n".join(lines)


def _f(value, digits=2):
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(stats, digits=2):
    if not stats:
        return "-"
    return f"{stats['median']:.{digits}f} [{stats['p10']:.{digits}f}, {stats['p90']:.{digits}f}]"


def goals_table(goals):
    rows = [[g["goal"], g["status"], _f(g["value"], 3), _f(g["threshold"], 2), g["detail"]] for g in goals]
    return markdown_table(["goal", "status", "measured", "threshold", "numbers"], rows)


def render_markdown(report):
    """perf.md (and the printed report): ceilings, peers, launch path, notes, errors, goals last."""
    device = report.get("device") or {}
    lines = [f"# python -m bench perf: {device.get('name', 'unknown device')}", "",
             f"started {report.get('started_utc')}, finished {report.get('finished_utc')}; "
             f"command `{' '.join(['python -m bench perf', *report.get('argv', [])])}`; "
             f"commit {(report.get('git') or {}).get('commit')}", ""]
    protocol = report.get("protocol") or {}
    if protocol:
        lines += [f"Protocol: {protocol.get('rounds')} shuffled rounds (seed {protocol.get('seed')}) after "
                  f"max({WARMUPS}, sets) warm-ups per variant; one event-timed invocation per variant per round "
                  f"behind a delay kernel (device time; samples whose host enqueue window reached the delay are "
                  f"counted as starved); batch = {BATCH} back-to-back invocations; statistics: median "
                  f"[p10, p90]; ratios: median [p10, p90] of per-round ratios.", ""]

    lines += ["## 1. Ceilings (this run)", ""]
    ceiling = report.get("copy_ceiling") or {}
    floor = report.get("event_floor") or {}
    rows = []
    if ceiling.get("event_us"):
        gib = ceiling["bytes_per_copy"] / 2**30
        rows.append([f"device-to-device copy, {gib:g} GiB (cuMemcpyDtoDAsync, our stream)",
                     _spread(ceiling["event_us"]), f"{ceiling['bandwidth_tbs']:.3f} TB/s (read + write)"])
    elif ceiling.get("error"):
        rows.append(["device-to-device copy", "FAILED", ceiling["error"]])
    if floor.get("event_us"):
        rows.append(["CUDA event interval, nothing between (floor of every event figure, never subtracted)",
                     _spread(floor["event_us"], 3), ""])
    if rows:
        lines += [markdown_table(["ceiling", "us: median [p10, p90]", "bandwidth"], rows), ""]
    delay = report.get("delay_kernel") or {}
    if delay.get("us_per_iteration"):
        lines += [f"Delay kernel: {delay['us_per_iteration']:.3f} us per nanosleep({DELAY_NANOSLEEP_NS}) "
                  "iteration.", ""]

    lines += ["## 2. Peers", ""]
    for entry in report.get("shapes", []):
        analysis = entry.get("analysis") or {"variants": {}, "ratios": {}}
        lines += [f"### {entry['name']}", "",
                  f"logical bytes {entry['logical_bytes']:,} (2 x rows x cols x 4); {entry.get('input_sets')} input "
                  f"sets of {entry.get('set_bytes', 0) / 2**20:.1f} MiB (x + y) rotating; "
                  f"L2 {entry.get('l2_bytes', 0) / 2**20:.0f} MiB", ""]
        rows = []
        # The fixed variants, then the candidate geometries timed beside auto (``auto:<geometry>``).
        names = [*VARIANTS, *(n for n in entry.get("variants", {}) if n not in VARIANTS)]
        for name in names:
            info = entry.get("variants", {}).get(name)
            if info is None:
                continue
            stats = analysis["variants"].get(name)
            if stats is None:
                rows.append([name, info.get("status", "?"), "-", "-", "-", "-", "-", info.get("reason", "")])
                continue
            if name == FUSED:
                ratio_text = "1"
            elif name in COPIES:
                r = analysis["ratios"].get(f"{name}/{FUSED}")
                ratio_text = f"{name}/fused {_spread(r, 3)}" if r else "-"
            elif is_copy(name):  # a plain copy kernel: against the copy engine
                r = analysis["ratios"].get(f"{name}/copy")
                ratio_text = f"kernel/copy {_spread(r, 3)}" if r else "-"
            else:
                r = analysis["ratios"].get(f"{FUSED}/{name}")
                ratio_text = _spread(r, 3) if r else "-"
                auto_ratio = analysis["ratios"].get(f"auto/{name}")
                if auto_ratio:  # auto against this variant: the table's choice against the candidates and peers
                    ratio_text += f"; auto/{name} {_spread(auto_ratio, 3)}"
            starved = f"{stats['starved_samples']}/{stats['samples']}"
            if "batch_starved_samples" in stats:
                starved += f", batch {stats['batch_starved_samples']}/{stats['samples']}"
            rows.append([name, info.get("status"), _spread(stats["event_us"]),
                         f"{stats['bandwidth_tbs']:.3f}", _f(stats.get("fraction_of_copy_ceiling"), 3),
                         ratio_text, _spread(stats.get("batch_per_invocation_us")), starved])
        lines += [markdown_table(["variant", "status", "event us: median [p10, p90]", "logical TB/s",
                                  "of copy ceiling", "fused / variant (paired)", f"batch of {BATCH}: us per invocation",
                                  "starved samples"], rows), ""]
        for name in names:
            info = entry.get("variants", {}).get(name) or {}
            if info.get("call"):
                lines.append(f"- {name}: {info['call']}")
        lines.append("")

    lines += ["## 3. Launch path", ""]
    launch = report.get("launch") or {}
    comparison = launch.get("comparison")
    python_only = launch.get("python")
    if comparison:
        rows = [[m, _spread(c["python"]), _spread(c["cpp"]), _spread(c["ratio"], 3)] for m, c in comparison.items()]
        lines += [markdown_table(["metric (us)", "our harness (Invocation / CapturedGraph)",
                                  "C++ launch_timer (cuLaunchKernel / cuGraphLaunch)",
                                  "ratio ours / C++ (per-alternation ratios of medians, "
                                  f"n={len(launch.get('python_blocks', []))})"],
                                 rows), ""]
    elif python_only:
        rows = [[m, _spread(s)] for m, s in python_only.items()]
        lines += [markdown_table(["metric (us)", "our harness"], rows), ""]
    for key in ("cpp_skipped", "error"):
        if launch.get(key):
            lines += [f"**{key.replace('_', ' ')}:** {launch[key]}", ""]
    if launch.get("build"):
        lines += [f"launch_timer built with: `{' '.join(launch['build']['command'])}`", ""]
    completion = report.get("graph_completion") or {}
    if completion.get("ratio"):
        lines += [markdown_table(
            ["(1,128) graph replay, host completion (enqueue + synchronize)", "us: median [p10, p90]"],
            [["fused (1,128) graph", _spread(completion["fused"])],
             ["empty-kernel graph", _spread(completion["empty"])],
             ["paired ratio fused / empty", _spread(completion["ratio"], 3)]]), ""]
    elif completion.get("error"):
        lines += [f"**(1,128) graph completion failed:** {completion['error']}", ""]

    if report.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in report["notes"]] + [""]
    if report.get("errors"):
        lines += ["## Errors", ""] + [f"- {e}" for e in report["errors"]] + [""]
    lines += ["## Goals", "", goals_table(report.get("goals") or evaluate_goals(report)), ""]
    return "\n".join(lines)


def jsonable(value):
    """Make ``value`` strict JSON (non-finite floats become strings, numpy scalars Python numbers)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)
