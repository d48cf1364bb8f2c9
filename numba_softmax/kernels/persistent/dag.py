"""The DAG mode of the persistent kernel: a dependency-driven task queue in global memory.

Thread 0 decides each task (:mod:`.decision`) and broadcasts ``(kind, index)`` through shared
memory, one block barrier per task, into the one of two slots the block is not reading. A claims
take two consecutive tiles where every worker has two, and run them back to back; the tile's
announcer (lane 0 of warp 1) makes the row arrivals, the last of which publishes B; B publishes
its row's C entries (two tiles each); C rereads its tile and writes y. Thread 0's scheduling
state lives in shared memory (int32[STATE_SLOTS]). The protocol: docs/experiment_b.md,
"The DAG's queue protocol".
"""

from numba import cuda, float32, int32, int64, uint32

from ...numerics import KERNEL_OPTIONS, WARP_SIZE
from ...queue import TILES_PER_CLAIM
from ..ordering import load_relaxed_gpu, wait_for_prerequisite_grid
from ..prefetch import prefetch_span_l2
from ..tiles import (TILE_ANNOUNCER, TILE_VALUES, load_a_tile, load_c_tile, normalize_tile, summarize_tile, task_a,
                     task_b)
from ..tracing import trace_now, trace_record
from .decision import (SEEN_NOTHING, STATE_A_DONE, STATE_C_UNFLUSHED, STATE_C_WAITING, STATE_SEEN_SLOT, STATE_SLOTS,
                       STATE_TICKET, TICKET_NONE)
from .modes import MODE_DAG_FLOOR
from .queue_ops import KIND_A, KIND_B, KIND_C, KIND_EXIT, KIND_SYNC, publish_tasks

# A C entry runs its first tile and at most the one after it (the ``pair`` of the DAG's C task), so a claim
# size other than 2 would publish entries the C task does not finish.
if TILES_PER_CLAIM != 2:
    raise ImportError(f"the DAG's C entries hold at most two tiles; queue.TILES_PER_CLAIM is {TILES_PER_CLAIM}")


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def claim_size(n_tiles):
    """Tiles per A claim and per C entry (``queue.tiles_per_claim``): two where every worker has at least
    two, so a worker makes one scheduling decision per pair of A tiles and per pair of a row's C tiles."""
    return int32(TILES_PER_CLAIM) if n_tiles >= TILES_PER_CLAIM * int32(cuda.gridDim.x) else int32(1)


def make_a_claim(trace_build, before_a_claim, arrive):
    """The DAG's A claim, tiles ``index`` .. (every thread of the worker): its tiles' summaries, then
    the announcer's row arrivals and its L2 prefetch of the claim one round later."""
    TRACE = trace_build

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def run_a_claim(index, claim, capacity, state, values, tile_row, tile_start, tile_len, row_first_tile,
                    row_tile_count, tile_max, tile_sum, counters, row_arrivals, fifo_slots, partials, n_tiles,
                    trace, start):
        tid = cuda.threadIdx.x
        before_a_claim(index, row_first_tile, tile_row)
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
                       first_row, int32(a_end - uint32(index)))
            else:
                arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity,
                       first_row, int32(1))
                arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity,
                       last_row, int32(1))
            if ahead_len > 0:  # after the arrivals and any publish: the B they release comes first
                prefetch_span_l2(values, ahead_start, ahead_len)

    return run_a_claim


def make_c_entry(trace_build):
    """The DAG's C entry at tile ``index`` (every thread of the worker): one tile, or two of one row.
    Returns the number of tiles it ran."""
    TRACE = trace_build

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def run_c_entry(index, claim, values, out, tile_row, tile_start, tile_len, row_max, row_sum, n_tiles, rows,
                    trace, start):
        tid = cuda.threadIdx.x
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
        return int32(2) if pair else int32(1)

    return run_c_entry


def make_dag_worker(trace_build, next_task, claim_size, before_a_claim, arrive):
    """The DAG mode's worker (every thread ``tid`` of a block): ``trace_build`` a closure constant, the others
    device functions: thread 0's decision, the tiles per claim (``claim_size(n_tiles)``),
    ``before_a_claim(index, row_first_tile, tile_row)`` (a no-op but in a control) and the row arrival."""
    TRACE = trace_build
    run_a_claim = make_a_claim(trace_build, before_a_claim, arrive)
    run_c_entry = make_c_entry(trace_build)

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def dag_worker(mode, values, out, tile_row, tile_start, tile_len, row_first_tile, row_tile_count, tile_max,
                   tile_sum, row_max, row_sum, counters, row_arrivals, fifo_slots, paired_entries,
                   max_polls, trace, partials, tid, n_tiles, rows):
        # The worker is the reset's programmatic dependent (dag_launches): it may become resident while the
        # reset still runs, and waits here for the reset's writes, before its first access to the queue.
        wait_for_prerequisite_grid()
        if mode == MODE_DAG_FLOOR:
            return  # the floor: the reset and this launch, no task
        # Two (kind, index) slots, used alternately: thread 0 writes the next decision into one
        # while the other still holds the task being run, so one barrier per task suffices.
        ctrl = cuda.shared.array(4, int32)
        claim = claim_size(n_tiles)  # tiles per A claim and per C entry
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
                run_a_claim(index, claim, capacity, state, values, tile_row, tile_start, tile_len, row_first_tile,
                            row_tile_count, tile_max, tile_sum, counters, row_arrivals, fifo_slots, partials,
                            n_tiles, trace, start)
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
                c_tiles = run_c_entry(index, claim, values, out, tile_row, tile_start, tile_len, row_max, row_sum,
                                      n_tiles, rows, trace, start)
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

    return dag_worker
