"""What do the persistent schedulers' empty-work floors consist of? (GPU only.)

Experiment B's ``phased-floor`` and ``dag-floor`` (the same launches and grid barriers with no task)
are most of the persistent schedulers' time at 128 rows. This probe takes them apart, in one process,
each variant captured as a CUDA graph of one invocation, with the persistent schedulers' grid (one
128-thread block per worker, the case's worker count):

* ``numba empty``: an empty Numba kernel, launched cooperatively (and ``plain``: with ``cuLaunchKernel``);
* ``numba empty, persistent args``: an empty Numba kernel taking the persistent kernel's arguments
  (its parameter block, 280 bytes), cooperative;
* ``numba empty, shared``: an empty Numba kernel with a static shared array, cooperative;
* ``c++ empty``: the same empty kernel in CUDA C++ (``reference_cu/coop_floor.cu``, built here with nvcc);
* ``numba two barriers: DESIGN``: an otherwise empty Numba kernel crossing a grid barrier twice, block
  barriers around it: the persistent kernel's own (:func:`numba_softmax.kernels.persistent.barrier.grid_barrier`)
  and the other designs measured (:data:`BARRIER_DESIGNS`); ``numba two grid.sync``: the same with
  Numba's ``cuda.cg.this_grid().sync()``;
  ``c++ two grid.sync``: with cooperative groups' ``grid.sync()`` in CUDA C++;
* ``init_queue``: the DAG's queue reset alone; ``dag floor (no reset)``: the persistent kernel in its
  DAG floor mode alone (it returns at once), also ``plain`` (``cuLaunchKernel``); ``dag floor``: the
  reset, then that launch as its programmatic dependent (Experiment B's ``dag-floor``), and ``..., no PDL``
  the same launched after the reset ends; ``phased floor``: Experiment B's ``phased-floor``; ``dag`` and
  ``dag, no PDL``: the same two DAG launches doing the case's work;
* ``reset + waiting empty worker``: the DAG floor's pair with an empty worker that waits for the reset
  (``griddepcontrol.wait``); ``..., PDL``: the same with programmatic dependent launch (the reset lets its
  dependent start launching at once, ``griddepcontrol.launch_dependents``, as Experiment B's DAG does);
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
from numba import cuda, float32, int32, int64, uint32

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.timing import DelaySampler, _spread, time_graph
from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.kernels.ordering import (atomic_add_release_gpu, fence_acq_rel_gpu, load_acquire_gpu,
                                            load_relaxed_gpu, wait_for_prerequisite_grid)
from numba_softmax.kernels.persistent import (MODE_DAG, MODE_DAG_FLOOR, dag_launches, init_queue_launch,
                                              persistent_args, persistent_tiles)
from numba_softmax.kernels.persistent.barrier import flip_add, flipped, grid_barrier
from numba_softmax.kernels.tiles import TILE_THREADS
from numba_softmax.launch.driver import Event, Invocation, Stream, check
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import udiv
from numba_softmax.queue import COUNTER_LINE_WORDS, DEFAULT_MAX_POLLS, GRID_BARRIER
from numba_softmax.tiled import TiledBuffers, build_layout, floor_launches, worker_plan

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "floors_probe.json"
CPP_SOURCE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "reference_cu", "coop_floor.cu")
#: Launches run before each event sample, so that the GPU is as busy as in Experiment B's rounds.
WARM_LAUNCHES = 4


@cuda.jit
def numba_empty_kernel():
    pass


@cuda.jit
def numba_empty_args_kernel(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
                            tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
                            paired_entries, max_polls, trace):
    pass


@cuda.jit
def numba_empty_shared_kernel(out):
    scratch = cuda.shared.array(16, float32)
    scratch[cuda.threadIdx.x % 16] = float32(1.0)
    cuda.syncthreads()
    if cuda.threadIdx.x == 0 and scratch[3] < float32(0.0):  # never: keeps the array
        out[0] = scratch[5]


@cuda.jit
def numba_two_grid_syncs_kernel():
    grid = cuda.cg.this_grid()
    grid.sync()
    grid.sync()


# ---- grid barrier designs, each crossed twice by an otherwise empty kernel ----------------------
# Thread 0 of every block, between block barriers; every word resets itself (flip_add). The words live
# in the probe's own zeroed array (GRID_BARRIER as in the kernel's counters, then the group words of the
# grouped designs, one 128-byte line each); each design leaves them as it found them.

#: The grouped designs (the persistent kernel's barriers before the flat one): up to GROUPS group words of
#: at least GROUP_MIN workers, on the lines after GRID_BARRIER's.
GROUPS = 64
GROUP_MIN = 32
GROUP_FIRST = (GRID_BARRIER // COUNTER_LINE_WORDS + 1) * COUNTER_LINE_WORDS
BARRIER_ARRAY_WORDS = GROUP_FIRST + GROUPS * COUNTER_LINE_WORDS


@cuda.jit(device=True)
def wait_for_flip(words, before, max_polls, acquire_poll):
    """Poll the top word until its top bit flips against ``before``, with acquire loads (``acquire_poll``)
    or relaxed loads and an acquire fence after them. Returns the word seen flipped (``before`` if it
    waited more than ``max_polls`` polls)."""
    polls = int32(0)
    while True:
        now = load_acquire_gpu(words, GRID_BARRIER) if acquire_poll else load_relaxed_gpu(words, GRID_BARRIER)
        if flipped(before, now):
            break
        polls = int32(polls + 1)
        if polls > max_polls:
            return before
    if not acquire_poll:
        fence_acq_rel_gpu()
    return now


@cuda.jit(device=True)
def flat_barrier_at_once(words, workers, max_polls, acquire_poll):
    """The kernel's flat barrier without its wait for the add's result: Numba issues the first poll right
    after the add, before the add returns."""
    old = atomic_add_release_gpu(words, GRID_BARRIER, flip_add(cuda.blockIdx.x == 0, workers))
    wait_for_flip(words, old, max_polls, acquire_poll)


@cuda.jit(device=True)
def grouped_barrier(words, workers, max_polls, before, acquire_poll):
    """The grouped barrier: a worker arrives on its group's word; the arrival that completes a group
    acquires the group (a fence) and arrives on the top word; every worker polls the top word until it
    flips against ``before``. Returns the top word seen flipped."""
    b = int32(cuda.blockIdx.x)
    group_size = max(int32(GROUP_MIN), int32(udiv(uint32(workers + GROUPS - 1), uint32(GROUPS))))
    groups = int32(udiv(uint32(workers + group_size - 1), uint32(group_size)))
    g = int32(udiv(uint32(b), uint32(group_size)))
    in_group = min(group_size, int32(workers - int32(g * group_size)))
    word = uint32(GROUP_FIRST + g * COUNTER_LINE_WORDS)
    add = flip_add(b == int32(g * group_size), in_group)
    old = atomic_add_release_gpu(words, word, add)
    if flipped(old, int32(int64(old) + int64(add))):
        fence_acq_rel_gpu()
        atomic_add_release_gpu(words, GRID_BARRIER, flip_add(g == 0, groups))
    return wait_for_flip(words, before, max_polls, acquire_poll)


@cuda.jit
def kernel_barrier_kernel(words, max_polls):
    """The persistent kernel's grid barrier (:func:`grid_barrier`), crossed twice."""
    for which in range(2):
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            grid_barrier(words, int32(cuda.gridDim.x), max_polls, int32(which))
        cuda.syncthreads()


