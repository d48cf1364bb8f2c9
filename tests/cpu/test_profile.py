"""bench.profile: ncu/nsys command construction, raw-page CSV parsing, the run loop with a fake ncu.

The CSV samples follow ncu's documented raw page (``ncu --import X --csv --page raw
--print-units base``): a header row (identification columns, then one column per metric,
alphabetical), a units row, one row per profiled kernel launch; numbers carry thousands
separators. The kernel names are what ncu prints for Numba's mangled entry points.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench import profile, profile_summary

ROOT = Path(__file__).resolve().parents[2]
IDENT = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
        '"Device","CC"'
METRIC_COLUMNS = sorted(profile_summary.METRIC_NAMES)
UNITS = {"dram__bytes_read.sum": "byte", "dram__bytes_write.sum": "byte", "gpu__time_duration.sum": "nsecond",
         "launch__registers_per_thread": "register/thread", "launch__shared_mem_per_block_dynamic": "byte/block",
         "launch__shared_mem_per_block_static": "byte/block", "lts__t_bytes.sum": "byte",
         "lts__t_sector_hit_rate.pct": "%", "lts__t_sectors_srcunit_tex_op_read.sum": "sector",
         "lts__t_sectors_srcunit_tex_op_write.sum": "sector", "sm__maximum_warps_per_active_cycle_pct": "%",
         "sm__warps_active.avg.pct_of_peak_sustained_active": "%",
         "smsp__sass_inst_executed_op_local_ld.sum": "inst", "smsp__sass_inst_executed_op_local_st.sum": "inst"}
FUSED = ("numba_softmax::kernels::fused_row::fused_row_softmax[abi:v1][abi:cw51cXTLSUwv1sDUaKthqaNgoKmjgEhas]"
         "(Array<float, 2, C, mutable, aligned>, Array<float, 2, C, mutable, aligned>)")
STAGES = [f"numba_softmax::kernels::row_stages::{k}[abi:v6](Array<float, 2, C, mutable, aligned>, "
          "Array<float, 1, C, mutable, aligned>)" for k in ("row_max_stage", "exp_stage", "row_sum_stage",
                                                            "divide_stage")]


def _row(launch_id, kernel, values):
    cells = [str(launch_id), "4242", "python3", "vm", kernel, "1", "13", "(256, 1, 1)", "(4096, 1, 1)", "0", "9.0"]
    cells += [values.get(m, "n/a") for m in METRIC_COLUMNS]
    return ",".join(f'"{c}"' for c in cells)


def _csv(rows, units=UNITS):
    header = IDENT + "," + ",".join(f'"{m}"' for m in METRIC_COLUMNS)
    unit_row = ",".join(['""'] * 11 + [f'"{units.get(m, "")}"' for m in METRIC_COLUMNS])
    return "\n".join([header, unit_row, *rows]) + "\n"


FUSED_VALUES = {"dram__bytes_read.sum": "16,781,312", "dram__bytes_write.sum": "16,777,216",
                "gpu__time_duration.sum": "47,328", "launch__registers_per_thread": "56",
                "launch__shared_mem_per_block_dynamic": "0", "launch__shared_mem_per_block_static": "32",
                "lts__t_bytes.sum": "33,720,480", "lts__t_sector_hit_rate.pct": "50.12",
                "lts__t_sectors_srcunit_tex_op_read.sum": "524,416",
                "lts__t_sectors_srcunit_tex_op_write.sum": "524,288", "launch__grid_size": "4,096",
                "launch__block_size": "256", "sm__maximum_warps_per_active_cycle_pct": "100",
                "sm__warps_active.avg.pct_of_peak_sustained_active": "88.41",
                "smsp__sass_inst_executed_op_local_ld.sum": "0", "smsp__sass_inst_executed_op_local_st.sum": "0"}
FUSED_CSV = "==PROF== Connected to process 4242 (/usr/bin/python3.12)\n" + \
    _csv([_row(0, FUSED, FUSED_VALUES), _row(1, FUSED, dict(FUSED_VALUES, **{"dram__bytes_read.sum": "16,779,264"}))])
STAGES_CSV = _csv([_row(i, name, dict(FUSED_VALUES, **{"launch__registers_per_thread": str(20 + i)}))
                   for i, name in enumerate(STAGES)])


# ---------------------------------------------------------------- commands

def _pairs(command):
    return {command[i]: command[i + 1] for i in range(len(command) - 1) if command[i].startswith("--")}


def test_ncu_command_carries_the_recorded_policy_and_every_metric(tmp_path):
    driver = profile.driver_command("/py", "A", "4096x1024", "fused", mode="stream", repeat=3,
                                    record=tmp_path / "r.json", scratch=tmp_path / "s", expect_device="H100")
    command = profile.ncu_command("/opt/ncu", tmp_path / "A.ncu-rep", driver)
    assert command[0] == "/opt/ncu"
    options = _pairs(command[:command.index("/py")])
    assert options["--replay-mode"] == "kernel"
    assert options["--cache-control"] == "all"
    assert options["--clock-control"] == "none"
    assert options["--profile-from-start"] == "off"
    assert options["--target-processes"] == "all"
    assert options["--export"] == str(tmp_path / "A.ncu-rep")
    assert options["--metrics"].split(",") == list(profile_summary.METRIC_NAMES)
    for needed in ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum", "launch__registers_per_thread",
                   "launch__shared_mem_per_block_static", "sm__warps_active.avg.pct_of_peak_sustained_active"):
        assert needed in profile_summary.METRIC_NAMES
    assert "--force-overwrite" in command
    assert command[-len(driver):] == driver
    assert driver[:3] == ["/py", "-m", "bench.profile_driver"]
    assert _pairs(driver)["--repeat"] == "3" and _pairs(driver)["--mode"] == "stream"


def test_the_timed_runs_cache_policy_reaches_the_ncu_command(tmp_path):
    policy = profile.ncu_policy("none", "application")
    options = _pairs(profile.ncu_command("ncu", tmp_path / "B.ncu-rep", ["/py"], policy=policy)[:-1])
    assert options["--cache-control"] == "none" and options["--replay-mode"] == "application"
    assert "as in the timed benchmark" in policy["meaning"] and "reruns the whole driver" in policy["meaning"]
    with pytest.raises(ValueError, match="cache_control"):
        profile.ncu_policy("some")
    with pytest.raises(ValueError, match="replay_mode"):
        profile.ncu_policy("none", "range")


def test_ncu_report_must_be_an_ncu_rep(tmp_path):
    with pytest.raises(ValueError, match=".ncu-rep"):
        profile.ncu_command("ncu", tmp_path / "A.rep", ["python"])


def test_export_and_nsys_commands(tmp_path):
    assert profile.ncu_export_command("ncu", tmp_path / "x.ncu-rep") == [
        "ncu", "--import", str(tmp_path / "x.ncu-rep"), "--csv", "--page", "raw", "--print-units", "base"]
    command = profile.nsys_command("nsys", tmp_path / "g", ["python", "-m", "bench.profile_driver"])
    assert command[:2] == ["nsys", "profile"] and "--cuda-graph-trace=node" in command
    assert "--capture-range=cudaProfilerApi" in command and command[-3:] == ["python", "-m", "bench.profile_driver"]


# ---------------------------------------------------------------- CSV

def test_parse_raw_page_csv():
    launches = profile_summary.parse_ncu_raw_csv(FUSED_CSV)
    assert [launch["id"] for launch in launches] == [0, 1]
    first = launches[0]
    assert first["kernel"] == FUSED and first["block"] == "(256, 1, 1)" and first["grid"] == "(4096, 1, 1)"
    assert profile_summary.metric_value(first, "dram__bytes_read.sum") == 16_781_312
    assert profile_summary.metric_value(first, "launch__registers_per_thread") == 56
    occupancy = profile_summary.metric_value(first, "sm__warps_active.avg.pct_of_peak_sustained_active")
    assert occupancy == pytest.approx(88.41)
    assert first["metrics"]["lts__t_bytes.sum"]["unit"] == "byte"
    assert profile_summary.short_kernel_name(first["kernel"]) == "fused_row_softmax"
    assert [profile_summary.short_kernel_name(k) for k in STAGES] == ["row_max_stage", "exp_stage", "row_sum_stage",
                                                              "divide_stage"]


def test_per_invocation_sums_launches_and_divides_by_repeats():
    totals = profile_summary.per_invocation(profile_summary.parse_ncu_raw_csv(FUSED_CSV), repeat=2)
    assert totals["launches"] == 1
    assert totals["dram__bytes_read.sum"] == (16_781_312 + 16_779_264) / 2
    assert totals["dram__bytes_write.sum"] == 16_777_216
    stages = profile_summary.per_invocation(profile_summary.parse_ncu_raw_csv(STAGES_CSV), repeat=1)
    assert stages["launches"] == 4 and stages["lts__t_bytes.sum"] == 4 * 33_720_480


def test_scaled_units_are_converted_and_wrong_units_refused():
    scaled = dict(UNITS, **{"dram__bytes_read.sum": "Mbyte", "gpu__time_duration.sum": "usecond"})
    csv_text = _csv([_row(0, FUSED, dict(FUSED_VALUES, **{"dram__bytes_read.sum": "16.78",
                                                          "gpu__time_duration.sum": "47.33"}))], units=scaled)
    (launch,) = profile_summary.parse_ncu_raw_csv(csv_text)
    assert profile_summary.metric_value(launch, "dram__bytes_read.sum") == pytest.approx(16.78e6)
    assert profile_summary.metric_value(launch, "gpu__time_duration.sum") == pytest.approx(47330)
    wrong = profile_summary.parse_ncu_raw_csv(_csv([_row(0, FUSED, FUSED_VALUES)],
                                           units=dict(UNITS, **{"lts__t_bytes.sum": "sector"})))
    with pytest.raises(profile_summary.NcuCsvError, match="expected 'byte'"):
        profile_summary.metric_value(wrong[0], "lts__t_bytes.sum")


def test_missing_values_are_none_not_zero():
    (launch,) = profile_summary.parse_ncu_raw_csv(_csv([_row(0, FUSED, {"launch__grid_size": "4,096"})]))
    assert profile_summary.metric_value(launch, "dram__bytes_read.sum") is None
    assert profile_summary.per_invocation([launch], 1)["dram__bytes_read.sum"] is None


@pytest.mark.parametrize("text, message", [
    ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n", "no ncu raw-page header"),
    (IDENT + ',"dram__bytes_read.sum"\n"0","1"\n', "cells"),
])
def test_unreadable_csv_raises(text, message):
    with pytest.raises(profile_summary.NcuCsvError, match=message):
        profile_summary.parse_ncu_raw_csv(text)


# ---------------------------------------------------------------- the run loop with a fake ncu

FAKE_NCU = '''#!{python}
import os, sys
args = sys.argv[1:]
if "--version" in args:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2025.3.1.0 (fake for tests)")
    sys.exit(0)
if "--import" in args:
    sys.stdout.write(open(args[args.index("--import") + 1]).read())
    sys.exit(0)
report = args[args.index("--export") + 1]
unknown = os.environ.get("FAKE_NCU_UNKNOWN")
if unknown and unknown in args[args.index("--metrics") + 1].split(","):
    sys.stderr.write("==PROF== Connected to process 4242\\n==ERROR== Failed to find metric regex:^"
                     + unknown.replace(".", "\\\\.") + "$\\n")
    sys.exit(1)
if os.environ.get("FAKE_NCU_FAIL") and "stages" in report:
    sys.stderr.write("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU "
                     "Performance Counters on the target device 0.\\n")
    sys.exit(1)
name = "stages" if "stages" in report else "fused"
open(report, "w").write(open(os.path.join(os.environ["FAKE_NCU_DIR"], name + ".csv")).read())
sys.stdout.write("==PROF== Disconnected from process 4242\\n")
'''


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "fused.csv").write_text(FUSED_CSV)
    (tools / "stages.csv").write_text(STAGES_CSV)
    ncu = tools / "ncu"
    ncu.write_text(FAKE_NCU.format(python=sys.executable))
    ncu.chmod(0o755)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no nsys (and no real ncu) on PATH
    monkeypatch.setenv("FAKE_NCU_DIR", str(tools))
    monkeypatch.setattr(profile, "gpu_problem", lambda command: None)  # the profiled driver is faked too
    return ncu


def test_profile_run_keeps_raw_files_and_summarises(fake_ncu, tmp_path):
    out = tmp_path / "prof"
    status = profile.main(["--experiment", "A", "--out", str(out), "--cases", "4096x1024",
                           "--variants", "fused,stages", "--repeat", "2", "--ncu", str(fake_ncu)])
    assert status == 0
    for stem in ("A_4096x1024_fused", "A_4096x1024_stages"):
        for suffix in (".ncu-rep", ".csv", ".ncu.stderr.txt", ".ncu.stdout.txt"):
            assert (out / "ncu" / f"{stem}{suffix}").exists(), stem + suffix
    records = [json.loads(line) for line in (out / "profile.jsonl").read_text().splitlines()]
    assert [(r["variant"], r["id"]) for r in records] == [("fused", 0), ("fused", 1)] + \
        [("stages", i) for i in range(4)]
    info = json.loads((out / "profile.json").read_text())
    assert info["policy"]["cache_control"] == "all" and info["policy"]["replay_mode"] == "kernel"
    assert info["policy"]["clock_control"] == "none" and info["nsys"] is None
    assert "2025.3.1" in info["ncu_version"]
    summary = (out / "profile_summary.md").read_text()
    assert "Nsight Systems" in summary and "NOT RUN: nsys is not on PATH" in summary
    assert "cache-control all" in summary and "replay-mode kernel" in summary
    # per invocation: (16,781,312 + 16,779,264) / 2 DRAM bytes read for the fused kernel
    assert "| 4096x1024 | fused | 1.0 | - | 16,780,288 | - | 16,777,216 |" in summary
    assert "`row_sum_stage`" in summary and "FAILED" not in summary


def test_profile_records_the_cache_policy_it_was_given(fake_ncu, tmp_path):
    out = tmp_path / "prof"
    status = profile.main(["--experiment", "A", "--out", str(out), "--cases", "4096x1024", "--variants", "fused",
                           "--repeat", "2", "--ncu", str(fake_ncu), "--cache-control", "none",
                           "--replay-mode", "application", "--metrics", "dram__bytes_read.sum,gpu__time_duration.sum"])
    assert status == 0
    info = json.loads((out / "profile.json").read_text())
    assert info["policy"]["cache_control"] == "none" and info["policy"]["replay_mode"] == "application"
    summary = (out / "profile_summary.md").read_text()
    assert "cache-control none" in summary and "replay-mode application" in summary
    assert "cache-control all" not in summary
    command = (out / "ncu" / "A_4096x1024_fused.ncu.stdout.txt")
    assert info["metrics_collected"] == ["dram__bytes_read.sum", "gpu__time_duration.sum"]
    assert info["metrics_unknown_to_this_ncu"] == [] and command.exists()


def test_profile_refuses_a_metric_it_does_not_know(tmp_path, capsys):
    with pytest.raises(SystemExit):
        profile.main(["--experiment", "B", "--out", str(tmp_path / "p"), "--metrics", "dram__bytes_read.sum,bogus"])
    assert "unknown metric(s) ['bogus']" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_failing_profiler_keeps_and_quotes_its_stderr(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_FAIL", "1")
    out = tmp_path / "prof"
    status = profile.main(["--experiment", "A", "--out", str(out), "--cases", "4096x1024",
                           "--variants", "fused,stages", "--ncu", str(fake_ncu)])
    assert status == 1
    stderr = (out / "ncu" / "A_4096x1024_stages.ncu.stderr.txt").read_text()
    assert "ERR_NVGPUCTRPERM" in stderr
    summary = (out / "profile_summary.md").read_text()
    assert "1 profile run(s) FAILED" in summary and "ERR_NVGPUCTRPERM" in summary
    assert "| 4096x1024 | fused |" in summary  # the run that worked is still reported
    # 2 launches captured for 3 requested invocations (the fake's CSV): flagged, not averaged silently
    assert "2 kernel launches profiled is not a multiple of the 3 invocations" in summary


def test_a_metric_this_ncu_does_not_know_is_dropped_once_and_said(fake_ncu, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_UNKNOWN", "lts__t_sectors_srcunit_tex_op_read.sum")
    out = tmp_path / "prof"
    status = profile.main(["--experiment", "A", "--out", str(out), "--cases", "4096x1024",
                           "--variants", "fused,stages", "--repeat", "2", "--ncu", str(fake_ncu)])
    assert status == 0
    info = json.loads((out / "profile.json").read_text())
    assert info["metrics_unknown_to_this_ncu"] == ["lts__t_sectors_srcunit_tex_op_read.sum"]
    fused, stages = info["runs"]
    assert fused["dropped_metrics"] == ["lts__t_sectors_srcunit_tex_op_read.sum"] and "dropped_metrics" not in stages
    assert "Failed to find metric" in (out / "ncu" / "A_4096x1024_fused.ncu.attempt1.stderr.txt").read_text()
    assert not (out / "ncu" / "A_4096x1024_stages.ncu.attempt1.stderr.txt").exists()
    assert "--metrics" in stages["profile_run"]["command"]
    metrics = stages["profile_run"]["command"][stages["profile_run"]["command"].index("--metrics") + 1]
    assert "lts__t_sectors_srcunit_tex_op_read.sum" not in metrics.split(",")
    assert "does not know" in (out / "profile_summary.md").read_text()


def test_unknown_metrics_from_ncu_stderr():
    stderr = "==ERROR== Failed to find metric regex:^dram__bytes_read\\.(sum|avg|min|max)$\n"
    assert profile.unknown_metrics(stderr, profile_summary.METRIC_NAMES) == ["dram__bytes_read.sum"]
    assert profile.unknown_metrics("==ERROR== ERR_NVGPUCTRPERM", profile_summary.METRIC_NAMES) == []


def test_launch_count_must_match_invocations_times_kernels():
    launches = profile_summary.parse_ncu_raw_csv(STAGES_CSV)
    result = {"case": "4096x1024", "variant": "stages", "repeat": 1, "launches": launches,
              "driver": {"kernel_resources": [{}] * 4}}
    assert profile_summary.launch_count_warning(result) is None
    result["driver"]["kernel_resources"] = [{}] * 3
    assert "expected 1 invocations x 3 kernels" in profile_summary.launch_count_warning(result)
    assert profile_summary.launch_count_warning(dict(result, repeat=3, driver={})) is not None


def test_missing_ncu_is_reported_not_hidden(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "gpu_problem", lambda command: None)
    monkeypatch.setattr(profile, "find_ncu", lambda explicit: None)
    monkeypatch.setattr(profile.shutil, "which", lambda name: None)
    out = tmp_path / "prof"
    assert profile.main(["--experiment", "B", "--out", str(out)]) == 1
    assert "NO NSIGHT COMPUTE CAPTURE" in (out / "profile_summary.md").read_text()


def test_profile_refuses_a_non_empty_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(profile, "gpu_problem", lambda command: None)
    (tmp_path / "keep.txt").write_text("x")
    assert profile.main(["--experiment", "A", "--out", str(tmp_path)]) == 2


def test_driver_without_a_gpu_refuses_and_records_why(tmp_path):
    record = tmp_path / "record.json"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-m", "bench.profile_driver", "--experiment", "A", "--case", "1x128",
                           "--variant", "fused", "--record", str(record), "--scratch", str(tmp_path / "s")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert json.loads(record.read_text())["error"].startswith("a profiler needs a CUDA GPU")
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_profile_module_imports_without_cuda():  # it rebuilds summaries on any machine; its driver needs a GPU
    code = textwrap.dedent("""
        import sys, bench.profile
        # numba_softmax.device and .source import no Numba; anything of the package that does pulls Numba in
        loaded = [m for m in sys.modules if m == "numba" or m.startswith(("numba.", "cuda.bindings"))]
        assert not loaded, loaded
    """)
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


# ---------------------------------------------------------------- the driver's flow, with fakes for the GPU parts

class _FakeInvocation:
    def __init__(self, log):
        self.log = log

    def enqueue(self, stream):
        self.log.append("enqueue")

    def kernel_resources(self):
        return [{"entry": "fused_row_softmax", "registers_per_thread": 56}]


class _FakeVariant:
    def __init__(self, log, wrong):
        self.name = "fused"
        self.invocation = _FakeInvocation(log)
        self.log = log
        self.wrong = wrong
        self.host = None

    def verify_after_invocation(self):
        self.log.append("verify")

    def read_outputs(self):
        import numpy as np
        x = self.host.astype(np.float64)
        y = np.exp(x - x.max(axis=1, keepdims=True))
        y = (y / y.sum(axis=1, keepdims=True)).astype(np.float32)
        return {"out": y * (1.5 if self.wrong else 1.0)}


class _FakeCase:
    name = "4x8"
    bytes_moved = 2 * 4 * 8 * 4

    def __init__(self, log, wrong):
        self.variants = [_FakeVariant(log, wrong)]

    def variant(self, name):
        return next(v for v in self.variants if v.name == name)

    def load_fixture(self, fixture_id):
        from numba_softmax.fixtures import matrix_fixture
        self.variants[0].host = matrix_fixture(fixture_id, (4, 8))
        return self.variants[0].host

    def reference(self, host_input):
        from numba_softmax.oracle import matrix_reference
        return matrix_reference(host_input)


class _FakeStream:
    def synchronize(self):
        pass


@pytest.mark.parametrize("wrong", [False, True], ids=["passes", "fails-check"])
def test_driver_brackets_exactly_the_repeated_invocations(tmp_path, monkeypatch, wrong):
    import bench.environment
    import bench.experiment_a
    import numba_softmax.launch.driver as launch_driver
    from bench import profile_driver
    from cuda.bindings import driver as cu

    log = []

    def plan(args, gpu, metadata, run):
        assert args.shapes == "4x8" and args.no_cudnn is True and gpu is True
        assert args.twins is False  # a Numba variant: the plan loads no twins
        return _FakeStream(), [lambda: _FakeCase(log, wrong)], ["a note"]

    monkeypatch.setattr(bench.environment, "gpu_problem", lambda command: None)
    monkeypatch.setattr(bench.experiment_a, "EXPERIMENT_PLAN_A", plan)
    monkeypatch.setattr(launch_driver, "device_record", lambda: {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132})
    monkeypatch.setattr(launch_driver, "check", lambda result: None)
    monkeypatch.setattr(cu, "cuProfilerStart", lambda: log.append("START"))
    monkeypatch.setattr(cu, "cuProfilerStop", lambda: log.append("STOP"))
    record = tmp_path / "record.json"
    status = profile_driver.main(["--experiment", "A", "--case", "4x8", "--variant", "fused", "--repeat", "3",
                                  "--warmups", "2", "--record", str(record), "--scratch", str(tmp_path / "s")])
    assert status == (1 if wrong else 0)
    start, stop = log.index("START"), log.index("STOP")
    assert log[start + 1:stop] == ["enqueue"] * 3  # exactly the profiled invocations, nothing else
    assert log[:start].count("enqueue") == 2
    data = json.loads(record.read_text())
    assert data["bytes_moved_logical"] == 256 and data["check"]["passed"] is (not wrong)
    assert data["kernel_resources"][0]["registers_per_thread"] == 56 and data["device"]["sm_count"] == 132


def test_short_time_units_of_ncu_2025_are_nanoseconds():
    from bench.profile_summary import metric_value
    launch = {"metrics": {"gpu__time_duration.sum": {"value": 38200, "unit": "ns"}}}
    assert metric_value(launch, "gpu__time_duration.sum") == 38200
    launch = {"metrics": {"gpu__time_duration.sum": {"value": 38.2, "unit": "us"}}}
    assert metric_value(launch, "gpu__time_duration.sum") == 38200


def _issue_launch(inst, cycles, duration_ns, busy=50.0):
    return {"metrics": {"smsp__inst_executed.sum": {"value": inst, "unit": "inst"},
                        "sm__cycles_elapsed.avg": {"value": cycles, "unit": "cycle"},
                        "gpu__time_duration.sum": {"value": duration_ns, "unit": "ns"},
                        "smsp__issue_active.avg.pct_of_peak_sustained_active": {"value": busy, "unit": "%"}}}


def test_issue_floor_is_instructions_at_one_per_scheduler_cycle():
    # 132 SMs x 4 schedulers each start one of 528 instructions per cycle: 528,000 instructions take 1,000
    # cycles; the launch ran 2,000 cycles in 1,000 ns, so its issue floor is 500 ns.
    launch = _issue_launch(528_000, 2_000, 1_000)
    assert profile_summary.issue_floor_ns(launch, 132) == pytest.approx(500.0)
    # a missing counter or SM count gives no floor rather than a wrong one
    assert profile_summary.issue_floor_ns({"metrics": {}}, 132) is None
    assert profile_summary.issue_floor_ns(launch, None) is None


def test_issue_table_sums_launches_per_invocation():
    result = {"case": "balanced-2048", "variant": "separate", "repeat": 2,
              "launches": [_issue_launch(528_000, 2_000, 1_000, 80.0), _issue_launch(528_000, 1_000, 1_000, 40.0)] * 2}
    row = [line for line in profile_summary.issue_table([result], 132) if line.startswith("| balanced-2048")][0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "1,056,000"          # instructions per invocation (two launches)
    assert cells[4] == "1.5"                # 0.5 + 1.0 us of issue floor
    assert cells[5] == "2.0"                # kernel time per invocation
    assert cells[6] == "60.0"               # busy %, weighted by duration


def test_driver_builds_the_plan_with_twins_for_a_twin_variant(tmp_path, monkeypatch):
    # "stages-nvcc" exists only in a plan built with the twins (as under `bench --twins`); the driver asks for them
    # exactly when the variant is a twin, and an unknown variant is still named.
    import bench.environment
    import bench.experiment_a
    import numba_softmax.launch.driver as launch_driver
    from bench import profile_driver

    seen = []

    def plan(args, gpu, metadata, run):
        seen.append(args.twins)
        return _FakeStream(), [lambda: _FakeCase([], False)], []

    monkeypatch.setattr(bench.environment, "gpu_problem", lambda command: None)
    monkeypatch.setattr(bench.experiment_a, "EXPERIMENT_PLAN_A", plan)
    monkeypatch.setattr(launch_driver, "device_record", lambda: {"name": "NVIDIA H100 80GB HBM3", "sm_count": 132})
    record = tmp_path / "record.json"
    status = profile_driver.main(["--experiment", "A", "--case", "4x8", "--variant", "stages-nvcc",
                                  "--record", str(record), "--scratch", str(tmp_path / "s")])
    assert seen == [True] and status == 2
    assert "variant 'stages-nvcc' is not one of ['fused']" in json.loads(record.read_text())["error"]
