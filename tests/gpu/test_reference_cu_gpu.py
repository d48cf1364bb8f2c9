"""The nvcc reference kernels (reference_cu/) against the Numba kernels on a real GPU: bitwise equal.

Both sides run in the same harness: the same fixtures (numba_softmax.fixtures) and seed
shapes/cases (numba_softmax.cases), the same device input buffers, one non-blocking stream.
Numba's kernels go through the launch layer (numba_softmax.launch.driver); the nvcc cubins are
loaded with cuModuleLoadData / cuModuleGetFunction and launched with cuLaunchKernel /
cuLaunchCooperativeKernel (numba_softmax.peers.nvcc_twins). Every output AND intermediate must
have the same bits; the two sides' output buffers are poisoned with DIFFERENT NaN payloads
first, so an element neither side writes is a difference too. A failure names the kernel, the
array and the first differing element with both values and bit patterns.

The cubins are built in the session fixture when missing or stale (nvcc 13.0 on the GPU
machine); without nvcc and without a current reference_cu/build every test here is skipped
with the reason.
"""

import numpy as np
import pytest

from numba_softmax.cases import (EXPERIMENT_A_SHAPES, EXPERIMENT_B_CASES, EXPERIMENT_B_SCHEDULERS,
                                 FIXTURE_FAMILIES, TILE_ELEMENTS)
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.oracle import check_matrix, check_packed

NUMBA_NAN = np.uint32(0x7FC00001)   # poison of the Numba side's outputs
NVCC_NAN = np.uint32(0x7FC00002)    # poison of the reference side's outputs
TILED_ARRAYS = ("out", "tile_max", "tile_sum", "row_max", "row_sum")
#: Experiment B: the protocol's cases plus an irregular one (partial tiles, a row shorter
#: than a tile, a one-tile row).
EXTRA_B_CASES = (("irregular-4", np.array([2048, 700, 1500, 1024], dtype=np.int64)),)
B_CASES = tuple((c.name, c.row_lengths()) for c in EXPERIMENT_B_CASES) + EXTRA_B_CASES


@pytest.fixture(scope="session")
def reference(evidence, reference_build_dir):
    from bench.reference_build import BuildError, NvccNotFound, ensure_built
    from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS, ReferenceLibrary
    try:
        build = ensure_built(reference_build_dir)
    except NvccNotFound as exc:
        pytest.skip(f"nvcc reference kernels unavailable: {exc}; and reference_cu/build is not current")
    except BuildError as exc:
        pytest.fail(f"building reference_cu failed: {exc}")
    library = ReferenceLibrary(build.out_dir)
    evidence["reference_cu"] = {
        "rebuilt_in_session": build.rebuilt,
        "nvcc_version": build.manifest.get("nvcc_version"),
        "flags": build.manifest.get("flags"),
        "outputs_sha256": build.manifest.get("outputs_sha256"),
        "ptxas": build.manifest.get("resources"),
        "loaded": {name: library.attributes(name) for name in REFERENCE_KERNELS if library.has(name)},
        "missing_entries": library.missing,
        "persistent_cooperative_limit": library.cooperative_limit(),
    }
    yield library
    library.close()


def _poison(arr, payload, stream):
    arr.copy_to_device(np.full(arr.shape, payload, dtype=np.uint32).view(np.float32), stream=stream.numba)


def assert_bitwise(what, nvcc, numba, locate=None):
    """Equal bits, or a failure naming ``what`` and the first differing element
    (``locate(flat_index)`` may add where that element lives, e.g. its row and tile)."""
    nvcc, numba = np.ascontiguousarray(nvcc), np.ascontiguousarray(numba)
    assert nvcc.shape == numba.shape and nvcc.dtype == numba.dtype, (what, nvcc.shape, numba.shape)
    a, b = nvcc.view(np.uint32).ravel(), numba.view(np.uint32).ravel()
    if np.array_equal(a, b):
        return
    differing = np.flatnonzero(a != b)
    i = int(differing[0])
    where = np.unravel_index(i, nvcc.shape)
    poison = {int(NUMBA_NAN): " (Numba poison: never written)", int(NVCC_NAN): " (nvcc poison: never written)"}
    extra = f" [{locate(i)}]" if locate is not None else ""
    pytest.fail(
        f"{what}: {differing.size} of {a.size} elements differ; first at index {tuple(int(k) for k in where)}"
        f"{extra}: "
        f"nvcc {nvcc.ravel()[i]!r} (0x{int(a[i]):08x}{poison.get(int(a[i]), '')}) vs "
        f"Numba {numba.ravel()[i]!r} (0x{int(b[i]):08x}{poison.get(int(b[i]), '')})", pytrace=False)


