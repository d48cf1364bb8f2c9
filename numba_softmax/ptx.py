"""Offline PTX: what every kernel becomes, and whether it obeys the numerics policy.

Works on a machine without a GPU. ``numba.cuda.compile_ptx`` can compile a kernel
for an explicit compute capability, but compiling a kernel that calls a
``@cuda.jit(device=True)`` function (or grid sync) asks the driver for the current
device's compute capability; :func:`fixed_compute_capability` answers that lookup
with the target (sm_90) while compiling, and only when no GPU is present.

The policy (see :mod:`numba_softmax.numerics`), checked on the PTX text:

* no ``.ftz`` and no ``.approx`` except libdevice expf's ``ex2.approx.ftz.f32``;
* no contracted ``fma``: every ``fma`` must belong to an inlined libdevice expf, whose
  signature is exactly 4 fmas (3 ``fma.rn.f32`` + 1 ``fma.rm.f32``) per
  ``ex2.approx.ftz.f32``;
* unrounded ``add.f32`` / ``sub.f32`` / ``mul.f32`` (which ptxas may still fuse) only
  as many as the expf expansions contribute (one add and one mul each); every add,
  subtract and multiply our source writes is ``.rn``;
* float division only as IEEE ``div.rn.f32``;
* float64 builds: every ``fma.rn.f64`` and unrounded ``add.f64`` / ``mul.f64`` belongs to an inlined
  libdevice ``exp`` (14 to 15 fmas, one add and one mul per expansion), division is ``div.rn.f64``;
* a log_softmax forward build (name ``auto_log_...``, not a backward) calls libdevice ``log`` once per thread:
  ``logf`` brings 12 ``fma.rn.f32``, 2 unrounded ``mul.f32`` and 1 ``add.f32``; the float64 ``log`` 17
  ``fma.rn.f64``, 5 ``mul.f64``, 4 ``add.f64``, 4 ``sub.f64`` and one ``rcp.approx.ftz.f64`` (its initial
  reciprocal, refined by the fmas). Nothing else may use them.

Registers, stack frame and spills come from ``ptxas -v`` when ptxas is installed
(on PATH, or the one in the ``nvidia-cuda-nvcc`` wheel numba-cuda's toolkit extra brings).
"""

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
import types as pytypes
from collections import Counter
from dataclasses import asdict, dataclass, field

import numba.cuda.compiler as compiler_module
import numba.cuda.dispatcher as dispatcher_module
from numba import cuda
from numba.core import sigutils

from .kernels.auto_geometry import PACKED_KIND_WIDTHS, group_shape
from .launch import kernel_cache
from .launch.entry import slim_entry

TARGET_CC = (9, 0)


@contextlib.contextmanager
def fixed_compute_capability(cc=TARGET_CC):
    """Let device functions compile without a GPU by fixing the device lookup."""
    if cuda.is_available():
        yield
        return
    fake = pytypes.SimpleNamespace(compute_capability=cc)
    saved = dispatcher_module.get_current_device, compiler_module.get_current_device
    dispatcher_module.get_current_device = compiler_module.get_current_device = lambda: fake
    try:
        yield
    finally:
        dispatcher_module.get_current_device, compiler_module.get_current_device = saved


def kernel_ptx(dispatcher, signature, cc=TARGET_CC):
    """PTX text of one kernel for ``signature`` (a Numba signature string or tuple), as the launch
    layer launches it: the kernel's code behind its slim entry (:mod:`.launch.entry`). Kept in the kernel cache
    (:func:`.launch.kernel_cache.ptx_key`), where this process has one, so that the next process asking for the
    same code (a PTX check, ``bench build-kernels``) reads it instead of compiling it again."""
    argtypes = sigutils.normalize_signature(signature)[0] if isinstance(signature, str) else tuple(signature)
    cache = kernel_cache.active_cache()
    key = None
    if cache is not None:
        try:
            key = kernel_cache.ptx_key(dispatcher, argtypes, cc)
        except kernel_cache.Uncacheable:
            cache = None
    found = cache.load(key) if cache is not None else None
    if found is not None and found[0].get("kind") == "ptx":
        return found[1].decode()
    with fixed_compute_capability(cc):
        entry, parameters = slim_entry(dispatcher, argtypes)
        ptx = array_abi_ptx(entry, parameters, cc)
    if cache is not None and not cache.read_only:
        cache.store(key, {"kind": "ptx", "kernel": kernel_cache.kernel_name(dispatcher, argtypes),
                          "compute_capability": list(cc), "toolchain": kernel_cache.toolchain_versions()},
                    ptx.encode())
    return ptx


