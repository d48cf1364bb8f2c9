"""The delay kernel: one block of 32 threads sleeping ``iterations`` x ``nanosleep(1000)`` (GPU only).

Queued ahead of what is timed, it keeps the GPU busy while the host enqueues, so that the events
around the timed work see the GPU's time alone (``bench.timing.DelaySampler`` calibrates the
microseconds per iteration and checks every sample for starvation). No bytes are moved.
"""

import numpy as np
from numba import cuda

from ...launch_spec import KernelLaunch
from ..ordering import pause_us


@cuda.jit
def delay_kernel(iterations):
    pause_us(iterations)


def delay_launch(iterations):
    """One block of 32 threads sleeping ``iterations`` microseconds or so."""
    return KernelLaunch("perf_delay", delay_kernel, (1,), (32,), (np.int64(iterations),))
