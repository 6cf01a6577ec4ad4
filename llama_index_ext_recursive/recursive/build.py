"""Turn documents (or pre-chunked nodes) into summary nodes plus chunk nodes.

Over 500 lines because it is one policy: how documents are chunked
(``node_parser``/``transformations``/``Settings``), grouped into documents
(``doc_id_key``, else ``ref_doc_id``) and summarized, with the input checks
every construction path and update shares; the vectors are in
:mod:`~llama_index_ext_recursive.recursive.vectors`.

Every chunk is a copy of the user's node whose ``ref_doc_id`` is its document
key, so a per-document retriever is just a ``ref_doc_id`` filter on one chunk
store (a SQL ``WHERE`` on a database store), and every summary is an
``IndexNode`` whose ``index_id`` is that key by construction.

Input hygiene lives here, so ``from_documents``, ``from_nodes``,
``add_documents`` and the CLI share one policy: empty and whitespace-only
documents (and blank nodes) are skipped with one warning that names them,
duplicate node ids are refused, before anything is indexed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import PurePath
from typing import Any

from llama_index.core import Settings
from llama_index.core.ingestion import run_transformations
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.node_parser.text.utils import split_by_sentence_tokenizer
from llama_index.core.schema import (
    BaseNode,
    Document,
    IndexNode,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
    TransformComponent,
)

from llama_index_ext_recursive.progress import progress_bar
from llama_index_ext_recursive.recursive.summarize import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryCache,
    content_hash,
)
from llama_index_ext_recursive.validation import check_count, json_metadata

logger = logging.getLogger(__name__)

ROUTING_KEY = "ref_doc_id"  # set by every LlamaIndex vector store from the SOURCE relationship
DOC_ID_KEY = "doc_id"  # the metadata key a document id is read from (and written to) by default
SUMMARY_PREFIX = "summary::"
ORIGINAL_REF_KEY = "original_ref_doc_id"
DOCUMENT_CONTEXT_KEY = "document"  # ChunkContext: the document's title, embedded with the chunk
SENTENCE_WINDOW = 100_000  # characters the sentence tokenizer sees at once (~0.2 s)
_NAMED = 5  # ids a warning or error lists before "... and N more"


class ChunkContext(str, Enum):
    """What of its document each chunk is searched by, besides its own text.

    ``title`` (default): the document's title, under the metadata key
    :data:`DOCUMENT_CONTEXT_KEY`, which the chunk's embedded text (dense and
    BM25) includes and its LLM text does not, unless that text already shows
    the title (the user's nodes embed a ``title`` key, or the title is in the
    text). A clause that is the same boilerplate in every contract, or a
    paragraph that never names its article, is then found through the
    document it belongs to, whatever metadata the user's nodes embed
    (Anthropic's contextual retrieval, without an LLM). ``none``: the chunk as
    the user built it. Measured on every shared dataset in docs/BENCHMARKS.md.
    Chunks that carry their own embedding keep it: only BM25 sees the title.
    """

    NONE = "none"
    TITLE = "title"


class SummaryEmbedding(str, Enum):
    """What a summary node is routed by.

    ``text``: the embedding of the summary text. ``centroid``: the normalized
    mean of the document's chunk embeddings (no extra embedding call). ``blend``:
    the normalized sum of both. Measured on xquad_en_fine/xquad_zh_fine in
    ``benchmarks/results/tune_*.md``; the summary text is kept for display either way.
    """

    TEXT = "text"
    CENTROID = "centroid"
    BLEND = "blend"


def windowed_sentence_tokenizer(window: int = SENTENCE_WINDOW) -> Callable[[str], list[str]]:
    """Upstream's punkt sentence tokenizer, fed at most ``window`` characters at a time.

    ``SentenceSplitter`` hands the tokenizer a whole paragraph; NLTK stops any
    regular expression that runs longer than 5 s, so 5 MB of text without a
    paragraph break failed with ``TimeoutError``. Longer text is cut after the
    last line break (else space) of each window, so the pieces join back to the
    exact text and a sentence is cut only where a window ends inside it. Text
    within one window is tokenized exactly as upstream does.

    Args:
        window: characters per tokenizer call.
    """
    check_count("window", window, minimum=1000)
    tokenize = split_by_sentence_tokenizer()

    def split(text: str) -> list[str]:
        if len(text) <= window:
            return tokenize(text)
        return [sentence for piece in _windows(text, window) for sentence in tokenize(piece)]

    return split


def _windows(text: str, size: int) -> Iterable[str]:
    """Consecutive pieces of ``text`` of at most about ``size`` characters, cut after whitespace."""
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = text.rfind("\n", start + size // 2, end)
        if cut < 0:
            cut = text.rfind(" ", start + size // 2, end)
        cut = end if cut < 0 else cut + 1
        yield text[start:cut]
        start = cut
    yield text[start:]


def default_node_parser(chunk_size: int = 256, chunk_overlap: int = 32) -> NodeParser:
    """Chunks sized for all-MiniLM-L6-v2's 256-token window.

    A ``SentenceSplitter`` whose sentence tokenizer is
    :func:`windowed_sentence_tokenizer`, so one huge unbroken paragraph is
    chunked instead of hitting NLTK's regex timeout.

    Args:
        chunk_size: tokens per chunk.
        chunk_overlap: tokens shared by consecutive chunks.
    """
    return SentenceSplitter(
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        chunking_tokenizer_fn=windowed_sentence_tokenizer(),
    )


def _explicit_settings_transformations() -> list[TransformComponent] | None:
    """What the user set on ``Settings`` (``transformations``, ``node_parser`` or
    ``chunk_size``/``chunk_overlap``), else ``None``.

    Upstream creates a default ``SentenceSplitter()`` in ``Settings`` the first
    time anything reads it (``VectorStoreIndex.from_documents`` does), so a
    parser equal to that default counts as not set: our default, sized for the
    bundled model's window, is used instead.
    """
    default = SentenceSplitter().to_dict()
    parser = Settings._node_parser
    parser_set = parser is not None and not (type(parser) is SentenceSplitter and parser.to_dict() == default)
    steps = Settings._transformations
    if steps is not None and not (len(steps) == 1 and steps[0] is parser and not parser_set):
        return list(steps)
    return [parser] if parser is not None and parser_set else None


def resolve_transformations(
    node_parser: Any = None, transformations: Sequence[TransformComponent] | None = None
) -> list[TransformComponent]:
    """How documents are chunked: ``node_parser=`` or ``transformations=`` (as
    upstream ``VectorStoreIndex.from_documents``), else an explicitly set
    ``Settings.transformations``/``node_parser``/``chunk_size``, else
    :func:`default_node_parser`. Checked before any document is chunked.

    Raises:
        TypeError: an item is not a ``TransformComponent`` (a node parser,
            an extractor, ...), or both arguments are given.
    """
    if node_parser is not None and transformations is not None:
        raise TypeError("pass node_parser= or transformations=, not both")
    if node_parser is not None:
        if not isinstance(node_parser, NodeParser):
            raise TypeError(
                f"node_parser must be a NodeParser (e.g. SentenceSplitter()), got "
                f"{type(node_parser).__name__}; for a list of steps pass transformations=[...]"
            )
        return [node_parser]
    if transformations is None:
        return _explicit_settings_transformations() or [default_node_parser()]
    if isinstance(transformations, TransformComponent) or not isinstance(transformations, (list, tuple)):
        raise TypeError(
            f"transformations must be a list of TransformComponents (node parsers, extractors), "
            f"got {type(transformations).__name__}; wrap it in a list"
        )
    if not transformations:
        raise TypeError("transformations is empty: pass at least a node parser, e.g. [SentenceSplitter()]")
    for position, step in enumerate(transformations):
        if not isinstance(step, TransformComponent):
            raise TypeError(
                f"transformations[{position}] is a {type(step).__name__}, not a TransformComponent "
                "(a node parser such as SentenceSplitter(), or an extractor)"
            )
    return list(transformations)


@dataclass
class DocumentRecord:
    """What the retriever knows about one document."""

    doc_id: str
    title: str
    content_hash: str
    chunk_ids: list[str]
    summary_node_id: str
    metadata_keys: list[str] = field(default_factory=list)
    varying_keys: list[str] = field(default_factory=list)  # differ between its chunks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class BuiltDocuments:
    """Output of the builder: nodes to index and the per-document records."""

    summary_nodes: list[IndexNode]
    chunk_nodes: list[BaseNode]
    records: dict[str, DocumentRecord]


class ChunkedNodes(list[BaseNode]):
    """The chunks :func:`chunk_documents` returns: a list, plus what it skipped.

    Attributes:
        skipped_documents: ids of the documents that had no text to index
            (empty, whitespace-only, or no chunks from the node parser), in
            input order. :func:`group_nodes` carries them over.
    """

    def __init__(self, nodes: Iterable[BaseNode] = (), skipped_documents: Iterable[str] = ()) -> None:
        super().__init__(nodes)
        self.skipped_documents: list[str] = list(skipped_documents)


class NodeGroups(dict[str, list[BaseNode]]):
    """The groups :func:`group_nodes` returns: a dict, plus what it skipped.

    Attributes:
        skipped_documents: ids of the documents left out because they had no
            text: those :func:`chunk_documents` skipped (when it made the
            nodes), then those whose every node was blank.
        skipped_nodes: ids of the blank nodes left out.
    """

    def __init__(self) -> None:
        super().__init__()
        self.skipped_documents: list[str] = []
        self.skipped_nodes: list[str] = []


def _names(ids: Sequence[str]) -> str:
    """The first few ids, quoted, and how many more there are."""
    shown = ", ".join(repr(i) for i in ids[:_NAMED])
    return shown + (f" ... and {len(ids) - _NAMED} more" if len(ids) > _NAMED else "")


def _is_blank(node: BaseNode) -> bool:
    """A node with no text to embed; an ``IndexNode`` is a link and never blank."""
    if isinstance(node, IndexNode):
        return False
    return not node.get_content(metadata_mode=MetadataMode.NONE).strip()


def _refuse_single(items: Any, what: str, kind: type) -> None:
    """A lone string or node is not a collection of them: say so instead of iterating it."""
    if isinstance(items, (str, bytes, kind)):
        raise TypeError(
            f"{what} must be an iterable (list, generator, ...) of {kind.__name__}s, got one "
            f"{type(items).__name__}: wrap it in a list"
        )


def _document_key(document: Document, doc_id_key: str) -> str:
    value = document.metadata.get(doc_id_key)
    return str(value) if value not in (None, "") else document.doc_id


def chunk_documents(
    documents: Iterable[Document],
    node_parser: NodeParser | Sequence[TransformComponent] | None = None,
    doc_id_key: str | None = None,
    show_progress: bool = False,
    *,
    seen: dict[str, int] | None = None,
    start: int = 0,
    allow_empty: bool = False,
) -> ChunkedNodes:
    """Chunk documents; each chunk's metadata names its document under ``doc_id_key``
    (``None``: ``"doc_id"``).

    Every document is checked (type, unique id) before any is chunked.
    Documents with no text to index (empty, whitespace-only, or no chunks from
    the parser) are skipped with one warning naming them; their ids are in the
    result's ``skipped_documents``.

    Args:
        documents: any iterable of ``Document`` (a list, a generator, ...).
        node_parser: the parser, or a list of transformations (:func:`resolve_transformations`
            when ``None``).
        doc_id_key: metadata key naming a document's id (else its ``doc_id``).
        show_progress: show a progress bar over the documents.
        seen: document id -> position of the documents of earlier batches of one
            stream (:func:`stream_chunks`), so an id is refused across batches too.
        start: the position of the first of ``documents`` in that stream.
        allow_empty: a batch of a stream may hold only empty documents.

    Raises:
        TypeError: an item is not a ``Document``.
        ValueError: two documents share an id, every document was empty, or
            the parser timed out on a document (named, with its size).
    """
    _refuse_single(documents, "documents", Document)
    doc_id_key = doc_id_key or DOC_ID_KEY
    keyed: list[Document] = []
    seen = {} if seen is None else seen
    batch: list[str] = []
    blank: list[str] = []
    for position, document in enumerate(documents, start=start):
        if not isinstance(document, Document):
            raise TypeError(
                f"documents[{position}] is a {type(document).__name__}, not a Document; "
                "use from_nodes(...) for pre-chunked nodes"
            )
        key = _document_key(document, doc_id_key)
        if key in seen:
            raise ValueError(
                f"documents[{seen[key]}] and documents[{position}] share the document id "
                f"{key!r} (metadata[{doc_id_key!r}] or doc_id): give each document its own id"
            )
        seen[key] = position
        batch.append(key)
        if not document.get_content(metadata_mode=MetadataMode.NONE).strip():
            blank.append(key)
            continue
        copy = document.model_copy(deep=True)
        copy.id_ = key
        copy.metadata = json_metadata(copy.metadata, f"document {key!r}")
        copy.metadata[doc_id_key] = key
        keyed.append(copy)
    steps: list[TransformComponent] = (
        [node_parser] if isinstance(node_parser, NodeParser) else resolve_transformations(None, node_parser)
    )
    chunks: list[BaseNode] = []
    chunkless: list[str] = []
    items: Iterable[Document] = keyed
    if show_progress:
        items = progress_bar(keyed, desc="Chunking documents")
    for document in items:
        parsed = _parse_one(steps, document)
        if not parsed:
            chunkless.append(document.id_)
        chunks.extend(parsed)
    skipped = set(blank + chunkless)
    nodes = ChunkedNodes(chunks, [key for key in batch if key in skipped])
    if nodes.skipped_documents:
        if not nodes and not allow_empty:
            raise ValueError(
                f"every document was empty: the {len(batch)} given ({_names(nodes.skipped_documents)}) "
                "have no text to index (empty, whitespace-only, or no chunks from the node "
                "parser); check how they were read (file type, encoding, text field)"
            )
        logger.warning(
            "skipped %d of %d documents with no text to index (empty, whitespace-only, or no "
            "chunks from the node parser): %s",
            len(nodes.skipped_documents),
            len(batch),
            _names(nodes.skipped_documents),
        )
    return nodes


STREAM_DOCUMENTS = 256  # documents chunked at a time by a streaming build


def stream_chunks(
    documents: Iterable[Document],
    node_parser: NodeParser | Sequence[TransformComponent] | None = None,
    doc_id_key: str | None = None,
    batch_documents: int | None = None,
) -> Iterator[BaseNode]:
    """The chunks of ``documents``, chunked ``batch_documents`` at a time as they are consumed.

    :func:`chunk_documents` over a stream: each document's chunks come
    together, a document id used twice is refused across batches, and only
    when no document at all had text is that an error. What a streaming
    build (:func:`node_batches`) reads, so no list of documents or chunks is
    ever held.
    """
    _refuse_single(documents, "documents", Document)
    seen: dict[str, int] = {}
    produced = 0
    position = 0
    for batch in _batched(documents, batch_documents or STREAM_DOCUMENTS):
        chunks = chunk_documents(batch, node_parser, doc_id_key, seen=seen, start=position, allow_empty=True)
        position += len(batch)
        produced += len(chunks)
        yield from chunks
    if not produced:
        raise ValueError(
            f"every document was empty: the {position} given have no text to index (empty, whitespace-only, "
            "or no chunks from the node parser); check how they were read (file type, encoding, text field)"
        )


def _batched(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


STREAM_NODES = 5_000  # nodes a streaming build summarizes, embeds and stores at a time
SUMMARY_BATCH = 256  # documents summarised together (on worker processes when a build has them)


def node_batches(
    nodes: Iterable[BaseNode], doc_id_key: str | None = None, batch_nodes: int | None = None
) -> Iterator[NodeGroups]:
    """:func:`group_nodes` over a stream, about ``batch_nodes`` nodes at a time, cut between documents.

    A streaming build indexes each batch before reading the next, so the
    stream is never held whole. That needs each document's nodes together
    (as :func:`stream_chunks` and every reader of one document at a time
    give them); a document met again after its batch was indexed is refused,
    naming it. Node ids are checked within each batch (the index checks them
    against the nodes it stored: :meth:`RecursiveIndex.from_nodes`, so no map
    of every id is held), and only a stream with no node of text at all is an
    error. A list (any sequence) is grouped
    whole first, so its documents need no order: the caller holds it anyway.

    Raises:
        ValueError: a document's nodes are not together, or any error of :func:`group_nodes`.
    """
    _refuse_single(nodes, "nodes", BaseNode)
    batch_nodes = batch_nodes or STREAM_NODES
    if isinstance(nodes, Sequence):
        yield from _split(group_nodes(nodes, doc_id_key), batch_nodes)
        return
    indexed: set[str] = set()
    batch: list[BaseNode] = []
    keys: set[str] = set()
    current: str | None = None
    start = position = produced = 0
    for position, node in enumerate(nodes):
        key = _node_key(node, doc_id_key) if isinstance(node, BaseNode) else None
        key = None if key in (None, "") else str(key)
        if key != current and key is not None:
            if len(batch) >= batch_nodes:
                groups = group_nodes(batch, doc_id_key, start=start, allow_empty=True)
                produced += len(groups)
                indexed |= keys
                yield groups
                batch, keys, start = [], set(), position
            if key in indexed:
                raise ValueError(
                    f"the nodes of document {key!r} are not together (nodes[{position}] comes after the "
                    "document was indexed): a streaming build indexes each document when its nodes end; "
                    "give each document's nodes in one run (sort them by document), or pass a list"
                )
            current = key
            keys.add(key)
        batch.append(node)
    if batch:
        groups = group_nodes(batch, doc_id_key, start=start, allow_empty=True)
        produced += len(groups)
        yield groups
    if not produced:
        raise ValueError("no nodes to index: the stream held no node with text (IndexNode links count)")


def _parse_one(steps: list[TransformComponent], document: Document) -> Sequence[BaseNode]:
    """One document's chunks; a parser timeout names the document and the fix."""
    try:
        if len(steps) == 1 and isinstance(steps[0], NodeParser):
            return steps[0].get_nodes_from_documents([document])
        return run_transformations([document], steps)
    except TimeoutError as exc:
        raise ValueError(
            f"document {document.id_!r} ({len(document.text):,} characters) could not be chunked: "
            f"{' -> '.join(type(s).__name__ for s in steps)} timed out ({exc}). Use default_node_parser(), or pass "
            "chunking_tokenizer_fn=windowed_sentence_tokenizer() to your SentenceSplitter, "
            "or split the document into parts"
        ) from exc


def _node_key(node: BaseNode, doc_id_key: str | None) -> Any:
    """The document a node belongs to: ``metadata[doc_id_key]``; by default
    ``metadata["doc_id"]`` when present, else the node's ``ref_doc_id`` (what
    every LlamaIndex reader and ``VectorStoreIndex`` sets)."""
    if doc_id_key is not None:
        return node.metadata.get(doc_id_key)
    key = node.metadata.get(DOC_ID_KEY)
    return key if key not in (None, "") else node.ref_doc_id


def _split(groups: NodeGroups, batch_nodes: int) -> Iterator[NodeGroups]:
    """``groups`` in parts of about ``batch_nodes`` nodes, whole documents each (the first
    part carries what grouping skipped)."""
    part = NodeGroups()
    part.skipped_documents, part.skipped_nodes = groups.skipped_documents, groups.skipped_nodes
    size = 0
    for doc_id, nodes in groups.items():
        if size >= batch_nodes:
            yield part
            part, size = NodeGroups(), 0
        part[doc_id] = nodes
        size += len(nodes)
    yield part


def group_nodes(
    nodes: Iterable[BaseNode],
    doc_id_key: str | None = None,
    *,
    start: int = 0,
    allow_empty: bool = False,
) -> NodeGroups:
    """Copies of ``nodes`` grouped by document, with ``ref_doc_id`` set to the key.

    The user's nodes are never modified; a different original ``ref_doc_id``
    is kept in metadata under ``original_ref_doc_id``. Blank nodes (no text;
    ``IndexNode`` links are kept) are skipped, and so is a document left with
    no node, with one warning naming them; the result's ``skipped_nodes`` and
    ``skipped_documents`` list their ids.

    Args:
        nodes: any iterable of nodes (a list, a generator, ...).
        doc_id_key: metadata key naming each node's document (``None``:
            ``metadata["doc_id"]``, else the node's ``ref_doc_id``).
        start: the position of the first of ``nodes`` in that stream.
        allow_empty: a batch of a stream may hold only blank nodes.

    Raises:
        TypeError: an item is not a node.
        ValueError: a node does not name its document, two nodes share an id
            (both documents are named), or every node was blank.
    """
    _refuse_single(nodes, "nodes", BaseNode)
    groups = NodeGroups()
    owners: dict[str, tuple[str, int]] = {}
    blank: dict[str, list[str]] = {}
    for position, node in enumerate(nodes, start=start):
        if not isinstance(node, BaseNode):
            raise TypeError(
                f"nodes[{position}] is a {type(node).__name__}, not a node (TextNode, IndexNode, "
                "...); use from_documents(...) for documents"
            )
        key = _node_key(node, doc_id_key)
        if key in (None, ""):
            named = (
                f"metadata[{doc_id_key!r}]"
                if doc_id_key is not None
                else f"metadata[{DOC_ID_KEY!r}] nor a ref_doc_id (a SOURCE relationship)"
            )
            raise ValueError(
                f"node {node.node_id!r} (position {position}) has no {named}: every node "
                f"must name its document; set node.metadata[{doc_id_key or DOC_ID_KEY!r}] or "
                "pass doc_id_key= with the key your nodes use"
            )
        key = str(key)
        _refuse_duplicate(node.node_id, key, position, owners)
        if _is_blank(node):
            blank.setdefault(key, []).append(node.node_id)
            continue
        copy = _own_copy(node)
        copy.metadata = json_metadata(copy.metadata, f"node {node.node_id!r}")
        original = node.ref_doc_id
        if original is not None and original != key:
            copy.metadata[ORIGINAL_REF_KEY] = original
            _exclude(copy, [ORIGINAL_REF_KEY])
        copy.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=key)
        _exclude(copy, [doc_id_key or DOC_ID_KEY], llm=False)
        groups.setdefault(key, []).append(copy)
    groups.skipped_nodes = [node_id for ids in blank.values() for node_id in ids]
    emptied = [key for key in blank if key not in groups]
    groups.skipped_documents = list(getattr(nodes, "skipped_documents", [])) + emptied
    if groups.skipped_nodes:
        if not groups and not allow_empty:
            raise ValueError(
                f"every document was empty: all {len(groups.skipped_nodes)} nodes "
                f"({_names(groups.skipped_nodes)}) of {_names(emptied)} have no text; "
                "pass nodes with text (IndexNode links are kept)"
            )
        logger.warning(
            "skipped %d blank nodes (no text): %s; documents left with no node, skipped: %s",
            len(groups.skipped_nodes),
            _names(groups.skipped_nodes),
            _names(emptied) or "none",
        )
    return groups


