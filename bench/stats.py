"""Order statistics for benchmark timings.

The protocol reports medians with p10/p90 and *paired per-round ratios* from a
single GPU allocation. It does not claim population significance, so there are
no means, standard deviations or confidence intervals here on purpose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

PERCENTILE_METHOD = "linear"


def summarize(samples: Iterable[float]) -> dict:
    """Return n, median, p10, p90, min and max of a 1-D sample.

    Percentiles use numpy's "linear" method so every number in a report can be
    recomputed by hand. Empty or non-finite input raises ValueError instead of
    producing NaN, because a NaN median in a summary is easy to overlook.
    """
    values = np.asarray(list(samples), dtype=np.float64)
    if values.ndim != 1:
        raise ValueError(f"summarize: expected a flat sequence of numbers, got shape {values.shape}")
    if values.size == 0:
        raise ValueError("summarize: empty input (no samples to summarize)")
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise ValueError(
            f"summarize: {bad.size} non-finite sample(s) (NaN or inf) at index(es) {bad[:10].tolist()}"
        )
    p10, median, p90 = np.percentile(values, [10.0, 50.0, 90.0], method=PERCENTILE_METHOD)
    return {
        "n": int(values.size),
        "median": float(median),
        "p10": float(p10),
        "p90": float(p90),
        "min": float(values.min()),
        "max": float(values.max()),
    }


def paired_ratios(
    rounds: Sequence[Mapping[str, float]],
    numerator: str,
    denominator: str,
    metric: str,
) -> dict:
    """Summarize the per-round ratios numerator/denominator for one metric.

    `rounds` holds one mapping per round (variant label -> value measured in that
    round). Pairing within a round cancels slow drift shared by both variants
    (clocks, thermal state, host noise), so the protocol reports the median and
    p10/p90 of these paired ratios, not a ratio of two population medians and not
    a population significance test. Rounds missing either variant are skipped;
    if no round has both, ValueError is raised.

    `metric` only labels the result and error messages. The returned dict is the
    `summarize` result of the ratios plus `metric`, `numerator` and `denominator`.
    """
    ratios = []
    for index, values in enumerate(rounds):
        if numerator not in values or denominator not in values:
            continue
        num = float(values[numerator])
        den = float(values[denominator])
        if den == 0.0:
            raise ValueError(
                f"paired_ratios({metric}): denominator '{denominator}' is zero in round {index}"
            )
        ratios.append(num / den)
    if not ratios:
        raise ValueError(
            f"paired_ratios({metric}): no round has both '{numerator}' and '{denominator}'"
        )
    result = summarize(ratios)
    result.update(metric=metric, numerator=numerator, denominator=denominator)
    return result
