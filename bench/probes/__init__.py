"""The measurement probes (GPU only), run as ``python -m bench probe fused|tiles|launch``.

Diagnostics that say where time goes; the figures that count come from ``python -m bench``
and ``python -m bench perf``. Each probe module has ``main(argv)``; they time with
:mod:`bench.timing` (the one timing module) and write their results with :func:`write_results`.
"""

import json
import os


def write_results(out_dir, filename, results):
    """``results`` as indented JSON in ``out_dir/filename`` (nothing when ``out_dir`` is None)."""
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, filename), "w") as handle:
            json.dump(results, handle, indent=1)
