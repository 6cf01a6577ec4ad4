"""``StoreBM25Retriever``: BM25 over the keyword column of a ``ColumnarVectorStore``.

:class:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever`
keeps every node in memory and its own ``bm25s`` index; a
:class:`~llama_index_ext_recursive.stores.columnar_store.ColumnarVectorStore`
created with a ``tokenizer`` keeps the BM25 postings of its rows on disk,
next to their vectors and metadata. This retriever asks the store, so BM25
costs no memory per node, follows every update of the store at once (the
store appends a segment; nothing is re-indexed) and filters with the same
masks as the dense search. Its ranking is the in-memory retriever's on the
same nodes: same scores, rows matching no query word left out, ties to the
node added first, filters choosing rows without changing scores.
"""

from __future__ import annotations

import asyncio

from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryMode

from llama_index_ext_recursive.filters import FilterPolicy, FiltersLike, UnknownFilterPolicy, to_filters
from llama_index_ext_recursive.query import DEFAULT_TOP_K, Call, QueryCheckingRetriever, resolve_call
from llama_index_ext_recursive.results import unexplained
from llama_index_ext_recursive.stores.protocol import LevelStore
from llama_index_ext_recursive.validation import check_count


class StoreBM25Retriever(QueryCheckingRetriever):
    """BM25 answered by a :class:`ColumnarVectorStore`'s keyword column, with per-call filters and top-k.

    Args:
        vector_store: a level store (``ColumnarVectorStore``, ``PostgresLevelStore``) created
            with ``tokenizer=`` (its BM25 terms).
        similarity_top_k: maximum number of results per query.
        filters: construction-time filters, combined with per-call ones under ``filter_policy``.
        filter_policy: ``merge`` (AND) or ``replace``.
        unknown_filter_key: what a filter on a key no node holds does
            (:class:`~llama_index_ext_recursive.filters.UnknownFilterPolicy`; ``None``:
            not checked, for a wrapping retriever that checked already).
        callback_manager: LlamaIndex callback manager.
        verbose: log per-query details.
    """

    def __init__(
        self,
        vector_store: LevelStore,
        similarity_top_k: int = DEFAULT_TOP_K,
        filters: FiltersLike = None,
        filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
        unknown_filter_key: UnknownFilterPolicy | str | None = UnknownFilterPolicy.RAISE,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(vector_store, LevelStore) or vector_store.tokenizer is None:
            raise TypeError(
                "StoreBM25Retriever searches the BM25 terms of a ColumnarVectorStore or PostgresLevelStore created with "
                f"tokenizer=MultilingualTokenizer(); got {type(vector_store).__name__}"
                + (" without one" if isinstance(vector_store, LevelStore) else "")
                + " (for nodes in memory use MultilingualBM25Retriever)"
            )
        self.vector_store = vector_store
        self.similarity_top_k = check_count("similarity_top_k", similarity_top_k)
        self.filters = to_filters(filters)
        self.filter_policy = FilterPolicy(filter_policy)
        self.unknown_filter_key = None if unknown_filter_key is None else UnknownFilterPolicy(unknown_filter_key)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _resolve(self, query_bundle: QueryBundle) -> Call:
        return resolve_call(
            query_bundle,
            filters=self.filters,
            filter_policy=self.filter_policy,
            top_k=self.similarity_top_k,
            vocabulary=None if self.unknown_filter_key is None else self.vector_store.filter_vocabulary(),
            unknown_filter_key=self.unknown_filter_key or UnknownFilterPolicy.RAISE,
        )

    def _query(self, call: Call, top_k: int) -> VectorStoreQuery:
        return VectorStoreQuery(
            query_str=call.bundle.query_str,
            similarity_top_k=top_k,
            filters=call.filters,
            mode=VectorStoreQueryMode.TEXT_SEARCH,
        )

    def scores_by_id(self, query_bundle: QueryBundle, top_k: int | None = None) -> dict[str, float]:
        """``node_id -> score`` of the best matches, best first, without reading any node.

        Filters and k as in :meth:`retrieve`; ``top_k`` overrides the bundle's.
        """
        call = self._resolve(query_bundle)
        ids, scores = self.vector_store.query_ids(self._query(call, top_k or call.top_k))
        return dict(zip(ids, scores, strict=True))

    def _results(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        call = self._resolve(query_bundle)
        found = self.vector_store.query(self._query(call, call.top_k))
        return [unexplained(node, score) for node, score in zip(found.nodes or [], found.similarities or [])]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._results(query_bundle)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return await asyncio.to_thread(self._results, query_bundle)  # scoring is CPU work
