"""The one way the bench spreads work over processes: results in order, in spawned workers or in this process."""

import operator
import os

from bench.processes import map_in_processes


def _pid(_):
    return os.getpid()


def test_results_come_back_in_order_from_spawned_workers():
    left, right = range(12), range(12, 24)
    assert map_in_processes(operator.mul, left, right, jobs=2) == [a * b for a, b in zip(left, right, strict=True)]


def test_the_workers_are_other_processes_and_one_job_stays_here():
    here = os.getpid()
    assert here not in map_in_processes(_pid, range(4), jobs=2)
    assert map_in_processes(_pid, range(3), jobs=1) == [here] * 3
