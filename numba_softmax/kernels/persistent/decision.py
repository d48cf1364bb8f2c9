"""Thread 0's scheduling decision in the DAG mode: FIFO tickets first, then A claims, then exit.

Claims are tickets (one ``atomicAdd`` each), never CAS loops; every wait is bounded by
``max_polls`` and a timeout records an error and exits. The rules and why: docs/experiment_b.md,
"The DAG's queue protocol".
"""

from numba import cuda, int32, uint32

from ...numerics import KERNEL_OPTIONS
from ...queue import (A_NEXT, A_OVERSHOOT, C_DONE, ERR_COMPLETION_TIMEOUT, ERR_READY_TIMEOUT, ERROR_CODE, FIFO_HEAD,
                      HEAD_OVERSHOOT, SLOT_EMPTY)
from ..ordering import atomic_add_release_gpu, backoff, load_acquire_gpu, load_relaxed_gpu
from .queue_ops import KIND_A, KIND_EXIT, KIND_SYNC, decode_fifo_task, record_error

#: A waiting worker looks for another worker's error once per this many polls.
ERROR_POLL_EVERY = 32

#: Thread 0's ticket when it holds no FIFO slot: take one at the next decision ...
TICKET_NONE = -1
#: ... or never again: a ticket came back past the capacity (every B/C task has a consumer).
TICKET_EXHAUSTED = -2
#: Thread 0's view of its ticket's slot when it did not read it during the task just run (never a
#: slot's value).
SEEN_NOTHING = -2

#: Thread 0's scheduling state between decisions (DAG mode), slots of a shared int32 array.
STATE_C_WAITING = 0
STATE_C_UNFLUSHED = 1
STATE_TICKET = 2
STATE_A_DONE = 3
STATE_SEEN_SLOT = 4
STATE_SLOTS = 5


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def acquire_ticket_slot(fifo_slots, ticket):
    """The ticket's slot with acquire (what its producer wrote before the publish is visible after it),
    and whether it holds a task yet."""
    task = load_acquire_gpu(fifo_slots, ticket)
    return task, task != SLOT_EMPTY


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def leave_at_once(counters, n_tiles):
    """A worker with nothing left to claim leaves: every B and C task left is held by a live ticket."""
    return True


def make_next_task(take_ticket_slot, may_leave):
    """Thread 0's scheduling decision. ``take_ticket_slot(fifo_slots, ticket)`` returns the ticket's slot
    and whether it holds a task (:func:`acquire_ticket_slot`); ``may_leave(counters, n_tiles)`` says whether a
    worker with nothing left to claim leaves now (:func:`leave_at_once`). Other hooks: controls and diagnostics.

    The rules, in order (docs/experiment_b.md, "The decision"): 1. the FIFO ticket's task once its slot is
    published (the next ticket is requested at once, so that round trip overlaps the task); 2. else the next
    A claim of ``claim`` tiles; 3. else, nothing left, add the finished C tiles (``c_unflushed``) to ``c_done``
    with one release add and leave. A claim or ticket past the end is counted once per worker.
    Returns ``(kind, index, ticket, a_done, c_unflushed)``; the last three carry over.
    """

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def next_task(counters, fifo_slots, capacity, rows, n_tiles, max_polls, ticket, a_done, c_unflushed,
                  c_waiting, seen_slot, claim):
        if ticket == TICKET_NONE:
            ticket = cuda.atomic.add(counters, FIFO_HEAD, 1)
        if ticket >= capacity:
            cuda.atomic.add(counters, HEAD_OVERSHOOT, 1)
            ticket = int32(TICKET_EXHAUSTED)
        # The ticket's slot read empty at the start of the A task just run: claim the next A tile at
        # once instead of reading the slot again first (first pass only; see the docstring).
        skip_slot = seen_slot == SLOT_EMPTY and not a_done
        polls = int32(0)  # 32-bit, as the twin's: an int64 count made its add and compares 64-bit ones
        while True:
            if ticket >= 0 and not skip_slot:
                # 1. the consumer (B or C) is preferred as soon as its slot is published.
                # acquire: what the task's producer wrote before publishing it is visible after this
                task, published = take_ticket_slot(fifo_slots, ticket)
                if published:
                    kind, index = decode_fifo_task(task, ticket, rows, n_tiles, counters)
                    following = int32(TICKET_NONE)
                    if kind != KIND_EXIT:  # the next ticket's round trip overlaps this task
                        following = cuda.atomic.add(counters, FIFO_HEAD, 1)
                    return kind, index, following, a_done, c_unflushed
            skip_slot = False
            if not a_done:
                # 2. claim the next producer tile (also while a reserved slot fills).
                a = cuda.atomic.add(counters, A_NEXT, claim)
                if a < n_tiles:
                    return int32(KIND_A), int32(a), ticket, a_done, c_unflushed
                cuda.atomic.add(counters, A_OVERSHOOT, 1)
                a_done = True
            if a_done and ticket == TICKET_EXHAUSTED:
                # 3. nothing left to claim: count this worker's finished C tiles with ONE
                # release add (the barrier after each C task ordered every thread's stores
                # before it), then leave once every worker has counted all of its own. A C
                # tile whose closing barrier is still ahead (c_waiting) is ordered first: a
                # no-task decision (KIND_SYNC) runs that barrier and comes back here.
                if c_waiting:
                    return int32(KIND_SYNC), int32(-1), ticket, a_done, c_unflushed
                if c_unflushed > 0:
                    atomic_add_release_gpu(counters, C_DONE, c_unflushed)
                    c_unflushed = int32(0)
                # Nothing left to claim: every A tile is claimed and every B/C task has a worker
                # holding its ticket, each of which runs it before it leaves, so the launch ends
                # only when every C tile is done. (A diagnostic build's ``may_leave`` also waits
                # here until c_done shows every C tile.)
                if may_leave(counters, n_tiles):
                    return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed
            # Nothing to run yet: only a waiting worker looks for another worker's error (a worker
            # that keeps finding work needs no exit signal), and only every ERROR_POLL_EVERY polls:
            # the look is one more dependent L2 round trip, which every poll would double the poll
            # period with, and so the delay before a freshly published task is seen.
            # (Unsigned remainder: a mask, without the sign fix-up of a signed ``%``.)
            if (uint32(polls) % uint32(ERROR_POLL_EVERY) == uint32(ERROR_POLL_EVERY - 1)
                    and load_relaxed_gpu(counters, ERROR_CODE) != 0):
                return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed
            backoff(polls)
            polls = int32(polls + 1)
            if polls > max_polls:
                if ticket >= 0:
                    record_error(counters, ERR_READY_TIMEOUT, -1, ticket)
                else:
                    record_error(counters, ERR_COMPLETION_TIMEOUT, -1, load_relaxed_gpu(counters, C_DONE))
                return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed

    return next_task


#: Thread 0's decision in the shipped build.
next_task = make_next_task(acquire_ticket_slot, leave_at_once)
