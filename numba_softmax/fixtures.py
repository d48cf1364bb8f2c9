"""Deterministic fixtures: a fixture ID and a shape always give the same float32 bits.

Families (the protocol's):
* ``random``   -- bounded uniform values in [-8, 8);
* ``constant`` -- every row constant (a different constant per row), so every output
  of a row is exactly 1/n in exact arithmetic;
* ``dominant`` -- small values in [-1, 1) with one element per row raised by 30, so
  almost all of the mass sits on it and the other outputs are tiny (~1e-13);
* ``offset``   -- values in [-2, 2) plus a common offset of 1000: exp(x) overflows
  float32 (max exp argument ~88.7), so only a max-subtracting softmax survives.

The seed is a CRC32 of the fixture ID and the row lengths, stable across platforms
and Python versions (unlike ``hash()``).
"""

import zlib

import numpy as np

from .cases import FIXTURE_FAMILIES

OFFSET = np.float32(1000.0)
DOMINANT_BOOST = np.float32(30.0)


def _seed(fixture_id, row_lengths):
    lengths = np.ascontiguousarray(row_lengths, dtype=np.int64)
    return zlib.crc32(fixture_id.encode() + b"|" + lengths.tobytes())


def _family(fixture_id):
    family = fixture_id.split("-", 1)[0]
    if family not in FIXTURE_FAMILIES:
        raise ValueError(f"unknown fixture {fixture_id!r}; families are {FIXTURE_FAMILIES}")
    return family


def packed_fixture(fixture_id, row_lengths):
    """Packed rows (1-D float32, rows back to back) for the given row lengths."""
    family = _family(fixture_id)
    lengths = np.asarray(row_lengths, dtype=np.int64)
    rng = np.random.default_rng(_seed(fixture_id, lengths))
    total = int(lengths.sum())
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    if family == "random":
        values = rng.uniform(-8.0, 8.0, total)
    elif family == "constant":
        per_row = rng.uniform(-4.0, 4.0, len(lengths))
        values = np.repeat(per_row, lengths)
    elif family == "dominant":
        values = rng.uniform(-1.0, 1.0, total)
        hot = starts + (rng.random(len(lengths)) * lengths).astype(np.int64)
        values[hot] += DOMINANT_BOOST
    else:  # offset
        values = rng.uniform(-2.0, 2.0, total) + OFFSET
    return values.astype(np.float32)


def matrix_fixture(fixture_id, shape):
    """A (rows, cols) float32 C-contiguous matrix: the packed fixture of equal rows."""
    rows, cols = shape
    return packed_fixture(fixture_id, np.full(rows, cols, dtype=np.int64)).reshape(rows, cols)
