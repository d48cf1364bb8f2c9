"""Which kernel holds a Numba / nvcc gap: each kernel of the stages path (Experiment A shapes) and of
the separate tile path (Experiment B cases), Numba's launch and its nvcc twin's, timed alone in the
same process.

    python -m bench probe twins [--shapes 32x1024,4096x128,4096x1024] [--cases balanced-128,balanced-512]
                                [--compare-tree DIR] [--reference-build DIR] [--out DIR]

The experiments' ``--twins`` tables give the Numba / nvcc ratio of a whole invocation (four stage
kernels, or three tile kernels); this probe splits it per kernel. Per kernel and side: batched (the
launch back to back, a throughput), single (one launch behind a delay kernel, the latency a graph
round sees) and graph (the batch captured once as a CUDA graph and replayed: no host launch path
between the launches, as in the experiments' graph mode), median and p10 / p90, and the ratio of the
medians. Experiment A shapes rotate over enough input sets to exceed L2. Before timing, each side's
invocation runs once and the twin's outputs and intermediates are compared bit for bit with Numba's (a probe that
times a twin computing something else would be meaningless). Each twin runs twice: from nvcc's cubin
(nvcc's ptxas) and from nvcc's PTX compiled by the driver at load time, as Numba's PTX is, so that a
gap the driver's compiler makes shows apart from one in the PTX the two front ends emit. The
element-wise stages and the tile kernels run a third way: the twin's code taking Numba's argument layout
(``NUMBA_ABI_TWINS``: each array as the members of Numba's data model, read at Numba's parameter
offsets), which measures what that layout costs apart from the code (docs/numba_vs_nvcc.md).
"""

import argparse

import numpy as np
from numba import cuda

from bench import reference_build
from bench.probes import other_tree_module, refuse_existing_results, require_gpu, write_results
from bench.timing import DelaySampler, time_batches, time_graph, time_single
from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.kernels.row_stages import stages_launches
from numba_softmax.launch.driver import Invocation, Stream
from numba_softmax.peers.nvcc_twins import (IMAGES, NUMBA_ABI_PREFIX, NUMBA_ABI_TWINS, ReferenceLaunch,
                                            ReferenceLibrary, reference_invocation, reference_separate_launches,
                                            reference_stages_launches)
from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "twins_probe.json"


#: Timing modes of each kernel: (name, median key of :func:`_timed`'s stats).
MODES = (("batched", "median_us"), ("single", "single_median_us"), ("graph", "graph_median_us"))


def _three(stats):
    return " / ".join(f"{stats[key]:7.2f}" for _, key in MODES)


def _timed(stream, sampler, invocations):
    def enqueue(st, i):
        invocations[i % len(invocations)].enqueue(st)
    stats = time_batches(stream, enqueue)
    stats.update(time_single(sampler, enqueue))
    stats.update(time_graph(stream, enqueue))
    return stats


