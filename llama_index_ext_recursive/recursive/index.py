"""The summary index: documents -> summaries, chunks and embeddings, kept in two stores.

``RecursiveIndex`` is to :class:`RecursiveSummaryRetriever` what
``VectorStoreIndex`` is to ``VectorIndexRetriever`` upstream: it owns the data
(one summary store, one chunk store, a record per document), builds it
(:meth:`from_documents`, :meth:`from_nodes`, :meth:`from_index`,
:meth:`from_retriever_dict`), updates it (:meth:`add_documents`,
:meth:`add_nodes`, :meth:`delete_document`), checks its links and persists it
(:mod:`~llama_index_ext_recursive.recursive.persist`). The retriever holds the
query settings and searches it; several retrievers may share one index.

Storage: by default each level is a ``VectorStoreIndex`` over a
:class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore` with
its nodes in a docstore. Pass a
:class:`~llama_index_ext_recursive.stores.columnar_store.ColumnarVectorStore`
created with a ``tokenizer`` for a level (``chunk_vector_store=``,
``summary_vector_store=``), and that level's nodes, vectors, metadata and BM25
terms live in the store alone, on disk and memory-mapped: its docstore is a
view of the store (:class:`~llama_index_ext_recursive.stores.columnar_docstore.ColumnarDocumentStore`)
and its BM25 level asks the store (:class:`~llama_index_ext_recursive.retrievers.store_bm25.StoreBM25Retriever`),
so no node is held in memory per chunk (issue 25).

Updates prepare everything that can fail (chunking, summarizing, embedding)
before they change anything, then swap the new nodes in under the write lock
(:attr:`state_lock`); searches hold the read lock, so they see the index
before or after an update, never a mix. :attr:`generation` counts the swaps,
so a retriever rebuilds what it derived from the nodes (BM25 levels) only
when they changed.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import uuid
from collections import ChainMap, deque
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, Document, IndexNode, MetadataMode, TransformComponent
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from typing_extensions import Unpack  # typing's from Python 3.11

from llama_index_ext_recursive.columnar.rows import RowStore
from llama_index_ext_recursive.embedding_cache import CachedEmbedding, as_cached, check_embedding_cache
from llama_index_ext_recursive.filters import FilterVocabulary
from llama_index_ext_recursive.models import choose_embed_model, corpus_sample, resolve_embed_model, resolve_llm
from llama_index_ext_recursive.progress import progress_bar
from llama_index_ext_recursive.recursive.build import (
    BuiltDocuments,
    ChunkContext,
    DocumentRecord,
    SummaryEmbedding,
    build_documents,
    check_new_node_ids,
    chunk_documents,
    group_nodes,
    node_batches,
    resolve_transformations,
    stream_chunks,
    version_hash,
)
from llama_index_ext_recursive.recursive.evidence import document_identity, document_text
from llama_index_ext_recursive.recursive.links import LinkError, check_links
from llama_index_ext_recursive.recursive.records import (
    READ_WHEN_ASKED,
    PostgresRecords,
    StoredRecords,
    published_records,
)
from llama_index_ext_recursive.recursive.summaries import StoredSummaries
from llama_index_ext_recursive.recursive.summarize import ExtractiveSummarizer, Summarizer, SummaryCache
from llama_index_ext_recursive.recursive.vectors import attach_embeddings, embed_summaries, with_stored_embeddings
from llama_index_ext_recursive.retrievers.store_facts import store_dimension
from llama_index_ext_recursive.rwlock import ReadWriteLock
from llama_index_ext_recursive.stores.columnar_docstore import ColumnarDocumentStore
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.stores.docstore import LinearDocumentStore
from llama_index_ext_recursive.stores.numpy_store import vector_index
from llama_index_ext_recursive.stores.protocol import LevelStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer
from llama_index_ext_recursive.validation import check_count, check_keywords, closest, json_nodes
from llama_index_ext_recursive.workers import tokenize_texts

if TYPE_CHECKING:  # the postgres extra is optional: imported by the stores that use it
    from llama_index.core.query_engine import RetrieverQueryEngine

    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore

logger = logging.getLogger(__name__)

CHECKPOINT_NODES = 100_000  # chunks a checkpointed streaming build stores between two checkpoints
CHANGES_KEPT = 256  # updates whose documents the index remembers (levels_for updates with them)


class FromNodesOptions(TypedDict, total=False):
    """The keywords of :meth:`RecursiveIndex.from_nodes` besides ``nodes`` (and ``doc_id_key``
    and ``show_progress``, which :meth:`RecursiveIndex.from_documents` names itself), so
    ``from_documents(documents, **options)`` shows them to IDEs and type checkers;
    ``tests/test_recursive_index.py`` keeps the two lists equal."""

    embed_model: BaseEmbedding | None
    summarizer: Summarizer | None
    summary_cache: SummaryCache | None
    summary_embedding: SummaryEmbedding | str
    chunk_context: ChunkContext | str
    chunk_vector_store: BasePydanticVectorStore | None
    summary_vector_store: BasePydanticVectorStore | None
    embedding_cache: str | Path | CachedEmbedding | None
    checkpoint: Callable[[RecursiveIndex], None] | None
    checkpoint_nodes: int
    resume: RecursiveIndex | None


class RecursiveIndex:
    """One summary store plus one chunk store, and a record per document.

    Build it with :meth:`from_documents`, :meth:`from_nodes`,
    :meth:`from_index` or :meth:`from_retriever_dict`; search it with
    :class:`~llama_index_ext_recursive.RecursiveSummaryRetriever`.

    Args:
        summary_index: index over summary ``IndexNode``s (``index_id`` = document id).
        chunk_index: index over all chunks (``ref_doc_id`` = document id).
        documents: per-document records (built by the constructors).
        retriever_dict: instead of ``chunk_index``: one retriever per document id.
        embed_model: the model the stores were embedded with (default:
            argument > ``Settings`` > bundled).
        doc_id_key: metadata key naming a chunk's document (``None``:
            ``metadata["doc_id"]`` when present, else the node's ``ref_doc_id``).
        transformations: how documents added later are chunked (default: our parser).
        summarizer: summarizer for documents added later.
        summary_cache: summaries by content, reused by updates and rebuilds.
        summary_embedding: what summaries added later are routed by
            (:class:`SummaryEmbedding`); must match how ``summary_index`` was built.
        chunk_context: what of their document chunks added later are searched
            by (:class:`ChunkContext`); must match how ``chunk_index`` was built
            (an index persisted before this setting existed was built with ``none``).
        embedding_choice: which model embedded the stores and why
            (:meth:`~llama_index_ext_recursive.models.EmbeddingChoice.to_dict`),
            kept by ``persist``; default: how ``embed_model`` was resolved.
        loaded: the stores were read back from a persisted index rather than
            built from the caller's nodes: a link that already points nowhere
            there (a previous release let a delete leave one) is logged and
            not followed, so the index still loads and can be fixed by an update.
        partial: the index is a streaming build's checkpoint (or one read back
            from it): it holds the documents indexed before the checkpoint, and
            :meth:`from_nodes` with ``resume=`` continues it.
    """

    def __init__(
        self,
        summary_index: VectorStoreIndex,
        chunk_index: VectorStoreIndex | None = None,
        documents: Mapping[str, DocumentRecord] | None = None,
        retriever_dict: Mapping[str, BaseRetriever] | None = None,
        embed_model: BaseEmbedding | None = None,
        doc_id_key: str | None = None,
        transformations: Sequence[TransformComponent] | None = None,
        summarizer: Summarizer | None = None,
        summary_cache: SummaryCache | None = None,
        summary_embedding: SummaryEmbedding | str = SummaryEmbedding.BLEND,
        chunk_context: ChunkContext | str = ChunkContext.TITLE,
        embedding_choice: Mapping[str, str] | None = None,
        loaded: bool = False,
        partial: bool = False,
    ) -> None:
        if (chunk_index is None) == (retriever_dict is None):
            raise ValueError("pass exactly one of chunk_index= or retriever_dict=")
        self.summary_index = summary_index
        self.chunk_index = chunk_index
        self.retriever_dict: dict[str, BaseRetriever] = checked_retriever_dict(retriever_dict or {})
        choice = choose_embed_model(embed_model)
        self.embed_model = choice.model
        self.embedding_choice: dict[str, str] = dict(embedding_choice or choice.to_dict())
        self.doc_id_key = doc_id_key
        self.transformations = resolve_transformations(None, transformations)
        self.summarizer = summarizer or ExtractiveSummarizer()
        self.summary_cache = summary_cache if summary_cache is not None else SummaryCache()
        self.summary_embedding = SummaryEmbedding(summary_embedding)
        self.chunk_context = ChunkContext(chunk_context)
        # a dict, or the records of a persisted columnar index, read when asked for (StoredRecords)
        self.documents: Mapping[str, DocumentRecord] = (
            documents if isinstance(documents, READ_WHEN_ASKED) else dict(documents or {})
        )
        database = self.database
        self._database_generation: int | None = None
        if database is not None and not isinstance(self.documents, PostgresRecords):
            # the records live beside the levels, written in the same transactions
            database.write_records((), {d: record.to_dict() for d, record in self.documents.items()})
            self.documents = PostgresRecords(database)
        self.summaries = self._summaries_of(self.documents)
        self._document_keys: tuple[int, set[str]] | None = None  # (generation, keys)
        self._changes: deque[tuple[int, frozenset[str]]] = deque(maxlen=CHANGES_KEPT)
        self.state_lock = ReadWriteLock()
        self.generation = 0  # bumped by every swap
        # (folder generation, self.generation) when the index was loaded from or persisted as that
        # folder generation: until the next swap, its content is that generation's (cache_generation)
        self._published_as: tuple[str, int] | None = None
        self._instance = uuid.uuid4().hex
        self._update_lock = threading.Lock()
        self._vocabulary: FilterVocabulary | None = None
        self.partial = partial
        self.validate_links(changed=() if loaded else None)

    # ------------------------------------------------------------------ build
    @classmethod
    def from_documents(
        cls,
        documents: Iterable[Document],
        *,
        node_parser: Any = None,
        transformations: Sequence[TransformComponent] | None = None,
        doc_id_key: str | None = None,
        show_progress: bool | None = None,
        **kwargs: Unpack[FromNodesOptions],
    ) -> RecursiveIndex:
        """Chunk (``node_parser=`` or ``transformations=``; else an explicitly
        set ``Settings.transformations``/``node_parser``/``chunk_size``; else
        :func:`default_node_parser`), summarize and index ``documents``.
        Other keywords (``embed_model``, ``embedding_cache``, ...) are
        :meth:`from_nodes`'s."""
        steps = resolve_transformations(node_parser, transformations)
        if _columnar_levels(kwargs.get("summary_vector_store"), kwargs.get("chunk_vector_store")):
            return cls.from_nodes(
                stream_chunks(documents, steps, doc_id_key),
                doc_id_key=doc_id_key,
                show_progress=show_progress,
                transformations=steps,
                **kwargs,
            )
        documents = list(documents)
        progress = auto_progress(show_progress, len(documents))
        nodes = chunk_documents(documents, steps, doc_id_key, progress)
        return cls.from_nodes(nodes, doc_id_key=doc_id_key, show_progress=progress, transformations=steps, **kwargs)

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[BaseNode],
        *,
        doc_id_key: str | None = None,
        embed_model: BaseEmbedding | None = None,
        summarizer: Summarizer | None = None,
        summary_cache: SummaryCache | None = None,
        show_progress: bool | None = None,
        summary_embedding: SummaryEmbedding | str = SummaryEmbedding.BLEND,
        chunk_context: ChunkContext | str = ChunkContext.TITLE,
        chunk_vector_store: BasePydanticVectorStore | None = None,
        summary_vector_store: BasePydanticVectorStore | None = None,
        transformations: Sequence[TransformComponent] | None = None,
        embedding_cache: str | Path | CachedEmbedding | None = None,
        checkpoint: Callable[[RecursiveIndex], None] | None = None,
        checkpoint_nodes: int = CHECKPOINT_NODES,
        resume: RecursiveIndex | None = None,
    ) -> RecursiveIndex:
        """Index pre-chunked ``nodes`` grouped by document (see ``doc_id_key``);
        nodes that carry embeddings are not embedded again.

        ``chunk_context``: what of its document each chunk is searched by
        (:class:`~llama_index_ext_recursive.recursive.build.ChunkContext`;
        default ``title``: the document's title is embedded and BM25-indexed
        with each chunk that does not show it already).

        ``embedding_cache``: a SQLite file (e.g. :func:`~llama_index_ext_recursive.embedding_cache.default_cache_path`)
        or a :class:`~llama_index_ext_recursive.embedding_cache.CachedEmbedding`
        of the chosen model, so that texts embedded before (by this model, in
        any index or build) are not embedded again, here and in
        :meth:`add_documents`/:meth:`add_nodes`. A cache created from a path
        does not keep queries. The index records the inner model's name, and
        a persisted index loads back with the plain model.

        With a :class:`ColumnarVectorStore` for both levels the build streams:
        ``nodes`` (a list, or a generator that yields each document's nodes
        together) are summarized, embedded and stored about
        :data:`~.build.STREAM_NODES` at a time, so memory holds one batch of
        nodes, not the corpus; the bundled model, when one is chosen, is
        chosen by the first batch. Such a build can be checkpointed and resumed:

        Args:
            checkpoint: called with the index built so far (``partial`` set) each
                time ``checkpoint_nodes`` more chunks were stored, after the
                stores merged their segments: persisting it there
                (``RecursiveSummaryRetriever.from_nodes(persist_dir=...)`` does)
                writes the rows and vectors to disk, so memory stays bounded,
                and a killed build resumes from the last one. Only a streaming
                build calls it.
            checkpoint_nodes: chunks stored between two checkpoints.
            resume: a ``partial`` index read back from a checkpoint: the build
                continues it (its stores and model), skipping the documents it
                holds; one whose content changed since is refused.
        """
        check_count("checkpoint_nodes", checkpoint_nodes, minimum=1)
        chunk_context = ChunkContext(chunk_context)
        if resume is not None and not resume.partial:
            raise ValueError(
                "resume= continues an interrupted streaming build, but this index is complete: "
                "add documents to it with add_documents/add_nodes instead"
            )
        if resume is not None or _columnar_levels(summary_vector_store, chunk_vector_store):
            return cls._streamed(
                node_batches(nodes, doc_id_key),
                doc_id_key=doc_id_key,
                embed_model=embed_model,
                summarizer=summarizer or ExtractiveSummarizer(),
                summary_cache=summary_cache if summary_cache is not None else SummaryCache(),
                show_progress=show_progress is not False,
                summary_embedding=SummaryEmbedding(summary_embedding),
                chunk_context=chunk_context,
                stores=(summary_vector_store, chunk_vector_store)  # type: ignore[arg-type]
                if _columnar_levels(summary_vector_store, chunk_vector_store)
                else None,
                transformations=transformations,
                embedding_cache=embedding_cache,
                checkpoint=checkpoint,
                checkpoint_nodes=checkpoint_nodes,
                resume=resume,
            )
        nodes = list(nodes)
        if not nodes:
            raise ValueError("no nodes to index: pass at least one node or document")
        groups = group_nodes(nodes, doc_id_key)
        progress = auto_progress(show_progress, len(groups))
        check_embedding_cache(embedding_cache)  # a file that is not a cache fails before any work
        cache = summary_cache if summary_cache is not None else SummaryCache()
        summarizer = summarizer or ExtractiveSummarizer()
        built = build_documents(groups, doc_id_key, summarizer, cache, progress, chunk_context=chunk_context)
        choice = choose_embed_model(embed_model, texts=corpus_sample(nodes))
        # the index keeps the wrapper, so updates and their summaries use the cache too
        model = as_cached(choice.model, embedding_cache)
        dim = attach_embeddings(built, model, SummaryEmbedding(summary_embedding), progress)
        embed_summaries(built, model, dim)
        return cls(
            new_index(
                built.summary_nodes,
                model,
                progress,
                summary_vector_store,
                lambda: search_texts(built.summary_nodes, built.records, built.chunk_nodes),
            ),
            new_index(built.chunk_nodes, model, progress, chunk_vector_store),
            documents=built.records,
            embed_model=model,
            doc_id_key=doc_id_key,
            transformations=transformations,
            summarizer=summarizer,
            summary_cache=cache,
            summary_embedding=summary_embedding,
            chunk_context=chunk_context,
            embedding_choice=choice.to_dict(),
        )

    @classmethod
    def _streamed(
        cls,
        batches: Iterable[dict[str, list[BaseNode]]],
        *,
        doc_id_key: str | None,
        embed_model: BaseEmbedding | None,
        summarizer: Summarizer,
        summary_cache: SummaryCache,
        show_progress: bool,
        summary_embedding: SummaryEmbedding,
        chunk_context: ChunkContext,
        stores: tuple[LevelStore, LevelStore] | None,
        transformations: Sequence[TransformComponent] | None,
        embedding_cache: str | Path | CachedEmbedding | None,
        checkpoint: Callable[[RecursiveIndex], None] | None,
        checkpoint_nodes: int,
        resume: RecursiveIndex | None,
    ) -> RecursiveIndex:
        """Build over columnar stores one batch of documents at a time (see :meth:`from_nodes`).

        The index exists from the first batch on (``partial``), and each batch
        is appended to it as an update appends a new document, so a checkpoint
        is an index like any other and a resumed build goes on appending.
        """
        check_embedding_cache(embedding_cache)  # a file that is not a cache fails before any work
        index = resume
        if index is not None:
            index.embed_model = as_cached(index.embed_model, embedding_cache)
            # the summaries of the documents to come join the index's own cache, which it persists
            for key, text in summary_cache.entries.items():
                index.summary_cache.entries.setdefault(key, text)
            summary_cache = index.summary_cache
            logger.info("resuming a streaming build: %d documents indexed before", len(index.documents))
        dim: int | None = None
        since_checkpoint = 0
        levels = stores or (resume.summary_index.vector_store, resume.chunk_index.vector_store)  # type: ignore[union-attr]
        workers = max(store.workers for store in levels if isinstance(store, LevelStore))
        with (
            contextlib.ExitStack() as deferred,
            progress_bar(desc="Indexing documents", unit="doc", disable=not show_progress) as bar,
        ):
            for store in levels:  # work done once for every row at the end (columnar training, HNSW)
                if isinstance(store, LevelStore):
                    deferred.enter_context(store.bulk_load())
            for groups in batches:
                if resume is not None:
                    groups = resume.not_indexed(groups)
                    if not groups:
                        continue
                elif index is not None:  # an id of an earlier batch's document would overwrite its chunk
                    check_new_node_ids(groups, index._owners([n.node_id for ns in groups.values() for n in ns]))
                context = index.chunk_context if index is not None else chunk_context  # a resume: as built
                built = build_documents(
                    groups, doc_id_key, summarizer, summary_cache, workers=workers, chunk_context=context
                )
                if index is None:
                    assert stores is not None  # from_nodes streams only over two columnar stores or a resume
                    choice = choose_embed_model(embed_model, texts=corpus_sample(built.chunk_nodes))
                    model = as_cached(choice.model, embedding_cache)
                    index = cls(
                        store_view_index(stores[0], model),
                        store_view_index(stores[1], model),
                        embed_model=model,
                        doc_id_key=doc_id_key,
                        transformations=transformations,
                        summarizer=summarizer,
                        summary_cache=summary_cache,
                        summary_embedding=summary_embedding,
                        chunk_context=chunk_context,
                        embedding_choice=choice.to_dict(),
                        partial=True,
                    )
                dim = attach_embeddings(built, index.embed_model, index.summary_embedding, dim=dim)
                embed_summaries(built, index.embed_model, dim)
                with index.state_lock.writing():
                    index._swap(remove=[], add=built)
                bar.update(len(built.records))
                since_checkpoint += len(built.chunk_nodes)
                if checkpoint is not None and since_checkpoint >= checkpoint_nodes:
                    index._merge_segments()
                    checkpoint(index)
                    since_checkpoint = 0
        assert index is not None  # resumed, or node_batches yielded a batch (it raises on an empty stream)
        index._merge_segments(retrain=True)
        index.validate_links()  # the batches' links were stored before the documents they name
        index.partial = False
        return index

    def _merge_segments(self, retrain: bool = False) -> None:
        """Merge the columnar stores' small segments (one per batch since the last merge: a
        query would visit each) and, at the end of a build, train their approximate step, once
        and on every row (the build deferred it: :meth:`ColumnarVectorStore.training_deferred`)."""
        for level in (self.summary_index, self.chunk_index):
            store = level.vector_store if level is not None else None
            if isinstance(store, ColumnarVectorStore):
                store.merge_segments(final=retrain)
                if retrain:
                    store.retrain_vectors()

    def not_indexed(self, groups: Mapping[str, list[BaseNode]]) -> dict[str, list[BaseNode]]:
        """The documents of ``groups`` this index does not hold, for a resumed build.

        Raises:
            ValueError: a document it holds whose content changed since, or a
                chunk id it holds under another document (:func:`check_new_node_ids`).
        """
        fresh: dict[str, list[BaseNode]] = {}
        for doc_id, chunks in groups.items():
            record = self.documents.get(doc_id)
            if record is None:
                fresh[doc_id] = chunks
                continue
            text = "\n".join(c.get_content(metadata_mode=MetadataMode.NONE) for c in chunks)
            if version_hash(text, chunks) != record.content_hash:
                raise ValueError(
                    f"document {doc_id!r} changed since the interrupted build indexed it: finish the build "
                    "with the documents as they were, then update it with add_documents, or build into a new folder"
                )
        check_new_node_ids(fresh, self._owners([c.node_id for chunks in fresh.values() for c in chunks]))
        return fresh

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        *,
        doc_id_key: str | None = None,
        show_progress: bool | None = None,
        transformations: Sequence[TransformComponent] | None = None,
        **kwargs: Unpack[FromNodesOptions],
    ) -> RecursiveIndex:
        """Build over the chunks of an existing ``VectorStoreIndex``, reusing their
        stored embeddings (only the summaries are embedded).

        The index's nodes are copied, never changed; documents are told apart
        by ``ref_doc_id`` (or ``doc_id_key=``). Queries must be embedded by the
        model the index was built with, so that model is the default.
        """
        if not isinstance(index, VectorStoreIndex):
            raise TypeError(
                f"from_index expects a VectorStoreIndex, got {type(index).__name__}; use from_nodes(...) for nodes"
            )
        nodes = list(index.docstore.docs.values())
        if not nodes:
            raise ValueError(
                "the index's docstore holds no nodes (its vector store keeps the text): "
                "pass the nodes to from_nodes(...) instead"
            )
        kwargs["embed_model"] = kwargs.get("embed_model") or getattr(index, "_embed_model", None)
        return cls.from_nodes(
            with_stored_embeddings(index, nodes),
            doc_id_key=doc_id_key,
            show_progress=show_progress,
            transformations=transformations,
            **kwargs,
        )

    @classmethod
    def from_retriever_dict(
        cls,
        summary_nodes: Sequence[IndexNode],
        retriever_dict: Mapping[str, BaseRetriever],
        embed_model: BaseEmbedding | None = None,
    ) -> RecursiveIndex:
        """Upstream ``RecursiveRetriever``'s setup: summary ``IndexNode``s plus
        ``retriever_dict`` (an ``IndexNode`` whose ``obj`` is a retriever may
        stand in for its entry)."""
        retrievers = checked_retriever_dict(retriever_dict)
        plain: list[IndexNode] = []
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
        return cls(new_index(plain, model, False), retriever_dict=retrievers, embed_model=model)

    # ------------------------------------------------------------------ use
    # RecursiveSummaryRetriever, set by its module: it builds on this one, so this module
    # cannot import it (the layers of recursive/ import downward only)
    retriever_class: ClassVar[Callable[..., BaseRetriever] | None] = None

    def as_retriever(self, **kwargs: Any) -> BaseRetriever:
        """A :class:`~llama_index_ext_recursive.RecursiveSummaryRetriever` over this index, as
        upstream's ``index.as_retriever(similarity_top_k=...)``; ``kwargs`` are its
        constructor's (query settings; the index keeps the data). The retriever
        shares this index: documents added through either are seen by both.
        """
        make = self._retriever_class()
        check_keywords([make], kwargs, "RecursiveIndex.as_retriever")
        return make(self, **kwargs)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
        """Upstream's ``RetrieverQueryEngine`` answering from :meth:`as_retriever`'s results.

        Args:
            llm: the LLM that writes the answer (an ``LLM`` or anything
                upstream's ``resolve_llm`` accepts); default: an explicitly set
                ``Settings.llm``. Without either this raises, naming both: it
                never falls back to upstream's default (OpenAI).
            **kwargs: the retriever's constructor keywords (``similarity_top_k``,
                ``filters``, ...) and ``RetrieverQueryEngine.from_args``'s
                (``response_mode``, ``node_postprocessors``, ...); one neither
                takes is refused, naming the closest.
        """
        from llama_index.core.query_engine import RetrieverQueryEngine

        make = self._retriever_class()
        check_keywords([make, RetrieverQueryEngine.from_args], kwargs, "RecursiveIndex.as_query_engine")
        own = set(inspect.signature(make).parameters)
        answering = resolve_llm(
            llm,
            needed_for="as_query_engine (an LLM writes the answer)",
            offline_alternative="use as_retriever() to retrieve without an LLM",
        )
        retriever = self.as_retriever(**{k: v for k, v in kwargs.items() if k in own})
        # the callback manager traces both, as upstream's as_query_engine passes it to both
        engine_kwargs = {k: v for k, v in kwargs.items() if k not in own or k == "callback_manager"}
        return RetrieverQueryEngine.from_args(retriever, llm=answering, **engine_kwargs)

    @classmethod
    def _retriever_class(cls) -> Callable[..., BaseRetriever]:
        if cls.retriever_class is None:  # the package's __init__ imports the retriever's module
            raise RuntimeError("import llama_index_ext_recursive before asking an index for a retriever")
        return cls.retriever_class

    # ------------------------------------------------------------------ state
    @property
    def docstore(self) -> BaseDocumentStore | None:
        """The chunk docstore (``None`` for a ``retriever_dict`` setup)."""
        return self.chunk_index.docstore if self.chunk_index is not None else None

    @property
    def doc_ids(self) -> list[str]:
        return list(self.retriever_dict) if self.retriever_dict else list(self.documents)

    def summary_node_id(self, doc_id: str) -> str | None:
        """The id of document ``doc_id``'s summary node (``None``: no such document), from its
        record where it has one, so no summary is read for it."""
        record = self.documents.get(doc_id)
        if record is not None:
            return record.summary_node_id
        summary = self.summaries.get(doc_id)  # a retriever_dict setup keeps no records
        return None if summary is None else summary.node_id

    @property
    def filter_vocabulary(self) -> FilterVocabulary:
        """Metadata keys (and value kinds) of the indexed chunks, which filters are
        checked against; empty for a ``retriever_dict`` setup, whose children
        check their own."""
        vocabulary = self._vocabulary
        if vocabulary is None:
            store = self.chunk_index.vector_store if self.chunk_index is not None else None
            if isinstance(store, LevelStore):  # from its columns, without reading a node
                vocabulary = store.filter_vocabulary()
            else:
                vocabulary = FilterVocabulary.from_nodes(
                    self.docstore.docs.values() if self.docstore is not None else []
                )
            self._vocabulary = vocabulary
        return vocabulary

    def _summaries_of(self, documents: Mapping[str, DocumentRecord]) -> Mapping[str, IndexNode]:
        """Each document's summary: read from a columnar summary store when asked for
        (:class:`~.summaries.StoredSummaries`; its records name them), else every summary
        node read and checked now."""
        store = self.summary_index.vector_store
        if isinstance(store, LevelStore) and self.chunk_index is not None:
            return StoredSummaries(documents, store)
        docstore = self.summary_index.docstore
        summaries: dict[str, IndexNode] = {}
        stored: Iterable[BaseNode]
        if isinstance(docstore, ColumnarDocumentStore):  # the store holds them, not the index struct
            stored = docstore.docs.values()
        else:
            stored = (docstore.get_node(node_id) for node_id in self.summary_index.index_struct.nodes_dict.values())
        for node in stored:
            node_id = node.node_id
            if not isinstance(node, IndexNode):
                raise LinkError(
                    f"summary node {node_id!r} is a {type(node).__name__}, not an IndexNode: "
                    "summaries must name their document with index_id"
                )
            other = summaries.get(node.index_id)
            if other is not None:  # one would silently replace the other
                raise LinkError(
                    f"summary nodes {other.node_id!r} and {node.node_id!r} both have index_id "
                    f"{node.index_id!r}: give each document one summary (merge them, or fix the index_id)"
                )
            summaries[node.index_id] = node
        return summaries

    @property
    def document_keys(self) -> set[str]:
        """Keys that filters may be checked on at the summary level (worked out once per
        state of the index, when a filtered query first asks).

        A key qualifies when it is document-level in every document: a key
        whose value varies between one document's chunks is missing from that
        summary, and filtering summaries on it would hide matching chunks.
        """
        generation, summaries, documents = self.generation, self.summaries, self.documents
        known = self._document_keys
        if known is not None and known[0] == generation:
            return known[1]
        if isinstance(summaries, StoredSummaries):  # from the stores' columns and SQLite, no record read
            keys = summaries.metadata_keys()
        else:
            keys = {k for s in summaries.values() for k in s.metadata}
        if isinstance(documents, READ_WHEN_ASKED):
            keys -= documents.varying_keys()
        else:
            for record in documents.values():
                keys -= set(record.varying_keys)
        self._document_keys = (generation, keys)
        return keys

    def changed_since(self, generation: int) -> set[str] | None:
        """The documents added, replaced or deleted since ``generation`` (``None``: it is older
        than the last :data:`CHANGES_KEPT` changes, so they are not known one by one)."""
        if generation == self.generation:
            return set()
        changes = list(self._changes)
        if not changes or changes[0][0] > generation + 1:
            return None
        return {doc_id for after, doc_ids in changes if after > generation for doc_id in doc_ids}

    def records_published(self, rows: Path, generation: int, written: Mapping[str, DocumentRecord | None]) -> None:
        """Read the records from the database ``rows`` once ``generation`` published ``written``
        (a persist's changes, :meth:`unpublished_records`): only the changes made since stay in memory."""
        with self.state_lock.writing():
            self.documents = published_records(self.documents, RowStore(rows), generation, written)
            self.summaries = _without(self.summaries, self.documents)

    def unpublished_records(self) -> dict[str, DocumentRecord | None]:
        """The records a persist into rows must write: the changes since the rows were read
        (``None``: a deleted document), or every record of an index never persisted so."""
        documents = self.documents
        if isinstance(documents, StoredRecords):
            return dict(documents.changes)
        return dict(documents)

    def validate_links(self, changed: Collection[str] | None = None) -> None:
        """Check that every ``IndexNode`` resolves and no links form a cycle.

        Raises :class:`LinkError` naming the bad id and the closest known ids.

        Args:
            changed: ``None`` checks every link strictly; ``()`` only logs links
                that point nowhere (see :func:`~.links.check_links`).
        """
        check_links(self.summaries, self.documents, self.doc_ids, self.docstore, changed=changed)

    # ------------------------------------------------------------------ updates
    def require_stores(self, action: str) -> VectorStoreIndex:
        if self.chunk_index is None:
            raise NotImplementedError(
                f"{action} needs the chunk store built by from_documents/from_nodes; "
                "a retriever_dict setup holds opaque retrievers"
            )
        return self.chunk_index

    def add_documents(self, documents: Iterable[Document], show_progress: bool | None = None) -> list[str]:
        """Add or update documents (chunked as the index was); returns the ids (re)indexed."""
        self.require_stores("add_documents")
        nodes = chunk_documents(list(documents), self.transformations, self.doc_id_key)
        return self.add_nodes(nodes, show_progress=show_progress)

    def add_nodes(self, nodes: Iterable[BaseNode], show_progress: bool | None = None) -> list[str]:
        """Add or update pre-chunked nodes; unchanged documents are left alone.

        Everything that can fail runs first, on copies; the prepared nodes are
        then swapped in under the write lock, so a failure leaves the index as it was.
        """
        chunk_index = self.require_stores("add_nodes")
        with self._update_lock:  # one update at a time; readers go on meanwhile
            groups = group_nodes(list(nodes), self.doc_id_key)
            current = self.documents  # only updates (serialised here) replace it
            check_new_node_ids(groups, self._owners([n.node_id for nodes in groups.values() for n in nodes]))
            progress = auto_progress(show_progress, len(groups))
            built = build_documents(
                groups, self.doc_id_key, self.summarizer, self.summary_cache, progress, chunk_context=self.chunk_context
            )
            changed = []
            for doc_id, record in built.records.items():
                existing = current.get(doc_id)
                if existing is not None and existing.content_hash == record.content_hash:
                    logger.info("document %r unchanged; not re-indexed", doc_id)
                    continue
                changed.append(doc_id)
            if not changed:
                return []
            keep = set(changed)
            built = BuiltDocuments(
                [s for s in built.summary_nodes if s.index_id in keep],
                [n for n in built.chunk_nodes if n.ref_doc_id in keep],
                {d: r for d, r in built.records.items() if d in keep},
            )
            dim = attach_embeddings(
                built,
                self.embed_model,
                self.summary_embedding,
                progress,
                dim=store_dimension(chunk_index.vector_store),
            )
            embed_summaries(built, self.embed_model, dim)
            # read only (by check_links): no summary of the index is read or copied
            summaries = ChainMap(
                {s.index_id: s for s in built.summary_nodes}, cast("MutableMapping[str, IndexNode]", self.summaries)
            )
            documents = _with_changes(current, (), built.records)
            replaced = [d for d in changed if d in current]
            try:
                check_links(
                    summaries,
                    documents,
                    list(documents),
                    self.docstore,
                    {n.node_id: n for n in built.chunk_nodes},
                    removed={c for d in replaced for c in current[d].chunk_ids},
                    changed=changed,
                )
            except LinkError as exc:
                if not replaced:
                    raise
                raise LinkError(
                    f"after updating document(s) {replaced}: {exc}; if it pointed to a chunk of the "
                    "old version, keep that chunk id in the new version or update the linking "
                    "document in the same call"
                ) from None
            with self.state_lock.writing():
                self._swap(remove=[current[d] for d in changed if d in current], add=built)
        return changed

    def _owners(self, node_ids: list[str]) -> dict[str, str]:
        """The document of each of ``node_ids`` that is indexed as a chunk: a columnar store is
        asked for those ids alone (each stored chunk's ``ref_doc_id`` is its document), any
        other index maps every chunk of every record."""
        store = self.chunk_index.vector_store if self.chunk_index is not None else None
        if isinstance(store, LevelStore):
            refs = store.ref_doc_ids(node_ids)
            return {node_id: ref or "" for node_id, ref in zip(node_ids, refs, strict=True) if ref is not None}
        return {c: r.doc_id for r in self.documents.values() for c in r.chunk_ids}

    def delete_document(self, doc_id: str) -> None:
        """Remove one document's summary and chunks.

        An integer id is the document whose id it prints as: ids read from
        metadata (``doc_id=5``) are kept as strings.
        """
        self.require_stores("delete_document")
        if isinstance(doc_id, int) and not isinstance(doc_id, bool):
            doc_id = str(doc_id)
        if not isinstance(doc_id, str):
            raise TypeError(f"doc_id must be a string, got {type(doc_id).__name__} {doc_id!r}")
        with self._update_lock:
            record = self.documents.get(doc_id)
            if record is None:
                raise KeyError(f"no document {doc_id!r} ({closest(doc_id, list(self.documents))})")
            rest = _with_changes(self.documents, [doc_id], {})
            try:  # a link left pointing at it would fail every later update and query
                check_links(
                    _without(self.summaries, rest),
                    rest,
                    list(rest),
                    self.docstore,
                    removed={doc_id, *record.chunk_ids},
                    changed=(),
                )
            except LinkError as exc:
                raise LinkError(
                    f"deleting document {doc_id!r} would leave a link pointing nowhere: {exc}; delete or "
                    "update the linking document first (or delete both)"
                ) from None
            with self.state_lock.writing():
                self._swap(remove=[record], add=None)

    @property
    def database(self) -> PostgresIndexStore | None:
        """The PostgreSQL index both levels belong to (``None``: other storage): its changes are
        transactions over both levels and the records, and other processes share it."""
        chunk_store = self.chunk_index.vector_store if self.chunk_index is not None else None
        owner = getattr(chunk_store, "index_store", None)
        return (
            owner
            if owner is not None and getattr(self.summary_index.vector_store, "index_store", None) is owner
            else None
        )

    def follow_database(self) -> None:
        """Catch up with changes other processes committed to the index's database: when its
        generation moved, what this process derived from the old state (the filter keys, the
        levels) is dropped and the generation changes here too. One round trip; nothing to do
        for other storage."""
        database = self.database
        if database is None:
            return
        now = database.generation
        if now == self._database_generation:
            return
        with self.state_lock.writing():
            self._database_generation = now
            self.documents = PostgresRecords(database)  # views that keep nothing read before
            self.summaries = _without(self.summaries, self.documents)
            self._vocabulary = None
            self._document_keys = None
            self.generation += 1  # levels_for rebuilds: the changes are not known here
        _ = self.filter_vocabulary  # read here, where a query calls this: off the event loop in async
        _ = self.document_keys

    @property
    def cache_generation(self) -> str:
        """Names what this index holds, for result caches (:class:`~..cache.RetrievalCache`).

        The folder generation it was loaded from or last persisted as, while it
        has not changed since: every process that opened that generation holds
        the same content and may share cached results. After a change (an add,
        delete or update not yet persisted) it is this instance's own name and
        change count, which no other process and no earlier state shares.
        """
        database = self.database
        if database is not None:  # every process that follows the database shares its generations
            return f"{database.identity}:{self._database_generation}"
        published = self._published_as
        if published is not None and published[1] == self.generation:
            return published[0]
        return f"{self._instance}:{self.generation}"

    def published_as(self, folder_generation: str, generation: int) -> None:
        """The index was loaded from, or persisted as, ``folder_generation`` (a generation
        folder's unique name) while its own generation was ``generation``."""
        self._published_as = (folder_generation, generation)

    def _swap(self, remove: list[DocumentRecord], add: BuiltDocuments | None) -> None:
        """Replace ``remove``'s nodes by ``add``'s (call under the write lock).

        Only store calls happen here, on nodes already validated and embedded.
        Should a store still fail (a database connection lost), the removed
        nodes are put back, so the index keeps its previous state.
        """
        chunk_index, summary_index = self.chunk_index, self.summary_index
        assert chunk_index is not None
        database = self.database
        if database is not None:
            self._swap_in_database(database, remove, add)
            return
        saved = _saved_nodes(chunk_index, [c for r in remove for c in r.chunk_ids])
        saved_summaries = _saved_nodes(summary_index, [r.summary_node_id for r in remove])
        try:
            for record in remove:
                chunk_index.delete_nodes(record.chunk_ids, delete_from_docstore=True)
                summary_index.delete_nodes([record.summary_node_id], delete_from_docstore=True)
            if add is not None:
                insert_documents(summary_index, chunk_index, add)
        except Exception:
            logger.exception("update failed in the store; restoring the previous state")
            if add is not None:
                _delete_quietly(chunk_index, [n.node_id for n in add.chunk_nodes])
                _delete_quietly(summary_index, [n.node_id for n in add.summary_nodes])
            _delete_quietly(chunk_index, [n.node_id for n in saved])
            _delete_quietly(summary_index, [n.node_id for n in saved_summaries])
            insert_nodes(chunk_index, saved)
            insert_nodes(
                summary_index,
                saved_summaries,
                lambda: search_texts(saved_summaries, {r.doc_id: r for r in remove}, saved),  # type: ignore[arg-type]  # summary copies are IndexNodes
            )
            raise
        removed = {r.doc_id for r in remove}
        documents = _with_changes(self.documents, removed, add.records if add is not None else {})
        summaries = _without(self.summaries, documents)
        if add is not None and not isinstance(summaries, StoredSummaries):
            summaries = {**summaries, **{s.index_id: s for s in add.summary_nodes}}
        self.documents, self.summaries = documents, summaries
        if isinstance(chunk_index.vector_store, LevelStore):
            self._vocabulary = None  # read from the store's columns again when next asked
        elif self._vocabulary is not None:
            self._vocabulary.remove_nodes(saved)
            if add is not None:
                self._vocabulary.add_nodes(add.chunk_nodes)
        self.generation += 1
        self._changes.append((self.generation, frozenset(removed | (set(add.records) if add is not None else set()))))

    def _swap_in_database(
        self, database: PostgresIndexStore, remove: list[DocumentRecord], add: BuiltDocuments | None
    ) -> None:
        """:meth:`_swap` as one transaction over both levels and the records: it commits whole
        or not at all (a failure, or a writer that dies, leaves the previous state)."""
        chunk_index, summary_index = self.chunk_index, self.summary_index
        assert chunk_index is not None
        removed = {r.doc_id for r in remove}
        with database.transaction():
            for record in remove:
                chunk_index.vector_store.delete_nodes(record.chunk_ids)
                summary_index.vector_store.delete_nodes([record.summary_node_id])
            if add is not None:
                insert_documents(summary_index, chunk_index, add)
            added = add.records if add is not None else {}
            database.write_records(removed - set(added), {d: record.to_dict() for d, record in added.items()})
        self.documents = PostgresRecords(database)
        self.summaries = _without(self.summaries, self.documents)
        self._vocabulary = None
        self._document_keys = None
        self._database_generation = database.generation
        self.generation += 1
        self._changes.append((self.generation, frozenset(removed | (set(add.records) if add is not None else set()))))


