"""Plots of a run, built from its artifacts alone (timings.jsonl + metadata.json).

Drawn by :func:`render_plots` and written to ``<run>/plots/*.png`` by
:func:`bench.report.write_summary`, which links them from summary.md. matplotlib is optional
(``pip install -e ".[plots]"``): without it :func:`render_plots` returns a reason and the
summary says the plots were skipped.

Per experiment (X = A or B):

* ``X_gbps.png`` (Experiment A): achieved logical GB/s (logical bytes / CUDA-event
  time) per shape, per variant and mode;
* ``X_latency.png``: CUDA-event time and host completion time per invocation, per case,
  variant and mode;
* ``X_ratios.png``: paired per-round ratios variant / reference (the run's
  ``ratio_reference``); 1 = as fast as the reference.

Each point is the median over the rounds, its whisker spans p10 to p90 (log scales, so
values decades apart stay readable). Colour = variant, marker = submission mode. Every
figure carries its own title, axis labels with units and a legend.
"""

from __future__ import annotations

import io

import numpy as np

from bench.protocol import MODES
from bench.stats import paired_ratios, summarize

BASELINE_METRIC = "sync_baseline_us"
LATENCY_METRICS = (("event_us", "CUDA-event time per invocation"),
                   ("host_completion_us", "host completion time of one invocation"))
#: Colour per variant (stable across plots; unknown variants get the next free colour).
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
MODE_STYLE = {"stream": {"marker": "o", "fill": True}, "graph": {"marker": "s", "fill": False}}
DPI = 110
#: Colours of the palette each PNG is reduced to (:func:`png_bytes`).
PNG_COLORS = 64


