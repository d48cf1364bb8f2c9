"""Tiled softmax of packed rows as a task graph A -> B -> C, and its separate-launch kernels.

Rows of any lengths lie back to back in one float32 array ``values``, cut into tiles of ``tile_elements``
(<= :data:`MAX_TILE_ELEMENTS` = 1024; a row's last tile may be shorter); per tile ``tile_row``, ``tile_start``,
``tile_len``, per row ``row_first_tile``, ``row_tile_count`` (:mod:`numba_softmax.tiled.layout`).

The three tasks (ONE copy of the helpers for every scheduler, hence the same bits: docs/experiment_b.md)
    A(t)  :func:`task_a`, block-level: m_t = max of the tile, z_t = sum exp(x - m_t).
    B(r)  :func:`task_b`, warp-level: m = max_t m_t, z = sum_t z_t * exp(m_t - m), in tile order.
    C(t)  :func:`task_c`, block-level: y = exp(x - m) / z for the tile (rereads x).
    B(r) needs every A(t) of row r (fan-in across blocks); C(t) needs B(row(t)) (fan-out).

Separate scheduler: launch geometry (every block ``TILE_THREADS`` = 128 threads, 8 values per thread)
    1. ``tile_summary_kernel``   grid (n_tiles,): one A per block.
    2. ``row_combine_kernel``    grid (ceil(rows/4),): one B per warp.
    3. ``tile_normalize_kernel`` grid (n_tiles,): one C per block, tiles in descending order.
    Kernels 1 and 3 first prefetch the tile one wave ahead (16 resident blocks per SM) into L2; A loads x
    evict-last, C loads x and stores y evict-first (docs/experiment_b.md, "L2 policies and the C order").

Bytes each launch must move (N = total elements, T = n_tiles, R = rows): 1. read 4N + 12T, write 8T;
2. read 8T + 8R, write 8R; 3. read 4N + 16T + 8T (the rows' m, z, gathered), write 4N. About 12N of row
data (x twice, y once) against the fused kernel's 8N. Shared memory: ``TILE_WARPS`` (4) float32 partials (16 B).
"""

from numba import cuda, float32, int32, int64, uint32, uint64

from ..launch_spec import KernelLaunch
from ..numerics import (KERNEL_OPTIONS, NEG_INF, PARTIALS_ALIGNMENT, QUAD, SIMULATOR, WARP_SIZE, block_reductions,
                        f32_add, f32_div, f32_exp, f32_max, f32_mul, f32_sub, udiv, warp_reduce_max)
from .ordering import loop_nounroll
from .prefetch import prefetch_span_l2, sm_id_bound
from .tracing import trace_now, trace_record
from .vector_io import l2_policy_evict_first, l2_policy_evict_last, load_quad_at_hinted, store_quad_at_hinted

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

#: Threads of a tile task's block (every scheduler's kernels and workers run this many).
#: Not the rows' 256: with 8 values per thread instead of 4 the per-thread overhead (index
#: math, two block reductions) is paid once per 8 elements; A and C were issue-bound at
#: 4 values per thread (PERFORMANCE.md).
TILE_THREADS = 128
TILE_WARPS = TILE_THREADS // WARP_SIZE
#: Quads (4 values, one 16-byte access) per thread, and the values they hold in registers.
TILE_QUADS = 2
TILE_VALUES = TILE_QUADS * QUAD
#: Largest tile the helpers handle: 128 threads x 2 quads.
MAX_TILE_ELEMENTS = TILE_THREADS * TILE_VALUES
#: Resident tile blocks per SM when registers allow (2048 threads / 128): the prefetch
#: distance of the separate kernels is one such wave.
TILE_BLOCKS_PER_SM_WAVE = 2048 // TILE_THREADS
#: 16-byte loads/stores for aligned tiles (the simulator has no vector intrinsics).
VECTOR_TILES = not SIMULATOR
FULL_MASK = 0xFFFFFFFF
#: The thread that writes an A tile's summary: lane 0 of warp 1, not thread 0, so that in
#: the DAG scheduler it can announce the tile (row arrival, maybe B's publish) while thread
#: 0 decides the worker's next task (:mod:`.persistent`).
TILE_ANNOUNCER = WARP_SIZE
#: The block reductions of :mod:`numba_softmax.numerics` for TILE_THREADS-thread blocks.
tile_reduce_max, tile_reduce_sum = block_reductions(TILE_THREADS)


