"""Liger-Kernel's softmax (``liger_kernel.ops.softmax``), an optional peer: one Triton program per row.

``LigerSoftmaxFunction.apply(x)`` allocates its output (``torch.empty_like``) and launches its single-block
kernel: the row in a block of ``next_power_of_2(cols)`` lanes, loads cached ``.ca``, stores streamed ``.cs``,
4 warps, 8 from 2,048 columns, 16 from 8,192, 32 from 32,768. It refuses rows past :data:`MAX_COLUMNS`
(``calculate_settings`` raises). It runs on torch's current stream, in the input's element type.
:func:`softmax_function` raises ``ImportError`` where Liger-Kernel (or torch, Triton) is absent.
"""

#: Liger's ``MAX_FUSED_SIZE``: the widest row its softmax takes.
MAX_COLUMNS = 65536


def softmax_function():
    """``(liger_kernel version, LigerSoftmaxFunction)``; Liger-Kernel imported here: optional."""
    from importlib.metadata import PackageNotFoundError, version

    from liger_kernel.ops.softmax import LigerSoftmaxFunction
    try:
        found = version("liger_kernel")
    except PackageNotFoundError:
        found = "unknown version"
    return found, LigerSoftmaxFunction


def backward_function():
    """``(liger_kernel.ops.softmax._softmax_backward, liger_kernel.ops.utils.calculate_settings)``: Liger's backward
    alone, ``_softmax_backward(dy, y, block_size, num_warps, multi_block)`` at the settings its forward takes for
    the width (``calculate_settings(cols)`` -> ``(block_size, num_warps)``; multi-block where the row is wider).
    Private functions of Liger-Kernel: a peer for the bench only."""
    from liger_kernel.ops.softmax import _softmax_backward
    from liger_kernel.ops.utils import calculate_settings
    return _softmax_backward, calculate_settings
