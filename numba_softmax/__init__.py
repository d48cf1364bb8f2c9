"""numba_softmax: softmax kernels in Python (numba-cuda), measured like a C++ harness.

Public API:
* :func:`softmax` -- softmax along ``dim`` of any array kind in place (numpy, Numba, torch, CuPy,
  ``__cuda_array_interface__``, DLPack), float32, float16, bfloat16 or float64, ``dtype=`` as torch's,
  strided and N-D layouts without a copy: ``method="auto"`` (the fastest kernel for the width, any
  row length, ``-inf`` masks), or Experiment A's ``"fused"`` / ``"stages"``; checks on the device
  when asked (``check=``), cached launch plans (docs/api.md);
* :func:`log_softmax` -- the same calls for ``(x - max) - log(sum(exp(x - max)))``;
* :func:`softmax_backward`, :func:`log_softmax_backward` -- their gradients with respect to the input, from the
  output and the output's gradient;
* :mod:`numba_softmax.torch` -- both as PyTorch operators with autograd, ``torch.compile`` and CUDA graph
  support (imports torch; docs/api.md);
* :func:`tiled_softmax` -- Experiment B, tiled A -> B -> C under one of three schedulers
  ("separate", "phased", "dag"), returning the output and every intermediate;
* :class:`NoCudaDeviceError` -- raised, in one line, where there is neither a GPU nor the simulator.

The package root imports none of them until one is asked for: Numba reads ``NUMBA_ENABLE_CUDASIM``
once, when it is first imported, so a harness imports :mod:`numba_softmax.device` or
:mod:`numba_softmax.cases` (neither imports Numba) before it chooses the simulator or the GPU.
"""

import importlib

#: Each public name and the module that defines it.
_HOMES = {"softmax": "api", "log_softmax": "api", "METHODS": "api", "NoCudaDeviceError": "api",
          "clear_plans": "api", "softmax_backward": "backward", "log_softmax_backward": "backward",
          "tiled_softmax": "tiled", "SCHEDULERS": "tiled", "TiledResult": "tiled"}

__all__ = list(_HOMES)


def __getattr__(name):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Imported on first use, not at the top: importing Numba must wait for the simulator switch (above).
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
