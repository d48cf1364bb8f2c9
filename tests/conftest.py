"""One ``pytest`` runs every test this machine can run: CPU, GPU where there is one, and the simulator.

``pytest -m gpu`` on a GPU machine with pytest-xdist runs in one worker process per CPU, at most 16
(``-n 0``: this process; ``backends.gpu_test_workers``).

Numba reads ``NUMBA_ENABLE_CUDASIM`` once, at import: a process is either the Numba CUDA
simulator or the real CUDA target, never both. So the tests come in three kinds:

* plain tests (``tests/cpu``): this process, Numba's real target (PTX compiles without a GPU);
* ``gpu`` tests (``tests/gpu``, and the ``[gpu]`` half of ``tests/kernels``): need a CUDA GPU;
  without one they are skipped, with the reason;
* ``simulator`` tests (``tests/sim``, and the ``[sim]`` half of ``tests/kernels``): run in ONE
  child pytest process with ``NUMBA_ENABLE_CUDASIM=1``, started as soon as the tests start and
  reported here as they finish, each under its own test id with its own outcome (a failure
  with the child's report, a skip with its reason). They are ordered last, so the child runs
  while this process runs the rest.

``NUMBA_ENABLE_CUDASIM=1 pytest ...`` makes this process the simulator: the simulator tests
run here and every other test is skipped with the reason. Everything the tests write goes to
temporary folders.
"""

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from backends import EVIDENCE_ENV, gpu_test_workers
from numba_softmax import backend, device

TESTS = Path(__file__).resolve().parent
#: Set in the simulator child: where it writes its test reports (one JSON object per line).
REPORTS_ENV = "NUMBA_SOFTMAX_SIMULATOR_REPORTS"
#: Where the kernel cache lives (numba_softmax.launch.kernel_cache.default_folder).
CACHE_DIR_ENV = "NUMBA_SOFTMAX_CACHE_DIR"
FOLDER_MARKS = {"sim": "simulator", "gpu": "gpu"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which turns -n into its workers
def pytest_cmdline_main(config):
    if backend.SIMULATOR or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    workers = gpu_test_workers(config.option.markexpr, getattr(config.option, "numprocesses", None),
                               device.gpu_present(), device.usable_cpus(),
                               config.pluginmanager.hasplugin("xdist"), bool(os.environ.get(EVIDENCE_ENV)))
    if workers:
        config.option.numprocesses = workers


def pytest_configure(config):
    config.addinivalue_line("markers", "simulator: runs in the Numba CUDA simulator (its own process)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped, with the reason, without one)")
    config.pluginmanager.register(_BackendSelection(), "backend-selection")
    if backend.SIMULATOR and not os.environ.get(REPORTS_ENV):
        # This process is the simulator (NUMBA_ENABLE_CUDASIM=1 pytest): one CPU (numba_softmax.device).
        cpu = device.simulator_cpu()
        if cpu is not None:
            device.keep_to({cpu})
    if os.environ.get(REPORTS_ENV) and backend.SIMULATOR:
        config.pluginmanager.register(_ReportWriter(config, os.environ[REPORTS_ENV]), "simulator-report-writer")
    elif not backend.SIMULATOR:
        config.pluginmanager.register(_SimulatorChild(config), "simulator-child")
        if device.gpu_present():
            config.pluginmanager.register(_KernelCacheReport(), "kernel-cache-report")
        elif not os.environ.get(CACHE_DIR_ENV):
            config.pluginmanager.register(_SessionKernelCache(), "session-kernel-cache")


def _kind(item):
    if item.get_closest_marker("simulator"):
        return "simulator"
    if item.get_closest_marker("gpu"):
        return "gpu"
    return "plain"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.path)).resolve()
        for folder, mark in FOLDER_MARKS.items():
            if TESTS / folder in path.parents:
                item.add_marker(mark)


