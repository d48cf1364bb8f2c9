"""Byte floors: the fewest bytes each variant must move, and the time they take at copy bandwidth.

One definition, used by ``python -m bench perf --floors`` (PERFORMANCE.md's tables) and by the
run summary's "against the byte floor" section (:mod:`bench.report`).

* Experiment A, fused kernel and cuDNN: x read once, y written once: **8N** bytes (N = rows x cols).
  The four stages: x read twice (max, exp), e written once and read twice (sum, divide), y written
  once, row max / sum written and read once: **24N + 16R**.
* Experiment B, every scheduler (A -> B -> C): x read by A (4N) + x read again by C (4N) + y written
  (4N) + tile max/sum written by A and read by B (16T) + row max/sum written by B and read by C
  (16R): **12N + 16T + 16R** (T = tiles, R = rows; layout metadata not counted). A scheduler
  whose C pass rereads each tile from L2 (the DAG runs a row's C tiles soon after its A tiles) can
  read x from DRAM once: its one-read floor is **8N + 16T + 16R**. 8N is the one-pass bound of a
  scheduler that kept each row on chip.

Time = bytes / copy bandwidth (read + write). ``H200_COPY_TBS`` is the 1 GiB device-to-device
copy measured on the H200 (``results/perf``, docs/machine.md); ``bench perf`` re-measures it in every run.
"""

import numpy as np

from numba_softmax.cases import EXPERIMENT_A_SHAPES, EXPERIMENT_B_CASES, TILE_ELEMENTS

#: The copy bandwidth measured on the H200 (results/perf, docs/machine.md), for floors computed offline.
H200_COPY_TBS = 4.25


def shape_name(shape):
    return f"{shape[0]}x{shape[1]}"


def experiment_a_floors(shapes=None):
    """Per Experiment A shape: fewest bytes of the fused kernel (and any one-pass softmax: 8N) and
    of the four stages (24N + 16R)."""
    rows_out = []
    for rows, cols in shapes or EXPERIMENT_A_SHAPES:
        n = rows * cols
        rows_out.append({"case": shape_name((rows, cols)), "elements": n, "rows": rows,
                         "one_pass_bytes": 8 * n, "stages_bytes": 24 * n + 16 * rows})
    return rows_out


def experiment_b_floors(cases=None, tile_elements=None):
    """Per Experiment B case: the A -> B -> C floor 12N + 16T + 16R and the one-pass bound 8N."""
    tile = tile_elements or TILE_ELEMENTS
    rows_out = []
    for case in cases or EXPERIMENT_B_CASES:
        lengths = np.asarray(case.row_lengths(), dtype=np.int64)
        n = int(lengths.sum())
        tiles = int(np.sum((lengths + tile - 1) // tile))
        rows = int(lengths.size)
        rows_out.append({"case": case.name, "elements": n, "rows": rows, "tiles": tiles,
                         "floor_bytes": 12 * n + 16 * tiles + 16 * rows,
                         "one_read_bytes": 8 * n + 16 * tiles + 16 * rows, "one_pass_bytes": 8 * n})
    return rows_out


def us_at(nbytes, tbs):
    """Microseconds to move ``nbytes`` at ``tbs`` TB/s."""
    return nbytes / (tbs * 1e12) * 1e6


def one_read_floor_bytes(experiment, case):
    """Experiment B: the floor of a scheduler that reads x from DRAM once (C rereads from L2)."""
    if experiment != "B":
        return None
    floors = {r["case"]: r for r in experiment_b_floors()}
    return floors[case]["one_read_bytes"] if case in floors else None


def variant_floor_bytes(experiment, case, variant):
    """The floor of one timed variant of a run (None for a case or variant without one)."""
    if str(variant).endswith("-floor"):  # an empty-work floor moves no data
        return None
    if experiment == "B":
        floors = {r["case"]: r for r in experiment_b_floors()}
        return floors[case]["floor_bytes"] if case in floors else None
    if experiment == "A":
        floors = {r["case"]: r for r in experiment_a_floors()}
        if case not in floors:
            return None
        if variant == "stages":
            return floors[case]["stages_bytes"]
        return floors[case]["one_pass_bytes"] if variant in ("fused", "cudnn") else None
    return None
