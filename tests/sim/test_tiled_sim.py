"""Experiment B schedulers in the Numba CUDA simulator (logic only, tiny cases).

The simulator runs blocks one at a time, so the persistent kernel runs with ONE worker
(phased and DAG). The DAG may also run with two:
block 0 drains the whole graph, block 1 then finds nothing and exits, which exercises the
termination path. Small tiles (64 and 320 elements) keep each case to seconds; the kernels
read tile lengths from the layout.
Every run starts from poisoned buffers (NaN outputs and intermediates, junk queue
state), so an element or queue word nobody writes shows up.
"""

import numpy as np
import pytest

from numba_softmax.fixtures import packed_fixture
from numba_softmax.kernels.persistent import (MODE_DAG, MODE_DAG_FLOOR, MODE_PHASED, MODE_PHASED_FLOOR, dag_launches,
                                              init_queue_kernel, persistent_tiles)
from numba_softmax.kernels.persistent.controls import NEGATIVE_CONTROLS, negative_control_kernel
from numba_softmax.queue import (A_NEXT, C_DONE, ERR_INVALID_TASK, ERR_READY_TIMEOUT, ERROR_CODE,
                                 ERROR_TASK, ERROR_WAITED_ON, ERROR_WORKER, FIFO_HEAD, FIFO_TAIL, GRID_BARRIER,
                                 tiles_per_claim)
from numba_softmax.kernels.tiles import (empty_tile_kernel, row_combine_kernel, tile_normalize_kernel,
                                         tile_summary_kernel)
from numba_softmax.backend import run_launches
from numba_softmax.kernels.tracing import TRACE_END, TRACE_START
from numba_softmax.numerics import SIMULATOR
from numba_softmax.oracle import check_packed
from numba_softmax.tiled import (QueueStateError, TiledBuffers, build_layout, expected_counters,
                                 floor_launches, tiled_launches, tiled_softmax, verify_counters, worker_plan)

INTERMEDIATES = ("out", "tile_max", "tile_sum", "row_max", "row_sum")
#: Small poll bound for the error-path tests (the GPU default is 2**22).
SIM_POLLS = 40

# (row lengths, tile elements, fixture): tile 64 < 256 threads (masked threads, a
# 1-element row, ragged tails); tile 320 > 256 (two values for some threads).
CASE_SMALL = (np.array([100, 200, 1, 70]), 64, "random")
CASE_WIDE = (np.array([700, 320]), 320, "offset")


def test_running_in_the_simulator():
    assert SIMULATOR


def _fresh_buffers(lengths, tile, values):
    buffers = TiledBuffers.allocate(build_layout(lengths, tile), values)
    buffers.poison()
    return buffers


def _run(case, scheduler, workers=None):
    lengths, tile, family = case
    values = packed_fixture(family, lengths)
    buffers = _fresh_buffers(lengths, tile, values)
    result = tiled_softmax(values, lengths, scheduler, workers=workers, tile_elements=tile,
                           buffers=buffers)
    return values, buffers, result


@pytest.fixture(scope="module")
def small_runs():
    return {s: _run(CASE_SMALL, s, None if s == "separate" else 1)
            for s in ("separate", "phased", "dag")}


@pytest.fixture(scope="module")
def wide_runs():
    return {"separate": _run(CASE_WIDE, "separate"),
            "phased": _run(CASE_WIDE, "phased", 1),
            # 4 tiles, 2 workers: pairs of A tiles per claim, C entries of two tiles
            "dag-2-workers": _run(CASE_WIDE, "dag", 2),
            "dag-3-workers": _run(CASE_WIDE, "dag", 3)}   # 4 tiles, 3 workers: one A tile per claim


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag"])
def test_small_case_passes_the_oracle(small_runs, scheduler):
    values, _, result = small_runs[scheduler]
    check = check_packed(result.out, values, CASE_SMALL[0])
    assert check.passed, check.describe()


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag-2-workers", "dag-3-workers"])
def test_wide_tile_case_passes_the_oracle(wide_runs, scheduler):
    values, _, result = wide_runs[scheduler]
    check = check_packed(result.out, values, CASE_WIDE[0])
    assert check.passed, check.describe()


