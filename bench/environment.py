"""Where the bench runs: GPU or simulator, the device record, versions, the commit.

:func:`select_backend` must run before anything imports numba: Numba reads
``NUMBA_ENABLE_CUDASIM`` once, at import time.
"""

import datetime
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys

from numba_softmax.device import gpu_present, keep_to, simulator_cpu
from numba_softmax.source import source_digest

SIMULATOR_BANNER = """
################################################################################
#  NO CUDA GPU FOUND: running in the Numba CUDA SIMULATOR.                      #
#  Only correctness is validated, on small cases. NO TIMINGS are taken, and     #
#  nothing here says anything about GPU performance or float32 GPU bit patterns.#
################################################################################
"""


def gpu_problem(command):
    """Why ``command`` (it runs kernels on a GPU) cannot run in this process, in one line; None when it can."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return (f"{command} needs a CUDA GPU; NUMBA_ENABLE_CUDASIM=1 is set (the simulator has no timings): "
                "unset it and run on a machine with a CUDA GPU. Nothing was run")
    if not gpu_present():
        return (f"{command} needs a CUDA GPU, and none was found (libcuda.so.1 missing, cuInit failed or no "
                "device). Nothing was run")
    return None


class NoGpu(RuntimeError):
    """A GPU was required (``--expect-device``) and none is usable: nothing may run."""


def select_backend(stream=sys.stderr, *, require_gpu_for=None):
    """Return True for the GPU; otherwise switch Numba to the simulator, loudly.

    ``require_gpu_for`` (a device model, from ``--expect-device``) forbids the fallback:
    without a GPU it raises :class:`NoGpu` before anything is switched or printed.
    """
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        _refuse_simulator(require_gpu_for, "NUMBA_ENABLE_CUDASIM=1 selects the simulator")
        print(SIMULATOR_BANNER, file=stream)
        _keep_the_simulator_to_one_cpu()
        return False
    if "numba" in sys.modules:
        # Already chosen in this process (e.g. a second experiment in one Modal container):
        # Numba read NUMBA_ENABLE_CUDASIM at import, so report what it chose.
        if sys.modules["numba"].config.ENABLE_CUDASIM:
            _refuse_simulator(require_gpu_for, "this process already runs Numba in the simulator")
            print(SIMULATOR_BANNER, file=stream)
            return False
        if not gpu_present():
            raise NoGpu("no CUDA GPU found, and Numba was already imported for the GPU in this process, so the "
                        "simulator cannot be switched on here: start a new process")
        return True
    if gpu_present():
        return True
    _refuse_simulator(require_gpu_for, "no CUDA GPU found (the driver did not load or reports no device)")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    print(SIMULATOR_BANNER, file=stream)
    _keep_the_simulator_to_one_cpu()
    return False


def _keep_the_simulator_to_one_cpu():
    """The simulator's threads run fastest on one CPU (numba_softmax.device: up to 10x beside a busy process)."""
    cpu = simulator_cpu()
    if cpu is not None:
        keep_to({cpu})


def _refuse_simulator(required_model, why):
    if required_model:
        raise NoGpu(f"--expect-device {required_model} requires that GPU, but {why}; nothing was run. "
                    "Leave --expect-device out to validate correctness in the simulator instead")


