"""Host side of Experiment B: packed tile layout, fixed buffers, launch lists, queue checks.

* :func:`build_layout` cuts packed rows into tiles (numpy only, no GPU): see
  :mod:`numba_softmax.kernels.tiles` for what each array means.
* :class:`TiledBuffers` holds every device array of one case, allocated ONCE so
  pointers stay fixed (the benchmark captures CUDA graphs over them); new inputs are
  copied into the same ``values`` buffer with :meth:`TiledBuffers.load_values`.
* :func:`tiled_launches` gives the :class:`~numba_softmax.launch.plan.KernelLaunch`
  list of a scheduler: ``separate`` (3 launches), ``phased`` (1 cooperative launch),
  ``dag`` (queue reset + 1 cooperative launch). The launch kernels are dispatchers.
* :func:`worker_plan` sets the persistent worker count from the cooperative
  occupancy (blocks per SM from the occupancy API x recorded SM count), capped by the
  number of A tasks.
* :func:`expected_counters` / :func:`verify_counters` state and check the exact DAG
  queue counters after an invocation; :func:`verify_queue` also checks the FIFO
  contents and row arrivals.
* :func:`tiled_softmax` validates, runs one scheduler and returns the output plus
  every intermediate (:class:`TiledResult`).
"""

from dataclasses import dataclass, field

import numpy as np
from numba import cuda

from .cases import EXPERIMENT_B_SCHEDULERS, TILE_ELEMENTS
from .kernels.persistent import (A_NEXT, A_OVERSHOOT, C_DONE, COUNTER_INDEX, COUNTER_INITIAL, COUNTER_SLOTS,
                                 HEAD_OVERSHOOT,
                                 DEFAULT_MAX_POLLS, ERR_COMPLETION_TIMEOUT, ERR_FIFO_OVERFLOW,
                                 ERR_INVALID_TASK, ERR_NONE, ERR_READY_TIMEOUT, ERROR_CODE,
                                 ERROR_NAMES, ERROR_TASK, ERROR_WAITED_ON, ERROR_WORKER,
                                 FIFO_HEAD, FIFO_TAIL, MODE_PHASED, dag_launches,
                                 persistent_args, persistent_tiles, persistent_trace_kernel,
                                 phased_launches)
from .kernels.tiles import MAX_TILE_ELEMENTS, TILE_THREADS, TILE_VALUES, separate_launches
from .kernels.tracing import TRACE_FIELDS
from .numerics import SIMULATOR
from .launch.submit import launch_stream, run_launches
from .validation import validate_packed, validate_row_lengths

SCHEDULERS = EXPERIMENT_B_SCHEDULERS  # ("separate", "phased", "dag")
_INT32_MAX = np.iinfo(np.int32).max


# ---- layout -----------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class TiledLayout:
    """Packed rows cut into tiles. All arrays are C-contiguous numpy arrays."""
    tile_elements: int
    row_lengths: np.ndarray     # int64[rows]
    row_offsets: np.ndarray     # int64[rows + 1]
    tile_row: np.ndarray        # int32[n_tiles]
    tile_start: np.ndarray      # int64[n_tiles], offset into the packed values
    tile_len: np.ndarray        # int32[n_tiles], tile_elements except a row's last tile
    row_first_tile: np.ndarray  # int32[rows]
    row_tile_count: np.ndarray  # int32[rows]

    @property
    def rows(self):
        return int(self.row_lengths.size)

    @property
    def n_tiles(self):
        return int(self.tile_row.size)

    @property
    def total_elements(self):
        return int(self.row_offsets[-1])

    @property
    def fifo_capacity(self):
        """Every B and every C task, once."""
        return self.rows + self.n_tiles


