"""tests/sim runs in the Numba CUDA simulator, in its own pytest process.

Numba reads NUMBA_ENABLE_CUDASIM once, when it is first imported, so this folder
cannot share a process with tests/cpu or tests/gpu (which need the real target).
"""

import os
import sys

import pytest

if "numba" not in sys.modules:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


def pytest_collection_modifyitems(config, items):
    from numba import config as numba_config
    if numba_config.ENABLE_CUDASIM:
        return
    skip = pytest.mark.skip(reason="numba was imported without the simulator in this process: "
                                   "run tests/sim on its own (NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim)")
    for item in items:
        if "tests/sim" in str(item.fspath):
            item.add_marker(skip)
