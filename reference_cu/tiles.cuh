// tiles.cuh -- the Experiment B task helpers A/B/C of numba_softmax/kernels/tiles.py.
//
// ONE copy shared by every scheduler (tiles.cu: separate kernels; persistent.cu: phased and
// DAG modes). Packed layout (numba_softmax.tiled.build_layout):
//   values      float32[total]     rows back to back
//   tile_start  int64[n_tiles]     offset of tile t in values
//   tile_len    int32[n_tiles]     <= 1024 (256 threads x 4 values in registers)
//   tile_row    int32[n_tiles]     row of tile t
//   row_first_tile, row_tile_count int32[rows]
// A tile follows the row ownership rule (numerics.cuh) on a block of TILE_THREADS = 128
// threads: thread i owns the quads at 4i and 4(i + 128) and folds them in increasing order;
// aligned tiles (start and length multiples of 4) move each quad with one 16-byte load/store,
// others element by element (same values, same bits). B is warp-level: lanes load a row's tile
// summaries in parallel, every lane folds the terms in tile order. Masked elements are NEG_INF:
// max identity, exp(-inf - m) = +0 adds nothing.
#pragma once

#include "numerics.cuh"
#include "prefetch.cuh"

#define TILE_THREADS 128
#define TILE_WARPS (TILE_THREADS / WARP_SIZE)
#define TILE_QUADS 2
#define TILE_BLOCKS_PER_SM_WAVE (2048 / TILE_THREADS)
// The thread that writes an A tile's summary (lane 0 of warp 1; tiles.py: TILE_ANNOUNCER).
#define TILE_ANNOUNCER WARP_SIZE

__device__ __forceinline__ bool tile_is_aligned(long long start, int n) { return (start & 3) == 0 && (n & 3) == 0; }

