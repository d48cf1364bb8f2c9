"""Hash a run folder and pack a compact review bundle (CPU work, apart from the GPU run).

    python -m bench bundle DIR [--out FILE] [--max-file-bytes N] [--force]

DIR is a run folder (it holds metadata.json) or a folder of run folders (as the Modal app
writes one per experiment). An existing manifest.json or archive is replaced only when its
content would not change, or with ``--force``: a command never overwrites evidence it did not
write.

1. ``DIR/manifest.json``: every file under DIR (path, bytes, sha256; from
   :func:`bench.artifacts.manifest`), the manifest itself excepted.
2. A deterministic ``tar.gz`` (default ``DIR.bundle.tar.gz`` beside DIR) holding, under
   ``<DIR name>/``:

   * the small evidence files, at any depth: ``*.md``, ``*.json``, ``*.jsonl``,
     ``*.jsonl.gz``, ``*.csv``, ``*.txt``, ``*.log``, ``*.png`` (plots), ``*.ncu-rep``;
   * ``timings.jsonl`` gzip-compressed as ``timings.jsonl.gz`` (manifest.json holds the
     sha256 of the uncompressed file);
   * ``manifest.json`` and ``omitted.txt``.

   Everything else (``arrays/*.npy``, graph DOTs, PTX, Nsight Systems captures, resume
   backups, ...) and any file larger than ``--max-file-bytes`` stays out, and
   ``omitted.txt`` lists each one exactly: path, bytes, sha256 and why.

The archive's bytes depend only on the files' contents: members sorted by path, fixed
mtime, uid/gid 0, no user names, gzip header without a name or time.
"""

from __future__ import annotations

import argparse
import fnmatch
import gzip
import io
import json
import os
import sys
import tarfile
from pathlib import Path

from bench.artifacts import (METADATA_NAME, NotARunFolder, ProtectedFiles, atomic_write, check_replaceable, manifest,
                             require_run_folder)

MANIFEST_NAME = "manifest.json"
OMITTED_NAME = "omitted.txt"
TIMINGS_NAME = "timings.jsonl"
#: Every member of the archive carries this mtime (2000-01-01T00:00:00Z), so the bytes never
#: depend on when a file was written.
FIXED_MTIME = 946684800
DEFAULT_MAX_FILE_BYTES = 8 << 20
#: Name patterns (matched against the file name, at any depth) of what the review bundle holds.
INCLUDED_PATTERNS = ("*.md", "*.json", "*.jsonl", "*.jsonl.gz", "*.csv", "*.txt", "*.log", "*.png",
                     "*.ncu-rep")
#: Folders whose files are raw copies kept only in the full run folder.
OMITTED_FOLDERS = ("resume_backup",)


def plan_bundle(entries: list[dict], max_file_bytes: int = DEFAULT_MAX_FILE_BYTES) -> tuple[list[dict], list[dict]]:
    """Split manifest entries into (included, omitted); each omitted entry gets a ``reason``.

    Pure function of the manifest (no file access), so the rule is testable on its own.
    """
    included, omitted = [], []
    for entry in entries:
        path = entry["path"]
        name = path.rsplit("/", 1)[-1]
        if path == MANIFEST_NAME:
            continue
        if path.split("/", 1)[0] in OMITTED_FOLDERS:
            omitted.append(dict(entry, reason=f"raw copy in {path.split('/', 1)[0]}/"))
        elif not any(fnmatch.fnmatchcase(name, pattern) for pattern in INCLUDED_PATTERNS):
            omitted.append(dict(entry, reason="raw file type"))
        elif name != TIMINGS_NAME and entry["bytes"] > max_file_bytes:
            omitted.append(dict(entry, reason=f"larger than {max_file_bytes} bytes"))
        else:
            included.append(entry)
    return included, omitted


def omitted_text(root_name: str, omitted: list[dict], max_file_bytes: int) -> str:
    lines = [
        f"# Files of run folder {root_name!r} NOT in this bundle; they remain in the full run folder.",
        f"# Rule: files named {', '.join(INCLUDED_PATTERNS)} up to {max_file_bytes} bytes are included "
        f"(timings.jsonl gzip-compressed, as timings.jsonl.gz); everything else is listed here.",
        "# manifest.json (in this bundle) lists every file of the run folder with its sha256.",
        f"# {len(omitted)} file(s), {sum(e['bytes'] for e in omitted)} bytes in all.",
        "# path\tbytes\tsha256\treason",
    ]
    lines += [f"{e['path']}\t{e['bytes']}\t{e['sha256']}\t{e['reason']}" for e in omitted]
    return "\n".join(lines) + "\n"


