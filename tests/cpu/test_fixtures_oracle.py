import numpy as np
import pytest

from numba_softmax import cases
from numba_softmax.fixtures import matrix_fixture, packed_fixture
from numba_softmax.oracle import (AcceptanceError, check_matrix, check_packed, oracle_softmax,
                                  oracle_softmax_rows, require)


@pytest.mark.parametrize("family", cases.FIXTURE_FAMILIES)
def test_fixture_ids_regenerate_the_same_bits(family):
    a = matrix_fixture(family, (7, 781))
    b = matrix_fixture(family, (7, 781))
    assert a.dtype == np.float32 and a.flags.c_contiguous and a.shape == (7, 781)
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert np.all(np.isfinite(a))


def test_different_fixtures_and_shapes_differ():
    assert not np.array_equal(matrix_fixture("random", (4, 256)), matrix_fixture("offset", (4, 256)))
    assert not np.array_equal(matrix_fixture("random", (4, 256)).ravel()[:256],
                              matrix_fixture("random", (8, 256)).ravel()[:256])


def test_fixture_families_have_their_properties():
    const = matrix_fixture("constant", (5, 300))
    assert np.all(const == const[:, :1])
    dom = matrix_fixture("dominant", (5, 300))
    assert np.all(np.sort(dom, axis=1)[:, -1] - np.sort(dom, axis=1)[:, -2] > 25)
    off = matrix_fixture("offset", (5, 300))
    with np.errstate(over="ignore"):
        assert np.all(np.isinf(np.exp(off)))  # softmax without max subtraction overflows


def test_unknown_fixture_is_rejected():
    with pytest.raises(ValueError, match="unknown fixture"):
        matrix_fixture("zeros", (2, 2))


def test_packed_fixture_matches_matrix_fixture_for_equal_rows():
    assert np.array_equal(packed_fixture("random", [128] * 3), matrix_fixture("random", (3, 128)).ravel())


def test_oracle_is_float64_stable_softmax():
    x = np.array([[1000.0, 1000.0], [0.0, np.log(3.0)]], dtype=np.float32)
    ref = oracle_softmax(x)
    assert ref.dtype == np.float64
    assert np.allclose(ref[0], [0.5, 0.5]) and np.allclose(ref[1], [0.25, 0.75], rtol=1e-7)
    assert np.allclose(oracle_softmax_rows(x.ravel(), [2, 2]), ref.ravel())


def test_check_accepts_correctly_rounded_float32():
    x = matrix_fixture("random", (16, 300))
    result = check_matrix(oracle_softmax(x).astype(np.float32), x)
    assert result.passed and result.finite_nonneg and result.max_tol_ratio < 0.5


def test_check_rejects_an_error_just_over_tolerance_and_names_the_element():
    x = matrix_fixture("random", (4, 256))
    out = oracle_softmax(x).astype(np.float32)
    ref = oracle_softmax(x)[2, 17]
    out[2, 17] = np.float32(ref + 1.5 * (cases.ABS_TOL + cases.REL_TOL * ref))
    result = check_matrix(out, x)
    assert not result.passed
    assert (result.worst_row, result.worst_col) == (2, 17)
    with pytest.raises(AcceptanceError, match="row 2, col 17"):
        require(result, "test")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1e-3])
def test_check_rejects_nonfinite_or_negative(bad):
    x = matrix_fixture("random", (2, 128))
    out = oracle_softmax(x).astype(np.float32)
    out[1, 5] = bad
    result = check_matrix(out, x)
    assert not result.passed and not result.finite_nonneg


def test_check_rejects_rows_that_do_not_sum_to_one_even_within_elementwise_slack():
    x = matrix_fixture("constant", (1, 4096))
    ref = oracle_softmax(x)
    # each element 0.9e-7 too large: inside the absolute slack, but 4096 of them add up
    out = (ref + 0.9e-7).astype(np.float32)
    result = check_matrix(out, x)
    assert result.max_tol_ratio <= 1.0 and result.finite_nonneg
    assert result.max_row_sum_err > cases.ROW_SUM_TOL
    assert not result.passed


def test_tolerances_are_the_protocol_constants():
    assert (cases.ABS_TOL, cases.REL_TOL, cases.ROW_SUM_TOL) == (1e-7, 2e-5, 2e-5)
    import inspect
    assert "tol" not in " ".join(inspect.signature(check_packed).parameters)


def test_ragged_layout_has_the_protocol_statistics():
    for rows in cases.EXPERIMENT_B_ROW_COUNTS:
        for dist in cases.EXPERIMENT_B_DISTRIBUTIONS:
            lengths = cases.row_lengths_for(rows, dist)
            assert lengths.sum() == rows * 8192
            tiles = -(-lengths // cases.TILE_ELEMENTS)
            assert tiles.sum() == rows * 8
    ragged = cases.row_lengths_for(128, "ragged")
    assert np.array_equal(ragged, cases.row_lengths_for(128, "ragged"))
    assert sorted(set(ragged.tolist())) == [4096, 36864] and (ragged == 36864).sum() == 16
    unpermuted = np.array(([36864] + [4096] * 7) * 16)
    assert not np.array_equal(ragged, unpermuted)  # the seeded permutation was applied


@pytest.mark.parametrize("damage", ["none", "nan", "inf", "negative", "one_off", "short_row"])
@pytest.mark.parametrize("types", [("float32", "float32"), ("float32", "bfloat16")])
def test_a_reference_cut_into_spans_of_rows_checks_as_one_piece(monkeypatch, damage, types):
    """PackedReference works on spans of whole rows (in threads): the same reference and the same record, its worst
    element and row included, as in one piece, whatever an output gets wrong and wherever."""
    from numba_softmax import oracle
    from numba_softmax.element_types import from_float64

    lengths = np.random.default_rng(3).integers(1, 90, 60)
    values = packed_fixture("random", lengths)
    out = from_float64(oracle_softmax_rows(oracle.cast_inputs(values, types), lengths), types[1])
    at = int(lengths[:31].sum()) + 2
    if damage == "nan":
        out[at] = from_float64(np.array([np.nan]), types[1])[0]
    elif damage == "inf":
        out[at] = from_float64(np.array([np.inf]), types[1])[0]
    elif damage == "negative":
        out[at] = from_float64(np.array([-0.25]), types[1])[0]
    elif damage == "one_off":
        out[at] = from_float64(np.array([0.5]), types[1])[0]
    elif damage == "short_row":
        out[at:at + 3] = 0
    whole = oracle.PackedReference(values, lengths, types)
    monkeypatch.setattr(oracle, "SPAN_VALUES", 97)
    spans = oracle.PackedReference(values, lengths, types)
    assert len(whole.spans) == 1 and len(spans.spans) > 10
    assert [r1 - r0 for r0, r1, _, _ in spans.spans] and spans.spans[-1][1] == len(lengths)
    assert np.array_equal(whole.ref, spans.ref) and np.array_equal(whole.bound, spans.bound)
    assert repr(whole.check(out)) == repr(spans.check(out))  # repr: a NaN worst value equals itself
    assert whole.check(out).passed == (damage == "none")
