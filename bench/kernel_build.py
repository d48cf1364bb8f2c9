"""Compile every kernel the main job launches, on a CPU, into PTX, cubin and SASS files.

    python -m bench build-kernels --out DIR [--arch sm_90]

For each kernel of :func:`run_kernels` (every registered kernel, method="auto"'s builds, the trace builds, the
empty-work floor), with the argument types the launch layer will see: Numba's own compiler (NVVM, the kernel's options)
writes the kernel's slim entry, as the launch layer compiles it (:mod:`numba_softmax.launch.entry`), to
``DIR/ptx/<name>.ptx``; ptxas (on PATH or from the ``nvidia-cuda-nvcc`` wheel) assembles it into
``DIR/cubin/<name>.cubin``; nvdisasm, where installed, writes ``DIR/sass/<name>.sass``.
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

import numba
from numba.core import sigutils

from bench.artifacts import RunFolder
from bench.environment import package_versions
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


def build(out, arch=DEFAULT_ARCH) -> dict:
    """Compile every kernel into ``out`` (a new or empty folder); return the manifest written."""
    match = re.fullmatch(r"sm_(\d+)(\d)", arch)
    if not match:
        raise ValueError(f"--arch {arch!r}: expected sm_XY, e.g. sm_90")
    cc = (int(match.group(1)), int(match.group(2)))
    ptxas = find_ptxas()
    if ptxas is None:
        raise RuntimeError("ptxas not found (PATH, or the nvidia-cuda-nvcc wheel numba-cuda[cu12] installs): "
                           "it turns the PTX into cubins")
    nvdisasm = find_nvdisasm()
    folder = RunFolder(out)
    records = []
    for dispatcher, signature in run_kernels():
        name = dispatcher.py_func.__name__
        ptx = kernel_ptx(dispatcher, signature, cc=cc)
        entries = _ENTRY.findall(ptx)
        if len(entries) != 1:
            raise RuntimeError(f"{name}: expected one .entry in its PTX, found {entries}")
        folder.write_text(f"ptx/{name}.ptx", ptx)
        cubin_path = folder.path_of(f"cubin/{name}.cubin")
        cubin_path.parent.mkdir(parents=True, exist_ok=True)
        proc = run_ptxas(ptx, cubin_path, ptxas, arch)
        if proc.returncode != 0:
            raise RuntimeError(f"{name}: ptxas failed:\n{proc.stdout}{proc.stderr}")
        record = {"key": expected_key(dispatcher, signature), "name": name,
                  "signature": signature, "entry": entries[0],
                  "ptx": f"ptx/{name}.ptx", "ptx_sha256": _sha256(ptx.encode("utf-8")),
                  "cubin": f"cubin/{name}.cubin", "cubin_sha256": _sha256(cubin_path.read_bytes()),
                  "sass": None}
        if nvdisasm is not None:
            sass = subprocess.run([nvdisasm, "-c", str(cubin_path)], capture_output=True, text=True, check=False)
            if sass.returncode != 0:
                raise RuntimeError(f"{name}: nvdisasm failed:\n{sass.stderr}")
            record["sass"] = str(folder.write_text(f"sass/{name}.sass", sass.stdout).relative_to(folder.path))
        record["cache_key"] = store_in_cache(folder.path_of(CACHE_FOLDER), dispatcher, signature, cc, record,
                                             cubin_path.read_bytes())
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
    args = parser.parse_args(argv)
    try:
        manifest = build(args.out, args.arch)
    except (ValueError, RuntimeError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sass = "SASS too" if manifest["sass_skipped"] is None else f"no SASS: {manifest['sass_skipped']}"
    print(f"{len(manifest['kernels'])} kernels built for {manifest['arch']} into {os.path.abspath(args.out)} "
          f"(PTX and cubin; {sass})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
