"""Fixed measurement protocol: counts, round orders and the raw timing record.

The numbers here were fixed before any GPU execution (see the protocol text:
ten warmups, 21 shuffled rounds, host enqueue over a batch of 32). Keeping them
in one module means the harness and the report cannot disagree about them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

WARMUPS = 10
ROUNDS = 21
BATCH = 32

MODES = ("stream", "graph")
METRICS = (
    "host_completion_us",  # one invocation, host submit -> host observes completion
    "batch_enqueue_us",  # host time to enqueue a batch of BATCH invocations
    "batch_completion_us",  # host time until a batch of BATCH invocations completes
    "event_us",  # CUDA-event interval (includes host-starvation gaps)
    "sync_baseline_us",  # no-work stream synchronization, reported, never subtracted
)
PER_INVOCATION = "invocation"
PER_BATCH = "batch"

# Metrics whose unit is fixed by their definition. event_us and sync_baseline_us
# may be measured around one invocation or around a whole batch.
_REQUIRED_PER = {
    "host_completion_us": PER_INVOCATION,
    "batch_enqueue_us": PER_BATCH,
    "batch_completion_us": PER_BATCH,
}


def round_orders(labels: Sequence[str], rounds: int = ROUNDS, *, seed: int) -> list[list[str]]:
    """Return the variant order for each round, shuffled independently per round.

    Shuffling every round keeps a fixed position in the round (first after a
    sync, last before the next round) from always favouring one variant. The
    order comes from numpy.random.default_rng(seed), so a run is reproducible
    from its recorded seed. Each round is a permutation of all labels.
    """
    labels = list(labels)
    if not labels:
        raise ValueError("round_orders: no labels")
    if len(set(labels)) != len(labels):
        raise ValueError(f"round_orders: duplicate labels in {labels}")
    if rounds < 1:
        raise ValueError(f"round_orders: rounds must be >= 1, got {rounds}")
    rng = np.random.default_rng(seed)
    return [[labels[i] for i in rng.permutation(len(labels))] for _ in range(rounds)]


@dataclass
class Measurement:
    """One raw timing value, as written to timings.jsonl.

    `value_us` is exactly what was measured: for per == "batch" it covers BATCH
    invocations. `invocations_per_value` (1 or BATCH) and `per_invocation_us`
    (value_us / invocations_per_value) are derived so no reader has to remember
    which metrics were batched. `bytes_moved` is the optional per-case logical
    byte count (input + output arrays), not measured memory traffic.
    """

    experiment: str
    case: str
    variant: str
    mode: str
    fixture: str | int
    round: int
    metric: str
    value_us: float
    per: str
    bytes_moved: int | None = None
    invocations_per_value: int = field(init=False)
    per_invocation_us: float = field(init=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"Measurement: mode must be one of {MODES}, got {self.mode!r}")
        if self.metric not in METRICS:
            raise ValueError(f"Measurement: metric must be one of {METRICS}, got {self.metric!r}")
        if self.per not in (PER_INVOCATION, PER_BATCH):
            raise ValueError(f"Measurement: per must be 'invocation' or 'batch', got {self.per!r}")
        required = _REQUIRED_PER.get(self.metric)
        if required is not None and self.per != required:
            raise ValueError(f"Measurement: {self.metric} is per {required}, got per={self.per!r}")
        if isinstance(self.round, bool) or int(self.round) != self.round or self.round < 0:
            raise ValueError(f"Measurement: round must be a non-negative integer, got {self.round!r}")
        self.round = int(self.round)
        self.value_us = float(self.value_us)
        if not math.isfinite(self.value_us) or self.value_us < 0:
            raise ValueError(f"Measurement: value_us must be finite and >= 0, got {self.value_us}")
        if self.bytes_moved is not None:
            self.bytes_moved = int(self.bytes_moved)
        self.invocations_per_value = BATCH if self.per == PER_BATCH else 1
        self.per_invocation_us = self.value_us / self.invocations_per_value

    def to_record(self) -> dict:
        """Return the JSON-ready dict (derived fields included, for readers without this code)."""
        return asdict(self)

    @classmethod
    def from_record(cls, record: Mapping) -> "Measurement":
        """Rebuild from a timings.jsonl dict, checking the stored derived fields agree."""
        record = dict(record)
        stored_count = record.pop("invocations_per_value", None)
        stored_per_invocation = record.pop("per_invocation_us", None)
        known = {"experiment", "case", "variant", "mode", "fixture", "round", "metric",
                 "value_us", "per", "bytes_moved"}
        unknown = sorted(set(record) - known)
        if unknown:
            raise ValueError(f"Measurement.from_record: unknown keys {unknown}")
        m = cls(**record)
        if stored_count is not None and stored_count != m.invocations_per_value:
            raise ValueError(
                f"Measurement.from_record: invocations_per_value {stored_count} != {m.invocations_per_value}"
            )
        if stored_per_invocation is not None and not math.isclose(
            stored_per_invocation, m.per_invocation_us, rel_tol=1e-12, abs_tol=0.0
        ):
            raise ValueError(
                f"Measurement.from_record: per_invocation_us {stored_per_invocation} != {m.per_invocation_us}"
            )
        return m


# ---- the nvcc twins' names (--twins: bench/twins.py)

TWIN_SUFFIX = "-nvcc"


def twin_name(variant_name):
    return variant_name + TWIN_SUFFIX


def twin_pairs(variant_names):
    """[(numba variant, its twin)] among ``variant_names`` (both present)."""
    names = set(variant_names)
    return [(name, twin_name(name)) for name in sorted(names) if twin_name(name) in names]
