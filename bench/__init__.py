"""The benchmark harness, run as ``python -m bench`` from a checkout; docs/harness.md maps its modules.

Importing this package (and ``bench.cli``) does not import Numba: the simulator-or-GPU choice comes first.
"""
