"""Compile every kernel the main job launches, on a CPU, into PTX, cubin and SASS files.

    python -m bench build-kernels --out DIR [--arch sm_90] [--jobs N]

For each kernel of :func:`run_kernels` (every registered kernel, method="auto"'s builds, the trace builds, the
empty-work floor), with the argument types the launch layer will see: Numba's own compiler (NVVM, the kernel's options)
writes the kernel's slim entry, as the launch layer compiles it (:mod:`numba_softmax.launch.entry`), to
``DIR/ptx/<name>.ptx``; ptxas (on PATH or from the ``nvidia-cuda-nvcc`` wheel) assembles it into
``DIR/cubin/<name>.cubin``; nvdisasm, where installed, writes ``DIR/sass/<name>.sass``. ``--jobs N`` compiles in N
processes (default: one per CPU, at most 16): the same kernels whatever N, but for the numbers Numba gives each
function and shared array of a process, which the symbol names carry (the manifest records each cubin's own).
``DIR/kernels.json`` records each kernel's key, PTX entry, files and SHA-256, and the tools; ``DIR/cache/`` holds
the cubins again as entries of the kernel cache (docs/cache.md), which ``--prebuilt DIR`` reads, read-only.

``python -m bench --experiment X --prebuilt DIR`` then loads these cubins with the driver
(:mod:`numba_softmax.launch.prebuilt`) and compiles nothing: the Modal app builds them while
its CPU image is built, before any GPU is requested. docs/modal.md says why and what it changes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile

import numba
from numba.core import sigutils

from bench.artifacts import RunFolder
from bench.environment import package_versions
from bench.processes import DEFAULT_JOBS, map_in_processes
from bench.reference_build import find_nvdisasm
from numba_softmax.kernels import tiles
from numba_softmax.kernels.persistent import SIGNATURES as PERSISTENT_SIGNATURES
from numba_softmax.kernels.persistent.diagnostics import persistent_trace_kernel
from numba_softmax.kernels.registry import AUTO_KERNELS, KERNELS
from numba_softmax.launch.kernel_cache import KernelCache, cache_key, toolchain_versions
from numba_softmax.launch.prebuilt import CACHE_FOLDER, MANIFEST_NAME, kernel_key
from numba_softmax.source import source_digest
from numba_softmax.ptx import find_ptxas, kernel_ptx, run_ptxas

DEFAULT_ARCH = "sm_90"
_ENTRY = re.compile(r"^\s*\.(?:visible\s+)?\.entry\s+([A-Za-z_$][\w$]*)\s*\(", re.M)


def run_kernels():
    """[(dispatcher, Numba signature)] of every kernel the main job can launch (registered kernels,
    trace builds, the empty-work floor); tests/cpu/test_kernel_build.py checks it against the plans' launches."""
    found = list(KERNELS.values()) + list(AUTO_KERNELS.values())
    found += [(kernel, tiles.SIGNATURES[kernel.py_func.__name__.removesuffix("_trace")])
              for kernel in tiles.separate_trace_kernels()]
    found.append((persistent_trace_kernel(), PERSISTENT_SIGNATURES["persistent_tiles"]))
    found.append((tiles.empty_tile_kernel, "void()"))  # the separate scheduler's empty-work floor
    return found


def expected_key(dispatcher, signature) -> str:
    """The key the launch layer will look up for this kernel (its argument types from the signature)."""
    return kernel_key(dispatcher, sigutils.normalize_signature(signature)[0])


def expected_keys() -> list[str]:
    """The key of every kernel of :func:`run_kernels`: what ``--prebuilt`` requires of a folder."""
    return sorted(expected_key(dispatcher, signature) for dispatcher, signature in run_kernels())


def store_in_cache(cache_folder, dispatcher, signature, cc, record, cubin) -> str:
    """Write one built cubin as an entry of the kernel cache in ``cache_folder`` (what ``--prebuilt`` reads,
    read-only: :mod:`numba_softmax.launch.kernel_cache`); return its key."""
    key = cache_key(dispatcher, sigutils.normalize_signature(signature)[0], cc)
    entry = {"kernel": record["key"], "entry": record["entry"], "cooperative": False,
             "compute_capability": list(cc), "assembler": "ptxas", "toolchain": toolchain_versions()}
    if not KernelCache(cache_folder).store(key, entry, cubin):
        raise RuntimeError(f"cannot write the kernel cache entries into {cache_folder}")
    return key