@pytest.mark.parametrize("runs_name", ["small_runs", "wide_runs"])
def test_schedulers_are_bitwise_equal_outputs_and_intermediates(request, runs_name):
    runs = request.getfixturevalue(runs_name)
    reference = runs["separate"][2]
    for name, (_, _, result) in runs.items():
        for field in INTERMEDIATES:
            ref, got = getattr(reference, field), getattr(result, field)
            assert got.dtype == np.float32 and np.all(np.isfinite(got)), (name, field)
            assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), (name, field)


def test_intermediates_are_the_tile_and_row_summaries(small_runs):
    values, _, result = small_runs["separate"]
    layout = result.layout
    for t in range(layout.n_tiles):
        tile = values[layout.tile_start[t]:layout.tile_start[t] + layout.tile_len[t]]
        assert result.tile_max[t] == tile.max()  # max is exact in any order
        z = np.exp(tile.astype(np.float64) - float(tile.max())).sum()
        assert result.tile_sum[t] == pytest.approx(z, rel=1e-5)
    for r in range(layout.rows):
        row = values[layout.row_offsets[r]:layout.row_offsets[r + 1]]
        assert result.row_max[r] == row.max()
        z = np.exp(row.astype(np.float64) - float(row.max())).sum()
        assert result.row_sum[r] == pytest.approx(z, rel=1e-5)


@pytest.mark.parametrize("runs_name, key", [("small_runs", "dag"), ("wide_runs", "dag-2-workers"),
                                           ("wide_runs", "dag-3-workers")])