def deterministic_gzip(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz:
        gz.write(data)
    return buffer.getvalue()


def archive_bytes(members: dict[str, bytes]) -> bytes:
    """A tar.gz of ``members`` (archive name -> bytes), sorted, with fixed metadata."""
    tar_buffer = io.BytesIO()
    with tarfile.open(fileobj=tar_buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(members):
            data = members[name]
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = FIXED_MTIME
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(data))
    return deterministic_gzip(tar_buffer.getvalue())


def require_bundle_folder(run_dir: str | os.PathLike) -> Path:
    """A run folder, or a folder whose subfolders include run folders; otherwise NotARunFolder."""
    folder = Path(run_dir)
    if folder.is_dir() and not (folder / METADATA_NAME).is_file():
        if any((child / METADATA_NAME).is_file() for child in folder.iterdir() if child.is_dir()):
            return folder
    return require_run_folder(folder, "bundle")


def bundle(run_dir: str | os.PathLike, out: str | os.PathLike | None = None,
           max_file_bytes: int = DEFAULT_MAX_FILE_BYTES, *, force: bool = False) -> dict:
    """Write DIR/manifest.json and the review archive; return what was done.

    Raises NotARunFolder (nothing written) unless DIR is a run folder or holds run folders,
    and ProtectedFiles (nothing written) when manifest.json or the archive already exists with
    different content and ``force`` is not set.
    """
    root = require_bundle_folder(run_dir).resolve()
    target = Path(out).resolve() if out else root.parent / f"{root.name}.bundle.tar.gz"
    entries = [e for e in manifest(root) if e["path"] != MANIFEST_NAME]
    inside = _relative_inside(target, root)
    if inside is not None:  # an archive written into the folder it packs is not part of the run
        entries = [e for e in entries if e["path"] != inside]
    document = {"root": root.name, "algorithm": "sha256", "files": entries,
                "total_bytes": sum(e["bytes"] for e in entries), "file_count": len(entries)}
    manifest_text = json.dumps(document, indent=2, sort_keys=True) + "\n"

    included, omitted = plan_bundle(entries, max_file_bytes)
    prefix = root.name
    members = {f"{prefix}/{MANIFEST_NAME}": manifest_text.encode("utf-8"),
               f"{prefix}/{OMITTED_NAME}": omitted_text(root.name, omitted, max_file_bytes).encode("utf-8")}
    for entry in included:
        data = (root / entry["path"]).read_bytes()
        name = entry["path"]
        if name.rsplit("/", 1)[-1] == TIMINGS_NAME:
            data, name = deterministic_gzip(data), name + ".gz"
        if f"{prefix}/{name}" in members:
            raise ValueError(f"bundle: two files would be stored as {name!r} (e.g. timings.jsonl and "
                             "timings.jsonl.gz side by side); keep one of them")
        members[f"{prefix}/{name}"] = data
    payload = archive_bytes(members)
    check_replaceable(root, {MANIFEST_NAME: manifest_text.encode("utf-8")}, force=force,
                      remedy="the folder changed since it was hashed: pass --force to hash it again")
    check_replaceable(target.parent, {target.name: payload}, force=force,
                      remedy="pass --out FILE for another archive, or --force to replace it")
    atomic_write(root / MANIFEST_NAME, lambda f: f.write(manifest_text.encode("utf-8")))
    atomic_write(target, lambda f: (f.write(payload), os.fchmod(f.fileno(), 0o644)))  # meant to be read by others
    return {"archive": str(target), "archive_bytes": target.stat().st_size,
            "manifest": str(root / MANIFEST_NAME), "files": len(entries),
            "included": len(included), "omitted": len(omitted),
            "omitted_bytes": sum(e["bytes"] for e in omitted)}


def _relative_inside(path: Path, root: Path) -> str | None:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench bundle", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", help="run folder (holds metadata.json), or a folder holding several")
    parser.add_argument("--out", help="archive path (default: DIR.bundle.tar.gz beside DIR)")
    parser.add_argument("--max-file-bytes", type=int, default=DEFAULT_MAX_FILE_BYTES,
                        help=f"larger files stay out and are listed in omitted.txt (default {DEFAULT_MAX_FILE_BYTES})")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing manifest.json or archive whose content would change")
    args = parser.parse_args(argv)
    try:
        result = bundle(args.dir, args.out, args.max_file_bytes, force=args.force)
    except (NotARunFolder, ProtectedFiles) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"manifest: {result['manifest']} ({result['files']} files hashed)")
    print(f"bundle:   {result['archive']} ({result['archive_bytes']} bytes; {result['included']} files included, "
          f"{result['omitted']} omitted ({result['omitted_bytes']} bytes), listed in {OMITTED_NAME})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
