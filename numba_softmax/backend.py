"""Simulator or GPU: the one place that decides, for the package, the harness and the tests.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, so the backend is
fixed for the life of a process: :data:`SIMULATOR` is read once (:mod:`.simulator`, below the
kernels, which read it too) and everything above the launch layer asks this module.

* On a GPU, launches go through the cuda-python launch layer (:mod:`numba_softmax.launch`):
  :func:`stream` is a :class:`~numba_softmax.launch.driver.Stream`, :func:`invocation` a
  :class:`~numba_softmax.launch.driver.Invocation` (compiled and packed once).
* In the Numba CUDA simulator there is no driver: launches go through Numba's dispatcher
  (:class:`DispatcherInvocation`) and every launch runs synchronously
  (:class:`SimulatorStream`). The simulator checks logic only; it is never timed.

A harness that has to choose the backend for a fresh process does so before Numba is
imported (``bench.environment.select_backend``); this module reports what was chosen.
Whether a GPU is there at all is asked of the driver, before Numba is imported
(:func:`numba_softmax.device.gpu_present`).
"""

import warnings

from numba import cuda

from .launch.driver import Invocation, Stream
from .simulator import SIMULATOR

#: numpy's floating-point warnings ("overflow encountered in scalar add", "invalid value encountered
#: in scalar subtract"), as the simulator reports them from a thread ("tid=[..] ctaid=[..]: ...").
_NUMPY_FLOAT_WARNING = r".*(overflow|invalid value|divide by zero|underflow) encountered in"


def run_launches_with_dispatcher(launches, stream=0):
    """Submit through Numba's dispatcher (simulator, and reference checks only).

    This path costs ~31 us of host time per launch on the H200 (docs/machine.md); nothing
    timed goes through it. In the simulator a kernel's float arithmetic is numpy's, which warns
    where a GPU computes inf or NaN silently (``inf - inf`` in a row holding +inf): those warnings
    are not shown; the device-side checks report such inputs.
    """
    with warnings.catch_warnings():
        if SIMULATOR:
            warnings.filterwarnings("ignore", message=_NUMPY_FLOAT_WARNING, category=RuntimeWarning)
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


def stream():
    """A new stream for a harness or a test: the launch layer's Stream, or SimulatorStream."""
    if SIMULATOR:
        return SimulatorStream()
    return Stream()


def invocation(name, launches):
    """One invocation of a list of launches, prepared once: ``enqueue(stream)`` submits it."""
    if SIMULATOR:
        return DispatcherInvocation(name, launches)
    return Invocation.from_launches(name, launches)


_legacy_stream = None


def launch_stream(stream=None):
    """The launch-layer stream for one call (GPU only): ``stream`` itself, a wrapped Numba stream, or for a call
    that passes none the CUDA legacy default stream, where ``cuda.to_device`` and ``copy_to_host`` without a stream
    run. A copy from pageable host memory may still be in flight when ``to_device`` returns; on that stream the
    launch waits for it (on a non-blocking stream of its own it would race it, and read or be overwritten by it)."""
    global _legacy_stream
    if isinstance(stream, Stream):
        return stream
    if stream is not None:
        return Stream.wrap(stream)
    if _legacy_stream is None:
        _legacy_stream = Stream.wrap(cuda.default_stream())
    return _legacy_stream


def run_launches(launches, stream=None, name="launches"):
    """Submit a list of launches once and wait (API calls, tests): the dispatcher in the
    simulator; on a GPU the launch layer on :func:`launch_stream` ``(stream)``, then synchronize.

    The benchmark does not use this: it prepares each invocation once and times it
    (``bench/runner.py``).
    """
    if SIMULATOR:
        run_launches_with_dispatcher(launches)
        return
    target = launch_stream(stream)
    invocation(name, launches).enqueue(target)
    target.synchronize()


__all__ = ["SIMULATOR", "stream", "invocation", "launch_stream", "run_launches",
           "run_launches_with_dispatcher", "DispatcherInvocation", "SimulatorStream"]
