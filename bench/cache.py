"""The on-disk cache of compiled kernels: where it is, what it holds, emptying it, filling it ahead of a run.

    python -m bench cache info
    python -m bench cache clear
    python -m bench cache warm [--experiment A|B|auto|all] [--jobs N]

``warm`` compiles every kernel the chosen experiment launches (A: the fused kernels and the row stages;
B: the tiled schedulers' kernels with their trace builds; auto: method="auto"'s builds; all: every kernel
``bench build-kernels`` builds) for this machine's GPU, in parallel processes, so that the next run loads
them instead of compiling. docs/cache.md describes the cache: its location, variables and key.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from numba.core import sigutils

from bench.environment import gpu_present
from bench.processes import DEFAULT_JOBS, map_in_processes
from bench.kernel_build import run_kernels
from numba_softmax.kernels.registry import AUTO_KERNELS, KERNELS
from numba_softmax.launch import kernel_cache
from numba_softmax.launch.cached_kernel import cached_compile

EXPERIMENTS = ("A", "B", "auto", "all")


def experiment_kernels(experiment):
    """[(dispatcher, Numba signature)] of the kernels ``experiment`` launches (every one for "all")."""
    everything = run_kernels()
    auto = {id(dispatcher) for dispatcher, _ in AUTO_KERNELS.values()}
    rows = {id(dispatcher) for name, (dispatcher, _) in KERNELS.items()
            if name.startswith("fused_row") or name.endswith("_stage")}
    keep = {"all": lambda d: True, "auto": lambda d: id(d) in auto, "A": lambda d: id(d) in rows,
            "B": lambda d: id(d) not in auto and id(d) not in rows}[experiment]
    return [(dispatcher, signature) for dispatcher, signature in everything if keep(dispatcher)]


def _warm_one(experiment, index):
    """In a worker process: make one kernel ready through the cache; return its log entry."""
    dispatcher, signature = experiment_kernels(experiment)[index]
    cached_compile(dispatcher, sigutils.normalize_signature(signature)[0])
    return kernel_cache.compile_log()[-1]


def warm(experiment, jobs, stream=sys.stdout) -> int:
    if not gpu_present():
        print("error: python -m bench cache warm compiles for this machine's GPU, and no CUDA GPU is found",
              file=sys.stderr)
        return 2
    if kernel_cache.disabled():
        print("error: NUMBA_SOFTMAX_CACHE=0 turns the kernel cache off: there is nothing to warm", file=sys.stderr)
        return 2
    count = len(experiment_kernels(experiment))
    start = time.perf_counter()
    log = map_in_processes(_warm_one, [experiment] * count, range(count), jobs=jobs)
    outcomes = {outcome: sum(entry["outcome"] == outcome for entry in log) for outcome in ("miss", "hit")}
    uncacheable = [entry for entry in log if entry["outcome"] not in ("miss", "hit")]
    print(f"{count} kernels of --experiment {experiment} in {time.perf_counter() - start:.1f} s with {jobs} "
          f"processes: {outcomes['miss']} compiled and stored, {outcomes['hit']} already in "
          f"{kernel_cache.default_folder()}", file=stream)
    for entry in uncacheable:
        print(f"  not cached ({entry['outcome']}): {entry['kernel']} {entry.get('reason', '')}", file=stream)
    return 0 if not uncacheable else 1


def info(stream=sys.stdout) -> int:
    folder = kernel_cache.default_folder()
    files = kernel_cache.KernelCache(folder).files()
    size = sum(os.path.getsize(path) for path in files)
    state = "off (NUMBA_SOFTMAX_CACHE=0)" if kernel_cache.disabled() else "on"
    print(f"kernel cache: {folder}\n  state: {state}\n  entries: {len(files)}\n  bytes: {size}", file=stream)
    return 0


def clear(stream=sys.stdout) -> int:
    cache = kernel_cache.KernelCache(kernel_cache.default_folder())
    print(f"removed {cache.clear()} entries from {cache.folder}", file=stream)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench cache", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("info", "clear", "warm"))
    parser.add_argument("--experiment", choices=EXPERIMENTS, default="all", help="warm: whose kernels (default all)")
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS,
                        help="warm: compiling processes (default: the CPU cores, at most 16)")
    args = parser.parse_args(argv)
    if args.action == "info":
        return info()
    if args.action == "clear":
        return clear()
    return warm(args.experiment, max(1, args.jobs))


if __name__ == "__main__":
    sys.exit(main())
