"""``python -m bench perf`` as a command: its usage errors, the C++ launch timer (reference_cu/launch_timer.cu,
built with nvcc where present against a stub libcuda), a whole run on a fake GPU, and the launch block's timing."""

import json
import os
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

from bench import timing
from bench.perf import launch_path
from bench.perf.ceilings import logical_bytes
from bench.perf.goals import MISS, NOT_MEASURED, PASS
from bench.perf.launch_path import LAUNCH_METRICS, nvcc_command, parse_launch_timer_output
from bench.perf.peers import COPY, CUDNN, FUSED, FUSED_GRAPH, ROW_COPY, TORCH, input_sets_for
from bench.protocol import BATCH

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
H200_L2 = 62914560
NVCC = launch_path.find_nvcc()



def _run_perf(args, env_extra=None):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "bench.perf", *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)


def _by_goal(goals):
    return {g["goal"]: g for g in goals}


def test_cli_floors_and_usage_errors():
    proc = _run_perf(["--floors", "--copy-tbs", "4.25"])
    assert proc.returncode == 0, proc.stderr
    assert "| balanced-128 |" in proc.stdout
    proc = _run_perf(["--rounds", "5"])
    assert proc.returncode == 2 and "at least 30 rounds" in proc.stderr
    proc = _run_perf(["--shapes", "4096"])
    assert proc.returncode == 2 and "is not ROWSxCOLUMNS" in proc.stderr
    proc = _run_perf(["--input-sets", "2"])
    assert proc.returncode == 2 and "at least 4" in proc.stderr
    proc = _run_perf(["--copy-kernels", "copy_t256_u4,memcpy"])
    assert proc.returncode == 2 and "unknown copy kernel 'memcpy'" in proc.stderr


def test_cli_refuses_the_simulator():
    proc = _run_perf(["--out", "/nonexistent/never-written"], {"NUMBA_ENABLE_CUDASIM": "1"})
    assert proc.returncode == 4 and "NUMBA_ENABLE_CUDASIM" in proc.stderr


def test_cli_without_gpu_fails_loudly():
    from bench.environment import gpu_present
    if gpu_present():
        pytest.skip("a GPU is present: this test checks the no-GPU refusal")
    proc = _run_perf(["--out", "/nonexistent/never-written"])
    assert proc.returncode == 4 and "needs a CUDA GPU" in proc.stderr


# ------------------------------------------------------------------------------ the C++ launch timer builds

needs_nvcc = pytest.mark.skipif(
    NVCC is None,
    reason="nvcc not found ($NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): cannot compile "
           "reference_cu/launch_timer.cu")


@pytest.fixture(scope="module")
def stub_libcuda(tmp_path_factory):
    """A stub libcuda.so(.1) exporting every cu* symbol launch_timer.o needs (no driver on this machine)."""
    if NVCC is None:
        pytest.skip("nvcc not found")
    for tool in ("nm", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not found: cannot build a stub libcuda to link against")
    work = tmp_path_factory.mktemp("launch-timer")
    obj = work / "launch_timer.o"
    proc = subprocess.run([NVCC, *launch_path.NVCC_FLAGS, "-c", launch_path.LAUNCH_TIMER_SOURCE, "-o", str(obj)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    symbols = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True, check=True).stdout.split()
    driver = sorted({s for s in symbols if s.startswith("cu") and s[2:3].isupper()})
    assert {"cuLaunchKernel", "cuGraphLaunch", "cuStreamSynchronize"} <= set(driver)
    stub_dir = work / "stub"
    stub_dir.mkdir()
    (stub_dir / "stub.c").write_text("".join(f"int {s}(void) {{ return 0; }}\n" for s in driver))
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(stub_dir / "libcuda.so.1"),
                    str(stub_dir / "stub.c")], check=True)
    os.symlink("libcuda.so.1", stub_dir / "libcuda.so")
    return {"dir": str(stub_dir), "work": work}