def _refuse_duplicate(node_id: str, doc_id: str, position: int, owners: dict[str, tuple[str, int]]) -> None:
    """Refuse a node id seen before: the second node would overwrite the first in the stores."""
    if node_id not in owners:
        owners[node_id] = (doc_id, position)
        return
    first_doc, first_position = owners[node_id]
    where = (
        f"twice in document {doc_id!r}" if first_doc == doc_id else f"in two documents, {first_doc!r} and {doc_id!r}"
    )
    raise ValueError(
        f"node id {node_id!r} is used {where} (nodes[{first_position}] and nodes[{position}]); "
        "the second would overwrite the first: give every node its own id_ "
        "(e.g. f'{doc_id}-{i}') or drop the copy"
    )


def check_new_node_ids(groups: Mapping[str, Sequence[BaseNode]], indexed: Mapping[str, str]) -> None:
    """Refuse new nodes whose id is already indexed under another document.

    An id may be reused only by its own document (an update replaces all its
    chunks); a reuse by another document would overwrite that document's chunk.

    Args:
        groups: new nodes by document id (:func:`group_nodes` output).
        indexed: node id -> document id of every chunk already in the index.

    Raises:
        ValueError: naming the node id, the new document and the indexed one.
    """
    for doc_id, nodes in groups.items():
        for node in nodes:
            owner = indexed.get(node.node_id)
            if owner is not None and owner != doc_id:
                raise ValueError(
                    f"node id {node.node_id!r} of document {doc_id!r} is already indexed as a "
                    f"chunk of document {owner!r}; adding it would overwrite that chunk: give "
                    "the new node its own id_, or delete_document("
                    f"{owner!r}) first if it moved"
                )