class _BackendSelection:
    """Runs after every other plugin's modifyitems (-k and -m deselection included)."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        if backend.SIMULATOR:
            skip = pytest.mark.skip(reason="NUMBA_ENABLE_CUDASIM=1: this process is the Numba simulator; run "
                                           "pytest without it for the CPU and GPU tests")
            for item in items:
                if _kind(item) != "simulator":
                    item.add_marker(skip)
            return
        if not device.gpu_present():
            skip = pytest.mark.skip(reason="no CUDA GPU/driver on this machine")
            for item in items:
                if _kind(item) == "gpu":
                    item.add_marker(skip)
        # The simulator tests last: their child process runs while this one runs the rest.
        items.sort(key=lambda item: _kind(item) == "simulator")


class _KernelCacheReport:
    """On a GPU, the run's last line but one: how many kernels the tests took from the kernel cache and how many,
    and which, still compiled (with pytest-xdist, every worker's kernels)."""

    def __init__(self):
        self.log = []

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter's, which writes the summary
    def pytest_sessionfinish(self, session):
        from numba_softmax.launch import kernel_cache  # numba's real target: only in a GPU process

        if hasattr(session.config, "workeroutput"):  # an xdist worker hands its kernels to the controller
            session.config.workeroutput["kernel_compiles"] = json.dumps(kernel_cache.compile_log())
        else:
            self.log += kernel_cache.compile_log()

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.log += json.loads(getattr(node, "workeroutput", {}).get("kernel_compiles", "[]"))

    def pytest_terminal_summary(self, terminalreporter):
        from numba_softmax.launch import kernel_cache

        if self.log:
            terminalreporter.write_line(kernel_cache.compile_summary(self.log))


class _SessionKernelCache:
    """Without a GPU (and without ``NUMBA_SOFTMAX_CACHE_DIR``): the kernel cache of this run is a temporary folder,
    shared by the processes the tests start (the PTX tests' compile workers, ``bench build-kernels``), so a kernel's
    PTX is compiled once per run, and removed at the end. Set ``NUMBA_SOFTMAX_CACHE_DIR`` to keep it between runs."""

    def __init__(self):
        self.folder = tempfile.mkdtemp(prefix="numba-softmax-cache-")
        os.environ[CACHE_DIR_ENV] = self.folder

    def pytest_unconfigure(self):
        os.environ.pop(CACHE_DIR_ENV, None)
        shutil.rmtree(self.folder, ignore_errors=True)


class _ReportWriter:
    """In the simulator child: every test report, serialized, one JSON line each, as it happens."""

    def __init__(self, config, path):
        self.config = config
        self.path = path

    def pytest_runtest_logreport(self, report):
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(data) + "\n")


