"""The generated blocks in README.md and docs/ are exactly what `lattnbench report` makes of committed results."""
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lattnbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
#: a block's opening marker, alone on its line (a marker quoted in a sentence is not a block)
BLOCK = re.compile(r"^<!-- lattnbench:([\w.-]+) -->$", re.MULTILINE)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


MODES = ("fwd", "bwd", "fwdbwd")
TIMERS = ("graph", "latency", "host")
#: a block ``STEM.MODE.headline`` is the compact view (``report --headline --mode MODE``)
VIEWS = {"headline": ["--headline"]}


def committed(stem: str) -> list[Path]:
    """The committed results of STEM: ``results/*/STEM.json``, or ``STEM.json.gz`` (large files are
    stored gzip-compressed; ``lattnbench report`` reads either and names both ``STEM.json``)."""
    return sorted([*ROOT.glob(f"results/*/{stem}.json"), *ROOT.glob(f"results/*/{stem}.json.gz")])


def source_for(name: str) -> tuple[list[Path], list[str]]:
    """The results files of block NAME (``results/*/NAME.json[.gz]``) and the report options it needs:
    a block ``STEM.MODE`` or ``STEM.MODE.TIMER`` without such a file is the speed tables of that
    mode (by that timer) of ``results/*/STEM.json`` (``report --mode MODE [--timer TIMER] --metric
    speed``); ``STEM.findings`` is its agreement as findings (``report --findings --metric check``),
    ``STEM.memory`` its memory tables (``report --metric memory``)."""
    found = committed(name)
    parts = name.split(".")
    if found or len(parts) < 2:
        return found, []
    if parts == [parts[0], "findings"]:
        return committed(parts[0]), ["--findings", "--metric", "check"]
    if parts == [parts[0], "memory"]:
        return committed(parts[0]), ["--metric", "memory"]
    view = VIEWS[parts.pop()] if parts[-1] in VIEWS else []
    timer = parts.pop() if parts[-1] in TIMERS else None
    mode = parts.pop() if parts[-1] in MODES else None
    if mode is None:
        return found, []
    options = ["--mode", mode, "--metric", "speed", *(["--timer", timer] if timer else []), *view]
    return committed(".".join(parts)), options


def test_readme_has_a_generated_block():
    assert blocks(ROOT / "README.md"), "the README has no generated blocks"


def test_every_block_has_committed_results_and_stands_once():
    seen: dict[str, str] = {}
    for page in PAGES:
        for name in blocks(page):
            assert name not in seen, f"block {name!r} stands in both {seen[name]} and {rel(page)}"
            seen[name] = rel(page)
            assert len(source_for(name)[0]) == 1, \
                f"{rel(page)}: block {name!r} needs exactly one results/*/{name}.json (or .json.gz)"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p)], ids=rel)
def test_blocks_regenerate_byte_identical(page, monkeypatch):
    """Regenerate every block of ``page`` in a copy beside it (plot links are relative to its folder),
    named for this process: a second test run in the same checkout must not remove it."""
    copy = page.with_name(f".{page.stem}.regenerated-{os.getpid()}.md")
    shutil.copy(page, copy)
    try:
        monkeypatch.chdir(ROOT)
        for name in blocks(copy):
            (results,), filters = source_for(name)
            args = ["report", str(results), "--readme", str(copy), "--name", name, *filters]
            plots = results.parent / "plots"
            if any(plots.glob(f"{name}-*.png")):  # a block links the plots made of its own results
                args += ["--plots", str(plots)]
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, res.output
        assert copy.read_bytes() == page.read_bytes(), \
            f"{rel(page)}: generated blocks differ from `lattnbench report` of the committed results: regenerate them"
    finally:
        copy.unlink(missing_ok=True)


def test_readme_lines_fit_120_columns_outside_links_and_images():
    """A README read in a terminal or a diff: no line past 120 characters once link targets go."""
    for i, line in enumerate((ROOT / "README.md").read_text(encoding="utf-8").splitlines(), 1):
        shown = re.sub(r"\]\([^)]*\)", "]", line)
        assert len(shown) <= 120, f"README.md:{i} is {len(shown)} characters: {line[:60]}..."


def test_readme_headline_is_one_compact_table():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("<!-- lattnbench:seed-readme.fwdbwd.headline -->")[1].split("<!-- /lattnbench:")[0]
    table = [ln for ln in block.splitlines() if ln.startswith("|")]
    assert table and max(len(ln) for ln in table) <= 100
    assert len(table[0].split("|")) - 2 <= 6  # n and at most five kernels
