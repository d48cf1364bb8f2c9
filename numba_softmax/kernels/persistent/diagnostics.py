"""Diagnostic builds of the persistent kernel: the trace build, the completion wait, register caps.

Each is a separate compilation of :func:`.kernel.make_persistent_kernel` (compiled on first use,
cached); none is registered or timed by the experiments. The trace build records every task
(:mod:`..tracing`); the other two answer questions of ``python -m bench probe tiles``.
"""

from numba import cuda

from ...numerics import KERNEL_OPTIONS
from ...queue import C_DONE
from ..ordering import load_acquire_gpu
from .decision import acquire_ticket_slot, make_next_task
from .kernel import SHIPPED, make_persistent_kernel

_builds = {}


def persistent_trace_kernel():
    """The trace build of :data:`.kernel.persistent_tiles` (compiled on first use; never timed)."""
    if "trace" not in _builds:
        _builds["trace"] = make_persistent_kernel("persistent_tiles_trace", trace_build=True)
    return _builds["trace"]


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def leave_once_every_c_tile_is_done(counters, n_tiles):
    """The earlier termination rule: a worker with nothing left to claim waits until c_done shows every C tile."""
    return load_acquire_gpu(counters, C_DONE) >= n_tiles


def completion_wait_kernel():
    """The performance kernel whose DAG workers also wait, before leaving, until ``c_done``
    shows every C tile (the earlier termination rule): a diagnostic build for the tiles probe."""
    if "completion_wait" not in _builds:
        variant = SHIPPED._replace(next_task=make_next_task(acquire_ticket_slot, leave_once_every_c_tile_is_done))
        _builds["completion_wait"] = make_persistent_kernel("persistent_tiles_completion_wait", variant)
    return _builds["completion_wait"]


def register_capped_kernel(max_registers):
    """The performance kernel compiled with ptxas's register cap ``max_registers``: more
    workers fit per SM, at the price of spills. A diagnostic build (``python -m bench probe tiles
    --register-caps``), never registered or used by the bench."""
    if max_registers not in _builds:
        _builds[max_registers] = make_persistent_kernel(f"persistent_tiles_r{max_registers}",
                                                        max_registers=max_registers)
    return _builds[max_registers]
