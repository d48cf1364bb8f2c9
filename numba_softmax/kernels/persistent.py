"""Persistent tiled softmax: one cooperative kernel of scheduler-led workers, phased or DAG mode.

Both persistent schedulers of Experiment B run the SAME compiled kernel,
:data:`persistent_tiles`, selected by its runtime ``mode`` argument, so they share code,
registers and occupancy (the worker count) and differ only in scheduling and reset cost.
The task bodies are the shared helpers of :mod:`.tiles` (A: tile summary, B: row combine,
C: tile normalize), run by the same 128 threads as in the separate kernels.

Worker = one block of ``WORKER_THREADS`` = 160 threads: four compute warps (threads 0-127,
the tile task's threads) and one scheduler warp (threads 128-159). The scheduler warp
decides the worker's next task while the compute warps run the current one, so neither
deciding nor the task's metadata loads sit on the compute path:

* a ring of ``RING_SLOTS`` = 2 task slots in shared memory (kind, index, and what the task
  needs: tile start and length, for C the row's m and z), handed over with named barriers:
  the scheduler fills slot s and ``barrier.arrive`` on FULL(s); the compute warps
  ``barrier.sync`` on FULL(s), run the task, and ``barrier.arrive`` on EMPTY(s); the
  scheduler ``barrier.sync`` on EMPTY(s) before it reuses the slot and then *finishes*
  the task for the queue (A: row arrival and maybe B's publish; B: publish its C tiles;
  C: count it). The task's own block reductions meet at named barrier 1 of the 128 task
  threads (:data:`.tiles.TILE_BARRIER`), never at ``syncthreads``.
* when it decides an A or C tile it asks the copy engine to bring the tile into L2
  (``cp.async.bulk.prefetch.L2``): the bytes move while the compute warps finish the
  task before it.

Lane 0 of the scheduler warp does every global-memory step; the whole warp takes part in
every barrier (lane 0's decisions reach the other lanes by ``shfl``).

Phased mode (:data:`MODE_PHASED`), the control: the scheduler hands out this worker's A
tiles ``blockIdx.x + k * workers``, waits until its compute warps finished them, meets the
other workers at a grid barrier, hands out one "B rows" task (each compute warp combines
rows ``global warp id + k * total warps``), grid barrier, then its C tiles in REVERSE tile
order (the tiles the A pass read last are the likeliest still in L2). No queue state, no
reset launch. The grid barrier (:func:`grid_barrier`) is run by the scheduler's lane 0 alone
inside the cooperative launch: a release fence, one relaxed ``atomicAdd`` on a
self-resetting word (block 0 adds ``2**31 - (workers - 1)``, the others 1: the top bit flips
exactly when the last worker arrives), relaxed polls until it flips, an acquire fence.

DAG mode (:data:`MODE_DAG`): the queue protocol of :mod:`numba_softmax.queue` (reset by
:data:`init_queue_kernel` before every invocation). Deciding (the scheduler, each turn):

1. Prefer the FIFO: the worker holds one ticket (``atomicAdd(fifo_head, 1)``), a FIFO
   slot. As soon as an ACQUIRE load of ``fifo_ready[ticket]`` reads 1 the scheduler takes
   the B or C task in ``fifo_slots[ticket]`` (for C it then reads the tile's row and that
   row's m and z: the acquire orders those loads after B's release) and asks for its next
   ticket at once, so that round trip overlaps the task.
2. Otherwise it claims an A tile: ``atomicAdd(a_next, 1)``.
3. Otherwise (no A tile left, ticket not yet published) it first finishes the task in the
   other ring slot if there is one (its arrival may be the publish its ticket waits for),
   then polls again with a short sleep; with no ticket left and no A tile, it drains the
   ring, adds its C tiles to ``c_done`` with one release ``atomicAdd`` and hands the
   compute warps an EXIT. Every worker ends with one overshoot of each kind.

So the preference is applied when the scheduler decides a slot: it looks at its ticket
first and claims an A tile only when that slot is not yet published; a slot decided while
no consumer was ready keeps its A tile (at most one decision ahead of the compute warps).

Finishing (the scheduler, after EMPTY(s)): after A(t), whose summary the tile's announcer
wrote before the compute warps arrived at EMPTY(s), an ``atom.acq_rel.gpu`` row arrival;
the LAST producer of a row publishes B: ``atomicAdd(fifo_tail, 1)``, the task id into the
slot, then ``fence.acq_rel.gpu`` and a relaxed store of the ready flag. After B(r), whose
m and z warp 0 wrote before EMPTY(s), one ``atomicAdd(fifo_tail, count)`` reserves the
row's C slots; all are written, one fence releases all of their flags. (The named barrier
orders the compute threads' writes before the scheduler's release: causality order is
transitive across scopes.)

Every wait is bounded by ``max_polls`` (polls with ``nanosleep`` back-off); past the bound
the scheduler records an error (:mod:`numba_softmax.queue`: code, task, what it waited on,
worker) and the worker exits; a waiting scheduler also exits when another worker recorded
one. A bug can make the kernel wrong, never hang the GPU.

Empty-work floors (:data:`MODE_PHASED_FLOOR`, :data:`MODE_DAG_FLOOR`): the same launch,
the same barriers and hand-offs, no tasks (the bench reports them beside the timings).

Negative controls (tests only, separate compilations selected by closure constants, never
registered): :data:`NEGATIVE_CONTROLS`.

Launch geometry: grid (workers,), block (160,), a cooperative launch (the grid barrier needs
every worker resident); ``workers`` = occupancy API x SM count, capped by ``n_tiles``
(:func:`numba_softmax.tiled.worker_plan`). ``init_queue_kernel``: grid-stride, grid
(ceil((rows + n_tiles) / 256) capped at 1024,), block (256,).

Bytes each invocation must move: x read twice (A and C; the second read may hit L2) and y
written once, about 12N bytes for N elements, plus the tile and row summaries (16T + 8R)
and, in DAG mode, the queue: ~8 bytes per FIFO entry and 4 per row for the reset and again
for the run. Shared memory (static): the ring (48 B) and the reduction partials (16 B).
"""

