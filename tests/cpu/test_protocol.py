"""Protocol constants, round shuffling and the raw timing record."""

import pytest

from bench.protocol import BATCH, ROUNDS, WARMUPS, Measurement, round_orders

LABELS = ["separate", "fused", "cudnn", "dag"]


def test_constants_match_the_protocol_text():
    assert (WARMUPS, ROUNDS, BATCH) == (10, 21, 32)


def test_every_round_is_a_permutation_of_all_labels():
    orders = round_orders(LABELS, seed=1234)
    assert len(orders) == ROUNDS
    for order in orders:
        assert sorted(order) == sorted(LABELS)
        assert len(order) == len(LABELS)


def test_orders_are_shuffled_per_round():
    orders = round_orders(LABELS, seed=1234)
    assert len({tuple(o) for o in orders}) > 1  # 21 identical draws of 4! orders is ~impossible
    assert any(o != LABELS for o in orders)


def test_same_seed_same_orders_and_different_seed_different_orders():
    assert round_orders(LABELS, 7, seed=99) == round_orders(LABELS, 7, seed=99)
    assert round_orders(LABELS, seed=1) != round_orders(LABELS, seed=2)


def test_rounds_argument_and_input_not_mutated():
    labels = list(LABELS)
    assert len(round_orders(labels, 3, seed=0)) == 3
    assert labels == LABELS


@pytest.mark.parametrize("labels, rounds", [([], 3), (["a", "a"], 3), (["a"], 0)])
def test_round_orders_rejects_bad_input(labels, rounds):
    with pytest.raises(ValueError):
        round_orders(labels, rounds, seed=0)


def _m(**overrides):
    fields = dict(experiment="A", case="4096x1024", variant="fused", mode="stream",
                  fixture="bench0", round=3, metric="batch_enqueue_us", value_us=64.0, per="batch")
    fields.update(overrides)
    return Measurement(**fields)


def test_batch_value_is_kept_and_divided_explicitly():
    m = _m()
    assert m.value_us == 64.0
    assert m.invocations_per_value == 32
    assert m.per_invocation_us == 2.0


def test_invocation_value_is_its_own_per_invocation_value():
    m = _m(metric="host_completion_us", per="invocation", value_us=12.5)
    assert (m.invocations_per_value, m.per_invocation_us) == (1, 12.5)


@pytest.mark.parametrize("overrides", [
    dict(metric="batch_enqueue_us", per="invocation"),
    dict(metric="batch_completion_us", per="invocation"),
    dict(metric="host_completion_us", per="batch"),
    dict(metric="kernel_us"),
    dict(mode="eager"),
    dict(per="round"),
    dict(round=-1),
    dict(value_us=float("nan")),
    dict(value_us=-1.0),
])
def test_invalid_measurements_are_rejected(overrides):
    with pytest.raises(ValueError):
        _m(**overrides)


def test_record_round_trip_and_consistency_check():
    m = _m(bytes_moved=33554432)
    record = m.to_record()
    assert record["per_invocation_us"] == 2.0 and record["value_us"] == 64.0
    assert record["per"] == "batch" and record["bytes_moved"] == 33554432
    assert Measurement.from_record(record) == m
    with pytest.raises(ValueError, match="per_invocation_us"):
        Measurement.from_record({**record, "per_invocation_us": 64.0})
    with pytest.raises(ValueError, match="unknown keys"):
        Measurement.from_record({**record, "gpu": 0})