def build_layout(row_lengths, tile_elements=TILE_ELEMENTS):
    """Cut packed rows into tiles of ``tile_elements`` (the last tile of a row masked)."""
    tile_elements = int(tile_elements)
    if not 1 <= tile_elements <= MAX_TILE_ELEMENTS:
        raise ValueError(f"tile_elements must be in [1, {MAX_TILE_ELEMENTS}] "
                         f"({TILE_THREADS} threads x {TILE_VALUES} values), got {tile_elements}")
    lengths = validate_row_lengths(row_lengths)
    rows = lengths.size
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_offsets[1:])
    counts = (lengths + tile_elements - 1) // tile_elements
    n_tiles = int(counts.sum())
    if rows + n_tiles > _INT32_MAX:
        raise ValueError(f"{rows} rows + {n_tiles} tiles exceed the int32 task ids")
    first = np.zeros(rows, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    tile_row = np.repeat(np.arange(rows, dtype=np.int64), counts)
    index_in_row = np.arange(n_tiles, dtype=np.int64) - first[tile_row]
    tile_start = row_offsets[tile_row] + index_in_row * tile_elements
    tile_len = np.minimum(tile_elements, row_offsets[tile_row + 1] - tile_start)
    layout = TiledLayout(
        tile_elements=tile_elements,
        row_lengths=lengths,
        row_offsets=row_offsets,
        tile_row=tile_row.astype(np.int32),
        tile_start=tile_start.astype(np.int64),
        tile_len=tile_len.astype(np.int32),
        row_first_tile=first.astype(np.int32),
        row_tile_count=counts.astype(np.int32),
    )
    check_layout(layout)
    return layout


def check_layout(layout):
    """Structural invariants of a layout (raises ``AssertionError`` naming the broken one)."""
    lay = layout
    rows, n_tiles = lay.rows, lay.n_tiles
    expect = {"tile_row": (np.int32, n_tiles), "tile_start": (np.int64, n_tiles),
              "tile_len": (np.int32, n_tiles), "row_first_tile": (np.int32, rows),
              "row_tile_count": (np.int32, rows), "row_offsets": (np.int64, rows + 1)}
    for name, (dtype, size) in expect.items():
        arr = getattr(lay, name)
        if arr.dtype != dtype or arr.shape != (size,) or not arr.flags.c_contiguous:
            raise AssertionError(f"layout.{name}: expected contiguous {np.dtype(dtype)}[{size}], "
                                 f"got {arr.dtype}{list(arr.shape)}")
    if not np.all(lay.tile_len >= 1) or not np.all(lay.tile_len <= lay.tile_elements):
        raise AssertionError("layout.tile_len outside [1, tile_elements]")
    if int(lay.row_tile_count.sum()) != n_tiles:
        raise AssertionError("row_tile_count does not sum to n_tiles")
    # Tiles of a row are consecutive ids, in row order, covering the row exactly.
    if not np.array_equal(lay.tile_row, np.repeat(np.arange(rows, dtype=np.int32), lay.row_tile_count)):
        raise AssertionError("tile ids of a row are not consecutive / in row order")
    if not np.array_equal(lay.row_first_tile[1:], np.cumsum(lay.row_tile_count)[:-1]) or (
            rows and lay.row_first_tile[0] != 0):
        raise AssertionError("row_first_tile is not the prefix sum of row_tile_count")
    ends = lay.tile_start + lay.tile_len
    if n_tiles and (lay.tile_start[0] != 0 or not np.array_equal(lay.tile_start[1:], ends[:-1])):
        raise AssertionError("tiles do not cover the packed values back to back")
    last = lay.row_first_tile + lay.row_tile_count - 1
    if not np.array_equal(ends[last], lay.row_offsets[1:]):
        raise AssertionError("a row's last tile does not end at the row's end")
    full = np.ones(n_tiles, dtype=bool)
    full[last] = False
    if not np.all(lay.tile_len[full] == lay.tile_elements):
        raise AssertionError("a tile other than a row's last is not full")
    return True


# ---- device buffers ---------------------------------------------------------------------

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
    fifo_ready: object
    #: int64[tasks, TRACE_FIELDS] in trace mode; a 1-row placeholder otherwise (the
    #: performance kernels take the argument but never touch it).
    trace: object

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
            fifo_ready=cuda.device_array(layout.fifo_capacity, dtype=np.int32),
            trace=cuda.to_device(np.zeros((trace_task_count(layout) if trace else 1, TRACE_FIELDS),
                                          dtype=np.int64)),
        )
        if values is not None:
            buffers.load_values(values, stream)
        return buffers

    def load_values(self, values, stream=0):
        """Copy new packed inputs into the SAME device buffer (pointers unchanged)."""
        host = np.ascontiguousarray(values, dtype=np.float32)
        if host.shape != (self.layout.total_elements,):
            raise ValueError(f"values must have shape ({self.layout.total_elements},), got {host.shape}")
        self.values.copy_to_device(host, stream=stream)

    def poison(self, stream=0):
        """Fill outputs/intermediates with NaN and queue state with junk (tests: proves
        every element is written by the kernels and every queue word by the reset)."""
        for name in ("out", "tile_max", "tile_sum", "row_max", "row_sum"):
            arr = getattr(self, name)
            arr.copy_to_device(np.full(arr.shape, np.nan, dtype=np.float32), stream=stream)
        for name, junk in (("counters", 12345), ("row_arrivals", 777), ("fifo_slots", 4242),
                           ("fifo_ready", 9)):
            arr = getattr(self, name)
            arr.copy_to_device(np.full(arr.shape, junk, dtype=np.int32), stream=stream)

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
                for name in ("counters", "row_arrivals", "fifo_slots", "fifo_ready")}