def _with_changes(
    documents: Mapping[str, DocumentRecord], removed: Iterable[str], added: Mapping[str, DocumentRecord]
) -> Mapping[str, DocumentRecord]:
    """New records: ``documents`` without ``removed``, with ``added`` (a new object: readers
    keep the records they started with)."""
    if isinstance(documents, READ_WHEN_ASKED):
        return documents.with_changes(removed, added)
    gone = set(removed)
    return {**{d: r for d, r in documents.items() if d not in gone}, **added}


def _without(summaries: Mapping[str, IndexNode], documents: Mapping[str, DocumentRecord]) -> Mapping[str, IndexNode]:
    """``summaries`` of ``documents`` only (those of a delete's remaining documents)."""
    if isinstance(summaries, StoredSummaries):
        return StoredSummaries(documents, summaries.store)
    return {d: s for d, s in summaries.items() if d in documents}


def _columnar_levels(summary_store: Any, chunk_store: Any) -> bool:
    """Both levels are a :class:`ColumnarVectorStore`: the build streams and persists as one."""
    return isinstance(summary_store, LevelStore) and isinstance(chunk_store, LevelStore)


def checked_retriever_dict(retriever_dict: Mapping[Any, Any]) -> dict[str, BaseRetriever]:
    """``retriever_dict`` keyed by document ids as ``IndexNode.index_id`` holds them: strings.

    ``{5: retriever}`` could never be routed to (an ``index_id`` is always a
    string, ``"5"``), and the error then suggested ``'5'`` for ``'5'``; an
    integer key is its digits, as :meth:`delete_document` reads an integer id.

    Args:
        retriever_dict: document id -> the retriever over that document's chunks.

    Raises:
        TypeError: a key that is not a string or an integer, or a value that is
            not a retriever.
        ValueError: two keys that name one document (``5`` and ``"5"``).
    """
    checked: dict[str, BaseRetriever] = {}
    given: dict[str, Any] = {}
    for key, child in retriever_dict.items():
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise TypeError(
                f"retriever_dict key {key!r} is a {type(key).__name__}: keys are document ids, "
                "strings as in IndexNode.index_id"
            )
        if not isinstance(child, BaseRetriever):
            raise TypeError(
                f"retriever_dict[{key!r}] is a {type(child).__name__}, not a "
                "BaseRetriever: map each document id to a retriever (e.g. index.as_retriever())"
            )
        doc_id = str(key)
        if doc_id in checked:
            raise ValueError(
                f"retriever_dict keys {given[doc_id]!r} and {key!r} both name document {doc_id!r}: keep one"
            )
        checked[doc_id], given[doc_id] = child, key
    return checked


