// tiles.cu -- the separate scheduler of numba_softmax/kernels/tiles.py: three kernels.
//
//   tile_summary_kernel(const float* values, const int64* tile_start, const int32* tile_len,
//                       float* tile_max, float* tile_sum, int32 n_tiles, int64 n_values)
//       grid (n_tiles,), block (128,): one A per block.
//   row_combine_kernel(const int32* row_first_tile, const int32* row_tile_count,
//                      const float* tile_max, const float* tile_sum, float* row_max,
//                      float* row_sum, int32 rows)
//       grid (ceil(rows/4),), block (128,): one B per warp (r < rows).
//   tile_normalize_kernel(const float* values, const int32* tile_row, const int64* tile_start,
//                         const int32* tile_len, const float* row_max, const float* row_sum,
//                         float* out, int32 n_tiles, int64 n_values)
//       grid (n_tiles,), block (128,): one C per block, block b on tile n_tiles - 1 - b.
//   Kernels A and C first prefetch the tile one wave ahead into L2 (tiles.cuh), as the
//   Numba kernels do; n_tiles and n_values bound it (the Numba kernels read them from shapes).
#include "numba_abi.cuh"
#include "tiles.cuh"

__device__ __forceinline__ void tile_summary(const float* values, const long long* tile_start, const int* tile_len,
                                             float* tile_max, float* tile_sum, int n_tiles, long long n_values) {
    __shared__ float partials[TILE_WARPS];
    prefetch_tile_l2(blockIdx.x + (long long)TILE_BLOCKS_PER_SM_WAVE * sm_id_bound(), values, n_values, tile_start,
                     tile_len, n_tiles);
    task_a(blockIdx.x, values, tile_start, tile_len, tile_max, tile_sum, partials);
}

__device__ __forceinline__ void row_combine(const int* row_first_tile, const int* row_tile_count,
                                            const float* tile_max, const float* tile_sum, float* row_max,
                                            float* row_sum, int rows) {
    // One warp per row; unsigned 32-bit, as tiles.py's udiv: a shift.
    const unsigned r = (blockIdx.x * blockDim.x + threadIdx.x) / WARP_SIZE;
    if (r < (unsigned)rows) {
        task_b((int)r, row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum);
    }
}

__device__ __forceinline__ void tile_normalize(const float* values, const int* tile_row, const long long* tile_start,
                                               const int* tile_len, const float* row_max, const float* row_sum,
                                               float* out, int n_tiles, long long n_values) {
    // Descending tiles: the A pass ascended, so the tiles it read last are the ones still in L2.
    const int t = n_tiles - 1 - (int)blockIdx.x;
    prefetch_tile_l2(t - (long long)TILE_BLOCKS_PER_SM_WAVE * sm_id_bound(), values, n_values, tile_start, tile_len,
                     n_tiles);
    const int row = tile_row[t];
    task_c(t, row_max[row], row_sum[row], values, tile_start, tile_len, out);
}

extern "C" __global__ void tile_summary_kernel(const float* values, const long long* tile_start, const int* tile_len,
                                               float* tile_max, float* tile_sum, int n_tiles, long long n_values) {
    tile_summary(values, tile_start, tile_len, tile_max, tile_sum, n_tiles, n_values);
}

extern "C" __global__ void row_combine_kernel(const int* row_first_tile, const int* row_tile_count,
                                              const float* tile_max, const float* tile_sum, float* row_max,
                                              float* row_sum, int rows) {
    row_combine(row_first_tile, row_tile_count, tile_max, tile_sum, row_max, row_sum, rows);
}

extern "C" __global__ void tile_normalize_kernel(const float* values, const int* tile_row, const long long* tile_start,
                                                 const int* tile_len, const float* row_max, const float* row_sum,
                                                 float* out, int n_tiles, long long n_values) {
    tile_normalize(values, tile_row, tile_start, tile_len, row_max, row_sum, out, n_tiles, n_values);
}

// ---- the same kernels in Numba's argument layout (numba_abi.cuh says why) -------------------
// The arguments are the Numba launch's, trace included (unused: only the trace builds record);
// n_tiles, rows and n_values are read from the shapes the Numba kernels read them from.
extern "C" __global__ void tile_summary_kernel_numba_abi(NumbaVector<float> values, NumbaVector<long long> tile_start,
                                                         NumbaVector<int> tile_len, NumbaVector<float> tile_max,
                                                         NumbaVector<float> tile_sum, NumbaArray<long long, 2> trace) {
    tile_summary(values.data, tile_start.data, tile_len.data, tile_max.data, tile_sum.data, (int)tile_start.shape[0],
                 values.shape[0]);
}

extern "C" __global__ void row_combine_kernel_numba_abi(NumbaVector<int> row_first_tile, NumbaVector<int> row_tile_count,
                                                        NumbaVector<float> tile_max, NumbaVector<float> tile_sum,
                                                        NumbaVector<float> row_max, NumbaVector<float> row_sum,
                                                        NumbaArray<long long, 2> trace) {
    row_combine(row_first_tile.data, row_tile_count.data, tile_max.data, tile_sum.data, row_max.data, row_sum.data,
                (int)row_first_tile.shape[0]);
}

extern "C" __global__ void tile_normalize_kernel_numba_abi(NumbaVector<float> values, NumbaVector<int> tile_row,
                                                           NumbaVector<long long> tile_start, NumbaVector<int> tile_len,
                                                           NumbaVector<float> row_max, NumbaVector<float> row_sum,
                                                           NumbaVector<float> out, NumbaArray<long long, 2> trace) {
    tile_normalize(values.data, tile_row.data, tile_start.data, tile_len.data, row_max.data, row_sum.data, out.data,
                   (int)tile_row.shape[0], values.shape[0]);
}
