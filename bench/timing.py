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
Nothing here compiles, allocates, copies, captures or validates.
"""

import time

from bench.protocol import BATCH, PER_BATCH, PER_INVOCATION


def _now_us():
    return time.perf_counter_ns() / 1e3


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
