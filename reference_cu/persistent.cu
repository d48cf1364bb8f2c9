// persistent.cu -- numba_softmax/kernels/persistent/: the persistent worker kernel
// (phased and DAG modes, one compiled kernel, mode is a runtime argument) and the queue
// init kernel. Same queue/counter layout, error codes, task ids and acquire/release rules.
//
//   persistent_tiles(int32 mode, const float* values, float* out, const int32* tile_row,
//                    const int64* tile_start, const int32* tile_len, const int32* row_first_tile,
//                    const int32* row_tile_count, float* tile_max, float* tile_sum,
//                    float* row_max, float* row_sum, int32* counters, int32* row_arrivals,
//                    int32* fifo_slots, int32 paired_entries, int32 max_polls,
//                    int32 n_tiles, int32 rows, int32 fifo_capacity, int64 n_values)
//       The first 17 arguments mean what the Numba kernel's do (same order; its 18th, the
//       trace array, is untouched by its performance build and has no counterpart here); the Numba
//       kernel reads n_tiles, rows and fifo_capacity from tile_row.shape[0],
//       row_first_tile.shape[0] and fifo_slots.shape[0]; here they are passed, and n_values
//       (values.shape[0]) bounds the L2 prefetches (phased: a worker's next tile; DAG: the claim one round of
//       claims later, index + claim * workers).
//       grid (workers,), block (128,), COOPERATIVE launch in both modes (phased uses a grid
//       barrier; workers <= the cooperative occupancy limit).
//   init_queue_kernel(int32* counters, int32* row_arrivals, int32* fifo_slots,
//                     int32 rows, int32 fifo_capacity)
//       grid (min(ceil(fifo_capacity/256), 1024),), block (256,), grid-stride:
//       counters = 0 except error_task/error_waited_on/error_worker = -1, row_arrivals = 0,
//       fifo_slots = -1 (SLOT_EMPTY: a slot is its own ready flag until a release stores its task id).
//
// counters[COUNTER_SLOTS] (int32 words): a_next, fifo_head, fifo_tail, c_done at words 0, 32, 64,
// 96 (one 128-byte line each: every task touches them), then error_code, error_task,
// error_waited_on, error_worker, a_overshoot, head_overshoot at words 128..133; the words in
// between are padding and stay 0 (numba_softmax/queue.py: COUNTER_INDEX). Claims are tickets (atomicAdd); a ticket past the
// end is counted in the overshoot words, so a_next == k * (ceil(n_tiles / k) + a_overshoot) (k tiles per
// A claim and per C entry: TILES_PER_CLAIM = 2 where n_tiles >= 2 * workers, else 1) and
// fifo_head - head_overshoot == fifo_tail == the entries (rows + n_tiles, or paired_entries for k = 2)
// after a complete run.
// FIFO task id r < rows is B(r); rows + t is C(t) (with k = 2: tiles t and t + 1 where t + 1 is in t's row;
// a row's entries start at its first tile, every k-th tile). Errors: 1 slot never published (a ticket
// held past max_polls), 2 no work and C not complete, 3 invalid task id, 4 FIFO overflow
// (first error wins).

#include "ordering.cuh"
#include "tiles.cuh"


enum { MODE_PHASED = 0, MODE_DAG = 1, MODE_PHASED_FLOOR = 2, MODE_DAG_FLOOR = 3 };
enum {
    COUNTER_LINE_WORDS = 32,
    A_NEXT = 0 * COUNTER_LINE_WORDS,
    FIFO_HEAD = 1 * COUNTER_LINE_WORDS,
    FIFO_TAIL = 2 * COUNTER_LINE_WORDS,
    C_DONE = 3 * COUNTER_LINE_WORDS,
    ERROR_CODE = 4 * COUNTER_LINE_WORDS,
    ERROR_TASK = ERROR_CODE + 1,
    ERROR_WAITED_ON = ERROR_CODE + 2,
    ERROR_WORKER = ERROR_CODE + 3,
    A_OVERSHOOT = ERROR_CODE + 4,
    HEAD_OVERSHOOT = ERROR_CODE + 5,
    GRID_BARRIER = 5 * COUNTER_LINE_WORDS,
    COUNTER_SLOTS = GRID_BARRIER + 1
};
enum { ERR_NONE = 0, ERR_READY_TIMEOUT = 1, ERR_COMPLETION_TIMEOUT = 2, ERR_INVALID_TASK = 3, ERR_FIFO_OVERFLOW = 4,
       ERR_BARRIER_TIMEOUT = 5 };
