"""--resume: refusal on a different setup, skipping completed cases, dropping a partial case.

Pure logic on synthetic run folders, plus the CLI loop with a fake plan and a fake
run_case (no GPU, no Numba kernels).
"""

import argparse
import copy
import json

import pytest

from bench import resume
from bench.artifacts import RunFolder
from numba_softmax.cases import EXPERIMENT_A_SHAPES, EXPERIMENT_B_CASES
from numba_softmax.oracle import AcceptanceError

CASES = ["1x128", "32x1024", "7x781"]


def _metadata(**overrides):
    meta = {"git": {"commit": "a" * 40, "dirty": False}, "backend": "gpu",
            "device": {"name": "NVIDIA H100 80GB HBM3", "driver_version": 13000},
            "cuda_runtime_version": 13030, "packages": {"numba": "0.68.0", "numba-cuda": "0.30.4", "numpy": "2.4.6"},
            "python": "3.12.3", "experiment": "A", "seed": 20261019, "case_names": list(CASES),
            "options": {"expect_device": "H100", "no_cudnn": False, "no_arrays": False},
            "protocol": resume.protocol_constants(), "started_utc": "t0", "argv": ["--experiment", "A"]}
    meta.update(overrides)
    return meta


# ---------------------------------------------------------------- compatibility

def test_same_setup_is_accepted():
    resume.check_compatible(_metadata(), _metadata(started_utc="t1", argv=["--resume", "x"]))


@pytest.mark.parametrize("change, named", [
    (lambda m: m["git"].update(commit="b" * 40), "git commit"),
    (lambda m: m["device"].update(name="NVIDIA H200"), "device name"),
    (lambda m: m["device"].update(driver_version=12080), "CUDA driver version"),
    (lambda m: m.update(experiment="B"), "experiment"),
    (lambda m: m.update(seed=1), "seed"),
    (lambda m: m.update(case_names=CASES[:2]), "case list"),
    (lambda m: m["protocol"].update(rounds=20), "protocol constants"),
    (lambda m: m["options"].update(no_cudnn=True), "options"),
    (lambda m: m["packages"].update(numba="0.61.0"), "numba version"),
    (lambda m: m.update(backend="simulator"), "backend"),
])
def test_a_different_setup_is_refused_and_named(change, named):
    current = _metadata()
    change(current)
    with pytest.raises(resume.ResumeRefused) as info:
        resume.check_compatible(_metadata(), current)
    assert named in str(info.value)


def test_unrelated_package_versions_do_not_refuse():
    current = _metadata()
    current["packages"]["matplotlib"] = "9.9"
    resume.check_compatible(_metadata(), current)


@pytest.mark.parametrize("git", [{"commit": None, "dirty": None}, {"commit": "a" * 40, "dirty": True}])
def test_unknown_or_dirty_code_is_refused(git):
    with pytest.raises(resume.ResumeRefused, match="commit|uncommitted"):
        resume.check_compatible(_metadata(), _metadata(git=git))


def test_folder_without_metadata_is_refused():
    with pytest.raises(resume.ResumeRefused, match="no metadata.json"):
        resume.check_compatible(None, _metadata())


def test_cudnn_difference_after_plan_is_refused():
    with pytest.raises(resume.ResumeRefused, match="cuDNN"):
        resume.check_compatible_after_plan({"cudnn": {"version": 91002}}, {"cudnn": {"version": 91900}})


def test_planned_case_names_follow_the_plans_selection():
    gpu_a = resume.planned_case_names("A", argparse.Namespace(shapes=None), gpu=True)
    assert gpu_a == [f"{r}x{c}" for r, c in EXPERIMENT_A_SHAPES]
    assert resume.planned_case_names("A", argparse.Namespace(shapes="7x781,1x128"), gpu=True) == ["7x781", "1x128"]
    # Experiment B keeps the plan's order, whatever order --cases lists
    chosen = resume.planned_case_names("B", argparse.Namespace(cases="ragged-2048,balanced-128"), gpu=True)
    assert chosen == [c.name for c in EXPERIMENT_B_CASES if c.name in ("ragged-2048", "balanced-128")]
    assert chosen == ["balanced-128", "ragged-2048"]


# ---------------------------------------------------------------- synthetic folders

