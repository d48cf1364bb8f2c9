"""The persistent kernel factory and its shipped build, :data:`persistent_tiles`.

One compiled kernel runs both persistent schedulers of Experiment B, selected by its run-time
``mode`` (:mod:`.modes`): phased (:mod:`.phased`) and DAG (:mod:`.dag`), plus their empty-work
floors, so they share code, registers and occupancy. Workers are blocks of ``TILE_THREADS`` = 128
threads running the task helpers of :mod:`..tiles` (A: tile summary, B: row combine, C: tile
normalize).

Launch geometry: grid (workers,), block (128,), cooperative (the phased grid barrier needs every
worker resident); launch bounds of :data:`MIN_WORKERS_PER_SM` = 9 blocks per SM (at most 56
registers). Bytes per invocation: x read twice (A and C) and y written once, about 12N bytes for N
elements, plus the tile and row summaries (16T + 8R) and, in DAG mode, ~4 bytes per FIFO entry and
per row for the reset and again for the run. Shared memory: 16 B of partials, 16 B of broadcast
slots, 8 B of barrier verdicts, 20 B of thread 0's DAG state. The schedulers in full:
docs/experiment_b.md.
"""

from typing import NamedTuple

from numba import cuda, float32, int32

from ...numerics import KERNEL_OPTIONS, PARTIALS_ALIGNMENT, bounded_kernel
from ..tiles import TILE_THREADS, TILE_WARPS
from .barrier import block_then_grid_barrier
from .dag import claim_size, make_dag_worker
from .decision import next_task
from .modes import MODE_PHASED, MODE_PHASED_FLOOR
from .phased import make_phased_worker
from .queue_ops import arrive

_F32 = "float32[::1]"
_I32 = "int32[::1]"
_I64 = "int64[::1]"
#: Numba signatures the launch layer compiles these kernels for (C-contiguous device arrays).
SIGNATURES = {
    # mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
    # tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
    # paired_entries, max_polls, trace
    "persistent_tiles": (f"void(int32, {_F32}, {_F32}, {_I32}, {_I64}, {_I32}, {_I32}, {_I32}, "
                         f"{_F32}, {_F32}, {_F32}, {_F32}, {_I32}, {_I32}, {_I32}, int32, int32, "
                         "int64[:, ::1])"),
    "init_queue_kernel": f"void({_I32}, {_I32}, {_I32})",
}

#: Workers of TILE_THREADS that the launch bounds ask ptxas to fit on one SM: 9 x 128 threads x 56
#: registers = 64,512 of the SM's 65,536. Without the bound the driver's compiler gave this kernel 1056
#: workers on the H200 (8 per SM) where its nvcc twin, at 55 registers, got 1188; with it both get 1188,
#: and the DAG is 7-8% faster at 2048 rows (PERFORMANCE.md). 10 per SM (48 registers, no spills with
#: thread 0's state in shared memory) made the DAG 1-2% faster at 2048 rows but 3-5% slower at 128 and
#: 512, and phased slower everywhere (PERFORMANCE.md).
MIN_WORKERS_PER_SM = 9


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def no_pause(a, b, c):
    """The shipped build's hook where a control holds a task back: nothing."""


class Variant(NamedTuple):
    """The device functions a build calls where the controls and diagnostics differ from the shipped one."""
    block_then_grid_barrier: object  # phased: every thread, between the passes
    before_a_tile: object            # phased: (t, workers, n_tiles) before each A tile
    next_task: object                # DAG: thread 0's decision
    claim_size: object               # DAG: (n_tiles) -> tiles per A claim and per C entry
    before_a_claim: object           # DAG: (index, row_first_tile, tile_row) before each A claim
    arrive: object                   # DAG: the announcer's row arrival


#: The shipped build's device functions.
SHIPPED = Variant(block_then_grid_barrier, no_pause, next_task, claim_size, no_pause, arrive)


def make_persistent_kernel(name, variant=SHIPPED, trace_build=False):
    """Build one compilation of the persistent kernel from ``variant``'s device functions.

    ``trace_build`` selects the trace build (:mod:`..tracing`); the performance build takes
    the same ``trace`` argument but its constant-false branches are pruned away.
    """
    v = variant
    phased_worker = make_phased_worker(trace_build, v.block_then_grid_barrier, v.before_a_tile)
    dag_worker = make_dag_worker(trace_build, v.next_task, v.claim_size, v.before_a_claim, v.arrive)

    def kernel(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
               tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
               paired_entries, max_polls, trace):
        partials = cuda.shared.array(TILE_WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        # int32 counts, as the twin's ``int n_tiles, rows`` (< 2**31 here): the shapes are int64, and
        # every compare of an int32 index or claim with them was a 64-bit compare (thread 0's
        # ``a < n_tiles``, the task-id decode: three instructions on the decision chain instead of one).
        n_tiles = int32(tile_row.shape[0])
        rows = int32(row_first_tile.shape[0])

        if mode == MODE_PHASED or mode == MODE_PHASED_FLOOR:
            phased_worker(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
                          tile_max, tile_sum, row_max, row_sum, counters, max_polls, trace, partials, n_tiles, rows)
            return
        dag_worker(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count, tile_max,
                   tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots, paired_entries, max_polls, trace,
                   partials, n_tiles, rows)

    kernel.__name__ = kernel.__qualname__ = name
    # Launch bounds: ptxas keeps the kernel at <= 56 registers so that MIN_WORKERS_PER_SM workers fit
    # on an SM.
    return bounded_kernel(kernel, TILE_THREADS, MIN_WORKERS_PER_SM)


#: The performance kernel (registered).
persistent_tiles = make_persistent_kernel("persistent_tiles")
