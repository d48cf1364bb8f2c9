"""Run the benchmark on one exact Modal H100, the protocol's way.

    pip install -e ".[modal]" && modal setup          # once
    modal run modal_app.py                             # Experiments A then B, compact bundle downloaded
    modal run modal_app.py --experiments B --run-name my-run   # same name again: resumes that run

What happens, in order:

1. **Compile on CPU, before any GPU.** The image (debian-slim, the project's pinned
   dependencies, the protocol's cuDNN 9.10.2.21, matplotlib, nvdisasm) runs, while it is
   BUILT, ``python -m bench ptx`` (every kernel compiled to sm_90 PTX and checked against the
   numerics policy) and ``python -m bench build-kernels``: every kernel the run launches,
   compiled by Numba for sm_90 and assembled by ptxas into a cubin, with its SASS. A failure
   fails the build, so no GPU is ever requested.
2. ``prepare`` (CPU): copies the source tree, the PTX/policy report and the kernels (PTX,
   cubin, SASS, kernels.json) into the run's folder on the Volume ``numba-softmax-runs``.
3. ``run_experiment`` (GPU): exactly one ``gpu="H100!"`` (the ``!`` forbids Modal's
   automatic H200 upgrade), ``timeout=900`` s hard limit, ``retries=0``,
   ``max_containers=1``, ``min_containers=0`` / ``buffer_containers=0`` and a 2 s
   scaledown (no warm pool), one input per container. Its body is
   ``bench.cli.main([...])``: the same code path as ``python -m bench``, which asserts the
   device model (``--expect-device H100``), loads every kernel from the image's cubins with
   the driver before allocating anything (``--prebuilt``: a missing cubin, or one built for
   another device, stops the call there; nothing is compiled on the GPU machine), records
   memory/SM/L2/driver/runtime/clocks in metadata.json, validates before timing and stops on
   a required failure. It writes records only (``--no-summary``). The run folder
   lives on the Volume and the Volume is committed after every case (``after_case``
   hook), so an interrupted run keeps every completed case; calling again with the same
   ``--run-name`` continues it with ``--resume``. Both experiments run in this one
   container, one after the other; the first one that stops ends the call.
4. ``package`` (CPU): draws summary.md and the plots from the artifacts, writes
   manifest.json (sha256 of every file) and the compact review bundle
   (``python -m bench bundle``); the full raw run stays on the Volume.
5. The local entrypoint downloads the compact bundle to ``runs/modal/<run>.review.tar.gz``.
   The full folder: ``modal volume get numba-softmax-runs <run> runs/modal/``.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the test extra brings tomli there)
    import tomli as tomllib
from pathlib import Path

import modal

APP_NAME = "numba-softmax"
VOLUME_NAME = "numba-softmax-runs"
VOLUME_MOUNT = "/runs"
REPO_IN_IMAGE = "/root/numba_softmax"
PTX_IN_IMAGE = "/opt/numba_softmax_ptx"
KERNELS_IN_IMAGE = "/opt/numba_softmax_kernels"
#: Image-only tools: nvdisasm writes the SASS of each prebuilt cubin (build-kernels skips it without).
IMAGE_TOOLS = ["nvidia-cuda-nvdisasm>=13,<14"]
EXPECTED_DEVICE = "H100"
HERE = Path(__file__).resolve().parent

#: The GPU function's configuration, exactly as the protocol fixes it (tests check it).
GPU_FUNCTION_OPTIONS = {
    "gpu": "H100!",
    "timeout": 900,
    "retries": 0,
    "max_containers": 1,
    "min_containers": 0,
    "buffer_containers": 0,
    "scaledown_window": 2,
    "single_use_containers": True,
}
CPU_FUNCTION_OPTIONS = {"timeout": 1800, "retries": 0, "max_containers": 1, "min_containers": 0}
IGNORED = [".git", ".whl", ".gl", "runs", "**/__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache",
           "venv", ".venv*", ".ci-venv", "reference_cu/build", "ptx", "ptx-compare"]


def _requirements() -> list[str]:
    """The project's pinned dependencies plus its cudnn and plots extras, read from pyproject.toml."""
    for candidate in (HERE / "pyproject.toml", Path(REPO_IN_IMAGE) / "pyproject.toml"):
        if candidate.is_file():
            project = tomllib.loads(candidate.read_text(encoding="utf-8"))["project"]
            extras = project.get("optional-dependencies", {})
            return list(project["dependencies"]) + list(extras.get("cudnn", [])) + list(extras.get("plots", []))
    return []  # inside a container the image is already built


image = (
    modal.Image.debian_slim(python_version="3.12")
    .pip_install(*_requirements(), *IMAGE_TOOLS)
    # The project runs from its source tree (python -m bench in REPO_IN_IMAGE), not as an installed package.
    .env({"PYTHONUNBUFFERED": "1", "PYTHONPATH": REPO_IN_IMAGE})
    .add_local_dir(str(HERE), REPO_IN_IMAGE, copy=True, ignore=IGNORED)
    # On the CPU builder: every kernel to sm_90 PTX against the numerics policy, then every kernel the
    # run launches to PTX, cubin and SASS (the GPU function loads these and compiles nothing).
    .run_commands(f"cd {REPO_IN_IMAGE} && python -m bench ptx --out {PTX_IN_IMAGE}",
                  f"cd {REPO_IN_IMAGE} && python -m bench build-kernels --out {KERNELS_IN_IMAGE}")
    .workdir(REPO_IN_IMAGE)
)
app = modal.App(APP_NAME, image=image)
runs_volume = modal.Volume.from_name(VOLUME_NAME, create_if_missing=True)