from numba import cuda, float32, int32, int64

from ..launch_spec import KernelLaunch
from ..numerics import BLOCK_THREADS, KERNEL_OPTIONS, WARP_SIZE
from ..queue import (A_NEXT, A_OVERSHOOT, C_DONE, COUNTER_SLOTS, DEFAULT_MAX_POLLS, ERR_BARRIER_TIMEOUT,
                     ERR_FIFO_OVERFLOW, ERR_INVALID_TASK, ERR_READY_TIMEOUT, ERROR_CODE,
                     ERROR_TASK, ERROR_WAITED_ON, ERROR_WORKER, FIFO_HEAD, FIFO_TAIL, GRID_BARRIER,
                     HEAD_OVERSHOOT)
from .ordering import (atomic_add_acq_rel_gpu, atomic_add_release_gpu, backoff, barrier_arrive, barrier_sync,
                       broadcast_lane0, fence_acq_rel_cta, fence_acq_rel_gpu, load_acquire_gpu, load_relaxed_gpu,
                       pause_us, store_relaxed_gpu)
from .prefetch import prefetch_span_l2
from .tiles import TILE_ANNOUNCER, TILE_THREADS, TILE_WARPS, task_a, task_b, task_c, tile_barrier
from .tracing import trace_now, trace_record

MODE_PHASED = 0
MODE_DAG = 1
MODE_PHASED_FLOOR = 2
MODE_DAG_FLOOR = 3
MODES = {"phased": MODE_PHASED, "dag": MODE_DAG, "phased_floor": MODE_PHASED_FLOOR, "dag_floor": MODE_DAG_FLOOR}

#: A worker: the tile task's compute warps plus one scheduler warp.
SCHEDULER_WARP = TILE_WARPS
WORKER_THREADS = TILE_THREADS + WARP_SIZE
RING_SLOTS = 2
#: Named barriers (0 is syncthreads, 1 the task threads' :data:`.tiles.TILE_BARRIER`).
SLOT_FULL = 2   # + slot: the scheduler filled it
SLOT_EMPTY = 4  # + slot: the compute warps are done with it

_F32 = "float32[::1]"
_I32 = "int32[::1]"
_I64 = "int64[::1]"
#: Numba signatures the launch layer compiles these kernels for (C-contiguous device arrays).
SIGNATURES = {
    # mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
    # tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots, fifo_ready, max_polls,
    # trace
    "persistent_tiles": (f"void(int32, {_F32}, {_F32}, {_I32}, {_I64}, {_I32}, {_I32}, {_I32}, "
                         f"{_F32}, {_F32}, {_F32}, {_F32}, {_I32}, {_I32}, {_I32}, {_I32}, int32, "
                         "int64[:, ::1])"),
    "init_queue_kernel": f"void({_I32}, {_I32}, {_I32}, {_I32})",
}

