"""A copy in the fused kernel's geometry: the bandwidth ceiling of that geometry.

Not a softmax: ``y[row, j] = x[row, j]``, exactly the fused kernel's global memory work and nothing else.
``python -m bench perf`` times it beside the fused kernel to separate two questions the goal "fused >= 0.90 of
the 1 GiB device copy" mixes: how far the fused kernel is from what its launch geometry can move at all, and how
far that geometry is from the driver's copy.

Launch geometry (the one :func:`numba_softmax.kernels.fused_row.fused_kernel_for` picks)
    grid = (rows,), block = (256,): thread t owns the quads starting at 4*t, 4*(t+256), ... (the numerics
    policy's ownership rule), loads ALL of them first (independent loads in flight together, as the fused
    kernel's pass 1), then stores them (its pass 3). The fused kernel's widths (1, 2 or 4 quads per thread)
    and, for rows of at most 128 columns, warp 0 alone; 16-byte loads and stores when the rows are a multiple
    of 4 long and both arrays 16-byte aligned, else masked scalar accesses. No L2 prefetch: the fused q1
    build's prefetch is an optimization of the fused kernel, measured against this plain copy.

Bytes each launch must move: read ``rows * cols * 4``, write ``rows * cols * 4`` (the fused kernel's 8N).

Measured on the H200 (recorded in docs/attempts.md, fused kernel section): at 4096x4096 this copy took 36.6 us,
slower than the fused kernel (36.0 us); 0.90 of the 1 GiB copy ceiling there is 35.2 us.
"""

from numba import cuda, float32

from ..launch_spec import KernelLaunch
from ..numerics import BLOCK_THREADS, KERNEL_OPTIONS, QUAD, WARP_SIZE
from .fused_row import MAX_FUSED_COLUMNS, QUADS_PER_THREAD, fused_kernel_for
from .vector_io import load_quad, put_quad, store_quad


def _make_row_copy(quads, vector, warp_only=False):
    """The copy for rows of up to ``quads * 4 * 256`` columns (warp 0 alone: ``quads == 1``,
    rows of up to 128). ``quads``, ``vector``, ``warp_only`` are compile-time constants: the
    loops unroll and the held values stay in registers, as in the fused builds."""
    QUADS = quads
    VALUES = quads * QUAD
    VECTOR = vector
    WARP_ONLY = warp_only

    def row_copy(x, y):
        tid = cuda.threadIdx.x
        if WARP_ONLY and tid >= WARP_SIZE:
            return  # the fused one-warp build's threads 32-255 own no column either
        row = cuda.blockIdx.x
        cols = x.shape[1]
        held = cuda.local.array(VALUES, float32)
        for q in range(QUADS):  # every load first: all in flight together
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                if base < cols:
                    a, b, c, d = load_quad(x, row, base)
                    put_quad(held, QUAD * q, a, b, c, d)
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        held[QUAD * q + j] = x[row, base + j]
        for q in range(QUADS):
            base = QUAD * (tid + q * BLOCK_THREADS)
            if VECTOR:
                if base < cols:
                    store_quad(y, row, base, held[QUAD * q], held[QUAD * q + 1], held[QUAD * q + 2],
                               held[QUAD * q + 3])
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        y[row, base + j] = held[QUAD * q + j]

    row_copy.__name__ = row_copy.__qualname__ = (
        f"row_copy_{'w1' if warp_only else f'q{quads}'}{'_v4' if vector else ''}")
    return cuda.jit(**KERNEL_OPTIONS)(row_copy)


#: fused build name -> the copy in its geometry.
ROW_COPY_FOR_FUSED = {"fused_row_softmax_w1_v4": _make_row_copy(1, True, warp_only=True)}
ROW_COPY_FOR_FUSED.update({f"fused_row_softmax_q{q}{'_v4' if v else ''}": _make_row_copy(q, v)
                           for q in QUADS_PER_THREAD for v in (True, False)})


def row_copy_kernel_for(x, y):
    """The copy in the geometry of the fused build that ``fused_kernel_for(x, y)`` picks."""
    return ROW_COPY_FOR_FUSED[fused_kernel_for(x, y).py_func.__name__]


def row_copy_launches(x, y):
    """The single launch of the geometry copy ``x`` -> ``y`` (2-D float32 device arrays, one shape)."""
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"row copy: x and y must be 2-D arrays of one shape, got {x.shape} and {y.shape}")
    rows, cols = x.shape
    if cols > MAX_FUSED_COLUMNS:
        raise ValueError(f"row too long for the fused geometry: {cols} columns > {MAX_FUSED_COLUMNS}")
    return [KernelLaunch("row_copy", row_copy_kernel_for(x, y), (rows,), (BLOCK_THREADS,), (x, y))]