def make_flat_at_once_kernel(acquire_poll):
    @cuda.jit
    def flat_two_barriers_kernel(words, max_polls):
        for _ in range(2):
            cuda.syncthreads()
            if cuda.threadIdx.x == 0:
                flat_barrier_at_once(words, int32(cuda.gridDim.x), max_polls, acquire_poll)
            cuda.syncthreads()
    return flat_two_barriers_kernel


@cuda.jit
def grouped_carried_kernel(words, max_polls):
    """The grouped barrier with the top word read once at the start, then carried; acquire polls."""
    top = int32(0)
    if cuda.threadIdx.x == 0:
        top = load_relaxed_gpu(words, GRID_BARRIER)
    for _ in range(2):
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            top = grouped_barrier(words, int32(cuda.gridDim.x), max_polls, top, True)
        cuda.syncthreads()


@cuda.jit
def grouped_load_in_kernel(words, max_polls):
    """The grouped barrier with the top word loaded on the way in; relaxed polls and a fence."""
    for _ in range(2):
        cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            grouped_barrier(words, int32(cuda.gridDim.x), max_polls, load_relaxed_gpu(words, GRID_BARRIER), False)
        cuda.syncthreads()


BARRIER_DESIGNS = {
    "the kernel's (flat, first poll after the add returns)": kernel_barrier_kernel,
    "flat, first poll at once": make_flat_at_once_kernel(True),
    "flat, first poll at once, relaxed polls + fence": make_flat_at_once_kernel(False),
    "grouped, top word carried, acquire polls": grouped_carried_kernel,
    "grouped, top word loaded in, relaxed polls + fence": grouped_load_in_kernel,
}


