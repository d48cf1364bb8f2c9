"""numba_softmax: softmax kernels in Python (numba-cuda), measured like a C++ harness.

Public API:
* :func:`softmax` -- row-wise softmax of any array kind in place (numpy, Numba, torch, CuPy,
  ``__cuda_array_interface__``, DLPack): ``method="auto"`` (the fastest kernel for the width, any
  row length, ``-inf`` masks), or Experiment A's ``"fused"`` / ``"stages"``; checks on the device,
  cached launch plans (docs/api.md);
* :func:`tiled_softmax` -- Experiment B, tiled A -> B -> C under one of three schedulers
  ("separate", "phased", "dag"), returning the output and every intermediate;
* :class:`NoCudaDeviceError` -- raised, in one line, where there is neither a GPU nor the simulator.
"""

from .api import METHODS, NoCudaDeviceError, clear_plans, softmax
from .tiled import SCHEDULERS, TiledResult, tiled_softmax

__all__ = ["softmax", "METHODS", "NoCudaDeviceError", "clear_plans", "tiled_softmax", "SCHEDULERS",
           "TiledResult"]
