"""Summary-routed (recursive) retrieval: route by summary, rank chunks globally.

``RecursiveSummaryRetriever`` replaces the upstream recipe (summary
``IndexNode``s, one index per document, ``RecursiveRetriever``) with one
summary store and one chunk store (a :class:`RecursiveIndex`): a query is
routed to the best ``num_routed_docs`` documents by their summaries, chunks
are retrieved inside each of them (a ``ref_doc_id`` filter), and one globally
ranked, deduplicated list of ``similarity_top_k`` chunks comes back.

The retriever holds the query settings and searches the index, as
``VectorIndexRetriever`` searches a ``VectorStoreIndex``; every construction
path builds or loads the index and wraps it. Per call, ``_retrieve`` and
``_aretrieve`` start with :func:`~llama_index_ext_recursive.query.resolve_call`
(filters under ``filter_policy``, per-call ``top_k``), then search with the
child retrievers of :mod:`~llama_index_ext_recursive.recursive.levels`, built
once per index state.

The module is a little over 500 lines because the retriever's whole public
API (five construction paths, configuration, updates and persistence that
delegate to the index, sync and async entry points, document results) lives
on one class; the searches themselves are in
:mod:`~llama_index_ext_recursive.recursive.search`.

Spans: the internal searches (summary and chunk levels, BM25, hybrid levels)
are parts of one retrieval, so they are called through ``_retrieve``/
``_aretrieve`` and emit no span or retrieval event of their own; a query emits
one retrieval span pair. Only a ``retriever_dict``'s children, which are the
user's retrievers, are called through ``retrieve``: their spans nest under ours.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, Document, IndexNode, NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import MetadataFilters
from typing_extensions import Unpack  # typing's from Python 3.11

from llama_index_ext_recursive import steps
from llama_index_ext_recursive.cache import RetrievalCache
from llama_index_ext_recursive.cache.flow import cached, query_vector
from llama_index_ext_recursive.cache.retrieval_cache import check_cache
from llama_index_ext_recursive.config import component_to_dict, init_parameters, type_name
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    relax_to_keys,
    to_filters,
)
from llama_index_ext_recursive.models import embed_model_name
from llama_index_ext_recursive.query import DEFAULT_TOP_K, Call, QueryCheckingRetriever, as_query_bundle, resolve_call
from llama_index_ext_recursive.recursive import search
from llama_index_ext_recursive.recursive.build import DocumentRecord, SummaryEmbedding
from llama_index_ext_recursive.recursive.evidence import DEFAULT_DOCUMENT_WEIGHT, EQUAL_WEIGHTS
from llama_index_ext_recursive.recursive.index import RecursiveIndex
from llama_index_ext_recursive.recursive.levels import Levels, levels_for
from llama_index_ext_recursive.recursive.persist import (
    interrupted_build,
    load_from_database,
    load_persisted,
    persist_index,
    persist_to_database,
)
from llama_index_ext_recursive.recursive.ranking import (
    Plan,
)
from llama_index_ext_recursive.recursive.settings import (
    DEFAULT_NUM_ROUTED_DOCS,
    DEFAULT_SCORE_ALPHA,
    BuildOptions,
    LevelMode,
    RetrieverOptions,
    ScoreMode,
    calibration_from_config,
    check_arguments,
    check_settings,
    split_arguments,
)
from llama_index_ext_recursive.results import DocumentWithScore
from llama_index_ext_recursive.retrievers.calibration import Calibration
from llama_index_ext_recursive.retrievers.store_facts import store_dimension
from llama_index_ext_recursive.text import QueryScript, query_script
from llama_index_ext_recursive.validation import check_vectors

__all__ = ["RecursiveSummaryRetriever", "LevelMode", "ScoreMode"]


if TYPE_CHECKING:  # the postgres extra is optional
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore

logger = logging.getLogger(__name__)

T = TypeVar("T")
# a search of one call over the levels (retrieve's or retrieve_documents')
Searching = Callable[[Plan, Levels], steps.Steps[T]]


class RecursiveSummaryRetriever(QueryCheckingRetriever):
    """Route a query to documents by summary, then rank their chunks globally.

    Build it with :meth:`from_documents`, :meth:`from_nodes` or
    :meth:`from_index` (one summary store plus one chunk store, offline by
    default), with :meth:`from_retriever_dict` to keep upstream
    ``RecursiveRetriever``'s ``IndexNode`` + ``retriever_dict`` setup, or over
    a :class:`RecursiveIndex` directly.

    Per-call options: pass a :class:`FilteredQueryBundle`. Its filters apply
    to chunks and, relaxed to document-level keys, to summaries;
    construction-time ``filters`` combine with them under ``filter_policy``.
    Its ``top_k`` replaces ``similarity_top_k`` for that call.

    Args:
        index: the :class:`RecursiveIndex` to search.
        similarity_top_k: number of chunks returned.
        num_routed_docs: number of documents the query is routed to (more when
            those hold fewer than ``similarity_top_k`` chunks).
        score_mode: how summary and chunk scores combine (:class:`ScoreMode`;
            default ``fused``, or ``chunk`` for a ``retriever_dict`` setup,
            which has no flat chunk search).
        score_alpha: the summary weight for ``weighted`` mode.
        document_weight: in ``fused`` mode, how much a document's routing score
            (0-1) adds to its chunks' fused score (0-1) when routing is sure; per
            query it is scaled by
            :func:`~llama_index_ext_recursive.recursive.evidence.document_share`
            of the routing's certainty (half when the best two documents tie,
            when the ranking also falls back to the flat hybrid's), and each
            hit's ``explanation.route.document_weight`` says what it was.
        filters: construction-time metadata filters.
        filter_policy: ``merge`` (AND with per-call filters) or ``replace``.
        max_link_depth: how many ``IndexNode`` links a query may follow.
        summary_mode: how documents are routed (:class:`LevelMode`, default
            ``hybrid``: dense over routing vectors, BM25 over each document's
            title, metadata, summary and chunks).
        chunk_mode: how chunks are ranked (:class:`LevelMode`; default
            ``hybrid``; ``bm25``/``hybrid`` need a chunk store, so a
            ``retriever_dict`` setup defaults to ``vector``).
        calibration: fusion weights measured earlier (what :attr:`calibration`
            returns; persisted with the index), so they are not measured again.
            Hybrid levels without one are calibrated at construction.
        show_progress: show a progress bar while calibrating.
        unknown_filter_key: what a filter on a key the chunks do not hold, or
            with a value of the wrong type, does (:class:`UnknownFilterPolicy`):
            ``raise`` (default) a :class:`FilterError` naming the closest key,
            or ``warn`` and search anyway. Checked against the chunks' metadata;
            a ``retriever_dict`` setup's children check their own.
    """

    def __init__(
        self,
        index: RecursiveIndex,
        similarity_top_k: int = DEFAULT_TOP_K,
        num_routed_docs: int = DEFAULT_NUM_ROUTED_DOCS,
        score_mode: ScoreMode | str | None = None,
        score_alpha: float = DEFAULT_SCORE_ALPHA,
        document_weight: float = DEFAULT_DOCUMENT_WEIGHT,
        filters: FiltersLike = None,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        max_link_depth: int = 3,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        summary_mode: LevelMode | str = LevelMode.HYBRID,
        chunk_mode: LevelMode | str | None = None,
        unknown_filter_key: UnknownFilterPolicy | str = UnknownFilterPolicy.RAISE,
        calibration: Mapping[str, Any] | None = None,
        show_progress: bool = False,
        cache: RetrievalCache | None = None,
    ) -> None:
        if not isinstance(index, RecursiveIndex):
            raise TypeError(
                f"RecursiveSummaryRetriever searches a RecursiveIndex, got {type(index).__name__}; "
                "build one with RecursiveSummaryRetriever.from_documents/from_nodes/from_index"
            )
        check_settings(
            similarity_top_k=similarity_top_k,
            num_routed_docs=num_routed_docs,
            score_alpha=score_alpha,
            document_weight=document_weight,
            max_link_depth=max_link_depth,
        )
        has_chunks = index.chunk_index is not None
        self.index = index
        self.unknown_filter_key = UnknownFilterPolicy(unknown_filter_key)
        self.summary_mode = LevelMode(summary_mode)
        self.chunk_mode = LevelMode(
            chunk_mode if chunk_mode is not None else LevelMode.HYBRID if has_chunks else LevelMode.VECTOR
        )
        self.score_mode = ScoreMode(
            score_mode if score_mode is not None else ScoreMode.FUSED if has_chunks else ScoreMode.CHUNK
        )
        if not has_chunks and self.score_mode == ScoreMode.FUSED:
            raise ValueError(
                "score_mode='fused' searches all chunks flat, which needs the chunk store "
                "built by from_documents/from_nodes; a retriever_dict setup supports "
                "'chunk', 'weighted' or 'product'"
            )
        if not has_chunks and self.chunk_mode != LevelMode.VECTOR:
            raise ValueError(
                f"chunk_mode={self.chunk_mode.value!r} needs the chunk store built by "
                "from_documents/from_nodes; with retriever_dict, put BM25 or "
                "HybridFusionRetriever children in the dict instead"
            )
        self.similarity_top_k = similarity_top_k
        self.num_routed_docs = num_routed_docs
        self.score_alpha = score_alpha
        self.document_weight = float(document_weight)
        self.filters = to_filters(filters)
        self.filter_policy = FilterPolicy(filter_policy)
        self.max_link_depth = max_link_depth
        self._calibration: dict[str, Calibration] = calibration_from_config(calibration)
        self._show_progress = show_progress
        check_cache(cache)
        self.cache = cache
        self._built: Levels | None = None
        self._levels_lock = threading.Lock()
        super().__init__(callback_manager=callback_manager, verbose=verbose)
        self._levels()

    # ------------------------------------------------------------------ build
    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        *,
        persist_dir: str | Path | None = None,
        postgres: PostgresIndexStore | None = None,
        **kwargs: Unpack[BuildOptions],
    ) -> RecursiveSummaryRetriever:
        """Chunk, summarize and index ``documents`` (:meth:`RecursiveIndex.from_documents`).

        Chunking: ``node_parser=`` or ``transformations=[...]`` (as upstream
        ``VectorStoreIndex.from_documents``), else an explicitly set
        ``Settings.transformations``/``node_parser``/``chunk_size``, else our
        parser sized for the bundled model. A document's id is
        ``metadata[doc_id_key]`` (default ``"doc_id"``) when present, else its
        ``doc_id``. Every keyword is checked before any document is chunked;
        the index's go to :meth:`RecursiveIndex.from_documents`, the rest to the
        constructor. ``persist_dir`` and ``postgres``: see :meth:`from_nodes`.
        """
        own, settings = split_arguments(
            kwargs, "RecursiveSummaryRetriever.from_documents", cls.__init__, documents=True
        )
        return cls._build_into(
            lambda **build: RecursiveIndex.from_documents(documents, **build), own, settings, persist_dir, postgres
        )

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[BaseNode],
        *,
        persist_dir: str | Path | None = None,
        postgres: PostgresIndexStore | None = None,
        **kwargs: Unpack[BuildOptions],
    ) -> RecursiveSummaryRetriever:
        """Index pre-chunked ``nodes`` (:meth:`RecursiveIndex.from_nodes`), grouped by
        document: ``metadata[doc_id_key]``; by default ``metadata["doc_id"]``
        when present, else the node's ``ref_doc_id``, so the nodes of any
        LlamaIndex reader or ``VectorStoreIndex`` docstore group as they are.

        Nodes that already carry embeddings are not embedded again.
        ``chunk_vector_store``/``summary_vector_store``: empty stores to index
        into (FAISS, Chroma, PostgreSQL, ...; default :class:`NumpyVectorStore`);
        ``persist`` supports the embedded stores (the default, or a
        ``ColumnarVectorStore`` for both levels).

        ``persist_dir``: build into this index folder and persist the retriever
        there. Over two ``ColumnarVectorStore`` levels the build streams and is
        persisted every ``checkpoint_nodes`` chunks (default
        :data:`~.index.CHECKPOINT_NODES`), which keeps its memory bounded; when
        a build is killed, the same call again resumes it from its last
        checkpoint, skipping the documents indexed by then. A folder that holds
        a finished index is refused (it is updated, never rebuilt over).

        ``postgres``: build into this :class:`~llama_index_ext_recursive.stores.pg_index.PostgresIndexStore`
        (both levels and the document records in PostgreSQL, committed a batch
        of documents at a time), then store the settings and the calibration
        there, so any process opens it with :meth:`from_postgres`. An index that
        holds documents already is refused (open it and add to it instead).
        """
        own, settings = split_arguments(kwargs, "RecursiveSummaryRetriever.from_nodes", cls.__init__)
        return cls._build_into(
            lambda **build: RecursiveIndex.from_nodes(nodes, **build), own, settings, persist_dir, postgres
        )

    @classmethod
    def from_index(cls, index: VectorStoreIndex, **kwargs: Unpack[BuildOptions]) -> RecursiveSummaryRetriever:
        """Build over an existing ``VectorStoreIndex``, reusing its stored chunk
        embeddings: only the summaries are embedded (:meth:`RecursiveIndex.from_index`).

        ``SimpleDirectoryReader`` -> ``VectorStoreIndex.from_documents`` ->
        ``RecursiveSummaryRetriever.from_index(index)``: documents are told
        apart by each node's ``ref_doc_id``.
        """
        own, settings = split_arguments(kwargs, "RecursiveSummaryRetriever.from_index", cls.__init__)
        return cls._over(RecursiveIndex.from_index(index, **own), settings)

    @classmethod
    def from_retriever_dict(
        cls,
        summary_nodes: Sequence[IndexNode],
        retriever_dict: Mapping[str, BaseRetriever],
        embed_model: BaseEmbedding | None = None,
        **kwargs: Any,
    ) -> RecursiveSummaryRetriever:
        """Upstream-compatible setup: summary ``IndexNode``s plus ``retriever_dict``.

        Each summary's ``index_id`` must be a key of ``retriever_dict``; this is
        checked now, not at query time. An ``IndexNode`` whose ``obj`` is a
        retriever may stand in for its ``retriever_dict`` entry.
        """
        check_arguments([cls.__init__], kwargs, "RecursiveSummaryRetriever.from_retriever_dict")
        index = RecursiveIndex.from_retriever_dict(summary_nodes, retriever_dict, embed_model)
        return cls(index, **kwargs)

    @classmethod
    def _build_into(
        cls,
        build: Callable[..., RecursiveIndex],
        own: dict[str, Any],
        settings: dict[str, Any],
        persist_dir: str | Path | None,
        postgres: PostgresIndexStore | None = None,
    ) -> RecursiveSummaryRetriever:
        """The retriever over ``build(**own)``; with ``persist_dir``, a checkpointed
        build into that folder (resumed when a killed one left it there), persisted at the end;
        with ``postgres``, a build into that database, its settings stored there at the end."""
        if postgres is not None:
            return cls._build_into_database(build, own, settings, persist_dir, postgres)
        if persist_dir is None:
            return cls._over(build(**own), settings)
        given = sorted({"checkpoint", "resume"} & set(own))
        if given:
            raise ValueError(f"persist_dir= checkpoints and resumes the build itself: pass it or {given}, not both")
        resume = interrupted_build(persist_dir, own.get("embed_model"))
        # a checkpoint is loadable with default settings; the final persist writes the caller's
        checkpoint_config = component_to_dict(cls)
        retriever = cls._over(
            build(
                **own,
                resume=resume,
                checkpoint=lambda index: persist_index(index, persist_dir, checkpoint_config),
            ),
            settings,
        )
        retriever.persist(persist_dir)
        return retriever

    @classmethod
    def _build_into_database(
        cls,
        build: Callable[..., RecursiveIndex],
        own: dict[str, Any],
        settings: dict[str, Any],
        persist_dir: str | Path | None,
        postgres: PostgresIndexStore,
    ) -> RecursiveSummaryRetriever:
        given = sorted({"chunk_vector_store", "summary_vector_store"} & set(own))
        if persist_dir is not None or given:
            raise ValueError(
                f"postgres= holds the whole index: pass it without {given or ['persist_dir']} "
                "(the database is where it is kept)"
            )
        held = postgres.record_count()
        if held:
            raise ValueError(
                f"PostgreSQL index {postgres.schema}.{postgres.name} holds {held} documents already: open it "
                "with RecursiveSummaryRetriever.from_postgres(store) and add_documents(...), or build under a new name"
            )
        retriever = cls._over(
            build(**own, chunk_vector_store=postgres.chunks, summary_vector_store=postgres.summaries), settings
        )
        retriever._levels()  # calibrated once: every process that opens the index reuses the weights
        retriever.persist()
        return retriever

    @classmethod
    def from_postgres(
        cls,
        store: PostgresIndexStore,
        embed_model: BaseEmbedding | None = None,
        summarizer: Any = None,
        node_parser: Any = None,
        transformations: list | None = None,
        **overrides: Unpack[RetrieverOptions],
    ) -> RecursiveSummaryRetriever:
        """Open the index a build stored in PostgreSQL (``from_documents(..., postgres=store)``),
        from any process: nothing is read per chunk or rebuilt; queries search the database,
        and changes committed by any process are seen by the next query.

        Args and Raises: as :meth:`from_persist_dir` (``store`` instead of a folder).
        """
        check_arguments([cls.__init__], overrides, "RecursiveSummaryRetriever.from_postgres")
        steps_ = [node_parser] if node_parser is not None else transformations
        retriever: RecursiveSummaryRetriever = load_from_database(
            store,
            lambda index, settings: cls._from_settings(index, settings, overrides),
            embed_model=embed_model,
            summarizer=summarizer,
            transformations=steps_,
        )
        return retriever

    @classmethod
    def _over(cls, index: RecursiveIndex, settings: dict[str, Any]) -> RecursiveSummaryRetriever:
        if "show_progress" not in settings:
            settings["show_progress"] = len(index.documents) >= 20
        return cls(index, **settings)

    # ------------------------------------------------------------ configuration
    def to_dict(self) -> dict[str, Any]:
        """The query settings (and measured calibration) in the package's
        ``{"type", "init_parameters"}`` convention; :meth:`from_dict` with the
        same index builds an equal retriever."""
        return component_to_dict(self, **self._settings(), calibration=self.calibration)

    def _settings(self) -> dict[str, Any]:
        """Every query setting but the calibration (:meth:`to_dict` and the cache key)."""
        return {
            "similarity_top_k": self.similarity_top_k,
            "num_routed_docs": self.num_routed_docs,
            "score_mode": self.score_mode.value,
            "score_alpha": self.score_alpha,
            "document_weight": self.document_weight,
            "filters": self.filters.model_dump(mode="json") if self.filters else None,
            "filter_policy": self.filter_policy.value,
            "max_link_depth": self.max_link_depth,
            "summary_mode": self.summary_mode.value,
            "chunk_mode": self.chunk_mode.value,
            "unknown_filter_key": self.unknown_filter_key.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], index: RecursiveIndex, **overrides: Any) -> RecursiveSummaryRetriever:
        """A retriever over ``index`` with the settings :meth:`to_dict` wrote."""
        settings = init_parameters(cls, data)
        return cls._from_settings(index, settings, overrides)

    @classmethod
    def _from_settings(
        cls, index: RecursiveIndex, settings: dict[str, Any], overrides: Mapping[str, Any]
    ) -> RecursiveSummaryRetriever:
        if settings.get("filters"):  # written by MetadataFilters.model_dump
            settings["filters"] = MetadataFilters.model_validate(settings["filters"])
        check_arguments([cls.__init__], settings, f"{cls.__name__} settings")
        calibration_from_config(settings.get("calibration"))
        settings.update(overrides)
        return cls(index, **settings)

    @property
    def calibration(self) -> dict[str, dict[str, Any]]:
        """The fusion weights measured for each hybrid level (``documents``,
        ``chunks``), JSON-safe; pass it back as ``calibration=`` (``persist``
        does) to reuse it."""
        return {level: found.to_dict() for level, found in self._calibration.items()}

    @property
    def documents(self) -> dict[str, DocumentRecord]:
        """Per-document records (id, title, content hash, chunk ids)."""
        with self.index.state_lock.reading():
            return dict(self.index.documents.items())

    @property
    def filter_vocabulary(self) -> FilterVocabulary:
        """Metadata keys (and value kinds) filters are checked against (see :class:`RecursiveIndex`)."""
        return self.index.filter_vocabulary

    @property
    def doc_id_key(self) -> str | None:
        return self.index.doc_id_key

    @property
    def summary_embedding(self) -> SummaryEmbedding:
        return self.index.summary_embedding

    def validate_links(self) -> None:
        """Check that every ``IndexNode`` resolves and no links form a cycle (:class:`LinkError`)."""
        self.index.validate_links()

    # ------------------------------------------------------------ updates
    def add_documents(self, documents: Iterable[Document], show_progress: bool | None = None) -> list[str]:
        """Add or update documents without rebuilding the rest (:meth:`RecursiveIndex.add_documents`).

        A document whose id exists is re-indexed when its content changed and
        left alone otherwise. Returns the ids that were (re)indexed. If
        anything fails (chunking, summarizing, embedding), the index is left
        exactly as it was.
        """
        return self.index.add_documents(documents, show_progress=show_progress)

    def add_nodes(self, nodes: Iterable[BaseNode], show_progress: bool | None = None) -> list[str]:
        """Add or update pre-chunked nodes (:meth:`RecursiveIndex.add_nodes`)."""
        return self.index.add_nodes(nodes, show_progress=show_progress)

    def delete_document(self, doc_id: str) -> None:
        """Remove one document's summary and chunks."""
        self.index.delete_document(doc_id)

    # ------------------------------------------------------------ persistence
    def persist(self, persist_dir: str | Path | None = None) -> None:
        """Write the index and these settings to the index folder ``persist_dir``; for an
        index in PostgreSQL (no ``persist_dir``), store these settings in its database (its
        data is committed by every change already).

        ``persist_dir`` must be missing, empty, or hold an index a
        ``RecursiveSummaryRetriever`` persisted earlier (current or previous
        format), which is replaced atomically: a crash at any point leaves the
        old index or the new one. Anything else is refused and left untouched.

        Raises:
            PersistError: ``persist_dir`` holds something else; nothing was written.
            NotImplementedError: the vectors live in an external store.
        """
        if persist_dir is None:
            persist_to_database(self.index, self.to_dict())
            return
        persist_index(self.index, persist_dir, self.to_dict())

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embed_model: BaseEmbedding | None = None,
        summarizer: Any = None,
        node_parser: Any = None,
        transformations: list | None = None,
        **overrides: Unpack[RetrieverOptions],
    ) -> RecursiveSummaryRetriever:
        """Load a retriever written by :meth:`persist` (or by a previous release).

        Args:
            persist_dir: The index folder.
            embed_model: The model the index was built with (default: the configured one).
            summarizer: Summarizer for documents added later (default: the persisted one).
            node_parser: Node parser for documents added later (default: the persisted one).
            transformations: Instead of ``node_parser``: chunking steps for documents added later.
            **overrides: Replace persisted settings (e.g. ``similarity_top_k=5``).

        Raises:
            PersistError: nothing was persisted there, or a file is missing,
                truncated, modified, malformed or inconsistent (the message names it).
        """
        check_arguments([cls.__init__], overrides, "RecursiveSummaryRetriever.from_persist_dir")
        steps = [node_parser] if node_parser is not None else transformations
        retriever: RecursiveSummaryRetriever = load_persisted(
            persist_dir,
            lambda index, settings: cls._from_settings(index, settings, overrides),
            embed_model=embed_model,
            summarizer=summarizer,
            transformations=steps,
        )
        if retriever.index.partial:
            logger.warning(
                "%s holds a build that was interrupted after %d documents: it answers from those only; "
                "run the same build with persist_dir=%s again to finish it",
                persist_dir,
                len(retriever.index.documents),
                persist_dir,
            )
        return retriever

    # ------------------------------------------------------------ levels
    def _levels(self) -> Levels:
        """The searchers of the index's current state, built on first need and
        again after it changed; hybrid levels are calibrated once (see :attr:`calibration`)."""
        with self._levels_lock:
            built = self._built
            if built is None or built.generation != self.index.generation:
                built = self._built = levels_for(self, built)
                _ = self.index.filter_vocabulary  # built alongside: resolve_call reads it every call
            return built

    async def _aprepare(self) -> None:
        """Build the levels off the event loop when the index changed (BM25, calibration: CPU work)."""
        built = self._built
        if built is None or built.generation != self.index.generation:
            await asyncio.to_thread(self._levels)

    def document_depth(self, top_k: int) -> int:
        """Summary candidates per search: spare ones for documents too small to fill the top-k."""
        return self.num_routed_docs + top_k

    def _level_weights(self, level: str, mode: LevelMode, script: QueryScript) -> tuple[float, float]:
        """(dense, lexical) fusion weights of one level for the query's script."""
        if mode == LevelMode.VECTOR:
            return (1.0, 0.0)
        if mode == LevelMode.BM25:
            return (0.0, 1.0)
        calibration = self._calibration.get(level)
        found = calibration.weights_for(script) if calibration else None
        if not found or not any(w > 0 for w in found):
            return EQUAL_WEIGHTS
        return (float(found[0]), float(found[1]))

    def _document_weight(self, script: QueryScript) -> float:
        """``document_weight``, except 0 for a query in a script the chunks have no
        text in: routing a question by documents in another language misleads
        more than it helps (XQuAD English->Chinese nDCG@10 0.818 with the
        documents' evidence, 0.848 without; Chinese->English 0.761 and 0.819;
        docs/BENCHMARKS.md, "Cross-lingual"), while its chunks are still found
        by the dense search that reads both."""
        calibration = self._calibration.get("chunks")
        if calibration is not None and calibration.lacks_text_in(script):
            return 0.0
        return self.document_weight

    # ------------------------------------------------------------ per call
    def _resolve(self, query_bundle: QueryBundle) -> Call:
        return resolve_call(
            query_bundle,
            filters=self.filters,
            filter_policy=self.filter_policy,
            top_k=self.similarity_top_k,
            vocabulary=self.index.filter_vocabulary,
            unknown_filter_key=self.unknown_filter_key,
        )

    def _plan(self, call: Call, embedding: list[float] | None) -> Plan:
        summary_filters = relax_to_keys(call.filters, self.index.document_keys)
        script = query_script(call.bundle.query_str)
        return Plan(
            call=call,
            summary_bundle=call.child_bundle(
                filters=summary_filters, top_k=self.document_depth(call.top_k), embedding=embedding
            ),
            chunk_bundle=call.child_bundle(embedding=embedding if self.index.chunk_index is not None else None),
            chunk_filters=call.filters,
            summary_filters=summary_filters,
            document_weights=self._level_weights("documents", self.summary_mode, script),
            chunk_weights=self._level_weights("chunks", self.chunk_mode, script),
            document_weight=self._document_weight(script),
        )

    # ------------------------------------------------------------ the cache
    def _results_key(self, level: str, call: Call) -> str | None:
        """The cache key of this call's results (call under the index's read lock): the index's
        content, the exact query, the filters in force, ``top_k`` and every setting; ``None``
        when results are not cached, or depend on retrievers whose data is not versioned
        (a ``retriever_dict``)."""
        if self.cache is None or not self.cache.results or self.index.retriever_dict:
            return None
        bundle = call.bundle
        given = bundle.embedding  # a caller's own vector, not one made from the text
        parts = {
            "retriever": type_name(type(self)),
            "settings": self._settings(),
            "calibration": {level: found.ranking() for level, found in self._calibration.items()},
            "generation": self.index.cache_generation,
            "query": bundle.query_str,
            "embedding_strs": list(bundle.embedding_strs),
            "embedding": None if given is None else hashlib.sha256(json.dumps(list(given)).encode()).hexdigest(),
            "filters": None if call.filters is None else call.filters.model_dump(mode="json"),
            "top_k": call.top_k,
        }
        return self.cache.key(level, parts)

    def _checked_embedding(self, embedding: list[float] | None) -> list[float] | None:
        if embedding is not None:
            dim = store_dimension(self.index.summary_index.vector_store)
            check_vectors(embedding, embed_model_name(self.index.embed_model), "the query", dim)
        return embedding

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return steps.run(self._answer("results", query_bundle, self._search))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await steps.arun(self._answer("results", query_bundle, self._search))

    def _answer(self, level: str, query_bundle: QueryBundle, searching: Searching[T]) -> steps.Steps[T]:
        """The cached answer of the call at ``level``, else the search's, then kept. Looked up
        under the key of the index as it is now; kept under the key taken with the search. An
        index in PostgreSQL first catches up with what other processes committed."""
        if self.index.database is not None:
            yield (_FollowDatabase(self.index),)
        call = self._resolve(query_bundle)
        lookup = None
        if self.cache is not None:
            (lookup,) = yield (_ResultsKey(self, level, call),)
        return (yield from cached(self.cache, level, lookup, lambda: self._searched(level, call, searching)))

    def _searched(self, level: str, call: Call, searching: Searching[T]) -> steps.Steps[tuple[str | None, T]]:
        embedding = yield from query_vector(self.cache, self.index.embed_model, call.bundle)
        (answer,) = yield (_UnderReadLock(self, level, call, searching, self._checked_embedding(embedding)),)
        return answer

    def _search(self, plan: Plan, levels: Levels) -> search.Search[list[NodeWithScore]]:
        if self.score_mode == ScoreMode.FUSED:
            return search.fused_search(self, plan, levels)
        return search.routed_search(self, plan, levels)

    # ------------------------------------------------------ document results
    def retrieve_documents(self, str_or_query_bundle: str | QueryBundle) -> list[DocumentWithScore]:
        """The documents a query routes to, best first, with the evidence that routed them.

        Each result's node is the document's summary ``IndexNode``
        (``index_id`` = document id) and its score the fused routing score;
        ``evidence`` gives the dense and lexical scores behind it. All
        documents either search returned are listed (at least
        ``num_routed_docs`` when there are that many); per-call filters of a
        :class:`FilteredQueryBundle` apply as in :meth:`retrieve`.
        """
        return steps.run(self._answer("documents", as_query_bundle(str_or_query_bundle), self._document_search))

    async def aretrieve_documents(self, str_or_query_bundle: str | QueryBundle) -> list[DocumentWithScore]:
        """Async :meth:`retrieve_documents` (the same results; never blocks the loop)."""
        return await steps.arun(self._answer("documents", as_query_bundle(str_or_query_bundle), self._document_search))

    def _document_search(self, plan: Plan, levels: Levels) -> search.Search[list[DocumentWithScore]]:
        return search.document_search(self, plan, levels)


