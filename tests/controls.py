"""Negative controls: deliberately wrong kernels that the checks must reject.

If a check ever accepts one of these, the check is broken, not the control.
"""


from numba import cuda, float32

from numba_softmax.backend import SIMULATOR
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import (BLOCK_THREADS, KERNEL_OPTIONS, WARP_SIZE, WARPS_PER_BLOCK, block_reduce_sum,
                                    f32_add, f32_div, f32_exp)


@cuda.jit(**KERNEL_OPTIONS)
def softmax_without_max_subtraction(x, y):
    """exp(x) / sum(exp(x)): overflows to inf/inf = NaN for large inputs (offset fixture)."""
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
    local_sum = float32(0.0)
    for col in range(tid, x.shape[1], BLOCK_THREADS):
        local_sum = f32_add(local_sum, f32_exp(x[row, col]))
    z = block_reduce_sum(local_sum, partials)
    for col in range(tid, x.shape[1], BLOCK_THREADS):
        y[row, col] = f32_div(f32_exp(x[row, col]), z)


def no_max_launches(x, y):
    return [KernelLaunch("softmax_without_max_subtraction", softmax_without_max_subtraction,
                         (x.shape[0],), (BLOCK_THREADS,), (x, y))]


@cuda.jit(**KERNEL_OPTIONS)
def contracted_scale_add(x, y):
    """Plain ``a * b + c``: NVVM contracts it into fma.rn.f32 -- the PTX policy must object."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        y[i] = x[i] * float32(1.5) + float32(0.25)


if not SIMULATOR:

    @cuda.jit(**KERNEL_OPTIONS)
    def softmax_missing_barrier(x, y):
        """The fused algorithm with the barrier between the per-warp partials and their
        fold removed. Warps other than 0 sleep before publishing their partial, so warp 0
        reliably folds stale shared memory: the row sums (and outputs) come out wrong."""
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        lane = tid % WARP_SIZE
        warp = tid // WARP_SIZE
        partials = cuda.shared.array(WARPS_PER_BLOCK, float32)
        if tid < WARPS_PER_BLOCK:
            partials[tid] = float32(0.0)
        cuda.syncthreads()
        local_sum = float32(0.0)
        for col in range(tid, x.shape[1], BLOCK_THREADS):
            local_sum = f32_add(local_sum, f32_exp(x[row, col]))
        offset = WARP_SIZE // 2
        while offset > 0:
            local_sum = f32_add(local_sum, cuda.shfl_xor_sync(0xFFFFFFFF, local_sum, offset))
            offset //= 2
        if warp > 0:
            cuda.nanosleep(20000)
        if lane == 0:
            partials[warp] = local_sum
        # <- the missing cuda.syncthreads()
        z = partials[0]
        for w in range(1, WARPS_PER_BLOCK):
            z = f32_add(z, partials[w])
        for col in range(tid, x.shape[1], BLOCK_THREADS):
            y[row, col] = f32_div(f32_exp(x[row, col]), z)

    def missing_barrier_launches(x, y):
        return [KernelLaunch("softmax_missing_barrier", softmax_missing_barrier,
                             (x.shape[0],), (BLOCK_THREADS,), (x, y))]


