"""``python -m bench ptx [--kernel NAME] [--out DIR]``: every kernel's sm_90 PTX and policy report.

Runs without a GPU. Writes ``<kernel>.ptx`` and ``policy.json`` into DIR and prints one
line per kernel; exits 1 when any kernel breaks the numerics policy.
"""

import argparse
import json
import os
import sys


def main(argv):
    parser = argparse.ArgumentParser(prog="python -m bench ptx", description=__doc__)
    parser.add_argument("--kernel", action="append", help="kernel name (repeatable); default: all")
    parser.add_argument("--out", default="ptx", help="output folder (default ./ptx)")
    args = parser.parse_args(argv)

    from tabulate import tabulate

    from numba_softmax.kernels.registry import KERNELS
    from numba_softmax.ptx import check_policy, kernel_ptx, ptxas_resources

    names = args.kernel or sorted(KERNELS)
    unknown = [n for n in names if n not in KERNELS]
    if unknown:
        print(f"unknown kernel(s) {unknown}; known: {sorted(KERNELS)}", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    reports, rows = [], []
    for name in names:
        dispatcher, signature = KERNELS[name]
        ptx = kernel_ptx(dispatcher, signature)
        with open(os.path.join(args.out, f"{name}.ptx"), "w") as handle:
            handle.write(ptx)
        report = check_policy(name, ptx)
        report.resources = ptxas_resources(ptx) or {"note": "ptxas not installed"}
        reports.append(report.record())
        res = report.resources
        rows.append([name, "ok" if report.ok else "VIOLATES", report.expf_count, report.fma_count,
                     sum(report.rounded_arith.values()), sum(report.unrounded_arith.values()),
                     ",".join(f"{k}:{v}" for k, v in report.divisions.items()) or "-",
                     res.get("registers", "-"), res.get("stack_frame_bytes", "-"),
                     res.get("spill_store_bytes", "-")])
        for violation in report.violations:
            print(f"  {name}: {violation}", file=sys.stderr)
    with open(os.path.join(args.out, "policy.json"), "w") as handle:
        json.dump(reports, handle, indent=2)
    print(tabulate(rows, headers=["kernel", "policy", "expf", "fma", "op.rn", "op (plain)", "div",
                                  "regs", "stack B", "spill B"], tablefmt="github"))
    print(f"\nPTX and policy.json written to {os.path.abspath(args.out)}")
    return 0 if all(r["ok"] for r in reports) else 1