def run_folder(run_name: str, experiment: str | None = None) -> str:
    base = os.path.join(VOLUME_MOUNT, run_name)
    return base if experiment is None else os.path.join(base, f"exp{experiment}")


def experiment_argv(experiment: str, out: str, resume: bool) -> list[str]:
    """The ``python -m bench`` arguments of one GPU call."""
    argv = ["--experiment", experiment, "--expect-device", EXPECTED_DEVICE, "--prebuilt", KERNELS_IN_IMAGE,
            "--no-summary"]
    if experiment == "B":
        argv.append("--trace")  # trace builds after the timing runs (never inside them)
    return argv + (["--resume", out] if resume else ["--out", out])


@app.function(volumes={VOLUME_MOUNT: runs_volume}, **CPU_FUNCTION_OPTIONS)
def prepare(run_name: str) -> dict:
    """CPU: put the source tree, the PTX/policy report and the prebuilt kernels of the image into the run folder."""
    import shutil

    base = run_folder(run_name)
    os.makedirs(base, exist_ok=True)
    copied = {}
    for source, name in ((REPO_IN_IMAGE, "source"), (PTX_IN_IMAGE, "ptx"), (KERNELS_IN_IMAGE, "kernels")):
        target = os.path.join(base, name)
        if not os.path.exists(target):
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        copied[name] = target
    runs_volume.commit()
    return copied


@app.function(volumes={VOLUME_MOUNT: runs_volume}, **GPU_FUNCTION_OPTIONS)
def run_experiments(experiments: list[str], run_name: str, commit: str) -> list[dict]:
    """GPU, ONE container for the whole run: ``python -m bench --experiment X --expect-device H100``
    for each experiment in turn, into the Volume, committed after every case; stops at the
    first experiment that stops (a required failure keeps everything written so far)."""
    import bench.cli

    os.environ["NUMBA_SOFTMAX_COMMIT"] = commit  # the image has no .git; metadata records this
    results = []
    for experiment in experiments:
        out = run_folder(run_name, experiment)
        resume = os.path.isfile(os.path.join(out, "metadata.json"))
        cases_done = []

        def commit_volume(case: str, completed: bool, cases_done=cases_done) -> None:
            cases_done.append({"case": case, "completed": completed})
            runs_volume.commit()

        status = bench.cli.main(experiment_argv(experiment, out, resume), after_case=commit_volume)
        runs_volume.commit()
        results.append({"experiment": experiment, "out": out, "status": status, "resumed": resume,
                        "cases": cases_done})
        if status != 0:
            break
    return results


@app.function(volumes={VOLUME_MOUNT: runs_volume}, **CPU_FUNCTION_OPTIONS)
def package(run_name: str) -> bytes:
    """CPU: summaries and plots from the artifacts, manifest.json, the compact review bundle."""
    import bench.cli
    from bench.bundle import bundle

    runs_volume.reload()
    base = run_folder(run_name)
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        if name.startswith("exp") and os.path.isfile(os.path.join(folder, "metadata.json")):
            # This app's own run folder: the summary the GPU function wrote is redrawn here, on the CPU.
            if bench.cli.main(["report", folder, "--force"]) != 0:
                raise RuntimeError(f"report {folder} failed; see the error above")
    archive = os.path.join(VOLUME_MOUNT, "bundles", f"{run_name}.review.tar.gz")
    result = bundle(base, archive, force=True)  # this app's own run: a resumed run is hashed again
    runs_volume.commit()
    print(f"bundle: {result}")
    with open(archive, "rb") as f:
        return f.read()


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=HERE, capture_output=True, text=True, check=True).stdout.strip()


@app.local_entrypoint()
def main(experiments: str = "A,B", run_name: str = "", allow_dirty: bool = False) -> None:
    commit = _git("rev-parse", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    if dirty and not allow_dirty:
        raise SystemExit("the working tree has uncommitted changes: commit first (or pass --allow-dirty, "
                         "which records the commit as '<sha>+dirty')")
    label = commit + ("+dirty" if dirty else "")
    run_name = run_name or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{commit[:7]}"
    print(f"run {run_name} (commit {label}) on Volume {VOLUME_NAME}")
    print(f"prepare: {prepare.remote(run_name)}")
    wanted = [e.strip() for e in experiments.split(",") if e.strip()]
    statuses = {}
    for result in run_experiments.remote(wanted, run_name, label):
        statuses[result["experiment"]] = result["status"]
        print(f"experiment {result['experiment']}: status {result['status']} (resumed: {result['resumed']}), "
              f"{len(result['cases'])} case(s) this call, folder {result['out']}")
        if result["status"] != 0:
            print(f"experiment {result['experiment']} STOPPED (a required failure or an error); "
                  "later experiments not run", file=sys.stderr)
    data = package.remote(run_name)
    local = HERE / "runs" / "modal" / f"{run_name}.review.tar.gz"
    local.parent.mkdir(parents=True, exist_ok=True)
    local.write_bytes(data)
    print(f"compact review bundle: {local} ({len(data)} bytes)")
    print(f"full run folder: modal volume get {VOLUME_NAME} {run_name} runs/modal/")
    if any(statuses.values()):
        raise SystemExit(1)
