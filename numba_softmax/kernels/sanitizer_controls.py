"""Negative controls for compute-sanitizer: two kernels with a planted bug each.

``python -m bench sanitize`` runs them under the tool that must catch them and requires that it
does: a sanitizer run that passes the project's kernels proves something only if the same run
rejects these. They are never registered (:mod:`.registry`), launched by the library or timed.

``out_of_bounds_write`` (memcheck)
    grid = (blocks,), block = (CONTROL_THREADS,); thread ``i`` writes ``y[i]`` with no bounds
    test, and the launcher gives it one block more than ``y`` holds: the last block writes
    ``CONTROL_THREADS`` float32 past the end of the allocation.

``shared_memory_race`` (racecheck)
    grid = (1,), block = (CONTROL_THREADS,); every thread writes its slot of a shared array and,
    with the barrier that should separate the two left out, reads its neighbour's slot, which
    a thread of another warp writes: a read-after-write hazard between warps, on every run.

Bytes: ``out_of_bounds_write`` writes ``(n + CONTROL_THREADS) * 4`` (the extra block out of
bounds); ``shared_memory_race`` writes ``CONTROL_THREADS * 4`` to ``y``.
"""

from numba import cuda, float32

from ..launch_spec import KernelLaunch
from ..numerics import KERNEL_OPTIONS

CONTROL_THREADS = 128


@cuda.jit(**KERNEL_OPTIONS)
def out_of_bounds_write(y):
    i = cuda.grid(1)
    y[i] = float32(1.0)  # planted: no `if i < y.shape[0]`


@cuda.jit(**KERNEL_OPTIONS)
def shared_memory_race(y):
    slots = cuda.shared.array(CONTROL_THREADS, float32)
    t = cuda.threadIdx.x
    slots[t] = float32(t)
    # planted: cuda.syncthreads() belongs here
    y[t] = slots[(t + 64) % CONTROL_THREADS]  # thread t + 64 is in another warp


def out_of_bounds_launches(y):
    """One block more than ``y`` (a float32 vector of a multiple of CONTROL_THREADS) holds."""
    if y.shape[0] % CONTROL_THREADS:
        raise ValueError(f"the control needs a length that is a multiple of {CONTROL_THREADS}, got {y.shape[0]}")
    blocks = y.shape[0] // CONTROL_THREADS + 1
    return [KernelLaunch("out_of_bounds_write", out_of_bounds_write, (blocks,), (CONTROL_THREADS,), (y,))]


def shared_race_launches(y):
    """One block of CONTROL_THREADS threads; ``y`` holds CONTROL_THREADS float32."""
    if y.shape[0] != CONTROL_THREADS:
        raise ValueError(f"the control writes exactly {CONTROL_THREADS} values, got {y.shape[0]}")
    return [KernelLaunch("shared_memory_race", shared_memory_race, (1,), (CONTROL_THREADS,), (y,))]