def array_abi_ptx(dispatcher, signature, cc=TARGET_CC):
    """PTX text of ``dispatcher`` itself for ``signature``: Numba's own kernel ABI (a struct per array
    argument), the layout a ``kernel[grid, block](...)`` call uses; the launch layer launches
    :func:`kernel_ptx`'s entry instead."""
    options = dispatcher.targetoptions
    with fixed_compute_capability(cc):
        ptx, _ = cuda.compile_ptx(dispatcher.py_func, signature, cc=cc,
                                  fastmath=options.get("fastmath", False),
                                  lineinfo=options.get("lineinfo", False),
                                  launch_bounds=options.get("launch_bounds"))
    return ptx


def ptx_getter(builds):
    """A memoized ``name -> PTX`` over ``builds`` (name -> ``(dispatcher, signature)``, e.g. the
    kernel registry): each kernel is compiled once however many checks read its PTX."""
    cache = {}

    def ptx_of(name):
        if name not in cache:
            dispatcher, signature = builds[name]
            cache[name] = kernel_ptx(dispatcher, signature)
        return cache[name]

    return ptx_of


_INSTRUCTION = re.compile(r"^\s*(?:@!?%p\w+\s+)?([a-z][\w.:]*)", re.MULTILINE)


def instruction_histogram(ptx):
    """Opcode (with modifiers) -> count, over the instruction lines of a PTX text."""
    counts = Counter()
    for line in ptx.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", ".", "{", "}", "$")) or stripped.endswith(":"):
            continue
        match = _INSTRUCTION.match(stripped)
        if match:
            counts[match.group(1)] += 1
    return counts


@dataclass
class PolicyReport:
    kernel: str
    violations: list = field(default_factory=list)
    expf_count: int = 0
    fma_count: int = 0
    exp_f64_count: int = 0
    rounded_arith: dict = field(default_factory=dict)
    unrounded_arith: dict = field(default_factory=dict)
    divisions: dict = field(default_factory=dict)
    local_memory: bool = False
    resources: dict = field(default_factory=dict)

    @property
    def ok(self):
        return not self.violations

    def record(self):
        return dict(asdict(self), ok=self.ok)


EXPF_FMAS = 4  # libdevice __nv_expf: 3 x fma.rn.f32 + 1 x fma.rm.f32
EXPF_SIGNATURE = "ex2.approx.ftz.f32"
# libdevice __nv_exp (float64): 14 x fma.rn.f64, one unrounded add.f64 and one unrounded mul.f64 per
# expansion; NVVM may add at most one more fma.rn.f64 per expansion when it merges their overflow scaling.
EXP_F64_FMAS = 14
EXP_F64_SIGNATURE = "mul.f64"


