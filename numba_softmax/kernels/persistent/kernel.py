"""The persistent kernel factory and its shipped build, :data:`persistent_tiles`.

One compiled kernel runs both persistent schedulers of Experiment B, selected by its run-time
``mode`` (:mod:`.modes`): phased (its body in the kernel below, its helpers in :mod:`.phased`) and
DAG (:mod:`.dag`), plus their empty-work floors, so they share code, registers and occupancy.
Workers are blocks of ``TILE_THREADS`` = 128 threads running the task helpers of :mod:`..tiles`
(A: tile summary, B: row combine, C: tile normalize).

Why the phased body is not an inline device function like the DAG's: only so is the kernel's PTX the
one of the single kernel closure it was split from (commit ca86c2c), instruction for instruction.
As an inline worker of its own, NVVM numbered two registers of its C pass the other way round; and
with ``tid`` read in each worker instead of once at the kernel's entry, NVVM recomputed the shared
``partials`` address at each of the DAG's six block reductions (24 more instructions).

Launch geometry: grid (workers,), block (128,), cooperative (the phased grid barrier needs every
worker resident); launch bounds of :data:`MIN_WORKERS_PER_SM` = 9 blocks per SM (at most 56
registers). Bytes per invocation: x read twice (A and C) and y written once, about 12N bytes for N
elements, plus the tile and row summaries (16T + 8R) and, in DAG mode, ~4 bytes per FIFO entry and
per row for the reset and again for the run. Shared memory: 16 B of partials, 16 B of broadcast
slots, 8 B of barrier verdicts, 20 B of thread 0's DAG state. The schedulers in full:
docs/experiment_b.md.
"""

from typing import NamedTuple

from numba import cuda, float32, int32, int64, uint32

