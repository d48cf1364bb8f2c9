"""What the on-disk kernel cache saves a new process: whole-process times, cold and warm (GPU only).

Each item is a command run as a process of its own, against a kernel cache folder of its own under ``--out``
(``NUMBA_SOFTMAX_CACHE_DIR``): ``cold`` empties that folder before each run; ``warm`` times the runs against the
cache the last cold run left (or, without cold runs, one run first fills it). Each run's wall time from start to
exit is recorded, and for the items that call the library in a small script, the first call's own time to its result
(the script prints it). ``--runs`` timed runs per item and mode (default 5): median, p10/p90. A run that fails stops
the probe with its output; a run past ``--timeout-s`` is interrupted as by Ctrl-C (pytest still prints its
slowest durations) and stops the probe the same way. With ``--out``, each mode's last run leaves its whole output there
(``{item}-{mode}.log``: for ``gpu-tests``, the test log) and ``startup.md`` quotes its last line.

Items (``--items``, default ``first-softmax,first-dag,experiment-b-128``; ``all`` adds the long two):

* ``first-softmax``: ``softmax()`` of a 4096 x 50257 float32 torch tensor, the first call of the process;
* ``first-dag``: ``tiled_softmax(..., scheduler="dag")`` of 128 rows of 1024 values, the first call;
* ``experiment-b-128``: ``python -m bench --experiment B --cases balanced-128 --no-arrays``;
* ``experiment-b``: ``python -m bench --experiment B --no-arrays`` (every case);
* ``gpu-tests``: ``python -m pytest -m gpu -q -p no:cacheprovider --durations=40``.

Goals (warm): the first ``softmax()`` <= 0.3 s to its result; the first ``tiled_softmax`` dag <= 0.5 s;
``experiment-b-128`` <= 8 s; ``experiment-b`` <= 0.6 of its cold time; ``gpu-tests`` <= 240 s.

``--modes warm`` times the warm runs alone (a goal relative to the cold time then reads NOT MEASURED).
``--fill-jobs N`` fills the cache for the warm runs with the item's parallel command where it has one
(``gpu-tests``: ``pytest -n N``, with pytest-xdist installed), its run recorded under ``fill``.
``--cache-root DIR`` keeps the items' cache folders in DIR after the probe (else they are removed), and a warm
mode finding an item's folder there already filled skips the fill: a later probe times warm runs against it.

    python -m bench probe startup [--items first-softmax,...|all] [--runs 5] [--modes cold,warm]
                                  [--fill-jobs N] [--cache-root DIR] [--timeout-s S] [--out DIR]
"""

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench.probes import refuse_existing_results, require_gpu, write_results
from bench.stats import summarize

RESULTS_FILE = "startup.json"
#: The line a script prints with its first call's time: ``STARTUP {"first_call_s": 0.12}``.
MARK = "STARTUP "
MODES = ("cold", "warm")
#: Seconds an interrupted run has to print its summary before it is killed.
INTERRUPT_GRACE_S = 30

FIRST_SOFTMAX = f"""
import json, time
import torch
from numba_softmax import softmax
x = torch.randn(4096, 50257, device="cuda")
torch.cuda.synchronize()
start = time.perf_counter()
softmax(x)
torch.cuda.synchronize()
print({MARK!r} + json.dumps({{"first_call_s": time.perf_counter() - start}}))
"""

FIRST_DAG = f"""
import json, time
import numpy as np
from numba_softmax import tiled_softmax
values = np.random.default_rng(0).standard_normal(128 * 1024).astype(np.float32)
start = time.perf_counter()
tiled_softmax(values, np.full(128, 1024), scheduler="dag")
print({MARK!r} + json.dumps({{"first_call_s": time.perf_counter() - start}}))
"""


