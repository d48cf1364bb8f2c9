// fused_row.cu -- numba_softmax/kernels/fused_row.py: one block per row, row kept in registers.
//
// Every entry has the same arguments and geometry:
//   <entry>(const float* x, float* y, int64 rows, int64 cols)
//       x, y: C-contiguous float32 [rows, cols]; grid (rows,), block (256,).
//       Thread t owns RUNS runs of QUAD consecutive columns starting at QUAD * (t + 256 * q)
//       (numerics.cuh's ownership rule), i.e. up to RUNS * QUAD values kept in registers;
//       columns past cols are masked per element; cols <= 256 * RUNS * QUAD (the host checks).
//
//   fused_row_softmax            16 values per thread, scalar loads (rows up to 4096 columns)
//   fused_row_softmax_q{1,2,4}   (QUAD = 4 builds only) 1, 2 or 4 quads per thread, scalar loads
//   fused_row_softmax_q{1,2,4}_v4  the same with 16-byte vector loads/stores (ld/st.global.v4.f32);
//                                valid only when cols % 4 == 0 and x, y are 16-byte aligned;
//                                q1_v4 also prefetches row + 8 * %nsmid into L2 (one wave ahead,
//                                cp.async.bulk.prefetch.L2; numba_softmax/kernels/prefetch.py)
//   fused_row_softmax_w1_v4      cols <= 128, vector: warp 0 alone (warps 1-7 own no column and
//                                return), warp butterflies only; bitwise equal to the block build
//
//   m = block max; e_j = exp(x_j - m) kept in registers; z = block sum; y_j = e_j / z.
#include "numerics.cuh"
#include "prefetch.cuh"

#define VALUES_PER_THREAD 16

