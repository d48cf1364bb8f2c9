"""The on-disk cache of compiled kernels: its key, its files, and what this process took from it.

A kernel compiled once (Numba's typing, lowering, NVVM and link: seconds per kernel) is kept as the
cubin Numba linked for the device, in one file per kernel, and loaded with the driver by the next
process (:mod:`.cached_kernel`). numba-cuda's own ``cache=True`` cannot serve: this project's kernels
come from factories (closures over build flags and geometry) and are launched through a slim entry.

The key is the SHA-256 of everything that changes the code (:func:`cache_key`): the kernel's own
code and the code of every project function it calls into, followed through its globals, closure cells
and the module attributes it names (device functions, helpers, constants); the values it closes over
(factory parameters); its argument types and compile options; the toolchain (Python, numba, numba-cuda,
llvmlite, NVVM); the compute capability; and :data:`FORMAT_VERSION`. A project module's whole source file is
keyed only where the kernel refers to something of it that has no stable description (a class, an attribute
that is neither code nor a plain value), so editing one kernel recompiles that kernel and what calls it, not
its module's other kernels. A value that the kernel holds itself and that has no stable description makes
the kernel uncacheable (compiled every time, never a wrong hit).

This module touches no GPU: the key and the store of bytes work (and are tested) on a CPU.
docs/cache.md describes the location, the variables and ``python -m bench cache``.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import types as pytypes
import warnings

import llvmlite
import numba
import numba_cuda
import numpy as np

#: Bumped whenever the entry format or the key's recipe changes: older entries are then never read.
FORMAT_VERSION = 2
ENTRY_SUFFIX = ".kernel"
_TEMP_PREFIX = ".writing-"
_MAGIC = b"numba_softmax kernel cache %d\n" % FORMAT_VERSION
_DIGEST_BYTES = 64  # a hex SHA-256 of the body follows the magic line
_ENTRY_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "entry.py")


class Uncacheable(Exception):
    """The kernel refers to a value without a stable description: it is compiled, never cached."""


class CacheMiss(RuntimeError):
    """A read-only cache filled ahead of time (``--prebuilt``) does not hold a kernel the run launches."""


# --- the key -------------------------------------------------------------------------------------

@functools.cache
def _library_folders():
    paths = sysconfig.get_paths()
    return tuple(os.path.realpath(paths[name]) + os.sep for name in ("stdlib", "platstdlib", "purelib", "platlib"))


def _followed_file(module):
    """The source file of ``module`` when it is project code: this package wherever it is installed, or any
    module outside the standard library and the installed packages (whose versions the key holds); else None."""
    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return None
    path = os.path.realpath(path)
    ours = module.__name__.split(".")[0] == __name__.split(".")[0]
    return path if ours or not path.startswith(_library_folders()) else None


@functools.cache
def _file_digest(path, _mtime_ns, _size):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def file_digest(path):
    """SHA-256 of a file's bytes (read once per process while the file is unchanged)."""
    stat = os.stat(path)
    return _file_digest(path, stat.st_mtime_ns, stat.st_size)


def _names(code):
    """Every global or attribute name ``code`` and its nested code objects use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, pytypes.CodeType):
            names |= _names(const)
    return names


def _code_description(code):
    consts = [_code_description(c) if isinstance(c, pytypes.CodeType) else _plain(c) for c in code.co_consts]
    return [code.co_code.hex(), list(code.co_names), list(code.co_varnames), list(code.co_freevars), consts]


def _plain(value):
    """A stable description of a constant: None, numbers, strings, and containers of them."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return [type(value).__name__, repr(value)]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__, [_plain(v) for v in value]]
    if isinstance(value, (frozenset, set)):
        return [type(value).__name__, sorted(json.dumps(_plain(v)) for v in value)]
    if value is Ellipsis:
        return ["ellipsis"]
    raise Uncacheable(f"no stable description of a {type(value).__qualname__}")


#: Libraries whose type objects (numba's, numba-cuda's, llvmlite IR's) a kernel or intrinsic may refer to:
#: described by their text, which names them completely.
_TYPE_FAMILIES = ("numba", "numba_cuda", "llvmlite")


