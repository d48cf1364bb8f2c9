// ordering.cuh -- device-scope acquire/release primitives of numba_softmax/kernels/ordering.py.
//
// Default: the same inline PTX the Numba intrinsics emit, on a global address obtained with
// cvta.to.global (Numba: LLVM addrspacecast), with a "memory" clobber and asm volatile (Numba:
// side_effect=True, ~{memory}):
//
//   load_acquire_gpu(p)          ld.acquire.gpu.global.u32
//   load_relaxed_gpu(p)          ld.relaxed.gpu.global.u32
//   store_relaxed_gpu(p, v)      st.relaxed.gpu.global.u32
//   fence_acq_rel_gpu()          fence.acq_rel.gpu   (then relaxed stores: a release pattern)
//   atomic_add_acq_rel_gpu(p, v) atom.acq_rel.gpu.global.add.u32   (returns the old value)
//   atomic_add_release_gpu(p, v) atom.release.gpu.global.add.u32   (returns the old value)
//   backoff(polls)               nanosleep 32, 64, 128, then 256 ns
//   wait_for_prerequisite_grid() griddepcontrol.wait   (programmatic dependent launch)
//   let_dependent_grid_launch()  griddepcontrol.launch_dependents
//
// Compile with -DREFERENCE_ORDERING_ATOMIC_REF to get the same semantics from libcu++'s
// cuda::atomic_ref<int, cuda::thread_scope_device> instead (what idiomatic C++ would write;
// its PTX spells the operations ld.acquire.gpu.b32 etc. on generic addresses).
#pragma once

#include <cstddef>

#ifdef REFERENCE_ORDERING_ATOMIC_REF
#include <cuda/atomic>

__device__ __forceinline__ int load_acquire_gpu(int* p) {
    return cuda::atomic_ref<int, cuda::thread_scope_device>(*p).load(cuda::std::memory_order_acquire);
}
__device__ __forceinline__ int load_relaxed_gpu(int* p) {
    return cuda::atomic_ref<int, cuda::thread_scope_device>(*p).load(cuda::std::memory_order_relaxed);
}
__device__ __forceinline__ void store_relaxed_gpu(int* p, int v) {
    cuda::atomic_ref<int, cuda::thread_scope_device>(*p).store(v, cuda::std::memory_order_relaxed);
}
__device__ __forceinline__ void fence_acq_rel_gpu() {
    cuda::atomic_thread_fence(cuda::std::memory_order_acq_rel, cuda::thread_scope_device);
}
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* p, int v) {
    return cuda::atomic_ref<int, cuda::thread_scope_device>(*p).fetch_add(v, cuda::std::memory_order_acq_rel);
}
__device__ __forceinline__ int atomic_add_release_gpu(int* p, int v) {
    return cuda::atomic_ref<int, cuda::thread_scope_device>(*p).fetch_add(v, cuda::std::memory_order_release);
}

#else

__device__ __forceinline__ int load_acquire_gpu(int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
    return v;
}
__device__ __forceinline__ int load_relaxed_gpu(int* p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(__cvta_generic_to_global(p)) : "memory");
    return v;
}
__device__ __forceinline__ void store_relaxed_gpu(int* p, int v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(__cvta_generic_to_global(p)), "r"(v) : "memory");
}
__device__ __forceinline__ void fence_acq_rel_gpu() {
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
}
__device__ __forceinline__ int atomic_add_acq_rel_gpu(int* p, int v) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(__cvta_generic_to_global(p)), "r"(v)
                 : "memory");
    return old;
}
__device__ __forceinline__ int atomic_add_release_gpu(int* p, int v) {
    int old;
    asm volatile("atom.release.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old)
                 : "l"(__cvta_generic_to_global(p)), "r"(v)
                 : "memory");
    return old;
}

#endif

// Programmatic dependent launch (either ordering build): the wait returns once the grid ahead in the stream
// has completed and its writes are visible (at once without the launch attribute); the trigger lets the
// grid behind start launching.
__device__ __forceinline__ void wait_for_prerequisite_grid() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void let_dependent_grid_launch() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Sleep a little while spinning: 32, 64, 128, then 256 ns per poll.
__device__ __forceinline__ void backoff(int polls) {
    const int shift = polls < 3 ? polls : 3;
    __nanosleep(32u << shift);
}
