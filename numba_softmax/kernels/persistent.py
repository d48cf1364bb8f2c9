"""Persistent tiled softmax: one cooperative kernel, a phased mode and a DAG mode.

Both schedulers of Experiment B that keep workers resident run the SAME compiled
kernel, :data:`persistent_tiles`, selected by its runtime ``mode`` argument, so they
share code, registers and occupancy (the worker count) and differ only in scheduling
and reset cost. Workers are blocks of ``TILE_THREADS`` = 128 threads (the tile task's
block, :mod:`.tiles` says why); the task bodies are the shared
helpers of :mod:`.tiles` (A: tile summary, B: row combine, C: tile normalize).

Mode 0, phased (:data:`MODE_PHASED`): the control with cooperative grid barriers::

    for t in range(blockIdx.x, n_tiles, gridDim.x):  A(t)         # block-level
    grid barrier
    for r in range(global warp id, rows, total warps):  B(r)      # warp-level
    grid barrier
    for t in range(blockIdx.x, n_tiles, gridDim.x):  C(n_tiles - 1 - t)   # m, z read directly

C descends where A ascended: the tiles A read last are still in L2 when C starts (C's loads
and y's stores are evict-first, :mod:`.tiles`), so C rereads them from L2, not DRAM.

The grid barrier is this kernel's own (:func:`grid_barrier`, inside the cooperative launch),
flat as in cooperative groups: a block barrier, then thread 0 makes one ``atom.release``
arrival on one word (its own 128-byte line) and, once the add's old value has come back,
polls that word with acquire loads until its top bit flips; a block barrier lets the others
go. The word resets itself (:func:`flip_add`: the first participant adds ``2**31 - (n - 1)``,
the others 1). ``python -m bench probe floors`` times it against other designs and CUDA's
own ``grid.sync()``; Numba's ``grid.sync()`` went through libcudadevrt with local-memory
traffic and took twice as long. It needs no reset launch.

(The loops are written as while loops: ``range`` with a run-time step computes its trip
count with a 64-bit division call, which cost this register-bound kernel two registers.
Arrays are indexed with ``uint32`` values: Numba adds negative-index wraparound code, a
compare and a select, to every signed index it cannot prove non-negative, much of it on
thread 0's decision chain; docs/numba_vs_nvcc.md.)
It touches no queue state, so it needs no reset launch. In its A and C loops thread 0
first prefetches the worker's next tile (step ``t + gridDim.x``) into L2
(:func:`prefetch_next_tile`), so that tile's DRAM read overlaps the current tile's
reductions (not in the trace build); the start and length that prefetch needs were loaded
one iteration earlier, so it never waits on a load. In the C loop every thread requests
the next tile's row index at the start of a tile and that row's m and z at its end, so a
C tile starts with m and z in hand instead of two dependent loads.

Mode 1, DAG (:data:`MODE_DAG`): a dependency-driven task queue in global memory,
freshly reset by :data:`init_queue_kernel` before every invocation:

* ``counters`` (int32[:data:`COUNTER_SLOTS`]), word indices :data:`A_NEXT`, :data:`FIFO_HEAD`,
  :data:`FIFO_TAIL`, :data:`C_DONE` (one 128-byte line each: :data:`COUNTER_INDEX`),
  :data:`ERROR_CODE`, :data:`ERROR_TASK`, :data:`ERROR_WAITED_ON`, :data:`ERROR_WORKER`,
  :data:`A_OVERSHOOT`, :data:`HEAD_OVERSHOOT` (sharing a fifth line); reset to
  :data:`COUNTER_INITIAL`.
* ``row_arrivals[rows]`` = 0: finished A tiles per row.
* ``fifo_slots[rows + n_tiles]`` = -1: the FIFO of ready consumer tasks. Each slot is its own
  ready flag: -1 until a release publishes the task id into it (ids are >= 0), so one store
  publishes an entry and one acquire load takes it. It holds exactly all B and C tasks, each once:
  task id ``r`` is B(r), ``rows + t`` is C(t). A tasks never enter the FIFO; they are
  claimed from the counter ``a_next``. Where a claim takes two A tiles (below), a C entry
  holds two consecutive tiles of a row too (entries start at the row's first tile, every
  second tile; C(t) then runs t and t + 1 if t + 1 is in t's row), and the invocation uses
  the first ``paired_entries`` slots (``layout.fifo_entries(2)``, passed by the host).

Worker loop: thread 0 decides and broadcasts ``(kind, index)`` through shared memory, ONE
``syncthreads`` per task. It makes the next decision as soon as its own part of the current
task is done, into the other of two ``ctrl`` slots (the one the block is not reading); after
an A task the tile's announcer, lane 0 of warp 1 (``tiles.TILE_ANNOUNCER``), which wrote the
summary, makes the row arrival meanwhile, so the two chains of dependent round trips overlap
instead of following each other. (So the B task that arrival publishes may find the worker
already committed to one more A claim: thread 0 polled the FIFO before the publish landed.)
Claims are tickets -- one ``atomicAdd``
each, which always succeeds -- never CAS loops (a CAS claim succeeds once per atomic
round trip, which serialized 528 workers at ~0.55 us per task on the H200). Thread 0
holds at most one FIFO ticket (a slot of the FIFO, published or only reserved):

1. Prefer the FIFO: ``h = atomicAdd(fifo_head, 1)`` is the worker's ticket; a ticket past
   the end (``h >= capacity``) is counted in ``head_overshoot`` and the worker takes no
   more. As soon as an ACQUIRE load of ``fifo_slots[ticket]`` reads a task id (not -1) it
   runs that task. The NEXT ticket is requested in the same decision, so its ``atomicAdd``
   completes while the task runs and the next decision starts with a ticket in hand (one
   round trip, the slot's acquire, instead of a counter poll, the ticket and the slot one
   after another).
2. Otherwise -- also while its ticketed slot is reserved but not yet published --
   ``a = atomicAdd(a_next, k)`` claims A(a) .. A(a + k - 1) (those below ``n_tiles``) if
   ``a < n_tiles``, and the worker runs them back to back: ``k`` =
   :data:`~numba_softmax.queue.TILES_PER_CLAIM` (2) where every worker has at least two A
   tiles, else 1 (``queue.tiles_per_claim``), so there is one decision per pair of A tiles,
   not per tile. The first claim past the end is counted in ``a_overshoot`` and the worker
   claims no more A tiles. Thread 0 reads its ticket's slot (relaxed) as each A claim starts;
   if that read gave -1, the decision after the tasks claims at once, without reading the slot
   again (one round trip instead of two; a slot published during the tasks is taken at the
   decision after that one). Doing producer
   work while waiting means every ticketed slot is eventually published: all B and C tasks
   are published exactly once, filling exactly the FIFO's entries.
3. Otherwise, once nothing is left to claim (no A tile, no ticket), the worker adds the C
   tiles it finished to ``c_done`` (one release ``atomicAdd`` for all of them) and exits:
   every B and C task still to run is held by a live worker's ticket, and that worker runs
   it before it leaves, so the launch ends only when every C tile is done. (The diagnostic
   :func:`completion_wait_kernel` also waits, polling ``c_done`` until it shows ``n_tiles``.)
   So every worker that exits has one overshoot of each kind: a complete run ends with
   ``a_overshoot == head_overshoot == workers``.

As a claim A(a) .. starts, the announcer loads the span of the claim one round later
(``a + k * workers``) and asks for it in L2 after the tasks: A tiles are claimed in
increasing order, so its DRAM read overlaps the tasks in between (a hint; nothing is
claimed). After the claim's tiles (the announcer wrote each tile_max[t], tile_sum[t] inside
its task), the announcer makes one acq_rel ``atomicAdd(row_arrivals[row], n)`` per row the
claim touches (n of its tiles in that row; two tiles span one row or two); the LAST producer
(old + n == row_tile_count) publishes B(row): ``slot = atomicAdd(fifo_tail, 1)``, then the release
pattern ``fence.acq_rel.gpu`` + a relaxed store of the task id into ``fifo_slots[slot]``. After B(r)
(run by warp 0; its lane 0, thread 0, writes row_max[r], row_sum[r] first): one
``atomicAdd(fifo_tail, entries)`` reserves the row's C slots, then ONE fence releases all of them
(relaxed stores after it), where a release store per slot paid a fence per C entry. (A slot and a
separate ready flag cost one more round trip per publish: the fence then waited for the slot
stores before the flags could go; PERFORMANCE.md.) In C(t) every thread reads row_max/row_sum of
the row itself, after the broadcast barrier that follows thread 0's acquire of the C entry's slot.
After C(t): thread 0 counts the tile in a register once the barrier that follows the task has passed (at its next
decision), so that barrier puts every thread's output stores before the release
``atomicAdd(c_done, count)`` of step 3, which is cumulative; a worker that finds nothing
left right after a C task first decides :data:`KIND_SYNC` (no task, one more barrier).

Every wait is bounded by ``max_polls`` (:data:`DEFAULT_MAX_POLLS` = 2**22 polls with
``nanosleep`` backoff of at most 256 ns, i.e. on the order of a second); past the bound
thread 0 records an error (CAS on ``error_code`` from 0, so the first error wins)
and the worker exits; a waiting worker checks ``error_code`` once per :data:`ERROR_POLL_EVERY`
polls (a worker that keeps finding work needs no exit signal). A bug can
make the kernel wrong, never hang the GPU. Error enum (:data:`ERROR_NAMES`):

===  ===========================  =====================  =============================
code meaning                      error_task             error_waited_on
===  ===========================  =====================  =============================
1    slot never published         -1 (not yet written)   FIFO slot it polled
2    C not complete (wait build)  -1                     c_done observed (of n_tiles)
3    invalid task id in a slot    the id read            FIFO slot it was read from
4    FIFO overflow on publish     task being published   slot index >= capacity
5    grid barrier never flipped   which barrier (0, 1)   the barrier word (phased)
===  ===========================  =====================  =============================

``error_worker`` is the recording worker's ``blockIdx.x`` (a worker id, not an SM).

Negative controls (tests only; never registered, never in the performance build):
:func:`negative_control_kernel` builds the same kernel with one ordering rule broken,
``"unacquired_slot_read"`` (reads ``fifo_slots[ticket]`` once, plain, without waiting
for its publish or acquiring it), ``"first_producer_publishes_b"`` (the FIRST finished A tile of a row publishes
B instead of the last), ``"barrier_arrive_without_fence"`` (phased: a relaxed grid barrier
arrival before the worker's tasks are done). The variants are separate
compilations selected by closure constants, so :data:`persistent_tiles` contains none of their code.

Launch geometry: grid (workers,), block (128,), a cooperative launch (requested by the launch
description: the kernel's own grid barrier needs every worker resident); launch bounds of
:data:`MIN_WORKERS_PER_SM` = 9 blocks per SM (at most 56 registers). ``workers`` comes
from the occupancy API x SM count, capped by ``n_tiles`` (see
:func:`numba_softmax.tiled.worker_plan`). ``init_queue_kernel``: grid-stride, grid
(ceil((rows + n_tiles) / 256) capped at 1024,), block (256,).

Bytes each invocation must move: like the separate path, x is read twice (A and C)
and y written once, about 12N bytes for N elements, plus the tile and row summaries
(16T + 8R) and, in DAG mode, the queue: ~4 bytes per FIFO entry (its slot) and 4 per row for
the reset and again for the run, plus the counter atomics.

Shared memory (static, no dynamic reservation): partials float32[4] (16 B), the
broadcast ``(kind, index)`` slots int32[4] (16 B), the barrier's verdict int32[1], and in DAG
mode thread 0's scheduling state int32[:data:`STATE_SLOTS`] (its ticket, whether A is done, the
C tiles not yet counted, its ticket's early slot read): only thread 0 uses it, and in registers
every thread would hold it through every task (the driver's compiler then spilled 8 bytes at the
56-register bound).

Empty-work floors (:data:`MODE_PHASED_FLOOR`, :data:`MODE_DAG_FLOOR`): the same launches and
barriers with no task; the bench times them beside each scheduler.
"""

