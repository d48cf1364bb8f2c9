"""Section 2 of ``python -m bench perf``: the fused kernel against its peers, per shape.

Variants: ``fused`` (one ``cuLaunchKernel`` through the launch layer), ``fused_graph`` (the same
replayed from a CUDA graph), ``auto`` (``method="auto"``'s kernel for the width, unchecked, one
``cuLaunchKernel``) and ``auto:<geometry>`` (the other candidate geometries for the width,
:data:`numba_softmax.kernels.auto_geometry.CANDIDATES`, so that one run can confirm the table), ``cudnn``,
``torch`` and ``triton`` (optional), ``row_copy`` (a copy in the fused kernel's own launch geometry) and
``copy`` (``cuMemcpyDtoDAsync`` of the same bytes). Rows longer than the fused kernel holds (the long-row
shapes) skip ``fused``, ``fused_graph`` and ``row_copy`` with the reason; Triton's tutorial kernel is
skipped with the reason where it does not compile or run.
Inputs rotate among enough input sets to defeat L2; every variant is checked before it is timed;
each round times one invocation of every variant behind a delay kernel
(:class:`bench.timing.DelaySampler`), in a shuffled order. The package docstring
(:mod:`bench.perf`) gives the whole protocol.
"""

import math

import numpy as np
from numba import cuda

from bench.floors import shape_name
from bench.perf import ceilings
from bench.perf.ceilings import bandwidth_tbs, log, logical_bytes
from bench.protocol import BATCH, round_orders
from bench.stats import paired_ratios, summarize
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_geometry import CANDIDATES, Geometry, auto_geometry
from numba_softmax.kernels.auto_launch import auto_launches, geometry_launches
from numba_softmax.kernels.fused_row import MAX_FUSED_COLUMNS, fused_launches
from numba_softmax.kernels.row_copy import row_copy_launches
from numba_softmax.kernels.stream_copy import SWEEP, parse, stream_copy_launches
from numba_softmax.launch.driver import Invocation, device_record
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.element_types import from_float64
from numba_softmax.oracle import matrix_reference
from numba_softmax.peers import triton_softmax
from numba_softmax.peers.cudnn import CudnnSoftmax

#: The protocol shapes with >= 4096 rows (the peers' shapes).
PROTOCOL_PEER_SHAPES = ((4096, 128), (4096, 1024), (4096, 4096), (16384, 1024))
#: Rows longer than the fused kernel holds: method="auto"'s wide-row geometries (8192-32768 columns) and its
#: cluster path (131072) against the peers.
LONG_SHAPES = ((4096, 8192), (4096, 16384), (4096, 32768), (1024, 131072))
DEFAULT_SHAPES = PROTOCOL_PEER_SHAPES + LONG_SHAPES
PEER_MIN_ROWS = 4096

FUSED, FUSED_GRAPH, CUDNN, TORCH, TRITON, COPY = "fused", "fused_graph", "cudnn", "torch", "triton", "copy"
ROW_COPY = "row_copy"
AUTO = "auto"
#: Prefix of the candidate geometries' variants: ``auto:rows_l16_q2``.
AUTO_CANDIDATE_PREFIX = "auto:"
PEERS = (CUDNN, TORCH, TRITON)
VARIANTS = (FUSED, FUSED_GRAPH, AUTO, CUDNN, TORCH, TRITON, ROW_COPY, COPY)
#: Variants checked bit for bit against the input (copies), not against the softmax oracle.
COPIES = (COPY, ROW_COPY)
#: Prefix of the plain copy kernels' variants (``--copy-kernels``): ``copy_kernel:copy_t256_u4``.
COPY_KERNEL_PREFIX = "copy_kernel:"


def is_copy(name):
    """A variant checked bit for bit and read as a ceiling, not as a softmax."""
    return name in COPIES or name.startswith(COPY_KERNEL_PREFIX)