def _compare_per_kernel(label, numba_sets, twin_sets, stream, sampler, results, other_sets=None, abi_sets=None):
    """``numba_sets``: per input set, Numba's launch list; ``twin_sets``: image ("cubin", "ptx") -> the
    twins' launch lists for the same sets (same kernels, same order); ``other_sets``: the other tree's
    Numba launch lists (``--compare-tree``), or None; ``abi_sets``: per input set, kernel name -> the
    twin's code in Numba's argument layout (``NUMBA_ABI_TWINS``), or None."""
    for k, launch in enumerate(numba_sets[0]):
        name = launch.name
        row = {"case": label, "kernel": name,
               "numba": _timed(stream, sampler, [Invocation.from_launches(name, [s[k]]) for s in numba_sets])}
        numba = row["numba"]
        line = f"{label:>14} {name:<22} Numba {_three(numba)}"
        if other_sets is not None:
            other = _timed(stream, sampler, [other_sets.invocation(name, [s[k]]) for s in other_sets])
            row["numba_other_tree"] = other
            line += f" | other tree {_three(other)}"
        for image, sets in twin_sets.items():
            twin = _timed(stream, sampler, [reference_invocation(name, [s[k]]) for s in sets])
            row[f"nvcc_{image}"] = twin
            for mode, key in MODES:
                row[f"{mode}_ratio_{image}"] = numba[key] / twin[key]
            line += (f" | nvcc {image} {_three(twin)} us, Numba / nvcc "
                     + " / ".join(f"{row[f'{mode}_ratio_{image}']:.3f}" for mode, _ in MODES))
        if abi_sets is not None and name in abi_sets[0]:
            # The same nvcc code reading its arguments where Numba's kernel reads them: what the layout costs.
            abi = _timed(stream, sampler, [reference_invocation(name, [s[name]]) for s in abi_sets])
            row["nvcc_cubin_numba_abi"] = abi
            for mode, key in MODES:
                row[f"{mode}_abi_over_twin"] = abi[key] / row["nvcc_cubin"][key]
                row[f"{mode}_numba_over_abi"] = numba[key] / abi[key]
            line += (f" | nvcc in Numba's argument layout {_three(abi)} us, layout / twin "
                     + " / ".join(f"{row[f'{mode}_abi_over_twin']:.3f}" for mode, _ in MODES))
        results.append(row)
        print(line + "  (batched / single / graph)", flush=True)


class OtherTreeLaunches(list):
    """The other tree's launch lists (one per input set), launched by the other tree's own launch layer:
    what that tree's kernels cost as that tree launches them (its kernel entry, its parameter block)."""

    def __init__(self, other, sets):
        super().__init__(sets)
        self.invocation = other["driver"].Invocation.from_launches


def _same(arrays, reference):
    return all(np.array_equal(a.copy_to_host(), b) for a, b in zip(arrays, reference, strict=True))


def _check_twins(label, name, run_numba, twin_invocations, outputs, stream, results):
    """Run Numba's invocation ``name``, then each of ``twin_invocations`` (display name -> invocation: the
    twins, and the other tree's kernels) on NaN-filled outputs and intermediates (an unwritten element must
    fail), comparing every array bit for bit with Numba's."""
    run_numba.enqueue(stream)
    stream.synchronize()
    reference = [a.copy_to_host() for a in outputs]
    for twin, invocation in twin_invocations.items():
        for a in outputs:
            a.copy_to_device(np.full(a.shape, np.nan, dtype=np.float32))
        invocation.enqueue(stream)
        stream.synchronize()
        same = _same(outputs, reference)
        results.append({"case": label, "what": f"bitwise: {twin} == {name}", "equal": bool(same)})
        print(f"{label:>14} {twin} == {name} bitwise (output and intermediates): {same}", flush=True)


def _numba_layout_sets(library, numba_sets, twins, variant, checks):
    """Per input set, kernel name -> the twin's code in Numba's argument layout, launched with the Numba
    launch's own arrays (``NUMBA_ABI_TWINS``); adds the invocation with those entries in place of the
    twins' (``twins``: the first set's twin launches) to the bitwise ``checks``."""
    sets = [{launch.name: ReferenceLaunch(library, NUMBA_ABI_PREFIX + launch.name, launch.grid, launch.block,
                                          launch.args)
             for launch in launches if launch.name in NUMBA_ABI_TWINS} for launches in numba_sets]
    checks[f"{variant}-nvcc in Numba's argument layout"] = reference_invocation(
        f"{variant}-nvcc-abi", [sets[0].get(t.name, t) for t in twins])
    return sets


