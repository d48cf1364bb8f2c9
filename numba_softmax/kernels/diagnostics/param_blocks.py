"""What a kernel's parameter block costs the GPU: two empty kernels, six parameters each (GPU only).

``empty_six_arrays`` takes six 1-D float32 arrays in Numba's ABI (each one meminfo, parent, nitems,
itemsize, data, shape, stride: 56 bytes, 336 in all); ``empty_six_words`` six ``uint64`` words (48 bytes,
what an nvcc twin's six pointers take). Same compiler, same grid, no work, no bytes moved: timed as
CUDA graphs of :data:`LAUNCHES` launches of :data:`GRID` x :data:`BLOCK` threads (the separate scheduler's
shape at 128 rows), any difference between the two is the parameters (``python -m bench probe launch``).
"""

import numpy as np
from numba import cuda

from ...launch_spec import KernelLaunch

#: Parameter bytes of each kernel: six arrays of Numba's 7-member data model, six words.
PARAM_BYTES = {"arrays": 6 * 56, "words": 6 * 8}
LAUNCHES, GRID, BLOCK = 3, 1024, 128


@cuda.jit
def empty_six_arrays(a, b, c, d, e, f):
    pass


@cuda.jit
def empty_six_words(a, b, c, d, e, f):
    pass


def param_block_launches():
    """{"arrays": launches, "words": launches}: each kernel :data:`LAUNCHES` times over the same six
    device arrays (the words are their data pointers)."""
    arrays = [cuda.device_array(1024, dtype=np.float32) for _ in range(6)]
    words = [np.uint64(a.__cuda_array_interface__["data"][0]) for a in arrays]
    return {name: [KernelLaunch(f"{name}_{i}", kernel, (GRID,), (BLOCK,), tuple(args)) for i in range(LAUNCHES)]
            for name, kernel, args in (("arrays", empty_six_arrays, arrays), ("words", empty_six_words, words))}
