"""The operations ``python -m bench perf --sweep widths --ops`` times: the softmax and, beside it, the log_softmax,
the two backward kernels and a training step (forward and backward of the softmax), each against its peers.

An operation names the arrays it reads and writes, the bytes it moves (``passes`` arrays of the problem's shape,
:data:`numba_softmax.cases.SWEEP_OPS`) and its variants:

==========================  =====================  ==========================================================
operation                   arrays (in -> out)     variants (besides ``copy``)
==========================  =====================  ==========================================================
``softmax``                 x -> y                 auto, torch, triton, liger, cudnn (:mod:`bench.perf.sweep`)
``log_softmax``             x -> y                 auto (``form="log_softmax"``), torch (``_log_softmax``)
``softmax_backward``        y, dy -> dx            auto (``backward_launches``), torch (``_softmax_backward_data``),
                                                   liger (its ``_softmax_backward``)
``log_softmax_backward``    y, dy -> dx            auto, torch (``_log_softmax_backward_data``)
``softmax_train``           x, dy -> y, dx         auto (the forward and the backward launch), and through autograd
                                                   (``torch.autograd.grad`` of y with ``dy``): torch, liger, ops
                                                   (``numba_softmax.torch.softmax``), ops_compiled (the same
                                                   function under ``torch.compile(fullgraph=True)``)
==========================  =====================  ==========================================================

``copy`` is ``cuMemcpyDtoDAsync`` of half the bytes the operation moves (it reads and writes them): a same-size
copy of three arrays for a backward, of five for a training step. Each input set holds its arrays in one
input buffer and one output buffer (slices of ``rows`` rows), large enough for that copy.

Inputs: ``x`` the sweep's fixture tile (``random-0``), ``dy`` the tile of ``random-1``, ``y`` (a backward's input)
the float64 forward of ``x`` (softmax or log_softmax) rounded to the element type; each repeated down its array.
Checks (set 0, the output filled with NaN first): every element of the checked output finite, and its sampled
rows against the float64 oracle of :mod:`numba_softmax.oracle` with the element type's tolerances
(:func:`~numba_softmax.oracle.check_scaled`: each value's error scale is that of its terms); a training step's
``dx`` against the backward of its forward rounded to the element type (what every variant's backward reads).
"""

import math
from dataclasses import dataclass

import numpy as np

from bench.perf.peers import (AUTO, AUTO_CANDIDATE_PREFIX, COPY, TORCH, PeerCannotRun, _Variant, host_array,
                              torch_on_our_stream, torch_out_variant, torch_tensors)
from bench.stats import paired_ratios
from numba_softmax.cases import SWEEP_OPS
from numba_softmax.element_types import STORAGE_DTYPES, from_float64, to_float64
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_backward import backward_launches
from numba_softmax.kernels.auto_geometry import BACKWARD_QUADS, Geometry, backward_geometry
from numba_softmax.kernels.auto_launch import auto_launches, geometry_for, geometry_launches
from numba_softmax.launch.driver import Invocation
from numba_softmax.oracle import (check_scaled, oracle_log_softmax, oracle_log_softmax_backward, oracle_softmax,
                                  oracle_softmax_backward)

LIGER, OPS_EAGER, OPS_COMPILED = "liger", "ops", "ops_compiled"
SOFTMAX, LOG_SOFTMAX, TRAIN = "softmax", "log_softmax", "softmax_train"
BACKWARDS = {"softmax_backward": "softmax", "log_softmax_backward": "log_softmax"}
#: Each array of a problem starts at a multiple of this many bytes in its set's buffer.
ARRAY_ALIGNMENT = 256
#: The fixture each input array's tile is drawn from (``y`` is computed from ``x``'s).
TILE_FIXTURES = {"x": "random-0", "dy": "random-1"}


@dataclass(frozen=True)
class Operation:
    name: str
    inputs: tuple
    outputs: tuple
    variants: tuple

    @property
    def passes(self):
        """Arrays of the problem's shape the operation reads or writes once each (its bytes moved)."""
        return SWEEP_OPS[self.name]

    @property
    def checked(self):
        """The output checked against the oracle (and the one ``copy`` writes first)."""
        return self.outputs[-1]

    @property
    def slots(self):
        """Arrays of the problem's shape in each input buffer and in each output buffer: the operation's own,
        or more where the same-size copy moves more."""
        return max(len(self.inputs), len(self.outputs), math.ceil(self.passes / 2))