def probe_stages(text, libraries, stream, sampler, results, other=None):
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
    twin_sets = {image: [reference_stages_launches(library, *b) for b in buffers]
                 for image, library in libraries.items()}
    checks = {f"stages-nvcc ({image})": reference_invocation("stages-nvcc", sets[0])
              for image, sets in twin_sets.items()}
    abi_sets = _numba_layout_sets(libraries["cubin"], numba_sets, twin_sets["cubin"][0], "stages", checks)
    other_sets = None
    if other is not None:
        other_sets = OtherTreeLaunches(other, [other["row_stages"].stages_launches(*b) for b in buffers])
        checks["stages (other tree)"] = other_sets.invocation("stages-other", other_sets[0])
    _check_twins(text, "stages", Invocation.from_launches("stages", numba_sets[0]), checks, buffers[0][1:], stream,
                 results)
    _compare_per_kernel(text, numba_sets, twin_sets, stream, sampler, results, other_sets, abi_sets)


def probe_separate(name, libraries, stream, sampler, results, other=None):
    case = next(c for c in EXPERIMENT_B_CASES if c.name == name)
    layout = build_layout(case.row_lengths())
    values = np.random.default_rng(0).standard_normal(layout.total_elements, dtype=np.float32)
    buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
    stream.synchronize()
    numba = tiled_launches("separate", buffers)
    twins = {image: reference_separate_launches(library, buffers) for image, library in libraries.items()}
    outputs = [getattr(buffers, field) for field in ("out", "tile_max", "tile_sum", "row_max", "row_sum")]
    checks = {f"separate-nvcc ({image})": reference_invocation("separate-nvcc", launches)
              for image, launches in twins.items()}
    abi_sets = _numba_layout_sets(libraries["cubin"], [numba], twins["cubin"], "separate", checks)
    other_sets = None
    if other is not None:
        other_sets = OtherTreeLaunches(other, [other["tiles"].separate_launches(buffers)])
        checks["separate (other tree)"] = other_sets.invocation("separate-other", other_sets[0])
    _check_twins(name, "separate", Invocation.from_launches("separate", numba), checks, outputs, stream, results)
    _compare_per_kernel(name, [numba], {image: [launches] for image, launches in twins.items()}, stream, sampler,
                        results, other_sets, abi_sets)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe twins", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="32x1024,4096x128,4096x1024",
                        help="Experiment A shapes (ROWSxCOLS, comma-separated) for the stage kernels; '' for none")
    parser.add_argument("--cases", default="balanced-128,balanced-512",
                        help="Experiment B cases for the separate tile kernels; '' for none")
    parser.add_argument("--reference-build", default="/tmp/probe_reference_build",
                        help="nvcc cubins dir (built here when absent)")
    parser.add_argument("--compare-tree", default=None, metavar="DIR",
                        help="also time the kernels of DIR/numba_softmax (another tree, e.g. a git archive of a "
                             "baseline commit), in the same process, through that tree's own launch layer (its "
                             "kernel entries and argument packing)")
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
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    try:
        reference_build.ensure_built(args.reference_build)
    except (reference_build.NvccNotFound, reference_build.BuildError) as exc:
        parser.error(f"the nvcc twins cannot be built into {args.reference_build}: {exc}")
    # The twins twice: nvcc's cubin, and nvcc's PTX compiled by the driver as Numba's PTX is, which
    # separates what the front ends emit from what the two ptxas builds make of it.
    libraries = {image: ReferenceLibrary(args.reference_build, image=image) for image in IMAGES}
    stream = Stream()
    sampler = DelaySampler()
    sampler.calibrate_delay()
    other = None
    if args.compare_tree:
        other = {name: other_tree_module(args.compare_tree, module)
                 for name, module in (("row_stages", "kernels.row_stages"), ("tiles", "kernels.tiles"),
                                      ("driver", "launch.driver"))}
    results = []
    for text in shapes:
        probe_stages(text, libraries, stream, sampler, results, other)
    for name in cases:
        probe_separate(name, libraries, stream, sampler, results, other)
    write_results(args.out, RESULTS_FILE, results)
    return 0 if all(r.get("equal", True) for r in results) else 1
