"""Host side of Experiment B: packed layout, fixed buffers, launch lists, the queue checks, the API.

* :mod:`.layout`: :func:`build_layout` cuts packed rows into tiles (numpy only, no GPU);
* :mod:`.buffers`: :class:`TiledBuffers`, every device array of one case, allocated once;
* :mod:`.launches`: :func:`tiled_launches` per scheduler and :func:`worker_plan`;
* :mod:`numba_softmax.queue`: the DAG queue protocol's words and its exact checks (shared
  with the kernel, so it lives below both);
* :mod:`.api`: :func:`tiled_softmax`;
* :mod:`.schedule_model`: the DAG policy simulated with given task durations (numpy only).
"""

from ..queue import (A_NEXT, C_DONE, ERR_COMPLETION_TIMEOUT, ERR_FIFO_OVERFLOW, ERR_INVALID_TASK,
                     ERR_READY_TIMEOUT, ERROR_CODE, ERROR_TASK, ERROR_WAITED_ON, ERROR_WORKER, FIFO_HEAD,
                     FIFO_TAIL, QueueStateError, describe_error, expected_counters, verify_counters,
                     verify_queue)
from .api import TiledResult, tiled_softmax
from .buffers import TiledBuffers, trace_task_count
from .launches import SCHEDULERS, WorkerPlan, floor_launches, tiled_launches, worker_plan
from .layout import TiledLayout, build_layout, check_layout

__all__ = [
    "SCHEDULERS", "TiledLayout", "build_layout", "check_layout", "TiledBuffers", "trace_task_count",
    "WorkerPlan", "worker_plan", "tiled_launches", "floor_launches", "QueueStateError", "expected_counters",
    "verify_counters", "verify_queue", "describe_error", "TiledResult", "tiled_softmax",
    "A_NEXT", "FIFO_HEAD", "FIFO_TAIL", "C_DONE", "ERROR_CODE", "ERROR_TASK", "ERROR_WAITED_ON",
    "ERROR_WORKER", "ERR_READY_TIMEOUT", "ERR_COMPLETION_TIMEOUT", "ERR_INVALID_TASK",
    "ERR_FIFO_OVERFLOW",
]
