"""Every kernel of the project with the signature the launch layer compiles it for.

The PTX tools (``python -m bench ptx``) and the policy tests iterate over this table,
so a new kernel is checked as soon as it is registered here.
"""

from .auto_backward import backward_builds
from .auto_columns import column_builds
from .auto_launch import builds as auto_builds
from .auto_launch import log_builds
from .fused_row import FUSED_KERNELS
from .row_stages import divide_stage, exp_stage, row_max_stage, row_sum_stage
from .persistent import SIGNATURES as PERSISTENT_SIGNATURES
from .persistent import init_queue_kernel, persistent_tiles
from .tiles import SIGNATURES as TILE_SIGNATURES
from .tiles import row_combine_kernel, tile_normalize_kernel, tile_summary_kernel

MATRIX = "float32[:, ::1]"
VECTOR = "float32[::1]"

#: name -> (dispatcher, Numba signature). Arrays are C-contiguous device arrays.
KERNELS = {
    **{kernel.py_func.__name__: (kernel, f"void({MATRIX}, {MATRIX})") for kernel in FUSED_KERNELS.values()},
    "row_max_stage": (row_max_stage, f"void({MATRIX}, {VECTOR})"),
    "exp_stage": (exp_stage, f"void({MATRIX}, {VECTOR}, {VECTOR})"),  # the output flat
    "row_sum_stage": (row_sum_stage, f"void({MATRIX}, {VECTOR})"),
    "divide_stage": (divide_stage, f"void({MATRIX}, {VECTOR}, {VECTOR})"),
    # Experiment B (tiled softmax); negative-control builds are deliberately NOT registered.
    "tile_summary_kernel": (tile_summary_kernel, TILE_SIGNATURES["tile_summary_kernel"]),
    "row_combine_kernel": (row_combine_kernel, TILE_SIGNATURES["row_combine_kernel"]),
    "tile_normalize_kernel": (tile_normalize_kernel, TILE_SIGNATURES["tile_normalize_kernel"]),
    "persistent_tiles": (persistent_tiles, PERSISTENT_SIGNATURES["persistent_tiles"]),
    "init_queue_kernel": (init_queue_kernel, PERSISTENT_SIGNATURES["init_queue_kernel"]),
}

#: method="auto"'s kernels (the table's geometries, every build, and the check-only pass): name ->
#: (dispatcher, Numba signature). Apart from KERNELS because they are the library's, not the protocol's
#: (no nvcc twins, not in the experiments); tests/cpu/test_auto_kernels_ptx.py checks their policy.
AUTO_KERNELS = auto_builds()

#: The column kernels of softmax along a dimension that is not the last (kernels/auto_columns.py: every geometry
#: for float32, bfloat16 and float64, checked or not, and samples of the other pairs); like AUTO_KERNELS, the
#: library's; tests/cpu/test_column_kernels_ptx.py checks their policy and registers.
COLUMN_KERNELS = column_builds()

#: The kernels of training: the log_softmax forward builds (kernels/auto_launch.py ``log_builds``) and the backward
#: builds of softmax and log_softmax (kernels/auto_backward.py); the library's, like AUTO_KERNELS;
#: tests/cpu/test_gradient_kernels_ptx.py checks their policy and registers.
GRADIENT_KERNELS = {**log_builds(), **backward_builds()}
