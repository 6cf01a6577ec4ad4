"""Which code is measured: this checkout's package, or an older revision of it.

"Before and after" figures compare two versions of the package on the same
machine in the same session. Two ways are used, both here:

- a whole older package, extracted with ``git archive`` into a folder that a
  child process (or the next run) puts first on ``PYTHONPATH``
  (:func:`extract_package`); the run then says which copy it imported
  (:func:`package_dir`), since a stale ``PYTHONPATH`` silently measures the
  wrong code;
- the older package imported beside the current one under another name
  (:func:`old_package`), for comparing one class or function in one process.
"""

from __future__ import annotations

import atexit
import importlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from harness import REPO

PACKAGE = "llama_index_ext_recursive"


def package_dir() -> Path:
    """The folder of the ``llama_index_ext_recursive`` this process imported."""
    import llama_index_ext_recursive

    return Path(llama_index_ext_recursive.__file__).resolve().parent


def head() -> str:
    """This checkout's short commit id."""
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()


def extract_package(rev: str, into: str) -> str:
    """Write the package as of ``rev`` into ``into`` (to go first on ``PYTHONPATH``); return ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, PACKAGE], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def old_package(rev: str, module: str = "") -> ModuleType:
    """The package as of ``rev`` (or its ``module``, e.g. ``"fusion"``), imported beside the current one.

    The old copy is extracted and renamed ``llama_index_ext_recursive_<rev>``
    (its own imports rewritten to match), so its modules import their old
    siblings, not the current package's, whose layout has moved since.
    """
    name = f"{PACKAGE}_{rev}"
    if name not in sys.modules:
        root = Path(tempfile.mkdtemp(prefix="bench-old-"))
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        extract_package(rev, str(root))
        (root / PACKAGE).rename(root / name)
        for path in (root / name).rglob("*.py"):
            path.write_text(path.read_text(encoding="utf-8").replace(PACKAGE, name), encoding="utf-8")
        sys.path.insert(0, str(root))
    return importlib.import_module(f"{name}.{module}" if module else name)


def llama_recursive() -> Path:
    """The ``llama-recursive`` command to run: the repository's ``.venv``'s, else the one beside this Python."""
    here = REPO / ".venv" / "bin" / "llama-recursive"
    return here if here.exists() else Path(sys.executable).parent / "llama-recursive"
