"""How ``python -m bench perf --sweep widths`` reports (pure; tested on the CPU): the goals, sweep.md, sweep.png.

Goals, per element type, over the 256 MiB problems (each MET, MISSED or NOT MEASURED, the worst case named):

* G1: ``auto`` <= 1.00x torch at every width (median of the paired per-round ratios auto / torch);
* G2: ``auto`` <= 1.03x Triton at the median width (the median over widths of the per-width ratios) and
  <= 1.10x at the worst width where Triton runs;
* G3: ``auto`` >= 0.85 (float32) / 0.80 (bfloat16) of a same-size copy at every width (per-round copy / auto);
* G4: every width >= 64 that is not a multiple of 8 within 1.05x of its nearest multiple of 8, per element
  (``auto``'s median time per element at the width over that at the neighbour).

The other operations (:mod:`bench.perf.sweep_ops`), per element type:

* log_softmax: L1 ``auto`` <= 1.00x torch's ``_log_softmax`` at every width; L3 ``auto`` >= the copy fraction of G3;
* softmax_backward, log_softmax_backward: B1 ``auto`` <= 1.00x torch's backward at every width; B2 (float32)
  ``auto`` >= 0.85 of a same-size copy (three arrays) at every width;
* softmax_train: B3 the operator (``ops``: ``numba_softmax.torch.softmax`` forward and backward through autograd)
  faster than Liger-Kernel's at every width where Liger runs (``ops / liger`` < 1), and timed at every width;
  B4 the same function under ``torch.compile`` within 1.02x of eager (``ops_compiled / ops``).
"""

import json
import os
import statistics
import traceback

from bench.perf.peers import AUTO, AUTO_CANDIDATE_PREFIX, COPY, TORCH, TRITON
from bench.perf.render import jsonable, markdown_table
from bench.perf.sweep_ops import (BACKWARDS, LIGER, LOG_SOFTMAX, OPERATIONS, OPS_COMPILED, OPS_EAGER, SOFTMAX,
                                  ratio_pairs)
from numba_softmax.cases import nearest_multiple_of_8

G1_TORCH = 1.00
G2_TRITON_MEDIAN, G2_TRITON_WORST = 1.03, 1.10
G3_COPY = {"float32": 0.85, "bfloat16": 0.80}
G4_NEIGHBOUR, G4_MIN_WIDTH = 1.05, 64
B1_TORCH, B2_COPY, B3_LIGER, B4_COMPILED = 1.00, {"float32": 0.85}, 1.00, 1.02
MET, MISSED, NOT_MEASURED = "MET", "MISSED", "NOT MEASURED"
PLOT_DPI = 100


def read_report(out_dir):
    """``out_dir``/sweep.json, or None where there is none."""
    path = os.path.join(out_dir, "sweep.json")
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def op_of(entry):
    """A problem's operation (entries written before there were others are the softmax's)."""
    return entry.get("op", SOFTMAX)


def report_ops(report):
    """The operations of a report, in :data:`~bench.perf.sweep_ops.OPERATIONS` order."""
    found = {op_of(e) for e in report.get("problems", [])} | set((report.get("protocol") or {}).get("ops") or ())
    return [op for op in OPERATIONS if op in found] or [SOFTMAX]


def large_problems(report, dtype, op=SOFTMAX):
    """The 256 MiB problems of one operation and element type, by width."""
    return sorted((e for e in report.get("problems", []) if e.get("dtype") == dtype and not e.get("small")
                   and op_of(e) == op), key=lambda e: e["width"])


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
    """The goals table: per operation and element type (see the module's docstring)."""
    goals = []
    dtypes = (report.get("protocol") or {}).get("dtypes") or sorted({e["dtype"] for e in report.get("problems", [])})
    for op in report_ops(report):
        for dtype in dtypes:
            entries = large_problems(report, dtype, op)
            if op == SOFTMAX:
                goals += _softmax_goals(entries, dtype)
            elif op == LOG_SOFTMAX:
                goals += _log_softmax_goals(entries, dtype)
            elif op in BACKWARDS:
                goals += _backward_goals(entries, dtype, op)
            else:
                goals += _train_goals(entries, dtype)
    return goals