// L2 cache policies (createpolicy): evict-last for data read again soon, evict-first for data read no more.
__device__ __forceinline__ unsigned long long l2_policy_evict_last() {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ unsigned long long l2_policy_evict_first() {
    unsigned long long policy;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}
__device__ __forceinline__ float4 load_quad_hinted(const float* p, unsigned long long policy) {
    float4 v;
    asm("ld.global.L2::cache_hint.v4.f32 {%0, %1, %2, %3}, [%4], %5;"
        : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(__cvta_generic_to_global(p)), "l"(policy));
    return v;
}
__device__ __forceinline__ void store_quad_hinted(float* p, float4 v, unsigned long long policy) {
    asm volatile("st.global.L2::cache_hint.v4.f32 [%0], {%1, %2, %3, %4}, %5;"
                 :: "l"(__cvta_generic_to_global(p)), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "l"(policy) : "memory");
}

// Tile elements base .. base+3 (NEG_INF past the tile's end); the aligned load carries the L2 policy.
__device__ __forceinline__ float4 load_tile_quad(const float* values, long long start, int n, bool aligned,
                                                 int base, unsigned long long policy) {
    const unsigned long long index = (unsigned long long)start + (unsigned)base;
    if (aligned) {
        if (base < n) {
            return load_quad_hinted(values + index, policy);
        }
        return make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    }
    return make_float4(base < n ? values[index] : NEG_INF, base + 1 < n ? values[index + 1] : NEG_INF,
                       base + 2 < n ? values[index + 2] : NEG_INF, base + 3 < n ? values[index + 3] : NEG_INF);
}

// Thread i's quads of the tile at start of n elements (at 4 (i + 128 q)) into x, NEG_INF past the tile's end:
// the loads only, so a worker running two tiles back to back issues both tiles' loads before either tile's
// arithmetic.
__device__ __forceinline__ void load_tile_at(long long start, int n, const float* values, unsigned long long policy,
                                             float* x) {
    const int tid = threadIdx.x;
    const bool aligned = tile_is_aligned(start, n);
#pragma unroll
    for (int q = 0; q < TILE_QUADS; ++q) {
        const float4 v = load_tile_quad(values, start, n, aligned, 4 * (tid + q * TILE_THREADS), policy);
        x[4 * q] = v.x;
        x[4 * q + 1] = v.y;
        x[4 * q + 2] = v.z;
        x[4 * q + 3] = v.w;
    }
}

// load_tile_at of tile t (its start and length read from the layout).
__device__ __forceinline__ void load_tile(int t, const float* values, const long long* tile_start, const int* tile_len,
                                          unsigned long long policy, float* x) {
    load_tile_at(tile_start[t], tile_len[t], values, policy, x);
}

// A's loads (x is read again by C: evict-last) and C's (its last read of x: evict-first), as tiles.py's
// load_a_tile and load_c_tile.
__device__ __forceinline__ void load_a_tile(int t, const float* values, const long long* tile_start, const int* tile_len,
                                            float* x) {
    load_tile(t, values, tile_start, tile_len, l2_policy_evict_last(), x);
}

__device__ __forceinline__ void load_c_tile(int t, const float* values, const long long* tile_start, const int* tile_len,
                                            float* x) {
    load_tile(t, values, tile_start, tile_len, l2_policy_evict_first(), x);
}

// A(t)'s arithmetic on loaded values: m_t, then z_t = sum exp(x - m_t), each folded in element order and
// combined by a block reduction. Lane 0 of warp 1 writes tile_max[t], tile_sum[t] (in the DAG it announces the tile).
__device__ __forceinline__ void summarize_tile(int t, const float* x, float* tile_max, float* tile_sum,
                                               float* partials) {
    float local_max = NEG_INF;
#pragma unroll
    for (int k = 0; k < TILE_QUADS * 4; ++k) {
        local_max = f32_max(local_max, x[k]);
    }
    const float m_t = block_reduce<TILE_WARPS>(local_max, partials, MaxOp());
    float local_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE_QUADS * 4; ++k) {
        local_sum = f32_add(local_sum, f32_exp(f32_sub(x[k], m_t)));
    }
    const float z_t = block_reduce<TILE_WARPS>(local_sum, partials, SumOp());
    if ((int)threadIdx.x == TILE_ANNOUNCER) {
        tile_max[t] = m_t;
        tile_sum[t] = z_t;
    }
}

// A(t): tile maximum and shifted exponential sum. Block-level (all TILE_THREADS threads).
__device__ __forceinline__ void task_a(int t, const float* values, const long long* tile_start,
                                       const int* tile_len, float* tile_max, float* tile_sum, float* partials) {
    float x[TILE_QUADS * 4];
    load_a_tile(t, values, tile_start, tile_len, x);
    summarize_tile(t, x, tile_max, tile_sum, partials);
}

// B(r), the row's tiles being first .. first + count - 1 (values: a caller may have read them before the
// barrier ahead of B): combine the row's tile summaries stably. Warp-level: all 32 lanes of one converged
// warp call it; lane 0 writes. The max is exact in any order; the sum is the sequential fold
// z = 0; z += z_t * exp(m_t - m) in tile order (each lane computes a term, all fold them).
__device__ __forceinline__ void task_b_of(int r, int first, int count, const float* tile_max, const float* tile_sum,
                                          float* row_max, float* row_sum) {
    const int lane = threadIdx.x & (WARP_SIZE - 1);
    float m = NEG_INF;
    // Rolled (nvcc's front end unrolled it 4x with a 33-load remainder); the pragma also reaches ptxas
    // (.pragma "nounroll"), as Numba's loop_nounroll() does for its copy: a lane takes 1-2 trips at the
    // protocol's row lengths.
#pragma unroll 1
    for (int k = lane; k < count; k += WARP_SIZE) {
        m = f32_max(m, tile_max[first + k]);
    }
    m = warp_reduce_max(m);
    float z = 0.0f;
    for (int chunk = 0; chunk < count; chunk += WARP_SIZE) {
        float term = 0.0f;
        if (chunk + lane < count) {
            const int t = first + chunk + lane;
            term = f32_mul(tile_sum[t], f32_exp(f32_sub(tile_max[t], m)));
        }
        const int terms = min(WARP_SIZE, count - chunk);
        for (int j = 0; j < terms; ++j) {
            z = f32_add(z, __shfl_sync(FULL_MASK, term, j));
        }
    }
    if (lane == 0) {
        row_max[r] = m;
        row_sum[r] = z;
    }
}

