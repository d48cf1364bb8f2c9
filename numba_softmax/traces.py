"""Task traces of the Experiment B schedulers: checks, CSV, Perfetto JSON, timeline PNG.

A trace is the int64 ``[tasks, 5]`` array a trace build fills (layout in
:mod:`numba_softmax.kernels.tracing`). The checks prove ordering, not performance:

* complete, unique coverage: every A, B and C task visited exactly once;
* each B(r) starts no earlier than the end of every A tile of row r;
* each C(t) starts no earlier than the end of B(row(t));
* separate and phased schedulers: full-phase ordering (no B before the last A ends,
  no C before the last B ends);
* DAG: early starts are counted (B or C tasks that started before the last A task of
  the whole grid ended); they are reported, not required.

:func:`time_breakdown` says where the traced time went: task durations per kind, the
gaps between a worker's consecutive tasks (its scheduling), and how busy workers were.

Timestamps are ``%globaltimer`` nanoseconds taken by the thread that owns each task
(after the barrier ending it); equal timestamps count as ordered (the timer is
coarser than some tasks). Intervals illustrate ordering, not SM utilization.
"""

import csv
import json
from dataclasses import asdict, dataclass, field

import numpy as np

from .kernels.tracing import TRACE_COLUMNS, TRACE_END, TRACE_FIELDS, TRACE_SM, TRACE_START, TRACE_VISITS
from .queue import tiles_per_claim

KINDS = ("A", "B", "C")


@dataclass
class TaskTable:
    """One row per task, in task-id order: A tiles, then B rows, then C tiles."""
    kind: np.ndarray      # "A" / "B" / "C"
    index: np.ndarray     # tile id (A, C) or row id (B)
    row: np.ndarray       # the row the task belongs to
    data: np.ndarray      # int64[tasks, TRACE_FIELDS]

    def column(self, name):
        return self.data[:, TRACE_COLUMNS.index(name)]

    def label(self, i):
        what = "row" if self.kind[i] == "B" else "tile"
        return f"{self.kind[i]}({what} {int(self.index[i])})"


def task_table(trace, layout):
    trace = np.asarray(trace, dtype=np.int64)
    n_tiles, rows = layout.n_tiles, layout.rows
    expected = (2 * n_tiles + rows, TRACE_FIELDS)
    if trace.shape != expected:
        raise ValueError(f"trace has shape {trace.shape}, expected {expected} for {rows} rows, {n_tiles} tiles")
    tiles = np.arange(n_tiles)
    kind = np.array(["A"] * n_tiles + ["B"] * rows + ["C"] * n_tiles)
    index = np.concatenate([tiles, np.arange(rows), tiles])
    row = np.concatenate([layout.tile_row, np.arange(rows), layout.tile_row]).astype(np.int64)
    return TaskTable(kind=kind, index=index, row=row, data=trace)


@dataclass
class TraceReport:
    scheduler: str
    tasks: int
    problems: list = field(default_factory=list)
    early_b: int = 0
    early_c: int = 0
    span_ns: int = 0
    sms_seen: int = 0
    workers_seen: int = 0

    @property
    def passed(self):
        return not self.problems

    def record(self):
        return dict(asdict(self), passed=self.passed)


