"""Where does the harness's host time per launch go? A probe for the launch goal of `bench perf` (GPU only).

Host enqueue time per launch of the empty kernel <<<1, 32>>> (``kernels.tiles.empty_tile_kernel``;
batches of 32, median over batches), through each layer of the launch path:

* ``raw``         cu.cuLaunchKernel(*args) with every argument prebuilt (the floor in Python);
* ``prepared``    PreparedLaunch.enqueue(stream) (what every timed variant calls per kernel);
* ``invocation``  Invocation.enqueue(stream) (one more Python loop over the steps);
* ``ctypes``      libcuda's cuLaunchKernel called through ctypes with prebuilt ctypes arguments
                  (is the cuda-python wrapper itself the cost?);
* ``sync_raw`` / ``sync_stream``: cuStreamSynchronize on an idle stream, raw and through Stream.

Then the same after ``import torch, triton`` (the perf tool's process has both loaded).

``submit_kinds``: host enqueue per launch of the same empty kernel <<<1, 32>>> by the driver call the
launch layer picks for it: ``cuLaunchKernel`` (plain), ``cuLaunchCooperativeKernel`` (cooperative, as the
phased scheduler's launch) and ``cuLaunchKernelEx`` (cooperative + programmatic, as the DAG's worker
launch), each through ``PreparedLaunch.enqueue``; then ``cuLaunchKernelEx`` with the same prebuilt
configuration called through ctypes on the configuration's own C struct (``CUlaunchConfig.getPtr()``):
what the cuda-python wrapper adds to the extended call.

``graph_params``: what a kernel's parameter block costs the GPU: a CUDA graph of three empty launches
taking six arrays in Numba's ABI, against the same with six ``uint64`` words
(:mod:`numba_softmax.kernels.diagnostics.param_blocks`), replayed 20 times between two events (median
over batches, per graph).

    python -m bench probe launch [--batches 200] [--out DIR]
"""

import argparse
import ctypes
import gc
import json
import statistics
import time

import numpy as np

from bench.probes import refuse_existing_results, require_gpu, write_results
from numba_softmax.kernels.diagnostics.param_blocks import BLOCK, GRID, LAUNCHES, PARAM_BYTES, param_block_launches
from numba_softmax.kernels.tiles import empty_tile_kernel
from numba_softmax.launch.driver import Event, Invocation, Stream, cu
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.launch_spec import KernelLaunch

BATCH = 32

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "launch_probe.json"
GRAPH_REPLAYS = 20


def graph_params(stream, batches):
    """Per-graph replay time of three empty launches with array parameters against word parameters."""
    result = {"param_bytes": PARAM_BYTES, "launches": LAUNCHES, "grid": GRID, "block": BLOCK}
    for name, launches in param_block_launches().items():
        invocation = Invocation.from_launches(name, launches)
        graph = CapturedGraph(invocation, stream)
        start, end = Event(), Event()
        values = []
        for _ in range(batches):
            start.record(stream)
            for _ in range(GRAPH_REPLAYS):
                graph.launch(stream)
            end.record(stream)
            end.synchronize()
            values.append(end.elapsed_us_since(start) / GRAPH_REPLAYS)
        result[f"{name}_us"] = statistics.median(values)
        result[f"{name}_p10_us"], result[f"{name}_p90_us"] = np.percentile(values, [10, 90]).tolist()
    return result


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


def libcuda_function(name):
    """A driver entry point called through ctypes (returning its CUresult as an int), past cuda-python's wrapper."""
    function = getattr(ctypes.CDLL("libcuda.so.1"), name)
    function.restype = ctypes.c_int
    return function


def measure(stream, invocation, batches):
    prepared = invocation.launches[0]
    args = (prepared.kernel.function, 1, 1, 1, 32, 1, 1, 0, stream.handle, prepared._params, 0)
    launch = cu.cuLaunchKernel
    handle = stream.handle
    sync = cu.cuStreamSynchronize
    c_launch = libcuda_function("cuLaunchKernel")
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


def submit_kinds(stream, batches):
    """Host enqueue per launch of one empty kernel by each driver call the launch layer uses."""
    kinds = {
        "plain_cuLaunchKernel": KernelLaunch("plain", empty_tile_kernel, (1,), (32,), ()),
        "cooperative_cuLaunchCooperativeKernel": KernelLaunch("cooperative", empty_tile_kernel, (1,), (32,), (),
                                                              cooperative=True),
        "cooperative_programmatic_cuLaunchKernelEx": KernelLaunch("extended", empty_tile_kernel, (1,), (32,), (),
                                                                  cooperative=True, programmatic=True),
    }
    prepared = {}
    for name, launch in kinds.items():
        invocation = Invocation.from_launches(name, [launch])
        for _ in range(3):
            invocation.enqueue(stream)
        prepared[name] = invocation.launches[0]
    stream.synchronize()
    extended = prepared["cooperative_programmatic_cuLaunchKernelEx"]
    if extended._submit is not cu.cuLaunchKernelEx:
        raise RuntimeError("the programmatic launch is not submitted through cuLaunchKernelEx")
    config, function, params, _ = extended._arguments
    c_launch_ex = libcuda_function("cuLaunchKernelEx")
    c_args = (ctypes.c_void_p(int(config.getPtr())), ctypes.c_void_p(int(function)), ctypes.c_void_p(params),
              ctypes.c_void_p(0))
    if c_launch_ex(*c_args) != 0:
        raise RuntimeError("cuLaunchKernelEx through ctypes failed")
    stream.synchronize()
    gc.collect()
    gc.disable()
    try:
        result = {name: per_launch_us(lambda p=p: p.enqueue(stream), stream, batches) for name, p in prepared.items()}
        result["cooperative_programmatic_cuLaunchKernelEx_ctypes"] = per_launch_us(
            lambda: c_launch_ex(*c_args), stream, batches)
        return result
    finally:
        gc.enable()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe launch", description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    stream = Stream()
    invocation = Invocation.from_launches("empty", [KernelLaunch("empty", empty_tile_kernel, (1,), (32,), ())])
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
    results["submit_kinds"] = submit_kinds(stream, args.batches)
    results["graph_params"] = graph_params(stream, args.batches)
    for name, values in results.items():
        print(name, json.dumps(values if isinstance(values, str) else
                               {k: round(v, 3) if isinstance(v, float) else v for k, v in values.items()}))
    write_results(args.out, RESULTS_FILE, results)

