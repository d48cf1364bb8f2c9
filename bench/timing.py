"""The protocol's four measurements of one invocation, plus the no-work baseline.

A *submitter* is anything with ``submit(stream)`` that enqueues exactly one
invocation of a variant: an ``Invocation`` (stream mode: its kernel launches or
library calls) or a ``CapturedGraph`` (graph mode: one ``cuGraphLaunch``).

Per (variant, mode) and round:

* ``host_completion_us``  -- host clock around enqueue + stream synchronize, one invocation;
* ``batch_enqueue_us``    -- host clock around enqueuing BATCH invocations back to back;
* ``batch_completion_us`` -- host clock from the first enqueue to the end of the synchronize;
* ``event_us``            -- CUDA events recorded around one invocation (includes any
  host-starvation gap between the launches of a multi-kernel invocation).

``sync_baseline_us`` is a synchronize on an idle stream: recorded, never subtracted.

Two more ways of looking at one submit, used by ``python -m bench perf`` and the probes
(``python -m bench probe``), never by the experiments:

* :class:`DelaySampler` -- device time of ONE invocation, queued behind a delay kernel that
  keeps the GPU busy while the host enqueues (so host overhead stays out of the interval),
  each sample checked for starvation (:func:`is_starved`);
* :func:`time_batches` -- device time per call of a batch of calls between two events;
* :func:`time_graph` -- the same batch captured once as a CUDA graph and replayed (the
  experiments' graph mode: no host launch path between the calls).

The experiments' functions compile, allocate, copy, capture and validate nothing; the delay
kernel is compiled on first use.
"""

import math
import statistics
import time

from bench.protocol import BATCH, PER_BATCH, PER_INVOCATION, round_orders
from numba_softmax.kernels.diagnostics.delay import delay_launch
from numba_softmax.launch.driver import Event, Invocation, Stream
from numba_softmax.launch.graphs import CapturedGraph

#: Delay kernel sizing: at least DELAY_MIN_US, DELAY_FACTOR x the host enqueue window, at most DELAY_MAX_US.
DELAY_MIN_US = 30.0
DELAY_FACTOR = 3.0
DELAY_MAX_US = 50_000.0
DELAY_NANOSLEEP_NS = 1000  # per iteration of the delay kernel (kernels.ordering.pause_us)
DELAY_CALIBRATION_ITERATIONS = 200
#: A starved sample is retaken (delay doubled) at most this many times; the last one is kept.
STARVED_RETAKES = 4
#: Batches of the probes' batch timing: calls per batch, batches.
PROBE_BATCH, PROBE_REPS = 20, 15


def _now_us():
    return time.perf_counter_ns() / 1e3


def host_rounds(calls, rounds, seed):
    """``rounds`` shuffled rounds (:func:`bench.protocol.round_orders`) of ``calls`` (name -> callable), each
    call timed once per round on the host, so a call follows other code, not itself:
    ``[{"order": [...], "host_completion_us": {name: us}}]``."""
    result = []
    for order in round_orders(list(calls), rounds, seed=seed):
        values = {}
        for name in order:
            t0 = _now_us()
            calls[name]()
            values[name] = _now_us() - t0
        result.append({"order": order, "host_completion_us": values})
    return result


def measure_round(submit, stream, start_event, end_event):
    """The four measurements of one round for one (variant, mode); returns [(metric, value, per)]."""
    t0 = _now_us()
    submit(stream)
    stream.synchronize()
    host_completion = _now_us() - t0

    t0 = _now_us()
    for _ in range(BATCH):
        submit(stream)
    t1 = _now_us()
    stream.synchronize()
    t2 = _now_us()

    start_event.record(stream)
    submit(stream)
    end_event.record(stream)
    end_event.synchronize()
    event = end_event.elapsed_us_since(start_event)

    return [
        ("host_completion_us", host_completion, PER_INVOCATION),
        ("batch_enqueue_us", t1 - t0, PER_BATCH),
        ("batch_completion_us", t2 - t0, PER_BATCH),
        ("event_us", event, PER_INVOCATION),
    ]


def sync_baseline_us(stream):
    """Synchronize with no work queued (the floor of every completion figure)."""
    stream.synchronize()
    t0 = _now_us()
    stream.synchronize()
    return _now_us() - t0


def warm_up(submit, stream, count):
    for _ in range(count):
        submit(stream)
    stream.synchronize()


# ============================================================ one invocation behind a delay kernel

def delay_iterations(target_us, us_per_iteration):
    """nanosleep iterations of the delay kernel for about ``target_us`` (clamped to the bounds)."""
    if us_per_iteration <= 0:
        raise ValueError(f"delay_iterations: us_per_iteration must be > 0, got {us_per_iteration}")
    target = min(DELAY_MAX_US, max(DELAY_MIN_US, target_us))
    return max(1, math.ceil(target / us_per_iteration))


def delay_target_us(host_window_us, invocations=1):
    return min(DELAY_MAX_US, max(DELAY_MIN_US, DELAY_FACTOR * host_window_us * invocations))


def is_starved(host_window_us, delay_gpu_us):
    """True when the host may not have finished enqueuing before the delay kernel ended."""
    return host_window_us >= delay_gpu_us