def test_dag_counters_and_queue_are_exact(request, runs_name, key):
    _, _, result = request.getfixturevalue(runs_name)[key]
    layout = result.layout
    workers = result.workers
    # every worker leaves after exactly one A claim and one ticket came back past the end
    k = tiles_per_claim(layout.n_tiles, workers)
    assert verify_counters(result.counters, layout, workers) == expected_counters(layout, workers, workers, k)
    # every A claim took k tiles (the last one in range perhaps fewer), and each worker made one claim past the end
    assert result.counters[A_NEXT] == k * (-(-layout.n_tiles // k) + workers)
    # the FIFO: every B and every C entry (k consecutive tiles of a row, the row's last run perhaps fewer)
    entries = layout.fifo_entries(k)
    assert result.counters[FIFO_HEAD] == entries + workers
    assert result.counters[FIFO_TAIL] == entries
    assert result.counters[C_DONE] == layout.n_tiles
    assert np.array_equal(result.queue["row_arrivals"], layout.row_tile_count)
    assert np.all(result.queue["fifo_slots"][:entries] >= 0) and np.all(result.queue["fifo_slots"][entries:] == -1)
    c_first = [t for t in range(layout.n_tiles) if (t - layout.row_first_tile[layout.tile_row[t]]) % k == 0]
    assert sorted(result.queue["fifo_slots"][:entries].tolist()) == list(range(layout.rows)) + [
        layout.rows + t for t in c_first]


def test_one_worker_dag_prefers_ready_consumers():
    # One worker, traced. Once a B or C task is published, the worker makes at most ONE more
    # A claim (of tiles_per_claim tiles: two here) before running it: the one thread 0 may make
    # while the announcer (lane 0 of warp 1) is still publishing (the two run side by side after
    # an A claim). A worker without the preference would claim every A tile first.
    lengths, tile, family = CASE_SMALL
    values = packed_fixture(family, lengths)
    result = tiled_softmax(values, lengths, "dag", workers=1, tile_elements=tile, trace=True)
    layout = result.layout
    n, rows = layout.n_tiles, layout.rows
    start, end = result.trace[:, TRACE_START], result.trace[:, TRACE_END]
    a_start = start[:n]
    last_a_end = np.full(rows, np.iinfo(np.int64).min)
    np.maximum.at(last_a_end, layout.tile_row, end[:n])
    for r in range(rows):
        b_start, b_end = start[n + r], end[n + r]
        claim = tiles_per_claim(n, 1)
        assert np.sum((a_start > last_a_end[r]) & (a_start < b_start)) <= claim, f"B({r}) waited behind A tiles"
        tiles = range(int(layout.row_first_tile[r]), int(layout.row_first_tile[r] + layout.row_tile_count[r]))
        first_c = min(start[n + rows + t] for t in tiles)
        assert np.sum((a_start > b_end) & (a_start < first_c)) <= claim, f"row {r}'s C tasks waited behind A tiles"
    assert start[n:].min() < a_start.max()  # consumers did run before the last A tile


def test_phased_mode_leaves_the_queue_state_untouched(small_runs):
    _, buffers, _ = small_runs["phased"]
    state = buffers.queue_state()
    # Only its own grid barrier word: each barrier adds 2**31 to it, back to 0 (it resets itself).
    assert state["counters"][GRID_BARRIER] == 0
    assert np.all(np.delete(state["counters"], GRID_BARRIER) == 12345) and np.all(state["row_arrivals"] == 777)
    assert np.all(state["fifo_slots"] == 4242)


# ---- launch lists -------------------------------------------------------------------------

def test_launch_lists_of_the_three_schedulers():
    lengths, tile, family = CASE_SMALL
    buffers = TiledBuffers.allocate(build_layout(lengths, tile), packed_fixture(family, lengths))
    n_tiles = buffers.n_tiles
    separate = tiled_launches("separate", buffers)
    assert [launch.kernel for launch in separate] == [tile_summary_kernel, row_combine_kernel, tile_normalize_kernel]
    rows_per_block = 128 // 32  # one B per warp
    assert [launch.grid for launch in separate] == [(n_tiles,), (-(-buffers.rows // rows_per_block),), (n_tiles,)]
    assert all(launch.block == (128,) for launch in separate)  # the tile task's block
    phased = tiled_launches("phased", buffers, 1)
    assert len(phased) == 1 and phased[0].kernel is persistent_tiles and phased[0].cooperative
    assert phased[0].grid == (1,) and phased[0].args[0] == MODE_PHASED and phased[0].block == (128,)
    dag = tiled_launches("dag", buffers, 1)
    assert [launch.kernel for launch in dag] == [init_queue_kernel, persistent_tiles]
    assert dag[1].block == (128,) and dag[1].cooperative
    assert dag[1].args[0] == MODE_DAG and dag[1].args[1:] == phased[0].args[1:]
    assert dag[0].args[0] is buffers.counters  # fixed pointers: the same device arrays
    with pytest.raises(ValueError, match="workers=1"):
        tiled_launches("phased", buffers, 2)
    with pytest.raises(ValueError, match="unknown scheduler"):
        tiled_launches("fifo", buffers, 1)


def test_worker_plan_in_the_simulator_is_one_co_resident_block():
    lengths, tile, family = CASE_SMALL
    buffers = TiledBuffers.allocate(build_layout(lengths, tile), packed_fixture(family, lengths))
    plan = worker_plan(buffers)
    assert (plan.workers, plan.cooperative_limit, plan.source) == (1, 1, "simulator")
    assert worker_plan(buffers, 3).workers == 3


def test_input_is_validated_first():
    with pytest.raises(ValueError, match="NaN"):
        tiled_softmax(np.array([1.0, np.nan], dtype=np.float32), [2])
    with pytest.raises(ValueError, match="sum to"):
        tiled_softmax(np.zeros(5, dtype=np.float32), [2, 2])


# ---- bounded waits, error records and negative controls ---------------------------------------

def _seeded_dag(tamper, kernel=persistent_tiles):
    """Reset the queue, tamper with it on the host, then run the DAG kernel once."""
    lengths = np.array([100, 30])
    buffers = _fresh_buffers(lengths, 64, packed_fixture("random", lengths))
    init, persistent = dag_launches(buffers, 1, SIM_POLLS, kernel=kernel)
    run_launches([init])
    state = buffers.queue_state()
    tamper(state, buffers.layout)
    for name, host in state.items():
        getattr(buffers, name).copy_to_device(host)
    run_launches([persistent])
    return buffers.counters.copy_to_host(), buffers.layout


def _reserved_but_unpublished(state, layout):
    state["counters"][FIFO_TAIL] = 1  # a producer reserved slot 0 and never filled it
    state["counters"][A_NEXT] = layout.n_tiles  # and no producer work is left to fill it


def test_ready_flag_wait_is_bounded_and_recorded():
    counters, layout = _seeded_dag(_reserved_but_unpublished)
    assert counters[ERROR_CODE] == ERR_READY_TIMEOUT
    assert (counters[ERROR_TASK], counters[ERROR_WAITED_ON], counters[ERROR_WORKER]) == (-1, 0, 0)
    with pytest.raises(QueueStateError, match="worker 0 claimed FIFO slot 0 and waited too long for its ready flag"):
        verify_counters(counters, layout)


def test_invalid_task_id_is_recorded():
    def invalid(state, layout):
        state["counters"][FIFO_TAIL] = 1
        state["fifo_slots"][0] = 999
    counters, layout = _seeded_dag(invalid)
    assert counters[ERROR_CODE] == ERR_INVALID_TASK
    assert (counters[ERROR_TASK], counters[ERROR_WAITED_ON]) == (999, 0)
    with pytest.raises(QueueStateError, match="invalid task id 999 from FIFO slot 0"):
        verify_counters(counters, layout)


def test_floor_launches_are_the_same_launches_with_no_tasks():
    lengths, tile, family = CASE_SMALL
    buffers = _fresh_buffers(lengths, tile, packed_fixture(family, lengths))
    separate, floor = tiled_launches("separate", buffers), floor_launches("separate", buffers)
    assert [launch.kernel for launch in floor] == [empty_tile_kernel] * 3
    assert [(f.grid, f.block) for f in floor] == [(s.grid, s.block) for s in separate]
    phased_floor = floor_launches("phased", buffers, 1)
    assert phased_floor[0].args[0] == MODE_PHASED_FLOOR and phased_floor[0].block == (128,)
    dag_floor = floor_launches("dag", buffers, 1)
    assert dag_floor[1].args[0] == MODE_DAG_FLOOR and dag_floor[0].kernel is init_queue_kernel
    # No task runs: the poisoned outputs stay NaN; the DAG floor's queue is the reset state.
    run_launches(floor)
    run_launches(phased_floor)
    run_launches(dag_floor)
    assert np.all(np.isnan(buffers.out.copy_to_host())) and np.all(np.isnan(buffers.row_sum.copy_to_host()))
    counters = buffers.counters.copy_to_host()
    assert counters[A_NEXT] == counters[FIFO_HEAD] == counters[C_DONE] == counters[ERROR_CODE] == 0
    assert counters[GRID_BARRIER] == 0  # both of the phased floor's barriers ran and reset


def test_negative_controls_are_separate_builds():
    assert set(NEGATIVE_CONTROLS) == {"unacquired_slot_read", "first_producer_publishes_b",
                                      "barrier_arrive_without_fence"}
    for name in NEGATIVE_CONTROLS:
        assert negative_control_kernel(name) is not persistent_tiles
    with pytest.raises(ValueError, match="unknown negative control"):
        negative_control_kernel("nope")


def test_negative_control_unacquired_slot_read_takes_an_unpublished_slot():
    # The correct kernel waits for the slot's publish (and here times out, error 1); the
    # control reads the slot at once and takes its reset value -1 as a task (error 3).
    counters, layout = _seeded_dag(_reserved_but_unpublished,
                                   negative_control_kernel("unacquired_slot_read"))
    assert counters[ERROR_CODE] == ERR_INVALID_TASK
    assert (counters[ERROR_TASK], counters[ERROR_WAITED_ON]) == (-1, 0)


def test_negative_control_first_producer_publishes_b_is_caught_by_the_data_checks(wide_runs):
    lengths, tile, family = CASE_WIDE
    values = packed_fixture(family, lengths)
    buffers = _fresh_buffers(lengths, tile, values)
    run_launches(dag_launches(buffers, 1, kernel=negative_control_kernel("first_producer_publishes_b")))
    # The queue accounting alone cannot see it: every count is still exact ...
    verify_counters(buffers.counters.copy_to_host(), buffers.layout)
    # ... but B(0) combined tile 0 alone (tiles 1, 2 of row 0 were still NaN-poisoned).
    out = buffers.out.copy_to_host()
    assert not check_packed(out, values, lengths).passed
    row_max = buffers.row_max.copy_to_host()
    reference = wide_runs["separate"][2]
    assert not np.array_equal(buffers.row_sum.copy_to_host()[:1], reference.row_sum[:1])
    assert row_max[1] == reference.row_max[1]  # the one-tile row is unaffected