from numba import cuda, float32, int32, int64, uint32

from ..launch_spec import KernelLaunch
from ..numerics import BLOCK_THREADS, KERNEL_OPTIONS, PARTIALS_ALIGNMENT, WARP_SIZE, bounded_kernel, udiv
from ..queue import (
    A_NEXT,
    A_OVERSHOOT,
    C_DONE,
    COUNTER_SLOTS,
    DEFAULT_MAX_POLLS,
    ERR_BARRIER_TIMEOUT,
    ERR_COMPLETION_TIMEOUT,
    ERR_FIFO_OVERFLOW,
    ERR_INVALID_TASK,
    ERR_READY_TIMEOUT,
    ERROR_CODE,
    ERROR_TASK,
    ERROR_WAITED_ON,
    ERROR_WORKER,
    FIFO_HEAD,
    FIFO_TAIL,
    GRID_BARRIER,
    HEAD_OVERSHOOT,
    SLOT_EMPTY,
    TILES_PER_CLAIM,
)
from .ordering import (
    atomic_add_acq_rel_gpu,
    atomic_add_release_gpu,
    backoff,
    fence_acq_rel_gpu,
    load_acquire_gpu,
    load_relaxed_gpu,
    let_dependent_grid_launch,
    pause_us,
    store_relaxed_gpu,
    wait_for_prerequisite_grid,
)
from .prefetch import prefetch_span_l2
from .tiles import (
    TILE_ANNOUNCER,
    TILE_THREADS,
    TILE_VALUES,
    TILE_WARPS,
    load_a_tile,
    load_c_tile,
    normalize_tile,
    summarize_tile,
    task_a,
    task_b,
    task_b_of,
    task_c_at,
)
from .tracing import trace_now, trace_record

