"""Pure-Python benchmark harness support (statistics, protocol, artifacts, report).

Nothing in this package imports CUDA, so it can be used and tested on a CPU-only
machine; the GPU-facing harness lives elsewhere and imports from here.
"""