template <int RUNS, bool VECTOR, bool PREFETCH = false>
__device__ __forceinline__ void fused_row(const float* x, float* y, long long rows, long long cols) {
    constexpr int VALUES = RUNS * QUAD;
    const long long row = blockIdx.x;
    const int tid = threadIdx.x;
    if (PREFETCH && tid == 0) {
        const long long ahead = row + (long long)BLOCKS_PER_SM_WAVE * sm_id_bound();
        if (ahead < rows) {
            prefetch_l2(x + ahead * cols, (unsigned)(cols * 4));
        }
    }
    __shared__ float partials[WARPS_PER_BLOCK];
    float values[VALUES];

    // Pass 1: load this thread's runs once (independent loads, all in flight together)
    // and reduce the maximum in increasing column order.
    float local_max = NEG_INF;
#pragma unroll
    for (int q = 0; q < RUNS; ++q) {
        const long long base = (long long)QUAD * (tid + q * BLOCK_THREADS);
        if (VECTOR) {
            if (base < cols) {  // cols % 4 == 0: the whole quad is in the row
                const float4 v = *reinterpret_cast<const float4*>(x + row * cols + base);
                values[QUAD * q] = v.x;
                values[QUAD * q + 1] = v.y;
                values[QUAD * q + 2] = v.z;
                values[QUAD * q + 3] = v.w;
                local_max = f32_max(f32_max(f32_max(f32_max(local_max, v.x), v.y), v.z), v.w);
            }
        } else {
#pragma unroll
            for (int j = 0; j < QUAD; ++j) {
                if (base + j < cols) {
                    const float v = x[row * cols + base + j];
                    values[QUAD * q + j] = v;
                    local_max = f32_max(local_max, v);
                }
            }
        }
    }
    const float row_max = block_reduce_max(local_max, partials);

    // Pass 2: exponentiate in registers and reduce the sum, same order.
    float local_sum = 0.0f;
#pragma unroll
    for (int q = 0; q < RUNS; ++q) {
        const long long base = (long long)QUAD * (tid + q * BLOCK_THREADS);
        if (VECTOR) {
            if (base < cols) {  // one test per quad (cols % 4 == 0)
#pragma unroll
                for (int j = 0; j < QUAD; ++j) {
                    const float e = f32_exp(f32_sub(values[QUAD * q + j], row_max));
                    values[QUAD * q + j] = e;
                    local_sum = f32_add(local_sum, e);
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < QUAD; ++j) {
                if (base + j < cols) {
                    const float e = f32_exp(f32_sub(values[QUAD * q + j], row_max));
                    values[QUAD * q + j] = e;
                    local_sum = f32_add(local_sum, e);
                }
            }
        }
    }
    const float row_sum = block_reduce_sum(local_sum, partials);

    // Pass 3: the only global write.
#pragma unroll
    for (int q = 0; q < RUNS; ++q) {
        const long long base = (long long)QUAD * (tid + q * BLOCK_THREADS);
        if (VECTOR) {
            if (base < cols) {
                *reinterpret_cast<float4*>(y + row * cols + base) =
                    make_float4(f32_div(values[QUAD * q], row_sum), f32_div(values[QUAD * q + 1], row_sum),
                                f32_div(values[QUAD * q + 2], row_sum), f32_div(values[QUAD * q + 3], row_sum));
            }
        } else {
#pragma unroll
            for (int j = 0; j < QUAD; ++j) {
                if (base + j < cols) {
                    y[row * cols + base + j] = f32_div(values[QUAD * q + j], row_sum);
                }
            }
        }
    }
}

extern "C" __global__ void fused_row_softmax(const float* x, float* y, long long rows, long long cols) {
    fused_row<VALUES_PER_THREAD / QUAD, false>(x, y, rows, cols);
}

#if QUAD == 4
#define FUSED_ENTRY(NAME, RUNS, VECTOR, PREFETCH)                                         \
    extern "C" __global__ void NAME(const float* x, float* y, long long rows, long long cols) { \
        fused_row<RUNS, VECTOR, PREFETCH>(x, y, rows, cols);                              \
    }
FUSED_ENTRY(fused_row_softmax_q1, 1, false, false)
FUSED_ENTRY(fused_row_softmax_q2, 2, false, false)
FUSED_ENTRY(fused_row_softmax_q4, 4, false, false)
FUSED_ENTRY(fused_row_softmax_q1_v4, 1, true, true)
FUSED_ENTRY(fused_row_softmax_q2_v4, 2, true, false)
FUSED_ENTRY(fused_row_softmax_q4_v4, 4, true, false)

// Rows of at most 128 columns: lane t owns columns 4t..4t+3; the cross-warp fold would
// only combine identities (-inf, +0), so warp 0's butterflies give the block build's bits.
extern "C" __global__ void fused_row_softmax_w1_v4(const float* x, float* y, long long rows, long long cols) {
    const int tid = threadIdx.x;
    if (tid >= WARP_SIZE) {
        return;
    }
    const long long row = blockIdx.x;
    const long long base = (long long)QUAD * tid;
    float4 v = make_float4(NEG_INF, NEG_INF, NEG_INF, NEG_INF);
    if (base < cols) {
        v = *reinterpret_cast<const float4*>(x + row * cols + base);
    }
    const float row_max = warp_reduce_max(f32_max(f32_max(f32_max(f32_max(NEG_INF, v.x), v.y), v.z), v.w));
    float local_sum = 0.0f;
    if (base < cols) {
        v.x = f32_exp(f32_sub(v.x, row_max));
        v.y = f32_exp(f32_sub(v.y, row_max));
        v.z = f32_exp(f32_sub(v.z, row_max));
        v.w = f32_exp(f32_sub(v.w, row_max));
        local_sum = f32_add(f32_add(f32_add(f32_add(local_sum, v.x), v.y), v.z), v.w);
    }
    const float row_sum = warp_reduce_sum(local_sum);
    if (base < cols) {
        *reinterpret_cast<float4*>(y + row * cols + base) =
            make_float4(f32_div(v.x, row_sum), f32_div(v.y, row_sum), f32_div(v.z, row_sum), f32_div(v.w, row_sum));
    }
}
#endif
