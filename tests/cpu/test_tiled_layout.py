"""Experiment B host side: packed tile layout, exact DAG counters and their verification.

Pure numpy: no device arrays are touched, so this file gives the same answers with or
without the simulator (it may share a pytest process with tests/sim).
"""

import numpy as np
import pytest

from numba_softmax.cases import (BALANCED_ROW_LENGTH, EXPERIMENT_B_CASES, RAGGED_LONG_ROW,
                                 RAGGED_SHORT_ROW, TILE_ELEMENTS, row_lengths_for)
from numba_softmax.queue import (GRID_BARRIER, TILES_PER_CLAIM, COUNTER_INDEX, COUNTER_INITIAL, COUNTER_NAMES,
                                 COUNTER_SLOTS,
                                 ERR_COMPLETION_TIMEOUT, ERR_FIFO_OVERFLOW, ERR_INVALID_TASK, ERR_READY_TIMEOUT,
                                 ERROR_CODE, ERROR_TASK, ERROR_WAITED_ON, ERROR_WORKER, tiles_per_claim)
from numba_softmax.tiled import (QueueStateError, build_layout, check_layout, describe_error,
                                 expected_counters, verify_counters, verify_queue)


@pytest.mark.parametrize("case", EXPERIMENT_B_CASES, ids=lambda c: c.name)
def test_protocol_cases_have_eight_tiles_per_row_on_average(case):
    layout = build_layout(case.row_lengths())
    assert layout.tile_elements == TILE_ELEMENTS == 1024
    assert layout.rows == case.rows
    assert layout.n_tiles == 8 * case.rows
    assert layout.total_elements == 8192 * case.rows
    assert layout.fifo_capacity == case.rows + layout.n_tiles
    # Every protocol row length is a multiple of 1024: no masked tile anywhere.
    assert np.all(layout.tile_len == 1024)
    assert check_layout(layout)


def test_balanced_layout_arrays():
    layout = build_layout(row_lengths_for(128, "balanced"))
    assert np.all(layout.row_tile_count == 8)
    assert np.array_equal(layout.row_first_tile, np.arange(0, 1024, 8, dtype=np.int32))
    assert np.array_equal(layout.tile_row, np.repeat(np.arange(128, dtype=np.int32), 8))
    assert np.array_equal(layout.tile_start, np.arange(1024, dtype=np.int64) * 1024)
    assert np.array_equal(layout.row_offsets, np.arange(129, dtype=np.int64) * BALANCED_ROW_LENGTH)
    assert layout.tile_row.dtype == np.int32 and layout.tile_start.dtype == np.int64
    assert layout.tile_len.dtype == np.int32 and layout.row_first_tile.dtype == np.int32
    assert layout.row_tile_count.dtype == np.int32 and layout.row_offsets.dtype == np.int64


def test_ragged_layout_has_36_tiles_for_the_long_row_and_4_for_the_short():
    lengths = row_lengths_for(512, "ragged")
    layout = build_layout(lengths)
    long_rows = np.flatnonzero(lengths == RAGGED_LONG_ROW)
    short_rows = np.flatnonzero(lengths == RAGGED_SHORT_ROW)
    assert long_rows.size == 64 and short_rows.size == 448
    assert np.all(layout.row_tile_count[long_rows] == 36)
    assert np.all(layout.row_tile_count[short_rows] == 4)
    # The permutation is not the trivial order, and the tiles follow the row order.
    assert long_rows[0] != 0 or long_rows[1] != 8
    r = int(long_rows[0])
    first = int(layout.row_first_tile[r])
    tiles = np.arange(first, first + 36)
    assert np.all(layout.tile_row[tiles] == r)
    assert np.array_equal(layout.tile_start[tiles], layout.row_offsets[r] + 1024 * np.arange(36))


