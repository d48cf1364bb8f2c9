"""Experiment A: four explicit stages vs one fused row kernel vs cuDNN, per shape (and, with
``--twins``, the nvcc twins of fused and stages: bench/twins.py; with ``--variants``, registered kernel
variants: bench/variants/).

Every variant reads the same fixed input buffer and writes its own output buffer;
all of them are submitted through the launch layer on one non-blocking stream, in
stream mode and as a replayed CUDA graph (see :mod:`bench.runner`).
"""

import numpy as np
from numba import cuda

from bench.shapes import parse_shapes
from bench import variants as registered_variants
from bench.twins import bitwise_groups, matrix_twins, plan_library
from numba_softmax import backend
from numba_softmax.cases import EXPERIMENT_A_SHAPES, EXPERIMENT_A_SIM_SHAPES
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.fused_row import MAX_FUSED_COLUMNS, fused_launches
from numba_softmax.kernels.row_stages import stages_launches
from numba_softmax.launch.driver import Invocation
from numba_softmax.oracle import matrix_reference
from numba_softmax.peers import cudnn as cudnn_module

EXPERIMENT = "A"
RATIO_REFERENCE = "fused"


class _Variant:
    def __init__(self, name, invocation, outputs, stream):
        self.name = name
        self.invocation = invocation
        self._outputs = outputs  # key -> device array; "out" first
        self._stream = stream

    def read_outputs(self):
        arrays = {key: d.copy_to_host(stream=self._stream.numba) for key, d in self._outputs.items()}
        self._stream.synchronize()
        return arrays

    def verify_after_invocation(self):
        pass


class MatrixCase:
    """One Experiment A shape with fixed device buffers for every variant."""

    experiment = EXPERIMENT
    bitwise_groups = (("fused", "stages"),)

    def __init__(self, shape, stream, *, gpu, cudnn=None, twins=None, added=()):
        rows, cols = shape
        self.shape = shape
        self.name = f"{rows}x{cols}"
        self.bytes_moved = 2 * rows * cols * 4
        self.stream = stream
        f32 = np.float32
        self.d_x = cuda.device_array(shape, dtype=f32)
        make = backend.invocation  # the launch layer on a GPU, Numba's dispatcher in the simulator

        self.variants = []
        if cols <= MAX_FUSED_COLUMNS:
            d_y = cuda.device_array(shape, dtype=f32)
            self.variants.append(_Variant("fused", make("fused", fused_launches(self.d_x, d_y)),
                                          {"out": d_y}, stream))
        d_y, d_max, d_exp, d_sum = (cuda.device_array(shape, dtype=f32), cuda.device_array(rows, dtype=f32),
                                    cuda.device_array(shape, dtype=f32), cuda.device_array(rows, dtype=f32))
        self.variants.append(_Variant(
            "stages", make("stages", stages_launches(self.d_x, d_y, d_max, d_exp, d_sum)),
            {"out": d_y, "row_max": d_max, "row_sum": d_sum}, stream))
        if cudnn is not None:
            self.variants.append(_cudnn_variant(self.d_x, shape, stream, cudnn))
        for variant in added:  # --variants: registered kernel variants, each on an output buffer of its own
            d_y = cuda.device_array(shape, dtype=f32)
            self.variants.append(_Variant(variant.name, make(variant.name, variant.launches(self.d_x, d_y)),
                                          {"out": d_y}, stream))
            if variant.bitwise_with is not None:
                self.bitwise_groups = self.bitwise_groups + ((variant.bitwise_with, variant.name),)
        if twins is not None:  # --twins: the nvcc twins of fused and stages (bench/twins.py)
            self.variants += matrix_twins(self, twins, _Variant)
            self.bitwise_groups = self.bitwise_groups + bitwise_groups(self.variants)

    def variant(self, name):
        return next(v for v in self.variants if v.name == name)

    def load_fixture(self, fixture_id):
        host = matrix_fixture(fixture_id, self.shape)
        self.d_x.copy_to_device(host, stream=self.stream.numba)
        self.stream.synchronize()
        return host

    def reference(self, host_input):
        return matrix_reference(host_input)


def _cudnn_variant(d_x, shape, stream, cudnn_module):
    """cuDNN ACCURATE / INSTANCE through the same Invocation interface and stream."""
    d_y = cuda.device_array(shape, dtype=np.float32)
    softmax = cudnn_module.CudnnSoftmax(shape[0], shape[1], stream.ptr)
    x_ptr = d_x.__cuda_array_interface__["data"][0]
    y_ptr = d_y.__cuda_array_interface__["data"][0]

    def forward(_stream):
        softmax.forward(x_ptr, y_ptr)

    # Warm cuDNN (handle, heuristics, module loads) before any capture or timing.
    for _ in range(3):
        forward(stream)
    stream.synchronize()
    variant = _Variant("cudnn", Invocation("cudnn", [forward]), {"out": d_y}, stream)
    variant.library = softmax
    return variant


class CudnnUnavailable(RuntimeError):
    """cuDNN was wanted (no --no-cudnn) and did not load."""


def _plan(args, gpu, metadata, run):
    """Stream, case factories and notes for Experiment A."""
    notes = []
    if args.shapes:
        shapes = parse_shapes(args.shapes)
    else:
        shapes = list(EXPERIMENT_A_SHAPES if gpu else EXPERIMENT_A_SIM_SHAPES)
    stream = backend.stream()
    if not gpu:
        chosen = "the shapes given" if args.shapes else "the simulator's small shapes (the protocol's need a GPU)"
        notes.append(f"simulator: {chosen} {shapes}; graph mode, timings and cuDNN need a GPU")
    cudnn = None
    if gpu and not args.no_cudnn:
        try:
            library = cudnn_module.load_cudnn()
        except Exception as exc:  # the protocol's third variant: missing it is a required failure
            raise CudnnUnavailable(f"cuDNN did not load ({type(exc).__name__}: {exc}); install the 'cudnn' extra "
                                   "(pip install -e \".[cudnn]\") or pass --no-cudnn to run without it") from exc
        metadata["cudnn"] = {"path": library.path, "version": library.version,
                             "version_string": library.version_string}
        cudnn = cudnn_module
    elif not args.no_cudnn:
        notes.append("cuDNN variant skipped: no GPU")
    else:
        notes.append("cuDNN variant skipped: --no-cudnn")
    twins = plan_library(args, metadata, notes)
    added = registered_variants.chosen(args)
    factories = [(lambda shape=shape: MatrixCase(shape, stream, gpu=gpu, cudnn=cudnn, twins=twins, added=added))
                 for shape in shapes]
    return stream, factories, notes


_plan.ratio_reference = RATIO_REFERENCE
EXPERIMENT_PLAN_A = _plan
