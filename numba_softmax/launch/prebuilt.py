"""Kernels compiled before the GPU: cubins built on a CPU, loaded here with the driver.

Where a run must not compile after its GPU is allocated (the cloud run: the protocol compiles
in the CPU image), ``python -m bench build-kernels --out DIR`` compiles every kernel the run
launches with Numba's own compiler (the dispatcher's Python function, the signature the launch
layer will see, NVVM -> PTX for sm_90) and assembles each PTX with ptxas into a cubin, writing
``DIR/kernels.json``: one record per kernel with its key (module, name and argument types),
the PTX entry name, the files and their SHA-256, the compute capability, and the SHA-256 of
the package source it was compiled from.

:func:`activate` installs such a folder for this process. The folder's ``cache/`` holds the same
cubins as entries of the kernel cache (:mod:`.kernel_cache`), and it becomes the process's cache,
read-only: the launch layer (:func:`numba_softmax.launch.driver.compiled`) takes every kernel from it
(``cuModuleLoadData`` of the cubin and ``cuModuleGetFunction`` of the recorded entry, exactly as the
nvcc twins are loaded) and never compiles. A cubin whose bytes are not the recorded ones, a folder
built for another compute capability or from other source stops the run with
:class:`PrebuiltKernelError` naming it; a kernel the folder does not hold, with ``CacheMiss``.

The arguments are packed by the launch layer the same way for both paths: the cubin is the same
slim entry (:mod:`.entry`) Numba compiles at run time for the same types, so its parameters are a
pointer and a shape per array argument.
"""

from __future__ import annotations

import hashlib
import json
import os

from .cached_kernel import CubinKernel, load_module
from ..source import source_digest
from .context import ensure_context
from .kernel_cache import KernelCache, use
from .kernel_cache import kernel_name as kernel_key  # ``module.name(argument types)``: a manifest's key

MANIFEST_NAME = "kernels.json"
#: The folder of a prebuilt folder that holds its cubins as kernel cache entries (:mod:`.kernel_cache`).
CACHE_FOLDER = "cache"


class PrebuiltKernelError(RuntimeError):
    """A prebuilt kernel is missing, altered, built for another device or from other source."""


class PrebuiltKernel(CubinKernel):
    """A cubin's kernel, loaded with the driver as the kernel cache's are; the interface of
    ``driver.CompiledKernel``."""

    def __init__(self, record, module, argtypes):
        # Numba marks a kernel cooperative only for cooperative-groups grid sync, which no prebuilt one uses
        super().__init__(module, record["entry"], argtypes, cooperative=False, origin="prebuilt")
        self.key = record["key"]



class KernelStore:
    """A folder written by ``python -m bench build-kernels``."""

    def __init__(self, folder):
        self.folder = os.path.abspath(folder)
        path = os.path.join(self.folder, MANIFEST_NAME)
        if not os.path.isfile(path):
            raise PrebuiltKernelError(f"{self.folder} holds no {MANIFEST_NAME}: not a folder of prebuilt kernels "
                                      "(python -m bench build-kernels --out DIR writes one)")
        with open(path, encoding="utf-8") as f:
            self.manifest = json.load(f)
        self.records = {record["key"]: record for record in self.manifest["kernels"]}
        self.compute_capability = tuple(self.manifest["compute_capability"])
        self._modules = {}

    def check_device(self, compute_capability):
        if tuple(compute_capability) != self.compute_capability:
            have = "sm_{}{}".format(*self.compute_capability)
            need = "sm_{}{}".format(*compute_capability)
            raise PrebuiltKernelError(f"the kernels in {self.folder} were built for {have}, this device is {need}: "
                                      f"build them for it (python -m bench build-kernels --arch {need})")

    def _image(self, record):
        path = os.path.join(self.folder, record["cubin"])
        if not os.path.isfile(path):
            raise PrebuiltKernelError(f"{record['key']}: {path} is missing")
        with open(path, "rb") as f:
            image = f.read()
        if hashlib.sha256(image).hexdigest() != record["cubin_sha256"]:
            raise PrebuiltKernelError(f"{record['key']}: {path} is not the cubin {MANIFEST_NAME} records "
                                      "(its SHA-256 differs)")
        return image

    def _module(self, record):
        module = self._modules.get(record["key"])
        if module is None:
            module = self._modules[record["key"]] = load_module(self._image(record))
        return module

    def kernel(self, dispatcher, argtypes) -> PrebuiltKernel:
        key = kernel_key(dispatcher, argtypes)
        record = self.records.get(key)
        if record is None:
            raise PrebuiltKernelError(f"{key} is not among the {len(self.records)} kernels built in {self.folder}; "
                                      "the run launches a kernel the build step did not compile "
                                      "(bench/kernel_build.py RUN_KERNELS)")
        return PrebuiltKernel(record, self._module(record), argtypes)

    def check_source(self):
        built_from = self.manifest.get("source_sha256")
        if built_from != source_digest():
            raise PrebuiltKernelError(f"the kernels in {self.folder} were built from other source than this "
                                      f"numba_softmax (source SHA-256 {built_from} there, {source_digest()} here): "
                                      "build them again from this tree")

    def missing(self, keys) -> list[str]:
        """The keys (of kernels a run will launch) this folder does not hold."""
        return sorted(set(keys) - set(self.records))

    def verify(self):
        """Check the source and the device, and load every module now (before the run allocates
        anything); return how many."""
        self.check_source()
        context = ensure_context()
        self.check_device(context.device.compute_capability)
        for record in self.records.values():
            PrebuiltKernel(record, self._module(record), ())
        return len(self.records)


def activate(folder) -> KernelStore:
    """Take every kernel of this process from ``folder`` (checked against the device, every module loaded):
    its cache entries become the process's kernel cache, read-only, where a kernel it lacks stops the run."""
    store = KernelStore(folder)
    store.verify()
    use(KernelCache(os.path.join(store.folder, CACHE_FOLDER), read_only=True))
    return store
