"""Hand-computed checks of the order statistics used in every report."""

import math

import pytest

from bench.stats import paired_ratios, summarize


def test_summarize_linear_percentiles_of_one_to_ten():
    # linear method: position = p/100 * (n - 1) over the sorted values 1..10
    # p10 -> 0.9 -> 1.9, median -> 4.5 -> 5.5, p90 -> 8.1 -> 9.1
    s = summarize([7, 3, 10, 1, 5, 2, 9, 4, 8, 6])
    assert s == {"n": 10, "median": pytest.approx(5.5), "p10": pytest.approx(1.9),
                 "p90": pytest.approx(9.1), "min": 1.0, "max": 10.0}


def test_summarize_single_sample_and_plain_floats():
    s = summarize([4.25])
    assert s == {"n": 1, "median": 4.25, "p10": 4.25, "p90": 4.25, "min": 4.25, "max": 4.25}
    assert all(type(v) is float for k, v in s.items() if k != "n")
    assert type(s["n"]) is int


def test_summarize_accepts_a_generator():
    assert summarize(x for x in (1.0, 2.0, 3.0))["median"] == 2.0


def test_summarize_rejects_empty_input():
    with pytest.raises(ValueError, match="empty"):
        summarize([])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_summarize_rejects_non_finite_and_names_it(bad):
    with pytest.raises(ValueError, match=r"non-finite.*\[1\]"):
        summarize([1.0, bad, 3.0])


def test_paired_ratio_median_differs_from_ratio_of_medians_and_sorted_pairing():
    # per-round ratios a/b: 1/2, 4/1, 9/3 = 0.5, 4, 3 -> median 3
    # ratio of medians: 4/2 = 2; ratios of independently sorted lists: 1, 2, 3 -> median 2
    rounds = [{"a": 1.0, "b": 2.0}, {"a": 4.0, "b": 1.0}, {"a": 9.0, "b": 3.0}]
    s = paired_ratios(rounds, "a", "b", "event_us")
    assert s["n"] == 3
    assert s["median"] == pytest.approx(3.0)
    assert s["p10"] == pytest.approx(1.0)  # sorted 0.5, 3, 4: position 0.2 -> 0.5 + 0.2 * 2.5
    assert s["p90"] == pytest.approx(3.8)  # position 1.8 -> 3 + 0.8 * 1
    assert (s["min"], s["max"]) == (0.5, 4.0)
    assert (s["metric"], s["numerator"], s["denominator"]) == ("event_us", "a", "b")


def test_paired_ratios_skip_rounds_missing_a_variant():
    rounds = [{"a": 2.0, "b": 1.0}, {"a": 100.0}, {"b": 100.0}, {"a": 6.0, "b": 2.0, "c": 1.0}]
    s = paired_ratios(rounds, "a", "b", "m")
    assert s["n"] == 2
    assert s["median"] == pytest.approx(2.5)


def test_paired_ratios_raise_when_nothing_pairs():
    with pytest.raises(ValueError, match="no round has both"):
        paired_ratios([{"a": 1.0}, {"b": 1.0}], "a", "b", "m")


def test_paired_ratios_raise_on_zero_denominator():
    with pytest.raises(ValueError, match="zero in round 1"):
        paired_ratios([{"a": 1.0, "b": 1.0}, {"a": 1.0, "b": 0.0}], "a", "b", "m")
