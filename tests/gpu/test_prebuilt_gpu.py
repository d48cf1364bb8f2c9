"""Prebuilt kernels on a GPU: cubins built on the CPU (python -m bench build-kernels) load with the driver,
run without Numba compiling anything, and give the same bits as the kernels Numba compiles at run time.

Each side runs in its own process: activating a folder of prebuilt kernels is for the whole process."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Runs the library's entry points once and saves every output; with a store, also proves nothing compiled.
SCRIPT = """
import json, sys
import numpy as np
from numba import cuda
store = sys.argv[2] if len(sys.argv) > 2 else None
if store:
    from numba_softmax.launch.prebuilt import activate
    activate(store)
from numba_softmax import softmax
from numba_softmax.cases import EXPERIMENT_B_SIM_CASES
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.tiled import tiled_softmax
out = {}
for shape in ((3, 128), (3, 1024), (3, 781), (3, 4096)):
    x = matrix_fixture("random", shape)
    d_x, d_y = cuda.to_device(x), cuda.device_array(shape, dtype=np.float32)
    out[f"fused {shape}"] = softmax(d_x, method="fused", out=d_y, check=True).copy_to_host()
    out[f"stages {shape}"] = softmax(x, method="stages")
_, lengths = EXPERIMENT_B_SIM_CASES[0]
values = packed_fixture("random", lengths)
for scheduler in ("separate", "phased", "dag"):
    for trace in (False, True):
        out[f"{scheduler} trace={trace}"] = tiled_softmax(values, lengths, scheduler, trace=trace).out
np.savez(sys.argv[1], **out)
if store:
    from bench.kernel_build import run_kernels
    compiled = sorted(d.py_func.__name__ for d, _ in run_kernels() if d.overloads)
    print(json.dumps({"numba_compiled": compiled}))
"""


def _run(args, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    out = tmp_path_factory.mktemp("prebuilt") / "kernels"
    _run(["-m", "bench", "build-kernels", "--out", str(out)], ROOT)
    return out


def test_prebuilt_kernels_run_without_compiling_and_give_the_same_bits(store, tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT)
    printed = _run([str(script), str(tmp_path / "prebuilt.npz"), str(store)], tmp_path)
    assert json.loads(printed.strip().splitlines()[-1]) == {"numba_compiled": []}
    _run([str(script), str(tmp_path / "jit.npz")], tmp_path)
    prebuilt, jit = np.load(tmp_path / "prebuilt.npz"), np.load(tmp_path / "jit.npz")
    assert sorted(prebuilt.files) == sorted(jit.files)
    for name in jit.files:
        assert np.array_equal(prebuilt[name].view(np.uint32), jit[name].view(np.uint32)), name


def test_the_main_job_runs_on_prebuilt_kernels(store, tmp_path):
    from numba import cuda

    name = cuda.get_current_device().name
    token = (name.decode() if isinstance(name, bytes) else name).split()[-1]
    out = tmp_path / "run"
    _run(["-m", "bench", "--experiment", "B", "--cases", "balanced-128", "--prebuilt", str(store), "--expect-device",
          token, "--no-arrays", "--no-summary", "--out", str(out)], tmp_path)
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["prebuilt"]["kernels"] == len(json.loads((store / "kernels.json").read_text())["kernels"])
    layouts = [json.loads(line) for line in (out / "layouts.jsonl").read_text().splitlines()]
    resources = [r for layout in layouts for v in layout["kernel_resources"].values() for r in v]
    assert resources and all(r.get("prebuilt") for r in resources)
    assert not (out / "summary.md").exists()


def test_a_store_built_for_another_device_stops_before_the_run(store, tmp_path):
    import shutil

    copy = tmp_path / "other"
    shutil.copytree(store, copy)
    manifest = json.loads((copy / "kernels.json").read_text())
    (copy / "kernels.json").write_text(json.dumps(dict(manifest, arch="sm_100", compute_capability=[10, 0])))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--shapes", "1x128", "--no-cudnn",
                           "--prebuilt", str(copy), "--out", str(tmp_path / "run")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 3 and "were built for sm_100" in proc.stderr
    assert not (tmp_path / "run").exists()
