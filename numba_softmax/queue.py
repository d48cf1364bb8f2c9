"""The DAG queue protocol of Experiment B: where each word lives, what an error means, and the
exact state a finished invocation must leave.

Shared by both sides: the persistent kernel (:mod:`numba_softmax.kernels.persistent`) reads and
writes these words on the device, and the host (:mod:`numba_softmax.tiled`) checks them after every
invocation. It imports nothing from the package, so the kernels can depend on it without pointing up
a layer. The queue state (``counters``, ``row_arrivals``, ``fifo_slots``), the protocol and the
error codes are described in docs/experiment_b.md, "The DAG's queue protocol".
"""

import numpy as np

#: A FIFO slot's value until its task is published (task ids are >= 0).
SLOT_EMPTY = -1

#: Words of one 128-byte L2 line.
COUNTER_LINE_WORDS = 32
#: Word index of each counter in ``counters``: the four counters every task touches each own a
#: 128-byte line, the error words and the overshoot counts share the fifth, the grid barrier has the
#: sixth (docs/experiment_b.md says why). The words in between are padding and stay 0.
COUNTER_INDEX = {
    "a_next": 0 * COUNTER_LINE_WORDS,
    "fifo_head": 1 * COUNTER_LINE_WORDS,
    "fifo_tail": 2 * COUNTER_LINE_WORDS,
    "c_done": 3 * COUNTER_LINE_WORDS,
    "error_code": 4 * COUNTER_LINE_WORDS,
    "error_task": 4 * COUNTER_LINE_WORDS + 1,
    "error_waited_on": 4 * COUNTER_LINE_WORDS + 2,
    "error_worker": 4 * COUNTER_LINE_WORDS + 3,
    "a_overshoot": 4 * COUNTER_LINE_WORDS + 4,
    "head_overshoot": 4 * COUNTER_LINE_WORDS + 5,
    "grid_barrier": 5 * COUNTER_LINE_WORDS,
}
A_NEXT = COUNTER_INDEX["a_next"]
FIFO_HEAD = COUNTER_INDEX["fifo_head"]
FIFO_TAIL = COUNTER_INDEX["fifo_tail"]
C_DONE = COUNTER_INDEX["c_done"]
ERROR_CODE = COUNTER_INDEX["error_code"]
ERROR_TASK = COUNTER_INDEX["error_task"]
ERROR_WAITED_ON = COUNTER_INDEX["error_waited_on"]
ERROR_WORKER = COUNTER_INDEX["error_worker"]
A_OVERSHOOT = COUNTER_INDEX["a_overshoot"]
HEAD_OVERSHOOT = COUNTER_INDEX["head_overshoot"]
#: The phased scheduler's grid barrier word (its own line). Self-resetting: each barrier adds
#: exactly 2**31 in total, so it flips the top bit and leaves the low 31 bits at 0; it must be
#: 0 when the buffers are allocated, and a complete phased run leaves it so. The DAG's reset
#: zeroes it with everything else; the DAG never touches it.
GRID_BARRIER = COUNTER_INDEX["grid_barrier"]
COUNTER_NAMES = tuple(COUNTER_INDEX)
#: Length of the ``counters`` array (int32 words, padding included): the grid barrier's word is the last.
COUNTER_SLOTS = GRID_BARRIER + 1
#: What ``init_queue_kernel`` writes into ``counters``: -1 in error_task, error_waited_on
#: and error_worker ("not recorded"), 0 everywhere else.
COUNTER_INITIAL = tuple(-1 if ERROR_TASK <= i <= ERROR_WORKER else 0 for i in range(COUNTER_SLOTS))

ERR_NONE = 0
ERR_READY_TIMEOUT = 1
ERR_COMPLETION_TIMEOUT = 2
ERR_INVALID_TASK = 3
ERR_FIFO_OVERFLOW = 4
ERR_BARRIER_TIMEOUT = 5
ERROR_NAMES = {
    ERR_NONE: "no error",
    ERR_READY_TIMEOUT: "waited too long for a FIFO slot's ready flag",
    ERR_COMPLETION_TIMEOUT: "waited too long for completion (no claimable task, C tiles unfinished)",
    ERR_INVALID_TASK: "read an invalid task id from a FIFO slot",
    ERR_FIFO_OVERFLOW: "FIFO overflow: a publish reserved a slot beyond the capacity",
    ERR_BARRIER_TIMEOUT: "waited too long at a grid barrier (phased)",
}

