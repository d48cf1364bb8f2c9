"""A kernel compiled at run time by Numba: the kernel's slim entry (:mod:`.entry`), loaded in Numba's context."""

from cuda.bindings import driver as cu

from .context import LoadedKernel, check, ensure_context
from .entry import slim_entry


class CompiledKernel(LoadedKernel):
    """One compiled specialization of a dispatcher, bound to the current context."""

    def __init__(self, dispatcher, argtypes):
        ensure_context()
        self.dispatcher = dispatcher
        self.argtypes = tuple(argtypes)  # the kernel's own; the entry takes pointer + shape per array
        entry, parameters = slim_entry(dispatcher, self.argtypes)
        self.numba_kernel = entry.compile(parameters)
        self.numba_kernel.bind()
        cufunc = self.numba_kernel._codelibrary.get_cufunc()
        self.name = self.numba_kernel.entry_name
        self.cooperative = bool(self.numba_kernel.cooperative)
        self.function = check(cu.cuKernelGetFunction(cufunc.handle))
        attrs = cufunc.attrs
        self.registers_per_thread = attrs.regs
        self.local_bytes_per_thread = attrs.local
        self.static_shared_bytes = attrs.shared
        self.max_threads_per_block = attrs.maxthreads
