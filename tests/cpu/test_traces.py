"""Trace checks on synthetic traces, with negative controls (no GPU needed)."""

import json

import numpy as np
import pytest

from numba_softmax.kernels.tracing import TRACE_END, TRACE_FIELDS, TRACE_START, TRACE_VISITS
from numba_softmax.tiled import build_layout
from numba_softmax.traces import check_trace, plot_timeline, read_csv, time_breakdown, write_csv, write_perfetto

LAYOUT = build_layout(np.array([2048, 1024, 3000]))  # tiles: 2 + 1 + 3 = 6; rows 3


def phased_trace(layout=LAYOUT):
    """A correct full-phase trace: all A, then all B, then all C (10 ns apart)."""
    n, r = layout.n_tiles, layout.rows
    trace = np.zeros((2 * n + r, TRACE_FIELDS), dtype=np.int64)
    clock = 1000
    for task in range(2 * n + r):
        trace[task, TRACE_START], trace[task, TRACE_END] = clock, clock + 5
        trace[task, TRACE_VISITS] = 1
        trace[task, 2] = task % 3        # sm
        trace[task, 3] = task % 2        # worker
        clock += 10
    return trace


def b_task(r):
    return LAYOUT.n_tiles + r


def c_task(t):
    return LAYOUT.n_tiles + LAYOUT.rows + t


@pytest.mark.parametrize("scheduler", ["separate", "phased", "dag"])
def test_correct_full_phase_trace_passes(scheduler):
    report = check_trace(phased_trace(), LAYOUT, scheduler)
    assert report.passed, report.problems
    assert report.early_b == report.early_c == 0


def test_c_before_its_b_is_rejected_and_named():
    trace = phased_trace()
    trace[c_task(5), TRACE_START] = trace[b_task(2), TRACE_END] - 1  # tile 5 belongs to row 2
    report = check_trace(trace, LAYOUT, "dag")
    assert not report.passed
    assert any("C started before its row's B ended: C(tile 5)" in p for p in report.problems)


def test_b_before_the_last_a_of_its_row_is_rejected():
    trace = phased_trace()
    trace[b_task(2), TRACE_START] = trace[5, TRACE_END] - 1  # A(tile 5) is row 2's last tile
    report = check_trace(trace, LAYOUT, "dag")
    assert any("B started before all A tiles of its row ended: B(row 2)" in p for p in report.problems)


def test_missing_task_is_rejected_and_named():
    trace = phased_trace()
    trace[3] = 0
    report = check_trace(trace, LAYOUT, "separate")
    assert any(p.startswith("never visited: A(tile 3)") for p in report.problems)


def test_task_visited_twice_is_rejected_and_named():
    trace = phased_trace()
    trace[b_task(1), TRACE_VISITS] = 2
    report = check_trace(trace, LAYOUT, "phased")
    assert any("visited more than once" in p and "B(row 1)" in p for p in report.problems)


def test_dag_early_starts_are_counted_not_rejected_but_phased_rejects_them():
    trace = phased_trace()
    # row 1 (tile 2 only) finishes early: its B and C run before tiles 3..5 of row 2 end.
    last_a = trace[5, TRACE_END]
    trace[b_task(1), TRACE_START:TRACE_END + 1] = (trace[2, TRACE_END] + 1, trace[2, TRACE_END] + 2)
    trace[c_task(2), TRACE_START:TRACE_END + 1] = (trace[2, TRACE_END] + 3, trace[2, TRACE_END] + 4)
    assert trace[c_task(2), TRACE_START] < last_a
    dag = check_trace(trace, LAYOUT, "dag")
    assert dag.passed and (dag.early_b, dag.early_c) == (1, 1)
    phased = check_trace(trace, LAYOUT, "phased")
    assert not phased.passed
    assert any("full-phase ordering broken: B started before the last A ended: B(row 1)" in p
               for p in phased.problems)


def test_wrong_shape_is_an_error():
    with pytest.raises(ValueError, match="expected"):
        check_trace(np.zeros((3, TRACE_FIELDS), dtype=np.int64), LAYOUT, "dag")


