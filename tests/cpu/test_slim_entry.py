"""The launch layer's slim kernel entry: the kernel's own code, a parameter block of pointers and shapes.

For every registered protocol kernel the entry's PTX (``kernel_ptx``, what the launch layer launches) holds
the same instructions as the kernel compiled with Numba's own array ABI (``array_abi_ptx``), up to register
numbers, shared-array symbol names and block placement, and only its ``.param`` list is shorter. Compiled in a
child process with the real CUDA target (no GPU needed), like test_tiled_ptx.py.
"""

import textwrap

import pytest
from backends import run_on_the_real_target

_CHILD = textwrap.dedent("""
    import collections, json, re, sys
    from numba.core import sigutils
    from numba import types
    from numba_softmax.kernels.registry import KERNELS
    from numba_softmax.ptx import array_abi_ptx, kernel_ptx

    def instructions(ptx):
        body = ptx[ptx.index("{", ptx.index(".entry")):]
        lines = []
        for line in body.splitlines():
            line = line.strip()
            if not line or line.startswith("//") or line.startswith("$L__") or line.startswith(".reg"):
                continue
            if "ld.param" in line:
                continue  # where the arguments come from is the difference under test
            if line.startswith("bra.uni"):
                continue  # block placement: a block laid out after its predecessor needs no jump to it
            line = re.sub(r"%(rd|r|p|f|rs|fd)\\d+", "%R", line)
            line = re.sub(r"_cudapy_smem_\\d+", "SMEM", line)
            line = re.sub(r"\\$L__BB\\d+_\\d+", "LABEL", line)
            line = re.sub(r"_ZN\\w+", "NAME", line)
            lines.append(line)
        return collections.Counter(lines)

    def params(ptx):
        header = ptx[ptx.index(".entry"):]
        return re.findall(r"\\.param\\s+\\.(\\w+)", header[:header.index(")")])

    out = {}
    for name, (dispatcher, signature) in KERNELS.items():
        argtypes = sigutils.normalize_signature(signature)[0]
        slim, numba = kernel_ptx(dispatcher, signature), array_abi_ptx(dispatcher, signature)
        expected = sum(1 + t.ndim if isinstance(t, types.Array) else 1 for t in argtypes)
        out[name] = {"same_instructions": instructions(slim) == instructions(numba),
                     "only_in_slim": sorted((instructions(slim) - instructions(numba)).elements())[:10],
                     "only_in_numba": sorted((instructions(numba) - instructions(slim)).elements())[:10],
                     "slim_params": params(slim), "numba_params": len(params(numba)), "expected_params": expected}
    from numba import cuda

    @cuda.jit(fastmath=True)
    def fast_divide(a, b):
        i = cuda.grid(1)
        if i < a.shape[0]:
            a[i] = a[i] / b[i]

    signature = "void(float32[::1], float32[::1])"
    out["fastmath divisions"] = [re.findall(r"div\\.\\S+", kernel_ptx(fast_divide, signature)),
                                 re.findall(r"div\\.\\S+", array_abi_ptx(fast_divide, signature))]
    json.dump(out, open(sys.argv[1], "w"))
""")


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    return run_on_the_real_target(_CHILD, tmp_path_factory.mktemp("ptx"))


def test_every_protocol_kernel_has_its_own_code_behind_the_slim_entry(entries):
    from numba_softmax.kernels.registry import KERNELS
    entries = {name: entry for name, entry in entries.items() if name in KERNELS}
    assert len(entries) == len(KERNELS)
    for name, entry in entries.items():
        assert entry["same_instructions"], (name, entry["only_in_slim"], entry["only_in_numba"])


def test_the_inlined_body_keeps_the_kernels_compile_options(entries):
    """A fastmath kernel's body keeps its fast division behind the entry (the body is compiled with the kernel's
    fastmath flag; without it the entry's division was ``div.full``, not the kernel's ``div.approx``)."""
    slim, numba = entries["fastmath divisions"]
    assert slim == numba == ["div.approx.ftz.f32"]


def test_the_slim_entry_takes_a_pointer_and_a_shape_per_array(entries):
    from numba_softmax.kernels.registry import KERNELS
    entries = {name: entry for name, entry in entries.items() if name in KERNELS}
    for name, entry in entries.items():
        assert len(entry["slim_params"]) == entry["expected_params"], name
        assert entry["numba_params"] > len(entry["slim_params"]), name
    # exp_stage(x[:, ::1], row_max[::1], exps[::1]): 3 pointers + 4 extents, 56 bytes instead of 184
    assert entries["exp_stage"]["slim_params"] == ["u64"] * 7
    assert entries["exp_stage"]["numba_params"] == 23


def test_entry_source_rebuilds_each_array_from_pointer_and_shape():
    from numba import types

    from numba_softmax.launch.entry import _entry_source, slim_types
    argtypes = (types.Array(types.float32, 2, "C"), types.int32, types.Array(types.int64, 1, "C"))
    source = _entry_source(argtypes)
    assert source.splitlines()[0] == "def entry(data0, shape0_0, shape0_1, value1, data2, shape2_0):"
    assert "array0 = c_array(data0, (shape0_0, shape0_1,))" in source
    assert source.rstrip().endswith("body(array0, value1, array2)")
    assert slim_types("k", argtypes) == (types.CPointer(types.float32), types.int64, types.int64, types.int32,
                                         types.CPointer(types.int64), types.int64)


def test_a_strided_array_passes_its_strides_and_an_f_array_is_refused():
    from numba import types

    from numba_softmax.launch.entry import SlimEntryError, _entry_source, slim_types
    argtypes = (types.int32, types.Array(types.float32, 2, "A"))
    assert slim_types("k", argtypes) == (types.int32, types.CPointer(types.float32)) + (types.int64,) * 4
    source = _entry_source(argtypes)
    assert source.splitlines()[0] == "def entry(value0, data1, shape1_0, shape1_1, stride1_0, stride1_1):"
    assert "array1 = strided_array(data1, (shape1_0, shape1_1,), (stride1_0, stride1_1,))" in source
    with pytest.raises(SlimEntryError, match=r"my_kernel: argument 1 .*C-contiguous .* or strided"):
        slim_types("my_kernel", (types.int32, types.Array(types.float32, 2, "F")))


class _Interface:
    def __init__(self, shape, strides, pointer=4096):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": "<f4",
                                         "data": (pointer, False), "version": 3}


def test_array_members_pass_pointer_and_shape_of_c_contiguous_arrays_only():
    from numba_softmax.launch.entry import SlimEntryError, array_members
    assert array_members(_Interface((3, 5), None)) == (4096, (3, 5))
    assert array_members(_Interface((3, 5), (20, 4))) == (4096, (3, 5))
    assert array_members(_Interface((1, 5), (999, 4))) == (4096, (1, 5))  # an extent-1 axis's stride is free
    with pytest.raises(SlimEntryError, match="not C-contiguous"):
        array_members(_Interface((3, 5), (40, 4)))  # every other row of a wider matrix
    # A strided array (an A-layout kernel argument): pointer, shape and strides in bytes, C order filled in.
    assert array_members(_Interface((3, 5), (40, 4)), strided=True) == (4096, (3, 5, 40, 4))
    assert array_members(_Interface((3, 5), None), strided=True) == (4096, (3, 5, 20, 4))
