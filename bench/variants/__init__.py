"""Variants added to an experiment in one file each, registered with a decorator (docs/extending.md).

* An Experiment A *kernel variant* is a function ``(x, y) -> [KernelLaunch, ...]``: the launches that write the
  softmax of the float32 device matrix ``x`` into ``y`` (as ``numba_softmax.kernels.fused_row.fused_launches``).
  Register it with ``@kernel_variant("name")``; ``bitwise_with="fused"`` (or ``"stages"``) also requires its
  output to be bit-identical to that variant's, for a variant that keeps the same algorithm.
* An Experiment B *scheduler variant* is a function ``(buffers) -> [KernelLaunch, ...]``: one invocation of the
  task graph on its :class:`numba_softmax.tiled.TiledBuffers`. Register it with ``@scheduler_variant("name")``;
  it must agree bit for bit with the three schedulers, output and intermediates, as they agree with each other.

Where the registering modules come from: every module of this package, and every file named by
``python -m bench --variant-file PATH``. ``--variants NAME[,NAME...]`` picks the ones a run adds to the
experiment's own variants (its reference among them). This package imports no Numba: the modules it loads do,
after the backend is chosen.
"""

import hashlib
import importlib
import importlib.util
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path

#: Each experiment's reference variant (the ratios' denominator) and the names its own variants take.
REFERENCES = {"A": "fused", "B": "separate"}
BUILT_IN = {"A": ("fused", "stages", "cudnn"), "B": ("separate", "phased", "dag")}
#: Suffixes the experiments give derived variants (nvcc twins, empty-work floors): no registered name ends so.
RESERVED_SUFFIXES = ("-nvcc", "-floor")
NAME_PATTERN = re.compile(r"[a-z0-9][a-z0-9_.-]*")


class VariantError(ValueError):
    """A variant that cannot be registered or chosen; the message says why and what is available."""


@dataclass(frozen=True)
class Variant:
    experiment: str
    name: str
    launches: object  # A: (x, y) -> launches; B: (buffers) -> launches
    bitwise_with: str | None  # the variant whose bits it must match, or None (the oracle only)
    source: str  # the file that registered it


_REGISTRY = {"A": {}, "B": {}}
_LOADED_FILES = set()


def _register(experiment, name, function, bitwise_with):
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or name.endswith(RESERVED_SUFFIXES):
        raise VariantError(f"variant name {name!r}: use lower-case letters, digits, '_', '.', '-' (no ',' or '/'), "
                           f"not ending in {' or '.join(RESERVED_SUFFIXES)}")
    if name in BUILT_IN[experiment]:
        raise VariantError(f"variant name {name!r} is one of Experiment {experiment}'s own variants "
                           f"({', '.join(BUILT_IN[experiment])}); choose another")
    source = getattr(function, "__code__", None)
    source = source.co_filename if source is not None else repr(function)
    existing = _REGISTRY[experiment].get(name)
    if existing is not None:
        raise VariantError(f"duplicate Experiment {experiment} variant {name!r}: registered by {existing.source} "
                           f"and again by {source}")
    _REGISTRY[experiment][name] = Variant(experiment, name, function, bitwise_with, source)


def kernel_variant(name, *, bitwise_with=None):
    """Register an Experiment A kernel variant: ``@kernel_variant("name")`` on ``def launches(x, y)``."""
    if bitwise_with not in (None, "fused", "stages"):
        raise VariantError(f"kernel_variant({name!r}): bitwise_with must be None, 'fused' or 'stages', "
                           f"got {bitwise_with!r}")

    def register(function):
        _register("A", name, function, bitwise_with)
        return function
    return register


def scheduler_variant(name):
    """Register an Experiment B scheduler variant: ``@scheduler_variant("name")`` on ``def launches(buffers)``."""
    def register(function):
        _register("B", name, function, REFERENCES["B"])
        return function
    return register


def load_package():
    """Import every module of this package (each registers its variants)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def load_file(path):
    """Import the Python file ``path`` once per process (it registers its variants)."""
    path = Path(path).resolve()
    if path in _LOADED_FILES:
        return
    if not path.is_file():
        raise VariantError(f"--variant-file {path}: no such file")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(f"bench_variant_file_{path.stem}_{digest}", path)
    module = importlib.util.module_from_spec(spec)
    # In sys.modules, as an imported module is: the kernel cache finds a kernel's source file there.
    sys.modules[spec.name] = module
    _LOADED_FILES.add(path)
    spec.loader.exec_module(module)


def names_of(text):
    """``--variants`` as a list of names (None or empty: none)."""
    return [name for name in (text or "").split(",") if name]


def select(experiment, names, files=()):
    """The registered variants ``names`` of ``experiment``, in that order, after loading this package and
    ``files``. Raises :class:`VariantError` for a name not registered, listing the available ones."""
    load_package()
    for path in files:
        load_file(path)
    available = _REGISTRY[experiment]
    unknown = [name for name in names if name not in available]
    if unknown:
        listed = ", ".join(sorted(available)) or "none"
        raise VariantError(f"--variants: unknown Experiment {experiment} variant(s) {', '.join(unknown)}; "
                           f"available: {listed} (registered by bench/variants/ and the --variant-file files; "
                           "docs/extending.md)")
    return [available[name] for name in names]


def chosen(args):
    """The variants a run's arguments choose (``--variants``, ``--variant-file``)."""
    return select(args.experiment, names_of(getattr(args, "variants", None)), getattr(args, "variant_file", None)
                  or ())


def record(variants):
    """What metadata.json keeps of each chosen variant: its source file and that file's SHA-256."""
    out = {}
    for variant in variants:
        path = Path(variant.source)
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        out[variant.name] = {"source": str(path), "sha256": digest, "bitwise_with": variant.bitwise_with}
    return out
