"""Former home of the launch description and the simulator stand-ins; kept importable.

:class:`KernelLaunch` lives in :mod:`numba_softmax.launch_spec` (below the kernels and the
launch layer); the simulator stand-ins live in :mod:`numba_softmax.backend` (which decides
simulator or GPU). New code imports from there.
"""

from ..backend import DispatcherInvocation, SimulatorStream, run_launches_with_dispatcher  # noqa: F401
from ..launch_spec import KernelLaunch  # noqa: F401