enum { KIND_EXIT = 0, KIND_A = 1, KIND_B = 2, KIND_C = 3, KIND_SYNC = 4 };
// A tiles per DAG claim where every worker has at least this many (numba_softmax/queue.py: TILES_PER_CLAIM).
enum { TILES_PER_CLAIM = 2 };

struct Decision {
    int kind;
    int index;
    int ticket;  // thread 0's FIFO ticket carried to the next decision (TICKET_NONE, TICKET_EXHAUSTED, a slot,
                 // or a claim past the capacity, counted at the next decision)
};

// ---- queue helpers (thread 0 only) --------------------------------------------------------

// A waiting worker looks for another worker's error once per this many polls.
constexpr int ERROR_POLL_EVERY = 32;

// First error wins: CAS error_code from 0, then record the details.
__device__ __forceinline__ void record_error(int* counters, int code, int task, int waited_on) {
    if (atomicCAS(&counters[ERROR_CODE], 0, code) == 0) {
        counters[ERROR_TASK] = task;
        counters[ERROR_WAITED_ON] = waited_on;
        counters[ERROR_WORKER] = blockIdx.x;
    }
}

// Publish tasks first_task, first_task + step, ... (ceil(count / step) FIFO entries: a C entry holds
// step tiles): reserve the slots with one atomic add, then release them: a slot is its own ready
// flag (SLOT_EMPTY until published), and one fence.acq_rel.gpu followed by relaxed stores of the task
// ids is a release pattern for each slot.
// Slots past the capacity (this invocation's entries) are not written; the first one is recorded (error 4).
__device__ __forceinline__ void publish_tasks(int* counters, int* fifo_slots, int capacity,
                                              int first_task, int count, int step) {
    const int entries = (int)((unsigned)(count + step - 1) / (unsigned)step);
    const int slot = atomicAdd(&counters[FIFO_TAIL], entries);
    fence_acq_rel_gpu();
    for (int k = 0; k < entries; ++k) {
        if (slot + k < capacity) {
            store_relaxed_gpu(&fifo_slots[slot + k], first_task + k * step);
        }
    }
    if (slot + entries > capacity) {
        const int first_over = max(slot, capacity);
        record_error(counters, ERR_FIFO_OVERFLOW, first_task + (first_over - slot) * step, first_over);
    }
}

// FIFO task id -> (kind, index); an invalid id records error 3. The ticket is spent.
__device__ __forceinline__ Decision decode_fifo_task(int task, int slot, int rows, int n_tiles, int* counters) {
    if (task >= 0 && task < rows) {
        return Decision{KIND_B, task, -1};
    }
    if (task >= rows && task < rows + n_tiles) {
        return Decision{KIND_C, task - rows, -1};
    }
    record_error(counters, ERR_INVALID_TASK, task, slot);
    return Decision{KIND_EXIT, -1, -1};
}

// Phased mode, thread 0, at the start of tile t: prefetch tile t + workers into L2 from the
// metadata loaded one iteration ago, and load that of tile t + 2 workers for the next iteration
// (it arrives during this task).
// A descending pass visits tile n_tiles - 1 - t at step t.
__device__ __forceinline__ long long visit(long long t, int n_tiles, bool descending) {
    return descending ? n_tiles - 1 - t : t;
}

__device__ __forceinline__ void prefetch_next_tile(int t, int workers, long long& ahead_start, int& ahead_len,
                                                   const float* values, long long n_values,
                                                   const long long* tile_start, const int* tile_len, int n_tiles,
                                                   bool descending) {
    if ((long long)t + workers < n_tiles) {
        prefetch_span_l2(values, n_values, ahead_start, ahead_len);
    }
    const long long after = (long long)t + 2LL * workers;
    ahead_start = after < n_tiles ? tile_start[visit(after, n_tiles, descending)] : 0;
    ahead_len = after < n_tiles ? tile_len[visit(after, n_tiles, descending)] : 0;
}

