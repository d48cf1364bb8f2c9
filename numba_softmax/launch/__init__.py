"""The launch layer: how kernels are submitted (kept apart from the kernels themselves).

``plan`` has no GPU dependency; ``driver`` and ``graphs`` need cuda-python and a GPU.
"""