def matplotlib_available() -> str | None:
    """None when matplotlib can be used; otherwise why not."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
        from matplotlib.figure import Figure  # noqa: F401
    except ImportError as exc:
        return f"matplotlib is not installed ({exc}); install the 'plots' extra: pip install -e \".[plots]\""
    return None


def png_bytes(fig, dpi=DPI, colors=PNG_COLORS):
    """The figure as PNG bytes with its colours reduced to an adaptive palette of ``colors`` (line and marker
    plots on white: no visible change, about a third of the bytes). Deterministic: the same figure, the same bytes."""
    from PIL import Image
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB").quantize(colors=colors)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def render_plots(timings, metadata) -> tuple[list[tuple[str, str, bytes]], str | None]:
    """Draw every plot; return ([(title, path relative to the run, PNG bytes)], skipped reason or None).

    Nothing is written here: the report decides where the files go and whether it may replace them.
    """
    reason = matplotlib_available()
    if reason:
        return [], reason
    measured = [m for m in timings if m.metric != BASELINE_METRIC]
    if not measured:
        return [], "no timings in this run"
    rendered = []
    for experiment in _ordered({m.experiment for m in measured}, [m.experiment for m in measured]):
        records = [m for m in measured if m.experiment == experiment]
        reference = ((metadata or {}).get("ratio_reference") or {}).get(experiment)
        figures = []
        if experiment == "A" and any(m.bytes_moved for m in records):
            figures.append(("gbps", _gbps_figure(experiment, records)))
        figures.append(("latency", _latency_figure(experiment, records)))
        if reference is not None:
            figures.append(("ratios", _ratio_figure(experiment, records, reference)))
        for kind, (title, fig) in figures:
            rendered.append((title, f"plots/{experiment}_{kind}.png", png_bytes(fig)))
    return rendered, None


# ---------------------------------------------------------------- data

def _ordered(values, appearance):
    seen = []
    for v in appearance:
        if v in values and v not in seen:
            seen.append(v)
    return seen


def _layout(records):
    cases = _ordered({m.case for m in records}, [m.case for m in records])
    variants = sorted({m.variant for m in records})
    modes = [mode for mode in MODES if any(m.mode == mode for m in records)]
    return cases, variants, modes


def _stats(records, case, variant, mode, metric, transform=None):
    values = [m.per_invocation_us for m in records
              if (m.case, m.variant, m.mode, m.metric) == (case, variant, mode, metric)]
    if not values:
        return None
    if transform is not None:
        values = [transform(v) for v in values]
    return summarize(values)


def _ratio_stats(records, case, variant, reference, mode, metric):
    by_round = {}
    for m in records:
        if m.case == case and m.mode == mode and m.metric == metric:
            by_round.setdefault((str(m.fixture), m.round), {})[m.variant] = m.per_invocation_us
    rounds = [by_round[k] for k in sorted(by_round)]
    if not any(variant in r and reference in r for r in rounds):
        return None
    return paired_ratios(rounds, variant, reference, metric)


# ---------------------------------------------------------------- drawing

def _figure(rows, width):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 3.6 * rows + 0.9), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 1, squeeze=False)[:, 0]
    return fig, axes


def _colors(variants):
    return {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(variants)}


def _grouped_points(ax, cases, series):
    """series: [(label, color, style, [stats or None per case])]: median marker, p10-p90 whisker, log y."""
    from matplotlib import ticker

    n = max(len(series), 1)
    step = 0.8 / n
    x = np.arange(len(cases))
    for i, (label, color, style, stats) in enumerate(series):
        offsets = x - 0.4 + step * (i + 0.5)
        present = [(o, s) for o, s in zip(offsets, stats, strict=True) if s is not None]
        if not present:
            continue
        pos = [o for o, _ in present]
        med = np.array([s["median"] for _, s in present])
        low = np.maximum(med - np.array([s["p10"] for _, s in present]), 0)
        high = np.maximum(np.array([s["p90"] for _, s in present]) - med, 0)
        ax.errorbar(pos, med, yerr=[low, high], fmt=style["marker"], color=color, ecolor=color, elinewidth=1.2,
                    capsize=3, markersize=6, markerfacecolor=color if style["fill"] else "white",
                    markeredgewidth=1.5, linestyle="none", label=label)
    ax.set_xticks(x, cases)
    for edge in x[:-1] + 0.5:  # separate the cases
        ax.axvline(edge, color="0.85", linewidth=0.8)
    ax.set_xlim(-0.5, len(cases) - 0.5)
    ax.set_yscale("log")
    plain = ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(ticker.FuncFormatter(
        lambda v, _: f"{v:g}" if f"{v:.1e}"[0] in "25" else ""))
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.set_axisbelow(True)


def _legend(ax, title):
    ax.legend(title=title, fontsize=8, title_fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)


def _case_axis_label(experiment):
    return "shape (rows x columns)" if experiment == "A" else "case (row distribution - rows)"


def _gbps_figure(experiment, records):
    cases, variants, modes = _layout(records)
    bytes_by_case = {m.case: m.bytes_moved for m in records if m.bytes_moved}
    colors = _colors(variants)
    fig, axes = _figure(1, max(8.0, 1.5 * len(cases) + 3))
    ax = axes[0]
    series = []
    for variant in variants:
        for mode in modes:
            stats = []
            for case in cases:
                nbytes = bytes_by_case.get(case)
                stats.append(None if not nbytes else _stats(
                    records, case, variant, mode, "event_us", lambda us, b=nbytes: b / (us * 1e-6) / 1e9))
            series.append((f"{variant} / {mode}", colors[variant], MODE_STYLE[mode], stats))
    _grouped_points(ax, cases, series)
    ax.set_xlabel(_case_axis_label(experiment))
    ax.set_ylabel("achieved logical GB/s, log scale\n(input + output bytes / CUDA-event time)")
    _legend(ax, "variant / mode")
    title = f"Experiment {experiment}: achieved logical bandwidth per shape (point: median, whisker: p10-p90)"
    fig.suptitle(title + "\nlogical bytes, not measured DRAM traffic; higher is better", fontsize=10)
    return title, fig


def _latency_figure(experiment, records):
    cases, variants, modes = _layout(records)
    colors = _colors(variants)
    fig, axes = _figure(len(LATENCY_METRICS), max(8.0, 1.6 * len(cases) + 3))
    for ax, (metric, label) in zip(axes, LATENCY_METRICS, strict=True):
        series = [(f"{variant} / {mode}", colors[variant], MODE_STYLE[mode],
                   [_stats(records, case, variant, mode, metric) for case in cases])
                  for variant in variants for mode in modes]
        _grouped_points(ax, cases, series)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel(_case_axis_label(experiment))
        ax.set_ylabel(f"{metric} per invocation\n(microseconds, log scale)")
        _legend(ax, "variant / mode")
    what = "latency" if experiment == "A" else "time per scheduler"
    title = f"Experiment {experiment}: {what} per invocation (point: median over rounds, whisker: p10-p90)"
    fig.suptitle(title + "\nlower is better", fontsize=10)
    return title, fig


def _ratio_figure(experiment, records, reference):
    cases, variants, modes = _layout(records)
    others = [v for v in variants if v != reference]
    colors = _colors(variants)
    fig, axes = _figure(len(LATENCY_METRICS), max(8.0, 1.5 * len(cases) + 3))
    for ax, (metric, label) in zip(axes, LATENCY_METRICS, strict=True):
        series = [(f"{variant} / {mode}", colors[variant], MODE_STYLE[mode],
                   [_ratio_stats(records, case, variant, reference, mode, metric) for case in cases])
                  for variant in others for mode in modes]
        _grouped_points(ax, cases, series)
        ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", label=f"= {reference}")
        ax.set_title(f"{label}: paired per-round ratio variant / {reference}", fontsize=10)
        ax.set_xlabel(_case_axis_label(experiment))
        ax.set_ylabel(f"variant time / {reference} time\n(log scale; > 1: slower than {reference})")
        _legend(ax, f"variant / mode\n(vs {reference} in the same mode)")
    title = (f"Experiment {experiment}: paired per-round ratios vs {reference} "
             "(point: median, whisker: p10-p90 of the per-round ratios)")
    fig.suptitle(title, fontsize=10)
    return title, fig
