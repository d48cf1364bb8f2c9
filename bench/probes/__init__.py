"""The measurement probes (GPU only), run as ``python -m bench probe NAME`` (``bench.probe.PROBES``).

Diagnostics that say where time goes; the figures that count come from ``python -m bench``
and ``python -m bench perf``. Their kernels live in :mod:`numba_softmax.kernels.diagnostics`.
Each probe module has ``main(argv)``; they time with
:mod:`bench.timing` (the one timing module) and write their results with :func:`write_results`.
"""

import importlib
import importlib.util
import json
import os
import sys

from bench import environment


def write_results(out_dir, filename, results):
    """``results`` as indented JSON in ``out_dir/filename`` (nothing when ``out_dir`` is None). Never over
    an existing file (a probe checks that first, :func:`refuse_existing_results`; this is the last guard)."""
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, filename), "x") as handle:
            json.dump(results, handle, indent=1)


def refuse_existing_results(parser, out_dir, filename):
    """Called by each probe once its options are read, before anything runs: a probe writes only a file
    it creates, so ``out_dir/filename`` must not exist yet (committed evidence is never overwritten)."""
    if out_dir and os.path.exists(os.path.join(out_dir, filename)):
        parser.error(f"--out {out_dir}: {filename} is already there; give a folder without one (a probe never "
                     "writes over results it did not create)")


def other_tree_module(tree, name):
    """Module ``numba_softmax.<name>`` of the package under ``tree`` (another checkout, e.g. a ``git
    archive`` of a baseline commit), imported as ``numba_softmax_other`` beside this tree's package so
    that a probe times both trees' kernels in one process. The package imports itself relatively,
    so the alias holds; its launch code takes this tree's buffers, whose fields it shares."""
    alias = "numba_softmax_other"
    if alias not in sys.modules:
        package = os.path.join(os.path.abspath(tree), "numba_softmax")
        if not os.path.isfile(os.path.join(package, "__init__.py")):
            raise FileNotFoundError(f"--compare-tree {tree}: no numba_softmax package in it")
        spec = importlib.util.spec_from_file_location(alias, os.path.join(package, "__init__.py"),
                                                      submodule_search_locations=[package])
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module
        spec.loader.exec_module(module)
    return importlib.import_module(f"{alias}.{name}")


def require_gpu(parser):
    """Called by each probe once its options are read: a probe times kernels on a GPU, so without one
    (or under the simulator) it stops with one line naming why, exit status 2, not a driver traceback."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        parser.error("needs a CUDA GPU: NUMBA_ENABLE_CUDASIM=1 selects the simulator, which a timing probe cannot use")
    if not environment.gpu_present():
        parser.error("needs a CUDA GPU: none found (the CUDA driver did not load or reports no device)")
