"""``tiled_softmax``: one call of one scheduler, returning the output and every intermediate.

A numpy input gives host results; a device input (Numba, torch, CuPy, ``__cuda_array_interface__``,
DLPack) is copied device to device into the buffers' fixed ``values`` array and gives device
results: the buffers' own arrays, never copied to the host. The input is checked on the device
(one check pass, before any tiled kernel launches: NaN, +inf and -inf are refused, as the
protocol's kernels take finite inputs only).
"""

from dataclasses import dataclass, field

import numpy as np

from ..api import require_device
from ..arrays import FLOAT32, NUMPY, device_view, resolve_stream
from ..backend import SIMULATOR, invocation
from ..cases import TILE_ELEMENTS
from ..kernels.auto_launch import check_launches
from ..kernels.persistent.diagnostics import persistent_trace_kernel
from ..queue import DEFAULT_MAX_POLLS, verify_queue
from ..validation import STATUS_CLEAR, STATUS_WORDS, packed_position, validate_packed
from .buffers import TiledBuffers
from .launches import SCHEDULERS, tiled_launches, worker_plan
from .layout import TiledLayout, build_layout


@dataclass
class TiledResult:
    """Host arrays for a numpy input; for a device input, ``out`` and the four intermediates are
    Numba device arrays (the buffers' own: a later call on the same buffers overwrites them)."""
    scheduler: str
    layout: TiledLayout
    out: object
    tile_max: object
    tile_sum: object
    row_max: object
    row_sum: object
    workers: int = None
    counters: np.ndarray = None       # dag only (host)
    queue: dict = field(default=None)  # dag only (host): counters, row_arrivals, fifo_slots
    trace: np.ndarray = None           # trace builds only (host): int64[tasks, 5] (kernels/tracing.py)


INTERMEDIATES = ("tile_max", "tile_sum", "row_max", "row_sum")


def tiled_softmax(values, row_lengths, scheduler="separate", workers=None, stream=None,
                  tile_elements=TILE_ELEMENTS, max_polls=DEFAULT_MAX_POLLS, buffers=None,
                  verify=True, trace=False, kernel=None, check=True):
    """Tiled softmax of packed rows with one scheduler; output and intermediates.

    ``values``: packed float32 rows, a numpy array (host results) or a device array (device
    results). Kind, layout and lengths are checked on the host; with ``check=True`` the values
    are checked on the device before any launch (NaN or infinity raise ``ValueError`` naming the
    row and column). For ``dag`` the queue counters are returned (on the host) and, with
    ``verify=True``, checked exactly (:func:`verify_queue`). ``buffers`` may pass
    :class:`TiledBuffers` of the same layout, reused across calls (values replaced, launches
    prepared once). ``stream``: as for ``softmax`` (default: the input's own, else the legacy
    default stream); the call synchronizes it. ``trace=True`` runs the trace build and returns the
    task trace (never for timing); ``kernel`` replaces the persistent kernel (negative controls).
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
    require_device()
    kind, pointer, lengths = validate_packed(values, row_lengths)
    if buffers is None:
        layout = build_layout(lengths, tile_elements)
    else:
        layout = buffers.layout
        if not np.array_equal(layout.row_lengths, lengths) or layout.tile_elements != tile_elements:
            raise ValueError("buffers were allocated for different row lengths or tile size")
    target = resolve_stream(stream, values, kind, None)
    copy_stream = target.numba
    if buffers is None:
        buffers = TiledBuffers.allocate(layout, stream=copy_stream, trace=trace)
    source = values if kind == NUMPY or SIMULATOR else device_view(pointer, (layout.total_elements,), None, FLOAT32)
    buffers.load_values(source, stream=copy_stream)
    if check:
        _check_values(buffers, target)
    chosen = None
    if scheduler != "separate":
        chosen = worker_plan(buffers, workers, kernel=kernel or (persistent_trace_kernel() if trace else None)).workers
    if trace:
        buffers.reset_trace(stream=copy_stream)
    key = (scheduler, chosen, max_polls, trace, kernel)
    prepared = buffers.invocations.get(key)
    if prepared is None:
        prepared = buffers.invocations[key] = invocation(
            f"tiled-{scheduler}", tiled_launches(scheduler, buffers, chosen, max_polls, trace=trace, kernel=kernel))
    prepared.enqueue(target)
    target.synchronize()
    if kind == NUMPY:
        result = TiledResult(scheduler=scheduler, layout=layout, out=buffers.out.copy_to_host(), workers=chosen,
                             **buffers.intermediates())
    else:
        result = TiledResult(scheduler=scheduler, layout=layout, out=buffers.out, workers=chosen,
                             **{name: getattr(buffers, name) for name in INTERMEDIATES})
    if trace:
        result.trace = buffers.trace.copy_to_host()
    if scheduler == "dag":
        result.queue = buffers.queue_state()
        result.counters = result.queue["counters"]
        if verify:
            verify_queue(result.queue, layout, chosen)
    return result


def _check_values(buffers, stream):
    """The device-side check of the loaded values (one pass, records only); raises on a record."""
    status, alarm = buffers.check_words()
    key = "check"
    prepared = buffers.invocations.get(key)
    if prepared is None:
        flat = buffers.values.reshape(1, buffers.layout.total_elements)
        prepared = buffers.invocations[key] = invocation(
            "tiled-check", check_launches(flat, status, alarm, allow_neg_inf=False))
    prepared.enqueue(stream)
    stream.synchronize()
    if not alarm[0]:
        return
    words = status.copy_to_host(stream=stream.numba)
    stream.synchronize()
    status.copy_to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64), stream=stream.numba)
    stream.synchronize()
    alarm[0] = 0
    flat = int(words[0])
    if flat == STATUS_CLEAR:
        raise ValueError(f"values: the device check raised its alarm but recorded no position (status {list(words)})")
    row, col = packed_position(flat, buffers.layout.row_lengths)
    raise ValueError(f"values has a non-finite value (NaN or infinity) at row {row}, column {col}: "
                     "the tiled kernels take finite inputs only")
