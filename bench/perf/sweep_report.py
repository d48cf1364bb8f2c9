"""How ``python -m bench perf --sweep widths`` reports (pure; tested on the CPU): the goals, sweep.md, sweep.png.

Goals, per element type, over the 256 MiB problems (each MET, MISSED or NOT MEASURED, the worst case named):

* G1: ``auto`` <= 1.00x torch at every width (median of the paired per-round ratios auto / torch);
* G2: ``auto`` <= 1.03x Triton at the median width (the median over widths of the per-width ratios) and
  <= 1.10x at the worst width where Triton runs;
* G3: ``auto`` >= 0.85 (float32) / 0.80 (bfloat16) of a same-size copy at every width (per-round copy / auto);
* G4: every width >= 64 that is not a multiple of 8 within 1.05x of its nearest multiple of 8, per element
  (``auto``'s median time per element at the width over that at the neighbour).
"""

import json
import os
import statistics
import traceback

from bench.perf.peers import AUTO, COPY, CUDNN, TORCH, TRITON
from bench.perf.render import jsonable, markdown_table
from numba_softmax.cases import nearest_multiple_of_8

LIGER = "liger"
VARIANTS = (AUTO, TORCH, TRITON, LIGER, CUDNN, COPY)
#: The ratios of each row of the tables: (ratio key of the analysis, column title).
RATIOS = ((f"{AUTO}/{TORCH}", "auto/torch"), (f"{AUTO}/{TRITON}", "auto/triton"), (f"{AUTO}/{LIGER}", "auto/liger"),
          (f"{AUTO}/{CUDNN}", "auto/cudnn"), (f"{COPY}/{AUTO}", "copy/auto (of copy)"))
G1_TORCH = 1.00
G2_TRITON_MEDIAN, G2_TRITON_WORST = 1.03, 1.10
G3_COPY = {"float32": 0.85, "bfloat16": 0.80}
G4_NEIGHBOUR, G4_MIN_WIDTH = 1.05, 64
MET, MISSED, NOT_MEASURED = "MET", "MISSED", "NOT MEASURED"
PLOT_DPI = 100