// B(r): task_b_of of row r (its tiles read from the layout).
__device__ __forceinline__ void task_b(int r, const int* row_first_tile, const int* row_tile_count,
                                       const float* tile_max, const float* tile_sum, float* row_max,
                                       float* row_sum) {
    task_b_of(r, row_first_tile[r], row_tile_count[r], tile_max, tile_sum, row_max, row_sum);
}

// C's arithmetic on the values loaded for the tile at start of n elements: out = exp(x - m) / z, stored
// evict-first; masked elements never stored.
__device__ __forceinline__ void normalize_tile_at(long long start, int n, const float* x, float m, float z,
                                                  float* out) {
    const int tid = threadIdx.x;
    const bool aligned = tile_is_aligned(start, n);
#pragma unroll
    for (int q = 0; q < TILE_QUADS; ++q) {
        const int base = 4 * (tid + q * TILE_THREADS);
        const float4 y = make_float4(
            f32_div(f32_exp(f32_sub(x[4 * q], m)), z), f32_div(f32_exp(f32_sub(x[4 * q + 1], m)), z),
            f32_div(f32_exp(f32_sub(x[4 * q + 2], m)), z), f32_div(f32_exp(f32_sub(x[4 * q + 3], m)), z));
        const unsigned long long index = (unsigned long long)start + (unsigned)base;
        if (aligned) {
            if (base < n) {
                store_quad_hinted(out + index, y, l2_policy_evict_first());
            }
        } else {
            if (base < n) out[index] = y.x;
            if (base + 1 < n) out[index + 1] = y.y;
            if (base + 2 < n) out[index + 2] = y.z;
            if (base + 3 < n) out[index + 3] = y.w;
        }
    }
}

// normalize_tile_at of tile t (its start and length read from the layout).
__device__ __forceinline__ void normalize_tile(int t, const float* x, float m, float z, const long long* tile_start,
                                               const int* tile_len, float* out) {
    normalize_tile_at(tile_start[t], tile_len[t], x, m, z, out);
}

// C of the tile at start of n elements: out = exp(x - m) / z over it. Block-level; no barrier inside. m, z,
// start and n are values: the caller decides how they were read (kernel boundary, grid barrier, acquire).
__device__ __forceinline__ void task_c_at(long long start, int n, float m, float z, const float* values, float* out) {
    float x[TILE_QUADS * 4];
    load_tile_at(start, n, values, l2_policy_evict_first(), x);
    normalize_tile_at(start, n, x, m, z, out);
}

// C(t): task_c_at of tile t (its start and length read from the layout).
__device__ __forceinline__ void task_c(int t, float m, float z, const float* values, const long long* tile_start,
                                       const int* tile_len, float* out) {
    task_c_at(tile_start[t], tile_len[t], m, z, values, out);
}

// Thread 0 asks for tile `ahead` (if it exists) in L2: the tile this block, or the block one
// wave later, reads next (numba_softmax/kernels/tiles.py: prefetch_tile_l2). Values unchanged.
__device__ __forceinline__ void prefetch_tile_l2(long long ahead, const float* values, long long n_values,
                                                 const long long* tile_start, const int* tile_len, int n_tiles) {
    if (threadIdx.x == 0 && ahead >= 0 && ahead < n_tiles) {
        prefetch_span_l2(values, n_values, tile_start[ahead], tile_len[ahead]);
    }
}
