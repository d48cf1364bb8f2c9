"""Task tracing for the trace builds of the Experiment B kernels (never in performance builds).

A trace build is a separate compilation of the same kernel with the closure constant
``TRACE`` true; the performance build (``TRACE`` false) still takes the ``trace`` array
argument, but the dead branches are removed at compile time, so its PTX contains no
``%globaltimer``, no ``%smid`` and no access to that argument (checked by the tests).

Layout of the int64 ``trace`` array, one row per task::

    task id:  A(t) -> t,   B(r) -> n_tiles + r,   C(t) -> n_tiles + rows + t
    columns:  START, END   (%globaltimer, ns)
              SM           (%smid: the SM it actually ran on; never inferred from blockIdx)
              WORKER       (blockIdx.x of the block that ran it: a worker id, not an SM)
              VISITS       (atomic count: 1 for every task in a correct run)

The caller zeroes the array before each traced invocation (visits accumulate).
Timestamps are taken by the thread that finishes the task for the scheduler (thread 0
of the block; lane 0 of the warp that runs a B task; in the DAG, an A task's announcer,
lane 0 of warp 1, just before its row arrival) after the block barrier that ends the
task: intervals show ordering, not SM utilization.
"""

from numba import cuda, int64

from .ordering import globaltimer, smid

TRACE_START, TRACE_END, TRACE_SM, TRACE_WORKER, TRACE_VISITS = 0, 1, 2, 3, 4
TRACE_FIELDS = 5
TRACE_COLUMNS = ("start_ns", "end_ns", "sm", "worker", "visits")


@cuda.jit(device=True)
def trace_now():
    return int64(globaltimer())


@cuda.jit(device=True)
def trace_record(trace, task, start):
    """Close one task's record: call once, from one thread, after the task finished."""
    trace[task, TRACE_START] = start
    trace[task, TRACE_END] = int64(globaltimer())
    trace[task, TRACE_SM] = int64(smid())
    trace[task, TRACE_WORKER] = int64(cuda.blockIdx.x)
    cuda.atomic.add(trace, (task, TRACE_VISITS), 1)
