"""The peers timed and checked beside the project's kernels, kept apart from the core launch layer.

* :mod:`.cudnn`: cuDNN's softmax forward through ctypes (Experiment A's library reference);
* :mod:`.nvcc_twins`: the nvcc builds of ``reference_cu/`` (the same algorithms in CUDA C++),
  loaded from cubins and submitted through the launch layer's ``Invocation``;
* :mod:`.triton_softmax`: Triton's fused-softmax tutorial kernel (one program per row), the Triton peer;
* :mod:`.liger_softmax`: Liger-Kernel's softmax (one Triton program per row), an optional peer.

The first two use :mod:`numba_softmax.launch` (the driver, graphs); nothing in the core package imports them.
"""
