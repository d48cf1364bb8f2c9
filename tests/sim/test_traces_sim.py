"""Trace builds in the simulator (one worker; timestamps are the host clock there)."""

import numpy as np
import pytest

from numba_softmax import tiled_softmax
from numba_softmax.fixtures import packed_fixture
from numba_softmax.kernels.persistent.controls import negative_control_kernel
from numba_softmax.traces import check_trace

LENGTHS = np.array([300, 90, 200])
TILE = 128


@pytest.fixture(scope="module")
def values():
    return packed_fixture("random", LENGTHS)


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag"])
def test_trace_build_covers_every_task_in_order(values, scheduler):
    result = tiled_softmax(values, LENGTHS, scheduler=scheduler, workers=None if scheduler == "separate" else 1,
                           tile_elements=TILE, trace=True)
    report = check_trace(result.trace, result.layout, scheduler)
    assert report.passed, report.problems
    assert report.tasks == 2 * result.layout.n_tiles + result.layout.rows


def test_trace_build_computes_the_same_bits_as_the_performance_build(values):
    traced = tiled_softmax(values, LENGTHS, scheduler="dag", workers=1, tile_elements=TILE, trace=True)
    plain = tiled_softmax(values, LENGTHS, scheduler="dag", workers=1, tile_elements=TILE)
    assert np.array_equal(traced.out, plain.out) and plain.trace is None


def test_misordered_dag_is_caught_by_the_trace_checks(values):
    bad = negative_control_kernel("first_producer_publishes_b", trace=True)
    result = tiled_softmax(values, LENGTHS, scheduler="dag", workers=1, tile_elements=TILE, trace=True,
                           verify=False, kernel=bad)
    report = check_trace(result.trace, result.layout, "dag")
    assert any("B started before all A tiles of its row ended" in p for p in report.problems)