def copy_kernels_for(option):
    """The copy kernels ``--copy-kernels`` names: "none", "sweep" or comma-separated names (checked)."""
    if option == "none":
        return []
    names = list(SWEEP) if option == "sweep" else [n.strip() for n in option.split(",") if n.strip()]
    for name in names:
        parse(name)
    return names

MIN_ROUNDS = 30
DEFAULT_ROUNDS = 50
WARMUPS = 10
MIN_INPUT_SETS = 4
MAX_INPUT_SETS = 256
L2_TRAFFIC_FACTOR = 1.5


def input_sets_for(set_bytes, l2_bytes, minimum=MIN_INPUT_SETS, factor=L2_TRAFFIC_FACTOR, maximum=MAX_INPUT_SETS):
    """Input sets to rotate among: the other sets must move ``factor`` x L2 between two uses of one."""
    if set_bytes <= 0 or l2_bytes <= 0:
        raise ValueError("input_sets_for: sizes must be positive")
    needed = 1 + math.ceil(factor * l2_bytes / set_bytes)
    return int(min(maximum, max(minimum, needed)))


def summarize_shape(rounds, variants, nbytes, copy_ceiling_tbs=None):
    """Statistics of one shape's rounds (see :func:`_measure_shape` for the record layout).

    ``variants``: the timed variant names. Returns ``{"variants": {name: {...}}, "ratios": {...}}``
    where ``ratios["fused/<v>"]`` is :func:`bench.stats.paired_ratios` of event_us (fused / v per
    round) and ``ratios["copy/fused"]`` / ``ratios["row_copy/fused"]`` the fused kernel's per-round
    fraction of a same-size copy / of a copy in its own launch geometry; ``ratios["row_copy/<peer>"]``
    whether even that copy is faster than the peer (>= 1: no kernel of this geometry can be).
    """
    out = {"variants": {}, "ratios": {}}
    for name in variants:
        samples = [r["samples"][name] for r in rounds if name in r["samples"]]
        if not samples:
            continue
        event = summarize([s["event_us"] for s in samples])
        entry = {
            "event_us": event,
            "bandwidth_tbs": bandwidth_tbs(nbytes, event["median"]),
            "starved_samples": sum(bool(s["starved"]) for s in samples),
            "samples": len(samples),
        }
        if copy_ceiling_tbs:
            entry["fraction_of_copy_ceiling"] = entry["bandwidth_tbs"] / copy_ceiling_tbs
        batch = [s["batch_event_us"] / s["batch_invocations"] for s in samples if "batch_event_us" in s]
        if batch:
            entry["batch_per_invocation_us"] = summarize(batch)
            entry["batch_starved_samples"] = sum(bool(s["batch_starved"]) for s in samples if "batch_event_us" in s)
        out["variants"][name] = entry
    event_rounds = [{name: s["event_us"] for name, s in r["samples"].items()} for r in rounds]
    if FUSED in out["variants"]:
        for name in variants:
            if name == FUSED or is_copy(name) or name not in out["variants"]:
                continue
            out["ratios"][f"{FUSED}/{name}"] = paired_ratios(event_rounds, FUSED, name, "event_us")
        for copy in COPIES:
            if copy in out["variants"]:
                out["ratios"][f"{copy}/{FUSED}"] = paired_ratios(event_rounds, copy, FUSED, "event_us")
    if AUTO in out["variants"]:  # auto against every other variant, and its fraction of a same-size copy
        for name in variants:
            if name != AUTO and not is_copy(name) and name in out["variants"]:
                out["ratios"][f"{AUTO}/{name}"] = paired_ratios(event_rounds, AUTO, name, "event_us")
        if COPY in out["variants"]:
            out["ratios"][f"{COPY}/{AUTO}"] = paired_ratios(event_rounds, COPY, AUTO, "event_us")
    if COPY in out["variants"]:  # each copy kernel against the copy engine on the same bytes
        for name in variants:
            if name.startswith(COPY_KERNEL_PREFIX) and name in out["variants"]:
                out["ratios"][f"{name}/{COPY}"] = paired_ratios(event_rounds, name, COPY, "event_us")
    if ROW_COPY in out["variants"]:  # could anything in the fused geometry beat this peer?
        for peer in PEERS:
            if peer in out["variants"]:
                out["ratios"][f"{ROW_COPY}/{peer}"] = paired_ratios(event_rounds, ROW_COPY, peer, "event_us")
    return out


