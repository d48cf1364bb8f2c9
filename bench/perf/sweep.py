"""``python -m bench perf --sweep widths``: ``auto`` against its peers across row widths, in one GPU run.

    python -m bench perf --sweep widths [--ops softmax,...] [--dtypes float32,bfloat16] [--widths N,N,...]
                         [--out DIR] [--expect-device H200] [--rounds N] [--budget-s S] [--no-torch]
                         [--no-triton] [--no-liger] [--no-cudnn]
    python -m bench perf --sweep widths --report-only --out DIR   (sweep.md, sweep.png from DIR/sweep.json)

Problems: each width of :data:`numba_softmax.cases.SWEEP_WIDTHS` with ``sweep_rows(width, itemsize, passes)`` rows
(reading and writing the operation's arrays once each moves 256 MiB), per operation (``--ops``, default
``softmax``) and element type, widths ascending; first the small problems (1, 8 and 64 rows at a few widths:
latency). The operations other than the softmax (log_softmax, the two backward kernels, a training step) and
their variants: :mod:`bench.perf.sweep_ops`. The softmax's variants, in the same shuffled rounds: ``auto``
(``auto_launches(x, y, types=(t, t))``, unchecked), ``torch`` (``torch.softmax(x, 1, out=y)``), ``triton`` (the
tutorial kernel, computing in float32), ``liger`` (Liger-Kernel's softmax, optional), ``cudnn`` (float32) and
``copy`` (``cuMemcpyDtoDAsync`` of the input's bytes). The timing is ``bench perf``'s
(:func:`bench.perf.peers.time_rounds`: rotating input sets against L2, warm-ups, a delay kernel before each
single-invocation sample, shuffled rounds, paired ratios), without the batch samples.

Inputs: the rows of one fixture tile (``random-0``, at most 2^20 elements) repeated down the matrix; every
input set holds the same values (only their addresses rotate). Check before timing: the output of set 0 (filled
with NaN first) read back whole; every element written, finite and non-negative (its bits below those of
+inf), and the sampled rows (all rows up to 2^20 elements, else that many evenly spaced rows, the first and
the last among them) against ``numba_softmax.oracle.check_matrix`` with the element type's tolerances; the copy
bit for bit on the sampled rows. A variant that fails is reported and not timed.

``DIR/sweep.json`` (every raw sample) and ``DIR/sweep.md`` are written after each problem; ``sweep.png`` at the
end. An existing ``DIR/sweep.json`` of the same device is merged: problems rerun replace theirs, the others
stay. No problem starts ``--budget-s`` seconds (default 450) after the command started: those left are listed with
the command that runs them (merged into the same folder).
Exit status: 0 when every required measurement ran; 1 when ``auto`` or the copy failed its check, an installed
peer could not be set up, or a problem raised; 2 usage; 3 wrong device model; 4 no GPU.
"""

import datetime
import gc
import os
import sys
import time
import traceback
from dataclasses import dataclass

import numba
import numpy as np
from numba import cuda

from bench.environment import DeviceMismatch, check_expected_device, gpu_problem, run_header
from bench.perf import ceilings
from bench.perf.ceilings import log
from bench.perf.peers import (AUTO, AUTO_CANDIDATE_PREFIX, COPY, CUDNN, TORCH, TRITON, WARMUPS, PeerCannotRun,
                              _torch_variant, _triton_variant, _Variant, add_peer, auto_geometries_for, auto_variants,
                              check_variants, close_variants, copy_variant, cudnn_variant, host_array, input_sets_for,
                              note_starved, run_once, summarize_shape, time_rounds, torch_on_our_stream, torch_tensors)
from bench.perf.sweep_ops import (BACKWARDS, LIGER, OPERATIONS, OPS_COMPILED, OPS_EAGER, SOFTMAX, TRAIN, SetArrays,
                                  auto_variant, candidate_variants, check_op_output, copy_bytes, extra_ratios,
                                  input_tiles, liger_variant, operation_candidates, ops_variant, own_geometry,
                                  parse_choices, reference, torch_variant)
