"""CPU tests of numba_softmax.peers.cudnn against the installed cuDNN wheel.

No GPU needed: loading, cudnnGetVersion, cudnnGetErrorString and tensor
descriptors all run on the host. What needs a device (cudnnCreate and the
softmax itself) is checked here only for its failure being a clean CudnnError.
The expected values come from the installed wheel itself (its metadata, its
header files), not from constants copied into this file.
"""

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CUDNN_WHEELS = ("nvidia-cudnn-cu12", "nvidia-cudnn-cu13")
REPO_ROOT = Path(__file__).resolve().parents[2]


def _installed_cudnn_wheels():
    found = {}
    for name in CUDNN_WHEELS:
        try:
            found[name] = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def _cudnn_importable():
    try:
        return importlib.util.find_spec("nvidia.cudnn") is not None
    except ModuleNotFoundError:  # no "nvidia" package at all
        return False


if not (_cudnn_importable() and _installed_cudnn_wheels()):
    pytest.skip(
        "no cuDNN wheel installed: nvidia.cudnn is not importable or neither "
        f"{' nor '.join(CUDNN_WHEELS)} is installed",
        allow_module_level=True,
    )

from numba_softmax.peers import cudnn  # noqa: E402  (after the skip on purpose)


@pytest.fixture(scope="module")
def lib():
    return cudnn.load_cudnn()


@pytest.fixture(scope="module")
def owning_wheel(lib):
    """(distribution name, distribution) of the wheel whose RECORD lists lib.path."""
    loaded = os.path.realpath(lib.path)
    for name, dist in _installed_cudnn_wheels().items():
        for f in dist.files or ():
            if os.path.realpath(dist.locate_file(f)) == loaded:
                return name, dist
    pytest.fail(f"{lib.path} belongs to none of the installed wheels {list(_installed_cudnn_wheels())}")


@pytest.fixture(scope="module")
def header_text(lib):
    """All cudnn*.h shipped next to the loaded library (nvidia/cudnn/include)."""
    include = Path(lib.path).resolve().parents[1] / "include"
    headers = sorted(include.glob("cudnn*.h"))
    assert headers, f"no cudnn*.h in {include}"
    return {h.name: h.read_text() for h in headers}


def _enum_value(header_text, name):
    values = {
        int(v)
        for text in header_text.values()
        for v in re.findall(rf"\b{name}\s*=\s*(\d+)\b", text)
    }
    assert len(values) == 1, f"{name}: expected one value in the headers, found {values}"
    return values.pop()


def test_load_finds_the_wheel_library(lib):
    first_existing = next(p for p in cudnn.wheel_candidates() if os.path.isfile(p))
    assert lib.path == first_existing
    assert lib.path.endswith(os.path.join("nvidia", "cudnn", "lib", "libcudnn.so.9"))
    assert cudnn.load_cudnn() is lib  # cached


def test_version_matches_installed_wheel(lib, owning_wheel, header_text):
    name, dist = owning_wheel
    major, minor, patch = dist.version.split(".")[:3]  # e.g. 9.10.2.21
    assert major == "9"
    assert lib.version_string == f"{major}.{minor}.{patch}"
    assert lib.version == int(major) * 10000 + int(minor) * 100 + int(patch)
    # ... and with the header shipped in the same wheel.
    version_h = header_text["cudnn_version.h"]
    header_version = tuple(
        int(re.search(rf"#define CUDNN_{part}\s+(\d+)", version_h).group(1))
        for part in ("MAJOR", "MINOR", "PATCHLEVEL")
    )
    assert header_version == (int(major), int(minor), int(patch))
    # A -cuXY wheel is built against CUDA runtime XY (cudnnGetCudartVersion: 12090 = 12.9).
    assert lib.cudart_version // 1000 == int(name.rsplit("-cu", 1)[1])


@pytest.mark.parametrize(
    "name",
    ["CUDNN_SOFTMAX_ACCURATE", "CUDNN_SOFTMAX_MODE_INSTANCE", "CUDNN_TENSOR_NCHW",
     "CUDNN_DATA_FLOAT", "CUDNN_STATUS_SUCCESS", "CUDNN_STATUS_NOT_INITIALIZED",
     "CUDNN_STATUS_BAD_PARAM"],
)
def test_enum_constant_matches_header(header_text, name):
    assert getattr(cudnn, name) == _enum_value(header_text, name)


