"""Real traces of every scheduler on the GPU, and a misordered DAG caught by the checks."""

import pytest

from numba_softmax.cases import EXPERIMENT_B_CASES
from numba_softmax.fixtures import packed_fixture
from numba_softmax.oracle import check_packed
from numba_softmax.traces import check_trace

CASES = [EXPERIMENT_B_CASES[1], EXPERIMENT_B_CASES[4]]  # ragged-128, balanced-2048


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_real_trace_passes_its_checks(case, scheduler, stream, evidence):
    from numba_softmax import tiled_softmax
    lengths = case.row_lengths()
    values = packed_fixture("random", lengths)
    result = tiled_softmax(values, lengths, scheduler=scheduler, stream=stream, trace=True)
    assert check_packed(result.out, values, lengths).passed
    report = check_trace(result.trace, result.layout, scheduler)
    evidence.setdefault("traces", {})[f"{case.name}/{scheduler}"] = report.record()
    assert report.passed, report.problems
    assert report.sms_seen > 1  # tasks really ran on several SMs (read from %smid)


def test_misordered_dag_trace_is_rejected(stream):
    from numba_softmax import tiled_softmax
    from numba_softmax.kernels.persistent.controls import negative_control_kernel
    lengths = EXPERIMENT_B_CASES[1].row_lengths()
    values = packed_fixture("random", lengths)
    result = tiled_softmax(values, lengths, scheduler="dag", stream=stream, trace=True, verify=False,
                           kernel=negative_control_kernel("first_producer_publishes_b", trace=True))
    report = check_trace(result.trace, result.layout, "dag")
    assert any("B started before all A tiles of its row ended" in p for p in report.problems)