MODE_PHASED = 0
MODE_DAG = 1
MODE_PHASED_FLOOR = 2
MODE_DAG_FLOOR = 3
MODES = {"phased": MODE_PHASED, "dag": MODE_DAG, "phased_floor": MODE_PHASED_FLOOR, "dag_floor": MODE_DAG_FLOOR}


_F32 = "float32[::1]"
_I32 = "int32[::1]"
_I64 = "int64[::1]"
#: Numba signatures the launch layer compiles these kernels for (C-contiguous device arrays).
SIGNATURES = {
    # mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
    # tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
    # paired_entries, max_polls, trace
    "persistent_tiles": (f"void(int32, {_F32}, {_F32}, {_I32}, {_I64}, {_I32}, {_I32}, {_I32}, "
                         f"{_F32}, {_F32}, {_F32}, {_F32}, {_I32}, {_I32}, {_I32}, int32, int32, "
                         "int64[:, ::1])"),
    "init_queue_kernel": f"void({_I32}, {_I32}, {_I32})",
}

# Decisions broadcast by thread 0.
KIND_EXIT = 0
KIND_A = 1
KIND_B = 2
KIND_C = 3
KIND_SYNC = 4  # no task: one more barrier, so that the worker's last C tile is ordered before it counts it

INIT_MAX_BLOCKS = 1024

#: Workers of TILE_THREADS that the launch bounds ask ptxas to fit on one SM: 9 x 128 threads x 56
#: registers = 64,512 of the SM's 65,536. Without the bound the driver's compiler gave this kernel 1056
#: workers on the H200 (8 per SM) where its nvcc twin, at 55 registers, got 1188; with it both get 1188,
#: and the DAG is 7-8% faster at 2048 rows (PERFORMANCE.md). 10 per SM (48 registers, no spills with
#: thread 0's state in shared memory) made the DAG 1-2% faster at 2048 rows but 3-5% slower at 128 and
#: 512, and phased slower everywhere (PERFORMANCE.md).
MIN_WORKERS_PER_SM = 9

# A C entry runs its first tile and at most the one after it (the ``pair`` of the DAG's C task), so a claim
# size other than 2 would publish entries the C task does not finish.
if TILES_PER_CLAIM != 2:
    raise ImportError(f"the DAG's C entries hold at most two tiles; queue.TILES_PER_CLAIM is {TILES_PER_CLAIM}")


# ---- queue helpers (thread 0 only) ------------------------------------------------------------

@cuda.jit(device=True, **KERNEL_OPTIONS)
def record_error(counters, code, task, waited_on):
    """First error wins: CAS error_code from 0, then record the details."""
    if cuda.atomic.cas(counters, ERROR_CODE, 0, code) == 0:
        counters[ERROR_TASK] = task
        counters[ERROR_WAITED_ON] = waited_on
        counters[ERROR_WORKER] = cuda.blockIdx.x


@cuda.jit(device=True, **KERNEL_OPTIONS)
def publish_tasks(counters, fifo_slots, capacity, first_task, count, step):
    """Publish tasks ``first_task``, ``first_task + step``, ... (``ceil(count / step)`` FIFO entries:
    a C entry holds ``step`` tiles): reserve the slots with one atomic add, then release them.

    A slot is its own ready flag (-1 until published). One ``fence.acq_rel.gpu`` followed by
    relaxed stores of the task ids is a release pattern for each slot (PTX memory model): it
    orders the task results before all of them, where ``st.release`` per slot paid one fence per
    entry (a row's B publishes 2-18 C entries). With a separate flag per slot the fence also
    waited for the slot stores, one more round trip on every row's chain. Slots past
    ``capacity`` (this invocation's entries) are not written; the first one is recorded (error 4).
    """
    # udiv of uint32 values: one 32-bit division (``//`` of int32 values is Numba's int64 division
    # with a floor fix-up, a call to a 64-bit division routine)
    entries = int32(udiv(uint32(count + step - 1), uint32(step)))
    slot = cuda.atomic.add(counters, FIFO_TAIL, entries)
    # A signed while loop, as the twin's ``for``: a ``range`` loop carries Numba's iterator state, a
    # remaining count and three selects on every step, in every copy NVVM unrolls (B's publish is on
    # the row's chain from its last A to its first C).
    # (Numba widens int32 + int32 to 64 bits: each sum is cast back.)
    fence_acq_rel_gpu()
    k = int32(0)
    while k < entries:
        at = int32(slot + k)
        if at < capacity:
            store_relaxed_gpu(fifo_slots, at, int32(first_task + int32(k * step)))
        k = int32(k + 1)
    if int32(slot + entries) > capacity:
        first_over = max(slot, capacity)
        record_error(counters, ERR_FIFO_OVERFLOW, first_task + (first_over - slot) * step, first_over)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity, row, n, publish_after_last):
    """The announcer, after ``n`` A tiles of ``row`` whose summaries it wrote: one acq_rel add to
    the row's arrivals (it releases those summaries); the arrival that completes the row publishes
    B(row). ``publish_after_last=False`` (a negative control only): the row's FIRST arrival does."""
    old = atomic_add_acq_rel_gpu(row_arrivals, row, n)
    if publish_after_last:
        publish = int32(old + n) == row_tile_count[row]  # int32: Numba widens the sum to 64 bits
    else:
        publish = old == 0
    if publish:
        publish_tasks(counters, fifo_slots, capacity, row, 1, 1)


@cuda.jit(device=True, **KERNEL_OPTIONS)
def decode_fifo_task(task, slot, rows, n_tiles, counters):
    """FIFO task id -> (kind, index); an invalid id records error 3."""
    if task >= 0 and task < rows:
        return int32(KIND_B), int32(task)
    if task >= rows and task < int32(rows + n_tiles):  # int32: Numba widens the sum to 64 bits
        return int32(KIND_C), int32(task - rows)
    record_error(counters, ERR_INVALID_TASK, task, slot)
    return int32(KIND_EXIT), int32(-1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def visit(t, n, descending):
    """The tile a pass visits at step ``t``: ``t``, or ``n - 1 - t`` in a descending pass (int32 steps and
    counts; the difference is cast back, as Numba widens it to 64 bits)."""
    return int32(n - 1 - t) if descending else t


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values, tile_start, tile_len, descending):
    """Phased mode, thread 0, at the start of step ``t``: prefetch the tile of step ``t + workers``
    into L2 from the metadata loaded one iteration ago (``ahead_start``, ``ahead_len``), and load
    the metadata of step ``t + 2 workers`` for the next iteration (it arrives during this task);
    ``descending`` maps steps to tiles as :func:`visit` does. Returns that metadata. (int32 steps: each
    sum is cast back, or the compares and the visit below are 64-bit.)"""
    if int32(t + workers) < n_tiles:
        prefetch_span_l2(values, ahead_start, ahead_len)
    after = int32(t + int32(2 * workers))
    if after < n_tiles:
        k = uint32(visit(after, n_tiles, descending))
        return tile_start[k], tile_len[k]
    return int64(0), int32(0)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def c_step_metadata(step, n_tiles, tile_row, tile_start, tile_len):
    """Phased mode: the row, start and length of the tile the descending C pass visits at ``step``
    (zeros past the last step). The layout never changes, so they may be read at any time before."""
    if step < n_tiles:
        k = uint32(visit(step, n_tiles, True))
        return uint32(tile_row[k]), tile_start[k], tile_len[k]
    return uint32(0), int64(0), int32(0)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def flip_add(first, participants):
    """What a participant adds to a self-resetting barrier word: the first ``2**31 - (n - 1)``,
    every other 1, so the word's top bit flips exactly when the last of ``n`` arrives (in any
    order) and its low 31 bits come back to 0."""
    if first:
        return int32(int64(-2147483648) - int64(participants - 1) + int64(4294967296))
    return int32(1)


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def flipped(before, after):
    return ((before ^ after) & int32(-2147483648)) != 0