# Task kinds in a ring slot.
KIND_EXIT = 0
KIND_A = 1
KIND_B = 2
KIND_C = 3
KIND_B_ROWS = 4  # phased: every compute warp combines its share of the rows
KIND_NONE = -1   # the scheduler found nothing to decide yet (never written to a slot)

# Ring slot layout: int32 words per slot, then int64 start and float32 m, z in their own arrays.
SLOT_KIND, SLOT_INDEX, SLOT_LEN, SLOT_ROW = 0, 1, 2, 3
SLOT_WORDS = 4

#: The scheduler's ticket when it holds no FIFO slot: take one at the next decision ...
TICKET_NONE = -1
#: ... or never again: a ticket came back past the capacity (every B/C task has a consumer).
TICKET_EXHAUSTED = -2

INIT_MAX_BLOCKS = 1024


# ---- queue steps (scheduler lane 0 only) -----------------------------------------------------

@cuda.jit(device=True, **KERNEL_OPTIONS)
def record_error(counters, code, task, waited_on):
    """First error wins: CAS error_code from 0, then record the details."""
    if cuda.atomic.cas(counters, ERROR_CODE, 0, code) == 0:
        counters[ERROR_TASK] = task
        counters[ERROR_WAITED_ON] = waited_on
        counters[ERROR_WORKER] = cuda.blockIdx.x


@cuda.jit(device=True, **KERNEL_OPTIONS)
def publish_tasks(counters, fifo_slots, fifo_ready, first_task, count):
    """Reserve ``count`` FIFO slots with one atomic add, fill them, then release every flag.

    One ``fence.acq_rel.gpu`` followed by relaxed flag stores is a release pattern for each
    flag (PTX memory model): it orders the task results and the slot writes before all of
    them, where ``st.release`` per flag paid one fence per task (a row's B publishes 4-36 C
    tasks). Slots past the capacity are not written; the first one is recorded (error 4).
    """
    capacity = fifo_slots.shape[0]
    slot = cuda.atomic.add(counters, FIFO_TAIL, count)
    for k in range(count):
        if slot + k < capacity:
            fifo_slots[slot + k] = first_task + k
    fence_acq_rel_gpu()
    for k in range(count):
        if slot + k < capacity:
            store_relaxed_gpu(fifo_ready, slot + k, 1)
    if slot + count > capacity:
        first_over = max(slot, capacity)
        record_error(counters, ERR_FIFO_OVERFLOW, first_task + (first_over - slot), first_over)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def decode_fifo_task(task, slot, rows, n_tiles, counters):
    """FIFO task id -> (kind, index); an invalid id records error 3."""
    if task >= 0 and task < rows:
        return int32(KIND_B), int32(task)
    if task >= rows and task < rows + n_tiles:
        return int32(KIND_C), int32(task - rows)
    record_error(counters, ERR_INVALID_TASK, task, slot)
    return int32(KIND_EXIT), int32(-1)


