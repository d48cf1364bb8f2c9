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

This module holds the mode's helpers: the step -> tile map of a pass (:func:`visit`), thread 0's L2
prefetch one step ahead (:func:`prefetch_next_tile`) and the C pass's tile metadata
(:func:`c_step_metadata`). The mode's body is written out in the kernel itself
(:func:`.kernel.make_persistent_kernel`, under ``mode == MODE_PHASED``): as an inline device function
of its own it changed the kernel's PTX (:mod:`.kernel` says how).
"""

from numba import cuda, int32, int64, uint32

from ...numerics import KERNEL_OPTIONS
from ..prefetch import prefetch_span_l2


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
