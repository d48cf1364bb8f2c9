"""Nsight Compute (and, where present, Nsight Systems) captures, separate from timing.

    python -m bench profile --experiment A|B [--out DIR] [--cases 4096x1024,4096x4096]
        [--variants fused,stages] [--repeat 3] [--expect-device H100] [--ncu PATH] [--nsys PATH]

For each representative case and each variant, one profiler process runs
``python -m bench.profile_driver`` (the benchmark's own harness classes, one variant,
``--repeat`` invocations bracketed by cuProfilerStart/Stop) under::

    ncu --target-processes all --profile-from-start off --replay-mode kernel
        --cache-control all --clock-control none --metrics <METRICS> --export X.ncu-rep

(``--cache-control none --replay-mode application`` instead: the timed runs' cache state.)

and exports the report with ``ncu --import X.ncu-rep --csv --page raw --print-units base``.
The raw ``.ncu-rep``, the CSV, the profiler's stdout/stderr and the driver's JSON record
are all kept; a failing profiler's stderr is kept and quoted in the summary, never
swallowed. ``profile.jsonl`` holds one record per profiled kernel launch;
``profile_summary.md`` tabulates what the counters say per invocation NEXT TO the logical
bytes (input read once + output written once). Counters are never converted into claims
about logical bytes, nor logical bytes into HBM traffic.

Policy recorded in profile.json: ``--cache-control all`` flushes every cache before each
replay pass (so each kernel starts with a cold L2; the timed benchmark does not flush, so
its kernels can hit data an earlier kernel left in L2); ``--replay-mode kernel`` replays
each kernel, restoring the memory it writes, until every metric is collected;
``--clock-control none`` leaves the GPU clocks as they are (the benchmark's state).

Nsight Systems: if ``nsys`` is on PATH (or ``--nsys`` names it), one graph-mode case per
experiment runs under ``nsys profile --cuda-graph-trace=node``; otherwise the summary
says plainly that it was not run and why.

Nothing in this module needs a GPU to import; the command construction and the CSV
parsing are unit-tested on CPU.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.artifacts import default_run_folder
from bench.environment import git_state, gpu_problem
from bench.profile_summary import (CACHE_MEANING, METRIC_NAMES, METRICS, REPLAY_MEANING, NcuCsvError,
                                  parse_ncu_raw_csv, summary_markdown)

def ncu_policy(cache_control="all", replay_mode="kernel"):
    """The profiler policy recorded in profile.json and quoted in the summary.

    The default (cold L2 per kernel) isolates one kernel; ``cache_control="none"`` with
    ``replay_mode="application"`` matches the timed benchmark's cache state, which is what a
    comparison of DRAM bytes between schedulers (x read once or twice) needs."""
    if cache_control not in CACHE_MEANING:
        raise ValueError(f"cache_control must be one of {sorted(CACHE_MEANING)}, got {cache_control!r}")
    if replay_mode not in REPLAY_MEANING:
        raise ValueError(f"replay_mode must be one of {sorted(REPLAY_MEANING)}, got {replay_mode!r}")
    return {
        "replay_mode": replay_mode,
        "cache_control": cache_control,
        "clock_control": "none",
        "profile_from_start": "off (cuProfilerStart/Stop bracket the profiled invocations)",
        "target_processes": "all",
        "csv_export": "--import X.ncu-rep --csv --page raw --print-units base",
        "meaning": "; ".join((CACHE_MEANING[cache_control], REPLAY_MEANING[replay_mode],
                              "clock-control none leaves the clocks as the benchmark ran them")),
    }


#: The default policy.
NCU_POLICY = ncu_policy()
DEFAULT_CASES = {"A": ("4096x1024", "4096x4096"), "B": ("balanced-512", "ragged-512")}
DEFAULT_VARIANTS = {"A": ("fused", "stages", "cudnn"), "B": ("separate", "phased", "dag")}
#: One graph-mode case per experiment for Nsight Systems node-level graph tracing.
NSYS_CASE = {"A": ("4096x1024", "stages"), "B": ("balanced-512", "dag")}
NCU_CANDIDATES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu")


# ---------------------------------------------------------------- commands (pure)

def driver_command(python: str, experiment: str, case: str, variant: str, *, mode: str, repeat: int,
                   record: Path, scratch: Path, expect_device: str) -> list[str]:
    return [python, "-m", "bench.profile_driver", "--experiment", experiment, "--case", case,
            "--variant", variant, "--mode", mode, "--repeat", str(repeat), "--record", str(record),
            "--scratch", str(scratch), "--expect-device", expect_device]


def ncu_command(ncu: str, report: Path, driver: list[str], metrics=METRIC_NAMES, policy=NCU_POLICY) -> list[str]:
    """The ncu invocation around one driver run (report path must end in .ncu-rep)."""
    if not str(report).endswith(".ncu-rep"):
        raise ValueError(f"ncu report {report} must end in .ncu-rep")
    return [ncu, "--target-processes", "all", "--profile-from-start", "off",
            "--replay-mode", policy["replay_mode"], "--cache-control", policy["cache_control"],
            "--clock-control", policy["clock_control"], "--metrics", ",".join(metrics),
            "--export", str(report), "--force-overwrite", *driver]


def ncu_export_command(ncu: str, report: Path) -> list[str]:
    return [ncu, "--import", str(report), "--csv", "--page", "raw", "--print-units", "base"]


def nsys_command(nsys: str, output: Path, driver: list[str]) -> list[str]:
    """Node-level graph tracing of a graph-mode driver run (output without extension)."""
    return [nsys, "profile", "--cuda-graph-trace=node", "--trace=cuda,nvtx", "--capture-range=cudaProfilerApi",
            "--force-overwrite=true", "--output", str(output), *driver]


def nsys_stats_command(nsys: str, report: Path, output_prefix: Path) -> list[str]:
    return [nsys, "stats", "--report", "cuda_gpu_trace", "--format", "csv", "--force-export=true",
            "--output", str(output_prefix), str(report)]


# ---------------------------------------------------------------- running (needs the tools)

def find_ncu(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_CANDIDATES:
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[-1]
    return None


def _run(command: list[str], stdout_path: Path, stderr_path: Path, timeout: int) -> dict:
    """Run, keep stdout/stderr in files (always), return what happened."""
    started = datetime.datetime.now(datetime.timezone.utc)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        returncode, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        returncode = None
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = (exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")) + \
            f"\n[bench.profile] TIMED OUT after {timeout} s\n"
    except OSError as exc:
        returncode, out, err = None, "", f"[bench.profile] could not start {command[0]}: {exc}\n"
    stdout_path.write_text(out, encoding="utf-8")
    stderr_path.write_text(err, encoding="utf-8")
    return {"command": command, "returncode": returncode, "stdout": stdout_path.name, "stderr": stderr_path.name,
            "seconds": (datetime.datetime.now(datetime.timezone.utc) - started).total_seconds()}


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def unknown_metrics(stderr: str, metrics) -> list[str]:
    """Metrics ncu says it cannot find (``==ERROR== Failed to find metric regex:^name\\.(...)$``)."""
    bases = set(re.findall(r"Failed to find metric\s+(?:regex:)?\^?([A-Za-z0-9_]+)", stderr))
    return [m for m in metrics if m.split(".", 1)[0] in bases]


def profile_one(ncu: str, out: Path, experiment: str, case: str, variant: str, args, metrics=None) -> dict:
    """One ncu run of one variant. ``metrics`` (a list) loses the metrics this ncu does not know,
    so later runs do not fail the same way; the failed attempt's output is kept."""
    metrics = list(METRIC_NAMES) if metrics is None else metrics
    stem = f"{experiment}_{case}_{variant}"
    folder = out / "ncu"
    folder.mkdir(parents=True, exist_ok=True)
    record_path = folder / f"{stem}.driver.json"
    driver = driver_command(sys.executable, experiment, case, variant, mode="stream", repeat=args.repeat,
                            record=record_path, scratch=out / "scratch" / stem, expect_device=args.expect_device)
    report = folder / f"{stem}.ncu-rep"
    result = {"experiment": experiment, "case": case, "variant": variant, "mode": "stream",
              "repeat": args.repeat, "report": report.relative_to(out).as_posix()}
    result["profile_run"] = _run(ncu_command(ncu, report, driver, metrics, args.policy),
                                 folder / f"{stem}.ncu.stdout.txt", folder / f"{stem}.ncu.stderr.txt", args.timeout_s)
    if not report.exists():
        unknown = unknown_metrics((folder / f"{stem}.ncu.stderr.txt").read_text(encoding="utf-8"), metrics)
        if unknown and len(unknown) < len(metrics):
            for suffix in ("stdout", "stderr"):
                (folder / f"{stem}.ncu.{suffix}.txt").replace(folder / f"{stem}.ncu.attempt1.{suffix}.txt")
            for name in unknown:
                metrics.remove(name)
            result["dropped_metrics"] = unknown
            result["first_attempt"] = dict(result["profile_run"], stdout=f"{stem}.ncu.attempt1.stdout.txt",
                                           stderr=f"{stem}.ncu.attempt1.stderr.txt")
            result["profile_run"] = _run(ncu_command(ncu, report, driver, metrics, args.policy),
                                         folder / f"{stem}.ncu.stdout.txt", folder / f"{stem}.ncu.stderr.txt",
                                         args.timeout_s)
    if record_path.exists():
        result["driver"] = json.loads(record_path.read_text(encoding="utf-8"))
    if not report.exists():
        result["error"] = (f"ncu wrote no report (exit {result['profile_run']['returncode']}); "
                           f"stderr kept in ncu/{stem}.ncu.stderr.txt")
        return result
    csv_path = folder / f"{stem}.csv"
    result["export_run"] = _run(ncu_export_command(ncu, report), csv_path, folder / f"{stem}.export.stderr.txt",
                                args.timeout_s)
    try:
        result["launches"] = parse_ncu_raw_csv(csv_path.read_text(encoding="utf-8"))
    except NcuCsvError as exc:
        result["error"] = f"CSV export unreadable: {exc}; stderr kept in ncu/{stem}.export.stderr.txt"
        return result
    if result["profile_run"]["returncode"] != 0:
        result["error"] = f"ncu exited {result['profile_run']['returncode']} (report kept; stderr kept)"
    return result


