"""Former home of ``run_launches`` / ``launch_stream``; kept importable.

Both live in :mod:`numba_softmax.backend`, the one module that decides simulator or GPU.
New code imports from there.
"""

from ..backend import launch_stream, run_launches  # noqa: F401
