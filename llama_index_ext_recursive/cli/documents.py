"""``build``'s input: the documents of a folder, and what it skipped and why.

As LlamaIndex's ``SimpleDirectoryReader`` does, every file is read, and a file
without a reader of its own is read as text: a file is text when its bytes say
so (UTF-8, no NUL byte in its first :data:`SNIFF_BYTES`), whatever its suffix
(source code, Markdown, reStructuredText, CSV, JSON, YAML, HTML...), and is one
document; a ``.jsonl`` file holds one document per line; ``.pdf`` and
``.docx`` go through LlamaIndex's own readers (``llama-index-readers-file``)
when the reader and the library it imports are installed. A file that gives no
text is never dropped in silence (``SimpleDirectoryReader`` without its readers
decodes a PDF's bytes as text, ignoring errors): it is skipped and reported
with its reason, hidden, not UTF-8, empty, binary, its reader not installed, or
its reader failing on it.
"""

from __future__ import annotations

import codecs
import importlib
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core.schema import Document

from llama_index_ext_recursive.cli.checks import CliError


@dataclass(frozen=True)
class FileReader:
    """A binary format read by ``llama-index-readers-file``: its reader class, the library that
    class imports only when it reads a file (so the class imports without it, then fails on
    every file), and the command that installs both."""

    name: str
    library: str
    install: str


BINARY_READERS = {
    ".pdf": FileReader("PDFReader", "pypdf", "pip install llama-index-readers-file pypdf"),
    ".docx": FileReader("DocxReader", "docx2txt", "pip install llama-index-readers-file docx2txt"),
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

    A file's title is its path relative to the folder (``cli/__init__.py``), the same
    as its doc_id: unique, so a source tree's ``__init__.py`` files (or two
    ``notes/README.md``) never share a title, the folders say where the file is,
    and a file's title never depends on which other files the folder holds (a
    stem-when-unique title would change when a namesake is added, and with it
    the file's embedded chunks and ranking).
    """

    directory: Path
    doc_id_key: str
    readers: dict[str, Any] = field(default_factory=dict)  # suffix -> reader class (None: not installed)
    count: int = 0
    empty: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    binary: list[str] = field(default_factory=list)
    no_reader: list[str] = field(default_factory=list)  # a .pdf or .docx whose reader is not installed
    failed: dict[str, str] = field(default_factory=dict)  # file -> the error its reader raised
    hidden: int = 0

    def __iter__(self) -> Iterator[Document]:
        return self._documents(check=False)

    def _documents(self, check: bool) -> Iterator[Document]:
        """The documents, file by file in sorted order; ``check``: also record what is skipped,
        warn about it and refuse a malformed line or a repeated id (the first pass)."""
        origin: dict[str, str] = {}
        skipped = {*self.undecodable, *self.binary, *self.no_reader, *self.failed}
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
                        self.binary.append(str(path))
                        continue
                    if problem is not None:
                        print(f"warning: {problem}", file=sys.stderr)
                        self.undecodable.append(str(path))
                        continue
                if suffix == ".jsonl":
                    yield from self._jsonl_documents(path, origin if check else None)
                    continue
                text = _decoded(path.read_bytes())
            doc_id = path.relative_to(self.directory).as_posix()
            if check:
                _claim(origin, doc_id, str(path))
            if not text.strip():
                if check:
                    self.empty.append(str(path))
                continue
            yield Document(
                id_=doc_id, text=text, metadata={self.doc_id_key: doc_id, "title": doc_id, "file_name": path.name}
            )

    def _binary_text(self, path: Path, check: bool) -> str | None:
        """The text LlamaIndex's reader for ``path``'s format gives (its pages joined), or
        ``None`` when the reader is not installed or cannot read the file (recorded when
        ``check``)."""
        suffix = path.suffix.lower()
        if suffix not in self.readers:
            self.readers[suffix] = _reader_class(BINARY_READERS[suffix])
        reader = self.readers[suffix]
        if reader is None:
            if check:
                self.no_reader.append(str(path))
            return None
        try:
            return "\n\n".join(page.text for page in reader().load_data(file=path))
        except Exception as exc:  # a damaged or encrypted file: the reader's own error says why
            # PDFReader retries through tenacity, whose RetryError hides the reader's error
            last = getattr(exc, "last_attempt", None)
            error = (last.exception() or exc) if last is not None else exc
            if check and isinstance(error, ImportError):  # a library the reader needs for this file
                self.no_reader.append(str(path))
            elif check:
                self.failed[str(path)] = " ".join(f"{type(error).__name__}: {error}".split())[:120]
            return None

    def skipped_summary(self) -> str | None:
        """One line naming the files skipped for their type: by reason and suffix, a few
        files each, and the fix (the install line of a missing reader)."""
        groups: list[str] = []
        for suffix, reader in BINARY_READERS.items():
            files = [f for f in self.no_reader if Path(f).suffix.lower() == suffix]
            if files:
                groups.append(
                    f"{len(files)} {suffix} (needs LlamaIndex's {reader.name}: {reader.install}): {_few(files)}"
                )
        if self.binary:
            suffixes = ", ".join(sorted({Path(f).suffix.lower() or Path(f).name for f in self.binary}))
            groups.append(
                f"{len(self.binary)} binary ({suffixes}; no text to index, convert any you need to text, "
                f".pdf or .docx): {_few(self.binary)}"
            )
        if self.failed:
            shown = [f"{f} ({error})" for f, error in self.failed.items()]
            groups.append(f"{len(self.failed)} LlamaIndex's reader could not read: {_few(shown)}")
        total = len(self.no_reader) + len(self.binary) + len(self.failed)
        return f"skipped {total} file{'s' if total > 1 else ''}: " + "; ".join(groups) if groups else None

    def skipped_counts(self) -> dict[str, int]:
        """How many were skipped, by reason (``{"empty": 1, "binary": 2}``), for one line."""
        counts = {
            "empty": len(self.empty),
            "not UTF-8": len(self.undecodable),
            "binary": len(self.binary),
            "needing a reader": len(self.no_reader),
            "unreadable": len(self.failed),
            "hidden": self.hidden,
        }
        return {why: n for why, n in counts.items() if n}

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
    line (a newline byte is never inside a UTF-8 character); ``None`` when it is text.

    UTF-16 text is told by its byte order mark before its NUL bytes make it look binary:
    Windows PowerShell's ``>`` writes it, and converting it is the fix."""
    with open(path, "rb") as handle:
        head = handle.read(SNIFF_BYTES)
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return (
            f"{path}: UTF-16 text, not UTF-8; skipped. "
            f"Convert it, e.g. iconv -f utf-16 -t utf-8 {path} > {path.with_suffix('.utf8' + path.suffix)}"
        )
    if b"\0" in head:
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