def _own_copy(node: BaseNode) -> BaseNode:
    """A copy whose mutable fields the builder may change (a deep copy is 10x slower)."""
    copy = node.model_copy()
    copy.metadata = dict(node.metadata)
    copy.relationships = dict(node.relationships)
    copy.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
    copy.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
    return copy


def _exclude(node: BaseNode, keys: list[str], llm: bool = True) -> None:
    for key in keys:
        if key not in node.excluded_embed_metadata_keys:
            node.excluded_embed_metadata_keys.append(key)
        if llm and key not in node.excluded_llm_metadata_keys:
            node.excluded_llm_metadata_keys.append(key)


def _shared_metadata(chunks: Sequence[BaseNode]) -> dict[str, Any]:
    """Metadata every chunk of a document agrees on: the document's metadata."""
    shared = dict(chunks[0].metadata)
    for chunk in chunks[1:]:
        for key in list(shared):
            if chunk.metadata.get(key) != shared[key]:
                del shared[key]
    shared.pop(ORIGINAL_REF_KEY, None)
    return shared


def _title(doc_id: str, chunks: Sequence[BaseNode]) -> str:
    return _metadata_title(chunks) or doc_id


def _metadata_title(chunks: Sequence[BaseNode]) -> str | None:
    """A document's title from its metadata: ``title``; else, for a file (``SimpleDirectoryReader``
    sets ``file_path``), its folder and name, so the ``__init__.py`` of two packages differ and the
    title says where the file is; else ``file_name`` or ``name``."""
    metadata = chunks[0].metadata
    if metadata.get("title"):
        return str(metadata["title"])
    path = metadata.get("file_path")
    if isinstance(path, str) and path.strip():
        return "/".join(PurePath(path).parts[-2:])
    for key in ("file_name", "name"):
        if metadata.get(key):
            return str(metadata[key])
    return None


