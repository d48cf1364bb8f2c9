"""python -m bench bundle: manifest hashes, the exact omitted list, deterministic archive bytes."""

import gzip
import hashlib
import json
import os
import tarfile

import pytest

from bench.artifacts import NotARunFolder, ProtectedFiles
from bench.bundle import DEFAULT_MAX_FILE_BYTES, FIXED_MTIME, bundle, plan_bundle
from bench.cli import main as cli_main

SMALL_CAP = 4096


def _write(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run-A"
    _write(root, "summary.md", "# Run summary\n")
    _write(root, "metadata.json", json.dumps({"seed": 1}))
    for name in ("cases.jsonl", "bitwise.jsonl", "graphs.jsonl", "rounds.jsonl", "progress.jsonl"):
        _write(root, name, json.dumps({"case": "1x128", "file": name}) + "\n")
    _write(root, "timings.jsonl", "".join(json.dumps({"round": i, "value_us": i * 1.5}) + "\n" for i in range(400)))
    _write(root, "plots/A_latency.png", b"\x89PNG\r\n\x1a\n" + bytes(range(200)))
    _write(root, "ncu/A_1x128_fused.ncu-rep", b"small report")
    _write(root, "ncu/A_1x128_fused.csv", '"ID","Process ID"\n')
    # raw files that must stay out, each for its own reason
    _write(root, "arrays/A/1x128/input_random.npy", b"\x93NUMPY" + bytes(1000))
    _write(root, "graphs/A_1x128_fused.dot", "digraph {}\n")
    _write(root, "ncu/A_4096x4096_stages.ncu-rep", bytes(SMALL_CAP + 1))
    _write(root, "resume_backup/20261130T000000Z/cases.jsonl", "{}\n")
    return root


EXPECTED_OMITTED = {
    "arrays/A/1x128/input_random.npy": "raw file type",
    "graphs/A_1x128_fused.dot": "raw file type",
    "ncu/A_4096x4096_stages.ncu-rep": f"larger than {SMALL_CAP} bytes",
    "resume_backup/20261130T000000Z/cases.jsonl": "raw copy in resume_backup/",
}


def _files(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root).replace(os.sep, "/")] = open(full, "rb").read()
    return out


def _members(archive):
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: (m, tar.extractfile(m).read()) for m in tar.getmembers()}