def profile_nsys(nsys: str, out: Path, experiment: str, case: str, variant: str, args) -> dict:
    stem = f"{experiment}_{case}_{variant}_graph"
    folder = out / "nsys"
    folder.mkdir(parents=True, exist_ok=True)
    driver = driver_command(sys.executable, experiment, case, variant, mode="graph", repeat=args.repeat,
                            record=folder / f"{stem}.driver.json", scratch=out / "scratch" / stem,
                            expect_device=args.expect_device)
    result = {"experiment": experiment, "case": case, "variant": variant, "mode": "graph"}
    result["profile_run"] = _run(nsys_command(nsys, folder / stem, driver), folder / f"{stem}.nsys.stdout.txt",
                                 folder / f"{stem}.nsys.stderr.txt", args.timeout_s)
    report = folder / f"{stem}.nsys-rep"
    if report.exists():
        result["report"] = report.relative_to(out).as_posix()
        result["stats_run"] = _run(nsys_stats_command(nsys, report, folder / stem),
                                   folder / f"{stem}.stats.stdout.txt", folder / f"{stem}.stats.stderr.txt",
                                   args.timeout_s)
    else:
        result["error"] = (f"nsys wrote no .nsys-rep (exit {result['profile_run']['returncode']}); "
                           f"stderr kept in nsys/{stem}.nsys.stderr.txt")
    return result