# ---- workers and launches ---------------------------------------------------------------

@dataclass(frozen=True)
class WorkerPlan:
    workers: int
    cooperative_limit: int      # blocks_per_sm * sm_count (co-residency limit)
    blocks_per_sm: int
    sm_count: int
    n_tiles: int
    source: str                 # "occupancy", "override", "simulator"

    def record(self):
        return dict(self.__dict__)


def worker_plan(buffers, workers=None, kernel=None):
    """Persistent worker count: cooperative occupancy x SMs, capped by the A tasks.

    On a GPU the occupancy comes from the compiled kernel's
    ``cuOccupancyMaxActiveBlocksPerMultiprocessor`` (128-thread blocks, no dynamic shared
    memory) and the SM count from the device. The simulator co-schedules one block.
    ``kernel`` is the persistent build that will run (default the performance build;
    the trace build and the negative controls use more registers, so fewer of them fit
    per SM). ``workers`` overrides (tests); it must still fit the co-residency limit.
    """
    n_tiles = buffers.n_tiles
    dispatcher = persistent_tiles if kernel is None else kernel
    if SIMULATOR:
        limit = dispatcher.overloads[None].max_cooperative_grid_blocks(TILE_THREADS)
        blocks_per_sm, sm_count, source = limit, 1, "simulator"
    else:
        from .launch.driver import compiled, device_sm_count
        kernel = compiled(dispatcher, persistent_args(MODE_PHASED, buffers))
        blocks_per_sm = int(kernel.active_blocks_per_sm(TILE_THREADS, 0))
        sm_count = int(device_sm_count())
        limit, source = blocks_per_sm * sm_count, "occupancy"
    if workers is None:
        chosen = min(limit, n_tiles)
    else:
        chosen, source = int(workers), "override"
        if chosen < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if not SIMULATOR and chosen > limit:
            raise ValueError(f"workers={chosen} exceeds the cooperative co-residency limit {limit}")
    if chosen < 1:
        raise ValueError(f"no co-resident worker fits (limit {limit})")
    return WorkerPlan(workers=chosen, cooperative_limit=int(limit), blocks_per_sm=int(blocks_per_sm),
                      sm_count=int(sm_count), n_tiles=n_tiles, source=source)


def trace_task_count(layout):
    """A, B and C tasks: one trace row each (see :mod:`numba_softmax.kernels.tracing`)."""
    return 2 * layout.n_tiles + layout.rows


