"""Where does the harness's host time per launch go? A probe for the launch goal of `bench perf` (GPU only).

Host enqueue time per launch of an empty kernel <<<1, 32>>> (batches of 32, median over
batches), through each layer of the launch path:

* ``raw``         cu.cuLaunchKernel(*args) with every argument prebuilt (the floor in Python);
* ``prepared``    PreparedLaunch.enqueue(stream) (what every timed variant calls per kernel);
* ``invocation``  Invocation.enqueue(stream) (one more Python loop over the steps);
* ``ctypes``      libcuda's cuLaunchKernel called through ctypes with prebuilt ctypes arguments
                  (is the cuda-python wrapper itself the cost?);
* ``sync_raw`` / ``sync_stream``: cuStreamSynchronize on an idle stream, raw and through Stream.

Then the same after ``import torch, triton`` (the perf tool's process has both loaded).

    python -m bench probe launch [--batches 200] [--out DIR]
"""

import argparse
import ctypes
import gc
import json
import statistics
import time

from numba import cuda

from bench.probes import write_results
from numba_softmax.launch.driver import Invocation, Stream, cu
from numba_softmax.launch_spec import KernelLaunch

BATCH = 32


@cuda.jit
def empty_kernel():
    pass


def per_launch_us(call, stream, batches):
    values = []
    for _ in range(batches):
        stream.synchronize()
        t0 = time.perf_counter_ns()
        for _ in range(BATCH):
            call()
        values.append((time.perf_counter_ns() - t0) / 1e3 / BATCH)
    stream.synchronize()
    return statistics.median(values)


def per_call_us(call, batches):
    values = []
    for _ in range(batches):
        t0 = time.perf_counter_ns()
        call()
        values.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(values)


def measure(stream, invocation, batches):
    prepared = invocation.launches[0]
    args = (prepared.kernel.function, 1, 1, 1, 32, 1, 1, 0, stream.handle, prepared._params, 0)
    launch = cu.cuLaunchKernel
    handle = stream.handle
    sync = cu.cuStreamSynchronize
    libcuda = ctypes.CDLL("libcuda.so.1")
    c_launch = libcuda.cuLaunchKernel
    c_launch.restype = ctypes.c_int
    one, threads, zero = ctypes.c_uint(1), ctypes.c_uint(32), ctypes.c_uint(0)
    c_args = (ctypes.c_void_p(int(prepared.kernel.function)), one, one, one, threads, one, one, zero,
              ctypes.c_void_p(int(stream.handle)), ctypes.c_void_p(prepared._params), ctypes.c_void_p(0))
    gc.collect()
    gc.disable()
    try:
        return {
            "ctypes": per_launch_us(lambda: c_launch(*c_args), stream, batches),
            "raw": per_launch_us(lambda: launch(*args), stream, batches),
            "prepared": per_launch_us(lambda: prepared.enqueue(stream), stream, batches),
            "invocation": per_launch_us(lambda: invocation.enqueue(stream), stream, batches),
            "sync_raw": per_call_us(lambda: sync(handle), batches),
            "sync_stream": per_call_us(stream.synchronize, batches),
        }
    finally:
        gc.enable()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe launch", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    stream = Stream()
    invocation = Invocation.from_launches("empty", [KernelLaunch("empty", empty_kernel, (1,), (32,), ())])
    for _ in range(3):
        invocation.enqueue(stream)
    stream.synchronize()
    results = {"plain": measure(stream, invocation, args.batches)}
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
        results["after_torch_triton_import"] = measure(stream, invocation, args.batches)
    except ImportError as exc:
        results["after_torch_triton_import"] = f"skipped: {exc}"
    for name, values in results.items():
        print(name, json.dumps(values if isinstance(values, str) else {k: round(v, 3) for k, v in values.items()}))
    write_results(args.out, "launch_probe.json", results)