from ...numerics import KERNEL_OPTIONS, PARTIALS_ALIGNMENT, WARP_SIZE, bounded_kernel
from ..tiles import TILE_THREADS, TILE_WARPS, task_a, task_b_of, task_c_at
from ..tracing import trace_now, trace_record
from .barrier import block_then_grid_barrier
from .dag import claim_size, make_dag_worker
from .decision import next_task
from .modes import MODE_PHASED, MODE_PHASED_FLOOR
from .phased import c_step_metadata, prefetch_next_tile, visit
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
    the same ``trace`` argument but its constant-false branches are pruned away. ``variant``'s
    phased hooks: ``block_then_grid_barrier`` between the passes, ``before_a_tile(t, workers,
    n_tiles)`` before each A tile; its DAG hooks go to :func:`.dag.make_dag_worker`.
    """
    TRACE = trace_build
    phase_barrier, before_a_tile = variant.block_then_grid_barrier, variant.before_a_tile
    dag_worker = make_dag_worker(trace_build, variant.next_task, variant.claim_size, variant.before_a_claim,
                                 variant.arrive)

    def kernel(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
               tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
               paired_entries, max_polls, trace):
        partials = cuda.shared.array(TILE_WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        tid = cuda.threadIdx.x  # read once here: both modes' block reductions share its partials address
        # int32 counts, as the twin's ``int n_tiles, rows`` (< 2**31 here): the shapes are int64, and
        # every compare of an int32 index or claim with them was a 64-bit compare (thread 0's
        # ``a < n_tiles``, the task-id decode: three instructions on the decision chain instead of one).
        n_tiles = int32(tile_row.shape[0])
        rows = int32(row_first_tile.shape[0])

        if mode == MODE_PHASED or mode == MODE_PHASED_FLOOR:
            # ---- Phased mode (:mod:`.phased`): A pass, grid barrier, B pass, grid barrier, C pass ----
            workers = int32(cuda.gridDim.x)
            # The floor runs the same launch and both grid barriers with no task: every loop
            # below starts past its end.
            first = int32(cuda.blockIdx.x) if mode == MODE_PHASED else int32(n_tiles)
            # Thread 0 prefetches this worker's next tile (t + workers) into L2, so its DRAM
            # read overlaps this tile's reductions; the metadata it needs for that (start,
            # length) was loaded one iteration earlier, so the prefetch never waits for a
            # load (not in the trace build).
            ahead_start = int64(0)
            ahead_len = int32(0)
            if not TRACE and tid == 0 and int32(first + workers) < n_tiles:
                ahead_start = tile_start[uint32(first + workers)]
                ahead_len = tile_len[uint32(first + workers)]
            # Grid-stride loops as while loops: ``range(start, stop, step)`` with a run-time step
            # computes its trip count with a 64-bit division, a libdevice call whose calling
            # convention costs registers in this register-bound kernel.
            t = first
            while t < n_tiles:
                if not TRACE and tid == 0:
                    ahead_start, ahead_len = prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values,
                                                                tile_start, tile_len, False)
                start = int64(0)
                if TRACE and tid == 0:
                    start = trace_now()
                before_a_tile(t, workers, n_tiles)
                task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials)
                if TRACE and tid == 0:
                    trace_record(trace, t, start)
                t = int32(t + workers)  # int32: Numba widens the sum, which would make t (and the loop) 64-bit
            # B is warp-level: one row per warp of the grid (a whole warp shares r). Its tiles (the
            # layout, which never changes) are read before the barrier, so that B after it waits for
            # one round trip (the tile summaries), not two.
            r = int32((cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5)
            if mode == MODE_PHASED_FLOOR:
                r = int32(rows)
            warps = int32((cuda.gridDim.x * cuda.blockDim.x) >> 5)
            b_first = int32(0)
            b_count = int32(0)
            if r < rows:
                b_first = row_first_tile[uint32(r)]
                b_count = row_tile_count[uint32(r)]
            passed = phase_barrier(counters, workers, max_polls, 0)
            if not passed:
                return
            while r < rows:
                start = int64(0)
                if TRACE:
                    start = trace_now()
                task_b_of(r, b_first, b_count, tile_max, tile_sum, row_max, row_sum)
                if TRACE and tid % WARP_SIZE == 0:
                    trace_record(trace, n_tiles + r, start)
                r = int32(r + warps)
                if r < rows:
                    b_first = row_first_tile[uint32(r)]
                    b_count = row_tile_count[uint32(r)]
            # The first C tile's row, start and length, read before the barrier too: after it, its x
            # and the row's m and z are one round trip away. Each later tile's are read one tile ahead.
            c_row, c_start, c_len = c_step_metadata(first, n_tiles, tile_row, tile_start, tile_len)
            passed = phase_barrier(counters, workers, max_polls, 1)
            if not passed:
                return
            ahead_start = int64(0)
            ahead_len = int32(0)
            # C visits the tiles in descending order (step t, tile n_tiles - 1 - t): the tiles the
            # A pass read last are the ones still in L2 (C's loads and y's stores are evict-first).
            if not TRACE and tid == 0 and int32(first + workers) < n_tiles:
                ahead_start = tile_start[uint32(visit(int32(first + workers), n_tiles, True))]
                ahead_len = tile_len[uint32(visit(int32(first + workers), n_tiles, True))]
            # m and z of a worker's next tile are requested during the current one: its row, start
            # and length at the start, the row's m and z at the end (the grid barrier made them final).
            m = float32(0.0)
            z = float32(0.0)
            if first < n_tiles:
                m = row_max[c_row]
                z = row_sum[c_row]
            t = first
            while t < n_tiles:
                if not TRACE and tid == 0:
                    ahead_start, ahead_len = prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values,
                                                                tile_start, tile_len, True)
                following = int32(t + workers)
                next_row, next_start, next_len = c_step_metadata(following, n_tiles, tile_row, tile_start, tile_len)
                start = int64(0)
                if TRACE and tid == 0:
                    start = trace_now()
                tile = visit(t, n_tiles, True)
                task_c_at(c_start, c_len, m, z, values, out)
                if TRACE:
                    cuda.syncthreads()
                    if tid == 0:
                        trace_record(trace, n_tiles + rows + tile, start)
                if following < n_tiles:
                    m = row_max[next_row]
                    z = row_sum[next_row]
                c_start = next_start
                c_len = next_len
                t = following
            return
        # ---- DAG mode (:mod:`.dag`): thread 0 decides each task, the whole worker runs it ----
        dag_worker(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count, tile_max,
                   tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots, paired_entries, max_polls, trace,
                   partials, tid, n_tiles, rows)

    kernel.__name__ = kernel.__qualname__ = name
    # Launch bounds: ptxas keeps the kernel at <= 56 registers so that MIN_WORKERS_PER_SM workers fit
    # on an SM.
    return bounded_kernel(kernel, TILE_THREADS, MIN_WORKERS_PER_SM)


#: The performance kernel (registered).
persistent_tiles = make_persistent_kernel("persistent_tiles")
