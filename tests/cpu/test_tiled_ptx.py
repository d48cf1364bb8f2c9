"""Experiment B kernels' sm_90 PTX: numerics policy, ordering instructions, controls.

The PTX is compiled in a child process with the real CUDA target (no GPU needed),
so this file gives the same answers whether or not this pytest process imported
numba in simulator mode (tests/sim's conftest turns it on process-wide).
"""

import re
import textwrap

import numpy as np
import pytest
from backends import run_on_the_real_target

from numba_softmax.kernels.tiles import TILE_VALUES
from numba_softmax.ptx import check_policy, instruction_histogram, ptxas_resources

TILED_KERNELS = ("tile_summary_kernel", "row_combine_kernel", "tile_normalize_kernel",
                 "persistent_tiles", "init_queue_kernel")
CONTROLS = ("unacquired_slot_read", "first_producer_publishes_b")

ACQUIRE = "ld.acquire.gpu.global.u32"
RELAXED = "ld.relaxed.gpu.global.u32"
RELAXED_STORE = "st.relaxed.gpu.global.u32"
FENCE = "fence.acq_rel.gpu"
ACQ_REL_ADD = "atom.acq_rel.gpu.global.add.u32"
RELEASE_ADD = "atom.release.gpu.global.add.u32"
ORDERING = (ACQUIRE, RELAXED, RELAXED_STORE, FENCE, ACQ_REL_ADD, RELEASE_ADD)

_CHILD = textwrap.dedent("""
    import json, sys
    from numba_softmax.kernels.persistent import SIGNATURES
    from numba_softmax.kernels.persistent.controls import NEGATIVE_CONTROLS, negative_control_kernel
    from numba_softmax.kernels.registry import KERNELS
    from numba_softmax.ptx import kernel_ptx
    out = {"kernels": {}, "controls": {}, "fastmath": {}}
    for name in sys.argv[2:]:
        dispatcher, signature = KERNELS[name]
        out["kernels"][name] = kernel_ptx(dispatcher, signature)
        out["fastmath"][name] = dispatcher.targetoptions.get("fastmath")
    for name in NEGATIVE_CONTROLS:
        kernel = negative_control_kernel(name)
        out["controls"][name] = kernel_ptx(kernel, SIGNATURES["persistent_tiles"])
        out["fastmath"][name] = kernel.targetoptions.get("fastmath")
    out["registered"] = sorted(KERNELS)
    with open(sys.argv[1], "w") as handle:
        json.dump(out, handle)
""")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return run_on_the_real_target(_CHILD, tmp_path_factory.mktemp("tiled_ptx"), *TILED_KERNELS)


@pytest.mark.parametrize("name", TILED_KERNELS)
def test_tiled_kernel_obeys_the_numerics_policy(compiled, name):
    report = check_policy(name, compiled["kernels"][name])
    assert report.ok, report.violations
    assert not report.local_memory
    assert compiled["fastmath"][name] is False


@pytest.mark.parametrize("name", CONTROLS)
def test_negative_control_builds_also_obey_the_numerics_policy(compiled, name):
    # They break ordering rules, not arithmetic: the policy check must still pass.
    assert check_policy(name, compiled["controls"][name]).ok


def test_separate_kernels_expf_and_division_counts(compiled):
    a = check_policy("a", compiled["kernels"]["tile_summary_kernel"])
    c = check_policy("c", compiled["kernels"]["tile_normalize_kernel"])
    values = TILE_VALUES  # 8 values per thread (2 quads), each exponentiated once
    assert a.expf_count == values and a.divisions == {}
    assert c.expf_count == values and c.divisions == {"div.rn.f32": values}
    assert a.rounded_arith["sub"] == values and c.rounded_arith["sub"] == values


