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
  store's async path when it has one and a worker thread otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from enum import Enum
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, ObjectType, QueryBundle
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.embeddings import resolve_embed_model
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    apply_policy,
    filterable_metadata,
    filters_of,
    metadata_matcher,
    to_filters,
)

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 10
WIDEN_FACTOR = 4  # each retry asks the store for this many times more hits


class StalePolicy(str, Enum):
    """What to do with an id the store returns but the docstore no longer has."""

    SKIP = "skip"
    RAISE = "raise"


class StaleIdError(KeyError):
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


class BackfillVectorRetriever(VectorIndexRetriever):
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
        vector_store_query_mode, alpha, sparse_top_k, hybrid_top_k,
        vector_store_kwargs: passed to the store as upstream does.
        callback_manager, verbose: as upstream.
    """

    def __init__(
        self,
        index: VectorStoreIndex,
        similarity_top_k: int = DEFAULT_TOP_K,
        filters: FiltersLike = None,
        filter_policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
        stale_policy: Union[StalePolicy, str] = StalePolicy.SKIP,
        filter_in_store: Optional[bool] = None,
        embed_model: Optional[BaseEmbedding] = None,
        object_map: Optional[dict] = None,
        vector_store_query_mode: VectorStoreQueryMode = VectorStoreQueryMode.DEFAULT,
        alpha: Optional[float] = None,
        sparse_top_k: Optional[int] = None,
        hybrid_top_k: Optional[int] = None,
        callback_manager: Optional[CallbackManager] = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> None:
        if similarity_top_k < 1:
            raise ValueError(f"similarity_top_k must be >= 1, got {similarity_top_k}")
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
        self.filter_in_store = (
            store_can_filter(self._vector_store) if filter_in_store is None else filter_in_store
        )
        self.stale_ids_skipped = 0

    @classmethod
    def from_vector_store(
        cls,
        vector_store: BasePydanticVectorStore,
        docstore: Optional[BaseDocumentStore] = None,
        embed_model: Optional[BaseEmbedding] = None,
        **kwargs: Any,
    ) -> "BackfillVectorRetriever":
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
        index = VectorStoreIndex(
            nodes=[], storage_context=storage, embed_model=resolve_embed_model(embed_model)
        )
        return cls(index, **kwargs)

    # ------------------------------------------------------------- queries
    def _effective_filters(self, query_bundle: QueryBundle) -> Optional[MetadataFilters]:
        return apply_policy(self._filters, filters_of(query_bundle), self.filter_policy)

    def _query(
        self, embedding: Optional[List[float]], query_str: str, filters: Optional[MetadataFilters], top_k: int
    ) -> VectorStoreQuery:
        # node_ids only when the caller restricts them: as_retriever's list of
        # nodes_dict values is empty over a rebuilt index and returns nothing
        return VectorStoreQuery(
            query_embedding=embedding,
            similarity_top_k=top_k,
            node_ids=self._node_ids,
            doc_ids=self._doc_ids,
            query_str=query_str,
            mode=self._vector_store_query_mode,
            alpha=self._alpha,
            filters=filters if self.filter_in_store else None,
            sparse_top_k=self._sparse_top_k,
            hybrid_top_k=self._hybrid_top_k,
        )

    def _embedding(self, query_bundle: QueryBundle) -> Optional[List[float]]:
        if query_bundle.embedding is not None or not self._needs_embedding():
            return query_bundle.embedding
        return self._embed_model.get_agg_embedding_from_queries(query_bundle.embedding_strs)

    async def _aembedding(self, query_bundle: QueryBundle) -> Optional[List[float]]:
        if query_bundle.embedding is not None or not self._needs_embedding():
            return query_bundle.embedding
        return await self._embed_model.aget_agg_embedding_from_queries(query_bundle.embedding_strs)

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        embedding = self._embedding(query_bundle)
        filters = self._effective_filters(query_bundle)
        top_k = self._similarity_top_k
        while True:  # widen until k hits survive the stale ids and filters
            result = self._vector_store.query(
                self._query(embedding, query_bundle.query_str, filters, top_k), **self._kwargs
            )
            wanted = self._to_fetch(result)
            fetched = self._docstore.get_nodes(wanted, raise_error=False) if wanted else []
            hits, stale, exhausted = self._assemble(result, fetched, filters, top_k)
            if len(hits) >= self._similarity_top_k or exhausted:
                return self._finish(hits, stale)
            top_k *= WIDEN_FACTOR

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        embedding = await self._aembedding(query_bundle)
        filters = self._effective_filters(query_bundle)
        top_k = self._similarity_top_k
        while True:
            query = self._query(embedding, query_bundle.query_str, filters, top_k)
            if _has_native_aquery(self._vector_store):
                result = await self._vector_store.aquery(query, **self._kwargs)
            else:  # the base class would run the sync search on the event loop
                result = await asyncio.to_thread(self._vector_store.query, query, **self._kwargs)
            wanted = self._to_fetch(result)
            fetched = await self._docstore.aget_nodes(wanted, raise_error=False) if wanted else []
            hits, stale, exhausted = self._assemble(result, fetched, filters, top_k)
            if len(hits) >= self._similarity_top_k or exhausted:
                return self._finish(hits, stale)
            top_k *= WIDEN_FACTOR

    # ---------------------------------------------------------- resolution
    def _hit_node_ids(self, result: VectorStoreQueryResult) -> List[str]:
        """The node id behind each store id (FAISS row numbers map through nodes_dict)."""
        nodes_dict = self._index.index_struct.nodes_dict
        return [nodes_dict.get(str(i), str(i)) for i in (result.ids or [])]

    def _to_fetch(self, result: VectorStoreQueryResult) -> List[str]:
        """Docstore ids to fetch: every hit of an ids-only store; the non-text
        nodes (``IndexNode``s, ...) of a text-storing one."""
        if result.nodes:
            return [
                n.node_id for n in result.nodes
                if n.as_related_node_info().node_type != ObjectType.TEXT
            ]
        return self._hit_node_ids(result)

    def _assemble(
        self,
        result: VectorStoreQueryResult,
        fetched: Sequence[BaseNode],
        filters: Optional[MetadataFilters],
        asked: int,
    ) -> Tuple[List[NodeWithScore], List[str], bool]:
        """Scored nodes in store order, the stale ids among the store's hits,
        and whether the store has no more hits."""
        by_id: Dict[str, BaseNode] = {n.node_id: n for n in fetched if n is not None}
        stale: List[str] = []
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
        scores: Sequence[Optional[float]] = result.similarities or []
        matches = None if (filters is None or self.filter_in_store) else metadata_matcher(filters)
        hits = [
            NodeWithScore(node=node, score=scores[pos] if pos < len(scores) else None)
            for pos, node in pairs
            if matches is None or matches(filterable_metadata(node))
        ]
        return hits, stale, returned < asked

    def _finish(self, hits: List[NodeWithScore], stale: List[str]) -> List[NodeWithScore]:
        if stale:  # reported once per query, from the widest search
            self._on_stale(stale)
        return hits[: self._similarity_top_k]

    def _on_stale(self, stale: List[str]) -> None:
        if self.stale_policy == StalePolicy.RAISE:
            raise StaleIdError(
                f"the vector store returned {len(stale)} id(s) the docstore does not hold: "
                f"{stale[:10]}; delete them from the store (index.delete_nodes) or use "
                "stale_policy='skip'"
            )
        self.stale_ids_skipped += len(stale)
        logger.warning(
            "skipped %d stale id(s) the docstore does not hold: %s", len(stale), stale[:10]
        )


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
