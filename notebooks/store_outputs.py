"""Execute every notebook here and store its outputs, so a reader sees them without running it.

Each notebook runs top to bottom in a fresh Jupyter kernel, in an empty
scratch folder, offline. What is stored: each code cell's outputs except its
stderr stream (progress bars, warnings: noise in a stored page), and the
SHA-256 of the cell's source in ``metadata["source_sha256"]``, so
``tests/test_notebooks.py`` can tell stored outputs that no longer match the
code and ask for this script to be run again.

    .venv/bin/python notebooks/store_outputs.py [NAME.ipynb ...]
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).parent


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def store_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    with tempfile.TemporaryDirectory(prefix="notebook-") as scratch:
        NotebookClient(
            notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": scratch}}
        ).execute()
        for cell in notebook.cells:
            if cell.cell_type != "code":
                continue
            cell.outputs = [o for o in cell.outputs if not (o.output_type == "stream" and o.name == "stderr")]
            shown = str(cell.outputs)
            if scratch in shown:
                raise SystemExit(f"{path.name}: a cell prints its scratch folder ({scratch}); print a relative path")
            cell.metadata["source_sha256"] = source_hash(cell.source)
    nbformat.write(notebook, path)
    print(f"stored the outputs of {path.name}")


def main(names: list[str]) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    paths = [HERE / name for name in names] if names else sorted(HERE.glob("*.ipynb"))
    for path in paths:
        store_outputs(path)


if __name__ == "__main__":
    main(sys.argv[1:])
