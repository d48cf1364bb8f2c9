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
import csv
import datetime
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.environment import git_state, gpu_problem

#: What each metric is for (summary column order follows this tuple).
METRICS = (
    ("gpu__time_duration.sum", "kernel duration under the profiler (ns)"),
    ("dram__bytes_read.sum", "DRAM bytes read"),
    ("dram__bytes_write.sum", "DRAM bytes written"),
    ("lts__t_bytes.sum", "L2 bytes accessed (all requests)"),
    ("lts__t_sectors_srcunit_tex_op_read.sum", "L2 sectors read by L1/TEX"),
    ("lts__t_sectors_srcunit_tex_op_write.sum", "L2 sectors written by L1/TEX"),
    ("lts__t_sector_hit_rate.pct", "L2 sector hit rate (%)"),
    ("launch__registers_per_thread", "registers per thread"),
    ("launch__shared_mem_per_block_static", "static shared memory per block (bytes)"),
    ("launch__shared_mem_per_block_dynamic", "dynamic shared memory per block (bytes)"),
    ("smsp__sass_inst_executed_op_local_ld.sum", "local-memory load instructions executed"),
    ("smsp__sass_inst_executed_op_local_st.sum", "local-memory store instructions executed"),
    ("launch__grid_size", "blocks"),
    ("launch__block_size", "threads per block"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy (%)"),
    ("sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy (%)"),
    ("smsp__inst_executed.sum", "warp instructions executed"),
    ("smsp__inst_executed_pipe_xu.sum", "warp instructions on the XU pipe (MUFU: ex2, rcp; 1/8 the FMA rate)"),
    ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue slots busy while active (%)"),
    ("sm__cycles_elapsed.avg", "SM cycles elapsed"),
)
#: Warp schedulers (SMSPs) per SM: each issues at most one warp instruction per cycle.
SCHEDULERS_PER_SM = 4
METRIC_NAMES = tuple(name for name, _ in METRICS)
#: Counters that add up over the launches of one invocation.
SUMMED_METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
                  "smsp__sass_inst_executed_op_local_ld.sum", "smsp__sass_inst_executed_op_local_st.sum",
                  "smsp__inst_executed.sum", "smsp__inst_executed_pipe_xu.sum")

#: What each cache policy means for the counters (``--cache-control``).
CACHE_MEANING = {
    "all": ("cache-control all flushes all caches before each replay pass: each kernel starts with a cold L2, "
            "unlike the timed benchmark, which never flushes"),
    "none": ("cache-control none keeps the caches as the previous work left them, as in the timed benchmark, where "
             "one invocation follows another: a kernel may find in L2 what the kernel before it left there"),
}
#: What each replay mode means (``--replay-mode``).
REPLAY_MEANING = {
    "kernel": ("replay-mode kernel replays each kernel (restoring the memory it writes) until every metric is "
               "collected, so with cache-control none a later pass also finds what the earlier passes of the same "
               "kernel left in L2"),
    "application": ("replay-mode application reruns the whole driver once per pass, so every kernel is preceded by "
                    "exactly what precedes it in a run (with cache-control none: the L2 state of a timed run)"),
}


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


# ---------------------------------------------------------------- CSV (pure)

class NcuCsvError(ValueError):
    pass


def parse_number(text: str):
    """An ncu CSV cell as a number: thousands separators removed; None for '', 'n/a'."""
    text = (text or "").strip()
    if text in ("", "n/a", "N/A", "-"):
        return None
    cleaned = text.replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return text  # a string metric (kept as written)
    return int(value) if value.is_integer() and "." not in cleaned and "e" not in cleaned.lower() else value


