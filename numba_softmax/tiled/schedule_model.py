"""A model of the DAG scheduler's policy on one tiled task graph: how short its decisions must be.

An event simulation of ``numba_softmax/kernels/persistent/decision.py``'s policy with given task durations
(per kind, the mean: A per tile, B per row, C per tile) and two costs it varies:

* ``decision``: from a worker's task end to the start of its next task when that task is already
  available (the claim's or the FIFO slot's round trips, the block barrier); also the period at
  which an idle worker looks again;
* ``handoff``: from a producer's end to its consumer's visibility in the FIFO (the row arrival and
  B's publish, or B's publish of its C entries).

A worker takes the oldest visible FIFO entry (a B, or a C entry of ``claim`` tiles of one row) and
claims the next A tiles (``claim`` at a time, in tile order) only when none is visible; it leaves when
nothing is left. Left out: tickets (a published entry goes to the next free worker, not to the worker
holding its slot), memory bandwidth (a task takes its mean time however many run at once) and the
tails of the duration distributions. So it bounds what faster decisions alone can give; it predicts no
kernel's time and judges no other design (docs/experiment_b.md; ``python -m bench dag-model`` feeds
it a run's trace).
"""

import heapq
from collections import deque
from dataclasses import dataclass

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
