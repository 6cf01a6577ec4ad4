"""Summary-routed (recursive) retrieval: route by summary, rank chunks globally.

``RecursiveSummaryRetriever`` replaces the upstream recipe (summary
``IndexNode``s, one index per document, ``RecursiveRetriever``) with one
summary store and one chunk store: a query is routed to the best
``num_routed_docs`` documents by their summaries, chunks are retrieved inside
each of them (a ``ref_doc_id`` filter), and one globally ranked, deduplicated
list of ``similarity_top_k`` chunks comes back.
"""

from __future__ import annotations

import asyncio
import difflib
import inspect
import json
import math
import logging
import threading
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from llama_index.core import StorageContext, VectorStoreIndex, load_index_from_storage
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.utils import embed_nodes
from llama_index.core.callbacks import CallbackManager
from llama_index.core.node_parser import NodeParser
from llama_index.core.schema import (
    BaseNode,
    Document,
    IndexNode,
    MetadataMode,
    NodeWithScore,
    QueryBundle,
)
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from pydantic import BaseModel

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.results import (
    DocumentEvidence,
    DocumentWithScore,
    ExplainedNodeWithScore,
    Explanation,
    RetrievalExplanation,
    explained,
)
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.recursive.build import (
    ROUTING_KEY,
    BuiltDocuments,
    DocumentRecord,
    SummaryEmbedding,
    attach_embeddings,
    build_documents,
    default_node_parser,
    check_new_node_ids,
    chunk_documents,
    group_nodes,
    node_parser_config,
    node_parser_from_config,
)
from llama_index_ext_recursive.retrievers.calibrate import (
    Calibration,
    QueryScript,
    calibrate_children,
    pseudo_queries,
    query_script,
)
from llama_index_ext_recursive.stores.docstore import LinearDocumentStore
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.recursive.evidence import (
    DEFAULT_DOCUMENT_WEIGHT,
    EQUAL_WEIGHTS,
    document_text,
    fuse_document_scores,
    rank_chunks,
)
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    apply_policy,
    merge_filters,
    metadata_matcher,
    relax_to_keys,
    to_filters,
)
from llama_index_ext_recursive.query import filters_of, with_options
from llama_index_ext_recursive.retrievers.fusion import HYBRID_MODE, HybridFusionRetriever
from llama_index_ext_recursive.persist import (
    NoIndexError,
    PersistError,
    load_json_object,
    load_string_map,
    read_index,
    write_index,
)
from llama_index_ext_recursive.rwlock import ReadWriteLock
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore
from llama_index_ext_recursive.recursive.summarize import ExtractiveSummarizer, Summarizer, SummaryCache
from llama_index_ext_recursive.validation import (
    check_count,
    check_kwargs,
    check_query,
    check_real,
    check_vectors,
    stored_dimension,
)

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 10
DEFAULT_NUM_ROUTED_DOCS = 8  # measured: benchmarks/results/tune_xquad_*_fine.md
DEFAULT_SCORE_ALPHA = 0.2
# candidates per routed document and search, in units of similarity_top_k:
# 2.5 beat 1 on legalbench_contractnli and xquad_zh_fine (benchmarks/recursive_sweep.py)
ROUTED_POOL_FACTOR = 2.5
FORMAT_VERSION = 1


class ScoreMode(str, Enum):
    """How a chunk's final score combines its document's and its own score.

    ``fused`` (default): chunks come from a flat search over all chunks and
    from the routed documents; their dense and lexical scores are fused, and
    ``document_weight`` times their document's routing score is added
    (:func:`~llama_index_ext_recursive.recursive.evidence.rank_chunks`), so a chunk
    is found through its document without losing what flat search finds.
    ``chunk``: the chunk score alone (routing only selects documents).
    ``weighted``: ``alpha * summary + (1 - alpha) * chunk``.
    ``product``: ``summary * chunk``.
    """

    FUSED = "fused"
    CHUNK = "chunk"
    WEIGHTED = "weighted"
    PRODUCT = "product"


class LevelMode(str, Enum):
    """How one level (summaries or chunks) is searched.

    ``vector``: embeddings (summaries by centroid or text, see
    :class:`SummaryEmbedding`); ``bm25``: :class:`MultilingualBM25Retriever`
    (at the summary level over each document's summary plus its chunks);
    ``hybrid``: both, fused by a calibrated :class:`HybridFusionRetriever`.
    """

    VECTOR = "vector"
    BM25 = "bm25"
    HYBRID = "hybrid"


class LinkError(LlamaIndexExtRecursiveError, ValueError):
    """An ``IndexNode`` points nowhere, or links form a cycle."""