# ---- task helpers ------------------------------------------------------------------------

@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def tile_is_aligned(start, n):
    """Whether a tile moves in 16-byte quads: it starts on a multiple of 4 elements (the
    array base is 256-byte aligned) and its length is one (every tile of the protocol's
    cases). Never in the simulator, which has no vector intrinsics."""
    return VECTOR_TILES and (start & 3) == 0 and (n & 3) == 0


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def load_tile_quad(values, start, n, aligned, base, policy):
    """Tile elements ``base .. base + 3`` (``NEG_INF`` past the tile's end): one 16-byte
    load for an aligned tile, else four masked scalar loads -- the same four values, so
    the bits never depend on the path."""
    # base and n are int32 and compared as such (Numba would widen base + 1 < n to 64 bits); only the
    # element index into values is 64-bit, unsigned: no negative-index wraparound code.
    index = uint64(start) + uint64(uint32(base))
    if aligned:
        if base < n:
            return load_quad_at_hinted(values, index, policy)
        return NEG_INF, NEG_INF, NEG_INF, NEG_INF
    a = values[index] if base < n else NEG_INF
    b = values[index + uint64(1)] if int32(base + 1) < n else NEG_INF
    c = values[index + uint64(2)] if int32(base + 2) < n else NEG_INF
    d = values[index + uint64(3)] if int32(base + 3) < n else NEG_INF
    return a, b, c, d


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def load_tile_at(start, n, values, policy, x):
    """Thread i's quads of the tile at ``start`` of ``n`` elements (at ``4 (i + 128 q)``, q = 0, 1) into
    ``x`` (``TILE_VALUES`` float32 in registers), ``NEG_INF`` past the tile's end. The loads only: a
    worker that runs two tiles back to back issues both tiles' loads before either tile's arithmetic
    waits for them."""
    tid = int32(cuda.threadIdx.x)
    aligned = tile_is_aligned(start, n)
    for q in range(TILE_QUADS):
        a, b, c, d = load_tile_quad(values, start, n, aligned, int32(QUAD * (tid + q * TILE_THREADS)), policy)
        x[QUAD * q] = a
        x[QUAD * q + 1] = b
        x[QUAD * q + 2] = c
        x[QUAD * q + 3] = d


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def load_tile(t, values, tile_start, tile_len, policy, x):
    """:func:`load_tile_at` of tile ``t`` (its start and length read from the layout)."""
    t = uint32(t)  # unsigned: no negative-index wraparound code in the index math
    load_tile_at(tile_start[t], tile_len[t], values, policy, x)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def load_a_tile(t, values, tile_start, tile_len, x):
    """A's loads of tile ``t``: x is read again by C, so its lines go to L2 as evict-last, ahead of
    everything else."""
    load_tile(t, values, tile_start, tile_len, l2_policy_evict_last(), x)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def load_c_tile(t, values, tile_start, tile_len, x):
    """C's loads of tile ``t``: C's read of x is its last (and y, stored by :func:`normalize_tile`, is
    never read), so both are evict-first: neither displaces the evict-last x lines other tiles' C tasks
    have yet to reread."""
    load_tile(t, values, tile_start, tile_len, l2_policy_evict_first(), x)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def summarize_tile(t, x, tile_max, tile_sum, partials):
    """A(t)'s arithmetic on the values :func:`load_tile` loaded: m_t, then z_t = sum exp(x - m_t),
    each folded in element order and combined by a block reduction (which ends with a barrier).
    Thread :data:`TILE_ANNOUNCER` writes ``tile_max[t]`` and ``tile_sum[t]``."""
    local_max = NEG_INF
    for k in range(TILE_VALUES):
        local_max = f32_max(local_max, x[k])
    m_t = tile_reduce_max(local_max, partials)
    local_sum = float32(0.0)
    for k in range(TILE_VALUES):
        local_sum = f32_add(local_sum, f32_exp(f32_sub(x[k], m_t)))
    z_t = tile_reduce_sum(local_sum, partials)
    if int32(cuda.threadIdx.x) == TILE_ANNOUNCER:
        tile_max[uint32(t)] = m_t
        tile_sum[uint32(t)] = z_t