def tool_version(tool: str) -> str:
    try:
        proc = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=60, check=False)
        return (proc.stdout + proc.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unavailable: {exc}"


# ---------------------------------------------------------------- CLI

def metric_list(text):
    """``--metrics``: names from :data:`METRICS`, in the order given."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in METRIC_NAMES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown metric(s) {unknown or text!r}; known: {', '.join(METRIC_NAMES)}")
    return names


def parser():
    p = argparse.ArgumentParser(prog="python -m bench profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", choices=("A", "B"), required=True)
    p.add_argument("--out", help="profile folder (default runs/<UTC time>-profile<X>)")
    p.add_argument("--cases", help="comma-separated cases (default: " +
                   "; ".join(f"{k}: {','.join(v)}" for k, v in DEFAULT_CASES.items()) + ")")
    p.add_argument("--variants", help="comma-separated variants (default: all of the experiment's)")
    p.add_argument("--repeat", type=int, default=3, help="profiled invocations per variant (default 3)")
    p.add_argument("--expect-device", default="H100")
    p.add_argument("--ncu", help="path of ncu (default: PATH, then the usual install folders)")
    p.add_argument("--nsys", help="path of nsys (default: PATH only)")
    p.add_argument("--timeout-s", type=int, default=300, help="limit for each profiler process")
    p.add_argument("--cache-control", choices=sorted(CACHE_MEANING), default="all",
                   help="ncu cache policy: all (default) flushes caches before each pass, a cold L2 per kernel; "
                        "none keeps them, as the timed runs do (use with --replay-mode application to compare "
                        "DRAM bytes with the timed runs)")
    p.add_argument("--metrics", type=metric_list,
                   help="comma-separated subset of the metrics (default: all of them); few metrics fit in one "
                        "pass, so with --cache-control none nothing is replayed over a warmed cache")
    p.add_argument("--replay-mode", choices=sorted(REPLAY_MEANING), default="kernel",
                   help="ncu replay: kernel (default) replays each kernel; application reruns the driver per pass")
    return p


def rebuild_summary(out: Path) -> Path:
    """profile_summary.md again from profile.json + profile.jsonl alone (no profiler needed)."""
    info = json.loads((out / "profile.json").read_text(encoding="utf-8"))
    launches = {}
    with open(out / "profile.jsonl", encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            launches.setdefault((record["case"], record["variant"], record["mode"]), []).append(record)
    results = [dict(run, launches=launches.get((run["case"], run["variant"], run["mode"]), []))
               for run in info.get("runs", [])]
    summary = out / "profile_summary.md"
    summary.write_text(summary_markdown(info, results, info.get("nsys_runs", [])), encoding="utf-8")
    return summary


def main(argv=None) -> int:
    if argv and argv[0] == "--summarize":
        if len(argv) != 2:
            print("usage: python -m bench profile --summarize DIR", file=sys.stderr)
            return 2
        print(rebuild_summary(Path(argv[1])))
        return 0
    args = parser().parse_args(argv)
    problem = gpu_problem("python -m bench profile")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 4
    args.policy = ncu_policy(args.cache_control, args.replay_mode)
    experiment = args.experiment
    out = Path(args.out or default_run_folder(f"profile{experiment}"))
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty; profile into a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    cases = args.cases.split(",") if args.cases else list(DEFAULT_CASES[experiment])
    variants = args.variants.split(",") if args.variants else list(DEFAULT_VARIANTS[experiment])

    ncu = find_ncu(args.ncu)
    nsys = args.nsys or shutil.which("nsys")
    info = {"experiment": experiment, "cases": cases, "variants": variants, "repeat": args.repeat,
            "metrics": dict(METRICS), "policy": args.policy, "git": git_state(), "python": sys.executable,
            "started_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(), "ncu": ncu, "nsys": nsys,
            "expected_device": args.expect_device, "tails": {}}
    if nsys is None:
        info["nsys_reason"] = ("nsys is not on PATH (and --nsys was not given), so no Nsight Systems "
                               "node-level graph trace was taken")
    if ncu is None:
        info["ncu_error"] = f"ncu not found on PATH nor in {NCU_CANDIDATES}"
        print(f"error: {info['ncu_error']}", file=sys.stderr)
    else:
        info["ncu_version"] = tool_version(ncu)
    if nsys:
        info["nsys_version"] = tool_version(nsys)

    results = []
    requested = list(args.metrics or METRIC_NAMES)
    metrics = list(requested)
    if ncu is not None:
        for case in cases:
            for variant in variants:
                print(f"ncu: {experiment} {case} {variant} ...", file=sys.stderr, flush=True)
                result = profile_one(ncu, out, experiment, case, variant, args, metrics)
                if result.get("error"):
                    stem = f"{experiment}_{case}_{variant}"
                    info["tails"][stem] = _tail(out / "ncu" / f"{stem}.ncu.stderr.txt")
                    print(f"  FAILED: {result['error']}\n{info['tails'][stem]}", file=sys.stderr)
                results.append(result)
    nsys_results = []
    if nsys is not None and NSYS_CASE[experiment][0] in cases:
        case, variant = NSYS_CASE[experiment]
        print(f"nsys: {experiment} {case} {variant} (graph mode) ...", file=sys.stderr, flush=True)
        nsys_results.append(profile_nsys(nsys, out, experiment, case, variant, args))

    with open(out / "profile.jsonl", "w", encoding="utf-8") as f:
        for r in results:
            for launch in r.get("launches") or []:
                f.write(json.dumps(dict(launch, experiment=experiment, case=r["case"], variant=r["variant"],
                                        mode=r["mode"], repeat=r["repeat"]), sort_keys=True) + "\n")
    info["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    info["metrics_collected"] = metrics
    info["metrics_unknown_to_this_ncu"] = [m for m in requested if m not in metrics]
    info["runs"] = [{k: v for k, v in r.items() if k != "launches"} for r in results]
    info["nsys_runs"] = nsys_results
    (out / "profile.json").write_text(json.dumps(info, indent=2, sort_keys=True, default=str) + "\n",
                                      encoding="utf-8")
    summary = out / "profile_summary.md"
    summary.write_text(summary_markdown(info, results, nsys_results), encoding="utf-8")
    failed = ncu is None or any(r.get("error") for r in results)
    print(f"{'FAILED' if failed else 'done'}: {summary}")
    return 1 if failed else 0