def _closest(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    return f"closest known ids: {close}" if close else f"{len(known)} known ids, none similar"


@dataclass
class _Levels:
    """The lexical searchers of both levels (``None``: that level is vector-only),
    and, for ``chunk``/``weighted``/``product`` score modes, the hybrid searchers
    built from them with the calibrated weights."""

    summary_bm25: Optional[BaseRetriever]
    chunk_bm25: Optional[Any]  # MultilingualBM25Retriever (imported lazily)
    summary_search: Optional[BaseRetriever]
    chunk_search: Optional[BaseRetriever]
    chunk_doc: Dict[str, str]  # chunk id -> document id
    link_ids: frozenset  # chunks that are IndexNodes (followed, not ranked)
    summary_doc: Dict[str, str]  # summary node id -> document id


@dataclass(frozen=True)
class _Route:
    """A document to search, with the score and path that led there."""

    doc_id: str
    score: Optional[float]
    summary_node_id: Optional[str]
    summary_score: Optional[float]
    path: Tuple[str, ...]


@dataclass
class _Plan:
    """Per-call state: the bundles to pass down, the filters in force and the
    (dense, lexical) fusion weights of each level for this query's script."""

    summary_bundle: QueryBundle
    chunk_bundle: QueryBundle
    chunk_filters: Optional[MetadataFilters]
    summary_filters: Optional[MetadataFilters]
    document_weights: Tuple[float, float] = EQUAL_WEIGHTS
    chunk_weights: Tuple[float, float] = EQUAL_WEIGHTS


class RecursiveSummaryRetriever(BaseRetriever):
    """Route a query to documents by summary, then rank their chunks globally.

    Build it with :meth:`from_documents` or :meth:`from_nodes` (one summary
    store plus one chunk store, offline by default), or with
    :meth:`from_retriever_dict` to keep upstream ``RecursiveRetriever``'s
    ``IndexNode`` + ``retriever_dict`` setup.

    Per-call filters: pass a :class:`FilteredQueryBundle`. They apply to chunks
    and, relaxed to document-level keys, to summaries; construction-time
    ``filters`` combine with them under ``filter_policy``.

    Args:
        summary_index: index over summary ``IndexNode``s (``index_id`` = document id).
        chunk_index: index over all chunks (``ref_doc_id`` = document id).
        documents: per-document records (built by the constructors).
        retriever_dict: instead of ``chunk_index``: one retriever per document id.
        embed_model: model for queries (default: argument > ``Settings`` > bundled).
        similarity_top_k: number of chunks returned.
        num_routed_docs: number of documents the query is routed to (more when
            those hold fewer than ``similarity_top_k`` chunks).
        score_mode: how summary and chunk scores combine (:class:`ScoreMode`;
            default ``fused``, or ``chunk`` for a ``retriever_dict`` setup,
            which has no flat chunk search).
        score_alpha: the summary weight for ``weighted`` mode.
        document_weight: in ``fused`` mode, how much a document's routing score
            (0-1) adds to its chunks' fused score (0-1).
        filters: construction-time metadata filters.
        filter_policy: ``merge`` (AND with per-call filters) or ``replace``.
        doc_id_key: metadata key naming a chunk's document.
        summary_embedding: what summaries added later are routed by (:class:`SummaryEmbedding`);
            must match how ``summary_index`` was built.
        max_link_depth: how many ``IndexNode`` links a query may follow.
        summary_mode: how documents are routed (:class:`LevelMode`, default
            ``hybrid``: dense over routing vectors, BM25 over each document's
            title, metadata, summary and chunks).
        chunk_mode: how chunks are ranked (:class:`LevelMode`; default
            ``hybrid``; ``bm25``/``hybrid`` need the chunk store of
            ``from_documents``/``from_nodes``, so a ``retriever_dict`` setup
            defaults to ``vector``).
        calibration: fusion weights measured earlier (what :attr:`calibration`
            returns; persisted with the index), so they are not measured again.
            Hybrid levels without one are calibrated at construction.
        show_progress: show a progress bar while calibrating.
        unknown_filter_key: what a filter on a key the chunks do not hold, or
            with a value of the wrong type, does (:class:`UnknownFilterPolicy`):
            ``raise`` (default) a :class:`FilterError` naming the closest key,
            or ``warn`` and search anyway. Checked against the chunks' metadata;
            a ``retriever_dict`` setup's children check their own.

    Updates (:meth:`add_documents`, :meth:`add_nodes`, :meth:`delete_document`)
    prepare everything that can fail (chunking, summarizing, embedding) before
    they change anything, then swap the new nodes in under a write lock;
    ``retrieve``, ``aretrieve`` and ``persist`` hold the read lock, so they see
    the index before or after an update, never a mix.
    """

    def __init__(
        self,
        summary_index: VectorStoreIndex,
        chunk_index: Optional[VectorStoreIndex] = None,
        documents: Optional[Mapping[str, DocumentRecord]] = None,
        retriever_dict: Optional[Mapping[str, BaseRetriever]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        similarity_top_k: int = DEFAULT_TOP_K,
        num_routed_docs: int = DEFAULT_NUM_ROUTED_DOCS,
        score_mode: Union[ScoreMode, str, None] = None,
        score_alpha: float = DEFAULT_SCORE_ALPHA,
        document_weight: float = DEFAULT_DOCUMENT_WEIGHT,
        filters: FiltersLike = None,
        filter_policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
        doc_id_key: str = "doc_id",
        node_parser: Optional[NodeParser] = None,
        summarizer: Optional[Summarizer] = None,
        summary_cache: Optional[SummaryCache] = None,
        summary_embedding: Union[SummaryEmbedding, str] = SummaryEmbedding.BLEND,
        max_link_depth: int = 3,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        summary_mode: Union[LevelMode, str] = LevelMode.HYBRID,
        chunk_mode: Union[LevelMode, str, None] = None,
        unknown_filter_key: Union[UnknownFilterPolicy, str] = UnknownFilterPolicy.RAISE,
        calibration: Optional[Mapping[str, Any]] = None,
        show_progress: bool = False,
    ) -> None:
        if (chunk_index is None) == (retriever_dict is None):
            raise ValueError("pass exactly one of chunk_index= or retriever_dict=")
        _check_settings(
            similarity_top_k=similarity_top_k,
            num_routed_docs=num_routed_docs,
            score_alpha=score_alpha,
            document_weight=document_weight,
            max_link_depth=max_link_depth,
        )
        for doc_id, child in (retriever_dict or {}).items():
            if not isinstance(child, BaseRetriever):
                raise TypeError(
                    f"retriever_dict[{doc_id!r}] is a {type(child).__name__}, not a "
                    "BaseRetriever: map each document id to a retriever (e.g. index.as_retriever())"
                )
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        self.summary_mode = LevelMode(summary_mode)
        if chunk_mode is None:
            chunk_mode = LevelMode.HYBRID if chunk_index is not None else LevelMode.VECTOR
        self.chunk_mode = LevelMode(chunk_mode)
        if score_mode is None:
            score_mode = ScoreMode.FUSED if chunk_index is not None else ScoreMode.CHUNK
        if chunk_index is None and ScoreMode(score_mode) == ScoreMode.FUSED:
            raise ValueError(
                "score_mode='fused' searches all chunks flat, which needs the chunk store "
                "built by from_documents/from_nodes; a retriever_dict setup supports "
                "'chunk', 'weighted' or 'product'"
            )
        if chunk_index is None and self.chunk_mode != LevelMode.VECTOR:
            raise ValueError(
                f"chunk_mode={self.chunk_mode.value!r} needs the chunk store built by "
                "from_documents/from_nodes; with retriever_dict, put BM25 or "
                "HybridFusionRetriever children in the dict instead"
            )
        self._summary_index = summary_index
        self._chunk_index = chunk_index
        self._retriever_dict = dict(retriever_dict or {})
        self._embed_model = resolve_embed_model(embed_model)
        self.similarity_top_k = similarity_top_k
        self.num_routed_docs = num_routed_docs
        self.score_mode = ScoreMode(score_mode)
        self.score_alpha = score_alpha
        self.document_weight = float(document_weight)
        self.filters = to_filters(filters)
        self.filter_policy = FilterPolicy(filter_policy)
        self.doc_id_key = doc_id_key
        self.max_link_depth = max_link_depth
        self._node_parser = node_parser or default_node_parser()
        self._summarizer = summarizer or ExtractiveSummarizer()
        self._summary_cache = summary_cache if summary_cache is not None else SummaryCache()
        self.summary_embedding = SummaryEmbedding(summary_embedding)
        self._summaries = self._load_summaries()
        self._documents: Dict[str, DocumentRecord] = dict(documents or {})
        self._document_keys = self._summary_filter_keys()
        self._searchers: Optional[Tuple[Optional[BaseRetriever], Optional[BaseRetriever]]] = None
        self._searchers_lock = threading.Lock()
        self._state_lock = ReadWriteLock()
        self._update_lock = threading.Lock()
        self._vocabulary: Optional[FilterVocabulary] = None
        self._calibration: Dict[str, Calibration] = _calibration_from_config(calibration)
        self._show_progress = show_progress
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self.validate_links()
        self._levels()

    # ------------------------------------------------------------------ build
    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document],
        node_parser: Optional[NodeParser] = None,
        doc_id_key: str = "doc_id",
        embed_model: Optional[BaseEmbedding] = None,
        summarizer: Optional[Summarizer] = None,
        summary_cache: Optional[SummaryCache] = None,
        show_progress: Optional[bool] = None,
        **kwargs: Any,
    ) -> "RecursiveSummaryRetriever":
        """Chunk, summarize and index ``documents``.

        A document's id is ``metadata[doc_id_key]`` when present, else its ``doc_id``.
        ``documents`` may be any iterable; empty and whitespace-only documents
        are skipped with a warning naming them. ``kwargs`` go to the constructor
        and are checked before any document is chunked.
        """
        _check_build_arguments(kwargs, "RecursiveSummaryRetriever.from_documents")
        documents = list(documents)
        progress = _auto_progress(show_progress, len(documents))
        nodes = chunk_documents(documents, node_parser, doc_id_key, progress)
        return cls.from_nodes(
            nodes,
            doc_id_key=doc_id_key,
            embed_model=embed_model,
            summarizer=summarizer,
            summary_cache=summary_cache,
            show_progress=progress,
            node_parser=node_parser,
            **kwargs,
        )

    @classmethod
    def from_nodes(
        cls,
        nodes: Sequence[BaseNode],
        doc_id_key: str = "doc_id",
        embed_model: Optional[BaseEmbedding] = None,
        summarizer: Optional[Summarizer] = None,
        summary_cache: Optional[SummaryCache] = None,
        show_progress: Optional[bool] = None,
        summary_embedding: Union[SummaryEmbedding, str] = SummaryEmbedding.BLEND,
        chunk_vector_store: Optional[BasePydanticVectorStore] = None,
        summary_vector_store: Optional[BasePydanticVectorStore] = None,
        **kwargs: Any,
    ) -> "RecursiveSummaryRetriever":
        """Index pre-chunked ``nodes`` grouped by ``metadata[doc_id_key]``.

        Nodes that already carry embeddings are not embedded again.
        ``summary_embedding`` chooses what summaries are routed by
        (:class:`SummaryEmbedding`; ``centroid`` routed best in our measurements).
        ``chunk_vector_store``/``summary_vector_store``: empty stores to index
        into (FAISS, Chroma, PostgreSQL, ...; default :class:`NumpyVectorStore`).
        Stores that cannot filter are filtered by :class:`BackfillVectorRetriever`.
        ``persist`` supports the default store only.
        """
        _check_build_arguments(
            {"summary_embedding": summary_embedding, **kwargs},
            "RecursiveSummaryRetriever.from_nodes",
        )
        nodes = list(nodes)
        if not nodes:
            raise ValueError("no nodes to index: pass at least one node or document")
        groups = group_nodes(nodes, doc_id_key)
        progress = _auto_progress(show_progress, len(groups))
        cache = summary_cache if summary_cache is not None else SummaryCache()
        summarizer = summarizer or ExtractiveSummarizer()
        built = build_documents(groups, doc_id_key, summarizer, cache, progress)
        model = resolve_embed_model(embed_model)
        dim = attach_embeddings(built, model, SummaryEmbedding(summary_embedding), progress)
        _embed_summaries(built, model, dim)
        summary_index = _new_index(built.summary_nodes, model, progress, summary_vector_store)
        chunk_index = _new_index(built.chunk_nodes, model, progress, chunk_vector_store)
        return cls(
            summary_index,
            chunk_index,
            documents=built.records,
            embed_model=model,
            doc_id_key=doc_id_key,
            summarizer=summarizer,
            summary_cache=cache,
            summary_embedding=summary_embedding,
            show_progress=progress,
            **kwargs,
        )

    @classmethod
    def from_retriever_dict(
        cls,
        summary_nodes: Sequence[IndexNode],
        retriever_dict: Mapping[str, BaseRetriever],
        embed_model: Optional[BaseEmbedding] = None,
        **kwargs: Any,
    ) -> "RecursiveSummaryRetriever":
        """Upstream-compatible setup: summary ``IndexNode``s plus ``retriever_dict``.

        Each summary's ``index_id`` must be a key of ``retriever_dict``; this is
        checked now, not at query time. An ``IndexNode`` whose ``obj`` is a
        retriever may stand in for its ``retriever_dict`` entry.
        """
        check_kwargs(cls.__init__, kwargs, "RecursiveSummaryRetriever.from_retriever_dict")
        _check_settings(**kwargs)
        retrievers = dict(retriever_dict)
        plain: List[IndexNode] = []
        for node in summary_nodes:
            if not isinstance(node, IndexNode):
                raise TypeError(
                    f"summary node {node.node_id!r} is a {type(node).__name__}; "
                    "summaries must be IndexNodes whose index_id names a document"
                )
            if isinstance(node.obj, BaseRetriever):
                retrievers.setdefault(node.index_id, node.obj)
            plain.append(IndexNode(**{**node.model_dump(exclude={"obj"}), "obj": None}))
        model = resolve_embed_model(embed_model)
        return cls(
            _new_index(plain, model, False),
            retriever_dict=retrievers,
            embed_model=model,
            **kwargs,
        )

    # ------------------------------------------------------------- validation
    def _load_summaries(self) -> Dict[str, IndexNode]:
        docstore = self._summary_index.docstore
        summaries: Dict[str, IndexNode] = {}
        for node_id in self._summary_index.index_struct.nodes_dict.values():
            node = docstore.get_node(node_id)
            if not isinstance(node, IndexNode):
                raise LinkError(
                    f"summary node {node_id!r} is a {type(node).__name__}, not an IndexNode: "
                    "summaries must name their document with index_id"
                )
            summaries[node.index_id] = node
        return summaries

    def _summary_filter_keys(self) -> set:
        """Keys that filters may be checked on at the summary level.

        A key qualifies when it is document-level in every document: a key
        whose value varies between one document's chunks is missing from that
        summary, and filtering summaries on it would hide matching chunks.
        """
        keys = {k for s in self._summaries.values() for k in s.metadata}
        for record in self._documents.values():
            keys -= set(record.varying_keys)
        return keys

    def _doc_ids(self) -> List[str]:
        return list(self._retriever_dict) if self._retriever_dict else list(self._documents)

    def validate_links(self) -> None:
        """Check that every ``IndexNode`` resolves and no links form a cycle.

        Raises :class:`LinkError` naming the bad id and the closest known ids.
        """
        self._check_links(self._summaries, self._documents)

    def _check_links(
        self,
        summaries: Mapping[str, IndexNode],
        documents: Mapping[str, DocumentRecord],
        pending: Optional[Mapping[str, BaseNode]] = None,
    ) -> None:
        """:meth:`validate_links` on a state: the current one, or the one an
        update would produce (``pending``: its new chunks by id), so an update
        that would break a link is refused before it changes anything."""
        pending = pending or {}
        known = list(self._retriever_dict) if self._retriever_dict else list(documents)
        known_set = set(known)
        for doc_id, summary in summaries.items():
            if doc_id not in known_set:
                raise LinkError(
                    f"summary {summary.node_id!r} points to index_id {doc_id!r}, which has no "
                    f"chunks or retriever ({_closest(doc_id, known)}); fix the index_id or "
                    "add the document"
                )
        unreachable = known_set - set(summaries)
        if unreachable:
            logger.warning(
                "%d document(s) have no summary and can never be routed to: %s",
                len(unreachable),
                sorted(unreachable)[:10],
            )
        if self._chunk_index is None:
            return  # opaque retrievers: links are checked as they are met
        docstore = self._chunk_index.docstore
        edges: Dict[str, List[str]] = {}
        for record in documents.values():
            for chunk_id in record.chunk_ids:
                node = pending.get(chunk_id) or docstore.get_node(chunk_id, raise_error=False)
                if node is None:
                    raise LinkError(
                        f"document {record.doc_id!r} lists chunk {chunk_id!r}, which is not in "
                        "the chunk store; rebuild or delete_document() it"
                    )
                if isinstance(node, IndexNode):
                    target = node.index_id
                    if (
                        target not in known_set
                        and target not in pending
                        and not docstore.document_exists(target)
                    ):
                        raise LinkError(
                            f"IndexNode {node.node_id!r} in document {record.doc_id!r} points "
                            f"to {target!r}, which is neither a document nor a chunk "
                            f"({_closest(target, known)})"
                        )
                    if target in known_set:
                        edges.setdefault(record.doc_id, []).append(target)
        _raise_on_cycle(edges)

    # --------------------------------------------------- bm25 / hybrid levels
    def _document_nodes(self) -> List[IndexNode]:
        """One node per document for summary-level BM25 (:func:`document_text`:
        title, document-level metadata, summary, chunks); ids and ``index_id``
        as the summary's, so hits route."""
        docstore = self._chunk_index.docstore if self._chunk_index is not None else None
        nodes = []
        for doc_id, summary in self._summaries.items():
            record = self._documents.get(doc_id)
            chunks = []
            if docstore is not None and record is not None:
                for chunk_id in record.chunk_ids:
                    chunk = docstore.get_node(chunk_id, raise_error=False)
                    if chunk is not None:
                        chunks.append(chunk.get_content(metadata_mode=MetadataMode.NONE))
            title = record.title if record is not None else doc_id
            nodes.append(
                IndexNode(
                    id_=summary.node_id,
                    index_id=doc_id,
                    text=document_text(title, summary.metadata, summary.get_content(), chunks),
                    metadata=dict(summary.metadata),
                    excluded_embed_metadata_keys=list(summary.metadata),
                )
            )
        return nodes

    def _levels(self) -> _Levels:
        """The lexical (and hybrid) searchers, built on first need and again
        after documents change; hybrid levels are calibrated once (see
        :attr:`calibration`)."""
        with self._searchers_lock:
            if self._searchers is None:
                self._searchers = self._build_levels()
            return self._searchers

    def _build_levels(self) -> _Levels:
        from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

        depth = self.num_routed_docs + self.similarity_top_k
        chunk_nodes = (
            list(self._chunk_index.docstore.docs.values()) if self._chunk_index is not None else []
        )
        summary_bm25 = chunk_bm25 = None
        if self.summary_mode != LevelMode.VECTOR and self._summaries:
            summary_bm25 = MultilingualBM25Retriever.from_defaults(
                nodes=self._document_nodes(),
                similarity_top_k=depth,
                metadata_mode=MetadataMode.NONE,  # document_text holds the metadata
                unknown_filter_key=None,  # checked by _plan
            )
        if self.chunk_mode != LevelMode.VECTOR and chunk_nodes:
            chunk_bm25 = MultilingualBM25Retriever.from_defaults(
                nodes=chunk_nodes, similarity_top_k=self.similarity_top_k, unknown_filter_key=None
            )
        if "documents" not in self._calibration and self.summary_mode == LevelMode.HYBRID and summary_bm25:
            self._calibration["documents"] = self._calibrate_documents(summary_bm25, chunk_nodes)
        if "chunks" not in self._calibration and self.chunk_mode == LevelMode.HYBRID and chunk_bm25:
            self._calibration["chunks"] = calibrate_children(
                [self._chunk_vector(self.similarity_top_k), chunk_bm25],
                chunk_nodes,
                embed_model=self._embed_model,
                show_progress=self._show_progress,
                names=["vector", "bm25"],
            )
        summary_search = chunk_search = None
        if self.score_mode != ScoreMode.FUSED:
            summary_search = self._hybrid_level("documents", self.summary_mode, summary_bm25, depth)
            chunk_search = self._hybrid_level("chunks", self.chunk_mode, chunk_bm25, self.similarity_top_k)
        chunk_doc = {c: r.doc_id for r in self._documents.values() for c in r.chunk_ids}
        link_ids = frozenset(n.node_id for n in chunk_nodes if isinstance(n, IndexNode))
        summary_doc = {summary.node_id: doc_id for doc_id, summary in self._summaries.items()}
        return _Levels(
            summary_bm25, chunk_bm25, summary_search, chunk_search, chunk_doc, link_ids, summary_doc
        )

    def _calibrate_documents(self, summary_bm25: BaseRetriever, chunk_nodes: List[BaseNode]) -> Calibration:
        """Weights of the document level, from pseudo-queries cut from each
        document's chunks (from its summary in a ``retriever_dict`` setup)
        whose answer is that document."""
        summary_of = {
            chunk_id: record.summary_node_id
            for record in self._documents.values()
            for chunk_id in record.chunk_ids
        }
        source: List[BaseNode] = list(chunk_nodes) or list(self._summaries.values())
        summary_of.update({s.node_id: s.node_id for s in self._summaries.values()})
        pairs = {
            script: [(summary_of[node_id], query) for node_id, query in found if node_id in summary_of]
            for script, found in pseudo_queries(source).items()
        }
        dense = BackfillVectorRetriever(
            self._summary_index,
            self.num_routed_docs + self.similarity_top_k,
            embed_model=self._embed_model,
            unknown_filter_key=None,
        )
        return calibrate_children(
            [dense, summary_bm25],
            pairs,
            embed_model=self._embed_model,
            show_progress=self._show_progress,
            names=["vector", "bm25"],
        )

    def _hybrid_level(
        self, level: str, mode: LevelMode, bm25: Optional[BaseRetriever], top_k: int
    ) -> Optional[BaseRetriever]:
        """The level searcher of the ``chunk``/``weighted``/``product`` modes."""
        if mode == LevelMode.VECTOR or bm25 is None:
            return None
        if mode == LevelMode.BM25:
            return bm25
        index = self._summary_index if level == "documents" else self._chunk_index
        weights = self._calibration.get(level)
        script_weights = {}
        if weights is not None:
            for script in QueryScript:
                found = weights.weights_for(script.value)
                if found is not None and any(w > 0 for w in found):
                    script_weights[script] = list(found)
        return HybridFusionRetriever(
            [BackfillVectorRetriever(index, top_k, unknown_filter_key=None), bm25],
            similarity_top_k=top_k,
            retriever_names=["vector", "bm25"],
            mode=HYBRID_MODE,
            script_weights=script_weights,
        )

    def _chunk_vector(self, top_k: int) -> BackfillVectorRetriever:
        assert self._chunk_index is not None
        return BackfillVectorRetriever(
            self._chunk_index,
            similarity_top_k=top_k,
            embed_model=self._embed_model,
            callback_manager=self.callback_manager,
            unknown_filter_key=None,  # checked by _plan
        )

    def _level_weights(self, level: str, mode: LevelMode, query_str: str) -> Tuple[float, float]:
        """(dense, lexical) fusion weights of one level for this query's script."""
        if mode == LevelMode.VECTOR:
            return (1.0, 0.0)
        if mode == LevelMode.BM25:
            return (0.0, 1.0)
        calibration = self._calibration.get(level)
        found = calibration.weights_for(query_script(query_str).value) if calibration else None
        if not found or not any(w > 0 for w in found):
            return EQUAL_WEIGHTS
        return (float(found[0]), float(found[1]))

    @property
    def calibration(self) -> Dict[str, Dict[str, Any]]:
        """The fusion weights measured for each hybrid level (``documents``,
        ``chunks``), JSON-safe; pass it back as ``calibration=`` (``persist``
        does) to reuse it."""
        return {level: found.to_dict() for level, found in self._calibration.items()}

    def _invalidate_searchers(self) -> None:
        """Documents changed: rebuild the lexical searchers on next use. The
        calibrated weights are kept (a measure of the corpus, not of one document)."""
        with self._searchers_lock:
            self._searchers = None

    def _wave_bundle(self, routes: List[_Route], plan: _Plan) -> QueryBundle:
        """One chunk query for a whole wave: its documents' chunks, plus the filters."""
        routing = MetadataFilters(
            filters=[
                MetadataFilter(
                    key=ROUTING_KEY,
                    value=sorted({route.doc_id for route in routes}),
                    operator=FilterOperator.IN,
                )
            ]
        )
        return with_options(plan.chunk_bundle, filters=merge_filters(routing, plan.chunk_filters))

    @staticmethod
    def _split_wave(routes: List[_Route], hits: List[NodeWithScore]) -> List[List[NodeWithScore]]:
        """Hand each hit of a wave query to the (first) route of its document."""
        slot: Dict[str, int] = {}
        for i, route in enumerate(routes):
            slot.setdefault(route.doc_id, i)
        out: List[List[NodeWithScore]] = [[] for _ in routes]
        for hit in hits:
            i = slot.get(hit.node.ref_doc_id or "")
            if i is not None:
                out[i].append(hit)
        return out

    # ------------------------------------------------------------- retrieval
    @property
    def filter_vocabulary(self) -> FilterVocabulary:
        """Metadata keys (and value kinds) of the indexed chunks, which filters are
        checked against; empty for a ``retriever_dict`` setup, whose children
        check their own."""
        vocabulary = self._vocabulary
        if vocabulary is None:
            vocabulary = FilterVocabulary.from_nodes(
                self._chunk_index.docstore.docs.values() if self._chunk_index is not None else []
            )
            self._vocabulary = vocabulary
        return vocabulary

    def _plan(self, query_bundle: QueryBundle, embedding: Optional[List[float]]) -> _Plan:
        effective = apply_policy(self.filters, filters_of(query_bundle), self.filter_policy)
        self.filter_vocabulary.check(effective, self.unknown_filter_key)
        return _Plan(
            summary_bundle=with_options(query_bundle, filters=None, embedding=embedding),
            chunk_bundle=with_options(
                query_bundle,
                filters=effective,
                embedding=embedding if self._chunk_index is not None else None,
            ),
            chunk_filters=effective,
            summary_filters=relax_to_keys(effective, self._document_keys),
            document_weights=self._level_weights(
                "documents", self.summary_mode, query_bundle.query_str
            ),
            chunk_weights=self._level_weights("chunks", self.chunk_mode, query_bundle.query_str),
        )

    def _summary_retriever(self, plan: _Plan) -> BackfillVectorRetriever:
        return BackfillVectorRetriever(
            self._summary_index,
            # spare candidates for documents too small to fill the top-k (see _routes)
            similarity_top_k=self.num_routed_docs + self.similarity_top_k,
            filters=plan.summary_filters,
            embed_model=self._embed_model,
            callback_manager=self.callback_manager,
            unknown_filter_key=None,  # checked by _plan
        )

    def _routes(self, summary_hits: List[NodeWithScore]) -> List[_Route]:
        """The top ``num_routed_docs`` documents, and more while they hold fewer
        than ``similarity_top_k`` chunks (a global top-k needs k candidates)."""
        routes: List[_Route] = []
        chunks = 0
        for hit in summary_hits:
            if len(routes) >= self.num_routed_docs and (
                chunks >= self.similarity_top_k or self._chunk_index is None
            ):
                break
            node = hit.node
            doc_id = node.index_id if isinstance(node, IndexNode) else None
            if doc_id is None or doc_id not in self._summaries:
                raise LinkError(
                    f"summary store returned {node.node_id!r}, which is not a known summary "
                    "IndexNode; the summary store and the retriever are out of sync"
                )
            routes.append(_Route(doc_id, hit.score, node.node_id, hit.score, (doc_id,)))
            record = self._documents.get(doc_id)
            chunks += len(record.chunk_ids) if record is not None else 0
        return routes

    def _chunk_retriever(self, route: _Route, plan: _Plan) -> BaseRetriever:
        if self._chunk_index is None:
            retriever = self._retriever_dict.get(route.doc_id)
            if retriever is None:
                raise LinkError(
                    f"no retriever for document {route.doc_id!r} "
                    f"({_closest(route.doc_id, list(self._retriever_dict))})"
                )
            return retriever
        routing = MetadataFilters(
            filters=[MetadataFilter(key=ROUTING_KEY, value=route.doc_id, operator=FilterOperator.EQ)]
        )
        return BackfillVectorRetriever(
            self._chunk_index,
            similarity_top_k=self.similarity_top_k,
            filters=routing,  # the chunk bundle carries the per-call filters
            embed_model=self._embed_model,
            callback_manager=self.callback_manager,
            unknown_filter_key=None,  # checked by _plan
        )

    def _combine(self, parent: Optional[float], child: Optional[float]) -> float:
        child = 0.0 if child is None else child
        if parent is None or self.score_mode == ScoreMode.CHUNK:
            return child
        if self.score_mode == ScoreMode.PRODUCT:
            return parent * child
        return self.score_alpha * parent + (1.0 - self.score_alpha) * child

    def _collect(
        self,
        routes: List[_Route],
        results: List[List[NodeWithScore]],
        plan: _Plan,
        best: Dict[str, ExplainedNodeWithScore],
    ) -> List[_Route]:
        """Fold one wave of chunk results into ``best``; return links to follow."""
        follow: List[_Route] = []
        matches = metadata_matcher(plan.chunk_filters) if self._chunk_index is None else None
        for route, hits in zip(routes, results):
            for hit in hits:
                node = hit.node
                if isinstance(node, IndexNode):
                    link = self._follow_link(route, hit)
                    if isinstance(link, _Route):
                        follow.append(link)
                        continue
                    if link is None:
                        continue
                    node = link
                if matches is not None and not matches(node.metadata):
                    continue  # retriever_dict children may ignore filters: enforce them
                final = self._combine(route.score, hit.score)
                current = best.get(node.node_id)
                if current is not None and current.score >= final:
                    continue
                best[node.node_id] = explained(
                    hit if node is hit.node else NodeWithScore(node=node, score=hit.score),
                    score=final,
                    route=RetrievalExplanation(
                        doc_id=route.doc_id,
                        summary_node_id=route.summary_node_id,
                        summary_score=route.summary_score,
                        chunk_score=hit.score,
                        final_score=final,
                        score_mode=self.score_mode.value,
                        path=list(route.path),
                    ),
                )
        return follow

    def _follow_link(self, route: _Route, hit: NodeWithScore) -> Union[_Route, BaseNode, None]:
        """Resolve an ``IndexNode`` hit to a document to search or a node."""
        target = hit.node.index_id  # type: ignore[attr-defined]
        if target in self._summaries or target in self._retriever_dict:
            if target in route.path:
                logger.warning("link cycle %s -> %s not followed", " -> ".join(route.path), target)
                return None
            if len(route.path) > self.max_link_depth:
                logger.warning("link depth %d reached at %s; not followed", self.max_link_depth, target)
                return None
            return _Route(
                target,
                self._combine(route.score, hit.score),
                route.summary_node_id,
                route.summary_score,
                route.path + (target,),
            )
        if self._chunk_index is not None:
            node = self._chunk_index.docstore.get_node(target, raise_error=False)
            if node is not None:
                return node
        raise LinkError(
            f"IndexNode {hit.node.node_id!r} returned for document {route.doc_id!r} points to "
            f"{target!r}, which is neither a document nor a chunk "
            f"({_closest(target, self._doc_ids())})"
        )

    def _rank(self, best: Dict[str, ExplainedNodeWithScore]) -> List[NodeWithScore]:
        ranked = sorted(best.values(), key=lambda n: (-(n.score or 0.0), n.node.node_id))
        return list(ranked[: self.similarity_top_k])

    def _query_embedding(self, query_bundle: QueryBundle) -> Optional[List[float]]:
        check_query(query_bundle)
        embedding = query_bundle.embedding
        if embedding is None and query_bundle.embedding_strs:
            embedding = self._embed_model.get_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        return self._checked_embedding(embedding)

    async def _aquery_embedding(self, query_bundle: QueryBundle) -> Optional[List[float]]:
        check_query(query_bundle)
        embedding = query_bundle.embedding
        if embedding is None and query_bundle.embedding_strs:
            embedding = await self._embed_model.aget_agg_embedding_from_queries(
                query_bundle.embedding_strs
            )
        return self._checked_embedding(embedding)

    def _checked_embedding(self, embedding: Optional[List[float]]) -> Optional[List[float]]:
        if embedding is not None:
            dim = stored_dimension(self._summary_index.vector_store)
            check_vectors(embedding, embed_model_name(self._embed_model), "the query", dim)
        return embedding

    def _child_results(self, route: _Route, hits: Any) -> List[NodeWithScore]:
        if not isinstance(hits, list):
            raise TypeError(
                f"the retriever for document {route.doc_id!r} returned "
                f"{type(hits).__name__}, not a list of NodeWithScore"
            )
        return hits

    def _retrieve_child(self, route: _Route, plan: _Plan) -> List[NodeWithScore]:
        retriever = self._chunk_retriever(route, plan)
        try:
            return self._child_results(route, retriever.retrieve(replace(plan.chunk_bundle)))
        except TypeError as exc:
            if self._chunk_index is not None:
                raise
            raise TypeError(
                f"retriever_dict[{route.doc_id!r}] ({type(retriever).__name__}) failed: {exc}; "
                "its _retrieve must return a list of NodeWithScore"
            ) from exc

    async def _aretrieve_child(self, route: _Route, plan: _Plan) -> List[NodeWithScore]:
        retriever = self._chunk_retriever(route, plan)
        try:
            return self._child_results(route, await retriever.aretrieve(replace(plan.chunk_bundle)))
        except TypeError as exc:
            if self._chunk_index is not None:
                raise
            raise TypeError(
                f"retriever_dict[{route.doc_id!r}] ({type(retriever).__name__}) failed: {exc}; "
                "its _aretrieve must return a list of NodeWithScore"
            ) from exc

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        embedding = self._query_embedding(query_bundle)
        with self._state_lock.reading():
            plan = self._plan(query_bundle, embedding)
            levels = self._levels()
            if self.score_mode == ScoreMode.FUSED:
                routes, documents = self._route(plan, *self._document_scores(plan, levels))
                return self._fused_ranking(plan, levels, routes, documents)
            if levels.summary_search is None:
                summary_hits = self._summary_retriever(plan).retrieve(plan.summary_bundle)
            else:
                summary_hits = levels.summary_search.retrieve(
                    with_options(plan.summary_bundle, filters=plan.summary_filters)
                )
            routes = self._routes(summary_hits)
            best: Dict[str, ExplainedNodeWithScore] = {}
            while routes:
                if levels.chunk_search is None:
                    results = [self._retrieve_child(route, plan) for route in routes]
                else:
                    hits = levels.chunk_search.retrieve(self._wave_bundle(routes, plan))
                    results = self._split_wave(routes, hits)
                routes = self._collect(routes, results, plan, best)
            return self._rank(best)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        embedding = await self._aquery_embedding(query_bundle)
        async with self._state_lock.areading():
            await self._aprepare()
            plan = self._plan(query_bundle, embedding)
            levels = self._levels()
            if self.score_mode == ScoreMode.FUSED:
                flat, found = await asyncio.gather(
                    self._achunk_scores(plan, levels, plan.chunk_bundle, self.similarity_top_k),
                    self._adocument_scores(plan, levels),
                )
                routes, documents = self._route(plan, *found)
                return await self._afused_ranking(plan, levels, routes, documents, flat)
            if levels.summary_search is None:
                summary_hits = await self._summary_retriever(plan).aretrieve(plan.summary_bundle)
            else:
                summary_hits = await levels.summary_search.aretrieve(
                    with_options(plan.summary_bundle, filters=plan.summary_filters)
                )
            routes = self._routes(summary_hits)
            best: Dict[str, ExplainedNodeWithScore] = {}
            while routes:
                if levels.chunk_search is None:
                    results = list(
                        await asyncio.gather(*(self._aretrieve_child(route, plan) for route in routes))
                    )
                else:
                    hits = await levels.chunk_search.aretrieve(self._wave_bundle(routes, plan))
                    results = self._split_wave(routes, hits)
                routes = self._collect(routes, results, plan, best)
            return self._rank(best)

    async def _aprepare(self) -> None:
        """Build what the first query needs off the event loop (CPU work)."""
        if self._vocabulary is None:  # a pass over every chunk
            await asyncio.to_thread(lambda: self.filter_vocabulary)
        if self._searchers is None:  # building BM25 and calibrating
            await asyncio.to_thread(self._levels)

    # ------------------------------------------------- fused (default) ranking
    def _document_depth(self) -> int:
        # spare candidates for documents too small to fill the top-k (see _route)
        return self.num_routed_docs + self.similarity_top_k

    @staticmethod
    def _summary_doc_ids(levels: _Levels, node_ids: Iterable[str]) -> List[str]:
        """Document ids of summary node ids; an unknown id means the stores drifted."""
        by_node = levels.summary_doc
        out = []
        for node_id in node_ids:
            doc_id = by_node.get(node_id)
            if doc_id is None:
                raise LinkError(
                    f"summary store returned {node_id!r}, which is not a known summary "
                    "IndexNode; the summary store and the retriever are out of sync"
                )
            out.append(doc_id)
        return out

    def _dense_document_scores(self, plan: _Plan, levels: _Levels) -> Dict[str, float]:
        """``doc id -> similarity`` of the best documents by routing vector."""
        store = self._summary_index.vector_store
        bundle = plan.summary_bundle
        if isinstance(store, NumpyVectorStore) and bundle.embedding is not None:
            found = store.query(
                VectorStoreQuery(
                    query_embedding=bundle.embedding,
                    similarity_top_k=self._document_depth(),
                    filters=plan.summary_filters,
                )
            )
            ids, scores = found.ids or [], found.similarities or []
        else:
            hits = self._summary_retriever(plan).retrieve(bundle)
            ids, scores = [h.node.node_id for h in hits], [h.score or 0.0 for h in hits]
        return {d: float(v) for d, v in zip(self._summary_doc_ids(levels, ids), scores)}

    def _lexical_document_scores(self, plan: _Plan, levels: _Levels) -> Dict[str, float]:
        """``doc id -> BM25 score`` over each document's title, metadata, summary, chunks."""
        assert levels.summary_bm25 is not None
        found = levels.summary_bm25.scores_by_id(
            with_options(plan.summary_bundle, filters=plan.summary_filters), self._document_depth()
        )
        return dict(zip(self._summary_doc_ids(levels, found), found.values()))

    def _document_scores(
        self, plan: _Plan, levels: _Levels
    ) -> Tuple[Dict[str, float], Dict[str, float]]:
        weights = plan.document_weights
        dense = self._dense_document_scores(plan, levels) if weights[0] > 0 else {}
        use_lexical = weights[1] > 0 and levels.summary_bm25 is not None
        return dense, self._lexical_document_scores(plan, levels) if use_lexical else {}

    async def _adocument_scores(
        self, plan: _Plan, levels: _Levels
    ) -> Tuple[Dict[str, float], Dict[str, float]]:
        weights = plan.document_weights

        if weights[0] > 0 and not isinstance(self._summary_index.vector_store, NumpyVectorStore):
            async def dense_call() -> Dict[str, float]:
                hits = await self._summary_retriever(plan).aretrieve(plan.summary_bundle)
                ids = self._summary_doc_ids(levels, (h.node.node_id for h in hits))
                return {d: float(h.score or 0.0) for d, h in zip(ids, hits)}

            dense = dense_call()
        elif weights[0] > 0:
            dense = asyncio.to_thread(self._dense_document_scores, plan, levels)  # numpy: CPU work
        else:
            dense = _no_scores()
        lexical = (
            asyncio.to_thread(self._lexical_document_scores, plan, levels)
            if weights[1] > 0 and levels.summary_bm25 is not None
            else _no_scores()
        )
        found = await asyncio.gather(dense, lexical)
        return found[0], found[1]

    def _route(
        self, plan: _Plan, dense: Dict[str, float], lexical: Dict[str, float]
    ) -> Tuple[List[_Route], Dict[str, float]]:
        """Fuse the document searches; route to the best documents (and more
        while they hold fewer than ``similarity_top_k`` chunks). Returns the
        routes and every scored document's fused score."""
        lexical = {d: v for d, v in lexical.items() if v > 0}
        fused = fuse_document_scores(dense, lexical, plan.document_weights)
        routes: List[_Route] = []
        chunks = 0
        for doc_id in sorted(fused, key=lambda d: (-fused[d], d)):
            if len(routes) >= self.num_routed_docs and chunks >= self.similarity_top_k:
                break
            score = fused[doc_id]
            routes.append(_Route(doc_id, score, self._summaries[doc_id].node_id, score, (doc_id,)))
            record = self._documents.get(doc_id)
            chunks += len(record.chunk_ids) if record is not None else 0
        return routes, fused

    def _documents_with_scores(
        self, fused: Dict[str, float], dense: Dict[str, float], lexical: Dict[str, float]
    ) -> List[DocumentWithScore]:
        order = sorted(fused, key=lambda d: (-fused[d], d))
        return [
            DocumentWithScore(
                node=self._summaries[doc_id],
                score=fused[doc_id],
                evidence=DocumentEvidence(
                    doc_id=doc_id,
                    title=self._documents[doc_id].title if doc_id in self._documents else doc_id,
                    rank=rank,
                    score=fused[doc_id],
                    dense_score=dense.get(doc_id),
                    lexical_score=lexical.get(doc_id) or None,
                ),
            )
            for rank, doc_id in enumerate(order, start=1)
        ]

    def _dense_scores(self, bundle: QueryBundle, top_k: int) -> Dict[str, float]:
        """``chunk id -> similarity`` of the best ``top_k`` chunks for ``bundle``.

        The embedded store is asked for ids and scores only (nodes are fetched
        for the final top-k alone); other stores go through
        :class:`BackfillVectorRetriever`, which filters what they cannot.
        """
        assert self._chunk_index is not None
        store = self._chunk_index.vector_store
        if isinstance(store, NumpyVectorStore) and bundle.embedding is not None:
            found = store.query(
                VectorStoreQuery(
                    query_embedding=bundle.embedding,
                    similarity_top_k=top_k,
                    filters=filters_of(bundle),
                )
            )
            return {i: float(v) for i, v in zip(found.ids or [], found.similarities or [])}
        hits = self._chunk_vector(top_k).retrieve(bundle)
        return {h.node.node_id: float(h.score) for h in hits if h.score is not None}

    async def _adense_scores(self, bundle: QueryBundle, top_k: int) -> Dict[str, float]:
        assert self._chunk_index is not None
        if isinstance(self._chunk_index.vector_store, NumpyVectorStore):
            return await asyncio.to_thread(self._dense_scores, bundle, top_k)  # numpy: CPU work
        hits = await self._chunk_vector(top_k).aretrieve(bundle)
        return {h.node.node_id: float(h.score) for h in hits if h.score is not None}

    def _chunk_scores(
        self, plan: _Plan, levels: _Levels, bundle: QueryBundle, top_k: int
    ) -> Tuple[Dict[str, float], Dict[str, float]]:
        """Dense and lexical scores of the best ``top_k`` chunks each ({} where
        this query's script gives that search weight 0)."""
        weights = plan.chunk_weights
        dense = self._dense_scores(bundle, top_k) if weights[0] > 0 else {}
        lexical = (
            levels.chunk_bm25.scores_by_id(bundle, top_k)
            if weights[1] > 0 and levels.chunk_bm25 is not None
            else {}
        )
        return dense, lexical

    async def _achunk_scores(
        self, plan: _Plan, levels: _Levels, bundle: QueryBundle, top_k: int
    ) -> Tuple[Dict[str, float], Dict[str, float]]:
        weights = plan.chunk_weights

        dense, lexical = await asyncio.gather(
            self._adense_scores(bundle, top_k) if weights[0] > 0 else _no_scores(),
            asyncio.to_thread(levels.chunk_bm25.scores_by_id, bundle, top_k)
            if weights[1] > 0 and levels.chunk_bm25 is not None
            else _no_scores(),
        )
        return dense, lexical

    def _routed_pool(self, routes: List[_Route]) -> int:
        """Chunks a wave keeps per search: ``ROUTED_POOL_FACTOR * similarity_top_k``
        per routed document, so the named document's clause is a candidate even
        when every routed document holds a near copy of it."""
        return math.ceil(ROUTED_POOL_FACTOR * self.similarity_top_k) * min(
            len(routes), self.num_routed_docs
        )

    def _fused_ranking(
        self, plan: _Plan, levels: _Levels, routes: List[_Route], documents: Dict[str, float]
    ) -> List[NodeWithScore]:
        evidence = _ChunkEvidenceSet(self, levels, documents)
        evidence.add(*self._chunk_scores(plan, levels, plan.chunk_bundle, self.similarity_top_k), None)
        while routes:
            bundle, pool = self._wave_bundle(routes, plan), self._routed_pool(routes)
            routes = evidence.add_wave(routes, *self._chunk_scores(plan, levels, bundle, pool))
        return evidence.ranked(plan)

    async def _afused_ranking(
        self,
        plan: _Plan,
        levels: _Levels,
        routes: List[_Route],
        documents: Dict[str, float],
        flat: Tuple[Dict[str, float], Dict[str, float]],
    ) -> List[NodeWithScore]:
        evidence = _ChunkEvidenceSet(self, levels, documents)
        evidence.add(*flat, None)
        while routes:
            bundle, pool = self._wave_bundle(routes, plan), self._routed_pool(routes)
            routes = evidence.add_wave(routes, *(await self._achunk_scores(plan, levels, bundle, pool)))
        return evidence.ranked(plan)

    # ------------------------------------------------------ document results
    def retrieve_documents(self, str_or_query_bundle: Union[str, QueryBundle]) -> List[DocumentWithScore]:
        """The documents a query routes to, best first, with the evidence that routed them.

        Each result's node is the document's summary ``IndexNode``
        (``index_id`` = document id) and its score the fused routing score;
        ``evidence`` gives the dense and lexical scores behind it. All
        documents either search returned are listed (at least
        ``num_routed_docs`` when there are that many); per-call filters of a
        :class:`FilteredQueryBundle` apply as in :meth:`retrieve`.
        """
        bundle = _as_bundle(str_or_query_bundle)
        embedding = self._query_embedding(bundle)
        with self._state_lock.reading():
            plan = self._plan(bundle, embedding)
            dense, lexical = self._document_scores(plan, self._levels())
            return self._documents_with_scores(self._route(plan, dense, lexical)[1], dense, lexical)

    async def aretrieve_documents(
        self, str_or_query_bundle: Union[str, QueryBundle]
    ) -> List[DocumentWithScore]:
        """Async :meth:`retrieve_documents` (the same results; never blocks the loop)."""
        bundle = _as_bundle(str_or_query_bundle)
        embedding = await self._aquery_embedding(bundle)
        async with self._state_lock.areading():
            await self._aprepare()
            plan = self._plan(bundle, embedding)
            dense, lexical = await self._adocument_scores(plan, self._levels())
            return self._documents_with_scores(self._route(plan, dense, lexical)[1], dense, lexical)

    def _reading(self):
        """Hold the read lock: the state seen is that before or after any update."""
        return self._state_lock.reading()

    # ------------------------------------------------------ incremental update
    def _require_stores(self, action: str) -> VectorStoreIndex:
        if self._chunk_index is None:
            raise NotImplementedError(
                f"{action} needs the chunk store built by from_documents/from_nodes; "
                "a retriever_dict setup holds opaque retrievers"
            )
        return self._chunk_index

    @property
    def documents(self) -> Dict[str, DocumentRecord]:
        """Per-document records (id, title, content hash, chunk ids)."""
        with self._state_lock.reading():
            return dict(self._documents)

    def add_documents(
        self, documents: Iterable[Document], show_progress: Optional[bool] = None
    ) -> List[str]:
        """Add or update documents without rebuilding the rest.

        A document whose id exists is re-indexed when its content changed and
        left alone otherwise. Returns the ids that were (re)indexed. If
        anything fails (chunking, summarizing, embedding), the index is left
        exactly as it was.
        """
        self._require_stores("add_documents")
        nodes = chunk_documents(list(documents), self._node_parser, self.doc_id_key)
        return self.add_nodes(nodes, show_progress=show_progress)

    def add_nodes(
        self, nodes: Iterable[BaseNode], show_progress: Optional[bool] = None
    ) -> List[str]:
        """Add or update pre-chunked nodes grouped by ``metadata[doc_id_key]``.

        Everything that can fail runs first, on copies; the prepared nodes are
        then swapped in under the write lock, so readers see the index before
        or after the update and a failure leaves it as it was.
        """
        chunk_index = self._require_stores("add_nodes")
        with self._update_lock:  # one update at a time; readers go on meanwhile
            groups = group_nodes(list(nodes), self.doc_id_key)
            current = self._documents  # only updates (serialised here) replace it
            check_new_node_ids(groups, {c: r.doc_id for r in current.values() for c in r.chunk_ids})
            progress = _auto_progress(show_progress, len(groups))
            built = build_documents(
                groups, self.doc_id_key, self._summarizer, self._summary_cache, progress
            )
            changed = []
            for doc_id, record in built.records.items():
                existing = current.get(doc_id)
                if existing is not None and existing.content_hash == record.content_hash:
                    logger.info("document %r unchanged; not re-indexed", doc_id)
                    continue
                changed.append(doc_id)
            keep = set(changed)
            built = BuiltDocuments(
                [s for s in built.summary_nodes if s.index_id in keep],
                [n for n in built.chunk_nodes if n.ref_doc_id in keep],
                {d: r for d, r in built.records.items() if d in keep},
            )
            if not changed:
                return []
            dim = attach_embeddings(
                built,
                self._embed_model,
                self.summary_embedding,
                progress,
                dim=stored_dimension(chunk_index.vector_store),
            )
            _embed_summaries(built, self._embed_model, dim)
            summaries = {**self._summaries, **{s.index_id: s for s in built.summary_nodes}}
            documents = {**current, **built.records}
            self._check_links(summaries, documents, {n.node_id: n for n in built.chunk_nodes})
            with self._state_lock.writing():
                self._swap(
                    remove=[current[d] for d in changed if d in current],
                    add=built,
                )
        return changed

    def delete_document(self, doc_id: str) -> None:
        """Remove one document's summary and chunks."""
        self._require_stores("delete_document")
        with self._update_lock:
            record = self._documents.get(doc_id)
            if record is None:
                raise KeyError(f"no document {doc_id!r} ({_closest(doc_id, list(self._documents))})")
            with self._state_lock.writing():
                self._swap(remove=[record], add=None)

    def _swap(self, remove: List[DocumentRecord], add: Optional[BuiltDocuments]) -> None:
        """Replace ``remove``'s nodes by ``add``'s (call under the write lock).

        Only store calls happen here, on nodes already validated and embedded.
        Should a store still fail (a database connection lost), the removed
        nodes are put back, so the index keeps its previous state.
        """
        chunk_index, summary_index = self._chunk_index, self._summary_index
        assert chunk_index is not None
        saved = _saved_nodes(chunk_index, [c for r in remove for c in r.chunk_ids])
        saved_summaries = _saved_nodes(summary_index, [r.summary_node_id for r in remove])
        try:
            for record in remove:
                chunk_index.delete_nodes(record.chunk_ids, delete_from_docstore=True)
                summary_index.delete_nodes([record.summary_node_id], delete_from_docstore=True)
            if add is not None:
                chunk_index.insert_nodes(add.chunk_nodes)
                summary_index.insert_nodes(add.summary_nodes)
        except Exception:
            logger.exception("update failed in the store; restoring the previous state")
            if add is not None:
                _delete_quietly(chunk_index, [n.node_id for n in add.chunk_nodes])
                _delete_quietly(summary_index, [n.node_id for n in add.summary_nodes])
            _delete_quietly(chunk_index, [n.node_id for n in saved])
            _delete_quietly(summary_index, [n.node_id for n in saved_summaries])
            chunk_index.insert_nodes(saved)
            summary_index.insert_nodes(saved_summaries)
            raise
        documents = {k: v for k, v in self._documents.items() if k not in {r.doc_id for r in remove}}
        summaries = {k: v for k, v in self._summaries.items() if k in documents}
        if add is not None:
            documents.update(add.records)
            summaries.update({s.index_id: s for s in add.summary_nodes})
        self._documents, self._summaries = documents, summaries
        self._document_keys = self._summary_filter_keys()
        if self._vocabulary is not None:
            self._vocabulary.remove_nodes(saved)
            if add is not None:
                self._vocabulary.add_nodes(add.chunk_nodes)
        self._invalidate_searchers()

    # ------------------------------------------------------------ persistence
    def _config(self) -> Dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "similarity_top_k": self.similarity_top_k,
            "num_routed_docs": self.num_routed_docs,
            "score_mode": self.score_mode.value,
            "score_alpha": self.score_alpha,
            "document_weight": self.document_weight,
            "calibration": self.calibration,
            "filters": self.filters.model_dump(mode="json") if self.filters else None,
            "filter_policy": self.filter_policy.value,
            "doc_id_key": self.doc_id_key,
            "max_link_depth": self.max_link_depth,
            "summary_embedding": self.summary_embedding.value,
            "summary_mode": self.summary_mode.value,
            "chunk_mode": self.chunk_mode.value,
            "embed_model": embed_model_name(self._embed_model),
            "summarizer": (
                self._summarizer.to_dict()
                if isinstance(self._summarizer, ExtractiveSummarizer)
                else {"type": "custom", "fingerprint": self._summarizer.fingerprint}
            ),
            "node_parser": node_parser_config(self._node_parser),
            "documents": {k: v.to_dict() for k, v in self._documents.items()},
        }

    def persist(self, persist_dir: Union[str, Path]) -> None:
        """Write summaries, stores and configuration to the index folder ``persist_dir``.

        ``persist_dir`` must be missing, empty, or hold an index a
        ``RecursiveSummaryRetriever`` persisted earlier (current or previous
        format), which is replaced atomically: a crash at any point leaves the
        old index or the new one. Anything else (a folder with other files, a
        regular file, another kind of index) is refused and left untouched.
        Updates running meanwhile wait, so one consistent state is written.

        Args:
            persist_dir: The index folder (created with normal permissions).

        Raises:
            PersistError: ``persist_dir`` holds something else; nothing was written.
            NotImplementedError: the vectors live in an external store.
        """
        chunk_index = self._require_stores("persist")
        for index in (self._summary_index, chunk_index):
            if not isinstance(index.vector_store, SimpleVectorStore):
                raise NotImplementedError(
                    f"persist writes the embedded store, but this retriever uses "
                    f"{type(index.vector_store).__name__}, which keeps its own data; rebuild with "
                    "the default store to persist, or keep the external store and rebuild "
                    "the retriever over it"
                )
        with write_index(persist_dir, PERSIST_KIND) as staging, self._reading():
            self._summary_index.storage_context.persist(str(staging / "summaries"))
            chunk_index.storage_context.persist(str(staging / "chunks"))
            self._summary_cache.save(staging / "summary_cache.json")
            (staging / "config.json").write_text(
                json.dumps(self._config(), ensure_ascii=False, indent=1), encoding="utf-8"
            )

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: Union[str, Path],
        embed_model: Optional[BaseEmbedding] = None,
        summarizer: Optional[Summarizer] = None,
        node_parser: Optional[NodeParser] = None,
        **overrides: Any,
    ) -> "RecursiveSummaryRetriever":
        """Load a retriever written by :meth:`persist` (or by the previous release).

        Every file is checked against the folder's manifest (size and sha256),
        for its shape, and against the others (the documents in ``config.json``
        against the docstores, each docstore against its vector store), so a
        damaged folder raises instead of loading an index that answers ``[]``.

        Args:
            persist_dir: The index folder.
            embed_model: The model the index was built with (default: the configured one).
            summarizer: Summarizer for documents added later (default: the persisted one).
            node_parser: Node parser for documents added later (default: the persisted one).
            **overrides: Replace persisted settings (e.g. ``similarity_top_k=5``).

        Raises:
            PersistError: nothing was persisted there, or a file is missing,
                truncated, modified, malformed or inconsistent (the message names it).
        """
        model: List[BaseEmbedding] = []  # resolved once, only when there is an index to load

        def load(root: Path) -> "RecursiveSummaryRetriever":
            config_path = root / "config.json"
            config = load_json_object(config_path, ("format_version", "documents", "embed_model"))
            if config.get("format_version") != FORMAT_VERSION:
                raise PersistError(
                    f"{config_path} has format_version {config.get('format_version')!r}; "
                    f"this version reads {FORMAT_VERSION}: rebuild the retriever"
                )
            if not model:
                model.append(resolve_embed_model(embed_model))
            if embed_model_name(model[0]) != config["embed_model"]:
                raise PersistError(
                    f"{root} was built with embedding model {config['embed_model']!r} but "
                    f"{embed_model_name(model[0])!r} is configured; pass embed_model= with the "
                    "model it was built with"
                )
            documents: Dict[str, DocumentRecord] = {}
            raw = config["documents"]
            for doc_id, fields in (raw.items() if isinstance(raw, dict) else [(None, raw)]):
                try:
                    record = DocumentRecord(**fields)
                    lists = (record.chunk_ids, record.metadata_keys, record.varying_keys)
                    valid = (
                        record.doc_id == doc_id
                        and all(isinstance(v, str) for v in (record.title, record.content_hash))
                        and isinstance(record.summary_node_id, str)
                        and all(isinstance(v, list) and all(isinstance(i, str) for i in v) for v in lists)
                    )
                except TypeError:
                    valid = False
                if not valid:
                    raise PersistError(
                        f"{config_path}: the record of document {doc_id!r} is malformed "
                        f"({str(fields)[:200]}); persist the retriever again"
                    )
                documents[doc_id] = record
            summary_index = _load_index(root / "summaries", model[0])
            chunk_index = _load_index(root / "chunks", model[0])
            chunk_ids = set(chunk_index.docstore.docs)
            summary_ids = set(summary_index.docstore.docs)
            for doc_id, record in documents.items():
                lacking = [c for c in record.chunk_ids if c not in chunk_ids]
                if lacking:
                    raise PersistError(
                        f"{config_path} lists chunks {lacking[:3]} of document {doc_id!r} that "
                        f"{root / 'chunks' / 'docstore.json'} lacks: the files come from "
                        "different persists; persist the retriever again"
                    )
                if record.summary_node_id not in summary_ids:
                    raise PersistError(
                        f"{config_path} names summary {record.summary_node_id!r} of document "
                        f"{doc_id!r} that {root / 'summaries' / 'docstore.json'} lacks: the files "
                        "come from different persists; persist the retriever again"
                    )
            cache = SummaryCache()
            cache.entries = load_string_map(root / "summary_cache.json")
            settings = {  # settings a config lacks keep the constructor's defaults
                key: config[key]
                for key in (
                    "similarity_top_k",
                    "num_routed_docs",
                    "score_mode",
                    "score_alpha",
                    "document_weight",
                    "calibration",
                    "filter_policy",
                    "doc_id_key",
                    "max_link_depth",
                    "summary_embedding",
                    "summary_mode",
                    "chunk_mode",
                    "unknown_filter_key",
                )
                if key in config
            }
            try:
                _check_settings(**settings)
                _calibration_from_config(settings.get("calibration"))
                if config.get("filters"):
                    settings["filters"] = MetadataFilters.model_validate(config["filters"])
                parser = node_parser or node_parser_from_config(config.get("node_parser"))
                summarizer_config = config.get("summarizer")
                chosen = summarizer
                if chosen is None and isinstance(summarizer_config, dict) and (
                    summarizer_config.get("type") == "extractive"
                ):
                    chosen = ExtractiveSummarizer.from_dict(summarizer_config)
                elif chosen is None:
                    logger.warning(
                        "%s was summarized by %s; documents added later will be summarized by "
                        "ExtractiveSummarizer unless you pass summarizer=",
                        root,
                        summarizer_config,
                    )
            except (AttributeError, KeyError, TypeError, ValueError) as exc:
                raise PersistError(
                    f"{config_path} holds an invalid setting ({exc}); persist the retriever again"
                ) from exc
            settings.update(overrides)
            return cls(
                summary_index,
                chunk_index,
                documents=documents,
                embed_model=model[0],
                summarizer=chosen,
                summary_cache=cache,
                node_parser=parser,
                **settings,
            )

        return read_index(persist_dir, PERSIST_KIND, load)


