"""The handoff probe's counting kernels (numba_softmax.kernels.diagnostics.handoff) in the simulator (their
timing means nothing there; the ping-pong needs two resident blocks, which the simulator does not run at
once, so it is GPU only)."""

import pytest

from numba_softmax.kernels.diagnostics import handoff


def test_every_atomic_of_every_contender_is_counted():
    result = handoff.atomic_chain_ns(rounds=12, blocks=3)
    assert result["blocks"] == 3 and result["rounds"] == 12 and result["median_ns"] >= 0


def test_a_lost_atomic_is_caught(monkeypatch):
    # Negative control: a counter that misses adds must fail the probe's own check.
    real = handoff.atomic_chain_kernel

    class Dropping:
        def __getitem__(self, config):
            blocks, threads = config

            def launch(counter, rounds, out):
                real[blocks, threads](counter, rounds - 1, out)
            return launch

    monkeypatch.setattr(handoff, "atomic_chain_kernel", Dropping())
    with pytest.raises(RuntimeError, match="atomic chain: counter 22 != 12 x 2"):
        handoff.atomic_chain_ns(rounds=12, blocks=2)


def test_the_load_chain_runs():
    assert handoff.load_chain_ns(rounds=10, acquire=True)["rounds"] == 10
