"""One harness for both experiments: validate, capture, time, validate again.

A *case* (one Experiment A shape, or one Experiment B case) provides:

* ``name``, ``experiment``, ``bytes_moved`` (logical bytes of one invocation: input
  read once + output written once; never claimed as HBM traffic);
* ``variants``: objects with ``name``, ``invocation`` (``enqueue(stream)``),
  ``read_outputs()`` -> dict of numpy arrays (``"out"`` first, then intermediates),
  ``verify_after_invocation()`` (e.g. the DAG queue counters; may do nothing);
* ``load_fixture(fixture_id)`` -> the host input now in the fixed device buffer;
* ``reference(host_input)`` -> the oracle of that input, computed once per fixture, whose ``check(out)``
  gives a :class:`numba_softmax.oracle.CheckResult` for each variant and mode;
* ``bitwise_groups``: tuples of variant names whose outputs (all arrays) must be
  bit-identical.

Order of work per case (the protocol's):
  capture graphs (timed separately; DOT written afterwards) -> preflight on two
  fixtures -> load the first benchmark fixture and validate -> warm up -> shuffled
  rounds -> write the second benchmark fixture into the SAME buffers and validate
  every variant in every mode again (a replayed graph must see the new data).
A failed check is written to ``cases.jsonl`` first, then raised: nothing written is lost.
"""

import numpy as np

from bench import protocol, timing
from numba_softmax.cases import BENCH_FIXTURES, PREFLIGHT_FIXTURES
from numba_softmax.launch.driver import Event
from numba_softmax.launch.graphs import CapturedGraph
from numba_softmax.oracle import AcceptanceError


class GraphSubmitter:
    """Graph mode: a captured graph replayed with one ``cuGraphLaunch``."""

    def __init__(self, graph):
        self.graph = graph

    def enqueue(self, stream):
        self.graph.launch(stream)


def _submitters(case, graphs):
    subs = {(v.name, "stream"): v.invocation for v in case.variants}
    for v in case.variants:
        if v.name in graphs:
            subs[(v.name, "graph")] = GraphSubmitter(graphs[v.name])
    return subs


def capture_graphs(case, stream, run):
    """Capture every variant; record node counts/types and timings; write DOTs after."""
    graphs = {}
    for variant in case.variants:
        graphs[variant.name] = CapturedGraph(variant.invocation, stream)
    for name, graph in graphs.items():
        record = dict(graph.record(), experiment=case.experiment, case=case.name, variant=name)
        run.append_jsonl("graphs.jsonl", record)
        graph.write_dot(run.path_of(f"graphs/{case.experiment}_{case.name}_{name}.dot"))
    return graphs


def _no_step(what):
    pass


