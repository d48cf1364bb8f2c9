"""Continue an interrupted experiment run in its own folder (``--resume DIR``).

Every case is appended to the run folder as it completes (``cases.jsonl``,
``timings.jsonl``, ..., and last ``progress.jsonl``). Resuming:

1. refuses, naming the difference, unless the folder was written by the same code and
   setup: git commit (clean tree), backend and device model, driver and package
   versions, experiment, seed, case list, options and protocol constants
   (:func:`check_compatible`);
2. refuses after a required-check failure: that failure is the run's result, and
   running the case again until it passes would hide it;
3. skips the cases whose ``progress.jsonl`` record says ``completed``;
4. drops the records of an interrupted case (any case not completed) from every
   ``*.jsonl`` file, writing each filtered file atomically after copying the original
   to ``resume_backup/<time>/``, and moves that case's arrays and DOT files there too;
   records of completed cases are never touched.

Pure functions of the folder's files: no GPU needed (tests build synthetic folders).
"""

from __future__ import annotations

import datetime
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from bench import protocol
from bench.artifacts import _dumps, atomic_write_text
from bench.shapes import parse_shapes
from numba_softmax import cases

PROGRESS = "progress.jsonl"
BACKUP_FOLDER = "resume_backup"
#: Why a case ended without completing, as run_experiment records it in progress.jsonl.
STOPPED_BY_REQUIRED_CHECK = "required-check"


class ResumeRefused(RuntimeError):
    """The folder cannot be continued; the message names the difference."""


# ---------------------------------------------------------------- what a run is

def protocol_constants() -> dict:
    """Every constant that decides what a run measures and accepts."""
    return {
        "warmups": protocol.WARMUPS, "rounds": protocol.ROUNDS, "batch": protocol.BATCH,
        "modes": list(protocol.MODES), "metrics": list(protocol.METRICS),
        "abs_tol": cases.ABS_TOL, "rel_tol": cases.REL_TOL, "row_sum_tol": cases.ROW_SUM_TOL,
        "preflight_fixtures": list(cases.PREFLIGHT_FIXTURES), "bench_fixtures": list(cases.BENCH_FIXTURES),
        "tile_elements": cases.TILE_ELEMENTS,
    }


def planned_case_names(experiment: str, args, gpu: bool) -> list[str]:
    """The case names the experiment's plan will build, in order, without building them.

    Mirrors the selection in bench/experiment_a.py and experiment_b.py; run_experiment
    checks every built case's name against this list, so a drift fails loudly.
    """
    if experiment == "A":
        if getattr(args, "shapes", None):
            shapes = parse_shapes(args.shapes)
        else:
            shapes = list(cases.EXPERIMENT_A_SHAPES if gpu else cases.EXPERIMENT_A_SIM_SHAPES)
        return [f"{rows}x{cols}" for rows, cols in shapes]
    names = [c.name for c in cases.EXPERIMENT_B_CASES] if gpu else [n for n, _ in cases.EXPERIMENT_B_SIM_CASES]
    if getattr(args, "cases", None):
        wanted = args.cases.split(",")
        names = [n for n in names if n in wanted]
    return names


def run_identity(args, gpu: bool) -> dict:
    """The metadata fields that tie a run folder to one configuration."""
    options = {"expect_device": args.expect_device, "no_cudnn": bool(getattr(args, "no_cudnn", False)),
               "no_arrays": bool(getattr(args, "no_arrays", False)), "twins": bool(getattr(args, "twins", False))}
    if getattr(args, "variants", None):  # only then: folders written before --variants existed still resume
        options["variants"] = args.variants
    return {
        "experiment": args.experiment,
        "case_names": planned_case_names(args.experiment, args, gpu),
        "protocol": protocol_constants(),
        "options": options,
    }


# ---------------------------------------------------------------- compatibility

def _get(record: dict, dotted: str):
    value = record
    for key in dotted.split("."):
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


class _Missing:
    def __repr__(self):
        return "(absent)"


_MISSING = _Missing()