from bench.perf.sweep_report import read_report, write_outputs
from bench.processes import DEFAULT_JOBS, map_in_processes
from bench.timing import DELAY_FACTOR, DELAY_MIN_US, DelaySampler
from numba_softmax.cases import (SWEEP_DTYPES, SWEEP_MAX_WIDTH, SWEEP_OPS, SWEEP_PROBLEM_BYTES, SWEEP_SMALL_ROWS,
                                 SWEEP_SMALL_WIDTHS, SWEEP_WIDTHS, sweep_rows)
from numba_softmax.element_types import STORAGE_DTYPES, to_bfloat16
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.launch import kernel_cache
from numba_softmax.launch.driver import device_record
from numba_softmax.oracle import check_matrix
from numba_softmax.peers import liger_softmax

SWEEP_ROUNDS = 20
SWEEP_MIN_ROUNDS = 10
#: No problem starts after this many seconds (the rest are listed, with the command that runs them).
SWEEP_BUDGET_S = 450.0
#: Elements of the fixture tile and of the rows checked against the oracle; at least CHECK_MIN_ROWS rows.
CHECK_ELEMENTS = 2**20
CHECK_MIN_ROWS = 4
#: +inf's bits: an output element whose bits are below these is finite and non-negative (not the NaN fill).
INF_BITS = {4: (np.uint32, 0x7F800000), 2: (np.uint16, 0x7F80)}
#: The run-time model of :func:`estimate_seconds` (H200): host work per problem (fixture, checks, transfers),
#: device time per invocation at a rate of bytes moved, one compile of a Triton kernel, of an auto build.
ESTIMATE_PROBLEM_S, ESTIMATE_TBS, ESTIMATE_TRITON_COMPILE_S, ESTIMATE_AUTO_COMPILE_S = 0.8, 2.0, 2.0, 3.0
#: One ``torch.compile`` of the training step (a new shape recompiles).
ESTIMATE_TORCH_COMPILE_S = 4.0


@dataclass(frozen=True)
class Problem:
    dtype: str
    rows: int
    width: int
    small: bool = False
    op: str = SOFTMAX

    @property
    def name(self):
        """``float32 8192x4096`` (the softmax), ``softmax_backward float32 5461x4096`` (another operation)."""
        return ("" if self.op == SOFTMAX else f"{self.op} ") + f"{self.dtype} {self.rows}x{self.width}"

    @property
    def itemsize(self):
        return STORAGE_DTYPES[self.dtype].itemsize

    @property
    def nbytes(self):
        """Bytes moved: each array the operation reads or writes, once (the softmax: its input and output)."""
        return SWEEP_OPS[self.op] * self.rows * self.width * self.itemsize


def sweep_problems(dtypes, widths=None, ops=(SOFTMAX,)):
    """The problems of a sweep in run order: the small ones at the selected widths of SWEEP_SMALL_WIDTHS, then
    one 256 MiB problem per width (ascending), operation and element type."""
    selected = sorted(SWEEP_WIDTHS if widths is None else widths)
    small = [Problem(d, r, w, True, op) for w in selected if w in SWEEP_SMALL_WIDTHS for r in SWEEP_SMALL_ROWS
             for op in ops for d in dtypes]
    return small + [Problem(d, sweep_rows(w, STORAGE_DTYPES[d].itemsize, SWEEP_OPS[op]), w, False, op)
                    for w in selected for op in ops for d in dtypes]


def parse_widths(text):
    """``"1,4097"`` -> [1, 4097]: integers from 1 to SWEEP_MAX_WIDTH, none repeated (ValueError otherwise)."""
    widths = []
    for item in text.split(","):
        try:
            width = int(item.strip())
        except ValueError:
            raise ValueError(f"--widths: {item.strip()!r} is not an integer") from None
        if not 1 <= width <= SWEEP_MAX_WIDTH:
            raise ValueError(f"--widths: {width} is outside 1..{SWEEP_MAX_WIDTH}")
        if width in widths:
            raise ValueError(f"--widths: {width} is given twice")
        widths.append(width)
    return widths