OPERATIONS = {op.name: op for op in (
    Operation(SOFTMAX, ("x",), ("y",), (AUTO, TORCH, "triton", LIGER, "cudnn", COPY)),
    Operation(LOG_SOFTMAX, ("x",), ("y",), (AUTO, TORCH, COPY)),
    Operation("softmax_backward", ("y", "dy"), ("dx",), (AUTO, TORCH, LIGER, COPY)),
    Operation("log_softmax_backward", ("y", "dy"), ("dx",), (AUTO, TORCH, COPY)),
    Operation(TRAIN, ("x", "dy"), ("y", "dx"), (AUTO, TORCH, LIGER, OPS_EAGER, OPS_COMPILED, COPY)),
)}


#: The ratios an operation reports besides auto's against each variant and the copy's against auto: a training
#: step's operator (``ops``) against Liger and torch, compiled against eager.
EXTRA_RATIOS = {TRAIN: ((OPS_EAGER, LIGER), (OPS_EAGER, TORCH), (OPS_COMPILED, OPS_EAGER))}


def ratio_pairs(op_name, names):
    """``[(a, b)]``: the paired ratios a problem of ``op_name`` reports among the timed ``names``: auto against each
    other variant (not the copy), the copy against auto, and :data:`EXTRA_RATIOS`."""
    pairs = [(AUTO, n) for n in names if n not in (AUTO, COPY)] + [(COPY, AUTO)]
    pairs += list(EXTRA_RATIOS.get(op_name, ()))
    return [(a, b) for a, b in pairs if a in names and b in names]


def extra_ratios(op_name, rounds):
    """The :data:`EXTRA_RATIOS` of a problem's rounds (``{"ops/liger": paired ratios, ...}``)."""
    event_rounds = [{name: s["event_us"] for name, s in r["samples"].items()} for r in rounds]
    names = {name for r in event_rounds for name in r}
    return {f"{a}/{b}": paired_ratios(event_rounds, a, b, "event_us") for a, b in EXTRA_RATIOS.get(op_name, ())
            if a in names and b in names}


def parse_choices(option, text, choices, noun):
    """``"a,b"`` -> ``["a", "b"]``, each one of ``choices``, none repeated (a ValueError naming ``option``)."""
    names = [item.strip() for item in text.split(",")]
    for name in names:
        if name not in choices:
            raise ValueError(f"{option}: {name!r} is not one of {', '.join(choices)}")
    if len(set(names)) != len(names):
        raise ValueError(f"{option}: {text!r} names {noun} twice")
    return names


def parse_ops(text):
    """``"softmax,softmax_backward"`` -> the operations' names, each one of :data:`OPERATIONS`, none repeated."""
    return parse_choices("--ops", text, tuple(OPERATIONS), "an operation")


# ---------------------------------------------------------------- inputs and checks (host)

def input_tiles(op, x_tile, dtype):
    """The tile of each input array (storage type): ``x`` the sweep's tile, ``dy`` of ``random-1`` of its shape,
    ``y`` the float64 forward of ``x`` rounded to ``dtype``."""
    tiles = {"x": x_tile}
    if "dy" in op.inputs:
        tiles["dy"] = from_float64(matrix_fixture(TILE_FIXTURES["dy"], x_tile.shape).astype(np.float64), dtype)
    if "y" in op.inputs:
        x = to_float64(x_tile, dtype)
        forward = oracle_softmax(x) if BACKWARDS[op.name] == SOFTMAX else oracle_log_softmax(x)[0]
        tiles["y"] = from_float64(forward, dtype)
    return {name: tiles[name] for name in op.inputs}


def reference(op, tiles, dtype):
    """``(ref, scale)``: the float64 value of the checked output on the tiles' rows and each value's error scale."""
    if op.name == LOG_SOFTMAX:
        return oracle_log_softmax(to_float64(tiles["x"], dtype))
    if op.name == TRAIN:
        y = to_float64(from_float64(oracle_softmax(to_float64(tiles["x"], dtype)), dtype), dtype)
        return oracle_softmax_backward(y, to_float64(tiles["dy"], dtype))
    oracle = oracle_softmax_backward if BACKWARDS[op.name] == SOFTMAX else oracle_log_softmax_backward
    return oracle(to_float64(tiles["y"], dtype), to_float64(tiles["dy"], dtype))


