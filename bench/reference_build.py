"""``python -m bench build-reference [--out DIR] [--nvcc PATH] [--check]``: the nvcc reference kernels.

Compiles every ``reference_cu/*.cu`` (CUDA C++ versions of the Numba kernels, see
``reference_cu/README.md``) with nvcc for sm_90 under the project's numerics policy, into PTX
and cubin, next to a ``manifest.json``:

    reference_cu/build/<module>.ptx        nvcc -ptx   (what nvcc's NVVM emits)
    reference_cu/build/<module>.cubin      nvcc -cubin (what the GPU test loads with cuModuleLoadData)
    reference_cu/build/<module>.ptxas.txt  ptxas -v: registers, stack, spills, shared memory per entry
    reference_cu/build/manifest.json       nvcc version, flags, SHA-256 of sources and outputs, resources

Runs without a GPU. :func:`ensure_built` rebuilds only when a source, a header or the flags
changed since the manifest was written (tests and ``python -m bench ptx --compare`` use it).
"""

import argparse
import datetime
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

import nvidia
from tabulate import tabulate

from numba_softmax import numerics
from numba_softmax.ptx import parse_ptxas_verbose

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DIR = os.path.join(REPO_ROOT, "reference_cu")
BUILD_DIR = os.path.join(REFERENCE_DIR, "build")

#: Translation units, one per Numba kernel module (numba_softmax/kernels/<module>.py).
MODULES = ("row_stages", "fused_row", "tiles", "persistent")
#: Headers every module may include (part of the staleness hash).
HEADERS = ("numerics.cuh", "tiles.cuh", "ordering.cuh", "prefetch.cuh", "numba_abi.cuh")

ARCH = "sm_90"
#: The protocol's compiler policy, spelled out: no FMA contraction, no fast math, IEEE
#: division and square root, denormals kept. (``--use_fast_math`` is never passed.)
POLICY_FLAGS = ("--fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true")
NVCC_FLAGS = (f"-arch={ARCH}", "-std=c++17") + POLICY_FLAGS


def ownership_quad():
    """The row reductions' ownership run length of the Numba kernels (``numerics.QUAD``; 1 if absent)."""
    return int(getattr(numerics, "QUAD", 1))


def nvcc_flags():
    """Every flag of the build: the policy flags plus ``-DREFERENCE_QUAD`` (see reference_cu/numerics.cuh)."""
    return list(NVCC_FLAGS) + [f"-DREFERENCE_QUAD={ownership_quad()}"]


class NvccNotFound(RuntimeError):
    pass


class BuildError(RuntimeError):
    pass


def build_failure_exit(exc, needs=""):
    """A command's answer to a failed reference build: one ``error:`` line on stderr (``needs`` says
    what the command needed nvcc for) and the exit code, 2 when nvcc is missing, 1 when the build
    itself failed. Anything else is re-raised."""
    if isinstance(exc, NvccNotFound):
        print(f"error: {exc}" + (f"; {needs}" if needs else ""), file=sys.stderr)
        return 2
    if isinstance(exc, BuildError):
        print(f"error: {exc}", file=sys.stderr)
        return 1
    raise exc


def find_nvcc(explicit=None):
    """nvcc from ``explicit``, ``$NVCC``, PATH, ``$CUDA_HOME/bin`` or /usr/local/cuda/bin (None if absent)."""
    candidates = [explicit, os.environ.get("NVCC"), shutil.which("nvcc")]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "bin", "nvcc"))
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find_nvdisasm():
    """nvdisasm from $NVDISASM, PATH, or an installed ``nvidia-cuda-nvdisasm`` wheel (None if absent)."""
    candidates = [os.environ.get("NVDISASM"), shutil.which("nvdisasm")]
    try:
        for root in list(nvidia.__path__):
            candidates += sorted(glob.glob(os.path.join(root, "*", "bin", "nvdisasm")))
    except ImportError:
        pass
    return next((c for c in candidates if c and os.path.isfile(c) and os.access(c, os.X_OK)), None)


def nvcc_version(nvcc):
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    match = re.search(r"release ([\d.]+), (V[\d.]+)", text)
    return {"release": match.group(1), "version": match.group(2)} if match else {"raw": text.strip()}


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        digest.update(handle.read())
    return digest.hexdigest()


def source_hashes(reference_dir=REFERENCE_DIR):
    """SHA-256 of every source and header the build reads."""
    names = [f"{m}.cu" for m in MODULES] + list(HEADERS)
    return {name: _sha256(os.path.join(reference_dir, name)) for name in names}


@dataclass
class BuildResult:
    out_dir: str
    manifest: dict
    rebuilt: bool
    ptx: dict = field(default_factory=dict)      # module -> path
    cubin: dict = field(default_factory=dict)    # module -> path

    def resources(self):
        return self.manifest.get("resources", {})


def _run(cmd, cwd):
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def ptx_of_module(module, out_dir, flags=None, nvcc=None, reference_dir=REFERENCE_DIR):
    """Compile one module to PTX with ``flags`` (default :func:`nvcc_flags`) and return the text
    (tests use it for negative controls, e.g. ``--fmad=true``)."""
    nvcc_path = find_nvcc(nvcc)
    if nvcc_path is None:
        raise NvccNotFound("nvcc not found")
    os.makedirs(out_dir, exist_ok=True)
    target = os.path.join(out_dir, f"{module}.ptx")
    _run([nvcc_path, *(flags if flags is not None else nvcc_flags()), "-ptx",
          os.path.join(reference_dir, f"{module}.cu"), "-o", target], cwd=reference_dir)
    with open(target) as handle:
        return handle.read()