def _make_scheduler_steps(acquire_ready, publish_after_last):
    """The DAG scheduler's two queue steps, ``try_decide`` and ``finish``; the flags break one
    ordering rule each for the negative controls (both true in every shipped build)."""

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def try_decide(counters, fifo_slots, fifo_ready, rows, n_tiles, ticket, a_done):
        """One non-blocking attempt: ``(kind, index, ticket, a_done)``, kind KIND_NONE when the
        ticketed slot is not published yet and no A tile can be claimed."""
        capacity = fifo_slots.shape[0]
        if ticket == TICKET_NONE:
            ticket = cuda.atomic.add(counters, FIFO_HEAD, 1)
        if ticket >= capacity:
            cuda.atomic.add(counters, HEAD_OVERSHOOT, 1)
            ticket = int32(TICKET_EXHAUSTED)
        if ticket >= 0:
            if acquire_ready:
                task = load_relaxed_gpu(fifo_slots, ticket)
                ready = load_acquire_gpu(fifo_ready, ticket) == 1
                if ready and task < 0:  # read before the publish: after the acquire it is visible
                    task = fifo_slots[ticket]
            else:  # negative control: take the slot without acquiring its ready flag
                task = fifo_slots[ticket]
                ready = True
            if ready:
                kind, index = decode_fifo_task(task, ticket, rows, n_tiles, counters)
                following = int32(TICKET_NONE)
                if kind != KIND_EXIT:  # the next ticket's round trip overlaps this task
                    following = cuda.atomic.add(counters, FIFO_HEAD, 1)
                return kind, index, following, a_done
        if not a_done:
            a = cuda.atomic.add(counters, A_NEXT, 1)
            if a < n_tiles:
                return int32(KIND_A), int32(a), ticket, a_done
            cuda.atomic.add(counters, A_OVERSHOOT, 1)
            a_done = True
        return int32(KIND_NONE), int32(-1), ticket, a_done

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def finish(kind, index, row, rows, counters, row_arrivals, row_first_tile, row_tile_count, fifo_slots,
               fifo_ready, c_count):
        """The queue's part of a finished task; returns the worker's C count."""
        if kind == KIND_A:
            old = atomic_add_acq_rel_gpu(row_arrivals, row, 1)
            if publish_after_last:
                publish = old == row_tile_count[row] - 1
            else:  # negative control: the FIRST finished producer publishes B
                publish = old == 0
            if publish:
                publish_tasks(counters, fifo_slots, fifo_ready, row, 1)
        elif kind == KIND_B:
            publish_tasks(counters, fifo_slots, fifo_ready, rows + row_first_tile[index], row_tile_count[index])
        elif kind == KIND_C:
            c_count += 1
        return c_count

    return try_decide, finish


@cuda.jit(device=True, **KERNEL_OPTIONS)
def grid_barrier(counters, workers, max_polls, which):
    """Scheduler lane 0 of every worker: all workers' finished tasks before, none after.

    The word flips its top bit exactly when the last of ``workers`` arrivals lands (block 0
    adds ``2**31 - (workers - 1)``, every other block 1), whatever their order, and its low
    31 bits return to 0: no reset. Returns False (after recording error 5) if it waited
    more than ``max_polls`` polls.
    """
    if cuda.blockIdx.x == 0:
        add = int32(int64(-2147483648) - int64(workers - 1) + int64(4294967296))
    else:
        add = int32(1)
    fence_acq_rel_gpu()  # release: this worker's results (ordered here by the EMPTY barriers)
    old = cuda.atomic.add(counters, GRID_BARRIER, add)
    polls = 0
    while ((old ^ load_relaxed_gpu(counters, GRID_BARRIER)) & int32(-2147483648)) == 0:
        polls += 1
        if polls > max_polls:
            record_error(counters, ERR_BARRIER_TIMEOUT, which, load_relaxed_gpu(counters, GRID_BARRIER))
            return False
        if polls > 64:
            backoff(polls - 64)
    fence_acq_rel_gpu()  # acquire: every worker's results before what follows
    return True


# ---- the kernel ---------------------------------------------------------------------------------

