"""Diagnostic builds of the persistent kernel: the trace build, the completion wait, register caps.

Each is a separate compilation of :func:`.kernel.make_persistent_kernel` (compiled on first use,
cached); none is registered or timed by the experiments. The trace build records every task
(:mod:`..tracing`); the other two answer questions of ``python -m bench probe tiles``.
"""

from .kernel import make_persistent_kernel

_trace_build = []


def persistent_trace_kernel():
    """The trace build of :data:`persistent_tiles` (compiled on first use; never timed)."""
    if not _trace_build:
        _trace_build.append(make_persistent_kernel("persistent_tiles_trace", acquire_ready=True,
                                                    publish_after_last=True, trace_build=True))
    return _trace_build[0]


_capped_builds = {}


def completion_wait_kernel():
    """The performance kernel whose DAG workers also wait, before leaving, until ``c_done``
    shows every C tile (the earlier termination rule): a diagnostic build for the tiles probe."""
    if "completion_wait" not in _capped_builds:
        _capped_builds["completion_wait"] = make_persistent_kernel(
            "persistent_tiles_completion_wait", acquire_ready=True, publish_after_last=True, completion_wait=True)
    return _capped_builds["completion_wait"]


def register_capped_kernel(max_registers):
    """The performance kernel compiled with ptxas's register cap ``max_registers``: more
    workers fit per SM, at the price of spills. A diagnostic build (``python -m bench probe tiles
    --register-caps``), never registered or used by the bench."""
    if max_registers not in _capped_builds:
        _capped_builds[max_registers] = make_persistent_kernel(
            f"persistent_tiles_r{max_registers}", acquire_ready=True, publish_after_last=True,
            max_registers=max_registers)
    return _capped_builds[max_registers]