class _ChunkEvidenceSet:
    """One ``fused`` call's chunk evidence: the best dense and lexical score of
    every chunk the flat and routed searches returned, and the documents'
    routing scores, ranked by :func:`~llama_index_ext_recursive.recursive.evidence.rank_chunks`.
    Searches hand in ``id -> score`` maps; nodes are fetched for the final top-k
    (and for ``IndexNode`` links, which are followed instead of ranked)."""

    def __init__(
        self, owner: "RecursiveSummaryRetriever", levels: _Levels, documents: Mapping[str, float]
    ) -> None:
        self._owner = owner
        self._levels = levels
        assert owner._chunk_index is not None
        self._docstore = owner._chunk_index.docstore
        self.document_scores: Dict[str, float] = dict(documents)  # fused routing scores
        self.dense: Dict[str, float] = {}
        self.lexical: Dict[str, float] = {}
        self.nodes: Dict[str, BaseNode] = {}  # linked targets, fetched while following
        self.doc_of: Dict[str, str] = {}
        self.paths: Dict[str, Tuple[str, ...]] = {}
        self.linked: set = set()  # nodes reached through an IndexNode: filters checked here

    def _route_of(self, node_id: str) -> _Route:
        doc_id = self._levels.chunk_doc.get(node_id, "")
        score = self.document_scores.get(doc_id, 0.0)
        return _Route(doc_id, score, self._summary_id(doc_id), score, (doc_id,))

    def _summary_id(self, doc_id: str) -> Optional[str]:
        summary = self._owner._summaries.get(doc_id)
        return summary.node_id if summary is not None else None

    def add(
        self, dense: Mapping[str, float], lexical: Mapping[str, float], route: Optional[_Route]
    ) -> List[_Route]:
        """Record scores (of one route, or flat when ``route`` is None); return links to follow."""
        follow: List[_Route] = []
        links = self._levels.link_ids
        for scores, hits in ((self.dense, dense), (self.lexical, lexical)):
            for node_id, score in hits.items():
                if scores is self.lexical and score <= 0:
                    continue
                current = route or self._route_of(node_id)
                if node_id in links:
                    node = self._docstore.get_node(node_id, raise_error=False)
                    if node is None:
                        continue  # a stale id: the store kept a node the docstore lost
                    link = self._owner._follow_link(current, NodeWithScore(node=node, score=score))
                    if isinstance(link, _Route):
                        inherited = current.score or 0.0  # the evidence that led here
                        self.document_scores.setdefault(link.doc_id, inherited)
                        follow.append(replace(link, score=self.document_scores[link.doc_id]))
                        continue
                    if link is None:
                        continue
                    node_id = link.node_id
                    self.nodes[node_id] = link
                    self.linked.add(node_id)
                if node_id not in scores or score > scores[node_id]:
                    scores[node_id] = score
                self.doc_of.setdefault(node_id, current.doc_id)
                self.paths.setdefault(node_id, current.path)
        return follow

    def add_wave(
        self, routes: List[_Route], dense: Mapping[str, float], lexical: Mapping[str, float]
    ) -> List[_Route]:
        """Record one wave of routed searches; return the documents links lead to."""
        slot: Dict[str, int] = {}
        for i, route in enumerate(routes):
            slot.setdefault(route.doc_id, i)
        parts: List[Tuple[Dict[str, float], Dict[str, float]]] = [({}, {}) for _ in routes]
        chunk_doc = self._levels.chunk_doc
        for which, hits in ((0, dense), (1, lexical)):
            for node_id, score in hits.items():
                i = slot.get(chunk_doc.get(node_id, ""))
                if i is not None:
                    parts[i][which][node_id] = score
        follow: List[_Route] = []
        seen = {r.doc_id for r in routes}
        for route, (d, l) in zip(routes, parts):
            for link in self.add(d, l, route):
                if link.doc_id not in seen:
                    seen.add(link.doc_id)
                    follow.append(link)
        return follow

    def _node(self, node_id: str) -> Optional[BaseNode]:
        return self.nodes.get(node_id) or self._docstore.get_node(node_id, raise_error=False)

    def ranked(self, plan: _Plan) -> List[NodeWithScore]:
        owner = self._owner
        if self.linked and plan.chunk_filters is not None:
            matches = metadata_matcher(plan.chunk_filters)
            for node_id in [n for n in self.linked if not matches(self.nodes[n].metadata)]:
                self.dense.pop(node_id, None)
                self.lexical.pop(node_id, None)
        ranked = rank_chunks(
            self.dense,
            self.lexical,
            self.doc_of,
            self.document_scores,
            plan.chunk_weights,
            owner.document_weight,
        )
        out: List[NodeWithScore] = []
        for e in ranked:
            node = self._node(e.node_id)
            if node is None:
                logger.debug("chunk %r is in the store but not the docstore; skipped", e.node_id)
                continue
            # model_construct: every field is built here from checked parts
            out.append(
                ExplainedNodeWithScore.model_construct(
                    node=node,
                    score=e.final,
                    explanation=Explanation.model_construct(route=RetrievalExplanation.model_construct(
                        doc_id=e.doc_id,
                        summary_node_id=self._summary_id(e.doc_id),
                        summary_score=e.document,
                        chunk_score=e.chunk,
                        final_score=e.final,
                        score_mode=ScoreMode.FUSED.value,
                        path=list(self.paths.get(e.node_id, (e.doc_id,))),
                        dense_score=e.dense,
                        lexical_score=e.lexical,
                        document_weight=owner.document_weight,
                    )),
                )
            )
            if len(out) == owner.similarity_top_k:
                break
        return out