@needs_nvcc
def test_launch_timer_builds_with_the_tool_and_prints_parsable_json(stub_libcuda, monkeypatch):
    out = stub_libcuda["work"] / "build"
    out.mkdir()
    # The tool's own build: plain -lcuda fails here (no driver), the stub folder (standing in for the
    # toolkit's lib64/stubs) is the next option it tries.
    monkeypatch.setattr(launch_path, "stub_library_dirs", lambda nvcc: [stub_libcuda["dir"]])
    monkeypatch.setattr(launch_path, "_libcuda_symlink_dir", lambda out_dir: None)
    build = launch_path.build_launch_timer(str(out), NVCC)
    assert build["command"] == nvcc_command(NVCC, launch_path.LAUNCH_TIMER_SOURCE, str(out / "launch_timer"),
                                            [stub_libcuda["dir"]])
    assert os.access(build["binary"], os.X_OK)
    # --selftest prints the real JSON layout from synthetic samples, without any CUDA call
    env = dict(os.environ, LD_LIBRARY_PATH=stub_libcuda["dir"])
    proc = subprocess.run([build["binary"], "--selftest"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    parsed = parse_launch_timer_output(proc.stdout)
    assert parsed["meta"]["batch"] == BATCH
    assert set(parsed["metrics"]) == set(LAUNCH_METRICS)
    assert all(m["n"] == 37 for m in parsed["metrics"].values())


@needs_nvcc
def test_launch_timer_build_failure_is_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(launch_path, "stub_library_dirs", lambda nvcc: [])
    monkeypatch.setattr(launch_path, "_libcuda_symlink_dir", lambda out_dir: None)
    monkeypatch.setattr(launch_path, "LAUNCH_TIMER_SOURCE", str(tmp_path / "missing.cu"))
    with pytest.raises(RuntimeError, match="could not build reference_cu/launch_timer.cu"):
        launch_path.build_launch_timer(str(tmp_path), NVCC)


# ------------------------------------------------------------------------------ the whole run, GPU faked

#: Runs ``bench.perf.main`` with the GPU layer replaced: the Numba simulator's host-backed arrays, numpy
#: softmax for the fused launches and cuDNN (through the raw pointers), ctypes.memmove for the copies, host
#: clocks for events. It exercises the orchestration (rotation, checks, rounds, statistics, launch section,
#: goals, files), not the GPU. FAKE_BAD_FUSED / FAKE_BAD_CUDNN corrupt one output to exercise the failures.
FAKE_RUN = r'''
import ctypes, os, subprocess, sys, time
os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
import numba.cuda  # noqa: F401  (simulator arrays)
del os.environ["NUMBA_ENABLE_CUDASIM"]
import numpy as np
import bench.environment as env
import bench.perf as perf
from bench import timing
from bench.perf import ceilings, launch_path
from numba_softmax.launch import driver, graphs
from numba_softmax.peers import cudnn

def softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).astype(np.float32)

class Stream:
    ptr, handle, numba = 1234, None, 0
    def synchronize(self): pass

class Event:
    def record(self, stream): self.t = time.perf_counter_ns()
    def synchronize(self): pass
    def elapsed_us_since(self, start): return max(0.5, (self.t - start.t) / 1e3)

class Invocation:
    def __init__(self, name, launches): self.name, self.launches = name, launches
    @classmethod
    def from_launches(cls, name, launches): return cls(name, launches)
    def enqueue(self, stream):
        for launch in self.launches:
            if launch.name == "fused_row_softmax":
                x, y = launch.args
                y._ary[...] = softmax(x._ary)
                if os.environ.get("FAKE_BAD_FUSED") and x.shape[0] == 4:
                    y._ary[0, 0] = -1.0
            elif launch.name == "row_copy":
                x, y = launch.args
                y._ary[...] = x._ary
                if os.environ.get("FAKE_BAD_ROW_COPY"):
                    y._ary[0, 0] = np.nextafter(y._ary[0, 0], np.inf)
            elif launch.name.startswith("auto_"):
                x, y = launch.args[:2]
                y._ary[...] = softmax(x._ary)
            elif launch.name != "perf_empty":
                raise AssertionError(launch.name)
    def kernel_resources(self): return [{"launch": l.name} for l in self.launches]

class Graph:
    def __init__(self, invocation, stream): self.invocation = invocation; invocation.enqueue(stream)
    def launch(self, stream): self.invocation.enqueue(stream)
    def record(self): return {"node_count": 1, "node_types": {"kernel": 1}}
    def close(self): pass

class Cudnn:
    def __init__(self, rows, cols, stream):
        self.rows, self.cols = rows, cols
        self.lib = type("L", (), {"version_string": "9.fake", "path": "/fake"})()
    def view(self, ptr):
        n = self.rows * self.cols
        return np.ctypeslib.as_array((ctypes.c_float * n).from_address(ptr)).reshape(self.rows, self.cols)
    def forward(self, x_ptr, y_ptr):
        y = self.view(y_ptr)
        y[...] = softmax(self.view(x_ptr))
        if os.environ.get("FAKE_BAD_CUDNN"):
            y[0, 0] += 0.1
    def close(self): pass

class Delay:
    def enqueue(self, stream): pass

from bench.perf import peers

def fake(name, value):
    """Replace ``name`` in every module that defines or imported it."""
    for module in (driver, graphs, cudnn, env, perf, timing, ceilings, launch_path, peers):
        if hasattr(module, name):
            setattr(module, name, value)

for name, value in {"Stream": Stream, "Event": Event, "Invocation": Invocation, "CapturedGraph": Graph,
                    "device_record": lambda: {"name": "NVIDIA H200 (fake)", "l2_cache_bytes": 65536},
                    "CudnnSoftmax": Cudnn, "gpu_present": lambda: True, "nvidia_smi_record": lambda: None,
                    "measure_api_overhead": lambda sampler, args, report, errors: report.__setitem__(
                        "api_overhead", {"skipped": "GPU faked: softmax() itself runs only on a real device"})}.items():
    fake(name, value)
ceilings.device_ptr = lambda a: a._ary.__array_interface__["data"][0]
ceilings.memcpy_submit = lambda dst, src, nbytes: (lambda stream: ctypes.memmove(dst, src, nbytes))
timing.DelaySampler.delay = lambda self, iterations: Delay()
ceilings.COPY_CEILING_BYTES = 1 << 20
stub = os.environ.get("FAKE_STUB_DIR")
if stub:
    launch_path.stub_library_dirs = lambda nvcc: [stub]
    def selftest(binary, batches=0, warmup=0):
        proc = subprocess.run([binary, "--selftest"], capture_output=True, text=True,
                              env=dict(os.environ, LD_LIBRARY_PATH=stub), check=True)
        return launch_path.parse_launch_timer_output(proc.stdout)
    launch_path.run_launch_timer = selftest
else:
    launch_path.find_nvcc = lambda: None
sys.exit(perf.main(sys.argv[1:]))
'''


def _fake_run(tmp_path, env_extra=None, shapes="4096x8,4x64", extra_args=()):
    script = tmp_path / "fake_run.py"
    script.write_text(FAKE_RUN)
    temp = tmp_path / "temp"  # the run's own temporary folder: it must be left empty
    temp.mkdir(exist_ok=True)
    env = dict(os.environ, PYTHONPATH=REPO, TMPDIR=str(temp), **(env_extra or {}))
    env.pop("NUMBA_ENABLE_CUDASIM", None)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(script), "--expect-device", "H200", "--shapes", shapes,
                           "--rounds", "30", "--out", str(out), *extra_args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    report = json.loads((out / "perf.json").read_text()) if (out / "perf.json").exists() else None
    return proc, report, out


def test_fake_gpu_run_end_to_end(tmp_path, request):
    stub = None
    if NVCC is not None and shutil.which("nm") and shutil.which("cc"):
        stub = request.getfixturevalue("stub_libcuda")["dir"]
    proc, report, out = _fake_run(tmp_path, {"FAKE_STUB_DIR": stub} if stub else None)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["errors"] == []
    assert list((tmp_path / "temp").iterdir()) == []  # the launch timer's build folder is removed
    shapes = {s["name"]: s for s in report["shapes"]}
    assert list(shapes) == ["4096x8", "4x64"]
    big = shapes["4096x8"]
    assert big["input_sets"] == input_sets_for(logical_bytes((4096, 8)), 65536)
    assert {v: big["variants"][v]["status"] for v in (FUSED, FUSED_GRAPH, CUDNN, ROW_COPY, COPY)} == dict.fromkeys(
        (FUSED, FUSED_GRAPH, CUDNN, ROW_COPY, COPY), "timed")
    assert big["variants"][ROW_COPY]["check"]["kind"] == "bitwise copy of the input"
    assert "row_copy/fused" in big["analysis"]["ratios"]
    assert big["variants"][TORCH]["status"] == "skipped" or big["variants"][TORCH]["status"] == "timed"
    assert len(big["rounds"]) == 30 and all(sorted(r["order"]) == sorted(r["samples"]) for r in big["rounds"])
    # rotation: consecutive timed invocations never reuse a set
    sets = [s["set"] for r in big["rounds"] for name in r["order"] for s in [r["samples"][name]]]
    assert all(a != b for a, b in zip(sets, sets[1:], strict=False))
    # the statistics in the file are recomputable from its raw samples
    fused_events = [r["samples"][FUSED]["event_us"] for r in big["rounds"]]
    assert big["analysis"]["variants"][FUSED]["event_us"]["median"] == pytest.approx(float(np.median(fused_events)))
    assert report["copy_ceiling"]["bandwidth_tbs"] > 0 and report["graph_completion"]["ratio"]["n"] == 200
    launch_goal = _by_goal(report["goals"])["launch: our enqueue per launch / C++ cuLaunchKernel <= 1.3"]
    if stub:
        assert set(report["launch"]["comparison"]) == set(LAUNCH_METRICS)
        assert len(report["launch"]["cpp_blocks"]) == launch_path.LAUNCH_ALTERNATIONS
        assert launch_goal["status"] in (PASS, MISS)
    else:
        assert launch_goal["status"] == NOT_MEASURED and "nvcc not found" in launch_goal["detail"]
    text = (out / "perf.md").read_text()
    assert text.rstrip().endswith(proc.stdout.rstrip().splitlines()[-1])
    assert [line for line in text.splitlines() if line.startswith("## ")][-1] == "## Goals"


def test_fake_gpu_run_reports_failed_checks(tmp_path):
    proc, report, _ = _fake_run(tmp_path, {"FAKE_BAD_FUSED": "1", "FAKE_BAD_CUDNN": "1"}, extra_args=["--no-launch"])
    assert proc.returncode == 1                       # our kernel failing its check is an error
    assert "fused failed its check before timing" in proc.stderr
    small = next(s for s in report["shapes"] if s["name"] == "4x64")
    assert small["variants"][FUSED]["status"] == "failed check"
    assert FUSED not in small["analysis"]["variants"]
    big = next(s for s in report["shapes"] if s["name"] == "4096x8")
    assert big["variants"][CUDNN]["status"] == "failed check"      # a peer failing is reported, not timed
    assert any("cudnn failed its check" in n for n in report["notes"])
    goal = _by_goal(report["goals"])["fused faster than cudnn at 4096x8"]
    assert goal["status"] == NOT_MEASURED and "cudnn failed check" in goal["detail"]


def test_fake_gpu_run_a_row_copy_off_by_one_ulp_is_an_error(tmp_path):
    proc, report, _ = _fake_run(tmp_path, {"FAKE_BAD_ROW_COPY": "1"}, shapes="4x64", extra_args=["--no-launch"])
    assert proc.returncode == 1                       # the geometry ceiling is ours: its failure is an error
    assert "row_copy failed its check before timing" in proc.stderr
    shape = report["shapes"][0]
    assert shape["variants"][ROW_COPY]["status"] == "failed check"
    assert ROW_COPY not in shape["analysis"]["variants"]
    assert "row_copy" not in _by_goal(report["goals"]).get("fused >= 0.90 of copy bandwidth at 4096x4096",
                                                           {"detail": ""})["detail"]


class _CountingStream:
    def __init__(self):
        self.synchronizes = 0

    def synchronize(self):
        self.synchronizes += 1


def test_python_launch_block_times_each_path_in_batches():
    stream = _CountingStream()
    calls = {"enqueue": 0, "replay": 0}

    def counter(name):
        def call(s):
            assert s is stream
            calls[name] += 1
        return call

    invocation = types.SimpleNamespace(enqueue=counter("enqueue"))
    graph = types.SimpleNamespace(launch=counter("replay"))
    samples = launch_path.python_launch_block(stream, invocation, graph, batches=3)
    assert set(samples) == set(LAUNCH_METRICS) and all(len(v) == 3 for v in samples.values())
    # per metric: 3 batches of BATCH calls (enqueue cost) + 3 single calls (launch + synchronize)
    assert calls == {"enqueue": 3 * BATCH + 3, "replay": 3 * BATCH + 3}
    assert all(v >= 0 for values in samples.values() for v in values)


def test_host_rounds_time_each_call_once_per_round_in_shuffled_orders():
    seen = []
    calls = {name: (lambda name=name: seen.append(name)) for name in ("a", "b", "c")}
    rounds = timing.host_rounds(calls, 12, seed=3)
    assert len(rounds) == 12 and len(seen) == 36
    assert all(sorted(r["order"]) == ["a", "b", "c"] and set(r["host_completion_us"]) == {"a", "b", "c"}
               for r in rounds)
    assert all(v >= 0 for r in rounds for v in r["host_completion_us"].values())
    assert seen == [name for r in rounds for name in r["order"]]   # timed in each round's order
    assert len({tuple(r["order"]) for r in rounds}) > 1            # shuffled, not one fixed order