def _make_persistent_kernel(name, acquire_ready=True, publish_after_last=True, release_slot_early=False,
                            arrive_before_drain=False, trace_build=False, reverse_c=True, max_registers=None):
    """Build one compilation of the persistent kernel (closure constants select the variant).

    ``trace_build`` selects the trace build (:mod:`.tracing`); the performance build takes the
    same ``trace`` argument but its constant-false branches are pruned away. ``reverse_c``:
    phased C tiles in reverse order (the shipped build) or forward (a diagnostic build).
    ``max_registers`` caps ptxas's register allocation (diagnostic builds only). The other
    flags break one rule each (:data:`NEGATIVE_CONTROLS`).
    """
    try_decide, finish = _make_scheduler_steps(acquire_ready, publish_after_last)
    TRACE = trace_build
    REVERSE_C = reverse_c
    EARLY = release_slot_early
    ARRIVE_FIRST = arrive_before_drain

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def fill_slot(ring_i32, ring_i64, ring_f32, s, kind, index, values, tile_row, tile_start, tile_len,
                  row_max, row_sum):
        """Lane 0: write a decided task into ring slot ``s`` with what it needs, and ask for the
        tile's bytes in L2 now (A, C: its start and length; C: its row's m and z)."""
        ring_i32[s, SLOT_KIND] = kind
        ring_i32[s, SLOT_INDEX] = index
        if kind == KIND_A or kind == KIND_C:
            start = tile_start[index]
            n = tile_len[index]
            row = tile_row[index]
            if not TRACE:
                prefetch_span_l2(values, start, n)
            ring_i64[s] = start
            ring_i32[s, SLOT_LEN] = n
            ring_i32[s, SLOT_ROW] = row
            if kind == KIND_C:
                ring_f32[s, 0] = row_max[row]
                ring_f32[s, 1] = row_sum[row]
        fence_acq_rel_cta()

    def kernel(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
               tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots, fifo_ready,
               max_polls, trace):
        partials = cuda.shared.array(TILE_WARPS, float32)
        ring_i32 = cuda.shared.array((RING_SLOTS, SLOT_WORDS), int32)
        ring_i64 = cuda.shared.array(RING_SLOTS, int64)
        ring_f32 = cuda.shared.array((RING_SLOTS, 2), float32)
        tid = int32(cuda.threadIdx.x)
        n_tiles = int32(tile_row.shape[0])
        rows = int32(row_first_tile.shape[0])
        workers = int32(cuda.gridDim.x)

        if tid < TILE_THREADS:
            # ---- compute warps: run what the ring hands them, in order ----------------------
            k = int32(0)
            while True:
                s = k & 1
                barrier_sync(SLOT_FULL + s, WORKER_THREADS)
                kind = ring_i32[s, SLOT_KIND]
                index = ring_i32[s, SLOT_INDEX]
                if kind == KIND_EXIT:
                    return
                start = int64(0)
                if TRACE and tid == 0:
                    start = trace_now()
                if kind == KIND_A:
                    if (EARLY or ARRIVE_FIRST) and tid == TILE_ANNOUNCER and cuda.blockIdx.x % 2 == 1:
                        pause_us(20)  # controls: odd workers lag, widening the window the broken rule opens
                    task_a(index, ring_i64[s], ring_i32[s, SLOT_LEN], values, tile_max, tile_sum, partials)
                    if TRACE and tid == 0:
                        trace_record(trace, index, start)
                elif kind == KIND_B:
                    if tid < WARP_SIZE:  # warp 0; its lane 0 writes m and z
                        task_b(index, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum)
                        if TRACE and tid == 0:
                            trace_record(trace, n_tiles + index, start)
                elif kind == KIND_B_ROWS:
                    warp_stride = workers * TILE_WARPS
                    r = int32(cuda.blockIdx.x) * TILE_WARPS + (tid >> 5)
                    while r < rows:
                        row_start = int64(0)
                        if TRACE:
                            row_start = trace_now()
                        task_b(r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum)
                        if TRACE and tid % WARP_SIZE == 0:
                            trace_record(trace, n_tiles + r, row_start)
                        r += warp_stride
                elif kind == KIND_C:
                    task_c(ring_i64[s], ring_i32[s, SLOT_LEN], ring_f32[s, 0], ring_f32[s, 1], values, out)
                    if TRACE:
                        tile_barrier()  # every thread's stores precede the recorded end
                        if tid == 0:
                            trace_record(trace, n_tiles + rows + index, start)
                fence_acq_rel_cta()
                barrier_arrive(SLOT_EMPTY + s, WORKER_THREADS)
                k += 1

        # ---- scheduler warp ----------------------------------------------------------------------
        lane = tid - TILE_THREADS
        # The ring: what each slot holds until it is finished (lane 0), and whether the compute
        # warps still owe its EMPTY arrival (whole warp).
        kind0 = int32(KIND_EXIT)
        index0 = int32(-1)
        row0 = int32(0)
        kind1 = int32(KIND_EXIT)
        index1 = int32(-1)
        row1 = int32(0)
        open0 = False
        open1 = False
        k = int32(0)
        ok = True

        if mode == MODE_PHASED or mode == MODE_PHASED_FLOOR:
            work = mode == MODE_PHASED
            for phase in range(3):
                # Phase 0: A tiles; 1: the B rows task; 2: C tiles (reverse order).
                if phase == 0:
                    t = int32(cuda.blockIdx.x) if work else n_tiles
                    step = workers
                elif phase == 1:
                    t = int32(0) if work else int32(1)
                    step = int32(1)
                else:
                    if REVERSE_C:
                        t = n_tiles - 1 - int32(cuda.blockIdx.x) if work else int32(-1)
                    else:
                        t = int32(cuda.blockIdx.x) if work else n_tiles
                    step = -workers if REVERSE_C else workers
                while ok and ((phase == 0 and t < n_tiles) or (phase == 1 and t < 1)
                              or (phase == 2 and ((REVERSE_C and t >= 0) or (not REVERSE_C and t < n_tiles)))):
                    s = k & 1
                    if (s == 0 and open0) or (s == 1 and open1):
                        barrier_sync(SLOT_EMPTY + s, WORKER_THREADS)
                    if lane == 0:
                        kind = KIND_A if phase == 0 else (KIND_B_ROWS if phase == 1 else KIND_C)
                        fill_slot(ring_i32, ring_i64, ring_f32, s, kind, t, values, tile_row, tile_start,
                                  tile_len, row_max, row_sum)
                    barrier_arrive(SLOT_FULL + s, WORKER_THREADS)
                    if s == 0:
                        open0 = True
                    else:
                        open1 = True
                    k += 1
                    t += step
                if phase < 2:
                    # Every task of this phase finished here (drain the ring), then the grid barrier.
                    passed = int32(1)
                    if ARRIVE_FIRST and lane == 0:  # control: at the grid barrier before the drain
                        passed = int32(grid_barrier(counters, workers, max_polls, phase))
                    if open0:
                        barrier_sync(SLOT_EMPTY, WORKER_THREADS)
                        open0 = False
                    if open1:
                        barrier_sync(SLOT_EMPTY + 1, WORKER_THREADS)
                        open1 = False
                    if not ARRIVE_FIRST and lane == 0:
                        passed = int32(grid_barrier(counters, workers, max_polls, phase))
                    ok = broadcast_lane0(passed) != 0
            # drain, then EXIT
            if open0:
                barrier_sync(SLOT_EMPTY, WORKER_THREADS)
            if open1:
                barrier_sync(SLOT_EMPTY + 1, WORKER_THREADS)
            s = k & 1
            if lane == 0:
                ring_i32[s, SLOT_KIND] = KIND_EXIT
                fence_acq_rel_cta()
            barrier_arrive(SLOT_FULL + s, WORKER_THREADS)
            return

        # ---- DAG mode ----
        ticket = int32(TICKET_NONE)
        a_done = mode == MODE_DAG_FLOOR
        c_count = int32(0)
        if mode == MODE_DAG_FLOOR:
            ticket = int32(TICKET_EXHAUSTED)
        while True:
            s = k & 1
            # 1. Slot s is free once its previous task finished; finish that task for the queue.
            if (s == 0 and open0) or (s == 1 and open1):
                barrier_sync(SLOT_EMPTY + s, WORKER_THREADS)
                if lane == 0:
                    if s == 0:
                        c_count = finish(kind0, index0, row0, rows, counters, row_arrivals, row_first_tile,
                                         row_tile_count, fifo_slots, fifo_ready, c_count)
                    else:
                        c_count = finish(kind1, index1, row1, rows, counters, row_arrivals, row_first_tile,
                                         row_tile_count, fifo_slots, fifo_ready, c_count)
                if s == 0:
                    open0 = False
                else:
                    open1 = False
            # 2. Decide task k.
            polls = 0
            kind = int32(KIND_NONE)
            index = int32(-1)
            while True:
                action = int32(0)  # 0: wait, 1: decided, 2: exit
                if lane == 0:
                    if a_done and ticket == TICKET_EXHAUSTED:
                        action = int32(2)
                    else:
                        kind, index, ticket, a_done = try_decide(counters, fifo_slots, fifo_ready, rows, n_tiles,
                                                                 ticket, a_done)
                        if kind == KIND_EXIT:  # an invalid task id: recorded, leave
                            action = int32(2)
                        elif kind != KIND_NONE:
                            action = int32(1)
                        elif a_done and ticket == TICKET_EXHAUSTED:
                            action = int32(2)
                action = broadcast_lane0(action)
                if action != 0:
                    break
                # Nothing to decide yet. The task in the other slot may be the one whose finish
                # publishes this worker's ticket: finish it before waiting.
                other_open = (s == 0 and open1) or (s == 1 and open0)
                if other_open:
                    barrier_sync(SLOT_EMPTY + (1 - s), WORKER_THREADS)
                    if lane == 0:
                        if s == 0:
                            c_count = finish(kind1, index1, row1, rows, counters, row_arrivals, row_first_tile,
                                             row_tile_count, fifo_slots, fifo_ready, c_count)
                        else:
                            c_count = finish(kind0, index0, row0, rows, counters, row_arrivals, row_first_tile,
                                             row_tile_count, fifo_slots, fifo_ready, c_count)
                    if s == 0:
                        open1 = False
                    else:
                        open0 = False
                    continue
                give_up = int32(0)
                if lane == 0:
                    # Only a waiting worker looks for another worker's error.
                    if load_relaxed_gpu(counters, ERROR_CODE) != 0:
                        give_up = int32(1)
                    else:
                        backoff(polls)
                        polls += 1
                        if polls > max_polls:
                            record_error(counters, ERR_READY_TIMEOUT, -1, ticket)
                            give_up = int32(1)
                if broadcast_lane0(give_up) != 0:
                    action = int32(2)
                    break
            if action == 2:
                break
            # 3. Hand it to the compute warps (lane 0 fills the slot), and remember it.
            if lane == 0:
                if EARLY:  # control: finish the slot's task at once, before the compute warps ran it
                    c_count = finish(kind, index, tile_row[index] if kind == KIND_A else int32(0), rows,
                                     counters, row_arrivals, row_first_tile, row_tile_count, fifo_slots,
                                     fifo_ready, c_count)
                fill_slot(ring_i32, ring_i64, ring_f32, s, kind, index, values, tile_row, tile_start, tile_len,
                          row_max, row_sum)
                if s == 0:
                    kind0 = kind if not EARLY else int32(KIND_EXIT)
                    index0 = index
                    row0 = ring_i32[s, SLOT_ROW]
                else:
                    kind1 = kind if not EARLY else int32(KIND_EXIT)
                    index1 = index
                    row1 = ring_i32[s, SLOT_ROW]
            barrier_arrive(SLOT_FULL + s, WORKER_THREADS)
            if s == 0:
                open0 = True
            else:
                open1 = True
            k += 1

        # Leave: finish whatever the ring still holds, count this worker's C tiles (one release
        # add: the EMPTY barriers ordered every compute thread's stores before it), then EXIT.
        if open0:
            barrier_sync(SLOT_EMPTY, WORKER_THREADS)
            if lane == 0:
                c_count = finish(kind0, index0, row0, rows, counters, row_arrivals, row_first_tile, row_tile_count,
                                 fifo_slots, fifo_ready, c_count)
        if open1:
            barrier_sync(SLOT_EMPTY + 1, WORKER_THREADS)
            if lane == 0:
                c_count = finish(kind1, index1, row1, rows, counters, row_arrivals, row_first_tile, row_tile_count,
                                 fifo_slots, fifo_ready, c_count)
        s = k & 1
        if lane == 0:
            if c_count > 0:
                atomic_add_release_gpu(counters, C_DONE, c_count)
            ring_i32[s, SLOT_KIND] = KIND_EXIT
            fence_acq_rel_cta()
        barrier_arrive(SLOT_FULL + s, WORKER_THREADS)

    kernel.__name__ = kernel.__qualname__ = name
    cap = {} if max_registers is None else {"max_registers": max_registers}
    return cuda.jit(**KERNEL_OPTIONS, **cap)(kernel)


