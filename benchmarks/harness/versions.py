"""Which code is measured: this checkout's package, or an older revision of it.

"Before and after" figures compare two versions of the package on the same
machine in the same session. Two ways are used, both here:

- a whole older package, extracted with ``git archive`` into a folder that a
  child process (or the next run) puts first on ``PYTHONPATH``
  (:func:`extract_package`); the run then says which copy it imported
  (:func:`package_dir`), since a stale ``PYTHONPATH`` silently measures the
  wrong code;
- one older module, loaded beside the current package under another name
  (:func:`old_module`), for comparing a single function in one process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Callable, Optional

from harness import REPO

PACKAGE = "llama_index_ext_recursive"


def package_dir() -> Path:
    """The folder of the ``llama_index_ext_recursive`` this process imported."""
    import llama_index_ext_recursive

    return Path(llama_index_ext_recursive.__file__).resolve().parent


def head() -> str:
    """This checkout's short commit id."""
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip()


def extract_package(rev: str, into: str) -> str:
    """Write the package as of ``rev`` into ``into`` (to go first on ``PYTHONPATH``); return ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, PACKAGE], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def old_source(rev: str, path: str) -> str:
    """The text of ``path`` (relative to the repository) as of ``rev``."""
    return subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def old_module(rev: str, path: str, patch: Optional[Callable[[str], str]] = None) -> ModuleType:
    """The module at ``path`` as of ``rev``, imported as ``old_<stem>_<rev>`` beside the current package.

    ``patch`` may rewrite the source first (e.g. drop an import the old module
    needs from a sibling that has moved since).
    """
    source = old_source(rev, path)
    if patch is not None:
        source = patch(source)
    name = f"old_{Path(path).stem}_{rev}"
    file = Path(tempfile.mkdtemp(prefix="bench-old-")) / f"{name}.py"
    file.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