class PeerCannotRun(Exception):
    """A peer that cannot run at this shape (e.g. the Triton tutorial kernel at very long rows): skipped,
    with the reason, not an error."""


class _Variant:
    def __init__(self, name, submits, call, read_output=None):
        self.name = name
        self.submits = submits          # one callable(stream) per input set
        self.call = call
        self.read_output = read_output  # set 0's output as a host array (after a synchronize)
        self.status = "timed"
        self.reason = ""
        self.extra = {}


def run_once(sampler, variant, d_out0, element_type="float32"):
    """Fill set 0's output with NaN, run the variant once on set 0, return its output as a host array (an
    output that is not written stays NaN)."""
    stream = sampler.stream
    nan = from_float64(np.array(np.nan), element_type)
    d_out0.copy_to_device(np.full(d_out0.shape, nan, dtype=nan.dtype), stream=stream.numba)
    stream.synchronize()
    variant.submits[0](stream)
    stream.synchronize()
    out = variant.read_output() if variant.read_output else d_out0.copy_to_host(stream=stream.numba)
    stream.synchronize()
    return out


def _check_variant(sampler, variant, d_out0, host_x0, reference, kind="softmax"):
    """Run the variant once on set 0 (:func:`run_once`) and check its output against ``reference`` (the oracle of
    ``host_x0``, computed once for every variant). Returns a record."""
    out = run_once(sampler, variant, d_out0)
    if kind == "copy":
        passed = bool(np.array_equal(out.view(np.uint32), host_x0.view(np.uint32)))
        return {"passed": passed, "kind": "bitwise copy of the input"}
    result = reference.check(out)
    record = result.record()
    record["kind"] = "oracle check_matrix"
    record["description"] = result.describe()
    return record


def check_variants(variants, check, records, label, ours, errors, notes):
    """Check each variant (``check(variant)`` -> a record with "passed") before timing; returns those that pass.
    A failure is recorded in ``records[name]``, reported (in ``errors`` where ``ours(name)``, else in ``notes``)
    and not timed."""
    timed = []
    for variant in variants:
        record = records[variant.name] = {"call": variant.call, **variant.extra}
        try:
            result = check(variant)
        except Exception as exc:
            result = {"passed": False, "error": f"{type(exc).__name__}: {exc}"}
        record["check"] = result
        if not result["passed"]:
            record["status"] = "failed check"
            record["reason"] = result.get("description") or result.get("error") or "output differs"
            message = f"{label}: {variant.name} failed its check before timing, not timed: {record['reason']}"
            (errors if ours(variant.name) else notes).append(message)
            log(message)
            continue
        record["status"] = "timed"
        timed.append(variant)
    return timed


def torch_tensors(arrays, element_type="float32"):
    """torch tensors on the buffers of Numba device arrays, in place (bfloat16: the uint16 bits, seen through
    an int16 view, as ``torch.bfloat16``); each checked to wrap its buffer with the expected dtype and shape."""
    import torch
    dtype = getattr(torch, element_type)
    if element_type == "bfloat16":
        tensors = [torch.as_tensor(d.view(np.int16), device="cuda").view(torch.bfloat16) for d in arrays]
    else:
        tensors = [torch.as_tensor(d, device="cuda") for d in arrays]
    for t, d in zip(tensors, arrays, strict=True):
        if t.data_ptr() != ceilings.device_ptr(d) or t.dtype != dtype or tuple(t.shape) != tuple(d.shape):
            raise RuntimeError("torch.as_tensor did not wrap our device buffer in place")
    return tensors