def tiled_launches(scheduler, buffers, workers=None, max_polls=DEFAULT_MAX_POLLS, trace=False, kernel=None):
    """The KernelLaunch list of one scheduler invocation.

    separate: tile_summary_kernel, row_combine_kernel, tile_normalize_kernel;
    phased:   persistent_tiles (mode 0), cooperative;
    dag:      init_queue_kernel, persistent_tiles (mode 1), cooperative.
    ``workers`` (persistent schedulers): an int, or None for :func:`worker_plan`.
    ``kernel``: the persistent build to launch instead of the performance build (or, with
    ``trace=True``, the trace build): a negative control or a diagnostic build.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler {scheduler!r}; expected one of {SCHEDULERS}")
    if trace and not buffers.traced:
        raise ValueError("trace=True needs buffers allocated with TiledBuffers.allocate(..., trace=True)")
    if scheduler == "separate":
        return separate_launches(buffers, trace=trace)
    if kernel is None and trace:
        kernel = persistent_trace_kernel()
    if workers is None:
        workers = worker_plan(buffers, kernel=kernel).workers
    workers = int(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if SIMULATOR and scheduler == "phased" and workers > 1:
        raise ValueError("the simulator runs blocks one at a time and its grid barrier is a block "
                         "barrier: phased mode can only be simulated with workers=1")
    if scheduler == "phased":
        return phased_launches(buffers, workers, kernel=kernel)
    return dag_launches(buffers, workers, max_polls, kernel=kernel)


# ---- queue verification -----------------------------------------------------------------

class QueueStateError(AssertionError):
    """The DAG queue did not end in the exact expected state."""


def expected_counters(layout, a_overshoot=0, head_overshoot=0):
    """Exact ``counters`` after a complete, error-free DAG invocation.

    Claims are tickets (``atomicAdd``); a ticket past the end is counted, so:

    * a_next - a_overshoot == n_tiles       every A tile claimed exactly once
    * fifo_tail == rows + n_tiles           every B and C task published exactly once
    * fifo_head - head_overshoot == rows + n_tiles
                                            every published task consumed exactly once
    * c_done == n_tiles                     every C tile finished
    * error_code == 0; error_task == error_waited_on == error_worker == -1 (untouched)

    The overshoots are the failed claims (workers that found nothing left); they are
    read from the counters themselves and must be non-negative.
    """
    expected = {name: COUNTER_INITIAL[index] for name, index in COUNTER_INDEX.items()}
    expected.update(a_next=layout.n_tiles + a_overshoot, fifo_head=layout.fifo_capacity + head_overshoot,
                    fifo_tail=layout.fifo_capacity, c_done=layout.n_tiles,
                    a_overshoot=a_overshoot, head_overshoot=head_overshoot)
    return expected


def describe_error(counters_host, layout=None):
    """Human-readable decoding of the error fields."""
    c = np.asarray(counters_host)
    code, task, waited, worker = (int(c[ERROR_CODE]), int(c[ERROR_TASK]),
                                  int(c[ERROR_WAITED_ON]), int(c[ERROR_WORKER]))
    meaning = ERROR_NAMES.get(code, "unknown error code")
    who = f"worker {worker}"
    if code == ERR_READY_TIMEOUT:
        what = f"{who} claimed FIFO slot {waited} and waited too long for its ready flag"
    elif code == ERR_COMPLETION_TIMEOUT:
        total = f" of {layout.n_tiles}" if layout is not None else ""
        what = (f"{who} found no claimable task and waited too long for completion: "
                f"c_done was {waited}{total}")
    elif code == ERR_INVALID_TASK:
        what = f"{who} read invalid task id {task} from FIFO slot {waited}"
        if layout is not None:
            what += f" (valid ids are 0..{layout.fifo_capacity - 1})"
    elif code == ERR_FIFO_OVERFLOW:
        what = f"{who} publishing task {task} reserved slot {waited} beyond the FIFO capacity"
        if layout is not None:
            what += f" {layout.fifo_capacity}"
    else:
        what = f"{who}, task {task}, waited on {waited}"
    return f"error_code {code} ({meaning}): {what}"


def verify_counters(counters_host, layout, workers=None):
    """Check the exact DAG counters; raise :class:`QueueStateError` naming what is wrong.

    With ``workers`` (the launched worker count) the overshoots are exact too: a worker
    leaves only after one A claim and one FIFO ticket came back past the end, and claims
    nothing after that, so a complete run ends with a_overshoot == head_overshoot == workers.
    """
    c = np.asarray(counters_host)
    if c.shape != (COUNTER_SLOTS,):
        raise QueueStateError(f"counters must have {COUNTER_SLOTS} words, got shape {c.shape}")
    if int(c[ERROR_CODE]) != ERR_NONE:
        raise QueueStateError("DAG worker reported an error: " + describe_error(c, layout))
    a_over, head_over = int(c[A_OVERSHOOT]), int(c[HEAD_OVERSHOOT])
    if a_over < 0 or head_over < 0:
        raise QueueStateError(f"negative overshoot counters: a_overshoot {a_over}, head_overshoot {head_over}")
    expected = expected_counters(layout, a_over, head_over)
    wrong = [f"{name} = {int(c[i])}, expected {expected[name]}"
             for name, i in COUNTER_INDEX.items() if int(c[i]) != expected[name]]
    if workers is not None and (a_over, head_over) != (workers, workers):
        wrong.append(f"a_overshoot {a_over} and head_overshoot {head_over}: expected one of each per worker, "
                     f"{workers}")
    padding = np.delete(c, list(COUNTER_INDEX.values()))
    if padding.any():
        wrong.append(f"{int(np.count_nonzero(padding))} padding words between the counters were written")
    if wrong:
        raise QueueStateError(f"DAG queue counters wrong ({layout.rows} rows, {layout.n_tiles} tiles): "
                              + "; ".join(wrong))
    return expected


def verify_queue(state, layout, workers=None):
    """Counters plus the FIFO and arrivals: every B/C task exactly once, all flags set,
    each row's C tasks after its B, and row_arrivals == row_tile_count (``workers``: see
    :func:`verify_counters`)."""
    verify_counters(state["counters"], layout, workers)
    slots = np.asarray(state["fifo_slots"])
    ready = np.asarray(state["fifo_ready"])
    arrivals = np.asarray(state["row_arrivals"])
    problems = []
    if not np.all(ready == 1):
        problems.append(f"fifo_ready not set at slots {np.flatnonzero(ready != 1)[:8].tolist()}")
    if not np.array_equal(np.sort(slots), np.arange(layout.fifo_capacity)):
        problems.append("fifo_slots is not a permutation of all B and C task ids")
    else:
        position = np.empty(layout.fifo_capacity, dtype=np.int64)
        position[slots] = np.arange(layout.fifo_capacity)
        b_pos = position[:layout.rows]
        c_pos = position[layout.rows:]
        early = np.flatnonzero(c_pos <= b_pos[layout.tile_row])
        if early.size:
            problems.append(f"C tiles {early[:8].tolist()} published before their row's B")
    bad_rows = np.flatnonzero(arrivals != layout.row_tile_count)
    if bad_rows.size:
        r = int(bad_rows[0])
        problems.append(f"row_arrivals[{r}] = {int(arrivals[r])}, expected {int(layout.row_tile_count[r])}"
                        f" ({bad_rows.size} rows wrong)")
    if problems:
        raise QueueStateError("DAG queue state wrong: " + "; ".join(problems))
    return True


# ---- one call -----------------------------------------------------------------------------

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


__all__ = [
    "SCHEDULERS", "TiledLayout", "build_layout", "check_layout", "TiledBuffers", "WorkerPlan",
    "worker_plan", "tiled_launches", "QueueStateError", "expected_counters", "verify_counters",
    "verify_queue", "describe_error", "TiledResult", "run_launches", "tiled_softmax",
    "A_NEXT", "FIFO_HEAD", "FIFO_TAIL", "C_DONE", "ERROR_CODE", "ERROR_TASK", "ERROR_WAITED_ON",
    "ERROR_WORKER", "ERR_READY_TIMEOUT", "ERR_COMPLETION_TIMEOUT", "ERR_INVALID_TASK",
    "ERR_FIFO_OVERFLOW",
]