@dataclass(frozen=True)
class Item:
    """A command timed as a whole process. ``argv(folder)``: its command line, writing only under ``folder``;
    ``goal``: (mode, metric, bound, relative to the cold median or not, text); ``fill(folder, jobs)``: the command
    line that fills the cache in ``jobs`` parallel processes (None: the item has none, or it cannot run here)."""
    name: str
    argv: object
    goal: tuple
    fill: object = None


def _script(code):
    return lambda folder: [sys.executable, "-c", code]


#: The slowest tests' durations end the log: what a warm run still spends its time on.
GPU_TESTS = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "--durations=40"]

ITEMS = {item.name: item for item in (
    Item("first-softmax", _script(FIRST_SOFTMAX), ("warm", "first_call_s", 0.3, False,
                                                   "the first softmax() <= 0.3 s to its result")),
    Item("first-dag", _script(FIRST_DAG), ("warm", "first_call_s", 0.5, False,
                                           "the first tiled_softmax dag <= 0.5 s to its result")),
    Item("experiment-b-128", lambda folder: [sys.executable, "-m", "bench", "--experiment", "B", "--cases",
                                             "balanced-128", "--no-arrays", "--out", folder],
         ("warm", "process_s", 8.0, False, "python -m bench --experiment B --cases balanced-128 <= 8 s")),
    Item("experiment-b", lambda folder: [sys.executable, "-m", "bench", "--experiment", "B", "--no-arrays",
                                         "--out", folder],
         ("warm", "process_s", 0.6, True, "python -m bench --experiment B <= 0.6 of its cold time")),
    Item("gpu-tests", lambda folder: GPU_TESTS,
         ("warm", "process_s", 240.0, False, "python -m pytest -m gpu <= 240 s"),
         lambda folder, jobs: GPU_TESTS + ["-n", str(jobs)] if importlib.util.find_spec("xdist") else None),
)}
DEFAULT_ITEMS = ("first-softmax", "first-dag", "experiment-b-128")


class RunFailed(RuntimeError):
    """A timed command that exited with an error (the message carries its output's end)."""


def error_record(exc, tail=3000):
    """What ``startup.json`` keeps of a failed run: the error's first line whole (the report's "Stopped:" line),
    then the last ``tail`` characters of the output that follows it."""
    first, _, rest = str(exc).partition("\n")
    return first + ("\n" + rest[-tail:] if rest else "")


def parse_items(text):
    """``--items``: "all" or comma-separated names of :data:`ITEMS` (ValueError naming a bad one)."""
    if text == "all":
        return list(ITEMS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in ITEMS]
    if unknown or not names:
        raise ValueError(f"--items: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(ITEMS)}")
    return names


