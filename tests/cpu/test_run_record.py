"""What a run records about the code that ran: the commit only where the project is the git checkout
itself, the package source's content hash beside it, and per kernel its compile seconds and cache outcome."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.environment import compile_record, git_state
from numba_softmax.launch import kernel_cache
from numba_softmax.source import source_digest

ROOT = Path(__file__).resolve().parents[2]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env=dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                            GIT_COMMITTER_EMAIL="t@t"))


@needs_git
def test_the_checkout_records_its_commit_and_the_source_hash(monkeypatch):
    monkeypatch.delenv("NUMBA_SOFTMAX_COMMIT", raising=False)
    state = git_state(str(ROOT))
    if (ROOT / ".git").exists():
        assert len(state["commit"]) == 40 and state["source"] == "git" and state["dirty"] in (True, False)
    assert state["source_sha256"] == source_digest()


@needs_git
def test_a_tree_inside_another_repository_records_no_commit_of_that_repository(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_SOFTMAX_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "unpacked").mkdir()
    (tmp_path / "unpacked" / "x.txt").write_text("x")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "another project")
    state = git_state(str(tmp_path / "unpacked"))
    assert state["commit"] == "unknown" and state["dirty"] is None and state["source"] is None
    assert git_state(str(tmp_path))["commit"] not in (None, "unknown")  # its own toplevel: that repository's


def test_a_tree_outside_any_repository_has_no_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_SOFTMAX_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    state = git_state(str(tmp_path))
    assert state["commit"] is None and state["source_sha256"] == source_digest()


def test_the_compile_record_sums_this_process_log(monkeypatch):
    monkeypatch.setattr(kernel_cache, "_log", [])
    kernel_cache.record_compile("a(int32)", "miss", 2.5, "k" * 64)
    kernel_cache.record_compile("b(int32)", "hit", 0.01, "h" * 64)
    kernel_cache.record_compile("c(int32)", "uncacheable", 1.0, reason="no stable description")
    record = compile_record()
    assert (record["hits"], record["misses"], record["seconds"]) == (1, 1, 3.51)
    assert [entry["outcome"] for entry in record["kernels"]] == ["miss", "hit", "uncacheable"]
    assert record["kernels"][2]["reason"] == "no stable description"