def test_csv_round_trip_and_perfetto_json(tmp_path):
    trace = phased_trace()
    write_csv(tmp_path / "t.csv", trace, LAYOUT)
    kinds, data = read_csv(tmp_path / "t.csv")
    assert np.array_equal(data, trace) and kinds[:6] == ["A"] * 6 and kinds[6:9] == ["B"] * 3
    write_perfetto(tmp_path / "t.json", trace, LAYOUT, "dag")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == len(trace) and spans[0]["ts"] == 0.0 and spans[0]["dur"] == 0.005
    assert {e["cat"] for e in spans} == {"A", "B", "C"}


def test_timeline_png(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib (the plots extra) not installed")
    path = plot_timeline(tmp_path / "t.png", phased_trace(), LAYOUT, "phased", "synthetic",
                         check_trace(phased_trace(), LAYOUT, "phased"))
    data = (tmp_path / "t.png").read_bytes()
    assert path is not None and data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


# ---- where the time goes -------------------------------------------------------------------

def test_breakdown_of_a_dag_trace_per_kind_transition_and_worker():
    # phased_trace: task k runs on worker k % 2 from 1000 + 10k for 5 ns, so each worker's
    # consecutive tasks are 20 ns apart: 5 ns of task, 15 ns of gap (never the 5 ns between
    # two different workers' tasks).
    b = time_breakdown(phased_trace(), LAYOUT, "dag")
    assert {k: d["n"] for k, d in b["duration_us"].items()} == {"A": 6, "B": 3, "C": 6}
    assert all(d["median"] == pytest.approx(0.005) for d in b["duration_us"].values())
    # worker 0: A A A B B C C C; worker 1: A A A B C C C
    assert {k: g["n"] for k, g in b["gap_us"].items()} == {"A->A": 4, "A->B": 2, "B->B": 1, "B->C": 2, "C->C": 4}
    assert all(g["median"] == pytest.approx(0.015) and g["p10"] == pytest.approx(0.015) for g in b["gap_us"].values())
    # per worker: each transition's gaps summed and shared over the 2 workers (A->A: 4 gaps of 15 ns)
    assert b["gap_us"]["A->A"]["per_worker"] == pytest.approx(4 * 0.015 / 2)
    assert sum(g["per_worker"] for g in b["gap_us"].values()) == pytest.approx(13 * 0.015 / 2)  # 13 steps
    assert b["busy_fraction"] == pytest.approx((40 / 145 + 35 / 125) / 2)
    assert b["phase_us"]["A"] == {"first_start": 0.0, "last_end": pytest.approx(0.055)}
    assert b["phase_us"]["C"]["last_end"] == pytest.approx(0.145)


def _reuse_by_hand(trace, layout=LAYOUT):
    """Per tile: C start - A end (ns), and the bytes of every A or C task that started strictly between."""
    n, rows = layout.n_tiles, layout.rows
    lags, between = [], []
    for t in range(n):
        a_end, c_start = trace[t, TRACE_END], trace[n + rows + t, TRACE_START]
        lags.append(c_start - a_end)
        between.append(sum(4 * int(layout.tile_len[u]) for u in range(n) for task in (u, n + rows + u)
                           if a_end < trace[task, TRACE_START] < c_start))
    return np.array(lags) * 1e-3, np.array(between) / 2 ** 20


def test_reuse_distance_of_each_tile_from_its_a_to_its_c():
    # phased_trace: A(t) ends at 1005 + 10t, C(t) starts at 1090 + 10t: 85 ns later for every tile. Meanwhile
    # A(t+1..5) read their tiles and C(0..t-1) wrote theirs: every tile's bytes but its own (B brings none).
    trace = phased_trace()
    reuse = time_breakdown(trace, LAYOUT, "phased")["reuse"]
    lags, between = _reuse_by_hand(trace)
    assert reuse["lag_us"]["n"] == 6 and reuse["lag_us"]["median"] == pytest.approx(0.085)
    assert sorted(between) == pytest.approx(sorted(4 * (int(LAYOUT.tile_len.sum()) - int(k)) / 2 ** 20
                                                   for k in LAYOUT.tile_len))
    for key, values in (("lag_us", lags), ("between_mib", between)):
        for q, p in (("median", 50), ("p10", 10), ("p90", 90)):
            assert reuse[key][q] == pytest.approx(np.percentile(values, p))
    # a DAG that runs row 1's C right after its A: nothing comes between for tile 2
    trace[c_task(2), TRACE_START] = trace[2, TRACE_END] + 1
    dag = time_breakdown(trace, LAYOUT, "dag")["reuse"]
    lags, between = _reuse_by_hand(trace)
    assert between[2] == 0.0 and lags[2] == pytest.approx(0.001)
    for key, values in (("lag_us", lags), ("between_mib", between)):
        assert dag[key]["p10"] == pytest.approx(np.percentile(values, 10))
        assert dag[key]["median"] == pytest.approx(np.median(values))
    # no tile with both tasks traced: nothing to say
    trace[LAYOUT.n_tiles + LAYOUT.rows:, TRACE_VISITS] = 0
    assert time_breakdown(trace, LAYOUT, "separate")["reuse"] is None


def test_breakdown_leaves_out_what_has_no_meaning():
    separate = time_breakdown(phased_trace(), LAYOUT, "separate")  # one task per block and launch
    assert separate["gap_us"] == {} and separate["busy_fraction"] is None
    assert separate["duration_us"]["B"]["n"] == 3
    phased = time_breakdown(phased_trace(), LAYOUT, "phased")  # B tasks are warp-level there
    assert {k: g["n"] for k, g in phased["gap_us"].items()} == {"A->A": 4, "A->C": 2, "C->C": 4}
    # across the B phase: worker 0 from A(4) (ends 1045) to C(10) (1100), worker 1 from A(5) (1055) to C(9) (1090)
    assert phased["gap_us"]["A->C"]["median"] == pytest.approx((0.055 + 0.035) / 2)


def test_breakdown_table_in_the_summary():
    from bench.trace_step import trace_summary_lines
    record = dict(check_trace(phased_trace(), LAYOUT, "dag").record(), case="tiny", scheduler="dag", workers=2,
                  breakdown=time_breakdown(phased_trace(), LAYOUT, "dag"), csv="t.csv", perfetto="t.json", png=None)
    text = "\n".join(trace_summary_lines([record]))
    assert "### Where the time goes (trace builds)" in text
    assert "| tiny | dag | 0.01 (0.01) | 0.01 (0.01) | 0.01 (0.01) | A->A: 0.01 0.01-0.01, 4 (0.0 per worker);" in text
    assert "| 0.28 | 0.1 | 0.1 | 0.1 0.1-0.1 | 0.0 0.0-0.0 |" in text  # reuse: 85 ns, ~0.02 MiB


def test_phased_breakdown_records_each_workers_last_a_end():
    # phased_trace: worker 0 runs A(0), A(2), A(4) (its last ends at 1045), worker 1 A(1), A(3), A(5) (1055);
    # the earliest start is 1000.
    b = time_breakdown(phased_trace(), LAYOUT, "phased")
    assert b["a_end_us"]["n"] == 2
    assert b["a_end_us"]["median"] == pytest.approx(0.050)
    assert b["a_end_us"]["p10"] == pytest.approx(0.046) and b["a_end_us"]["p90"] == pytest.approx(0.054)
    # the other schedulers have no passes to split
    assert "a_end_us" not in time_breakdown(phased_trace(), LAYOUT, "dag")
    assert "a_end_us" not in time_breakdown(phased_trace(), LAYOUT, "separate")


def test_worker_last_a_end_reads_the_same_from_the_csv(tmp_path):
    from numba_softmax.traces import worker_last_a_end
    trace = phased_trace()
    trace[4, TRACE_END] += 400  # worker 0's last A tile straggles
    write_csv(tmp_path / "t.csv", trace, LAYOUT)
    from_csv = worker_last_a_end(*read_csv(tmp_path / "t.csv"))
    assert from_csv == time_breakdown(trace, LAYOUT, "phased")["a_end_us"]
    assert from_csv["median"] == pytest.approx((0.445 + 0.055) / 2)
    # an unvisited task does not count
    trace[:LAYOUT.n_tiles, TRACE_VISITS] = 0
    write_csv(tmp_path / "none.csv", trace, LAYOUT)
    assert worker_last_a_end(*read_csv(tmp_path / "none.csv")) is None


def _phased_record(a_end=True):
    phase = {"A": {"first_start": 0.0, "last_end": 24.35}, "B": {"first_start": 26.50, "last_end": 29.41},
             "C": {"first_start": 31.90, "last_end": 65.82}}
    breakdown = {"phase_us": phase}
    if a_end:
        breakdown["a_end_us"] = {"n": 1188, "median": 21.76, "p10": 20.96, "p90": 22.43}
    return {"case": "ragged-2048", "scheduler": "phased", "breakdown": breakdown, "csv": "traces/x.csv"}


def test_between_the_passes_table_splits_the_phased_gap():
    from bench.trace_step import passes_lines
    text = "\n".join(passes_lines([_phased_record()]))
    assert "### Between the passes (phased)" in text
    # stragglers 24.35 - 21.76, barriers 26.50 - 24.35 and 31.90 - 29.41, B 2.91, C 33.92, last A -> first C 10.14
    assert "| ragged-2048 | 21.76 | 24.35 | 2.59 | 2.15 | 2.91 | 2.49 | 33.92 | 10.14 |" in text
    # without the workers' A ends: the columns that need them say so
    assert "| ragged-2048 | - | 24.35 | - | 2.15 | 2.91 | 2.49 | 33.92 | - |" in "\n".join(
        passes_lines([_phased_record(a_end=False)]))
    # no phased trace, no table
    assert passes_lines([dict(_phased_record(), scheduler="separate")]) == []


def _sim_run_folder(tmp_path, trace_kind="phased", digest=None):
    """A run folder holding one traced case, the simulator's stand-in, as ``bench`` writes it."""
    from numba_softmax.cases import EXPERIMENT_B_SIM_CASES, TILE_ELEMENTS, row_lengths_digest
    name, lengths = EXPERIMENT_B_SIM_CASES[0]
    layout = build_layout(np.asarray(lengths, dtype=np.int64), TILE_ELEMENTS)
    (tmp_path / "traces").mkdir()
    trace = phased_trace(layout)
    write_csv(tmp_path / "traces" / "t.csv", trace, layout)
    record = {"case": name, "scheduler": trace_kind, "workers": 2, "csv": "traces/t.csv",
              "breakdown": {"phase_us": {}, "gap_us": {}}}  # as an older run recorded it
    layouts = [{"case": name, "tile_elements": TILE_ELEMENTS,
                "row_lengths_sha": digest or row_lengths_digest(np.asarray(lengths, dtype=np.int64))}]
    return record, layouts, trace, layout


def test_report_recomputes_a_breakdown_from_the_run_folders_csv(tmp_path):
    from bench.trace_step import current_breakdowns
    record, layouts, trace, layout = _sim_run_folder(tmp_path)
    [current] = current_breakdowns([record], layouts, tmp_path)
    assert current["breakdown"] == time_breakdown(trace, layout, "phased", 2)
    assert "a_end_us" in current["breakdown"] and record["breakdown"] == {"phase_us": {}, "gap_us": {}}


@pytest.mark.parametrize("spoil", ["digest", "case", "csv", "layout"])
def test_report_keeps_the_recorded_breakdown_when_the_folder_cannot_reproduce_it(tmp_path, spoil):
    from bench.trace_step import current_breakdowns
    record, layouts, _, _ = _sim_run_folder(tmp_path, digest="0" * 16 if spoil == "digest" else None)
    if spoil == "case":
        record = dict(record, case="tiny")
    if spoil == "csv":
        (tmp_path / "traces" / "t.csv").unlink()
    if spoil == "layout":
        layouts = []
    assert current_breakdowns([record], layouts, tmp_path) == [record]


def _flat(value, prefix=""):
    """A nested dict of numbers as one flat dict (pytest.approx compares flat ones)."""
    if not isinstance(value, dict):
        return {prefix: value}
    return {k: v for key, item in value.items() for k, v in _flat(item, f"{prefix}/{key}").items()}


def test_committed_run_breakdowns_are_reproduced_from_their_csvs():
    """The committed H200 run's traces, analysed again from its CSVs: the same durations, phases,
    busy fractions and reuse as recorded at run time, and the DAG's A->A steps split, not lost."""
    from bench.artifacts import read_records
    from bench.trace_step import current_breakdowns
    from pathlib import Path
    folder = Path(__file__).resolve().parents[2] / "results" / "experiment_B"
    records = read_records(folder, "traces.jsonl") if folder.is_dir() else None
    if not records:
        pytest.skip("no committed Experiment B traces in this checkout")
    current = current_breakdowns(records, read_records(folder, "layouts.jsonl"), folder)
    # the committed copy keeps one task CSV (omitted.txt lists the others); a record without one keeps its breakdown
    kept = [(old, new) for old, new in zip(records, current, strict=True) if (folder / old["csv"]).is_file()]
    assert kept, "no committed task CSV"
    for old, new in kept:
        assert new["breakdown"] is not old["breakdown"], old["case"]  # recomputed
        for key in ("duration_us", "phase_us", "reuse", "busy_fraction"):
            assert _flat(new["breakdown"][key]) == pytest.approx(_flat(old["breakdown"][key])), (old["case"], key)
        old_gaps, new_gaps = old["breakdown"]["gap_us"], new["breakdown"]["gap_us"]
        for kind in ("A->A", "C->C"):
            # A run recorded before the split has one A->A (C->C) of both steps; a later one has them apart.
            recorded = sum(old_gaps[k]["n"] for k in old_gaps if k.startswith(kind))
            split = sum(new_gaps[k]["n"] for k in new_gaps if k.startswith(kind))
            assert split == recorded, (old["case"], old["scheduler"], kind)


def _dag_trace_with_pairs():
    """Worker 0: A0 A1 | A2 A3 | C3 C4 | C5; worker 1: A4 A5 | B0 B1 B2 | C0 C1 | C2 (LAYOUT's rows hold tiles
    0-1, 2 and 3-5, so C entries of two are (0, 1), (2), (3, 4), (5)); every step 10 ns after the last end."""
    n, rows = LAYOUT.n_tiles, LAYOUT.rows
    trace = np.zeros((2 * n + rows, TRACE_FIELDS), dtype=np.int64)
    plan = {0: [0, 1, 2, 3, c_task(3), c_task(4), c_task(5)],
            1: [4, 5, b_task(0), b_task(1), b_task(2), c_task(0), c_task(1), c_task(2)]}
    for worker, tasks in plan.items():
        clock = 1000
        for task in tasks:
            trace[task, TRACE_START], trace[task, TRACE_END] = clock, clock + 5
            trace[task, TRACE_VISITS], trace[task, 3] = 1, worker
            clock += 15
    return trace


def test_dag_breakdown_keeps_the_steps_inside_a_claim_or_entry_apart():
    b = time_breakdown(_dag_trace_with_pairs(), LAYOUT, "dag", workers=2)  # 6 tiles >= 2 x 2: pairs
    counts = {k: g["n"] for k, g in b["gap_us"].items()}
    # in claim: A0->A1, A2->A3, A4->A5; in entry: C3->C4, C0->C1. Between: A1->A2 (two claims), C4->C5 (C5 starts
    # an entry: 5 - 3 is odd) and C1->C2 (another row).
    assert counts == {"A->A in claim": 3, "A->A": 1, "A->C": 1, "C->C in entry": 2, "C->C": 2, "A->B": 1,
                      "B->B": 2, "B->C": 1}
    # the launched count decides: with 4 workers a claim is one tile, so no step is inside one
    single = time_breakdown(_dag_trace_with_pairs(), LAYOUT, "dag", workers=4)
    assert {k: g["n"] for k, g in single["gap_us"].items()}["A->A"] == 4
    assert not any("in " in k for k in single["gap_us"])
    # without the count, the workers seen in the trace (2) stand for it
    assert time_breakdown(_dag_trace_with_pairs(), LAYOUT, "dag")["gap_us"].keys() == b["gap_us"].keys()
