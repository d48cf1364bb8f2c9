"""What both ways of getting a kernel function share: Numba's context, driver calls, a function's attributes.

The launch layer takes a kernel either by compiling it with Numba (:class:`.driver.CompiledKernel`) or
from a folder of prebuilt cubins (:class:`.prebuilt.PrebuiltKernel`); both load it into Numba's primary
context, check every cuda-python call with :func:`check` and describe the loaded function the same way
(:class:`LoadedKernel`). This module imports neither of them.
"""

from cuda.bindings import driver as cu
from numba import cuda


class CudaDriverError(RuntimeError):
    pass


def check(result):
    """Unwrap a cuda-python ``(CUresult, *values)`` tuple, raising on error."""
    if isinstance(result, tuple):
        err, values = result[0], result[1:]
    else:
        err, values = result, ()
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        raise CudaDriverError(f"{name.decode() if name else err}: {text.decode() if text else ''}")
    if not values:
        return None
    return values[0] if len(values) == 1 else values


def ensure_context():
    """Make Numba's primary context current in this thread and return it."""
    return cuda.current_context()


class LoadedKernel:
    """A kernel function loaded in the context: its occupancy and its resources, one record for both kinds.

    A subclass sets ``function`` (a ``CUfunction``), ``name``, ``cooperative``, ``registers_per_thread``,
    ``local_bytes_per_thread``, ``static_shared_bytes`` and ``max_threads_per_block``.
    """

    def active_blocks_per_sm(self, block_threads, dynamic_shared_bytes=0):
        return check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            self.function, block_threads, dynamic_shared_bytes))

    def resources(self):
        return {
            "entry": self.name,
            "cooperative": self.cooperative,
            "registers_per_thread": self.registers_per_thread,
            "local_bytes_per_thread": self.local_bytes_per_thread,
            "static_shared_bytes": self.static_shared_bytes,
            "max_threads_per_block": self.max_threads_per_block,
        }