#: libdevice ``logf`` / ``log`` per expansion: what each brings (module docstring).
LOGF_EXPANSION = {"fma": 12, "mul": 2, "add": 1}
LOG_F64_EXPANSION = {"fma": 17, "mul": 5, "add": 4, "sub": 4, "rcp.approx.ftz.f64": 1}
#: The kernel name prefixes of the log_softmax forward builds (one log per thread), and of the backward builds.
LOG_FORWARD_PREFIX, BACKWARD_MARK = "auto_log_", "_backward_"
#: The name mark of the narrow builds, and how many builds of the row each holds (for 1, 2 and up to 4 elements:
#: one log each in a log_softmax build, one reached per thread).
NARROW_MARK, NARROW_ROW_BUILDS = "_narrow_", 3
#: The name of the packed builds (``packed_l1_q<Q>``, ``groups_l1_q<Q>``) and the row builds each of a thread's Q
#: groups holds for its widths, one log each: R rows of a whole group (R = 4 / gcd(cols, 4)) and the rows past the
#: last whole group, a loop of R - 1 rows that NVVM unrolls in the packed builds (packed: 4 + 2 + 1 and 3 + 1 + 0)
#: and keeps rolled in the larger groups builds (one row build each where R > 1: 4 + 4 + 2 + 4 + 1 and
#: 1 + 1 + 1 + 1 + 0; measured).
PACKED_NAME = re.compile(r"_(packed|groups|staged|warpstaged)_l1_q(\d+)")
PACKED_GROUP_ROWS = {"packed": sum(2 * group_shape(cols)[0] - 1 for cols in PACKED_KIND_WIDTHS["packed"]),
                     **{kind: sum(rows + (rows > 1) for rows, _ in map(group_shape, PACKED_KIND_WIDTHS[kind]))
                        for kind in ("groups", "staged", "warpstaged")}}


def log_expansions(kernel):
    """The libdevice log expansions in a kernel's PTX: one in a log_softmax forward build (one per row build in a
    narrow or packed one), none elsewhere."""
    if not kernel.startswith(LOG_FORWARD_PREFIX) or BACKWARD_MARK in kernel:
        return 0
    packed = PACKED_NAME.search(kernel)
    if packed:
        return PACKED_GROUP_ROWS[packed.group(1)] * int(packed.group(2))
    return NARROW_ROW_BUILDS if NARROW_MARK in kernel else 1


def check_policy(kernel, ptx):
    """Apply the numerics policy to one kernel's PTX."""
    hist = instruction_histogram(ptx)
    report = PolicyReport(kernel=kernel)
    logs = log_expansions(kernel)
    float64 = any(op.endswith(".f64") and op.startswith(("fma.", "div.")) for op in hist)
    logs_f32, logs_f64 = (0, logs) if float64 else (logs, 0)
    report.expf_count = hist.get(EXPF_SIGNATURE, 0)
    report.fma_count = sum(n for op, n in hist.items() if op.startswith("fma.") and op.endswith(".f32"))
    report.exp_f64_count = hist.get(EXP_F64_SIGNATURE, 0) - LOG_F64_EXPANSION["mul"] * logs_f64
    fma_f64 = sum(n for op, n in hist.items() if op.startswith("fma.") and op.endswith(".f64")) \
        - LOG_F64_EXPANSION["fma"] * logs_f64
    if not EXP_F64_FMAS * report.exp_f64_count <= fma_f64 <= (EXP_F64_FMAS + 1) * report.exp_f64_count:
        report.violations.append(
            f"{fma_f64} float64 fma instructions but {report.exp_f64_count} libdevice exp expansions (expected "
            f"{EXP_F64_FMAS} to {EXP_F64_FMAS + 1} per exp): contraction of source arithmetic")
    add_f64 = hist.get("add.f64", 0) - LOG_F64_EXPANSION["add"] * logs_f64
    sub_f64 = hist.get("sub.f64", 0) - LOG_F64_EXPANSION["sub"] * logs_f64
    if add_f64 != report.exp_f64_count or sub_f64:
        report.violations.append(
            f"{add_f64} add.f64 and {sub_f64} sub.f64 without rounding mode beyond libdevice log's; only "
            f"{report.exp_f64_count} come from exp")
    approx_allowed = {EXPF_SIGNATURE: None, "rcp.approx.ftz.f64": LOG_F64_EXPANSION["rcp.approx.ftz.f64"] * logs_f64}
    for op, n in sorted(hist.items()):
        allowed = approx_allowed.get(op, 0)
        if allowed is not None and n > allowed:
            if ".ftz" in op:
                report.violations.append(f"{n} x {op}: flush-to-zero outside libdevice expf (and log)")
            if ".approx" in op:
                report.violations.append(f"{n} x {op}: approximate instruction outside libdevice expf (and log)")
    if report.fma_count != EXPF_FMAS * report.expf_count + LOGF_EXPANSION["fma"] * logs_f32:
        report.violations.append(
            f"{report.fma_count} fma instructions but {report.expf_count} expf and {logs_f32} logf expansions "
            f"(expected exactly {EXPF_FMAS} per expf, {LOGF_EXPANSION['fma']} per logf): contraction of source "
            "arithmetic")
    for base in ("add", "sub", "mul"):
        report.rounded_arith[base] = hist.get(f"{base}.rn.f32", 0)
        plain = hist.get(f"{base}.f32", 0)
        report.unrounded_arith[base] = plain
        allowed = (report.expf_count if base in ("add", "mul") else 0) + LOGF_EXPANSION.get(base, 0) * logs_f32
        if plain > allowed:
            report.violations.append(
                f"{plain} x {base}.f32 without rounding mode (ptxas may fuse them); "
                f"only {allowed} come from expf and logf")
    report.divisions = {op: n for op, n in hist.items() if op.startswith("div.") and op[-3:] in ("f32", "f64")}
    for op, n in report.divisions.items():
        if op not in ("div.rn.f32", "div.rn.f64"):
            report.violations.append(f"{n} x {op}: float division must be IEEE div.rn.f32 (div.rn.f64 in float64)")
    report.local_memory = bool(re.search(r"\.local\b", ptx))
    return report


