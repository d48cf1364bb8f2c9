"""compute-sanitizer on every kernel, with negative controls that must fail.

    python -m bench sanitize [--out DIR] [--tools memcheck,racecheck,synccheck] [--targets T1,T2]
                             [--isolate] [--sanitizer PATH] [--expect-device MODEL]

What runs (each line one ``compute-sanitizer --tool TOOL ... python -m bench.sanitize_driver TARGETS``
process; :mod:`bench.sanitize_driver` lists the targets):

* memcheck on every target: each fused build, the four stages, the row copies, the tile kernels
  (separate), the persistent kernel in phased and dag mode with the queue's init kernel, the trace
  builds and the empty-work floors;
* racecheck and synccheck on the targets whose kernels use shared memory and barriers;
* the negative controls (:mod:`numba_softmax.kernels.sanitizer_controls`): memcheck on a planted
  out-of-bounds write, racecheck on a planted shared-memory race. Each must be REPORTED: a tool
  that passes the project's kernels proves something only if it rejects these in the same run.

The project's kernels pass when the tool reports zero errors, the process exits 0 and every
target's output passed its check. By default one process per tool runs every target (the kernels
are compiled once per process, which dominates the time at these sizes); ``--isolate`` gives each
target its own process (after a memcheck error the CUDA context is lost, so the targets after it
in the same process cannot run).

Writes DIR/metadata.json (kind, device, command, commit, date as the results index reads them, the
device record, versions, the compute-sanitizer version), DIR/logs/<run>.log
(the tool's and the driver's output, as printed), DIR/sanitize.json and DIR/summary.md.
Exit status: 0 everything as required; 1 a kernel has errors or a control was not caught;
2 no GPU, no compute-sanitizer or bad arguments (nothing created); 3 wrong device.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from tabulate import tabulate
from tqdm import tqdm

from bench.artifacts import RunFolder, default_run_folder
from bench.environment import DeviceMismatch, base_metadata, check_device, gpu_problem
from bench.sanitize_driver import targets as driver_targets

TOOLS = ("memcheck", "racecheck", "synccheck")
#: compute-sanitizer's exit status when it found errors. Not 1: Python itself exits 1 on an
#: uncaught exception, and the two must not be confused.
SANITIZER_EXIT = 86
#: Per process; a run takes seconds to a minute (most of it compiling), so a stall is stopped early.
DEFAULT_TIMEOUT_S = 150
CHECKOUT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class SanitizeError(RuntimeError):
    """The command cannot run here (no GPU, no compute-sanitizer, bad arguments): nothing was created."""


# ---------------------------------------------------------------- what to run

@dataclass(frozen=True)
class SanitizerRun:
    name: str            # the log's stem
    tool: str
    targets: tuple
    expect: str          # "clean": the project's kernels; "caught": a negative control


def plan_runs(target_names=None, tools=TOOLS, isolate=False) -> list[SanitizerRun]:
    """The processes to start: per tool, the targets it applies to; then the controls."""
    known = driver_targets()
    names = list(known) if target_names is None else list(target_names)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SanitizeError(f"unknown target(s) {unknown}; known: {', '.join(known)}")
    bad_tools = [t for t in tools if t not in TOOLS]
    if bad_tools:
        raise SanitizeError(f"unknown tool(s) {bad_tools}; known: {', '.join(TOOLS)}")
    real = [known[n] for n in names if not known[n].control]
    runs = []
    for tool in tools:
        applies = [t.name for t in real if tool == "memcheck" or t.shared_and_barriers]
        if not applies:
            continue
        if isolate:
            runs += [SanitizerRun(f"{tool}-{_slug(name)}", tool, (name,), "clean") for name in applies]
        else:
            runs.append(SanitizerRun(tool, tool, tuple(applies), "clean"))
    for control in (known[n] for n in names if known[n].control):
        if control.control in tools:
            runs.append(SanitizerRun(_slug(control.name), control.control, (control.name,), "caught"))
    return runs


def _slug(name):
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name)


def sanitizer_command(sanitizer, run: SanitizerRun, python=sys.executable) -> list[str]:
    # API errors are not kernel errors: the driver's symbol probing (cuGetProcAddress of entry
    # points this driver lacks) is reported as "invalid argument" and would count against the
    # first target. Memory, race and sync errors are the kernels' and are all reported.
    command = [sanitizer, "--tool", run.tool, "--error-exitcode", str(SANITIZER_EXIT), "--print-limit", "100",
               "--report-api-errors", "no"]
    if run.tool == "racecheck":
        command += ["--racecheck-report", "all"]  # hazards as they happen and the analysis summary
    return command + [python, "-m", "bench.sanitize_driver", *run.targets]


def find_sanitizer(explicit=None):
    """The compute-sanitizer executable: ``explicit``, then PATH, then the CUDA toolkit folders."""
    if explicit:
        if not (os.path.isfile(explicit) and os.access(explicit, os.X_OK)):
            raise SanitizeError(f"--sanitizer {explicit}: not an executable file")
        return explicit
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    candidates = [os.path.join(os.environ[v], "bin", "compute-sanitizer") for v in ("CUDA_HOME", "CUDA_PATH")
                  if os.environ.get(v)]
    candidates += ["/usr/local/cuda/bin/compute-sanitizer"]
    candidates += sorted(glob.glob("/usr/local/cuda-*/bin/compute-sanitizer"), reverse=True)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SanitizeError("compute-sanitizer not found (not on PATH, nor in $CUDA_HOME/bin, /usr/local/cuda*/bin); "
                        "it comes with the CUDA toolkit: install it, or pass --sanitizer PATH")


# ---------------------------------------------------------------- reading a log

BANNER = "========= "
_ERROR_SUMMARY = re.compile(r"^=+ ERROR SUMMARY: (\d+) errors?", re.M)
_RACECHECK_SUMMARY = re.compile(
    r"^=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", re.M)
#: Top-level tool lines that are not reports.
_NOT_A_REPORT = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Process ID",
                 "Target application returned", "Error: process didn't terminate successfully")
#: Lines some versions print at the top level that continue the report above them.
_CONTINUATION = ("Saved host backtrace", "Host Frame", "Device Frame", "and ")


@dataclass
class LogReading:
    error_summary: int | None = None                  # ERROR SUMMARY: N errors (None: absent)
    racecheck_summary: dict | None = None             # hazards, errors, warnings (racecheck only)
    reports: list = field(default_factory=list)       # {"target", "kernels", "text"} per tool report
    results: dict = field(default_factory=dict)       # target -> "ok" | "FAILED: ..." (the driver's)

    @property
    def errors(self) -> int | None:
        """Errors the tool counted (both summaries when it printed both), None if it printed neither."""
        counts = [c for c in (self.error_summary,
                              None if self.racecheck_summary is None else self.racecheck_summary["errors"])
                  if c is not None]
        return max(counts) if counts else None


def parse_log(text: str, kernel_names=()) -> LogReading:
    """What a compute-sanitizer log says: its summaries, each report (with the driver target it
    happened in and the kernels it names) and each target's own result line."""
    reading = LogReading()
    matches = _ERROR_SUMMARY.findall(text)
    if matches:
        reading.error_summary = sum(int(m) for m in matches)
    race = _RACECHECK_SUMMARY.findall(text)
    if race:
        reading.racecheck_summary = {key: sum(int(r[i]) for r in race)
                                     for i, key in enumerate(("hazards", "errors", "warnings"))}
    names = set(kernel_names)
    target, current = None, None
    for line in text.splitlines():
        if line.startswith("SANITIZE-TARGET "):
            target, current = line.split(" ", 1)[1].strip(), None
            continue
        if line.startswith("SANITIZE-RESULT "):
            _, name, result = line.split(" ", 2)
            reading.results[name] = result.strip()
            current = None
            continue
        if not line.startswith(BANNER.strip()):
            continue
        body = line.lstrip("=")
        opens = body.startswith(" ") and not body.startswith("  ") and body.strip() \
            and not body.strip().startswith(_CONTINUATION)
        if opens and not body.strip().startswith(_NOT_A_REPORT):
            current = {"target": target, "kernels": [], "text": line}
            reading.reports.append(current)
        elif opens:
            current = None
        elif current is not None and body.strip():
            current["text"] += "\n" + line
        if current is not None:
            found = [n for n in names if n in line]
            # a name inside a longer one found on the same line is that one (q1 inside q1_v4)
            for name in sorted(n for n in found if not any(n != m and n in m for m in found)):
                if name not in current["kernels"]:
                    current["kernels"].append(name)
    return reading