def _first(mask):
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def check_trace(trace, layout, scheduler, max_listed=5):
    """Apply the ordering checks; the report names every offending task (up to ``max_listed``)."""
    table = task_table(trace, layout)
    n_tiles, rows = layout.n_tiles, layout.rows
    report = TraceReport(scheduler=scheduler, tasks=len(table.kind))
    start, end = table.data[:, TRACE_START], table.data[:, TRACE_END]
    visits = table.data[:, TRACE_VISITS]

    def complain(message, offenders):
        listed = ", ".join(table.label(i) for i in offenders[:max_listed])
        more = f" (+{len(offenders) - max_listed} more)" if len(offenders) > max_listed else ""
        report.problems.append(f"{message}: {listed}{more}")

    missing = np.flatnonzero(visits == 0)
    if missing.size:
        complain("never visited", missing)
    repeated = np.flatnonzero(visits > 1)
    if repeated.size:
        complain(f"visited more than once (up to {int(visits.max())} times)", repeated)
    seen = visits >= 1
    backwards = np.flatnonzero(seen & (end < start))
    if backwards.size:
        complain("end before start", backwards)

    a_end = end[:n_tiles]
    b_start, b_end = start[n_tiles:n_tiles + rows], end[n_tiles:n_tiles + rows]
    c_start = start[n_tiles + rows:]
    # last A end per row (the fan-in B waits on)
    last_a_end = np.full(rows, np.iinfo(np.int64).min)
    np.maximum.at(last_a_end, layout.tile_row, a_end)
    early_b_rows = np.flatnonzero(seen[n_tiles:n_tiles + rows] & (b_start < last_a_end))
    if early_b_rows.size:
        offenders = n_tiles + early_b_rows
        complain("B started before all A tiles of its row ended", offenders)
    early_c_tiles = np.flatnonzero(seen[n_tiles + rows:] & (c_start < b_end[layout.tile_row]))
    if early_c_tiles.size:
        complain("C started before its row's B ended", n_tiles + rows + early_c_tiles)

    if visits.min(initial=1) >= 1:
        last_a, last_b = int(a_end.max()), int(b_end.max())
        report.early_b = int(np.sum(b_start < last_a))
        report.early_c = int(np.sum(c_start < last_a))
        if scheduler in ("separate", "phased"):
            if report.early_b:
                complain("full-phase ordering broken: B started before the last A ended",
                         n_tiles + np.flatnonzero(b_start < last_a))
            before_b = np.flatnonzero(c_start < last_b)
            if before_b.size:
                complain("full-phase ordering broken: C started before the last B ended",
                         n_tiles + rows + before_b)
        report.span_ns = int(end.max() - start.min())
    report.sms_seen = int(np.unique(table.data[seen, TRACE_SM]).size)
    report.workers_seen = int(np.unique(table.column("worker")[seen]).size)
    return report


def time_breakdown(trace, layout, scheduler, workers=None):
    """Where a traced invocation's time went:

    * ``duration_us``: per task kind, median / p10 / p90 of end - start (the task itself);
    * ``gap_us``: per transition ``"A->C"`` etc. between consecutive block-level tasks of
      one persistent worker, median / p10 / p90 of the next start - the previous end (its
      scheduling: the decision, the claims, the barriers; in phased mode the A->C gap
      spans the grid barriers and the B phase). Empty for the separate scheduler, whose
      blocks run one task each; phased mode's B tasks are warp-level (a block's warps
      run several at once) and are left out of its gaps. In the DAG, where one decision
      takes two tiles (:func:`numba_softmax.queue.tiles_per_claim` of ``workers``, the
      launched count; the workers seen in the trace when not given), the step from a
      claim's first A tile to its second is ``"A->A in claim"`` and from a C entry's first
      tile to its second ``"C->C in entry"``: no decision lies between them, so they are
      kept apart from ``"A->A"`` and ``"C->C"``, which are then the decisions between claims.
      Each transition also carries ``per_worker``: the sum of its gaps over the number of
      workers, so that the transitions add up to where a worker's span went;
    * ``busy_fraction``: median over workers of (sum of the durations of those tasks) /
      (the worker's last end - its first start); None for the separate scheduler;
    * ``phase_us``: per kind, first start and last end relative to the earliest start;
    * ``a_end_us``: phased mode only, each worker's last A end relative to the earliest start,
      median / p10 / p90 over workers (:func:`worker_last_a_end`): with ``phase_us`` it splits the
      time between the A and C passes into the A pass's stragglers, the grid barriers and B;
    * ``reuse``: per tile, from the end of its A to the start of its C (the span in which C's
      reread of the tile can only hit L2 if the tile stays there): ``lag_us``, and ``between_mib``,
      the bytes the other A and C tasks that started meanwhile brought into L2 (x read by an A
      task, y written by a C task: 4 bytes per element each), median / p10 / p90; compare it with
      the L2's capacity. None when no tile has both.

    Medians over tasks of a trace build, which is never timed: the figures show where the
    time goes in that build (its own register count; the phased build has no prefetch), not
    the timed one's.
    """
    table = task_table(trace, layout)
    data = table.data
    seen = data[:, TRACE_VISITS] >= 1
    start, end = data[:, TRACE_START], data[:, TRACE_END]
    origin = _first_start(table)
    us = 1e-3

    duration = {k: _spread((end[seen & (table.kind == k)] - start[seen & (table.kind == k)]) * us)
                for k in KINDS if np.any(seen & (table.kind == k))}
    phase = {k: {"first_start": float((start[seen & (table.kind == k)].min() - origin) * us),
                 "last_end": float((end[seen & (table.kind == k)].max() - origin) * us)}
             for k in duration}
    reuse = _reuse(table, layout, seen, start, end)
    extra = {"a_end_us": worker_last_a_end(table.kind, data)} if scheduler == "phased" else {}
    if scheduler == "separate":
        return {"duration_us": duration, "gap_us": {}, "busy_fraction": None, "phase_us": phase, "reuse": reuse}
    worker = table.column("worker")
    block_level = seen & ((table.kind != "B") if scheduler == "phased" else True)
    order = np.lexsort((start, worker))  # each worker's tasks, in the order it ran them
    order = order[block_level[order]]
    prev, nxt = order[:-1], order[1:]
    same = worker[prev] == worker[nxt]
    prev, nxt = prev[same], nxt[same]
    transition = np.char.add(np.char.add(table.kind[prev], "->"), table.kind[nxt])
    if scheduler == "dag":
        transition = _label_pairs(transition, table, layout, prev, nxt,
                                  workers if workers is not None else np.unique(worker[seen]).size)
    gap = start[nxt] - end[prev]
    ids, first = np.unique(worker[order], return_index=True)
    # each transition's gaps also as a total per worker: where a worker's span goes, kind by kind
    gaps = {str(key): dict(_spread(gap[transition == key] * us),
                           per_worker=float(gap[transition == key].sum() * us / ids.size))
            for key in np.unique(transition)}
    busy_ns = np.add.reduceat(end[order] - start[order], first) if ids.size else np.array([])
    span_ns = (np.maximum.reduceat(end[order], first) - np.minimum.reduceat(start[order], first)
               if ids.size else np.array([]))
    busy = busy_ns[span_ns > 0] / span_ns[span_ns > 0]
    return {"duration_us": duration, "gap_us": gaps,
            "busy_fraction": float(np.median(busy)) if busy.size else None,
            "phase_us": phase, "reuse": reuse, **extra}


