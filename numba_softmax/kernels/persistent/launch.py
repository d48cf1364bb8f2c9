"""Launch descriptions of the persistent kernel and the DAG's queue reset."""

from numba import int32

from ...launch_spec import KernelLaunch
from ...numerics import BLOCK_THREADS
from ...queue import DEFAULT_MAX_POLLS, TILES_PER_CLAIM
from ..tiles import TILE_THREADS
from .kernel import persistent_tiles
from .modes import MODE_DAG, MODE_DAG_FLOOR, MODE_PHASED, MODE_PHASED_FLOOR
from .queue_ops import init_queue_kernel

#: The reset's grid is grid-stride, at most this many blocks of BLOCK_THREADS.
INIT_MAX_BLOCKS = 1024


def persistent_args(mode, buffers, max_polls=DEFAULT_MAX_POLLS):
    """Argument tuple of :data:`persistent_tiles` (same order for every mode and variant)."""
    b = buffers
    return (int32(mode), b.values, b.out, b.tile_row, b.tile_start, b.tile_len,
            b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum, b.row_max, b.row_sum,
            b.counters, b.row_arrivals, b.fifo_slots, int32(b.layout.fifo_entries(TILES_PER_CLAIM)),
            int32(max_polls), b.trace)



def init_queue_blocks(buffers):
    """The reset's grid: one thread per FIFO slot, at most :data:`INIT_MAX_BLOCKS` blocks (grid-stride)."""
    capacity = buffers.fifo_slots.shape[0]
    return min(max(1, (capacity + BLOCK_THREADS - 1) // BLOCK_THREADS), INIT_MAX_BLOCKS)


def init_queue_launch(buffers):
    """The DAG's queue reset."""
    return KernelLaunch("init_queue_kernel", init_queue_kernel, (init_queue_blocks(buffers),), (BLOCK_THREADS,),
                        (buffers.counters, buffers.row_arrivals, buffers.fifo_slots))


def persistent_launch(label, mode, buffers, workers, kernel=None, max_polls=DEFAULT_MAX_POLLS):
    """The cooperative launch of the persistent kernel: its own grid barrier needs every worker
    resident (the launch checks the occupancy limit). In DAG modes it is the reset's programmatic
    dependent (it starts launching while the reset runs; the kernel waits for the reset's writes)."""
    return KernelLaunch(f"persistent_tiles[{label}]", kernel or persistent_tiles, (workers,), (TILE_THREADS,),
                        persistent_args(mode, buffers, max_polls), cooperative=True,
                        programmatic=mode in (MODE_DAG, MODE_DAG_FLOOR))


def phased_launches(buffers, workers, kernel=None, floor=False, max_polls=DEFAULT_MAX_POLLS):
    """One cooperative launch, mode 0 (no queue reset); ``floor``: the same with no tasks."""
    mode = MODE_PHASED_FLOOR if floor else MODE_PHASED
    return [persistent_launch("phased_floor" if floor else "phased", mode, buffers, workers, kernel, max_polls)]




def dag_launches(buffers, workers, max_polls=DEFAULT_MAX_POLLS, kernel=None, floor=False):
    """Queue reset, then the cooperative launch in mode 1; ``floor``: the same with no tasks."""
    mode = MODE_DAG_FLOOR if floor else MODE_DAG
    return [init_queue_launch(buffers),
            persistent_launch("dag_floor" if floor else "dag", mode, buffers, workers, kernel, max_polls)]
