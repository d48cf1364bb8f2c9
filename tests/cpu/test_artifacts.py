"""Run folder durability, JSON conversion and the hash manifest."""

import hashlib
import json
import os
import stat

import numpy as np
import pytest

from bench import artifacts
from bench.artifacts import RunFolder, manifest


def test_creates_missing_folder_and_accepts_empty_one(tmp_path):
    RunFolder(tmp_path / "new" / "run")
    assert (tmp_path / "new" / "run").is_dir()
    (tmp_path / "empty").mkdir()
    RunFolder(tmp_path / "empty")


def test_refuses_non_empty_folder_unless_resuming(tmp_path):
    (tmp_path / "old.txt").write_text("previous run")
    with pytest.raises(FileExistsError, match="not empty"):
        RunFolder(tmp_path)
    RunFolder(tmp_path, resume=True)
    assert (tmp_path / "old.txt").read_text() == "previous run"


def test_write_json_converts_numpy_and_leaves_no_temp_file(tmp_path):
    run = RunFolder(tmp_path)
    obj = {"f32": np.float32(1.5), "i64": np.int64(3), "arr": np.arange(3, dtype=np.int32),
           "flag": np.bool_(True), "nested": [np.float64(0.25), (1, 2)], np.int64(7): "key"}
    run.write_json("metadata.json", obj)
    run.write_json("metadata.json", obj)  # overwrite goes through os.replace too
    loaded = json.loads((tmp_path / "metadata.json").read_text())
    assert loaded == {"f32": 1.5, "i64": 3, "arr": [0, 1, 2], "flag": True,
                      "nested": [0.25, [1, 2]], "7": "key"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metadata.json"]


def test_append_jsonl_survives_reopen(tmp_path):
    run = RunFolder(tmp_path)
    run.append_jsonl("timings.jsonl", {"round": np.int64(0), "value_us": np.float32(2.5)})
    run.append_jsonl("timings.jsonl", {"round": 1, "value_us": 3.0})
    reopened = RunFolder(tmp_path, resume=True)
    reopened.append_jsonl("timings.jsonl", {"round": 2, "value_us": 4.0})
    assert reopened.read_jsonl("timings.jsonl") == [
        {"round": 0, "value_us": 2.5}, {"round": 1, "value_us": 3.0}, {"round": 2, "value_us": 4.0}]
    assert (tmp_path / "timings.jsonl").read_text().count("\n") == 3


def test_append_jsonl_refuses_a_torn_last_line(tmp_path):
    run = RunFolder(tmp_path)
    (tmp_path / "cases.jsonl").write_text('{"a": 1}\n{"a": ')
    with pytest.raises(ValueError, match="torn"):
        run.append_jsonl("cases.jsonl", {"a": 2})
    with pytest.raises(ValueError, match="line 2"):
        run.read_jsonl("cases.jsonl")


def test_save_array_creates_subfolders_and_round_trips(tmp_path):
    run = RunFolder(tmp_path)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    written = run.save_array("inputs/A/4096x1024/fixture0", x)
    assert written == tmp_path / "inputs/A/4096x1024/fixture0.npy"
    y = np.load(written)
    assert y.dtype == np.float32 and np.array_equal(x, y)


def test_write_text_and_path_of_stay_inside_the_folder(tmp_path):
    run = RunFolder(tmp_path / "run")
    run.write_text("notes/readme.md", "hello\n")
    assert run.path_of("notes/readme.md").read_text() == "hello\n"
    for bad in ["../escape.txt", "a/../../escape.txt", str(tmp_path / "abs.txt"), ""]:
        with pytest.raises(ValueError):
            run.path_of(bad)


def test_manifest_matches_hashlib_and_is_sorted(tmp_path, monkeypatch):
    monkeypatch.setattr(artifacts, "HASH_CHUNK_BYTES", 1000)  # force multi-chunk hashing
    files = {"b.txt": b"second", "a/inner.bin": bytes(range(256)) * 10, "z/empty": b""}
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    entries = manifest(tmp_path)
    assert [e["path"] for e in entries] == ["a/inner.bin", "b.txt", "z/empty"]
    for e in entries:
        data = files[e["path"]]
        assert e["bytes"] == len(data)
        assert e["sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_run_file_gets_the_same_mode_under_the_umask(tmp_path, umask):
    # summary.md, metadata.json and the plots are written atomically (a temp file replaced); the jsonl
    # records are appended: all of them must end up 0666 & ~umask, like any file the process creates.
    previous = os.umask(umask)
    try:
        run = RunFolder(tmp_path / "run")
        run.write_json("metadata.json", {"a": 1})
        run.write_text("summary.md", "# summary\n")
        artifacts.atomic_write(run.path_of("plots/a.png"), lambda f: f.write(b"png"))
        run.append_jsonl("cases.jsonl", {"case": "1x128"})
    finally:
        os.umask(previous)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run.path.rglob("*") if p.is_file()}
    assert modes == dict.fromkeys(("metadata.json", "summary.md", "a.png", "cases.jsonl"), 0o666 & ~umask)