def _label_pairs(transition, table, layout, prev, nxt, workers):
    """The DAG's transitions inside one decision (see :func:`time_breakdown`): a claim of two A tiles
    starts at an even tile (``a_next`` grows by two from 0); a C entry of two tiles starts at its
    row's first tile or every second tile after it, and both tiles are in that row."""
    if tiles_per_claim(layout.n_tiles, workers) < 2:
        return transition
    first, second = table.index[prev], table.index[nxt]
    follows = second == first + 1
    a_pair = (table.kind[prev] == "A") & (table.kind[nxt] == "A") & follows & (first % 2 == 0)
    row = table.row[prev]
    c_pair = ((table.kind[prev] == "C") & (table.kind[nxt] == "C") & follows & (table.row[nxt] == row)
              & ((first - np.asarray(layout.row_first_tile, dtype=np.int64)[row]) % 2 == 0))
    transition = transition.astype(object)
    transition[a_pair] = "A->A in claim"
    transition[c_pair] = "C->C in entry"
    return transition.astype(str)


def worker_last_a_end(kinds, data):
    """Each worker's last A end (us after the earliest start of any task), median / p10 / p90 over
    the workers that ran an A task; None when none did. ``kinds`` and ``data`` as :func:`read_csv`
    returns them (or a task table's), so a run folder's CSV gives the same figure as the trace did."""
    kinds = np.asarray(kinds)
    seen = data[:, TRACE_VISITS] >= 1
    a = seen & (kinds == "A")
    if not a.any():
        return None
    origin = data[seen, TRACE_START].min()
    workers, inverse = np.unique(data[a, TRACE_COLUMNS.index("worker")], return_inverse=True)
    last = np.full(workers.size, np.iinfo(np.int64).min)
    np.maximum.at(last, inverse, data[a, TRACE_END])
    return _spread((last - origin) * 1e-3)


def _spread(values):
    """n, median, p10 and p90 of ``values``."""
    values = np.asarray(values, dtype=np.float64)
    return {"n": int(values.size), "median": float(np.median(values)),
            "p10": float(np.percentile(values, 10)), "p90": float(np.percentile(values, 90))}