def _folder(tmp_path, *, torn=False, failed_by=None):
    """1x128 completed; 32x1024 interrupted mid-case (partial records, arrays, DOT); 7x781 never started."""
    run = RunFolder(tmp_path / "run")
    run.write_json("metadata.json", _metadata())
    for case in ("1x128", "32x1024"):
        for fixture in ("constant", "dominant"):
            run.append_jsonl("cases.jsonl", {"experiment": "A", "case": case, "fixture": fixture, "passed": True})
        run.append_jsonl("graphs.jsonl", {"experiment": "A", "case": case, "variant": "fused"})
        run.save_array(f"arrays/A/{case}/input_constant.npy", [1.0, 2.0])
        run.write_text(f"graphs/A_{case}_fused.dot", "digraph {}\n")
        if case == "1x128":
            run.append_jsonl("timings.jsonl", {"case": case, "round": 0})
            run.append_jsonl("progress.jsonl", {"case": case, "completed": True})
    if failed_by:
        run.append_jsonl("progress.jsonl", {"case": "32x1024", "completed": False, "stopped_by": failed_by})
    if torn:
        with open(run.path_of("cases.jsonl"), "ab") as f:
            f.write(b'{"experiment": "A", "case": "32x10')
    return run


def _lines(path):
    return path.read_bytes().splitlines(keepends=True)


def test_plan_skips_completed_and_redoes_the_interrupted_case(tmp_path):
    run = _folder(tmp_path)
    plan = resume.plan_resume(run.path, CASES)
    assert plan.completed == ["1x128"]
    assert plan.interrupted == ["32x1024"]
    assert plan.to_run == ["32x1024", "7x781"]


def test_a_required_check_failure_is_never_resumed(tmp_path):
    run = _folder(tmp_path, failed_by=resume.STOPPED_BY_REQUIRED_CHECK)
    with pytest.raises(resume.ResumeRefused, match="failed a required check"):
        resume.plan_resume(run.path, CASES)


def test_an_error_stop_is_redone(tmp_path):
    run = _folder(tmp_path, failed_by="error")
    assert resume.plan_resume(run.path, CASES).interrupted == ["32x1024"]


def test_progress_naming_an_unknown_case_is_refused(tmp_path):
    run = _folder(tmp_path)
    with pytest.raises(resume.ResumeRefused, match="not in the case list"):
        resume.plan_resume(run.path, ["32x1024", "7x781"])


def test_drop_partial_case_keeps_completed_records_and_backs_up(tmp_path):
    run = _folder(tmp_path, torn=True)
    before = {name: run.path_of(name).read_bytes() for name in ("cases.jsonl", "graphs.jsonl", "timings.jsonl",
                                                                  "progress.jsonl")}
    plan = resume.plan_resume(run.path, CASES)
    assert plan.torn_files == ["cases.jsonl"]
    done = resume.drop_partial_cases(run.path, plan.interrupted, "A", stamp="S")
    backup = run.path / "resume_backup" / "S"
    # every rewritten file's original is in the backup, byte for byte
    assert set(done["rewritten"]) == {"cases.jsonl", "graphs.jsonl"}
    for name in done["rewritten"]:
        assert (backup / name).read_bytes() == before[name]
    assert done["rewritten"]["cases.jsonl"] == {"dropped_records": 2, "dropped_torn_lines": 1}
    # the completed case's lines are kept exactly, the partial case's are gone
    kept = _lines(run.path_of("cases.jsonl"))
    assert kept == [line for line in before["cases.jsonl"].splitlines(keepends=True) if b'"1x128"' in line]
    assert all(json.loads(line)["case"] == "1x128" for line in kept)
    # untouched files are untouched
    assert run.path_of("timings.jsonl").read_bytes() == before["timings.jsonl"]
    assert run.path_of("progress.jsonl").read_bytes() == before["progress.jsonl"]
    # the partial case's arrays and DOT moved into the backup; the completed case's stay
    assert sorted(done["moved"]) == ["arrays/A/32x1024", "graphs/A_32x1024_fused.dot"]
    assert (backup / "arrays/A/32x1024/input_constant.npy").exists()
    assert not run.path_of("arrays/A/32x1024").exists()
    assert run.path_of("arrays/A/1x128/input_constant.npy").exists()
    assert run.path_of("graphs/A_1x128_fused.dot").exists()
    # the folder can be appended to again
    run.append_jsonl("cases.jsonl", {"case": "32x1024"})


def test_corruption_before_the_last_line_is_refused(tmp_path):
    run = _folder(tmp_path)
    path = run.path_of("cases.jsonl")
    path.write_bytes(b"not json\n" + path.read_bytes())
    with pytest.raises(resume.ResumeRefused, match="line 1 is not valid JSON"):
        resume.plan_resume(run.path, CASES)


