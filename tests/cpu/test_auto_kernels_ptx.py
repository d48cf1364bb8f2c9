"""method="auto"'s kernels on the CPU: the numerics policy in their sm_90 PTX, registers without spills, the
registry, and the perf tool's auto goals and candidate selection (no GPU needed)."""

import difflib
import re

import numpy as np
import pytest

from numba_softmax.kernels.auto_controls import (cluster_control_kernel, narrow_short_sum_control_kernel,
                                                 shared_span_control_kernel)
from numba_softmax.kernels.auto_geometry import (AUTO_TABLE, CANDIDATE_GEOMETRIES, CANDIDATES, FAST_MATH_SUFFIX,
                                                 NARROW_COLUMNS, NARROW_GEOMETRY, NARROW_ROW_BYTES, TABLE_GEOMETRIES,
                                                 Geometry, auto_geometry, backward_geometry, group_shape,
                                                 packed_geometry, packs_width, spill_budget, table_geometry)
from numba_softmax.kernels.auto_launch import (FULL_TYPES, KIND_SAMPLES, SAMPLE_TYPES, auto_kernel, auto_launches,
                                               builds, signature)
from numba_softmax.element_types import STORAGE_DTYPES
from numba_softmax.kernels.auto_parts import max_edges
from numba_softmax.kernels.auto_rows import SHORT_TYPES, make_auto_kernel, types_suffix
from numba_softmax.kernels.registry import AUTO_KERNELS, KERNELS
from numba_softmax.ptx import check_policy, ptx_getter
from ptx_checks import check_build, parallel_ptx_getter

F32 = ("float32", "float32")
UNCHECKED_SIGNATURE = signature(F32, False)
# Every registered build (the table's geometries, every element type the registry samples, checked or not), and
# the float32 build of each other candidate ``bench perf`` times (their other builds differ from these by the
# element conversions and the check, which the registered builds cover).
ALL_BUILDS = {**AUTO_KERNELS, **{name: build for name, build in builds(CANDIDATE_GEOMETRIES).items()
                                 if name not in AUTO_KERNELS and name.removeprefix("auto_") in CANDIDATE_GEOMETRIES}}
ptx_of = parallel_ptx_getter(f"{__name__}:ALL_BUILDS")


@pytest.mark.parametrize("name", sorted(ALL_BUILDS))
def test_build_obeys_the_numerics_policy_and_holds_its_values_in_registers(name):
    # Nothing spills beyond the geometry's declared budget (float64 arithmetic, the 8-quad rows geometries).
    budget = 0
    if name.startswith("auto_"):
        geometry, types = _parse_build(name)
        budget = spill_budget(geometry, "float64" in types[1:])
    check_build(name, ptx_of(name), ALL_BUILDS[name][0], budget)


def _parse_build(name):
    """(geometry name, (in type, out type)) of a build name ``auto_<geometry>[_<types>][_checked]``."""
    parts = name.removeprefix("auto_").removesuffix("_checked").split("_")
    types = {short: full for full, short in SHORT_TYPES.items()}
    cut = len(parts)
    while parts[cut - 1] in types:
        cut -= 1
    suffix = [types[part] for part in parts[cut:]] or ["float32"]
    return "_".join(parts[:cut]), (suffix[0], suffix[-1])


