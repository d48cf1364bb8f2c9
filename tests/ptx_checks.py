"""The check every registered kernel build goes through on the CPU (tests/cpu/test_*_kernels_ptx.py): the numerics
policy in its sm_90 PTX, no local memory in the PTX, ``fastmath=False``, and under ptxas at most 64 registers
(the launch bounds: >= 1024 resident threads per SM) with no spill beyond the build's declared budget; and
:func:`parallel_ptx_getter`, which compiles a test file's builds in worker processes."""

import atexit
import concurrent.futures
import importlib
import multiprocessing

import pytest

from numba_softmax.device import usable_cpus
from numba_softmax.ptx import check_policy, kernel_ptx, ptx_getter, ptxas_resources

#: Processes that compile a test file's builds: two where there are two CPUs (a CI machine's), else one.
COMPILE_JOBS = min(2, usable_cpus())


def _builds(source):
    """The builds (name -> ``(dispatcher, signature)``) that ``source``, ``"module:attribute"``, names."""
    module, attribute = source.split(":")
    return getattr(importlib.import_module(module), attribute)


def _build_ptx(source, name):
    """In a worker process: the PTX of build ``name`` of :func:`_builds` ``(source)``."""
    dispatcher, signature = _builds(source)[name]
    return kernel_ptx(dispatcher, signature)


def parallel_ptx_getter(source, jobs=COMPILE_JOBS):
    """``name -> PTX`` over the builds ``source`` names (``"module:attribute"``, importable in a fresh process),
    as :func:`numba_softmax.ptx.ptx_getter`, compiled in ``jobs`` spawned processes: a request submits its build
    and the next ``jobs`` in name order (the order a test file's parametrized tests ask for them), so the workers
    compile ahead while the tests check, and a run of a few tests compiles only a few more. One job: compiled in
    this process, as asked."""
    builds = _builds(source)
    if jobs <= 1:
        return ptx_getter(builds)
    names = sorted(builds)
    futures = {}
    pools = []

    def close():  # before the interpreter tears its modules down, which the pool's own cleanup still needs
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        pools.clear()

    def ptx_of(name):
        if not pools:
            pools.append(concurrent.futures.ProcessPoolExecutor(max_workers=jobs,
                                                                mp_context=multiprocessing.get_context("spawn")))
            atexit.register(close)
        ahead = names[names.index(name) + 1:][:jobs] if name in builds else []
        for key in (name, *ahead):
            if key not in futures:
                futures[key] = pools[0].submit(_build_ptx, source, key)
        return futures[name].result()

    return ptx_of


def check_build(name, ptx, dispatcher, spill_budget):
    """Assert the policy, registers and spills of build ``name`` (skips the ptxas part without ptxas)."""
    report = check_policy(name, ptx)
    assert report.ok, report.violations
    assert not report.local_memory
    assert dispatcher.targetoptions.get("fastmath") is False
    resources = ptxas_resources(ptx)
    if resources is None:
        pytest.skip("ptxas is not installed: registers and spills not checked")
    assert "error" not in resources, resources
    assert resources["registers"] <= 64, resources
    assert resources["spill_store_bytes"] <= spill_budget, resources
    assert resources["spill_load_bytes"] <= 8 * spill_budget, resources
    if not spill_budget:
        assert resources["stack_frame_bytes"] == 0, resources
