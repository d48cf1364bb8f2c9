"""Is there a CUDA GPU? Asked of the driver with ctypes, without importing Numba.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, so a harness that chooses
between the GPU and the simulator asks this before anything imports Numba
(``bench.environment.select_backend``); the package root imports nothing, so importing this
module imports only ctypes.
"""

import ctypes


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
