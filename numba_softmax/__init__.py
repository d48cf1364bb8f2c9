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

import importlib

#: Public name -> the module that defines it, imported on first use: ``import numba_softmax.cases`` (numpy
#: only) must not import Numba, which reads NUMBA_ENABLE_CUDASIM once (bench chooses the backend after it).
_PUBLIC = {"softmax": ".api", "METHODS": ".api", "NoCudaDeviceError": ".api", "clear_plans": ".api",
           "tiled_softmax": ".tiled", "SCHEDULERS": ".tiled", "TiledResult": ".tiled"}
__all__ = list(_PUBLIC)


def __getattr__(name):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name], __name__), name)
