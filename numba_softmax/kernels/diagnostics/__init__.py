"""Kernels the harness runs to measure, never to compute a softmax (``python -m bench probe``, ``bench perf``,
the timing protocol's delay).

* :mod:`.delay`          a block that sleeps: keeps the GPU busy while the host enqueues what is timed;
* :mod:`.param_blocks`   empty kernels taking six arrays or six words: what a parameter block costs;
* :mod:`.grid_barriers`  an otherwise empty kernel crossing a grid barrier twice: ours and Numba's ``grid.sync()``;
* :mod:`.handoff`        the DAG chain's primitives alone: a release/acquire hand-off, an atomic, a load.

The empty kernel itself is the library's (:func:`numba_softmax.kernels.tiles.empty_tile_kernel`). These are
diagnostics: never in :mod:`numba_softmax.kernels.registry`, not held to the numerics policy's PTX check.
"""
