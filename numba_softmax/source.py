"""The package's own source as one SHA-256 (no Numba import: a harness records it before choosing a backend)."""

import hashlib
import os


def source_digest() -> str:
    """SHA-256 over this package's Python source (relative paths and bytes, in path order): compiled kernels
    and a run's records are this code's only if the digest they record is this one."""
    root = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    paths = sorted(os.path.relpath(os.path.join(folder, name), root)
                   for folder, _dirs, names in os.walk(root) for name in names if name.endswith(".py"))
    for relative in paths:
        digest.update(relative.replace(os.sep, "/").encode() + b"\0")
        with open(os.path.join(root, relative), "rb") as f:
            digest.update(f.read() + b"\0")
    return digest.hexdigest()
