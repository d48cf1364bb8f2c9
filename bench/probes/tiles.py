"""Where does Experiment B's time go in the timed builds? A per-launch probe (GPU only).

The task traces say where time goes in the TRACE builds (no prefetch, extra registers);
this probe times the performance builds. Per case (default balanced-2048, ragged-2048):

* each launch of the separate scheduler alone (tile summary A, row combine B, tile
  normalize C), launched BATCH times back to back between two CUDA events;
* each scheduler's whole invocation the same way (separate, phased, dag), and its empty-work
  floor (the same launches and barriers with no tasks);
* a device copy x -> y of the same size with ``cuMemcpyDtoDAsync`` (C's bytes), the
  yardstick for the C kernel;
* with ``--register-caps 48,40``: phased and dag again with the persistent kernel compiled
  at each ptxas register cap (more workers per SM, spills), and their bits;
* with ``--compare-tree DIR``: all three schedulers again with the kernels of another tree's
  ``numba_softmax`` package (``DIR/numba_softmax``, e.g. ``git archive <commit> numba_softmax |
  tar -x -C DIR``: a baseline, or a candidate), so a kernel change and its baseline are timed
  in ONE process on one machine (machines differ by a few percent), and their bits.

Medians over REPS batches, per launch (or invocation), with p10 / p90.

    python -m bench probe tiles [--cases balanced-2048,ragged-2048] [--register-caps 48,40]
                                [--compare-tree DIR] [--out DIR]

Diagnostic only: the figures that count for the goals come from ``python -m bench``
(Experiment B) and ``python -m bench perf``. The probe also checks that the three
schedulers still agree bit for bit on the case it timed.
"""

import argparse

import numpy as np
from numba import cuda

from bench.probes import other_tree_module, refuse_existing_results, require_gpu, write_results
from bench.timing import time_batches
from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.launch.driver import Invocation, Stream, check
from numba_softmax.kernels.persistent.diagnostics import completion_wait_kernel, register_capped_kernel
from numba_softmax.tiled import (SCHEDULERS, TiledBuffers, build_layout, floor_launches, tiled_launches,
                                 worker_plan)

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "tiles_probe.json"


def enqueue_of(invocation):
    return lambda stream, _: invocation.enqueue(stream)


def memcpy_step(dst, src, nbytes):
    from cuda.bindings import driver as cu

    def step(stream, _):
        check(cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream.handle))
    return step


def same_bits(arrays, reference):
    """(out, intermediates) pairs bitwise equal."""
    (out, mid), (reference_out, reference_mid) = arrays, reference
    return np.array_equal(out, reference_out) and all(np.array_equal(mid[k], reference_mid[k]) for k in reference_mid)


