"""``python -m bench --experiment B --trace``: trace builds on representative cases.

Runs after every timing run of the sweep, never inside one: the trace builds are
separate compilations (:mod:`numba_softmax.kernels.tracing`) with their own buffers.
Per case and scheduler it writes ``traces/<case>_<scheduler>.csv`` (one row per task),
``.json`` (Chrome/Perfetto trace events, one track per SM) and ``.png`` (timeline),
and one record per trace in ``traces.jsonl`` (the checks' verdict, early starts).
"""

import os

from numba_softmax import tiled_softmax
from numba_softmax.cases import EXPERIMENT_B_SCHEDULERS, experiment_b_row_lengths, row_lengths_digest
from numba_softmax.fixtures import packed_fixture
from numba_softmax.oracle import AcceptanceError, PackedReference
from numba_softmax.tiled import build_layout
from numba_softmax.traces import check_trace, plot_timeline, read_csv, time_breakdown, write_csv, write_perfetto

#: One balanced and one ragged case: the smallest and the largest row counts.
REPRESENTATIVE_CASES = ("balanced-128", "ragged-2048")
TRACE_FIXTURE = "random"
TRACE_NOTE = ("Trace intervals show ordering (%globaltimer, taken after the barrier that ends each task), "
              "not SM utilization; trace builds are never timed.")


def run_traces(run, stream, cases, gpu):
    """``cases``: (name, row_lengths) pairs. Raises AcceptanceError if a check fails (after writing)."""
    failures = []
    for name, lengths in cases:
        values = packed_fixture(TRACE_FIXTURE, lengths)
        reference = PackedReference(values, lengths)
        for scheduler in EXPERIMENT_B_SCHEDULERS:
            workers = 1 if (not gpu and scheduler != "separate") else None
            result = tiled_softmax(values, lengths, scheduler=scheduler, workers=workers,
                                   stream=stream if gpu else None, trace=True)
            correct = reference.check(result.out)
            report = check_trace(result.trace, result.layout, scheduler)
            stem = f"traces/{name}_{scheduler}"
            os.makedirs(run.path_of("traces"), exist_ok=True)
            write_csv(run.path_of(stem + ".csv"), result.trace, result.layout)
            write_perfetto(run.path_of(stem + ".json"), result.trace, result.layout, scheduler)
            png = plot_timeline(run.path_of(stem + ".png"), result.trace, result.layout, scheduler, name, report)
            run.append_jsonl("traces.jsonl", dict(
                report.record(), case=name, scheduler=scheduler, workers=result.workers,
                breakdown=time_breakdown(result.trace, result.layout, scheduler, result.workers),
                fixture=TRACE_FIXTURE, output_passed=correct.passed, csv=stem + ".csv",
                perfetto=stem + ".json", png=(stem + ".png") if png else None, note=TRACE_NOTE))
            if not report.passed:
                failures.append(f"{name}/{scheduler}: " + "; ".join(report.problems))
            if not correct.passed:
                failures.append(f"{name}/{scheduler} trace build output: {correct.describe()}")
    if failures:
        raise AcceptanceError("trace checks failed: " + " | ".join(failures))


