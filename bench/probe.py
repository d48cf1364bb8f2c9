"""``python -m bench probe NAME [OPTIONS]``: one measurement probe (GPU only).

    python -m bench probe tiles  [--cases balanced-2048,...] [--compare-tree DIR] [--out DIR]
    python -m bench probe launch [--batches 200] [--out DIR]
    python -m bench probe handoff [--rounds 2000] [--contenders 1188] [--out DIR]
    python -m bench probe api    [--shapes 1x128,4096x4096] [--calls 2000] [--out DIR]
    python -m bench probe twins  [--shapes 32x1024,...] [--cases balanced-128,...] [--out DIR]
    python -m bench probe floors [--cases balanced-128,balanced-2048] [--rounds 60] [--out DIR]
    python -m bench probe startup [--items first-softmax,first-dag,experiment-b-128|all] [--runs 5]
                                  [--modes cold,warm] [--fill-jobs N] [--cache-root DIR] [--out DIR]
    python -m bench probe NAME --help                 (the probe's own options)

The probe modules live in ``bench/probes/``, their kernels in ``numba_softmax/kernels/diagnostics/``;
each probe is imported only when it runs.
"""

import argparse
import importlib

#: probe name -> (module, one line for --help)
PROBES = {
    "tiles": ("bench.probes.tiles", "Experiment B's timed builds per launch and per scheduler invocation"),
    "launch": ("bench.probes.launch", "host time per launch through each layer of the launch path"),
    "handoff": ("bench.probes.handoff", "latency of a release/acquire hand-off, an atomic and a load through L2"),
    "api": ("bench.probes.api", "host time of softmax() against the launch layer, step by step"),
    "layouts": ("bench.probes.layouts", "softmax() on strided, N-D and dim-not-last tensors and in each check mode"),
    "twins": ("bench.probes.twins", "each stage and separate tile kernel timed alone beside its nvcc twin"),
    "floors": ("bench.probes.floors", "the persistent schedulers' empty-work floors taken apart, against CUDA C++"),
    "startup": ("bench.probes.startup", "whole-process times cold and warm: what the kernel cache saves a process"),
}


def parser():
    result = argparse.ArgumentParser(prog="python -m bench probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    probes = result.add_subparsers(dest="probe", required=True, metavar="PROBE")
    for name, (_, summary) in PROBES.items():
        # The probe's own parser reads its options (and --help): this level only picks the probe.
        probes.add_parser(name, help=summary, add_help=False)
    return result


def main(argv=None):
    args, rest = parser().parse_known_args(argv)
    module = importlib.import_module(PROBES[args.probe][0])
    return module.main(rest)
