"""The on-disk kernel cache without a GPU: what its key holds (a change to each ingredient misses, nothing
else does), its files (atomic, checksummed, shared by concurrent writers), where it lives and when it is
off, and the compile-or-load decision with the driver steps replaced (the driver load is the only GPU step)."""

import importlib
import json
import multiprocessing
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
from numba import types as nbtypes
from numba.core import sigutils

from numba_softmax.launch import cached_kernel, kernel_cache
from numba_softmax.launch.kernel_cache import KernelCache, Uncacheable, cache_key

ROOT = Path(__file__).resolve().parents[2]
MATRIX = (nbtypes.float32[:, ::1],)
CC = (9, 0)

HELPER = """
from numba import cuda


@cuda.jit(device=True)
def scale(x):
    return x * {factor}
"""

KERNEL = """
from numba import cuda

import {helper}


def make(factor, label="plain"):
    @cuda.jit
    def toy(out):
        i = cuda.grid(1)
        if i < out.shape[1]:
            out[0, i] = {helper}.scale(out[0, i]) {operator} factor

    return toy


@cuda.jit
def neighbour(out):
    out[0, 0] = {neighbour}
"""


@pytest.fixture()
def toy(tmp_path, monkeypatch, request):
    """A kernel module and the helper module it calls, importable from ``tmp_path``; ``write`` rewrites one
    and reloads it (the same module names: only the source changes)."""
    suffix = request.node.name.replace("[", "_").replace("]", "_").replace("-", "_")
    names = {"helper": f"toy_helper_{suffix}", "kernel": f"toy_kernel_{suffix}"}
    monkeypatch.syspath_prepend(str(tmp_path))
    state = {"factor": "2.0", "operator": "*", "neighbour": "1.0"}

    def write(**changes):
        state.update(changes)
        (tmp_path / f"{names['helper']}.py").write_text(HELPER.format(factor=state["factor"]))
        (tmp_path / f"{names['kernel']}.py").write_text(KERNEL.format(helper=names["helper"],
                                                                      operator=state["operator"],
                                                                      neighbour=state["neighbour"]))
        modules = {}
        for role in ("helper", "kernel"):
            module = sys.modules.get(names[role])
            modules[role] = importlib.reload(module) if module else importlib.import_module(names[role])
        return modules["kernel"]

    yield write
    for name in names.values():
        sys.modules.pop(name, None)


def key(dispatcher, argtypes=MATRIX, cc=CC, toolchain=None):
    return cache_key(dispatcher, argtypes, cc, toolchain)


def test_the_same_inputs_give_the_same_key(toy):
    module = toy()
    assert key(module.make(2)) == key(module.make(2))  # two factory calls, two dispatchers, one kernel
    assert key(module.make(2)) == key(toy().make(2))  # the modules reloaded unchanged
    assert key(module.make(2)) == key(module.make(2, label="other"))  # a parameter the kernel does not use


def test_a_change_to_each_ingredient_misses(toy):
    module = toy()
    base = key(module.make(2))
    changed = {
        "factory parameter": key(module.make(3)),
        "factory parameter's type": key(module.make(2.0)),
        "argument types": key(module.make(2), (nbtypes.float64[:, ::1],)),
        "compute capability": key(module.make(2), cc=(10, 0)),
        "a version": key(module.make(2), toolchain=dict(kernel_cache.toolchain_versions(), numba="0.0.0")),
        "the NVVM version": key(module.make(2), toolchain=dict(kernel_cache.toolchain_versions(), nvvm=[9, 9])),
    }
    changed["the kernel's source"] = key(toy(operator="+").make(2))
    changed["a called helper's source"] = key(toy(operator="*", factor="3.0").make(2))
    assert key(toy(factor="2.0").make(2)) == base  # back to the first source: the first key again
    assert len({base, *changed.values()}) == len(changed) + 1, changed


def test_editing_one_kernel_leaves_the_other_kernels_of_its_module_cached(toy):
    module = toy()
    base, neighbour = key(module.make(2)), key(module.neighbour)
    edited = toy(neighbour="3.0")
    assert key(edited.neighbour) != neighbour  # the edited kernel misses
    assert key(edited.make(2)) == base  # its module's other kernel still hits


def test_the_compile_options_are_in_the_key():
    from numba import cuda

    def body(out):
        out[0, 0] = 1.0

    assert key(cuda.jit(body)) != key(cuda.jit(lineinfo=True)(body))


def test_a_value_without_a_stable_description_is_not_cached():
    from numba import cuda

    marker = object()

    def body(out):
        out[0, 0] = 1.0 if marker else 0.0

    with pytest.raises(Uncacheable, match="object"):
        key(cuda.jit(body))