def test_persistent_kernel_has_device_scope_acquire_release(compiled):
    hist = instruction_histogram(compiled["kernels"]["persistent_tiles"])
    # the poll of the claimed slot, its own ready flag (workers leave without waiting on c_done: every remaining
    # task is held by a live ticket), and the grid barrier's at its two sites: the last arrival's one
    # load, and the others' polls (each loop rotated by LLVM: its first poll before the loop, the others in it)
    assert hist[ACQUIRE] == 1 + 2 * 3
    # one per publish site -- B after the arrivals of an A claim, inlined at three sites (the claim's one
    # row, or its first and its last row), and a row's C tasks after B; the grid barrier has none (its
    # arrivals release, its waiters acquire with their loads)
    assert hist[FENCE] == 3 + 1
    assert hist[RELAXED_STORE] >= 2      # the publishes' slots, after their fence
    # the row arrivals after an A claim (the same three sites): acq_rel, since the completing one
    # publishes B and must see the row's other summaries
    assert hist[ACQ_REL_ADD] == 3
    # c_done after C, and the grid barrier's arrival at each of its two sites: release only, with no
    # fence before it (the block barrier orders the worker's results before thread 0)
    assert hist[RELEASE_ADD] == 1 + 2
    assert hist[RELAXED] >= 2            # the ticketed slot, error_code polls
    assert hist.get("nanosleep.u32", 0) >= 1  # bounded waits back off
    assert hist.get("cvta.to.global.u64", 0) >= 1


def test_persistent_kernel_has_its_own_grid_barrier_and_launches_cooperatively(compiled):
    from numba_softmax.kernels.persistent import dag_launches, phased_launches
    from numba_softmax.tiled import TiledBuffers, build_layout
    ptx = compiled["kernels"]["persistent_tiles"]
    # no libcudadevrt grid barrier (and its local-memory calling convention): the kernel's own
    assert "cudaCGGetIntrinsicHandle" not in ptx and "cudaCGSynchronize" not in ptx
    assert ".local" not in ptx
    # so Numba does not mark it cooperative: the launch description asks for a cooperative launch
    layout = build_layout([1024, 2048])

    class Host:  # the launch lists only read the buffers' attributes
        pass
    buffers = Host()
    for name in ("values", "out", "tile_row", "tile_start", "tile_len", "row_first_tile", "row_tile_count",
                 "tile_max", "tile_sum", "row_max", "row_sum", "counters", "row_arrivals", "fifo_slots",
                 "trace"):
        setattr(buffers, name, None)
    buffers.fifo_slots = np.zeros(layout.fifo_capacity, dtype=np.int32)
    buffers.layout = layout  # the DAG's FIFO entries with C entries of two tiles come from the layout
    assert phased_launches(buffers, 4)[0].cooperative and dag_launches(buffers, 4)[1].cooperative
    assert not dag_launches(buffers, 4)[0].cooperative  # the reset kernel is a plain launch
    # the DAG's worker is the reset's programmatic dependent, and waits for it once, before the queue; the
    # reset lets it launch; phased launches after whatever ran before it
    assert dag_launches(buffers, 4)[1].programmatic and dag_launches(buffers, 4, floor=True)[1].programmatic
    assert not phased_launches(buffers, 4)[0].programmatic and not dag_launches(buffers, 4)[0].programmatic
    assert ptx.count("griddepcontrol.wait;") == 1 and "griddepcontrol.launch_dependents" not in ptx
    assert compiled["kernels"]["init_queue_kernel"].count("griddepcontrol.launch_dependents;") == 1
    assert TiledBuffers  # the real buffers carry the same attributes


def test_plain_kernels_use_no_ordering_instructions(compiled):
    for name in ("tile_summary_kernel", "row_combine_kernel", "tile_normalize_kernel",
                 "init_queue_kernel"):
        hist = instruction_histogram(compiled["kernels"][name])
        assert not any(hist.get(op) for op in ORDERING), name
        assert "cudaCGSynchronize" not in compiled["kernels"][name]


