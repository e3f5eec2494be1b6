"""pyproject lists its packages by hand (kernels/ maps to lattnbench.kernels): none may be missing."""
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_directory_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = set()
    for top, name in (("lattnbench", "lattnbench"), ("kernels", "lattnbench.kernels")):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found.add(".".join([name, *rel.parts]))
    assert found == listed, f"missing: {sorted(found - listed)}; listed but absent: {sorted(listed - found)}"
