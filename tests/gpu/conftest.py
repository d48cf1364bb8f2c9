"""tests/gpu needs a real CUDA GPU; without one every test here is skipped, with the reason."""

import os

import pytest


def _gpu_reason():
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        return "NUMBA_ENABLE_CUDASIM=1: the simulator is not a GPU"
    from bench.environment import gpu_present
    if not gpu_present():
        return "no CUDA GPU/driver on this machine"
    return None


REASON = _gpu_reason()


def pytest_collection_modifyitems(config, items):
    if REASON is None:
        return
    skip = pytest.mark.skip(reason=REASON)
    for item in items:
        if "tests/gpu" in str(item.fspath):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def stream():
    from numba_softmax.launch.driver import Stream
    return Stream()


@pytest.fixture(scope="session")
def evidence():
    """Collects figures for results/ when NUMBA_SOFTMAX_EVIDENCE is a file path."""
    import json
    records = {}
    yield records
    path = os.environ.get("NUMBA_SOFTMAX_EVIDENCE")
    if path:
        with open(path, "w") as handle:
            json.dump(records, handle, indent=2, sort_keys=True, default=str)
