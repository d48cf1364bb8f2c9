"""Two crossings of a grid barrier by an otherwise empty kernel: the phased scheduler's barrier against
Numba's ``grid.sync()`` (GPU only; ``python -m bench probe floors``, against CUDA C++'s in
``reference_cu/coop_floor.cu``).

One cooperative launch of ``workers`` blocks of :data:`~numba_softmax.kernels.tiles.TILE_THREADS`
threads; between block barriers, thread 0 of every block crosses the grid barrier twice:

* ``two_grid_barriers_kernel``: the persistent kernel's own
  (:func:`~numba_softmax.kernels.persistent.barrier.grid_barrier`: one ``atom.release`` arrival per
  block on a self-resetting word, acquire polls) on a counters array of its own, left as it was found;
* ``two_grid_syncs_kernel``: Numba's cooperative groups, ``cuda.cg.this_grid().sync()``.

No bytes moved beyond the barrier word.
"""

import numpy as np
from numba import cuda, int32

from ...launch_spec import KernelLaunch
from ...queue import COUNTER_INITIAL, DEFAULT_MAX_POLLS
from ..persistent.barrier import grid_barrier
from ..tiles import TILE_THREADS


@cuda.jit
def two_grid_barriers_kernel(counters, max_polls):
    for which in range(2):
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            grid_barrier(counters, int32(cuda.gridDim.x), max_polls, int32(which))
        cuda.syncthreads()


@cuda.jit
def two_grid_syncs_kernel():
    grid = cuda.cg.this_grid()
    grid.sync()
    grid.sync()


def two_grid_barriers_launch(workers, label="two grid barriers"):
    """The persistent kernel's barrier crossed twice, on fresh counters (a timeout is recorded there)."""
    counters = cuda.to_device(np.array(COUNTER_INITIAL, dtype=np.int32))
    return KernelLaunch(label, two_grid_barriers_kernel, (workers,), (TILE_THREADS,),
                        (counters, int32(DEFAULT_MAX_POLLS)), cooperative=True)


def two_grid_syncs_launch(workers, label="two grid.sync"):
    """Numba's ``grid.sync()`` crossed twice."""
    return KernelLaunch(label, two_grid_syncs_kernel, (workers,), (TILE_THREADS,), (), cooperative=True)
