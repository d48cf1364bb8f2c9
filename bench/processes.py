"""Work spread over fresh worker processes: how ``bench cache warm``, ``bench build-kernels`` and the width
sweep's warm-up compile kernels in parallel."""

import concurrent.futures
import multiprocessing

from numba_softmax.device import usable_cpus

#: Compiling processes by default: one per CPU, at most 16.
DEFAULT_JOBS = min(16, usable_cpus())


def map_in_processes(function, *iterables, jobs=DEFAULT_JOBS):
    """``list(map(function, *iterables))``, in order, computed by ``jobs`` spawned processes (each a fresh
    interpreter: CUDA cannot be used in a forked child); in this process when ``jobs`` is 1."""
    if jobs <= 1:
        return list(map(function, *iterables))
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        return list(pool.map(function, *iterables))
