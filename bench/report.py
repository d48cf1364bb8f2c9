"""Build summary.md from a run folder's raw records.

The summary is derived only from files in the run folder (cases.jsonl,
timings.jsonl, metadata.json), so anyone holding the artifacts can regenerate
it. Output is deterministic: cases in order of first appearance, variants and
metadata keys sorted, modes in protocol order.
"""

from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from bench.artifacts import RunFolder, to_jsonable
from bench.floors import FACTS_COPY_TBS, us_at, variant_floor_bytes
from bench.protocol import BATCH, METRICS, MODES, Measurement
from bench.stats import paired_ratios, summarize
from bench.trace_step import trace_summary_lines

CORRECTNESS_KEYS = (
    "experiment", "case", "variant", "mode", "fixture",
    "max_abs_err", "max_tol_ratio", "max_row_sum_err", "finite_nonneg", "passed",
)
BASELINE_METRIC = "sync_baseline_us"
TABLE_METRICS = tuple(m for m in METRICS if m != BASELINE_METRIC)
RATIO_METRICS = ("event_us", "host_completion_us")
GBPS_HEADER = "GB/s (logical bytes / event time)"
FLOOR_VARIANT_ORDER = ("stages", "fused", "cudnn", "separate", "phased", "dag")


def write_summary(run: RunFolder, *, plots: bool = True) -> Path:
    """Write summary.md (and, with matplotlib, plots/*.png) into the run folder; return its path."""
    metadata = _read_metadata(run)
    cases = _read_optional_jsonl(run, "cases.jsonl")
    raw_timings = _read_optional_jsonl(run, "timings.jsonl")
    timings = [Measurement.from_record(r) for r in raw_timings or []]

    lines = ["# Run summary", ""]
    lines += _missing_files_notice(metadata, cases, raw_timings)
    if not timings:
        lines += _no_timings_notice(metadata)
    lines += _correctness_section(cases or [])
    if timings and plots:
        lines += _plots_section(run, timings, metadata)
    if timings:
        lines += _baseline_section(timings)
        lines += _timing_sections(timings, cases or [], metadata)
        lines += _floor_section(timings)
    lines += _graphs_section(_read_optional_jsonl(run, "graphs.jsonl") or [])
    lines += trace_summary_lines(_read_optional_jsonl(run, "traces.jsonl") or [])
    lines += _metadata_section(metadata)
    return run.write_text("summary.md", "\n".join(lines).rstrip("\n") + "\n")


def _floor_section(timings: list[Measurement]) -> list[str]:
    """Each variant's best mode (lower median event time) against its byte floor (bench.floors)."""
    events = [m for m in timings if m.metric == "event_us"]
    rows = []
    for (experiment, case, variant), group in _group(events, lambda m: (m.experiment, m.case, m.variant)).items():
        floor_bytes = variant_floor_bytes(str(experiment), str(case), str(variant))
        if floor_bytes is None:
            continue
        medians = {mode: summarize([m.per_invocation_us for m in g])["median"]
                   for mode, g in _group(group, lambda m: m.mode).items()}
        mode, best = min(medians.items(), key=lambda item: item[1])
        floor_us = us_at(floor_bytes, FACTS_COPY_TBS)
        rows.append([experiment, case, variant, f"{floor_bytes:,}", f"{floor_us:.3g}", mode, f"{best:.2f}",
                     f"{best / floor_us:.2f}x"])
    if not rows:
        return []
    order = {name: i for i, name in enumerate(FLOOR_VARIANT_ORDER)}
    cases = list(dict.fromkeys(row[1] for row in rows))
    rows.sort(key=lambda row: (row[0], cases.index(row[1]), order.get(row[2], len(order))))
    return ["## Against the byte floor", "",
            f"Floor = the fewest bytes the variant must move (bench/floors.py: one-pass 8N for fused and cuDNN, "
            f"24N + 16R for the stages, 12N + 16T + 16R for every Experiment B scheduler) at {FACTS_COPY_TBS} TB/s, "
            "the 1 GiB device-to-device copy of the H200 (results/perf; not re-measured in this run, "
            "`python -m bench perf` does). Best mode = the mode with the lower median event time. Below about "
            "1 us the floor says little: launch and event latency dominate.", "",
            _table(rows, ["experiment", "case", "variant", "floor bytes", "floor us", "best mode",
                          "median event us", "x floor"]), ""]