async def _no_scores() -> Dict[str, float]:
    """What a search the query's weights switch off contributes."""
    return {}


def _as_bundle(str_or_query_bundle: Union[str, QueryBundle]) -> QueryBundle:
    if isinstance(str_or_query_bundle, str):
        return QueryBundle(str_or_query_bundle)
    if not isinstance(str_or_query_bundle, QueryBundle):
        raise TypeError(
            f"expected a query string or QueryBundle, got {type(str_or_query_bundle).__name__}"
        )
    return str_or_query_bundle


def _calibration_from_config(data: Optional[Mapping[str, Any]]) -> Dict[str, Calibration]:
    """``calibration=`` (as :attr:`RecursiveSummaryRetriever.calibration` gives
    it) -> one :class:`Calibration` per level; a bad entry names itself."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise TypeError(
            f"calibration must be the mapping RecursiveSummaryRetriever.calibration returns, "
            f"got {type(data).__name__}"
        )
    levels: Dict[str, Calibration] = {}
    for level, value in data.items():
        if level not in ("documents", "chunks"):
            raise ValueError(
                f"calibration has an unknown level {level!r}; known: 'documents', 'chunks'"
            )
        levels[level] = value if isinstance(value, Calibration) else Calibration.from_dict(value)
    return levels


_COUNT_SETTINGS = {"similarity_top_k": 1, "num_routed_docs": 1, "max_link_depth": 0}
_CHOICE_SETTINGS = {
    "score_mode": ScoreMode,
    "filter_policy": FilterPolicy,
    "summary_mode": LevelMode,
    "chunk_mode": LevelMode,
    "summary_embedding": SummaryEmbedding,
    "unknown_filter_key": UnknownFilterPolicy,
}


def _check_settings(**settings: Any) -> None:
    """Validate whichever retriever settings are given, before any work is done."""
    for name, minimum in _COUNT_SETTINGS.items():
        if name in settings:
            check_count(name, settings[name], minimum)
    if "score_alpha" in settings:
        check_real("score_alpha", settings["score_alpha"], 0.0, 1.0)
    if "document_weight" in settings:
        check_real("document_weight", settings["document_weight"], 0.0)
    for name, choices in _CHOICE_SETTINGS.items():
        value = settings.get(name)
        if value is not None and value not in {c.value for c in choices} | set(choices):
            raise ValueError(
                f"{name} must be one of {[c.value for c in choices]}, got {value!r}"
            )
    if "filters" in settings:
        to_filters(settings["filters"])  # a TypeError now rather than after embedding


def _check_build_arguments(kwargs: Mapping[str, Any], where: str) -> None:
    """Unknown keywords and bad settings fail before chunking, summarizing or embedding."""
    own = set(inspect.signature(RecursiveSummaryRetriever.from_nodes).parameters)
    check_kwargs(
        RecursiveSummaryRetriever.__init__,
        {k: v for k, v in kwargs.items() if k not in own},
        where,
    )
    _check_settings(**kwargs)


def _embed_summaries(built: BuiltDocuments, embed_model: BaseEmbedding, dim: Optional[int]) -> None:
    """Embed (and check) summaries that still lack a vector (``SummaryEmbedding.TEXT``)
    before anything is indexed, so neither a build nor an update's swap calls the model."""
    todo = [s for s in built.summary_nodes if s.embedding is None]
    if not todo:
        return
    vectors = embed_nodes(todo, embed_model)
    name = embed_model_name(embed_model)
    for summary in todo:
        check_vectors(vectors[summary.node_id], name, f"the summary of {summary.index_id!r}", dim)
        summary.embedding = vectors[summary.node_id]