#: The performance kernel (registered): every ordering rule kept, phased C in reverse order.
persistent_tiles = _make_persistent_kernel("persistent_tiles")

_builds = {}


def _build(key, **options):
    if key not in _builds:
        _builds[key] = _make_persistent_kernel(key, **options)
    return _builds[key]


def persistent_trace_kernel():
    """The trace build of :data:`persistent_tiles` (compiled on first use; never timed)."""
    return _build("persistent_tiles_trace", trace_build=True)


def forward_c_kernel():
    """The performance kernel with the phased C tiles in forward order (a diagnostic build)."""
    return _build("persistent_tiles_forward_c", reverse_c=False)


def register_capped_kernel(max_registers):
    """The performance kernel compiled with ptxas's register cap ``max_registers`` (more workers
    fit per SM, at the price of spills): a diagnostic build, never registered or timed by the bench."""
    return _build(f"persistent_tiles_r{max_registers}", max_registers=max_registers)


#: Negative controls (tests only): name -> the one rule the build breaks, and how a check sees it.
NEGATIVE_CONTROLS = {
    # DAG: the scheduler hands a consumer over without acquiring its ready flag -> invalid task
    # ids / stale m, z (queue counters, oracle).
    "unacquired_slot_read": {"acquire_ready": False},
    # DAG: the FIRST finished A tile of a row publishes its B -> B combines missing summaries
    # (oracle, trace: B starts before its own A tiles end).
    "first_producer_publishes_b": {"publish_after_last": False},
    # DAG: a ring slot's task is finished for the queue as soon as it is handed out, before the
    # compute warps ran it (A's arrival before its summary is written) -> oracle, traces.
    "slot_released_early": {"release_slot_early": True},
    # phased: a worker arrives at the grid barrier before its compute warps finished (its fence
    # then orders nothing of theirs) -> B reads unfinished summaries (oracle, traces).
    "barrier_arrive_without_fence": {"arrive_before_drain": True},
}


