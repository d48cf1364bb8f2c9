// numerics.cuh -- the numerics policy of numba_softmax/numerics.py, in CUDA C++.
//
// Build with nvcc --fmad=false and no fast-math flag (bench/reference_build.py does):
//   * + - * on float are written as plain C++ operators; --fmad=false makes nvcc emit
//     add.rn.f32 / sub.rn.f32 / mul.rn.f32 (never contracted into fma), which is what the
//     Numba kernels get from libdevice __nv_fadd_rn / __nv_fsub_rn / __nv_fmul_rn;
//   * exp is expf (libdevice __nv_expf, the routine Numba's math.exp on float32 calls);
//   * division is a / b: div.rn.f32 (nvcc's default -prec-div=true);
//   * max is fmaxf (libdevice __nv_fmaxf, max.f32), Numba's libdevice.fmaxf.
//
// Block reductions combine in the one fixed order of numba_softmax.numerics: xor butterfly
// in each warp (offsets 16, 8, 4, 2, 1), lane 0 of every warp writes its partial, then EVERY
// thread folds the per-warp partials sequentially from warp 0. Per-thread accumulation
// before the reduction is in increasing column order (the callers' loops).
//
// Ownership rule of the row reductions: in a row, thread t of the 256 owns the runs of QUAD
// consecutive columns starting at QUAD * (t + 256 * q), q = 0, 1, ..., and folds them in
// increasing column order. QUAD = 1 is the plain strided rule (columns t, t+256, t+512, ...);
// QUAD = 4 is the quad rule (one 16-byte vector per run). bench/reference_build.py passes
// -DREFERENCE_QUAD=<numba_softmax.numerics.QUAD> (1 where the Python module has no QUAD), so
// the reference always follows the rule of the Numba kernels it is compared with.
#pragma once

#include <cstdint>

#define BLOCK_THREADS 256
#define WARP_SIZE 32
#define WARPS_PER_BLOCK (BLOCK_THREADS / WARP_SIZE)
#define FULL_MASK 0xffffffffu

#ifndef REFERENCE_QUAD
#define REFERENCE_QUAD 1
#endif
#define QUAD REFERENCE_QUAD

// Identity of the max reduction (rows and tiles are never empty, so it never survives).
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float f32_add(float a, float b) { return a + b; }
__device__ __forceinline__ float f32_sub(float a, float b) { return a - b; }
__device__ __forceinline__ float f32_mul(float a, float b) { return a * b; }
__device__ __forceinline__ float f32_max(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ float f32_exp(float a) { return expf(a); }
__device__ __forceinline__ float f32_div(float a, float b) { return a / b; }

struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return f32_max(a, b); }
};
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return f32_add(a, b); }
};

// The warp butterfly (offsets 16, 8, 4, 2, 1): every lane ends with the warp's result.
template <typename Combine>
__device__ __forceinline__ float warp_reduce(float value, Combine combine) {
    for (int offset = WARP_SIZE / 2; offset > 0; offset /= 2) {
        value = combine(value, __shfl_xor_sync(FULL_MASK, value, offset));
    }
    return value;
}

// One block reduction per combining operation, same order for both, for a block of WARPS
// warps (row kernels: WARPS_PER_BLOCK; Experiment B's tile tasks: TILE_WARPS, tiles.cuh),
// so the fold over the warp partials has a compile-time length.
// partials: shared float[WARPS], reused by the next reduction (hence the
// second barrier: nobody overwrites it before every thread has read it).
template <int WARPS, typename Combine>
__device__ __forceinline__ float block_reduce(float value, float* partials, Combine combine) {
    value = warp_reduce(value, combine);
    const unsigned lane = threadIdx.x % WARP_SIZE;
    const unsigned warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) {
        partials[warp] = value;
    }
    __syncthreads();
    float total = partials[0];
#pragma unroll
    for (int w = 1; w < WARPS; ++w) {
        total = combine(total, partials[w]);
    }
    __syncthreads();
    return total;
}

__device__ __forceinline__ float warp_reduce_max(float value) { return warp_reduce(value, MaxOp()); }
__device__ __forceinline__ float warp_reduce_sum(float value) { return warp_reduce(value, SumOp()); }

__device__ __forceinline__ float block_reduce_max(float value, float* partials) {
    return block_reduce<WARPS_PER_BLOCK>(value, partials, MaxOp());
}

__device__ __forceinline__ float block_reduce_sum(float value, float* partials) {
    return block_reduce<WARPS_PER_BLOCK>(value, partials, SumOp());
}