def run_once(item, cache_dir, folder, timeout_s, argv=None, log_path=None):
    """One process of ``item`` (or of ``argv``) with the kernel cache in ``cache_dir``: ``{"process_s",
    ["first_call_s"], ["last_line"]}`` (the last line it printed, e.g. pytest's count of passed tests); its whole
    output goes to ``log_path`` if given. A process still running after ``timeout_s`` is interrupted (SIGINT, as
    Ctrl-C: pytest then still prints its summary and slowest durations), killed after :data:`INTERRUPT_GRACE_S`
    more, and its output kept; the run fails saying so."""
    env = dict(os.environ, NUMBA_SOFTMAX_CACHE_DIR=cache_dir, NUMBA_SOFTMAX_CACHE="1")
    start = time.perf_counter()
    proc = subprocess.Popen(argv or item.argv(folder), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        proc.send_signal(signal.SIGINT)
        try:
            stdout, stderr = proc.communicate(timeout=INTERRUPT_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
    sample = {"process_s": time.perf_counter() - start}
    if log_path:
        with open(log_path, "w", encoding="utf-8") as handle:
            handle.write(stdout + stderr)
    if timed_out:
        raise RunFailed(f"{item.name}: still running after {timeout_s:.0f} s (--timeout-s), interrupted\n"
                        f"{(stdout + stderr)[-3000:]}")
    if proc.returncode != 0:
        raise RunFailed(f"{item.name}: exit status {proc.returncode} after {sample['process_s']:.1f} s\n"
                        f"{(stdout + stderr)[-3000:]}")
    lines = [line for line in stdout.splitlines() if line.strip()]
    for line in lines:
        if line.startswith(MARK):
            sample.update(json.loads(line.removeprefix(MARK)))
    if lines:
        sample["last_line"] = lines[-1][-300:]
    return sample


def measure_item(item, runs, work_dir, timeout_s, log=print, modes=MODES, cache_root=None, fill_jobs=1,
                 log_dir=None):
    """The ``modes`` of one item: ``{"cold": [samples], "warm": [samples], "fill": [the filling run, if any]}``, its
    cache folder under ``cache_root`` (kept) or ``work_dir``. The warm runs follow the cold ones (the last leaves
    the cache filled) or else one run that fills it (the item's ``fill`` command with ``fill_jobs`` > 1 where it
    has one), skipped where ``cache_root`` already holds a filled folder of the item. With ``log_dir``, the output
    of each mode's last run is kept there as ``{item}-{mode}.log``."""
    cache_dir = os.path.join(cache_root or work_dir, f"cache-{item.name}")
    samples = {mode: [] for mode in (*MODES, "fill")}
    counter = iter(range(10**6))

    def folder():
        return os.path.join(work_dir, f"run-{item.name}-{next(counter)}")

    def log_path(mode):
        return os.path.join(log_dir, f"{item.name}-{mode}.log") if log_dir else None
    if "cold" in modes:
        for _ in range(runs):
            shutil.rmtree(cache_dir, ignore_errors=True)
            samples["cold"].append(run_once(item, cache_dir, folder(), timeout_s, log_path=log_path("cold")))
    if "warm" in modes:
        kept = cache_root and os.path.isdir(cache_dir) and os.listdir(cache_dir)
        if not (samples["cold"] or kept):  # the last cold run leaves the cache filled
            fill = item.fill(folder(), fill_jobs) if item.fill and fill_jobs > 1 else None
            samples["fill"].append(run_once(item, cache_dir, folder(), timeout_s, fill, log_path("fill")))
        for _ in range(runs):
            samples["warm"].append(run_once(item, cache_dir, folder(), timeout_s, log_path=log_path("warm")))
    log(f"{item.name}: " + ", ".join(f"{mode} {[round(s['process_s'], 2) for s in runs]} s"
                                     for mode, runs in samples.items()))
    return samples


def summarize_item(samples):
    """Per mode and metric: median, p10, p90 of the runs."""
    out = {}
    for mode in MODES:
        runs = samples.get(mode, [])
        metrics = sorted({key for run in runs for key, value in run.items() if isinstance(value, (int, float))})
        out[mode] = {metric: summarize([run[metric] for run in runs if metric in run]) for metric in metrics}
    return out


def evaluate_goal(item, summary):
    """``{"goal", "status" MET/MISSED/NOT MEASURED, "value", "bound"}`` of one item's summary."""
    mode, metric, bound, relative, text = item.goal
    measured = (summary.get(mode) or {}).get(metric)
    if relative:
        cold = (summary.get("cold") or {}).get(metric)
        value = measured["median"] / cold["median"] if measured and cold else None
    else:
        value = measured["median"] if measured else None
    status = "NOT MEASURED" if value is None else ("MET" if value <= bound else "MISSED")
    return {"goal": text, "status": status, "value": value, "bound": bound}


def render(results):
    """startup.md: the goals, then every item's cold and warm medians [p10, p90]."""
    lines = [f"# python -m bench probe startup: {results.get('device', 'unknown device')}", "",
             f"{results['runs']} timed runs per item and mode; cold: the item's cache folder emptied before each "
             "run; warm: after the cold runs (the last leaves the cache filled), else filled by one run first (or "
             "found filled, --cache-root). Seconds: median [p10, p90].", "",
             "| goal | status | measured | bound |", "| --- | --- | --- | --- |"]
    for entry in results["items"].values():
        goal = entry["goal"]
        value = "-" if goal["value"] is None else f"{goal['value']:.3f}"
        lines.append(f"| {goal['goal']} | {goal['status']} | {value} | {goal['bound']:g} |")
    lines += ["", "| item | mode | process s | first call s |", "| --- | --- | --- | --- |"]
    for name, entry in results["items"].items():
        for mode in MODES:
            cells = []
            for metric in ("process_s", "first_call_s"):
                stats = entry["summary"].get(mode, {}).get(metric)
                cells.append(f"{stats['median']:.3f} [{stats['p10']:.3f}, {stats['p90']:.3f}]" if stats else "-")
            lines.append(f"| {name} | {mode} | {cells[0]} | {cells[1]} |")
    fills = [f"{name} {run['process_s']:.1f} s" for name, entry in results["items"].items()
             for run in entry.get("samples", {}).get("fill", [])]
    if fills:
        lines += ["", f"The run that filled each cache for its warm runs: {', '.join(fills)}."]
    if "error" in results:
        lines += ["", f"Stopped: {results['error'].splitlines()[0]}"]
    said = [f"{name} {mode}: `{runs[-1]['last_line']}`" for name, entry in results["items"].items()
            for mode, runs in entry.get("samples", {}).items() if runs and "last_line" in runs[-1]]
    if said:
        lines += ["", "The last line each item's last run printed:", ""] + [f"- {line}" for line in said]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bench probe startup", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", default=",".join(DEFAULT_ITEMS), help="comma-separated items, or all")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per item and mode (default 5)")
    parser.add_argument("--modes", default=",".join(MODES), help="cold,warm (default), cold or warm")
    parser.add_argument("--fill-jobs", type=int, default=1,
                        help="fill the cache for the warm runs in N parallel processes where the item can "
                             "(gpu-tests: pytest -n N)")
    parser.add_argument("--cache-root", help="keep the items' cache folders here (a later probe's warm runs reuse "
                                             "a filled one)")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="the longest one run may take")
    parser.add_argument("--out", help="folder for startup.json and startup.md (the runs' caches go in a temporary "
                                      "folder inside it, removed at the end; without --out, a temporary folder)")
    args = parser.parse_args(argv)
    try:
        items = parse_items(args.items)
    except ValueError as exc:
        parser.error(str(exc))
    if args.runs < 1:
        parser.error(f"--runs {args.runs}: at least 1")
    if args.fill_jobs < 1:
        parser.error(f"--fill-jobs {args.fill_jobs}: at least 1")
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    if not modes or set(modes) - set(MODES):
        parser.error(f"--modes {args.modes!r}: cold, warm or both")
    refuse_existing_results(parser, args.out, RESULTS_FILE)
    require_gpu(parser)
    from numba_softmax.launch.driver import device_record
    results = {"device": device_record()["name"], "runs": args.runs, "modes": list(modes), "items": {}}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    work_dir = os.path.join(args.out, "work") if args.out else tempfile.mkdtemp(prefix="numba-softmax-startup-")
    status = 0
    try:
        for name in items:
            samples = measure_item(ITEMS[name], args.runs, work_dir, args.timeout_s, modes=modes,
                                   cache_root=args.cache_root, fill_jobs=args.fill_jobs, log_dir=args.out)
            summary = summarize_item(samples)
            results["items"][name] = {"samples": samples, "summary": summary,
                                      "goal": evaluate_goal(ITEMS[name], summary)}
    except RunFailed as exc:  # the items measured so far are still written
        print(f"error: {exc}", file=sys.stderr)
        results["error"], status = error_record(exc), 1
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    write_results(args.out, RESULTS_FILE, results)
    markdown = render(results)
    if args.out:
        with open(os.path.join(args.out, "startup.md"), "x", encoding="utf-8") as handle:
            handle.write(markdown)
    print(markdown)
    return status
