"""numba_softmax: softmax kernels in Python (numba-cuda), measured like a C++ harness.

Public API: :func:`softmax` (fused row kernel or four explicit stages).
"""

from .api import METHODS, softmax

__all__ = ["softmax", "METHODS"]
