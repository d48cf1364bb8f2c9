"""Shared by the diagnostic probes in tools/: batch timing between CUDA events, JSON output."""

import json
import os
import statistics

BATCH, REPS = 20, 15


def time_batches(stream, enqueue, batch=BATCH, reps=REPS):
    """Median / p10 / p90 device time per call of ``enqueue(stream, i)`` (i = call number in
    the batch), ``batch`` calls back to back between two CUDA events, ``reps`` batches."""
    from numba_softmax.launch.driver import Event
    start, end = Event(), Event()
    for i in range(4):
        enqueue(stream, i)
    stream.synchronize()
    samples = []
    for _ in range(reps):
        start.record(stream)
        for i in range(batch):
            enqueue(stream, i)
        end.record(stream)
        end.synchronize()
        samples.append(end.elapsed_us_since(start) / batch)
    samples.sort()
    return {"median_us": statistics.median(samples), "p10_us": samples[len(samples) // 10],
            "p90_us": samples[(9 * len(samples)) // 10]}


def single_timer():
    """A ``bench.perf`` GPU handle whose delay kernel is calibrated: ``time_single`` takes it."""
    from bench.perf import _Gpu
    gpu = _Gpu()
    gpu.calibrate_delay()
    return gpu


def time_single(gpu, enqueue, reps=REPS, host_window_us=40.0):
    """Median / p10 / p90 device time of ONE call of ``enqueue(stream, i)`` between two events,
    queued behind a delay kernel (``bench perf``'s single-invocation sample), on ``gpu.stream``."""
    iterations = gpu.iterations_for(host_window_us)
    for i in range(4):
        enqueue(gpu.stream, i)
    gpu.stream.synchronize()
    samples = sorted(gpu.sample([lambda st, i=i: enqueue(st, i)], iterations)["event_us"] for i in range(reps))
    return {"single_median_us": statistics.median(samples), "single_p10_us": samples[len(samples) // 10],
            "single_p90_us": samples[(9 * len(samples)) // 10]}


def write_results(out_dir, filename, results):
    """``results`` as indented JSON in ``out_dir/filename`` (nothing when ``out_dir`` is None)."""
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, filename), "w") as handle:
            json.dump(results, handle, indent=1)