@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials):
    """A(t): tile maximum and shifted exponential sum. Block-level (all TILE_THREADS threads).

    Thread i owns the quads at ``4 (i + 128 q)``, q = 0, 1, and folds them in element
    order. A masked element is ``NEG_INF``: the identity of max, and
    ``exp(-inf - m_t) = +0`` adds nothing, so the result equals the fold over the real
    elements only. Thread :data:`TILE_ANNOUNCER` writes ``tile_max[t]`` and ``tile_sum[t]``
    (in the DAG it is also the thread that announces the tile, so its own release orders
    the summary: no extra barrier). The task ends with a block barrier (the reduction's).
    """
    x = cuda.local.array(TILE_VALUES, float32)  # fully unrolled: registers, not local memory
    load_a_tile(t, values, tile_start, tile_len, x)
    summarize_tile(t, x, tile_max, tile_sum, partials)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def normalize_tile_at(start, n, x, m, z, out):
    """C's arithmetic on the values :func:`load_tile_at` loaded for the tile at ``start`` of ``n``
    elements: ``out = exp(x - m) / z``, stored evict-first (y is never read again). Masked elements are
    computed (``NEG_INF`` -> 0) but never stored."""
    tid = int32(cuda.threadIdx.x)
    aligned = tile_is_aligned(start, n)
    for q in range(TILE_QUADS):
        base = int32(QUAD * (tid + q * TILE_THREADS))  # int32 offset and bounds, as in load_tile_quad
        ya = f32_div(f32_exp(f32_sub(x[QUAD * q], m)), z)
        yb = f32_div(f32_exp(f32_sub(x[QUAD * q + 1], m)), z)
        yc = f32_div(f32_exp(f32_sub(x[QUAD * q + 2], m)), z)
        yd = f32_div(f32_exp(f32_sub(x[QUAD * q + 3], m)), z)
        index = uint64(start) + uint64(uint32(base))
        if aligned:
            if base < n:
                store_quad_at_hinted(out, index, ya, yb, yc, yd, l2_policy_evict_first())
        else:
            if base < n:
                out[index] = ya
            if int32(base + 1) < n:
                out[index + uint64(1)] = yb
            if int32(base + 2) < n:
                out[index + uint64(2)] = yc
            if int32(base + 3) < n:
                out[index + uint64(3)] = yd


@cuda.jit(device=True, **KERNEL_OPTIONS)
def normalize_tile(t, x, m, z, tile_start, tile_len, out):
    """:func:`normalize_tile_at` of tile ``t`` (its start and length read from the layout)."""
    t = uint32(t)
    normalize_tile_at(tile_start[t], tile_len[t], x, m, z, out)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def task_c_at(start, n, m, z, values, out):
    """C of the tile at ``start`` of ``n`` elements: ``out = exp(x - m) / z`` over it. Block-level; no
    barrier inside. ``m`` and ``z`` are passed as values: the caller decides how they were read (after a
    kernel boundary, a grid barrier, or an acquire); so are the tile's start and length, which a caller
    may have read before that barrier (the layout never changes)."""
    x = cuda.local.array(TILE_VALUES, float32)
    load_tile_at(start, n, values, l2_policy_evict_first(), x)
    normalize_tile_at(start, n, x, m, z, out)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_c(t, m, z, values, tile_start, tile_len, out):
    """C(t): :func:`task_c_at` of tile ``t`` (its start and length read from the layout)."""
    t = uint32(t)
    task_c_at(tile_start[t], tile_len[t], m, z, values, out)