class _SimulatorChild:
    """In the main process: runs the selected simulator tests in one child and reports them here."""

    def __init__(self, config):
        self.config = config
        self.process = None
        self.folder = None
        self.reports = {}   # nodeid -> [TestReport] (setup, call, teardown)
        self.kept = None    # where the child's output was kept (after a failure), said at the end
        self.cpus = None    # this process's CPUs before the child took one (restored at the end)
        self._offset = 0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session):
        items = [item for item in session.items if _kind(item) == "simulator"]
        if items and not session.config.option.collectonly:
            self._start(items)
        yield
        if self.process is not None:
            finished = all(any(r.when == "teardown" for r in self.reports.get(item.nodeid, [])) for item in items)
            self._stop(finished)

    def _start(self, items):
        self.folder = Path(tempfile.mkdtemp(prefix="numba-softmax-simulator-"))
        env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", **{REPORTS_ENV: str(self.folder / "reports.jsonl")})
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   f"--basetemp={self.folder / 'tmp'}", *[item.nodeid for item in items]]
        self.log = open(self.folder / "child.log", "w", encoding="utf-8")  # noqa: SIM115 (closed in _stop)
        # The child keeps to one CPU and this process (and what it starts) to the others: spread over CPUs this
        # process keeps busy, the simulator's threads run up to 10x slower (numba_softmax.device).
        cpu = device.simulator_cpu()
        self.cpus = os.sched_getaffinity(0) if cpu is not None else None
        self.process = subprocess.Popen(command, cwd=self.config.rootpath, env=env, stdout=self.log,
                                        stderr=subprocess.STDOUT)
        if cpu is not None and device.keep_to({cpu}, self.process.pid) and len(self.cpus) > 1:
            device.keep_to(self.cpus - {cpu})

    def _read_new_reports(self):
        path = self.folder / "reports.jsonl"
        if not path.exists():
            return
        with open(path, encoding="utf-8") as handle:
            handle.seek(self._offset)
            while True:
                line = handle.readline()
                if not line.endswith("\n"):  # a line still being written: read it next time
                    break
                self._offset = handle.tell()
                report = self.config.hook.pytest_report_from_serializable(config=self.config, data=json.loads(line))
                if isinstance(report.longrepr, list):  # a skip's (path, line, reason): JSON made it a list
                    report.longrepr = tuple(report.longrepr)
                self.reports.setdefault(report.nodeid, []).append(report)

    def _wait_for(self, nodeid):
        while True:
            self._read_new_reports()
            if any(r.when == "teardown" for r in self.reports.get(nodeid, [])):
                return self.reports[nodeid]
            if self.process.poll() is not None:
                self._read_new_reports()
                return self.reports.get(nodeid, [])
            time.sleep(0.2)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if self.process is None:
            return None
        if _kind(item) != "simulator":
            self._release_cpu()
            return None
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = self._wait_for(item.nodeid)
        if not any(r.when == "teardown" for r in reports):
            reports = [*reports, self._missing_report(item, reports)]
        for report in reports:
            item.ihook.pytest_runtest_logreport(report=report)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    def _missing_report(self, item, reports):
        """The child ended without finishing this test (a crash, a collection error): a failure here."""
        from _pytest.reports import TestReport

        self.log.flush()
        tail = (self.folder / "child.log").read_text(encoding="utf-8", errors="replace")[-6000:]
        when = "call" if any(r.when == "setup" for r in reports) else "setup"
        return TestReport(item.nodeid, item.location, keywords={}, outcome="failed", when=when,
                          longrepr=f"the simulator child process (exit status {self.process.returncode}) gave no "
                                   f"result for this test; its output ends:\n{tail}")

    def _release_cpu(self):
        """Once the child has exited, this process and the worker processes it started (the PTX tests' compile
        pool) run on every CPU again, the child's too."""
        if self.cpus is None or self.process.poll() is None:
            return
        device.keep_to(self.cpus)
        for child in multiprocessing.active_children():
            device.keep_to(self.cpus, child.pid)
        self.cpus = None

    def _stop(self, finished):
        try:
            self.process.wait(timeout=120 if finished else 0)
        except subprocess.TimeoutExpired:  # the run was interrupted (-x, Ctrl-C): do not leave the child behind
            self.process.terminate()
            self.process.wait(timeout=60)
        self._release_cpu()
        self.log.close()
        failed = any(r.failed for reports in self.reports.values() for r in reports)
        if failed or self.process.returncode != 0:
            self.kept = f"the simulator child (exit status {self.process.returncode}) left its output in {self.folder}"
        else:
            shutil.rmtree(self.folder, ignore_errors=True)

    def pytest_terminal_summary(self, terminalreporter):
        if self.process is not None:
            terminalreporter.write_line(self.kept or "simulator tests: run in one child process "
                                                     f"(exit status {self.process.returncode})")


@pytest.fixture(scope="session")
def stream():
    """The stream tests launch on: the launch layer's Stream on a GPU, SimulatorStream in the simulator."""
    return backend.stream()


@pytest.fixture(scope="session")
def evidence():
    """Collects figures for results/ when NUMBA_SOFTMAX_EVIDENCE is a file path (one process: not with -n)."""
    path = os.environ.get(EVIDENCE_ENV)
    if path and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail(f"{EVIDENCE_ENV}={path}: one process writes the evidence whole; run without -n (pytest-xdist)")
    records = {}
    yield records
    if path:
        with open(path, "w") as handle:
            json.dump(records, handle, indent=2, sort_keys=True, default=str)


@pytest.fixture(scope="session")
def reference_build_dir(tmp_path_factory):
    """A folder for the nvcc reference build, under the tests' temporary folder (never reference_cu/build).

    A current reference_cu/build of the checkout is copied in (read, never written), so a machine
    without nvcc can still load the cubins; otherwise ``ensure_built`` builds here."""
    from bench.reference_build import BUILD_DIR, stale_reason

    folder = tmp_path_factory.mktemp("reference_build")
    if os.path.isdir(BUILD_DIR) and stale_reason(BUILD_DIR) is None:
        shutil.copytree(BUILD_DIR, folder, dirs_exist_ok=True)
    return str(folder)