def judge(run: SanitizerRun, reading: LogReading, returncode, kernel_names=()) -> tuple[bool, str]:
    """(as required, why) for one run."""
    if returncode is None:
        return False, "timed out (the process group was killed)"
    if run.expect == "caught":
        errors = reading.errors or 0
        named = [r for r in reading.reports if any(k in r["kernels"] for k in kernel_names)]
        if errors > 0 and named:
            return True, (f"caught as required: {errors} error(s), {len(named)} report(s) naming "
                          f"{', '.join(kernel_names)}")
        if errors > 0:
            return False, f"{errors} error(s), but no report names {', '.join(kernel_names)}"
        return False, "NOT CAUGHT: the tool reported no error on a planted bug, so this run proves nothing"
    problems = []
    if reading.errors is None:
        problems.append("the tool printed no summary (it did not run to the end)")
    elif reading.errors:
        problems.append(f"{reading.errors} error(s)")
    missing = [t for t in run.targets if t not in reading.results]
    failed = {t: r for t, r in reading.results.items() if r != "ok"}
    if missing:
        problems.append(f"target(s) that did not report a result: {missing}")
    if failed:
        problems.append("; ".join(f"{t}: {r}" for t, r in failed.items()))
    if returncode != 0 and not problems:
        problems.append(f"exit status {returncode}")
    return (not problems), ("0 errors, every target checked" if not problems else "; ".join(problems))


