"""Atomic directory writes and JSON reads that name the broken file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Union


class PersistError(RuntimeError):
    """A persisted directory is missing, incomplete or corrupted."""


@contextmanager
def atomic_directory(target: Union[str, Path]) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``target`` only on success.

    Readers never see a half-written directory: the new one is renamed into
    place after everything was written; an exception leaves ``target`` as it was.
    """
    target = Path(target).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield staging
        for root, _, files in os.walk(staging):
            for name in files:
                with open(os.path.join(root, name), "rb") as handle:
                    os.fsync(handle.fileno())
        if target.exists():
            retired = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, retired / "old")
            os.replace(staging, target)
            shutil.rmtree(retired, ignore_errors=True)
        else:
            os.replace(staging, target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def load_json(path: Union[str, Path]) -> Any:
    """Read a JSON file; a missing or corrupted file raises :class:`PersistError`."""
    path = Path(path)
    if not path.is_file():
        raise PersistError(f"{path} is missing: the directory is incomplete; persist it again")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise PersistError(
            f"{path} is corrupted ({exc}); restore it or persist the retriever again"
        ) from exc
