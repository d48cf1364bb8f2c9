"""The independent CPU oracle and the acceptance check.

The oracle is float64 stable softmax computed on the exact float32 inputs that were
saved. A float32 output passes when, element by element,
``abs(out - ref) <= ABS_TOL + REL_TOL * abs(ref)``, every output is finite and
``>= 0``, and every row sums (in float64) to within ``ROW_SUM_TOL`` of one. The
tolerances are constants in :mod:`numba_softmax.cases`; no caller can loosen them.
"""

from dataclasses import asdict, dataclass

import numpy as np

from .cases import ABS_TOL, REL_TOL, ROW_SUM_TOL


def oracle_softmax_rows(values, row_lengths):
    """float64 stable softmax of packed rows (1-D values, row lengths)."""
    x = np.asarray(values, dtype=np.float64)
    lengths = np.asarray(row_lengths, dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    row_max = np.maximum.reduceat(x, starts)
    e = np.exp(x - np.repeat(row_max, lengths))
    z = np.add.reduceat(e, starts)
    return e / np.repeat(z, lengths)


def oracle_softmax(x):
    """float64 stable softmax of a (rows, cols) matrix, row by row."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class CheckResult:
    passed: bool
    max_abs_err: float
    max_tol_ratio: float
    max_row_sum_err: float
    finite_nonneg: bool
    worst_row: int
    worst_col: int
    worst_got: float
    worst_ref: float

    def record(self):
        return asdict(self)

    def describe(self):
        return (f"max |err| {self.max_abs_err:.3g}, worst tolerance ratio {self.max_tol_ratio:.3g} "
                f"at row {self.worst_row}, col {self.worst_col} (got {self.worst_got!r}, "
                f"ref {self.worst_ref!r}); max row-sum error {self.max_row_sum_err:.3g}; "
                f"finite and non-negative: {self.finite_nonneg}")


def check_packed(out, values, row_lengths):
    """Check packed float32 outputs against the oracle on the same float32 inputs."""
    out = np.asarray(out)
    if out.dtype != np.float32:
        raise TypeError(f"outputs must be float32, got {out.dtype}")
    lengths = np.asarray(row_lengths, dtype=np.int64)
    if out.shape != (int(lengths.sum()),):
        raise ValueError(f"output has shape {out.shape}, expected ({int(lengths.sum())},)")
    ref = oracle_softmax_rows(values, lengths)
    got = out.astype(np.float64)
    finite_nonneg = bool(np.all(np.isfinite(got)) and np.all(got >= 0))
    with np.errstate(invalid="ignore"):
        err = np.abs(got - ref)
        ratio = err / (ABS_TOL + REL_TOL * np.abs(ref))
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    worst = int(np.argmax(ratio))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    row = int(np.searchsorted(starts, worst, side="right") - 1)
    with np.errstate(invalid="ignore"):
        row_sums = np.add.reduceat(np.where(np.isfinite(got), got, np.inf), starts)
    row_sum_err = float(np.max(np.abs(row_sums - 1.0)))
    max_ratio = float(ratio[worst])
    passed = bool(finite_nonneg and max_ratio <= 1.0 and row_sum_err <= ROW_SUM_TOL)
    return CheckResult(
        passed=passed, max_abs_err=float(np.max(np.where(np.isnan(err), np.inf, err))),
        max_tol_ratio=max_ratio, max_row_sum_err=row_sum_err, finite_nonneg=finite_nonneg,
        worst_row=row, worst_col=int(worst - starts[row]),
        worst_got=float(got[worst]), worst_ref=float(ref[worst]))


def check_matrix(out, x):
    """Check a (rows, cols) float32 output matrix against the oracle."""
    out = np.asarray(out)
    x = np.asarray(x)
    if out.shape != x.shape:
        raise ValueError(f"output has shape {out.shape}, input {x.shape}")
    rows, cols = x.shape
    return check_packed(out.reshape(-1), x.reshape(-1), np.full(rows, cols, dtype=np.int64))


class AcceptanceError(AssertionError):
    """A required correctness check failed."""


def require(result, what):
    if not result.passed:
        raise AcceptanceError(f"{what} failed the oracle check: {result.describe()}")
    return result