# ---------------------------------------------------------------- running

def run_one(sanitizer, run: SanitizerRun, log_path, timeout_s) -> int | None:
    """Start one tool process, its output to ``log_path`` as printed; None when it timed out."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [CHECKOUT_ROOT, os.environ.get("PYTHONPATH")]))
    command = sanitizer_command(sanitizer, run)
    with open(log_path, "wb") as log:
        log.write(("$ " + " ".join(command) + "\n").encode())
        log.flush()
        process = subprocess.Popen(command, cwd=CHECKOUT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the tool and the Python it started, nothing else
            process.wait()
            log.write(f"\n(killed after {timeout_s} s)\n".encode())
            return None


def in_order(execute, runs, jobs=1) -> list:
    """``execute(run)`` for every run, at most ``jobs`` at once, the results in the runs' order."""
    if jobs < 1:
        raise SanitizeError(f"--jobs must be at least 1, got {jobs}")
    if jobs == 1:
        return [execute(run) for run in runs]

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(execute, runs))


def sanitizer_version(sanitizer) -> str:
    proc = subprocess.run([sanitizer, "--version"], capture_output=True, text=True, check=False)
    return " ".join(line.strip() for line in proc.stdout.splitlines() if line.strip())


def parser():
    p = argparse.ArgumentParser(prog="python -m bench sanitize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="output folder (default runs/<UTC time>-sanitize); must be new or empty")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated subset of {', '.join(TOOLS)}")
    p.add_argument("--targets", help="comma-separated targets (default: all, controls included); "
                                     f"known: {', '.join(driver_targets())}")
    p.add_argument("--isolate", action="store_true", help="one process per target and tool (slower)")
    p.add_argument("--sanitizer", help="compute-sanitizer executable (default: PATH, then the CUDA toolkit)")
    p.add_argument("--timeout-s", type=int, default=DEFAULT_TIMEOUT_S, help="limit per process")
    p.add_argument("--jobs", type=int, default=1,
                   help="tool processes run at once (default 1); each has the GPU to itself only with 1")
    p.add_argument("--expect-device", metavar="MODEL", help="require this GPU model (default: any sm_90+ GPU)")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)

    try:
        runs = plan_runs(args.targets.split(",") if args.targets else None,
                         tuple(t.strip() for t in args.tools.split(",") if t.strip()), args.isolate)
        problem = gpu_problem("python -m bench sanitize (compute-sanitizer checks kernels running on a GPU)")
        if problem:
            raise SanitizeError(problem)
        sanitizer = find_sanitizer(args.sanitizer)
    except SanitizeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return _run_all(args, argv, runs, sanitizer)


def with_index_fields(metadata: dict, argv) -> dict:
    """The run's metadata with the results index's fields (kind, device, command, commit, date) beside
    the full records (the device record moves to ``device_record``)."""
    metadata = dict(metadata)
    metadata["device_record"] = metadata.pop("device")
    metadata.update(kind="sanitize", device=metadata["device_record"]["name"],
                    command=" ".join(["python -m bench sanitize", *argv]),
                    commit=(metadata.get("git") or {}).get("commit"), date=metadata["started_utc"][:10])
    return metadata