def _saved_nodes(index: VectorStoreIndex, node_ids: List[str]) -> List[BaseNode]:
    """Copies of indexed nodes with their vectors, to put back if a swap fails."""
    saved = []
    store = index.vector_store
    for node_id in node_ids:
        node = index.docstore.get_node(node_id, raise_error=False)
        if node is None:
            continue
        copy = node.model_copy()
        if isinstance(store, SimpleVectorStore):
            copy.embedding = store.get(node_id)
        else:
            try:
                copy.embedding = store.get_nodes([node_id])[0].embedding
            except Exception:  # a store without get_nodes: the node is re-embedded
                copy.embedding = None
        saved.append(copy)
    return saved


def _delete_quietly(index: VectorStoreIndex, node_ids: List[str]) -> None:
    try:
        index.delete_nodes(node_ids, delete_from_docstore=True)
    except Exception:  # restoring after a failure: absent ids are fine
        logger.debug("could not delete %d node(s) while restoring", len(node_ids), exc_info=True)


def _auto_progress(show_progress: Optional[bool], count: int) -> bool:
    return count >= 20 if show_progress is None else show_progress


def _new_index(
    nodes: Sequence[BaseNode],
    embed_model: BaseEmbedding,
    show_progress: bool,
    vector_store: Optional[BasePydanticVectorStore] = None,
) -> VectorStoreIndex:
    storage = StorageContext.from_defaults(
        docstore=LinearDocumentStore(),  # upstream's is quadratic in a document's chunks
        vector_store=vector_store or NumpyVectorStore(),
    )
    return VectorStoreIndex(
        list(nodes),
        storage_context=storage,
        embed_model=embed_model,
        show_progress=show_progress,
        # the docstore keeps every node even when the store keeps text: link
        # checks, BM25 levels and updates read nodes from it
        store_nodes_override=True,
    )


