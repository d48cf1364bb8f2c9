"""The diagnostic build of the persistent kernel: the trace build.

A separate compilation of :func:`.kernel.make_persistent_kernel` (compiled on first use,
cached); it is never registered or timed by the experiments. It records every task
(:mod:`..tracing`).
"""

from .kernel import make_persistent_kernel

_builds = {}


def persistent_trace_kernel():
    """The trace build of :data:`.kernel.persistent_tiles` (compiled on first use; never timed)."""
    if "trace" not in _builds:
        _builds["trace"] = make_persistent_kernel("persistent_tiles_trace", trace_build=True)
    return _builds["trace"]
