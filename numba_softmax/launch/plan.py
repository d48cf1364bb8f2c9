"""What a launch is, independent of how it is submitted.

Kernel modules describe their launches as :class:`KernelLaunch` values (kernel, grid,
block, arguments); the launch layer decides how to submit them:

* on a GPU, :mod:`numba_softmax.launch.driver` compiles the kernel once, packs the
  arguments once for their fixed device pointers and submits with
  ``cuLaunchKernel`` / ``cuLaunchCooperativeKernel`` through cuda-python;
* in the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) there is no driver, and
  :func:`run_launches` falls back to Numba's own dispatcher.
"""

from ..launch_spec import KernelLaunch  # noqa: F401  (re-exported: the description lives below the kernels)


def run_launches_with_dispatcher(launches, stream=0):
    """Submit through Numba's dispatcher (simulator, and reference checks only).

    This path costs ~31 us of host time per launch on the H200 (docs/machine.md); nothing
    timed goes through it.
    """
    for launch in launches:
        launch.kernel[launch.grid, launch.block, stream, launch.shared_bytes](*launch.args)


class DispatcherInvocation:
    """Simulator stand-in for ``driver.Invocation``: same ``enqueue(stream)`` shape.

    Used only where there is no GPU (``NUMBA_ENABLE_CUDASIM=1``); never timed.
    """

    def __init__(self, name, launches):
        self.name = name
        self.launches = list(launches)

    def enqueue(self, stream=None):
        run_launches_with_dispatcher(self.launches)

    def kernel_resources(self):
        return [{"launch": launch.name, "grid": list(launch.grid), "block": list(launch.block)}
                for launch in self.launches]


class SimulatorStream:
    """The simulator runs every launch synchronously: nothing to wait for."""

    numba = 0

    def synchronize(self):
        pass
