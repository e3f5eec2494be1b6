"""Directions of dependency, read from the source with ``ast`` (imports inside functions count too):
measurement is a leaf of the harness, and the kernels are a library that imports none of it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what lattnbench/measure/ may not import: everything that drives kernels or sits above them
ABOVE_MEASURE = ("adapters", "registry", "runner", "commands", "views", "harness", "operators", "cli")


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import in a file, relative ones resolved against its package."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def offending(paths, allowed, forbidden) -> list[str]:
    bad = []
    for path in paths:
        for line, name in imports(path):
            if name.startswith(forbidden) and not name.startswith(allowed):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(bad))


def test_measure_imports_nothing_above_it():
    forbidden = tuple(f"lattnbench.{m}" for m in ABOVE_MEASURE)
    files = sorted((ROOT / "lattnbench" / "measure").rglob("*.py"))
    assert files and offending(files, ("lattnbench.measure",), forbidden) == []


def test_kernels_import_nothing_of_the_harness():
    files = sorted((ROOT / "kernels").rglob("*.py"))
    assert files and offending(files, ("lattnbench.kernels",), ("lattnbench",)) == []


@pytest.mark.parametrize("source, expected", [
    ("def f():\n    from lattnbench.harness.points import x\n", "lattnbench.harness.points"),
    ("from .. import operators\n", "lattnbench.operators"),
    ("import lattnbench.cli as c\n", "lattnbench.cli"),
])
def test_the_check_sees_function_level_and_relative_imports(source, expected):
    probe = ROOT / "lattnbench" / "measure" / "probe.py"  # where the source would sit; never written
    assert any(name == expected for _, name in imports(probe, source))
