"""bench.timing's graph timing on a GPU: the captured batch runs every call it was given, once per replay."""

import numpy as np
from numba import cuda

from bench.timing import time_batches, time_graph
from numba_softmax.launch.driver import Invocation, Stream
from numba_softmax.launch_spec import KernelLaunch


@cuda.jit
def _count_call(counters, k):
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(counters, k, 1)


def test_graph_timing_replays_each_captured_call_once_per_replay():
    stream = Stream()
    batch, reps = 6, 5
    counters = cuda.to_device(np.zeros(batch, np.int64))
    calls = [Invocation.from_launches(f"count {k}", [KernelLaunch("count", _count_call, (1,), (32,), (counters, k))])
             for k in range(batch)]
    stats = time_graph(stream, lambda st, i: calls[i % batch].enqueue(st), batch=batch, reps=reps)
    stream.synchronize()
    # Call i of the batch increments counter i: one run at capture-instantiation, one warm replay, reps timed.
    assert counters.copy_to_host().tolist() == [reps + 2] * batch
    assert 0 < stats["graph_p10_us"] <= stats["graph_median_us"] <= stats["graph_p90_us"]
    # Without the host launch path between calls, a graph call of a tiny kernel is no slower than a batched one.
    batched = time_batches(stream, lambda st, i: calls[i % batch].enqueue(st), batch=batch, reps=reps)
    assert stats["graph_median_us"] < 3 * batched["median_us"]
