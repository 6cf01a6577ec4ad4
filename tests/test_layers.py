"""The package's import graph runs one way: down its layers, with no circle anywhere.

Two independent checks, so that neither can be satisfied by editing it alone:

* the import-linter contracts of ``pyproject.toml`` (``[tool.importlinter]``), which
  name the layers top to bottom, in the package and in each subpackage;
* the import graph itself (grimp, with imports under ``TYPE_CHECKING`` and inside
  functions counted): no module is in an import circle, and no two files or
  folders of one folder import each other, whatever the contracts list.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grimp

import llama_index_ext_recursive

ROOT = Path(__file__).parent.parent
PACKAGE = "llama_index_ext_recursive"


def test_the_package_checked_is_this_tree():
    assert Path(llama_index_ext_recursive.__file__).parent == ROOT / PACKAGE


def test_import_linter_contracts_are_kept():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(PACKAGE, cache_dir=None)


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``edges``: strongly connected components of two nodes or more (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_is_in_an_import_circle():
    graph = _graph()
    edges = {m: set(graph.find_modules_directly_imported_by(m)) - {m} for m in graph.modules}
    assert _circles(edges) == []


def test_no_two_parts_of_a_folder_import_each_other():
    """Files and subfolders of each folder, a subfolder standing for everything in it:
    ``stores/`` importing ``retrievers/`` while ``retrievers/`` imports ``stores/`` is a
    circle even when no single module closes it."""
    graph = _graph()
    found = {}
    for package in sorted(m for m in graph.modules if graph.find_children(m)):
        depth = package.count(".") + 1

        def part(module: str, depth: int = depth) -> str:
            return ".".join(module.split(".")[: depth + 1])

        inside = set(graph.find_descendants(package))
        edges: dict[str, set[str]] = {}
        for importer in inside:
            for imported in graph.find_modules_directly_imported_by(importer) & inside:
                if part(importer) != part(imported):
                    edges.setdefault(part(importer), set()).add(part(imported))
        circles = _circles(edges)
        if circles:
            found[package] = circles
    assert found == {}