def _tool_version(path):
    if path is None:
        return None
    proc = subprocess.run([path, "--version"], capture_output=True, text=True, check=False)
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def compile_kernel(index, arch, ptxas, nvdisasm):
    """Kernel ``index`` of :func:`run_kernels` through Numba, ptxas and nvdisasm (None: not installed):
    ``(ptx, cubin bytes, SASS text or None)``. Runs in a worker process of :func:`build`."""
    dispatcher, signature = run_kernels()[index]
    name = dispatcher.py_func.__name__
    ptx = kernel_ptx(dispatcher, signature, cc=arch_capability(arch))
    with tempfile.TemporaryDirectory() as tmp:
        cubin_path = os.path.join(tmp, "kernel.cubin")
        proc = run_ptxas(ptx, cubin_path, ptxas, arch)
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: ptxas failed:\n{proc.stdout}{proc.stderr}")
        sass = None
        if nvdisasm is not None:
            disassembly = subprocess.run([nvdisasm, "-c", cubin_path], capture_output=True, text=True, check=False)
            if disassembly.returncode != 0:
                raise RuntimeError(f"{name}: nvdisasm failed:\n{disassembly.stderr}")
            sass = disassembly.stdout
        with open(cubin_path, "rb") as handle:
            return ptx, handle.read(), sass


def arch_capability(arch):
    """``(major, minor)`` of an ``sm_XY`` target."""
    match = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not match:
        raise ValueError(f"--arch {arch!r}: expected sm_XY, e.g. sm_90")
    return int(match.group(1)), int(match.group(2))


def build(out, arch=DEFAULT_ARCH, jobs=1) -> dict:
    """Compile every kernel into ``out`` (a new or empty folder) in ``jobs`` processes; return the manifest
    written (the kernels in :func:`run_kernels` order whatever ``jobs``)."""
    cc = arch_capability(arch)
    ptxas = find_ptxas()
    if ptxas is None:
        raise RuntimeError("ptxas not found (PATH, or the nvidia-cuda-nvcc wheel numba-cuda[cu12] installs): "
                           "it turns the PTX into cubins")
    nvdisasm = find_nvdisasm()
    folder = RunFolder(out)
    kernels = run_kernels()
    count = len(kernels)
    built = map_in_processes(compile_kernel, range(count), [arch] * count, [ptxas] * count, [nvdisasm] * count,
                             jobs=jobs)
    records = []
    for (dispatcher, signature), (ptx, cubin, sass) in zip(kernels, built, strict=True):
        name = dispatcher.py_func.__name__
        entries = _ENTRY.findall(ptx)
        if len(entries) != 1:
            raise RuntimeError(f"{name}: expected one .entry in its PTX, found {entries}")
        folder.write_text(f"ptx/{name}.ptx", ptx)
        cubin_path = folder.path_of(f"cubin/{name}.cubin")
        cubin_path.parent.mkdir(parents=True, exist_ok=True)
        cubin_path.write_bytes(cubin)
        record = {"key": expected_key(dispatcher, signature), "name": name,
                  "signature": signature, "entry": entries[0],
                  "ptx": f"ptx/{name}.ptx", "ptx_sha256": _sha256(ptx.encode("utf-8")),
                  "cubin": f"cubin/{name}.cubin", "cubin_sha256": _sha256(cubin),
                  "sass": None}
        if sass is not None:
            record["sass"] = str(folder.write_text(f"sass/{name}.sass", sass).relative_to(folder.path))
        record["cache_key"] = store_in_cache(folder.path_of(CACHE_FOLDER), dispatcher, signature, cc, record,
                                             cubin)
        records.append(record)
    manifest = {
        "arch": arch, "compute_capability": list(cc), "source_sha256": source_digest(),
        "ptxas": {"path": ptxas, "version": _tool_version(ptxas)},
        "nvdisasm": {"path": nvdisasm, "version": _tool_version(nvdisasm)} if nvdisasm else None,
        "sass_skipped": None if nvdisasm else "nvdisasm not installed (pip install nvidia-cuda-nvdisasm)",
        "numba": numba.__version__, "packages": package_versions(),
        "kernels": records,
    }
    folder.write_json(MANIFEST_NAME, manifest)
    return manifest


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench build-kernels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="new or empty folder for ptx/, cubin/, sass/, kernels.json")
    parser.add_argument("--arch", default=DEFAULT_ARCH, help=f"target (default {DEFAULT_ARCH}, the protocol's)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                        help="compiling processes (default: one per CPU, at most 16)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least 1")
    try:
        manifest = build(args.out, args.arch, args.jobs)
    except (ValueError, RuntimeError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sass = "SASS too" if manifest["sass_skipped"] is None else f"no SASS: {manifest['sass_skipped']}"
    print(f"{len(manifest['kernels'])} kernels built for {manifest['arch']} into {os.path.abspath(args.out)} "
          f"(PTX and cubin; {sass})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