def find_ptxas():
    path = shutil.which("ptxas")
    if path:
        return path
    try:
        import nvidia.cuda_nvcc as wheel
        candidate = os.path.join(list(wheel.__path__)[0], "bin", "ptxas")
        return candidate if os.path.exists(candidate) else None
    except ImportError:
        return None


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def parse_ptxas_verbose(text):
    """``ptxas -v`` output -> {entry: {registers, barriers, shared_bytes, stack/spill bytes}}."""
    resources, current = {}, None
    for line in text.splitlines():
        entry = _PTXAS_ENTRY.search(line)
        if entry:
            current = resources.setdefault(entry.group(1), {})
            continue
        if current is None:
            continue
        stack = _PTXAS_STACK.search(line)
        if stack:
            current.update(stack_frame_bytes=int(stack.group(1)), spill_store_bytes=int(stack.group(2)),
                           spill_load_bytes=int(stack.group(3)))
        used = _PTXAS_USED.search(line)
        if used:
            current.update(registers=int(used.group(1)), barriers=int(used.group(2) or 0),
                           shared_bytes=int(used.group(3) or 0))
    return resources


def run_ptxas(ptx, out_path, ptxas, arch="sm_90"):
    """``ptxas -v`` on one kernel's PTX into the cubin ``out_path``; returns the finished process.

    Whole-program, as the driver compiles a kernel's one PTX module when Numba loads it: in relocatable
    mode (``-c``) ptxas allocates differently (the persistent kernel had no spill with ``-c`` where the
    driver's build made local-memory stores, which a whole-program build shows; PERFORMANCE.md)."""
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "kernel.ptx")
        with open(source, "w") as handle:
            handle.write(ptx)
        return subprocess.run([ptxas, "-v", f"-arch={arch}", source, "-o", str(out_path)],
                              capture_output=True, text=True, check=False)


def ptxas_resources(ptx, arch="sm_90"):
    """Registers, stack frame and spills from ``ptxas -v`` (None without ptxas)."""
    ptxas = find_ptxas()
    if ptxas is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        proc = run_ptxas(ptx, os.path.join(tmp, "k.cubin"), ptxas, arch)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        return {"error": text.strip()}
    figures = next(iter(parse_ptxas_verbose(text).values()), {})
    return {"ptxas": ptxas, **{name: figures.get(name) for name in
                               ("registers", "stack_frame_bytes", "spill_store_bytes", "spill_load_bytes")}}
