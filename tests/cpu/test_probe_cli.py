"""``python -m bench probe``: the dispatcher picks a probe and hands it the rest of the command line."""

import os

import pytest

from bench import probe


def test_help_lists_every_probe(capsys):
    with pytest.raises(SystemExit) as exit_:
        probe.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for name in ("tiles", "launch", "handoff", "api", "twins", "floors"):
        assert name in text and probe.PROBES[name][1].split()[0] in text


def test_unknown_or_missing_probe_is_a_usage_error(capsys):
    for argv in (["nope"], []):
        with pytest.raises(SystemExit) as exit_:
            probe.main(argv)
        assert exit_.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err


def test_the_probe_reads_its_own_options(capsys):
    # The launch probe's own parser answers --help (this level does not swallow it), under its full name.
    with pytest.raises(SystemExit) as exit_:
        probe.main(["launch", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "usage: python -m bench probe launch" in text and "--batches" in text
    with pytest.raises(SystemExit) as exit_:
        probe.main(["launch", "--no-such-option"])
    assert exit_.value.code == 2


def test_the_handoff_probe_refuses_too_few_rounds(capsys):
    with pytest.raises(SystemExit) as exit_:
        probe.main(["handoff", "--rounds", "3"])
    assert exit_.value.code == 2
    assert "--rounds must be >= 10" in capsys.readouterr().err


def test_the_handoff_kernels_compile_with_their_ordering():
    # The ping-pong runs on a GPU only (the simulator runs one block at a time); its PTX is checked here.
    from numba_softmax.kernels.diagnostics import handoff
    from numba_softmax.ptx import kernel_ptx

    ptx = kernel_ptx(handoff.pingpong_kernel, "void(int32[::1], int64, boolean, int64[::1])")
    for instruction in ("ld.acquire.gpu", "ld.relaxed.gpu", "st.relaxed.gpu", "fence.acq_rel.gpu", "globaltimer"):
        assert instruction in ptx, instruction
    assert "atom.global.add" in kernel_ptx(handoff.atomic_chain_kernel, "void(int32[::1], int64, int64[::1])")


def test_the_floors_probe_refuses_too_few_rounds_and_unknown_cases(capsys):
    for argv, message in ((["--rounds", "3"], "--rounds 3: at least 10"), (["--cases", "balanced-9"], "unknown cases")):
        with pytest.raises(SystemExit) as exit_:
            probe.main(["floors", *argv])
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


def test_the_floors_kernels_compile_as_their_yardsticks_need():
    # The barrier kernel crosses the persistent kernel's own grid barrier (its release arrivals and acquire
    # polls), the grid.sync kernel Numba's cooperative-groups barrier; the empty kernel compiles to nothing.
    from bench.probes import floors
    from numba_softmax.kernels.diagnostics import grid_barriers
    from numba_softmax.kernels.tiles import empty_tile_kernel
    from numba_softmax.ptx import kernel_ptx

    barriers = kernel_ptx(grid_barriers.two_grid_barriers_kernel, "void(int32[::1], int32)")
    assert barriers.count("atom.release.gpu.global.add") >= 2 and "ld.acquire.gpu" in barriers
    empty = kernel_ptx(empty_tile_kernel, "void()")
    assert "ld.global" not in empty and "st.global" not in empty
    syncs = kernel_ptx(grid_barriers.two_grid_syncs_kernel, "void()")
    assert "cudaCGSynchronizeGrid" in syncs or "cudaCGGetIntrinsicHandle" in syncs
    assert os.path.isfile(floors.CPP_SOURCE)


@pytest.mark.parametrize("shapes", ["1by128", "0x128", "4x"])
def test_the_api_probe_refuses_bad_shapes(capsys, shapes):
    with pytest.raises(SystemExit) as exit_:
        probe.main(["api", "--shapes", shapes])
    assert exit_.value.code == 2
    assert "--shapes" in capsys.readouterr().err


def test_the_api_probe_refuses_negative_rounds(capsys):
    with pytest.raises(SystemExit) as exit_:
        probe.main(["api", "--rounds", "-1"])
    assert exit_.value.code == 2
    assert "--rounds: expected 0 or more, got -1" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "4x"], "--shapes: '4x' is not ROWSxCOLS"),
    (["--shapes", "0x128"], "--shapes: '0x128' is not ROWSxCOLS"),
    (["--shapes", "", "--cases", "balanced-9"], "--cases: unknown case 'balanced-9'"),
])
def test_the_twins_probe_refuses_bad_shapes_and_cases(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        probe.main(["twins", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(probe.PROBES))
def test_every_probe_without_a_gpu_says_so_in_one_line(capsys, monkeypatch, name):
    # A probe times kernels: without a GPU (made so here, so the test means the same on a GPU machine) it stops
    # with one line and exit status 2 once its options are read, never with the driver's traceback.
    import bench.environment

    monkeypatch.setattr(bench.environment, "gpu_present", lambda: False)
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    with pytest.raises(SystemExit) as exit_:
        probe.main([name])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"python -m bench probe {name}: error: needs a CUDA GPU: none found" in err
    assert "Traceback" not in err


def test_a_probe_refuses_the_simulator(capsys, monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    with pytest.raises(SystemExit) as exit_:
        probe.main(["launch"])
    assert exit_.value.code == 2
    assert "NUMBA_ENABLE_CUDASIM=1 selects the simulator" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(probe.PROBES))
def test_a_probe_never_writes_over_results_it_did_not_create(tmp_path, capsys, monkeypatch, name):
    # The check comes once the options are read, before the GPU check and before anything runs, so a long probe
    # cannot end by overwriting evidence; the file is untouched.
    import importlib

    import bench.environment
    from bench.probes import write_results

    module = importlib.import_module(probe.PROBES[name][0])
    existing = tmp_path / module.RESULTS_FILE
    existing.write_text("committed evidence")
    monkeypatch.setattr(bench.environment, "gpu_present", lambda: True)
    with pytest.raises(SystemExit) as exit_:
        probe.main([name, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert f"{module.RESULTS_FILE} is already there" in capsys.readouterr().err
    with pytest.raises(FileExistsError):
        write_results(str(tmp_path), module.RESULTS_FILE, [])
    assert existing.read_text() == "committed evidence"


def test_another_tree_is_launched_by_its_own_launch_layer(tmp_path):
    """--compare-tree times the other tree's kernels through that tree's launch layer (its kernel entry and
    argument packing), not this tree's: its launch.driver is its own module, loaded from its own files."""
    import shutil
    import subprocess
    import sys

    import numba_softmax
    package = os.path.dirname(numba_softmax.__file__)
    shutil.copytree(package, tmp_path / "numba_softmax", ignore=shutil.ignore_patterns("__pycache__"))
    script = (
        "import sys, numba_softmax.launch.driver as ours\n"
        "from bench.probes import other_tree_module\n"
        "from bench.probes.twins import OtherTreeLaunches\n"
        "driver = other_tree_module(sys.argv[1], 'launch.driver')\n"
        "assert driver is not ours and driver.__file__.startswith(sys.argv[1]), driver.__file__\n"
        "launches = OtherTreeLaunches({'driver': driver}, [[]])\n"
        "assert launches.invocation.__self__ is driver.Invocation\n"
        "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=False,
                          cwd=os.path.dirname(package))
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
