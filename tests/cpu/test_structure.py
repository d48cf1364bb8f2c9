"""The repository's shape, kept as the code grows: layers without import cycles, files and functions of a
readable size, a harness no larger than the library (docs/harness.md, "Where the harness code lives")."""

import ast
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("numba_softmax", "bench")
TREES = PACKAGES + ("tests",)  # held to the same file and function sizes
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 150
MAX_KERNEL_BODY_LINES = 200


def _sources(package):
    listed = subprocess.run(["git", "ls-files", package], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    return [ROOT / name for name in listed.stdout.split() if name.endswith(".py")]


def _module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported_modules(path, known):
    """The project modules ``path`` imports, anywhere in the file (inside functions too)."""
    name = _module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{module}.{alias.name}" in known:
                    found.add(f"{module}.{alias.name}")
                elif module in known:
                    found.add(module)
    found.discard(name)
    return found


def _cycles(graph):
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return components


def test_no_import_cycles():
    paths = [path for package in PACKAGES for path in _sources(package)]
    known = {_module_name(path) for path in paths}
    graph = {_module_name(path): _imported_modules(path, known) for path in paths}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _is_kernel(function):
    """A function compiled for the GPU: decorated with ``cuda.jit`` or handed to it (a factory's body)."""
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if isinstance(target, ast.Attribute) and target.attr == "jit":
            return True
    return False


@pytest.mark.parametrize("package", TREES)
def test_files_and_functions_stay_readable(package):
    too_long = []
    for path in _sources(package):
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                limit = MAX_KERNEL_BODY_LINES if _is_kernel(node) else MAX_FUNCTION_LINES
                if lines > limit:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines")
    assert too_long == []


def test_the_harness_is_no_larger_than_the_library():
    lines = {package: sum(path.read_text().count("\n") for path in _sources(package)) for package in PACKAGES}
    assert lines["bench"] <= lines["numba_softmax"], lines
