"""The launch layer: how kernels are submitted on a GPU (kept apart from the kernels themselves).

``driver`` (compile once, pack once, ``cuLaunchKernel``) and ``graphs`` (CUDA Graphs) need
cuda-python and a GPU. Which backend a process uses (GPU or simulator) is decided in
:mod:`numba_softmax.backend`; the peers timed beside the kernels (cuDNN, the nvcc twins) are in
:mod:`numba_softmax.peers`.
"""