def parse_dtypes(text):
    """``"float32,bfloat16"`` -> the element types, each one of SWEEP_DTYPES, none repeated."""
    return parse_choices("--dtypes", text, SWEEP_DTYPES, "a type")


def check_rows(rows, width):
    """The rows checked against the oracle (and the rows of the fixture tile): all of them up to CHECK_ELEMENTS
    elements, else that many (at least CHECK_MIN_ROWS) evenly spaced, the first and the last among them."""
    count = min(rows, max(CHECK_MIN_ROWS, CHECK_ELEMENTS // width))
    return np.unique(np.linspace(0, rows - 1, count).round().astype(np.int64))


def fixture_tile(problem):
    """The input rows repeated down every input matrix: ``random-0`` of as many rows as are checked."""
    tile = matrix_fixture("random-0", (len(check_rows(problem.rows, problem.width)), problem.width))
    return to_bfloat16(tile) if problem.dtype == "bfloat16" else tile


def fill_repeated(memcpy, dst, rows, row_bytes, tile, tile_rows):
    """Fill ``rows`` rows at address ``dst`` with the ``tile_rows`` rows at ``tile`` repeated: the tile, then
    copies of what is filled so far (row i holds tile row i % tile_rows). ``memcpy(dst, src, nbytes)``."""
    memcpy(dst, tile, min(rows, tile_rows) * row_bytes)
    filled = min(rows, tile_rows)
    while filled < rows:
        count = min(filled, rows - filled)
        memcpy(dst + filled * row_bytes, dst, count * row_bytes)
        filled += count


def check_output(out, tile, sample, types, copy=False):
    """The check of one variant's whole output (host array) of the input whose row i is ``tile[i % len(tile)]``:
    ``sample``'s rows against the oracle (bit for bit against the input for a ``copy``), and every element
    written, finite and non-negative. Returns a record with "passed"."""
    x = tile[sample % len(tile)]
    got = out[sample]
    kind, inf_bits = INF_BITS[out.dtype.itemsize]
    if copy:
        passed = bool(np.array_equal(got.view(kind), x.view(kind)))
        return {"passed": passed, "kind": "bitwise copy of the input", "rows_checked": len(sample)}
    written = bool(np.all(out.view(kind) < kind(inf_bits)))
    result = check_matrix(got, x, types)
    record = result.record()
    record.update(kind="oracle check_matrix on the sampled rows; every element written, finite, non-negative",
                  rows_checked=len(sample), all_written_finite_nonneg=written, passed=bool(result.passed and written),
                  description=result.describe() + ("" if written else "; some element is NaN (not written), "
                                                                      "infinite or negative"))
    return record


def estimate_seconds(problems, rounds, variants=6):
    """A rough run time on an H200 (ESTIMATE_* constants): host work per problem, each variant's warm-ups and
    rounds behind a delay kernel, one Triton compile per block size, element type and Triton peer (tutorial,
    Liger up to 65,536 columns), and the auto builds (compiled in parallel processes first)."""
    seconds = 0.0
    for p in problems:
        invocations = variants * (max(WARMUPS, 4) + 5 + rounds)
        seconds += ESTIMATE_PROBLEM_S + invocations * (2 * DELAY_MIN_US + p.nbytes / (ESTIMATE_TBS * 1e6)) / 1e6
    blocks = {(p.dtype, 1 << (p.width - 1).bit_length()) for p in problems if p.op == SOFTMAX}
    seconds += ESTIMATE_TRITON_COMPILE_S * (len(blocks) + sum(block <= 65536 for _, block in blocks))
    seconds += ESTIMATE_TORCH_COMPILE_S * sum(p.op == TRAIN for p in problems)
    return seconds + ESTIMATE_AUTO_COMPILE_S * 2


# ---------------------------------------------------------------- on the GPU

def matrix_type(dtype):
    """The Numba type of a C-contiguous 2-D array of ``dtype`` (what ``numba.typeof`` reads off one)."""
    return numba.typeof(np.empty((1, 1), STORAGE_DTYPES[dtype]))


def _warm_build(kind, geometry, dtype, form):
    """In a worker process: compile one auto build (``kind`` "forward" or "backward") of ``form`` for C-contiguous
    2-D arrays of ``dtype`` into the kernel cache (the types the launch layer's ``compiled()`` reads off our
    arrays)."""
    from numba_softmax.kernels.auto_backward import backward_kernel
    from numba_softmax.kernels.auto_launch import auto_kernel
    from numba_softmax.launch.cached_kernel import cached_compile
    array = matrix_type(dtype)
    if kind == "forward":
        cached_compile(auto_kernel(geometry, (dtype, dtype), form=form), (array, array))
    else:
        cached_compile(backward_kernel(geometry, dtype, form), (array, array, array))
    return kernel_cache.compile_log()[-1]


def problem_candidates(problem, auto_geometries="none"):
    """The candidate geometries (``--auto-geometries``) a problem's operation times beside its own."""
    dtype, width = problem.dtype, problem.width
    own = own_geometry(problem.op, width, dtype)
    return operation_candidates(problem.op, width, dtype,
                                auto_geometries_for(width, auto_geometries, (dtype, dtype), own))


def problem_builds(problem, auto_geometries="none"):
    """``(kind, geometry, dtype, form)`` of each auto build a problem launches, its candidate geometries
    (``--auto-geometries``) after its own."""
    dtype, width = problem.dtype, problem.width
    candidates = problem_candidates(problem, auto_geometries)
    if problem.op in BACKWARDS:
        names = [own_geometry(problem.op, width, dtype)] + candidates
        return tuple(("backward", name, dtype, BACKWARDS[problem.op]) for name in names)
    form = SOFTMAX if problem.op == TRAIN else problem.op
    forward = tuple(("forward", name, dtype, form)
                    for name in [own_geometry(form, width, dtype)] + candidates)
    if problem.op == TRAIN:
        return forward + (("backward", own_geometry(problem.op, width, dtype), dtype, SOFTMAX),)
    return forward


def warm_auto_builds(problems, auto_geometries="none"):
    """The auto builds the problems launch, compiled into the kernel cache by parallel processes (so that the
    run loads them); returns a record. A failure here only means they compile when first launched."""
    builds = sorted({build for p in problems for build in problem_builds(p, auto_geometries)})
    if not builds or kernel_cache.disabled():
        return {"builds": len(builds), "skipped": "NUMBA_SOFTMAX_CACHE=0: the builds compile when first launched"}
    start = time.perf_counter()
    jobs = max(1, min(DEFAULT_JOBS, len(builds)))
    outcomes = map_in_processes(_warm_build, *zip(*builds, strict=True), jobs=jobs)
    return {"builds": len(builds), "jobs": jobs, "seconds": time.perf_counter() - start,
            "outcomes": [entry.get("outcome") for entry in outcomes]}


def _liger_variant(sampler, d_x, shape, element_type):
    found, function = liger_softmax.softmax_function()
    stream_check = torch_on_our_stream(sampler)
    tx = torch_tensors(d_x, element_type)
    last = {}

    def call(x, i):
        last[i] = function.apply(x)
    try:
        call(tx[0], 0)
        sampler.stream.synchronize()
    except Exception as exc:
        raise PeerCannotRun(f"Liger's softmax does not run at {shape[1]} columns: {type(exc).__name__}: "
                            f"{str(exc)[:300]}") from exc
    variant = _Variant(LIGER, [lambda s, x=x, i=i: call(x, i) for i, x in enumerate(tx)],
                       f"LigerSoftmaxFunction.apply(x), allocating its output (liger_kernel {found}; stream "
                       f"checked via {stream_check})", read_output=lambda: host_array(last[0]))
    variant.keep = (tx, last)
    return variant


def _softmax_variants(sampler, problem, arrays, args, notes, errors, skipped):
    shape, dtype = (problem.rows, problem.width), problem.dtype
    d_x, d_y = arrays.each("x"), arrays.each("y")
    variants = auto_variants(shape, d_x, d_y, args.auto_geometries, (dtype, dtype))
    peers = ((TORCH, not args.no_torch, lambda: _torch_variant(sampler, d_x, d_y, shape, dtype)),
             (TRITON, not args.no_triton, lambda: _triton_variant(sampler, d_x, d_y, shape, dtype)),
             (LIGER, not args.no_liger, lambda: _liger_variant(sampler, d_x, shape, dtype)))
    for name, enabled, factory in peers:
        add_peer(variants, name, enabled, factory, problem.name, notes, errors, skipped)
    if dtype != "float32":
        skipped[CUDNN] = "the cuDNN binding (numba_softmax/peers/cudnn.py) describes float32 tensors only"
    else:
        add_peer(variants, CUDNN, not args.no_cudnn, lambda: cudnn_variant(sampler, d_x, d_y, shape),
                 problem.name, notes, errors, skipped)
    return variants


def _op_variants(sampler, problem, arrays, args, notes, errors, skipped):
    op, dtype = OPERATIONS[problem.op], problem.dtype
    candidates = problem_candidates(problem, args.auto_geometries)
    variants = [auto_variant(op, arrays, dtype)] + candidate_variants(op, arrays, dtype, candidates)
    factories = {TORCH: (not args.no_torch, lambda: torch_variant(sampler, op, arrays, dtype)),
                 LIGER: (not args.no_liger, lambda: liger_variant(sampler, op, arrays, dtype)),
                 OPS_EAGER: (True, lambda: ops_variant(sampler, OPS_EAGER, arrays, dtype)),
                 OPS_COMPILED: (True, lambda: ops_variant(sampler, OPS_COMPILED, arrays, dtype))}
    for name in op.variants:
        if name in factories:
            hint = "our operator: see the traceback" if name in (OPS_EAGER, OPS_COMPILED) else None
            add_peer(variants, name, *factories[name], problem.name, notes, errors, skipped, hint)
    return variants


def _build_variants(sampler, problem, arrays, args, notes, errors, skipped):
    build = _softmax_variants if problem.op == SOFTMAX else _op_variants
    variants = build(sampler, problem, arrays, args, notes, errors, skipped)
    op = OPERATIONS[problem.op]
    variants.append(copy_variant(arrays.inputs, arrays.outputs,
                                 copy_bytes(op, (problem.rows, problem.width), problem.dtype)))
    return variants


def fill_inputs(sampler, arrays, tiles, problem):
    """Each input array of set 0 filled with its tile repeated down the rows; the other sets copies of set 0."""
    from numba import cuda

    def memcpy(dst, src, nbytes):
        ceilings.memcpy_submit(dst, src, nbytes)(sampler.stream)
    row_bytes = problem.width * problem.itemsize
    d_tiles = {name: cuda.to_device(tile, stream=sampler.stream.numba) for name, tile in tiles.items()}
    for name, d_tile in d_tiles.items():
        fill_repeated(memcpy, ceilings.device_ptr(arrays.array(name, 0)), problem.rows, row_bytes,
                      ceilings.device_ptr(d_tile), len(tiles[name]))
    for buffer in arrays.inputs[1:]:
        memcpy(ceilings.device_ptr(buffer), ceilings.device_ptr(arrays.inputs[0]), arrays.inputs[0].nbytes)
    sampler.stream.synchronize()


def problem_check(problem, tiles, sample):
    """``check(variant, out)``: the record of one variant's checked output of set 0 (host array)."""
    op, dtype = OPERATIONS[problem.op], problem.dtype
    copied = tiles[op.inputs[op.outputs.index(op.checked)]]  # what the copy writes over the checked output
    if op.name == SOFTMAX:
        return lambda v, out: check_output(out, tiles["x"], sample, (dtype, dtype), copy=v.name == COPY)
    ref, scale = reference(op, tiles, dtype)

    def check(variant, out):
        if variant.name == COPY:
            return check_output(out, copied, sample, (dtype, dtype), copy=True)
        return check_op_output(out, ref, scale, sample, dtype)
    return check


def ours(name):
    """A variant whose failed check is an error (exit status 1), not a peer's note."""
    return name in (AUTO, COPY, OPS_EAGER, OPS_COMPILED) or name.startswith(AUTO_CANDIDATE_PREFIX)


def measure_problem(sampler, problem, seed, args, notes, errors):
    """One problem: inputs, variants, checks, rounds, statistics (an entry of sweep.json)."""
    start = time.perf_counter()
    op, shape, dtype = OPERATIONS[problem.op], (problem.rows, problem.width), problem.dtype
    l2 = device_record()["l2_cache_bytes"]
    n_sets = input_sets_for(problem.nbytes, l2)
    tile, sample = fixture_tile(problem), check_rows(problem.rows, problem.width)
    tiles = input_tiles(op, tile, dtype)
    entry = {"name": problem.name, "op": problem.op, "dtype": dtype, "width": problem.width, "rows": problem.rows,
             "small": problem.small, "logical_bytes": problem.nbytes, "set_bytes": problem.nbytes, "l2_bytes": l2,
             "input_sets": n_sets, "seed": seed, "rows_checked": len(sample),
             "fixture": f"random-0 rows 0..{len(tile) - 1} repeated down the matrix, the same in every set",
             "variants": {}}
    arrays = SetArrays(op, shape, dtype, n_sets)
    fill_inputs(sampler, arrays, tiles, problem)
    skipped = {}
    variants = _build_variants(sampler, problem, arrays, args, notes, errors, skipped)
    for name, reason in skipped.items():
        entry["variants"][name] = {"status": "skipped", "reason": reason}
    check, d_checked = problem_check(problem, tiles, sample), arrays.array(op.checked, 0)
    timed = check_variants(variants, lambda v: check(v, run_once(sampler, v, d_checked, dtype)),
                           entry["variants"], problem.name, ours, errors, notes)
    names = [v.name for v in timed]
    entry["rounds"] = time_rounds(sampler, timed, n_sets, args.rounds, seed, entry["variants"], batch=0)
    entry["analysis"] = summarize_shape(entry["rounds"], names, problem.nbytes)
    entry["analysis"]["ratios"].update(extra_ratios(problem.op, entry["rounds"]))
    note_starved(problem.name, entry["rounds"], notes)
    close_variants(variants)
    entry["seconds"] = time.perf_counter() - start
    return entry


def _release_memory(sampler):
    sampler.stream.synchronize()
    gc.collect()
    cuda.current_context().deallocations.clear()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


def _progress(index, total, entry, elapsed):
    analysis = entry.get("analysis") or {"variants": {}}
    times = ", ".join(f"{name} {stats['event_us']['median']:.1f}" for name, stats in analysis["variants"].items())
    log(f"[{index}/{total}] {entry['name']}: {times or 'nothing timed'} us ({entry.get('seconds', 0):.1f} s; "
        f"{elapsed:.0f} s elapsed)")


def run_sweep(args, argv, out_dir):
    """The GPU sweep (args parsed and checked by ``bench.perf.main``); returns the exit status."""
    start = time.perf_counter()  # --budget-s counts from here
    problem = gpu_problem("python -m bench perf --sweep widths")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 4
    os.makedirs(out_dir, exist_ok=True)
    problems = sweep_problems(args.dtypes, args.widths, args.ops)
    notes, errors = [], []
    report = {**run_header("python -m bench perf --sweep widths", argv, args.expect_device),
              "protocol": {"rounds": args.rounds, "seed": args.seed, "warmups": WARMUPS, "batch": None,
                           "dtypes": args.dtypes, "ops": args.ops, "auto_geometries": args.auto_geometries,
                           "problem_bytes": SWEEP_PROBLEM_BYTES,
                           "check_elements": CHECK_ELEMENTS, "budget_s": args.budget_s,
                           "delay": {"min_us": DELAY_MIN_US, "factor": DELAY_FACTOR}},
              "estimate_s": estimate_seconds(problems, args.rounds), "notes": notes, "errors": errors,
              "problems": [], "not_run": []}
    try:
        check_expected_device(report["device"]["name"], args.expect_device)
    except DeviceMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    earlier = read_report(out_dir)
    if earlier is not None:
        if (earlier.get("device") or {}).get("name") != report["device"]["name"]:
            print(f"error: {out_dir}/sweep.json is of {(earlier.get('device') or {}).get('name')!r}, this device is "
                  f"{report['device']['name']!r}: give another --out", file=sys.stderr)
            return 2
        keys = {p.name for p in problems}
        report["problems"] = [e for e in earlier.get("problems", []) if e["name"] not in keys]
        report["earlier_runs"] = earlier.get("earlier_runs", []) + [
            {k: earlier.get(k) for k in ("argv", "started_utc", "finished_utc", "git", "errors", "not_run")}]
        notes.append(f"merged into {out_dir}/sweep.json: {len(report['problems'])} problems kept from earlier runs")
    log(f"{report['device']['name']}: {len(problems)} problems, {args.rounds} rounds; estimate "
        f"{report['estimate_s']:.0f} s; writing to {out_dir}")
    sampler = DelaySampler()
    report["delay_kernel"] = sampler.calibrate_delay()
    try:
        report["auto_builds"] = warm_auto_builds(problems, args.auto_geometries)
        log(f"auto builds: {report['auto_builds']}")
    except Exception as exc:
        notes.append(f"compiling the auto builds in parallel processes failed ({type(exc).__name__}: {exc}); "
                     "each compiles when first launched")
    for index, problem in enumerate(problems):
        if time.perf_counter() - start > args.budget_s:
            report["not_run"].append(problem.name)
            continue
        gc.collect()
        gc.disable()  # no collection inside the timing loops (as in timeit)
        try:
            entry = measure_problem(sampler, problem, args.seed + index, args, notes, errors)
        except Exception as exc:
            entry = {"name": problem.name, "dtype": problem.dtype, "width": problem.width, "rows": problem.rows,
                     "small": problem.small, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc(), "variants": {}}
            errors.append(f"{problem.name}: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        finally:
            gc.enable()
        report["problems"] = [e for e in report["problems"] if e["name"] != problem.name] + [entry]
        _release_memory(sampler)
        _progress(index + 1, len(problems), entry, time.perf_counter() - start)
        write_outputs(out_dir, report, plot=False)
    if report["not_run"]:
        widths = sorted({int(name.split("x")[-1]) for name in report["not_run"]})
        notes.append(f"{len(report['not_run'])} problems not started within --budget-s {args.budget_s:g}; run "
                     f"them (merged into this folder) with: python -m bench perf --sweep widths --ops "
                     f"{','.join(args.ops)} --dtypes {','.join(args.dtypes)} --widths {','.join(map(str, widths))} "
                     f"--out {out_dir}")
    report["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    markdown = write_outputs(out_dir, report, plot=True)
    print(markdown)
    if errors:
        print(f"ERRORS ({len(errors)}), exit status 1:\n" + "\n".join(f"  - {e}" for e in errors), file=sys.stderr)
        return 1
    return 0


def report_only(out_dir):
    """sweep.md and sweep.png again from ``out_dir``/sweep.json (no GPU)."""
    report = read_report(out_dir)
    if report is None:
        print(f"error: {out_dir}/sweep.json not found", file=sys.stderr)
        return 2
    write_outputs(out_dir, report, plot=True)
    print(f"wrote {out_dir}/sweep.md and sweep.png from {out_dir}/sweep.json", file=sys.stderr)
    return 0