#: (metadata key, what it is) compared between the stored and the new metadata.
COMPARED_FIELDS = (
    ("git.commit", "git commit"),
    ("git.dirty", "git working-tree state"),
    ("backend", "backend"),
    ("device.name", "device name"),
    ("device.driver_version", "CUDA driver version"),
    ("cuda_runtime_version", "CUDA runtime version"),
    ("packages.numba", "numba version"),
    ("packages.numba-cuda", "numba-cuda version"),
    ("packages.llvmlite", "llvmlite version"),
    ("packages.numpy", "numpy version"),
    ("packages.cuda-bindings", "cuda-bindings version"),
    ("packages.cuda-python", "cuda-python version"),
    ("packages.nvidia-cudnn-cu12", "nvidia-cudnn-cu12 version"),
    ("packages.nvidia-cudnn-cu13", "nvidia-cudnn-cu13 version"),
    ("python", "Python version"),
    ("experiment", "experiment"),
    ("seed", "seed"),
    ("case_names", "case list"),
    ("options", "options"),
    ("variants", "registered variants (--variants) and their source files"),
    ("protocol", "protocol constants"),
)


def check_compatible(stored: dict | None, current: dict) -> None:
    """Raise :class:`ResumeRefused` naming every difference between the two metadata records."""
    if not stored:
        raise ResumeRefused("the folder has no metadata.json: nothing to resume")
    problems = []
    commit = _get(current, "git.commit")
    if commit in (None, _MISSING, "unknown"):
        problems.append("the current git commit is unknown (no .git and no NUMBA_SOFTMAX_COMMIT), so the code "
                        "cannot be shown to be the one that wrote the folder")
    if _get(current, "git.dirty") is True or _get(stored, "git.dirty") is True:
        problems.append("a working tree with uncommitted changes (git.dirty) wrote or would continue the run; "
                        "the commit then does not identify the code")
    for key, label in COMPARED_FIELDS:
        old, new = _get(stored, key), _get(current, key)
        if old != new:
            problems.append(f"{label} differs ({key}): folder has {_short(old)}, this run has {_short(new)}")
    if problems:
        raise ResumeRefused("cannot resume: " + "; ".join(problems))


def check_compatible_after_plan(stored: dict, current: dict) -> None:
    """Fields the experiment plan fills (the cuDNN library actually loaded)."""
    if _get(stored, "cudnn") != _get(current, "cudnn"):
        raise ResumeRefused(f"cannot resume: cuDNN differs: folder has {_short(_get(stored, 'cudnn'))}, "
                            f"this run has {_short(_get(current, 'cudnn'))}")


def _short(value) -> str:
    text = repr(value) if isinstance(value, _Missing) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 300 else text[:300] + "..."


# ---------------------------------------------------------------- progress

@dataclass
class ResumePlan:
    completed: list[str]
    interrupted: list[str]
    to_run: list[str]
    torn_files: list[str] = field(default_factory=list)


def read_jsonl_lenient(path: Path) -> tuple[list[dict], list[str]]:
    """Records of a jsonl file, plus lines that are not whole records.

    Only the last line can be torn (a process killed mid-write); a malformed line
    elsewhere is corruption this module refuses to repair.
    """
    if not path.exists():
        return [], []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # b"" when the file ends with a newline
    records = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ResumeRefused(f"cannot resume: {path.name} line {lineno} is not valid JSON ({exc}); "
                                "only a torn last line can be repaired") from exc
    return records, ([tail.decode("utf-8", "replace")] if tail.strip() else [])


