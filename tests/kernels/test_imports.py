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


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules ``path`` imports (``from .x import y``: x.y when y is a module)."""
    mod = _module(path)
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.add(target)
            out |= {f"{target}.{a.name}" for a in node.names}
    return out


def _graph() -> dict[str, set[str]]:
    files = {_module(p): p for p in KERNELS.rglob("*.py")}
    return {mod: {m for m in _imports(p) if m in files and m != mod} for mod, p in files.items()}


def test_kernels_import_nothing_of_the_harness():
    for path in KERNELS.rglob("*.py"):
        harness = {m for m in _imports(path) if m.startswith("lattnbench") and not m.startswith(PACKAGE)}
        assert not harness, f"{path.relative_to(KERNELS)} imports the harness: {sorted(harness)}"


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
