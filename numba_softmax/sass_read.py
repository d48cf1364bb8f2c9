"""SASS read as data for ``python -m bench sass``: nvdisasm's listing parsed into functions and instructions,
each instruction classed (float, integer, 64-bit, memory, ordering, branch), loops and the hot loop found.
"""

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field

from .ptx import parse_ptxas_verbose, run_ptxas

ARCH = "sm_90"

# ---- disassembly --------------------------------------------------------------------------

@dataclass(frozen=True)
class SassInstruction:
    address: int
    predicate: str   # "" or e.g. "@!P3"
    opcode: str      # with modifiers, e.g. "LDG.E.128"
    operands: str

    @property
    def base(self):
        return self.opcode.split(".")[0]

    @property
    def modifiers(self):
        return self.opcode.split(".")[1:]


@dataclass
class SassFunction:
    name: str
    entry: bool = False                               # a kernel (STO_CUDA_ENTRY), not a subroutine
    instructions: list = field(default_factory=list)
    labels: dict = field(default_factory=dict)        # label -> address of the next instruction
    subroutines: list = field(default_factory=list)   # functions it calls, directly or not

    def text(self):
        return "\n".join(f"/*{i.address:04x}*/ {i.predicate + ' ' if i.predicate else ''}{i.opcode} {i.operands}"
                         .rstrip() for i in self.instructions) + "\n"


_FUNCTION = re.compile(r"^\s*\.type\s+(\S+),@function")
_ENTRY_MARK = re.compile(r"^\s*\.other\s+(\S+),@\"STO_CUDA_ENTRY")
_LABEL = re.compile(r"^([.$\w]+):\s*$")
_INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[\w]+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")
_TARGET = re.compile(r"`\(([^)]+)\)")


def parse_nvdisasm(text):
    """``nvdisasm -c`` output -> {function name: :class:`SassFunction`}: every kernel and every
    subroutine (nvcc places its internal routines, e.g. 64-bit division, after the kernel in the
    kernel's section; a relocatable cubin of ptxas has them in sections of their own). A subroutine's
    instructions are never counted as its caller's; each kernel lists the subroutines it reaches."""
    functions, current, pending = {}, None, []
    for line in text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = functions.setdefault(function.group(1), SassFunction(function.group(1)))
            pending = []
            continue
        entry = _ENTRY_MARK.match(line)
        if entry and entry.group(1) in functions:
            functions[entry.group(1)].entry = True
            continue
        if current is None:
            continue
        label = _LABEL.match(line.strip())
        if label:
            pending.append(label.group(1))
            continue
        ins = _INSTRUCTION.search(line)
        if ins:
            address = int(ins.group(1), 16)
            for name in pending:
                current.labels[name] = address
            pending = []
            current.instructions.append(SassInstruction(address, (ins.group(2) or "").strip(), ins.group(3),
                                                        ins.group(4)))
    for function in functions.values():
        if function.entry:
            function.subroutines = _reached(function, functions)
    return functions


def _reached(function, functions):
    seen, stack = [], [function]
    while stack:
        for ins in stack.pop().instructions:
            target = _TARGET.search(ins.operands) if ins.base == "CALL" else None
            if target and target.group(1) in functions and target.group(1) not in seen:
                seen.append(target.group(1))
                stack.append(functions[target.group(1)])
    return seen


