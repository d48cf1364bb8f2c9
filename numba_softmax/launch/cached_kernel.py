"""Kernels made ready through the on-disk cache (:mod:`.kernel_cache`), and the one loader of cubins.

:func:`cached_compile` is what the launch layer's ``compiled()`` calls on the GPU: it looks the kernel up
by its key; on a hit it loads the stored cubin with the driver (:class:`LoadedKernel`), on a miss it
compiles the slim entry with Numba as always (:class:`~.driver.CompiledKernel`) and stores the cubin
Numba linked for this device. Either way the time it took and the outcome go to the cache's log.
A prebuilt folder (:mod:`.prebuilt`) is such a cache, filled ahead of time and read-only: a kernel it does
not hold stops the run (:class:`~.kernel_cache.CacheMiss`) instead of compiling.
"""

from __future__ import annotations

import time

import numba
from cuda.bindings import driver as cu

from . import kernel_cache
from .compiled_kernel import CompiledKernel
from .context import LoadedKernel, check, ensure_context


def load_module(image):
    """``cuModuleLoadData`` of a cubin in the current (Numba's primary) context."""
    ensure_context()
    return check(cu.cuModuleLoadData(image))


class CubinKernel(LoadedKernel):
    """A kernel of a cubin loaded with the driver (from the cache or a prebuilt folder)."""

    def __init__(self, module, entry, argtypes, cooperative=False, origin="cache"):
        self.module = module  # kept: the function lives as long as its module
        self.function = check(cu.cuModuleGetFunction(module, entry.encode()))
        self.argtypes = tuple(argtypes)
        self.name = entry
        self.cooperative = bool(cooperative)
        self.origin = origin
        attribute = cu.CUfunction_attribute

        def get(name):
            return check(cu.cuFuncGetAttribute(getattr(attribute, name), self.function))

        self.registers_per_thread = get("CU_FUNC_ATTRIBUTE_NUM_REGS")
        self.local_bytes_per_thread = get("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES")
        self.static_shared_bytes = get("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES")
        self.max_threads_per_block = get("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK")

    def resources(self):
        # The same record as a run-time compiled kernel's, and where this one came from.
        return dict(super().resources(), loaded_from=self.origin, prebuilt=self.origin == "prebuilt")


def driver_version():
    """The CUDA driver's version (its PTX assembler linked a cubin Numba compiled here): recorded, not keyed."""
    return check(cu.cuDriverGetVersion())


def linked_image(kernel):
    """The cubin Numba linked and loaded for ``kernel`` (a ``driver.CompiledKernel``), as bytes, or None where
    loading it alone would not reproduce the kernel (its module has load-time setup callbacks)."""
    library = kernel.numba_kernel._codelibrary
    if library._setup_functions or library._teardown_functions:
        return None
    # No cc: the same architecture get_cufunc() linked for (sm_90a on Hopper), from Numba's own cache.
    cubin = library.get_cubin()
    return bytes(getattr(cubin, "code", cubin))  # numba-cuda 0.30 links with cuda.core: an ObjectCode


def _compile_and_store(cache, key, dispatcher, argtypes, compute_capability):
    """Compile as the launch layer always has, and store the cubin; the outcome for the log."""
    kernel = CompiledKernel(dispatcher, argtypes)
    image = linked_image(kernel)
    if image is None:
        return kernel, "uncacheable"
    record = {"kernel": kernel_cache.kernel_name(dispatcher, argtypes), "entry": kernel.name,
              "cooperative": kernel.cooperative, "compute_capability": list(compute_capability),
              "driver_version": driver_version(), "toolchain": kernel_cache.toolchain_versions()}
    cache.store(key, record, image)
    return kernel, "miss"


def cached_compile(dispatcher, argtypes):
    """The kernel for ``argtypes``, from the process's cache where it holds it, else compiled (and stored)."""
    start = time.perf_counter()
    name = kernel_cache.kernel_name(dispatcher, argtypes)
    cache = kernel_cache.active_cache()
    if cache is None:
        kernel = CompiledKernel(dispatcher, argtypes)
        kernel_cache.record_compile(name, "off", time.perf_counter() - start)
        return kernel
    compute_capability = tuple(ensure_context().device.compute_capability)
    try:
        key = kernel_cache.cache_key(dispatcher, argtypes, compute_capability)
    except kernel_cache.Uncacheable as exc:
        if cache.read_only:
            raise kernel_cache.CacheMiss(f"{name} cannot be taken from the read-only kernel cache {cache.folder}: "
                                         f"{exc}") from exc
        kernel = CompiledKernel(dispatcher, argtypes)
        kernel_cache.record_compile(name, "uncacheable", time.perf_counter() - start, reason=str(exc))
        return kernel
    found = cache.load(key)
    if found is not None:
        record, image = found
        kernel = CubinKernel(load_module(image), record["entry"], argtypes, record["cooperative"],
                              origin="prebuilt" if cache.read_only else "cache")
        kernel_cache.record_compile(name, "hit", time.perf_counter() - start, key)
        return kernel
    if cache.read_only:
        raise kernel_cache.CacheMiss(f"{name} is not in the read-only kernel cache {cache.folder} (key {key}): the run "
                                     "launches a kernel the build step did not compile (python -m bench build-kernels)")
    kernel, outcome = _compile_and_store(cache, key, dispatcher, argtypes, compute_capability)
    kernel_cache.record_compile(name, outcome, time.perf_counter() - start, key)
    return kernel


_compiled_cache = {}


def compiled(dispatcher, args):
    """Compile (once per dispatcher and argument types) for these arguments, through the on-disk kernel
    cache; where a folder of prebuilt kernels is active (:mod:`.prebuilt`), that
    folder is the cache, read-only: its cubin is loaded and nothing compiles."""
    argtypes = tuple(numba.typeof(a) for a in args)
    key = (id(dispatcher), argtypes)
    kernel = _compiled_cache.get(key)
    if kernel is None:
        kernel = _compiled_cache[key] = cached_compile(dispatcher, argtypes)
    return kernel
