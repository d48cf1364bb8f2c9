"""What do the persistent schedulers' empty-work floors consist of? (GPU only.)

Experiment B's ``phased-floor`` and ``dag-floor`` (the same launches and grid barriers with no task)
are most of the persistent schedulers' time at 128 rows. This probe takes them apart, in one process,
each variant captured as a CUDA graph of one invocation, with the persistent schedulers' grid (one
128-thread block per worker, the case's worker count):

* ``numba empty``: an empty Numba kernel, launched cooperatively (and ``plain``: with ``cuLaunchKernel``);
* ``c++ empty``: the same empty kernel in CUDA C++ (``reference_cu/coop_floor.cu``, built here with nvcc);
* ``numba two barriers (the phased kernel's)``: an otherwise empty Numba kernel crossing the persistent
  kernel's grid barrier twice; ``numba two grid.sync``: the same with Numba's ``cuda.cg.this_grid().sync()``
  (:mod:`numba_softmax.kernels.diagnostics.grid_barriers`); ``c++ two grid.sync``: with cooperative groups'
  ``grid.sync()`` in CUDA C++;
* ``init_queue``: the DAG's queue reset alone; ``dag floor (no reset)``: the persistent kernel in its
  DAG floor mode alone (it returns at once), also ``plain`` (``cuLaunchKernel``); ``dag floor``: the
  reset, then that launch as its programmatic dependent (Experiment B's ``dag-floor``), and ``..., no PDL``
  the same launched after the reset ends; ``phased floor``: Experiment B's ``phased-floor``; ``dag`` and
  ``dag, no PDL``: the same two DAG launches doing the case's work;
* with the nvcc twins built (``python -m bench build-reference``): the twin's ``dag floor`` and
  ``phased floor``.

Three figures per variant, medians with p10 / p90 over the rounds (variants interleaved in each round):

* ``event``: CUDA events around one ``cuGraphLaunch`` on a GPU that has just run a few of them, as
  Experiment B's graph-mode ``event_us`` is taken (it includes the graph's submission latency);
* ``device``: the same launch queued behind a delay kernel (:class:`bench.timing.DelaySampler`): the
  GPU's time alone;
* ``in a graph of 20``: 20 invocations captured as one graph, per invocation (:func:`bench.timing.time_graph`).

    python -m bench probe floors [--cases balanced-128,balanced-2048] [--rounds 60] [--out DIR]

Diagnostic only: the figures that count come from ``python -m bench --experiment B``.
"""

import argparse
import os
import shutil
import subprocess
import tempfile

import numpy as np

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.reference_build import find_nvcc
from bench.timing import DelaySampler, _spread, time_graph
from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.kernels.diagnostics.grid_barriers import two_grid_barriers_launch, two_grid_syncs_launch
from numba_softmax.kernels.persistent import (MODE_DAG, MODE_DAG_FLOOR, MODE_PHASED_FLOOR, dag_launches,
                                              init_queue_launch, persistent_args, persistent_tiles)
from numba_softmax.kernels.tiles import TILE_THREADS, empty_tile_kernel
from numba_softmax.launch.driver import Event, Invocation, Stream, check, cu
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.peers.nvcc_twins import (ReferenceLaunch, ReferenceLibrary, reference_init_queue_launch,
                                            reference_persistent_args)
from numba_softmax.queue import DEFAULT_MAX_POLLS
from numba_softmax.tiled import TiledBuffers, build_layout, floor_launches, worker_plan

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "floors_probe.json"
CPP_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "reference_cu", "coop_floor.cu")
#: Launches run before each event sample, so that the GPU is as busy as in Experiment B's rounds.
WARM_LAUNCHES = 4


class CppLaunch:
    """One launch of a parameterless kernel of the C++ cubin (``enqueue(stream)``, as the launch layer's)."""

    def __init__(self, function, grid, block, cooperative):
        self.function, self.grid, self.block, self.cooperative = function, grid, block, cooperative

    def enqueue(self, stream):
        if self.cooperative:
            check(cu.cuLaunchCooperativeKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0,
                                               stream.handle, 0))
        else:
            check(cu.cuLaunchKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0, stream.handle, 0, 0))


def build_cpp(folder):
    """nvcc -O2 -arch=sm_90 -cubin of reference_cu/coop_floor.cu; (module, {name: CUfunction}) or None."""
    nvcc = find_nvcc()
    if nvcc is None:
        print("floors: no nvcc, so no C++ yardsticks", flush=True)
        return None
    cubin = os.path.join(folder, "coop_floor.cubin")
    command = [nvcc, "-O2", "-arch=sm_90", "-cubin", "-o", cubin, CPP_SOURCE]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        print(f"floors: {' '.join(command)} failed:\n{built.stderr}", flush=True)
        return None
    with open(cubin, "rb") as handle:
        image = handle.read()
    module = check(cu.cuModuleLoadData(image))
    functions = {name: check(cu.cuModuleGetFunction(module, name.encode()))
                 for name in ("coop_floor_empty", "coop_floor_two_grid_syncs")}
    return image, module, functions


