"""Every test in tests/kernels runs twice: ``[sim]`` in the Numba CUDA simulator, ``[gpu]`` on a GPU.

The test body is the same; :mod:`numba_softmax.backend` gives it the stream and the launch path of
the process it runs in. tests/conftest.py runs the ``[sim]`` half in the simulator's own process and
skips the ``[gpu]`` half, with the reason, where there is no GPU. A test that one backend cannot run
says so with :func:`backends.skip_on_cudasim` / :func:`backends.skip_unless_cudasim`.
"""

import pytest

BACKENDS = [pytest.param("sim", marks=pytest.mark.simulator, id="sim"),
            pytest.param("gpu", marks=pytest.mark.gpu, id="gpu")]


@pytest.fixture(autouse=True)
def backend_name(request):
    """``"sim"`` or ``"gpu"``: which half of the pair this test is (the process's backend decides the rest)."""
    return request.param


def pytest_generate_tests(metafunc):
    if "backend_name" in metafunc.fixturenames:
        metafunc.parametrize("backend_name", BACKENDS, indirect=True)