# ---- Experiment A --------------------------------------------------------------------------

def _matrix_buffers(shape, payload, stream):
    from numba import cuda
    rows, cols = shape
    buffers = {"y": cuda.device_array(shape, np.float32), "row_max": cuda.device_array(rows, np.float32),
               "exps": cuda.device_array(shape, np.float32), "row_sum": cuda.device_array(rows, np.float32)}
    for arr in buffers.values():
        _poison(arr, payload, stream)
    return buffers


def _fused_builds(cols):
    """Every fused build that can run ``cols`` columns: (name, dispatcher, vector)."""
    from numba_softmax.kernels.fused_row import FUSED_BUILDS
    builds = []
    for build in FUSED_BUILDS:
        # vector builds move whole quads: cols % 4 == 0
        if cols <= build.max_columns and (not build.vector or cols % 4 == 0):
            builds.append((build.name, build.kernel, build.vector))
    return builds


@pytest.mark.parametrize("shape", EXPERIMENT_A_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_entries_in_numbas_argument_layout_give_numbas_bits(reference, stream, shape):
    """The diagnostic entries (NUMBA_ABI_TWINS), launched with the Numba launches' own arrays, write
    what Numba's element-wise stages write."""
    from numba import cuda

    from numba_softmax.kernels.row_stages import stages_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.peers.nvcc_twins import NUMBA_ABI_PREFIX, NUMBA_ABI_TWINS, ReferenceLaunch

    x = matrix_fixture(FIXTURE_FAMILIES[0], shape)
    d_x = cuda.to_device(x, stream=stream.numba)
    ours, theirs = _matrix_buffers(shape, NVCC_NAN, stream), _matrix_buffers(shape, NUMBA_NAN, stream)
    Invocation.from_launches("stages", stages_launches(d_x, theirs["y"], theirs["row_max"], theirs["exps"],
                                                       theirs["row_sum"])).enqueue(stream)
    launches = stages_launches(d_x, ours["y"], ours["row_max"], ours["exps"], ours["row_sum"])
    mixed = [ReferenceLaunch(reference, NUMBA_ABI_PREFIX + launch.name, launch.grid, launch.block, launch.args)
             if launch.name in NUMBA_ABI_TWINS else launch for launch in launches]
    assert sum(isinstance(launch, ReferenceLaunch) for launch in mixed) == 2
    for launch in mixed:
        if isinstance(launch, ReferenceLaunch):
            launch.enqueue(stream)
        else:
            Invocation.from_launches(launch.name, [launch]).enqueue(stream)
    stream.synchronize()
    for key in ("exps", "y"):
        assert_bitwise(f"{key} in Numba's argument layout {shape}", ours[key].copy_to_host(),
                       theirs[key].copy_to_host())


@pytest.mark.parametrize("family", FIXTURE_FAMILIES)
@pytest.mark.parametrize("shape", EXPERIMENT_A_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_stages_and_fused_are_bitwise_equal_to_numba(reference, stream, shape, family):
    from numba import cuda

    from numba_softmax.kernels.fused_row import fused_launches
    from numba_softmax.kernels.row_stages import stages_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.launch_spec import KernelLaunch
    from numba_softmax.peers.nvcc_twins import (reference_fused_launches, reference_invocation,
                                                reference_stages_launches)
    from numba_softmax.numerics import BLOCK_THREADS

    x = matrix_fixture(family, shape)
    rows, _ = shape
    d_x = cuda.to_device(x, stream=stream.numba)
    ours, theirs = _matrix_buffers(shape, NVCC_NAN, stream), _matrix_buffers(shape, NUMBA_NAN, stream)
    Invocation.from_launches("stages", stages_launches(d_x, theirs["y"], theirs["row_max"], theirs["exps"],
                                                       theirs["row_sum"])).enqueue(stream)
    reference_invocation("stages[nvcc]", reference_stages_launches(
        reference, d_x, ours["y"], ours["row_max"], ours["exps"], ours["row_sum"])).enqueue(stream)
    stream.synchronize()
    label = f"{rows}x{shape[1]} {family}"
    for stage, key in (("row_max_stage", "row_max"), ("exp_stage", "exps"), ("row_sum_stage", "row_sum"),
                       ("divide_stage", "y")):
        assert_bitwise(f"{stage} ({key}) {label}", ours[key].copy_to_host(), theirs[key].copy_to_host())
    stages_y = ours["y"].copy_to_host()
    result = check_matrix(stages_y, x)
    assert result.passed, f"nvcc stages {label}: {result.describe()}"

    # The fused build Numba's launcher picks, then every other registered build that fits.
    d_a, d_b = cuda.device_array(shape, np.float32), cuda.device_array(shape, np.float32)
    _poison(d_a, NVCC_NAN, stream)
    _poison(d_b, NUMBA_NAN, stream)
    Invocation.from_launches("fused", fused_launches(d_x, d_b)).enqueue(stream)
    reference_invocation("fused[nvcc]", reference_fused_launches(reference, d_x, d_a)).enqueue(stream)
    stream.synchronize()
    fused_y = d_a.copy_to_host()
    assert_bitwise(f"fused_row_softmax (launcher's build) {label}", fused_y, d_b.copy_to_host())
    # Same algorithm, same order: the reference's fused kernel equals its own stages too.
    assert_bitwise(f"nvcc fused vs nvcc stages {label}", fused_y, stages_y)
    for name, dispatcher, _ in _fused_builds(shape[1]):
        if not reference.has(name):
            pytest.fail(f"{name} is registered but reference_cu/build has no such entry")
        _poison(d_a, NVCC_NAN, stream)
        _poison(d_b, NUMBA_NAN, stream)
        Invocation.from_launches(name, [KernelLaunch(name, dispatcher, (rows,), (BLOCK_THREADS,),
                                                     (d_x, d_b))]).enqueue(stream)
        reference_invocation(f"{name}[nvcc]", reference_fused_launches(reference, d_x, d_a, name=name)).enqueue(stream)
        stream.synchronize()
        assert_bitwise(f"{name} {label}", d_a.copy_to_host(), d_b.copy_to_host())


# ---- Experiment B ----------------------------------------------------------------------------

#: Which kernel (and task) writes each Experiment B array, per scheduler: named in failures.
_WRITER = {
    "separate": {"tile_max": "tile_summary_kernel (task A)", "tile_sum": "tile_summary_kernel (task A)",
                 "row_max": "row_combine_kernel (task B)", "row_sum": "row_combine_kernel (task B)",
                 "out": "tile_normalize_kernel (task C)"},
}
for _mode in ("phased", "dag"):
    _WRITER[_mode] = {key: f"persistent_tiles[{_mode}] (task {task})" for key, task in
                      (("tile_max", "A"), ("tile_sum", "A"), ("row_max", "B"), ("row_sum", "B"), ("out", "C"))}


def _locator(layout, key):
    """flat index -> 'tile t, row r' (tile arrays, out) or 'row r' (row arrays)."""
    def locate(i):
        if key == "out":
            tile = int(np.searchsorted(layout.tile_start, i, side="right") - 1)
            offset = i - int(layout.tile_start[tile])
            return f"element {i}: tile {tile}, row {int(layout.tile_row[tile])}, offset {offset} in the tile"
        if key.startswith("tile_"):
            return f"tile {i}, row {int(layout.tile_row[i])}"
        return f"row {i}"
    return locate


def _tiled_setup(lengths, library, stream):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.peers.nvcc_twins import reference_invocation, reference_tiled_launches
    from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches, worker_plan
    layout = build_layout(np.asarray(lengths), TILE_ELEMENTS)
    runs = {}
    for scheduler in EXPERIMENT_B_SCHEDULERS:
        buffers = TiledBuffers.allocate(layout, stream=stream.numba)
        workers = None if scheduler == "separate" else worker_plan(buffers).workers
        runs[("numba", scheduler)] = (buffers, Invocation.from_launches(
            scheduler, tiled_launches(scheduler, buffers, workers)), workers)
        ref_buffers = TiledBuffers.allocate(layout, stream=stream.numba)
        ref_workers = None if workers is None else min(workers, library.cooperative_limit())
        runs[("nvcc", scheduler)] = (ref_buffers, reference_invocation(
            f"{scheduler}[nvcc]", reference_tiled_launches(library, scheduler, ref_buffers, ref_workers)), ref_workers)
    return layout, runs


def _run_tiled(runs, values, stream):
    from numba_softmax.tiled import verify_queue
    results = {}
    for (side, scheduler), (buffers, invocation, workers) in runs.items():
        buffers.poison(stream=stream.numba)  # queue words junk: the init kernel must reset them
        for name in TILED_ARRAYS:
            _poison(getattr(buffers, name), NVCC_NAN if side == "nvcc" else NUMBA_NAN, stream)
        buffers.load_values(values, stream=stream.numba)
        invocation.enqueue(stream)
        stream.synchronize()
        arrays = {"out": buffers.out.copy_to_host(), **buffers.intermediates()}
        if scheduler == "dag":
            state = buffers.queue_state()
            verify_queue(state, buffers.layout, workers)  # exact counters and overshoots, FIFO, arrivals
            arrays["queue"] = state
        results[(side, scheduler)] = arrays
    return results


@pytest.mark.parametrize("case", B_CASES, ids=lambda c: c[0])
def test_every_scheduler_is_bitwise_equal_to_numba(reference, stream, evidence, case):
    from numba_softmax.tiled import verify_counters
    name, lengths = case
    layout, runs = _tiled_setup(lengths, reference, stream)
    evidence.setdefault("reference_cu_workers", {})[name] = {
        f"{side}:{scheduler}": w for (side, scheduler), (_, _, w) in runs.items()}
    for family in ("random", "offset", "dominant", "constant"):
        values = packed_fixture(family, lengths)
        results = _run_tiled(runs, values, stream)
        result = check_packed(results[("nvcc", "separate")]["out"], values, lengths)
        assert result.passed, f"nvcc separate {name} {family}: {result.describe()}"
        for scheduler in EXPERIMENT_B_SCHEDULERS:
            ours = results[("nvcc", scheduler)]
            for key in TILED_ARRAYS:
                # the same scheduler in Numba, and Numba's separate path (all share the tile algorithm)
                writer = _WRITER[scheduler][key]
                assert_bitwise(f"{writer}: {key}, {name} {family} (nvcc vs Numba {scheduler})",
                               ours[key], results[("numba", scheduler)][key], _locator(layout, key))
                assert_bitwise(f"{writer}: {key}, {name} {family} (nvcc vs Numba separate)",
                               ours[key], results[("numba", "separate")][key], _locator(layout, key))
        # Both DAG queues end in the exact state verify_queue requires (checked in _run_tiled,
        # overshoots included: one of each per worker, and the two sides may run different
        # worker counts), so they agree on everything else.
        expected = {}
        for side in ("nvcc", "numba"):
            counters = results[(side, "dag")]["queue"]["counters"]
            expected[side] = verify_counters(counters, layout)
        for key in ("fifo_tail", "c_done", "error_code", "error_task", "error_waited_on", "error_worker"):
            assert expected["nvcc"][key] == expected["numba"][key], key


def test_init_queue_kernel_writes_the_same_fresh_state(reference, stream):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.peers.nvcc_twins import reference_init_queue_launch, reference_invocation
    from numba_softmax.kernels.persistent import init_queue_launch
    from numba_softmax.queue import COUNTER_INITIAL
    from numba_softmax.tiled import TiledBuffers, build_layout
    layout = build_layout(EXPERIMENT_B_CASES[-1].row_lengths(), TILE_ELEMENTS)  # the largest queue
    states = {}
    for side in ("numba", "nvcc"):
        buffers = TiledBuffers.allocate(layout, stream=stream.numba)
        buffers.poison(stream=stream.numba)
        if side == "numba":
            Invocation.from_launches("init", [init_queue_launch(buffers)]).enqueue(stream)
        else:
            reference_invocation("init[nvcc]", [reference_init_queue_launch(reference, buffers)]).enqueue(stream)
        stream.synchronize()
        states[side] = buffers.queue_state()
    for key in states["numba"]:
        assert np.array_equal(states["nvcc"][key], states["numba"][key]), key
    assert list(states["nvcc"]["counters"]) == list(COUNTER_INITIAL)


def test_reference_watchdog_reports_the_same_error(reference, stream):
    """One worker, a FIFO slot reserved but never published: error 1, same fields as Numba's."""
    from numba_softmax.queue import A_NEXT, ERR_READY_TIMEOUT, ERROR_CODE, FIFO_TAIL
    from numba_softmax.peers.nvcc_twins import reference_dag_launches, reference_invocation
    from numba_softmax.tiled import QueueStateError, TiledBuffers, build_layout, verify_counters
    lengths = np.array([4096, 2048, 1024, 3000])
    layout = build_layout(lengths, TILE_ELEMENTS)
    buffers = TiledBuffers.allocate(layout, packed_fixture("random", lengths), stream=stream.numba)
    init, persistent = reference_dag_launches(reference, buffers, 1, max_polls=1 << 14)
    reference_invocation("init[nvcc]", [init]).enqueue(stream)
    stream.synchronize()
    state = buffers.queue_state()
    state["counters"][FIFO_TAIL] = 1
    state["counters"][A_NEXT] = layout.n_tiles
    for name, host in state.items():
        getattr(buffers, name).copy_to_device(host, stream=stream.numba)
    reference_invocation("dag[nvcc]", [persistent]).enqueue(stream)
    stream.synchronize()  # returns: a stalled dependency must not hang the GPU
    counters = buffers.counters.copy_to_host()
    assert counters[ERROR_CODE] == ERR_READY_TIMEOUT
    with pytest.raises(QueueStateError, match="worker 0 claimed FIFO slot 0 and waited too long for its ready flag"):
        verify_counters(counters, layout)


def test_reference_resources(reference, evidence):
    """Resources the driver reports for the loaded cubins (recorded; spills would be a bug)."""
    from numba_softmax.peers.nvcc_twins import REFERENCE_KERNELS
    for name in REFERENCE_KERNELS:
        if reference.has(name):
            attrs = reference.attributes(name)
            assert attrs["local_bytes_per_thread"] == 0, (name, attrs)
    assert reference.cooperative_limit() >= 1


def test_a_reference_launch_keeps_its_arrays_alive(reference, stream):
    """A twin's packed arguments are raw device pointers: the launch must hold the arrays it was given.
    Negative control of the bug this guards: the stages twin's intermediate freed after packing (its only
    reference gone, Numba's pending frees flushed) and the launch then writing into freed memory."""
    import gc
    import weakref

    from numba import cuda

    from numba_softmax.peers.nvcc_twins import reference_invocation, reference_stages_launches

    shape = (64, 1024)
    x = matrix_fixture("random", shape)
    d_x = cuda.to_device(x, stream=stream.numba)
    d_y = cuda.device_array(shape, dtype=np.float32)
    exps = cuda.device_array(shape, dtype=np.float32)
    exps_alive = weakref.ref(exps)
    launches = reference_stages_launches(reference, d_x, d_y, cuda.device_array(shape[0], dtype=np.float32), exps,
                                         cuda.device_array(shape[0], dtype=np.float32))
    del exps
    gc.collect()
    cuda.current_context().memory_manager.deallocations.clear()
    assert exps_alive() is not None, "the launch let go of an array it writes"
    reference_invocation("stages[nvcc]", launches).enqueue(stream)
    stream.synchronize()
    assert check_matrix(d_y.copy_to_host(), x).passed


def test_the_twins_loaded_from_ptx_give_the_cubins_bits(reference, stream):
    # `bench probe twins` times the twins from nvcc's PTX, compiled by the driver as Numba's PTX is, beside the
    # cubins: the same kernels through another back end must give the same bits (the stages and the separate
    # tile kernels at one shape each).
    from numba import cuda

    from numba_softmax.peers.nvcc_twins import (ReferenceLibrary, reference_invocation, reference_separate_launches,
                                                reference_stages_launches)
    from numba_softmax.tiled import TiledBuffers, build_layout

    jit = ReferenceLibrary(reference.build_dir, image="ptx")
    try:
        assert jit.image == "ptx" and not set(jit.missing) - set(reference.missing)
        x = cuda.to_device(matrix_fixture("random", (32, 1024)), stream=stream.numba)
        sides = [_matrix_buffers((32, 1024), payload, stream) for payload in (NUMBA_NAN, NVCC_NAN)]
        for library, b in zip((reference, jit), sides, strict=True):
            reference_invocation("stages", reference_stages_launches(
                library, x, b["y"], b["row_max"], b["exps"], b["row_sum"])).enqueue(stream)
        stream.synchronize()
        for key in ("row_max", "exps", "row_sum", "y"):
            assert_bitwise(f"stages {key} (ptx vs cubin)", sides[1][key].copy_to_host(), sides[0][key].copy_to_host())
        lengths = EXTRA_B_CASES[0][1]
        layout = build_layout(lengths)
        values = packed_fixture("random", lengths)
        outputs = []
        for library in (reference, jit):
            buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
            reference_invocation("separate", reference_separate_launches(library, buffers)).enqueue(stream)
            stream.synchronize()
            outputs.append([getattr(buffers, name).copy_to_host() for name in TILED_ARRAYS])
        for name, a, b in zip(TILED_ARRAYS, *outputs, strict=True):
            assert_bitwise(f"separate {name} (ptx vs cubin)", b, a)
    finally:
        jit.close()


@pytest.mark.parametrize("case", B_CASES[:2] + EXTRA_B_CASES, ids=lambda c: c[0])
def test_tile_entries_in_numbas_argument_layout_give_numbas_bits(reference, stream, case):
    """The separate scheduler with every kernel replaced by its entry in Numba's argument layout
    (NUMBA_ABI_TWINS), launched with the Numba launches' own arrays, gives the Numba kernels' bits."""
    from numba_softmax.kernels.tiles import separate_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.peers.nvcc_twins import NUMBA_ABI_PREFIX, ReferenceLaunch, reference_invocation
    from numba_softmax.tiled import TiledBuffers, build_layout

    _, lengths = case
    layout = build_layout(lengths)
    values = packed_fixture("random", lengths)
    outputs = []
    for side, payload in (("numba", NUMBA_NAN), ("layout", NVCC_NAN)):
        buffers = TiledBuffers.allocate(layout, values, stream=stream.numba)
        for name in TILED_ARRAYS:  # an element one side leaves unwritten differs
            _poison(getattr(buffers, name), payload, stream)
        launches = separate_launches(buffers)
        if side == "numba":
            Invocation.from_launches("separate", launches).enqueue(stream)
        else:
            reference_invocation("separate[numba-abi]", [
                ReferenceLaunch(reference, NUMBA_ABI_PREFIX + launch.name, launch.grid, launch.block, launch.args)
                for launch in launches]).enqueue(stream)
        stream.synchronize()
        outputs.append([getattr(buffers, name).copy_to_host() for name in TILED_ARRAYS])
    for name, numba, layout_side in zip(TILED_ARRAYS, *outputs, strict=True):
        assert_bitwise(f"separate {name} in Numba's argument layout, {case[0]}", layout_side, numba)
