"""Markers for tests that run on both backends (the simulator and a GPU), skipping with a reason.

Like numba-cuda's ``skip_on_cudasim`` / ``skip_unless_cudasim``: the condition is this process's
backend (:data:`numba_softmax.backend.SIMULATOR`), so a test written once is skipped only in the
process that cannot run it.
"""

import json
import os
import subprocess
import sys

import pytest

from numba_softmax.backend import SIMULATOR

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Most worker processes of a GPU test run (:func:`gpu_test_workers`): a GPU test spends most of its time on the
#: host (launch, oracle, subprocess runs of the bench), so CPUs, not the GPU, set the pace.
GPU_TEST_WORKERS = 16


#: Where the tests' figures for results/ go (the ``evidence`` fixture): one process collects them.
EVIDENCE_ENV = "NUMBA_SOFTMAX_EVIDENCE"


def gpu_test_workers(markexpr, numprocesses, gpu, cpus, xdist, evidence=False):
    """How many pytest-xdist workers ``pytest -m gpu`` starts when ``-n`` is not given (``numprocesses`` None):
    one per CPU up to :data:`GPU_TEST_WORKERS`, where the run selects the GPU tests (``markexpr`` "gpu"), the
    machine has a GPU and pytest-xdist is installed; else ``None`` (this process runs the tests): ``-n 0``, or a
    run that collects ``evidence`` (:data:`EVIDENCE_ENV`), which one process writes whole."""
    if (numprocesses is not None or markexpr.strip() != "gpu" or not gpu or not xdist or cpus < 2
            or evidence):
        return None
    return min(GPU_TEST_WORKERS, cpus)


def skip_on_cudasim(reason):
    """Skip in the Numba CUDA simulator (the test needs a GPU: the launch layer, graphs, nvcc, timing)."""
    return pytest.mark.skipif(SIMULATOR, reason=f"the simulator: {reason}")


def skip_unless_cudasim(reason):
    """Skip outside the simulator (the test checks the simulator's own behaviour)."""
    return pytest.mark.skipif(not SIMULATOR, reason=f"not the simulator: {reason}")


def run_on_the_real_target(script, folder, *args, timeout=600):
    """Run ``script`` in a child Python with Numba's real CUDA target (whatever this process is: PTX compiles
    without a GPU) and return the JSON it writes to the path it gets as ``sys.argv[1]`` (in ``folder``, a
    temporary folder); ``args`` follow that path."""
    path = os.path.join(str(folder), "out.json")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", script, path, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    with open(path) as handle:
        return json.load(handle)


def run_bench_in_simulator(args, tmp_path):
    """``python -m bench ARGS --out tmp_path/run`` in a child process in the simulator: (the finished process, the
    run folder)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "bench", *args, "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1200, check=False)
    return proc, out
