"""Shapes, cases, fixture IDs and tolerances: declared once, used by tests and the bench."""

import hashlib
from dataclasses import dataclass

import numpy as np

# ---- acceptance tolerances (the protocol's; constants, never parameters) -------------
ABS_TOL = 1e-7
REL_TOL = 2e-5
ROW_SUM_TOL = 2e-5


@dataclass(frozen=True)
class Tolerance:
    """``abs(out - ref) <= absolute + relative * abs(ref)`` element by element, and each row's sum within
    ``row_sum`` of one; ``ref`` the float64 softmax of the inputs as the output type holds them."""
    absolute: float
    relative: float
    row_sum: float


#: Per output element type: float32 is the protocol's; float16 and bfloat16 allow two roundings to their
#: precision (2^-11, 2^-8 relative) of the output; float64 its own.
TOLERANCES = {"float32": Tolerance(ABS_TOL, REL_TOL, ROW_SUM_TOL),
              "float16": Tolerance(1e-7, 1e-3, 1e-3),
              "bfloat16": Tolerance(1e-7, 8e-3, 8e-3),
              "float64": Tolerance(1e-15, 1e-12, 1e-12)}

# ---- Experiment A ----------------------------------------------------------------------
#: Timed (rows, columns) pairs of the protocol.
EXPERIMENT_A_TIMED_SHAPES = ((1, 128), (32, 1024), (4096, 128), (4096, 1024), (4096, 4096), (16384, 1024))
#: The additional case that checks masking (not a multiple of 256 columns).
EXPERIMENT_A_MASK_SHAPE = (7, 781)
EXPERIMENT_A_SHAPES = EXPERIMENT_A_TIMED_SHAPES + (EXPERIMENT_A_MASK_SHAPE,)
#: Small shapes the simulator can run in seconds (one block at a time there).
EXPERIMENT_A_SIM_SHAPES = ((1, 128), (7, 781))

# ---- the width sweep (python -m bench perf --sweep widths) ------------------------------
#: Row lengths of the width sweep, 1 to 262,144: every residue mod 8 (1-8, 4097-4103), powers of two and their
#: neighbours 2^k - 1 and 2^k + 1 (each crossing one of ``auto``'s width limits), primes (2, 3, 5, 7, 127, 4093,
#: 4099, 8191, 65537, 131071) and LLM vocabulary sizes (32000, 32768, 50257, 128256, 151936, 152064, 256000).
#: Each width >= 64 that is not a multiple of 8 comes with its nearest multiple of 8 (:func:`nearest_multiple_of_8`).
SWEEP_WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8, 32, 64, 127, 128, 129, 256, 512, 1023, 1024, 1025, 2048,
                4093, 4095, 4096, 4097, 4098, 4099, 4100, 4101, 4102, 4103, 4104, 8191, 8192, 16383, 16384, 16385,
                32000, 32767, 32768, 32769, 50256, 50257, 65535, 65536, 65537, 128256, 131071, 131072,
                151936, 152064, 256000, 262143, 262144)
SWEEP_MAX_WIDTH = 262144
#: Bytes each sweep problem moves: the input read once and the output written once (2 x rows x width x itemsize).
SWEEP_PROBLEM_BYTES = 256 * 2**20
#: The small problems (latency): these row counts at these widths.
SWEEP_SMALL_ROWS = (1, 8, 64)
SWEEP_SMALL_WIDTHS = (128, 4096, 32768, 151936)
#: The element types of the sweep (inputs and outputs of one type).
SWEEP_DTYPES = ("float32", "bfloat16")
#: The operations of the sweep and the arrays of the problem's shape each reads or writes once (its bytes moved):
#: a forward reads x and writes y; a backward reads y and dy and writes dx; a training step (the softmax's forward
#: and backward) both.
SWEEP_OPS = {"softmax": 2, "log_softmax": 2, "softmax_backward": 3, "log_softmax_backward": 3, "softmax_train": 5}