def parse_ncu_raw_csv(text: str) -> list[dict]:
    """Rows of ``ncu --import X --csv --page raw``: one dict per profiled kernel launch.

    Format (ncu's raw page): a header row (ID, Process ID, Process Name, Host Name,
    Kernel Name, Context, Stream, Block Size, Grid Size, Device, CC, then one column per
    metric), a units row (empty for the identification columns), then one row per
    launch. Lines before the header (``==PROF==`` messages) are skipped. Returns
    ``{"id", "kernel", "block", "grid", "stream", "metrics": {name: {"value", "unit"}}}``.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"')), None)
    if start is None:
        raise NcuCsvError("no ncu raw-page header (a line starting with \"ID\",\"Process ID\") in the CSV")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise NcuCsvError(f"ncu CSV header has no 'Kernel Name' column: {header[:12]}")
    body = [r for r in rows[1:] if r and not r[0].startswith("==")]
    units = None
    if body and body[0][0] == "":
        units, body = body[0], body[1:]
    ident = {"ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC"}
    launches = []
    for row in body:
        if len(row) != len(header):
            raise NcuCsvError(f"ncu CSV row has {len(row)} cells, header has {len(header)}: {row[:5]}")
        cells = dict(zip(header, row, strict=True))
        metrics = {}
        for index, name in enumerate(header):
            if name in ident:
                continue
            metrics[name] = {"value": parse_number(row[index]), "unit": units[index] if units else ""}
        launches.append({"id": int(cells["ID"]), "kernel": cells["Kernel Name"], "block": cells.get("Block Size"),
                         "grid": cells.get("Grid Size"), "stream": cells.get("Stream"), "metrics": metrics})
    return launches


#: ncu unit spellings -> (base unit, factor). ``--print-units base`` should give the base units
#: already; scaled spellings (a CSV exported without it) are converted rather than misread.
UNIT_SCALE = {
    "byte": ("byte", 1), "Kbyte": ("byte", 1e3), "Mbyte": ("byte", 1e6), "Gbyte": ("byte", 1e9),
    "Tbyte": ("byte", 1e12),
    "sector": ("sector", 1), "Ksector": ("sector", 1e3), "Msector": ("sector", 1e6), "Gsector": ("sector", 1e9),
    "nsecond": ("nsecond", 1), "usecond": ("nsecond", 1e3), "msecond": ("nsecond", 1e6),
    "second": ("nsecond", 1e9),
    # ncu 2025.3 (the H200 image) spells time units short in --print-units base CSVs
    "ns": ("nsecond", 1), "us": ("nsecond", 1e3), "ms": ("nsecond", 1e6), "s": ("nsecond", 1e9),
}
#: The base unit each metric must arrive in (after scaling); a different unit is an error, not a guess.
EXPECTED_UNITS = {"gpu__time_duration.sum": "nsecond", "dram__bytes_read.sum": "byte",
                  "dram__bytes_write.sum": "byte", "lts__t_bytes.sum": "byte",
                  "lts__t_sectors_srcunit_tex_op_read.sum": "sector",
                  "lts__t_sectors_srcunit_tex_op_write.sum": "sector"}


def metric_value(launch: dict, name: str):
    """A metric of one launch in its base unit (bytes, sectors, nanoseconds); None if absent."""
    entry = launch["metrics"].get(name)
    if entry is None or entry["value"] is None:
        return None
    value, unit = entry["value"], entry.get("unit") or ""
    if unit in UNIT_SCALE and isinstance(value, (int, float)):
        unit, factor = UNIT_SCALE[unit][0], UNIT_SCALE[unit][1]
        value = value * factor if factor != 1 else value
    expected = EXPECTED_UNITS.get(name)
    if expected is not None and unit and unit != expected:
        raise NcuCsvError(f"{name} arrived in unit {entry.get('unit')!r}; expected {expected!r}")
    return value


def per_invocation(launches: list[dict], repeat: int) -> dict:
    """Counters summed over every profiled launch, divided by the profiled invocations."""
    totals = {}
    for name in SUMMED_METRICS:
        values = [metric_value(launch, name) for launch in launches]
        numbers = [v for v in values if isinstance(v, (int, float))]
        totals[name] = (sum(numbers) / repeat) if numbers and len(numbers) == len(values) else None
    totals["launches"] = len(launches) / repeat
    return totals


def issue_floor_ns(launch: dict, sm_count):
    """The time one launch would take if it did nothing but issue its warp instructions, one per
    cycle on every warp scheduler of every SM, at the clock it ran: its duration x (instructions /
    (4 x SMs)) / its elapsed cycles. None if a counter is missing."""
    inst, cycles, duration = (metric_value(launch, name) for name in
                              ("smsp__inst_executed.sum", "sm__cycles_elapsed.avg", "gpu__time_duration.sum"))
    if not (sm_count and isinstance(inst, (int, float)) and cycles and duration):
        return None
    return duration * (inst / (SCHEDULERS_PER_SM * sm_count)) / cycles


def issue_table(results, sm_count) -> list[str]:
    """Per invocation: warp instructions, MUFU share, and the issue floor next to the kernel time."""
    lines = ["## Instruction issue (per invocation)", "",
             "The issue floor is the time the launches would take issuing their warp instructions at one per "
             "cycle on every scheduler (4 per SM) at the clock they ran, with nothing else in the way: a variant "
             "cannot run faster than it, whatever its scheduling.", "",
             "| case | variant | warp instructions | XU (MUFU) instructions | issue floor us | kernel time under "
             "profiler us | issue slots busy % (launch-weighted) |", "|---|---|---|---|---|---|---|"]
    for r in results:
        launches = r.get("launches") or []
        if not launches:
            continue
        totals = per_invocation(launches, r["repeat"])
        floors = [issue_floor_ns(launch, sm_count) for launch in launches]
        floor = sum(floors) / r["repeat"] if floors and None not in floors else None
        busy = [(metric_value(launch, "smsp__issue_active.avg.pct_of_peak_sustained_active"),
                 metric_value(launch, "gpu__time_duration.sum")) for launch in launches]
        weighted = None
        if busy and all(isinstance(b, (int, float)) and d for b, d in busy):
            weighted = sum(b * d for b, d in busy) / sum(d for _, d in busy)
        duration = totals["gpu__time_duration.sum"]
        lines.append(f"| {r['case']} | {r['variant']} | {_fmt(totals['smsp__inst_executed.sum'])} | "
                     f"{_fmt(totals['smsp__inst_executed_pipe_xu.sum'])} | "
                     f"{_fmt(None if floor is None else floor / 1e3, 1)} | "
                     f"{_fmt(None if duration is None else duration / 1e3, 1)} | {_fmt(weighted, 1)} |")
    return lines + [""]


def short_kernel_name(name: str) -> str:
    """``numba_softmax::kernels::fused_row::fused_row_softmax[abi:...](Array<...>)`` -> ``fused_row_softmax``."""
    base = name.split("(", 1)[0]
    base = base.split("[abi", 1)[0]
    base = base.rsplit("::", 1)[-1] if "<" not in base else base
    return base.strip() or name


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


# ---------------------------------------------------------------- summary

def launch_count_warning(result: dict) -> str | None:
    """The profiled range must hold exactly repeat x (kernels per invocation) launches."""
    launches = result.get("launches")
    if launches is None:
        return None
    repeat = result["repeat"]
    kernels = len((result.get("driver") or {}).get("kernel_resources") or [])
    name = f"{result['case']} {result['variant']}"
    if kernels and len(launches) != repeat * kernels:
        return (f"{name}: {len(launches)} kernel launches profiled, expected {repeat} invocations x {kernels} "
                "kernels; the per-invocation figures are not trustworthy")
    if len(launches) % repeat:
        return (f"{name}: {len(launches)} kernel launches profiled is not a multiple of the {repeat} invocations; "
                "the per-invocation figures are not trustworthy")
    return None


def _fmt(value, digits=0) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:,.{digits}f}"


def summary_markdown(info: dict, results: list[dict], nsys_results: list[dict]) -> str:
    lines = ["# Profile summary", "",
             f"Experiment {info['experiment']}; profiler runs separate from any timing. "
             "Counters are reported as ncu read them, next to the logical bytes of one invocation "
             "(input read once + output written once); neither is converted into the other.", "",
             "Policy: " + ", ".join(f"{k.replace('_', '-')} {v}" for k, v in info["policy"].items()
                                    if k in ("replay_mode", "cache_control", "clock_control")) + ". "
             + info["policy"]["meaning"] + ".", "",
             f"ncu: `{info.get('ncu') or 'NOT FOUND'}` ({' '.join(info.get('ncu_version', '-').split())})", ""]
    if info.get("metrics_unknown_to_this_ncu"):
        lines += [f"> **This ncu does not know {info['metrics_unknown_to_this_ncu']}: those metrics were dropped "
                  "(the failed attempt's output is kept as `*.ncu.attempt1.*.txt`).**", ""]
    if info.get("ncu_error"):
        lines += [f"> **NO NSIGHT COMPUTE CAPTURE: {info['ncu_error']}.**", ""]
    device = next(((r.get("driver") or {}).get("device") for r in results if (r.get("driver") or {}).get("device")),
                  None)
    if device:
        lines += [f"Device: {device.get('name')} ({device.get('sm_count')} SMs, L2 {device.get('l2_cache_bytes')} "
                  f"bytes, driver {device.get('driver_version')}).", ""]
    failures = [r for r in results if r.get("error")]
    if failures:
        lines += [f"> **{len(failures)} profile run(s) FAILED; their profiler output is kept and quoted below.**", ""]
    lines += ["## Per invocation (summed over its kernel launches, divided by the profiled invocations)", "",
              "| case | variant | launches | logical bytes | DRAM read B | DRAM read / input | DRAM write B | "
              "L2 bytes (lts__t_bytes) | local ld/st instr | kernel time under profiler us | output check |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.get("launches") is None:
            continue
        totals = per_invocation(r["launches"], r["repeat"])
        duration = totals["gpu__time_duration.sum"]
        local = (totals["smsp__sass_inst_executed_op_local_ld.sum"], totals["smsp__sass_inst_executed_op_local_st.sum"])
        check = (r.get("driver") or {}).get("check", {}).get("passed")
        logical = (r.get("driver") or {}).get("bytes_moved_logical")
        read = totals["dram__bytes_read.sum"]
        # logical bytes = input read once + output written once, the two the same size
        read_ratio = f"{read / (logical / 2):.2f}x" if read is not None and logical else "-"
        lines.append(f"| {r['case']} | {r['variant']} | {_fmt(totals['launches'], 1)} | "
                     f"{_fmt(logical)} | {_fmt(read)} | {read_ratio} | {_fmt(totals['dram__bytes_write.sum'])} | "
                     f"{_fmt(totals['lts__t_bytes.sum'])} | {_fmt(local[0])} / {_fmt(local[1])} | "
                     f"{_fmt(None if duration is None else duration / 1e3, 1)} | "
                     f"{'passed' if check else ('FAILED' if check is False else '-')} |")
    warnings = [w for r in results if (w := launch_count_warning(r))]
    if warnings:
        lines += [""] + [f"> **WARNING: {w}**" for w in warnings]
    lines += [""] + issue_table(results, (device or {}).get("sm_count"))
    lines += ["## Per kernel launch", "",
              "| case | variant | id | kernel | grid x block | regs/thread | static / dynamic smem B | "
              "achieved / theoretical occupancy % | DRAM read B | DRAM write B | L2 hit % |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for launch in r.get("launches") or []:
            m = lambda name, launch=launch: metric_value(launch, name)  # noqa: E731
            lines.append(
                f"| {r['case']} | {r['variant']} | {launch['id']} | `{short_kernel_name(launch['kernel'])}` | "
                f"{_fmt(m('launch__grid_size'))} x {_fmt(m('launch__block_size'))} | "
                f"{_fmt(m('launch__registers_per_thread'))} | {_fmt(m('launch__shared_mem_per_block_static'))} / "
                f"{_fmt(m('launch__shared_mem_per_block_dynamic'))} | "
                f"{_fmt(m('sm__warps_active.avg.pct_of_peak_sustained_active'), 1)} / "
                f"{_fmt(m('sm__maximum_warps_per_active_cycle_pct'), 1)} | {_fmt(m('dram__bytes_read.sum'))} | "
                f"{_fmt(m('dram__bytes_write.sum'))} | {_fmt(m('lts__t_sector_hit_rate.pct'), 1)} |")
    if failures:
        lines += ["", "## Failed profile runs", ""]
        for r in failures:
            lines += [f"### {r['experiment']} {r['case']} {r['variant']}", "", r["error"], "",
                      "Command: `" + " ".join(r["profile_run"]["command"]) + "`", "", "stderr (last lines):", "",
                      "```", info["tails"].get(f"{r['experiment']}_{r['case']}_{r['variant']}", ""), "```", ""]
    lines += ["", "## Nsight Systems", ""]
    if info.get("nsys") is None:
        lines += [f"NOT RUN: {info['nsys_reason']}", ""]
    for r in nsys_results:
        status = r.get("error") or f"report {r.get('report')} (exit {r['profile_run']['returncode']})"
        lines += [f"* {r['experiment']} {r['case']} {r['variant']} graph mode, `--cuda-graph-trace=node`: {status}"]
    lines += ["", "Files: `ncu/<exp>_<case>_<variant>.ncu-rep` (raw report), `.csv` (raw-page export), "
              "`.ncu.stderr.txt` / `.ncu.stdout.txt` (profiler output), `.driver.json` (the driver's record: "
              "device, kernel resources from the driver, output check); `profile.jsonl` (one record per launch); "
              "`profile.json` (commands, policy, tool versions)."]
    return "\n".join(lines) + "\n"


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
    out = Path(args.out or os.path.join(
        "runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-profile{experiment}"))
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
