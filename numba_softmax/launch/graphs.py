"""CUDA Graphs for an :class:`~numba_softmax.launch.driver.Invocation`, via stream capture.

Stream capture records exactly what the invocation enqueues -- our kernels, and
whatever a library such as cuDNN launches internally -- so the node list is read
back from the graph (:meth:`CapturedGraph.node_types`), never assumed. The graph's
kernel nodes hold the argument values packed at capture time: replay reads the
same device pointers, so changing the *contents* of the input buffers between
replays is visible to the graph (the protocol checks this), while reallocating
them is not.

Capture, instantiation and the first replay are timed separately (host clock,
synchronized); DOT files are written outside every timed interval.
"""

import os
import time

from cuda.bindings import driver as cu

from .driver import check

_NODE_TYPE_NAMES = {int(v): v.name.replace("CU_GRAPH_NODE_TYPE_", "").lower()
                    for v in cu.CUgraphNodeType}


class CapturedGraph:
    def __init__(self, invocation, stream):
        self.name = invocation.name
        # Settle everything already queued so capture time is capture alone.
        stream.synchronize()
        t0 = time.perf_counter_ns()
        check(cu.cuStreamBeginCapture(
            stream.handle, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
        try:
            invocation.enqueue(stream)
        finally:
            graph = check(cu.cuStreamEndCapture(stream.handle))
        t1 = time.perf_counter_ns()
        self.graph = graph
        self.exec = check(cu.cuGraphInstantiate(graph, 0))
        t2 = time.perf_counter_ns()
        self.launch(stream)
        stream.synchronize()
        t3 = time.perf_counter_ns()
        self.capture_us = (t1 - t0) / 1e3
        self.instantiate_us = (t2 - t1) / 1e3
        self.first_replay_us = (t3 - t2) / 1e3

    def launch(self, stream):
        err, = cu.cuGraphLaunch(self.exec, stream.handle)
        if err != cu.CUresult.CUDA_SUCCESS:
            check((err,))

    def nodes(self):
        _, count = check(cu.cuGraphGetNodes(self.graph, 0))
        nodes, _ = check(cu.cuGraphGetNodes(self.graph, count))
        return list(nodes)[:count]

    def node_types(self):
        """Node type name -> count, read from the captured graph."""
        counts = {}
        for node in self.nodes():
            kind = _NODE_TYPE_NAMES.get(int(check(cu.cuGraphNodeGetType(node))), "unknown")
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def kernel_node_names(self):
        """Entry names of kernel nodes (cuDNN's internal kernels included)."""
        names = []
        for node in self.nodes():
            if check(cu.cuGraphNodeGetType(node)) != cu.CUgraphNodeType.CU_GRAPH_NODE_TYPE_KERNEL:
                continue
            params = check(cu.cuGraphKernelNodeGetParams(node))
            try:
                name = check(cu.cuFuncGetName(params.func))
                names.append(name.decode() if isinstance(name, bytes) else str(name))
            except Exception as exc:  # the name is diagnostic only
                names.append(f"<unnamed: {exc}>")
        return names

    def record(self):
        return {
            "node_count": len(self.nodes()),
            "node_types": self.node_types(),
            "kernel_nodes": self.kernel_node_names(),
            "capture_us": self.capture_us,
            "instantiate_us": self.instantiate_us,
            "first_replay_us": self.first_replay_us,
        }

    def write_dot(self, path):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        flags = cu.CUgraphDebugDot_flags.CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE
        check(cu.cuGraphDebugDotPrint(self.graph, str(path).encode(), int(flags)))

    def close(self):
        if self.exec is not None:
            check(cu.cuGraphExecDestroy(self.exec))
            check(cu.cuGraphDestroy(self.graph))
            self.exec = None
