"""``python -m bench dag-model``: how short the DAG's decisions must be, in a model fed by its own trace.

    python -m bench dag-model [--run DIR] [--case ragged-2048] [--decisions 0,0.2,0.5,1,1.6]
                              [--handoff 0.7] [--workers N] [--a-claim TILES] [--out FILE]

The model is :mod:`numba_softmax.tiled.schedule_model`, fed with the task durations the run's trace
measured. Its decision cost is one constant per decision, so it credits any design with fewer
decisions (``--a-claim 4``, claims of four A tiles, models 7-9% faster at 2048 rows; the kernel
measured 2.6-3% slower, docs/attempts.md), where the kernel's decisions cost more the more a claim
carries (an arrival per row it touches, B held by the claim's last tile).

The model is used for differences only: it finds the decision cost with which it reproduces the
trace's span, and estimates the DAG's event time at another cost as the run's timed DAG median plus
the span the model gains or loses against itself. Prints a table (hand-off us, decision us, span us,
estimated DAG event us, that estimate / separate's graph-mode median) and writes it to ``--out``
when given (a new file only).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from bench.artifacts import read_records
from numba_softmax.cases import experiment_b_row_lengths
from numba_softmax.tiled import build_layout
from numba_softmax.tiled.schedule_model import calibrate, simulate
from numba_softmax.traces import read_csv


def traced_inputs(run, case):
    """From a run folder: the DAG trace's mean task durations per kind (throughput is what the model
    spends them on), its worker count and span, and the graph-mode event medians (us) of the DAG
    and of separate (None where the run has none)."""
    traces = [r for r in read_records(run, "traces.jsonl") or [] if r["case"] == case and r["scheduler"] == "dag"]
    if not traces:
        raise SystemExit(f"{run}: no DAG trace of {case} in traces.jsonl (a run with --trace records one)")
    kinds, data = read_csv(os.path.join(run, traces[0]["csv"]))
    kinds = np.asarray(kinds)
    took = (data[:, 1] - data[:, 0]) * 1e-3
    durations = {k: float(took[kinds == k].mean()) for k in ("A", "B", "C")}
    timings = read_records(run, "timings.jsonl") or []

    def median(variant):
        events = [r["per_invocation_us"] for r in timings if r["case"] == case and r["variant"] == variant
                  and r["mode"] == "graph" and r["metric"] == "event_us"]
        return float(np.median(events)) if events else None

    return durations, traces[0]["workers"], traces[0]["span_ns"] * 1e-3, median("dag"), median("separate")


def model_table(layout, workers, durations, decisions, handoffs, traced_span, dag_us, separate_us, a_claim=None):
    """Markdown rows, one per (decision, hand-off). The model is used for differences only: the
    estimated event time is the run's DAG median plus the span the model gains or loses against
    itself at the decision cost that reproduces the traced span. With ``a_claim`` (A tiles per claim,
    other than the traced kernel's two) the spans are the variant's, the calibration the kernel's."""
    lines = ["| hand-off us | decision us | span us | estimated dag event us | / separate |",
             "|---|---|---|---|---|"]
    for h in handoffs:
        traced_decision = calibrate(layout, workers, durations, h, traced_span)
        at_trace = simulate(layout, workers, durations, traced_decision, h).span_us
        for d in sorted(set(decisions) | {round(traced_decision, 2)}):
            span = simulate(layout, workers, durations, d, h, a_claim=a_claim).span_us
            estimate = None if dag_us is None else dag_us + span - at_trace
            ratio = f"{estimate / separate_us:.2f}" if estimate is not None and separate_us else "-"
            mark = " (the trace)" if d == round(traced_decision, 2) else ""
            lines.append(f"| {h:g} | {d:g}{mark} | {span:.1f} | "
                         + (f"{estimate:.1f}" if estimate is not None else "-") + f" | {ratio} |")
    return lines


def _floats(text):
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench dag-model", description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=os.path.join("results", "experiment_B"),
                        help="a run folder with DAG traces (default: results/experiment_B)")
    parser.add_argument("--case", default="ragged-2048")
    parser.add_argument("--decisions", type=_floats, default=[0.0, 0.2, 0.5, 1.0, 1.6, 2.0],
                        help="decision costs to model, us (comma-separated)")
    parser.add_argument("--handoff", type=_floats, default=[0.7],
                        help="hand-off costs to model, us (comma-separated; default 0.7, the hand-off probe's "
                             "order)")
    parser.add_argument("--workers", type=int, help="default: the traced run's worker count")
    parser.add_argument("--a-claim", type=int, default=None,
                        help="A tiles per claim in the modelled variant (the kernel's: two); the calibration "
                             "stays the traced kernel's")
    parser.add_argument("--out", help="also write the table to this new file")
    args = parser.parse_args(argv)


    lengths = experiment_b_row_lengths(args.case)
    if lengths is None:
        parser.error(f"--case {args.case!r} is not an Experiment B case")
    if args.a_claim is not None and args.a_claim < 1:
        parser.error("--a-claim takes a positive tile count")
    if any(v < 0 for v in args.decisions + args.handoff):
        parser.error("--decisions and --handoff take non-negative microseconds")
    if args.out and os.path.exists(args.out):
        parser.error(f"--out {args.out} exists; the model writes new files only")
    durations, traced_workers, traced_span, dag, separate = traced_inputs(args.run, args.case)
    workers = args.workers or traced_workers
    layout = build_layout(lengths)
    medians = ", ".join(f"{name} {value:.2f} us" for name, value in (("dag", dag), ("separate", separate))
                        if value is not None) or "none in this run"
    head = [f"DAG schedule model, {args.case}, {workers} workers, from {args.run}: mean task durations A "
            f"{durations['A']:.2f} us per tile, B {durations['B']:.2f} per row, C {durations['C']:.2f} per tile; "
            f"the trace's span {traced_span:.1f} us; graph-mode event medians: {medians}. The row marked "
            "(the trace) is the decision cost with which the model reproduces the trace's span (by bisection; its "
            "span column says how closely).", ""]
    if args.a_claim:
        head.insert(1, f"Modelled variant: A claims of {args.a_claim} tiles (C entries of two).")
    text = "\n".join(head + model_table(layout, workers, durations, args.decisions, args.handoff, traced_span,
                                        dag, separate, args.a_claim)) + "\n"
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "x", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
