"""Which kernel holds a Numba / nvcc gap: each kernel of the stages path (Experiment A shapes) and of
the separate tile path (Experiment B cases), Numba's launch and its nvcc twin's, timed alone in the
same process.

    python -m bench probe twins [--shapes 32x1024,4096x128,4096x1024] [--cases balanced-128,balanced-512]
                                [--reference-build DIR] [--out DIR]

The experiments' ``--twins`` tables give the Numba / nvcc ratio of a whole invocation (four stage
kernels, or three tile kernels); this probe splits it per kernel. Per kernel and side: batched (the
launch back to back, a throughput) and single (one launch behind a delay kernel, the latency a graph
round sees), median and p10 / p90, and the ratio of the medians. Experiment A shapes rotate over
enough input sets to exceed L2, as the fused probe does. Before timing, each side's invocation runs
once and the twin's outputs and intermediates are compared bit for bit with Numba's (a probe that
times a twin computing something else would be meaningless).
"""

import argparse

import numpy as np
from numba import cuda

from bench.probes import write_results
from bench.timing import DelaySampler, time_batches, time_single
from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.kernels.row_stages import stages_launches
from numba_softmax.launch.driver import Invocation, Stream
from numba_softmax.peers.nvcc_twins import (ReferenceLibrary, reference_invocation, reference_separate_launches,
                                            reference_stages_launches)
from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches


def _timed(stream, sampler, invocations):
    def enqueue(st, i):
        invocations[i % len(invocations)].enqueue(st)
    stats = time_batches(stream, enqueue)
    stats.update(time_single(sampler, enqueue))
    return stats


def _compare_per_kernel(label, numba_sets, nvcc_sets, stream, sampler, results):
    """``numba_sets`` / ``nvcc_sets``: per input set, the launch list (same kernels, same order)."""
    for k, launch in enumerate(numba_sets[0]):
        name = launch.name
        numba = _timed(stream, sampler, [Invocation.from_launches(name, [s[k]]) for s in numba_sets])
        nvcc = _timed(stream, sampler, [reference_invocation(name, [s[k]]) for s in nvcc_sets])
        row = {"case": label, "kernel": name, "numba": numba, "nvcc": nvcc,
               "batched_ratio": numba["median_us"] / nvcc["median_us"],
               "single_ratio": numba["single_median_us"] / nvcc["single_median_us"]}
        results.append(row)
        print(f"{label:>14} {name:<22} batched {numba['median_us']:8.2f} / {nvcc['median_us']:8.2f} us "
              f"= {row['batched_ratio']:.3f}   single {numba['single_median_us']:8.2f} / "
              f"{nvcc['single_median_us']:8.2f} us = {row['single_ratio']:.3f}", flush=True)


def _same(arrays, reference):
    return all(np.array_equal(a.copy_to_host(), b) for a, b in zip(arrays, reference, strict=True))


def probe_stages(text, library, stream, sampler, results):
    rows, cols = (int(v) for v in text.split("x"))
    nbytes = rows * cols * 4
    sets = max(2, min(16, int(np.ceil(3 * cuda.get_current_device().L2_CACHE_SIZE / (2 * nbytes)))))
    rng = np.random.default_rng(0)
    buffers = []
    for _ in range(sets):
        x = cuda.to_device(rng.standard_normal((rows, cols), dtype=np.float32))
        buffers.append((x, cuda.device_array((rows, cols), np.float32), cuda.device_array(rows, np.float32),
                        cuda.device_array((rows, cols), np.float32), cuda.device_array(rows, np.float32)))
    numba_sets = [stages_launches(*b) for b in buffers]
    nvcc_sets = [reference_stages_launches(library, *b) for b in buffers]
    outputs = buffers[0][1:]
    Invocation.from_launches("stages", numba_sets[0]).enqueue(stream)
    stream.synchronize()
    reference = [a.copy_to_host() for a in outputs]
    for a in outputs:
        a.copy_to_device(np.full(a.shape, np.nan, dtype=np.float32))  # an unwritten element must fail
    reference_invocation("stages-nvcc", nvcc_sets[0]).enqueue(stream)
    stream.synchronize()
    same = _same(outputs, reference)
    results.append({"case": text, "what": "bitwise: stages-nvcc == stages", "equal": bool(same)})
    print(f"{text:>14} stages-nvcc == stages bitwise (output and intermediates): {same}", flush=True)
    _compare_per_kernel(text, numba_sets, nvcc_sets, stream, sampler, results)


def probe_separate(name, library, stream, sampler, results):
    case = next(c for c in EXPERIMENT_B_CASES if c.name == name)
    layout = build_layout(case.row_lengths())
    values = np.random.default_rng(0).standard_normal(layout.total_elements, dtype=np.float32)
    buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
    stream.synchronize()
    numba = tiled_launches("separate", buffers)
    nvcc = reference_separate_launches(library, buffers)
    outputs = [getattr(buffers, field) for field in ("out", "tile_max", "tile_sum", "row_max", "row_sum")]
    Invocation.from_launches("separate", numba).enqueue(stream)
    stream.synchronize()
    reference = [a.copy_to_host() for a in outputs]
    for a in outputs:
        a.copy_to_device(np.full(a.shape, np.nan, dtype=np.float32))  # an unwritten element must fail
    reference_invocation("separate-nvcc", nvcc).enqueue(stream)
    stream.synchronize()
    same = _same(outputs, reference)
    results.append({"case": name, "what": "bitwise: separate-nvcc == separate", "equal": bool(same)})
    print(f"{name:>14} separate-nvcc == separate bitwise (output and intermediates): {same}", flush=True)
    _compare_per_kernel(name, [numba], [nvcc], stream, sampler, results)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe twins", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="32x1024,4096x128,4096x1024",
                        help="Experiment A shapes (ROWSxCOLS, comma-separated) for the stage kernels; '' for none")
    parser.add_argument("--cases", default="balanced-128,balanced-512",
                        help="Experiment B cases for the separate tile kernels; '' for none")
    parser.add_argument("--reference-build", default="/tmp/probe_reference_build",
                        help="nvcc cubins dir (built here when absent)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    known = [c.name for c in EXPERIMENT_B_CASES]
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if c not in known:
            parser.error(f"--cases: unknown case {c!r}; known: {', '.join(known)}")
    shapes = [s for s in args.shapes.split(",") if s]
    for s in shapes:
        parts = s.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            parser.error(f"--shapes: {s!r} is not ROWSxCOLS with positive integers")
    from bench import reference_build
    reference_build.ensure_built(args.reference_build)
    library = ReferenceLibrary(args.reference_build)
    stream = Stream()
    sampler = DelaySampler()
    sampler.calibrate_delay()
    results = []
    for text in shapes:
        probe_stages(text, library, stream, sampler, results)
    for name in cases:
        probe_separate(name, library, stream, sampler, results)
    write_results(args.out, "twins_probe.json", results)
    return 0 if all(r.get("equal", True) for r in results) else 1
