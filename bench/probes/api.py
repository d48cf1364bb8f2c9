"""Where does ``softmax()``'s host time go? A probe for the API-overhead goal of `bench perf` (GPU only).

Per shape (default 1x128 and 4096x4096, the goal's shapes), the median host time of one call over
``--calls`` calls of each of (the goal compares the first two):

* ``launch_layer``        the checked ``auto`` kernel through the launch layer + one synchronize;
* ``api``                 ``softmax(x, out=y, stream=s, check=True)`` (it synchronizes itself);
* ``api_unchecked``       ``softmax(..., check=False)`` + one synchronize;
* ``api_alternating``     ``api`` with a call on other arrays in between (the repeated-call shortcut
                          remembers more than the last call: this must cost what ``api`` costs);
* ``idle_sync``           a synchronize of an idle stream (the floor of any completion);
* ``read_device``, ``array_kind``, ``resolve_stream``: the steps a first call makes on the host;
* where torch has CUDA: ``torch_api`` (the ``api`` call on torch tensors, the goal's torch / Numba
  ratio), ``torch_read_device`` (reading one tensor) and ``torch_repeat_check`` (the repeated-call
  shortcut's look at both tensors' pointer, shape, dtype and contiguity: what a repeated torch call
  costs beyond a repeated Numba call), ``torch_api_current_stream`` (the same call without
  ``stream=``, torch's current stream set to the probe's), ``torch_current_stream`` (the raw read of
  torch's current stream that call makes) and ``torch_current_stream_object`` (the same handle through
  ``torch.cuda.current_stream()``, what the call read before), ``api_plan_run`` and ``torch_plan_run``
  (the remembered plan of the Numba and of the torch call run directly: the calls without their lookup
  and checks).

Each figure is the median of ``--calls`` single calls of one step back to back. With ``--rounds N`` the
steps are also timed as ``bench perf`` times the goal's calls: N rounds, each step once per round in a
shuffled order (``*_interleaved_us``), so a step follows other code, not itself.

    python -m bench probe api [--shapes 1x128,4096x4096] [--calls 2000] [--rounds 0] [--out DIR]
"""

import argparse
import statistics

import numpy as np
from numba import cuda

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.probes.launch import per_call_us
from bench.timing import host_rounds
from numba_softmax import api as api_module
from numba_softmax import arrays, softmax
from numba_softmax.fixtures import matrix_fixture
from numba_softmax.kernels.auto_launch import auto_launches
from numba_softmax.validation import STATUS_CLEAR, STATUS_WORDS
from numba_softmax.launch.driver import Invocation, Stream

#: What the probe writes under --out (never over an existing file).
RESULTS_FILE = "api_probe.json"


