"""How many processes ``pytest -m gpu`` runs in: one per CPU on a GPU machine (pytest-xdist), else this one."""

import pytest

from backends import GPU_TEST_WORKERS, gpu_test_workers


def test_a_gpu_run_takes_one_worker_per_cpu_up_to_the_limit():
    assert gpu_test_workers("gpu", None, gpu=True, cpus=8, xdist=True) == 8
    assert gpu_test_workers(" gpu ", None, gpu=True, cpus=128, xdist=True) == GPU_TEST_WORKERS


@pytest.mark.parametrize("markexpr, numprocesses, gpu, cpus, xdist", [
    ("gpu", 0, True, 16, True),          # -n 0: this process
    ("gpu", 4, True, 16, True),          # -n given: pytest-xdist's own
    ("", None, True, 16, True),          # the whole suite (simulator child, CPU tests): this process
    ("gpu and not slow", None, True, 16, True),
    ("not gpu", None, True, 16, True),
    ("gpu", None, False, 16, True),      # no GPU: the GPU tests skip, nothing to spread
    ("gpu", None, True, 16, False),      # no pytest-xdist
    ("gpu", None, True, 1, True),        # one CPU
])
def test_every_other_run_stays_in_this_process(markexpr, numprocesses, gpu, cpus, xdist):
    assert gpu_test_workers(markexpr, numprocesses, gpu=gpu, cpus=cpus, xdist=xdist) is None


def test_a_run_that_collects_evidence_stays_in_this_process():
    assert gpu_test_workers("gpu", None, gpu=True, cpus=16, xdist=True, evidence=True) is None
