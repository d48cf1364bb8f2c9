"""Experiment B: tiled softmax as a task graph A -> B -> C under three schedulers.

Every scheduler of a case gets its own fixed buffers of the same packed layout and row
order (so an element a scheduler fails to write can never be masked by another one's
output); each is validated against the oracle, and all three must agree bit for bit
on the output and on every intermediate (tile summaries, row max, row sum). The DAG
scheduler's queue state is verified exactly after every validation run and after every
timed group of invocations (outside the timed intervals). With ``--variants``, registered scheduler
variants (bench/variants/) join the case on buffers of their own, held to the same bitwise agreement.
"""

import numpy as np

from bench import variants as registered_variants
from bench.twins import bitwise_groups, plan_library, tiled_twins
from numba_softmax import backend
from numba_softmax.cases import (EXPERIMENT_B_CASES, EXPERIMENT_B_SCHEDULERS, EXPERIMENT_B_SIM_CASES, TILE_ELEMENTS,
                                 row_lengths_digest)
from numba_softmax.fixtures import packed_fixture
from numba_softmax.oracle import PackedReference
from numba_softmax.tiled import TiledBuffers, build_layout, floor_launches, tiled_launches, verify_queue, worker_plan

EXPERIMENT = "B"
RATIO_REFERENCE = "separate"


#: Suffix of a scheduler's empty-work floor variant (the same launches and barriers, no task).
FLOOR_SUFFIX = "-floor"


class _SchedulerVariant:
    #: A floor variant runs no task: it is timed, never validated.
    floor = False

    def __init__(self, name, buffers, invocation, stream, workers):
        self.name = name
        self.buffers = buffers
        self.invocation = invocation
        self.workers = workers
        self._stream = stream

    def read_outputs(self):
        self._stream.synchronize()
        arrays = {"out": self.buffers.out.copy_to_host()}
        arrays.update(self.buffers.intermediates())
        return arrays

    def verify_after_invocation(self):
        if self.name == "dag":
            verify_queue(self.buffers.queue_state(), self.buffers.layout, self.workers)


class TiledBenchCase:
    experiment = EXPERIMENT

    def __init__(self, name, row_lengths, stream, *, run, twins=None, added=()):
        self.name = name
        self.row_lengths = np.asarray(row_lengths, dtype=np.int64)
        self.layout = build_layout(self.row_lengths, TILE_ELEMENTS)
        self.bytes_moved = 2 * int(self.row_lengths.sum()) * 4
        self.stream = stream
        make = backend.invocation  # the launch layer on a GPU, Numba's dispatcher in the simulator
        self.variants = []
        for scheduler in EXPERIMENT_B_SCHEDULERS:
            buffers = TiledBuffers.allocate(self.layout)
            workers = None
            if scheduler != "separate":
                plan = worker_plan(buffers)
                workers = plan.workers
                run.append_jsonl("workers.jsonl", dict(plan.record(), case=name, scheduler=scheduler))
            launches = tiled_launches(scheduler, buffers, workers)
            self.variants.append(_SchedulerVariant(scheduler, buffers, make(scheduler, launches),
                                                   stream, workers))
            # The scheduler's empty-work floor, on buffers of its own (it writes nothing but the
            # DAG reset and the phased barrier word): what its time costs with no work.
            floor_buffers = TiledBuffers.allocate(self.layout)
            floor_name = scheduler + FLOOR_SUFFIX
            floor = _SchedulerVariant(floor_name, floor_buffers,
                                      make(floor_name, floor_launches(scheduler, floor_buffers, workers)), stream,
                                      workers)
            floor.floor = True
            self.variants.append(floor)
        for variant in added:  # --variants: registered scheduler variants, each on buffers of its own
            buffers = TiledBuffers.allocate(self.layout)
            self.variants.append(_SchedulerVariant(variant.name, buffers,
                                                   make(variant.name, variant.launches(buffers)), stream, None))
        self.bitwise_groups = (EXPERIMENT_B_SCHEDULERS + tuple(variant.name for variant in added),)
        if twins is not None:  # --twins: each scheduler's nvcc twin (bench/twins.py)
            self.variants += tiled_twins(self, twins, _SchedulerVariant, stream)
            self.bitwise_groups = self.bitwise_groups + bitwise_groups(self.variants)
        run.append_jsonl("layouts.jsonl", {
            "case": name, "rows": self.layout.rows, "tiles": self.layout.n_tiles,
            "elements": self.layout.total_elements, "tile_elements": TILE_ELEMENTS,
            "row_lengths_sha": row_lengths_digest(self.row_lengths),
            "kernel_resources": {v.name: v.invocation.kernel_resources() for v in self.variants}})

    def variant(self, name):
        return next(v for v in self.variants if v.name == name)

    def load_fixture(self, fixture_id):
        host = packed_fixture(fixture_id, self.row_lengths)
        for v in self.variants:
            v.buffers.load_values(host, stream=self.stream.numba)
        self.stream.synchronize()
        return host

    def reference(self, host_input):
        return PackedReference(host_input, self.row_lengths)


def _plan(args, gpu, metadata, run):
    notes = []
    stream = backend.stream()
    if not backend.SIMULATOR:
        cases = [(c.name, c.row_lengths()) for c in EXPERIMENT_B_CASES]
    else:
        cases = list(EXPERIMENT_B_SIM_CASES)
        notes.append("simulator: Experiment B reduced to small cases with ONE persistent worker "
                     "(the simulator runs blocks one at a time); no graph mode, no timings")
    if args.cases:
        wanted = args.cases.split(",")
        cases = [c for c in cases if c[0] in wanted]
        if not cases:
            raise SystemExit(f"--cases matched nothing; known: {[c.name for c in EXPERIMENT_B_CASES]}")
    twins = plan_library(args, metadata, notes)
    added = registered_variants.chosen(args)
    factories = [(lambda name=name, lengths=lengths: TiledBenchCase(name, lengths, stream, run=run, twins=twins,
                                                                    added=added))
                 for name, lengths in cases]
    return stream, factories, notes


_plan.ratio_reference = RATIO_REFERENCE
EXPERIMENT_PLAN_B = _plan
