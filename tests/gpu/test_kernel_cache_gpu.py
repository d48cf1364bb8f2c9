"""The kernel cache on a GPU: a first process compiles and stores every kernel it launches; a second one, with
the cache warm, loads them all (hits, nothing compiled) and gives the same bits. ``bench cache warm`` fills a
cache from parallel processes. Each side runs in its own process: the cache is read once per process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Runs the library's entry points once, saves every output and prints the process's compile log.
SCRIPT = """
import json, sys
import numpy as np
from numba import cuda
from numba_softmax import softmax
from numba_softmax.cases import EXPERIMENT_B_SIM_CASES
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.launch.kernel_cache import compile_log
from numba_softmax.tiled import tiled_softmax
out = {}
for shape in ((3, 128), (3, 1024), (3, 781)):
    x = matrix_fixture("random", shape)
    d_x, d_y = cuda.to_device(x), cuda.device_array(shape, dtype=np.float32)
    out[f"fused {shape}"] = softmax(d_x, method="fused", out=d_y, check=True).copy_to_host()
    out[f"auto {shape}"] = softmax(d_x, out=cuda.device_array(shape, dtype=np.float32), check=True).copy_to_host()
    out[f"stages {shape}"] = softmax(x, method="stages")
_, lengths = EXPERIMENT_B_SIM_CASES[0]
values = packed_fixture("random", lengths)
for scheduler in ("separate", "phased", "dag"):
    out[scheduler] = tiled_softmax(values, lengths, scheduler).out
np.savez(sys.argv[1], **out)
print(json.dumps(compile_log()))
"""


def _run(args, cache):
    env = dict(os.environ, NUMBA_SOFTMAX_CACHE_DIR=str(cache),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("NUMBA_SOFTMAX_CACHE", None)
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def _outputs(path):
    with np.load(path) as saved:
        return {name: saved[name].tobytes() for name in saved.files}


def test_a_warm_process_loads_every_kernel_and_gives_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    cold = json.loads(_run(["-c", SCRIPT, str(tmp_path / "cold.npz")], cache).strip().splitlines()[-1])
    warm = json.loads(_run(["-c", SCRIPT, str(tmp_path / "warm.npz")], cache).strip().splitlines()[-1])
    assert cold and {entry["outcome"] for entry in cold} == {"miss"}, cold
    assert {entry["outcome"] for entry in warm} == {"hit"}, warm
    assert [entry["kernel"] for entry in warm] == [entry["kernel"] for entry in cold]
    assert [entry["key"] for entry in warm] == [entry["key"] for entry in cold]
    assert _outputs(tmp_path / "warm.npz") == _outputs(tmp_path / "cold.npz")


@pytest.mark.parametrize("experiment", ["A"])
def test_bench_cache_warm_fills_the_cache_from_parallel_processes(tmp_path, experiment):
    cache = tmp_path / "cache"
    out = _run(["-m", "bench", "cache", "warm", "--experiment", experiment, "--jobs", "4"], cache)
    assert "11 kernels of --experiment A" in out and "11 compiled and stored" in out, out
    assert "entries: 11" in _run(["-m", "bench", "cache", "info"], cache)
    again = _run(["-m", "bench", "cache", "warm", "--experiment", experiment, "--jobs", "2"], cache)
    assert "0 compiled and stored, 11 already in" in again, again
