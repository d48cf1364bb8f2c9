"""A toy Experiment A kernel variant in one file (docs/extending.md): one thread per row, three sequential
passes (max, sum of exp(x - max), divide), with the project's numerics policy. Correct, slow, and not bit for
bit the fused kernel (it folds each row in another order), so the oracle alone checks it."""

from numba import cuda, float32

from bench.variants import kernel_variant
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import KERNEL_OPTIONS, NEG_INF, f32_add, f32_div, f32_exp, f32_max, f32_sub

THREADS = 128


@cuda.jit(**KERNEL_OPTIONS)
def row_per_thread_softmax(x, y):
    row = cuda.grid(1)
    if row >= x.shape[0]:
        return
    cols = x.shape[1]
    m = NEG_INF
    for j in range(cols):
        m = f32_max(m, x[row, j])
    z = float32(0.0)
    for j in range(cols):
        z = f32_add(z, f32_exp(f32_sub(x[row, j], m)))
    for j in range(cols):
        y[row, j] = f32_div(f32_exp(f32_sub(x[row, j], m)), z)


@kernel_variant("toy-rows")
def toy_rows_launches(x, y):
    rows = x.shape[0]
    blocks = (rows + THREADS - 1) // THREADS
    return [KernelLaunch("row_per_thread_softmax", row_per_thread_softmax, (blocks,), (THREADS,), (x, y))]
