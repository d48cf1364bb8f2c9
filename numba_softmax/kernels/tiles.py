"""Tiled softmax of packed rows as a task graph A -> B -> C, and its separate-launch kernels.

Packed layout (built on the host by :func:`numba_softmax.tiled.build_layout`)
    Rows of any lengths lie back to back in one float32 array ``values``. Each row is
    cut into tiles of ``tile_elements`` (<= :data:`MAX_TILE_ELEMENTS` = 1024, the
    protocol's 1024 by default); the last tile of a row may be shorter. Tiles of a
    row have consecutive ids. Per tile: ``tile_row[t]`` (int32), ``tile_start[t]``
    (int64 offset into ``values``), ``tile_len[t]`` (int32); per row:
    ``row_first_tile[r]``, ``row_tile_count[r]`` (int32).

The three tasks (device helpers; ONE copy shared by every scheduler)
    A(t)  :func:`task_a`, block-level: m_t = max of the tile, z_t = sum exp(x - m_t).
    B(r)  :func:`task_b`, thread-level: m = max_t m_t, z = sum_t z_t * exp(m_t - m)
          over the row's tiles in tile order.
    C(t)  :func:`task_c`, block-level: y = exp(x - m) / z for the tile (rereads x).
    Dependencies: B(r) needs every A(t) of row r (fan-in across blocks); C(t) needs
    B(row(t)) (fan-out).

Bitwise contract: thread i of the 256-thread block handles tile elements i, i+256,
i+512, i+768 in increasing order, accumulates max and then sum of exp in that order,
and the block reductions of :mod:`numba_softmax.numerics` combine; B folds tile
summaries sequentially in tile order. Every scheduler (separate kernels here, the
phased and DAG persistent kernel in :mod:`.persistent`) calls these same helpers
with the same arguments, so all produce identical bits. Tiles shorter than 256
elements simply leave the surplus threads masked (they contribute -inf / 0).

Separate scheduler: launch geometry
    1. ``tile_summary_kernel``   grid (n_tiles,), block (256,): one A per block.
    2. ``row_combine_kernel``    grid (ceil(rows/256),), block (256,): one B per thread.
    3. ``tile_normalize_kernel`` grid (n_tiles,), block (256,): one C per block; all
                                 threads read row_max/row_sum of the tile's row.
    Kernels 1 and 3 start by prefetching the tile one wave ahead (8 resident blocks per
    SM) into L2 (:func:`prefetch_tile_l2`); values are unchanged by it.

Bytes each launch must move (N = total elements, T = n_tiles, R = rows)
    1. read 4N (x) + 12T (tile_start, tile_len), write 8T (tile_max, tile_sum)
    2. read 8T (summaries) + 8R (row_first_tile, row_tile_count), write 8R
    3. read 4N (x again) + 16T (tile_row, tile_start, tile_len) + 8T (row m, z,
       gathered), write 4N (y)
    Total about 12N bytes of row data (x twice, y once), versus the fused kernel's 8N.

Shared memory: ``WARPS_PER_BLOCK`` float32 partials (32 B) for the block reductions,
owned by the kernel and passed to :func:`task_a`.
"""

from numba import cuda, float32, int64, uint64

from ..launch.plan import KernelLaunch
from ..numerics import (BLOCK_THREADS, KERNEL_OPTIONS, NEG_INF, WARPS_PER_BLOCK,
                        block_reduce_max, block_reduce_sum, f32_add, f32_div,
                        f32_exp, f32_max, f32_mul, f32_sub)
from .prefetch import BLOCKS_PER_SM_WAVE, prefetch_span_l2, sm_id_bound
from .tracing import trace_now, trace_record

_F32 = "float32[::1]"
_I32 = "int32[::1]"
_I64 = "int64[::1]"
_TRACE = "int64[:, ::1]"
#: Numba signatures the launch layer compiles these kernels for (C-contiguous device arrays).
SIGNATURES = {
    "tile_summary_kernel": f"void({_F32}, {_I64}, {_I32}, {_F32}, {_F32}, {_TRACE})",
    "row_combine_kernel": f"void({_I32}, {_I32}, {_F32}, {_F32}, {_F32}, {_F32}, {_TRACE})",
    "tile_normalize_kernel": f"void({_F32}, {_I32}, {_I64}, {_I32}, {_F32}, {_F32}, {_F32}, {_TRACE})",
}

#: Largest tile the helpers handle: 256 threads x 4 values kept in registers.
VALUES_PER_THREAD = 4
MAX_TILE_ELEMENTS = BLOCK_THREADS * VALUES_PER_THREAD


# ---- task helpers ------------------------------------------------------------------------

@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials):
    """A(t): tile maximum and shifted exponential sum. Block-level (all 256 threads).

    Thread 0 writes ``tile_max[t]`` and ``tile_sum[t]`` (it is also the thread that
    later announces the tile to the scheduler, so no extra barrier is needed).
    """
    tid = cuda.threadIdx.x
    start = uint64(tile_start[t])
    n = tile_len[t]
    x = cuda.local.array(VALUES_PER_THREAD, float32)
    local_max = NEG_INF
    for k in range(VALUES_PER_THREAD):
        j = tid + k * BLOCK_THREADS
        if j < n:
            # An unsigned element index: no negative-index wraparound code per access.
            v = values[start + uint64(j)]
            x[k] = v
            local_max = f32_max(local_max, v)
    m_t = block_reduce_max(local_max, partials)
    local_sum = float32(0.0)
    for k in range(VALUES_PER_THREAD):
        j = tid + k * BLOCK_THREADS
        if j < n:
            local_sum = f32_add(local_sum, f32_exp(f32_sub(x[k], m_t)))
    z_t = block_reduce_sum(local_sum, partials)
    if tid == 0:
        tile_max[t] = m_t
        tile_sum[t] = z_t