class _KeyWalk:
    """Collects what a kernel's code depends on: function code, referenced values, and the source files of the
    project modules something was referred to that has no stable description of its own."""

    def __init__(self):
        self.modules = {}  # module name -> SHA-256 of its file
        self.parts = []
        self._seen = set()

    def module(self, module):
        """Key ``module``'s whole source file (project code only); whether it is project code."""
        path = _followed_file(module)
        if path is not None and module.__name__ not in self.modules:
            self.modules[module.__name__] = file_digest(path)
        return path is not None

    def function(self, function):
        if id(function) in self._seen:
            return
        self._seen.add(id(function))
        self.parts.append(["function", function.__module__, function.__qualname__])
        module = sys.modules.get(function.__module__)
        if module is None or _followed_file(module) is None:
            if module is None or function.__module__ == "__main__":
                raise Uncacheable(f"{function.__qualname__}: its module {function.__module__} has no source file")
            return  # a library's function: its version is in the key
        code = function.__code__
        self.parts.append(["code", _code_description(code)])
        self.parts.append(["defaults", self.value(function.__defaults__ or ())])
        for name, cell in zip(code.co_freevars, function.__closure__ or (), strict=True):
            try:
                contents = cell.cell_contents
            except ValueError as exc:
                raise Uncacheable(f"{function.__qualname__}: closure cell {name} is empty") from exc
            self.parts.append(["cell", name, self.value(contents)])
        names = _names(code)
        for name in sorted(names):
            if name in function.__globals__:
                self.parts.append(["global", name, self.value(function.__globals__[name], names)])

    def value(self, value, names=()):
        """A stable description of a referenced value; follows functions and project modules."""
        if isinstance(value, pytypes.ModuleType):
            if _followed_file(value) is not None:
                # the module's attributes the code names (``numerics.safe_exp``, ``numerics.QUAD``): each
                # described, or, where one has no stable description, the module's whole file keyed
                for name in sorted(set(names) & set(vars(value))):
                    try:
                        described = self.value(vars(value)[name])
                    except Uncacheable:
                        self.module(value)
                        continue
                    self.parts.append(["attribute", value.__name__, name, described])
            return ["module", value.__name__]
        if hasattr(value, "py_func") and hasattr(value, "targetoptions"):  # a Numba dispatcher
            self.function(value.py_func)
            for path in value.targetoptions.get("link") or ():  # files linked in: their bytes, not their names
                if isinstance(path, str) and os.path.isfile(path):
                    self.modules[f"link:{os.path.abspath(path)}"] = file_digest(path)
            return ["dispatcher", value.py_func.__module__, value.py_func.__qualname__,
                    self.value(dict(value.targetoptions))]
        if isinstance(value, (pytypes.FunctionType, pytypes.BuiltinFunctionType)):
            if isinstance(value, pytypes.FunctionType):
                self.function(value)
            return ["function", getattr(value, "__module__", None), value.__qualname__]
        defn = getattr(value, "_defn", None)  # a Numba @intrinsic
        if isinstance(defn, pytypes.FunctionType):
            self.function(defn)
            return ["intrinsic", defn.__module__, defn.__qualname__]
        if isinstance(value, type):
            module = sys.modules.get(value.__module__)
            if module is not None:
                self.module(module)
            return ["class", value.__module__, value.__qualname__]
        if isinstance(value, enum.Enum):
            return ["enum", type(value).__qualname__, value.name, _plain(value.value)]
        if dataclasses.is_dataclass(value):
            return ["dataclass", type(value).__module__, type(value).__qualname__,
                    [[field.name, self.value(getattr(value, field.name))] for field in dataclasses.fields(value)]]
        if isinstance(value, (tuple, list)):
            return [type(value).__name__, [self.value(v) for v in value]]
        if isinstance(value, dict):
            return ["dict", [[_plain(k), self.value(value[k])] for k in sorted(value, key=repr)]]
        if any(c.__name__ == "Type" and c.__module__.split(".")[0] in _TYPE_FAMILIES for c in type(value).__mro__):
            return ["type", type(value).__module__, type(value).__qualname__, str(value)]
        if isinstance(value, np.dtype):
            return ["dtype", value.str]
        if isinstance(value, np.ndarray):
            return ["ndarray", value.dtype.str, list(value.shape), hashlib.sha256(value.tobytes()).hexdigest()]
        if isinstance(value, np.generic):
            return ["numpy scalar", value.dtype.str, repr(value.item())]
        return _plain(value)