@cuda.jit(device=True, **KERNEL_OPTIONS)
def grid_barrier(counters, workers, max_polls, which, fenced):
    """Thread 0 of every worker, between two block barriers: all workers' tasks before it,
    none after. Flat: every worker makes one ``atom.release`` arrival on :data:`GRID_BARRIER`
    (its old value says which flip to wait for; no fence before it, which cost a second
    ``MEMBAR``) and polls the word with acquire loads until its top bit flips, with no fence
    after. The word resets itself (:func:`flip_add`). Returns False (after recording error 5)
    if it waited more than ``max_polls`` polls.
    """
    add = flip_add(cuda.blockIdx.x == 0, workers)
    if not fenced:  # negative control: a relaxed arrival, before the block is done, and no wait
        cuda.atomic.add(counters, GRID_BARRIER, add)
        return True
    # release: this worker's results (ordered before it by the block barrier)
    old = atomic_add_release_gpu(counters, GRID_BARRIER, add)
    # The first poll depends on the add's result. Issued at once (Numba's build does that when
    # nothing orders it), it queues on the line behind the arrivals and costs ~0.5 us per crossing
    # (``python -m bench probe floors``); CUDA's build of grid.sync() waits for the result too.
    # The arrival that flips the word is the last: one acquire load (it reads its own add, the end
    # of the release sequence of every arrival) orders every worker's results before what follows.
    if flipped(old, int32(int64(old) + int64(add))):
        load_acquire_gpu(counters, GRID_BARRIER)
        return True
    polls = int32(0)
    while True:
        now = load_acquire_gpu(counters, GRID_BARRIER)  # acquire: every worker's results before what follows
        if flipped(old, now):
            return True
        polls = int32(polls + 1)
        if polls > max_polls:
            record_error(counters, ERR_BARRIER_TIMEOUT, which, now)
            return False
        if polls > 4096:
            backoff(polls - 4096)


#: A waiting worker looks for another worker's error once per this many polls.
ERROR_POLL_EVERY = 32

#: Thread 0's ticket when it holds no FIFO slot: take one at the next decision ...
TICKET_NONE = -1
#: ... or never again: a ticket came back past the capacity (every B/C task has a consumer).
TICKET_EXHAUSTED = -2
#: Thread 0's view of its ticket's slot when it did not read it during the task just run (never a
#: slot's value).
SEEN_NOTHING = -2

#: Thread 0's scheduling state between decisions (DAG mode), slots of a shared int32 array.
STATE_C_WAITING = 0
STATE_C_UNFLUSHED = 1
STATE_TICKET = 2
STATE_A_DONE = 3
STATE_SEEN_SLOT = 4
STATE_SLOTS = 5


def _make_next_task(acquire_ready, completion_wait=False):
    """Thread 0's scheduling decision. ``acquire_ready=False`` only for a negative control.

    Claims are tickets (one ``atomicAdd`` each, which always succeeds), not CAS loops:
    with hundreds of workers a CAS claim succeeds once per atomic round trip and the
    whole queue serializes on it (measured: ~0.55 us per task on the H200). A worker
    holds at most one FIFO ticket, reserved or published; while its slot is reserved but
    not yet published it claims A tiles, so every ticketed slot is eventually served.

    The scheduling work is kept off the critical path: the next ticket is requested the
    moment a consumer task is decided, so that ``atomicAdd`` completes while the task runs
    (its value is first read at the next decision, which is where a ticket past the end is
    counted); the slot is its own ready flag (written once, from -1, with release: one acquire
    load finds the task and orders what its producer wrote before the task); and claims are
    not preceded by relaxed polls of the counters. A
    claim past the end (``a_next >= n_tiles``, ``fifo_head >= capacity``) is counted in
    ``a_overshoot`` / ``head_overshoot`` once per worker, which keeps the accounting exact.
    ``c_unflushed`` is the worker's count of finished C tiles not yet added to ``c_done``:
    they are added (one release ``atomicAdd``) only once the worker finds nothing left to
    claim, not one atomic per tile on the critical path of every C task.
    Returns ``(kind, index, ticket, a_done, c_unflushed)``; the last three carry over.
    """

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def next_task(counters, fifo_slots, capacity, rows, n_tiles, max_polls, ticket, a_done, c_unflushed,
                  c_waiting, seen_slot, claim):
        if ticket == TICKET_NONE:
            ticket = cuda.atomic.add(counters, FIFO_HEAD, 1)
        if ticket >= capacity:
            cuda.atomic.add(counters, HEAD_OVERSHOOT, 1)
            ticket = int32(TICKET_EXHAUSTED)
        # The ticket's slot read empty at the start of the A task just run: claim the next A tile at
        # once instead of reading the slot again first (first pass only; see the docstring).
        skip_slot = seen_slot == SLOT_EMPTY and not a_done
        polls = int32(0)  # 32-bit, as the twin's: an int64 count made its add and compares 64-bit ones
        while True:
            if ticket >= 0 and not skip_slot:
                # 1. the consumer (B or C) is preferred as soon as its slot is published.
                if not acquire_ready:  # negative control: the slot read once, plain, not waited for
                    return decode_fifo_task(fifo_slots[uint32(ticket)], ticket, rows, n_tiles, counters) + (
                        int32(TICKET_NONE), a_done, c_unflushed)
                # acquire: what the task's producer wrote before publishing it is visible after this
                task = load_acquire_gpu(fifo_slots, ticket)
                if task != SLOT_EMPTY:
                    kind, index = decode_fifo_task(task, ticket, rows, n_tiles, counters)
                    following = int32(TICKET_NONE)
                    if kind != KIND_EXIT:  # the next ticket's round trip overlaps this task
                        following = cuda.atomic.add(counters, FIFO_HEAD, 1)
                    return kind, index, following, a_done, c_unflushed
            skip_slot = False
            if not a_done:
                # 2. claim the next producer tile (also while a reserved slot fills).
                a = cuda.atomic.add(counters, A_NEXT, claim)
                if a < n_tiles:
                    return int32(KIND_A), int32(a), ticket, a_done, c_unflushed
                cuda.atomic.add(counters, A_OVERSHOOT, 1)
                a_done = True
            if a_done and ticket == TICKET_EXHAUSTED:
                # 3. nothing left to claim: count this worker's finished C tiles with ONE
                # release add (the barrier after each C task ordered every thread's stores
                # before it), then leave once every worker has counted all of its own. A C
                # tile whose closing barrier is still ahead (c_waiting) is ordered first: a
                # no-task decision (KIND_SYNC) runs that barrier and comes back here.
                if c_waiting:
                    return int32(KIND_SYNC), int32(-1), ticket, a_done, c_unflushed
                if c_unflushed > 0:
                    atomic_add_release_gpu(counters, C_DONE, c_unflushed)
                    c_unflushed = int32(0)
                # Nothing left to claim: every A tile is claimed and every B/C task has a worker
                # holding its ticket, each of which runs it before it leaves, so the launch ends
                # only when every C tile is done. (``completion_wait``, a diagnostic build: also
                # wait here until c_done shows every C tile.)
                if not completion_wait or load_acquire_gpu(counters, C_DONE) >= n_tiles:
                    return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed
            # Nothing to run yet: only a waiting worker looks for another worker's error (a worker
            # that keeps finding work needs no exit signal), and only every ERROR_POLL_EVERY polls:
            # the look is one more dependent L2 round trip, which every poll would double the poll
            # period with, and so the delay before a freshly published task is seen.
            # (Unsigned remainder: a mask, without the sign fix-up of a signed ``%``.)
            if (uint32(polls) % uint32(ERROR_POLL_EVERY) == uint32(ERROR_POLL_EVERY - 1)
                    and load_relaxed_gpu(counters, ERROR_CODE) != 0):
                return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed
            backoff(polls)
            polls = int32(polls + 1)
            if polls > max_polls:
                if ticket >= 0:
                    record_error(counters, ERR_READY_TIMEOUT, -1, ticket)
                else:
                    record_error(counters, ERR_COMPLETION_TIMEOUT, -1, load_relaxed_gpu(counters, C_DONE))
                return int32(KIND_EXIT), int32(-1), ticket, a_done, c_unflushed

    return next_task