def _reader_class(reader: FileReader) -> Any:
    """LlamaIndex's class for ``reader``, or ``None`` when ``llama-index-readers-file`` or the
    library the class reads with is not installed."""
    if importlib.util.find_spec(reader.library) is None:
        return None
    try:
        return getattr(importlib.import_module("llama_index.readers.file"), reader.name)
    except (ImportError, AttributeError):  # AttributeError: a version without this reader
        return None


def _few(files: list[str]) -> str:
    """The first :data:`SHOWN` of ``files``, and ``...`` when there are more."""
    return ", ".join(files[:SHOWN]) + (" ..." if len(files) > SHOWN else "")


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


def read_documents(directory: Path, doc_id_key: str, readers: Mapping[str, Any] | None = None) -> Corpus:
    """The documents of a folder (:class:`Corpus`), checked now and read again when iterated.

    Each file is one document (text, or a PDF/DOCX through LlamaIndex's
    readers); ``.jsonl`` files hold one per line. Hidden files and folders are
    skipped and counted; files that are not UTF-8 are skipped with a warning
    naming them (and the line of the first bad byte); empty and
    whitespace-only documents are skipped with one warning; binary files,
    formats whose reader is not installed and files their reader fails on are
    skipped and named in one warning, with the fix; a malformed ``.jsonl`` line
    or a repeated doc_id is an error naming the file and line.

    ``readers``: the reader class for some of :data:`BINARY_READERS`' suffixes
    (``None``: not installed), in place of LlamaIndex's, as
    ``SimpleDirectoryReader(file_extractor=...)`` takes them; LlamaIndex's are
    imported only when a file needs one.
    """
    check_directory(directory)
    unknown = set(readers or {}) - set(BINARY_READERS)
    if unknown:
        raise ValueError(f"readers for {sorted(unknown)}: only {sorted(BINARY_READERS)} files are read by a reader")
    corpus = Corpus(directory, doc_id_key, readers=dict(readers or {}))
    for _ in corpus._documents(check=True):
        corpus.count += 1
    if corpus.hidden:
        logger.info("skipped %d hidden files and folders under %s", corpus.hidden, directory)
    if corpus.empty:
        print(
            f"warning: skipped {len(corpus.empty)} empty or whitespace-only document"
            f"{'s' if len(corpus.empty) > 1 else ''}: {_few(corpus.empty)}",
            file=sys.stderr,
        )
    unreadable = corpus.skipped_summary()
    if unreadable is not None:
        print(f"warning: {unreadable}", file=sys.stderr)
    if not corpus.count:
        found = [f"{n} {why}" for why, n in corpus.skipped_counts().items() if why != "hidden"]
        raise CliError(
            f"no documents to index under {directory}"
            + (
                f" ({', '.join(found)}, all skipped)"
                if found
                else " (only hidden files, or none; hidden ones are skipped)"
            )
        )
    return corpus