def auto_progress(show_progress: bool | None, count: int) -> bool:
    return count >= 20 if show_progress is None else show_progress


def document_search_text(doc_id: str, record: DocumentRecord | None, summary: IndexNode, chunks: Iterable[str]) -> str:
    """What a document is found by at the summary level's BM25 (:func:`~.evidence.document_text`:
    its title, document-level metadata, summary, then its chunks' text)."""
    title = record.title if record is not None else doc_id
    return document_text(title, summary.metadata, summary.get_content(), list(chunks))


def search_texts(
    summaries: Sequence[IndexNode], records: Mapping[str, DocumentRecord], chunks: Iterable[BaseNode]
) -> list[str]:
    """:func:`document_search_text` of each summary, its chunks taken from ``chunks`` in their order."""
    texts: dict[str, list[str]] = {}
    for chunk in chunks:
        texts.setdefault(chunk.ref_doc_id or "", []).append(chunk.get_content(metadata_mode=MetadataMode.NONE))
    return [document_search_text(s.index_id, records.get(s.index_id), s, texts.get(s.index_id, [])) for s in summaries]


def insert_documents(summary_index: VectorStoreIndex, chunk_index: VectorStoreIndex, built: BuiltDocuments) -> None:
    """Add built documents' chunks and summaries to their levels.

    When both levels keep BM25 columns of one tokenizer, each chunk's text is
    tokenised once for both (:func:`level_tokens`): the summary level indexes
    every chunk's text again (:func:`document_search_text`), which doubled a
    build's tokenising.
    """
    chunk_store, summary_store = chunk_index.vector_store, summary_index.vector_store
    tokenizer = getattr(chunk_store, "tokenizer", None)
    if (
        isinstance(chunk_store, LevelStore)
        and isinstance(summary_store, LevelStore)
        and tokenizer is not None
        and summary_store.tokenizer == tokenizer
        and built.chunk_nodes
    ):
        chunk_tokens, summary_tokens = level_tokens(built, tokenizer, chunk_store.workers)
        chunk_store.add(built.chunk_nodes, lexical_tokens=chunk_tokens)
        if built.summary_nodes:
            summary_store.add(built.summary_nodes, lexical_tokens=summary_tokens)
        return
    insert_nodes(chunk_index, built.chunk_nodes)
    insert_nodes(
        summary_index, built.summary_nodes, lambda: search_texts(built.summary_nodes, built.records, built.chunk_nodes)
    )


