"""Every notebook under notebooks/ executes offline, top to bottom.

The notebooks run one after the other in one Jupyter kernel (a real one, with
its running event loop), so the imports and the bundled models load once: before
each notebook the kernel's namespace is reset (``%reset -f``), its working
folder is the notebook's own empty scratch folder and LlamaIndex's ``Settings``
are a fresh session's, so a notebook that leans on another's names fails.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, DeadKernelError

# the script that stores the outputs is the one place their source hash is computed
_STORE_SCRIPT = Path(__file__).parent.parent / "notebooks" / "store_outputs.py"
_spec = importlib.util.spec_from_file_location("store_outputs", _STORE_SCRIPT)
assert _spec is not None and _spec.loader is not None
_store = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_store)
source_hash = _store.source_hash

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
STORE = ".venv/bin/python notebooks/store_outputs.py"


def test_notebooks_exist():
    assert {p.stem for p in NOTEBOOKS} == set(LAST_OUTPUT)


def printed(cell) -> str:
    """What a cell shows as text: its stream outputs joined (the kernel may send one print in
    pieces) and the plain text of its results."""
    return "".join(
        o.get("text", "") if o.output_type == "stream" else o.get("data", {}).get("text/plain", "")
        for o in cell.get("outputs", [])
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_are_stored_with_the_outputs_of_their_current_code(path):
    """A reader sees what each cell prints without running it, and what they see is what the code
    prints now: each code cell keeps the hash of the source its outputs came from
    (notebooks/store_outputs.py writes both)."""
    notebook = nbformat.read(path, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    stale = [i for i, c in enumerate(code) if c.metadata.get("source_sha256") != source_hash(c.source)]
    assert not stale, f"{path.name}: code cells {stale} changed since their outputs were stored; run {STORE}"
    outputs = [o for c in code for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"]
    assert LAST_OUTPUT[path.stem] in printed(code[-1])
    assert not re.search(r"/(tmp|root|home|work)/", str(outputs)), f"{path.name} stores a path of this machine"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebooks_import_nothing_from_tests(path):
    """A notebook runs from an installed copy, which has no tests/ folder: helpers live in the package."""
    notebook = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in notebook.cells if c.cell_type == "code")
    assert not re.search(r"^\s*(from|import) (tests|conftest|pg_server)\b", code, re.M), path.name
    assert "sys.path" not in code and '"tests"' not in code, path.name


# run once in the kernel: a fresh session's LlamaIndex Settings, kept where %reset cannot clear them
_REMEMBER_SETTINGS = """import copy, sys, types
from llama_index.core import Settings
kept = types.ModuleType("_fresh_kernel")
kept.settings = copy.copy(vars(Settings))
sys.modules[kept.__name__] = kept
"""
# run before each notebook: what a fresh kernel started in the notebook's folder has
_FRESH_SESSION = """%reset -f
import os as _os, sys as _sys
from llama_index.core import Settings as _Settings
vars(_Settings).clear()
vars(_Settings).update(_sys.modules["_fresh_kernel"].settings)
_os.chdir({folder!r})
del _os, _sys, _Settings
"""


def _run_in_kernel(client: NotebookClient, notebook, code: str) -> None:
    """Run ``code`` as a cell that belongs to no notebook."""
    client.nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
    client.execute_cell(client.nb.cells[0], 0)
    client.nb = notebook


@pytest.fixture(scope="session")
def executed_notebooks(request, tmp_path_factory) -> dict[str, object]:
    """Every notebook a selected test asks for, executed once in one kernel: the notebook or its error."""
    wanted = [
        item.callspec.params["path"] for item in request.session.items if item.originalname == "test_notebook_executes"
    ]
    results: dict[str, object] = {}
    if not wanted:
        return results
    scratch = tmp_path_factory.mktemp("notebooks")
    client = NotebookClient(
        nbformat.v4.new_notebook(), timeout=600, kernel_name="python3", resources={"metadata": {"path": str(scratch)}}
    )
    with client.setup_kernel():
        _run_in_kernel(client, client.nb, _REMEMBER_SETTINGS)
        for path in dict.fromkeys(wanted):
            notebook = nbformat.read(path, as_version=4)
            folder = scratch / path.stem
            folder.mkdir()
            try:
                _run_in_kernel(client, notebook, _FRESH_SESSION.format(folder=str(folder)))
                for index, cell in enumerate(notebook.cells):
                    client.execute_cell(cell, index)
                results[path.stem] = notebook
            except CellExecutionError as error:
                results[path.stem] = error
            except DeadKernelError as error:  # the notebooks after it cannot run in this kernel
                results.update({p.stem: error for p in wanted if p.stem not in results})
                break
    return results


@pytest.mark.integration
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, executed_notebooks):
    notebook = executed_notebooks[path.stem]
    if isinstance(notebook, Exception):
        pytest.fail(f"{path.name}: {notebook}", pytrace=False)
    errors = [
        o for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert not errors
    assert LAST_OUTPUT[path.stem] in printed(notebook.cells[-1])
    # this kernel has no ipywidgets: tqdm's "IProgress not found" warning must not reach the reader
    shown = [str(o) for c in notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in shown if "IProgress not found" in o]