def probe_shape(shape, stream, calls, rounds=0, seed=20261203):
    x = cuda.to_device(matrix_fixture("random-0", shape))
    y, reference, other = (cuda.device_array(shape, dtype=np.float32) for _ in range(3))
    status = cuda.to_device(np.full(STATUS_WORDS, STATUS_CLEAR, dtype=np.int64))
    alarm = cuda.mapped_array(1, dtype=np.int32)
    alarm[0] = 0
    launch_layer = Invocation.from_launches("auto-checked", auto_launches(x, reference, status, alarm))
    kind = arrays.array_kind(x)
    steps = {
        "launch_layer": lambda: (launch_layer.enqueue(stream), stream.synchronize()),
        "api": lambda: softmax(x, out=y, stream=stream, check=True),
        "api_unchecked": lambda: (softmax(x, out=y, stream=stream, check=False), stream.synchronize()),
        "api_alternating": lambda: (softmax(x, out=other, stream=stream, check=True),
                                    softmax(x, out=y, stream=stream, check=True)),
        "idle_sync": stream.synchronize,
        "read_device": lambda: arrays.read_device(x, kind),
        "array_kind": lambda: arrays.array_kind(x),
        "resolve_stream": lambda: arrays.resolve_stream(stream, x, kind, None),
    }
    softmax(x, out=y, stream=stream, check=True)
    numba_repeat = api_module.remembered_call(x, y, stream, "auto", True)
    steps["api_plan_run"] = lambda: numba_repeat.plan.run(numba_repeat.target)
    torch = _cuda_torch()
    if torch is not None:
        t_x = torch.as_tensor(matrix_fixture("random-0", shape), device="cuda")
        t_y = torch.empty(shape, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        steps["torch_api"] = lambda: softmax(t_x, out=t_y, stream=stream, check=True)
        steps["torch_read_device"] = lambda: arrays.read_device(t_x, arrays.TORCH)
        softmax(t_x, out=t_y, stream=stream, check=True)
        repeat = api_module.remembered_call(t_x, t_y, stream, "auto", True)
        steps["torch_repeat_check"] = lambda: repeat.matches(t_x, t_y, stream, "auto", True)
        steps["torch_plan_run"] = lambda: repeat.plan.run(repeat.target)
        steps["torch_api_current_stream"] = lambda: softmax(t_x, out=t_y, check=True)
        device = t_x.get_device()
        steps["torch_current_stream"] = lambda: arrays.torch_current_stream(device)
        steps["torch_current_stream_object"] = lambda: torch.cuda.current_stream(t_x.device).cuda_stream
    result = {"shape": list(shape), "calls": calls}
    previous = torch.cuda.current_stream() if torch is not None else None
    if torch is not None:
        torch.cuda.set_stream(torch.cuda.ExternalStream(stream.ptr))  # where the call without stream= runs
    try:
        for name, step in steps.items():
            for _ in range(max(50, calls // 10)):
                step()
            result[f"{name}_us"] = per_call_us(step, calls)
        if rounds:
            samples = [r["host_completion_us"] for r in host_rounds(steps, rounds, seed=seed)]
            for name in steps:
                result[f"{name}_interleaved_us"] = statistics.median(s[name] for s in samples)
            result["rounds"] = rounds
    finally:
        if torch is not None:
            torch.cuda.set_stream(previous)
    for key in ("api_alternating_us", "api_alternating_interleaved_us"):
        if key in result:
            result[key] /= 2  # two calls per step
    for name in steps:
        interleaved = result.get(f"{name}_interleaved_us")
        print(f"{shape[0]}x{shape[1]:<6} {name:<28} {result[f'{name}_us']:8.2f} us"
              + (f"  interleaved {interleaved:8.2f} us" if interleaved is not None else ""), flush=True)
    print(f"{shape[0]}x{shape[1]:<6} api / launch_layer  {result['api_us'] / result['launch_layer_us']:8.3f}")
    if torch is not None:
        print(f"{shape[0]}x{shape[1]:<6} torch_api / api     {result['torch_api_us'] / result['api_us']:8.3f}")
        print(f"{shape[0]}x{shape[1]:<6} torch_api_current_stream / api "
              f"{result['torch_api_current_stream_us'] / result['api_us']:8.3f}")
        if rounds:
            print(f"{shape[0]}x{shape[1]:<6} torch_api / api, interleaved "
                  f"{result['torch_api_interleaved_us'] / result['api_interleaved_us']:8.3f}")
    return result


def _cuda_torch():
    """torch, where it is installed with a CUDA device; else None (the torch steps are left out)."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe api", description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="1x128,4096x4096")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=0,
                        help="also time every step once per round in N shuffled rounds (bench perf's way)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        shapes = [tuple(int(v) for v in text.split("x")) for text in args.shapes.split(",")]
    except ValueError:
        parser.error(f"--shapes: expected ROWSxCOLS[,ROWSxCOLS...], got {args.shapes!r}")
    if any(len(shape) != 2 or min(shape) < 1 for shape in shapes):
        parser.error(f"--shapes: expected positive ROWSxCOLS pairs, got {args.shapes!r}")
    if args.rounds < 0:
        parser.error(f"--rounds: expected 0 or more, got {args.rounds}")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    stream = Stream()
    write_results(args.out, RESULTS_FILE, [probe_shape(shape, stream, args.calls, args.rounds) for shape in shapes])
