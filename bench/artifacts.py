"""Run folder: the only place a benchmark run writes its results.

Writes are atomic (temp file + os.replace) or append-and-fsync, so a run killed
mid-case leaves every completed record readable. A run never silently reuses a
folder that already holds results, because mixing two runs' files would make the
artifacts unreviewable.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import datetime
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

HASH_CHUNK_BYTES = 1 << 20


def default_run_folder(kind: str) -> str:
    """``runs/<UTC time>-<kind>``: where a command writes when no ``--out`` is given."""
    return os.path.join("runs", datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + kind)


def to_jsonable(obj):
    """Convert numpy scalars/arrays, paths, tuples and dataclasses to plain JSON types.

    Done recursively (including dict keys) because json's `default=` hook never
    sees dict keys or numpy floats that subclass float.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, dict):
        return {_json_key(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return to_jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _json_key(key) -> str:
    """JSON keys are strings; convert now (as json would) so sort_keys never compares int with str."""
    if isinstance(key, np.generic):
        key = key.item()
    return key if isinstance(key, str) else json.dumps(key)


def _dumps(obj, *, indent: int | None) -> str:
    # NaN stays allowed (Python's json reads it back): a failed correctness record
    # with max_abs_err = NaN must still be written, not lost to a serializer error.
    return json.dumps(to_jsonable(obj), indent=indent, sort_keys=True)


class RunFolder:
    """A directory holding one run's artifacts; relative paths only, no escaping it."""

    def __init__(self, path: str | os.PathLike, *, resume: bool = False) -> None:
        self.path = Path(path)
        if self.path.exists():
            if not self.path.is_dir():
                raise NotADirectoryError(f"RunFolder: {self.path} exists and is not a directory")
            if any(self.path.iterdir()) and not resume:
                raise FileExistsError(
                    f"RunFolder: {self.path} is not empty; pass resume=True to continue that run"
                )
        self.path.mkdir(parents=True, exist_ok=True)

    def path_of(self, relpath: str | os.PathLike) -> Path:
        """Absolute path of a file inside the run; rejects absolute paths and '..'."""
        rel = Path(relpath)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"RunFolder: {relpath!r} must be a relative path inside the run folder")
        return self.path / rel

    def write_json(self, name: str, obj) -> Path:
        """Write JSON atomically, so a reader never sees a half-written file."""
        text = _dumps(obj, indent=2) + "\n"
        return self._atomic_write(name, lambda f: f.write(text.encode("utf-8")))

    def write_text(self, relpath: str, text: str) -> Path:
        """Write a text file atomically (UTF-8)."""
        return self._atomic_write(relpath, lambda f: f.write(text.encode("utf-8")))

    def save_array(self, relpath: str, array: np.ndarray) -> Path:
        """np.save an array atomically; '.npy' is appended if missing (as np.save would)."""
        if not str(relpath).endswith(".npy"):
            relpath = f"{relpath}.npy"
        array = np.asarray(array)
        return self._atomic_write(relpath, lambda f: np.save(f, array, allow_pickle=False))

    def append_jsonl(self, name: str, record) -> None:
        """Append one JSON object as one line, then flush and fsync.

        Each line is durable before this returns, so a crash loses at most the
        line being written. A file whose last line is torn (no trailing newline)
        is refused, because appending to it would corrupt the next record too.
        """
        target = self.path_of(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        line = _dumps(record, indent=None)  # json escapes newlines, so this is one line
        with open(target, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() > 0:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    raise ValueError(f"append_jsonl: {target} ends with a torn line; inspect it first")
            f.write(line.encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())

    def read_jsonl(self, name: str) -> list[dict]:
        """Read every line as JSON (``name`` or its ``name.gz``, :func:`read_records`); a malformed
        line raises with its line number, a missing file with its name."""
        records = read_records(self.path, name)
        if records is None:
            raise FileNotFoundError(f"{self.path}: no {name} (nor {name}.gz)")
        return records

    def _atomic_write(self, relpath: str, write: Callable) -> Path:
        return atomic_write(self.path_of(relpath), write)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(target: str | os.PathLike, write: Callable) -> Path:
    """Write ``target`` through a temp file in its folder, fsync'd, then os.replace: a reader (or a
    crash) sees the old file or the new one, never half of one. ``write(f)`` gets the binary file."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file 0600; run files are 0644 under umask 022
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(target: str | os.PathLike, text: str) -> Path:
    return atomic_write(target, lambda f: f.write(text.encode("utf-8")))


def manifest(path: str | os.PathLike) -> list[dict]:
    """List every file under `path` with its size and SHA-256, sorted by relative path.

    Files are hashed in chunks so multi-GiB inputs/outputs never load into memory.
    Paths are POSIX-style and relative so the manifest is portable across machines.
    """
    root = Path(path)
    if not root.is_dir():
        raise NotADirectoryError(f"manifest: {root} is not a directory")
    entries = []
    for dirpath, _dirnames, filenames in os.walk(root):
        for filename in filenames:
            full = Path(dirpath) / filename
            entries.append({
                "path": full.relative_to(root).as_posix(),
                "bytes": full.stat().st_size,
                "sha256": _sha256_of(full),
            })
    entries.sort(key=lambda e: e["path"])
    return entries


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------- what a command may touch

METADATA_NAME = "metadata.json"
MANIFEST_NAME = "manifest.json"


class NotARunFolder(ValueError):
    """A command that acts on a run folder was given something else; nothing was created."""


def require_run_folder(path: str | os.PathLike, command: str) -> Path:
    """The folder ``path`` if it is a run folder (holds metadata.json); otherwise NotARunFolder."""
    folder = Path(path)
    if not folder.exists():
        raise NotARunFolder(f"{command}: {folder} does not exist; give a run folder (one holding {METADATA_NAME})")
    if not folder.is_dir():
        raise NotARunFolder(f"{command}: {folder} is not a folder; give a run folder (one holding {METADATA_NAME})")
    if not (folder / METADATA_NAME).is_file():
        raise NotARunFolder(f"{command}: {folder} holds no {METADATA_NAME}, so it is not a run folder")
    return folder


def recorded_files(path: str | os.PathLike) -> dict[str, str]:
    """path -> sha256 of every file the folder's manifest.json records ({} without a manifest)."""
    target = Path(path) / MANIFEST_NAME
    if not target.is_file():
        return {}
    document = json.loads(target.read_text(encoding="utf-8"))
    return {entry["path"]: entry["sha256"] for entry in document.get("files", [])}


class ProtectedFiles(FileExistsError):
    """A write would replace evidence (a different file already there); nothing was written."""

    @staticmethod
    def describe(folder, names, count=None) -> str:
        count = len(names) if count is None else count
        shown = ", ".join(names) + (f" (and {count - len(names)} more)" if count > len(names) else "")
        return f"{folder}/{MANIFEST_NAME} records {count} file(s) by hash ({shown})"


def check_replaceable(folder: str | os.PathLike, files: dict[str, bytes], *, force: bool = False,
                      remedy: str = "pass --out DIR to write elsewhere, or --force to replace them") -> list[str]:
    """Refuse to replace existing files with different bytes unless ``force``; return what would change.

    ``files``: path relative to ``folder`` -> the new bytes. A file the folder's manifest.json
    records is evidence someone hashed; any other existing file is evidence this command did not
    write now. Either way a different version replaces it only when asked.
    """
    folder = Path(folder)
    recorded = recorded_files(folder)
    changed = [rel for rel, data in sorted(files.items())
               if (folder / rel).is_file() and (folder / rel).read_bytes() != data]
    if changed and not force:
        hashed = [rel for rel in changed if rel in recorded]
        why = (f"{', '.join(hashed)} recorded by hash in {MANIFEST_NAME}" if hashed
               else "files already there")
        raise ProtectedFiles(f"{folder}: would replace {', '.join(changed)} ({why}) with different content; "
                             f"{remedy}")
    return changed


def read_records(folder: str | os.PathLike, name: str) -> list[dict] | None:
    """Records of ``name`` (a .jsonl file) or of its gzip-compressed ``name.gz``; None if neither exists.

    Committed runs store their largest file compressed (timings.jsonl.gz); both are read the
    same way. Both present is ambiguous and refused.
    """
    plain, packed = Path(folder) / name, Path(folder) / f"{name}.gz"
    if plain.is_file() and packed.is_file():
        raise ValueError(f"{folder}: both {name} and {name}.gz exist; keep one of them")
    if plain.is_file():
        text, source = plain.read_text(encoding="utf-8"), name
    elif packed.is_file():
        with gzip.open(packed, "rt", encoding="utf-8") as f:
            text, source = f.read(), f"{name}.gz"
    else:
        return None
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{folder}/{source} line {lineno} is not valid JSON: {exc}") from exc
    return records
