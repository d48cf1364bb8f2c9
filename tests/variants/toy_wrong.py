"""A negative control for the variant checks: the toy kernel of toy_rows.py, except that it drops the last
column of every row (writes zero there). The oracle must reject it, naming the variant."""

from numba import cuda, float32

from bench.variants import kernel_variant
from numba_softmax.launch_spec import KernelLaunch
from numba_softmax.numerics import KERNEL_OPTIONS, NEG_INF, f32_add, f32_div, f32_exp, f32_max, f32_sub

THREADS = 128


@cuda.jit(**KERNEL_OPTIONS)
def drops_last_column_softmax(x, y):
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
    for j in range(cols - 1):
        y[row, j] = f32_div(f32_exp(f32_sub(x[row, j], m)), z)
    y[row, cols - 1] = float32(0.0)  # the deliberate error: the last column dropped


@kernel_variant("toy-drops-last-column")
def toy_wrong_launches(x, y):
    rows = x.shape[0]
    blocks = (rows + THREADS - 1) // THREADS
    return [KernelLaunch("drops_last_column_softmax", drops_last_column_softmax, (blocks,), (THREADS,), (x, y))]
