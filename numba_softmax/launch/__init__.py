"""The launch layer: how kernels are submitted on a GPU (kept apart from the kernels themselves).

``driver`` (compile once, pack once, ``cuLaunchKernel``) and ``graphs`` (CUDA Graphs) need
cuda-python and a GPU; ``entry`` is the slim kernel entry ``driver`` compiles, ``prebuilt`` loads
the same entries from cubins built on a CPU, and ``context`` is what those two share (Numba's
context, the driver-call check, a loaded kernel's attributes). Which backend a process uses (GPU or
simulator) is decided in :mod:`numba_softmax.backend`; the peers timed beside the kernels (cuDNN,
the nvcc twins) are in :mod:`numba_softmax.peers`.
"""