def test_merged_metadata_keeps_the_first_session_and_appends_this_one():
    stored = _metadata(stopped="RuntimeError: boom", finished_utc="t9")
    plan = resume.ResumePlan(completed=["1x128"], interrupted=["32x1024"], to_run=["32x1024", "7x781"])
    merged = resume.merged_metadata(stored, _metadata(started_utc="t1", hostname="h2"), plan, {"backup": "b"})
    assert merged["started_utc"] == "t0" and "stopped" not in merged and "finished_utc" not in merged
    (session,) = merged["resumes"]
    assert session["started_utc"] == "t1" and session["hostname"] == "h2"
    assert session["previous_stop"] == "RuntimeError: boom" and session["redone_interrupted"] == ["32x1024"]


# ---------------------------------------------------------------- the CLI loop (fake plan, fake run_case)

class _Case:
    def __init__(self, name):
        self.name = name


class _Killed(BaseException):
    """Stands for a process killed mid-case: nothing after it runs."""


@pytest.fixture
def fake_bench(monkeypatch):
    """bench.experiment.run_experiment with the experiment plan and run_case replaced; metadata fixed."""
    import bench.experiment

    calls = []
    behaviour = {}

    def plan(args, gpu, metadata, run):
        return object(), [(lambda n=n: _Case(n)) for n in resume.planned_case_names("A", args, gpu)], []

    plan.ratio_reference = "fused"

    def run_case(case, run, stream, *, gpu, seed, save_arrays, on_step):
        on_step("fake step")
        session = behaviour.get("session", 1)
        calls.append((session, case.name))
        run.append_jsonl("cases.jsonl", {"experiment": "A", "case": case.name, "session": session, "passed": True,
                                         "variant": "fused", "mode": "stream", "fixture": "constant"})
        what = behaviour.get(case.name)
        if what == "kill":
            raise _Killed()
        if what == "fail":
            raise AcceptanceError(f"{case.name}: out of tolerance")

    def base_metadata(gpu, argv):
        return {"git": {"commit": "c" * 40, "dirty": False}, "backend": "simulator", "argv": list(argv),
                "started_utc": f"session {behaviour.get('session', 1)}", "packages": {},
                "timing_disabled_reason": "fake"}

    monkeypatch.setattr(bench.experiment, "EXPERIMENT_PLAN_A", plan)
    monkeypatch.setattr(bench.experiment, "run_case", run_case)
    monkeypatch.setattr(bench.experiment, "base_metadata", base_metadata)
    return calls, behaviour


def _run(argv):
    import bench.cli
    import bench.experiment

    args = bench.cli.experiment_parser().parse_args(argv)
    return bench.experiment.run_experiment(args, False, argv)


def test_cli_resume_skips_completed_and_redoes_the_killed_case(fake_bench, tmp_path):
    calls, behaviour = fake_bench
    out = str(tmp_path / "run")
    argv = ["--experiment", "A", "--shapes", ",".join(CASES)]
    behaviour["32x1024"] = "kill"
    with pytest.raises(_Killed):
        _run([*argv, "--out", out])
    assert calls == [(1, "1x128"), (1, "32x1024")]

    behaviour.clear()
    behaviour["session"] = 2
    assert _run([*argv, "--resume", out]) == 0
    assert calls[2:] == [(2, "32x1024"), (2, "7x781")]
    run = RunFolder(out, resume=True)
    records = run.read_jsonl("cases.jsonl")
    assert [(r["case"], r["session"]) for r in records] == [("1x128", 1), ("32x1024", 2), ("7x781", 2)]
    assert [r["case"] for r in run.read_jsonl("progress.jsonl")] == CASES
    metadata = json.loads(run.path_of("metadata.json").read_text())
    assert metadata["started_utc"] == "session 1" and metadata["resumes"][0]["started_utc"] == "session 2"
    assert metadata["resumes"][0]["skipped_completed"] == ["1x128"]
    backups = list((run.path / "resume_backup").glob("*/cases.jsonl"))
    assert len(backups) == 1 and b'"32x1024"' in backups[0].read_bytes()


