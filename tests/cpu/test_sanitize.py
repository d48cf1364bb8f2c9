"""python -m bench sanitize without a GPU: the plan, the command lines, reading the tool's logs, the verdicts,
and a clear stop where there is no GPU or no compute-sanitizer. The GPU run itself: `python -m bench sanitize`."""

import stat

import pytest

from bench import sanitize
from bench.cli import main as cli_main
from bench.sanitize import (SANITIZER_EXIT, LogReading, SanitizeError, SanitizerRun, find_sanitizer, judge,
                            parse_log, plan_runs, sanitizer_command, summary_text)
from bench.sanitize_driver import targets

FUSED_MANGLED = ("_ZN6cudapy13numba_softmax7kernels9fused_row23fused_row_softmax_q1_v4B2v1B96cw51cXTLSUwv1sCUt9Uw"
                 "1VEw0NRRQPKzLTg4gaGIFAEo7Qs1VDwVEMgSjyZmiJtxwWBgKcm4iIyYrCQEIExAFjS0p4ACHmQ_3d_3dE5ArrayIfLi2E1C7mutable"
                 "7alignedE5ArrayIfLi2E1C7mutable7alignedE")
OOB_MANGLED = ("_ZN6cudapy13numba_softmax7kernels18sanitizer_controls19out_of_bounds_writeB2v1B96cw51cXTLSUwv1sCUt9"
               "E5ArrayIfLi1E1C7mutable7alignedE")
RACE_MANGLED = ("_ZN6cudapy13numba_softmax7kernels18sanitizer_controls18shared_memory_raceB2v1"
                "E5ArrayIfLi1E1C7mutable7alignedE")

CLEAN_MEMCHECK = """$ compute-sanitizer --tool memcheck ...
========= COMPUTE-SANITIZER
SANITIZE-TARGET fused:fused_row_softmax_q1_v4
SANITIZE-RESULT fused:fused_row_softmax_q1_v4 ok
SANITIZE-TARGET stages
SANITIZE-RESULT stages ok
========= ERROR SUMMARY: 0 errors
"""

OOB_MEMCHECK = f"""========= COMPUTE-SANITIZER
SANITIZE-TARGET control:out-of-bounds
========= Invalid __global__ write of size 4 bytes
=========     at {OOB_MANGLED}+0x1b0
=========     by thread (0,0,0) in block (4,0,0)
=========     Address 0x7f4a8c000800 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f4a8c000000 of size 2048 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2dfbef] in libcuda.so.1
=========
========= Program hit CUDA_ERROR_LAUNCH_FAILED (error 719) due to "unspecified launch failure" on CUDA API call \
to cuStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========
SANITIZE-RESULT control:out-of-bounds FAILED: CudaAPIError: [719] Call to cuStreamSynchronize results in \
CUDA_ERROR_LAUNCH_FAILED
========= Target application returned an error
========= ERROR SUMMARY: 2 errors
"""