def negative_control_kernel(name, trace=False):
    """A separately compiled, deliberately broken persistent kernel (never for timing);
    ``trace=True`` gives its trace build (the trace checks must reject it)."""
    if name not in NEGATIVE_CONTROLS:
        raise ValueError(f"unknown negative control {name!r}; expected one of {sorted(NEGATIVE_CONTROLS)}")
    suffix = "_trace" if trace else ""
    return _build(f"persistent_tiles_control_{name}{suffix}", trace_build=trace, **NEGATIVE_CONTROLS[name])


@cuda.jit(**KERNEL_OPTIONS)
def init_queue_kernel(counters, row_arrivals, fifo_slots, fifo_ready):
    """Fresh DAG queue state: counters = COUNTER_INITIAL, arrivals 0, slots -1, flags 0."""
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    for k in range(i, COUNTER_SLOTS, stride):
        counters[k] = -1 if ERROR_TASK <= k <= ERROR_WORKER else 0
    for k in range(i, row_arrivals.shape[0], stride):
        row_arrivals[k] = 0
    for k in range(i, fifo_slots.shape[0], stride):
        fifo_slots[k] = -1
        fifo_ready[k] = 0


# ---- launches ------------------------------------------------------------------------------

def persistent_args(mode, buffers, max_polls=DEFAULT_MAX_POLLS):
    """Argument tuple of :data:`persistent_tiles` (same order for every mode and variant)."""
    b = buffers
    return (int32(mode), b.values, b.out, b.tile_row, b.tile_start, b.tile_len,
            b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum, b.row_max, b.row_sum,
            b.counters, b.row_arrivals, b.fifo_slots, b.fifo_ready, int32(max_polls), b.trace)


