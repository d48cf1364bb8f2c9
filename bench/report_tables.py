"""The run summary's tables (bench/report.py): per-case timing statistics, paired ratios and the formatting
helpers every section shares.
"""

from __future__ import annotations

import json

from tabulate import tabulate

from bench.artifacts import to_jsonable
from bench.protocol import BATCH, METRICS, MODES, Measurement
from bench.stats import paired_ratios, summarize

BASELINE_METRIC = "sync_baseline_us"
TABLE_METRICS = tuple(m for m in METRICS if m != BASELINE_METRIC)
RATIO_METRICS = ("event_us", "host_completion_us")
GBPS_HEADER = "GB/s (logical bytes / event time)"


# ---------------------------------------------------------------- timings

def baseline_section(timings: list[Measurement]) -> list[str]:
    records = [m for m in timings if m.metric == BASELINE_METRIC]
    lines = [
        "## No-work stream-synchronization baseline",
        "",
        "Reported for context only: it is **not subtracted** from any timing in this summary.",
        "",
    ]
    if not records:
        return lines + [f"> **No {BASELINE_METRIC} records were found.**", ""]
    groups = group_by(records, lambda m: (m.experiment, m.case, m.variant, m.mode))
    rows = [[*key, fmt_stats(summarize(m.per_invocation_us for m in group))]
            for key, group in groups.items()]
    headers = ["experiment", "case", "variant", "mode", "us per invocation: median / p10 / p90 (n)"]
    return lines + [table_text(rows, headers), ""]


def timing_sections(timings: list[Measurement], cases: list[dict], metadata) -> list[str]:
    lines = [
        "## Timings",
        "",
        f"All values are microseconds **per invocation**. Batch metrics are measured over a batch "
        f"of {BATCH} and shown divided by {BATCH} (raw batch values are in timings.jsonl). "
        "Cells are median / p10 / p90 (n) over all rounds and fixtures. Event intervals include "
        "host-starvation gaps. GB/s uses logical array bytes (input + output), not measured HBM traffic.",
        "",
    ]
    failed_cases = {(str(c.get("experiment")), str(c.get("case")))
                    for c in cases if c.get("passed") is not True}
    measured = [m for m in timings if m.metric != BASELINE_METRIC]
    for (experiment, case), records in group_by(measured, lambda m: (m.experiment, m.case)).items():
        lines += [f"### Experiment {experiment}, case {case}", ""]
        if (str(experiment), str(case)) in failed_cases:
            lines += ["> **WARNING: this case has FAILED correctness records; its timings are not admissible.**", ""]
        lines += case_table(records)
        lines += ratio_table(experiment, records, metadata)
    return lines


def case_table(records: list[Measurement]) -> list[str]:
    bytes_moved = case_bytes(records)
    headers = ["variant", "mode", "fixtures", *(metric_header(m) for m in TABLE_METRICS)]
    if bytes_moved is not None:
        headers.append(GBPS_HEADER)
    rows = []
    for (variant, mode), group in group_by(records, lambda m: (m.variant, m.mode), variant_mode_order).items():
        fixtures = ", ".join(sorted({str(m.fixture) for m in group}))
        row = [variant, mode, fixtures]
        for metric in TABLE_METRICS:
            values = [m.per_invocation_us for m in group if m.metric == metric]
            row.append(fmt_stats(summarize(values)) if values else "-")
        if bytes_moved is not None:
            events = [m.per_invocation_us for m in group if m.metric == "event_us"]
            row.append(fmt_gbps(bytes_moved, summarize(events)["median"]) if events else "-")
        rows.append(row)
    lines = [table_text(rows, headers), ""]
    if bytes_moved is not None:
        lines += [f"Logical bytes per invocation: {bytes_moved}.", ""]
    return lines


def metric_header(metric: str) -> str:
    """Batch metrics say in their header that they were divided by the batch size."""
    return f"{metric} / {BATCH}" if metric.startswith("batch_") else metric


def case_bytes(records: list[Measurement]) -> int | None:
    """bytes_moved is a per-case constant; disagreeing values are a harness bug."""
    values = {m.bytes_moved for m in records if m.bytes_moved is not None}
    if len(values) > 1:
        raise ValueError(f"bytes_moved differs within one case: {sorted(values)}")
    return values.pop() if values else None


def ratio_table(experiment: str, records: list[Measurement], metadata) -> list[str]:
    reference = ((metadata or {}).get("ratio_reference") or {}).get(experiment)
    if reference is None:
        return [f"> **No ratio reference for experiment {experiment} in metadata['ratio_reference']; "
                "paired ratios not computed.**", ""]
    lines = [
        f"Paired per-round ratios variant / {reference} (> 1: slower than {reference}), "
        "median / p10 / p90 of the per-round ratios, paired by (fixture, round):",
        "",
    ]
    rows = []
    modes = [mode for mode in MODES if any(m.mode == mode for m in records)]
    variants = sorted({m.variant for m in records} - {reference})
    for mode in modes:
        for metric in RATIO_METRICS:
            rounds = rounds_table(records, mode, metric)
            for variant in variants:
                rows.append(ratio_row(rounds, variant, reference, mode, metric))
    headers = ["mode", "variant", "reference", "metric", "pairs", "median", "p10", "p90"]
    return lines + [table_text(rows, headers), ""]


def rounds_table(records: list[Measurement], mode: str, metric: str) -> list[dict]:
    """One dict per (fixture, round): variant -> per-invocation value."""
    by_round: dict[tuple, dict] = {}
    for m in records:
        if m.mode != mode or m.metric != metric:
            continue
        slot = by_round.setdefault((str(m.fixture), m.round), {})
        if m.variant in slot:
            raise ValueError(f"duplicate {metric} record for {m.experiment}/{m.case}/{m.variant}/"
                             f"{mode} fixture {m.fixture} round {m.round}")
        slot[m.variant] = m.per_invocation_us
    return [by_round[key] for key in sorted(by_round)]


def ratio_row(rounds, variant, reference, mode, metric) -> list[str]:
    if not any(variant in r and reference in r for r in rounds):
        return [mode, variant, reference, metric, "0", "-", "-", "-"]
    s = paired_ratios(rounds, variant, reference, metric)
    return [mode, variant, reference, metric, str(s["n"]),
            f"{s['median']:.4f}", f"{s['p10']:.4f}", f"{s['p90']:.4f}"]


# ---------------------------------------------------------------- helpers

def group_by(items, key, order=None) -> dict:
    """Group preserving first appearance, or sorted by `order` when given."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    if order is not None:
        return {k: groups[k] for k in sorted(groups, key=order)}
    return groups


def variant_mode_order(key: tuple[str, str]) -> tuple:
    variant, mode = key
    return (variant, MODES.index(mode))


def table_text(rows, headers) -> str:
    # disable_numparse keeps our pre-formatted strings exactly as written.
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def fmt_stats(s: dict) -> str:
    return f"{s['median']:.3f} / {s['p10']:.3f} / {s['p90']:.3f} (n={s['n']})"


def fmt_gbps(bytes_moved: int, median_event_us: float) -> str:
    if median_event_us <= 0:
        return "-"
    return f"{bytes_moved / (median_event_us * 1e-6) / 1e9:.1f}"


def fmt_metadata(value) -> str:
    """Metadata is shown exactly (no rounding): strings as-is, everything else as JSON."""
    if isinstance(value, str):
        return escape(value)
    return escape(json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":")))


def escape(text: str) -> str:
    """Keep a value inside its markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def fmt_any(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3e}"
    if isinstance(value, (dict, list)):
        return escape(json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":")))
    return escape(str(value))