def test_negative_controls_differ_only_where_intended(compiled):
    perf = instruction_histogram(compiled["kernels"]["persistent_tiles"])
    unacquired = instruction_histogram(compiled["controls"]["unacquired_slot_read"])
    first = instruction_histogram(compiled["controls"]["first_producer_publishes_b"])
    assert unacquired[ACQUIRE] == perf[ACQUIRE] - 1    # no ready-flag acquire
    assert first[ACQUIRE] == perf[ACQUIRE]
    for control in CONTROLS:
        assert control not in compiled["kernels"]["persistent_tiles"]
        assert f"persistent_tiles_control_{control}" in compiled["controls"][control]
    assert not any("control" in name for name in compiled["registered"])


@pytest.mark.parametrize("name", TILED_KERNELS)
def test_tiled_kernel_resources(compiled, name):
    resources = ptxas_resources(compiled["kernels"][name])
    if resources is None:
        pytest.skip("ptxas not installed: register/stack figures unavailable")
    assert "error" not in resources, resources
    assert resources["stack_frame_bytes"] == 0
    assert resources["spill_store_bytes"] == 0 and resources["spill_load_bytes"] == 0


def _loop_of_pragma(ptx):
    """The label of the block each ``.pragma "nounroll"`` sits in, and whether that block branches back to it."""
    found = []
    label = None
    lines = ptx.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.endswith(":") and stripped.startswith("$"):
            label = stripped[:-1]
        if stripped == '.pragma "nounroll";':
            rest = "\n".join(lines[i:])
            block_end = rest.find("\n\n")
            found.append((label, f"bra \t{label};" in rest[:block_end] if label else False))
    return found


def test_task_b_max_loop_carries_the_nounroll_pragma_in_its_header(compiled):
    """task B's max loop is rolled as the twin's ``#pragma unroll 1`` loop: the pragma sits in the loop's
    header block (the block that branches back to its own label), once per call site of task B."""
    combine = _loop_of_pragma(compiled["kernels"]["row_combine_kernel"])
    assert len(combine) == 1 and combine[0][1], combine
    persistent = _loop_of_pragma(compiled["kernels"]["persistent_tiles"])
    assert len(persistent) == 2 and all(back for _, back in persistent), persistent  # phased B and the DAG's B
    for name in ("tile_summary_kernel", "tile_normalize_kernel", "init_queue_kernel"):
        assert "nounroll" not in compiled["kernels"][name], name


def test_extended_launch_configuration_carries_each_attribute_asked_for():
    # cuLaunchKernelEx's configuration (no GPU needed to build it): the DAG worker's launch is cooperative and
    # a programmatic dependent; a cluster launch carries its dimension and nothing else.
    from cuda.bindings import driver as cu

    from numba_softmax.launch.driver import ExtendedLaunchConfig
    ids = cu.CUlaunchAttributeID
    worker = ExtendedLaunchConfig((1188, 1, 1), (128, 1, 1), 0, 0, cooperative=True, programmatic=True)
    assert [a.id for a in worker.attributes] == [ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE,
                                                 ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION]
    assert worker.config.numAttrs == 2 and worker.config.gridDimX == 1188 and worker.config.blockDimX == 128
    assert worker.attributes[1].value.programmaticStreamSerializationAllowed == 1
    cluster = ExtendedLaunchConfig((64, 1, 1), (256, 1, 1), 0, 0, cluster=2)
    assert [a.id for a in cluster.attributes] == [ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION]
    assert cluster.attributes[0].value.clusterDim.x == 2 and cluster.config.numAttrs == 1


#: ``ordering.pause_us``: ``nanosleep(1000)`` once per microsecond, the controls' way of widening a race window.
PAUSE = re.compile(r"mov\.u32\s+(%r\d+), 1000;(?s:.*)nanosleep\.u32\s+\1;")


def test_test_only_pauses_are_in_the_control_builds_only(compiled):
    """The shipped kernel's source holds no control: a control swaps in its own device functions, and only the
    controls that pause carry the pause's loop in their PTX."""
    assert not PAUSE.search(compiled["kernels"]["persistent_tiles"])
    paused = sorted(name for name, ptx in compiled["controls"].items() if PAUSE.search(ptx))
    assert paused == ["barrier_arrive_without_fence", "first_producer_publishes_b"]
