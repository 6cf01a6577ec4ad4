"""Every notebook under notebooks/ executes offline, top to bottom."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

# what each notebook's last cell must show: proof that it ran to the end
LAST_OUTPUT = {
    "01_recursive_retrieval": "kites",
    "02_evaluation": "compared 5 retrievers on 24 queries",
    "03_hybrid_and_chinese": "Chinese BM25 and hybrid fusion work offline",
    "04_backfill_and_stores": "recursive retrieval work offline",
    "05_auto_retriever": "validated auto-retrieval works offline",
    "06_agent_tool": "retrieval tool works offline",
}
NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} == set(LAST_OUTPUT)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_are_stored_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    with_outputs = [i for i, c in enumerate(notebook.cells) if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not with_outputs, f"{path.name}: cells {with_outputs} keep outputs; strip them before committing"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_import_nothing_from_tests(path):
    """A notebook runs from an installed copy, which has no tests/ folder: helpers live in the package."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert not re.search(r"^\s*(from|import) (tests|conftest|pg_server)\b", code, re.M), path.name
    assert "sys.path" not in code and '"tests"' not in code, path.name


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert LAST_OUTPUT[path.stem] in str(notebook.cells[-1].outputs[-1])
