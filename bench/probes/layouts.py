"""What layouts and check modes cost ``softmax()`` on torch tensors (GPU only).

Each figure is the host completion time of a loop of ``--calls`` calls and one synchronize, divided by the
calls, over ``--rounds`` shuffled rounds (:func:`bench.timing.host_rounds`): medians, p10/p90 and the median
of the per-round ratio to the named reference, all float32, ``method="auto"``.

* check modes (the default call returns without waiting for the GPU; ``check=True`` synchronizes per call):
  ``default``, ``check_false`` (the reference), ``check_true`` on (64, 1024) and (4096, 1024);
* layouts against the contiguous 2-D call of the same rows (``rows_2d``, the reference):
  ``rows_strided`` (the rows of a wider buffer, ``x[:, :W]``), ``rows_nd`` (the same rows as 3-D);
* a dimension before the last against ``torch.softmax`` along it (the reference): ``dim0`` of (L, N) and
  ``dim1`` of (B, L, N).

    python -m bench probe layouts [--calls 20] [--rounds 30] [--out DIR]
"""

import argparse
import statistics

import numpy as np

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.timing import host_rounds
from numba_softmax import softmax

RESULTS_FILE = "layouts.json"


def _groups(torch):
    """name -> (reference name, {variant: call}): every call on tensors made once here."""
    def make(*shape):
        return torch.randn(*shape, device="cuda")

    groups = {}
    for rows in (64, 4096):
        x = make(rows, 1024)
        groups[f"check_{rows}x1024"] = ("check_false", {
            "default": lambda x=x: softmax(x),
            "check_false": lambda x=x: softmax(x, check=False),
            "check_true": lambda x=x: softmax(x, check=True)})
    wide = make(16384, 4160)
    rows_2d = make(16384, 4096)
    groups["layouts_16384x4096"] = ("rows_2d", {
        "rows_2d": lambda: softmax(rows_2d),
        "rows_strided": lambda: softmax(wide[:, :4096]),
        "rows_nd": lambda: softmax(rows_2d.view(32, 512, 4096))})
    columns = make(4096, 8192)
    batched = make(16, 2048, 512)
    groups["dim0_4096x8192"] = ("torch", {
        "auto": lambda: softmax(columns, dim=0),
        "torch": lambda: torch.softmax(columns, dim=0)})
    groups["dim1_16x2048x512"] = ("torch", {
        "auto": lambda: softmax(batched, dim=1),
        "torch": lambda: torch.softmax(batched, dim=1)})
    return groups


def _summary(rounds, reference, calls):
    names = list(rounds[0]["host_completion_us"])
    per_call = {n: [r["host_completion_us"][n] / calls for r in rounds] for n in names}
    result = {}
    for name, values in per_call.items():
        p10, p90 = np.percentile(values, [10, 90])
        ratios = [v / ref for v, ref in zip(values, per_call[reference], strict=True)]
        result[name] = {"median_us": statistics.median(values), "p10_us": float(p10), "p90_us": float(p90),
                        f"paired_ratio_to_{reference}": statistics.median(ratios)}
    return result


def _loop(call, calls, torch):
    def run():
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    return run


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe layouts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20, help="calls per timed loop (default 20)")
    parser.add_argument("--rounds", type=int, default=30, help="shuffled rounds (default 30)")
    parser.add_argument("--out", help=f"folder for {RESULTS_FILE} (a new file; never overwritten)")
    args = parser.parse_args(argv)
    if args.calls < 1 or args.rounds < 5:
        parser.error("--calls must be >= 1 and --rounds >= 5")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    import torch

    results = {"device": torch.cuda.get_device_name(), "calls": args.calls, "rounds": args.rounds, "groups": {}}
    for group, (reference, variants) in _groups(torch).items():
        loops = {name: _loop(call, args.calls, torch) for name, call in variants.items()}
        for timed in loops.values():   # warm-up: compile, plans, allocator
            timed()
        summary = _summary(host_rounds(loops, args.rounds, seed=len(group)), reference, args.calls)
        results["groups"][group] = summary
        for name, figures in summary.items():
            print(f"{group:22s} {name:14s} median {figures['median_us']:9.2f} us  p10 {figures['p10_us']:9.2f}  "
                  f"p90 {figures['p90_us']:9.2f}  x{figures[f'paired_ratio_to_{reference}']:.3f} of {reference}")
    write_results(args.out, RESULTS_FILE, results)
    return 0