#: Tiles per DAG claim: where every worker has at least this many tiles, a worker claims two
#: consecutive A tiles with one ``atomicAdd(a_next, 2)`` and runs them back to back, and a C entry
#: of the FIFO holds two consecutive tiles of a row (one scheduling decision per pair of either
#: kind); otherwise one. The kernel applies the same rule on the device.
TILES_PER_CLAIM = 2


def tiles_per_claim(n_tiles, workers):
    """Tiles per A claim and per C entry of a DAG invocation with ``workers`` workers
    (:data:`TILES_PER_CLAIM`)."""
    return TILES_PER_CLAIM if n_tiles >= TILES_PER_CLAIM * workers else 1


#: Bound on every spin loop (polls); each idle poll sleeps at most 256 ns.
DEFAULT_MAX_POLLS = 1 << 22


class QueueStateError(AssertionError):
    """The DAG queue did not end in the exact expected state."""


def expected_counters(layout, a_overshoot=0, head_overshoot=0, claim=1):
    """Exact ``counters`` after a complete, error-free DAG invocation.

    Claims are tickets (``atomicAdd``); a ticket past the end is counted, so, with ``claim``
    tiles per A claim and per C entry (:func:`tiles_per_claim`; a claim that is not past the end
    may get fewer tiles at the end, a C entry at the end of its row) and
    ``E = layout.fifo_entries(claim)`` FIFO entries (every B, the C entries):

    * a_next == claim * (ceil(n_tiles / claim) + a_overshoot)
                                            every A tile claimed exactly once
    * fifo_tail == E                        every B task and C entry published exactly once
    * fifo_head - head_overshoot == E       every published entry consumed exactly once
    * c_done == n_tiles                     every C tile finished
    * error_code == 0; error_task == error_waited_on == error_worker == -1 (untouched)

    The overshoots are the failed claims (workers that found nothing left); they are
    read from the counters themselves and must be non-negative.
    """
    expected = {name: COUNTER_INITIAL[index] for name, index in COUNTER_INDEX.items()}
    claims = -(-layout.n_tiles // claim)
    entries = layout.fifo_entries(claim)
    expected.update(a_next=claim * (claims + a_overshoot), fifo_head=entries + head_overshoot,
                    fifo_tail=entries, c_done=layout.n_tiles,
                    a_overshoot=a_overshoot, head_overshoot=head_overshoot)
    return expected


def describe_error(counters_host, layout=None):
    """Human-readable decoding of the error fields."""
    c = np.asarray(counters_host)
    code, task, waited, worker = (int(c[ERROR_CODE]), int(c[ERROR_TASK]),
                                  int(c[ERROR_WAITED_ON]), int(c[ERROR_WORKER]))
    meaning = ERROR_NAMES.get(code, "unknown error code")
    who = f"worker {worker}"
    if code == ERR_READY_TIMEOUT:
        what = f"{who} claimed FIFO slot {waited} and waited too long for its ready flag"
    elif code == ERR_COMPLETION_TIMEOUT:
        total = f" of {layout.n_tiles}" if layout is not None else ""
        what = (f"{who} found no claimable task and waited too long for completion: "
                f"c_done was {waited}{total}")
    elif code == ERR_INVALID_TASK:
        what = f"{who} read invalid task id {task} from FIFO slot {waited}"
        if layout is not None:
            what += f" (valid ids are 0..{layout.fifo_capacity - 1})"
    elif code == ERR_BARRIER_TIMEOUT:
        what = f"{who} waited too long at grid barrier {task}: {waited} of the workers had arrived"
    elif code == ERR_FIFO_OVERFLOW:
        what = f"{who} publishing task {task} reserved slot {waited} beyond the FIFO capacity"
        if layout is not None:
            what += f" {layout.fifo_capacity}"
    else:
        what = f"{who}, task {task}, waited on {waited}"
    return f"error_code {code} ({meaning}): {what}"


def verify_counters(counters_host, layout, workers=None):
    """Check the exact DAG counters; raise :class:`QueueStateError` naming what is wrong.

    With ``workers`` (the launched worker count) the overshoots are exact too: a worker
    leaves only after one A claim and one FIFO ticket came back past the end, and claims
    nothing after that, so a complete run ends with a_overshoot == head_overshoot == workers;
    the tiles per claim follow from ``workers`` (:func:`tiles_per_claim`). Without ``workers``
    the claim size is the one of 1 and :data:`TILES_PER_CLAIM` that ``a_next`` and ``fifo_tail``
    fit (1 if neither).
    """
    c = np.asarray(counters_host)
    if c.shape != (COUNTER_SLOTS,):
        raise QueueStateError(f"counters must have {COUNTER_SLOTS} words, got shape {c.shape}")
    if int(c[ERROR_CODE]) != ERR_NONE:
        raise QueueStateError("DAG worker reported an error: " + describe_error(c, layout))
    a_over, head_over = int(c[A_OVERSHOOT]), int(c[HEAD_OVERSHOOT])
    if a_over < 0 or head_over < 0:
        raise QueueStateError(f"negative overshoot counters: a_overshoot {a_over}, head_overshoot {head_over}")
    if workers is not None:
        claim = tiles_per_claim(layout.n_tiles, workers)
    else:
        def fits(k):
            expected = expected_counters(layout, a_over, head_over, k)
            return expected["a_next"] == int(c[A_NEXT]) and expected["fifo_tail"] == int(c[FIFO_TAIL])
        claim = next((k for k in (1, TILES_PER_CLAIM) if fits(k)), 1)
    expected = expected_counters(layout, a_over, head_over, claim)
    wrong = [f"{name} = {int(c[i])}, expected {expected[name]}"
             for name, i in COUNTER_INDEX.items() if int(c[i]) != expected[name]]
    if workers is not None and (a_over, head_over) != (workers, workers):
        wrong.append(f"a_overshoot {a_over} and head_overshoot {head_over}: expected one of each per worker, "
                     f"{workers}")
    padding = np.delete(c, list(COUNTER_INDEX.values()))
    if padding.any():
        wrong.append(f"{int(np.count_nonzero(padding))} padding words between the counters were written")
    if wrong:
        raise QueueStateError(f"DAG queue counters wrong ({layout.rows} rows, {layout.n_tiles} tiles): "
                              + "; ".join(wrong))
    return expected


def verify_queue(state, layout, workers=None):
    """Counters plus the FIFO and arrivals: every B task and C entry published exactly once, the
    slots past them untouched, each row's C entries after its B, and
    row_arrivals == row_tile_count (``workers``: see :func:`verify_counters`)."""
    expected = verify_counters(state["counters"], layout, workers)
    entries = expected["fifo_tail"]
    slots = np.asarray(state["fifo_slots"])
    arrivals = np.asarray(state["row_arrivals"])
    problems = []
    if np.any(slots[:entries] == SLOT_EMPTY):
        problems.append(f"FIFO slots never published: {np.flatnonzero(slots[:entries] == SLOT_EMPTY)[:8].tolist()}")
    if np.any(slots[entries:] != SLOT_EMPTY):
        unused = np.flatnonzero(slots[entries:] != SLOT_EMPTY) + entries
        problems.append(f"FIFO slots past the {entries} entries were written: {unused[:8].tolist()}")
    claim = next(k for k in (1, TILES_PER_CLAIM) if layout.fifo_entries(k) == entries)
    c_first = layout.c_entry_tiles(claim)
    ids = np.concatenate([np.arange(layout.rows), layout.rows + c_first])
    used = slots[:entries]
    if not np.array_equal(np.sort(used), ids):
        problems.append(f"fifo_slots is not a permutation of all B task ids and C entry ids ({claim} tile(s) each)")
    else:
        position = np.full(layout.rows + layout.n_tiles, -1, dtype=np.int64)
        position[used] = np.arange(entries)
        b_pos = position[:layout.rows]
        c_pos = position[layout.rows + c_first]
        early = c_first[c_pos <= b_pos[layout.tile_row[c_first]]]
        if early.size:
            problems.append(f"C tiles {early[:8].tolist()} published before their row's B")
    bad_rows = np.flatnonzero(arrivals != layout.row_tile_count)
    if bad_rows.size:
        r = int(bad_rows[0])
        problems.append(f"row_arrivals[{r}] = {int(arrivals[r])}, expected {int(layout.row_tile_count[r])}"
                        f" ({bad_rows.size} rows wrong)")
    if problems:
        raise QueueStateError("DAG queue state wrong: " + "; ".join(problems))
    return True