def test_partial_last_tiles_are_masked_lengths():
    layout = build_layout(np.array([1000, 1025, 2048, 1, 3000]))
    assert layout.tile_len.tolist() == [1000, 1024, 1, 1024, 1024, 1, 1024, 1024, 952]
    assert layout.row_tile_count.tolist() == [1, 2, 2, 1, 3]
    assert layout.row_first_tile.tolist() == [0, 1, 3, 5, 6]
    assert layout.tile_row.tolist() == [0, 1, 1, 2, 2, 3, 4, 4, 4]
    assert layout.tile_start.tolist() == [0, 1000, 2024, 2025, 3049, 4073, 4074, 5098, 6122]
    assert layout.total_elements == 7074


def test_tile_size_is_a_layout_parameter():
    layout = build_layout([100, 300, 64, 1], tile_elements=64)
    assert layout.tile_elements == 64
    assert layout.tile_len.tolist() == [64, 36, 64, 64, 64, 64, 44, 64, 1]
    assert layout.row_tile_count.tolist() == [2, 5, 1, 1]
    big = build_layout([700], tile_elements=320)
    assert big.tile_len.tolist() == [320, 320, 60]


@pytest.mark.parametrize("tile_elements", [0, -4, 1025, 4096])
def test_tile_size_outside_the_helpers_range_is_rejected(tile_elements):
    with pytest.raises(ValueError, match="tile_elements"):
        build_layout([100], tile_elements=tile_elements)


@pytest.mark.parametrize("lengths, message", [
    (np.zeros(0, dtype=np.int64), "zero rows"),
    ([5, 0, 3], "row 1 is empty"),
    ([4, -2], "row 1 is empty"),
    ([[1, 2]], "1-D integer"),
    ([1.5, 2.0], "1-D integer"),
])
def test_bad_row_lengths_are_rejected(lengths, message):
    with pytest.raises(ValueError, match=message):
        build_layout(np.array(lengths))


def test_check_layout_catches_a_gap():
    layout = build_layout([100, 300], tile_elements=64)
    broken = layout.__class__(**{**layout.__dict__, "tile_start": layout.tile_start + np.int64(1)})
    with pytest.raises(AssertionError, match="back to back"):
        check_layout(broken)


# ---- counters ------------------------------------------------------------------------------

def _layout():
    return build_layout(row_lengths_for(128, "balanced"))


def test_expected_counters_are_exact():
    layout = _layout()  # 128 rows, 1024 tiles
    assert expected_counters(layout) == {
        "a_next": 1024, "fifo_head": 1152, "fifo_tail": 1152, "c_done": 1024,
        "error_code": 0, "error_task": -1, "error_waited_on": -1, "error_worker": -1,
        "a_overshoot": 0, "head_overshoot": 0, "grid_barrier": 0,
    }
    # failed ticket claims are counted, so the successful claims stay exact
    with_overshoot = expected_counters(layout, a_overshoot=5, head_overshoot=7)
    assert (with_overshoot["a_next"], with_overshoot["fifo_head"]) == (1029, 1159)
    assert with_overshoot["fifo_tail"] == 1152
    ragged = build_layout(row_lengths_for(2048, "ragged"))
    exp = expected_counters(ragged)
    assert exp["a_next"] == exp["c_done"] == 16384
    assert exp["fifo_head"] == exp["fifo_tail"] == 2048 + 16384


