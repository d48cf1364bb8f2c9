"""modal_app.py without network: the functions' Modal configuration, and the GPU body calling bench.cli.main."""

import inspect
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

modal = pytest.importorskip("modal", reason="modal is not installed (pip install -e '.[modal]' or '.[test]')")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
import modal_app  # noqa: E402

EXPECTED_GPU_OPTIONS = {"gpu": "H100!", "timeout": 900, "retries": 0, "max_containers": 1, "min_containers": 0,
                        "buffer_containers": 0, "scaledown_window": 2, "single_use_containers": True}


def _impl(function):
    """The _Function behind Modal's blocking wrapper (where Modal keeps spec and function info)."""
    from modal._utils.async_utils import synchronizer

    return synchronizer._translate_in(function)


def _loader_settings(function):
    """Arguments Modal captured for FunctionCreate (autoscaler settings), read from its loader closure."""
    load = getattr(_impl(function), "_load", None)
    if load is None or load.__closure__ is None:
        return {}
    return dict(zip(load.__code__.co_freevars, [c.cell_contents for c in load.__closure__], strict=True))


def _registered(app):
    impl = _impl(app)
    state = getattr(impl, "_local_state", None)
    return dict(getattr(state, "functions", {}))


def test_gpu_function_options_are_the_protocols():
    assert modal_app.GPU_FUNCTION_OPTIONS == EXPECTED_GPU_OPTIONS


def test_gpu_function_as_modal_recorded_it():
    impl = _impl(modal_app.run_experiments)
    assert impl._spec.gpus == "H100!"
    info = impl._function_info
    assert info.gpus == [("H100!", 1)]
    assert info.timeout == 900
    assert info.max_retries == 0
    assert info.single_use_containers is True
    assert set(info.volumes) == {modal_app.VOLUME_MOUNT}
    assert info.volumes[modal_app.VOLUME_MOUNT].name == modal_app.VOLUME_NAME
    settings = _loader_settings(modal_app.run_experiments)
    if "autoscaler_settings" not in settings:
        pytest.skip("this modal version keeps its autoscaler settings elsewhere; GPU_FUNCTION_OPTIONS was checked")
    autoscaler = settings["autoscaler_settings"]
    assert (autoscaler.min_containers, autoscaler.max_containers, autoscaler.buffer_containers,
            autoscaler.scaledown_window) == (0, 1, 0, 2)


def test_only_the_benchmark_function_gets_a_gpu():
    registered = _registered(modal_app.app)
    if registered:
        assert set(registered) == {"prepare", "run_experiments", "package"}
    for function in (modal_app.prepare, modal_app.package):
        impl = _impl(function)
        assert impl._spec.gpus is None and impl._function_info.gpus == []
        assert impl._function_info.max_retries == 0
        assert impl._function_info.volumes[modal_app.VOLUME_MOUNT].name == modal_app.VOLUME_NAME


def test_the_image_compiles_ptx_on_the_cpu_builder():
    source = inspect.getsource(modal_app)
    assert "python -m bench ptx --out" in source and ".run_commands(" in source
    assert "python -m bench build-kernels --out {KERNELS_IN_IMAGE}" in source
    assert "nvidia-cudnn-cu12==9.10.2.21" in modal_app._requirements()
    assert any(r.startswith("matplotlib") for r in modal_app._requirements())


def test_local_entrypoint_is_registered():
    entrypoints = _impl(modal_app.app)._local_state.local_entrypoints
    assert set(entrypoints) == {"main"}


class _FakeVolume:
    def __init__(self):
        self.commits = 0
        self.reloads = 0

    def commit(self):
        self.commits += 1

    def reload(self):
        self.reloads += 1


@pytest.fixture
def fake_volume(tmp_path, monkeypatch):
    volume = _FakeVolume()
    monkeypatch.setattr(modal_app, "VOLUME_MOUNT", str(tmp_path / "vol"))
    monkeypatch.setattr(modal_app, "runs_volume", volume)
    monkeypatch.delenv("NUMBA_SOFTMAX_COMMIT", raising=False)
    return volume