PERSIST_KIND = "RecursiveSummaryRetriever"  # names the index kind in its folder's manifest


def _load_index(path: Path, embed_model: BaseEmbedding) -> VectorStoreIndex:
    """Load one persisted level (``summaries/`` or ``chunks/``), checking its files agree.

    Raises:
        PersistError: naming the file that is missing, malformed, or lacks
            nodes another file of the level has.
    """

    docstore_path = path / "docstore.json"
    index_path = path / "index_store.json"
    vectors_path = path / "default__vector_store.json"
    docstore = load_json_object(docstore_path, ("docstore/data",))
    stored = docstore["docstore/data"]
    if not isinstance(stored, dict) or not all(
        isinstance(v, dict) and "__data__" in v for v in stored.values()
    ):
        raise PersistError(f"{docstore_path} holds no valid nodes: it is damaged; persist it again")
    structs = load_json_object(index_path, ("index_store/data",))["index_store/data"]
    try:
        (struct,) = structs.values()
        data = struct["__data__"]
        listed = set((json.loads(data) if isinstance(data, str) else data)["nodes_dict"])
    except (AttributeError, KeyError, TypeError, ValueError):
        raise PersistError(
            f"{index_path} does not hold exactly one vector index: it is damaged; persist it again"
        ) from None
    vector_store = NumpyVectorStore.from_persist_path(str(vectors_path))
    vector_ids = set(vector_store.data.embedding_dict)
    for lacking, owner, other in (
        (vector_ids - set(stored), docstore_path, vectors_path),
        (listed - vector_ids, vectors_path, index_path),
        (vector_ids - listed, index_path, vectors_path),
    ):
        if lacking:
            raise PersistError(
                f"{owner} lacks {len(lacking)} nodes that {other.name} has (e.g. "
                f"{sorted(lacking)[0]!r}): the files come from different persists; persist it again"
            )
    try:
        storage = StorageContext.from_defaults(
            docstore=LinearDocumentStore.from_dict(docstore),
            index_store=SimpleIndexStore.from_dict({"index_store/data": structs}),
            vector_store=vector_store,
            persist_dir=str(path),
        )
        return load_index_from_storage(storage, embed_model=embed_model)
    except Exception as exc:
        raise PersistError(f"{path} could not be loaded ({exc!r}); persist it again") from exc