def torch_on_our_stream(sampler):
    """Make torch's current stream ours (``torch.cuda.ExternalStream``) and check that Triton launches on it;
    returns how Triton's stream was read."""
    import torch
    if not torch.cuda.is_available():  # a CPU build of torch: the torch-based peers cannot run here
        raise PeerCannotRun("torch has no CUDA device here (torch.cuda.is_available() is False: a CPU build?)")
    if torch.cuda.current_stream().cuda_stream != sampler.stream.ptr:
        torch.cuda.set_stream(torch.cuda.ExternalStream(sampler.stream.ptr))
    if torch.cuda.current_stream().cuda_stream != sampler.stream.ptr:
        raise RuntimeError("torch's current stream is not our stream after torch.cuda.set_stream")
    try:
        from triton.runtime import driver as triton_driver
        triton_stream = triton_driver.active.get_current_stream(torch.cuda.current_device())
        stream_check = "triton.runtime.driver.active.get_current_stream()"
    except Exception:  # no Triton, or an older/newer one: it launches on torch's current stream
        triton_stream = torch.cuda.current_stream().cuda_stream
        stream_check = "torch.cuda.current_stream() (Triton's launcher stream API not found)"
    if int(triton_stream) != sampler.stream.ptr:
        raise RuntimeError(f"Triton would launch on stream {triton_stream:#x}, not ours ({sampler.stream.ptr:#x})")
    return stream_check


def torch_out_variant(name, sampler, forms, args_of, sets):
    """torch's kernel as a variant: the first of ``forms`` ``[(text, fn), ...]`` whose ``fn(*args_of(0))`` runs
    (each writes its last argument, ``out=``), else the last form, which allocates (``fn`` without that last
    argument; the result of set 0 read back). ``sets`` input sets; ``args_of(i)``: set i's tensors."""
    import torch
    failures = []
    for text, fn in forms[:-1]:
        try:
            fn(*args_of(0))
            sampler.stream.synchronize()
        except (TypeError, RuntimeError) as exc:
            failures.append(f"{text}: {type(exc).__name__}: {exc}")
            continue
        variant = _Variant(name, [lambda s, i=i, fn=fn: fn(*args_of(i)) for i in range(sets)],
                           f"{text} on torch.cuda.ExternalStream(our stream) (torch {torch.__version__})")
        variant.extra["out_form_failures"] = failures
        return variant
    text, fn = forms[-1]
    last = {}

    def alloc(i):
        last[i] = fn(*args_of(i)[:-1])
    return _Variant(name, [lambda s, i=i: alloc(i) for i in range(sets)],
                    f"{text} (allocating: {failures or 'no out= form'}; torch {torch.__version__})",
                    read_output=lambda: host_array(last[0]))


def _torch_variant(sampler, d_x, d_y, shape, element_type="float32"):
    import torch
    torch_on_our_stream(sampler)
    tx, ty = torch_tensors(d_x, element_type), torch_tensors(d_y, element_type)
    forms = [("torch.softmax(x, 1, out=y)", lambda x, y: torch.softmax(x, 1, out=y)),
             ("torch._softmax(x, 1, False, out=y)", lambda x, y: torch._softmax(x, 1, False, out=y)),
             ("torch.softmax(x, 1)", lambda x: torch.softmax(x, 1))]
    variant = torch_out_variant(TORCH, sampler, forms, lambda i: (tx[i], ty[i]), len(tx))
    variant.keep = (tx, ty)
    return variant


def host_array(tensor):
    """A torch CUDA tensor's values on the host in their storage dtype (bfloat16: its bits as uint16)."""
    import torch
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).cpu().numpy().view(np.uint16)
    return tensor.cpu().numpy()


