"""Experiment B schedulers on a real GPU: full worker counts, races, watchdog, negative controls."""

import numpy as np
import pytest

from numba_softmax.cases import EXPERIMENT_B_CASES, EXPERIMENT_B_SCHEDULERS, TILE_ELEMENTS
from numba_softmax.fixtures import packed_fixture
from numba_softmax.oracle import check_packed

ARRAYS = ("out", "tile_max", "tile_sum", "row_max", "row_sum")


def _setup(lengths, stream):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches, worker_plan
    layout = build_layout(np.asarray(lengths), TILE_ELEMENTS)
    runs = {}
    for scheduler in EXPERIMENT_B_SCHEDULERS:
        buffers = TiledBuffers.allocate(layout)
        workers = None if scheduler == "separate" else worker_plan(buffers).workers
        runs[scheduler] = (buffers, Invocation.from_launches(scheduler, tiled_launches(scheduler, buffers, workers)),
                           workers)
    return layout, runs


def _run_all(runs, values, stream):
    from numba_softmax.tiled import verify_queue
    results = {}
    for scheduler, (buffers, invocation, workers) in runs.items():
        buffers.poison(stream=stream.numba)
        buffers.load_values(values, stream=stream.numba)
        invocation.enqueue(stream)
        stream.synchronize()
        arrays = {"out": buffers.out.copy_to_host(), **buffers.intermediates()}
        if scheduler == "dag":
            verify_queue(buffers.queue_state(), buffers.layout, workers)  # one overshoot of each per worker
        results[scheduler] = arrays
    return results


@pytest.mark.parametrize("case", EXPERIMENT_B_CASES, ids=lambda c: c.name)
def test_every_case_every_scheduler_full_workers(case, stream, evidence):
    lengths = case.row_lengths()
    layout, runs = _setup(lengths, stream)
    evidence.setdefault("workers", {})[case.name] = {s: w for s, (_, _, w) in runs.items()}
    for family in ("random", "offset", "dominant", "constant"):
        values = packed_fixture(family, lengths)
        results = _run_all(runs, values, stream)
        for scheduler, arrays in results.items():
            result = check_packed(arrays["out"], values, lengths)
            assert result.passed, f"{case.name} {scheduler} {family}: {result.describe()}"
            for key in ARRAYS:
                assert np.array_equal(arrays[key], results["separate"][key]), (case.name, scheduler, key)


def test_hundred_invocations_on_changing_inputs_shake_out_races(stream):
    lengths = EXPERIMENT_B_CASES[1].row_lengths()  # ragged-128: long rows make B wait on many A tiles
    _, runs = _setup(lengths, stream)
    for i in range(100):
        values = packed_fixture(f"random-{i}", lengths)
        results = _run_all(runs, values, stream)
        for scheduler in ("phased", "dag"):
            for key in ARRAYS:
                assert np.array_equal(results[scheduler][key], results["separate"][key]), (i, scheduler, key)
        if i % 25 == 0:
            assert check_packed(results["separate"]["out"], values, lengths).passed


def _seeded_dag(stream, tamper, kernel=None, max_polls=1 << 14):
    """One worker, so the stalled wait is deterministic: with more, another worker's
    legitimate publish overflows the tampered FIFO first (error 4, also recorded)."""
    from numba_softmax.kernels.persistent import dag_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.tiled import TiledBuffers, build_layout
    lengths = np.array([4096, 2048, 1024, 3000])
    layout = build_layout(lengths, TILE_ELEMENTS)
    buffers = TiledBuffers.allocate(layout, packed_fixture("random", lengths))
    init, persistent = dag_launches(buffers, 1, max_polls, kernel=kernel)
    Invocation.from_launches("init", [init]).enqueue(stream)
    stream.synchronize()
    state = buffers.queue_state()
    tamper(state, layout)
    for name, host in state.items():
        getattr(buffers, name).copy_to_device(host)
    Invocation.from_launches("dag", [persistent]).enqueue(stream)
    stream.synchronize()  # returns: a stalled dependency must not hang the GPU
    return buffers, layout


def _reserved_but_unpublished(state, layout):
    from numba_softmax.queue import A_NEXT, FIFO_TAIL
    state["counters"][FIFO_TAIL] = 1  # a producer reserved slot 0 and never filled it
    state["counters"][A_NEXT] = layout.n_tiles  # and no producer work is left to fill it


def test_watchdog_turns_a_stalled_dependency_into_a_clear_error(stream):
    from numba_softmax.queue import ERR_READY_TIMEOUT, ERROR_CODE
    from numba_softmax.tiled import QueueStateError, verify_counters
    buffers, layout = _seeded_dag(stream, _reserved_but_unpublished)
    counters = buffers.counters.copy_to_host()
    assert counters[ERROR_CODE] == ERR_READY_TIMEOUT
    with pytest.raises(QueueStateError, match="claimed FIFO slot 0 and waited too long for its ready flag"):
        verify_counters(counters, layout)


