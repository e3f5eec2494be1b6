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
#: kernels/ packages every family may import: the shared host and JAX helpers, the decay schedule
#: and the naive torch references of the general recurrence
SHARED_KERNELS = ("kernels.common", "kernels.decay", "kernels.naive")
#: the only imports of another family's package: (importing family, imported module), each of an
#: entry point, never of a helper module
CROSS_FAMILY = {
    # the registry's lightning/jax-triton through the JAX api (kernels/jax serves several families)
    ("kernels.jax", "kernels.lightning.triton.jax_bridge"),
    # the local pass of the JAX sequence-parallel kernel
    ("kernels.lightning", "kernels.jax"),
}


def family(module: str) -> str:
    """The kernel family a module of kernels/ belongs to, one level under kernels/:
    ``kernels.lightning``, ``kernels.gla``, ``kernels.gdn``, the shared ``kernels.jax``,
    ``kernels.naive``, ``kernels.common``, ``kernels.decay``."""
    return ".".join(module.removeprefix("lattnbench.").split(".")[:2])


def backend(module: str) -> str:
    """The backend inside a family (``kernels.lightning.triton``, ``kernels.gdn.jax``), or the
    family's module itself (``kernels.gdn.naive``)."""
    return ".".join(module.removeprefix("lattnbench.").split(".")[:3])


def cross_family_offenders(paths, source: str | None = None) -> list[str]:
    """Imports of another family's modules outside CROSS_FAMILY, any private name (a component
    with a leading underscore) of another family or of another backend of the same family, and
    any import of a family by kernels.common."""
    bad = []
    for path in paths:
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = family(mod)
        for line, name in imports(path, source):
            name = name.removeprefix("lattnbench.")
            if not name.startswith("kernels."):
                continue
            other = family(name)
            private = any(p.startswith("_") for p in name.split(".")[1:])
            if backend(name) == backend(mod) or name in ("kernels", f"{other}.__init__"):
                continue
            if other == own:  # another backend of the same family: its public names only
                if private:
                    bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
                continue
            if name == other:  # a namespace, or the package a ``from`` import names (what it imports is checked)
                continue
            if own != "kernels.common" and name.startswith(SHARED_KERNELS) and not private:
                continue
            allowed = any(own == a and (name == m or name.startswith(m + ".")) for a, m in CROSS_FAMILY)
            if not allowed or private:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(bad))


def test_kernel_families_share_helpers_only_through_kernels_common():
    files = sorted((ROOT / "kernels").rglob("*.py"))
    assert files and cross_family_offenders(files) == []


def test_gla_and_gdn_import_nothing_of_lightning_and_gluon_only_the_triton_ops():
    """Nothing of kernels/lightning in kernels/gla or kernels/gdn; in kernels/lightning/gluon, of
    the Triton backend only the public names of its ops (the fallback and the backward)."""
    for fam in ("gla", "gdn"):
        for p in sorted((ROOT / "kernels" / fam).rglob("*.py")):
            for line, name in imports(p):
                assert not name.removeprefix("lattnbench.").startswith("kernels.lightning"), (p, line, name)
    for p in sorted((ROOT / "kernels" / "lightning" / "gluon").rglob("*.py")):
        for line, name in imports(p):
            if name.startswith("kernels.lightning.triton"):
                assert name in ("kernels.lightning.triton", "kernels.lightning.triton.ops"), (p, line, name)


@pytest.mark.parametrize("where, source", [
    ("gla/triton", "from ...lightning.triton.ops import _alignment\n"),  # private, other family
    ("gla/triton", "from ...lightning.triton import configs\n"),  # other family, not allowed
    ("gdn/jax", "from ...jax.chunked import chunked_attention\n"),  # the shared JAX layer: not for GDN
    ("gdn/jax", "from ...naive.torch_ref import _gamma\n"),  # a private name of a shared package
    ("lightning/gluon", "from ..triton.ops import _raw_stream\n"),  # private, same family
    ("lightning/gluon", "def f():\n    from lattnbench.kernels.gla.triton import ops\n"),
    ("lightning/parallel", "from ...jax.api import _impl\n"),  # allowed family, private name
    ("jax", "from ..lightning.triton.ops import lightning_fwd\n"),  # past its allow-list entry
    ("common", "from ..lightning.triton import ops\n"),
    ("common", "from ..naive import torch_ref\n"),  # common imports no other kernels/ package
])
def test_the_family_check_sees_helpers_of_another_family(where, source):
    probe = ROOT / "kernels" / where / "probe.py"  # where the source would sit; never written
    assert cross_family_offenders([probe], source)


@pytest.mark.parametrize("where, source", [
    ("lightning/gluon", "from ..triton import ops as triton_ops\n"),  # public, same family
    ("lightning/parallel", "from ..triton.ops import lightning_fwd\n"),
    ("lightning/parallel", "from ...jax import chunked_attention\n"),  # CROSS_FAMILY
    ("gdn", "from ..naive.torch_ref import per_sequence\n"),  # a shared package's public name
    ("gdn/jax", "from ...common.jax_helpers import HIGHEST\n"),
])
def test_the_family_check_lets_public_names_within_a_family_and_the_shared_packages(where, source):
    probe = ROOT / "kernels" / where / "probe.py"
    assert cross_family_offenders([probe], source) == []


# ---- the CLI on top -------------------------------------------------------------------------------
#: lattnbench packages whose modules only the CLI may import
CLI = ("lattnbench.commands", "lattnbench.cli")


def test_runner_and_views_import_nothing_of_the_cli():
    for layer in ("runner", "views"):
        files = sorted((ROOT / "lattnbench" / layer).rglob("*.py"))
        assert files and offending(files, (), CLI) == [], layer


def test_views_import_neither_torch_nor_jax():
    files = sorted((ROOT / "lattnbench" / "views").rglob("*.py"))
    assert files and offending(files, (), ("torch", "jax")) == []


def private_imports(paths, source: str | None = None) -> list[str]:
    """Imports of a private name (a component with a leading underscore) from another lattnbench
    package than the importing module's own (``lattnbench.views`` from ``lattnbench.commands``)."""
    bad = []
    for path in paths:
        mod = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = ".".join(mod.split(".")[:2])
        for line, name in imports(path, source):
            if not name.startswith("lattnbench.") or name.startswith("lattnbench.kernels"):
                continue  # the kernels' own rule: test_kernel_families_share_helpers_only_through_kernels_common
            parts = name.split(".")
            if ".".join(parts[:2]) != own and any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(bad))


def test_no_module_imports_a_private_name_of_another_lattnbench_package():
    files = [p for p in sorted((ROOT / "lattnbench").rglob("*.py")) if "kernels" not in p.relative_to(ROOT).parts]
    assert files and private_imports(files) == []


@pytest.mark.parametrize("source, bad", [
    ("from lattnbench.views.tables import _status\n", True),
    ("def f():\n    from lattnbench.runner.loop import _helper\n", True),
    ("from lattnbench.views.tables import table, fit\n", False),
    ("from .compare import _lines\n", False),  # the module's own package
])
def test_the_private_check_sees_private_names_of_other_packages(source, bad):
    probe = ROOT / "lattnbench" / "commands" / "probe.py"  # never written
    assert bool(private_imports([probe], source)) == bad
