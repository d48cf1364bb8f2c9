"""numba_softmax: softmax kernels in Python (numba-cuda), measured like a C++ harness.

Public API:
* :func:`softmax` -- Experiment A kernels (fused row kernel or four explicit stages);
* :func:`tiled_softmax` -- Experiment B, tiled A -> B -> C under one of three schedulers
  ("separate", "phased", "dag"), returning the output and every intermediate.
"""

from .api import METHODS, softmax
from .tiled import SCHEDULERS, TiledResult, tiled_softmax

__all__ = ["softmax", "METHODS", "tiled_softmax", "SCHEDULERS", "TiledResult"]