def _graphs_section(records) -> list[str]:
    """Captured graphs: node counts and types read back from each graph, and the one-off costs."""
    if not records:
        return []
    rows = [[r["experiment"], r["case"], r["variant"], r["node_count"],
             ", ".join(f"{k}: {v}" for k, v in sorted(r["node_types"].items())),
             f"{r['capture_us']:.1f}", f"{r['instantiate_us']:.1f}", f"{r['first_replay_us']:.1f}"]
            for r in records]
    return ["## CUDA graphs", "",
            "Node counts and types are read back from each captured graph (cuDNN's included). Capture, "
            "instantiation and first replay (with synchronize) are host-clock microseconds, each measured "
            "once, outside every timed interval.", "",
            tabulate(rows, headers=["experiment", "case", "variant", "nodes", "node types", "capture us",
                                    "instantiate us", "first replay us"], tablefmt="github"), ""]


# ---------------------------------------------------------------- inputs

def _read_metadata(run: RunFolder) -> dict | None:
    path = run.path_of("metadata.json")
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def _read_optional_jsonl(run: RunFolder, name: str) -> list[dict] | None:
    """None means the file is absent, which the summary reports (unlike an empty file)."""
    if not run.path_of(name).exists():
        return None
    return run.read_jsonl(name)


# ---------------------------------------------------------------- notices

def _missing_files_notice(metadata, cases, raw_timings) -> list[str]:
    missing = [name for name, content in
               (("metadata.json", metadata), ("cases.jsonl", cases), ("timings.jsonl", raw_timings))
               if content is None]
    return [f"> **MISSING FILE: {name}**" for name in missing] + ([""] if missing else [])


def _no_timings_notice(metadata) -> list[str]:
    """Loud notice: a correctness-only run must never be read as a benchmark."""
    reason = (metadata or {}).get("timing_disabled_reason")
    if reason is None:
        reason = "NOT RECORDED (metadata has no timing_disabled_reason, so the absence is unexplained)"
    return [
        "## NO TIMINGS WERE TAKEN",
        "",
        "> **WARNING: this run contains no timing measurements. It validates correctness only;",
        "> no performance claim can be made from it.**",
        f"> Reason: {reason}",
        "",
    ]


# ---------------------------------------------------------------- correctness

def _correctness_section(cases: list[dict]) -> list[str]:
    failed = [c for c in cases if c.get("passed") is not True]
    passed = [c for c in cases if c.get("passed") is True]
    lines = [
        "## Correctness",
        "",
        f"**{len(passed)} passed, {len(failed)} failed** of {len(cases)} correctness records.",
        "",
    ]
    if failed:
        lines += [f"> **{len(failed)} FAILED correctness record(s); they are listed first.**", ""]
    if not cases:
        return lines + ["No correctness records.", ""]
    headers = ["status", *CORRECTNESS_KEYS[:-1], "extra"]
    rows = [_correctness_row(c) for c in failed + passed]
    return lines + [_table(rows, headers), ""]


def _correctness_row(record: dict) -> list[str]:
    status = "pass" if record.get("passed") is True else "FAIL"
    extras = sorted(k for k in record if k not in CORRECTNESS_KEYS)
    extra = ", ".join(f"{k}={_fmt_any(record[k])}" for k in extras)
    return [status, *(_fmt_any(record.get(k)) for k in CORRECTNESS_KEYS[:-1]), extra]


# ---------------------------------------------------------------- timings

def _baseline_section(timings: list[Measurement]) -> list[str]:
    records = [m for m in timings if m.metric == BASELINE_METRIC]
    lines = [
        "## No-work stream-synchronization baseline",
        "",
        "Reported for context only: it is **not subtracted** from any timing in this summary.",
        "",
    ]
    if not records:
        return lines + [f"> **No {BASELINE_METRIC} records were found.**", ""]
    groups = _group(records, lambda m: (m.experiment, m.case, m.variant, m.mode))
    rows = [[*key, _fmt_stats(summarize(m.per_invocation_us for m in group))]
            for key, group in groups.items()]
    headers = ["experiment", "case", "variant", "mode", "us per invocation: median / p10 / p90 (n)"]
    return lines + [_table(rows, headers), ""]


def _timing_sections(timings: list[Measurement], cases: list[dict], metadata) -> list[str]:
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
    for (experiment, case), records in _group(measured, lambda m: (m.experiment, m.case)).items():
        lines += [f"### Experiment {experiment}, case {case}", ""]
        if (str(experiment), str(case)) in failed_cases:
            lines += ["> **WARNING: this case has FAILED correctness records; its timings are not admissible.**", ""]
        lines += _case_table(records)
        lines += _ratio_table(experiment, records, metadata)
    return lines


