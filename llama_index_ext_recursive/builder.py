"""Turn documents (or pre-chunked nodes) into summary nodes plus chunk nodes.

Every chunk is a copy of the user's node whose ``ref_doc_id`` is its document
key, so a per-document retriever is just a ``ref_doc_id`` filter on one chunk
store (a SQL ``WHERE`` on a database store), and every summary is an
``IndexNode`` whose ``index_id`` is that key by construction.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.utils import embed_nodes
from llama_index.core.node_parser import NodeParser, SentenceSplitter
from llama_index.core.schema import (
    BaseNode,
    Document,
    IndexNode,
    MetadataMode,
    NodeRelationship,
    RelatedNodeInfo,
)
from tqdm.auto import tqdm

from llama_index_ext_recursive.summarize import (
    ExtractiveSummarizer,
    Summarizer,
    SummaryCache,
    content_hash,
)

logger = logging.getLogger(__name__)

ROUTING_KEY = "ref_doc_id"  # set by every LlamaIndex vector store from the SOURCE relationship
SUMMARY_PREFIX = "summary::"
ORIGINAL_REF_KEY = "original_ref_doc_id"


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


def default_node_parser() -> NodeParser:
    """Chunks sized for all-MiniLM-L6-v2's 256-token window."""
    return SentenceSplitter(chunk_size=256, chunk_overlap=32)


def node_parser_config(parser: Optional[NodeParser]) -> Optional[Dict[str, Any]]:
    """A JSON-able description of ``parser`` that :func:`node_parser_from_config` restores."""
    if parser is None:
        return None
    config = parser.to_dict()
    id_func = config.pop("id_func", None)
    if isinstance(id_func, dict) and id_func.get("id_func_name") not in (None, "default_id_func"):
        logger.warning(
            "node parser %s has a custom id_func, which cannot be persisted; pass "
            "node_parser= to from_persist_dir to keep it", config.get("class_name")
        )
    return config


def node_parser_from_config(config: Optional[Dict[str, Any]]) -> Optional[NodeParser]:
    """Rebuild a LlamaIndex node parser from :func:`node_parser_config` output."""
    if config is None:
        return None
    import llama_index.core.node_parser as parsers

    parser_class = getattr(parsers, str(config.get("class_name")), None)
    if parser_class is None:
        logger.warning(
            "node parser %r is not one of llama_index.core.node_parser; pass node_parser= "
            "to from_persist_dir (the default parser is used for new documents)",
            config.get("class_name"),
        )
        return None
    return parser_class.from_dict(dict(config))


@dataclass
class DocumentRecord:
    """What the retriever knows about one document."""

    doc_id: str
    title: str
    content_hash: str
    chunk_ids: List[str]
    summary_node_id: str
    metadata_keys: List[str] = field(default_factory=list)
    varying_keys: List[str] = field(default_factory=list)  # differ between its chunks

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class BuiltDocuments:
    """Output of the builder: nodes to index and the per-document records."""

    summary_nodes: List[IndexNode]
    chunk_nodes: List[BaseNode]
    records: Dict[str, DocumentRecord]


def _document_key(document: Document, doc_id_key: str) -> str:
    value = document.metadata.get(doc_id_key)
    return str(value) if value not in (None, "") else document.doc_id


def chunk_documents(
    documents: Sequence[Document],
    node_parser: Optional[NodeParser] = None,
    doc_id_key: str = "doc_id",
    show_progress: bool = False,
) -> List[BaseNode]:
    """Chunk documents; each chunk's metadata names its document under ``doc_id_key``."""
    keyed: List[Document] = []
    seen: Dict[str, int] = {}
    for position, document in enumerate(documents):
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
        copy = document.model_copy(deep=True)
        copy.id_ = key
        copy.metadata[doc_id_key] = key
        keyed.append(copy)
    parser = node_parser or default_node_parser()
    return parser.get_nodes_from_documents(keyed, show_progress=show_progress)


def group_nodes(
    nodes: Iterable[BaseNode], doc_id_key: str = "doc_id"
) -> Dict[str, List[BaseNode]]:
    """Copies of ``nodes`` grouped by document, with ``ref_doc_id`` set to the key.

    The user's nodes are never modified; a different original ``ref_doc_id``
    is kept in metadata under ``original_ref_doc_id``.
    """
    groups: Dict[str, List[BaseNode]] = {}
    for position, node in enumerate(nodes):
        key = node.metadata.get(doc_id_key)
        if key in (None, ""):
            raise ValueError(
                f"node {node.node_id!r} (position {position}) has no metadata[{doc_id_key!r}]: "
                f"every node must name its document; set node.metadata[{doc_id_key!r}] or "
                "pass doc_id_key= with the key your nodes use"
            )
        key = str(key)
        copy = _own_copy(node)
        original = node.ref_doc_id
        if original is not None and original != key:
            copy.metadata[ORIGINAL_REF_KEY] = original
            _exclude(copy, [ORIGINAL_REF_KEY])
        copy.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=key)
        _exclude(copy, [doc_id_key], llm=False)
        groups.setdefault(key, []).append(copy)
    return groups


