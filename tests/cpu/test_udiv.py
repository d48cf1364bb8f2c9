"""numerics.udiv: LLVM's unsigned division, without the zero-divisor branch Numba's ``//`` keeps."""

import re

import pytest
from numba import cuda

from numba_softmax.numerics import udiv
from numba_softmax.ptx import fixed_compute_capability


def _ptx(fn, signature):
    with fixed_compute_capability((9, 0)):
        ptx, _ = cuda.compile_ptx(fn, signature, cc=(9, 0))
    return ptx


def _quotient_udiv(out, a, b):
    out[0] = udiv(a, b)


def _quotient_floordiv(out, a, b):
    out[0] = a // b


def test_udiv_divides_without_a_zero_divisor_test():
    signature = "void(uint64[::1], uint64, uint64)"
    ours, numbas = _ptx(_quotient_udiv, signature), _ptx(_quotient_floordiv, signature)

    def tests_the_divisor(ptx):
        # The divisor b is the last parameter; a test of that register against zero is the branch.
        divisor = re.search(r"ld\.param\.u64\s+(%rd\d+),\s*\[\w+_param_8\]", ptx).group(1)
        return re.search(rf"setp\.(eq|ne)\.s64\s+%p\d+,\s*{divisor},\s*0;", ptx) is not None

    assert tests_the_divisor(numbas)  # the control: Numba's // has the test
    assert not tests_the_divisor(ours)
    assert "div.u64" in ours  # NVVM's 32-bit fast path stays: div.u32 when both fit


def test_udiv_refuses_signed_or_mixed_operands():
    def signed(out, a, b):
        out[0] = udiv(a, b)

    with pytest.raises(Exception, match="udiv: expected two unsigned integers of one width"):
        _ptx(signed, "void(int64[::1], int64, int64)")
    with pytest.raises(Exception, match="udiv: expected two unsigned integers of one width"):
        _ptx(signed, "void(uint64[::1], uint64, uint32)")
