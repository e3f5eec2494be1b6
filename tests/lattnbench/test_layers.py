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


# ---- between the kernel families ------------------------------------------------------------------
#: kernels/ packages every family may import: the shared host helpers, the decay schedule and the
#: naive references
SHARED_KERNELS = ("kernels.common", "kernels.decay", "kernels.naive")
#: the only imports of another family's package: (importing family, imported module), each of an
#: entry point, never of a helper module
CROSS_FAMILY = {
    # the Triton path the Gluon forward falls back on, and whose backward it reuses
    ("kernels.gluon.lightning", "kernels.triton.lightning.ops"),
    # the registry's lightning/jax-triton through the JAX api
    ("kernels.jax", "kernels.triton.lightning.jax_bridge"),
    # the local pass of the sequence-parallel kernels
    ("kernels.parallel", "kernels.triton.lightning.ops"),
    ("kernels.parallel", "kernels.jax"),
}


def family(module: str) -> str:
    """The kernel family a module of kernels/ belongs to: ``kernels.triton.gla``,
    ``kernels.gluon.lightning`` (two levels under triton/ and gluon/), ``kernels.jax``,
    ``kernels.common``, ..."""
    parts = module.removeprefix("lattnbench.").split(".")
    return ".".join(parts[:3] if parts[1:2] in (["triton"], ["gluon"]) else parts[:2])


def cross_family_offenders(paths, source: str | None = None) -> list[str]:
    """Imports of another family's modules outside CROSS_FAMILY, any private name (a component
    with a leading underscore) of another family, and any import of a family by kernels.common."""
    bad = []
    for path in paths:
        own = family(".".join(path.relative_to(ROOT).with_suffix("").parts))
        for line, name in imports(path, source):
            name = name.removeprefix("lattnbench.")
            if not name.startswith("kernels."):
                continue
            other = family(name)
            # a namespace, or the package a ``from`` import names (what it imports is checked)
            if other == own or name in ("kernels.triton", "kernels.gluon", other):
                continue
            if own != "kernels.common" and name.startswith(SHARED_KERNELS):
                continue
            allowed = any(own == a and (name == m or name.startswith(m + ".")) for a, m in CROSS_FAMILY)
            private = any(p.startswith("_") for p in name.split("."))
            if not allowed or private:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(bad))


def test_kernel_families_share_helpers_only_through_kernels_common():
    files = sorted((ROOT / "kernels").rglob("*.py"))
    assert files and cross_family_offenders(files) == []


def test_gla_and_gluon_import_nothing_of_lightnings_helpers():
    """Nothing of kernels/triton/lightning in kernels/triton/gla; in kernels/gluon only the public
    names of its ops (the fallback and the backward)."""
    for line, name in ((ln, n) for p in sorted((ROOT / "kernels" / "triton" / "gla").rglob("*.py"))
                       for ln, n in imports(p)):
        assert not name.startswith("kernels.triton.lightning"), (line, name)
    for p in sorted((ROOT / "kernels" / "gluon").rglob("*.py")):
        for line, name in imports(p):
            if name.startswith("kernels.triton.lightning"):
                assert name in ("kernels.triton.lightning", "kernels.triton.lightning.ops"), (p, line, name)


@pytest.mark.parametrize("where, source", [
    ("triton/gla", "from ..lightning.ops import _alignment\n"),
    ("triton/gla", "from ..lightning import checks\n"),
    ("gluon/lightning", "from ...triton.lightning.launch import PlainLauncher\n"),
    ("gluon/lightning", "from ...triton.lightning.ops import _raw_stream\n"),
    ("gluon/lightning", "def f():\n    from lattnbench.kernels.triton.gla import ops\n"),
    ("common", "from ..triton.lightning import ops\n"),
])
def test_the_family_check_sees_helpers_of_another_family(where, source):
    probe = ROOT / "kernels" / where / "probe.py"  # where the source would sit; never written
    assert cross_family_offenders([probe], source)
