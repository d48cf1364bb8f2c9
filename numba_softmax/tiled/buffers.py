"""Every device array of one Experiment B case, allocated once so pointers stay fixed (the bench
captures CUDA graphs over them); new inputs are copied into the same ``values`` buffer (from the
host, or device to device: a device input never goes through the host). Reusable across calls of
``tiled_softmax``: the device-side input check's status words and the prepared invocations are
kept with them too."""

from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from ..kernels.tracing import TRACE_FIELDS
from ..queue import COUNTER_INITIAL, GRID_BARRIER
from ..validation import STATUS_CLEAR, STATUS_WORDS
from .layout import TiledLayout

@dataclass(eq=False)
class TiledBuffers:
    """Every device array of one case, allocated once (fixed pointers)."""
    layout: TiledLayout
    values: object
    out: object
    tile_row: object
    tile_start: object
    tile_len: object
    row_first_tile: object
    row_tile_count: object
    tile_max: object
    tile_sum: object
    row_max: object
    row_sum: object
    counters: object
    row_arrivals: object
    fifo_slots: object
    #: int64[tasks, TRACE_FIELDS] in trace mode; a 1-row placeholder otherwise (the
    #: performance kernels take the argument but never touch it).
    trace: object
    #: The input check's status words (int64[2]) and alarm (int32[1], pinned host memory the
    #: device writes through), made on the first checked call (:meth:`check_words`).
    status: object = None
    alarm: object = None
    #: Prepared invocations of ``tiled_softmax`` on these buffers, by what they launch.
    invocations: dict = field(default_factory=dict)

    @property
    def rows(self):
        return self.layout.rows

    @property
    def n_tiles(self):
        return self.layout.n_tiles

    @classmethod
    def allocate(cls, layout, values=None, stream=0, trace=False):
        """Allocate every array; copies go on ``stream`` (a Numba stream, 0 = legacy).

        Use the launch stream's ``.numba`` for ``stream`` on a GPU: the launch layer's
        stream is non-blocking and does not order itself after the legacy stream.
        """
        f32 = np.float32
        n, t, r = layout.total_elements, layout.n_tiles, layout.rows
        buffers = cls(
            layout=layout,
            values=cuda.device_array(n, dtype=f32),
            out=cuda.device_array(n, dtype=f32),
            tile_row=cuda.to_device(layout.tile_row, stream=stream),
            tile_start=cuda.to_device(layout.tile_start, stream=stream),
            tile_len=cuda.to_device(layout.tile_len, stream=stream),
            row_first_tile=cuda.to_device(layout.row_first_tile, stream=stream),
            row_tile_count=cuda.to_device(layout.row_tile_count, stream=stream),
            tile_max=cuda.device_array(t, dtype=f32),
            tile_sum=cuda.device_array(t, dtype=f32),
            row_max=cuda.device_array(r, dtype=f32),
            row_sum=cuda.device_array(r, dtype=f32),
            counters=cuda.to_device(np.array(COUNTER_INITIAL, dtype=np.int32), stream=stream),
            row_arrivals=cuda.device_array(r, dtype=np.int32),
            fifo_slots=cuda.device_array(layout.fifo_capacity, dtype=np.int32),
            trace=cuda.to_device(np.zeros((trace_task_count(layout) if trace else 1, TRACE_FIELDS),
                                          dtype=np.int64)),
        )
        if values is not None:
            buffers.load_values(values, stream)
        return buffers

    def load_values(self, values, stream=0):
        """Copy new packed inputs into the SAME device buffer (pointers unchanged): from a host array,
        or device to device from a Numba device array."""
        if getattr(values, "__cuda_ndarray__", False):
            if tuple(values.shape) != (self.layout.total_elements,) or np.dtype(values.dtype) != np.float32:
                raise ValueError(f"values must be float32 of shape ({self.layout.total_elements},), "
                                 f"got {values.dtype} {tuple(values.shape)}")
            self.values.copy_to_device(values, stream=stream)
            return
        host = np.ascontiguousarray(values, dtype=np.float32)
        if host.shape != (self.layout.total_elements,):
            raise ValueError(f"values must have shape ({self.layout.total_elements},), got {host.shape}")
        self.values.copy_to_device(host, stream=stream)

    def check_words(self):
        """``(status, alarm)`` of the device-side input check, made once and kept clear between calls."""
        if self.status is None:
            self.status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
            self.alarm = cuda.mapped_array(1, dtype=np.int32)
            self.alarm[0] = 0
        return self.status, self.alarm

    def poison(self, stream=0):
        """Fill outputs/intermediates with NaN and queue state with junk (tests: proves
        every element is written by the kernels and every queue word by the reset)."""
        for name in ("out", "tile_max", "tile_sum", "row_max", "row_sum"):
            arr = getattr(self, name)
            arr.copy_to_device(np.full(arr.shape, np.nan, dtype=np.float32), stream=stream)
        for name, junk in (("counters", 12345), ("row_arrivals", 777), ("fifo_slots", 4242)):
            arr = getattr(self, name)
            words = np.full(arr.shape, junk, dtype=np.int32)
            if name == "counters":
                # The phased grid barrier's word is never reset by a launch (it resets
                # itself): it keeps its allocation-time 0.
                words[GRID_BARRIER] = 0
            arr.copy_to_device(words, stream=stream)

    @property
    def traced(self):
        return self.trace.shape[0] == trace_task_count(self.layout)

    def reset_trace(self, stream=0):
        """Zero the trace (visit counts accumulate) before a traced invocation."""
        self.trace.copy_to_device(np.zeros(self.trace.shape, dtype=np.int64), stream=stream)

    def intermediates(self):
        return {name: getattr(self, name).copy_to_host()
                for name in ("tile_max", "tile_sum", "row_max", "row_sum")}

    def queue_state(self):
        return {name: getattr(self, name).copy_to_host()
                for name in ("counters", "row_arrivals", "fifo_slots")}


def trace_task_count(layout):
    """A, B and C tasks: one trace row each (see :mod:`numba_softmax.kernels.tracing`)."""
    return 2 * layout.n_tiles + layout.rows