// Thread 0's ticket besides a slot index: none (take one at the next decision), or exhausted
// (a ticket came back past the capacity: every B/C task has a consumer).
enum { TICKET_NONE = -1, TICKET_EXHAUSTED = -2 };
// Thread 0's scheduling state between decisions (DAG mode), slots of a shared int array.
#define STATE_C_WAITING 0
#define STATE_C_UNFLUSHED 1
#define STATE_TICKET 2
#define STATE_A_DONE 3
#define STATE_SEEN_SLOT 4
#define STATE_SLOTS 5
// A FIFO slot not yet published (the reset's value; task ids are >= 0), and thread 0's view of its
// ticket's slot when it did not read it during the task just run (never a slot's value).
enum { SLOT_EMPTY = -1, SEEN_NOTHING = -2 };

// The announcer, after n A tiles of row whose summaries it wrote: one acq_rel add to the row's
// arrivals releases them; the arrival that completes the row publishes B(row).
__device__ __forceinline__ void arrive(int* row_arrivals, const int* row_tile_count, int* counters, int* fifo_slots,
                                       int capacity, int row, int n) {
    const int old = atomic_add_acq_rel_gpu(&row_arrivals[row], n);
    if (old + n == row_tile_count[row]) {  // the LAST producer publishes B
        publish_tasks(counters, fifo_slots, capacity, row, 1, 1);
    }
}

// Thread 0's scheduling decision. Claims are tickets (one atomicAdd each, which always
// succeeds), never CAS loops. A worker holds at most one FIFO ticket; while its slot is
// reserved but not yet published it claims A tiles, so every ticketed slot is eventually
// served. The next ticket is requested the moment a consumer task is decided (its atomicAdd
// completes while the task runs; a ticket past the end is counted at the next decision); the
// slot is its own ready flag (written once from SLOT_EMPTY with release: one acquire load finds the
// task); claims are not preceded by relaxed polls. A claim past the end is counted in a_overshoot / head_overshoot once per
// worker. c_unflushed: this worker's finished C tiles not yet added to c_done (one release add
// for all of them once nothing is left to claim). seen_slot: the ticket's slot as read (relaxed)
// when the A task just run started; SLOT_EMPTY there claims the next A tile without reading it again.
__device__ __forceinline__ Decision next_task(int* counters, int* fifo_slots, int rows, int n_tiles,
                                              int capacity, int max_polls, int ticket, bool& a_done,
                                              int& c_unflushed, bool c_waiting, int seen_slot, int claim) {
    if (ticket == TICKET_NONE) {
        ticket = atomicAdd(&counters[FIFO_HEAD], 1);
    }
    if (ticket >= capacity) {
        atomicAdd(&counters[HEAD_OVERSHOOT], 1);
        ticket = TICKET_EXHAUSTED;
    }
    bool skip_slot = seen_slot == SLOT_EMPTY && !a_done;  // first pass only
    int polls = 0;
    while (true) {
        if (ticket >= 0 && !skip_slot) {
            // 1. the consumer (B or C) is preferred as soon as its slot is published.
            const int task = load_acquire_gpu(&fifo_slots[ticket]);
            if (task != SLOT_EMPTY) {
                Decision d = decode_fifo_task(task, ticket, rows, n_tiles, counters);
                if (d.kind != KIND_EXIT) {  // the next ticket's round trip overlaps this task
                    d.ticket = atomicAdd(&counters[FIFO_HEAD], 1);
                }
                return d;
            }
        }
        skip_slot = false;
        if (!a_done) {
            // 2. claim the next producer tile (also while a reserved slot fills).
            const int a = atomicAdd(&counters[A_NEXT], claim);
            if (a < n_tiles) {
                return Decision{KIND_A, a, ticket};
            }
            atomicAdd(&counters[A_OVERSHOOT], 1);
            a_done = true;
        }
        if (a_done && ticket == TICKET_EXHAUSTED) {
            // 3. nothing left to claim: count this worker's finished C tiles, then leave once
            // every worker has counted all of its own. A C tile whose closing barrier is still
            // ahead is ordered first (KIND_SYNC: one more barrier, then back here).
            if (c_waiting) {
                return Decision{KIND_SYNC, -1, ticket};
            }
            if (c_unflushed > 0) {
                atomic_add_release_gpu(&counters[C_DONE], c_unflushed);
                c_unflushed = 0;
            }
            // Nothing left to claim: every remaining B/C task is held by a live worker's ticket,
            // so the launch ends only when every C tile is done.
            return Decision{KIND_EXIT, -1, ticket};
        }
        // Nothing to run yet: only a waiting worker looks for another worker's error, once per
        // ERROR_POLL_EVERY polls (the look is one more dependent L2 round trip per poll).
        if (polls % ERROR_POLL_EVERY == ERROR_POLL_EVERY - 1 && load_relaxed_gpu(&counters[ERROR_CODE]) != 0) {
            return Decision{KIND_EXIT, -1, ticket};
        }
        backoff(polls);
        polls += 1;
        if (polls > max_polls) {
            if (ticket >= 0) {
                record_error(counters, ERR_READY_TIMEOUT, -1, ticket);
            } else {
                record_error(counters, ERR_COMPLETION_TIMEOUT, -1, load_relaxed_gpu(&counters[C_DONE]));
            }
            return Decision{KIND_EXIT, -1, ticket};
        }
    }
}