def all_finite(out):
    """Every element finite (bfloat16 given as its uint16 bits): none left at the NaN fill."""
    if out.dtype == np.uint16:
        return bool(np.all((out & np.uint16(0x7FFF)) < np.uint16(0x7F80)))
    return bool(np.all(np.isfinite(out)))


def check_op_output(out, ref, scale, sample, dtype):
    """The check of one variant's checked output (host array) whose row i is the tiles' row ``i % len(ref)``:
    every element finite, the sampled rows within the type's tolerance of ``ref``. Returns a record."""
    finite = all_finite(out)
    passed, ratio, where = check_scaled(out[sample], ref[sample % len(ref)], scale[sample % len(ref)], dtype)
    row = int(sample[where[0]])
    return {"kind": "oracle check_scaled on the sampled rows; every element finite", "rows_checked": len(sample),
            "max_tol_ratio": ratio, "worst_row": row, "worst_col": where[1], "all_finite": finite,
            "passed": bool(passed and finite),
            "description": f"worst tolerance ratio {ratio:.3g} at row {row}, col {where[1]}"
                           + ("" if finite else "; some element is NaN (not written) or infinite")}


# ---------------------------------------------------------------- variants (GPU)

class SetArrays:
    """Each input set's arrays: an input buffer and an output buffer of ``op.slots`` arrays each (one
    allocation), the operation's arrays in them, each starting at a multiple of :data:`ARRAY_ALIGNMENT` bytes (as
    an allocator places tensors: ``torch.compile`` copies an input whose start is less aligned)."""

    def __init__(self, op, shape, dtype, n_sets):
        from numba import cuda
        rows, cols = shape
        storage = STORAGE_DTYPES[dtype]
        step = ARRAY_ALIGNMENT // storage.itemsize
        self.op, self.shape = op, shape
        self.slot = -(-rows * cols // step) * step  # elements from one array's start to the next's
        self.inputs = [cuda.device_array(op.slots * self.slot, dtype=storage) for _ in range(n_sets)]
        self.outputs = [cuda.device_array(op.slots * self.slot, dtype=storage) for _ in range(n_sets)]

    def array(self, name, index):
        names, buffers = (self.op.inputs, self.inputs) if name in self.op.inputs else (self.op.outputs, self.outputs)
        start = names.index(name) * self.slot
        return buffers[index][start:start + self.shape[0] * self.shape[1]].reshape(self.shape)

    def each(self, name):
        return [self.array(name, i) for i in range(len(self.inputs))]


def _launch_variant(name, launches, how):
    invocations = [Invocation.from_launches(f"{name}-{i}", ls) for i, ls in enumerate(launches)]
    first = launches[0]
    steps = "; ".join(f"{launch.name} grid {launch.grid} block {launch.block}" for launch in first)
    variant = _Variant(name, [inv.enqueue for inv in invocations], f"{how}: {steps}"
                       + f" ({len(first)} cuLaunchKernel, unchecked builds)")
    variant.extra["kernel_resources"] = invocations[0].kernel_resources()
    return variant


def auto_variant(op, arrays, dtype):
    """Our kernels for the operation, as ``method="auto"`` picks them, one invocation per input set."""
    variant = _auto_variant(op, arrays, dtype)
    variant.extra["geometry"] = own_geometry(op.name, arrays.shape[1], dtype)
    return variant


def _auto_variant(op, arrays, dtype):
    types = (dtype, dtype)
    if op.name == LOG_SOFTMAX:
        launches = [auto_launches(x, y, types=types, form=LOG_SOFTMAX) for x, y in
                    zip(arrays.each("x"), arrays.each("y"), strict=True)]
        return _launch_variant(AUTO, launches, f"auto_launches(x, y, form='log_softmax'), geometry "
                                               f"{own_geometry(LOG_SOFTMAX, arrays.shape[1], dtype)}")
    if op.name == TRAIN:
        launches = [auto_launches(x, y, types=types) + backward_launches(y, dy, dx, dtype, SOFTMAX)
                    for x, y, dy, dx in zip(*(arrays.each(n) for n in ("x", "y", "dy", "dx")), strict=True)]
        return _launch_variant(AUTO, launches, "auto_launches(x, y) then backward_launches(y, dy, dx)")
    form = BACKWARDS[op.name]
    launches = [backward_launches(y, dy, dx, dtype, form) for y, dy, dx in
                zip(*(arrays.each(n) for n in ("y", "dy", "dx")), strict=True)]
    return _launch_variant(AUTO, launches, f"backward_launches(y, dy, dx, form={form!r})")


def runs_geometry(op_name, geometry):
    """Whether the log_softmax or a backward has builds of ``geometry`` (a name): rows geometries in registers
    (a backward's of at most :data:`~numba_softmax.kernels.auto_geometry.BACKWARD_QUADS` quads, in a block or a
    cluster) and the long path; the narrow and packed ones every operation; the other cluster and the
    shared-memory ones the softmax only."""
    geometry = Geometry.parse(geometry)
    if geometry.kind in ("long", "narrow") or geometry.packed_widths:
        return True
    if geometry.shared_quads:
        return False
    if op_name in BACKWARDS:
        return geometry.kind in ("rows", "cluster") and geometry.quads <= BACKWARD_QUADS
    return geometry.kind == "rows"


def own_geometry(op_name, cols, dtype):
    """The geometry ``auto`` runs for the operation at ``cols`` columns (a training step: its backward's), on the
    sweep's arrays (:class:`SetArrays`: C-contiguous and aligned, so rows of 1, 2 or 4 elements run packed)."""
    if op_name in (SOFTMAX, LOG_SOFTMAX):
        return geometry_for(cols, (dtype, dtype), op_name, packed=True)
    return backward_geometry(cols, dtype, packed=True)


def operation_candidates(op_name, cols, dtype, names):
    """Those of the candidate geometries ``names`` the operation runs, other than its own (a training step:
    none; it is the sum of two kernels whose candidates are timed alone)."""
    if op_name == TRAIN:
        return []
    own = own_geometry(op_name, cols, dtype)
    return [n for n in names if n != own and (op_name == SOFTMAX or runs_geometry(op_name, n))]


def candidate_variants(op, arrays, dtype, names):
    """``auto:<geometry>`` for each geometry of ``names`` (:func:`operation_candidates`) of the log_softmax or a
    backward."""
    made = []
    for name in names:
        if op.name == LOG_SOFTMAX:
            launches = [geometry_launches(name, x, y, types=(dtype, dtype), form=LOG_SOFTMAX)
                        for x, y in zip(arrays.each("x"), arrays.each("y"), strict=True)]
            how = f"geometry_launches({name!r}, x, y, form='log_softmax')"
        else:
            launches = [backward_launches(y, dy, dx, dtype, BACKWARDS[op.name], geometry=name) for y, dy, dx in
                        zip(*(arrays.each(n) for n in ("y", "dy", "dx")), strict=True)]
            how = f"backward_launches(y, dy, dx, form={BACKWARDS[op.name]!r}, geometry={name!r})"
        variant = _launch_variant(AUTO_CANDIDATE_PREFIX + name, launches, how)
        variant.extra["geometry"] = name
        made.append(variant)
    return made


def copy_bytes(op, shape, dtype):
    """The bytes the same-size copy copies: half of those the operation moves (a copy reads and writes each)."""
    return op.passes * shape[0] * shape[1] * STORAGE_DTYPES[dtype].itemsize // 2


def torch_variant(sampler, op, arrays, dtype):
    """torch's own kernel for the operation (a training step: autograd, as training code runs it)."""
    import torch
    torch_on_our_stream(sampler)
    tensors = {name: torch_tensors(arrays.each(name), dtype) for name in op.inputs + op.outputs}
    torch_dtype = getattr(torch, dtype)
    if op.name == TRAIN:
        return autograd_variant(sampler, TORCH, lambda t: torch.softmax(t, 1), tensors,
                                f"torch.autograd.grad(torch.softmax(x, 1), x, dy) (torch {torch.__version__})")
    if op.name == LOG_SOFTMAX:
        forms = [("torch._log_softmax(x, 1, False, out=y)", lambda x, y: torch._log_softmax(x, 1, False, out=y)),
                 ("torch.log_softmax(x, 1)", lambda x: torch.log_softmax(x, 1))]
        variant = torch_out_variant(TORCH, sampler, forms, lambda i: (tensors["x"][i], tensors["y"][i]),
                                    len(tensors["y"]))
    else:
        function = (torch._softmax_backward_data if BACKWARDS[op.name] == SOFTMAX
                    else torch._log_softmax_backward_data)
        text = f"torch.{function.__name__}(dy, y, 1, {torch_dtype}"
        forms = [(text + ", out=dx)", lambda y, dy, dx: function(dy, y, 1, torch_dtype, out=dx)),
                 (text + ")", lambda y, dy: function(dy, y, 1, torch_dtype))]
        variant = torch_out_variant(TORCH, sampler, forms,
                                    lambda i: (tensors["y"][i], tensors["dy"][i], tensors["dx"][i]), len(tensors["dx"]))
    variant.keep = tensors
    return variant


def autograd_variant(sampler, name, function, tensors, call, ours=False):
    """``dx = torch.autograd.grad(function(x), x, dy)`` on each set's x (a leaf that requires grad) and dy:
    the forward and the backward as training code runs them (outputs allocated by the functions). A peer that
    fails here cannot run at this shape (:class:`PeerCannotRun`); ``ours`` fails loudly."""
    import torch
    xs = [x.detach().requires_grad_() for x in tensors["x"]]
    last = {}

    def step(i):
        (last[i],) = torch.autograd.grad(function(xs[i]), xs[i], tensors["dy"][i])
    try:
        step(0)
        sampler.stream.synchronize()
    except Exception as exc:
        if ours:
            raise
        raise PeerCannotRun(f"{name} does not run at {tuple(xs[0].shape)}: {type(exc).__name__}: "
                            f"{str(exc)[:300]}") from exc
    variant = _Variant(name, [lambda s, i=i: step(i) for i in range(len(xs))], call,
                       read_output=lambda: host_array(last[0]))
    variant.keep = (xs, tensors, last)
    return variant


def liger_variant(sampler, op, arrays, dtype):
    """Liger-Kernel's softmax backward (its ``_softmax_backward`` at the forward's settings) or its training step
    (``LigerSoftmaxFunction`` through autograd)."""
    from numba_softmax.peers import liger_softmax
    found, function = liger_softmax.softmax_function()
    torch_on_our_stream(sampler)
    tensors = {name: torch_tensors(arrays.each(name), dtype) for name in op.inputs}
    if op.name == TRAIN:
        return autograd_variant(sampler, LIGER, function.apply, tensors,
                                f"torch.autograd.grad(LigerSoftmaxFunction.apply(x), x, dy) (liger_kernel {found})")
    backward, settings = liger_softmax.backward_function()
    cols = arrays.array("y", 0).shape[1]
    try:
        block, warps = settings(cols)
    except Exception as exc:
        raise PeerCannotRun(f"Liger's softmax does not run at {cols} columns: {type(exc).__name__}: "
                            f"{str(exc)[:300]}") from exc
    last = {}

    def call(i):
        last[i] = backward(tensors["dy"][i], tensors["y"][i], block, warps, cols > block)
    call(0)
    sampler.stream.synchronize()
    variant = _Variant(LIGER, [lambda s, i=i: call(i) for i in range(len(tensors["y"]))],
                       f"liger_kernel.ops.softmax._softmax_backward(dy, y, {block}, {warps}, {cols > block}) "
                       f"(allocating dx; liger_kernel {found})", read_output=lambda: host_array(last[0]))
    variant.keep = (tensors, last)
    return variant


def ops_variant(sampler, name, arrays, dtype):
    """``numba_softmax.torch.softmax`` through autograd (``ops``), or the same function compiled with
    ``torch.compile(fullgraph=True)`` (``ops_compiled``)."""
    import torch

    from numba_softmax import torch as ops
    torch_on_our_stream(sampler)
    tensors = {n: torch_tensors(arrays.each(n), dtype) for n in ("x", "dy")}

    def function(t):
        return ops.softmax(t, -1)
    if name == OPS_COMPILED:  # compiled afresh for each problem's shape and type (no recompile limit to reach)
        torch._dynamo.reset()
        function = torch.compile(function, fullgraph=True)
        call = "torch.autograd.grad(torch.compile(numba_softmax.torch.softmax, fullgraph=True)(x), x, dy)"
    else:
        call = "torch.autograd.grad(numba_softmax.torch.softmax(x), x, dy)"
    return autograd_variant(sampler, name, function, tensors, f"{call} (torch {torch.__version__})", ours=True)
