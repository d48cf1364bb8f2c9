// prefetch.cuh -- numba_softmax/kernels/prefetch.py in CUDA C++: an L2 prefetch one wave ahead.
//
//   sm_id_bound()                 mov.u32 %nsmid (an upper bound of the SM ids)
//   prefetch_l2(p, nbytes)        cp.async.bulk.prefetch.L2.global [p], nbytes (16-byte aligned p,
//                                 nbytes % 16 == 0)
//   prefetch_span_l2(a, n, first, count)
//                                 float elements first .. first+count of a[0..n), widened to
//                                 16-byte boundaries and clipped to the array, like the Python twin
//   BLOCKS_PER_SM_WAVE            8 resident 256-thread blocks per SM: the prefetch distance is
//                                 this many blocks times sm_id_bound()
#pragma once

#include "numerics.cuh"

#define BLOCKS_PER_SM_WAVE (2048 / BLOCK_THREADS)

__device__ __forceinline__ unsigned sm_id_bound() {
    unsigned n;
    asm("mov.u32 %0, %%nsmid;" : "=r"(n));
    return n;
}

__device__ __forceinline__ void prefetch_l2(const void* p, unsigned nbytes) {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(nbytes));
}

__device__ __forceinline__ void prefetch_span_l2(const float* a, long long n, long long first, long long count) {
    const long long lo = (first * 4) & ~15LL;
    long long hi = ((first + count) * 4 + 15) & ~15LL;
    const long long end = (n * 4) & ~15LL;
    if (hi > end) {
        hi = end;
    }
    if (hi > lo) {
        prefetch_l2(reinterpret_cast<const char*>(a) + lo, (unsigned)(hi - lo));
    }
}
