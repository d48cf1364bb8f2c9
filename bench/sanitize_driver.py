"""The program compute-sanitizer runs: the named targets, each once, through the project's launch layer.

    compute-sanitizer --tool memcheck python -m bench.sanitize_driver fused:fused_row_softmax_q1 stages dag ...

Every target launches its kernels on a small case through the same code as the library and the
benchmark (:func:`numba_softmax.softmax`, :func:`numba_softmax.tiled.tiled_softmax`, the launch
layer's :func:`numba_softmax.backend.run_launches`), synchronizes, and checks its output against
the oracle. Before a target it prints ``SANITIZE-TARGET <name>`` and after it
``SANITIZE-RESULT <name> ok`` (or ``FAILED: <why>``), flushed, so a report the tool prints in
between belongs to that target. ``python -m bench sanitize`` (:mod:`bench.sanitize`) builds the
command lines and reads the logs; see docs/sanitize.md.

Exit status: 0 every target ran and passed its check; 3 a target failed (the others still ran,
unless the CUDA context was lost); 2 bad arguments or no GPU.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

import numpy as np
from numba import cuda

from bench.environment import gpu_problem
from numba_softmax import softmax
from numba_softmax.backend import run_launches
from numba_softmax.cases import EXPERIMENT_B_SIM_CASES
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.kernels import sanitizer_controls as controls
from numba_softmax.kernels.auto_geometry import auto_geometry
from numba_softmax.kernels.auto_launch import F32, auto_kernel
from numba_softmax.kernels.fused_row import fused_kernel_for
from numba_softmax.kernels.row_copy import row_copy_launches
from numba_softmax.oracle import check_matrix, check_packed
from numba_softmax.tiled import TiledBuffers, build_layout, floor_launches, tiled_softmax

#: Small cases: the tools slow kernels down 10-100x and every target runs under three of them.
ROWS = 3
#: A fused build -> a shape whose rows it takes (the launcher picks the first build that holds the
#: row; vector builds need rows that are a multiple of 4 long, scalar ones get any other width).
FUSED_SHAPES = {
    "fused_row_softmax_w1_v4": (ROWS, 128),
    "fused_row_softmax_q1_v4": (ROWS, 1024),
    "fused_row_softmax_q2_v4": (ROWS, 2048),
    "fused_row_softmax_q4_v4": (ROWS, 4096),
    "fused_row_softmax_q1": (ROWS, 781),
    "fused_row_softmax_q2": (ROWS, 1501),
    "fused_row_softmax_q4": (ROWS, 3001),
}
STAGES_SHAPE = (ROWS, 781)
#: Widths that reach every geometry of ``method="auto"``'s table (numba_softmax.kernels.auto_geometry),
#: the long-row path included, plus one width that is not a multiple of 4 (the scalar builds).
AUTO_WIDTHS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 20000, 781, 40000, 131072)
ROW_COPY_SHAPES = ((ROWS, 128), (ROWS, 1024), (ROWS, 781))
#: Spin-loop bound of the persistent kernels under a sanitizer (the default bounds about 1 s of
#: polling; instrumented kernels run far slower, and a timeout would read as a queue failure).
SANITIZE_MAX_POLLS = 1 << 27
FIXTURE = "random"


@dataclass(frozen=True)
class Target:
    name: str
    kernels: tuple        # the kernels' Python names, as the tool's reports name them
    shared_and_barriers: bool  # racecheck and synccheck apply
    control: str = ""     # "" for the project's kernels; else the tool that must report it


def _tiled_kernels(scheduler, trace=False):
    suffix = "_trace" if trace else ""
    if scheduler == "separate":
        return tuple(f"{k}{suffix}" for k in ("tile_summary_kernel", "row_combine_kernel", "tile_normalize_kernel"))
    kernels = (f"persistent_tiles{suffix}",)
    return (("init_queue_kernel",) + kernels) if scheduler == "dag" else kernels


def _auto_kernels():
    """The builds the ``auto`` target launches: checked (the default) and unchecked, per width."""

    return tuple(sorted({auto_kernel(auto_geometry(cols), F32, checked).py_func.__name__
                         for cols in AUTO_WIDTHS for checked in (True, False)}))


def targets() -> dict[str, Target]:
    """Every target, by name: each fused build, the stages, the row copies, each scheduler (the
    persistent kernel in phased and dag mode, the init kernel), their trace builds and floors, and
    the two negative controls."""
    found = [Target(f"fused:{name}", (name,), shared_and_barriers=name != "fused_row_softmax_w1_v4")
             for name in FUSED_SHAPES]
    found.append(Target("stages", ("row_max_stage", "exp_stage", "row_sum_stage", "divide_stage"), True))
    found.append(Target("row-copy", ("row_copy",), False))
    found.append(Target("auto", _auto_kernels(), True))
    for scheduler in ("separate", "phased", "dag"):
        found.append(Target(scheduler, _tiled_kernels(scheduler), True))
        found.append(Target(f"trace-{scheduler}", _tiled_kernels(scheduler, trace=True), True))
        floor = ("empty_tile_kernel",) if scheduler == "separate" else _tiled_kernels(scheduler)
        found.append(Target(f"floor-{scheduler}", floor, scheduler != "separate"))
    found.append(Target("control:out-of-bounds", ("out_of_bounds_write",), False, control="memcheck"))
    found.append(Target("control:shared-race", ("shared_memory_race",), True, control="racecheck"))
    return {t.name: t for t in found}


# ---------------------------------------------------------------- running one target

def _run_fused(build):
    host = matrix_fixture(FIXTURE, FUSED_SHAPES[build])
    d_x = cuda.to_device(host)
    d_y = cuda.device_array(host.shape, dtype=np.float32)
    picked = fused_kernel_for(d_x, d_y).py_func.__name__
    if picked != build:
        return f"shape {host.shape} runs {picked}, not {build}"
    softmax(d_x, method="fused", out=d_y, check=True)
    return _problem(check_matrix(d_y.copy_to_host(), host))


def _run_stages():
    host = matrix_fixture(FIXTURE, STAGES_SHAPE)
    return _problem(check_matrix(softmax(host, method="stages"), host))


def _run_row_copy():
    for shape in ROW_COPY_SHAPES:
        host = matrix_fixture(FIXTURE, shape)
        d_x, d_y = cuda.to_device(host), cuda.device_array(shape, dtype=np.float32)
        run_launches(row_copy_launches(d_x, d_y), name="row-copy")
        if not np.array_equal(d_y.copy_to_host(), host):
            return f"row copy {shape}: the output differs from the input"
    return None


def _run_auto():
    for cols in AUTO_WIDTHS:
        host = matrix_fixture(FIXTURE, (ROWS, cols))
        d_x = cuda.to_device(host)
        for check in (True, False):
            d_y = cuda.device_array(host.shape, dtype=np.float32)
            softmax(d_x, out=d_y, check=check)
            cuda.synchronize()
            problem = _problem(check_matrix(d_y.copy_to_host(), host))
            if problem:
                return f"auto, {cols} columns, check={check}: {problem}"
    return None


def _sim_case():
    _name, lengths = EXPERIMENT_B_SIM_CASES[0]
    return packed_fixture(FIXTURE, lengths), lengths


def _run_tiled(scheduler, trace):
    values, lengths = _sim_case()
    result = tiled_softmax(values, lengths, scheduler, max_polls=SANITIZE_MAX_POLLS, trace=trace)
    return _problem(check_packed(result.out, values, lengths))


def _run_floor(scheduler):
    values, lengths = _sim_case()
    buffers = TiledBuffers.allocate(build_layout(lengths), values)
    run_launches(floor_launches(scheduler, buffers), name=f"floor-{scheduler}")
    return None


def _run_control(name):
    if name == "control:out-of-bounds":
        run_launches(controls.out_of_bounds_launches(cuda.device_array(4 * controls.CONTROL_THREADS, np.float32)))
    else:
        run_launches(controls.shared_race_launches(cuda.device_array(controls.CONTROL_THREADS, np.float32)))
    return None  # what counts is the tool's report, not the (deliberately wrong) output


def _problem(result):
    return None if result.passed else result.describe()


def run_target(name):
    """Run one target; None when it ran and its output passed the check, else why not."""
    if name.startswith("fused:"):
        return _run_fused(name.split(":", 1)[1])
    if name == "stages":
        return _run_stages()
    if name == "row-copy":
        return _run_row_copy()
    if name == "auto":
        return _run_auto()
    if name in ("separate", "phased", "dag"):
        return _run_tiled(name, trace=False)
    if name.startswith("trace-"):
        return _run_tiled(name.split("-", 1)[1], trace=True)
    if name.startswith("floor-"):
        return _run_floor(name.split("-", 1)[1])
    return _run_control(name)


def main(argv=None) -> int:
    known = targets()
    parser = argparse.ArgumentParser(prog="python -m bench.sanitize_driver", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="+", metavar="TARGET", help=f"any of: {', '.join(known)}")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in known]
    if unknown:
        print(f"error: unknown target(s) {unknown}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    problem = gpu_problem("the sanitizer driver")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    failed = False
    for name in args.targets:
        print(f"SANITIZE-TARGET {name}", flush=True)
        try:
            problem = run_target(name)
        except Exception as exc:  # report and go on: a later target may still run
            problem = f"{type(exc).__name__}: {exc}"
        failed = failed or problem is not None
        print(f"SANITIZE-RESULT {name} {'ok' if problem is None else 'FAILED: ' + problem}", flush=True)
    return 3 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
