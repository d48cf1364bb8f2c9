"""Negative controls of the persistent kernel and the late queue reset: tests only.

Each control is a separate compilation with one ordering rule broken, which the checks must
catch; :data:`.kernel.persistent_tiles` contains none of their code. Never registered, never timed.
"""

from numba import cuda, int32

from ...launch_spec import KernelLaunch
from ...numerics import BLOCK_THREADS, KERNEL_OPTIONS
from ...queue import DEFAULT_MAX_POLLS
from ..ordering import let_dependent_grid_launch, pause_us
from .kernel import make_persistent_kernel
from .launch import init_queue_blocks, persistent_launch
from .modes import MODE_DAG
from .queue_ops import reset_queue

#: Negative controls: name -> (acquire_ready, publish_after_last, fenced_barrier). Tests only.
NEGATIVE_CONTROLS = {
    # DAG: reads its FIFO slot once, plain, without waiting for its publish (queue counters: an invalid task).
    "unacquired_slot_read": (False, True, True),
    # DAG: the FIRST finished A tile of a row publishes its B (oracle, traces); it claims one A tile at a time, so
    # that first arrival leaves the row's other tiles unfinished even with one worker.
    "first_producer_publishes_b": (True, False, True),
    # phased: thread 0 arrives at the grid barrier without release ordering and before its
    # block's tasks are done (odd workers' last A tile lags): B reads unfinished summaries (oracle).
    "barrier_arrive_without_fence": (True, True, False),
}
_control_kernels = {}


def negative_control_kernel(name, trace=False):
    """A separately compiled, deliberately broken persistent kernel (never for timing);
    ``trace=True`` gives its trace build (the trace checks must reject it)."""
    if name not in NEGATIVE_CONTROLS:
        raise ValueError(f"unknown negative control {name!r}; expected one of {sorted(NEGATIVE_CONTROLS)}")
    kernel = _control_kernels.get((name, trace))
    if kernel is None:
        acquire_ready, publish_after_last, fenced = NEGATIVE_CONTROLS[name]
        kernel = _control_kernels[(name, trace)] = make_persistent_kernel(
            f"persistent_tiles_control_{name}{'_trace' if trace else ''}", acquire_ready,
            publish_after_last, trace_build=trace, fenced_barrier=fenced)
    return kernel


@cuda.jit(**KERNEL_OPTIONS)
def slow_init_queue_kernel(counters, row_arrivals, fifo_slots, delay_us):
    """Tests only: the reset, after ``delay_us`` microseconds, having let its dependent launch first: the
    DAG behind it must still be right (the workers wait for the reset's writes)."""
    let_dependent_grid_launch()
    pause_us(delay_us)
    reset_queue(counters, row_arrivals, fifo_slots)



def slow_reset_dag_launches(buffers, workers, delay_us, kernel=None, max_polls=DEFAULT_MAX_POLLS):
    """The DAG's launches with :func:`slow_init_queue_kernel` as the reset, ``delay_us`` late."""
    queue = (buffers.counters, buffers.row_arrivals, buffers.fifo_slots)
    reset = KernelLaunch("slow_init_queue_kernel", slow_init_queue_kernel, (init_queue_blocks(buffers),),
                         (BLOCK_THREADS,), (*queue, int32(delay_us)))
    return [reset, persistent_launch("dag", MODE_DAG, buffers, workers, kernel, max_polls)]