def _log_softmax_goals(entries, dtype):
    values, missing = _ratio_values(entries, f"{AUTO}/{TORCH}")
    goals = [_bound_goal(f"L1 log_softmax auto <= {G1_TORCH:.2f}x torch at every width", dtype, values, G1_TORCH,
                         True, missing)]
    values, missing = _ratio_values(entries, f"{COPY}/{AUTO}")
    return goals + [_bound_goal(f"L3 log_softmax auto >= {G3_COPY[dtype]:.2f} of a same-size copy at every width",
                                dtype, values, G3_COPY[dtype], False, missing)]


def _backward_goals(entries, dtype, op):
    values, missing = _ratio_values(entries, f"{AUTO}/{TORCH}")
    goals = [_bound_goal(f"B1 {op} auto <= {B1_TORCH:.2f}x torch at every width", dtype, values, B1_TORCH, True,
                         missing)]
    if dtype in B2_COPY:
        values, missing = _ratio_values(entries, f"{COPY}/{AUTO}")
        goals.append(_bound_goal(f"B2 {op} auto >= {B2_COPY[dtype]:.2f} of a same-size copy (three arrays) at every "
                                 "width", dtype, values, B2_COPY[dtype], False, missing))
    return goals


def _train_goals(entries, dtype):
    values, missing = _ratio_values(entries, f"{OPS_EAGER}/{LIGER}")
    untimed = [e["width"] for e in entries if not _stats(e, OPS_EAGER)]
    goal = _bound_goal(f"B3 softmax forward + backward (operator, autograd) < {B3_LIGER:.2f}x Liger where it runs, "
                       "and runs at every width", dtype, values, B3_LIGER, True, missing and "Liger " + missing)
    if untimed:
        goal["status"], goal["detail"] = MISSED, goal["detail"] + f"; the operator not timed at {untimed}"
    values, missing = _ratio_values(entries, f"{OPS_COMPILED}/{OPS_EAGER}")
    return [goal, _bound_goal(f"B4 torch.compile of the operator within {B4_COMPILED:.2f}x of eager", dtype, values,
                              B4_COMPILED, True, missing)]


def _softmax_goals(entries, dtype):
    goals = []
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


def table_ratios(op):
    """The ratio columns of an operation's tables: (ratio key of the analysis, column title)."""
    variants = OPERATIONS[op].variants
    pairs = ratio_pairs(op, variants)
    return [(f"{a}/{b}", f"{a}/{b}" + (" (of copy)" if a == COPY else "")) for a, b in pairs]


def problems_table(entries, op=SOFTMAX):
    variants, ratios = OPERATIONS[op].variants, table_ratios(op)
    headers = ["width", "rows"] + [f"{name} us [p10, p90] · GB/s" for name in variants] + [t for _, t in ratios]
    rows = [[e["width"], e["rows"]] + [_cell(e, name) for name in variants] + [_ratio_cell(e, k) for k, _ in ratios]
            for e in entries]
    return markdown_table(headers, rows)