if SIMULATOR:
    @cuda.jit(device=True)
    def task_b_of(r, first, count, tile_max, tile_sum, row_max, row_sum):
        """B(r) in the simulator (no shuffles), its tiles ``first .. first + count - 1``: lane 0 alone
        does the sequential fold that the GPU build below reproduces bit for bit."""
        if cuda.threadIdx.x % WARP_SIZE != 0:
            return
        m = NEG_INF
        for k in range(count):
            m = f32_max(m, tile_max[first + k])
        z = float32(0.0)
        for k in range(count):
            t = first + k
            z = f32_add(z, f32_mul(tile_sum[t], f32_exp(f32_sub(tile_max[t], m))))
        row_max[r] = m
        row_sum[r] = z

else:
    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def task_b_of(r, first, count, tile_max, tile_sum, row_max, row_sum):
        """B(r), the row's tiles being ``first .. first + count - 1`` (passed as values: a caller may
        have read them before the barrier that precedes B; the layout never changes): combine the
        row's tile summaries stably. Warp-level: all 32 lanes of one converged warp call it; lane 0
        writes ``row_max[r]`` and ``row_sum[r]``.

        Lane k loads the summaries of tiles k, k + 32, ... so a row's loads are in flight
        together (a thread-level B walked two dependent chains of 8-36 loads: ~5 us per
        task with DRAM idle, PERFORMANCE.md). The maximum is exact in any order. The sum
        keeps the sequential tile order: each lane computes its term
        ``z_t * exp(m_t - m)`` and every lane folds the broadcast terms in tile order, so
        ``z`` has exactly the bits of ``z = 0; for t in tiles: z += term_t``.
        """
        # 32-bit counters throughout: Numba widens uint32 + uint32 to 64 bits, so every sum is
        # cast back (one 32-bit IADD instead of 64-bit pairs and their compares).
        lane = uint32(cuda.threadIdx.x) & uint32(WARP_SIZE - 1)
        r = uint32(r)  # unsigned indices: no negative-index wraparound code
        first = uint32(first)
        count = uint32(count)
        m = NEG_INF
        # Rolled, as the twin's ``#pragma unroll 1`` loop: a lane takes 1-2 trips at the protocol's row
        # lengths, and ptxas would otherwise unroll Numba's rolled PTX loop 4x (43 more static
        # instructions; docs/numba_vs_nvcc.md). A signed counter, as the twin's.
        k = int32(lane)
        while k < int32(count):
            loop_nounroll()
            m = f32_max(m, tile_max[uint32(first + uint32(k))])
            k = int32(k + int32(WARP_SIZE))
        m = warp_reduce_max(m)
        z = float32(0.0)
        chunk = uint32(0)
        while chunk < count:
            term = float32(0.0)
            if uint32(chunk + lane) < count:
                t = uint32(first + chunk + lane)
                term = f32_mul(tile_sum[t], f32_exp(f32_sub(tile_max[t], m)))
            terms = min(uint32(WARP_SIZE), uint32(count - chunk))
            j = uint32(0)
            while j < terms:
                z = f32_add(z, cuda.shfl_sync(FULL_MASK, term, j))
                j = uint32(j + uint32(1))
            chunk = uint32(chunk + uint32(WARP_SIZE))
        if lane == 0:
            row_max[r] = m
            row_sum[r] = z


@cuda.jit(device=True, **KERNEL_OPTIONS)
def task_b(r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum):
    """B(r): :func:`task_b_of` of row ``r`` (its tiles read from the layout). Warp-level."""
    task_b_of(r, row_first_tile[uint32(r)], row_tile_count[uint32(r)], tile_max, tile_sum, row_max, row_sum)


# ---- separate scheduler: three kernels ------------------------------------------------------

@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def prefetch_tile_l2(ahead, values, tile_start, tile_len):
    """Thread 0 asks for tile ``ahead`` (if it exists) in L2: the tile this block, or the
    block one wave later, reads next. A and C blocks are short latency-bound chains like
    the narrow fused rows, where the same prefetch paid (:mod:`.prefetch`). Values are
    unchanged; the trace builds leave it out (they record ordering, not speed)."""
    if cuda.threadIdx.x == 0 and ahead >= 0 and ahead < tile_start.shape[0]:
        prefetch_span_l2(values, tile_start[uint32(ahead)], tile_len[uint32(ahead)])


