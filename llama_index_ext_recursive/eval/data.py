"""Retrieval datasets in BEIR layout, loaded whole or not at all.

``corpus.jsonl`` (``_id``, ``title``, ``text``, ``metadata.doc_id`` naming the
parent document), ``queries.jsonl`` (``_id``, ``text``), ``qrels/<split>.tsv``
(header, then ``query-id  corpus-id  score``); hierarchical sets also have
``documents.jsonl`` and ``qrels/<split>.doc-level.tsv``. Every malformed line
raises :class:`DatasetError` naming the file and line. The queries may come from
another folder whose query ids align (cross-lingual evaluation on a parallel set).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from llama_index.core.schema import TextNode

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.validation import check_count, check_unicode

logger = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]


class DatasetError(LlamaIndexExtRecursiveError, ValueError):
    """A dataset file is missing or malformed; the message names file and line."""


@dataclass
class BeirDataset:
    """A loaded dataset: corpus, judged queries, qrels (and document-level qrels)."""

    name: str
    corpus: dict[str, dict[str, Any]]
    queries: dict[str, str]
    qrels: Qrels
    doc_qrels: Qrels | None = None
    doc_of: dict[str, str] = field(default_factory=dict)

    @property
    def hierarchical(self) -> bool:
        """Whether chunks belong to larger documents (document-level metrics apply)."""
        return self.doc_qrels is not None

    @classmethod
    def load(
        cls,
        path: str | Path,
        split: str = "test",
        max_queries: int | None = None,
        queries_from: str | Path | None = None,
    ) -> BeirDataset:
        """Load and validate a dataset directory.

        Arguments are checked before any file is read: ``split`` is a file name
        inside ``qrels/``, never a path, so ``split="../../x"`` cannot read
        judgements from outside the dataset; ``max_queries`` is a count, so
        ``-1`` is refused instead of silently dropping the last query.

        ``queries_from`` evaluates one folder's questions against another's
        corpus, e.g. English questions over Chinese passages in a parallel set
        such as XQuAD, whose question ids are the same in every language. The
        judgements stay those of ``path``; only the query texts come from the
        other folder, matched by id. Judged ids the other folder lacks are
        dropped with a warning giving their count (a partial translation still
        evaluates); if none match, the folders are not parallel and loading is
        refused. The name then says both folders: ``<queries>-><corpus>``.

        Args:
            path: the dataset directory (corpus, qrels and document-level qrels).
            split: qrels file to use (``qrels/<split>.tsv``), e.g. ``"test"`` or ``"dev"``.
            max_queries: keep the first N judged queries (in ``queries.jsonl``
                order); ``None`` keeps them all.
            queries_from: a BEIR directory whose ``queries.jsonl`` supplies the
                query texts instead of ``path``'s (``path`` then needs no
                ``queries.jsonl``).

        Raises:
            ValueError: ``split`` is not a plain name, or ``max_queries`` is not
                a positive integer (``TypeError`` for bools, floats, strings).
            DatasetError: a file is missing or malformed (named with its line),
                or no judged query id of ``path`` is in ``queries_from``.
        """
        check_split(split)
        check_count("max_queries", max_queries, allow_none=True)
        root = Path(path)
        if not root.is_dir():
            raise DatasetError(f"{root} is not a directory with corpus.jsonl, queries.jsonl and qrels/")
        qrels_path = root / "qrels" / f"{split}.tsv"
        if not qrels_path.is_file():
            raise DatasetError(
                f"{qrels_path} is missing; splits in {root / 'qrels'}: {available_splits(root) or 'none'}"
            )
        source = root if queries_from is None else _queries_folder(Path(queries_from), qrels_path)
        corpus: dict[str, dict[str, Any]] = {}
        doc_of: dict[str, str] = {}
        for where, row in _jsonl(root / "corpus.jsonl"):
            cid = _required_str(row, "_id", where)
            if cid in corpus:
                raise DatasetError(f"{where}: duplicate corpus _id {cid!r}")
            metadata = row.get("metadata") or {}
            if not isinstance(metadata, dict):
                raise DatasetError(f"{where}: metadata must be an object")
            corpus[cid] = {
                "title": _optional_str(row, "title", where),
                "text": _required_str(row, "text", where, allow_empty=True),
                "metadata": metadata,
            }
            doc_of[cid] = _required_str(metadata, "doc_id", f"{where}: metadata", default=cid)
        all_queries: dict[str, str] = {}
        for where, row in _jsonl(source / "queries.jsonl"):
            qid = _required_str(row, "_id", where)
            if qid in all_queries:
                raise DatasetError(f"{where}: duplicate query _id {qid!r}")
            all_queries[qid] = _required_str(row, "text", where)
        # a folder's own qrels must name its own queries; another folder's may lack some
        own_queries = all_queries if queries_from is None else None
        qrels = _qrels(qrels_path, own_queries, corpus)
        if queries_from is not None:
            _check_aligned(qrels, all_queries, qrels_path, source / "queries.jsonl")
        order = [qid for qid in all_queries if qid in qrels]
        if max_queries is not None:
            order = order[:max_queries]
        doc_path = root / "qrels" / f"{split}.doc-level.tsv"
        doc_qrels = None
        if doc_path.exists():
            doc_qrels = _qrels(doc_path, own_queries, None, known_docs=set(doc_of.values()))
            doc_qrels = {q: doc_qrels.get(q, {}) for q in order}
        return cls(
            name=root.name if queries_from is None else f"{source.name}->{root.name}",
            corpus=corpus,
            queries={qid: all_queries[qid] for qid in order},
            qrels={qid: qrels[qid] for qid in order},
            doc_qrels=doc_qrels,
            doc_of=doc_of,
        )

    def nodes(self, title_in_text: bool = False, embed_title: bool = True) -> list[TextNode]:
        """One ``TextNode`` per corpus item (``id_`` = corpus id).

        Metadata carries ``doc_id`` and ``title``. By default the title is
        embedded with the chunk, as LlamaIndex embeds metadata by default
        (``doc_id`` is not). The two conventions differ by several nDCG points
        on title-heavy sets (issue 12), so runs say which one they used.

        Args:
            title_in_text: prepend the title to the text instead of keeping it
                in metadata (BEIR's convention for flat sets such as SciFact).
            embed_title: ``False`` keeps the title in metadata but out of the
                embedded text (``excluded_embed_metadata_keys`` gets ``title``;
                the LLM still sees it). Retrievers that index the embed text,
                as BM25 does, do not see it either. Ignored with ``title_in_text``.
        """
        excluded_embed = ["doc_id"] if embed_title else ["doc_id", "title"]
        nodes = []
        for cid, item in self.corpus.items():
            title, text = item["title"], item["text"]
            metadata = {"doc_id": self.doc_of[cid]}
            if title_in_text:
                text = f"{title} {text}".strip()
            elif title:
                metadata["title"] = title
            nodes.append(
                TextNode(
                    id_=cid,
                    text=text,
                    metadata=metadata,
                    excluded_embed_metadata_keys=list(excluded_embed),
                    excluded_llm_metadata_keys=["doc_id"],
                )
            )
        return nodes

    def gold_documents(self) -> dict[str, tuple[str, ...]]:
        """Query text -> the documents it is judged relevant to (for the oracle retriever).

        From ``qrels/<split>.doc-level.tsv`` when the set has it, else the
        documents (``metadata.doc_id``) of the query's relevant corpus ids.
        Only positive judgements count; queries sharing one text get the union
        of their documents, since a retriever only ever sees the text.
        """
        gold: dict[str, dict[str, None]] = {}
        for qid, text in self.queries.items():
            docs = gold.setdefault(text, {})
            if self.doc_qrels is not None:
                positive = [d for d, rel in self.doc_qrels.get(qid, {}).items() if rel > 0]
            else:
                positive = [self.doc_of[c] for c, rel in self.qrels.get(qid, {}).items() if rel > 0]
            for doc_id in positive:
                docs.setdefault(doc_id, None)
        return {text: tuple(docs) for text, docs in gold.items()}


def from_pairs(pairs: Sequence[tuple[str, Sequence[str]]], name: str = "pairs") -> tuple[dict[str, str], Qrels]:
    """Queries and qrels from LlamaIndex-style ``(query, expected node ids)`` pairs."""
    queries, qrels = {}, {}
    for number, (query, expected) in enumerate(pairs):
        if not expected:
            raise DatasetError(f"{name}[{number}]: query {query!r} has no expected node ids")
        qid = f"q{number}"
        queries[qid] = query
        qrels[qid] = {str(node_id): 1 for node_id in expected}
    return queries, qrels


def check_split(split: Any) -> str:
    """Refuse a split that is not a plain file name (no separators, no ``..``).

    The split names ``qrels/<split>.tsv``; a path there would read qrels from
    anywhere on disk and score against them without complaint.
    """
    if not isinstance(split, str):
        raise TypeError(f"split must be a string such as 'test', got {split!r} ({type(split).__name__})")
    separators = {"/", "\\", os.sep, os.altsep or "/"}
    if (
        not split.strip()
        or ".." in split
        or "\x00" in split
        or any(sep in split for sep in separators)
        or split != split.strip()
    ):
        raise ValueError(
            f"split must be the name of a qrels file, such as 'test' for qrels/test.tsv, "
            f"got {split!r}: path separators, '..' and surrounding spaces are not allowed"
        )
    return split


def available_splits(root: str | Path) -> list[str]:
    """The splits a dataset has: ``qrels/<split>.tsv`` names, document-level files excluded."""
    qrels = Path(root) / "qrels"
    if not qrels.is_dir():
        return []
    return sorted(p.name[: -len(".tsv")] for p in qrels.glob("*.tsv") if not p.name.endswith(".doc-level.tsv"))


def _queries_folder(folder: Path, qrels_path: Path) -> Path:
    """The ``queries_from`` folder, refused unless it holds ``queries.jsonl``."""
    if not (folder / "queries.jsonl").is_file():
        what = "has no queries.jsonl" if folder.is_dir() else "is not a directory"
        raise DatasetError(
            f"the queries folder {folder} {what}; pass as queries_from (--queries-from) a BEIR "
            f"folder whose queries.jsonl has the query ids judged in {qrels_path}, e.g. the same "
            "set in another language"
        )
    return folder


def _check_aligned(qrels: Qrels, queries: Mapping[str, str], qrels_path: Path, queries_path: Path) -> None:
    """Refuse qrels none of whose query ids are in ``queries``; warn, with the count, if some are not."""
    missing = [qid for qid in qrels if qid not in queries]
    if not missing:
        return
    if len(missing) == len(qrels):
        raise DatasetError(
            f"none of the {len(qrels)} query ids judged in {qrels_path} (e.g. {missing[0]!r}) is in "
            f"{queries_path} (e.g. {next(iter(queries), None)!r}): the folders are not parallel; pass "
            "a queries folder with the same query ids, or write one whose ids are mapped to these"
        )
    logger.warning(
        "%d of %d query ids judged in %s are not in %s (e.g. %r): evaluating the other %d",
        len(missing),
        len(qrels),
        qrels_path,
        queries_path,
        missing[0],
        len(qrels) - len(missing),
    )


def _jsonl(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    if not path.is_file():
        raise DatasetError(f"{path} is missing")
    for number, line in _lines(path):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line, object_pairs_hook=partial(_unique_keys, where=where))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: invalid JSON ({exc.msg})") from exc
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a JSON object")
        yield where, row


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered lines of a UTF-8 file; bytes that are not UTF-8 are named (line and byte), not a bare
    ``UnicodeDecodeError``."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield number, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DatasetError(
                    f"{path}:{number}: byte {exc.start} of the line ({raw[exc.start : exc.start + 1]!r}) is "
                    "not UTF-8; convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from None


def _unique_keys(pairs: list[tuple[str, Any]], where: str) -> dict[str, Any]:
    """A JSON object whose keys are each given once: ``json.loads`` keeps the last of
    two ``"_id"``s without a word, so which one the file meant is asked, not guessed."""
    row: dict[str, Any] = {}
    for key, value in pairs:
        if key in row:
            raise DatasetError(f"{where}: key {key!r} is given twice ({row[key]!r:.40} and {value!r:.40}); keep one")
        row[key] = value
    return row


def _required_str(
    row: Mapping[str, Any], key: str, where: str, allow_empty: bool = False, default: str | None = None
) -> str:
    """A string field; an id (``_id``, ``doc_id``) given as an integer is its digits. Anything
    else, and a JSON escape that is not text (``"\\ud800"``), is refused, not turned into text.

    Args:
        default: the value of an absent field (``None``: an absent field is an error);
            a field given as ``null`` is an error either way.
    """
    if key not in row and default is not None:
        return default
    value = row.get(key)
    if value is None or (not allow_empty and value == ""):
        raise DatasetError(f"{where}: missing {key!r}")
    if isinstance(value, int) and not isinstance(value, bool) and key in ("_id", "doc_id"):
        return str(value)
    if not isinstance(value, str):
        raise DatasetError(
            f"{where}: {key!r} is a {type(value).__name__} ({str(value)[:60]!r}), not a string; "
            "fix the file (BEIR layout: string fields)"
        )
    try:
        check_unicode(f"{where}: {key!r}", value)
    except ValueError as exc:
        raise DatasetError(str(exc)) from None
    return value


def _optional_str(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    return "" if value is None else _required_str(row, key, where, allow_empty=True)


def _qrels(
    path: Path,
    queries: Mapping[str, str] | None,
    corpus: Mapping[str, Any] | None,
    known_docs: set | None = None,
) -> Qrels:
    if not path.is_file():
        raise DatasetError(f"{path} is missing")
    qrels: Qrels = {}
    for number, line in _lines(path):
        if not line.strip():
            continue
        parts = line.rstrip("\n").split("\t")
        where = f"{path}:{number}"
        if number == 1 and parts[0] == "query-id":
            continue
        if len(parts) != 3:
            raise DatasetError(f"{where}: expected 3 tab-separated columns, got {len(parts)}")
        qid, cid, score = parts
        if not re.fullmatch(r"-?[0-9]+", score.strip()):  # \d would take "١" (Arabic one) as 1
            raise DatasetError(f"{where}: relevance {score!r} is not an integer")
        relevance = int(score)
        if cid in qrels.get(qid, {}) and qrels[qid][cid] != relevance:
            raise DatasetError(
                f"{where}: query {qid!r} judges {cid!r} again, {relevance} after {qrels[qid][cid]}; "
                "keep one line per pair"
            )
        if queries is not None and qid not in queries:
            raise DatasetError(f"{where}: query {qid!r} is not in queries.jsonl")
        known = corpus if corpus is not None else known_docs
        if known is not None and cid not in known:
            raise DatasetError(f"{where}: {cid!r} is not in the corpus")
        qrels.setdefault(qid, {})[cid] = relevance
    return qrels