def _make_persistent_kernel(name, acquire_ready, publish_after_last, trace_build=False, max_registers=None,
                            fenced_barrier=True, completion_wait=False):
    """Build one compilation of the persistent kernel (closure constants select the variant).

    ``trace_build`` selects the trace build (:mod:`.tracing`); the performance build takes
    the same ``trace`` argument but its constant-false branches are pruned away.
    ``max_registers`` caps ptxas's register allocation (diagnostic builds only, see
    :func:`register_capped_kernel`).
    """
    next_task = _make_next_task(acquire_ready, completion_wait)
    TRACE = trace_build
    FENCED = fenced_barrier

    @cuda.jit(device=True, **KERNEL_OPTIONS)
    def block_then_grid_barrier(counters, workers, max_polls, which):
        """Every thread of the worker: its block's tasks done, then thread 0 at the grid barrier
        (:func:`grid_barrier`). Returns False when the barrier timed out (recorded): the worker leaves."""
        ok = cuda.shared.array(2, int32)
        if FENCED:
            cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            ok[which] = int32(grid_barrier(counters, workers, max_polls, which, FENCED))
        cuda.syncthreads()
        # One slot per barrier of the launch (which = 0, 1): no barrier is needed before the next one
        # rewrites it.
        return ok[which] != 0

    def kernel(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count,
               tile_max, tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots,
               paired_entries, max_polls, trace):
        partials = cuda.shared.array(TILE_WARPS, float32, alignment=PARTIALS_ALIGNMENT)
        tid = cuda.threadIdx.x
        # int32 counts, as the twin's ``int n_tiles, rows`` (< 2**31 here): the shapes are int64, and
        # every compare of an int32 index or claim with them was a 64-bit compare (thread 0's
        # ``a < n_tiles``, the task-id decode: three instructions on the decision chain instead of one).
        n_tiles = int32(tile_row.shape[0])
        rows = int32(row_first_tile.shape[0])

        if mode == MODE_PHASED or mode == MODE_PHASED_FLOOR:
            workers = int32(cuda.gridDim.x)
            # The floor runs the same launch and both grid barriers with no task: every loop
            # below starts past its end.
            first = int32(cuda.blockIdx.x) if mode == MODE_PHASED else int32(n_tiles)
            # Thread 0 prefetches this worker's next tile (t + workers) into L2, so its DRAM
            # read overlaps this tile's reductions; the metadata it needs for that (start,
            # length) was loaded one iteration earlier, so the prefetch never waits for a
            # load (not in the trace build).
            ahead_start = int64(0)
            ahead_len = int32(0)
            if not TRACE and tid == 0 and int32(first + workers) < n_tiles:
                ahead_start = tile_start[uint32(first + workers)]
                ahead_len = tile_len[uint32(first + workers)]
            # Grid-stride loops as while loops: ``range(start, stop, step)`` with a run-time step
            # computes its trip count with a 64-bit division, a libdevice call whose calling
            # convention costs registers in this register-bound kernel.
            t = first
            while t < n_tiles:
                if not TRACE and tid == 0:
                    ahead_start, ahead_len = prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values,
                                                                tile_start, tile_len, False)
                start = int64(0)
                if TRACE and tid == 0:
                    start = trace_now()
                if not FENCED and cuda.blockIdx.x % 2 == 1 and int32(t + workers) >= n_tiles:
                    pause_us(20)  # control: odd workers' last A tile lags the early arrivals
                task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials)
                if TRACE and tid == 0:
                    trace_record(trace, t, start)
                t = int32(t + workers)  # int32: Numba widens the sum, which would make t (and the loop) 64-bit
            # B is warp-level: one row per warp of the grid (a whole warp shares r). Its tiles (the
            # layout, which never changes) are read before the barrier, so that B after it waits for
            # one round trip (the tile summaries), not two.
            r = int32((cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x) >> 5)
            if mode == MODE_PHASED_FLOOR:
                r = int32(rows)
            warps = int32((cuda.gridDim.x * cuda.blockDim.x) >> 5)
            b_first = int32(0)
            b_count = int32(0)
            if r < rows:
                b_first = row_first_tile[uint32(r)]
                b_count = row_tile_count[uint32(r)]
            passed = block_then_grid_barrier(counters, workers, max_polls, 0)
            if not passed:
                return
            while r < rows:
                start = int64(0)
                if TRACE:
                    start = trace_now()
                task_b_of(r, b_first, b_count, tile_max, tile_sum, row_max, row_sum)
                if TRACE and tid % WARP_SIZE == 0:
                    trace_record(trace, n_tiles + r, start)
                r = int32(r + warps)
                if r < rows:
                    b_first = row_first_tile[uint32(r)]
                    b_count = row_tile_count[uint32(r)]
            # The first C tile's row, start and length, read before the barrier too: after it, its x
            # and the row's m and z are one round trip away. Each later tile's are read one tile ahead.
            c_row, c_start, c_len = c_step_metadata(first, n_tiles, tile_row, tile_start, tile_len)
            passed = block_then_grid_barrier(counters, workers, max_polls, 1)
            if not passed:
                return
            ahead_start = int64(0)
            ahead_len = int32(0)
            # C visits the tiles in descending order (step t, tile n_tiles - 1 - t): the tiles the
            # A pass read last are the ones still in L2 (C's loads and y's stores are evict-first).
            if not TRACE and tid == 0 and int32(first + workers) < n_tiles:
                ahead_start = tile_start[uint32(visit(int32(first + workers), n_tiles, True))]
                ahead_len = tile_len[uint32(visit(int32(first + workers), n_tiles, True))]
            # m and z of a worker's next tile are requested during the current one: its row, start
            # and length at the start, the row's m and z at the end (the grid barrier made them final).
            m = float32(0.0)
            z = float32(0.0)
            if first < n_tiles:
                m = row_max[c_row]
                z = row_sum[c_row]
            t = first
            while t < n_tiles:
                if not TRACE and tid == 0:
                    ahead_start, ahead_len = prefetch_next_tile(t, workers, n_tiles, ahead_start, ahead_len, values,
                                                                tile_start, tile_len, True)
                following = int32(t + workers)
                next_row, next_start, next_len = c_step_metadata(following, n_tiles, tile_row, tile_start, tile_len)
                start = int64(0)
                if TRACE and tid == 0:
                    start = trace_now()
                tile = visit(t, n_tiles, True)
                task_c_at(c_start, c_len, m, z, values, out)
                if TRACE:
                    cuda.syncthreads()
                    if tid == 0:
                        trace_record(trace, n_tiles + rows + tile, start)
                if following < n_tiles:
                    m = row_max[next_row]
                    z = row_sum[next_row]
                c_start = next_start
                c_len = next_len
                t = following
            return

        # ---- DAG mode ----
        # The worker is the reset's programmatic dependent (dag_launches): it may become resident while the
        # reset still runs, and waits here for the reset's writes, before its first access to the queue.
        wait_for_prerequisite_grid()
        if mode == MODE_DAG_FLOOR:
            return  # the floor: the reset and this launch, no task
        # Two (kind, index) slots, used alternately: thread 0 writes the next decision into one
        # while the other still holds the task being run, so one barrier per task suffices.
        ctrl = cuda.shared.array(4, int32)
        # Tiles per A claim and per C entry (queue.tiles_per_claim): two where every worker has at
        # least two, so a worker makes one scheduling decision per pair of A tiles and per pair of a
        # row's C tiles instead of one per tile.
        claim = int32(TILES_PER_CLAIM) if n_tiles >= TILES_PER_CLAIM * int32(cuda.gridDim.x) else int32(1)
        if not publish_after_last:
            # Negative control only: one tile per claim, so that the row's first arrival (which it lets
            # publish B) leaves the row's other tiles unfinished even with one worker.
            claim = int32(1)
        # This invocation's FIFO entries: every B and C tile once, or, with C entries of two tiles,
        # the host's count of them (layout.fifo_entries(2)).
        capacity = int32(fifo_slots.shape[0]) if claim == 1 else paired_entries
        # Thread 0's scheduling state lives in shared memory, not in registers: only thread 0 reads
        # it, at its decisions, but in registers it would be held by every thread of the block
        # through every task: at the 56-register bound the driver's compiler then spilled 8 bytes.
        state = cuda.shared.array(STATE_SLOTS, int32)
        if tid == 0:
            state[STATE_C_WAITING] = 0  # C tiles of the entry just run; their closing barrier is ahead
            state[STATE_C_UNFLUSHED] = 0  # finished C tiles, barrier passed, not yet added to c_done
            state[STATE_TICKET] = TICKET_NONE  # its FIFO slot (or the claim still in flight)
            state[STATE_A_DONE] = 0  # an A claim came back past the end
            state[STATE_SEEN_SLOT] = SEEN_NOTHING  # its ticket's slot, read (relaxed) as an A task starts
            ctrl[0] = KIND_SYNC  # a no-task first turn: every decision is made at one place, below
        cuda.syncthreads()
        current = uint32(0)  # the ctrl slot being read (unsigned: no negative-index code on ctrl)
        while True:
            kind = ctrl[uint32(2) * current]
            index = ctrl[uint32(2) * current + uint32(1)]
            if kind == KIND_EXIT:
                break
            start = int64(0)
            if TRACE:
                start = trace_now()
            c_tiles = int32(0)
            if kind == KIND_A:
                if not publish_after_last:
                    # Negative control only: hold back every tile but a row's first, so
                    # the B it publishes early reliably reads missing summaries (without
                    # this the race rarely shows: a row's A tiles run side by side).
                    if tid == 0 and index != row_first_tile[tile_row[index]]:
                        pause_us(50)
                    cuda.syncthreads()
                # The claim: tiles index .. a_end - 1, one or two (TILES_PER_CLAIM), run back to back.
                # (Each uint32 sum or product is cast back: Numba widens them to 64 bits, which made
                # the mins, the compares and the index math below 64-bit, with two selects per min.)
                a_end = min(uint32(uint32(index) + uint32(claim)), uint32(n_tiles))
                # The announcer (lane 0 of warp 1) asks for the tiles' rows now (two tiles span one
                # row or two): the loads complete during the tasks instead of before the arrival ...
                first_row = uint32(tile_row[uint32(index)]) if tid == TILE_ANNOUNCER else uint32(0)
                last_row = uint32(tile_row[uint32(a_end - uint32(1))]) if tid == TILE_ANNOUNCER else uint32(0)
                # ... and the span of the claim one round of claims later (index + claim * workers),
                # which it asks for in L2 after the tasks: A tiles are claimed in increasing order, so
                # that span's DRAM read overlaps the tasks in between (a hint: nothing is claimed).
                ahead = uint32(uint32(index) + uint32(uint32(claim) * uint32(cuda.gridDim.x)))
                ahead_start = int64(0)
                ahead_len = int32(0)
                if tid == TILE_ANNOUNCER and ahead < uint32(n_tiles):
                    ahead_last = uint32(min(uint32(ahead + uint32(claim)), uint32(n_tiles)) - uint32(1))
                    ahead_start = tile_start[ahead]
                    ahead_len = int32(tile_start[ahead_last] + tile_len[ahead_last] - ahead_start)
                # Thread 0 reads its ticket's slot now; the value is first used at the next
                # decision, so the load completes during the task: a 0 there lets that decision claim
                # the next A tiles with one round trip (the claim) instead of two (slot, then claim).
                if tid == 0 and state[STATE_TICKET] >= 0:
                    state[STATE_SEEN_SLOT] = load_relaxed_gpu(fifo_slots, state[STATE_TICKET])
                t = uint32(index)
                if uint32(a_end - t) == uint32(2):
                    # Both tiles' loads first, then each tile's arithmetic: the second tile's bytes
                    # arrive while the first is reduced, so a pair costs about one load latency, not two.
                    x_first = cuda.local.array(TILE_VALUES, float32)
                    x_second = cuda.local.array(TILE_VALUES, float32)
                    load_a_tile(t, values, tile_start, tile_len, x_first)
                    load_a_tile(t + uint32(1), values, tile_start, tile_len, x_second)
                    summarize_tile(t, x_first, tile_max, tile_sum, partials)
                    if TRACE and tid == TILE_ANNOUNCER:
                        trace_record(trace, t, start)
                        start = trace_now()
                    summarize_tile(t + uint32(1), x_second, tile_max, tile_sum, partials)
                    if TRACE and tid == TILE_ANNOUNCER:
                        trace_record(trace, t + uint32(1), start)
                else:
                    task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials)
                    if TRACE and tid == TILE_ANNOUNCER:
                        trace_record(trace, t, start)
                if tid == TILE_ANNOUNCER:
                    # It wrote the summaries itself, so its acq_rel arrivals release them (one add per
                    # row the claim touches); thread 0 meanwhile decides the next task (below): the two
                    # chains of dependent round trips overlap instead of following each other.
                    if first_row == last_row:
                        arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity,
                               first_row, int32(a_end - uint32(index)), publish_after_last)
                    else:
                        arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity,
                               first_row, int32(1), publish_after_last)
                        arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity,
                               last_row, int32(1), publish_after_last)
                    if ahead_len > 0:  # after the arrivals and any publish: the B they release comes first
                        prefetch_span_l2(values, ahead_start, ahead_len)
            elif kind == KIND_B:
                # Warp 0 runs B; its lane 0 (thread 0) writes row_max/row_sum. Lanes 1-31 read
                # tile summaries too: they do so after the broadcast barrier that follows thread
                # 0's acquire of the B task's slot, and acquire -> bar.sync orders those reads after
                # the producers' releases (causality order is transitive across scopes).
                if tid < WARP_SIZE:
                    task_b(index, row_first_tile, row_tile_count, tile_max, tile_sum,
                           row_max, row_sum)
                if tid == 0:
                    if TRACE:  # before its C tasks are published
                        trace_record(trace, n_tiles + index, start)
                    # The row's C tiles in entries of ``claim`` consecutive tiles (the last may be shorter).
                    publish_tasks(counters, fifo_slots, capacity,
                                  int32(rows + row_first_tile[uint32(index)]), row_tile_count[uint32(index)], claim)
            elif kind == KIND_C:
                # Every thread reads the row's m and z itself, after the broadcast barrier that
                # follows thread 0's acquire of the C entry's slot (acquire -> bar.sync orders
                # these reads after B's release); the tile_row -> m, z chain overlaps the
                # task's own loads instead of preceding the barrier on thread 0. An entry of two
                # tiles (claim 2) holds the tile after ``index`` too when that tile is in the same
                # row (entries start at the row's first tile, every second tile): both run back
                # to back with one decision.
                t = uint32(index)
                row = uint32(tile_row[t])
                # (The bound test's sum is cast back to uint32: Numba widens it, a 64-bit compare; the
                # load's index stays wide, an offset from tile_row[t]'s address.)
                pair = (claim == TILES_PER_CLAIM and uint32(t + uint32(1)) < uint32(n_tiles)
                        and uint32(tile_row[t + uint32(1)]) == row)
                # Both tiles' loads before either tile's arithmetic (x is in L2 or on its way there):
                # the second tile's latency overlaps the first's instead of following it.
                x_first = cuda.local.array(TILE_VALUES, float32)
                x_second = cuda.local.array(TILE_VALUES, float32)
                load_c_tile(t, values, tile_start, tile_len, x_first)
                if pair:
                    load_c_tile(t + uint32(1), values, tile_start, tile_len, x_second)
                m = row_max[row]
                z = row_sum[row]
                normalize_tile(t, x_first, m, z, tile_start, tile_len, out)
                if TRACE:  # the trace build ends a C task at a barrier, like the other schedulers
                    cuda.syncthreads()
                    if tid == 0:
                        trace_record(trace, n_tiles + rows + t, start)
                        start = trace_now()
                if pair:
                    normalize_tile(t + uint32(1), x_second, m, z, tile_start, tile_len, out)
                    if TRACE:
                        cuda.syncthreads()
                        if tid == 0:
                            trace_record(trace, n_tiles + rows + t + uint32(1), start)
                c_tiles = int32(2) if pair else int32(1)
            # (KIND_SYNC: no task; the barrier below orders the last C tile's stores.)
            if tid == 0:
                # C tiles run before the previous barrier are ordered now; those run just now are not.
                # (int32: Numba widens the sum to 64 bits, and next_task's ``c_unflushed > 0`` with it.)
                c_unflushed = int32(state[STATE_C_UNFLUSHED] + state[STATE_C_WAITING])
                c_waiting = c_tiles if kind == KIND_C else int32(0)
                decided_kind, decided_index, ticket, a_done, c_unflushed = next_task(
                    counters, fifo_slots, capacity, rows, n_tiles, max_polls, state[STATE_TICKET],
                    state[STATE_A_DONE] != 0, c_unflushed, c_waiting != 0, state[STATE_SEEN_SLOT], claim)
                state[STATE_C_WAITING] = c_waiting
                state[STATE_C_UNFLUSHED] = c_unflushed
                state[STATE_TICKET] = ticket
                state[STATE_A_DONE] = int32(a_done)
                state[STATE_SEEN_SLOT] = SEEN_NOTHING
                ctrl[uint32(2) * (uint32(1) - current)] = decided_kind
                ctrl[uint32(2) * (uint32(1) - current) + uint32(1)] = decided_index
            cuda.syncthreads()
            current = uint32(1) - current

    kernel.__name__ = kernel.__qualname__ = name
    # Launch bounds: ptxas keeps the kernel at <= 56 registers so that MIN_WORKERS_PER_SM workers fit
    # on an SM (the diagnostic builds with a register cap set their own limit instead).
    if max_registers is None:
        return bounded_kernel(kernel, TILE_THREADS, MIN_WORKERS_PER_SM)
    return cuda.jit(max_registers=max_registers, **KERNEL_OPTIONS)(kernel)