def candidates_table(report):
    """auto against each candidate geometry timed beside it (``--auto-geometries``), per problem; "" without any."""
    rows = []
    order = report_ops(report)
    for entry in sorted(report.get("problems", []),
                        key=lambda e: (order.index(op_of(e)), e["dtype"], e["width"], e["rows"])):
        for name in ((entry.get("analysis") or {}).get("variants") or {}):
            if name.startswith(AUTO_CANDIDATE_PREFIX):
                geometry = ((entry.get("variants") or {}).get(AUTO) or {}).get("geometry", "-")
                rows.append([op_of(entry), entry["dtype"], entry["width"], entry["rows"], geometry, _cell(entry, AUTO),
                             name.removeprefix(AUTO_CANDIDATE_PREFIX), _cell(entry, name),
                             _ratio_cell(entry, f"{AUTO}/{name}")])
    if not rows:
        return ""
    return markdown_table(["operation", "dtype", "width", "rows", "auto's geometry", "auto us [p10, p90] · GB/s",
                           "candidate", "candidate us [p10, p90] · GB/s", "auto/candidate"], rows)


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
             f"Protocol: each problem moves {(protocol.get('problem_bytes') or 0) / 2**20:.0f} MiB (each array the "
             f"operation reads or writes, once), inputs rotating among sets against L2; {protocol.get('rounds')} "
             f"shuffled rounds (seed {protocol.get('seed')} + problem index) after "
             f"max({protocol.get('warmups')}, sets) warm-ups per variant; each sample one invocation's device time "
             "behind a delay kernel; every variant checked before timing. Cells: median [p10, p90] us · GB/s "
             "(bytes moved / median); ratios: median [p10, p90] of the paired per-round ratios; copy/auto is "
             "auto's fraction of the same-size copy "
             "(cuMemcpyDtoDAsync moving the same bytes).", "",
             "## Goals", "",
             markdown_table(["goal", "dtype", "status", "measured", "threshold", "worst case and numbers"],
                            [[g["goal"], g["dtype"], g["status"], "-" if g["value"] is None else f"{g['value']:.3f}",
                              f"{g['threshold']:.2f}", g["detail"]] for g in goals]), ""]
    for op, dtype in panels(report):
        entries = large_problems(report, dtype, op)
        small = sorted((e for e in report.get("problems", []) if e.get("dtype") == dtype and e.get("small")
                        and op_of(e) == op), key=lambda e: (e["width"], e["rows"]))
        title = dtype if op == SOFTMAX else f"{op}, {dtype}"
        lines += [f"## {title}: 256 MiB problems", "", problems_table(entries, op), ""]
        if small:
            lines += [f"## {title}: small problems (latency)", "", problems_table(small, op), ""]
    candidates = candidates_table(report)
    if candidates:
        lines += ["## auto's candidate geometries (`--auto-geometries`)", "",
                  "auto/candidate above 1: the candidate was faster (docs/auto_kernels.md, choosing after a GPU run).",
                  "", candidates, ""]
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


def panels(report):
    """``[(op, dtype)]`` of the report's 256 MiB problems and small ones, operations in order, float32 first."""
    found = {(op_of(e), e["dtype"]) for e in report.get("problems", [])}
    return [(op, dtype) for op in report_ops(report)
            for dtype in sorted({d for o, d in found if o == op}, key=lambda d: d != "float32")]


def sweep_figure(report):
    """Bandwidth (GB/s, bytes moved / median time) against width, log-x, per variant, a panel per operation (rows)
    and element type (columns) of the 256 MiB problems; the same-size copy as a black line."""
    from matplotlib import ticker
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from bench.plots import PALETTE
    shown = [(op, dtype) for op, dtype in panels(report) if large_problems(report, dtype, op)]
    ops = list(dict.fromkeys(op for op, _ in shown)) or [SOFTMAX]
    dtypes = sorted({dtype for _, dtype in shown}, key=lambda d: d != "float32") or ["float32"]
    fig = Figure(figsize=(6.5 * len(dtypes), 3.6 * len(ops) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.subplots(len(ops), len(dtypes), squeeze=False)
    for row in grid:
        for ax in row:
            ax.set_visible(False)
    for op, dtype in shown:
        ax = grid[ops.index(op)][dtypes.index(dtype)]
        ax.set_visible(True)
        entries = large_problems(report, dtype, op)
        for index, name in enumerate(OPERATIONS[op].variants):
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
        ax.set_ylabel("GB/s (bytes moved / median), log")
        ax.set_title(f"{op}, {dtype}: every problem moves 256 MiB", fontsize=10)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"bandwidth against width ({(report.get('device') or {}).get('name', '')}); higher is "
                 "better, copy = cuMemcpyDtoDAsync of the same bytes", fontsize=10)
    return fig


def write_outputs(out_dir, report, plot):
    """sweep.json (strict JSON, written atomically), sweep.md and, with ``plot``, sweep.png; returns the
    markdown. A bug in the goals or the rendering still leaves sweep.json (with the traceback); a plot that
    cannot be drawn (no matplotlib) is said so in sweep.md."""
    from bench.plots import matplotlib_available, png_bytes
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
            with open(os.path.join(out_dir, "sweep.png"), "wb") as handle:
                handle.write(png_bytes(sweep_figure(report), dpi=PLOT_DPI))
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
