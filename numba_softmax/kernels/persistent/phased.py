"""The phased mode of the persistent kernel: A tiles, grid barrier, B rows, grid barrier, C tiles.

::

    for t in range(blockIdx.x, n_tiles, gridDim.x):  A(t)                  # block-level
    grid barrier
    for r in range(global warp id, rows, total warps):  B(r)               # warp-level
    grid barrier
    for t in range(blockIdx.x, n_tiles, gridDim.x):  C(n_tiles - 1 - t)    # descending

C descends where A ascended, so it starts with the tiles still in L2. Thread 0 prefetches each
worker's next tile into L2 one step ahead. The floor mode runs the same launch and both barriers
with no task. Why each choice: docs/experiment_b.md, "The schedulers".
"""

from numba import cuda, float32, int32, int64, uint32

from ...numerics import KERNEL_OPTIONS, WARP_SIZE
from ..prefetch import prefetch_span_l2
from ..tiles import task_a, task_b_of, task_c_at
from ..tracing import trace_now, trace_record
from .modes import MODE_PHASED, MODE_PHASED_FLOOR


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def visit(t, n, descending):
    """The tile a pass visits at step ``t``: ``t``, or ``n - 1 - t`` in a descending pass (int32 steps and
    counts; the difference is cast back, as Numba widens it to 64 bits)."""
    return int32(n - 1 - t) if descending else t


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values, tile_start, tile_len, descending):
    """Phased mode, thread 0, at the start of step ``t``: prefetch the tile of step ``t + workers``
    into L2 from the metadata loaded one iteration ago (``ahead_start``, ``ahead_len``), and load
    the metadata of step ``t + 2 workers`` for the next iteration (it arrives during this task);
    ``descending`` maps steps to tiles as :func:`visit` does. Returns that metadata. (int32 steps: each
    sum is cast back, or the compares and the visit below are 64-bit.)"""
    if int32(t + workers) < n_tiles:
        prefetch_span_l2(values, ahead_start, ahead_len)
    after = int32(t + int32(2 * workers))
    if after < n_tiles:
        k = uint32(visit(after, n_tiles, descending))
        return tile_start[k], tile_len[k]
    return int64(0), int32(0)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def c_step_metadata(step, n_tiles, tile_row, tile_start, tile_len):
    """Phased mode: the row, start and length of the tile the descending C pass visits at ``step``
    (zeros past the last step). The layout never changes, so they may be read at any time before."""
    if step < n_tiles:
        k = uint32(visit(step, n_tiles, True))
        return uint32(tile_row[k]), tile_start[k], tile_len[k]
    return uint32(0), int64(0), int32(0)


def make_phased_worker(trace_build, block_then_grid_barrier, before_a_tile):
    """The phased mode's worker (every thread of a block): ``trace_build`` a closure constant, the
    worker's barrier and ``before_a_tile(t, workers, n_tiles)`` (a no-op but in a control) device functions."""
    TRACE = trace_build

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def phased_worker(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count, tile_max,
                      tile_sum, row_max, row_sum, counters, max_polls, trace, partials, n_tiles, rows):
        tid = cuda.threadIdx.x
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
        passed = block_then_grid_barrier(counters, workers, max_polls, 0)
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
        passed = block_then_grid_barrier(counters, workers, max_polls, 1)
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

    return phased_worker
