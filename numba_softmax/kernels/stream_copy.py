"""Plain copy kernels: how fast can any kernel that reads x once and writes y once run at a shape?

Not a softmax. ``python -m bench perf --copy-kernels sweep`` times them beside ``auto`` and the
driver's ``cuMemcpyDtoDAsync`` of the same bytes, so that a bandwidth goal ("auto at >= 0.92 of the
1 GiB copy ceiling at 4096x4096") can be read against what the common copy designs reach at that
size, not only against the copy engine. The matrix is copied as one flat run of ``rows * cols``
float32 values (16-byte quads)::

    y.flat[i] = x.flat[i]

Launch geometry of ``copy_t{T}_u{U}`` (one pass): ``grid = ceil(n / (4 * T * U))`` blocks of T threads;
block b covers the ``4 * T * U`` values from ``b * 4 * T * U`` on, thread t the quads ``t, t + T, ...,
t + (U - 1) * T`` of it (each warp instruction moves 512 contiguous bytes). Every thread issues all U
loads before its first store, so U quads per thread are in flight together.
``copy_t{T}_u{U}_b{B}`` (grid-stride, persistent): ``grid = B * SMs`` blocks that take those chunks in
turn, ``gridDim.x`` chunks apart, the launch and block scheduling paid once per SM instead of once per
chunk.

Bytes each launch moves: read ``4n``, write ``4n`` (softmax's 8N). Rows must be a multiple of 4 long
(16-byte quads; the arrays are device allocations, 256-byte aligned).
"""

import re

from numba import cuda, float32

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS, QUAD
from .vector_io import load_quad, store_quad

#: The designs ``--copy-kernels sweep`` times: block size and quads in flight per thread, one pass and
#: persistent (full occupancy: B * T = 2048 threads per SM).
SWEEP = ("copy_t128_u1", "copy_t128_u4", "copy_t128_u8", "copy_t256_u1", "copy_t256_u2", "copy_t256_u4",
         "copy_t256_u8", "copy_t512_u2", "copy_t512_u4", "copy_t1024_u1", "copy_t1024_u4",
         "copy_t256_u4_b8", "copy_t256_u8_b8", "copy_t512_u4_b4", "copy_t1024_u2_b2", "copy_t1024_u4_b2")

_NAME = re.compile(r"copy_t(\d+)_u(\d+)(?:_b(\d+))?")
_KERNELS = {}


def parse(name):
    """``copy_t{T}_u{U}[_b{B}]`` -> (T, U, B or 0); ValueError naming what is wrong."""
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"unknown copy kernel {name!r}: expected copy_t<T>_u<U> or copy_t<T>_u<U>_b<B>, "
                         f"e.g. {SWEEP[0]!r}; the sweep: {', '.join(SWEEP)}")
    threads, unroll, blocks = (int(v) if v else 0 for v in match.groups())
    if threads & (threads - 1) or not 32 <= threads <= 1024:
        raise ValueError(f"copy kernel {name}: T (threads per block) must be a power of two from 32 to 1024")
    if not 1 <= unroll <= 8:
        raise ValueError(f"copy kernel {name}: U (quads in flight per thread) must be 1 to 8")
    if match.group(3) is not None and not 1 <= blocks * threads <= 2048:
        raise ValueError(f"copy kernel {name}: B x T must be 1 to 2048 resident threads per SM")
    return threads, unroll, blocks


def _make_stream_copy(threads, unroll):
    THREADS = threads
    UNROLL = unroll
    CHUNK = QUAD * THREADS * UNROLL  # values per block per step
    VALUES = QUAD * UNROLL  # held per thread per step

    def stream_copy(x, y):
        n = x.shape[1]
        held = cuda.local.array(VALUES, float32)
        start = cuda.blockIdx.x * CHUNK + QUAD * cuda.threadIdx.x
        while start < n:
            for u in range(UNROLL):  # every load first: U quads in flight per thread
                base = start + QUAD * THREADS * u
                if base < n:
                    a, b, c, d = load_quad(x, 0, base)
                    held[QUAD * u] = a
                    held[QUAD * u + 1] = b
                    held[QUAD * u + 2] = c
                    held[QUAD * u + 3] = d
            for u in range(UNROLL):
                base = start + QUAD * THREADS * u
                if base < n:
                    store_quad(y, 0, base, held[QUAD * u], held[QUAD * u + 1], held[QUAD * u + 2],
                               held[QUAD * u + 3])
            start += cuda.gridDim.x * CHUNK  # one pass: past n at once; persistent: the next chunk

    stream_copy.__name__ = stream_copy.__qualname__ = f"stream_copy_t{threads}_u{unroll}"
    return cuda.jit(**KERNEL_OPTIONS)(stream_copy)


def stream_copy_kernel(threads, unroll):
    key = (threads, unroll)
    if key not in _KERNELS:
        _KERNELS[key] = _make_stream_copy(threads, unroll)
    return _KERNELS[key]


def stream_copy_launches(name, x, y, sm_count):
    """The single launch of copy kernel ``name`` copying ``x`` to ``y`` (2-D float32 device arrays of one
    C-contiguous shape, rows a multiple of 4 long) on a GPU of ``sm_count`` SMs."""
    threads, unroll, blocks = parse(name)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"copy kernel {name}: x and y must be 2-D arrays of one shape, got {x.shape} and {y.shape}")
    n = x.shape[0] * x.shape[1]
    if x.shape[1] % QUAD:
        raise ValueError(f"copy kernel {name}: rows must be a multiple of {QUAD} long (16-byte quads), "
                         f"got {x.shape[1]} columns")
    chunk = QUAD * threads * unroll
    grid = blocks * sm_count if blocks else -(-n // chunk)
    return [KernelLaunch(name, stream_copy_kernel(threads, unroll), (grid,), (threads,),
                         (x.reshape(1, n), y.reshape(1, n)))]
