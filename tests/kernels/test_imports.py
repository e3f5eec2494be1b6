"""The kernel set's imports: a library that imports nothing of the harness, without import circles
(module-level and lazy, function-level imports alike). Read from the source, nothing imported."""
from __future__ import annotations

import ast
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "kernels"
PACKAGE = "lattnbench.kernels"


def _module(path: Path) -> str:
    parts = list(path.relative_to(KERNELS).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([PACKAGE, *parts])


def _import_froms(path: Path):
    """(absolute module name, imported names) of every ``from X import ...`` in ``path``."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            yield node.level > 0, target, [a.name for a in node.names]


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (``from .x import y``: x, and x.y when y is a
    module)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    for _, target, names in _import_froms(path):
        out |= {target} | {f"{target}.{n}" for n in names}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in KERNELS.rglob("*.py")}
    return {mod: {m for m in _imports(p) if m in files and m != mod} for mod, p in files.items()}


def test_kernels_import_nothing_of_the_harness():
    for path in KERNELS.rglob("*.py"):
        harness = {m for m in _imports(path) if m.startswith("lattnbench") and not m.startswith(PACKAGE)}
        assert not harness, f"{path.relative_to(KERNELS)} imports the harness: {sorted(harness)}"


def test_relative_imports_resolve():
    """Lazy imports run only when their function does: a wrong one shows here, not in a user's call."""
    modules = {_module(p) for p in KERNELS.rglob("*.py")}
    for path in KERNELS.rglob("*.py"):
        missing = [t for relative, t, _ in _import_froms(path) if relative and t not in modules]
        assert not missing, f"{path.relative_to(KERNELS)} imports what kernels/ does not have: {missing}"


def test_no_import_circles():
    graph = _graph()
    done: set[str] = set()

    def visit(mod, stack):
        assert mod not in stack, "import circle: " + " -> ".join([*stack[stack.index(mod):], mod])
        if mod in done:
            return
        for dep in sorted(graph[mod]):
            # a package imports its own submodules (__init__ re-exports): not a circle
            if not dep.startswith(mod + "."):
                visit(dep, [*stack, mod])
        done.add(mod)

    for mod in sorted(graph):
        visit(mod, [])
