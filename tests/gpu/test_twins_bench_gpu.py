"""``python -m bench --experiment A|B --twins`` end to end on a GPU, on small cases.

Every twin must be validated by the oracle in both modes, compared bit for bit with its Numba variant
(bitwise.jsonl), timed in the same rounds, and summarized in the Numba / nvcc table. The negative control:
a twin whose output differs from its Numba variant by one ulp (within the oracle's tolerance) must stop
the case before anything is timed. Needs a current reference_cu/build (`python -m bench build-reference`;
skipped with the reason otherwise).
"""

import json
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda


def _device_token():
    name = cuda.get_current_device().name
    return (name.decode() if isinstance(name, bytes) else name).split()[-1]


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def twins_library():
    from bench.reference_build import BUILD_DIR, stale_reason
    from bench.twins import TwinsUnavailable, load_library
    reason = stale_reason(BUILD_DIR)
    if reason is not None:  # --twins loads the checkout's build; a test never writes into the checkout
        pytest.skip(f"reference_cu/build is not current ({reason}): run `python -m bench build-reference` first")
    metadata = {}
    try:
        library = load_library(metadata)
    except TwinsUnavailable as exc:
        pytest.skip(str(exc))
    yield library
    library.close()


def _bench(args):
    # From the test's own working directory (the checkout), as a user runs it: `bench` is imported from
    # there when the package is not installed; every output goes to the --out folder under tmp_path.
    return subprocess.run([sys.executable, "-m", "bench", *args, "--expect-device", _device_token(), "--no-arrays"],
                          capture_output=True, text=True, timeout=900)


def _check_twin_run(out, pairs):
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["twins"]["flags"] and metadata["options"]["twins"] is True
    cases = _records(out / "cases.jsonl")
    assert cases and all(c["passed"] for c in cases)
    bitwise = _records(out / "bitwise.jsonl")
    timings = _records(out / "timings.jsonl")
    summary = (out / "summary.md").read_text()
    twin_table = summary.split("## Numba / nvcc\n", 1)[1].split("\n## ", 1)[0]
    for numba, twin in pairs:
        for mode in ("stream", "graph"):
            assert any(c["variant"] == twin and c["mode"] == mode for c in cases), (twin, mode)
            compared = [b for b in bitwise if b["reference"] == numba and b["variant"] == twin and b["mode"] == mode]
            assert compared and all(b["equal"] for b in compared), (numba, twin, mode)
            assert any(t["variant"] == twin and t["mode"] == mode and t["metric"] == "event_us" for t in timings)
            assert any(f"| {numba} " in line and f"| {twin} " in line and f"| {mode} " in line
                       for line in twin_table.splitlines()), (numba, twin, mode)


def test_experiment_a_with_twins(tmp_path, twins_library):
    out = tmp_path / "runA"
    proc = _bench(["--experiment", "A", "--twins", "--shapes", "1x128,7x781", "--no-cudnn", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check_twin_run(out, [("fused", "fused-nvcc"), ("stages", "stages-nvcc")])


def test_experiment_b_with_twins(tmp_path, twins_library):
    out = tmp_path / "runB"
    proc = _bench(["--experiment", "B", "--twins", "--cases", "balanced-128", "--out", str(out)])
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check_twin_run(out, [("separate", "separate-nvcc"), ("phased", "phased-nvcc"), ("dag", "dag-nvcc")])
    assert "dag-floor-nvcc" not in (out / "timings.jsonl").read_text()


def test_a_twin_that_differs_by_one_ulp_stops_the_case_before_timing(tmp_path, twins_library):
    from bench.artifacts import RunFolder
    from bench.experiment_a import MatrixCase
    from bench.runner import run_case
    from numba_softmax.launch.driver import Stream
    from numba_softmax.oracle import AcceptanceError

    stream = Stream()
    case = MatrixCase((7, 781), stream, gpu=True, twins=twins_library)
    twin = case.variant("fused-nvcc")
    read_back = twin.read_outputs

    def one_ulp_off():
        arrays = read_back()
        arrays["out"] = arrays["out"].copy()
        arrays["out"][3, 5] = np.nextafter(arrays["out"][3, 5], np.float32(1))
        return arrays

    twin.read_outputs = one_ulp_off  # the twin's bits differ; the oracle's tolerance still accepts them
    run = RunFolder(tmp_path / "run")
    with pytest.raises(AcceptanceError, match="fused-nvcc is not bitwise equal to fused"):
        run_case(case, run, stream, gpu=True, seed=1, save_arrays=False)
    assert not (tmp_path / "run" / "timings.jsonl").exists()
    bitwise = _records(tmp_path / "run" / "bitwise.jsonl")
    assert any(b["variant"] == "fused-nvcc" and not b["equal"] for b in bitwise)
    cases = _records(tmp_path / "run" / "cases.jsonl")
    assert any(c["variant"] == "fused-nvcc" and c["passed"] for c in cases)  # the oracle alone would pass it