def _own_copy(node: BaseNode) -> BaseNode:
    """A copy whose mutable fields the builder may change (a deep copy is 10x slower)."""
    copy = node.model_copy()
    copy.metadata = dict(node.metadata)
    copy.relationships = dict(node.relationships)
    copy.excluded_embed_metadata_keys = list(node.excluded_embed_metadata_keys)
    copy.excluded_llm_metadata_keys = list(node.excluded_llm_metadata_keys)
    return copy


def _exclude(node: BaseNode, keys: List[str], llm: bool = True) -> None:
    for key in keys:
        if key not in node.excluded_embed_metadata_keys:
            node.excluded_embed_metadata_keys.append(key)
        if llm and key not in node.excluded_llm_metadata_keys:
            node.excluded_llm_metadata_keys.append(key)


def _shared_metadata(chunks: Sequence[BaseNode]) -> Dict[str, Any]:
    """Metadata every chunk of a document agrees on: the document's metadata."""
    shared = dict(chunks[0].metadata)
    for chunk in chunks[1:]:
        for key in list(shared):
            if chunk.metadata.get(key) != shared[key]:
                del shared[key]
    shared.pop(ORIGINAL_REF_KEY, None)
    return shared


def _title(doc_id: str, chunks: Sequence[BaseNode]) -> str:
    for key in ("title", "file_name", "name"):
        value = chunks[0].metadata.get(key)
        if value:
            return str(value)
    return doc_id


def build_documents(
    groups: Dict[str, List[BaseNode]],
    doc_id_key: str = "doc_id",
    summarizer: Optional[Summarizer] = None,
    summary_cache: Optional[SummaryCache] = None,
    show_progress: bool = False,
) -> BuiltDocuments:
    """Summaries and records for grouped chunks (see :func:`group_nodes`)."""
    summarizer = summarizer or ExtractiveSummarizer()
    cache = summary_cache if summary_cache is not None else SummaryCache()
    summaries: List[IndexNode] = []
    chunks: List[BaseNode] = []
    records: Dict[str, DocumentRecord] = {}
    items: Iterable[Tuple[str, List[BaseNode]]] = groups.items()
    if show_progress:
        items = tqdm(items, total=len(groups), desc="Summarizing documents")
    for doc_id, doc_chunks in items:
        text = "\n".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in doc_chunks)
        title = _title(doc_id, doc_chunks)
        metadata = _shared_metadata(doc_chunks)
        metadata[doc_id_key] = doc_id
        summary = IndexNode(
            id_=f"{SUMMARY_PREFIX}{doc_id}",
            text=cache.get_or_create(summarizer, title, text),
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
            title=title,
            content_hash=content_hash(text),
            chunk_ids=[c.node_id for c in doc_chunks],
            summary_node_id=summary.node_id,
            metadata_keys=sorted(metadata),
            varying_keys=sorted({k for c in doc_chunks for k in c.metadata} - set(metadata)),
        )
    return BuiltDocuments(summaries, chunks, records)


def _unit(vector: Sequence[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    norm = np.linalg.norm(array)
    return array / norm if norm else array


def attach_embeddings(
    built: BuiltDocuments,
    embed_model: BaseEmbedding,
    summary_embedding: SummaryEmbedding = SummaryEmbedding.TEXT,
    show_progress: bool = False,
) -> None:
    """Embed chunks that lack an embedding, then set each summary's routing vector.

    Works on the builder's own copies; chunks that already carry embeddings
    are not embedded again.
    """
    mode = SummaryEmbedding(summary_embedding)
    vectors = embed_nodes(built.chunk_nodes, embed_model, show_progress=show_progress)
    for chunk in built.chunk_nodes:
        chunk.embedding = vectors[chunk.node_id]
    if mode == SummaryEmbedding.TEXT:
        return  # summaries are embedded from their text by the index
    texts = (
        embed_nodes(built.summary_nodes, embed_model, show_progress=show_progress)
        if mode == SummaryEmbedding.BLEND
        else {}
    )
    for summary in built.summary_nodes:
        record = built.records[summary.index_id]
        centroid = _unit(np.mean([vectors[c] for c in record.chunk_ids], axis=0))
        if mode == SummaryEmbedding.BLEND:
            centroid = _unit(centroid + _unit(texts[summary.node_id]))
        summary.embedding = centroid.tolist()