def _values(geometry, element_type="float32"):
    """A thread's values: its quads and its edge slots."""
    return 4 * geometry.quads + -(-max_edges(element_type) // geometry.lanes)


@pytest.mark.parametrize("name", ["auto_rows_l32_q2", "auto_rows_l256_q4", "auto_rows_l512_q8_checked",
                                  "auto_rows_l4_q1_bf16", "auto_rows_l128_q4_f16_checked"])
def test_row_build_arithmetic_is_one_exp_and_one_division_per_value(name):
    """One exp and one division per value; an edge slot's exp is computed twice (for the sum, then again at its
    store: edges are re-read from x rather than held in registers)."""
    geometry_name, types = _parse_build(name)
    geometry = Geometry.parse(geometry_name)
    values = _values(geometry, types[0])
    edge_slots = values - 4 * geometry.quads
    report = check_policy(name, ptx_of(name))
    assert report.expf_count == values + edge_slots and report.fma_count == 4 * report.expf_count
    assert report.divisions == {"div.rn.f32": values}
    assert report.rounded_arith["sub"] == values + edge_slots


def test_narrow_build_arithmetic_is_one_exp_and_one_division_per_value():
    """No edge slots: one exp and one division per value a thread holds, in each of the row's three builds (1, 2
    and 4 values; rows_l1_q1's build has 16 exps and 10 divisions: its quad's 4, then each of 6 edge slots once
    for the sum and once at the store)."""
    name = f"auto_{NARROW_GEOMETRY}"
    values = 1 + 2 + 4 * Geometry.parse(NARROW_GEOMETRY).quads
    report = check_policy(name, ptx_of(name))
    assert report.expf_count == values and report.fma_count == 4 * report.expf_count
    assert report.divisions == {"div.rn.f32": values} and report.rounded_arith["sub"] == values
    rows = check_policy("auto_rows_l1_q1", ptx_of("auto_rows_l1_q1"))
    assert rows.expf_count == 4 + 2 * 6 and rows.divisions == {"div.rn.f32": 4 + 6}


def test_rows_of_at_most_12_bytes_and_4_columns_run_one_thread_per_row_in_every_operation():
    """The narrow geometry by bytes, the wider of the input and output element, and columns: float32 to 3
    columns, 2-byte types to 4 (float16 in, float32 out: to 3), float64 one; the log_softmax and the backward run
    it too."""
    assert NARROW_ROW_BYTES == 12 and NARROW_COLUMNS == 4 and NARROW_GEOMETRY in TABLE_GEOMETRIES
    for types, widest in [(F32, 3), (("bfloat16",) * 2, 4), (("float16",) * 2, 4), (("float16", "float32"), 3),
                          (("float64",) * 2, 1), (("float32", "float64"), 1)]:
        assert [auto_geometry(cols, types) for cols in range(1, widest + 1)] == [NARROW_GEOMETRY] * widest
        assert auto_geometry(widest + 1, types) != NARROW_GEOMETRY, types
        if types[0] == types[1]:
            assert backward_geometry(widest, types[0]) == NARROW_GEOMETRY
            assert backward_geometry(widest + 1, types[0]) != NARROW_GEOMETRY
        # Rows a row stride apart that is wider than the row run narrow; C-contiguous ones packed where
        # packs_width says so (1, 2 or 4 elements; groups of 3 2-byte ones).
        assert auto_launches(*[np.zeros((3, widest + 1), STORAGE_DTYPES[t])[:, :widest] for t in types],
                             types=types, form="log_softmax")[0].name == f"auto_log_{NARROW_GEOMETRY}"
        assert auto_launches(*[np.zeros((3, widest), STORAGE_DTYPES[t]) for t in types],
                             types=types, form="log_softmax")[0].name == \
            f"auto_log_{packed_geometry(widest, types) if packs_width(widest, types) else NARROW_GEOMETRY}"
    assert table_geometry(3) == NARROW_GEOMETRY and table_geometry(4) == "rows_l1_q1"
    assert table_geometry(4, packed=True) == "packed_l1_q1" and table_geometry(3, packed=True) == NARROW_GEOMETRY
    assert table_geometry(3, ("bfloat16",) * 2, packed=True) == table_geometry(6, packed=True) == "groups_l1_q1"
    assert table_geometry(5, packed=True) == table_geometry(7, packed=True) == "staged_l1_q1"  # float32 forwards
    assert backward_geometry(5, "float32", True) == "groups_l1_q1" and backward_geometry(7, "float32", True) == \
        "rows_l2_q1" and table_geometry(7) == "rows_l2_q1"
    assert table_geometry(7, ("float16",) * 2, packed=True) == "groups_l1_q1"
    assert packed_geometry(2, ("bfloat16",) * 2) == "packed_l1_q2" and packed_geometry(7, F32, 2) == "groups_l1_q1"
    assert [group_shape(cols) for cols in range(1, 9)] == [(4, 1), (2, 1), (4, 3), (1, 1), (4, 5), (2, 3), (4, 7),
                                                            (1, 2)]
    assert backward_geometry(4, "bfloat16", packed=True) == "packed_l1_q1"  # y and dy: 16 bytes a thread
    with pytest.raises(ValueError, match="one thread per row"):
        Geometry.parse("narrow_l1_q2")  # measured 2-4x slower than the vector geometries at 8 columns


def test_long_build_arithmetic():
    """Pass 1: one exp per edge, one per value and one rescale per chunk; one more rescale to the row max; pass
    2: one exp and one division per edge, and per value in each of its two store paths (y's quads 16-byte aligned
    or not: NVVM unswitches the loop on that test)."""
    for name in ("auto_long_l1024_q4", "auto_long_l1024_q4_checked"):
        report = check_policy(name, ptx_of(name))
        values, edges = 16, 1
        assert report.divisions == {"div.rn.f32": 2 * values + edges}
        assert report.expf_count == edges + values + 1 + 1 + 2 * values + edges
        assert report.rounded_arith["mul"] == 2  # the two rescales: the sum is never multiplied per value


def test_float64_builds_compute_in_float64():
    """A float64 build: double-precision rounded arithmetic and IEEE division, no float32 exponential."""
    report = check_policy("auto_long_l1024_q2_f64", ptx_of("auto_long_l1024_q2_f64"))
    assert report.ok and report.expf_count == 0
    assert set(report.divisions) == {"div.rn.f64"}
    ptx = ptx_of("auto_rows_l8_q1_f64")
    assert "add.rn.f64" in ptx and "div.rn.f64" in ptx and "fma.rn.f32" not in ptx


def test_launch_bounds_are_in_the_ptx():
    ptx = ptx_of("auto_long_l1024_q4")
    assert re.search(r"\.maxntid\s+1024", ptx)


def test_registry_holds_the_table_builds_apart_from_the_protocol_kernels():
    names = set(AUTO_KERNELS)
    for types in FULL_TYPES:  # float32 and bfloat16 in and out, checked or not: every table geometry
        for g in TABLE_GEOMETRIES:
            for checked in ("", "_checked"):
                assert f"auto_{g}{types_suffix(types)}{checked}" in names, (g, types)
    for types in SAMPLE_TYPES:  # the other pairs: one geometry of each kind they run
        assert f"auto_{KIND_SAMPLES[0]}{types_suffix(types)}" in names, types
    assert len([n for n in names if n.startswith("check_values")]) == 4
    assert not names & set(KERNELS)


def test_run_kernels_include_the_auto_builds():
    from bench.kernel_build import run_kernels
    names = {d.py_func.__name__ for d, _ in run_kernels()}
    assert set(AUTO_KERNELS) <= names


def test_candidates_fit_their_widths():
    for width, names in CANDIDATES.items():
        for name in names:
            geometry = Geometry.parse(name)
            assert geometry.holds(width, "float32"), (width, name)
    assert {name for _, name in AUTO_TABLE} <= set(CANDIDATE_GEOMETRIES)


# ---- bench perf: candidates and goals ---------------------------------------------------------------------

def test_auto_geometries_for_a_width():
    from bench.perf.peers import auto_geometries_for
    assert auto_geometries_for(128) == ["rows_l32_q1", "rows_l8_q4", "rows_l4_q8"]  # the forward's own is `auto`
    two_byte = ("bfloat16", "bfloat16")                                     # as for 2-byte rows (FORWARD_TABLE)
    assert auto_geometries_for(128, types=two_byte) == ["rows_l32_q1", "rows_l16_q2", "rows_l4_q8"]
    assert auto_geometries_for(4096, "none") == []
    assert auto_geometries_for(300) == []                                   # no candidates listed there
    assert auto_geometries_for(4096, "rows_l32_q1,rows_l1024_q4,long_l32_q1") == ["rows_l1024_q4", "long_l32_q1"]
    with pytest.raises(ValueError, match="unknown auto geometry 'rows_l3'"):
        auto_geometries_for(4096, "rows_l3")


def _auto_report(auto_us, peers_us, shape=(4096, 4096), copy_tbs=4.25):
    from bench.floors import shape_name
    from bench.perf.ceilings import logical_bytes
    from bench.perf.peers import AUTO, summarize_shape
    medians = {AUTO: auto_us, **peers_us}
    rounds = [{"round": r, "order": list(medians),
               "samples": {v: {"event_us": m * (1 + 0.01 * (r % 3)), "starved": False} for v, m in medians.items()}}
              for r in range(30)]
    entry = {"name": shape_name(shape), "shape": list(shape), "logical_bytes": logical_bytes(shape),
             "variants": {v: {"status": "timed"} for v in medians},
             "analysis": summarize_shape(rounds, list(medians), logical_bytes(shape), copy_tbs)}
    entry["variants"][AUTO]["geometry"] = "rows_l256_q4"
    return {"copy_ceiling": {"bandwidth_tbs": copy_tbs}, "shapes": [entry]}


def test_auto_goals_pass_miss_and_not_measured():
    from bench.perf.goals import MISS, NOT_MEASURED, PASS, evaluate_goals
    report = _auto_report(33.0, {"cudnn": 43.0, "torch": 57.0, "triton": 32.0})
    goals = {g["goal"]: g for g in evaluate_goals(report)}
    copy_goal = goals["auto >= 0.92 of copy bandwidth at 4096x4096"]
    # 134 MB / 33 us (drift: median 33.3 us) = 4.03 TB/s = 0.95 of 4.25
    assert copy_goal["status"] == PASS and copy_goal["value"] == pytest.approx(0.95, abs=0.01)
    assert "auto (rows_l256_q4)" in copy_goal["detail"]
    assert goals["auto faster than cudnn at 4096x4096"]["status"] == PASS
    assert goals["auto faster than triton at 4096x4096"]["status"] == MISS
    assert goals["auto faster than triton at 4096x4096"]["value"] == pytest.approx(33.0 / 32.0, rel=0.01)
    assert goals["auto >= 0.92 of copy bandwidth at 16384x1024"]["status"] == NOT_MEASURED
    for shape in ("4096x32768", "1024x131072", "4096x128"):
        assert goals[f"auto faster than torch at {shape}"]["status"] == NOT_MEASURED
    # the fused kernel has no goals at the long rows it cannot hold
    assert not any(g.startswith("fused") and "32768" in g for g in goals)


def test_auto_goal_at_a_long_shape_with_fewer_rows_than_the_peer_shapes():
    from bench.perf.goals import MISS, PASS, evaluate_goals
    report = _auto_report(300.0, {"cudnn": 420.0, "torch": 299.0}, shape=(1024, 131072))
    goals = {g["goal"]: g for g in evaluate_goals(report)}
    assert goals["auto faster than cudnn at 1024x131072"]["status"] == PASS
    assert goals["auto faster than torch at 1024x131072"]["status"] == MISS
    assert "triton not run" in goals["auto faster than triton at 1024x131072"]["detail"]


def test_perf_md_lists_the_candidates_with_auto_against_each():
    from bench.perf.render import render_markdown
    report = _auto_report(33.0, {"cudnn": 43.0, "auto:rows_l256_q4": 35.0})
    text = render_markdown(report)
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| auto")}
    assert "auto:rows_l256_q4" in rows and "auto/auto:rows_l256_q4 0.94" in rows["auto:rows_l256_q4"]
    assert "auto/cudnn 0.7" in next(line for line in text.splitlines() if line.startswith("| cudnn"))


def test_auto_launches_pick_the_cluster_for_any_alignment_and_type():
    """Launch descriptions only (no GPU): 131,072-column rows take the table's cluster geometry, one cluster of
    CTAs per row, aligned or one element off, float32 or bfloat16 (half the shared bytes); float64 rows take its
    long-row geometry; a host array names a shape mismatch instead of failing on its missing device interface."""
    buffer = np.zeros(2 * 131072 + 4, dtype=np.float32)
    for x in (buffer[:2 * 131072].reshape(2, 131072), buffer[1:2 * 131072 + 1].reshape(2, 131072)):
        launch, = auto_launches(x, np.zeros((2, 131072), np.float32))
        assert launch.name == "auto_cluster_l512_q8_c4_s8" and launch.cluster == 4 and launch.grid == (8,)
        assert launch.shared_bytes == 4 * 4 * 512 * 8  # each CTA's shared quads
    bits = np.zeros((2, 131072), np.uint16)
    launch, = auto_launches(bits, bits.copy(), types=("bfloat16", "bfloat16"))
    assert launch.name == "auto_cluster_l512_q8_c4_s8" and launch.shared_bytes == 2 * 4 * 512 * 8
    launch, = auto_launches(np.zeros((2, 131072)), np.zeros((2, 131072)))
    assert launch.name == "auto_long_l1024_q2" and launch.grid == (2,)
    with pytest.raises(ValueError, match="x and y must have one shape"):
        auto_launches(buffer[:16].reshape(2, 8), np.zeros((2, 9), np.float32))


def test_a_fast_math_diagnostic_build_is_rejected_by_the_policy_check_and_never_in_the_table():
    """The ``*_fastmath`` geometries (Triton's approximate exponential and division, for measuring what the policy
    costs) are a negative control of the PTX policy check: their PTX carries approximate instructions outside
    libdevice ``expf``, which the check must name."""
    geometry = Geometry.parse("rows_l128_q8" + FAST_MATH_SUFFIX)
    kernel = auto_kernel(geometry, F32, False)
    fast = ptx_getter({"fast": (kernel, UNCHECKED_SIGNATURE)})("fast")
    report = check_policy("fast", fast)
    assert not report.ok and report.expf_count == 2  # the edge slot's exponential, taken twice, stays IEEE
    assert any("ex2.approx" in v for v in report.violations), report.violations
    assert any("div.approx" in v or "div.full" in v for v in report.violations), report.violations
    # the policy build of the same geometry passes, with one IEEE expf and one division per value
    policy = check_policy("policy", ptx_of("auto_rows_l128_q8"))
    assert policy.ok and policy.divisions == {"div.rn.f32": 33}  # 32 values and one edge slot
    assert not any(Geometry.parse(name).fast_math for _, name in AUTO_TABLE)
    assert not any(Geometry.parse(name).fast_math for name in CANDIDATE_GEOMETRIES)


def test_controls_and_diagnostics_are_built_apart_from_the_shipped_factory():
    """The shipped factory refuses a fast-math geometry (auto_controls builds it), each control refuses a geometry
    it cannot falsify, and no registered build is a control or a diagnostic."""
    with pytest.raises(ValueError, match="a diagnostic fast-math build"):
        make_auto_kernel(Geometry.parse("rows_l128_q8" + FAST_MATH_SUFFIX), F32, False)
    with pytest.raises(ValueError, match="the exchange control needs a cluster geometry"):
        cluster_control_kernel("rows_l512_q8")
    with pytest.raises(ValueError, match="the span control needs quads in shared memory"):
        shared_span_control_kernel("rows_l512_q8")
    with pytest.raises(ValueError, match="the short-sum control is a narrow, packed or groups geometry"):
        narrow_short_sum_control_kernel("rows_l1_q1")
    assert not [name for name in AUTO_KERNELS if "control" in name or "fastmath" in name]


def test_shared_span_control_differs_from_its_build_only_where_the_copy_starts():
    """The negative control the GPU tests show rejected (its bulk copy reads the register columns) obeys the
    numerics policy too, so only the oracle's element-wise comparison can tell it from the real build."""
    from numba_softmax.ptx import kernel_ptx
    control = kernel_ptx(shared_span_control_kernel("rows_l512_q8_s8"), UNCHECKED_SIGNATURE)
    assert check_policy("control", control).ok
    assert control.count("cp.async.bulk.shared::cluster.global") == 1
    real = ptx_of("auto_rows_l512_q8_s8")

    def lines(ptx):  # shared arrays and mangled names renumbered away
        return re.sub(r"_ZN\w+|_cudapy_smem_\d+", "N", ptx).splitlines()
    changed = [line.split() for line in difflib.ndiff(lines(real), lines(control)) if line[:2] in ("- ", "+ ")]
    # The only change: the span's first column (its offset times the row's element stride) takes the CTA's first
    # column instead, one source register of one multiply.
    assert [line[:2] for line in changed] == [["-", "mul.lo.s64"], ["+", "mul.lo.s64"]], changed
    assert changed[0][2:] != changed[1][2:] and changed[0][3:][-1] == changed[1][3:][-1], changed
