"""How long does one worker take to hand a task to another? The latency floor of a DAG's chain (GPU only).

The DAG scheduler's critical path at small sizes is a chain of hand-offs through L2: an A tile's
arrival (an ``atom.acq_rel`` on its row's counter), the last producer's publish (a ticket on the
FIFO tail, the slot, a release fence, the ready flag), a consumer's acquire poll, then B and the
same again for its C tiles. This probe measures the primitives of that chain on their own, with
thread 0 of a block timing itself with ``%globaltimer`` over many repetitions
(:mod:`numba_softmax.kernels.diagnostics.handoff`):

* ``handoff_release_acquire_ns``: one-way latency of a release store (``fence.acq_rel.gpu`` then a
  relaxed store, the scheduler's publish) observed by an acquire poll (``ld.acquire.gpu``) on
  another SM: half of a ping-pong round between two blocks;
* ``handoff_relaxed_ns``: the same with relaxed stores and relaxed polls (no ordering): the
  hardware's floor for a flag to cross the L2;
* ``atomic_chain_ns``: one ``atomicAdd`` round trip when each depends on the previous one's
  result, one block alone (uncontended), and ``atomic_chain_contended_ns`` with every resident
  block's thread 0 adding to the same word (the DAG's claim counters under load);
* ``acquire_load_chain_ns`` and ``relaxed_load_chain_ns``: a dependent chain of loads of one word
  (an L2 hit), with and without acquire.

    python -m bench probe handoff [--rounds 2000] [--contenders 1188] [--out DIR]
"""

import argparse
import json
import statistics

from bench.probes import refuse_existing_results, require_gpu, write_results
from numba_softmax.kernels.diagnostics.handoff import atomic_chain_ns, load_chain_ns, pingpong_ns

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "handoff_probe.json"


def measure(rounds, contenders, repeats=5):
    """Each figure: the median of ``repeats`` launches (after one warm-up launch each)."""
    def median_of(call, key):
        call()
        runs = [call() for _ in range(repeats)]
        best = statistics.median(run[key] for run in runs)
        return dict(runs[0], **{key: best, "repeats": repeats})

    return {
        "handoff_release_acquire_ns": median_of(lambda: pingpong_ns(rounds, True), "one_way_ns"),
        "handoff_relaxed_ns": median_of(lambda: pingpong_ns(rounds, False), "one_way_ns"),
        "atomic_chain_ns": median_of(lambda: atomic_chain_ns(rounds, 1), "median_ns"),
        "atomic_chain_contended_ns": median_of(lambda: atomic_chain_ns(max(1, rounds // 10), contenders),
                                               "median_ns"),
        "acquire_load_chain_ns": median_of(lambda: load_chain_ns(rounds, True), "ns"),
        "relaxed_load_chain_ns": median_of(lambda: load_chain_ns(rounds, False), "ns"),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe handoff", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="repetitions inside one launch")
    parser.add_argument("--contenders", type=int, default=1188,
                        help="blocks adding to one word at once (default: the DAG's worker count on the H200)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.rounds < 10 or args.contenders < 1:
        parser.error("--rounds must be >= 10 and --contenders >= 1")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    results = measure(args.rounds, args.contenders)
    for name, values in results.items():
        print(name, json.dumps(values))
    write_results(args.out, RESULTS_FILE, results)