def _make_separate_kernels(trace_build):
    """The three separate-scheduler kernels; ``trace_build`` selects the trace build.

    Both builds take the ``trace`` array (see :mod:`.tracing`); in the performance
    build the constant-false branches are pruned, so it never touches it.
    """
    TRACE = trace_build

    def tile_summary_kernel(values, tile_start, tile_len, tile_max, tile_sum, trace):
        partials = cuda.shared.array(TILE_WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        t = cuda.blockIdx.x
        if not TRACE:
            prefetch_tile_l2(t + TILE_BLOCKS_PER_SM_WAVE * sm_id_bound(), values, tile_start, tile_len)
        start = int64(0)
        if TRACE and cuda.threadIdx.x == 0:
            start = trace_now()
        task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials)
        if TRACE and cuda.threadIdx.x == 0:
            trace_record(trace, t, start)

    def row_combine_kernel(row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum, trace):
        # One warp per row (the whole warp takes this branch); unsigned 32-bit: a shift, where
        # cuda.grid(1) // 32 is a signed 64-bit floor division.
        r = udiv(uint32(cuda.grid(1)), uint32(WARP_SIZE))
        if r < row_first_tile.shape[0]:
            start = int64(0)
            if TRACE:
                start = trace_now()
            task_b(r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum)
            if TRACE and cuda.threadIdx.x % WARP_SIZE == 0:
                trace_record(trace, tile_max.shape[0] + r, start)

    def tile_normalize_kernel(values, tile_row, tile_start, tile_len, row_max, row_sum, out, trace):
        # Descending tiles: the A pass ascended, so the tiles it read last are the ones still in L2
        # (C's loads and y's stores are evict-first and do not push them out); the block one wave
        # later reads the tile one wave lower.
        t = int32(tile_row.shape[0]) - 1 - int32(cuda.blockIdx.x)
        if not TRACE:
            prefetch_tile_l2(t - TILE_BLOCKS_PER_SM_WAVE * sm_id_bound(), values, tile_start, tile_len)
        row = uint32(tile_row[uint32(t)])  # unsigned: row_max[row] needs no negative-index code
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


@cuda.jit(**KERNEL_OPTIONS)
def empty_tile_kernel():
    """No work: three launches of it in the separate scheduler's geometry are that scheduler's
    empty-work floor (what the launches and their gaps cost with nothing to do)."""
    pass


def separate_floor_launches(buffers):
    """:func:`separate_launches`'s grids and blocks, each launching :func:`empty_tile_kernel`."""
    return [KernelLaunch(f"empty[{launch.name}]", empty_tile_kernel, launch.grid, launch.block, ())
            for launch in separate_launches(buffers)]


def separate_launches(buffers, trace=False):
    """The three launches of the separate scheduler over :class:`~numba_softmax.tiled.TiledBuffers`."""
    b = buffers
    n_tiles, rows = b.n_tiles, b.rows
    block = (TILE_THREADS,)
    summary, combine, normalize = (separate_trace_kernels() if trace else
                                   (tile_summary_kernel, row_combine_kernel, tile_normalize_kernel))
    return [
        KernelLaunch("tile_summary_kernel", summary, (n_tiles,), block,
                     (b.values, b.tile_start, b.tile_len, b.tile_max, b.tile_sum, b.trace)),
        KernelLaunch("row_combine_kernel", combine,
                     ((rows + TILE_WARPS - 1) // TILE_WARPS,), block,
                     (b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum,
                      b.row_max, b.row_sum, b.trace)),
        KernelLaunch("tile_normalize_kernel", normalize, (n_tiles,), block,
                     (b.values, b.tile_row, b.tile_start, b.tile_len, b.row_max, b.row_sum, b.out, b.trace)),
    ]