// Phased mode: the row, start and length of the tile the descending C pass visits at `step` (zeros past the last
// step), as numba_softmax/kernels/persistent/phased.py's c_step_metadata.
__device__ __forceinline__ void c_step_metadata(long long step, int n_tiles, const int* tile_row,
                                                const long long* tile_start, const int* tile_len, int& row,
                                                long long& start, int& len) {
    row = 0;
    start = 0;
    len = 0;
    if (step < n_tiles) {
        const long long k = visit(step, n_tiles, true);
        row = tile_row[k];
        start = tile_start[k];
        len = tile_len[k];
    }
}

// The persistent kernel's own grid barrier (numba_softmax/kernels/persistent/barrier.py grid_barrier):
// flat, one self-resetting word (the first participant adds 2^31 - (n - 1), the others 1, so the
// top bit flips exactly when the last of n arrives). Every worker arrives with a release add (no
// fence before it); the last arrival makes one acquire load, every other worker polls with acquire
// loads, once its add has returned, until the top bit flips against the add's old value.
__device__ __forceinline__ int flip_add(bool first, int participants) {
    return first ? (int)(0x80000000u - (unsigned)(participants - 1)) : 1;
}
__device__ __forceinline__ bool flipped(int before, int after) { return ((before ^ after) & (int)0x80000000) != 0; }

__device__ bool block_then_grid_barrier(int* counters, int workers, int max_polls, int which) {
    __shared__ int ok[2];
    __syncthreads();
    if (threadIdx.x == 0) {
        const int add = flip_add(blockIdx.x == 0, workers);
        const int old = atomic_add_release_gpu(&counters[GRID_BARRIER], add);
        ok[which] = 1;
        if (flipped(old, (int)((unsigned)old + (unsigned)add))) {
            load_acquire_gpu(&counters[GRID_BARRIER]);  // the last arrival: acquire every other's
        } else {
            int polls = 0;
            while (true) {
                const int now = load_acquire_gpu(&counters[GRID_BARRIER]);
                if (flipped(old, now)) break;
                polls += 1;
                if (polls > max_polls) {
                    record_error(counters, ERR_BARRIER_TIMEOUT, which, now);
                    ok[which] = 0;
                    break;
                }
                if (polls > 4096) backoff(polls - 4096);
            }
        }
    }
    __syncthreads();
    // One slot per barrier of the launch: no barrier is needed before the next one rewrites it.
    return ok[which] != 0;
}

// Launch bounds as in numba_softmax/kernels/persistent/kernel.py (MIN_WORKERS_PER_SM): at most 56 registers,
// so that 9 workers of 128 threads fit on an SM.
#define MIN_WORKERS_PER_SM 9

