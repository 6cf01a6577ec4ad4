"""Every ```python block of README.md and docs/**/*.md runs as pasted, offline.

The convention (stated in each page and checked here): a block runs as pasted
into a fresh Python session, unless its first line is ``# continued from
above``, in which case it runs in the session of the block before it on the
same page (as a reader pastes the two one after the other). The pages run one
after the other in one interpreter (the imports and bundled models loaded
once), each in its own empty scratch folder and with LlamaIndex's ``Settings``
reset to a fresh session's, with the repository's package
importable but not ``tests/``, no API key in the environment and the Hugging
Face hub offline: what a newcomer with ``pip install
'llama-index-ext-recursive[local,eval,faiss]'`` has.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(GUIDE.glob("*.md"))
DOCS = sorted((ROOT / "docs").rglob("*.md"))
BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
CONTINUED = "# continued from above"
# pages whose snippets load the bundled embedding model (slow): integration tests
REAL_MODEL = {
    "01-recursive",
    "02-bm25-and-hybrid",
    "03-stores",
    "04-auto-retrieval",
    "05-evaluation",
    "06-agent-tool",
    "09-reading-results",
}

# runs every selected page in one interpreter (imports and the bundled models are loaded once): each
# page in its own scratch folder and with LlamaIndex's Settings as a fresh session has them, each block
# in a fresh namespace unless it continues the previous one; a page's failure is recorded and the next
# page runs
_RUNNER = """
import copy, json, os, sys, time, traceback
from llama_index.core import Settings
pages, report = json.loads(sys.argv[1]), sys.argv[2]
fresh_settings = copy.copy(vars(Settings))
results = {}
for page in pages:
    os.chdir(page["cwd"])
    vars(Settings).clear()
    vars(Settings).update(fresh_settings)
    namespace, started, failure = None, time.perf_counter(), None
    for block in page["blocks"]:
        if not block["continued"]:
            namespace = {"__name__": "__main__"}
        try:
            exec(compile(block["source"], block["label"], "exec"), namespace)
        except BaseException:
            failure = {"label": block["label"], "source": block["source"], "error": traceback.format_exc()}
            break
    results[page["name"]] = {"failure": failure, "seconds": round(time.perf_counter() - started, 1)}
    with open(report, "w", encoding="utf-8") as out:
        json.dump(results, out)
"""


def python_blocks(path: Path) -> list:
    return BLOCK.findall(path.read_text(encoding="utf-8"))


def _offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY") and k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(ROOT))
    return env


def page_blocks(path: Path) -> list[dict]:
    """A page's blocks for the runner, checked against the convention above."""
    blocks: list[dict] = []
    for number, source in enumerate(python_blocks(path), start=1):
        continued = source.startswith(CONTINUED)
        assert number > 1 or not continued, f"{path.name}: block 1 cannot continue a previous block"
        assert not re.search(r"^\s*(from|import) (tests|conftest|pg_server)\b", source, re.M), (
            f"{path.name}[block {number}] imports from tests/, which an installed copy does not have"
        )
        blocks.append({"label": f"{path.name}[block {number}]", "source": source, "continued": continued})
    return blocks


def run_pages(paths: list[Path], scratch: Path) -> dict[str, dict]:
    """Run the pages one after the other in one fresh interpreter; each page's outcome by file name."""
    pages = []
    for path in paths:
        cwd = scratch / path.stem
        cwd.mkdir()
        pages.append({"name": path.name, "cwd": str(cwd), "blocks": page_blocks(path)})
    report = scratch / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(pages), str(report)],
        cwd=scratch,
        env=_offline_env(),
        capture_output=True,
        text=True,
        timeout=1800,
    )
    results = json.loads(report.read_text(encoding="utf-8")) if report.exists() else {}
    for page in pages:  # the interpreter died: the page it was in and those after it say so
        results.setdefault(
            page["name"], {"failure": {"label": page["name"], "source": "", "error": done.stderr[-4000:]}}
        )
    return results


@pytest.fixture(scope="session")
def executed_pages(request, tmp_path_factory) -> dict[str, dict]:
    """Every page a selected test asks for, run once in one interpreter."""
    wanted = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        if item.originalname == "test_docs_page_executes" and callspec is not None:
            wanted.append(callspec.params["path"])
        elif item.name == "test_readme_python_blocks_run_as_pasted":
            wanted.append(ROOT / "README.md")
    paths = [p for p in dict.fromkeys(wanted) if python_blocks(p)]
    return run_pages(paths, tmp_path_factory.mktemp("pages"))


def check_page(path: Path, executed: dict[str, dict]) -> None:
    """Fail with the failing block's source and traceback."""
    failure = executed[path.name]["failure"]
    if failure:
        pytest.fail(
            f"{failure['label']} failed\n--- source ---\n{failure['source']}--- error ---\n{failure['error']}",
            pytrace=False,
        )


def _param(path: Path):
    marks = [pytest.mark.integration] if path.stem in REAL_MODEL else []
    return pytest.param(path, id=path.stem, marks=marks)


def test_guide_pages_exist():
    assert {p.stem for p in PAGES} >= REAL_MODEL | {"pain-points"}


@pytest.mark.parametrize("path", [_param(p) for p in DOCS if python_blocks(p)])
def test_docs_page_executes(path, executed_pages):
    check_page(path, executed_pages)


def test_every_guide_page_has_code():
    assert all(python_blocks(p) for p in PAGES if p.stem != "pain-points")


@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.stem)
def test_pages_state_the_block_convention(path):
    """A page with a continued block says so, so a reader knows which blocks to paste together."""
    blocks = python_blocks(path)
    if any(b.startswith(CONTINUED) for b in blocks):
        assert CONTINUED in path.read_text(encoding="utf-8").split("```python")[0], (
            f"{path.name} continues blocks but does not explain '{CONTINUED}' before its first block"
        )


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
def test_readme_python_blocks_run_as_pasted(executed_pages):
    check_page(ROOT / "README.md", executed_pages)


def test_readme_names_the_install_steps():
    """The existing-app install names the CPU torch step and the extras the snippets need."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in readme
    for extra in ("local", "eval", "faiss"):
        assert re.search(rf"pip install [^\n]*llama-index-ext-recursive\[[a-z,]*\b{extra}\b", readme), extra
