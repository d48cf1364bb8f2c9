"""Build summary.md (and the plots) from a run folder's raw records.

    python -m bench report DIR [--out OUTDIR] [--force] [--no-plots]

The summary is derived only from files in the run folder (metadata.json, cases.jsonl,
timings.jsonl or timings.jsonl.gz, ...), so anyone holding the artifacts can regenerate
it. It leads with the answer: a verdict per case (median times, paired ratios against the
reference variant, the fastest variant), the byte floors, the plots, correctness as counts
with every failure in full; the detailed tables and every correctness record follow.
Output is deterministic: cases in order of first appearance, variants and metadata keys
sorted, modes in protocol order.

``report`` acts only on a run folder (one holding metadata.json) and never replaces a file
with different content (a summary someone committed, a file manifest.json records by hash)
unless ``--force``; ``--out`` writes the summary and plots into another folder instead.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tabulate import tabulate

from bench.artifacts import (
    NotARunFolder,
    ProtectedFiles,
    RunFolder,
    atomic_write,
    check_replaceable,
    read_records,
    require_run_folder,
    to_jsonable,
)
from bench.environment import PROTOCOL_DEVICE
from bench.floors import H200_COPY_TBS, one_read_floor_bytes, us_at, variant_floor_bytes
from bench.plots import render_plots
from bench.protocol import BATCH, MODES, Measurement, twin_pairs
from bench.report_tables import (
    baseline_section,
    escape,
    fmt_any,
    fmt_metadata,
    group_by,
    rounds_table,
    table_text,
    timing_sections,
)
from bench.stats import paired_ratios, summarize
from bench.trace_step import current_breakdowns, trace_summary_lines

CORRECTNESS_KEYS = (
    "experiment", "case", "variant", "mode", "fixture",
    "max_abs_err", "max_tol_ratio", "max_row_sum_err", "finite_nonneg", "passed",
)
FLOOR_VARIANT_ORDER = ("stages", "fused", "cudnn", "separate", "phased", "dag")
SUMMARY_NAME = "summary.md"


def write_summary(run: RunFolder, *, plots: bool = True, out: str | os.PathLike | None = None,
                  force: bool = False) -> Path:
    """Write summary.md (and, with matplotlib, plots/*.png) into ``out`` (default: the run folder).

    An existing file with different content is replaced only with ``force`` (else
    :class:`bench.artifacts.ProtectedFiles`, and nothing is written). Returns the summary's path.
    """
    text, figures = render_summary(run, plots=plots)
    files = {relpath: data for _title, relpath, data in figures}
    files[SUMMARY_NAME] = text.encode("utf-8")
    target = Path(out) if out is not None else run.path
    check_replaceable(target, files, force=force)
    for relpath, data in files.items():
        atomic_write(target / relpath, lambda f, data=data: f.write(data))
    return target / SUMMARY_NAME


def render_summary(run: RunFolder, *, plots: bool = True) -> tuple[str, list[tuple[str, str, bytes]]]:
    """summary.md's text and the plots it links [(title, relpath, PNG bytes)]; writes nothing."""
    metadata = _read_metadata(run)
    cases = read_records(run.path, "cases.jsonl")
    raw_timings = read_records(run.path, "timings.jsonl")
    timings = [Measurement.from_record(r) for r in raw_timings or []]
    figures, skipped = [], None
    if timings and plots:
        figures, skipped = render_plots(timings, metadata)

    lines = ["# Run summary", ""]
    lines += _header_lines(metadata, incomplete_cases(run, metadata))
    lines += _missing_files_notice(metadata, cases, raw_timings)
    if not timings:
        lines += _no_timings_notice(metadata)
    lines += _verdict_section(timings, cases or [], metadata)
    lines += _twins_section(timings)
    if timings:
        lines += _floor_section(timings)
    if timings and plots:
        lines += _plots_section(figures, skipped)
    lines += _correctness_section(cases or [])
    if timings:
        lines += timing_sections(timings, cases or [], metadata)
        lines += baseline_section(timings)
    lines += _graphs_section(read_records(run.path, "graphs.jsonl") or [])
    lines += trace_summary_lines(current_breakdowns(read_records(run.path, "traces.jsonl") or [],
                                                    read_records(run.path, "layouts.jsonl") or [], run.path))
    lines += _correctness_records_section(cases or [])
    lines += _metadata_section(metadata)
    return "\n".join(lines).rstrip("\n") + "\n", figures


def terminal_verdict(run: RunFolder) -> str:
    """What the main job prints last: the verdict tables and the correctness count."""
    metadata = _read_metadata(run)
    cases = read_records(run.path, "cases.jsonl") or []
    timings = [Measurement.from_record(r) for r in read_records(run.path, "timings.jsonl") or []]
    lines = (_header_lines(metadata, incomplete_cases(run, metadata)) + _verdict_section(timings, cases, metadata)
             + _twins_section(timings))
    return "\n".join(lines).rstrip("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench report", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="run folder (holds metadata.json)")
    parser.add_argument("--out", help="write summary.md and plots/ into this folder instead of the run folder")
    parser.add_argument("--force", action="store_true",
                        help="replace summary.md and plots that differ, even ones manifest.json records by hash")
    parser.add_argument("--no-plots", action="store_true", help="summary only (no matplotlib needed)")
    args = parser.parse_args(argv)
    try:
        folder = require_run_folder(args.dir, "report")
        metadata = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
        if metadata.get("experiment") not in ("A", "B"):
            raise NotARunFolder(f"report: {folder} is not an experiment run (its metadata.json names no experiment; "
                                f"kind {metadata.get('kind', 'unrecorded')!r}): its summary belongs to the command "
                                "that wrote it")
        out = Path(args.out) if args.out else None
        if out is not None and out.resolve() == folder.resolve():
            out = None
        path = write_summary(RunFolder(folder, resume=True), plots=not args.no_plots, out=out, force=args.force)
    except (NotARunFolder, ProtectedFiles, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


# ---------------------------------------------------------------- the answer first

def incomplete_cases(run: RunFolder, metadata) -> list[str]:
    """The run's cases (``metadata['case_names']``) that progress.jsonl does not record as completed."""
    names = (metadata or {}).get("case_names") or []
    completed = {r.get("case") for r in read_records(run.path, "progress.jsonl") or [] if r.get("completed")}
    return [name for name in names if name not in completed]


def _header_lines(metadata, incomplete=()) -> list[str]:
    """One line saying what ran where, then every loud warning (wrong device, simulator, stopped, cases
    that did not complete)."""
    metadata = metadata or {}
    device = metadata.get("device") or {}
    where = device.get("name") or ("the Numba CUDA simulator" if metadata.get("backend") == "simulator"
                                   else "an unrecorded device")
    capability = device.get("compute_capability")
    if capability:
        where += f" (sm_{capability[0]}{capability[1]})"
    commit = ((metadata.get("git") or {}).get("commit") or "unrecorded")[:12]
    experiment = metadata.get("experiment")
    lines = [f"Experiment {experiment if experiment else '?'} on {where}, commit {commit}, "
             f"started {metadata.get('started_utc', 'unrecorded')}.", ""]
    note = metadata.get("device_note")
    if note is None and metadata.get("backend") == "gpu" and device.get("name") \
            and PROTOCOL_DEVICE.lower() not in device["name"].lower():
        note = f"NOT THE PROTOCOL'S {PROTOCOL_DEVICE}: this run measures {device['name']!r}"
    if note:
        lines += [f"> **{note}**", ""]
    if metadata.get("stopped"):
        lines += [f"> **STOPPED before completing: {escape(str(metadata['stopped']))}**", ""]
    if incomplete:
        why = "" if metadata.get("stopped") else (" and the run recorded no reason (the process was killed or "
                                                  "its machine went away)")
        lines += [f"> **INCOMPLETE: {len(incomplete)} of {len(metadata.get('case_names') or [])} cases did not "
                  f"complete ({', '.join(incomplete)}){why}; progress.jsonl says which did**", ""]
    return lines


def _verdict_section(timings: list[Measurement], cases: list[dict], metadata) -> list[str]:
    """Per experiment, one row per (case, variant): median event times per mode, paired ratios against
    the reference variant, which variant is fastest, the correctness checks."""
    checks = _check_counts(cases)
    passed = sum(1 for c in cases if c.get("passed") is True)
    failed = len(cases) - passed
    count_line = (f"Correctness: **{passed} passed, {failed} failed** of {len(cases)} correctness records"
                  + (" (every failure is listed under Correctness)." if failed else "."))
    events = [m for m in timings if m.metric == "event_us"]
    experiments = list(dict.fromkeys([str(m.experiment) for m in events]
                                     + [str(c.get("experiment")) for c in cases]))
    lines = []
    for experiment in experiments:
        reference = ((metadata or {}).get("ratio_reference") or {}).get(experiment)
        records = [m for m in events if str(m.experiment) == experiment]
        lines += [f"## Verdict, Experiment {experiment}", ""]
        if not records:
            rows = [[case, variant, f"{n_pass}/{n_all} passed"]
                    for (exp, case, variant), (n_pass, n_all) in checks.items() if exp == experiment]
            lines += ["No timings (see above); correctness per case and variant:", "",
                      table_text(rows, ["case", "variant", "checks"]), ""]
            continue
        modes = [mode for mode in MODES if any(m.mode == mode for m in records)]
        headers = ["case", "variant", *(f"{mode} event us (median)" for mode in modes)]
        if reference:
            headers += [f"/ {reference} ({mode}, paired)" for mode in modes]
        headers += ["fastest", "checks"]
        rows = []
        for case, case_records in group_by(records, lambda m: str(m.case)).items():
            medians = {(m_variant, mode): summarize([m.per_invocation_us for m in group])["median"]
                       for (m_variant, mode), group in group_by(case_records, lambda m: (m.variant, m.mode)).items()}
            best = {variant: min(v for (name, _), v in medians.items() if name == variant)
                    for variant in {name for name, _ in medians}}
            # An empty-work floor (variant "<scheduler>-floor") is a yardstick, never the fastest.
            fastest = min((v for v in best if not v.endswith("-floor")), key=best.get, default=None)
            for variant in sorted(best, key=_variant_order):
                row = [case, variant, *(f"{medians[(variant, mode)]:.2f}" if (variant, mode) in medians else "-"
                                        for mode in modes)]
                if reference:
                    row += [_verdict_ratio(case_records, variant, reference, mode) for mode in modes]
                n_pass, n_all = checks.get((experiment, case, variant), (0, 0))
                row += ["**fastest**" if variant == fastest else "",
                        f"{n_pass}/{n_all} passed" if n_all else "none recorded"]
                rows.append(row)
        lines += [table_text(rows, headers), ""]
        if reference:
            lines += [f"Ratios: median of the per-round ratios variant / {reference} of the event time, paired by "
                      f"(fixture, round); > 1 is slower than {reference}. Fastest: the lowest median event time in "
                      "the variant's better mode. A `<scheduler>-floor` row is that scheduler's empty-work floor: "
                      "the same launches and barriers with no task (the scheduling part of its time).", ""]
    return lines + [count_line, ""]


#: A Numba kernel is at parity with its nvcc twin when the median paired ratio is at most this.
TWIN_PARITY = 1.03
#: The metrics the Numba / nvcc table pairs: one invocation's event time and a batch's completion per invocation.
TWIN_METRICS = ("event_us", "batch_completion_us")


def _twins_section(timings: list[Measurement]) -> list[str]:
    """Each Numba variant against its nvcc twin (``--twins``): paired per-round ratios of the event
    time (one invocation) and of the batch completion (BATCH invocations back to back, per invocation)."""
    rows = []
    for (experiment, case), records in group_by(timings, lambda m: (m.experiment, m.case)).items():
        pairs = twin_pairs({m.variant for m in records})
        for mode in MODES:
            rounds = {metric: rounds_table(records, mode, metric) for metric in TWIN_METRICS}
            for numba, twin in pairs:
                if not any(numba in r and twin in r for r in rounds["event_us"]):
                    continue
                row = [experiment, case, numba, twin, mode]
                for metric in TWIN_METRICS:
                    if not any(numba in r and twin in r for r in rounds[metric]):
                        row += ["0", "-", "-", "-", "-"]
                        continue
                    s = paired_ratios(rounds[metric], numba, twin, metric)
                    row += [str(s["n"]), f"{s['median']:.4f}", f"{s['p10']:.4f}", f"{s['p90']:.4f}",
                            "yes" if s["median"] <= TWIN_PARITY else "**no**"]
                rows.append(row)
    if not rows:
        return []
    headers = ["experiment", "case", "Numba variant", "nvcc twin", "mode"]
    for label in ("event", "batch"):
        headers += [f"{label} pairs", f"{label} median", "p10", "p90", f"{label} parity"]
    return ["## Numba / nvcc", "",
            "Each Numba variant against its nvcc twin (reference_cu/, `--twins`): per-round ratios Numba / nvcc, "
            "paired by (fixture, round); median, p10, p90. > 1: Numba is slower. Parity: median <= "
            f"{TWIN_PARITY}. *event*: the CUDA-event time of one invocation (the protocol's device metric; one "
            "launch's start-up jitter is in every sample, so its p10-p90 spans 10-30% at small cases); *batch*: "
            f"the host completion of {BATCH} invocations back to back, per invocation (the launches queue behind "
            "each other, so it measures the kernels' own time with a p10-p90 of a few percent). Every twin was "
            "checked bit for bit against its Numba variant before timing.",
            "",
            table_text(rows, headers), ""]


def _verdict_ratio(records, variant, reference, mode) -> str:
    if variant == reference:
        return "1 (reference)"
    rounds = rounds_table(records, mode, "event_us")
    if not any(variant in r and reference in r for r in rounds):
        return "-"
    return f"{paired_ratios(rounds, variant, reference, 'event_us')['median']:.3f}"


def _check_counts(cases: list[dict]) -> dict:
    counts: dict = {}
    for c in cases:
        key = (str(c.get("experiment")), str(c.get("case")), str(c.get("variant")))
        n_pass, n_all = counts.get(key, (0, 0))
        counts[key] = (n_pass + (c.get("passed") is True), n_all + 1)
    return counts


def _variant_order(variant: str) -> tuple:
    """The floor table's order; an Experiment B floor right after its scheduler."""
    order = {name: i for i, name in enumerate(FLOOR_VARIANT_ORDER)}
    return (order.get(variant.split("-", 1)[0], len(order)), variant)


def _floor_section(timings: list[Measurement]) -> list[str]:
    """Each variant's best mode (lower median event time) against its byte floor (bench.floors)."""
    events = [m for m in timings if m.metric == "event_us"]
    rows = []
    for (experiment, case, variant), group in group_by(events, lambda m: (m.experiment, m.case, m.variant)).items():
        floor_bytes = variant_floor_bytes(str(experiment), str(case), str(variant))
        if floor_bytes is None:
            continue
        medians = {mode: summarize([m.per_invocation_us for m in g])["median"]
                   for mode, g in group_by(group, lambda m: m.mode).items()}
        mode, best = min(medians.items(), key=lambda item: item[1])
        floor_us = us_at(floor_bytes, H200_COPY_TBS)
        one_read = one_read_floor_bytes(str(experiment), str(case))
        one_read_cells = ["-", "-"]
        if one_read is not None:
            one_read_us = us_at(one_read, H200_COPY_TBS)
            one_read_cells = [f"{one_read_us:.3g}", f"{best / one_read_us:.2f}x"]
        rows.append([experiment, case, variant, f"{floor_bytes:,}", f"{floor_us:.3g}", mode, f"{best:.2f}",
                     f"{best / floor_us:.2f}x", *one_read_cells])
    if not rows:
        return []
    order = {name: i for i, name in enumerate(FLOOR_VARIANT_ORDER)}
    cases = list(dict.fromkeys(row[1] for row in rows))
    rows.sort(key=lambda row: (row[0], cases.index(row[1]), order.get(row[2], len(order))))
    return ["## Against the byte floor", "",
            f"Floor = the fewest bytes the variant must move (bench/floors.py: one-pass 8N for fused and cuDNN, "
            f"24N + 16R for the stages, 12N + 16T + 16R for every Experiment B scheduler) at {H200_COPY_TBS} TB/s, "
            "and for Experiment B the one-read floor 8N + 16T + 16R (x read from DRAM once, the C pass rereading "
            "it from L2), at that bandwidth: "
            "the 1 GiB device-to-device copy of the H200 (results/perf; not re-measured in this run, "
            "`python -m bench perf` does). Best mode = the mode with the lower median event time. Below about "
            "1 us the floor says little: launch and event latency dominate.", "",
            table_text(rows, ["experiment", "case", "variant", "floor bytes", "floor us", "best mode",
                          "median event us", "x floor", "one-read floor us", "x one-read floor"]), ""]


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


# ---------------------------------------------------------------- notices

def _missing_files_notice(metadata, cases, raw_timings) -> list[str]:
    simulator = (metadata or {}).get("backend") == "simulator"
    expected = [("metadata.json", metadata), ("cases.jsonl", cases)]
    if not simulator:  # the simulator takes no timings by design: their absence is not a missing file
        expected.append(("timings.jsonl", raw_timings))
    missing = [name for name, content in expected if content is None]
    return [f"> **MISSING FILE: {name}**" for name in missing] + ([""] if missing else [])


def _no_timings_notice(metadata) -> list[str]:
    """Loud notice: a correctness-only run must never be read as a benchmark."""
    if (metadata or {}).get("backend") == "simulator":
        return [
            "## NO TIMINGS WERE TAKEN",
            "",
            "> **Simulator run: timings are not taken in the Numba CUDA simulator, by design.** It validates "
            "correctness on small cases only; no performance claim can be made from it.",
            f"> Reason: {metadata.get('timing_disabled_reason') or 'simulator backend'}",
            "",
        ]
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
    """Counts, then every failed record in full; the table of every record comes near the end."""
    failed = [c for c in cases if c.get("passed") is not True]
    passed = [c for c in cases if c.get("passed") is True]
    lines = [
        "## Correctness",
        "",
        f"**{len(passed)} passed, {len(failed)} failed** of {len(cases)} correctness records.",
        "",
    ]
    if not cases:
        return lines + ["No correctness records.", ""]
    if failed:
        lines += [f"> **{len(failed)} FAILED correctness record(s), each in full:**", ""]
        lines += [f"- {escape(json.dumps(to_jsonable(c), sort_keys=True))}" for c in failed] + [""]
    return lines + ["Every record: see \"Correctness records\" below (and cases.jsonl).", ""]


def _correctness_records_section(cases: list[dict]) -> list[str]:
    if not cases:
        return []
    failed = [c for c in cases if c.get("passed") is not True]
    passed = [c for c in cases if c.get("passed") is True]
    headers = ["status", *CORRECTNESS_KEYS[:-1], "extra"]
    rows = [_correctness_row(c) for c in failed + passed]
    return ["## Correctness records", "", "Every record of cases.jsonl, failures first.", "",
            table_text(rows, headers), ""]


def _correctness_row(record: dict) -> list[str]:
    status = "pass" if record.get("passed") is True else "FAIL"
    extras = sorted(k for k in record if k not in CORRECTNESS_KEYS)
    extra = ", ".join(f"{k}={fmt_any(record[k])}" for k in extras)
    return [status, *(fmt_any(record.get(k)) for k in CORRECTNESS_KEYS[:-1]), extra]


# ---------------------------------------------------------------- plots

def _plots_section(figures, skipped) -> list[str]:
    lines = ["## Plots", ""]
    if skipped:
        return lines + [f"> **Plots skipped: {skipped}.**", ""]
    for title, relpath, _data in figures:
        lines += [f"![{title}]({relpath})", ""]
    return lines


# ---------------------------------------------------------------- metadata

def _metadata_section(metadata) -> list[str]:
    lines = ["## Metadata", ""]
    if not metadata:
        return lines + ["No metadata.", ""]
    rows = [[key, fmt_metadata(metadata[key])] for key in sorted(metadata)]
    return lines + [table_text(rows, ["key", "value"]), ""]


