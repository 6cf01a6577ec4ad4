"""Immutable array files and the small versioned state that lists them.

The columnar components (dense vectors, BM25 postings, metadata codes, rows)
keep their bulk data as arrays written once and never changed: an append
writes a new segment file, a delete writes a new, small tombstone file, a
compaction writes merged segments under new names. What changes in place is
one small JSON state file per component, naming the segment files it reads
and the format version it was written with. So a persist after a one-document
change writes kilobytes, a reader opens the big files memory-mapped (the
operating system pages in what a query touches, and shares the pages between
processes), and a folder that holds a newer or older format is refused with
the version and the fix instead of being misread.

Arrays are NumPy ``.npy`` files read with ``allow_pickle=False``: data only,
never code.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from llama_index_ext_recursive.persist import (
    PathLike,
    PersistError,
    load_json_object,
    write_binary_atomically,
    write_file_atomically,
)

__all__ = [
    "STATE_SUFFIX",
    "open_array",
    "previous_state",
    "read_state",
    "retire",
    "segment_name",
    "write_array",
    "write_state",
    "KEEP_SEGMENT_ROWS",
]

logger = logging.getLogger(__name__)

STATE_SUFFIX = ".state.json"
# a merge leaves clean segments of at least this many rows as they are and merges runs of smaller
# ones: a streaming build merges its batches' segments at every checkpoint, and merging everything
# each time would re-read (and hold) the whole column, growing with the corpus
KEEP_SEGMENT_ROWS = 65_536


def segment_name(prefix: str, number: int) -> str:
    """The file stem of segment ``number`` of a component: ``vectors-000003``."""
    if number < 0:
        raise ValueError(f"segment numbers start at 0, got {number}")
    return f"{prefix}-{number:06d}"


def write_array(folder: PathLike, name: str, array: np.ndarray) -> Path:
    """Write ``array`` as ``folder/name.npy``, once: segment files are immutable.

    Written under a temporary name, fsynced and renamed, so a crash leaves no
    partial file under the final name.

    Raises:
        FileExistsError: ``name`` is already written (a new segment needs a new name).
        ValueError: ``array`` holds Python objects (only plain numbers are stored).
    """
    array = np.asarray(array)
    if array.dtype.hasobject:
        raise ValueError(f"{name}: an array of Python objects cannot be stored; convert it to numbers first")
    path = Path(folder) / f"{name}.npy"
    if path.exists():
        raise FileExistsError(f"{path} is already written; segment files are never overwritten")
    write_binary_atomically(path, lambda handle: np.save(handle, array, allow_pickle=False))
    return path


def open_array(folder: PathLike, name: str, mmap: bool = True) -> np.ndarray:
    """Open ``folder/name.npy``, memory-mapped read-only unless ``mmap=False``.

    Raises:
        PersistError: naming the file when it is missing or not an array file.
    """
    path = Path(folder) / f"{name}.npy"
    if not path.is_file():
        raise PersistError(f"{path} is missing: the index folder is incomplete; restore it or build the index again")
    try:
        return np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise PersistError(f"{path} is not a readable array file ({exc}); restore it or build the index again") from exc


def write_state(folder: PathLike, component: str, version: int, state: dict[str, Any]) -> Path:
    """Replace ``folder/<component>.state.json`` atomically with ``state``,
    stamped with the component's name and format ``version``."""
    path = Path(folder) / f"{component}{STATE_SUFFIX}"
    body = {"component": component, "version": version, **state}
    write_file_atomically(path, lambda handle: json.dump(body, handle, sort_keys=True))
    return path


def read_state(folder: PathLike, component: str, version: int | tuple[int, ...]) -> dict[str, Any]:
    """Read ``folder/<component>.state.json`` written with format ``version``
    (or one of several: a component that still reads an older format lists both).

    Raises:
        PersistError: the file is missing or damaged, belongs to another
            component, or was written with another format version (the message
            names both versions and the fix).
    """
    path = Path(folder) / f"{component}{STATE_SUFFIX}"
    state = load_json_object(path, required=("component", "version"))
    if state["component"] != component:
        raise PersistError(f"{path} describes {state['component']!r}, not {component!r}: the folder is damaged")
    found = state["version"]
    readable = (version,) if isinstance(version, int) else version
    if found not in readable:
        newer = isinstance(found, int) and found > max(readable)
        fix = (
            "upgrade llama-index-ext-recursive to read it"
            if newer
            else "rebuild the index with this version (or open it with the version that wrote it)"
        )
        raise PersistError(
            f"{path} was written in {component} format version {found!r}; "
            f"this version reads version {' or '.join(map(str, readable))}: {fix}"
        )
    return state


def previous_state(folder: PathLike, component: str) -> dict[str, Any] | None:
    """The state ``component`` wrote in ``folder`` before, whatever its format version
    (``None``: none, or one that cannot be read), to tell which of its files a new write retires."""
    path = Path(folder) / f"{component}{STATE_SUFFIX}"
    if not path.is_file():
        return None
    try:
        state = load_json_object(path, required=("component", "version"))
    except PersistError:
        return None
    return state if state["component"] == component else None


def retire(folder: PathLike, previous: set[str], current: set[str]) -> None:
    """Remove the files (names with their suffix) a component's previous state listed that its
    new state does not: segments a merge replaced, tombstones a newer one includes, the codes of
    a retrained index.

    Only files the component wrote, by their exact names, after its new state is written. A
    persist writes into a staging folder of hard links, so the published generation and the
    readers that mapped its files keep them; without this, every generation would carry every
    file ever written (at 2M chunks a fifth of the folder).
    """
    target = Path(folder)
    for name in sorted(previous - current):
        path = target / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            logger.debug("removed %s (no longer listed)", path)
