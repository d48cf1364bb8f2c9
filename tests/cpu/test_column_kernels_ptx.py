"""The column kernels (softmax along a dimension that is not the last, numba_softmax/kernels/auto_columns.py) on
the CPU: the numerics policy in their sm_90 PTX, registers within the launch bounds without spills, the registry
(no GPU needed)."""

import re

import pytest

from numba_softmax.kernels.auto_columns import (COLUMN_GEOMETRIES, FLOAT64_COLUMN_GEOMETRIES, FULL_COLUMN_TYPES,
                                                SAMPLE_COLUMN_TYPES, column_signature)
from numba_softmax.kernels.column_controls import short_column_control_kernel
from numba_softmax.kernels.auto_rows import types_suffix
from numba_softmax.kernels.registry import AUTO_KERNELS, COLUMN_KERNELS, KERNELS
from numba_softmax.ptx import check_policy, kernel_ptx
from ptx_checks import check_build, parallel_ptx_getter

FLOAT64_SPILL_BYTES = 256
ptx_of = parallel_ptx_getter("numba_softmax.kernels.registry:COLUMN_KERNELS")


@pytest.mark.parametrize("name", sorted(COLUMN_KERNELS))
def test_build_obeys_the_numerics_policy_and_holds_its_values_in_registers(name):
    ptx = ptx_of(name)
    assert re.search(r"\.maxntid\s+256", ptx)  # launch bounds: 4 blocks of 256 threads per SM
    # float64 arithmetic (libdevice's double exp and division) may spill a few temporaries, as the rows do.
    budget = FLOAT64_SPILL_BYTES if name.removesuffix("_checked").endswith("_f64") else 0
    check_build(name, ptx, COLUMN_KERNELS[name][0], budget)


@pytest.mark.parametrize("name", ["auto_columns_r8", "auto_columns_r32_bf16_checked"])
def test_register_build_is_one_exp_and_one_division_per_value(name):
    values = int(re.search(r"_r(\d+)", name).group(1))
    report = check_policy(name, ptx_of(name))
    assert report.expf_count == values and report.divisions == {"div.rn.f32": values}
    assert report.rounded_arith["mul"] == 0


@pytest.mark.parametrize("name", ["auto_columns_s1_c8", "auto_columns_s1_c8_checked", "auto_columns_s8_c8"])
def test_online_build_arithmetic(name):
    """Pass 1: one exp per value and one rescale per chunk; the fold of the S threads: one rescale each; pass 2:
    one exp and one division per value (one loop body for the register chunk and the re-read ones)."""
    chunk, splits = (int(v) for v in re.search(r"_s(\d+)_c(\d+)", name).groups()[::-1])
    report = check_policy(name, ptx_of(name))
    folds = splits if splits > 1 else 0
    assert report.expf_count == chunk + 1 + folds + chunk
    assert report.divisions == {"div.rn.f32": chunk}
    assert report.rounded_arith["mul"] == 1 + folds  # the sum is never multiplied per value


def test_float64_builds_compute_in_float64():
    ptx = ptx_of("auto_columns_s1_c4_f64")
    report = check_policy("auto_columns_s1_c4_f64", ptx)
    assert report.ok and report.expf_count == 0 and set(report.divisions) == {"div.rn.f64"}
    assert "add.rn.f64" in ptx and "fma.rn.f32" not in ptx


def test_registry_holds_every_column_build_apart_from_the_other_kernels():
    names = set(COLUMN_KERNELS)
    for types in FULL_COLUMN_TYPES:
        geometries = FLOAT64_COLUMN_GEOMETRIES if "float64" in types else COLUMN_GEOMETRIES
        for geometry in geometries:
            for checked in ("", "_checked"):
                assert f"auto_{geometry}{types_suffix(types)}{checked}" in names, (geometry, types)
    for types in SAMPLE_COLUMN_TYPES:
        assert any(name.startswith("auto_columns_r") and name.endswith(types_suffix(types)) for name in names), types
    assert not names & (set(KERNELS) | set(AUTO_KERNELS))
    assert not [name for name in names if "control" in name]


def test_the_negative_control_obeys_the_policy_too():
    """It is wrong in what it reads and writes (a column's last position), not in its arithmetic: only the
    oracle can reject it (tests/kernels/test_auto_columns.py)."""
    control = kernel_ptx(short_column_control_kernel("columns_s8_c8"), column_signature(("float32", "float32"), False))
    report = check_policy("control", control)
    assert report.ok and report.expf_count == check_policy("real", ptx_of("auto_columns_s8_c8")).expf_count