class DelaySampler:
    """Device time of one submit, behind a delay kernel, on its own stream (GPU only).

    One sample = record e0, enqueue the delay kernel, record e1, enqueue the submits, record e2:
    ``event_us`` = e2 - e1. :meth:`calibrate_delay` first, then size the delay per submit with
    :meth:`iterations_for` (:meth:`host_window_us` measures the enqueue window it covers).
    """

    def __init__(self):
        self.stream = Stream()
        self.events = [Event() for _ in range(3)]
        self._delays = {}
        self.us_per_iteration = None

    def delay(self, iterations):
        """The delay kernel's invocation for ``iterations`` (prepared once per count)."""
        invocation = self._delays.get(iterations)
        if invocation is None:
            invocation = Invocation.from_launches("perf_delay", [delay_launch(iterations)])
            self._delays[iterations] = invocation
        return invocation

    def sample(self, submits, iterations):
        """e0, delay, e1, submits..., e2 -> event_us (e1..e2), delay_gpu_us (e0..e1), host window."""
        e0, e1, e2 = self.events
        stream = self.stream
        delay = self.delay(iterations)
        h0 = _now_us()
        e0.record(stream)
        delay.enqueue(stream)
        e1.record(stream)
        for submit in submits:
            submit(stream)
        e2.record(stream)
        h1 = _now_us()
        e2.synchronize()
        event = e2.elapsed_us_since(e1)
        delay_gpu = e1.elapsed_us_since(e0)
        return {"event_us": event, "delay_gpu_us": delay_gpu, "host_window_us": h1 - h0,
                "starved": is_starved(h1 - h0, delay_gpu)}

    def sample_unstarved(self, submits, iterations):
        """One sample of ``submits``. A starved one (the host was still enqueuing when the delay
        kernel ended, so the interval may contain host time) is retaken on the same submits with
        the delay doubled, up to STARVED_RETAKES times. The decision reads only host and delay
        times, never the measured interval. Returns (sample, retakes, the delay iterations used
        last), so a caller can keep the longer delay for later samples."""
        sample = self.sample(submits, iterations)
        retakes = 0
        while sample["starved"] and retakes < STARVED_RETAKES:
            iterations = min(iterations * 2, delay_iterations(DELAY_MAX_US, self.us_per_iteration))
            sample = self.sample(submits, iterations)
            retakes += 1
        return sample, retakes, iterations

    def calibrate_delay(self):
        samples = [self.sample([], DELAY_CALIBRATION_ITERATIONS)["delay_gpu_us"] for _ in range(7)]
        # floor at 1 ns per iteration: a nanosleep that returned at once must not make the sizing divide by 0
        self.us_per_iteration = max(1e-3, statistics.median(samples) / DELAY_CALIBRATION_ITERATIONS)
        return {"iterations": DELAY_CALIBRATION_ITERATIONS, "delay_gpu_us": samples,
                "us_per_iteration": self.us_per_iteration}

    def iterations_for(self, host_window_us, invocations=1):
        return delay_iterations(delay_target_us(host_window_us, invocations), self.us_per_iteration)

    def host_window_us(self, submit, count=5):
        """Median host time of enqueuing ``submit`` (GPU idle, stream synchronized around)."""
        values = []
        for _ in range(count):
            self.stream.synchronize()
            t0 = _now_us()
            submit(self.stream)
            values.append(_now_us() - t0)
        self.stream.synchronize()
        return float(statistics.median(values))


def _spread(samples, prefix=""):
    samples = sorted(samples)
    return {f"{prefix}median_us": statistics.median(samples), f"{prefix}p10_us": samples[len(samples) // 10],
            f"{prefix}p90_us": samples[(9 * len(samples)) // 10]}


def time_single(sampler, enqueue, reps=PROBE_REPS, host_window_us=40.0):
    """Median / p10 / p90 device time of ONE call of ``enqueue(stream, i)`` between two events,
    queued behind the delay kernel of a calibrated :class:`DelaySampler`, on ``sampler.stream``."""
    iterations = sampler.iterations_for(host_window_us)
    for i in range(4):
        enqueue(sampler.stream, i)
    sampler.stream.synchronize()
    return _spread([sampler.sample([lambda st, i=i: enqueue(st, i)], iterations)["event_us"] for i in range(reps)],
                   "single_")


# ============================================================ a batch of calls between two events

def time_batches(stream, enqueue, batch=PROBE_BATCH, reps=PROBE_REPS):
    """Median / p10 / p90 device time per call of ``enqueue(stream, i)`` (i = call number in
    the batch), ``batch`` calls back to back between two CUDA events, ``reps`` batches."""
    start, end = Event(), Event()
    for i in range(4):
        enqueue(stream, i)
    stream.synchronize()
    samples = []
    for _ in range(reps):
        start.record(stream)
        for i in range(batch):
            enqueue(stream, i)
        end.record(stream)
        end.synchronize()
        samples.append(end.elapsed_us_since(start) / batch)
    return _spread(samples)


def time_graph(stream, enqueue, batch=PROBE_BATCH, reps=PROBE_REPS):
    """Median / p10 / p90 device time per call of ``enqueue(stream, i)``, ``batch`` calls captured
    once as one CUDA graph, replayed ``reps`` times between two CUDA events."""
    calls = Invocation("graph batch", [lambda st, i=i: enqueue(st, i) for i in range(batch)])
    graph = CapturedGraph(calls, stream)
    start, end = Event(), Event()
    try:
        graph.launch(stream)
        stream.synchronize()
        samples = []
        for _ in range(reps):
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            samples.append(end.elapsed_us_since(start) / batch)
    finally:
        graph.close()
    return _spread(samples, "graph_")