@functools.cache
def toolchain_versions():
    """What compiles the code: Python, numba, numba-cuda, llvmlite, NVVM (the assembler that turns the PTX
    into the cubin, the driver's or ptxas, is recorded in the entry but not keyed: both give valid code)."""
    from numba.cuda.cudadrv import nvvm  # noqa: PLC0415 - not importable in the simulator, where nothing is cached

    return {"python": sys.version.split()[0], "numba": numba.__version__, "numba-cuda": numba_cuda.__version__,
            "llvmlite": llvmlite.__version__, "nvvm": list(nvvm.NVVM().get_version())}


def kernel_name(dispatcher, argtypes) -> str:
    """``module.name(argument types)``: the kernel as people read it (the prebuilt manifests' key)."""
    function = dispatcher.py_func
    return f"{function.__module__}.{function.__name__}({', '.join(str(t) for t in argtypes)})"


def cache_key(dispatcher, argtypes, compute_capability, toolchain=None) -> str:
    """The SHA-256 naming this kernel's entry (raises :class:`Uncacheable`)."""
    walk = _KeyWalk()
    options = walk.value(dispatcher)
    walk.modules["numba_softmax.launch.entry"] = file_digest(_ENTRY_SOURCE)  # the slim entry's generator
    recipe = {"format": FORMAT_VERSION, "kernel": kernel_name(dispatcher, argtypes), "dispatcher": options,
              "parts": walk.parts, "modules": sorted(walk.modules.items()),
              "argtypes": [str(t) for t in argtypes], "toolchain": toolchain or toolchain_versions(),
              "compute_capability": list(compute_capability)}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def ptx_key(dispatcher, argtypes, compute_capability) -> str:
    """The key of the kernel's offline PTX (:func:`numba_softmax.ptx.kernel_ptx`): :func:`cache_key`'s recipe in
    a namespace of its own, so a PTX entry is never read as a cubin (raises :class:`Uncacheable`)."""
    return hashlib.sha256(b"ptx " + cache_key(dispatcher, argtypes, compute_capability).encode()).hexdigest()


# --- the store -----------------------------------------------------------------------------------

_warned = set()


def _warn_once(topic, message):
    """One warning per ``topic`` (a folder that cannot be written, a corrupt entry) per process."""
    if topic not in _warned:
        _warned.add(topic)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


class KernelCache:
    """A folder of entries: ``<key>.kernel`` = magic line, SHA-256 of the body, body (8-byte length of a
    JSON record, the record, the cubin). Written to a temporary file in the folder and renamed into place,
    so concurrent writers of one entry leave one whole entry and a reader never sees half of one."""

    def __init__(self, folder, read_only=False):
        self.folder = os.path.abspath(folder)
        self.read_only = read_only

    def path(self, key):
        return os.path.join(self.folder, key + ENTRY_SUFFIX)

    def load(self, key):
        """``(record, cubin bytes)`` of ``key``, or None when absent; a corrupt entry is removed (one
        warning) and reads as absent, so it is rebuilt."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        body_at = len(_MAGIC) + _DIGEST_BYTES
        body = data[body_at:]
        try:
            if not data.startswith(_MAGIC) or data[len(_MAGIC):body_at].decode() != hashlib.sha256(body).hexdigest():
                raise ValueError("checksum")
            length = int.from_bytes(body[:8], "little")
            record = json.loads(body[8:8 + length])
            return record, body[8 + length:]
        except (ValueError, UnicodeDecodeError):
            _warn_once(("corrupt", path), f"kernel cache: {path} is truncated or corrupt; "
                       + ("it is not used" if self.read_only else "compiling the kernel again"))
            if not self.read_only:
                self._remove(path)
            return None

    def store(self, key, record, image) -> bool:
        """Write one entry atomically; False (one warning per process) where the folder cannot be written."""
        meta = json.dumps(record, sort_keys=True).encode()
        body = len(meta).to_bytes(8, "little") + meta + bytes(image)
        try:
            os.makedirs(self.folder, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=ENTRY_SUFFIX, dir=self.folder)
            try:
                with os.fdopen(handle, "wb") as f:
                    f.write(_MAGIC + hashlib.sha256(body).hexdigest().encode() + body)
                os.replace(temporary, self.path(key))
            except BaseException:
                self._remove(temporary)
                raise
        except OSError as exc:
            self._unwritable(exc)
            return False
        return True

    def _unwritable(self, exc):
        _warn_once(("unwritable", self.folder), f"kernel cache: {self.folder} is not writable "
                   f"({exc.strerror or exc}); this process compiles without the cache")

    def writable(self) -> bool:
        """Create the folder if needed; False (one warning per process) where that or a write fails."""
        try:
            os.makedirs(self.folder, exist_ok=True)
            with tempfile.TemporaryFile(prefix=_TEMP_PREFIX, dir=self.folder):
                pass
        except OSError as exc:
            self._unwritable(exc)
            return False
        return True

    def files(self):
        """Every file this cache wrote there (entries and leftover temporary files), sorted."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(os.path.join(self.folder, name) for name in names
                      if name.endswith(ENTRY_SUFFIX) and (len(name) == 64 + len(ENTRY_SUFFIX)
                                                          or name.startswith(_TEMP_PREFIX)))

    def clear(self) -> int:
        files = self.files()
        for path in files:
            self._remove(path)
        return len(files)

    @staticmethod
    def _remove(path):
        try:
            os.remove(path)
        except OSError:
            pass