def validate_all(case, run, stream, submitters, fixture_id, phase, save_arrays, on_step=_no_step):
    """Run every (variant, mode) once on ``fixture_id``; check, record, compare bitwise."""
    host_input = case.load_fixture(fixture_id)
    reference = case.reference(host_input)
    if save_arrays:
        run.save_array(f"arrays/{case.experiment}/{case.name}/input_{fixture_id}.npy", host_input)
    outputs = {}
    failures = []
    for (variant_name, mode), submitter in submitters.items():
        on_step(f"{phase} {fixture_id} {variant_name}/{mode}")
        variant = case.variant(variant_name)
        submitter.enqueue(stream)
        stream.synchronize()
        if getattr(variant, "floor", False):  # an empty-work floor: no output to check
            continue
        variant.verify_after_invocation()
        arrays = variant.read_outputs()
        outputs[(variant_name, mode)] = arrays
        result = reference.check(arrays["out"])
        record = dict(result.record(), experiment=case.experiment, case=case.name,
                      variant=variant_name, mode=mode, fixture=fixture_id, phase=phase)
        if mode == "graph":
            same = all(np.array_equal(arrays[k], outputs[(variant_name, "stream")][k]) for k in arrays)
            record["bitwise_equal_to_stream_mode"] = same
            if not same:
                failures.append(f"{variant_name}: graph replay output differs from stream mode")
        run.append_jsonl("cases.jsonl", record)
        if save_arrays and mode == "stream":
            for key, array in arrays.items():
                run.save_array(f"arrays/{case.experiment}/{case.name}/{variant_name}_{key}_{fixture_id}.npy", array)
        if not result.passed:
            failures.append(f"{variant_name}/{mode}: {result.describe()}")
    for group in case.bitwise_groups:
        for mode in {m for (_, m) in outputs}:
            present = [name for name in group if (name, mode) in outputs]
            if len(present) < 2:
                continue
            reference = outputs[(present[0], mode)]
            for other in present[1:]:
                arrays = outputs[(other, mode)]
                shared_keys = [k for k in reference if k in arrays]
                mismatched = [k for k in shared_keys if not np.array_equal(reference[k], arrays[k])]
                run.append_jsonl("bitwise.jsonl", {
                    "experiment": case.experiment, "case": case.name, "fixture": fixture_id,
                    "mode": mode, "reference": present[0], "variant": other,
                    "compared": shared_keys, "mismatched": mismatched, "equal": not mismatched})
                if mismatched:
                    failures.append(f"{other} is not bitwise equal to {present[0]} ({mode}): {mismatched}")
    if failures:
        raise AcceptanceError(f"{case.experiment} {case.name} fixture {fixture_id} ({phase}): "
                              + "; ".join(failures))


def time_case(case, run, stream, submitters, fixture_id, seed, on_step=_no_step):
    """Warm-ups then shuffled rounds; every raw number goes to timings.jsonl."""
    start, end = Event(), Event()
    for submitter in submitters.values():
        timing.warm_up(submitter.enqueue, stream, protocol.WARMUPS)
    labels = [f"{name}/{mode}" for (name, mode) in submitters]
    orders = protocol.round_orders(labels, protocol.ROUNDS, seed=seed)
    run.append_jsonl("rounds.jsonl", {"experiment": case.experiment, "case": case.name,
                                      "seed": seed, "orders": orders})
    for round_index, order in enumerate(orders):
        on_step(f"timing round {round_index + 1}/{len(orders)}")
        baseline = timing.sync_baseline_us(stream)
        run.append_jsonl("timings.jsonl", protocol.Measurement(
            experiment=case.experiment, case=case.name, variant="(none)", mode="stream",
            fixture=fixture_id, round=round_index, metric="sync_baseline_us", value_us=baseline,
            per=protocol.PER_INVOCATION).to_record())
        for label in order:
            name, mode = label.split("/")
            values = timing.measure_round(submitters[(name, mode)].enqueue, stream, start, end)
            # Outside the timed intervals: the last invocation's queue state must be exact.
            case.variant(name).verify_after_invocation()
            for metric, value, per in values:
                run.append_jsonl("timings.jsonl", protocol.Measurement(
                    experiment=case.experiment, case=case.name, variant=name, mode=mode,
                    fixture=fixture_id, round=round_index, metric=metric, value_us=value,
                    per=per, bytes_moved=case.bytes_moved).to_record())


def run_case(case, run, stream, *, gpu, seed, save_arrays=True, on_step=_no_step):
    """The whole protocol for one case. Raises AcceptanceError on a required failure.
    ``on_step(text)`` is told each step (fixture, variant, mode; timing round) for a progress display."""
    graphs = capture_graphs(case, stream, run) if gpu else {}
    submitters = _submitters(case, graphs)
    for fixture_id in PREFLIGHT_FIXTURES:
        validate_all(case, run, stream, submitters, fixture_id, "preflight", save_arrays, on_step)
    timed_fixture, changed_fixture = BENCH_FIXTURES
    validate_all(case, run, stream, submitters, timed_fixture, "before-timing", save_arrays, on_step)
    if gpu:
        time_case(case, run, stream, submitters, timed_fixture, seed, on_step)
    validate_all(case, run, stream, submitters, changed_fixture, "after-timing-changed-input", save_arrays,
                 on_step)
    for graph in graphs.values():
        graph.close()
