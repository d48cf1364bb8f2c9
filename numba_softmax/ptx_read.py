"""PTX read as data for ``python -m bench ptx --compare`` (:mod:`bench.ptx_report`) and ``python -m bench sass``:
instructions, entries, the arithmetic and memory-ordering token sequences, their aligned diff, and the named
non-arithmetic differences between a Numba and an nvcc PTX of the same kernel.
"""

import difflib
import re
from collections import Counter
from dataclasses import dataclass

# ---- PTX parsing ------------------------------------------------------------------------

_GUARD = re.compile(r"^@!?%\w+\s+")
_OPCODE = re.compile(r"^([a-z][\w.:]*)\s*(.*)$", re.DOTALL)
_FLOAT_IMM = re.compile(r"^0[fFdD][0-9A-Fa-f]+$")
_INT_IMM = re.compile(r"^-?(0[xX][0-9A-Fa-f]+|\d+)U?$")
_REGISTER = re.compile(r"^%\w+$")
_NO_DEST = ("st.", "bar.", "barrier.", "red.", "bra", "ret", "call", "nanosleep", "membar", "fence",
            "exit", "trap", "prefetch", "brkpt", "pmevent", "wgmma.fence", "cp.async.commit")


@dataclass(frozen=True)
class Instruction:
    opcode: str
    operands: tuple
    text: str
    #: basic-block number: it grows at every label, where control flow can join
    block: int = 0

    @property
    def has_dest(self):
        return bool(self.operands) and not self.opcode.startswith(_NO_DEST)

    @property
    def dests(self):
        """Registers written: ``%r1|%p2`` (shfl) and ``{%f1, %f2, ...}`` (vector loads) split."""
        if not self.has_dest:
            return ()
        text = self.operands[0].strip("{}")
        return tuple(part.strip() for chunk in text.split(",") for part in chunk.split("|") if part.strip())

    @property
    def sources(self):
        return self.operands[1:] if self.has_dest else self.operands


def _split_operands(text):
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    tail = "".join(current).strip()
    if tail:
        parts.append(tail)
    return tuple(parts)


def parse_instructions(ptx):
    """Every instruction of a PTX text, in order (directives, labels, comments skipped; each
    instruction carries the number of the basic block it is in, counted by labels)."""
    out = []
    block = 0
    for line in ptx.splitlines():
        code = line.split("//", 1)[0]
        for statement in code.split(";"):
            s = statement.strip().lstrip("{").rstrip("}").strip()
            if s.endswith(":"):
                block += 1
            if not s or s.startswith(".") or s.endswith(":") or s.startswith("$"):
                continue
            s = _GUARD.sub("", s)
            match = _OPCODE.match(s)
            if match:
                out.append(Instruction(match.group(1), _split_operands(match.group(2)), s, block))
    return out


_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")


def entry_names(ptx):
    return _ENTRY.findall(ptx)