# --- where, and whether --------------------------------------------------------------------------

def default_folder() -> str:
    """``NUMBA_SOFTMAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/numba_softmax``, else ``~/.cache/numba_softmax``."""
    chosen = os.environ.get("NUMBA_SOFTMAX_CACHE_DIR")
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(base), "numba_softmax")


def disabled() -> bool:
    return os.environ.get("NUMBA_SOFTMAX_CACHE", "1").strip().lower() in ("0", "false", "no", "off")


_state = {"cache": None, "chosen": False}


def active_cache() -> KernelCache | None:
    """The cache this process uses: the one :func:`use` set, else the default folder (None where
    ``NUMBA_SOFTMAX_CACHE=0`` or the folder cannot be written)."""
    if not _state["chosen"]:
        cache = None if disabled() else KernelCache(default_folder())
        _state["cache"] = cache if cache is not None and cache.writable() else None
        _state["chosen"] = True
    return _state["cache"]


def use(cache: KernelCache | None):
    """Make ``cache`` (or no cache) this process's from now on (a read-only one is a ``--prebuilt`` folder:
    a miss there stops the run with :class:`CacheMiss`)."""
    _state["cache"], _state["chosen"] = cache, True


def reset():
    """Choose the cache again from the environment at the next compile (tests)."""
    _state["cache"], _state["chosen"] = None, False


# --- what this process compiled and loaded -------------------------------------------------------

_log = []


def record_compile(kernel, outcome, seconds, key=None, reason=None):
    """One kernel made ready: ``outcome`` is hit, miss, uncacheable or off (no cache)."""
    entry = {"kernel": kernel, "outcome": outcome, "seconds": round(seconds, 4), "key": key}
    if reason:
        entry["reason"] = reason
    _log.append(entry)


def compile_log() -> list[dict]:
    """Every kernel this process compiled or loaded, in order, with its seconds and hit or miss."""
    return [dict(entry) for entry in _log]


#: What each outcome of :func:`record_compile` means, in the order a summary gives them.
OUTCOMES = {"hit": "loaded from the cache", "miss": "compiled and stored", "uncacheable": "compiled, uncacheable",
            "off": "compiled, no cache"}


def compile_summary(log, slowest=5) -> str:
    """One line on ``log`` (:func:`compile_log` entries, of one process or several): how many kernels were made
    ready and in how many seconds, by outcome, then the ``slowest`` that did not come from the cache."""
    counts = {outcome: sum(entry["outcome"] == outcome for entry in log) for outcome in OUTCOMES}
    seconds = sum(entry["seconds"] for entry in log)
    text = (f"kernel cache: {len(log)} kernel{'s' * (len(log) != 1)} made ready in {seconds:.1f} s ("
            + ", ".join(f"{count} {OUTCOMES[outcome]}" for outcome, count in counts.items() if count) + ")")
    compiled = sorted((entry for entry in log if entry["outcome"] != "hit"), key=lambda entry: -entry["seconds"])
    if compiled[:slowest]:
        text += "; slowest compiled: " + ", ".join(f"{entry['kernel']} {entry['seconds']:.1f} s"
                                                   for entry in compiled[:slowest])
    return text
