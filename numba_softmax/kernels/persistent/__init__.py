"""Persistent tiled softmax: one cooperative kernel for Experiment B's phased and DAG schedulers.

The shipped API: :data:`persistent_tiles` (the kernel, its mode a run-time argument), the DAG's
queue reset :data:`init_queue_kernel`, their :data:`SIGNATURES`, the modes, and the launch lists.
The package by concern: :mod:`.queue_ops` (queue primitives and the reset), :mod:`.decision`
(thread 0's DAG decision), :mod:`.barrier` (the grid barrier), :mod:`.phased` and :mod:`.dag`
(the two worker bodies), :mod:`.kernel` (the factory and the shipped build), :mod:`.launch`;
apart from them :mod:`.diagnostics` (trace, completion-wait and register-capped builds) and
:mod:`.controls` (negative controls, tests only). docs/experiment_b.md describes the schedulers.
"""

from .kernel import SIGNATURES, persistent_tiles
from .launch import dag_launches, init_queue_launch, persistent_args, persistent_launch, phased_launches
from .modes import MODE_DAG, MODE_DAG_FLOOR, MODE_PHASED, MODE_PHASED_FLOOR, MODES
from .queue_ops import init_queue_kernel

__all__ = ["MODES", "MODE_DAG", "MODE_DAG_FLOOR", "MODE_PHASED", "MODE_PHASED_FLOOR", "SIGNATURES", "dag_launches",
           "init_queue_kernel", "init_queue_launch", "persistent_args", "persistent_launch", "persistent_tiles",
           "phased_launches"]
