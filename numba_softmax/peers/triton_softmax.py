"""Triton's fused-softmax tutorial kernel, the peer that holds a whole row in one program.

One program per row (grid ``(rows,)``); the row is loaded once into a block of ``next_power_of_2(cols)``
lanes (masked with ``-inf``), converted to float32 (a no-op for float32 rows; bfloat16 and float16 rows
compute in float32 like this project's kernels), reduced to its maximum and its sum of exponentials, divided
and stored, rounded once to the output tensor's element type by the store: ``2 * rows * cols * itemsize``
bytes moved. Triton's ``exp`` and division are the approximate ones, not this project's numerics policy. The
whole row sits in one program's registers: past 65,536 columns it spills (it ran at 131,072 and 262,144
columns on the H200 at a fifth of ``auto``'s speed); where it does not compile or run the caller reports so.
:func:`softmax_kernel` raises ``ImportError`` where Triton is absent.
"""

import functools

tl = None  # triton.language, bound by softmax_kernel() (Triton resolves a kernel's globals at compile time)


def next_power_of_2(n):
    if n < 1:
        raise ValueError(f"next_power_of_2: n must be >= 1, got {n}")
    return 1 << (int(n) - 1).bit_length()


def num_warps(block_size):
    """The tutorial's choice: 4 warps, 8 from 2048 columns, 16 from 4096."""
    if block_size >= 4096:
        return 16
    if block_size >= 2048:
        return 8
    return 4


@functools.cache
def softmax_kernel():
    """``(triton, kernel)``: the tutorial's one-row-per-program softmax (Triton imported here: optional)."""
    global tl
    import triton
    import triton.language as triton_language
    tl = triton_language

    @triton.jit
    def triton_softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_cols,
                              BLOCK_SIZE: tl.constexpr):
        row_idx = tl.program_id(0)
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf")).to(tl.float32)
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output, mask=mask)

    return triton, triton_softmax_kernel


def launcher(rows, cols):
    """``launch(x, y)`` of the kernel for a ``(rows, cols)`` torch tensor pair (float32, bfloat16 or float16,
    row-major) on torch's current stream, and a description of its geometry."""
    _triton, kernel = softmax_kernel()
    block = next_power_of_2(cols)
    warps = num_warps(block)

    def launch(x, y):
        kernel[(rows,)](y, x, x.stride(0), y.stride(0), cols, BLOCK_SIZE=block, num_warps=warps)

    return launch, f"grid ({rows},), BLOCK_SIZE={block}, num_warps={warps}"