def trace_summary_lines(records):
    """Markdown for summary.md from traces.jsonl records (empty list when there are none)."""
    if not records:
        return []
    lines = ["## Task traces", "", TRACE_NOTE, "",
             "| case | scheduler | workers | tasks | checks | early B | early C | span (us) | SMs seen | files |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        files = f"[csv]({r['csv']}) [perfetto]({r['perfetto']})"
        if r.get("png"):
            files += f" [timeline]({r['png']})"
        verdict = "passed" if r["passed"] else "FAILED: " + "; ".join(r["problems"])
        lines.append(f"| {r['case']} | {r['scheduler']} | {r['workers'] or '-'} | {r['tasks']} | {verdict} | "
                     f"{r['early_b']} | {r['early_c']} | {r['span_ns'] / 1e3:.1f} | {r['sms_seen']} | {files} |")
    lines += ["", "Early starts: B or C tasks that started before the last A task of the whole grid ended "
                  "(counted for the DAG, not required; zero by construction for separate and phased).", ""]
    lines += breakdown_lines(records)
    lines += passes_lines(records)
    for r in records:
        if r.get("png"):
            lines.append(f"![{r['case']} {r['scheduler']}]({r['png']})")
    return lines + [""]


def breakdown_lines(records):
    """"Where the time goes" table from the records' ``breakdown`` (traces.time_breakdown)."""
    with_breakdown = [r for r in records if r.get("breakdown")]
    if not with_breakdown:
        return []
    lines = ["### Where the time goes (trace builds)", "",
             "Per task kind, the median (p90) task duration; per worker, the median (p10-p90) gap between two "
             "consecutive tasks by transition, with the count and the gaps' sum per worker (the worker's "
             "scheduling: decision, claims, barriers; none for the separate launches, one task per block; for "
             "the DAG, `A->A in claim` and `C->C in entry` are the steps inside one decision's two tiles, and "
             "`A->A`, `C->C` the decisions between claims and entries); the median busy fraction of a worker's "
             "span; when the last A ended; and per tile, from the end of its A to the start of its C, the time "
             "and the MiB the other A and C tasks brought into L2 meanwhile (x read, y written; median, "
             "p10-p90): C rereads its tile from L2 only where that stays well below the L2's capacity. Trace "
             "builds have their own register count (and the phased one no prefetch): use this for shares, not "
             "times.",
             "", "| case | scheduler | A us | B us | C us | gaps us (transition: median p10-p90, count, sum per "
                 "worker) | busy | last A end us | span us | A end -> C start us | MiB into L2 meanwhile |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in with_breakdown:
        b = r["breakdown"]
        durations = [f"{b['duration_us'][k]['median']:.2f} ({b['duration_us'][k]['p90']:.2f})"
                     if k in b["duration_us"] else "-" for k in ("A", "B", "C")]
        gaps = "; ".join(f"{key}: {g['median']:.2f} {g['p10']:.2f}-{g['p90']:.2f}, {g['n']}"
                         + (f" ({g['per_worker']:.1f} per worker)" if "per_worker" in g else "")
                         for key, g in b["gap_us"].items()) or "-"
        busy = f"{b['busy_fraction']:.2f}" if b.get("busy_fraction") is not None else "-"
        last_a = b["phase_us"].get("A", {}).get("last_end")
        last_a = f"{last_a:.1f}" if last_a is not None else "-"
        reuse = b.get("reuse")
        lag, mib = ("-", "-") if reuse is None else (f"{q['median']:.1f} {q['p10']:.1f}-{q['p90']:.1f}"
                                                     for q in (reuse["lag_us"], reuse["between_mib"]))
        lines.append(f"| {r['case']} | {r['scheduler']} | {' | '.join(durations)} | {gaps} | {busy} | {last_a} | "
                     f"{r['span_ns'] / 1e3:.1f} | {lag} | {mib} |")
    return lines + [""]


def passes_lines(records):
    """"Between the passes" table: the phased traces' time from the A pass to the C pass, split into
    the A pass's stragglers, the two grid barriers and B (from ``phase_us`` and ``a_end_us``)."""
    phased = [r for r in records if r.get("scheduler") == "phased" and r.get("breakdown")
              and all(k in r["breakdown"]["phase_us"] for k in ("A", "B", "C"))]
    if not phased:
        return []
    lines = ["### Between the passes (phased)", "",
             "From the phased traces: a worker's last A tile ends (median over workers) before the last worker's "
             "does (the A pass's stragglers: the difference), the first grid barrier lets B start (last A end -> "
             "first B start), B runs (first B start -> last B end), the second barrier lets C start (last B end -> "
             "first C start), and the C pass runs to the end. The last column is the median worker's wait from its "
             "last A tile to the first C tile: what a persistent kernel pays between its passes where separate pays "
             "a kernel boundary in each of the two places (the tiles probe, `python -m bench probe tiles`, times "
             "separate's three kernels; its trace builds are launched one by one and show host gaps instead).",
             "", "| case | median worker's last A end us | last A end us | stragglers us | first barrier us | "
                 "B us | second barrier us | C pass us | median worker: last A -> first C us |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in phased:
        phase, a_end = r["breakdown"]["phase_us"], r["breakdown"].get("a_end_us")
        a_last, b_first, b_last = phase["A"]["last_end"], phase["B"]["first_start"], phase["B"]["last_end"]
        c_first, c_last = phase["C"]["first_start"], phase["C"]["last_end"]
        median_end = a_end["median"] if a_end else None
        cells = [median_end, a_last, None if a_end is None else a_last - median_end, b_first - a_last,
                 b_last - b_first, c_first - b_last, c_last - c_first, None if a_end is None else c_first - median_end]
        lines.append(f"| {r['case']} | " + " | ".join("-" if v is None else f"{v:.2f}" for v in cells) + " |")
    return lines + [""]


def current_breakdowns(records, layouts, folder):
    """Each record's breakdown recomputed from its task CSV in ``folder`` by the current
    :func:`numba_softmax.traces.time_breakdown`, so that a run recorded before a field of it existed
    (``a_end_us``, the DAG's steps inside a claim) reads as a new one would. ``layouts``: the run's
    ``layouts.jsonl`` records, whose row-length digest must match the case's. A record whose CSV is
    gone, whose case is not a known one, or whose layout does not match keeps what was recorded;
    records on disk are not changed."""
    recorded = {r["case"]: r for r in layouts}
    current = []
    for r in records:
        layout_record = recorded.get(r.get("case"))
        lengths = experiment_b_row_lengths(r.get("case"))
        path = os.path.join(folder, r["csv"]) if r.get("csv") else None
        if (r.get("breakdown") is not None and layout_record is not None and lengths is not None
                and row_lengths_digest(lengths) == layout_record.get("row_lengths_sha")
                and path is not None and os.path.exists(path)):
            layout = build_layout(lengths, layout_record["tile_elements"])
            _, data = read_csv(path)
            if data.shape[0] == 2 * layout.n_tiles + layout.rows:
                r = dict(r, breakdown=time_breakdown(data, layout, r["scheduler"], r.get("workers")))
        current.append(r)
    return current
