"""``build``'s input: documents from a folder of ``.txt``, ``.md`` and ``.jsonl`` files."""

from __future__ import annotations

import codecs
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llama_index.core.schema import Document

from llama_index_ext_recursive.cli.checks import CliError

TEXT_SUFFIXES = {".txt", ".md"}
logger = logging.getLogger(__name__)


@dataclass
class Corpus:
    """What ``build`` read: the documents, and what it skipped and why."""

    documents: list[Document] = field(default_factory=list)
    empty: list[str] = field(default_factory=list)
    undecodable: list[str] = field(default_factory=list)
    hidden: int = 0


def _visible_files(directory: Path, corpus: Corpus) -> Iterator[Path]:
    """Files under ``directory`` in sorted order, skipping names that start with ``.``.

    As ``SimpleDirectoryReader(exclude_hidden=True)`` does, but only below
    ``directory``: a corpus inside a hidden folder can still be named explicitly.
    """
    for root, folders, files in os.walk(directory):
        corpus.hidden += sum(name.startswith(".") for name in folders + files)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in sorted(files):
            if not name.startswith("."):
                yield Path(root) / name


def _decode(path: Path, corpus: Corpus) -> str | None:
    """The file's text (UTF-8, a leading BOM dropped), or ``None`` with a warning if it is not UTF-8."""
    data = path.read_bytes()
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[bom:].decode("utf-8")
    except UnicodeDecodeError as exc:  # utf-8-sig would count its offset after the BOM
        start = bom + exc.start
        line = data[:start].count(b"\n") + 1
        reason = (
            f"{path}:{line}: not UTF-8 (byte 0x{data[start]:02x} at offset {start}); "
            "skipped. Convert it, "
            f"e.g. iconv -f latin1 -t utf-8 {path} > {path.with_suffix('.utf8' + path.suffix)}"
        )
        print(f"warning: {reason}", file=sys.stderr)
        corpus.undecodable.append(str(path))
        return None


def _jsonl_documents(path: Path, text: str, doc_id_key: str, corpus: Corpus, origin: dict[str, str]) -> None:
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines breaks on
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        expected = "each line must be a JSON object with doc_id (or _id) and text"
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
                f"{where}: holds an unpaired surrogate escape such as \\ud800, which is not text; fix or remove it"
            ) from None
        if doc_id in origin:
            raise CliError(
                f"{where}: doc_id {doc_id!r} is already used by {origin[doc_id]}; give every document its own id"
            )
        origin[doc_id] = where
        if not body.strip():
            corpus.empty.append(f"{where} ({doc_id})")
            continue
        metadata = {**metadata, doc_id_key: doc_id}
        if row.get("title"):
            metadata["title"] = str(row["title"])
        corpus.documents.append(Document(id_=doc_id, text=body, metadata=metadata))


def check_directory(directory: Path) -> None:
    if not directory.is_dir():
        raise CliError(f"{directory} is not a directory; pass the folder holding your .txt, .md or .jsonl documents")


def read_documents(directory: Path, doc_id_key: str) -> Corpus:
    """Documents from ``.txt``/``.md`` files (one each) and ``.jsonl`` files (one per line).

    Hidden files and folders are skipped, files that are not UTF-8 are skipped
    with a warning naming them (and the line of the first bad byte), empty and
    whitespace-only documents are skipped and counted; a malformed ``.jsonl``
    line or a repeated doc_id is an error naming the file and line.
    """
    check_directory(directory)
    corpus = Corpus()
    origin: dict[str, str] = {}
    for path in _visible_files(directory, corpus):
        suffix = path.suffix.lower()
        if suffix != ".jsonl" and suffix not in TEXT_SUFFIXES:
            continue
        text = _decode(path, corpus)
        if text is None:
            continue
        if suffix == ".jsonl":
            _jsonl_documents(path, text, doc_id_key, corpus, origin)
            continue
        doc_id = path.relative_to(directory).as_posix()
        if doc_id in origin:
            raise CliError(
                f"{path}: doc_id {doc_id!r} is already used by {origin[doc_id]}; give every document its own id"
            )
        origin[doc_id] = str(path)
        if not text.strip():
            corpus.empty.append(str(path))
            continue
        corpus.documents.append(
            Document(id_=doc_id, text=text, metadata={doc_id_key: doc_id, "title": path.stem, "file_name": path.name})
        )
    if corpus.hidden:
        logger.info("skipped %d hidden files and folders under %s", corpus.hidden, directory)
    if corpus.empty:
        shown = ", ".join(corpus.empty[:5]) + (" ..." if len(corpus.empty) > 5 else "")
        print(
            f"warning: skipped {len(corpus.empty)} empty or whitespace-only document"
            f"{'s' if len(corpus.empty) > 1 else ''}: {shown}",
            file=sys.stderr,
        )
    if not corpus.documents:
        skipped = len(corpus.empty) + len(corpus.undecodable)
        raise CliError(
            f"no documents to index under {directory}"
            + (
                f" ({len(corpus.empty)} empty, {len(corpus.undecodable)} not UTF-8, all skipped)"
                if skipped
                else " (looked for .txt, .md and .jsonl files; hidden ones are skipped)"
            )
        )
    return corpus