def disassemble(cubin_path, nvdisasm):
    proc = subprocess.run([nvdisasm, "-c", str(cubin_path)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"nvdisasm -c {cubin_path} failed:\n{proc.stderr}")
    return parse_nvdisasm(proc.stdout)


def assemble(ptx, out_cubin, ptxas, arch=ARCH):
    """ptxas -v: PTX -> cubin, whole-program as the driver builds it (:func:`numba_softmax.ptx.run_ptxas`);
    returns the ``ptxas -v`` resources of its one entry."""
    proc = run_ptxas(ptx, out_cubin, ptxas, arch)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed:\n{proc.stdout}{proc.stderr}")
    resources = parse_ptxas_verbose(proc.stdout + proc.stderr)
    return next((r for name, r in resources.items() if "$" not in name and "__cuda_" not in name), {})


def only_entry(functions, hint=""):
    """The one kernel of a cubin ptxas made of one kernel's PTX (its name is Numba's mangled one)."""
    entries = [f for f in functions.values() if f.entry]
    if len(entries) != 1:
        raise ValueError(f"expected one kernel in the cubin of {hint}, found {[f.name for f in entries]}")
    return entries[0]


# ---- instruction classes ------------------------------------------------------------------

FLOAT_OPS = ("FFMA", "FMUL", "FADD", "FMNMX", "FSETP", "FSEL", "MUFU")
INTEGER_OPS = ("IMAD", "IADD3", "LEA", "SHF", "LOP3", "ISETP", "SEL", "IABS", "IMNMX", "VIMNMX", "IMUL", "IADD",
               "FLO", "POPC", "PRMT", "BMSK", "I2F", "F2I", "I2I", "SGXT", "IDP", "IMAD", "LOP", "SHL", "SHR")
BRANCH_OPS = ("BRA", "BRX", "JMP", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "WARPSYNC", "BREAK", "BMOV")
ORDERING_OPS = ("ATOM", "ATOMG", "ATOMS", "RED", "REDG", "MEMBAR", "FENCE", "ERRBAR", "CCTL", "NANOSLEEP")
_WIDE = {"WIDE", "X", "EX", "U64", "S64", "64"}


def _integer_base(ins):
    """IMAD, IADD3, ... with the uniform-datapath ``U`` prefix removed (UIMAD counts as IMAD)."""
    base = ins.base
    if base.startswith("U") and base[1:] in INTEGER_OPS:
        return base[1:]
    return base if base in INTEGER_OPS else None


def is_64bit_integer(ins):
    """Part of a 64-bit integer operation: a wide multiply, a carry half (``.X``), a 64-bit compare
    (``.EX``), a 64-bit shift, or a shift of a sign into the high word (``SHF.R.S32.HI x, RZ, 0x1f``)."""
    if _integer_base(ins) is None:
        return False
    if _WIDE & set(ins.modifiers) or "HI.X" in ins.opcode:
        return True
    return ins.base in ("SHF", "USHF") and "S32.HI" in ins.opcode and ", RZ, 0x1f," in f"{ins.operands},"


def access_width_bits(ins):
    for width in ("128", "64", "U16", "S16", "U8", "S8"):
        if width in ins.modifiers:
            return {"128": 128, "64": 64, "U16": 16, "S16": 16, "U8": 8, "S8": 8}[width]
    return 32


def is_padding(ins):
    """An instruction that never executes: a ``NOP``, or one predicated on ``!PT`` (never true), which ptxas
    places as filler (``@!PT LDS RZ, [RZ]``); it is counted as padding, not as the operation it names."""
    return ins.base == "NOP" or ins.predicate == "@!PT"


def classify(ins):
    """The counting classes of one instruction (several may apply)."""
    base = ins.base
    if is_padding(ins):
        return ["NOP"]
    classes = []
    if base in ("LDG", "STG", "LD", "ST"):
        kind = {"LDG": "global load", "STG": "global store", "LD": "generic load", "ST": "generic store"}[base]
        classes.append(f"{kind} {access_width_bits(ins)}-bit")
    elif base in ("LDS", "STS"):
        classes.append("shared load" if base == "LDS" else "shared store")
    elif base == "LDL" or base == "STL":
        classes.append("local (stack) access")
    elif base in ("LDC", "ULDC"):
        classes.append("constant load (parameters)")
    elif base in FLOAT_OPS:
        classes.append(ins.opcode if base == "MUFU" else base)
    elif base == "SHFL":
        classes.append("shuffle")
    elif base == "BAR":
        classes.append("barrier")
    elif base in BRANCH_OPS:
        classes.append(f"branch/control {base}")
    elif base in ORDERING_OPS:
        classes.append(f"atomic/ordering {base}")
    integer = _integer_base(ins)
    if integer is not None:
        classes.append(f"integer {integer}")
        classes.append("int width: 64-bit part" if is_64bit_integer(ins) else "int width: 32-bit")
    if ins.predicate:
        classes.append("predicated")
    return classes


def class_counts(instructions):
    counts = Counter()
    for ins in instructions:
        counts.update(classify(ins))
    counts["instructions (no NOP)"] = sum(1 for i in instructions if not is_padding(i))
    return dict(sorted(counts.items()))


# ---- loops and the hot loop ---------------------------------------------------------------

def loops(function):
    """[(start, end)] address ranges closed by a backward branch (``BRA`` to a label before it)."""
    found = []
    for ins in function.instructions:
        if ins.base != "BRA":
            continue
        target = _TARGET.search(ins.operands)
        # A branch to itself is the trap after the last EXIT, not a loop.
        if target and target.group(1) in function.labels and function.labels[target.group(1)] < ins.address:
            found.append((function.labels[target.group(1)], ins.address))
    return sorted(set(found))


def _memory_ops(instructions):
    return sum(1 for i in instructions if i.base in ("LDG", "STG", "LD", "ST"))


def hot_loop(function):
    """The loop the kernel spends its memory traffic in: the one with the most global memory
    instructions (the smallest such loop when several tie); the whole kernel when it has no loop
    with a memory access (a fully unrolled or straight-line kernel). Returns (range or None, body)."""
    best = None
    for start, end in loops(function):
        body = [i for i in function.instructions if start <= i.address <= end]
        memory = _memory_ops(body)
        if memory == 0:
            continue
        key = (memory, -len(body))
        if best is None or key > best[0]:
            best = (key, (start, end), body)
    if best is None:
        return None, list(function.instructions)
    return best[1], best[2]


def token(ins):
    """An instruction for the aligned diff: opcode with modifiers, the guard's presence, no registers."""
    return ("@P " if ins.predicate else "") + ins.opcode