# ---- programmatic dependent launch (PDL): the cooperative launch staged while the reset runs --------

@cuda.jit
def pdl_empty_kernel(counters):
    """An empty worker that waits for the grid it depends on (the reset) before anything it would read."""
    wait_for_prerequisite_grid()
    if cuda.threadIdx.x == 0 and counters[0] == 12345:  # never (the reset leaves 0): keeps the wait live
        counters[1] = 1


def pdl_variants(buffers, workers):
    """The DAG floor's two launches (the reset, which lets its dependent launch at once, then an empty
    cooperative worker that waits for it), without and with programmatic dependent launch."""
    def pair(label, programmatic):
        worker = KernelLaunch("pdl_empty_kernel", pdl_empty_kernel, (workers,), (TILE_THREADS,),
                              (buffers.counters,), cooperative=True, programmatic=programmatic)
        return label, Invocation.from_launches(label, [init_queue_launch(buffers), worker])
    return [pair("reset + waiting empty worker", False), pair("reset + waiting empty worker, PDL", True)]


class CppLaunch:
    """One launch of a parameterless kernel of the C++ cubin (``enqueue(stream)``, as the launch layer's)."""

    def __init__(self, function, grid, block, cooperative):
        from cuda.bindings import driver as cu
        self.function, self.grid, self.block, self.cooperative, self._cu = function, grid, block, cooperative, cu

    def enqueue(self, stream):
        cu = self._cu
        if self.cooperative:
            check(cu.cuLaunchCooperativeKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0,
                                               stream.handle, 0))
        else:
            check(cu.cuLaunchKernel(self.function, self.grid, 1, 1, self.block, 1, 1, 0, stream.handle, 0, 0))


def build_cpp(folder):
    """nvcc -O2 -arch=sm_90 -cubin of reference_cu/coop_floor.cu; (module, {name: CUfunction}) or None."""
    from cuda.bindings import driver as cu

    from bench.reference_build import find_nvcc
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

    args = persistent_args(MODE_DAG_FLOOR, buffers)
    words = cuda.to_device(np.zeros(BARRIER_ARRAY_WORDS, dtype=np.int32))
    result = [
        numba("numba empty", numba_empty_kernel),
        numba("numba empty, plain launch", numba_empty_kernel, cooperative=False),
        numba("numba empty, persistent args", numba_empty_args_kernel, args),
        numba("numba empty, shared", numba_empty_shared_kernel, (buffers.out,)),
        numba("numba two grid.sync", numba_two_grid_syncs_kernel),
        *[numba(f"numba two barriers: {design}", kernel, (words, int32(DEFAULT_MAX_POLLS)))
          for design, kernel in BARRIER_DESIGNS.items()],
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
    result += pdl_variants(buffers, workers)
    if cpp is not None:
        functions = cpp[2]
        result += [
            ("c++ empty", Invocation("c++ empty", [CppLaunch(functions["coop_floor_empty"], workers,
                                                             TILE_THREADS, True).enqueue])),
            ("c++ two grid.sync", Invocation("c++ two grid.sync", [CppLaunch(
                functions["coop_floor_two_grid_syncs"], workers, TILE_THREADS, True).enqueue])),
        ]
    if twins is not None:
        from numba_softmax.kernels.persistent import MODE_PHASED_FLOOR
        from numba_softmax.peers.nvcc_twins import (ReferenceLaunch, reference_init_queue_launch,
                                                    reference_persistent_args)

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
            from numba_softmax.peers.nvcc_twins import ReferenceLibrary
            twins = ReferenceLibrary()
        except FileNotFoundError as exc:
            print(f"floors: no nvcc twins ({exc})", flush=True)
        results = []
        for name in args.cases.split(","):
            results.extend(probe_case(by_name[name], args.rounds, cpp, twins))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    write_results(args.out, RESULTS_FILE, results)
