// tiles.cuh -- the Experiment B task helpers A/B/C of numba_softmax/kernels/tiles.py.
//
// ONE copy shared by every scheduler (tiles.cu: separate kernels; persistent.cu: phased and
// DAG modes). Packed layout (numba_softmax.tiled.build_layout):
//   values      float32[total]     rows back to back
//   tile_start  int64[n_tiles]     offset of tile t in values
//   tile_len    int32[n_tiles]     <= 1024 (256 threads x 4 values in registers)
//   tile_row    int32[n_tiles]     row of tile t
//   row_first_tile, row_tile_count int32[rows]
// Thread i of the 256-thread block handles tile elements i, i+256, i+512, i+768 in
// increasing order; B folds a row's tile summaries in tile order.
#pragma once

#include "numerics.cuh"
#include "prefetch.cuh"

#define TILE_VALUES_PER_THREAD 4

// A(t): tile maximum and shifted exponential sum. Block-level (all 256 threads).
// Thread 0 writes tile_max[t], tile_sum[t] (it also announces the tile to the scheduler).
__device__ __forceinline__ void task_a(int t, const float* values, const long long* tile_start,
                                       const int* tile_len, float* tile_max, float* tile_sum, float* partials) {
    const int tid = threadIdx.x;
    const long long start = tile_start[t];
    const int n = tile_len[t];
    float x[TILE_VALUES_PER_THREAD];
    float local_max = NEG_INF;
#pragma unroll
    for (int k = 0; k < TILE_VALUES_PER_THREAD; ++k) {
        const int j = tid + k * BLOCK_THREADS;
        if (j < n) {
            const float v = values[start + j];
            x[k] = v;
            local_max = f32_max(local_max, v);
        }
    }
    const float m_t = block_reduce_max(local_max, partials);
    float local_sum = 0.0f;
#pragma unroll
    for (int k = 0; k < TILE_VALUES_PER_THREAD; ++k) {
        const int j = tid + k * BLOCK_THREADS;
        if (j < n) {
            local_sum = f32_add(local_sum, f32_exp(f32_sub(x[k], m_t)));
        }
    }
    const float z_t = block_reduce_sum(local_sum, partials);
    if (tid == 0) {
        tile_max[t] = m_t;
        tile_sum[t] = z_t;
    }
}

// B(r): combine the row's tile summaries stably. Thread-level (one thread).
__device__ __forceinline__ void task_b(int r, const int* row_first_tile, const int* row_tile_count,
                                       const float* tile_max, const float* tile_sum, float* row_max,
                                       float* row_sum) {
    const int first = row_first_tile[r];
    const int count = row_tile_count[r];
    float m = NEG_INF;
    for (int k = 0; k < count; ++k) {
        m = f32_max(m, tile_max[first + k]);
    }
    float z = 0.0f;
    for (int k = 0; k < count; ++k) {
        const int t = first + k;
        z = f32_add(z, f32_mul(tile_sum[t], f32_exp(f32_sub(tile_max[t], m))));
    }
    row_max[r] = m;
    row_sum[r] = z;
}

// C(t): out = exp(x - m) / z over the tile. Block-level; no barrier inside. m and z are
// values: the caller decides how they were read (kernel boundary, grid barrier, acquire).
__device__ __forceinline__ void task_c(int t, float m, float z, const float* values, const long long* tile_start,
                                       const int* tile_len, float* out) {
    const int tid = threadIdx.x;
    const long long start = tile_start[t];
    const int n = tile_len[t];
#pragma unroll
    for (int k = 0; k < TILE_VALUES_PER_THREAD; ++k) {
        const int j = tid + k * BLOCK_THREADS;
        if (j < n) {
            out[start + j] = f32_div(f32_exp(f32_sub(values[start + j], m)), z);
        }
    }
}

// Thread 0 asks for tile `ahead` (if it exists) in L2: the tile this block, or the block one
// wave later, reads next (numba_softmax/kernels/tiles.py: prefetch_tile_l2). Values unchanged.
__device__ __forceinline__ void prefetch_tile_l2(long long ahead, const float* values, long long n_values,
                                                 const long long* tile_start, const int* tile_len, int n_tiles) {
    if (threadIdx.x == 0 && ahead < n_tiles) {
        prefetch_span_l2(values, n_values, tile_start[ahead], tile_len[ahead]);
    }
}
