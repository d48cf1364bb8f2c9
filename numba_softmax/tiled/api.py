"""``tiled_softmax``: one call of one scheduler, returning the output and every intermediate."""

from dataclasses import dataclass, field

import numpy as np

from ..cases import TILE_ELEMENTS
from ..backend import SIMULATOR, launch_stream, run_launches
from ..queue import DEFAULT_MAX_POLLS, verify_queue
from ..validation import validate_packed
from .buffers import TiledBuffers
from .launches import SCHEDULERS, tiled_launches, worker_plan
from .layout import TiledLayout, build_layout
from ..kernels.persistent import persistent_trace_kernel

@dataclass
class TiledResult:
    scheduler: str
    layout: TiledLayout
    out: np.ndarray
    tile_max: np.ndarray
    tile_sum: np.ndarray
    row_max: np.ndarray
    row_sum: np.ndarray
    workers: int = None
    counters: np.ndarray = None       # dag only
    queue: dict = field(default=None)  # dag only: counters, row_arrivals, fifo_slots, fifo_ready
    trace: np.ndarray = None           # trace builds only: int64[tasks, 5] (kernels/tracing.py)


def tiled_softmax(values, row_lengths, scheduler="separate", workers=None, stream=None,
                  tile_elements=TILE_ELEMENTS, max_polls=DEFAULT_MAX_POLLS, buffers=None,
                  verify=True, trace=False, kernel=None):
    """Tiled softmax of packed rows with one scheduler; output and intermediates on the host.

    ``values``: packed float32 rows (validated first: finite, non-empty rows, lengths
    summing to the size). For ``dag`` the queue counters are returned and, with
    ``verify=True``, checked exactly (:func:`verify_queue`). ``buffers`` may pass
    preallocated :class:`TiledBuffers` of the same layout (their values are replaced).
    ``trace=True`` runs the trace build and returns the task trace (never for timing);
    ``kernel`` replaces the persistent kernel (negative controls in tests only).
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
    host, lengths = validate_packed(values, row_lengths)
    layout = build_layout(lengths, tile_elements) if buffers is None else buffers.layout
    # Host-to-device copies go on the launch stream itself (it is non-blocking).
    target = None if SIMULATOR else launch_stream(stream)
    copy_stream = 0 if SIMULATOR else target.numba
    if buffers is None:
        buffers = TiledBuffers.allocate(layout, host, stream=copy_stream, trace=trace)
    else:
        if not np.array_equal(layout.row_lengths, lengths) or layout.tile_elements != tile_elements:
            raise ValueError("buffers were allocated for different row lengths or tile size")
        buffers.load_values(host, stream=copy_stream)
    chosen = None
    if scheduler != "separate":
        chosen = worker_plan(buffers, workers, kernel=kernel or (persistent_trace_kernel() if trace else None)).workers
    if trace:
        buffers.reset_trace(stream=copy_stream)
    launches = tiled_launches(scheduler, buffers, chosen, max_polls, trace=trace, kernel=kernel)
    run_launches(launches, target, name=f"tiled-{scheduler}")
    # run_launches synchronized the stream: plain device-to-host copies are safe now.
    result = TiledResult(scheduler=scheduler, layout=layout, out=buffers.out.copy_to_host(),
                         workers=chosen, **buffers.intermediates())
    if trace:
        result.trace = buffers.trace.copy_to_host()
    if scheduler == "dag":
        result.queue = buffers.queue_state()
        result.counters = result.queue["counters"]
        if verify:
            verify_queue(result.queue, layout, chosen)
    return result
