"""The CPU-image compile step (python -m bench build-kernels) into a temporary folder, and the check that the GPU
function would find there every kernel the main job launches: the plans' own launches, built in the simulator,
give the keys the launch layer will ask the store for. Loading the cubins needs a GPU (`--prebuilt`)."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.kernel_build import build, compile_kernel, run_kernels
from numba_softmax.launch.prebuilt import CACHE_FOLDER, MANIFEST_NAME, KernelStore, PrebuiltKernelError, kernel_key

ROOT = Path(__file__).resolve().parents[2]
EM_CUDA = 190  # ELF machine of a cubin


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from numba_softmax.ptx import find_ptxas

    if find_ptxas() is None:
        pytest.skip("ptxas is not installed (it comes with numba-cuda[cu12]'s nvidia-cuda-nvcc wheel)")
    out = tmp_path_factory.mktemp("kernels") / "store"
    return out, build(out, jobs=2)  # two processes, as on a CI machine


def test_every_run_kernel_has_ptx_and_an_sm90_cubin(built):
    out, manifest = built
    assert manifest["arch"] == "sm_90" and manifest["compute_capability"] == [9, 0]
    assert {r["name"] for r in manifest["kernels"]} == {d.py_func.__name__ for d, _ in run_kernels()}
    for record in manifest["kernels"]:
        ptx = (out / record["ptx"]).read_text()
        cubin = (out / record["cubin"]).read_bytes()
        assert f".entry {record['entry']}(" in ptx and ".target sm_90" in ptx
        assert hashlib.sha256(cubin).hexdigest() == record["cubin_sha256"]
        assert cubin[:4] == b"\x7fELF" and int.from_bytes(cubin[18:20], "little") == EM_CUDA
        assert record["entry"].encode() in cubin
    assert json.loads((out / MANIFEST_NAME).read_text()) == json.loads(json.dumps(manifest))


def test_a_kernel_built_in_this_process_is_the_one_the_workers_built(built):
    """The parallel build writes what one process would, in the kernels' order: the same PTX but for the numbers
    Numba gives each function and shared array of a process (``B4v506B``, ``_cudapy_smem_32`` in one, ``B2v1B``,
    ``_cudapy_smem_1`` in another), which the symbols carry."""
    import re

    from numba_softmax.ptx import find_ptxas

    out, manifest = built
    assert [r["name"] for r in manifest["kernels"]] == [d.py_func.__name__ for d, _ in run_kernels()]
    index = next(i for i, (d, _) in enumerate(run_kernels()) if d.py_func.__name__ == "auto_rows_l1_q1")
    ptx, cubin, _ = compile_kernel(index, "sm_90", find_ptxas(), None)
    record = manifest["kernels"][index]

    def unnumbered(text):
        return re.sub(r"_cudapy_smem_\d+", "_cudapy_smem_#", re.sub(r"B\d+v\d+B", "B#v#B", text))

    assert unnumbered(ptx) == unnumbered((out / record["ptx"]).read_text())
    assert re.search(r"\.entry\s+(\S+)\(", ptx).group(1).encode() in cubin


def test_the_gpu_function_would_find_every_kernel_the_run_launches(built, tmp_path):
    out, manifest = built
    code = ("import json, sys; from bench.experiment import run_launch_keys; "
            "print(json.dumps(run_launch_keys(sys.argv[1])))")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "scratch")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    launched = json.loads(proc.stdout.strip().splitlines()[-1])
    built_keys = {r["key"] for r in manifest["kernels"]}
    assert launched and set(launched) <= built_keys, sorted(set(launched) - built_keys)
    for needed in ("persistent_tiles(", "persistent_tiles_trace(", "init_queue_kernel(", "tile_summary_kernel_trace(",
                   "row_max_stage(", "fused_row_softmax_q1("):
        assert any(f".{needed}" in key for key in launched), needed
    # The simulator takes no vector path; the vector builds are launched with the same argument types.
    from numba_softmax.kernels.fused_row import FUSED_KERNELS
    fused_types = next(k.split("(", 1)[1] for k in launched if ".fused_row_softmax_q1(" in k)
    for name in FUSED_KERNELS:
        assert f"numba_softmax.kernels.fused_row.{name}({fused_types}" in built_keys


def test_a_missing_kernel_is_named(built):
    out, _ = built
    store = KernelStore(out)

    class Other:
        @staticmethod
        def py_func():
            pass

    Other.py_func.__module__, Other.py_func.__name__ = "numba_softmax.kernels.diagnostic", "register_capped"
    with pytest.raises(PrebuiltKernelError, match=r"numba_softmax.kernels.diagnostic.register_capped\(int32\) is "
                                                  rf"not among the {len(run_kernels())} kernels built"):
        store.kernel(Other, ("int32",))
    assert kernel_key(Other, ()) == "numba_softmax.kernels.diagnostic.register_capped()"


def test_an_altered_cubin_or_another_device_is_refused(built, tmp_path):
    import shutil

    out, manifest = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    record = manifest["kernels"][0]
    (copy / record["cubin"]).write_bytes(b"\x7fELF not the one")
    store = KernelStore(copy)
    with pytest.raises(PrebuiltKernelError, match="is not the cubin kernels.json records"):
        store._image(store.records[record["key"]])
    with pytest.raises(PrebuiltKernelError, match="built for sm_90, this device is sm_100"):
        store.check_device((10, 0))
    store.check_device((9, 0))
    with pytest.raises(PrebuiltKernelError, match="holds no kernels.json"):
        KernelStore(tmp_path)


def test_the_build_refuses_a_folder_that_holds_something(tmp_path, capsys):
    from bench.cli import main

    (tmp_path / "keep.txt").write_text("evidence")
    assert main(["build-kernels", "--out", str(tmp_path)]) == 2
    assert "not empty" in capsys.readouterr().err and sorted(os.listdir(tmp_path)) == ["keep.txt"]


def test_prebuilt_without_a_gpu_is_refused(tmp_path):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "bench", "--experiment", "A", "--prebuilt", str(tmp_path),
                           "--out", str(tmp_path / "run")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 2 and "--prebuilt loads cubins on a GPU" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_the_store_holds_every_expected_key_and_this_source(built):
    from bench.kernel_build import expected_keys

    out, manifest = built
    store = KernelStore(out)
    assert expected_keys() == sorted(r["key"] for r in manifest["kernels"]) and store.missing(expected_keys()) == []
    assert store.missing(["x.y(int32)"]) == ["x.y(int32)"]
    store.check_source()


def test_kernels_built_from_other_source_are_refused(built, tmp_path):
    import shutil

    out, manifest = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    (copy / MANIFEST_NAME).write_text(json.dumps(dict(manifest, source_sha256="0" * 64)))
    with pytest.raises(PrebuiltKernelError, match="built from other source than this numba_softmax"):
        KernelStore(copy).check_source()


def test_the_cubins_are_kernel_cache_entries_under_the_launch_layers_keys(built):
    from numba.core import sigutils

    from numba_softmax.launch.kernel_cache import KernelCache, cache_key

    out, manifest = built
    cache = KernelCache(out / CACHE_FOLDER, read_only=True)  # what --prebuilt makes the process's cache
    records = {record["key"]: record for record in manifest["kernels"]}
    for dispatcher, signature in run_kernels():
        argtypes = sigutils.normalize_signature(signature)[0]
        record = records[kernel_key(dispatcher, argtypes)]
        entry, cubin = cache.load(cache_key(dispatcher, argtypes, (9, 0)))
        assert cubin == (out / record["cubin"]).read_bytes() and entry["entry"] == record["entry"]
