"""The phased scheduler's grid barrier: flat, self-resetting, inside the cooperative launch.

A block barrier, then thread 0 makes one ``atom.release`` arrival on one word (its own 128-byte
line, ``queue.GRID_BARRIER``) and, once the add's old value has come back, polls the word with
acquire loads until its top bit flips; a block barrier lets the worker's threads go. The word
resets itself (:func:`flip_add`), so it needs no reset launch. Why this design and what it costs
against ``grid.sync()``: docs/experiment_b.md, "The schedulers".
"""

from numba import cuda, int32, int64

from ...numerics import KERNEL_OPTIONS
from ...queue import ERR_BARRIER_TIMEOUT, GRID_BARRIER
from ..ordering import atomic_add_release_gpu, backoff, load_acquire_gpu
from .queue_ops import record_error


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def flip_add(first, participants):
    """What a participant adds to a self-resetting barrier word: the first ``2**31 - (n - 1)``,
    every other 1, so the word's top bit flips exactly when the last of ``n`` arrives (in any
    order) and its low 31 bits come back to 0."""
    if first:
        return int32(int64(-2147483648) - int64(participants - 1) + int64(4294967296))
    return int32(1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def flipped(before, after):
    return ((before ^ after) & int32(-2147483648)) != 0


@cuda.jit(device=True, **KERNEL_OPTIONS)
def grid_barrier(counters, workers, max_polls, which):
    """Thread 0 of every worker, between two block barriers: all workers' tasks before it,
    none after. Flat: every worker makes one ``atom.release`` arrival on :data:`GRID_BARRIER`
    (its old value says which flip to wait for; no fence before it, which cost a second
    ``MEMBAR``) and polls the word with acquire loads until its top bit flips, with no fence
    after. The word resets itself (:func:`flip_add`). Returns False (after recording error 5)
    if it waited more than ``max_polls`` polls.
    """
    add = flip_add(cuda.blockIdx.x == 0, workers)
    # release: this worker's results (ordered before it by the block barrier)
    old = atomic_add_release_gpu(counters, GRID_BARRIER, add)
    # The first poll depends on the add's result. Issued at once (Numba's build does that when
    # nothing orders it), it queues on the line behind the arrivals and costs ~0.5 us per crossing
    # (``python -m bench probe floors``); CUDA's build of grid.sync() waits for the result too.
    # The arrival that flips the word is the last: one acquire load (it reads its own add, the end
    # of the release sequence of every arrival) orders every worker's results before what follows.
    if flipped(old, int32(int64(old) + int64(add))):
        load_acquire_gpu(counters, GRID_BARRIER)
        return True
    polls = int32(0)
    while True:
        now = load_acquire_gpu(counters, GRID_BARRIER)  # acquire: every worker's results before what follows
        if flipped(old, now):
            return True
        polls = int32(polls + 1)
        if polls > max_polls:
            record_error(counters, ERR_BARRIER_TIMEOUT, which, now)
            return False
        if polls > 4096:
            backoff(polls - 4096)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def block_then_grid_barrier(counters, workers, max_polls, which):
    """Every thread of the worker: its block's tasks done, then thread 0 at the grid barrier
    (:func:`grid_barrier`). Returns False when the barrier timed out (recorded): the worker leaves."""
    ok = cuda.shared.array(2, int32)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        ok[which] = int32(grid_barrier(counters, workers, max_polls, which))
    cuda.syncthreads()
    # One slot per barrier of the launch (which = 0, 1): no barrier is needed before the next one
    # rewrites it.
    return ok[which] != 0
