"""Submit a list of launches once (API calls, tests): launch layer on a GPU, dispatcher in the simulator.

The benchmark does not use this: it prepares each invocation once and times it (see ``bench/runner.py``).
"""

from ..numerics import SIMULATOR

_default_stream = None


def launch_stream(stream=None):
    """The launch-layer stream for a call: ``stream`` itself, a wrapped Numba stream, or a shared default."""
    global _default_stream
    from .driver import Stream
    if isinstance(stream, Stream):
        return stream
    if stream is not None:
        return Stream.wrap(stream)
    if _default_stream is None:
        _default_stream = Stream()
    return _default_stream


def run_launches(launches, stream=None, name="launches"):
    """Simulator: Numba's dispatcher. GPU: the cuda-python launch layer, then synchronize."""
    if SIMULATOR:
        from .plan import run_launches_with_dispatcher
        run_launches_with_dispatcher(launches)
        return
    from .driver import Invocation
    target = launch_stream(stream)
    Invocation.from_launches(name, launches).enqueue(target)
    target.synchronize()
