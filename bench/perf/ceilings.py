"""Section 1 of ``python -m bench perf``: the ceilings every other figure is read against.

The device-to-device copy bandwidth of a 1 GiB ``cuMemcpyDtoDAsync`` on the harness's stream
(bytes read + bytes written over the event time), and the CUDA-event interval with nothing
between the two events (the floor of every event figure; recorded, never subtracted).
"""

import sys

import numpy as np
from cuda.bindings import driver as cu
from numba import cuda

from bench.stats import summarize
from numba_softmax.launch.driver import check

COPY_CEILING_BYTES = 1 << 30
COPY_CEILING_SAMPLES = 30
COPY_CEILING_WARMUPS = 5
EVENT_FLOOR_SAMPLES = 30


def log(message):
    """A progress line of `bench perf` on stderr (the report itself goes to stdout and perf.md)."""
    print(f"[perf] {message}", file=sys.stderr, flush=True)


def logical_bytes(shape):
    """Softmax's logical traffic: the input read once and the output written once (float32)."""
    rows, cols = shape
    return 2 * rows * cols * 4


def bandwidth_tbs(nbytes, microseconds):
    """Bytes per microsecond -> TB/s (10^12 bytes per second)."""
    if microseconds <= 0:
        raise ValueError(f"bandwidth_tbs: time must be > 0, got {microseconds}")
    return nbytes / (microseconds * 1e-6) / 1e12


def device_ptr(array):
    return int(array.__cuda_array_interface__["data"][0])


def memcpy_submit(dst, src, nbytes):
    dst_ptr, src_ptr = cu.CUdeviceptr(dst), cu.CUdeviceptr(src)

    def submit(stream):
        check(cu.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, stream.handle))
    return submit


def measure_copy_ceiling(sampler):
    n = COPY_CEILING_BYTES // 4
    src = cuda.device_array(n, dtype=np.float32)
    dst = cuda.device_array(n, dtype=np.float32)
    try:
        submit = memcpy_submit(device_ptr(dst), device_ptr(src), COPY_CEILING_BYTES)
        for _ in range(COPY_CEILING_WARMUPS):
            submit(sampler.stream)
        sampler.stream.synchronize()
        iterations = sampler.iterations_for(sampler.host_window_us(submit))
        samples = [sampler.sample([submit], iterations) for _ in range(COPY_CEILING_SAMPLES)]
    finally:
        del src, dst
    event = summarize([s["event_us"] for s in samples])
    return {"bytes_per_copy": COPY_CEILING_BYTES, "bytes_moved": 2 * COPY_CEILING_BYTES,
            "warmups": COPY_CEILING_WARMUPS, "delay_iterations": iterations, "samples": samples,
            "event_us": event, "bandwidth_tbs": bandwidth_tbs(2 * COPY_CEILING_BYTES, event["median"]),
            "starved_samples": sum(s["starved"] for s in samples)}


def measure_event_floor(sampler):
    iterations = sampler.iterations_for(5.0)
    samples = [sampler.sample([], iterations) for _ in range(EVENT_FLOOR_SAMPLES)]
    return {"samples": samples, "event_us": summarize([s["event_us"] for s in samples])}