def add_document_context(chunks: Sequence[BaseNode], context: ChunkContext) -> None:
    """Give each chunk its document's title as :class:`ChunkContext` says (the builder's own copies).

    Nothing is added where the chunk's embedded text already shows the title,
    where the document has no title in its metadata (a bare id, such as a
    UUID, tells a model nothing), to ``IndexNode`` links, or where the user's
    metadata already has the key (theirs is kept).
    """
    title = _metadata_title(chunks) if context == ChunkContext.TITLE else None
    if not title:
        return
    for chunk in chunks:
        if isinstance(chunk, IndexNode) or DOCUMENT_CONTEXT_KEY in chunk.metadata:
            continue
        if title in chunk.get_content(metadata_mode=MetadataMode.EMBED):
            continue
        chunk.metadata[DOCUMENT_CONTEXT_KEY] = title
        if DOCUMENT_CONTEXT_KEY not in chunk.excluded_llm_metadata_keys:
            chunk.excluded_llm_metadata_keys.append(DOCUMENT_CONTEXT_KEY)


def version_hash(text: str, chunks: Sequence[BaseNode]) -> str:
    """What an update compares to tell whether a document changed.

    The text alone missed a change of metadata (``year`` 2020 -> 2021) or of
    a link's target: the update was skipped as "unchanged" and filters kept
    answering with the old values. Chunk ids are left out: a splitter may
    number chunks afresh on every run, and an unchanged document must not be
    re-embedded for that.

    Args:
        text: the document's chunk texts joined.
        chunks: its chunks (their metadata and ``IndexNode`` targets count).
    """
    structure = [[c.metadata, getattr(c, "index_id", None)] for c in chunks]
    return content_hash(text + "\x00" + json.dumps(structure, sort_keys=True, default=repr))


