"""``build``'s input: the documents of a folder, and what it skipped and why.

As LlamaIndex's ``SimpleDirectoryReader`` does: every file is one document,
read as text (source code, Markdown, CSV, HTML...), except ``.jsonl`` (one
document per line) and the binary formats LlamaIndex's own readers read
(``.pdf``, ``.docx``, through ``llama-index-readers-file`` when it is
installed). Every other file is accounted for: skipped and reported with its
reason (hidden, not UTF-8, empty, binary, or its reader not installed).
"""

from __future__ import annotations

import codecs
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.schema import Document

from llama_index_ext_recursive.cli.checks import CliError

# binary formats read by LlamaIndex's readers (llama-index-readers-file): suffix -> (class, install)
BINARY_READERS = {
    ".pdf": ("PDFReader", "pip install llama-index-readers-file pypdf"),
    ".docx": ("DocxReader", "pip install llama-index-readers-file docx2txt"),
}
SNIFF_BYTES = 8192  # a NUL byte in a file's first bytes: binary (as git and grep tell)
SHOWN = 5  # files named per skip reason
logger = logging.getLogger(__name__)


@dataclass
class Corpus:
    """A folder's documents, read again each time they are iterated, so ``build`` never holds
    them all (a folder may hold more text than memory); and what the check skipped, and why.

    :func:`read_documents` checks the whole folder first (every error and warning comes
    before any document is embedded) and counts what it found.
    """

    directory: Path
    doc_id_key: str
    count: int = 0
    empty: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    unreadable: dict[str, list[str]] = field(default_factory=dict)  # why -> files (binary, no reader)
    hidden: int = 0
    readers: dict[str, Any] = field(default_factory=dict)  # suffix -> reader class (None: not installed)

    def __iter__(self) -> Iterator[Document]:
        return self._documents(check=False)

    def _documents(self, check: bool) -> Iterator[Document]:
        """The documents, file by file in sorted order; ``check``: also record what is skipped,
        warn about it and refuse a malformed line or a repeated id (the first pass)."""
        origin: dict[str, str] = {}
        skipped = set(self.undecodable) | {f for files in self.unreadable.values() for f in files}
        for path in _visible_files(self.directory, self if check else None):
            suffix = path.suffix.lower()
            if not check and str(path) in skipped:
                continue
            if suffix in BINARY_READERS:
                text = self._binary_text(path, check)
                if text is None:
                    continue
            else:
                if check:
                    problem = _text_problem(path)
                    if problem == "binary":
                        self.unreadable.setdefault("binary", []).append(str(path))
                        continue
                    if problem is not None:
                        print(f"warning: {problem}", file=sys.stderr)
                        self.undecodable.append(str(path))
                        continue
                if suffix == ".jsonl":
                    yield from self._jsonl_documents(path, origin if check else None)
                    continue
                text = _decoded(path.read_bytes())
            relative = path.relative_to(self.directory)
            doc_id = relative.as_posix()
            if check:
                _claim(origin, doc_id, str(path))
            if not text.strip():
                if check:
                    self.empty.append(str(path))
                continue
            yield Document(
                id_=doc_id,
                text=text,
                # the folder and the name: a source tree's __init__.py files get titles that differ
                metadata={self.doc_id_key: doc_id, "title": "/".join(relative.parts[-2:]), "file_name": path.name},
            )

    def _binary_text(self, path: Path, check: bool) -> str | None:
        """The text LlamaIndex's reader for ``path``'s format gives (its pages joined), or
        ``None`` when the reader is not installed or cannot read the file (recorded when
        ``check``)."""
        suffix = path.suffix.lower()
        name, install = BINARY_READERS[suffix]
        if suffix not in self.readers:
            self.readers[suffix] = _reader_class(name)
        reader = self.readers[suffix]
        if reader is None:
            if check:
                why = f"{suffix} (needs LlamaIndex's file readers: {install})"
                self.unreadable.setdefault(why, []).append(str(path))
            return None
        try:
            pages = reader().load_data(file=path)
        except Exception as exc:  # a damaged or encrypted file: the reader's own error says why
            if check:
                why = f"{suffix} that {name} could not read ({type(exc).__name__}: {exc})"
                self.unreadable.setdefault(" ".join(why.split())[:160], []).append(str(path))
            return None
        return "\n\n".join(page.text for page in pages)

    def skipped_summary(self) -> str | None:
        """One line naming what was skipped as unreadable, by reason, with a few files each."""
        if not self.unreadable:
            return None
        total = sum(len(files) for files in self.unreadable.values())
        parts = []
        for why, files in sorted(self.unreadable.items()):
            if why == "binary":
                suffixes = sorted({Path(f).suffix or Path(f).name for f in files})
                why = f"binary ({', '.join(suffixes)})"
            shown = ", ".join(files[:SHOWN]) + (" ..." if len(files) > SHOWN else "")
            parts.append(f"{len(files)} {why}: {shown}")
        return f"skipped {total} file{'s' if total > 1 else ''} that cannot be read as text: " + "; ".join(parts)

    def _jsonl_documents(self, path: Path, origin: dict[str, str] | None) -> Iterator[Document]:
        """One document per line, read line by line; ``origin`` (the first pass): ids seen so far."""
        expected = "each line must be a JSON object with doc_id (or _id) and text"
        with open(path, "rb") as handle:
            # lines end at b"\n" only: JSON strings may hold U+2028 and other characters
            # str.splitlines breaks on
            for number, raw in enumerate(handle, 1):
                line = (_decoded(raw) if number == 1 else raw.decode("utf-8")).removesuffix("\n")
                if not line.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CliError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno}); {expected}") from None
                if not isinstance(row, dict):
                    raise CliError(f"{where}: got a JSON {type(row).__name__}; {expected}")
                doc_id = row.get("doc_id", row.get("_id"))
                if not isinstance(doc_id, (str, int)) or isinstance(doc_id, bool) or str(doc_id).strip() == "":
                    raise CliError(f"{where}: missing or invalid doc_id (or _id) {doc_id!r}; {expected}")
                doc_id, body = str(doc_id), row.get("text")
                if not isinstance(body, str):
                    raise CliError(f"{where}: 'text' must be a string, got {body!r:.40}; {expected}")
                metadata = row.get("metadata") or {}
                if not isinstance(metadata, dict):
                    raise CliError(f"{where}: 'metadata' must be a JSON object, got {metadata!r:.40}")
                try:  # the file is UTF-8, but a JSON escape such as "\ud800" is not text
                    json.dumps(row, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError:
                    raise CliError(
                        f"{where}: holds an unpaired surrogate escape such as \\ud800, which is not text; "
                        "fix or remove it"
                    ) from None
                if origin is not None:
                    _claim(origin, doc_id, where)
                if not body.strip():
                    if origin is not None:
                        self.empty.append(f"{where} ({doc_id})")
                    continue
                metadata = {**metadata, self.doc_id_key: doc_id}
                if row.get("title"):
                    metadata["title"] = str(row["title"])
                yield Document(id_=doc_id, text=body, metadata=metadata)


def _visible_files(directory: Path, counted: Corpus | None) -> Iterator[Path]:
    """Files under ``directory`` in sorted order, skipping names that start with ``.``
    (counted into ``counted.hidden`` when given).

    As ``SimpleDirectoryReader(exclude_hidden=True)`` does, but only below
    ``directory``: a corpus inside a hidden folder can still be named explicitly.
    """
    for root, folders, files in os.walk(directory):
        if counted is not None:
            counted.hidden += sum(name.startswith(".") for name in folders + files)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(root) / name


def _text_problem(path: Path) -> str | None:
    """``"binary"`` when ``path`` holds a NUL byte in its first :data:`SNIFF_BYTES`; else why it
    is not UTF-8 (naming the line and offset of the first bad byte, and the fix), read line by
    line (a newline byte is never inside a UTF-8 character); ``None`` when it is text."""
    with open(path, "rb") as handle:
        if b"\0" in handle.read(SNIFF_BYTES):
            return "binary"
    offset = 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            skip = len(codecs.BOM_UTF8) if number == 1 and raw.startswith(codecs.BOM_UTF8) else 0
            try:
                raw[skip:].decode("utf-8")
            except UnicodeDecodeError as exc:
                start = skip + exc.start
                return (
                    f"{path}:{number}: not UTF-8 (byte 0x{raw[start]:02x} at offset {offset + start}); skipped. "
                    f"Convert it, e.g. iconv -f latin1 -t utf-8 {path} > {path.with_suffix('.utf8' + path.suffix)}"
                )
            offset += len(raw)
    return None


def _decoded(data: bytes) -> str:
    """Text of UTF-8 bytes (checked by :func:`_text_problem`), a leading BOM dropped."""
    return data.removeprefix(codecs.BOM_UTF8).decode("utf-8")


def _reader_class(name: str) -> Any:
    """LlamaIndex's file reader ``name``, or ``None`` when ``llama-index-readers-file`` is not installed."""
    try:
        return getattr(importlib.import_module("llama_index.readers.file"), name)
    except (ImportError, AttributeError):
        return None


def _claim(origin: dict[str, str], doc_id: str, where: str) -> None:
    """Record that ``where`` holds ``doc_id``, refusing an id already held elsewhere."""
    if doc_id in origin:
        raise CliError(
            f"{where}: doc_id {doc_id!r} is already used by {origin[doc_id]}; give every document its own id"
        )
    origin[doc_id] = where


def check_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory; pass the folder holding your documents")


def read_documents(directory: Path, doc_id_key: str) -> Corpus:
    """The documents of a folder (:class:`Corpus`), checked now and read again when iterated.

    Each file is one document (text, or a PDF/DOCX through LlamaIndex's
    readers); ``.jsonl`` files hold one per line. Hidden files and folders are
    skipped; files that are not UTF-8 are skipped with a warning naming them
    (and the line of the first bad byte); binary files and formats whose reader
    is not installed are skipped and named in one warning with the fix; empty
    and whitespace-only documents are skipped and counted; a malformed
    ``.jsonl`` line or a repeated doc_id is an error naming the file and line.
    """
    check_directory(directory)
    corpus = Corpus(directory, doc_id_key)
    for _ in corpus._documents(check=True):
        corpus.count += 1
    if corpus.hidden:
        logger.info("skipped %d hidden files and folders under %s", corpus.hidden, directory)
    if corpus.empty:
        shown = ", ".join(corpus.empty[:SHOWN]) + (" ..." if len(corpus.empty) > SHOWN else "")
        print(
            f"warning: skipped {len(corpus.empty)} empty or whitespace-only document"
            f"{'s' if len(corpus.empty) > 1 else ''}: {shown}",
            file=sys.stderr,
        )
    unreadable = corpus.skipped_summary()
    if unreadable is not None:
        print(f"warning: {unreadable}", file=sys.stderr)
    if not corpus.count:
        counts = {
            "empty": len(corpus.empty),
            "not UTF-8": len(corpus.undecodable),
            "not text": sum(len(f) for f in corpus.unreadable.values()),
        }
        found = ", ".join(f"{n} {what}" for what, n in counts.items() if n)
        raise CliError(
            f"no documents to index under {directory}"
            + (f" ({found}, all skipped)" if found else " (only hidden files, or none; hidden ones are skipped)")
        )
    return corpus