def _reuse(table, layout, seen, start, end):
    """Per tile with both tasks traced: A's end -> C's start, and the bytes other tasks brought into L2
    meanwhile (see :func:`time_breakdown`)."""
    n = layout.n_tiles
    a, c = np.arange(n), np.arange(n) + n + layout.rows
    both = seen[a] & seen[c]
    if not both.any():
        return None
    tile_bytes = 4 * np.asarray(layout.tile_len, dtype=np.int64)
    # every traced A and C task's start and the bytes it brings into L2, in start order
    starts = np.concatenate([start[a][seen[a]], start[c][seen[c]]])
    brought = np.concatenate([tile_bytes[seen[a]], tile_bytes[seen[c]]])
    order = np.argsort(starts, kind="stable")
    starts, cumulative = starts[order], np.concatenate([[0], np.cumsum(brought[order])])
    # the tasks that started strictly after the tile's A ended and before its C started
    first = np.searchsorted(starts, end[a][both], side="right")
    last = np.searchsorted(starts, start[c][both], side="left")
    between = np.where(last > first, cumulative[np.maximum(last, first)] - cumulative[first], 0)
    return {"lag_us": _spread((start[c][both] - end[a][both]) * 1e-3), "between_mib": _spread(between / 2 ** 20)}


def _first_start(table):
    """Earliest start over visited tasks (0 when nothing ran): the timeline's origin."""
    starts = table.data[table.data[:, TRACE_VISITS] > 0, TRACE_START]
    return int(starts.min()) if starts.size else 0


def write_csv(path, trace, layout):
    table = task_table(trace, layout)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(("task", "kind", "index", "row") + TRACE_COLUMNS)
        for i in range(len(table.kind)):
            writer.writerow((i, table.kind[i], int(table.index[i]), int(table.row[i]),
                             *(int(v) for v in table.data[i])))


def read_csv(path):
    """(kinds, trace array) from a task CSV written by :func:`write_csv`."""
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    data = np.array([[int(r[c]) for c in TRACE_COLUMNS] for r in rows], dtype=np.int64)
    return [r["kind"] for r in rows], data


def write_perfetto(path, trace, layout, scheduler):
    """Chrome trace-event JSON (opens in ui.perfetto.dev): one track per SM, microseconds."""
    table = task_table(trace, layout)
    t0 = _first_start(table)
    events = []
    for i in np.flatnonzero(table.data[:, TRACE_VISITS] > 0):
        s, e, sm, worker, visits = (int(v) for v in table.data[i])
        events.append({"name": table.label(i), "cat": str(table.kind[i]), "ph": "X",
                       "ts": (s - t0) / 1e3, "dur": max(e - s, 0) / 1e3, "pid": 0, "tid": sm,
                       "args": {"row": int(table.row[i]), "worker": worker, "visits": visits}})
    sms = sorted({e["tid"] for e in events})
    events += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": sm, "args": {"name": f"SM {sm}"}}
               for sm in sms]
    events.append({"name": "process_name", "ph": "M", "pid": 0, "args": {"name": f"{scheduler} scheduler"}})
    with open(path, "w") as handle:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, handle)


COLORS = {"A": "#4C72B0", "B": "#DD8452", "C": "#55A868"}


def plot_timeline(path, trace, layout, scheduler, case, report=None):
    """PNG: one lane per SM, tasks coloured by kind. Returns the path, or None without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError:
        return None
    table = task_table(trace, layout)
    seen = table.data[:, TRACE_VISITS] > 0
    t0 = _first_start(table)
    sms = np.unique(table.data[seen, TRACE_SM])
    lane = {int(sm): k for k, sm in enumerate(sms)}
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.035 * len(sms) + 1.5)))
    for kind in KINDS:
        idx = np.flatnonzero(seen & (table.kind == kind))
        if not idx.size:
            continue
        starts = (table.data[idx, TRACE_START] - t0) / 1e3
        widths = np.maximum((table.data[idx, TRACE_END] - table.data[idx, TRACE_START]) / 1e3, 0.05)
        lanes = np.array([lane[int(sm)] for sm in table.data[idx, TRACE_SM]])
        ax.barh(lanes, widths, left=starts, height=0.8, color=COLORS[kind], linewidth=0)
    ax.set_xlabel("time since the first task started (us, %globaltimer)")
    ax.set_ylabel(f"SM lane ({len(sms)} SMs seen)")
    title = f"Experiment B {case}: {scheduler} scheduler, {len(table.kind)} tasks"
    if report is not None:
        title += f" -- checks {'passed' if report.passed else 'FAILED'}"
        if scheduler == "dag":
            title += f", early starts: {report.early_b} B / {report.early_c} C"
    ax.set_title(title)
    ax.legend(handles=[Patch(color=COLORS[k], label=f"{k} task") for k in KINDS], loc="upper right")
    ax.set_ylim(-1, len(sms))
    fig.text(0.01, 0.01, "Intervals show ordering, not SM utilization.", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