def test_status_names_match_header_and_library(lib, header_text):
    enumerators = dict(
        (int(v), n) for n, v in re.findall(r"\b(CUDNN_STATUS_\w+)\s*=\s*(\d+)\b", header_text["cudnn_graph.h"])
    )
    assert len(enumerators) > 40  # the parse found the real enum, not a stray line
    for code, name in enumerators.items():
        assert cudnn.STATUS_NAMES.get(code) == name
        assert lib.cdll.cudnnGetErrorString(code).decode() == name


def test_null_descriptor_becomes_cudnn_error(lib):
    status = lib.cdll.cudnnSetTensor4dDescriptor(
        None, cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_DATA_FLOAT, 4, 8, 1, 1)
    assert status != cudnn.CUDNN_STATUS_SUCCESS
    with pytest.raises(cudnn.CudnnError) as info:
        lib.check("cudnnSetTensor4dDescriptor", status)
    err = info.value
    assert (err.call_name, err.status_code) == ("cudnnSetTensor4dDescriptor", status)
    assert err.status_name == cudnn.STATUS_NAMES[status]
    assert err.message == lib.cdll.cudnnGetErrorString(status).decode()
    assert err.status_name in str(err) and "cudnnSetTensor4dDescriptor" in str(err)


def test_softmax_forward_with_null_handle_is_bad_param(lib):
    alpha, beta = cudnn.ctypes.c_float(1.0), cudnn.ctypes.c_float(0.0)
    status = lib.cdll.cudnnSoftmaxForward(
        None, cudnn.CUDNN_SOFTMAX_ACCURATE, cudnn.CUDNN_SOFTMAX_MODE_INSTANCE,
        cudnn.ctypes.byref(alpha), None, None, cudnn.ctypes.byref(beta), None, None)
    with pytest.raises(cudnn.CudnnError) as info:
        lib.check("cudnnSoftmaxForward", status)
    assert info.value.status_name == "CUDNN_STATUS_BAD_PARAM"


@pytest.mark.parametrize("rows, cols", [(0, 8), (4, 0), (-1, 8)])
def test_bad_shape_is_reported_by_cudnn(rows, cols):
    # Descriptors are set before cudnnCreate, so this fails the same way with or without a GPU.
    with pytest.raises(cudnn.CudnnError) as info:
        cudnn.CudnnSoftmax(rows, cols, 0)
    assert info.value.call_name == "cudnnSetTensor4dDescriptor"
    assert info.value.status_code == 2000
    assert info.value.status_name == "CUDNN_STATUS_BAD_PARAM"


def test_dimension_outside_c_int_is_refused_before_ctypes():
    with pytest.raises(ValueError, match="rows=2147483648"):
        cudnn.CudnnSoftmax(2**31, 8, 0)


def test_cudnn_create_without_gpu_is_a_clean_error():
    try:
        op = cudnn.CudnnSoftmax(4, 8, 0)
    except cudnn.CudnnError as exc:
        assert exc.call_name == "cudnnCreate"
        assert exc.status_name == "CUDNN_STATUS_NOT_INITIALIZED"
        assert "CUDNN_STATUS_NOT_INITIALIZED" in str(exc)
    else:
        op.close()
        pytest.skip("a GPU is usable here, so cudnnCreate succeeded")


def test_system_loader_fallback_reports_the_mapped_file(lib):
    # With no wheel candidates, the loader must find libcudnn.so.9 through
    # LD_LIBRARY_PATH (read at process start, hence a subprocess) and report the
    # file it really mapped.
    lib_dir = os.path.dirname(os.path.realpath(lib.path))
    code = (
        "import numba_softmax.peers.cudnn as m\n"
        "m.wheel_candidates = lambda: []\n"
        "print(m.load_cudnn().path)\n"
    )
    env = dict(os.environ, LD_LIBRARY_PATH=lib_dir, PYTHONPATH=str(REPO_ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.strip() == os.path.realpath(lib.path)
