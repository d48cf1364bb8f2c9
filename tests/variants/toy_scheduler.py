"""A toy Experiment B scheduler variant in one file (docs/extending.md): the DAG scheduler with half the
workers the worker plan chooses (at least one). Same tasks, same arithmetic: bit for bit the three schedulers."""

from bench.variants import scheduler_variant
from numba_softmax.tiled import tiled_launches, worker_plan


@scheduler_variant("toy-dag-half-workers")
def toy_dag_half_workers(buffers):
    workers = max(1, worker_plan(buffers).workers // 2)
    return tiled_launches("dag", buffers, workers)
