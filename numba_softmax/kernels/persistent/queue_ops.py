"""The DAG queue's device operations: record an error, publish, arrive, decode a task, reset.

Thread 0 (or a tile's announcer) applies them to the queue words of :mod:`numba_softmax.queue`.
:data:`init_queue_kernel` resets those words before every DAG invocation: grid-stride, every
thread of the grid writes counters, ``row_arrivals`` (0) and ``fifo_slots`` (-1), ~4 bytes per
row and per FIFO slot. The protocol, its ordering rules and its error codes are written out in
docs/experiment_b.md, "The DAG's queue protocol".
"""

from numba import cuda, int32, uint32

from ...numerics import KERNEL_OPTIONS, udiv
from ...queue import (COUNTER_SLOTS, ERR_FIFO_OVERFLOW, ERR_INVALID_TASK, ERROR_CODE, ERROR_TASK, ERROR_WAITED_ON,
                      ERROR_WORKER, FIFO_TAIL, SLOT_EMPTY)
from ..ordering import atomic_add_acq_rel_gpu, fence_acq_rel_gpu, let_dependent_grid_launch, store_relaxed_gpu

# Decisions broadcast by thread 0.
KIND_EXIT = 0
KIND_A = 1
KIND_B = 2
KIND_C = 3
KIND_SYNC = 4  # no task: one more barrier, so that the worker's last C tile is ordered before it counts it


@cuda.jit(device=True, **KERNEL_OPTIONS)
def record_error(counters, code, task, waited_on):
    """First error wins: CAS error_code from 0, then record the details."""
    if cuda.atomic.cas(counters, ERROR_CODE, 0, code) == 0:
        counters[ERROR_TASK] = task
        counters[ERROR_WAITED_ON] = waited_on
        counters[ERROR_WORKER] = cuda.blockIdx.x


@cuda.jit(device=True, **KERNEL_OPTIONS)
def publish_tasks(counters, fifo_slots, capacity, first_task, count, step):
    """Publish tasks ``first_task``, ``first_task + step``, ... (``ceil(count / step)`` FIFO entries:
    a C entry holds ``step`` tiles): reserve the slots with one atomic add, then release them.

    A slot is its own ready flag (-1 until published). One ``fence.acq_rel.gpu`` followed by
    relaxed stores of the task ids is a release pattern for each slot (PTX memory model): it
    orders the task results before all of them, where ``st.release`` per slot paid one fence per
    entry (a row's B publishes 2-18 C entries). With a separate flag per slot the fence also
    waited for the slot stores, one more round trip on every row's chain. Slots past
    ``capacity`` (this invocation's entries) are not written; the first one is recorded (error 4).
    """
    # udiv of uint32 values: one 32-bit division (``//`` of int32 values is Numba's int64 division
    # with a floor fix-up, a call to a 64-bit division routine)
    entries = int32(udiv(uint32(count + step - 1), uint32(step)))
    slot = cuda.atomic.add(counters, FIFO_TAIL, entries)
    # A signed while loop, as the twin's ``for``: a ``range`` loop carries Numba's iterator state, a
    # remaining count and three selects on every step, in every copy NVVM unrolls (B's publish is on
    # the row's chain from its last A to its first C).
    # (Numba widens int32 + int32 to 64 bits: each sum is cast back.)
    fence_acq_rel_gpu()
    k = int32(0)
    while k < entries:
        at = int32(slot + k)
        if at < capacity:
            store_relaxed_gpu(fifo_slots, at, int32(first_task + int32(k * step)))
        k = int32(k + 1)
    if int32(slot + entries) > capacity:
        first_over = max(slot, capacity)
        record_error(counters, ERR_FIFO_OVERFLOW, first_task + (first_over - slot) * step, first_over)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity, row, n):
    """The announcer, after ``n`` A tiles of ``row`` whose summaries it wrote: one acq_rel add to
    the row's arrivals (it releases those summaries); the arrival that completes the row publishes
    B(row)."""
    old = atomic_add_acq_rel_gpu(row_arrivals, row, n)
    if int32(old + n) == row_tile_count[row]:  # int32: Numba widens the sum to 64 bits
        publish_tasks(counters, fifo_slots, capacity, row, 1, 1)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def decode_fifo_task(task, slot, rows, n_tiles, counters):
    """FIFO task id -> (kind, index); an invalid id records error 3."""
    if task >= 0 and task < rows:
        return int32(KIND_B), int32(task)
    if task >= rows and task < int32(rows + n_tiles):  # int32: Numba widens the sum to 64 bits
        return int32(KIND_C), int32(task - rows)
    record_error(counters, ERR_INVALID_TASK, task, slot)
    return int32(KIND_EXIT), int32(-1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def reset_queue(counters, row_arrivals, fifo_slots):
    """Every thread of the grid, grid-stride: counters = COUNTER_INITIAL, arrivals 0, slots -1 (empty)."""
    # Unsigned grid-stride while loops: ``range`` with a run-time step computes its trip count with a
    # 64-bit division call, and signed indices add negative-index wraparound code.
    i = uint32(cuda.blockIdx.x) * uint32(cuda.blockDim.x) + uint32(cuda.threadIdx.x)
    stride = uint32(cuda.gridDim.x) * uint32(cuda.blockDim.x)
    k = i
    while k < uint32(COUNTER_SLOTS):
        counters[k] = -1 if uint32(ERROR_TASK) <= k <= uint32(ERROR_WORKER) else 0
        k += stride
    k = i
    while k < uint32(row_arrivals.shape[0]):
        row_arrivals[k] = 0
        k += stride
    k = i
    while k < uint32(fifo_slots.shape[0]):
        fifo_slots[k] = SLOT_EMPTY
        k += stride


@cuda.jit(**KERNEL_OPTIONS)
def init_queue_kernel(counters, row_arrivals, fifo_slots):
    """Fresh DAG queue state (:func:`reset_queue`). It lets the worker launch behind it start at once
    (programmatic dependent launch): the workers' launch overlaps the reset, and each waits for the
    reset's writes before it touches the queue."""
    let_dependent_grid_launch()
    reset_queue(counters, row_arrivals, fifo_slots)