def init_queue_launch(buffers):
    capacity = buffers.fifo_slots.shape[0]
    blocks = min(max(1, (capacity + BLOCK_THREADS - 1) // BLOCK_THREADS), INIT_MAX_BLOCKS)
    return KernelLaunch("init_queue_kernel", init_queue_kernel, (blocks,), (BLOCK_THREADS,),
                        (buffers.counters, buffers.row_arrivals, buffers.fifo_slots,
                         buffers.fifo_ready))


def persistent_launch(label, mode, buffers, workers, kernel=None, max_polls=DEFAULT_MAX_POLLS):
    return KernelLaunch(f"persistent_tiles[{label}]", kernel or persistent_tiles, (workers,), (WORKER_THREADS,),
                        persistent_args(mode, buffers, max_polls), cooperative=True)


def phased_launches(buffers, workers, kernel=None, floor=False, max_polls=DEFAULT_MAX_POLLS):
    """One cooperative launch, mode 0 (no queue reset); ``floor``: the same with no tasks."""
    mode = MODE_PHASED_FLOOR if floor else MODE_PHASED
    return [persistent_launch("phased_floor" if floor else "phased", mode, buffers, workers, kernel, max_polls)]


def dag_launches(buffers, workers, max_polls=DEFAULT_MAX_POLLS, kernel=None, floor=False):
    """Queue reset, then the cooperative launch in mode 1; ``floor``: the same with no tasks."""
    mode = MODE_DAG_FLOOR if floor else MODE_DAG
    return [init_queue_launch(buffers),
            persistent_launch("dag_floor" if floor else "dag", mode, buffers, workers, kernel, max_polls)]