def extract_entry(ptx, name):
    """The text of one ``.entry`` (header, parameters and body) of a module's PTX."""
    match = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(", ptx)
    if match is None:
        raise KeyError(f"entry {name!r} not in PTX (entries: {entry_names(ptx)})")
    start = ptx.rfind("\n", 0, match.start()) + 1
    brace = ptx.index("{", ptx.index(")", match.end()))
    depth = 0
    for i in range(brace, len(ptx)):
        if ptx[i] == "{":
            depth += 1
        elif ptx[i] == "}":
            depth -= 1
            if depth == 0:
                return ptx[start:i + 1]
    raise ValueError(f"entry {name!r}: unbalanced braces")


_MODULE_DECL = re.compile(r"^\.(?:visible\s+|weak\s+)?(?:shared|global|const|extern)\b"
                          r".*?([\w$]+)\s*(?:\[[^\]]*\])?\s*(?:=.*)?;\s*$")


def standalone_entry(module_ptx, name):
    """One entry as a PTX file of its own (ptxas can assemble it): the module's .version,
    .target and .address_size, the module-scope declarations the entry uses (e.g. nvcc puts
    a device function's ``__shared__`` array there), and the entry."""
    entry = extract_entry(module_ptx, name)
    header, decls = [], []
    for line in module_ptx.splitlines():
        stripped = line.strip()
        if stripped.startswith((".version", ".target", ".address_size")):
            header.append(stripped)
            continue
        match = _MODULE_DECL.match(stripped)
        if match and not stripped.startswith(".extern .func") and re.search(
                r"(?<![\w$])" + re.escape(match.group(1)) + r"(?![\w$])", entry):
            decls.append(stripped)
    return "\n".join([f"// entry {name}, extracted from its nvcc module", *header, "", *decls, "", entry, ""])


def defined_functions(ptx):
    """Device functions with a body in the module (not inlined), and extern declarations."""
    defined = re.findall(r"^\s*(?:\.visible\s+|\.weak\s+)?\.func\s+(?:\([^)]*\)\s*)?([\w$]+)\s*\([^;{]*\)\s*\{",
                         ptx, re.MULTILINE)
    externs = re.findall(r"^\s*\.extern\s+\.func\s+(?:\([^)]*\)\s*)?([\w$]+)", ptx, re.MULTILINE)
    return defined, externs


def normalized_histogram(ptx):
    """Opcode (with modifiers) -> count; registers, labels and immediates normalized away."""
    return Counter(ins.opcode for ins in parse_instructions(ptx))


# ---- the arithmetic sequence --------------------------------------------------------------

_FLOAT_TYPES = ("f32", "f64", "f16", "bf16", "f16x2", "bf16x2")
_ARITH_BASES = {"add", "sub", "mul", "fma", "mad", "div", "max", "min", "neg", "abs", "ex2", "lg2", "rcp",
                "sqrt", "rsqrt", "sin", "cos", "tanh", "copysign", "testp"}
_ROUNDING = (".rn", ".rz", ".rm", ".rp")


def is_arithmetic(opcode):
    """Float arithmetic (and float conversions), plus the warp shuffles of the reductions."""
    parts = opcode.split(".")
    if parts[0] == "shfl":
        return True
    if parts[0] == "cvt":
        return any(p in _FLOAT_TYPES for p in parts[1:])
    return parts[0] in _ARITH_BASES and parts[-1] in _FLOAT_TYPES


def _unqualified(opcode, bases):
    parts = opcode.split(".")
    return parts[0] in bases and parts[-1] == "f32" and not any(r in "." + ".".join(parts[1:]) + "."
                                                                 for r in (".rn.", ".rz.", ".rm.", ".rp."))


def contraction_candidates(instructions):
    """Unqualified ``mul.f32`` results consumed by an unqualified ``add``/``sub.f32``: the only
    pairs ptxas may still fuse into an fma. Conservative: a register counts as a plain-mul
    result if ANY instruction of the function defines it with a plain mul."""
    plain_mul_regs = {d for ins in instructions if _unqualified(ins.opcode, ("mul",)) for d in ins.dests}
    return [ins.text for ins in instructions
            if _unqualified(ins.opcode, ("add", "sub")) and any(s in plain_mul_regs for s in ins.sources)]


def _constant_value(operand, constants):
    if _FLOAT_IMM.match(operand) or _INT_IMM.match(operand):
        return operand.upper() if operand[:2].lower() in ("0f", "0d") else operand
    return constants.get(operand)


def arithmetic_tokens(instructions, make_rounding_explicit):
    """(tokens, rewritten): one token per arithmetic instruction, in program order.

    A token is the opcode and, in brackets, the constants among its sources (register
    operands are dropped; a register loaded by ``mov`` from an immediate counts as that
    constant, when that mov is the register's only write). A shuffle's token carries its
    lane offset. ``rewritten`` counts the
    unqualified add/sub/mul.f32 written with their default ``.rn``.
    """
    # A register is a constant only if the function writes it exactly once, with a mov of an
    # immediate (NVVM's PTX is SSA-like except loop-carried values, which are written twice).
    writes = Counter(d for ins in instructions for d in ins.dests)
    constants = {}
    for ins in instructions:
        if ins.opcode.startswith("mov.") and len(ins.operands) == 2 and writes[ins.operands[0]] == 1:
            value = _constant_value(ins.operands[1], {})
            if value is not None:
                constants[ins.operands[0]] = value
    tokens, rewritten = [], 0
    for ins in instructions:
        if is_arithmetic(ins.opcode):
            opcode = ins.opcode
            if make_rounding_explicit and _unqualified(opcode, ("add", "sub", "mul")):
                base, rest = opcode.split(".", 1)
                opcode = f"{base}.rn.{rest}"
                rewritten += 1
            if opcode.startswith("shfl"):
                srcs = ins.sources
                offset = _constant_value(srcs[1], constants) if len(srcs) > 1 else None
                tokens.append(f"{opcode} [offset {offset if offset is not None else '?'}]")
            else:
                values = sorted(v for v in (_constant_value(s, constants) for s in ins.sources) if v is not None)
                tokens.append(opcode + (f" [{', '.join(values)}]" if values else ""))
    return tokens, rewritten


def _is_ordering_token(opcode):
    parts = opcode.split(".")
    if parts[0] in ("atom", "red"):
        return "global" in parts
    if parts[0] in ("ld", "st"):
        return "global" in parts and any(q in parts for q in ("acquire", "release", "relaxed", "volatile"))
    return parts[0] in ("fence", "membar", "nanosleep")


def ordering_tokens(instructions):
    """The queue protocol's memory operations, in program (text) order: atomics and
    acquire/release/relaxed accesses on GLOBAL memory, fences, nanosleep; each with the
    integer constants among its sources (e.g. ``atom.global.add.u32 [1]``). A register counts
    as a constant when its only write is a ``mov`` of an immediate, or when its last write
    before the instruction, in the same basic block, is one (a register the compiler reuses
    for several constants, e.g. a CAS's expected 0 sharing a register with a phi). Generic-address
    ones (nvcc's inlined cooperative-groups grid barrier) are left out: Numba's grid barrier
    is a libcudadevrt call, named among the non-arithmetic differences instead."""
    writes = Counter(d for ins in instructions for d in ins.dests)
    constants = {ins.operands[0]: ins.operands[1] for ins in instructions
                 if _mov_immediate(ins) and writes[ins.operands[0]] == 1}
    last_write = {}  # register -> (block, immediate or None): the latest write in text order
    tokens = []
    for ins in instructions:
        if _is_ordering_token(ins.opcode):
            values = []
            for src in ins.sources:
                if src.startswith("["):
                    continue
                block, immediate = last_write.get(src, (None, None))
                value = immediate if block == ins.block and immediate is not None else _constant_value(src, constants)
                if value is not None:
                    values.append(value)
            tokens.append(ins.opcode + (f" [{', '.join(values)}]" if values else ""))
        for dest in ins.dests:
            last_write[dest] = (ins.block, ins.operands[1] if _mov_immediate(ins) else None)
    return tokens


def _mov_immediate(ins):
    return ins.opcode.startswith("mov.") and len(ins.operands) == 2 and bool(_INT_IMM.match(ins.operands[1]))


def aligned_diff(left, right):
    """difflib alignment: rows (tag, left token or '', right token or '')."""
    rows = []
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        a, b = left[i1:i2], right[j1:j2]
        for k in range(max(len(a), len(b))):
            rows.append((tag, a[k] if k < len(a) else "", b[k] if k < len(b) else ""))
    return rows


# ---- named non-arithmetic differences -------------------------------------------------------

def _count(hist, predicate):
    return sum(n for op, n in hist.items() if predicate(op))


def _int_arith(op, width):
    parts = op.split(".")
    return (parts[0] in ("add", "sub", "mul", "mad", "div", "rem", "shl", "shr", "and", "or", "xor", "neg", "min",
                         "max", "abs", "selp")
            and parts[-1] in (f"s{width}", f"u{width}", f"b{width}"))


def _is_generic_access(op):
    parts = op.split(".")
    spaces = ("global", "shared", "local", "param", "const")
    return parts[0] in ("ld", "st") and not any(p in spaces for p in parts[1:])


def _is_ordering(op):
    return (op.startswith(("atom.", "red.", "fence", "membar")) or ".acquire." in op or ".release." in op
            or ".relaxed." in op or op.startswith("nanosleep"))


#: (key, title, measure(hist, instrs, ptx) -> number, explanation). A key whose numbers
#: differ between the two sides is reported with its explanation.
def _sign_masks(instrs):
    return sum(1 for ins in instrs if ins.opcode == "shr.s64" and ins.operands[-1:] == ("63",))


def _floor_fixups(instrs):
    return sum(1 for ins in instrs if ins.opcode.startswith("selp.") and ins.operands[1:3] == ("-1", "0"))


NAMED_DIFFERENCES = (
    ("param_loads", "kernel parameter loads (ld.param)",
     lambda h, i, p: _count(h, lambda op: op.startswith("ld.param")),
     "The launch layer's slim entry (numba_softmax/launch/entry.py) takes every array argument as its data "
     "pointer and its shape[nd] (8-byte words each; Numba's own ABI would add meminfo, parent, nitems, "
     "itemsize and strides[nd]) and the kernel loads the words it uses (data pointer, shape for bounds, "
     "loops and 2-D indexing); the nvcc entry takes a raw pointer per array and the integer sizes it declares."),
    ("param_count", "kernel parameters declared",
     lambda h, i, p: len(re.findall(r"^\s*\.param\b", p, re.MULTILINE)),
     "Same cause: one array argument is 1 + ndim parameters in the slim entry (5 + 2*ndim in Numba's own "
     "ABI), one pointer in C++ plus the sizes the twin declares."),
    ("int64_ops", "64-bit integer arithmetic instructions",
     lambda h, i, p: _count(h, lambda op: _int_arith(op, 64)),
     "Index math width: Numba computes indices as intp (int64) and multiplies by the stride it loaded; "
     "the C++ index types (int / long long as written in reference_cu) let nvcc keep some index math in 32 "
     "bits or fold it into address arithmetic."),
    ("int32_ops", "32-bit integer arithmetic instructions",
     lambda h, i, p: _count(h, lambda op: _int_arith(op, 32)),
     "Index and loop-counter math kept in 32 bits (C++ int loop counters, Numba int32 task ids)."),
    ("wraparound", "negative-index wraparound sign masks (shr.s64 x, 63)",
     lambda h, i, p: _sign_masks(i),
     "Numba's array indexing supports negative indices: for every index it cannot prove non-negative it "
     "adds (index >> 63) & extent (shr.s64 / and.b64 / add.s64). C++ pointer indexing has no such code."),
    ("floor_division", "sign corrections (selp -1, 0)",
     lambda h, i, p: _floor_fixups(i),
     "Python integer semantics: // rounds toward negative infinity, so Numba adds a sign correction after "
     "each integer division (xor of signs, remainder test, selp -1/0), and range(start, stop, step) "
     "computes a clamped trip count with the same selp pattern (also the block-reduction fold's "
     "blockDim // 32); C++ / truncates and a for loop just compares."),
    ("int_division", "integer divisions (div/rem .s64/.u64/.u32/.s32)",
     lambda h, i, p: _count(h, lambda op: op.split(".")[0] in ("div", "rem") and op.split(".")[-1][0] in "su"),
     "row = i // cols in the elementwise stages divides on both sides (LLVM's 64-bit division bypass: "
     "div.s64 plus a div.u32 fast path). Numba's range(start, stop, step) with a runtime step (grid-stride "
     "loops) computes its trip count with a division up front; a C++ for loop compares and adds instead."),
    ("global_accesses", "global-space loads/stores (ld/st.global.*)",
     lambda h, i, p: _count(h, lambda op: op.split(".")[0] in ("ld", "st") and "global" in op.split(".")),
     "Loads/stores whose address is known to be global (after cvta.to.global)."),
    ("generic_accesses", "generic-space loads/stores (ld/st without a state space)",
     lambda h, i, p: _count(h, _is_generic_access),
     "A generic load/store works on any address; a global one names the state space. Kernel arrays are "
     "global on both sides (cvta.to.global). nvcc's generic accesses in persistent_tiles are the "
     "cooperative-groups grid barrier polling its arrival word (ld.acquire.gpu.u32 on the grid workspace); "
     "Numba's barrier runs inside libcudadevrt instead (a call)."),
    ("shared_accesses", "shared-memory loads/stores",
     lambda h, i, p: _count(h, lambda op: op.split(".")[0] in ("ld", "st") and "shared" in op.split(".")),
     "Block-reduction partials and the DAG broadcast slots; a different count means a value is re-read "
     "from shared memory instead of kept in a register (or the reverse)."),
    ("cvta", "address conversions (cvta)",
     lambda h, i, p: _count(h, lambda op: op.startswith("cvta")),
     "Generic-to-global conversions of pointer arguments (one per array used, placed by each compiler)."),
    ("ordering", "atomics, fences, acquire/release/relaxed accesses, nanosleep",
     lambda h, i, p: _count(h, _is_ordering),
     "Memory-ordering operations. The acquire/release/relaxed primitives are the same inline PTX on both "
     "sides; the grid barrier differs: Numba calls libcudadevrt (cudaCGGetIntrinsicHandle, "
     "cudaCGSynchronize) while nvcc inlines cooperative_groups' barrier (atom.add.release.gpu, "
     "ld.acquire.gpu spin, bar.sync)."),
    ("calls", "calls (call.*)",
     lambda h, i, p: _count(h, lambda op: op.startswith("call")),
     "Numba's grid.sync() is a call into libcudadevrt (linked at load time); nvcc inlines the "
     "cooperative-groups barrier, so its PTX has no call."),
    ("barriers", "block barriers (bar.sync / barrier.sync)",
     lambda h, i, p: _count(h, lambda op: op.startswith(("bar.", "barrier."))),
     "__syncthreads() / cuda.syncthreads() and the barrier inside the grid barrier; unrolled or "
     "duplicated code paths change the static count, not the dynamic order."),
    ("branches", "branches (bra)",
     lambda h, i, p: _count(h, lambda op: op.startswith("bra")),
     "Control flow layout: loop unrolling, bounds checks and the wraparound/floor-division fix-ups."),
    ("predicated_selects", "selects (selp)",
     lambda h, i, p: _count(h, lambda op: op.startswith("selp")),
     "Branch-free selects, mostly from Numba's wraparound and floor-division code or from if-conversion."),
)