#: The performance kernel (registered): acquire on every FIFO slot, last producer publishes.
persistent_tiles = _make_persistent_kernel("persistent_tiles", acquire_ready=True,
                                           publish_after_last=True)

_trace_build = []


def persistent_trace_kernel():
    """The trace build of :data:`persistent_tiles` (compiled on first use; never timed)."""
    if not _trace_build:
        _trace_build.append(_make_persistent_kernel("persistent_tiles_trace", acquire_ready=True,
                                                    publish_after_last=True, trace_build=True))
    return _trace_build[0]


_capped_builds = {}


def completion_wait_kernel():
    """The performance kernel whose DAG workers also wait, before leaving, until ``c_done``
    shows every C tile (the earlier termination rule): a diagnostic build for the tiles probe."""
    if "completion_wait" not in _capped_builds:
        _capped_builds["completion_wait"] = _make_persistent_kernel(
            "persistent_tiles_completion_wait", acquire_ready=True, publish_after_last=True, completion_wait=True)
    return _capped_builds["completion_wait"]


def register_capped_kernel(max_registers):
    """The performance kernel compiled with ptxas's register cap ``max_registers``: more
    workers fit per SM, at the price of spills. A diagnostic build (``python -m bench probe tiles
    --register-caps``), never registered or used by the bench."""
    if max_registers not in _capped_builds:
        _capped_builds[max_registers] = _make_persistent_kernel(
            f"persistent_tiles_r{max_registers}", acquire_ready=True, publish_after_last=True,
            max_registers=max_registers)
    return _capped_builds[max_registers]