extern "C" __global__ void __launch_bounds__(TILE_THREADS, MIN_WORKERS_PER_SM) persistent_tiles(int mode, const float* values, float* out, const int* tile_row,
                                            const long long* tile_start, const int* tile_len,
                                            const int* row_first_tile, const int* row_tile_count, float* tile_max,
                                            float* tile_sum, float* row_max, float* row_sum, int* counters,
                                            int* row_arrivals, int* fifo_slots, int paired_entries,
                                            int max_polls, int n_tiles, int rows, int fifo_capacity,
                                            long long n_values) {
    __shared__ float partials[TILE_WARPS];
    const int tid = threadIdx.x;

    if (mode == MODE_PHASED || mode == MODE_PHASED_FLOOR) {
        const int workers = gridDim.x;
        // The floor: the same launch and both barriers, no task.
        const int first_tile = mode == MODE_PHASED ? (int)blockIdx.x : n_tiles;
        // Thread 0 prefetches the worker's next tile (t + workers) from metadata loaded one
        // iteration earlier, so the prefetch never waits for a load.
        long long ahead_start = 0;
        int ahead_len = 0;
        if (tid == 0 && (long long)first_tile + workers < n_tiles) {
            ahead_start = tile_start[first_tile + workers];
            ahead_len = tile_len[first_tile + workers];
        }
        for (int t = first_tile; t < n_tiles; t += workers) {
            if (tid == 0) {
                prefetch_next_tile(t, workers, ahead_start, ahead_len, values, n_values, tile_start, tile_len, n_tiles,
                                   false);
            }
            task_a(t, values, tile_start, tile_len, tile_max, tile_sum, partials);
        }
        // B is warp-level: one row per warp of the grid. Its tiles (the layout) are read before the barrier,
        // so that B after it waits for one round trip (the tile summaries), not two.
        const long long first = mode == MODE_PHASED ? ((long long)blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE
                                                    : (long long)rows;
        const long long stride = (long long)gridDim.x * blockDim.x / WARP_SIZE;
        int b_first = 0;
        int b_count = 0;
        if (first < rows) {
            b_first = row_first_tile[first];
            b_count = row_tile_count[first];
        }
        if (!block_then_grid_barrier(counters, workers, max_polls, 0)) return;
        for (long long r = first; r < rows; r += stride) {
            task_b_of((int)r, b_first, b_count, tile_max, tile_sum, row_max, row_sum);
            if (r + stride < rows) {
                b_first = row_first_tile[r + stride];
                b_count = row_tile_count[r + stride];
            }
        }
        // The first C tile's row, start and length, read before the barrier too; each later tile's one
        // tile ahead.
        int c_row;
        long long c_start;
        int c_len;
        c_step_metadata(first_tile, n_tiles, tile_row, tile_start, tile_len, c_row, c_start, c_len);
        if (!block_then_grid_barrier(counters, workers, max_polls, 1)) return;
        // C visits the tiles in descending order (step t, tile n_tiles - 1 - t): the tiles the A
        // pass read last are the ones still in L2.
        ahead_start = 0;
        ahead_len = 0;
        if (tid == 0 && (long long)first_tile + workers < n_tiles) {
            ahead_start = tile_start[visit((long long)first_tile + workers, n_tiles, true)];
            ahead_len = tile_len[visit((long long)first_tile + workers, n_tiles, true)];
        }
        // m and z of the worker's next tile are requested during the current one: its row, start and
        // length at the start, the row's m and z at the end.
        float m = 0.0f;
        float z = 0.0f;
        if (first_tile < n_tiles) {
            m = row_max[c_row];
            z = row_sum[c_row];
        }
        for (int t = first_tile; t < n_tiles; t += workers) {
            if (tid == 0) {
                prefetch_next_tile(t, workers, ahead_start, ahead_len, values, n_values, tile_start, tile_len, n_tiles,
                                   true);
            }
            const long long following = (long long)t + workers;
            int next_row;
            long long next_start;
            int next_len;
            c_step_metadata(following, n_tiles, tile_row, tile_start, tile_len, next_row, next_start, next_len);
            task_c_at(c_start, c_len, m, z, values, out);
            if (following < n_tiles) {
                m = row_max[next_row];
                z = row_sum[next_row];
            }
            c_start = next_start;
            c_len = next_len;
        }
        return;
    }

    // ---- DAG mode ----
    // The reset's programmatic dependent: it may be resident before the reset ends; the queue after this.
    wait_for_prerequisite_grid();
    if (mode == MODE_DAG_FLOOR) return;  // the floor: the reset and this launch, no task
    // Two (kind, index) slots, used alternately: one barrier per task.
    __shared__ int ctrl[4];
    __shared__ long long ahead_span[2];  // the announcer's: start and length of the span it prefetches after a claim
    // Thread 0's scheduling state, in shared memory as in the Numba kernel: in registers every thread would
    // hold it through every task.
    __shared__ int state[STATE_SLOTS];
    // Tiles per A claim and per C entry: two where every worker has at least two (one decision per pair).
    const int claim = n_tiles >= TILES_PER_CLAIM * (int)gridDim.x ? TILES_PER_CLAIM : 1;
    // This invocation's FIFO entries: every B and C tile once, or with C entries of two tiles the host's count.
    const int capacity = claim == 1 ? fifo_capacity : paired_entries;
    if (tid == 0) {
        state[STATE_C_WAITING] = 0;  // C tiles of the entry just run; their closing barrier is ahead
        state[STATE_C_UNFLUSHED] = 0;  // finished C tiles, barrier passed, not yet added to c_done
        state[STATE_TICKET] = TICKET_NONE;  // its FIFO slot (or the claim still in flight)
        state[STATE_A_DONE] = 0;  // an A claim came back past the end
        state[STATE_SEEN_SLOT] = SEEN_NOTHING;  // its ticket's slot, read (relaxed) as an A task starts
        ctrl[0] = KIND_SYNC;  // a no-task first turn: every decision is made at one place, below
    }
    __syncthreads();
    int current = 0;
    while (true) {
        const int kind = ctrl[2 * current];
        const int index = ctrl[2 * current + 1];
        if (kind == KIND_EXIT) {
            break;
        }
        int c_tiles = 0;
        if (kind == KIND_A) {
            // The claim: tiles index .. a_end - 1 (one or two), run back to back.
            const unsigned a_end = min((unsigned)index + (unsigned)claim, (unsigned)n_tiles);
            // The announcer (lane 0 of warp 1) asks for the tiles' rows now (one row or two); after the
            // tasks it releases the summaries it wrote while thread 0 decides the next task ...
            const int first_row = tid == TILE_ANNOUNCER ? tile_row[index] : 0;
            const int last_row = tid == TILE_ANNOUNCER ? tile_row[a_end - 1] : 0;
            // ... and the span of the claim one round of claims later, asked for in L2 after the tasks.
            const unsigned ahead = (unsigned)index + (unsigned)claim * gridDim.x;
            long long ahead_start = 0;
            int ahead_len = 0;
            if (tid == TILE_ANNOUNCER && ahead < (unsigned)n_tiles) {
                const unsigned ahead_last = min(ahead + (unsigned)claim, (unsigned)n_tiles) - 1;
                ahead_start = tile_start[ahead];
                ahead_len = (int)(tile_start[ahead_last] + tile_len[ahead_last] - ahead_start);
            }
            // Kept in shared memory across the tasks, not in registers as the Numba kernel does: with a pair's 16
            // values live, ptxas spilled 8 bytes of this kernel at its 56-register bound (the Numba build fits).
            if (tid == TILE_ANNOUNCER) {
                ahead_span[0] = ahead_start;
                ahead_span[1] = ahead_len;
            }
            // Thread 0 reads its ticket's slot now; the value is first used at the next decision.
            if (tid == 0 && state[STATE_TICKET] >= 0) {
                state[STATE_SEEN_SLOT] = load_relaxed_gpu(&fifo_slots[state[STATE_TICKET]]);
            }
            if (a_end - (unsigned)index == 2) {
                // Both tiles' loads first, then each tile's arithmetic: the second tile's bytes arrive while
                // the first is reduced, so a pair costs about one load latency, not two.
                float x_first[TILE_QUADS * 4], x_second[TILE_QUADS * 4];
                load_a_tile(index, values, tile_start, tile_len, x_first);
                load_a_tile(index + 1, values, tile_start, tile_len, x_second);
                summarize_tile(index, x_first, tile_max, tile_sum, partials);
                summarize_tile(index + 1, x_second, tile_max, tile_sum, partials);
            } else {
                task_a(index, values, tile_start, tile_len, tile_max, tile_sum, partials);
            }
            if (tid == TILE_ANNOUNCER) {
                if (first_row == last_row) {
                    arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity, first_row,
                           (int)(a_end - (unsigned)index));
                } else {
                    arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity, first_row, 1);
                    arrive(row_arrivals, row_tile_count, counters, fifo_slots, capacity, last_row, 1);
                }
                if (ahead_span[1] > 0) {  // after the arrivals and any publish: the B they release comes first
                    prefetch_span_l2(values, n_values, ahead_span[0], (int)ahead_span[1]);
                }
            }
        } else if (kind == KIND_B) {
            // Warp 0 runs B (lanes 1-31 read summaries after thread 0's acquire + the barrier).
            if (tid < WARP_SIZE) {
                task_b(index, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum);
            }
            if (tid == 0) {
                // The row's C tiles in entries of claim consecutive tiles (the last may be shorter).
                publish_tasks(counters, fifo_slots, capacity, rows + row_first_tile[index],
                              row_tile_count[index], claim);
            }
        } else if (kind == KIND_C) {
            // Every thread reads m and z after the barrier that follows thread 0's acquire.
            const int row = tile_row[index];
            // An entry of two tiles (claim 2) holds the tile after index too when it is in the same row.
            const bool pair = claim == 2 && (unsigned)index + 1 < (unsigned)n_tiles && tile_row[index + 1] == row;
            // Both tiles' loads before either tile's arithmetic: the second's latency overlaps the first's.
            float x_first[TILE_QUADS * 4], x_second[TILE_QUADS * 4];
            load_c_tile(index, values, tile_start, tile_len, x_first);
            if (pair) {
                load_c_tile(index + 1, values, tile_start, tile_len, x_second);
            }
            const float m = row_max[row];
            const float z = row_sum[row];
            normalize_tile(index, x_first, m, z, tile_start, tile_len, out);
            if (pair) {
                normalize_tile(index + 1, x_second, m, z, tile_start, tile_len, out);
            }
            c_tiles = pair ? 2 : 1;
        }
        // (KIND_SYNC: no task; the barrier below orders the last C tile's stores.)
        if (tid == 0) {
            // C tiles run before the previous barrier are ordered now; those run just now are not.
            int c_unflushed = state[STATE_C_UNFLUSHED] + state[STATE_C_WAITING];
            const int c_waiting = kind == KIND_C ? c_tiles : 0;
            bool a_done = state[STATE_A_DONE] != 0;
            const Decision d = next_task(counters, fifo_slots, rows, n_tiles, capacity, max_polls,
                                         state[STATE_TICKET], a_done, c_unflushed, c_waiting != 0,
                                         state[STATE_SEEN_SLOT], claim);
            state[STATE_C_WAITING] = c_waiting;
            state[STATE_C_UNFLUSHED] = c_unflushed;
            state[STATE_TICKET] = d.ticket;
            state[STATE_A_DONE] = a_done;
            state[STATE_SEEN_SLOT] = SEEN_NOTHING;
            ctrl[2 * (1 - current)] = d.kind;
            ctrl[2 * (1 - current) + 1] = d.index;
        }
        __syncthreads();
        current = 1 - current;
    }
}

extern "C" __global__ void init_queue_kernel(int* counters, int* row_arrivals, int* fifo_slots,
                                             int rows, int fifo_capacity) {
    let_dependent_grid_launch();  // the workers' launch overlaps the reset; they wait for its writes
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long k = i; k < COUNTER_SLOTS; k += stride) {
        counters[k] = (k >= ERROR_TASK && k <= ERROR_WORKER) ? -1 : 0;
    }
    for (long long k = i; k < rows; k += stride) {
        row_arrivals[k] = 0;
    }
    for (long long k = i; k < fifo_capacity; k += stride) {
        fifo_slots[k] = SLOT_EMPTY;
    }
}
