"""Every ```python block of docs/guide/*.md executes, page by page, offline."""

from __future__ import annotations

import os
import re
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.glob("*.md"))
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
# pages whose snippets load the bundled embedding model (slow): integration tests
REAL_MODEL = {"01-recursive", "02-bm25-and-hybrid", "03-stores", "04-auto-retrieval", "05-evaluation"}


def python_blocks(path: Path) -> list:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def run_page(path: Path, tmp_path: Path) -> None:
    namespace = {"__name__": f"guide_{path.stem.replace('-', '_')}"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for number, source in enumerate(python_blocks(path), start=1):
            try:
                exec(compile(source, f"{path.name}[block {number}]", "exec"), namespace)
            except Exception:
                pytest.fail(
                    f"{path.name}: python block {number} failed\n--- source ---\n{source}"
                    f"--- error ---\n{traceback.format_exc()}",
                    pytrace=False,
                )
    finally:
        os.chdir(cwd)


def _param(path: Path):
    marks = [pytest.mark.integration] if path.stem in REAL_MODEL else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_guide_pages_exist():
    assert {p.stem for p in PAGES} >= REAL_MODEL | {"pain-points"}


@pytest.mark.parametrize("path", [_param(p) for p in PAGES])
def test_guide_page_executes(path, tmp_path):
    if path.stem != "pain-points":
        assert python_blocks(path), f"{path.name} has no python blocks"
    run_page(path, tmp_path)


def test_every_page_linked_from_readme():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(r"^## User guide\n(.*?)(?=^## )", readme, re.S | re.M)
    assert match, "README.md has no '## User guide' section"
    section = match.group(1)
    missing = [p.name for p in PAGES if f"(docs/guide/{p.name})" not in section]
    assert not missing, f"not linked from README.md's user guide: {missing}"


def test_pain_points_cite_existing_tests():
    text = (GUIDE / "pain-points.md").read_text(encoding="utf-8")
    cited = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`", text)
    assert len(cited) >= 30
    missing = []
    for file, name in cited:
        source = (ROOT / file).read_text(encoding="utf-8") if (ROOT / file).exists() else ""
        if not re.search(rf"^(async )?def {name}\(", source, re.M):
            missing.append(f"{file}::{name}")
    assert not missing, f"pain-points.md cites tests that do not exist: {missing}"


@pytest.mark.integration
def test_readme_python_blocks_run_as_pasted(tmp_path):
    """README's snippets run in order, offline, in a scratch folder, as a newcomer pastes them."""
    run_page(ROOT / "README.md", tmp_path)
