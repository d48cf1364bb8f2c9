// row_stages.cu -- the four explicit stages of numba_softmax/kernels/row_stages.py.
//
// Arrays are C-contiguous float32 device buffers; rows, cols are the matrix shape (int64).
//
//   row_max_stage(const float* x, float* row_max, int64 rows, int64 cols)
//       grid (rows,), block (256,): row_max[r] = max_j x[r, j]
//   exp_stage(const float* x, const float* row_max, float* exps, int64 rows, int64 cols)
//       grid (ceil(rows*cols/256),), block (256,): exps[r, j] = exp(x[r, j] - row_max[r])
//   row_sum_stage(const float* exps, float* row_sum, int64 rows, int64 cols)
//       grid (rows,), block (256,): row_sum[r] = sum_j exps[r, j]
//   divide_stage(const float* exps, const float* row_sum, float* y, int64 rows, int64 cols)
//       grid (ceil(rows*cols/256),), block (256,): y[r, j] = exps[r, j] / row_sum[r]
//
// In the two row reductions thread t folds the columns it owns (numerics.cuh's ownership
// rule) in increasing order, then the block reduction combines: the same order as the fused
// kernel, so the two paths give identical bits.
#include "numba_abi.cuh"
#include "numerics.cuh"

extern "C" __global__ void row_max_stage(const float* x, float* row_max, long long rows, long long cols) {
    const long long row = blockIdx.x;
    const int tid = threadIdx.x;
    __shared__ float partials[WARPS_PER_BLOCK];
    float local_max = NEG_INF;
    for (long long base = (long long)QUAD * tid; base < cols; base += QUAD * BLOCK_THREADS) {
#pragma unroll
        for (int j = 0; j < QUAD; ++j) {
            if (base + j < cols) {
                local_max = f32_max(local_max, x[row * cols + base + j]);
            }
        }
    }
    const float m = block_reduce_max(local_max, partials);
    if (tid == 0) {
        row_max[row] = m;
    }
}

__device__ __forceinline__ void exp_element(const float* x, const float* row_max, float* exps, long long rows,
                                            long long cols) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        const long long row = i / cols;
        const long long col = i - row * cols;
        exps[row * cols + col] = f32_exp(f32_sub(x[row * cols + col], row_max[row]));
    }
}

extern "C" __global__ void exp_stage(const float* x, const float* row_max, float* exps, long long rows,
                                     long long cols) {
    exp_element(x, row_max, exps, rows, cols);
}

extern "C" __global__ void row_sum_stage(const float* exps, float* row_sum, long long rows, long long cols) {
    const long long row = blockIdx.x;
    const int tid = threadIdx.x;
    __shared__ float partials[WARPS_PER_BLOCK];
    float local_sum = 0.0f;
    for (long long base = (long long)QUAD * tid; base < cols; base += QUAD * BLOCK_THREADS) {
#pragma unroll
        for (int j = 0; j < QUAD; ++j) {
            if (base + j < cols) {
                local_sum = f32_add(local_sum, exps[row * cols + base + j]);
            }
        }
    }
    const float z = block_reduce_sum(local_sum, partials);
    if (tid == 0) {
        row_sum[row] = z;
    }
}

__device__ __forceinline__ void divide_element(const float* exps, const float* row_sum, float* y, long long rows,
                                               long long cols) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < rows * cols) {
        const long long row = i / cols;
        const long long col = i - row * cols;
        y[row * cols + col] = f32_div(exps[row * cols + col], row_sum[row]);
    }
}

extern "C" __global__ void divide_stage(const float* exps, const float* row_sum, float* y, long long rows,
                                        long long cols) {
    divide_element(exps, row_sum, y, rows, cols);
}

// ---- the element-wise stages in Numba's argument layout (numba_abi.cuh says why) -------------
// The arguments are the Numba launch's: x (rows, cols), row_max (rows,), exps flat (rows * cols,);
// exps (rows, cols), row_sum (rows,), y flat.
extern "C" __global__ void exp_stage_numba_abi(NumbaArray<float, 2> x, NumbaVector<float> row_max,
                                               NumbaVector<float> exps) {
    exp_element(x.data, row_max.data, exps.data, x.shape[0], x.shape[1]);
}

extern "C" __global__ void divide_stage_numba_abi(NumbaArray<float, 2> exps, NumbaVector<float> row_sum,
                                                  NumbaVector<float> y) {
    divide_element(exps.data, row_sum.data, y.data, exps.shape[0], exps.shape[1]);
}
