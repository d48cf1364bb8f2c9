"""Negative controls of the persistent kernel and a late queue reset: tests only.

Each control is a separate compilation of :func:`.kernel.make_persistent_kernel` whose
:class:`.kernel.Variant` swaps in the device functions below, each breaking one ordering rule that
the checks must catch; the shipped :data:`.kernel.persistent_tiles` contains none of their code
(its hooks are the ones of :data:`.kernel.SHIPPED`). Never registered, never timed.
"""

from numba import cuda, int32, uint32

from ...launch_spec import KernelLaunch
from ...numerics import BLOCK_THREADS, KERNEL_OPTIONS
from ...queue import DEFAULT_MAX_POLLS, GRID_BARRIER
from ..ordering import atomic_add_acq_rel_gpu, let_dependent_grid_launch, pause_us
from .barrier import flip_add
from .decision import leave_at_once, make_next_task
from .kernel import SHIPPED, make_persistent_kernel
from .launch import init_queue_blocks, persistent_launch
from .modes import MODE_DAG
from .queue_ops import publish_tasks, reset_queue


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def read_ticket_slot_unacquired(fifo_slots, ticket):
    """Control: the ticket's slot read once, plain, and taken as a task whatever it holds (an
    unpublished slot's -1 is an invalid task id: error 3)."""
    return fifo_slots[uint32(ticket)], True


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def one_tile_per_claim(n_tiles):
    """Control: one tile per claim, so that a row's first arrival leaves its other tiles unfinished
    even with one worker."""
    return int32(1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def hold_back_later_tiles(index, row_first_tile, tile_row):
    """Control: every A tile but a row's first waits 50 us, so the B that the first arrival publishes
    reliably reads missing summaries (without it the race rarely shows: a row's A tiles run side by side)."""
    if cuda.threadIdx.x == 0 and index != row_first_tile[tile_row[index]]:
        pause_us(50)
    cuda.syncthreads()


@cuda.jit(device=True, **KERNEL_OPTIONS)
def arrive_first_publishes(row_arrivals, row_tile_count, counters, fifo_slots, capacity, row, n):
    """Control: the row's FIRST arrival publishes B(row), not the one that completes the row."""
    if atomic_add_acq_rel_gpu(row_arrivals, row, n) == 0:
        publish_tasks(counters, fifo_slots, capacity, row, 1, 1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def lag_last_a_tile_of_odd_workers(t, workers, n_tiles):
    """Control: odd workers' last A tile lags the early arrivals by 20 us."""
    if cuda.blockIdx.x % 2 == 1 and int32(t + workers) >= n_tiles:
        pause_us(20)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def unfenced_block_then_grid_barrier(counters, workers, max_polls, which):
    """Control: thread 0 arrives with a relaxed add, before its block's tasks are done, and nobody waits."""
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(counters, GRID_BARRIER, flip_add(cuda.blockIdx.x == 0, workers))
    cuda.syncthreads()
    return True


#: Negative controls: name -> the build's device functions. Tests only.
NEGATIVE_CONTROLS = {
    # DAG: reads its FIFO slot once, plain, without waiting for its publish (queue counters: an invalid task).
    "unacquired_slot_read": SHIPPED._replace(next_task=make_next_task(read_ticket_slot_unacquired, leave_at_once)),
    # DAG: the FIRST finished A tile of a row publishes its B (oracle, traces); it claims one A tile at a time, so
    # that first arrival leaves the row's other tiles unfinished even with one worker.
    "first_producer_publishes_b": SHIPPED._replace(claim_size=one_tile_per_claim,
                                                   before_a_claim=hold_back_later_tiles, arrive=arrive_first_publishes),
    # phased: thread 0 arrives at the grid barrier without release ordering and before its
    # block's tasks are done (odd workers' last A tile lags): B reads unfinished summaries (oracle).
    "barrier_arrive_without_fence": SHIPPED._replace(block_then_grid_barrier=unfenced_block_then_grid_barrier,
                                                     before_a_tile=lag_last_a_tile_of_odd_workers),
}
_control_kernels = {}


def negative_control_kernel(name, trace=False):
    """A separately compiled, deliberately broken persistent kernel (never for timing);
    ``trace=True`` gives its trace build (the trace checks must reject it)."""
    if name not in NEGATIVE_CONTROLS:
        raise ValueError(f"unknown negative control {name!r}; expected one of {sorted(NEGATIVE_CONTROLS)}")
    kernel = _control_kernels.get((name, trace))
    if kernel is None:
        kernel = _control_kernels[(name, trace)] = make_persistent_kernel(
            f"persistent_tiles_control_{name}{'_trace' if trace else ''}", NEGATIVE_CONTROLS[name], trace_build=trace)
    return kernel


@cuda.jit(**KERNEL_OPTIONS)
def slow_init_queue_kernel(counters, row_arrivals, fifo_slots, delay_us):
    """The reset, after ``delay_us`` microseconds, having let its dependent launch first: the DAG behind
    it must still be right (the workers wait for the reset's writes)."""
    let_dependent_grid_launch()
    pause_us(delay_us)
    reset_queue(counters, row_arrivals, fifo_slots)


def slow_reset_dag_launches(buffers, workers, delay_us, kernel=None, max_polls=DEFAULT_MAX_POLLS):
    """The DAG's launches with :func:`slow_init_queue_kernel` as the reset, ``delay_us`` late."""
    queue = (buffers.counters, buffers.row_arrivals, buffers.fifo_slots)
    reset = KernelLaunch("slow_init_queue_kernel", slow_init_queue_kernel, (init_queue_blocks(buffers),),
                         (BLOCK_THREADS,), (*queue, int32(delay_us)))
    return [reset, persistent_launch("dag", MODE_DAG, buffers, workers, kernel, max_polls)]
