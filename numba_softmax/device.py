"""Is there a CUDA GPU? Asked of the driver with ctypes, without importing Numba. And the one CPU a process that
runs the Numba CUDA simulator should keep to.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, so a harness that chooses
between the GPU and the simulator asks this before anything imports Numba
(``bench.environment.select_backend``); the package root imports nothing, so importing this
module imports only ctypes and os.

The simulator runs each thread of a block as a Python thread, and the threads hand the GIL to one another at every
barrier. Spread over CPUs that another busy process shares, each hand-over waits for the operating system to
schedule the next thread: measured on a 2-CPU machine, a set of simulator tests took 207 s beside one CPU-bound
process against 19 s alone, and 18 s beside it with each process kept to its own CPU (``taskset``). So a process
that runs the simulator keeps to one CPU (:func:`simulator_cpu`, :func:`keep_to`): the test suite's simulator child
(tests/conftest.py) and the bench's simulator fallback.
"""

import ctypes
import os


def gpu_present():
    """True when the CUDA driver loads and reports at least one device."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    if libcuda.cuInit(0) != 0:
        return False
    count = ctypes.c_int(0)
    return libcuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def usable_cpus():
    """How many CPUs this process may run on (its affinity where the platform says, else the machine's count):
    the one count that sizes every pool of worker processes or threads."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def simulator_cpu():
    """The CPU a simulator process keeps to: the last one this process may run on; None where the platform
    cannot say (no ``os.sched_getaffinity``)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    return max(os.sched_getaffinity(0))


def keep_to(cpus, pid=0):
    """Keep process ``pid`` (0: this one) and the processes it starts to ``cpus``; False where the platform
    refuses (no affinity, or a CPU it may not use), and nothing changes."""
    try:
        os.sched_setaffinity(pid, set(cpus))
    except (AttributeError, OSError, ValueError):
        return False
    return True