def _triton_variant(sampler, d_x, d_y, shape, element_type="float32"):
    import triton
    rows, cols = shape
    stream_check = torch_on_our_stream(sampler)
    tx, ty = torch_tensors(d_x, element_type), torch_tensors(d_y, element_type)
    launch, geometry = triton_softmax.launcher(rows, cols)
    try:  # the tutorial kernel holds the whole row in one program: very long rows may not compile
        launch(tx[0], ty[0])
        sampler.stream.synchronize()
    except Exception as exc:
        raise PeerCannotRun(f"the tutorial kernel does not compile or run at {cols} columns ({geometry}): "
                            f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    submits = [lambda s, x=x, y=y: launch(x, y) for x, y in zip(tx, ty, strict=True)]
    variant = _Variant(TRITON, submits, f"tutorial softmax kernel, {geometry} (triton {triton.__version__}; "
                                        f"stream checked via {stream_check})")
    variant.keep = (tx, ty)
    return variant


def _note_once(notes, message):
    if message not in notes:
        notes.append(message)


def auto_geometries_for(cols, option="table", types=("float32", "float32"), own=None):
    """The candidate geometries timed beside ``auto`` at ``cols`` columns of ``types``: ``option`` "table" (those
    of ``CANDIDATES`` for this width that hold it, :meth:`~numba_softmax.kernels.auto_geometry.Geometry.holds`,
    except ``own``, the operation's own choice, by default the softmax's on the
    bench's C-contiguous arrays), "none", or comma-separated names."""
    if option == "none":
        return []
    if option == "table":
        own = own or auto_geometry(cols, types, packed=True)
        names = [n for n in CANDIDATES.get(cols, ()) if n != own]
    else:
        names = [n.strip() for n in option.split(",") if n.strip()]
    geometries = [Geometry.parse(n) for n in names]
    return [g.name for g in geometries if g.holds(cols, types[0])]


def auto_variants(shape, d_x, d_y, option="table", types=("float32", "float32")):
    """``auto`` (the table's geometry) and ``auto:<geometry>`` for each candidate of ``option``
    (:func:`auto_geometries_for`), unchecked builds for elements of ``types``."""
    cols = shape[1]
    pairs = list(zip(d_x, d_y, strict=True))
    candidates = auto_geometries_for(cols, option, types)
    made = []
    own = auto_geometry(cols, types, packed=True)
    for name, geometry in [(AUTO, own)] + [(AUTO_CANDIDATE_PREFIX + g, g) for g in candidates]:
        if name == AUTO:
            launches = [auto_launches(x, y, types=types) for x, y in pairs]
            how = f"auto_launches(x, y, types={types})"
        else:
            launches = [geometry_launches(geometry, x, y, types=types) for x, y in pairs]
            how = f"geometry_launches({geometry!r}, x, y, types={types})"
        invocations = [Invocation.from_launches(f"{name}-{i}", ls) for i, ls in enumerate(launches)]
        first = launches[0][0]
        variant = _Variant(name, [inv.enqueue for inv in invocations],
                           f"geometry {geometry}, grid {first.grid}, block {first.block}: "
                           f"Invocation.from_launches({how}).enqueue, one cuLaunchKernel, unchecked build")
        variant.extra["geometry"] = geometry
        variant.extra["kernel_resources"] = invocations[0].kernel_resources()
        made.append(variant)
    return made


def cudnn_variant(sampler, d_x, d_y, shape):
    """``cudnnSoftmaxForward`` (ACCURATE / INSTANCE) on float32 rows, its kernels loaded by three calls."""
    rows, cols = shape
    softmax = CudnnSoftmax(rows, cols, sampler.stream.ptr)
    ptrs = [(ceilings.device_ptr(x), ceilings.device_ptr(y)) for x, y in zip(d_x, d_y, strict=True)]
    submits = [lambda s, xp=xp, yp=yp: softmax.forward(xp, yp) for xp, yp in ptrs]
    for _ in range(3):  # cuDNN's first call loads its kernels
        submits[0](sampler.stream)
    sampler.stream.synchronize()
    variant = _Variant(CUDNN, submits, f"cudnnSoftmaxForward ACCURATE/INSTANCE (cuDNN "
                                       f"{softmax.lib.version_string}, {softmax.lib.path})")
    variant.library = softmax
    return variant


def copy_variant(d_x, d_y, nbytes):
    """``cuMemcpyDtoDAsync`` of each set's ``nbytes``-byte input into its output: a same-size copy ceiling."""
    return _Variant(COPY, [ceilings.memcpy_submit(ceilings.device_ptr(y), ceilings.device_ptr(x), nbytes)
                           for x, y in zip(d_x, d_y, strict=True)],
                    f"cuMemcpyDtoDAsync of the {nbytes:,}-byte input (same-size copy ceiling)")


def add_peer(variants, name, enabled, factory, label, notes, errors, skipped, hint=None):
    """Append ``factory()``'s variant of the peer ``name``, or record in ``skipped[name]`` why it is absent:
    ``--no-<name>`` or not installed (a note once), it cannot run here (:class:`PeerCannotRun`: a note), or it
    is installed but its set-up failed (an error: exit status 1)."""
    if not enabled:
        skipped[name] = f"--no-{name}"
        _note_once(notes, f"{name} peer skipped: --no-{name}")
        return
    try:
        variants.append(factory())
    except ImportError as exc:
        skipped[name] = f"not installed ({exc})"
        _note_once(notes, f"{name} peer skipped: not installed ({exc})")
    except PeerCannotRun as exc:
        skipped[name] = str(exc)
        notes.append(f"{label}: {name} skipped: {exc}")
    except Exception as exc:  # installed but unusable: say so loudly (exit status 1)
        skipped[name] = f"set-up failed: {type(exc).__name__}: {exc}"
        errors.append(f"{label}: {name} is installed but could not be set up, not timed "
                      f"({hint or f'pass --no-{name} to skip it'}): {type(exc).__name__}: {exc}")


def _build_variants(sampler, shape, d_x, d_y, args, notes, errors, skipped):
    """The variants to check and time at this shape; ``skipped[name]`` = why a peer is absent."""
    rows, cols = shape
    variants = []
    if cols <= MAX_FUSED_COLUMNS:
        invocations = [Invocation.from_launches(f"fused-{i}", fused_launches(x, y)) for i, (x, y)
                       in enumerate(zip(d_x, d_y, strict=True))]
        fused = _Variant(FUSED, [inv.enqueue for inv in invocations],
                         "Invocation.from_launches(fused_launches(x, y)).enqueue: one cuLaunchKernel")
        fused.extra["kernel_resources"] = invocations[0].kernel_resources()
        variants.append(fused)
        graphs = [CapturedGraph(inv, sampler.stream) for inv in invocations]
        fused_graph = _Variant(FUSED_GRAPH, [g.launch for g in graphs],
                               "CapturedGraph(fused invocation).launch: one cuGraphLaunch")
        fused_graph.extra["graph"] = graphs[0].record()
        fused_graph.keep = graphs
        variants.append(fused_graph)
    else:  # the protocol's kernel holds rows of up to MAX_FUSED_COLUMNS; longer rows are auto's alone
        for name in (FUSED, FUSED_GRAPH, ROW_COPY):
            skipped[name] = f"{cols} columns > {MAX_FUSED_COLUMNS}: the fused kernel's geometry does not hold the row"
    variants += auto_variants(shape, d_x, d_y, getattr(args, "auto_geometries", "table"))
    if args.no_cudnn:
        skipped[CUDNN] = "--no-cudnn"
        _note_once(notes, "cuDNN peer skipped: --no-cudnn")
    else:
        try:
            variants.append(cudnn_variant(sampler, d_x, d_y, shape))
        except Exception as exc:
            skipped[CUDNN] = f"unavailable: {type(exc).__name__}: {exc}"
            errors.append(f"{shape_name(shape)}: cuDNN unavailable (pass --no-cudnn to skip it): "
                          f"{type(exc).__name__}: {exc}")
    for name, enabled, factory in ((TORCH, not args.no_torch, _torch_variant),
                                   (TRITON, not args.no_triton, _triton_variant)):
        add_peer(variants, name, enabled, lambda factory=factory: factory(sampler, d_x, d_y, shape),
                 shape_name(shape), notes, errors, skipped)
    if cols <= MAX_FUSED_COLUMNS:
        launches = [row_copy_launches(x, y) for x, y in zip(d_x, d_y, strict=True)]
        invocations = [Invocation.from_launches(f"row-copy-{i}", ls) for i, ls in enumerate(launches)]
        build = launches[0][0].kernel.py_func.__name__
        row_copy = _Variant(ROW_COPY, [inv.enqueue for inv in invocations],
                            f"{build}: a copy in the fused kernel's launch geometry (one 256-thread block "
                            "per row, the same quads per thread, loads then stores)")
        row_copy.extra["kernel_resources"] = invocations[0].kernel_resources()
        variants.append(row_copy)
    copy_kernels = copy_kernels_for(getattr(args, "copy_kernels", "none"))
    if copy_kernels and cols % 4:
        for name in copy_kernels:
            skipped[COPY_KERNEL_PREFIX + name] = f"{cols} columns: the copy kernels move 16-byte quads"
        copy_kernels = []
    if copy_kernels:
        sm_count = device_record()["sm_count"]
    for name in copy_kernels:
        launches = [stream_copy_launches(name, x, y, sm_count) for x, y in zip(d_x, d_y, strict=True)]
        invocations = [Invocation.from_launches(f"{name}-{i}", ls) for i, ls in enumerate(launches)]
        first = launches[0][0]
        variant = _Variant(COPY_KERNEL_PREFIX + name, [inv.enqueue for inv in invocations],
                           f"{first.kernel.py_func.__name__}, grid {first.grid}, block {first.block}: a plain copy "
                           "of the input's bytes (numba_softmax/kernels/stream_copy.py)")
        variant.extra["kernel_resources"] = invocations[0].kernel_resources()
        variants.append(variant)
    variants.append(copy_variant(d_x, d_y, rows * cols * 4))
    return variants


def time_rounds(sampler, timed, n_sets, rounds, seed, records, batch=BATCH):
    """The timing of checked variants (each with one submit per input set): warm-up (max(WARMUPS, n_sets)
    invocations each, rotating sets), the host enqueue window that sizes each one's delay kernel (recorded in
    ``records[name]``), then ``rounds`` rounds in shuffled orders (seeded), one delay-kernel sample of one
    invocation per variant per round and, with ``batch``, one of ``batch`` back-to-back invocations. The set
    counter advances with every invocation. Returns the rounds' records (every raw sample)."""
    counter = 0
    for variant in timed:  # warm-up, then the host enqueue window that sizes the delay kernel
        for _ in range(max(WARMUPS, n_sets)):
            variant.submits[counter % n_sets](sampler.stream)
            counter += 1
        sampler.stream.synchronize()
        window = sampler.host_window_us(variant.submits[counter % n_sets])
        variant.delay_single = sampler.iterations_for(window)
        variant.delay_batch = sampler.iterations_for(window, batch or 1)
        records[variant.name].update(host_enqueue_us=window, delay_iterations=variant.delay_single)
        if batch:
            records[variant.name]["batch_delay_iterations"] = variant.delay_batch
    by_name = {v.name: v for v in timed}
    orders = round_orders(list(by_name), rounds, seed=seed) if timed else []
    result = []
    for r, order in enumerate(orders):
        record = {"round": r, "order": order, "samples": {}}
        for name in order:
            variant = by_name[name]
            first = counter % n_sets
            single, retakes, variant.delay_single = sampler.sample_unstarved([variant.submits[first]],
                                                                             variant.delay_single)
            counter += 1
            sample = record["samples"][name] = {"set": first, **single, "retakes": retakes}
            if not batch:
                continue
            batch_first = counter % n_sets
            taken, batch_retakes, variant.delay_batch = sampler.sample_unstarved(
                [variant.submits[(batch_first + k) % n_sets] for k in range(batch)], variant.delay_batch)
            counter += batch
            sample.update({"batch_first_set": batch_first, "batch_invocations": batch,
                           "batch_event_us": taken["event_us"], "batch_delay_gpu_us": taken["delay_gpu_us"],
                           "batch_host_window_us": taken["host_window_us"], "batch_starved": taken["starved"],
                           "batch_retakes": batch_retakes})
        result.append(record)
    return result


def note_starved(label, rounds, notes):
    """Notes on the samples retaken with a longer delay kernel and those still starved after the retakes."""
    starved = sum(s["starved"] for r in rounds for s in r["samples"].values())
    retaken = sum(s.get("retakes", 0) + s.get("batch_retakes", 0) for r in rounds for s in r["samples"].values())
    if retaken:
        notes.append(f"{label}: {retaken} starved samples were retaken with a longer delay kernel")
    if starved:
        notes.append(f"{label}: {starved} single-invocation samples still had a host enqueue window >= "
                     "the delay kernel's duration after the retakes (the GPU may have waited for the host); "
                     "kept, counted in the table")


def close_variants(variants):
    """Release what the variants hold outside Python's memory: cuDNN handles, captured graphs."""
    for variant in variants:
        library = getattr(variant, "library", None)
        if library is not None:
            library.close()
        for graph in getattr(variant, "keep", ()) if variant.name == FUSED_GRAPH else ():
            graph.close()


def measure_shape(sampler, shape, index, args, notes, errors):
    rows, cols = shape
    l2 = device_record()["l2_cache_bytes"]
    set_bytes = logical_bytes(shape)
    n_sets = args.input_sets if args.input_sets else input_sets_for(set_bytes, l2)
    entry = {"name": shape_name(shape), "shape": [rows, cols], "logical_bytes": logical_bytes(shape),
             "set_bytes": set_bytes, "l2_bytes": l2, "input_sets": n_sets,
             "fixtures": [f"random-{i}" for i in range(n_sets)], "variants": {}}
    log(f"{entry['name']}: {n_sets} input sets, building variants")
    hosts = [matrix_fixture(f"random-{i}", shape) for i in range(n_sets)]
    d_x = [cuda.to_device(h, stream=sampler.stream.numba) for h in hosts]
    d_y = [cuda.device_array(shape, dtype=np.float32) for _ in range(n_sets)]
    sampler.stream.synchronize()
    skipped = {}
    variants = _build_variants(sampler, shape, d_x, d_y, args, notes, errors, skipped)
    for name, reason in skipped.items():
        entry["variants"][name] = {"status": "skipped", "reason": reason}

    def ours(name):
        return name in (FUSED, FUSED_GRAPH, AUTO) or is_copy(name) or name.startswith(AUTO_CANDIDATE_PREFIX)

    reference = matrix_reference(hosts[0])
    timed = check_variants(variants, lambda v: _check_variant(sampler, v, d_y[0], hosts[0], reference,
                                                              "copy" if is_copy(v.name) else "softmax"),
                           entry["variants"], entry["name"], ours, errors, notes)
    names = [v.name for v in timed]
    log(f"{entry['name']}: {args.rounds} rounds of {names}")
    rounds = time_rounds(sampler, timed, n_sets, args.rounds, args.seed + index, entry["variants"])
    entry["rounds"] = rounds
    copy_tbs = (args.report.get("copy_ceiling") or {}).get("bandwidth_tbs")
    entry["analysis"] = summarize_shape(rounds, names, entry["logical_bytes"], copy_tbs)
    note_starved(entry["name"], rounds, notes)
    close_variants(variants)
    return entry