def test_counter_layout_matches_the_names():
    assert len(COUNTER_NAMES) == len(COUNTER_INDEX) == 11 and COUNTER_NAMES == tuple(COUNTER_INDEX)
    # the grid barrier's word is the last, alone on its 128-byte line
    assert len(COUNTER_INITIAL) == COUNTER_SLOTS == GRID_BARRIER + 1 == COUNTER_INDEX["grid_barrier"] + 1
    assert GRID_BARRIER % 32 == 0 and max(v for k, v in COUNTER_INDEX.items() if k != "grid_barrier") < GRID_BARRIER
    assert COUNTER_INDEX["error_code"] == ERROR_CODE
    assert COUNTER_INITIAL[ERROR_TASK:ERROR_WORKER + 1] == (-1, -1, -1)
    assert sum(COUNTER_INITIAL) == -3  # every other word, padding included, starts at 0
    # the four counters every task touches own a 128-byte line each
    hot = [COUNTER_INDEX[name] * 4 // 128 for name in ("a_next", "fifo_head", "fifo_tail", "c_done")]
    assert len(set(hot)) == 4
    cold = {COUNTER_INDEX[name] * 4 // 128 for name in COUNTER_NAMES[4:]}
    assert cold.isdisjoint(hot)
    assert {GRID_BARRIER * 4 // 128}.isdisjoint(set(hot) | {COUNTER_INDEX["error_code"] * 4 // 128})


def _good_counters(layout, a_overshoot=0, head_overshoot=0, claim=1):
    exp = expected_counters(layout, a_overshoot, head_overshoot, claim)
    counters = np.zeros(COUNTER_SLOTS, dtype=np.int32)
    for name, index in COUNTER_INDEX.items():
        counters[index] = exp[name]
    return counters


def test_verify_counters_rejects_a_written_padding_word():
    layout = _layout()
    counters = _good_counters(layout)
    counters[COUNTER_INDEX["a_next"] + 1] = 7
    with pytest.raises(QueueStateError, match="1 padding words between the counters were written"):
        verify_counters(counters, layout)


def test_verify_counters_accepts_counted_overshoot_and_rejects_a_negative_one():
    layout = _layout()
    counters = _good_counters(layout)
    counters[COUNTER_INDEX["a_next"]] += 3
    counters[COUNTER_INDEX["a_overshoot"]] = 3
    verify_counters(counters, layout)
    counters[COUNTER_INDEX["head_overshoot"]] = -1
    with pytest.raises(QueueStateError, match="negative overshoot"):
        verify_counters(counters, layout)


def test_verify_counters_with_workers_requires_one_overshoot_of_each_per_worker():
    layout = _layout()  # 1024 tiles: 600 workers claim one A tile at a time
    assert tiles_per_claim(layout.n_tiles, 600) == 1
    counters = _good_counters(layout)
    for name in ("a_next", "fifo_head", "a_overshoot", "head_overshoot"):
        counters[COUNTER_INDEX[name]] += 600
    verify_counters(counters, layout, workers=600)
    counters[COUNTER_INDEX["a_next"]] += 1  # one more worker's A claim, or one worker claiming twice
    counters[COUNTER_INDEX["a_overshoot"]] += 1
    verify_counters(counters, layout)  # consistent without the worker count ...
    with pytest.raises(QueueStateError,
                       match="a_overshoot 601 and head_overshoot 600: expected one of each per worker, 600"):
        verify_counters(counters, layout, workers=600)  # ... but not with it


def test_pair_claims_are_counted_exactly():
    # 9 tiles (rows of 2, 4, 1, 2 tiles): 4 workers claim two A tiles at a time, 5 workers one.
    layout = build_layout(np.array([100, 200, 1, 70]), 64)
    assert layout.n_tiles == 9 and tiles_per_claim(9, 4) == TILES_PER_CLAIM == 2 and tiles_per_claim(9, 5) == 1
    # five claims in range (the last gets tile 8 alone), then one past the end per worker; C entries
    # of two tiles: rows of 2, 4, 1, 2 tiles give 1 + 2 + 1 + 1 entries after the 4 B tasks
    assert layout.fifo_entries(2) == 4 + 5 and layout.fifo_entries(1) == layout.fifo_capacity == 4 + 9
    assert layout.c_entry_tiles(2).tolist() == [0, 2, 4, 6, 7] and layout.c_entry_tiles(1).tolist() == list(range(9))
    expected = expected_counters(layout, 4, 4, claim=2)
    assert (expected["a_next"], expected["fifo_tail"], expected["fifo_head"]) == (2 * (5 + 4), 9, 9 + 4)
    counters = _good_counters(layout, 4, 4, claim=2)
    assert verify_counters(counters, layout, workers=4)["a_next"] == 18
    assert verify_counters(counters, layout)["a_next"] == 18  # the claim size a_next fits
    with pytest.raises(QueueStateError, match="a_next = 18, expected 13"):
        verify_counters(counters, layout, workers=4 + 1)  # 5 workers claim one tile at a time
    counters[COUNTER_INDEX["a_next"]] -= 1  # a claim of one tile where two were due
    with pytest.raises(QueueStateError, match="a_next = 17, expected 18"):
        verify_counters(counters, layout, workers=4)


def test_verify_counters_accepts_the_exact_state():
    layout = _layout()
    assert verify_counters(_good_counters(layout), layout) == expected_counters(layout)


@pytest.mark.parametrize("name, value", [("a_next", 1023), ("fifo_head", 1151), ("fifo_tail", 1153),
                                         ("c_done", 1000), ("error_task", 5), ("a_next", 1025),
                                         ("fifo_head", 1153)])
def test_verify_counters_rejects_a_wrong_value_and_names_it(name, value):
    layout = _layout()
    counters = _good_counters(layout)
    counters[COUNTER_INDEX[name]] = value
    expected = expected_counters(layout)[name]
    with pytest.raises(QueueStateError, match=f"{name} = {value}, expected {expected}"):
        verify_counters(counters, layout)


@pytest.mark.parametrize("code, task, waited, words", [
    (ERR_READY_TIMEOUT, -1, 17, ["error_code 1", "worker 3", "FIFO slot 17", "ready flag"]),
    (ERR_COMPLETION_TIMEOUT, -1, 1000, ["error_code 2", "completion", "c_done was 1000 of 1024"]),
    (ERR_INVALID_TASK, 99999, 40, ["error_code 3", "invalid task id 99999", "FIFO slot 40",
                                   "0..1151"]),
    (ERR_FIFO_OVERFLOW, 7, 1152, ["error_code 4", "task 7", "slot 1152", "capacity 1152"]),
])
def test_verify_counters_decodes_a_recorded_error(code, task, waited, words):
    layout = _layout()
    counters = _good_counters(layout)
    counters[ERROR_CODE], counters[ERROR_TASK] = code, task
    counters[ERROR_WAITED_ON], counters[ERROR_WORKER] = waited, 3
    with pytest.raises(QueueStateError) as info:
        verify_counters(counters, layout)
    for word in words:
        assert word in str(info.value)
    assert describe_error(counters, layout) in str(info.value)


def _good_queue(layout, claim=1):
    """A finished queue: B(r) then its C entries (``claim`` tiles each), row by row (one valid FIFO
    order); the slots past the entries as the reset left them."""
    order = []
    for r in range(layout.rows):
        order.append(r)
        first = int(layout.row_first_tile[r])
        order.extend(layout.rows + t for t in range(first, first + int(layout.row_tile_count[r]), claim))
    unused = layout.fifo_capacity - len(order)
    return {"counters": _good_counters(layout, claim=claim),
            "row_arrivals": layout.row_tile_count.copy(),
            "fifo_slots": np.array(order + [-1] * unused, dtype=np.int32)}


def test_verify_queue_accepts_a_valid_fifo():
    layout = build_layout([100, 300, 64], tile_elements=64)
    assert verify_queue(_good_queue(layout), layout)


def test_verify_queue_accepts_c_entries_of_two_tiles_and_rejects_them_with_single_tile_counters():
    layout = build_layout([100, 300, 64], tile_elements=64)  # rows of 2, 5, 1 tiles: 1 + 3 + 1 entries
    state = _good_queue(layout, claim=2)
    assert verify_queue(state, layout)  # the claim size the counters fit
    state["counters"] = _good_counters(layout, 4, 4, claim=2)  # 8 tiles, 4 workers: two tiles per entry
    assert verify_queue(state, layout, workers=4)
    state["counters"] = _good_counters(layout, 5, 5, claim=2)
    with pytest.raises(QueueStateError, match="fifo_tail = 8, expected 11"):
        verify_queue(state, layout, workers=5)  # 8 tiles, 5 workers: one tile per entry was due


def test_verify_queue_rejects_a_written_slot_past_the_entries_and_a_single_tile_entry_among_pairs():
    layout = build_layout([100, 300, 64], tile_elements=64)
    state = _good_queue(layout, claim=2)
    state["fifo_slots"][-1] = 0
    with pytest.raises(QueueStateError, match=r"FIFO slots past the 8 entries were written: \[10\]"):
        verify_queue(state, layout)
    state = _good_queue(layout, claim=2)
    state["fifo_slots"][list(state["fifo_slots"]).index(layout.rows + 2)] = layout.rows + 3  # C(3) heads no entry
    with pytest.raises(QueueStateError, match="not a permutation of all B task ids and C entry ids"):
        verify_queue(state, layout)


def test_verify_queue_rejects_a_c_task_before_its_b():
    layout = build_layout([100, 300, 64], tile_elements=64)
    state = _good_queue(layout)
    state["fifo_slots"][[0, 1]] = state["fifo_slots"][[1, 0]]  # C(0) before B(0)
    with pytest.raises(QueueStateError, match=r"C tiles \[0\] published before their row's B"):
        verify_queue(state, layout)


def test_verify_queue_rejects_a_duplicate_task_an_unpublished_slot_and_wrong_arrivals():
    layout = build_layout([100, 300, 64], tile_elements=64)
    state = _good_queue(layout)
    entries = layout.fifo_entries(1)
    state["fifo_slots"][entries - 1] = state["fifo_slots"][0]
    state["row_arrivals"][1] = 4
    with pytest.raises(QueueStateError) as info:
        verify_queue(state, layout)
    text = str(info.value)
    assert "not a permutation" in text and "row_arrivals[1] = 4, expected 5" in text
    state = _good_queue(layout)
    state["fifo_slots"][2] = -1  # reserved, never published
    with pytest.raises(QueueStateError, match=r"FIFO slots never published: \[2\]"):
        verify_queue(state, layout)


def test_the_twin_lays_out_the_counters_as_the_queue_module_does():
    # reference_cu/persistent.cu declares the counter words in its own enum; a twin that disagrees
    # would reset, claim and wait on other words than the Numba kernel (and the host's checks).
    import os
    import re
    source = open(os.path.join(os.path.dirname(__file__), "..", "..", "reference_cu", "persistent.cu")).read()
    enum = source[source.index("COUNTER_LINE_WORDS = 32"):]
    enum = enum[:enum.index("};")]
    values = {}
    for name, expr in re.findall(r"(\w+) = ([^,\n]+)", enum):
        values[name] = eval(expr, {}, dict(values))  # the enum's own names and integer arithmetic
    twin = {"a_next": "A_NEXT", "fifo_head": "FIFO_HEAD", "fifo_tail": "FIFO_TAIL", "c_done": "C_DONE",
            "error_code": "ERROR_CODE", "error_task": "ERROR_TASK", "error_waited_on": "ERROR_WAITED_ON",
            "error_worker": "ERROR_WORKER", "a_overshoot": "A_OVERSHOOT", "head_overshoot": "HEAD_OVERSHOOT",
            "grid_barrier": "GRID_BARRIER"}
    assert set(twin) == set(COUNTER_INDEX)
    assert {name: values[twin[name]] for name in COUNTER_INDEX} == COUNTER_INDEX
    assert values["COUNTER_SLOTS"] == COUNTER_SLOTS
