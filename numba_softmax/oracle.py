"""The independent CPU oracle and the acceptance check.

The oracle is float64 stable softmax computed on the exact inputs that were saved, as the output type holds
them (``softmax(x, dtype=)`` casts the input first). An output passes when, element by element,
``abs(out - ref) <= absolute + relative * abs(ref)``, every output is finite and ``>= 0``, and every row sums
(in float64) to within ``row_sum`` of one: the output type's :data:`numba_softmax.cases.TOLERANCES` (float32:
the protocol's ``ABS_TOL``, ``REL_TOL``, ``ROW_SUM_TOL``). The tolerances are constants; no caller can loosen
them. Arrays of bfloat16 are given as their uint16 bits (:mod:`numba_softmax.element_types`).
"""

import concurrent.futures
import functools
import os
from dataclasses import asdict, dataclass

import numpy as np

from .cases import TOLERANCES
from .device import usable_cpus
from .element_types import STORAGE_DTYPES, from_float64, to_float64


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


def oracle_log_softmax(x):
    """float64 log_softmax of a (rows, cols) matrix and the scale of each value's rounding error in the
    compute type, ``|x - m| + |log z| + 1``: the two subtractions' operands, and ``z``'s own rounding (a sum of
    terms up to 1, so ``z >= 1`` is rounded to a few units in its last place: an absolute error of that size in
    ``log z``, however small ``log z`` is, as in a row with one dominant entry)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        shifted = x - m
        log_z = np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return shifted - log_z, np.abs(shifted) + np.abs(log_z) + 1.0


def oracle_softmax_backward(y, dy):
    """float64 ``dx = y * (dy - sum(dy * y))`` of (rows, cols) matrices, and each value's error scale
    ``|y| (|dy| + sum |dy * y|)`` (the sum's own rounding grows with its terms' size, not its value's)."""
    y, dy = np.asarray(y, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    s = (dy * y).sum(axis=1, keepdims=True)
    return y * (dy - s), np.abs(y) * (np.abs(dy) + np.abs(dy * y).sum(axis=1, keepdims=True))


def oracle_log_softmax_backward(y, dy):
    """float64 ``dx = dy - exp(y) * sum(dy)`` of (rows, cols) matrices (``y``: log_softmax outputs), and each
    value's error scale ``|dy| + exp(y) sum |dy|``."""
    y, dy = np.asarray(y, dtype=np.float64), np.asarray(dy, dtype=np.float64)
    s = dy.sum(axis=1, keepdims=True)
    return dy - np.exp(y) * s, np.abs(dy) + np.exp(y) * np.abs(dy).sum(axis=1, keepdims=True)


def check_scaled(got, ref, scale, element_type):
    """``(passed, worst ratio, (row, col) of the worst)`` of ``got`` (``element_type`` values, bfloat16 as
    bits) against the float64 ``ref``: each ``|got - ref| <= absolute + relative * scale`` with the type's
    :data:`TOLERANCES` and the oracle's error ``scale`` of the value (an output that sums or subtracts many
    terms is as exact as its terms' size allows, not its own); equal infinities pass, a NaN fails."""
    tolerance = TOLERANCES[element_type]
    got = to_float64(np.asarray(got), element_type)
    ref = np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        same_inf = np.isinf(ref) & (got == ref)
        ratio = np.abs(got - ref) / (tolerance.absolute + tolerance.relative * np.asarray(scale, dtype=np.float64))
    ratio = np.where(same_inf, 0.0, np.where(np.isnan(ratio), np.inf, ratio))
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
    return bool(ratio[worst] <= 1.0), float(ratio[worst]), tuple(int(i) for i in worst)


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


def cast_inputs(values, types):
    """float64 values of inputs of ``types[0]`` as ``types[1]`` holds them (rounded where that cast loses bits)."""
    in_type, out_type = types
    x = to_float64(values, in_type)
    if out_type in (in_type, "float64") or (in_type, out_type) in (("float16", "float32"), ("bfloat16", "float32")):
        return x
    return to_float64(from_float64(x, out_type), out_type)


#: Values per span of rows the oracle and the check work on at once; larger inputs are cut into spans of whole rows
#: computed in :data:`ORACLE_THREADS` threads (numpy releases the GIL inside its loops).
SPAN_VALUES = 1 << 21
ORACLE_THREADS = min(8, usable_cpus())


@functools.cache
def _pool(pid):
    """This process's threads (a forked child does not inherit its parent's, so each process has its own)."""
    return concurrent.futures.ThreadPoolExecutor(ORACLE_THREADS, thread_name_prefix="oracle")


def _each_span(work, spans):
    """``[work(span) for span in spans]``, in threads where there is more than one span."""
    return list(_pool(os.getpid()).map(work, spans)) if len(spans) > 1 else [work(spans[0])]


class PackedReference:
    """The oracle of packed rows, computed once: :meth:`check` then checks any number of outputs of these
    inputs (every variant and mode of a fixture) against it. ``values`` may be any shape (a matrix: its rows back
    to back); an output is checked in the same shape. Inputs of more than :data:`SPAN_VALUES` values are cut into
    spans of whole rows, each computed and checked on its own (the same values as in one piece)."""

    def __init__(self, values, row_lengths, types=("float32", "float32")):
        values = np.asarray(values)
        self.shape = values.shape
        self.types = tuple(types)
        self.tolerance = TOLERANCES[types[1]]
        self.lengths = np.asarray(row_lengths, dtype=np.int64)
        self.starts = np.concatenate(([0], np.cumsum(self.lengths)[:-1]))
        total = int(self.lengths.sum())
        # Spans of whole rows, each (first row, past its last row, first value, past its last value): a span
        # ends with the row holding every SPAN_VALUES-th value.
        row_bounds = np.unique(np.concatenate((
            [0], np.searchsorted(self.starts, np.arange(SPAN_VALUES, total, SPAN_VALUES), side="right"),
            [len(self.lengths)])))
        value_bounds = np.append(self.starts, total)[row_bounds]
        self.spans = [(int(row_bounds[i]), int(row_bounds[i + 1]), int(value_bounds[i]), int(value_bounds[i + 1]))
                      for i in range(len(row_bounds) - 1)] or [(0, 0, 0, 0)]
        flat = values.reshape(-1)
        self.ref = np.empty(total, dtype=np.float64)
        self.bound = np.empty(total, dtype=np.float64)

        def compute(span):
            r0, r1, v0, v1 = span
            self.ref[v0:v1] = oracle_softmax_rows(cast_inputs(flat[v0:v1], types), self.lengths[r0:r1])
            self.bound[v0:v1] = self.tolerance.absolute + self.tolerance.relative * np.abs(self.ref[v0:v1])
        _each_span(compute, self.spans)

    def check(self, out):
        """Check packed outputs of ``types[1]`` (see the module's docstring)."""
        out = np.asarray(out)
        if out.dtype != STORAGE_DTYPES[self.types[1]]:
            raise TypeError(f"{self.types[1]} outputs are held as {STORAGE_DTYPES[self.types[1]]}, got {out.dtype}")
        if out.shape != self.shape:
            raise ValueError(f"output has shape {out.shape}, expected {self.shape}")
        flat = out.reshape(-1)
        parts = _each_span(lambda span: self._check_span(flat, span), self.spans)
        finite_nonneg = all(part["finite_nonneg"] for part in parts)
        worst_part = max(parts, key=lambda part: part["max_ratio"])  # the first of equal ones, as np.argmax
        max_ratio, worst, got = worst_part["max_ratio"], worst_part["worst"], worst_part["worst_got"]
        max_err = max(part["max_err"] for part in parts)
        row_sum_err = max(part["row_sum_err"] for part in parts)
        row = int(np.searchsorted(self.starts, worst, side="right") - 1)
        passed = bool(finite_nonneg and max_ratio <= 1.0 and row_sum_err <= self.tolerance.row_sum)
        return CheckResult(
            passed=passed, max_abs_err=max_err, max_tol_ratio=max_ratio, max_row_sum_err=row_sum_err,
            finite_nonneg=finite_nonneg, worst_row=row, worst_col=int(worst - self.starts[row]),
            worst_got=got, worst_ref=float(self.ref[worst]))

    def _check_span(self, flat, span):
        r0, r1, v0, v1 = span
        got = to_float64(flat[v0:v1], self.types[1])
        finite_nonneg = bool(np.all(np.isfinite(got)) and np.all(got >= 0))
        with np.errstate(invalid="ignore"):
            ratio = np.subtract(got, self.ref[v0:v1])  # |got - ref|, then divided by the bound in place
            np.abs(ratio, out=ratio)
            max_err = float(np.max(ratio, initial=0.0))  # a NaN error counts as infinite
            np.divide(ratio, self.bound[v0:v1], out=ratio)
        ratio[np.isnan(ratio)] = np.inf
        worst = int(np.argmax(ratio)) if len(ratio) else 0
        with np.errstate(invalid="ignore"):
            sums = np.add.reduceat(got if finite_nonneg else np.where(np.isfinite(got), got, np.inf),
                                   self.starts[r0:r1] - v0) if len(got) else np.ones(0)
        return {"finite_nonneg": finite_nonneg, "max_err": np.inf if np.isnan(max_err) else max_err,
                "max_ratio": float(ratio[worst]) if len(ratio) else 0.0, "worst": v0 + worst,
                "worst_got": float(got[worst]) if len(got) else 0.0,
                "row_sum_err": float(np.max(np.abs(sums - 1.0), initial=0.0))}


def matrix_reference(x, types=("float32", "float32")):
    """The :class:`PackedReference` of a (rows, cols) input matrix (its rows back to back)."""
    x = np.asarray(x)
    rows, cols = x.shape
    return PackedReference(x, np.full(rows, cols, dtype=np.int64), types)


def check_packed(out, values, row_lengths, types=("float32", "float32")):
    """Check packed outputs of ``types[1]`` against the oracle on the same inputs of ``types[0]``."""
    return PackedReference(values, row_lengths, types).check(out)


def check_matrix(out, x, types=("float32", "float32")):
    """Check a (rows, cols) output matrix of ``types[1]`` against the oracle on ``x`` of ``types[0]``."""
    return matrix_reference(x, types).check(out)


class AcceptanceError(AssertionError):
    """A required correctness check failed."""


def require(result, what):
    if not result.passed:
        raise AcceptanceError(f"{what} failed the oracle check: {result.describe()}")
    return result