def level_tokens(
    built: BuiltDocuments, tokenizer: MultilingualTokenizer, workers: int
) -> tuple[list[list[str]], list[list[str]]]:
    """The BM25 terms of each chunk (its embedded text, as :meth:`ColumnarVectorStore.add`
    indexes it) and of each summary (:func:`document_search_text`), every chunk's text
    tokenised once.

    Both texts are pieces joined by line breaks (a chunk: its metadata header
    then its text; a document: its identity, its summary, then its chunks'
    texts), and the tokenizer splits at whitespace before anything else, so
    the terms of the whole are the pieces' terms in order. A chunk whose
    embedded text does not end with its text (a custom template) is
    tokenised whole.
    """
    chunks = built.chunk_nodes
    texts = [c.get_content(metadata_mode=MetadataMode.NONE) for c in chunks]  # text i: chunk i's
    positions: dict[str, int] = {}

    def piece(text: str) -> int:
        """The position of ``text`` among the texts to tokenise, each distinct header,
        identity and summary added once."""
        if text not in positions:
            positions[text] = len(texts)
            texts.append(text)
        return positions[text]

    chunk_parts = []
    for row, chunk in enumerate(chunks):
        content, embedded = texts[row], chunk.get_content(metadata_mode=MetadataMode.EMBED)
        split = embedded.endswith(content)
        chunk_parts.append([piece(embedded[: len(embedded) - len(content)]), row] if split else [piece(embedded)])
    document_parts = []
    for summary in built.summary_nodes:
        record = built.records.get(summary.index_id)
        title = record.title if record is not None else summary.index_id
        document_parts.append([piece(document_identity(title, summary.metadata)), piece(summary.get_content())])
    tokens = tokenize_texts(texts, tokenizer, workers=workers)
    chunk_tokens = [[t for part in parts for t in tokens[part]] for parts in chunk_parts]
    by_document: dict[str, list[str]] = {}
    for row, chunk in enumerate(chunks):
        by_document.setdefault(chunk.ref_doc_id or "", []).extend(tokens[row])
    summary_tokens = [
        [t for part in parts for t in tokens[part]] + by_document.get(summary.index_id, [])
        for summary, parts in zip(built.summary_nodes, document_parts, strict=True)
    ]
    return chunk_tokens, summary_tokens


