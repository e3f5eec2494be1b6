"""The README's benchmark tables are exactly what `lattnbench report` makes of committed results."""
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"<!-- lattnbench:([\w.-]+) -->")


def results_for(name: str) -> list[Path]:
    return sorted(ROOT.glob(f"results/*/{name}.json"))


def test_every_block_has_committed_results():
    names = BLOCK.findall((ROOT / "README.md").read_text())
    assert names, "the README has no generated blocks"
    for name in names:
        assert len(results_for(name)) == 1, f"block {name!r} needs exactly one results/*/{name}.json"


@pytest.fixture
def readme_copy():
    """A copy beside the README (plot links are relative to the README's folder)."""
    copy = ROOT / ".README.regenerated.md"
    shutil.copy(ROOT / "README.md", copy)
    yield copy
    copy.unlink(missing_ok=True)


def test_readme_tables_regenerate_byte_identical(readme_copy, monkeypatch):
    readme = readme_copy
    monkeypatch.chdir(ROOT)
    for name in BLOCK.findall(readme.read_text()):
        args = ["report", *map(str, results_for(name)), "--readme", str(readme), "--name", name]
        plots = ROOT / "results" / results_for(name)[0].parent.name / "plots"
        if any(plots.glob(f"{name}-*.png")):  # blocks link the plots made of their own results
            args += ["--plots", str(plots)]
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 0, res.output
    assert readme.read_text() == (ROOT / "README.md").read_text(), \
        "README tables differ from `lattnbench report` of the committed results: regenerate them"