def _run_killed_in_the_last_case(fake_bench, tmp_path):
    """A run of every case, killed in the last one: (its folder, its arguments, the fake's behaviour table)."""
    _, behaviour = fake_bench
    out = tmp_path / "run"
    argv = ["--experiment", "A", "--shapes", ",".join(CASES)]
    behaviour["7x781"] = "kill"
    with pytest.raises(_Killed):
        _run([*argv, "--out", str(out)])
    return out, argv, behaviour


def test_cli_resume_refuses_a_different_seed_and_touches_nothing(fake_bench, tmp_path, capsys):
    out, argv, behaviour = _run_killed_in_the_last_case(fake_bench, tmp_path)
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    behaviour.clear()
    assert _run([*argv, "--seed", "7", "--resume", str(out)]) == 4
    assert "seed differs" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot


def test_cli_required_failure_stops_keeps_everything_and_blocks_resume(fake_bench, tmp_path, capsys):
    calls, behaviour = fake_bench
    out = tmp_path / "run"
    argv = ["--experiment", "A", "--shapes", ",".join(CASES)]
    behaviour["32x1024"] = "fail"
    assert _run([*argv, "--out", str(out)]) == 1
    assert calls == [(1, "1x128"), (1, "32x1024")]
    progress = RunFolder(out, resume=True).read_jsonl("progress.jsonl")
    assert progress[-1] == {"case": "32x1024", "completed": False, "stopped_by": "required-check"}
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    behaviour.clear()
    assert _run([*argv, "--resume", str(out)]) == 4
    assert "failed a required check" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot


def test_cli_resume_needs_an_existing_run(tmp_path, capsys):
    import bench.cli
    import bench.experiment

    args = bench.cli.experiment_parser().parse_args(["--experiment", "A", "--resume", str(tmp_path / "none")])
    assert bench.experiment.run_experiment(args, False, []) == 4
    assert "nothing to resume" in capsys.readouterr().err


def test_metadata_copy_is_not_mutated_by_merge():
    stored = _metadata()
    frozen = copy.deepcopy(stored)
    resume.merged_metadata(stored, _metadata(), resume.ResumePlan([], [], []), {})
    assert stored == frozen


def test_cli_a_plan_that_fails_marks_the_folder_with_the_reason(fake_bench, tmp_path, monkeypatch, capsys):
    import bench.experiment

    def plan(args, gpu, metadata, run):
        raise RuntimeError("cuDNN did not load (OSError: libcudnn.so.9)")

    plan.ratio_reference = "fused"
    monkeypatch.setattr(bench.experiment, "EXPERIMENT_PLAN_A", plan)
    out = tmp_path / "run"
    assert _run(["--experiment", "A", "--shapes", "1x128", "--out", str(out)]) == 1
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["stopped"] == "RuntimeError: cuDNN did not load (OSError: libcudnn.so.9)"
    assert "marked stopped" in capsys.readouterr().err


def test_cli_an_interrupted_case_marks_the_folder(fake_bench, tmp_path):
    _, behaviour = fake_bench
    behaviour["1x128"] = "kill"
    out = tmp_path / "run"
    with pytest.raises(_Killed):
        _run(["--experiment", "A", "--shapes", "1x128", "--out", str(out)])
    assert json.loads((out / "metadata.json").read_text())["stopped"].startswith("interrupted in case 1x128")


def test_cli_resume_refuses_a_bundled_folder_unless_forced(fake_bench, tmp_path, capsys):
    from bench.bundle import bundle

    out, argv, behaviour = _run_killed_in_the_last_case(fake_bench, tmp_path)
    bundle(out, tmp_path / "run.tar.gz")
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    behaviour.clear()
    assert _run([*argv, "--resume", str(out)]) == 4
    assert "manifest.json records" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
    assert _run([*argv, "--resume", str(out), "--force"]) == 0


def test_cli_no_summary_writes_records_only(fake_bench, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(["--experiment", "A", "--shapes", "1x128", "--no-summary", "--out", str(out)]) == 0
    assert not (out / "summary.md").exists() and (out / "cases.jsonl").exists()
    printed = capsys.readouterr().out
    assert f"python -m bench report {out}" in printed and "Correctness: **1 passed, 0 failed**" in printed


def test_cli_resume_refuses_a_packed_run(fake_bench, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(["--experiment", "A", "--shapes", "1x128", "--out", str(out)]) == 0
    (out / "timings.jsonl.gz").write_bytes(b"")
    snapshot = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert _run(["--experiment", "A", "--shapes", "1x128", "--resume", str(out)]) == 4
    assert "timings.jsonl.gz" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == snapshot