def _run_all(args, argv, runs, sanitizer) -> int:
    metadata = with_index_fields(base_metadata(True, ["sanitize", *argv]), argv)
    try:
        note = check_device(metadata["device_record"], args.expect_device)
    except DeviceMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    if note:
        metadata["device_note"] = note
        print(f"note: {note}", file=sys.stderr)
    metadata["sanitizer"] = {"path": sanitizer, "version": sanitizer_version(sanitizer)}
    out = args.out or default_run_folder("sanitize")
    folder = RunFolder(out)
    folder.write_json("metadata.json", metadata)
    known = driver_targets()
    folder.path_of("logs").mkdir(parents=True, exist_ok=True)

    def execute(run):
        log_rel = f"logs/{run.name}.log"
        started = time.monotonic()
        returncode = run_one(sanitizer, run, folder.path_of(log_rel), args.timeout_s)
        seconds = time.monotonic() - started
        kernels = sorted({k for t in run.targets for k in known[t].kernels})
        reading = parse_log(folder.path_of(log_rel).read_text(encoding="utf-8", errors="replace"), kernels)
        control_kernels = kernels if run.expect == "caught" else ()
        passed, why = judge(run, reading, returncode, control_kernels)
        return {**asdict(run), "log": log_rel, "returncode": returncode, "seconds": round(seconds, 1),
                "errors": reading.errors, "error_summary": reading.error_summary,
                "racecheck_summary": reading.racecheck_summary, "results": reading.results,
                "reports": reading.reports, "passed": passed, "why": why}

    with tqdm(total=len(runs), desc="compute-sanitizer", unit="run") as progress:
        def execute_and_count(run):
            record = execute(run)
            progress.update(1)  # as each tool process ends, in whatever order they end
            return record

        records = in_order(execute_and_count, runs, args.jobs)
    metadata["finished_utc"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
    folder.write_json("metadata.json", metadata)
    document = {"passed": all(r["passed"] for r in records), "runs": records,
                "targets": {name: asdict(known[name]) for name in sorted({t for r in runs for t in r.targets})}}
    folder.write_json("sanitize.json", document)
    summary = summary_text(metadata, document)
    folder.write_text("summary.md", summary)
    print(summary)
    print(f"{'passed' if document['passed'] else 'FAILED'}: {folder.path_of('summary.md')}")
    return 0 if document["passed"] else 1


# ---------------------------------------------------------------- summary

def summary_text(metadata: dict, document: dict) -> str:
    device = metadata.get("device") or "unrecorded device"
    commit = (metadata.get("commit") or "unrecorded")[:12]
    sanitizer = (metadata.get("sanitizer") or {}).get("version", "unrecorded")
    verdict = ("**PASSED**: zero errors on every kernel, and every negative control was caught"
               if document["passed"] else "**FAILED**: see the runs marked FAIL")
    lines = ["# compute-sanitizer", "",
             f"{device}, commit {commit}, {sanitizer}. Command: `{metadata.get('command', '')}`.", "",
             verdict, ""]
    if metadata.get("device_note"):
        lines += [f"> **{metadata['device_note']}**", ""]
    rows = [[r["name"], r["tool"], "control (must be caught)" if r["expect"] == "caught" else "kernels (must be clean)",
             len(r["targets"]), "-" if r["errors"] is None else r["errors"], r["seconds"],
             "pass" if r["passed"] else "FAIL", r["why"]] for r in document["runs"]]
    lines += [tabulate(rows, headers=["run", "tool", "what", "targets", "errors", "seconds", "result", "why"],
                       tablefmt="github", disable_numparse=True), ""]
    tools = list(dict.fromkeys(r["tool"] for r in document["runs"] if r["expect"] == "clean"))
    cells = {}
    for r in document["runs"]:
        if r["expect"] != "clean":
            continue
        for target in r["targets"]:
            reports = [p for p in r["reports"] if p["target"] == target]
            result = r["results"].get(target, "no result")
            cells[(target, r["tool"])] = (f"{len(reports)} report(s)" if reports
                                          else ("clean" if result == "ok" else result))
    target_rows = [[name, ", ".join(info["kernels"]), *(cells.get((name, tool), "not run") for tool in tools)]
                   for name, info in document["targets"].items() if not info["control"]]
    lines += ["## Per target", "",
              "Each target runs its kernels once on a small case through the launch layer and checks the output "
              "(bench/sanitize_driver.py). racecheck and synccheck run where the kernels use shared memory and "
              "barriers.", "",
              tabulate(target_rows, headers=["target", "kernels", *tools], tablefmt="github", disable_numparse=True),
              ""]
    reported = [(r, p) for r in document["runs"] for p in r["reports"] if not r["passed"] or r["expect"] == "caught"]
    if reported:
        lines += ["## Reports", "", "Every report of a failed run, and the controls' first report:", ""]
        shown_controls = set()
        for r, p in reported:
            if r["expect"] == "caught":
                if r["name"] in shown_controls:
                    continue
                shown_controls.add(r["name"])
            lines += [f"{r['name']} ({r['tool']}), target {p['target']}:", "", "```", p["text"], "```", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    sys.exit(main())