def read_report(out_dir):
    """``out_dir``/sweep.json, or None where there is none."""
    path = os.path.join(out_dir, "sweep.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def large_problems(report, dtype):
    """The 256 MiB problems of one element type, by width."""
    return sorted((e for e in report.get("problems", []) if e.get("dtype") == dtype and not e.get("small")),
                  key=lambda e: e["width"])


def _ratio(entry, key):
    return ((entry.get("analysis") or {}).get("ratios") or {}).get(key)


def _stats(entry, name):
    return ((entry.get("analysis") or {}).get("variants") or {}).get(name)


def _goal(goal, dtype, status, value, threshold, detail):
    return {"goal": goal, "dtype": dtype, "status": status, "value": value, "threshold": threshold, "detail": detail}


def _bound_goal(goal, dtype, values, threshold, worst_is_max, missing):
    """values: [(width, rows, value)]; MET when every value is on the right side of ``threshold``."""
    if not values:
        return _goal(goal, dtype, NOT_MEASURED, None, threshold, missing or "no width measured")
    pick = max if worst_is_max else min
    width, rows, worst = pick(values, key=lambda v: v[2])
    beyond = [v for v in values if (v[2] > threshold if worst_is_max else v[2] < threshold)]
    detail = (f"worst {worst:.3f} at width {width} ({rows} rows); {len(beyond)} of {len(values)} widths beyond "
              f"{threshold:.2f}" + (f" ({', '.join(str(v[0]) for v in beyond[:12])})" if beyond else "")
              + (f"; {missing}" if missing else ""))
    return _goal(goal, dtype, MISSED if beyond else MET, worst, threshold, detail)


def _ratio_values(entries, key):
    values, missing = [], []
    for entry in entries:
        ratio = _ratio(entry, key)
        if ratio is None:
            missing.append(entry["width"])
        else:
            values.append((entry["width"], entry["rows"], ratio["median"]))
    return values, (f"not measured at {len(missing)} widths ({', '.join(map(str, missing[:12]))})"
                    if missing else "")


def neighbour_ratios(entries):
    """[(width, rows, ratio, neighbour)]: auto's median time per element at each width >= G4_MIN_WIDTH that is not
    a multiple of 8 over that at its nearest multiple of 8; and the widths whose neighbour has no auto timing."""
    per_element = {e["width"]: _stats(e, AUTO)["event_us"]["median"] / (e["rows"] * e["width"])
                   for e in entries if _stats(e, AUTO)}
    values, missing = [], []
    for entry in entries:
        width = entry["width"]
        if width < G4_MIN_WIDTH or width % 8 == 0:
            continue
        neighbour = nearest_multiple_of_8(width)
        if width in per_element and neighbour in per_element:
            values.append((width, entry["rows"], per_element[width] / per_element[neighbour], neighbour))
        else:
            missing.append(width)
    return values, missing


def evaluate_sweep_goals(report):
    """The goals table: per element type G1, G2 (median, worst), G3, G4 (see the module's docstring)."""
    goals = []
    dtypes = (report.get("protocol") or {}).get("dtypes") or sorted({e["dtype"] for e in report.get("problems", [])})
    for dtype in dtypes:
        entries = large_problems(report, dtype)
        values, missing = _ratio_values(entries, f"{AUTO}/{TORCH}")
        goals.append(_bound_goal(f"G1 auto <= {G1_TORCH:.2f}x torch at every width", dtype, values, G1_TORCH,
                                 True, missing))
        values, missing = _ratio_values(entries, f"{AUTO}/{TRITON}")
        label = f"G2 auto <= {G2_TRITON_MEDIAN:.2f}x Triton at the median width"
        if values:
            median = statistics.median(v[2] for v in values)
            goals.append(_goal(label, dtype, MET if median <= G2_TRITON_MEDIAN else MISSED, median,
                               G2_TRITON_MEDIAN, f"median of the per-width ratios over the {len(values)} widths "
                                                 f"where Triton runs" + (f"; {missing}" if missing else "")))
        else:
            goals.append(_goal(label, dtype, NOT_MEASURED, None, G2_TRITON_MEDIAN, missing or "no width measured"))
        goals.append(_bound_goal(f"G2 auto <= {G2_TRITON_WORST:.2f}x Triton at the worst width", dtype, values,
                                 G2_TRITON_WORST, True, missing))
        values, missing = _ratio_values(entries, f"{COPY}/{AUTO}")
        threshold = G3_COPY[dtype]
        goals.append(_bound_goal(f"G3 auto >= {threshold:.2f} of a same-size copy at every width", dtype, values,
                                 threshold, False, missing))
        values, missing = neighbour_ratios(entries)
        goal = _bound_goal(f"G4 widths >= {G4_MIN_WIDTH} not a multiple of 8 within {G4_NEIGHBOUR:.2f}x per element "
                           "of the nearest multiple of 8", dtype, [v[:3] for v in values], G4_NEIGHBOUR, True,
                           f"no neighbour timing for {missing}" if missing else "")
        if values:
            worst = max(values, key=lambda v: v[2])
            goal["detail"] += f" (against {worst[3]})"
        goals.append(goal)
    return goals


def _cell(entry, name):
    info = (entry.get("variants") or {}).get(name)
    stats = _stats(entry, name)
    if stats:
        us = stats["event_us"]
        return f"{us['median']:.2f} [{us['p10']:.2f}, {us['p90']:.2f}] · {1000 * stats['bandwidth_tbs']:.0f}"
    if info is None:
        return "-"
    return {"skipped": "skipped", "failed check": "FAILED"}.get(info.get("status"), str(info.get("status")))


def _ratio_cell(entry, key):
    ratio = _ratio(entry, key)
    return "-" if ratio is None else f"{ratio['median']:.3f} [{ratio['p10']:.3f}, {ratio['p90']:.3f}]"


def problems_table(entries):
    headers = ["width", "rows"] + [f"{name} us [p10, p90] · GB/s" for name in VARIANTS] + [t for _, t in RATIOS]
    rows = [[e["width"], e["rows"]] + [_cell(e, name) for name in VARIANTS] + [_ratio_cell(e, k) for k, _ in RATIOS]
            for e in entries]
    return markdown_table(headers, rows)


def _absent(entries):
    """Lines naming each variant skipped or failed at a problem, with the reason."""
    lines = []
    for entry in entries:
        if entry.get("error"):
            lines.append(f"- {entry['name']}: FAILED: {entry['error']}")
        for name, info in (entry.get("variants") or {}).items():
            if info.get("status") != "timed":
                lines.append(f"- {entry['name']}: {name} {info.get('status')}: {info.get('reason', '')}")
    return lines


def render_sweep(report):
    """sweep.md: goals first, then a table per element type (256 MiB problems, then the small ones)."""
    device = report.get("device") or {}
    protocol = report.get("protocol") or {}
    goals = report.get("goals") or evaluate_sweep_goals(report)
    lines = [f"# python -m bench perf --sweep widths: {device.get('name', 'unknown device')}", "",
             f"started {report.get('started_utc')}, finished {report.get('finished_utc')}; command "
             f"`{' '.join(['python -m bench perf', *report.get('argv', [])])}`; commit "
             f"{(report.get('git') or {}).get('commit')}; estimate {report.get('estimate_s') or 0:.0f} s", "",
             f"Protocol: each problem moves {(protocol.get('problem_bytes') or 0) / 2**20:.0f} MiB (input read once, "
             f"output written once), inputs rotating among sets against L2; {protocol.get('rounds')} shuffled rounds "
             f"(seed {protocol.get('seed')} + problem index) after max({protocol.get('warmups')}, sets) warm-ups per "
             "variant; each sample one invocation's device time behind a delay kernel; every variant checked "
             "before timing. Cells: median [p10, p90] us · GB/s (bytes moved / median); ratios: median "
             "[p10, p90] of the paired per-round ratios; copy/auto is auto's fraction of the same-size copy.", "",
             "## Goals", "",
             markdown_table(["goal", "dtype", "status", "measured", "threshold", "worst case and numbers"],
                            [[g["goal"], g["dtype"], g["status"], "-" if g["value"] is None else f"{g['value']:.3f}",
                              f"{g['threshold']:.2f}", g["detail"]] for g in goals]), ""]
    for dtype in sorted({e["dtype"] for e in report.get("problems", [])}, key=lambda d: d != "float32"):
        entries = large_problems(report, dtype)
        small = sorted((e for e in report.get("problems", []) if e.get("dtype") == dtype and e.get("small")),
                       key=lambda e: (e["width"], e["rows"]))
        lines += [f"## {dtype}: 256 MiB problems", "", problems_table(entries), ""]
        if small:
            lines += [f"## {dtype}: small problems (latency)", "", problems_table(small), ""]
    calls = {}
    for entry in report.get("problems", []):
        for name, info in (entry.get("variants") or {}).items():
            if info.get("call") and name not in calls:
                calls[name] = f"{info['call']} (at {entry['name']})"
    lines += ["## Variants", ""] + [f"- {name}: {call}" for name, call in calls.items()] + [""]
    absent = _absent(report.get("problems", []))
    if absent:
        lines += ["## Not timed", ""] + absent + [""]
    if report.get("not_run"):
        lines += ["## Not run (time budget)", "", ", ".join(report["not_run"]), ""]
    for key, title in (("notes", "Notes"), ("errors", "Errors")):
        if report.get(key):
            lines += [f"## {title}", ""] + [f"- {n}" for n in report[key]] + [""]
    return "\n".join(lines)


def sweep_figure(report):
    """Bandwidth (GB/s, bytes moved / median time) against width, log-x, per variant, a panel per element type
    (256 MiB problems); the same-size copy as a black line."""
    from matplotlib import ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from bench.plots import PALETTE
    dtypes = sorted({e["dtype"] for e in report.get("problems", []) if not e.get("small")},
                    key=lambda d: d != "float32")
    fig = Figure(figsize=(10, 3.8 * max(1, len(dtypes)) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(max(1, len(dtypes)), 1, squeeze=False)[:, 0]
    for ax, dtype in zip(axes, dtypes, strict=False):
        entries = large_problems(report, dtype)
        for index, name in enumerate(VARIANTS):
            points = [(e["width"], 1000 * _stats(e, name)["bandwidth_tbs"]) for e in entries if _stats(e, name)]
            if not points:
                continue
            style = ({"color": "black", "linewidth": 1.6} if name == COPY else
                     {"color": PALETTE[index % len(PALETTE)], "marker": "o", "markersize": 3.5, "linewidth": 0.9})
            ax.plot(*zip(*points, strict=True), label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
            axis(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("width (columns per row), log scale")
        ax.set_ylabel("GB/s (input + output bytes / median time), log")
        ax.set_title(f"{dtype}: every problem moves 256 MiB", fontsize=10)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"softmax bandwidth against width ({(report.get('device') or {}).get('name', '')}); higher is "
                 "better, copy = cuMemcpyDtoDAsync of the same bytes", fontsize=10)
    return fig


def write_outputs(out_dir, report, plot):
    """sweep.json (strict JSON, written atomically), sweep.md and, with ``plot``, sweep.png; returns the
    markdown. A bug in the goals or the rendering still leaves sweep.json (with the traceback); a plot that
    cannot be drawn (no matplotlib) is said so in sweep.md."""
    from bench.plots import matplotlib_available
    try:
        report = dict(report, goals=evaluate_sweep_goals(report))
        markdown = render_sweep(report)
    except Exception:
        failure = traceback.format_exc()
        report = dict(report, report_failure=failure)
        markdown = f"# python -m bench perf --sweep widths\n\nrendering the report FAILED:\n\n```\n{failure}```\n"
    if plot and report.get("problems"):
        try:
            reason = matplotlib_available()
            if reason:
                raise ImportError(reason)
            sweep_figure(report).savefig(os.path.join(out_dir, "sweep.png"), format="png", dpi=PLOT_DPI,
                                         metadata={"Software": None})
        except Exception as exc:
            report = dict(report, plot_failure=traceback.format_exc())
            markdown += (f"\nsweep.png was not drawn ({type(exc).__name__}: {exc}); `python -m bench perf --sweep "
                         "widths --report-only --out DIR` draws it from sweep.json.\n")
    tmp = os.path.join(out_dir, "sweep.json.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(jsonable(report), handle, allow_nan=False, separators=(",", ":"))
    os.replace(tmp, os.path.join(out_dir, "sweep.json"))
    with open(os.path.join(out_dir, "sweep.md"), "w", encoding="utf-8") as handle:
        handle.write(markdown)
    return markdown