def build(out_dir=BUILD_DIR, nvcc=None, reference_dir=REFERENCE_DIR, extra_flags=()):
    """Compile every module to PTX and cubin in ``out_dir``; return a :class:`BuildResult`."""
    nvcc_path = find_nvcc(nvcc)
    if nvcc_path is None:
        raise NvccNotFound("nvcc not found (tried --nvcc, $NVCC, PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    os.makedirs(out_dir, exist_ok=True)
    flags = nvcc_flags() + list(extra_flags)
    resources, outputs = {}, {}
    result = BuildResult(out_dir=os.path.abspath(out_dir), manifest={}, rebuilt=True)
    for module in MODULES:
        source = os.path.join(reference_dir, f"{module}.cu")
        ptx = os.path.join(out_dir, f"{module}.ptx")
        cubin = os.path.join(out_dir, f"{module}.cubin")
        _run([nvcc_path, *flags, "-ptx", source, "-o", ptx], cwd=reference_dir)
        verbose = _run([nvcc_path, *flags, "-cubin", "-Xptxas", "-v", source, "-o", cubin], cwd=reference_dir)
        with open(os.path.join(out_dir, f"{module}.ptxas.txt"), "w") as handle:
            handle.write(verbose)
        for entry, figures in parse_ptxas_verbose(verbose).items():
            resources[entry] = dict(figures, module=module)
        result.ptx[module], result.cubin[module] = ptx, cubin
        outputs[f"{module}.ptx"] = _sha256(ptx)
        outputs[f"{module}.cubin"] = _sha256(cubin)
    manifest = {
        "built_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "nvcc": nvcc_path,
        "nvcc_version": nvcc_version(nvcc_path),
        "arch": ARCH,
        "flags": flags,
        "modules": list(MODULES),
        "sources_sha256": source_hashes(reference_dir),
        "outputs_sha256": outputs,
        "resources": resources,
    }
    with open(os.path.join(out_dir, "manifest.json"), "w") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=True)
    result.manifest = manifest
    return result


def load_manifest(out_dir=BUILD_DIR):
    path = os.path.join(out_dir, "manifest.json")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return json.load(handle)


def stale_reason(out_dir=BUILD_DIR, reference_dir=REFERENCE_DIR, extra_flags=()):
    """Why the build in ``out_dir`` must be redone, or None if it is current."""
    manifest = load_manifest(out_dir)
    if manifest is None:
        return "no manifest.json"
    if manifest.get("flags") != nvcc_flags() + list(extra_flags):
        return "nvcc flags changed (policy flags or the Numba kernels' ownership rule)"
    if manifest.get("sources_sha256") != source_hashes(reference_dir):
        return "a source or header changed"
    for module in MODULES:
        for ext in ("ptx", "cubin"):
            path = os.path.join(out_dir, f"{module}.{ext}")
            if not os.path.exists(path):
                return f"{module}.{ext} missing"
            if manifest.get("outputs_sha256", {}).get(f"{module}.{ext}") != _sha256(path):
                return f"{module}.{ext} does not match the manifest"
    return None


def ensure_built(out_dir=BUILD_DIR, nvcc=None, reference_dir=REFERENCE_DIR):
    """Reuse a current build, or build. Raises :class:`NvccNotFound` when a build is needed and
    nvcc is absent (a current build is used without nvcc: e.g. cubins carried to a GPU machine)."""
    if stale_reason(out_dir, reference_dir) is None:
        manifest = load_manifest(out_dir)
        return BuildResult(out_dir=os.path.abspath(out_dir), manifest=manifest, rebuilt=False,
                           ptx={m: os.path.join(out_dir, f"{m}.ptx") for m in MODULES},
                           cubin={m: os.path.join(out_dir, f"{m}.cubin") for m in MODULES})
    return build(out_dir, nvcc, reference_dir)


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m bench build-reference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=BUILD_DIR, help="output folder (default reference_cu/build)")
    parser.add_argument("--nvcc", help="nvcc to use (default: $NVCC, PATH, /usr/local/cuda/bin)")
    parser.add_argument("--check", action="store_true",
                        help="only say whether the build in --out is current (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.check:
        reason = stale_reason(args.out)
        print(f"{args.out}: " + ("current" if reason is None else f"stale ({reason})"))
        return 0 if reason is None else 1
    try:
        result = build(args.out, args.nvcc)
    except (NvccNotFound, BuildError) as exc:
        return build_failure_exit(exc)

    rows = [[entry, r["module"], r.get("registers"), r.get("shared_bytes"), r.get("stack_frame_bytes"),
             r.get("spill_store_bytes")] for entry, r in sorted(result.resources().items())]
    print(tabulate(rows, headers=["entry", "module", "regs", "smem B", "stack B", "spill B"], tablefmt="github"))
    version = result.manifest["nvcc_version"]
    print(f"\nnvcc {version.get('version', version)} {' '.join(result.manifest['flags'])}")
    print(f"PTX, cubin and manifest.json written to {result.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
