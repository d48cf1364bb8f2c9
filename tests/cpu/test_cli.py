"""python -m bench: every subcommand listed, arguments checked before anything runs, nothing created on an error.

The main-job checks run in a fresh process with NUMBA_ENABLE_CUDASIM=1 (as on a laptop without a GPU):
they stop before Numba is imported, so each takes about a second.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import bench.cli
from bench.cli import SUBCOMMANDS, main
from bench.probe import PROBES
from bench.shapes import parse_shapes

ROOT = Path(__file__).resolve().parents[2]


def _bench(args, cwd, **env):
    environment = dict(os.environ, **env)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=cwd, env=environment, capture_output=True,
                          text=True, timeout=300, check=False)


def test_help_lists_every_subcommand_and_what_runs_in_the_simulator(tmp_path):
    proc = _bench(["--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    for name in SUBCOMMANDS:
        assert f"\n  {name} " in proc.stdout, name
    for expected in ("ptx", "build-reference", "report", "bundle", "profile", "perf", "sanitize", "probe",
                     "index"):
        assert expected in SUBCOMMANDS
    assert "Experiment A runs the shapes 1x128, 7x781" in proc.stdout and "sim-mini" in proc.stdout
    assert f"the measurement probes: {', '.join(PROBES)} (GPU)" in proc.stdout  # bench/probe.py's table
    assert list(tmp_path.iterdir()) == []


def test_a_missing_subcommand_module_says_so(monkeypatch, capsys):
    monkeypatch.setitem(SUBCOMMANDS, "probe", ("bench.not_written_yet", "a probe"))
    assert main(["probe", "fused"]) == 2
    assert "`python -m bench probe` is not available in this checkout" in capsys.readouterr().err


def test_an_unknown_subcommand_is_named(capsys):
    assert main(["reprot", "runs/x"]) == 2
    err = capsys.readouterr().err
    assert "unknown subcommand 'reprot'" in err and "report" in err


def test_expect_device_without_a_gpu_stops_before_anything_runs(tmp_path):
    proc = _bench(["--experiment", "A", "--expect-device", "H100", "--out", str(tmp_path / "run")], tmp_path,
                  NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 3
    assert "--expect-device H100 requires that GPU" in proc.stderr and "SIMULATOR" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["--experiment", "B", "--cases", "balanced-128"],
     "--cases balanced-128 (1,048,576 elements): GPU case(s), not run in the simulator"),
    (["--experiment", "A", "--shapes", "4096x4096"], "--shapes 4096x4096: too large for the simulator"),
])
def test_the_simulator_refuses_protocol_sizes_and_names_what_runs(tmp_path, args, message):
    proc = _bench([*args, "--out", str(tmp_path / "run")], tmp_path, NUMBA_ENABLE_CUDASIM="1")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "one block at a time" in proc.stderr
    assert ("sim-mini" if "B" in args else "1x128, 7x781") in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["--experiment", "B", "--cases", "balanced-100"], "--cases: unknown case(s) ['balanced-100']; on a GPU: "),
    (["--experiment", "A", "--shapes", "4096by1024"], "--shapes: '4096by1024' is not ROWSxCOLUMNS (e.g. 4096x1024); "
                                                       "the protocol's shapes: 1x128, 32x1024"),
    (["--experiment", "A", "--cases", "sim-mini"], "--cases applies to Experiment B"),
    (["--experiment", "B", "--shapes", "1x128"], "--shapes applies to Experiment A"),
    (["--experiment", "A", "--out", "x", "--resume", "y"], "name different folders"),
])
def test_bad_arguments_are_named_and_nothing_is_created(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench.cli, "select_backend", lambda **_: pytest.fail("the backend was chosen"))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err
    if "unknown case" in message:
        assert "balanced-128" in err and "sim-mini" in err
    if "ROWSxCOLUMNS" in message:
        assert "in the simulator: 1x128, 7x781" in err
    assert list(tmp_path.iterdir()) == []


def test_parse_shapes():
    assert parse_shapes("1x128, 7X781") == [(1, 128), (7, 781)]
    with pytest.raises(ValueError, match="positive"):
        parse_shapes("0x128")


def test_the_help_does_not_import_numba():
    # The backend must be chosen before Numba is imported; the CLI's help and checks come first.
    proc = subprocess.run([sys.executable, "-c", "import sys, bench.cli; bench.cli.experiment_parser().format_help();"
                           "print('numba' in sys.modules)"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"


def test_device_rules():
    from bench.environment import DeviceMismatch, check_device

    h100 = {"name": "NVIDIA H100 80GB HBM3", "compute_capability": [9, 0]}
    h200 = {"name": "NVIDIA H200", "compute_capability": [9, 0]}
    assert check_device(h100) is None and check_device(h200, "H200") is None
    assert "NOT THE PROTOCOL'S H100" in check_device(h200) and "'NVIDIA H200'" in check_device(h200)
    with pytest.raises(DeviceMismatch, match="expected a H100 but this device is 'NVIDIA H200'"):
        check_device(h200, "H100")
    with pytest.raises(DeviceMismatch, match=r"'NVIDIA A100-SXM4-80GB' \(sm_80\); the kernels need a Hopper-class"):
        check_device({"name": "NVIDIA A100-SXM4-80GB", "compute_capability": [8, 0]})
    with pytest.raises(DeviceMismatch, match="sm_90"):
        check_device({"name": "NVIDIA A100", "compute_capability": [8, 0]}, "A100")


def test_commands_that_read_the_checkout_say_so_when_it_is_missing(tmp_path):
    from bench.cli import checkout_problem

    assert checkout_problem("build-reference", []) is None  # this checkout has reference_cu/
    message = checkout_problem("build-reference", [], root=str(tmp_path))
    assert "`python -m bench build-reference` needs a checkout" in message and "reference_cu/" in message
    assert "ptx --compare" in checkout_problem("ptx", ["--compare"], root=str(tmp_path))
    assert checkout_problem("ptx", [], root=str(tmp_path)) is None  # plain ptx needs only the package
    assert checkout_problem("build-reference", ["--help"], root=str(tmp_path)) is None


def test_a_terminated_run_raises_where_it_is_and_the_old_handler_returns():
    # The main job's case loop runs inside terminate_raises(): SIGTERM (a `timeout`, a container being
    # stopped) becomes SystemExit there, which the loop records as the run's `stopped` reason.
    import os
    import signal
    import time

    from bench.experiment import terminate_raises

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit, match="terminated by SIGTERM"):
        with terminate_raises():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler runs at the next bytecode boundary, long before this ends
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_simulators_wraparound_warning_is_silenced_there_only():
    # The grid-barrier word wraps around by design; the simulator's numpy add calls that an overflow.
    import warnings

    from bench.experiment import simulator_wraparound_quiet

    def emit(message):
        warnings.warn_explicit(message, RuntimeWarning, "kernelapi.py", 157, module="numba.cuda.simulator.kernelapi")

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with simulator_wraparound_quiet(gpu=False):
            emit("overflow encountered in scalar add")
            emit("invalid value encountered in divide")
            warnings.warn("overflow encountered in scalar add", RuntimeWarning, stacklevel=1)  # elsewhere: said
        with simulator_wraparound_quiet(gpu=True):
            emit("overflow encountered in scalar add")
    overflow = "overflow encountered in scalar add"
    assert [str(w.message) for w in seen] == ["invalid value encountered in divide", overflow, overflow]


@pytest.mark.parametrize("command", [["perf"], ["profile", "--experiment", "A"], ["sanitize"]])
def test_a_command_that_needs_a_gpu_says_so_in_one_line(tmp_path, command):
    proc = _bench(command, tmp_path, NUMBA_ENABLE_CUDASIM="1")  # the simulator: as without a GPU, nothing runs
    assert proc.returncode != 0
    assert proc.stderr.startswith("error: ") and "needs a CUDA GPU" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert list(tmp_path.iterdir()) == []