def sweep_rows(width, itemsize, passes=2):
    """Rows of a sweep problem: ``round(SWEEP_PROBLEM_BYTES / (passes * width * itemsize))``, at least 1, so that
    reading and writing ``passes`` arrays once each moves 256 MiB (within half a row)."""
    return max(1, round(SWEEP_PROBLEM_BYTES / (passes * width * itemsize)))


def nearest_multiple_of_8(width):
    """The multiple of 8 nearest ``width`` (a tie, ``width % 8 == 4``, goes down)."""
    return 8 * ((width + 3) // 8)


# ---- fixtures --------------------------------------------------------------------------
#: Every fixture family. Each ID regenerates the same float32 bits for a given shape.
FIXTURE_FAMILIES = ("random", "constant", "dominant", "offset")
#: Preflight: two deterministic fixtures that must pass before any timing is admitted.
PREFLIGHT_FIXTURES = ("constant", "dominant")
#: Benchmark: timed on the first, then the second is written into the SAME buffers
#: after timing and validated again (a replayed graph must read the current data).
BENCH_FIXTURES = ("random", "offset")

# ---- Experiment B ----------------------------------------------------------------------
TILE_ELEMENTS = 1024
EXPERIMENT_B_ROW_COUNTS = (128, 512, 2048)
EXPERIMENT_B_DISTRIBUTIONS = ("balanced", "ragged")
BALANCED_ROW_LENGTH = 8192
#: Ragged: per group of eight rows, one long row and seven short ones (same 8192 mean).
RAGGED_LONG_ROW, RAGGED_SHORT_ROW, RAGGED_GROUP = 36864, 4096, 8
#: The fixed seed of the ragged rows' permutation.
RAGGED_PERMUTATION_SEED = 20261019
EXPERIMENT_B_SCHEDULERS = ("separate", "phased", "dag")
#: Simulator stand-ins (the simulator runs one block at a time, ~45 ms each): a few rows,
#: full 1024-element tiles, partial last tiles, and one multi-tile row per case.
EXPERIMENT_B_SIM_CASES = (("sim-mini", (2048, 700, 1500, 1024)),)


@dataclass(frozen=True)
class TiledCase:
    rows: int
    distribution: str

    @property
    def name(self):
        return f"{self.distribution}-{self.rows}"

    def row_lengths(self):
        return row_lengths_for(self.rows, self.distribution)


def row_lengths_for(rows, distribution):
    """Row lengths of an Experiment B case (int64 array, in the case's row order)."""
    if distribution == "balanced":
        return np.full(rows, BALANCED_ROW_LENGTH, dtype=np.int64)
    if distribution == "ragged":
        if rows % RAGGED_GROUP:
            raise ValueError(f"ragged cases need a multiple of {RAGGED_GROUP} rows, got {rows}")
        group = [RAGGED_LONG_ROW] + [RAGGED_SHORT_ROW] * (RAGGED_GROUP - 1)
        lengths = np.array(group * (rows // RAGGED_GROUP), dtype=np.int64)
        order = np.random.default_rng(RAGGED_PERMUTATION_SEED).permutation(rows)
        return lengths[order]
    raise ValueError(f"unknown row distribution {distribution!r}; expected one of {EXPERIMENT_B_DISTRIBUTIONS}")


EXPERIMENT_B_CASES = tuple(TiledCase(r, d) for r in EXPERIMENT_B_ROW_COUNTS for d in EXPERIMENT_B_DISTRIBUTIONS)


def experiment_b_row_lengths(name):
    """The row lengths of the Experiment B case (or simulator stand-in) called ``name``; None if none is."""
    for case in EXPERIMENT_B_CASES:
        if case.name == name:
            return case.row_lengths()
    for sim_name, lengths in EXPERIMENT_B_SIM_CASES:
        if sim_name == name:
            return np.asarray(lengths, dtype=np.int64)
    return None


def row_lengths_digest(lengths):
    """A case's row lengths as a short hex digest (a run folder's ``layouts.jsonl`` records it)."""
    return hashlib.sha256(np.ascontiguousarray(lengths).tobytes()).hexdigest()[:16]