def build_documents(
    groups: dict[str, list[BaseNode]],
    doc_id_key: str | None = None,
    summarizer: Summarizer | None = None,
    summary_cache: SummaryCache | None = None,
    show_progress: bool = False,
    workers: int = 1,
    chunk_context: ChunkContext | str = ChunkContext.NONE,
) -> BuiltDocuments:
    """Summaries and records for grouped chunks (see :func:`group_nodes`).

    Args:
        chunk_context: what of its document each chunk is searched by
            (:func:`add_document_context`, after the records' content hashes,
            which therefore do not depend on it).
        workers: processes the default summarizer may use for the summaries the
            cache lacks (:meth:`SummaryCache.get_or_create_many`); a streaming
            build passes its store's.
    """
    doc_id_key = doc_id_key or DOC_ID_KEY
    chunk_context = ChunkContext(chunk_context)
    summarizer = summarizer or ExtractiveSummarizer()
    cache = summary_cache if summary_cache is not None else SummaryCache()
    summaries: list[IndexNode] = []
    chunks: list[BaseNode] = []
    records: dict[str, DocumentRecord] = {}
    doc_ids = list(groups)
    with progress_bar(total=len(doc_ids), desc="Summarizing documents", disable=not show_progress) as bar:
        for start in range(0, len(doc_ids), SUMMARY_BATCH):
            batch = doc_ids[start : start + SUMMARY_BATCH]
            texts = {d: "\n".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in groups[d]) for d in batch}
            titles = {d: _title(d, groups[d]) for d in batch}
            made = cache.get_or_create_many(summarizer, [(titles[d], texts[d]) for d in batch], workers=workers)
            for doc_id, summary_text in zip(batch, made, strict=True):
                doc_chunks = groups[doc_id]
                metadata = _shared_metadata(doc_chunks)
                metadata[doc_id_key] = doc_id
                summary = IndexNode(
                    id_=f"{SUMMARY_PREFIX}{doc_id}",
                    text=summary_text,
                    index_id=doc_id,
                    metadata=metadata,
                    excluded_embed_metadata_keys=list(metadata),
                    excluded_llm_metadata_keys=[doc_id_key],
                    relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc_id)},
                )
                summaries.append(summary)
                chunks.extend(doc_chunks)
                records[doc_id] = DocumentRecord(
                    doc_id=doc_id,
                    title=titles[doc_id],
                    content_hash=version_hash(texts[doc_id], doc_chunks),
                    chunk_ids=[c.node_id for c in doc_chunks],
                    summary_node_id=summary.node_id,
                    metadata_keys=sorted(metadata),
                    varying_keys=sorted({k for c in doc_chunks for k in c.metadata} - set(metadata)),
                )
                add_document_context(doc_chunks, chunk_context)
            bar.update(len(batch))
    return BuiltDocuments(summaries, chunks, records)