#: Negative controls: name -> (acquire_ready, publish_after_last, fenced_barrier). Tests only.
NEGATIVE_CONTROLS = {
    # DAG: reads its FIFO slot once, plain, without waiting for its publish (queue counters: an invalid task).
    "unacquired_slot_read": (False, True, True),
    # DAG: the FIRST finished A tile of a row publishes its B (oracle, traces); it claims one A tile at a time, so
    # that first arrival leaves the row's other tiles unfinished even with one worker.
    "first_producer_publishes_b": (True, False, True),
    # phased: thread 0 arrives at the grid barrier without release ordering and before its
    # block's tasks are done (odd workers' last A tile lags): B reads unfinished summaries (oracle).
    "barrier_arrive_without_fence": (True, True, False),
}
_control_kernels = {}


def negative_control_kernel(name, trace=False):
    """A separately compiled, deliberately broken persistent kernel (never for timing);
    ``trace=True`` gives its trace build (the trace checks must reject it)."""
    if name not in NEGATIVE_CONTROLS:
        raise ValueError(f"unknown negative control {name!r}; expected one of {sorted(NEGATIVE_CONTROLS)}")
    kernel = _control_kernels.get((name, trace))
    if kernel is None:
        acquire_ready, publish_after_last, fenced = NEGATIVE_CONTROLS[name]
        kernel = _control_kernels[(name, trace)] = _make_persistent_kernel(
            f"persistent_tiles_control_{name}{'_trace' if trace else ''}", acquire_ready,
            publish_after_last, trace_build=trace, fenced_barrier=fenced)
    return kernel


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def reset_queue(counters, row_arrivals, fifo_slots):
    """Every thread of the grid, grid-stride: counters = COUNTER_INITIAL, arrivals 0, slots -1 (empty)."""
    # Unsigned grid-stride while loops: ``range`` with a run-time step computes its trip count with a
    # 64-bit division call, and signed indices add negative-index wraparound code.
    i = uint32(cuda.blockIdx.x) * uint32(cuda.blockDim.x) + uint32(cuda.threadIdx.x)
    stride = uint32(cuda.gridDim.x) * uint32(cuda.blockDim.x)
    k = i
    while k < uint32(COUNTER_SLOTS):
        counters[k] = -1 if uint32(ERROR_TASK) <= k <= uint32(ERROR_WORKER) else 0
        k += stride
    k = i
    while k < uint32(row_arrivals.shape[0]):
        row_arrivals[k] = 0
        k += stride
    k = i
    while k < uint32(fifo_slots.shape[0]):
        fifo_slots[k] = SLOT_EMPTY
        k += stride


