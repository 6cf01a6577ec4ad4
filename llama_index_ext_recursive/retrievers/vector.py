"""Vector retrieval whose results do not depend on whether the store keeps text.

Upstream ``VectorIndexRetriever`` resolves an ids-only store's hits (FAISS,
``SimpleVectorStore``) through ``index_struct.nodes_dict`` and the docstore,
and fails as a whole when one id is stale (``KeyError``), returns ``[]`` over
an index rebuilt on a populated store (empty ``nodes_dict``), cannot filter on
FAISS (``ValueError``) and writes the query embedding into the caller's
``QueryBundle``. :class:`BackfillVectorRetriever` keeps the upstream contract
and fixes those points:

* ids resolve through ``nodes_dict`` when it maps them, else directly through
  the docstore (so a vector store plus a docstore is enough:
  :meth:`BackfillVectorRetriever.from_vector_store`);
* stale ids (in the store, gone from the docstore) are skipped, logged and
  counted (``stale_policy="skip"``) or raise :class:`StaleIdError`; more hits
  are fetched so that k come back when the store holds k valid ones, and
  every score stays with its node;
* on stores that cannot filter, filters are applied to the docstore copy of
  each hit while the search widens until k matches are found or the store is
  exhausted, so the filtered top-k is exact;
* ``IndexNode`` hits keep their objects (the index's ``object_map``), so
  recursive retrieval continues;
* the caller's ``QueryBundle`` is never modified; ``aretrieve`` uses the
  store's async path when it has one and a worker thread otherwise;
* bad input fails before the search instead of as a silently wrong answer: a
  blank query is a ``ValueError``; a filter on a key no indexed node holds,
  or with a value of the wrong type, is a
  :class:`~llama_index_ext_recursive.filters.FilterError` (or a warning, by
  ``unknown_filter_key``); a query embedding with NaN/inf or another
  dimension than the index's is refused, naming the model.

About 550 lines: the sync and async searches must widen, fetch and check in
step, so they stay side by side with the helpers they share; what the
retriever reads about stores is in :mod:`.store_facts`, the files of a saved
retriever in :mod:`.vector_persist`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, ObjectType, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive import steps
from llama_index_ext_recursive.cache.flow import query_vector
from llama_index_ext_recursive.cache.retrieval_cache import RetrievalCache, check_cache
from llama_index_ext_recursive.config import component_to_dict, init_parameters, write_config
from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    FilterVocabulary,
    UnknownFilterPolicy,
    keep_matching,
    to_filters,
)
from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError, read_index, write_index
from llama_index_ext_recursive.query import DEFAULT_TOP_K, Call, QueryCheckingRetriever, resolve_call
from llama_index_ext_recursive.results import unexplained
from llama_index_ext_recursive.retrievers.store_facts import (
    chroma_dimension,
    docstore_vocabulary,
    is_chroma,
    store_dimension,
    store_size,
    store_vocabulary,
)
from llama_index_ext_recursive.retrievers.vector_persist import (
    PERSIST_KIND,
    check_persistable,
    index_entry,
    read_index_files,
    settings_from_config,
)
from llama_index_ext_recursive.validation import check_count, check_real, check_vectors

logger = logging.getLogger(__name__)

WIDEN_FACTOR = 4  # each retry asks the store for this many times more hits


class StalePolicy(str, Enum):
    """What to do with an id the store returns but the docstore no longer has."""

    SKIP = "skip"
    RAISE = "raise"


class StaleIdError(LlamaIndexExtRecursiveError, KeyError):
    """The vector store returned ids the docstore does not hold."""


def store_can_filter(vector_store: BasePydanticVectorStore) -> bool:
    """Whether ``vector_store`` applies metadata filters itself (FAISS does not)."""
    try:
        from llama_index.vector_stores.faiss import FaissVectorStore
    except ImportError:
        return True
    return not isinstance(vector_store, FaissVectorStore)


def _has_native_aquery(vector_store: BasePydanticVectorStore) -> bool:
    return type(vector_store).aquery is not BasePydanticVectorStore.aquery


class BackfillVectorRetriever(QueryCheckingRetriever, VectorIndexRetriever):
    """A ``VectorIndexRetriever`` that survives stale ids and filters anywhere.

    Args:
        index: the ``VectorStoreIndex`` (its vector store, docstore and
            ``index_struct``); see :meth:`from_vector_store` for a store plus
            a docstore.
        similarity_top_k: number of results.
        filters: construction-time metadata filters (``MetadataFilters`` or
            ``{key: value}``), combined with a ``FilteredQueryBundle``'s
            per-call filters under ``filter_policy``.
        filter_policy: ``merge`` (AND) or ``replace``.
        stale_policy: ``skip`` (default; logged and counted in
            ``stale_ids_skipped``) or ``raise`` (:class:`StaleIdError`).
        filter_in_store: whether the store applies filters itself; ``None``
            decides by store type (FAISS cannot). When ``False``, filters
            are checked on the docstore copy of each hit.
        embed_model: query embedding model (default: the index's).
        object_map: objects for ``IndexNode`` hits by ``index_id``, added to
            the index's own ``object_map``.
        unknown_filter_key: what a filter that cannot match does, i.e. a key
            no node in the index's docstore holds (``{"categroy": ...}``) or a
            value whose type the key never holds (``year="2020"`` for an
            integer field): ``raise`` (default) a
            :class:`~llama_index_ext_recursive.filters.FilterError` naming the
            closest key, or ``warn`` (log it and return what the store
            returns); ``None`` skips the check (for a wrapping retriever that
            checked already). The keys are read from the docstore once per
            docstore and re-read when a key looks unknown, in case nodes were
            added since. When the docstore holds no nodes (a store that keeps
            text, e.g. Chroma, with ``store_nodes_override=False``), the keys
            are unknown and filters are not checked (logged once at debug).
        cache: a :class:`~llama_index_ext_recursive.cache.RetrievalCache` for
            query vectors (a repeated query is not embedded again). Results
            are not cached here: a ``VectorStoreIndex`` can change through
            the app's own calls without telling this retriever, so no key
            could name its content.
        vector_store_query_mode, alpha, sparse_top_k, hybrid_top_k,
        vector_store_kwargs: passed to the store as upstream does.
        callback_manager, verbose: as upstream.

    Raises:
        TypeError, ValueError: at construction, for a ``similarity_top_k``
            that is not an integer >= 1 (``True``, ``2.5``, ``"5"``), an
            ``alpha`` outside ``[0, 1]``, or a bad policy name.
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        similarity_top_k: int = DEFAULT_TOP_K,
        filters: FiltersLike = None,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        stale_policy: StalePolicy | str = StalePolicy.SKIP,
        filter_in_store: bool | None = None,
        embed_model: BaseEmbedding | None = None,
        object_map: dict | None = None,
        unknown_filter_key: UnknownFilterPolicy | str | None = UnknownFilterPolicy.RAISE,
        vector_store_query_mode: VectorStoreQueryMode = VectorStoreQueryMode.DEFAULT,
        alpha: float | None = None,
        sparse_top_k: int | None = None,
        hybrid_top_k: int | None = None,
        cache: RetrievalCache | None = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        check_count("similarity_top_k", similarity_top_k)
        check_cache(cache)
        check_count("sparse_top_k", sparse_top_k, allow_none=True)
        check_count("hybrid_top_k", hybrid_top_k, allow_none=True)
        if alpha is not None:
            check_real("alpha", alpha, 0.0, 1.0)
        policy = None if unknown_filter_key is None else UnknownFilterPolicy(unknown_filter_key)
        _reject_row_numbers(index)
        super().__init__(
            index,
            similarity_top_k=similarity_top_k,
            vector_store_query_mode=vector_store_query_mode,
            filters=to_filters(filters),
            alpha=alpha,
            sparse_top_k=sparse_top_k,
            hybrid_top_k=hybrid_top_k,
            callback_manager=callback_manager,
            object_map={**getattr(index, "_object_map", {}), **(object_map or {})},
            embed_model=embed_model or index._embed_model,
            verbose=verbose,
            **kwargs,
        )
        self.filter_policy = FilterPolicy(filter_policy)
        self.stale_policy = StalePolicy(stale_policy)
        self.filter_in_store = store_can_filter(self._vector_store) if filter_in_store is None else filter_in_store
        self.stale_ids_skipped = 0
        self.unknown_filter_key = policy
        self._logged_unchecked = False
        self._chroma_dimension: int | None = None
        self.cache = cache

    @classmethod
    def from_vector_store(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: BaseDocumentStore | None = None,
        embed_model: BaseEmbedding | None = None,
        **kwargs: Any,
    ) -> BackfillVectorRetriever:
        """Retrieve from an already populated store.

        Upstream's ``VectorStoreIndex.from_vector_store`` refuses stores that
        do not keep text; here the text comes from ``docstore``, which must
        then hold the nodes (``StorageContext.from_defaults(persist_dir=...)
        .docstore`` for a persisted one). ``embed_model`` defaults to the
        package's (argument > ``Settings.embed_model`` > bundled model).
        """
        if not vector_store.stores_text and docstore is None:
            raise ValueError(
                f"{type(vector_store).__name__} keeps only ids; pass docstore= with the nodes "
                "it was built from (e.g. StorageContext.from_defaults(persist_dir=...).docstore)"
            )
        storage = StorageContext.from_defaults(vector_store=vector_store, docstore=docstore)
        index = VectorStoreIndex(nodes=[], storage_context=storage, embed_model=resolve_embed_model(embed_model))
        return cls(index, **kwargs)

    # ------------------------------------------------- configuration and persistence
    def to_dict(self) -> dict[str, Any]:
        """The settings as a configuration dict (:mod:`llama_index_ext_recursive.config`),
        with the index they search (its id, store class and embedding model):
        the index is data, :meth:`from_dict` takes it again."""
        filters = self._filters
        data = component_to_dict(
            self,
            similarity_top_k=self._similarity_top_k,
            filters=filters.model_dump(mode="json") if filters is not None else None,
            filter_policy=self.filter_policy.value,
            stale_policy=self.stale_policy.value,
            filter_in_store=self.filter_in_store,
            unknown_filter_key=(self.unknown_filter_key.value if self.unknown_filter_key is not None else None),
            vector_store_query_mode=self._vector_store_query_mode.value,
            alpha=self._alpha,
            sparse_top_k=self._sparse_top_k,
            hybrid_top_k=self._hybrid_top_k,
        )
        data["index"] = index_entry(self)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], index: VectorStoreIndex, **overrides: Any) -> BackfillVectorRetriever:
        """A retriever over ``index`` with the settings of :meth:`to_dict` (``overrides`` win)."""
        return cls(index, **{**settings_from_config(init_parameters(cls, data)), **overrides})

    def persist(self, persist_dir: str | Path) -> None:
        """Write the index and the settings to the index folder ``persist_dir``
        (atomically, as every index folder of the package).

        Raises:
            TypeError: the vector store keeps its data itself (PostgreSQL,
                Chroma, ...): nothing is written.
            PersistError: ``persist_dir`` holds something else.
        """
        check_persistable(self)
        with write_index(persist_dir, PERSIST_KIND) as staging:
            self.write_files(staging)

    def write_files(self, folder: Path) -> None:
        """Write this retriever's files into ``folder`` (for a hybrid persisting its
        children): upstream's ``StorageContext`` files and ``config.json``."""
        check_persistable(self)
        self._index.storage_context.persist(persist_dir=str(folder))
        write_config(folder, self.to_dict())

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | Path,
        embed_model: BaseEmbedding | None = None,
        **overrides: Any,
    ) -> BackfillVectorRetriever:
        """Load a retriever written by :meth:`persist`.

        Args:
            persist_dir: the index folder.
            embed_model: the query model (argument > ``Settings.embed_model`` >
                bundled); another model than the persisted one is logged.
            **overrides: constructor arguments that win over the saved ones.
        """
        return read_index(persist_dir, PERSIST_KIND, lambda folder: cls.read_files(folder, embed_model, **overrides))

    @classmethod
    def read_files(
        cls, folder: Path, embed_model: BaseEmbedding | None = None, **overrides: Any
    ) -> BackfillVectorRetriever:
        """Load what :meth:`write_files` wrote into ``folder``."""
        data, index = read_index_files(folder, embed_model)
        try:
            return cls.from_dict(data, index, **overrides)
        except (TypeError, ValueError) as exc:
            raise PersistError(f"{folder / 'config.json'} holds invalid settings ({exc})") from exc

    # ------------------------------------------------------------- queries
    def _resolve(self, query_bundle: QueryBundle) -> Call:
        """The call's filters (under ``filter_policy``) and k; filters are
        checked by :meth:`_check_filters`, which may re-read the docstore."""
        return resolve_call(
            query_bundle,
            filters=self._filters,
            filter_policy=self.filter_policy,
            top_k=self._similarity_top_k,
        )

    def _query(
        self, embedding: list[float] | None, query_str: str, filters: MetadataFilters | None, top_k: int
    ) -> VectorStoreQuery:
        # node_ids only when the caller restricts them: as_retriever's list of
        # nodes_dict values is empty over a rebuilt index and returns nothing
        size = store_size(self._vector_store)
        return VectorStoreQuery(
            query_embedding=embedding,
            similarity_top_k=max(1, min(top_k, size)) if size is not None else top_k,
            node_ids=self._node_ids,
            doc_ids=self._doc_ids,
            query_str=query_str,
            mode=self._vector_store_query_mode,
            alpha=self._alpha,
            filters=filters if self._store_filters(filters) else None,
            sparse_top_k=self._sparse_top_k,
            hybrid_top_k=self._hybrid_top_k,
        )

    def _store_filters(self, filters: MetadataFilters | None) -> bool:
        """Whether the store applies ``filters`` itself (else they are checked here).

        Upstream's ``SimpleVectorStore`` (the ``VectorStoreIndex`` default)
        refuses nested trees, which a construction-time filter merged with a
        per-call OR produces, and raises ``TypeError`` on a node whose value
        the operator cannot take (``"five" > 4`` on a key holding numbers and
        strings), where every other evaluator here lets that node not match;
        those filters are checked here instead.
        """
        if not self.filter_in_store:
            return False
        if filters is None or type(self._vector_store) is not SimpleVectorStore:
            return True
        nested = any(isinstance(f, MetadataFilters) for f in filters.filters)
        return not (nested or self.filter_vocabulary.needs_own_evaluation(filters))

    def _embedding(self, query_bundle: QueryBundle) -> list[float] | None:
        if query_bundle.embedding is not None or not self._needs_embedding():
            return self._checked_embedding(query_bundle.embedding, given=True)
        embedding = steps.run(query_vector(self.cache, self._embed_model, query_bundle))
        return self._checked_embedding(embedding, given=False)

    async def _aembedding(self, query_bundle: QueryBundle) -> list[float] | None:
        if query_bundle.embedding is not None or not self._needs_embedding():
            return self._checked_embedding(query_bundle.embedding, given=True)
        embedding = await steps.arun(query_vector(self.cache, self._embed_model, query_bundle))
        return self._checked_embedding(embedding, given=False)

    def _checked_embedding(self, embedding: list[float] | None, given: bool) -> list[float] | None:
        """Refuse a NaN/inf query vector or one of another dimension than the
        index's: the store would score every node NaN or fail inside numpy."""
        if embedding is not None:
            what = "the query embedding given in the QueryBundle" if given else "the query"
            check_vectors(embedding, embed_model_name(self._embed_model), what, self.index_dimension())
        return embedding

    def index_dimension(self) -> int | None:
        """The dimension of the vectors in the store, ``None`` when it cannot tell cheaply.

        Read from the store when it exposes it (``NumpyVectorStore.dimension``,
        a FAISS index's ``d``, ``PGVectorStore.embed_dim``), else from the
        first stored embedding (``SimpleVectorStore``; one row of a Chroma
        collection, read once); query vectors are not checked otherwise.
        """
        store = self._vector_store
        dim = store_dimension(store)
        if dim is None and is_chroma(store):
            if self._chroma_dimension is None:
                self._chroma_dimension = chroma_dimension(store)
            dim = self._chroma_dimension
        return dim

    # ------------------------------------------------------------- filters
    @property
    def filter_vocabulary(self) -> FilterVocabulary:
        """The metadata keys (and value kinds) of the docstore's nodes (of the store's
        own columns, for a store that keeps them: a ``ColumnarVectorStore``).

        Shared by every retriever over the same docstore and built on first
        use; empty when the docstore holds no nodes (then filters are not
        checked). :meth:`refresh_filter_vocabulary` re-reads the docstore.
        """
        return store_vocabulary(self._vector_store) or docstore_vocabulary(self._docstore, refresh=False)

    def refresh_filter_vocabulary(self) -> FilterVocabulary:
        """Re-read the docstore's metadata keys (after nodes were added to it) and return them."""
        return store_vocabulary(self._vector_store) or docstore_vocabulary(self._docstore, refresh=True)

    def _check_filters(self, filters: MetadataFilters | None) -> None:
        """Apply ``unknown_filter_key`` to filters that cannot match (see the class)."""
        if filters is None or not filters.filters or self.unknown_filter_key is None:
            return
        vocabulary = self.filter_vocabulary
        if vocabulary and vocabulary.problems(filters):
            vocabulary = self.refresh_filter_vocabulary()  # nodes may have been added since
        if not vocabulary:
            if not self._logged_unchecked:
                self._logged_unchecked = True
                logger.debug(
                    "the docstore of this index holds no nodes (%s keeps the text?): filter keys "
                    "are unknown, so filters are not checked",
                    type(self._vector_store).__name__,
                )
            return
        vocabulary.check(filters, self.unknown_filter_key)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        self._check_filters(call.filters)
        embedding = self._embedding(call.bundle)
        asked = call.top_k
        while True:  # widen until k hits survive the stale ids and filters
            result = self._vector_store.query(
                self._query(embedding, call.bundle.query_str, call.filters, asked), **self._kwargs
            )
            wanted = self._to_fetch(result)
            fetched = self._docstore.get_nodes(wanted, raise_error=False) if wanted else []
            hits, stale, exhausted = self._assemble(result, fetched, call.filters, asked)
            if len(hits) >= call.top_k or exhausted:
                return self._finish(hits, stale, call.top_k)
            asked *= WIDEN_FACTOR

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        if call.filters is not None and self.unknown_filter_key is not None:
            # reading the docstore's nodes may be I/O (Redis, MongoDB): off the loop
            await asyncio.to_thread(self._check_filters, call.filters)
        embedding = await self._aembedding(call.bundle)
        asked = call.top_k
        while True:
            query = self._query(embedding, call.bundle.query_str, call.filters, asked)
            if _has_native_aquery(self._vector_store):
                result = await self._vector_store.aquery(query, **self._kwargs)
            else:  # the base class would run the sync search on the event loop
                result = await asyncio.to_thread(self._vector_store.query, query, **self._kwargs)
            wanted = self._to_fetch(result)
            fetched = await self._docstore.aget_nodes(wanted, raise_error=False) if wanted else []
            hits, stale, exhausted = self._assemble(result, fetched, call.filters, asked)
            if len(hits) >= call.top_k or exhausted:
                return self._finish(hits, stale, call.top_k)
            asked *= WIDEN_FACTOR

    # ---------------------------------------------------------- resolution
    def _hit_node_ids(self, result: VectorStoreQueryResult) -> list[str]:
        """The node id behind each store id (FAISS row numbers map through nodes_dict)."""
        nodes_dict = self._index.index_struct.nodes_dict
        return [nodes_dict.get(str(i), str(i)) for i in (result.ids or [])]

    def _to_fetch(self, result: VectorStoreQueryResult) -> list[str]:
        """Docstore ids to fetch: every hit of an ids-only store; the non-text
        nodes (``IndexNode``s, ...) of a text-storing one."""
        if result.nodes:
            return [n.node_id for n in result.nodes if n.as_related_node_info().node_type != ObjectType.TEXT]
        return self._hit_node_ids(result)

    def _assemble(
        self,
        result: VectorStoreQueryResult,
        fetched: Sequence[BaseNode],
        filters: MetadataFilters | None,
        asked: int,
    ) -> tuple[list[NodeWithScore], list[str], bool]:
        """Scored nodes in store order, the stale ids among the store's hits,
        and whether the store has no more hits."""
        by_id: dict[str, BaseNode] = {n.node_id: n for n in fetched if n is not None}
        stale: list[str] = []
        if result.nodes:
            # a text-storing store's own node unless the docstore has a richer copy
            pairs = [(pos, by_id.get(n.node_id, n)) for pos, n in enumerate(result.nodes)]
            returned = len(result.nodes)
        else:
            node_ids = self._hit_node_ids(result)
            stale = [i for i in node_ids if i not in by_id]
            if stale and self.stale_policy == StalePolicy.RAISE:
                self._on_stale(stale)
            pairs = [(pos, by_id[i]) for pos, i in enumerate(node_ids) if i in by_id]
            returned = len(node_ids)
        scores: Sequence[float | None] = result.similarities or []
        hits: list[NodeWithScore] = [
            unexplained(node, scores[pos] if pos < len(scores) else None) for pos, node in pairs
        ]
        if not self._store_filters(filters):
            hits = keep_matching(hits, filters)
        return hits, stale, returned < asked

    def _finish(self, hits: list[NodeWithScore], stale: list[str], top_k: int) -> list[NodeWithScore]:
        if stale:  # reported once per query, from the widest search
            self._on_stale(stale)
        return hits[:top_k]

    def _on_stale(self, stale: list[str]) -> None:
        if self.stale_policy == StalePolicy.RAISE:
            raise StaleIdError(
                f"the vector store returned {len(stale)} id(s) the docstore does not hold: "
                f"{stale[:10]}; delete them from the store (index.delete_nodes) or use "
                "stale_policy='skip'"
            )
        self.stale_ids_skipped += len(stale)
        logger.warning("skipped %d stale id(s) the docstore does not hold: %s", len(stale), stale[:10])


def _reject_row_numbers(index: VectorStoreIndex) -> None:
    """FaissVectorStore answers with row numbers that only ``nodes_dict`` maps to
    node ids; without it every hit would look stale."""
    try:
        from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore
    except ImportError:
        return
    store = index.vector_store
    if (
        isinstance(store, FaissVectorStore)
        and not isinstance(store, FaissMapVectorStore)
        and not index.index_struct.nodes_dict
        and store.client.ntotal > 0
    ):
        raise ValueError(
            "FaissVectorStore returns row numbers, and this index has no nodes_dict mapping them "
            "to node ids; load it with load_index_from_storage(...) from where it was persisted, "
            "or use FaissMapVectorStore, which stores node ids"
        )