RACE_LOG = f"""========= COMPUTE-SANITIZER
SANITIZE-TARGET control:shared-race
========= Error: Race reported between Write access at {RACE_MANGLED}+0x90
=========     and Read access at {RACE_MANGLED}+0xc0 [64 hazards]
=========
SANITIZE-RESULT control:shared-race ok
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""

FUSED_ERROR = f"""========= COMPUTE-SANITIZER
SANITIZE-TARGET stages
SANITIZE-RESULT stages ok
SANITIZE-TARGET fused:fused_row_softmax_q1_v4
========= Invalid __global__ read of size 16 bytes
=========     at 0x3c0 in {FUSED_MANGLED}
=========     by thread (255,0,0) in block (2,0,0)
=========     Address 0x7f0000004000 is out of bounds
=========
SANITIZE-RESULT fused:fused_row_softmax_q1_v4 ok
========= ERROR SUMMARY: 1 error
"""


def test_every_registered_kernel_and_every_build_is_a_target():
    from numba_softmax.kernels.fused_row import FUSED_KERNELS
    from numba_softmax.kernels.registry import KERNELS

    covered = {k for t in targets().values() for k in t.kernels}
    assert set(KERNELS) <= covered and set(FUSED_KERNELS) <= covered
    assert {"persistent_tiles_trace", "tile_summary_kernel_trace", "init_queue_kernel", "empty_tile_kernel",
            "row_copy"} <= covered
    registered = set(KERNELS)
    assert not {"out_of_bounds_write", "shared_memory_race"} & registered  # controls are never registered


def test_plan_memcheck_everywhere_race_and_sync_where_shared_memory_and_barriers():
    runs = {r.name: r for r in plan_runs()}
    assert set(runs) == {"memcheck", "racecheck", "synccheck", "control-out-of-bounds", "control-shared-race"}
    real = [name for name, t in targets().items() if not t.control]
    assert list(runs["memcheck"].targets) == real
    assert "fused:fused_row_softmax_w1_v4" not in runs["racecheck"].targets  # warp shuffles only: no shared memory
    assert {"phased", "dag", "trace-dag", "separate", "stages", "fused:fused_row_softmax_q4"} <= set(
        runs["synccheck"].targets)
    assert runs["control-out-of-bounds"] == SanitizerRun("control-out-of-bounds", "memcheck",
                                                         ("control:out-of-bounds",), "caught")
    assert runs["control-shared-race"].tool == "racecheck" and runs["control-shared-race"].expect == "caught"


def test_plan_isolated_and_selected():
    runs = plan_runs(["dag", "fused:fused_row_softmax_w1_v4"], ("memcheck", "racecheck"), isolate=True)
    assert [(r.name, r.targets) for r in runs] == [
        ("memcheck-dag", ("dag",)), ("memcheck-fused-fused_row_softmax_w1_v4", ("fused:fused_row_softmax_w1_v4",)),
        ("racecheck-dag", ("dag",))]
    with pytest.raises(SanitizeError, match="unknown target"):
        plan_runs(["fused"])
    with pytest.raises(SanitizeError, match="unknown tool"):
        plan_runs(None, ("initcheck",))


def test_command_line():
    run = SanitizerRun("racecheck", "racecheck", ("dag", "phased"), "clean")
    command = sanitizer_command("/opt/cs", run, python="/py")
    assert command[:7] == ["/opt/cs", "--tool", "racecheck", "--error-exitcode", str(SANITIZER_EXIT),
                           "--print-limit", "100"]
    assert command[-5:] == ["/py", "-m", "bench.sanitize_driver", "dag", "phased"]


def test_a_clean_log_passes():
    reading = parse_log(CLEAN_MEMCHECK, ["fused_row_softmax_q1_v4", "row_max_stage"])
    assert reading.errors == 0 and reading.reports == []
    assert reading.results == {"fused:fused_row_softmax_q1_v4": "ok", "stages": "ok"}
    run = SanitizerRun("memcheck", "memcheck", ("fused:fused_row_softmax_q1_v4", "stages"), "clean")
    assert judge(run, reading, 0) == (True, "0 errors, every target checked")


def test_an_error_is_attributed_to_its_target_and_kernel():
    kernels = ["fused_row_softmax_q1", "fused_row_softmax_q1_v4", "row_max_stage"]
    reading = parse_log(FUSED_ERROR, kernels)
    assert reading.errors == 1 and len(reading.reports) == 1
    report = reading.reports[0]
    assert report["target"] == "fused:fused_row_softmax_q1_v4" and report["kernels"] == ["fused_row_softmax_q1_v4"]
    assert "Address 0x7f0000004000 is out of bounds" in report["text"]
    run = SanitizerRun("memcheck", "memcheck", ("stages", "fused:fused_row_softmax_q1_v4"), "clean")
    assert judge(run, reading, SANITIZER_EXIT) == (False, "1 error(s)")


def test_the_out_of_bounds_control_is_caught():
    reading = parse_log(OOB_MEMCHECK, ["out_of_bounds_write"])
    assert reading.errors == 2
    assert [r["kernels"] for r in reading.reports] == [["out_of_bounds_write"], []]  # the write, then the API error
    assert reading.reports[0]["text"].count("\n") == 6 and "Program hit" in reading.reports[1]["text"]
    run = SanitizerRun("control-out-of-bounds", "memcheck", ("control:out-of-bounds",), "caught")
    passed, why = judge(run, reading, SANITIZER_EXIT, ["out_of_bounds_write"])
    assert passed and why.startswith("caught as required: 2 error(s), 1 report(s)")


def test_the_race_control_is_caught_from_the_racecheck_summary():
    reading = parse_log(RACE_LOG, ["shared_memory_race"])
    assert reading.error_summary is None and reading.racecheck_summary == {"hazards": 1, "errors": 1, "warnings": 0}
    assert reading.errors == 1 and reading.reports[0]["kernels"] == ["shared_memory_race"]
    run = SanitizerRun("control-shared-race", "racecheck", ("control:shared-race",), "caught")
    assert judge(run, reading, SANITIZER_EXIT, ["shared_memory_race"])[0]


def test_a_control_the_tool_misses_fails_the_run():
    clean = parse_log("========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed "
                      "(0 errors, 0 warnings)\n", ["shared_memory_race"])
    run = SanitizerRun("control-shared-race", "racecheck", ("control:shared-race",), "caught")
    passed, why = judge(run, clean, 0, ["shared_memory_race"])
    assert not passed and why.startswith("NOT CAUGHT")


@pytest.mark.parametrize("reading, returncode, why", [
    (LogReading(), 0, "the tool printed no summary"),
    (LogReading(error_summary=0, results={"dag": "FAILED: QueueStateError: counters"}), 3,
     "dag: FAILED: QueueStateError: counters"),
    (LogReading(error_summary=0, results={}), 0, "target(s) that did not report a result: ['dag']"),
    (LogReading(error_summary=0, results={"dag": "ok"}), None, "timed out"),
])
def test_a_clean_run_needs_a_summary_every_result_and_an_end(reading, returncode, why):
    passed, text = judge(SanitizerRun("memcheck", "memcheck", ("dag",), "clean"), reading, returncode)
    assert not passed and why in text


def test_without_a_gpu_it_stops_before_anything_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr("bench.environment.gpu_present", lambda: False)
    assert cli_main(["sanitize", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU, and none was found" in err and len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    assert cli_main(["sanitize"]) == 2
    assert "NUMBA_ENABLE_CUDASIM=1 is set" in capsys.readouterr().err


def test_without_compute_sanitizer_it_says_where_it_looked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    monkeypatch.setattr("bench.environment.gpu_present", lambda: True)
    monkeypatch.setattr(sanitize.shutil, "which", lambda name: None)
    monkeypatch.setattr(sanitize.glob, "glob", lambda pattern: [])
    monkeypatch.setattr(sanitize.os.path, "isfile", lambda path: False)
    assert cli_main(["sanitize"]) == 2
    assert "compute-sanitizer not found" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_an_explicit_sanitizer_must_be_executable(tmp_path):
    plain = tmp_path / "compute-sanitizer"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(SanitizeError, match="not an executable file"):
        find_sanitizer(str(plain))
    plain.chmod(plain.stat().st_mode | stat.S_IXUSR)
    assert find_sanitizer(str(plain)) == str(plain)


def test_bad_arguments_are_refused_before_the_gpu_check(capsys):
    assert cli_main(["sanitize", "--tools", "memcheck,leakcheck"]) == 2
    assert "unknown tool(s) ['leakcheck']" in capsys.readouterr().err


def test_the_driver_refuses_unknown_targets(capsys):
    from bench.sanitize_driver import main

    assert main(["fused"]) == 2
    assert "unknown target(s) ['fused']" in capsys.readouterr().err


def test_summary_names_failures_and_shows_a_controls_report():
    clean = SanitizerRun("memcheck", "memcheck", ("stages", "fused:fused_row_softmax_q1_v4"), "clean")
    control = SanitizerRun("control-out-of-bounds", "memcheck", ("control:out-of-bounds",), "caught")
    records = []
    for run, log, code, kernels in ((clean, FUSED_ERROR, SANITIZER_EXIT, ()),
                                    (control, OOB_MEMCHECK, SANITIZER_EXIT, ("out_of_bounds_write",))):
        reading = parse_log(log, ["fused_row_softmax_q1_v4", "out_of_bounds_write"])
        passed, why = judge(run, reading, code, kernels)
        records.append({**run.__dict__, "errors": reading.errors, "seconds": 1.0, "passed": passed, "why": why,
                        "results": reading.results, "reports": reading.reports})
    known = targets()
    document = {"passed": False, "runs": records,
                "targets": {n: known[n].__dict__ for n in ("stages", "fused:fused_row_softmax_q1_v4",
                                                           "control:out-of-bounds")}}
    text = summary_text({"device": "NVIDIA H200", "commit": "abc", "command": "x"}, document)
    assert text.splitlines()[2].startswith("NVIDIA H200, commit abc, ")
    assert "**FAILED**" in text and "| memcheck " in text and "| 1 report(s) " in text and "| clean " in text
    assert text.count("Invalid __global__") == 2  # the failed run's report and the control's first one


def test_metadata_carries_the_results_index_fields(tmp_path):
    import json

    from bench.results_index import folder_metadata
    from bench.sanitize import with_index_fields

    base = {"device": {"name": "NVIDIA H200", "compute_capability": [9, 0]}, "git": {"commit": "c" * 40},
            "started_utc": "2026-12-01T11:00:00+00:00", "argv": ["sanitize"], "backend": "gpu"}
    metadata = with_index_fields(base, ["--out", "DIR"])
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    assert folder_metadata(tmp_path) == {"kind": "sanitize", "device": "NVIDIA H200",
                                         "command": "python -m bench sanitize --out DIR", "commit": "c" * 40,
                                         "date": "2026-12-01"}
    assert metadata["device_record"]["compute_capability"] == [9, 0] and "device" in base


def test_runs_at_once_keep_their_order_and_really_overlap():
    import threading
    import time

    from bench.sanitize import SanitizeError, in_order

    running, peak, lock = [0], [0], threading.Lock()

    def execute(run):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05 * (5 - run))  # the first runs finish last
        with lock:
            running[0] -= 1
        return run * 10

    assert in_order(execute, range(5), jobs=3) == [0, 10, 20, 30, 40]
    assert peak[0] == 3
    peak[0] = 0
    assert in_order(execute, range(3), jobs=1) == [0, 10, 20] and peak[0] == 1
    with pytest.raises(SanitizeError, match="--jobs must be at least 1"):
        in_order(execute, range(2), jobs=0)
