"""``python -m bench dag-model``: how short the DAG's decisions must be, in a model fed by its own trace.

    python -m bench dag-model [--run DIR] [--case ragged-2048] [--decisions 0,0.2,0.5,1,1.6]
                              [--handoff 0.7] [--workers N] [--a-claim TILES] [--out FILE]

An event simulation of the DAG scheduler's policy on one Experiment B case's task graph, with the
task durations the run's trace measured (per kind, the mean: A per tile, B per row, C per tile;
throughput is what the model spends them on) and two costs it varies:

* ``decision``: from a worker's task end to the start of its next task when that task is already
  available (the claim's or the FIFO slot's round trips, the block barrier); also the period at
  which an idle worker looks again;
* ``handoff``: from a producer's end to its consumer's visibility in the FIFO (the row arrival and
  B's publish, or B's publish of its C entries).

The policy is the kernel's (``numba_softmax/kernels/persistent/decision.py``): a worker takes the oldest
visible FIFO entry (a B, or a C entry of ``claim`` tiles of one row) and claims the next A tiles
(``claim`` at a time, in tile order) only when none is visible; it leaves when nothing is left.
What the model leaves out is said where it matters: tickets (a published entry here goes to the
next free worker, not to the worker holding its slot), memory bandwidth (a task takes its mean
time however many run at once) and the tail of the duration distributions. So it is a bound on
what faster decisions alone can give, not a prediction of a kernel's time, and not a judge of
other designs: its decision cost is one constant per decision, so it credits any design with
fewer decisions (``--a-claim 4``, claims of four A tiles, models 7-9% faster at 2048 rows; the
kernel measured 2.6-3% slower, PERFORMANCE.md), where the kernel's decisions cost more the more
a claim carries (an arrival per row it touches, B held by the claim's last tile).

The model is used for differences only: it finds the decision cost with which it reproduces the
trace's span, and estimates the DAG's event time at another cost as the run's timed DAG median plus
the span the model gains or loses against itself. Prints a table (hand-off us, decision us, span us,
estimated DAG event us, that estimate / separate's graph-mode median) and writes it to ``--out``
when given (a new file only).
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
from collections import deque
from dataclasses import dataclass

import numpy as np

from bench.artifacts import read_records
from numba_softmax.cases import experiment_b_row_lengths
from numba_softmax.tiled import build_layout
from numba_softmax.traces import read_csv

#: The pairs the kernel runs back to back have this gap between their two tiles (the trace's
#: ``A->A in claim`` and ``C->C in entry`` medians at f77fc94).
PAIR_STEP_US = 0.03


@dataclass(frozen=True)
class ModelResult:
    span_us: float
    busy: float          # tasks' time over workers x span
    tasks: int


def simulate(layout, workers, durations, decision_us, handoff_us, claim=2, a_claim=None):
    """Span of one invocation under the DAG's policy (see the module docstring).

    ``durations``: ``{"A": us per tile, "B": us per row, "C": us per tile}``; ``claim``: tiles per
    C entry and, unless ``a_claim`` says otherwise, per A claim. Deterministic: ties between workers
    go to the lower worker id.
    """
    a_claim = a_claim or claim
    if workers < 1 or decision_us < 0 or handoff_us < 0:
        raise ValueError(f"workers {workers}, decision {decision_us} us, handoff {handoff_us} us: "
                         "need workers >= 1 and non-negative costs")
    n_tiles, rows = layout.n_tiles, layout.rows
    tile_row = layout.tile_row
    remaining = layout.row_tile_count.astype(int).tolist()  # A tiles of each row not yet finished
    fifo = deque()         # (visible at, kind, first, count): entries in publication order
    next_a = 0
    left = n_tiles + rows + n_tiles  # tasks not yet finished
    busy = 0.0
    free = [(0.0, w) for w in range(workers)]  # (when the worker looks for its next task, id)
    heapq.heapify(free)
    finishing = []         # (end, kind, first, count) of the tasks running
    span = 0.0

    def complete(end, kind, first, count):
        nonlocal left
        left -= count
        if kind == "A":
            for t in range(first, first + count):
                r = int(tile_row[t])
                remaining[r] -= 1
                if remaining[r] == 0:
                    fifo.append((end + handoff_us, "B", r, 1))
        elif kind == "B":
            start, n = int(layout.row_first_tile[first]), int(layout.row_tile_count[first])
            for t in range(start, start + n, claim):
                fifo.append((end + handoff_us, "C", t, min(claim, start + n - t)))

    while free:
        now, w = heapq.heappop(free)
        # every task that ended by now has published what it publishes
        while finishing and finishing[0][0] <= now:
            complete(*heapq.heappop(finishing))
        decided = now + decision_us
        if fifo and fifo[0][0] <= decided:
            _, kind, first, count = fifo.popleft()
            start = decided
        elif next_a < n_tiles:
            kind, first, count = "A", next_a, min(a_claim, n_tiles - next_a)
            next_a += count
            start = decided
        elif fifo:  # published, not yet visible (the FIFO's times only grow): wait for the oldest
            visible, kind, first, count = fifo.popleft()
            start = max(decided, visible)
        elif finishing:  # something will be published: look again when the next task ends
            heapq.heappush(free, (max(finishing[0][0], decided), w))
            continue
        else:
            continue  # nothing left: the worker leaves
        length = (durations[kind] * count + PAIR_STEP_US * (count - 1)) if kind != "B" else durations["B"]
        heapq.heappush(finishing, (start + length, kind, first, count))
        busy += length
        span = max(span, start + length)  # the invocation ends with its last task
        heapq.heappush(free, (start + length, w))
    while finishing:
        complete(*heapq.heappop(finishing))
    if left != 0:
        raise AssertionError(f"the model left {left} tasks undone")
    return ModelResult(span_us=span, busy=busy / (workers * span) if span else 0.0,
                       tasks=2 * n_tiles + rows)


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


def calibrate(layout, workers, durations, handoff_us, span_us, iterations=24, a_claim=None):
    """The decision cost at which the model's span meets ``span_us``, by bisection over 0-10 us (the
    span grows with the decision cost, though not strictly: the result's own span may differ a little)."""
    low, high = 0.0, 10.0
    for _ in range(iterations):
        middle = (low + high) / 2
        if simulate(layout, workers, durations, middle, handoff_us, a_claim=a_claim).span_us < span_us:
            low = middle
        else:
            high = middle
    return (low + high) / 2


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