def probe_case(case, stream, register_caps=(), other_tree=None):
    layout = build_layout(case.row_lengths())
    rng = np.random.default_rng(0)
    values = rng.standard_normal(layout.total_elements, dtype=np.float32)
    buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
    stream.synchronize()
    results = []

    def record(what, stats):
        stats.update(case=case.name, what=what)
        results.append(stats)
        print(f"{case.name:>14} {what:<28} {stats['median_us']:8.2f} us [{stats['p10_us']:.2f}, "
              f"{stats['p90_us']:.2f}]", flush=True)

    for launch in tiled_launches("separate", buffers):
        alone = Invocation.from_launches(launch.name, [launch])
        record(f"separate: {launch.name}", time_batches(stream, enqueue_of(alone)))
    outputs = {}
    for scheduler in SCHEDULERS:
        invocation = Invocation.from_launches(scheduler, tiled_launches(scheduler, buffers))
        record(f"invocation: {scheduler}", time_batches(stream, enqueue_of(invocation)))
        invocation.enqueue(stream)
        stream.synchronize()
        outputs[scheduler] = (buffers.out.copy_to_host(), buffers.intermediates())
    for scheduler in SCHEDULERS:
        invocation = Invocation.from_launches(f"{scheduler}-floor", floor_launches(scheduler, buffers))
        record(f"empty-work floor: {scheduler}", time_batches(stream, enqueue_of(invocation)))
    nbytes = layout.total_elements * 4
    x, y = int(buffers.values.device_ctypes_pointer.value), int(buffers.out.device_ctypes_pointer.value)
    record("copy x -> y (C's bytes)", time_batches(stream, memcpy_step(y, x, nbytes)))
    for scheduler, arrays in outputs.items():
        same = same_bits(arrays, outputs["separate"])
        results.append({"case": case.name, "what": f"bitwise: {scheduler} == separate", "equal": bool(same)})
        print(f"{case.name:>14} {scheduler} == separate bitwise (output and intermediates): {same}")
    plan = worker_plan(buffers)
    results.append({"case": case.name, "what": "workers", **plan.record()})

    def time_and_compare(label, launches, invocation_of=Invocation.from_launches):
        """Time one invocation of ``launches`` (made by ``invocation_of``: this tree's launch layer unless
        given), then run it once more and compare its bits with separate's."""
        invocation = invocation_of(label, launches)
        record(f"invocation: {label}", time_batches(stream, enqueue_of(invocation)))
        invocation.enqueue(stream)
        stream.synchronize()
        same = same_bits((buffers.out.copy_to_host(), buffers.intermediates()), outputs["separate"])
        results.append({"case": case.name, "what": f"bitwise: {label} == separate", "equal": bool(same)})
        print(f"{case.name:>14} {label} == separate bitwise: {same}", flush=True)

    variants = [(f"r{cap}", f"max_registers={cap}", register_capped_kernel(cap)) for cap in register_caps]
    variants.append(("wait", "DAG workers wait for c_done before leaving", completion_wait_kernel()))
    for tag, label, kernel in variants:
        plan = worker_plan(buffers, kernel=kernel)
        results.append({"case": case.name, "what": f"workers, {label}", **plan.record()})
        print(f"{case.name:>14} {label}: {plan.workers} workers", flush=True)
        for scheduler in ("phased", "dag"):
            time_and_compare(f"{scheduler} {tag}", tiled_launches(scheduler, buffers, plan.workers, kernel=kernel))
    if other_tree:
        # The other tree's kernels with its OWN launch lists, worker count and launch layer (its block
        # shape, launch rules and kernel entries may differ from this tree's); the buffers are shared.
        from numba_softmax.launch.driver import device_sm_count
        other_persistent = other_tree_module(other_tree, "kernels.persistent")
        other_tiles = other_tree_module(other_tree, "kernels.tiles")
        other_driver = other_tree_module(other_tree, "launch.driver")
        other_queue = other_tree_module(other_tree, "queue")
        if other_queue.COUNTER_SLOTS != buffers.counters.shape[0]:
            # The other tree lays its counters out differently (its grid barrier's words): it gets an array
            # of its own length, as its reset leaves it, so that no kernel touches a word past the end.
            buffers.counters = cuda.to_device(np.array(other_queue.COUNTER_INITIAL, dtype=np.int32),
                                              stream=stream.numba)
        if "fifo_ready" in other_tree_module(other_tree, "tiled.buffers").TiledBuffers.__dataclass_fields__:
            # An older tree whose FIFO slots had a separate ready-flag array: it gets one of its own (its
            # reset writes it before every DAG invocation).
            buffers.fifo_ready = cuda.device_array(layout.fifo_capacity, dtype=np.int32)
        compiled = other_driver.compiled
        threads = getattr(other_persistent, "WORKER_THREADS", other_tiles.TILE_THREADS)
        occupancy = compiled(other_persistent.persistent_tiles, other_persistent.persistent_args(0, buffers))
        workers = min(int(occupancy.active_blocks_per_sm(threads, 0)) * int(device_sm_count()), layout.n_tiles)
        results.append({"case": case.name, "what": "workers, other tree", "workers": workers})
        print(f"{case.name:>14} other tree: {workers} workers of {threads} threads", flush=True)
        lists = {"separate": other_tiles.separate_launches(buffers),
                 "phased": other_persistent.phased_launches(buffers, workers),
                 "dag": other_persistent.dag_launches(buffers, workers)}
        for scheduler, launches in lists.items():
            time_and_compare(f"{scheduler} other", launches, other_driver.Invocation.from_launches)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe tiles", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="balanced-2048,ragged-2048")
    parser.add_argument("--out", default=None)
    parser.add_argument("--register-caps", default="",
                        help="also time phased and dag with the persistent kernel compiled at these ptxas "
                             "register caps (comma-separated, e.g. 48,40): more workers per SM, with spills")
    parser.add_argument("--compare-tree", default=None,
                        help="also time the three schedulers with the kernels of DIR/numba_softmax (another tree, "
                             "e.g. a git archive of a baseline commit, or a candidate), in the same process, "
                             "through that tree's own launch layer")
    args = parser.parse_args(argv)
    caps = [int(c) for c in args.register_caps.split(",") if c.strip()]
    by_name = {case.name: case for case in EXPERIMENT_B_CASES}
    unknown = [name for name in args.cases.split(",") if name not in by_name]
    if unknown:
        parser.error(f"unknown cases {unknown}; expected some of {sorted(by_name)}")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    stream = Stream()
    results = []
    for name in args.cases.split(","):
        results.extend(probe_case(by_name[name], stream, caps, args.compare_tree))
    write_results(args.out, RESULTS_FILE, results)