@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_b(r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum):
    """B(r): combine the row's tile summaries stably. Thread-level (one thread)."""
    first = row_first_tile[r]
    count = row_tile_count[r]
    m = NEG_INF
    for k in range(count):
        m = f32_max(m, tile_max[first + k])
    z = float32(0.0)
    for k in range(count):
        t = first + k
        z = f32_add(z, f32_mul(tile_sum[t], f32_exp(f32_sub(tile_max[t], m))))
    row_max[r] = m
    row_sum[r] = z


@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_c(t, m, z, values, tile_start, tile_len, out):
    """C(t): ``out = exp(x - m) / z`` over the tile. Block-level; no barrier inside.

    ``m`` and ``z`` are passed as values: the caller decides how they were read
    (after a kernel boundary, a grid barrier, or an acquire).
    """
    tid = cuda.threadIdx.x
    start = uint64(tile_start[t])
    n = tile_len[t]
    for k in range(VALUES_PER_THREAD):
        j = tid + k * BLOCK_THREADS
        if j < n:
            index = start + uint64(j)  # unsigned: no wraparound code
            out[index] = f32_div(f32_exp(f32_sub(values[index], m)), z)


# ---- separate scheduler: three kernels ------------------------------------------------------

@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def prefetch_tile_l2(ahead, values, tile_start, tile_len):
    """Thread 0 asks for tile ``ahead`` (if it exists) in L2: the tile this block, or the
    block one wave later, reads next. A and C blocks are short latency-bound chains like
    the narrow fused rows, where the same prefetch paid (:mod:`.prefetch`). Values are
    unchanged; the trace builds leave it out (they record ordering, not speed)."""
    if cuda.threadIdx.x == 0 and ahead < tile_start.shape[0]:
        prefetch_span_l2(values, tile_start[ahead], tile_len[ahead])


def _make_separate_kernels(trace_build):
    """The three separate-scheduler kernels; ``trace_build`` selects the trace build.

    Both builds take the ``trace`` array (see :mod:`.tracing`); in the performance
    build the constant-false branches are pruned, so it never touches it.
    """
    TRACE = trace_build

    def tile_summary_kernel(values, tile_start, tile_len, tile_max, tile_sum, trace):
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        t = cuda.blockIdx.x
        if not TRACE:
            prefetch_tile_l2(t + BLOCKS_PER_SM_WAVE * sm_id_bound(), values, tile_start, tile_len)
        start = int64(0)
        if TRACE and cuda.threadIdx.x == 0:
            start = trace_now()
        task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials)
        if TRACE and cuda.threadIdx.x == 0:
            trace_record(trace, t, start)

    def row_combine_kernel(row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum, trace):
        r = cuda.grid(1)
        if r < row_first_tile.shape[0]:
            start = int64(0)
            if TRACE:
                start = trace_now()
            task_b(r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum)
            if TRACE:
                trace_record(trace, tile_max.shape[0] + r, start)

    def tile_normalize_kernel(values, tile_row, tile_start, tile_len, row_max, row_sum, out, trace):
        t = cuda.blockIdx.x
        if not TRACE:
            prefetch_tile_l2(t + BLOCKS_PER_SM_WAVE * sm_id_bound(), values, tile_start, tile_len)
        row = tile_row[t]
        start = int64(0)
        if TRACE and cuda.threadIdx.x == 0:
            start = trace_now()
        task_c(t, row_max[row], row_sum[row], values, tile_start, tile_len, out)
        if TRACE:
            cuda.syncthreads()  # every thread's stores precede the recorded end
            if cuda.threadIdx.x == 0:
                trace_record(trace, tile_row.shape[0] + row_max.shape[0] + t, start)

    suffix = "_trace" if trace_build else ""
    kernels = []
    for fn in (tile_summary_kernel, row_combine_kernel, tile_normalize_kernel):
        fn.__name__ = fn.__qualname__ = fn.__name__ + suffix
        kernels.append(cuda.jit(**KERNEL_OPTIONS)(fn))
    return tuple(kernels)


#: Performance builds (registered, timed).
tile_summary_kernel, row_combine_kernel, tile_normalize_kernel = _make_separate_kernels(False)
_trace_kernels = []


def separate_trace_kernels():
    """The trace builds (compiled on first use; never timed)."""
    if not _trace_kernels:
        _trace_kernels.extend(_make_separate_kernels(True))
    return tuple(_trace_kernels)


def separate_launches(buffers, trace=False):
    """The three launches of the separate scheduler over :class:`~numba_softmax.tiled.TiledBuffers`."""
    b = buffers
    n_tiles, rows = b.n_tiles, b.rows
    block = (BLOCK_THREADS,)
    summary, combine, normalize = (separate_trace_kernels() if trace else
                                   (tile_summary_kernel, row_combine_kernel, tile_normalize_kernel))
    return [
        KernelLaunch("tile_summary_kernel", summary, (n_tiles,), block,
                     (b.values, b.tile_start, b.tile_len, b.tile_max, b.tile_sum, b.trace)),
        KernelLaunch("row_combine_kernel", combine,
                     ((rows + BLOCK_THREADS - 1) // BLOCK_THREADS,), block,
                     (b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum,
                      b.row_max, b.row_sum, b.trace)),
        KernelLaunch("tile_normalize_kernel", normalize, (n_tiles,), block,
                     (b.values, b.tile_row, b.tile_start, b.tile_len, b.row_max, b.row_sum, b.out, b.trace)),
    ]
