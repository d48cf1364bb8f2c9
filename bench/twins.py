"""``--twins``: every Numba variant's nvcc twin as one more variant of the same case (GPU only).

The twins are the CUDA C++ kernels of ``reference_cu/`` (same algorithm, reduction order and
launch geometry), built offline by nvcc (:mod:`bench.reference_build`) and launched with the
driver (:mod:`numba_softmax.peers.nvcc_twins`). A twin is an ordinary variant of the harness
(:mod:`bench.runner`): named ``<numba variant>-nvcc``, on buffers of its own, it joins the same
shuffled rounds in stream and graph mode, is validated by the oracle on every fixture, and is
compared bit for bit with its Numba variant (outputs and intermediates) before anything is
timed; a twin that differs stops the run like any failed check. The summary puts the paired
per-round ratios Numba / nvcc of each pair in their own table (:func:`bench.report`).

An Experiment B empty-work floor (``<scheduler>-floor``) has no twin: it is timed, never
validated, so nothing could check that a twin of it did the same (no) work. The names
(``<variant>-nvcc``) are :func:`bench.protocol.twin_name`'s.
"""

import numpy as np
from numba import cuda

from bench.protocol import TWIN_SUFFIX, twin_name, twin_pairs
from bench.reference_build import BUILD_DIR, BuildError, NvccNotFound, ensure_built
from numba_softmax.cases import EXPERIMENT_B_SCHEDULERS
from numba_softmax.peers.nvcc_twins import (ReferenceLibrary, reference_fused_launches, reference_invocation,
                                            reference_stages_launches, reference_tiled_launches)
from numba_softmax.tiled import TiledBuffers, verify_queue


class TwinsUnavailable(RuntimeError):
    """--twins was asked for and the nvcc build cannot be used (no nvcc and no current build, no GPU)."""


def load_library(metadata):
    """The nvcc twins' cubins, loaded into Numba's primary context; their build recorded in ``metadata``.

    Reuses a current ``reference_cu/build`` (carried to a GPU machine without nvcc) or builds it with
    nvcc; neither possible -> :class:`TwinsUnavailable` naming both ways out."""
    try:
        build = ensure_built(BUILD_DIR)
    except NvccNotFound as exc:
        raise TwinsUnavailable(f"--twins: no current reference_cu/build and {exc}: run `python -m bench "
                               "build-reference` where nvcc is installed and bring reference_cu/build along, or "
                               "run without --twins") from exc
    except BuildError as exc:
        raise TwinsUnavailable(f"--twins: the nvcc build failed: {exc}") from exc
    manifest = build.manifest
    metadata["twins"] = {"build_dir": "reference_cu/build", "rebuilt": build.rebuilt,
                         "nvcc_version": manifest.get("nvcc_version"), "flags": manifest.get("flags"),
                         "arch": manifest.get("arch"), "outputs_sha256": manifest.get("outputs_sha256"),
                         "sources_sha256": manifest.get("sources_sha256"), "suffix": TWIN_SUFFIX}
    return ReferenceLibrary(build.out_dir)


def plan_library(args, metadata, notes):
    """The experiments' plans call this: the loaded twins when ``--twins`` was given, else None. The
    command line refuses ``--twins`` without a GPU before any plan runs (bench/cli.py)."""
    if not getattr(args, "twins", False):
        return None
    library = load_library(metadata)
    if library.missing:
        notes.append(f"twins: entries absent from this build (their Numba kernels run without a twin): "
                     f"{library.missing}")
    notes.append(f"twins: every Numba variant's nvcc twin ('<variant>{TWIN_SUFFIX}', reference_cu/, nvcc "
                 f"{(metadata['twins'].get('nvcc_version') or {}).get('version', '?')}) validated, compared bit for "
                 "bit with its Numba variant and timed in the same rounds")
    return library


# ---- Experiment A --------------------------------------------------------------------------

def matrix_twins(case, library, variant_class):
    """The twins of an Experiment A case's fused and stages variants, on buffers of their own.

    ``variant_class(name, invocation, outputs, stream)``: the case's own variant type (the same
    read-back). The stages twin returns the same intermediates as the Numba stages (row max, row sum)."""
    rows, _ = case.shape
    f32 = np.float32
    present = {v.name for v in case.variants}
    twins = []
    if "fused" in present:
        d_y = cuda.device_array(case.shape, dtype=f32)
        twins.append(variant_class(twin_name("fused"), reference_invocation(
            twin_name("fused"), reference_fused_launches(library, case.d_x, d_y)), {"out": d_y}, case.stream))
    if "stages" in present:
        d_y, d_max, d_exp, d_sum = (cuda.device_array(case.shape, dtype=f32), cuda.device_array(rows, dtype=f32),
                                    cuda.device_array(case.shape, dtype=f32), cuda.device_array(rows, dtype=f32))
        twins.append(variant_class(twin_name("stages"), reference_invocation(
            twin_name("stages"), reference_stages_launches(library, case.d_x, d_y, d_max, d_exp, d_sum)),
            {"out": d_y, "row_max": d_max, "row_sum": d_sum}, case.stream))
    return twins


# ---- Experiment B --------------------------------------------------------------------------

def tiled_twins(case, library, variant_class, stream):
    """The twins of an Experiment B case's schedulers (not of the empty-work floors), each on its own
    :class:`~numba_softmax.tiled.TiledBuffers` of the case's layout, with the Numba scheduler's worker
    count (a twin that cannot co-schedule that many workers is an error, not a different comparison).

    ``variant_class(name, buffers, invocation, stream, workers)``: the case's scheduler variant type."""
    twins = []
    for variant in list(case.variants):
        if getattr(variant, "floor", False) or variant.name not in EXPERIMENT_B_SCHEDULERS:
            continue  # floors, twins and registered variants (bench/variants/) have no twin
        buffers = TiledBuffers.allocate(case.layout)
        name = twin_name(variant.name)
        launches = reference_tiled_launches(library, variant.name, buffers, variant.workers)
        twin = variant_class(name, buffers, reference_invocation(name, launches), stream, variant.workers)
        if variant.name == "dag":
            # The twin's queue must end exactly as the Numba DAG's does (counters, FIFO, arrivals).
            twin.verify_after_invocation = (
                lambda b=buffers, w=variant.workers: verify_queue(b.queue_state(), b.layout, w))
        twins.append(twin)
    return twins


def bitwise_groups(case_variants):
    """Each (Numba variant, twin) pair: every output and intermediate must be bit-identical."""
    return tuple(twin_pairs([v.name for v in case_variants]))