def test_gpu_body_is_bench_cli_main_and_commits_per_case(fake_volume, tmp_path, monkeypatch):
    import bench.cli

    calls = []

    def fake_main(argv, *, after_case=None):
        calls.append(list(argv))
        after_case("balanced-128", True)
        after_case("ragged-128", True)
        return 0

    monkeypatch.setattr(bench.cli, "main", fake_main)
    assert "bench.cli.main(" in inspect.getsource(_impl(modal_app.run_experiments)._raw_f)
    raw = _impl(modal_app.run_experiments)._raw_f
    results = raw(["A", "B"], "r1", "abc123")
    out = str(tmp_path / "vol" / "r1" / "expB")
    out_a = str(tmp_path / "vol" / "r1" / "expA")
    prebuilt = ["--prebuilt", modal_app.KERNELS_IN_IMAGE, "--no-summary"]
    assert calls == [["--experiment", "A", "--expect-device", "H100", *prebuilt, "--out", out_a],
                     ["--experiment", "B", "--expect-device", "H100", *prebuilt, "--trace", "--out", out]]
    assert fake_volume.commits == 6  # after each case, and once at the end of each experiment
    result = results[1]
    assert [r["experiment"] for r in results] == ["A", "B"]
    assert result["status"] == 0 and result["resumed"] is False and len(result["cases"]) == 2
    import os
    assert os.environ["NUMBA_SOFTMAX_COMMIT"] == "abc123"

    # the same run name again continues the run in its folder
    Path(out).mkdir(parents=True)
    (Path(out) / "metadata.json").write_text("{}")
    assert raw(["B"], "r1", "abc123")[0]["resumed"] is True
    assert calls[-1] == ["--experiment", "B", "--expect-device", "H100", *prebuilt, "--trace", "--resume", out]


def test_gpu_body_reports_a_stopped_run(fake_volume, monkeypatch):
    import bench.cli

    def failing_main(argv, *, after_case=None):
        after_case("balanced-128", False)
        return 1

    monkeypatch.setattr(bench.cli, "main", failing_main)
    results = _impl(modal_app.run_experiments)._raw_f(["B", "A"], "r2", "abc")
    assert len(results) == 1  # the stopped experiment ends the call: A is not run
    result = results[0]
    assert result["status"] == 1 and result["cases"] == [{"case": "balanced-128", "completed": False}]
    assert fake_volume.commits == 2


def test_package_reports_and_bundles_on_cpu(fake_volume, tmp_path):
    from bench.artifacts import RunFolder

    run = RunFolder(tmp_path / "vol" / "r3" / "expA")
    run.write_json("metadata.json", {"experiment": "A", "timing_disabled_reason": "test"})
    run.append_jsonl("cases.jsonl", {"experiment": "A", "case": "1x128", "passed": True})
    run.save_array("arrays/A/1x128/input_random.npy", [1.0])
    data = _impl(modal_app.package)._raw_f("r3")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        names = set(tar.getnames())
        omitted = tar.extractfile("r3/omitted.txt").read().decode()
    assert {"r3/manifest.json", "r3/expA/summary.md", "r3/expA/metadata.json", "r3/expA/cases.jsonl"} <= names
    assert "expA/arrays/A/1x128/input_random.npy" in omitted
    assert (tmp_path / "vol" / "bundles" / "r3.review.tar.gz").read_bytes() == data
    assert fake_volume.reloads == 1 and fake_volume.commits == 1
    manifest = json.loads((tmp_path / "vol" / "r3" / "manifest.json").read_text())
    assert "expA/summary.md" in [e["path"] for e in manifest["files"]]
    # a resumed run is packaged again: its own manifest and archive are replaced, not refused
    run.append_jsonl("cases.jsonl", {"experiment": "A", "case": "7x781", "passed": True})
    again = _impl(modal_app.package)._raw_f("r3")
    assert again != data and "7x781" in (tmp_path / "vol" / "r3" / "expA" / "summary.md").read_text()


def test_prepare_copies_source_ptx_and_kernels(fake_volume, tmp_path, monkeypatch):
    source, ptx, kernels = tmp_path / "src", tmp_path / "ptx", tmp_path / "kernels"
    (source / "bench").mkdir(parents=True)
    (source / "bench" / "cli.py").write_text("# cli\n")
    ptx.mkdir()
    (ptx / "policy.json").write_text("{}")
    (kernels / "cubin").mkdir(parents=True)
    (kernels / "kernels.json").write_text("{}")
    (kernels / "cubin" / "k.cubin").write_bytes(b"\x7fELF")
    monkeypatch.setattr(modal_app, "REPO_IN_IMAGE", str(source))
    monkeypatch.setattr(modal_app, "PTX_IN_IMAGE", str(ptx))
    monkeypatch.setattr(modal_app, "KERNELS_IN_IMAGE", str(kernels))
    _impl(modal_app.prepare)._raw_f("r4")
    base = tmp_path / "vol" / "r4"
    assert (base / "source" / "bench" / "cli.py").exists() and (base / "ptx" / "policy.json").exists()
    assert (base / "kernels" / "cubin" / "k.cubin").read_bytes() == b"\x7fELF"
    assert fake_volume.commits == 1
