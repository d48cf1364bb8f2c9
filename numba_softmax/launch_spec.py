"""What a launch is, independent of how it is submitted.

Kernel modules describe their launches as :class:`KernelLaunch` values (kernel, grid, block,
arguments); the launch layer (:mod:`numba_softmax.launch`) decides how to submit them: on a GPU
it compiles the kernel once, packs the arguments once for their fixed device pointers and
submits with ``cuLaunchKernel`` / ``cuLaunchCooperativeKernel`` (``cuLaunchKernelEx`` for a cluster or a
programmatic dependent launch); in the Numba CUDA simulator it falls back to Numba's own dispatcher.
This module sits below both and imports neither.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelLaunch:
    name: str
    kernel: object  # a numba.cuda dispatcher
    grid: tuple
    block: tuple
    args: tuple
    shared_bytes: int = 0
    #: Launch cooperatively (every block co-resident, checked against the occupancy limit) even
    #: when Numba does not mark the kernel cooperative: a kernel with its own grid barrier needs it.
    cooperative: bool = False
    #: CTAs per thread block cluster along x (1: no cluster); the grid is a multiple of it.
    cluster: int = 1
    #: Programmatic dependent launch: the grid may start launching while the grid ahead of it in the
    #: stream still runs (once that one lets it); the kernel waits for it (``griddepcontrol.wait``)
    #: before it reads what that grid writes.
    programmatic: bool = False


__all__ = ["KernelLaunch"]