def variants_for(buffers, workers, cpp, twins):
    """(label, invocation) for every variant of one case."""
    grid, block = (workers,), (TILE_THREADS,)

    def numba(label, kernel, args=(), cooperative=True):
        return label, Invocation.from_launches(label, [KernelLaunch(label, kernel, grid, block, args,
                                                                    cooperative=cooperative)])

    def alone(launch):
        return launch.name, Invocation.from_launches(launch.name, [launch])

    args = persistent_args(MODE_DAG_FLOOR, buffers)
    result = [
        numba("numba empty", empty_tile_kernel),
        numba("numba empty, plain launch", empty_tile_kernel, cooperative=False),
        alone(two_grid_syncs_launch(workers, "numba two grid.sync")),
        alone(two_grid_barriers_launch(workers, "numba two barriers (the phased kernel's)")),
        ("init_queue", Invocation.from_launches("init_queue", [init_queue_launch(buffers)])),
        numba("dag floor (no reset)", persistent_tiles, args),
        numba("dag floor (no reset), plain launch", persistent_tiles, args, cooperative=False),
        ("dag floor", Invocation.from_launches("dag floor", floor_launches("dag", buffers, workers))),
        ("dag floor, no PDL", Invocation.from_launches("dag floor, no PDL", [
            init_queue_launch(buffers),
            KernelLaunch("dag floor", persistent_tiles, grid, block, args, cooperative=True)])),
        ("phased floor", Invocation.from_launches("phased floor", floor_launches("phased", buffers, workers))),
        # The same launches doing the case's work: what programmatic launch is worth once the worker has tasks.
        ("dag", Invocation.from_launches("dag", dag_launches(buffers, workers))),
        ("dag, no PDL", Invocation.from_launches("dag, no PDL", [
            init_queue_launch(buffers),
            KernelLaunch("dag", persistent_tiles, grid, block, persistent_args(MODE_DAG, buffers), cooperative=True)])),
    ]
    if cpp is not None:
        functions = cpp[2]
        result += [
            ("c++ empty", Invocation("c++ empty", [CppLaunch(functions["coop_floor_empty"], workers,
                                                             TILE_THREADS, True).enqueue])),
            ("c++ two grid.sync", Invocation("c++ two grid.sync", [CppLaunch(
                functions["coop_floor_two_grid_syncs"], workers, TILE_THREADS, True).enqueue])),
        ]
    if twins is not None:
        def twin(mode, label, programmatic=False):
            return ReferenceLaunch(twins, "persistent_tiles", grid, block,
                                   reference_persistent_args(mode, buffers, DEFAULT_MAX_POLLS), label=label,
                                   programmatic=programmatic)
        result += [
            ("twin dag floor", Invocation("twin dag floor", [reference_init_queue_launch(twins, buffers).enqueue,
                                                             twin(MODE_DAG_FLOOR, "dag floor[nvcc]", True).enqueue])),
            ("twin phased floor", Invocation("twin phased floor",
                                             [twin(MODE_PHASED_FLOOR, "phased floor[nvcc]").enqueue])),
        ]
    return result


def probe_case(case, rounds, cpp, twins):
    layout = build_layout(case.row_lengths())
    values = np.random.default_rng(0).standard_normal(layout.total_elements, dtype=np.float32)
    sampler = DelaySampler()
    stream = sampler.stream
    buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
    stream.synchronize()
    workers = worker_plan(buffers).workers
    print(f"{case.name}: {workers} workers of {TILE_THREADS} threads", flush=True)
    variants = variants_for(buffers, workers, cpp, twins)
    graphs = {label: CapturedGraph(invocation, stream) for label, invocation in variants}
    sampler.calibrate_delay()
    iterations = max(sampler.iterations_for(sampler.host_window_us(g.launch)) for g in graphs.values())
    start, end = Event(), Event()
    event, device = {label: [] for label in graphs}, {label: [] for label in graphs}
    labels = list(graphs)
    for r in range(rounds):
        # Rotate the order every round: no variant always follows the same one.
        for label in labels[r % len(labels):] + labels[:r % len(labels)]:
            graph = graphs[label]
            for _ in range(WARM_LAUNCHES):
                graph.launch(stream)
            stream.synchronize()
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            event[label].append(end.elapsed_us_since(start))
            sample, _, _ = sampler.sample_unstarved([graph.launch], iterations)
            device[label].append(sample["event_us"])
    results = []
    for label, invocation in variants:
        stats = {"case": case.name, "what": label, "workers": workers,
                 **_spread(event[label], "event_"), **_spread(device[label], "device_"),
                 **time_graph(stream, lambda st, _i, inv=invocation: inv.enqueue(st), batch=20, reps=rounds)}
        results.append(stats)
        print(f"{case.name:>14} {label:<36} event {stats['event_median_us']:6.2f} [{stats['event_p10_us']:.2f}, "
              f"{stats['event_p90_us']:.2f}]  device {stats['device_median_us']:6.2f} "
              f"[{stats['device_p10_us']:.2f}, {stats['device_p90_us']:.2f}]  in a graph of 20 "
              f"{stats['graph_median_us']:6.2f}", flush=True)
    for graph in graphs.values():
        graph.close()
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe floors", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="balanced-128,balanced-2048")
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    by_name = {case.name: case for case in EXPERIMENT_B_CASES}
    unknown = [name for name in args.cases.split(",") if name not in by_name]
    if unknown:
        parser.error(f"unknown cases {unknown}; expected some of {sorted(by_name)}")
    if args.rounds < 10:
        parser.error(f"--rounds {args.rounds}: at least 10 (p10 and p90 need them)")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    Stream()  # the context, before the C++ module loads into it
    folder = tempfile.mkdtemp(prefix="floors_probe_")
    try:
        cpp = build_cpp(folder)
        twins = None
        try:
            twins = ReferenceLibrary()
        except FileNotFoundError as exc:
            print(f"floors: no nvcc twins ({exc})", flush=True)
        results = []
        for name in args.cases.split(","):
            results.extend(probe_case(by_name[name], args.rounds, cpp, twins))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    write_results(args.out, RESULTS_FILE, results)