def insert_nodes(
    index: VectorStoreIndex, nodes: Sequence[BaseNode], lexical_texts: Callable[[], list[str]] | None = None
) -> None:
    """Add embedded ``nodes`` to one level.

    A :class:`ColumnarVectorStore` is given them directly, with the text its
    BM25 column indexes for each (``lexical_texts``; default: the node's
    own): nothing goes through the index struct or a docstore, which are
    views of the store. Any other store is filled through the index.
    """
    store = index.vector_store
    if not nodes:
        return
    if isinstance(store, LevelStore):
        texts = lexical_texts() if lexical_texts is not None and store.tokenizer is not None else None
        store.add(nodes, lexical_texts=texts)
    else:
        index.insert_nodes(nodes)


def store_view_index(store: LevelStore, embed_model: BaseEmbedding) -> VectorStoreIndex:
    """A ``VectorStoreIndex`` over ``store`` whose docstore is the store's view: the level
    as LlamaIndex code expects it, holding nothing but the store."""
    return VectorStoreIndex(
        [],
        storage_context=StorageContext.from_defaults(vector_store=store, docstore=ColumnarDocumentStore(store)),
        embed_model=embed_model,
    )


def new_index(
    nodes: Sequence[BaseNode],
    embed_model: BaseEmbedding,
    show_progress: bool,
    vector_store: BasePydanticVectorStore | None = None,
    lexical_texts: Callable[[], list[str]] | None = None,
) -> VectorStoreIndex:
    """A ``VectorStoreIndex`` over ``nodes`` (already embedded, except ``text`` summaries).

    Over a :class:`ColumnarVectorStore`, the index is a thin view: the store
    holds the nodes (:func:`insert_nodes`) and its docstore reads them from the
    store (:class:`ColumnarDocumentStore`).
    """
    if isinstance(vector_store, LevelStore):
        index = store_view_index(vector_store, embed_model)
        insert_nodes(index, json_nodes(nodes), lexical_texts)
        return index
    return vector_index(
        nodes,
        embed_model,
        vector_store=vector_store,
        docstore=LinearDocumentStore(),  # upstream's is quadratic in a document's chunks
        # upstream's bar counts the nodes it embeds: over embedded nodes it printed "0it"
        show_progress=show_progress and any(node.embedding is None for node in nodes),
        # the docstore keeps every node even when the store keeps text: link
        # checks, BM25 levels and updates read nodes from it
        store_nodes_override=True,
    )


def _saved_nodes(index: VectorStoreIndex, node_ids: list[str]) -> list[BaseNode]:
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


def _delete_quietly(index: VectorStoreIndex, node_ids: list[str]) -> None:
    try:
        index.delete_nodes(node_ids, delete_from_docstore=True)
    except Exception:  # restoring after a failure: absent ids are fine
        logger.debug("could not delete %d node(s) while restoring", len(node_ids), exc_info=True)
