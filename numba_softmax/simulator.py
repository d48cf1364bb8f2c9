"""Whether this process runs kernels in the Numba CUDA simulator, read once from Numba's config.

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, when it is first imported, so this is fixed for the
life of a process. The kernels read it (through :mod:`.numerics`) to pick the code the simulator
can run; :mod:`.backend` decides from it how launches are submitted. It sits below the kernels
and the launch layer: it imports Numba's config only.
"""

from numba import config

#: True when this process runs kernels in the Numba CUDA simulator.
SIMULATOR = bool(config.ENABLE_CUDASIM)