def _registry_keys():
    from numba_softmax.kernels.registry import AUTO_KERNELS, KERNELS

    return {name: cache_key(dispatcher, sigutils.normalize_signature(signature)[0], CC)
            for name, (dispatcher, signature) in {**KERNELS, **AUTO_KERNELS}.items()}


def test_every_registered_kernel_is_cacheable_and_keyed_alike_in_another_process():
    here = _registry_keys()
    code = ("import json, sys; sys.path.insert(0, 'tests/cpu'); import test_kernel_cache as t; "
            "print(json.dumps(t._registry_keys()))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               PYTHONHASHSEED="12345")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == here
    assert len(set(here.values())) == len(here)  # every build its own entry


def test_the_key_follows_the_code_a_kernel_calls_into_and_no_other(monkeypatch):
    from numba_softmax.kernels.registry import KERNELS

    dispatcher, signature = KERNELS["fused_row_softmax_q1"]
    argtypes = sigutils.normalize_signature(signature)[0]
    walk = kernel_cache._KeyWalk()
    walk.value(dispatcher)
    followed = {part[1] for part in walk.parts if part[0] == "function"}
    assert {"numba_softmax.numerics", "numba_softmax.kernels.fused_row"} <= followed
    assert not {"numba_softmax.oracle", "numba_softmax.launch.driver", "numba_softmax.api"} & followed
    base = cache_key(dispatcher, argtypes, CC)
    real = kernel_cache._code_description

    def edited(target):
        """The code of every function of the file ``target`` described as if it had been edited."""
        def describe(code):
            found = real(code)
            return [*found, "edited"] if code.co_filename.endswith(target) else found
        return describe

    monkeypatch.setattr(kernel_cache, "_code_description", edited(os.path.join("numba_softmax", "numerics.py")))
    assert cache_key(dispatcher, argtypes, CC) != base  # the numerics policy edited: a miss
    monkeypatch.setattr(kernel_cache, "_code_description", edited(os.path.join("numba_softmax", "oracle.py")))
    assert cache_key(dispatcher, argtypes, CC) == base  # an unrelated module edited: still a hit
    monkeypatch.setattr(kernel_cache, "_code_description", real)
    file_digest, entry = kernel_cache.file_digest, os.path.join("launch", "entry.py")
    monkeypatch.setattr(kernel_cache, "file_digest",
                        lambda path: "0" * 64 if path.endswith(entry) else file_digest(path))
    assert cache_key(dispatcher, argtypes, CC) != base  # the slim entry's generator edited: a miss


def test_a_module_attribute_without_a_description_keys_the_whole_module(tmp_path, monkeypatch):
    """A kernel that names an attribute of a project module that has no stable description (here an arbitrary
    object) keys that module's source file instead: an edit anywhere in it then misses."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "toy_opaque.py").write_text("MARKER = object()\nSCALE = 2.0\n")
    (tmp_path / "toy_opaque_kernel.py").write_text(
        "from numba import cuda\nimport toy_opaque\n\n\n@cuda.jit\ndef k(out):\n"
        "    out[0, 0] = toy_opaque.SCALE if toy_opaque.MARKER is None else 1.0\n")
    monkeypatch.setattr(kernel_cache, "_followed_file",
                        lambda module: getattr(module, "__file__", None) if module.__name__.startswith("toy_opaque")
                        else None)
    try:
        kernel = importlib.import_module("toy_opaque_kernel").k
        walk = kernel_cache._KeyWalk()
        walk.value(kernel)
        assert "toy_opaque" in walk.modules and ["attribute", "toy_opaque", "SCALE", ["float", "2.0"]] in walk.parts
    finally:
        sys.modules.pop("toy_opaque", None)
        sys.modules.pop("toy_opaque_kernel", None)


# --- the files -------------------------------------------------------------------------------------

RECORD = {"kernel": "toy(array(float32, 2d, C))", "entry": "_Z3toy", "cooperative": False}
IMAGE = b"\x7fELF" + bytes(range(256)) * 64


def test_an_entry_reads_back_what_was_stored(tmp_path):
    cache = KernelCache(tmp_path / "cache")
    assert cache.load("a" * 64) is None
    assert cache.store("a" * 64, RECORD, IMAGE)
    assert cache.load("a" * 64) == (RECORD, IMAGE)
    assert [Path(p).name for p in cache.files()] == ["a" * 64 + ".kernel"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_corrupt_entry_is_rebuilt_with_one_warning(tmp_path, damage):
    cache = KernelCache(tmp_path)
    cache.store("b" * 64, RECORD, IMAGE)
    path = Path(cache.path("b" * 64))
    data = path.read_bytes()
    path.write_bytes({"truncate": data[:-100], "flip": data[:-1] + bytes([data[-1] ^ 1]), "empty": b""}[damage])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.load("b" * 64) is None
        assert cache.load("b" * 64) is None  # removed: now simply absent
    assert len(caught) == 1 and "corrupt" in str(caught[0].message)
    assert not path.exists()
    cache.store("b" * 64, RECORD, IMAGE)
    assert cache.load("b" * 64) == (RECORD, IMAGE)


def _fill(folder, key, rounds):
    cache = KernelCache(folder)
    for n in range(rounds):
        assert cache.store(key, RECORD, IMAGE)
        found = cache.load(key)
        assert found is None or found == (RECORD, IMAGE), n


def test_four_processes_filling_one_entry_leave_a_valid_cache(tmp_path):
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_fill, args=(str(tmp_path), "c" * 64, 200)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
    assert [worker.exitcode for worker in workers] == [0, 0, 0, 0]
    assert sorted(os.listdir(tmp_path)) == ["c" * 64 + ".kernel"]  # no temporary file left
    assert KernelCache(tmp_path).load("c" * 64) == (RECORD, IMAGE)


def test_clear_removes_only_the_files_the_cache_wrote(tmp_path):
    cache = KernelCache(tmp_path)
    cache.store("d" * 64, RECORD, IMAGE)
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "other.kernel").write_text("not an entry's name")
    assert cache.clear() == 1
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "other.kernel"]


# --- where, and whether ----------------------------------------------------------------------------

@pytest.fixture()
def fresh(monkeypatch):
    for name in ("NUMBA_SOFTMAX_CACHE", "NUMBA_SOFTMAX_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    kernel_cache.reset()
    yield monkeypatch
    kernel_cache.reset()


def test_the_location_follows_the_variables(fresh, tmp_path):
    assert kernel_cache.default_folder() == os.path.join(os.path.expanduser("~"), ".cache", "numba_softmax")
    fresh.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.default_folder() == str(tmp_path / "xdg" / "numba_softmax")
    fresh.setenv("NUMBA_SOFTMAX_CACHE_DIR", str(tmp_path / "mine"))
    assert kernel_cache.default_folder() == str(tmp_path / "mine")
    assert kernel_cache.active_cache().folder == str(tmp_path / "mine")


def test_numba_softmax_cache_0_disables_it(fresh, tmp_path):
    fresh.setenv("NUMBA_SOFTMAX_CACHE_DIR", str(tmp_path))
    fresh.setenv("NUMBA_SOFTMAX_CACHE", "0")
    assert kernel_cache.active_cache() is None
    assert os.listdir(tmp_path) == []


def test_an_unwritable_location_falls_back_to_no_cache_with_one_warning(fresh, tmp_path):
    (tmp_path / "a file").write_text("")
    fresh.setenv("NUMBA_SOFTMAX_CACHE_DIR", str(tmp_path / "a file" / "cache"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert kernel_cache.active_cache() is None
        assert kernel_cache.active_cache() is None
        assert not KernelCache(tmp_path / "a file" / "cache").store("e" * 64, RECORD, IMAGE)
    assert len(caught) == 1 and "not writable" in str(caught[0].message), [str(w.message) for w in caught]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_falls_back_to_no_cache(fresh, tmp_path):
    tmp_path.chmod(0o500)
    try:
        fresh.setenv("NUMBA_SOFTMAX_CACHE_DIR", str(tmp_path))
        with pytest.warns(RuntimeWarning, match="not writable"):
            assert kernel_cache.active_cache() is None
    finally:
        tmp_path.chmod(0o700)


# --- compile or load, the driver steps replaced ----------------------------------------------------

class FakeCompiled:
    """What ``driver.CompiledKernel`` gives, without a GPU: an entry name and the cubin Numba linked."""

    made = 0

    def __init__(self, dispatcher, argtypes):
        FakeCompiled.made += 1
        self.name, self.cooperative, self.argtypes = "_Z3toy", False, tuple(argtypes)
        linked = types.SimpleNamespace(code=IMAGE)  # numba-cuda's linker gives a cuda.core ObjectCode
        library = types.SimpleNamespace(get_cubin=lambda: linked, _setup_functions=[], _teardown_functions=[])
        self.numba_kernel = types.SimpleNamespace(_codelibrary=library)


class FakeLoaded:
    def __init__(self, module, entry, argtypes, cooperative=False, origin="cache"):
        self.module, self.name, self.cooperative = module, entry, cooperative


@pytest.fixture()
def no_gpu(fresh, tmp_path):
    fresh.setattr(cached_kernel, "CompiledKernel", FakeCompiled)
    fresh.setattr(cached_kernel, "CubinKernel", FakeLoaded)
    fresh.setattr(cached_kernel, "load_module", lambda image: image)
    fresh.setattr(cached_kernel, "driver_version", lambda: 12080)
    device = types.SimpleNamespace(compute_capability=CC)
    fresh.setattr(cached_kernel, "ensure_context", lambda: types.SimpleNamespace(device=device))
    fresh.setenv("NUMBA_SOFTMAX_CACHE_DIR", str(tmp_path / "cache"))
    FakeCompiled.made = 0
    return tmp_path / "cache"


def test_a_miss_compiles_and_stores_then_a_hit_loads_without_compiling(no_gpu, toy):
    dispatcher = toy().make(2)
    logged = len(kernel_cache.compile_log())
    first = cached_kernel.cached_compile(dispatcher, MATRIX)
    assert isinstance(first, FakeCompiled) and FakeCompiled.made == 1
    second = cached_kernel.cached_compile(toy().make(2), MATRIX)  # as a second process would
    assert isinstance(second, FakeLoaded) and FakeCompiled.made == 1
    assert second.module == IMAGE and second.name == "_Z3toy"
    log = kernel_cache.compile_log()[logged:]
    assert [entry["outcome"] for entry in log] == ["miss", "hit"] and log[0]["key"] == log[1]["key"]
    assert all(entry["seconds"] >= 0 and entry["kernel"].endswith("toy(array(float32, 2d, C))") for entry in log)


def test_a_read_only_cache_refuses_a_miss_and_no_cache_compiles(no_gpu, toy):
    kernel_cache.use(KernelCache(no_gpu, read_only=True))
    with pytest.raises(kernel_cache.CacheMiss, match="not in the read-only kernel cache"):
        cached_kernel.cached_compile(toy().make(5), MATRIX)
    kernel_cache.use(None)
    assert isinstance(cached_kernel.cached_compile(toy().make(5), MATRIX), FakeCompiled)
    assert kernel_cache.compile_log()[-1]["outcome"] == "off" and not no_gpu.exists()


def test_this_package_is_followed_even_when_installed_among_the_packages(monkeypatch):
    from numba_softmax.kernels.registry import KERNELS

    monkeypatch.setattr(kernel_cache, "_library_folders", lambda: (str(ROOT) + os.sep,))  # as if pip-installed
    walk = kernel_cache._KeyWalk()
    walk.value(KERNELS["fused_row_softmax_q1"][0])
    described = {function[1] for function, code in zip(walk.parts, walk.parts[1:], strict=False)
                 if function[0] == "function" and code[0] == "code"}
    assert {"numba_softmax.numerics", "numba_softmax.kernels.fused_row"} <= described  # their code is in the key


def test_the_compile_summary_counts_each_outcome_and_names_the_slowest_compiles():
    log = [{"kernel": "a", "outcome": "hit", "seconds": 9.0}, {"kernel": "b", "outcome": "miss", "seconds": 2.0},
           {"kernel": "c", "outcome": "uncacheable", "seconds": 3.5}, {"kernel": "d", "outcome": "hit", "seconds": 0.5}]
    assert kernel_cache.compile_summary(log, slowest=1) == (
        "kernel cache: 4 kernels made ready in 15.0 s (2 loaded from the cache, 1 compiled and stored, 1 compiled, "
        "uncacheable); slowest compiled: c 3.5 s")
    only_hits = kernel_cache.compile_summary(log[:1])
    assert only_hits == "kernel cache: 1 kernel made ready in 9.0 s (1 loaded from the cache)"


def test_offline_ptx_is_kept_under_a_key_of_its_own_and_read_back(fresh, tmp_path, toy):
    from numba_softmax.ptx import kernel_ptx

    cache = KernelCache(tmp_path / "cache")
    kernel_cache.use(cache)
    dispatcher = toy().make(2)
    ptx = kernel_ptx(dispatcher, MATRIX)
    ptx_entry = kernel_cache.ptx_key(dispatcher, MATRIX, CC)
    assert ".entry " in ptx and [Path(p).name for p in cache.files()] == [ptx_entry + ".kernel"]
    assert ptx_entry != key(dispatcher)  # never read as the cubin of the same kernel
    record, image = cache.load(ptx_entry)
    assert record["kind"] == "ptx" and image.decode() == ptx
    cache.store(ptx_entry, record, b"// what the cache holds\n")  # read back, not compiled again
    assert kernel_ptx(toy().make(2), MATRIX) == "// what the cache holds\n"
    assert kernel_ptx(toy(operator="+").make(2), MATRIX) != "// what the cache holds\n"  # other code: compiled
    kernel_cache.use(KernelCache(tmp_path / "prebuilt", read_only=True))
    kernel_ptx(dispatcher, MATRIX, cc=(8, 0))
    assert not (tmp_path / "prebuilt").exists()  # a read-only cache is not written