@cuda.jit(**KERNEL_OPTIONS)
def init_queue_kernel(counters, row_arrivals, fifo_slots):
    """Fresh DAG queue state (:func:`reset_queue`). It lets the worker launch behind it start at once
    (programmatic dependent launch): the workers' launch overlaps the reset, and each waits for the
    reset's writes before it touches the queue."""
    let_dependent_grid_launch()
    reset_queue(counters, row_arrivals, fifo_slots)


@cuda.jit(**KERNEL_OPTIONS)
def slow_init_queue_kernel(counters, row_arrivals, fifo_slots, delay_us):
    """Tests only: the reset, after ``delay_us`` microseconds, having let its dependent launch first: the
    DAG behind it must still be right (the workers wait for the reset's writes)."""
    let_dependent_grid_launch()
    pause_us(delay_us)
    reset_queue(counters, row_arrivals, fifo_slots)


# ---- launches ------------------------------------------------------------------------------

def persistent_args(mode, buffers, max_polls=DEFAULT_MAX_POLLS):
    """Argument tuple of :data:`persistent_tiles` (same order for every mode and variant)."""
    b = buffers
    return (int32(mode), b.values, b.out, b.tile_row, b.tile_start, b.tile_len,
            b.row_first_tile, b.row_tile_count, b.tile_max, b.tile_sum, b.row_max, b.row_sum,
            b.counters, b.row_arrivals, b.fifo_slots, int32(b.layout.fifo_entries(TILES_PER_CLAIM)),
            int32(max_polls), b.trace)


def init_queue_launch(buffers, delay_us=None):
    """The DAG's queue reset; ``delay_us`` (tests only): :func:`slow_init_queue_kernel` instead."""
    capacity = buffers.fifo_slots.shape[0]
    blocks = min(max(1, (capacity + BLOCK_THREADS - 1) // BLOCK_THREADS), INIT_MAX_BLOCKS)
    queue = (buffers.counters, buffers.row_arrivals, buffers.fifo_slots)
    if delay_us is not None:
        return KernelLaunch("slow_init_queue_kernel", slow_init_queue_kernel, (blocks,), (BLOCK_THREADS,),
                            (*queue, int32(delay_us)))
    return KernelLaunch("init_queue_kernel", init_queue_kernel, (blocks,), (BLOCK_THREADS,), queue)


def persistent_launch(label, mode, buffers, workers, kernel=None, max_polls=DEFAULT_MAX_POLLS):
    """The cooperative launch of the persistent kernel: its own grid barrier needs every worker
    resident (the launch checks the occupancy limit). In DAG modes it is the reset's programmatic
    dependent (it starts launching while the reset runs; the kernel waits for the reset's writes)."""
    return KernelLaunch(f"persistent_tiles[{label}]", kernel or persistent_tiles, (workers,), (TILE_THREADS,),
                        persistent_args(mode, buffers, max_polls), cooperative=True,
                        programmatic=mode in (MODE_DAG, MODE_DAG_FLOOR))


def phased_launches(buffers, workers, kernel=None, floor=False, max_polls=DEFAULT_MAX_POLLS):
    """One cooperative launch, mode 0 (no queue reset); ``floor``: the same with no tasks."""
    mode = MODE_PHASED_FLOOR if floor else MODE_PHASED
    return [persistent_launch("phased_floor" if floor else "phased", mode, buffers, workers, kernel, max_polls)]


def dag_launches(buffers, workers, max_polls=DEFAULT_MAX_POLLS, kernel=None, floor=False, reset_delay_us=None):
    """Queue reset, then the cooperative launch in mode 1; ``floor``: the same with no tasks;
    ``reset_delay_us`` (tests only): a reset that starts that late (:func:`slow_init_queue_kernel`)."""
    mode = MODE_DAG_FLOOR if floor else MODE_DAG
    return [init_queue_launch(buffers, reset_delay_us),
            persistent_launch("dag_floor" if floor else "dag", mode, buffers, workers, kernel, max_polls)]