def test_negative_control_skipping_the_acquire_is_caught(stream):
    from numba_softmax.kernels.persistent.controls import negative_control_kernel
    from numba_softmax.tiled import QueueStateError, verify_counters
    buffers, layout = _seeded_dag(stream, _reserved_but_unpublished,
                                  kernel=negative_control_kernel("unacquired_slot_read"))
    with pytest.raises(QueueStateError, match="invalid task id -1"):
        verify_counters(buffers.counters.copy_to_host(), layout)


def test_negative_control_publishing_b_before_the_last_producer_is_caught(stream):
    from numba_softmax.kernels.persistent import dag_launches
    from numba_softmax.kernels.persistent.controls import negative_control_kernel
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.tiled import TiledBuffers, build_layout, worker_plan
    lengths = EXPERIMENT_B_CASES[1].row_lengths()
    values = packed_fixture("random", lengths)
    buffers = TiledBuffers.allocate(build_layout(lengths, TILE_ELEMENTS), values)
    buffers.poison(stream=stream.numba)
    buffers.load_values(values, stream=stream.numba)
    control = negative_control_kernel("first_producer_publishes_b")
    workers = worker_plan(buffers, kernel=control).workers
    Invocation.from_launches("bad-dag", dag_launches(buffers, workers, kernel=control)).enqueue(stream)
    stream.synchronize()
    assert not check_packed(buffers.out.copy_to_host(), values, lengths).passed


def _dag_behind_a_slow_reset(stream, kernel):
    """The DAG on poisoned queue state, its reset 50 us late. Returns (oracle passed, queue state error)."""
    from numba_softmax.kernels.persistent.controls import slow_reset_dag_launches
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.tiled import QueueStateError, TiledBuffers, build_layout, verify_queue, worker_plan
    lengths = EXPERIMENT_B_CASES[1].row_lengths()
    values = packed_fixture("random", lengths)
    buffers = TiledBuffers.allocate(build_layout(lengths, TILE_ELEMENTS), values)
    buffers.poison(stream=stream.numba)
    buffers.load_values(values, stream=stream.numba)
    workers = worker_plan(buffers, kernel=kernel).workers
    Invocation.from_launches("dag", slow_reset_dag_launches(buffers, workers, 50, kernel=kernel)).enqueue(stream)
    stream.synchronize()
    passed = check_packed(buffers.out.copy_to_host(), values, lengths).passed
    try:
        verify_queue(buffers.queue_state(), buffers.layout, workers)
    except QueueStateError as error:
        return passed, str(error)
    return passed, None


def test_dag_workers_wait_for_a_slow_reset(stream):
    # The workers are the reset's programmatic dependents: they are resident while it still sleeps, and
    # the wait holds them until its writes are visible.
    from numba_softmax.kernels.persistent import persistent_tiles
    assert _dag_behind_a_slow_reset(stream, persistent_tiles) == (True, None)


@pytest.mark.parametrize("control, scheduler", [("barrier_arrive_without_fence", "phased")])
def test_negative_control_grid_barrier_arrival_without_its_fence_is_caught(stream, control, scheduler):
    """A grid barrier arrival made without release ordering (relaxed), before the worker's tasks finished
    (phased): the oracle rejects it."""
    from numba_softmax.kernels.persistent.controls import negative_control_kernel
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.tiled import TiledBuffers, build_layout, tiled_launches, worker_plan
    lengths = EXPERIMENT_B_CASES[1].row_lengths()
    values = packed_fixture("random", lengths)
    buffers = TiledBuffers.allocate(build_layout(lengths, TILE_ELEMENTS), values)
    buffers.poison(stream=stream.numba)
    buffers.load_values(values, stream=stream.numba)
    kernel = negative_control_kernel(control)
    workers = worker_plan(buffers, kernel=kernel).workers
    Invocation.from_launches(f"bad-{scheduler}", tiled_launches(scheduler, buffers, workers, kernel=kernel)).enqueue(
        stream)
    stream.synchronize()
    assert not check_packed(buffers.out.copy_to_host(), values, lengths).passed


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag"])
def test_empty_work_floors_run_no_task(stream, scheduler):
    from numba_softmax.launch.driver import Invocation
    from numba_softmax.queue import ERROR_CODE, GRID_BARRIER
    from numba_softmax.tiled import TiledBuffers, build_layout, floor_launches
    lengths = EXPERIMENT_B_CASES[0].row_lengths()
    buffers = TiledBuffers.allocate(build_layout(lengths, TILE_ELEMENTS), packed_fixture("random", lengths))
    buffers.poison(stream=stream.numba)
    Invocation.from_launches(f"{scheduler}-floor", floor_launches(scheduler, buffers)).enqueue(stream)
    stream.synchronize()
    assert np.all(np.isnan(buffers.out.copy_to_host()))
    counters = buffers.counters.copy_to_host()
    assert counters[GRID_BARRIER] == 0
    if scheduler == "dag":
        assert counters[ERROR_CODE] == 0
