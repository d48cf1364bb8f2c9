"""Launch lists of the three schedulers and the persistent worker count.

* :func:`tiled_launches`: ``separate`` (3 launches), ``phased`` (1 cooperative launch),
  ``dag`` (queue reset + 1 cooperative launch), as :class:`~numba_softmax.launch_spec.KernelLaunch`.
* :func:`worker_plan`: workers = cooperative occupancy x SM count, capped by the A tasks.
"""

from dataclasses import dataclass

from ..cases import EXPERIMENT_B_SCHEDULERS
from ..kernels.persistent import MODE_PHASED, dag_launches, persistent_args, persistent_tiles, phased_launches
from ..kernels.persistent.diagnostics import persistent_trace_kernel
from ..kernels.tiles import TILE_THREADS, separate_floor_launches, separate_launches
from ..backend import SIMULATOR
from ..launch.driver import compiled, device_sm_count
from ..queue import DEFAULT_MAX_POLLS

SCHEDULERS = EXPERIMENT_B_SCHEDULERS  # ("separate", "phased", "dag")

@dataclass(frozen=True)
class WorkerPlan:
    workers: int
    cooperative_limit: int      # blocks_per_sm * sm_count (co-residency limit)
    blocks_per_sm: int
    sm_count: int
    n_tiles: int
    source: str                 # "occupancy", "override", "simulator"

    def record(self):
        return dict(self.__dict__)


def worker_plan(buffers, workers=None, kernel=None):
    """Persistent worker count: cooperative occupancy x SMs, capped by the A tasks.

    On a GPU the occupancy comes from the compiled kernel's
    ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` (128-thread workers, no dynamic shared
    memory) and the SM count from the device. The simulator co-schedules one block.
    ``kernel`` is the persistent build that will run (default the performance build;
    the trace build and the negative controls use more registers, so fewer of them fit
    per SM). ``workers`` overrides (tests); it must still fit the co-residency limit.
    """
    n_tiles = buffers.n_tiles
    dispatcher = persistent_tiles if kernel is None else kernel
    if SIMULATOR:
        limit = dispatcher.overloads[None].max_cooperative_grid_blocks(TILE_THREADS)
        blocks_per_sm, sm_count, source = limit, 1, "simulator"
    else:
        kernel = compiled(dispatcher, persistent_args(MODE_PHASED, buffers))
        blocks_per_sm = int(kernel.active_blocks_per_sm(TILE_THREADS, 0))
        sm_count = int(device_sm_count())
        limit, source = blocks_per_sm * sm_count, "occupancy"
    if workers is None:
        chosen = min(limit, n_tiles)
    else:
        chosen, source = int(workers), "override"
        if chosen < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not SIMULATOR and chosen > limit:
            raise ValueError(f"workers={chosen} exceeds the cooperative co-residency limit {limit}")
    if chosen < 1:
        raise ValueError(f"no co-resident worker fits (limit {limit})")
    return WorkerPlan(workers=chosen, cooperative_limit=int(limit), blocks_per_sm=int(blocks_per_sm),
                      sm_count=int(sm_count), n_tiles=n_tiles, source=source)


def tiled_launches(scheduler, buffers, workers=None, max_polls=DEFAULT_MAX_POLLS, trace=False, kernel=None):
    """The KernelLaunch list of one scheduler invocation.

    separate: tile_summary_kernel, row_combine_kernel, tile_normalize_kernel;
    phased:   persistent_tiles (mode 0), cooperative;
    dag:      init_queue_kernel, persistent_tiles (mode 1), cooperative.
    ``workers`` (persistent schedulers): an int, or None for :func:`worker_plan`.
    ``kernel``: the persistent build to launch instead of the performance build (or, with
    ``trace=True``, the trace build): a negative control or a diagnostic build.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
    if trace and not buffers.traced:
        raise ValueError("trace=True needs buffers allocated with TiledBuffers.allocate(..., trace=True)")
    if scheduler == "separate":
        return separate_launches(buffers, trace=trace)
    if kernel is None and trace:
        kernel = persistent_trace_kernel()
    if workers is None:
        workers = worker_plan(buffers, kernel=kernel).workers
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if SIMULATOR and scheduler == "phased" and workers > 1:
        raise ValueError("the simulator runs blocks one at a time and its grid barrier is a block "
                         "barrier: phased mode can only be simulated with workers=1")
    if scheduler == "phased":
        return phased_launches(buffers, workers, kernel=kernel, max_polls=max_polls)
    return dag_launches(buffers, workers, max_polls, kernel=kernel)


def floor_launches(scheduler, buffers, workers=None):
    """A scheduler's empty-work floor: the same launches (grid, block, cooperative) and the same
    barriers and hand-offs, with no tasks. Timed beside the scheduler, it splits its time into a
    scheduling part and a work part."""
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
    if scheduler == "separate":
        return separate_floor_launches(buffers)
    if workers is None:
        workers = worker_plan(buffers).workers
    if scheduler == "phased":
        return phased_launches(buffers, int(workers), floor=True)
    return dag_launches(buffers, int(workers), floor=True)
