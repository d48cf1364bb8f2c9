"""The DAG schedule model (tiled/schedule_model.py, bench/dag_model.py): hand-computed schedules, checks, command."""

from pathlib import Path

import numpy as np
import pytest

from bench.dag_model import main
from numba_softmax.tiled.schedule_model import PAIR_STEP_US, calibrate, simulate
from numba_softmax.cases import experiment_b_row_lengths
from numba_softmax.tiled import build_layout

TWO_ROWS = build_layout(np.array([1024, 1024]))  # one tile each
DURATIONS = {"A": 1.0, "B": 2.0, "C": 3.0}
RUN = Path(__file__).resolve().parents[2] / "results" / "experiment_B"


def test_one_worker_runs_the_policy_in_order():
    # the claim of both A tiles (1 + 0.03 + 1), B(0) and B(1) (2 each, published together), then the C
    # entries of row 0 and row 1 (3 each, each published when its B ended): 12.03 us, never idle
    r = simulate(TWO_ROWS, 1, DURATIONS, decision_us=0.0, handoff_us=0.0)
    assert r.span_us == pytest.approx(2 + PAIR_STEP_US + 4 + 6) and r.busy == pytest.approx(1.0)
    assert r.tasks == 6
    # a decision before each of the 5 things it runs
    assert simulate(TWO_ROWS, 1, DURATIONS, 0.5, 0.0).span_us == pytest.approx(12.03 + 5 * 0.5)
    # a hand-off of 1 us: B(0) waits for it; after that each C is visible before the worker is free
    assert simulate(TWO_ROWS, 1, DURATIONS, 0.0, 1.0).span_us == pytest.approx(12.03 + 1)


def test_claims_of_one_tile_let_a_ready_b_and_c_go_first():
    # A(0), then B(0) and C(0) as soon as they are published (ready work first), then A(1), B(1), C(1)
    r = simulate(TWO_ROWS, 1, DURATIONS, 0.0, 0.0, a_claim=1)
    assert r.span_us == pytest.approx(2 * (1 + 2 + 3))


def test_a_second_worker_takes_the_other_row():
    # worker 0 claims both A tiles (a claim is two); worker 1 finds nothing to claim until they end,
    # then the two workers run B(0) and B(1), then C(0) and C(1), side by side: 2.03 + 2 + 3
    r = simulate(TWO_ROWS, 2, DURATIONS, 0.0, 0.0)
    assert r.span_us == pytest.approx(2 + PAIR_STEP_US + 2 + 3)


def test_faster_decisions_never_lengthen_a_real_case():
    layout = build_layout(experiment_b_row_lengths("ragged-128"))
    spans = [simulate(layout, 1024, {"A": 1.2, "B": 1.2, "C": 1.4}, d, 0.7).span_us for d in (0.0, 0.5, 1.0, 2.0)]
    assert spans == sorted(spans) and spans[0] < spans[-1]


def test_calibration_finds_the_decision_cost_of_a_span():
    layout = build_layout(experiment_b_row_lengths("ragged-128"))
    target = simulate(layout, 1024, DURATIONS, 1.3, 0.7).span_us
    found = calibrate(layout, 1024, DURATIONS, 0.7, target)
    assert simulate(layout, 1024, DURATIONS, found, 0.7).span_us == pytest.approx(target, rel=1e-3)


@pytest.mark.parametrize("workers, decision, handoff", [(0, 0.0, 0.0), (1, -1.0, 0.0), (1, 0.0, -0.1)])
def test_bad_inputs_are_refused(workers, decision, handoff):
    with pytest.raises(ValueError, match="workers"):
        simulate(TWO_ROWS, workers, DURATIONS, decision, handoff)


def test_the_command_on_the_committed_run(tmp_path, capsys):
    if not (RUN / "traces.jsonl").is_file():
        pytest.skip("no committed Experiment B run with traces in this checkout")
    out = tmp_path / "model.md"
    assert main(["--run", str(RUN), "--decisions", "0.2,1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "ragged-2048, 1188 workers" in text and "(the trace)" in text
    assert out.read_text() == text
    # a variant: claims of four A tiles, spans modelled against the traced kernel's calibration
    assert main(["--run", str(RUN), "--decisions", "1", "--a-claim", "4"]) == 0
    assert "A claims of 4 tiles" in capsys.readouterr().out
    # it writes new files only, and knows the protocol's cases
    with pytest.raises(SystemExit) as stop:
        main(["--run", str(RUN), "--out", str(out)])
    assert stop.value.code == 2
    with pytest.raises(SystemExit) as stop:
        main(["--run", str(RUN), "--case", "balanced-7"])
    assert stop.value.code == 2