PACKAGES = ("numba", "numba-cuda", "llvmlite", "numpy", "cuda-bindings", "cuda-core", "cuda-python",
            "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "tabulate", "tqdm", "matplotlib", "torch", "triton")


def package_versions():
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_state(root=None):
    """The commit the run's code came from.

    ``NUMBA_SOFTMAX_COMMIT`` wins when set: a launcher that copied a working tree onto
    another machine knows the commit it sent, while the copy's own
    ``.git`` may still point at an older HEAD with the changes applied on top. What git
    says there is recorded beside it. A tree that is not itself a git checkout (an unpacked copy inside
    another repository) has the commit "unknown": the enclosing repository's would be another project's.
    ``source_sha256`` (the package source's content hash) identifies the code either way.
    """

    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sent = os.environ.get("NUMBA_SOFTMAX_COMMIT")
    try:
        commit = _git(root, "rev-parse", "HEAD")
        dirty = bool(_git(root, "status", "--porcelain", "--untracked-files=no"))
        if os.path.realpath(_git(root, "rev-parse", "--show-toplevel")) != os.path.realpath(root):
            commit, dirty = "unknown", None
    except (OSError, subprocess.CalledProcessError):
        commit = dirty = None
    if sent:
        return {"commit": sent, "dirty": None, "source": "NUMBA_SOFTMAX_COMMIT", "git_head": commit,
                "git_dirty": dirty, "source_sha256": source_digest()}
    return {"commit": commit, "dirty": dirty, "source": "git" if commit not in (None, "unknown") else None,
            "source_sha256": source_digest()}


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def compile_record():
    """What this process compiled or loaded for the GPU, kernel by kernel: seconds, and cache hit or miss."""
    from numba_softmax.launch import kernel_cache  # numba: not before the simulator switch is read

    log = kernel_cache.compile_log()
    return {"cache": kernel_cache.default_folder() if not kernel_cache.disabled() else None,
            "seconds": round(sum(entry["seconds"] for entry in log), 3),
            "hits": sum(entry["outcome"] == "hit" for entry in log),
            "misses": sum(entry["outcome"] == "miss" for entry in log), "kernels": log}


def nvidia_smi_record():
    """Clocks and driver as nvidia-smi reports them (None where it is absent)."""
    if shutil.which("nvidia-smi") is None:
        return None
    fields = ("name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,"
              "temperature.gpu,power.draw")
    proc = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()}
    values = [v.strip() for v in proc.stdout.strip().splitlines()[0].split(",")]
    return dict(zip(fields.split(","), values, strict=False))


class DeviceMismatch(RuntimeError):
    pass


#: The device the protocol's numbers are for; any other GPU is recorded and said loudly.
PROTOCOL_DEVICE = "H100"
#: Every kernel is compiled for sm_90 (Hopper), and the numerics policy is checked on that PTX.
MIN_COMPUTE_CAPABILITY = (9, 0)


def check_expected_device(device_name, expected):
    """The run is for one device model: a different one stops it (never silently accepted)."""
    if expected.lower() not in device_name.lower():
        raise DeviceMismatch(f"expected a {expected} but this device is {device_name!r}; "
                             f"pass --expect-device with the model you mean to measure")


def check_device(device, expected=None):
    """Stop on a device the run cannot use; return a loud note when it is not the protocol's, else None.

    ``device``: :func:`numba_softmax.launch.driver.device_record`'s dict (name, compute_capability).
    ``expected``: ``--expect-device`` (a hard requirement) or None (any Hopper-class GPU).
    """
    name = device["name"]
    capability = tuple(device["compute_capability"])
    if capability < MIN_COMPUTE_CAPABILITY:
        major, minor = MIN_COMPUTE_CAPABILITY
        raise DeviceMismatch(f"this device is {name!r} (sm_{capability[0]}{capability[1]}); the kernels need a "
                             f"Hopper-class GPU or newer (sm_{major}{minor}+, e.g. an H100 or H200): they are "
                             f"compiled for sm_{major}{minor}")
    if expected:
        check_expected_device(name, expected)
        return None
    if PROTOCOL_DEVICE.lower() not in name.lower():
        return (f"NOT THE PROTOCOL'S {PROTOCOL_DEVICE}: this run measures {name!r} "
                f"(sm_{capability[0]}{capability[1]}); its numbers are this device's, not the protocol's. "
                f"Pass --expect-device {PROTOCOL_DEVICE} to require the protocol's device")
    return None


def base_metadata(gpu, argv):
    meta = {
        "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "argv": list(argv),
        "backend": "gpu" if gpu else "simulator",
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "packages": package_versions(),
        "git": git_state(),
    }
    if gpu:
        # Here, not at the top: bench/cli.py imports this module before select_backend, and Numba must not load first.
        from cuda.bindings import runtime
        from numba_softmax.launch.driver import device_record
        meta["device"] = device_record()
        err, rt_version = runtime.cudaRuntimeGetVersion()
        meta["cuda_runtime_version"] = int(rt_version)
        meta["nvidia_smi"] = nvidia_smi_record()
    else:
        meta["timing_disabled_reason"] = ("no CUDA GPU: ran in the Numba CUDA simulator, which validates "
                                          "logic on small cases only")
    return meta


def run_header(tool, argv, expected_device):
    """The fields every perf run record starts with: the tool and its arguments, when it started, the device
    expected and found, package versions, the source (git and content hash), nvidia-smi and Python."""
    from numba_softmax.launch.driver import device_record  # needs the CUDA driver: imported when a run starts
    return {"tool": tool, "schema": 1, "argv": argv,
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "expected_device": expected_device, "device": device_record(), "packages": package_versions(),
            "git": git_state(), "nvidia_smi": nvidia_smi_record(), "python": sys.version.split()[0]}