def _case_table(records: list[Measurement]) -> list[str]:
    bytes_moved = _case_bytes(records)
    headers = ["variant", "mode", "fixtures", *(_metric_header(m) for m in TABLE_METRICS)]
    if bytes_moved is not None:
        headers.append(GBPS_HEADER)
    rows = []
    for (variant, mode), group in _group(records, lambda m: (m.variant, m.mode), _variant_mode_order).items():
        fixtures = ", ".join(sorted({str(m.fixture) for m in group}))
        row = [variant, mode, fixtures]
        for metric in TABLE_METRICS:
            values = [m.per_invocation_us for m in group if m.metric == metric]
            row.append(_fmt_stats(summarize(values)) if values else "-")
        if bytes_moved is not None:
            events = [m.per_invocation_us for m in group if m.metric == "event_us"]
            row.append(_fmt_gbps(bytes_moved, summarize(events)["median"]) if events else "-")
        rows.append(row)
    lines = [_table(rows, headers), ""]
    if bytes_moved is not None:
        lines += [f"Logical bytes per invocation: {bytes_moved}.", ""]
    return lines


def _metric_header(metric: str) -> str:
    """Batch metrics say in their header that they were divided by the batch size."""
    return f"{metric} / {BATCH}" if metric.startswith("batch_") else metric


def _case_bytes(records: list[Measurement]) -> int | None:
    """bytes_moved is a per-case constant; disagreeing values are a harness bug."""
    values = {m.bytes_moved for m in records if m.bytes_moved is not None}
    if len(values) > 1:
        raise ValueError(f"bytes_moved differs within one case: {sorted(values)}")
    return values.pop() if values else None


def _ratio_table(experiment: str, records: list[Measurement], metadata) -> list[str]:
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
            rounds = _rounds_table(records, mode, metric)
            for variant in variants:
                rows.append(_ratio_row(rounds, variant, reference, mode, metric))
    headers = ["mode", "variant", "reference", "metric", "pairs", "median", "p10", "p90"]
    return lines + [_table(rows, headers), ""]


def _rounds_table(records: list[Measurement], mode: str, metric: str) -> list[dict]:
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


def _ratio_row(rounds, variant, reference, mode, metric) -> list[str]:
    if not any(variant in r and reference in r for r in rounds):
        return [mode, variant, reference, metric, "0", "-", "-", "-"]
    s = paired_ratios(rounds, variant, reference, metric)
    return [mode, variant, reference, metric, str(s["n"]),
            f"{s['median']:.4f}", f"{s['p10']:.4f}", f"{s['p90']:.4f}"]


# ---------------------------------------------------------------- plots

def _plots_section(run: RunFolder, timings: list[Measurement], metadata) -> list[str]:
    from bench.plots import write_plots

    written, skipped = write_plots(run, timings, metadata)
    lines = ["## Plots", ""]
    if skipped:
        return lines + [f"> **Plots skipped: {skipped}.**", ""]
    for title, relpath in written:
        lines += [f"![{title}]({relpath})", ""]
    return lines


# ---------------------------------------------------------------- metadata

def _metadata_section(metadata) -> list[str]:
    lines = ["## Metadata", ""]
    if not metadata:
        return lines + ["No metadata.", ""]
    rows = [[key, _fmt_metadata(metadata[key])] for key in sorted(metadata)]
    return lines + [_table(rows, ["key", "value"]), ""]


# ---------------------------------------------------------------- helpers

def _group(items, key, order=None) -> dict:
    """Group preserving first appearance, or sorted by `order` when given."""
    groups: dict = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    if order is not None:
        return {k: groups[k] for k in sorted(groups, key=order)}
    return groups


def _variant_mode_order(key: tuple[str, str]) -> tuple:
    variant, mode = key
    return (variant, MODES.index(mode))


def _table(rows, headers) -> str:
    # disable_numparse keeps our pre-formatted strings exactly as written.
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def _fmt_stats(s: dict) -> str:
    return f"{s['median']:.3f} / {s['p10']:.3f} / {s['p90']:.3f} (n={s['n']})"


def _fmt_gbps(bytes_moved: int, median_event_us: float) -> str:
    if median_event_us <= 0:
        return "-"
    return f"{bytes_moved / (median_event_us * 1e-6) / 1e9:.1f}"


def _fmt_metadata(value) -> str:
    """Metadata is shown exactly (no rounding): strings as-is, everything else as JSON."""
    if isinstance(value, str):
        return _escape(value)
    return _escape(json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":")))


def _escape(text: str) -> str:
    """Keep a value inside its markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _fmt_any(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3e}"
    if isinstance(value, (dict, list)):
        return _escape(json.dumps(to_jsonable(value), sort_keys=True, separators=(",", ":")))
    return _escape(str(value))
