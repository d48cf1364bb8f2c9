"""The API layer without a GPU: input kinds read in place (CAI, DLPack), layout checks, stream kinds,
and the one-line error where there is no CUDA device. Nothing here launches a kernel."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from numba_softmax import arrays
from numba_softmax.contiguity import c_contiguous
from numba_softmax.device import gpu_present
from numba_softmax.layout import Rows, plan_layout
from numba_softmax.validation import element_type, is_device_array, read_operand


def validate(array, what="x"):
    """What softmax() checks of one array on the host: kind, dtype, layout (-> its rows plan)."""
    operand = read_operand(array, what)
    element_type(operand.dtype, None, what)
    return plan_layout(operand.shape, operand.strides, operand.dtype.itemsize, -1, what)


class InterfaceArray:
    """An object exporting only ``__cuda_array_interface__`` (what CuPy and others export): the
    pointer is never dereferenced by the host-side checks under test."""

    def __init__(self, shape, strides=None, typestr="<f4", pointer=0x7F0000000000, stream=None):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (pointer, False), "version": 3, "stream": stream}


class CudaLabelledDLPack:
    """A host numpy array's DLPack capsule, labelled as a CUDA device: exercises the capsule reader
    (pointer, shape, dtype, strides) without a GPU."""

    def __init__(self, host):
        self.host = host

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        return self.host.__dlpack__()


def test_kinds_are_told_apart():
    assert arrays.array_kind(np.zeros((2, 2), np.float32)) == arrays.NUMPY
    assert arrays.array_kind(InterfaceArray((2, 2))) == arrays.CUDA_ARRAY_INTERFACE
    assert arrays.array_kind(CudaLabelledDLPack(np.zeros(2))) == arrays.DLPACK
    assert arrays.array_kind([[1.0]]) is None
    assert is_device_array(InterfaceArray((2, 2))) and not is_device_array(np.zeros(2))


def test_an_interface_array_is_read_in_place():
    kind, pointer, shape, strides, dtype, stream = read_operand(InterfaceArray((3, 8), stream=7))
    assert (kind, pointer, shape, strides, stream) == (arrays.CUDA_ARRAY_INTERFACE, 0x7F0000000000, (3, 8), None, 7)
    assert dtype == np.float32
    # Explicit C strides and odd strides of an extent-1 dimension are still contiguous.
    assert read_operand(InterfaceArray((3, 8), strides=(32, 4))).strides is None
    assert read_operand(InterfaceArray((1, 8), strides=(4, 4))).strides is None
    # Any other strides are read, in bytes.
    assert read_operand(InterfaceArray((3, 8), strides=(64, 4))).strides == (64, 4)
    assert validate(InterfaceArray((3, 8), strides=(64, 4))) == Rows(3, 8, 16)


@pytest.mark.parametrize("array, message", [
    (InterfaceArray((3, 8), strides=(64, 8)), "out: the elements along dim 1 are 2 elements apart"),
    (InterfaceArray((3, 8), strides=(4, 12)), "out: the elements along dim 1 are 3 elements apart"),
    (InterfaceArray((3, 8), typestr="<i4"), "out: dtype int32 is not one softmax takes"),
    (InterfaceArray((3, 8), typestr="<u2"), "out: uint16 is read as bfloat16 bits only with dtype='bfloat16'"),
    (InterfaceArray((3, 8), strides=(-32, 4)), "out: negative stride -32 bytes"),
    (InterfaceArray(()), "out: a 0-D array"),
    (InterfaceArray((0, 8)), "out: shape \\(0, 8\\) has a zero-size dimension"),
])
def test_a_bad_device_array_is_rejected_from_its_interface_alone(array, message):
    with pytest.raises(ValueError, match=message):
        validate(array, "out")


def test_a_dlpack_capsule_is_read_in_place():
    host = np.arange(24, dtype=np.float32).reshape(3, 8)
    kind, pointer, shape, strides, dtype, _ = read_operand(CudaLabelledDLPack(host))
    assert (kind, pointer, shape, strides, dtype) == (arrays.DLPACK, host.ctypes.data, (3, 8), None, np.float32)
    assert read_operand(CudaLabelledDLPack(np.zeros((3, 16), np.float32)[:, ::2])).strides == (64, 8)
    assert read_operand(CudaLabelledDLPack(np.zeros((3, 8)))).dtype == np.float64
    assert validate(CudaLabelledDLPack(np.zeros((3, 16), np.float16)[:, 2:10])) == Rows(3, 8, 16)
    with pytest.raises(ValueError, match=r"x: dtype DLPack \(code 0, 64 bits, 1 lanes\) is not one softmax takes"):
        validate(CudaLabelledDLPack(np.zeros((3, 8), np.int64)))
    offset = np.zeros((4, 8), np.float32)[1:]
    assert read_operand(CudaLabelledDLPack(offset)).pointer == offset.ctypes.data


def test_a_host_dlpack_object_is_not_taken_for_a_device_one():
    class HostDLPack(CudaLabelledDLPack):
        def __dlpack_device__(self):
            return (1, 0)
    with pytest.raises(ValueError, match="not on a CUDA device"):
        read_operand(HostDLPack(np.zeros((2, 2), np.float32)))


def test_stream_kinds_give_their_handle():
    from cuda.bindings import driver as cu

    class Core:
        def __cuda_stream__(self):
            return (0, 0x1234)

    class Torch:
        cuda_stream = 0x2345

    class CuPy:
        ptr = 0x3456

    assert arrays.stream_handle(0x4567) == 0x4567
    assert arrays.stream_handle(Core()) == 0x1234
    assert arrays.stream_handle(Torch()) == 0x2345
    assert arrays.stream_handle(CuPy()) == 0x3456
    assert arrays.stream_handle(cu.CUstream(0x5678)) == 0x5678
    for bad in ("default", 1.5, True, object()):
        with pytest.raises(ValueError, match="stream must be"):
            arrays.stream_handle(bad)


def test_c_contiguous():
    assert c_contiguous((3, 4), (16, 4), 4)
    assert not c_contiguous((3, 4), (32, 8), 4)
    assert c_contiguous((1, 4), (999, 4), 4)
    assert not c_contiguous((3, 4), (4, 12), 4)


@pytest.mark.skipif(gpu_present(), reason="this machine has a GPU: the no-GPU message cannot show here")
def test_without_a_gpu_the_readme_example_ends_in_one_clear_line():
    script = textwrap.dedent("""
        import numpy as np
        from numba_softmax import softmax
        softmax(np.random.rand(4, 16).astype(np.float32))
    """)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("numba_softmax.api.NoCudaDeviceError: no CUDA device")
    assert "NUMBA_ENABLE_CUDASIM=1" in last
    assert "CudaSupportError" not in proc.stderr and "cuInit" not in proc.stderr
    # And the same with the simulator, as the message says: it runs.
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(env, NUMBA_ENABLE_CUDASIM="1"), timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_in_the_simulator_a_positive_infinity_prints_the_value_error_alone():
    script = textwrap.dedent("""
        import numpy as np
        from numba_softmax import softmax
        x = np.ones((2, 8), np.float32)
        x[1, 3] = np.inf
        softmax(x)
    """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode != 0
    assert "Warning" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last == "ValueError: x has a non-finite value (NaN or infinity) at row 1, column 3"
