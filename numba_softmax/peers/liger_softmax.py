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
