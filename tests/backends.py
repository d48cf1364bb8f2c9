"""Markers for tests that run on both backends (the simulator and a GPU), skipping with a reason.

Like numba-cuda's ``skip_on_cudasim`` / ``skip_unless_cudasim``: the condition is this process's
backend (:data:`numba_softmax.backend.SIMULATOR`), so a test written once is skipped only in the
process that cannot run it.
"""

import pytest

from numba_softmax.backend import SIMULATOR


def skip_on_cudasim(reason):
    """Skip in the Numba CUDA simulator (the test needs a GPU: the launch layer, graphs, nvcc, timing)."""
    return pytest.mark.skipif(SIMULATOR, reason=f"the simulator: {reason}")


def skip_unless_cudasim(reason):
    """Skip outside the simulator (the test checks the simulator's own behaviour)."""
    return pytest.mark.skipif(not SIMULATOR, reason=f"not the simulator: {reason}")