def load_summary_cache(persist_dir: Union[str, Path]) -> SummaryCache:
    """The summaries of the index persisted at ``persist_dir``, for a rebuild to reuse.

    The cache is in memory (``path`` is ``None``): the index's own copy is
    rewritten by its next :meth:`RecursiveSummaryRetriever.persist`.

    Args:
        persist_dir: An index folder, which may not exist yet.

    Returns:
        The persisted cache, or an empty ``SummaryCache()`` when nothing was
        persisted at ``persist_dir``.

    Raises:
        PersistError: ``persist_dir`` holds an index whose files are damaged,
            or an index of another kind.
    """
    cache = SummaryCache()
    try:
        cache.entries = read_index(
            persist_dir, PERSIST_KIND, lambda root: load_string_map(root / "summary_cache.json")
        )
    except NoIndexError:
        pass
    return cache


def _raise_on_cycle(edges: Dict[str, List[str]]) -> None:
    """Raise :class:`LinkError` naming the first cycle in a document link graph."""
    state: Dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(node: str, path: List[str]) -> None:
        state[node] = 1
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                cycle = path[path.index(nxt):] + [nxt]
                raise LinkError(
                    "IndexNode links form a cycle: " + " -> ".join(cycle)
                    + "; remove one of these links"
                )
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for start in list(edges):
        if start not in state:
            visit(start, [start])