@dataclass(frozen=True)
class _FollowDatabase:
    """Catch up with the index's database (one round trip; async: off the event loop)."""

    index: RecursiveIndex

    def run(self) -> None:
        self.index.follow_database()

    async def arun(self) -> None:
        await asyncio.to_thread(self.index.follow_database)


@dataclass(frozen=True)
class _ResultsKey:
    """The key of a call's results, taken under the index's read lock (async: without
    blocking the event loop while a writer holds it)."""

    owner: RecursiveSummaryRetriever
    level: str
    call: Call

    def run(self) -> str | None:
        with self.owner.index.state_lock.reading():
            return self.owner._results_key(self.level, self.call)

    async def arun(self) -> str | None:
        async with self.owner.index.state_lock.areading():
            return self.owner._results_key(self.level, self.call)


@dataclass(frozen=True)
class _UnderReadLock:
    """The search of one call and the key to keep its answer under, taken together while
    the index cannot change (async: after the levels are built off the loop)."""

    owner: RecursiveSummaryRetriever
    level: str
    call: Call
    searching: Searching[Any]
    embedding: list[float] | None

    def _started(self) -> tuple[str | None, steps.Steps[Any]]:
        owner = self.owner
        return owner._results_key(self.level, self.call), self.searching(
            owner._plan(self.call, self.embedding), owner._levels()
        )

    def run(self) -> tuple[str | None, Any]:
        index = self.owner.index
        with index.state_lock.reading():
            key, search = self._started()
            # an index in PostgreSQL: a step's searches wait on the server, so at once (async: always)
            database = index.database
            return key, steps.run(search, database.concurrent_reads() if database is not None else None)

    async def arun(self) -> tuple[str | None, Any]:
        async with self.owner.index.state_lock.areading():
            await self.owner._aprepare()
            key, search = self._started()
            return key, await steps.arun(search)


RecursiveIndex.retriever_class = RecursiveSummaryRetriever  # RecursiveIndex.as_retriever