def plan_resume(folder: Path, case_names: list[str]) -> ResumePlan:
    """Which cases are done, which were interrupted, which remain (in the planned order)."""
    progress, _torn = read_jsonl_lenient(folder / PROGRESS)
    status: dict[str, dict] = {}
    for record in progress:
        name = record.get("case")
        if name not in case_names:
            raise ResumeRefused(f"cannot resume: {PROGRESS} names case {name!r}, which is not in the case list "
                                f"{case_names}")
        if record.get("completed") is not True and record.get("stopped_by") == STOPPED_BY_REQUIRED_CHECK:
            raise ResumeRefused(
                f"cannot resume: case {name!r} failed a required check; that failure is this run's result "
                "and stays in the folder. Investigate it, then start a new run folder")
        if name in status and status[name].get("completed") is True:
            raise ResumeRefused(f"cannot resume: {PROGRESS} has case {name!r} after it was completed")
        status[name] = record
    if any(r.get("completed") is not True and "stopped_by" not in r for r in status.values()):
        # A record written before stopped_by existed: a failed case cannot be told from a crash.
        bad = [n for n, r in status.items() if r.get("completed") is not True and "stopped_by" not in r]
        raise ResumeRefused(f"cannot resume: case(s) {bad} stopped without completing and the record does not "
                            "say why (a required-check failure must not be re-run)")
    completed = [n for n in case_names if status.get(n, {}).get("completed") is True]
    present = cases_with_records(folder)
    interrupted = [n for n in case_names if n not in completed and (n in present or n in status)]
    torn = [p.name for p in sorted(folder.glob("*.jsonl")) if read_jsonl_lenient(p)[1]]
    return ResumePlan(completed=completed, interrupted=interrupted,
                      to_run=[n for n in case_names if n not in completed], torn_files=torn)


def cases_with_records(folder: Path) -> set[str]:
    names = set()
    for path in sorted(folder.glob("*.jsonl")):
        records, _ = read_jsonl_lenient(path)
        names.update(str(r["case"]) for r in records if isinstance(r, dict) and "case" in r)
    return names


# ---------------------------------------------------------------- dropping a partial case

def drop_partial_cases(folder: Path, cases: list[str], experiment: str, *, stamp: str | None = None) -> dict:
    """Remove every record and file of ``cases`` (none of them completed); back up first.

    Each rewritten jsonl file is copied to ``resume_backup/<stamp>/`` before the filtered
    version replaces it atomically; a torn last line is dropped the same way. The cases'
    arrays and graph DOT files are moved into the backup. Returns what was done.
    """
    stamp = stamp or datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    backup = folder / BACKUP_FOLDER / stamp
    drop = set(cases)
    done = {"backup": str(backup.relative_to(folder)), "rewritten": {}, "moved": []}
    for path in sorted(folder.glob("*.jsonl")):
        records, torn = read_jsonl_lenient(path)
        kept = [r for r in records if not (isinstance(r, dict) and str(r.get("case")) in drop)]
        if len(kept) == len(records) and not torn:
            continue
        backup.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, backup / path.name)
        _atomic_write_jsonl(path, kept)
        done["rewritten"][path.name] = {"dropped_records": len(records) - len(kept), "dropped_torn_lines": len(torn)}
    for name in sorted(drop):
        leftovers = [folder / "arrays" / experiment / name]
        leftovers += sorted((folder / "graphs").glob(f"{experiment}_{name}_*.dot"))
        for item in leftovers:
            if not item.exists():
                continue
            rel = item.relative_to(folder)
            destination = backup / rel
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(item), str(destination))
            done["moved"].append(rel.as_posix())
    return done


def _atomic_write_jsonl(path: Path, records: list[dict]) -> None:
    atomic_write_text(path, "".join(_dumps(r, indent=None) + "\n" for r in records))


# ---------------------------------------------------------------- metadata of a resumed run

SESSION_KEYS = ("started_utc", "argv", "hostname", "platform", "device", "nvidia_smi", "stopped")


def merged_metadata(stored: dict, current: dict, plan: ResumePlan, dropped: dict) -> dict:
    """The folder's metadata stays the first session's; each resume appends its own session record."""
    metadata = dict(stored)
    session = {key: current[key] for key in SESSION_KEYS if key in current and key != "stopped"}
    session.update(skipped_completed=plan.completed, redone_interrupted=plan.interrupted, dropped=dropped)
    if "stopped" in stored:
        session["previous_stop"] = stored["stopped"]
        metadata.pop("stopped")
    metadata.pop("finished_utc", None)
    metadata["resumes"] = list(stored.get("resumes", [])) + [session]
    return metadata