def test_manifest_lists_every_file_with_its_true_sha256(run_dir, tmp_path):
    bundle(run_dir, tmp_path / "b.tar.gz", max_file_bytes=SMALL_CAP)
    files = _files(run_dir)
    document = json.loads(files.pop("manifest.json"))
    assert document["file_count"] == len(files) == len(document["files"])
    for entry in document["files"]:
        data = files[entry["path"]]
        assert entry["bytes"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    assert [e["path"] for e in document["files"]] == sorted(files)


def test_omitted_list_is_exact(run_dir, tmp_path):
    archive = tmp_path / "b.tar.gz"
    bundle(run_dir, archive, max_file_bytes=SMALL_CAP)
    text = _members(archive)["run-A/omitted.txt"][1].decode()
    rows = [line.split("\t") for line in text.splitlines() if not line.startswith("#")]
    files = _files(run_dir)
    assert {r[0]: r[3] for r in rows} == EXPECTED_OMITTED
    for path, size, sha, _reason in rows:
        assert int(size) == len(files[path]) and sha == hashlib.sha256(files[path]).hexdigest()


def test_archive_holds_the_evidence_and_compressed_timings(run_dir, tmp_path):
    archive = tmp_path / "b.tar.gz"
    result = bundle(run_dir, archive, max_file_bytes=SMALL_CAP)
    members = _members(archive)
    files = _files(run_dir)
    expected = {f"run-A/{p}" for p in files if p not in EXPECTED_OMITTED and p != "timings.jsonl"}
    expected |= {"run-A/timings.jsonl.gz", "run-A/omitted.txt"}
    assert set(members) == expected
    assert gzip.decompress(members["run-A/timings.jsonl.gz"][1]) == files["timings.jsonl"]
    for name, (info, data) in members.items():
        rel = name.split("/", 1)[1]
        if rel in files:
            assert data == files[rel], name
        assert info.mtime == FIXED_MTIME and info.uid == 0 and info.gid == 0 and info.uname == ""
    with tarfile.open(archive, "r:gz") as tar:
        names = tar.getnames()
    assert names == sorted(names)
    assert result["omitted"] == len(EXPECTED_OMITTED)
    assert result["included"] == len(expected) - 2  # all but manifest.json and omitted.txt


def test_archive_bytes_are_deterministic(run_dir, tmp_path):
    first, second = tmp_path / "one.tar.gz", tmp_path / "two.tar.gz"
    bundle(run_dir, first, max_file_bytes=SMALL_CAP)
    for path in run_dir.rglob("*"):  # new mtimes must not change the bytes
        os.utime(path, (1_900_000_000, 1_900_000_000))
    bundle(run_dir, second, max_file_bytes=SMALL_CAP)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes()[4:8] == bytes(4)  # gzip header MTIME field


def test_content_change_changes_the_archive_and_manifest(run_dir, tmp_path):
    bundle(run_dir, tmp_path / "one.tar.gz", max_file_bytes=SMALL_CAP)
    manifest_before = (run_dir / "manifest.json").read_bytes()
    (run_dir / "cases.jsonl").write_text('{"case": "1x128", "changed": true}\n')
    with pytest.raises(ProtectedFiles, match="changed since it was hashed"):  # the old manifest is evidence
        bundle(run_dir, tmp_path / "two.tar.gz", max_file_bytes=SMALL_CAP)
    assert (run_dir / "manifest.json").read_bytes() == manifest_before and not (tmp_path / "two.tar.gz").exists()
    bundle(run_dir, tmp_path / "two.tar.gz", max_file_bytes=SMALL_CAP, force=True)
    assert (tmp_path / "one.tar.gz").read_bytes() != (tmp_path / "two.tar.gz").read_bytes()
    assert (run_dir / "manifest.json").read_bytes() != manifest_before


def test_archive_inside_the_folder_is_not_hashed(run_dir):
    bundle(run_dir, run_dir / "review.tar.gz", max_file_bytes=SMALL_CAP)
    bundle(run_dir, run_dir / "review.tar.gz", max_file_bytes=SMALL_CAP)
    paths = [e["path"] for e in json.loads((run_dir / "manifest.json").read_text())["files"]]
    assert "review.tar.gz" not in paths and "manifest.json" not in paths


def test_plan_rule_on_manifest_entries():
    big = DEFAULT_MAX_FILE_BYTES + 1
    entries = [{"path": p, "bytes": b, "sha256": "x"} for p, b in
               (("summary.md", 10), ("timings.jsonl", big), ("big.csv", big),
                ("ptx/fused.ptx", 5), ("exp/ptx/policy.json", 5), ("manifest.json", 3))]
    included, omitted = plan_bundle(entries)
    assert [e["path"] for e in included] == ["summary.md", "timings.jsonl", "exp/ptx/policy.json"]
    assert {e["path"]: e["reason"] for e in omitted} == {
        "big.csv": f"larger than {DEFAULT_MAX_FILE_BYTES} bytes", "ptx/fused.ptx": "raw file type"}


def test_cli_bundle(run_dir, tmp_path, capsys):
    archive = tmp_path / "cli.tar.gz"
    assert cli_main(["bundle", str(run_dir), "--out", str(archive), "--max-file-bytes", str(SMALL_CAP)]) == 0
    assert archive.exists() and "4 omitted" in capsys.readouterr().out


@pytest.mark.parametrize("make", ["missing", "no-metadata", "file"])
def test_bundle_acts_only_on_a_run_folder_and_creates_nothing(tmp_path, capsys, make):
    target = tmp_path / "target"
    if make == "no-metadata":
        _write(target, "notes.txt", "not a run")
    elif make == "file":
        _write(tmp_path, "target", "a file")
    before = _files(tmp_path)
    assert cli_main(["bundle", str(target)]) == 2
    assert "error: bundle:" in capsys.readouterr().err
    assert _files(tmp_path) == before and not (tmp_path / "target.bundle.tar.gz").exists()
    with pytest.raises(NotARunFolder):
        bundle(target)


def test_bundle_help_creates_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli_main(["bundle", "--help"])
    assert exc.value.code == 0 and "usage: python -m bench bundle" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_run_folders_is_bundled(run_dir, tmp_path):
    parent = run_dir.parent
    result = bundle(parent, tmp_path / "all.tar.gz", max_file_bytes=SMALL_CAP)
    assert result["files"] == len(_files(run_dir))


def test_an_existing_different_archive_is_not_replaced(run_dir, tmp_path):
    archive = tmp_path / "kept.tar.gz"
    archive.write_bytes(b"someone else's archive")
    with pytest.raises(ProtectedFiles, match="--out FILE"):
        bundle(run_dir, archive, max_file_bytes=SMALL_CAP)
    assert archive.read_bytes() == b"someone else's archive" and not (run_dir / "manifest.json").exists()
