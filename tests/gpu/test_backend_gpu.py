"""numba_softmax.backend on a GPU: a call that names no stream runs on the legacy default stream, after the copies
and kernels Numba queued there without a stream (tests and API calls copy their inputs so)."""

import numpy as np
from numba import cuda, uint32

from numba_softmax.arrays import launch_stream_for
from numba_softmax.backend import launch_stream, run_launches
from numba_softmax.launch_spec import KernelLaunch


@cuda.jit
def _write_late(flag, sleeps):
    if cuda.threadIdx.x == 0:
        for _ in range(sleeps):
            cuda.nanosleep(uint32(1000))
        flag[0] = 1


@cuda.jit
def _read(flag, seen):
    if cuda.threadIdx.x == 0:
        seen[0] = flag[0]


def test_a_call_without_a_stream_runs_after_what_the_legacy_stream_holds():
    flag = cuda.to_device(np.zeros(1, np.int32))
    seen = cuda.to_device(np.full(1, -1, np.int32))
    _write_late[1, 32](flag, 200_000)  # no stream: the legacy one; writes its flag after about 0.2 s
    run_launches([KernelLaunch("read", _read, (1,), (32,), (flag, seen))])
    # On a non-blocking stream of its own, the read would run beside the sleeping kernel and see 0.
    assert seen.copy_to_host()[0] == 1
    assert launch_stream().ptr == 0
    assert launch_stream_for(0) is launch_stream()  # the API's calls without a stream: the same object
