"""Dense + PostgreSQL full-text search over one ``PGVectorStore`` index, fused by rank.

Upstream's ``hybrid_search=True`` with ``vector_store_query_mode="hybrid"``
does not fuse: it lists the dense top-k, then the text-search rows not
already there, cosine similarities and ``ts_rank`` values side by side.
:func:`pg_hybrid_retriever` runs the two searches as separate children of
:class:`~llama_index_ext_recursive.retrievers.fusion.HybridFusionRetriever`
and fuses their ranks. It is a retriever over the store, so it lives among
the retrievers, above :mod:`~llama_index_ext_recursive.stores.postgres`, whose
store and checks it uses (the store module imports no retriever).
"""

from __future__ import annotations

from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import VectorStoreQueryMode

from llama_index_ext_recursive.filters import FilterPolicy, FiltersLike
from llama_index_ext_recursive.query import DEFAULT_TOP_K
from llama_index_ext_recursive.retrievers.fusion import HybridFusionRetriever
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.stores.postgres import check_text_search_index


def pg_hybrid_retriever(
    index: VectorStoreIndex,
    similarity_top_k: int = DEFAULT_TOP_K,
    *,
    child_top_k: int | None = None,
    retriever_weights: list[float] | None = None,
    filters: FiltersLike = None,
    filter_policy: FilterPolicy | str = FilterPolicy.MERGE,
    **kwargs: Any,
) -> HybridFusionRetriever:
    """Vector + PostgreSQL full-text search over one PGVectorStore index, fused by rank.

    Children: ``"vector"`` (cosine, the default query mode) and ``"text"``
    (``text_search`` mode: ``ts_rank`` over the ``tsvector`` column, terms
    OR'ed). Their scores are on unrelated scales, so the default fusion is
    weighted reciprocal rank fusion. Per-call filters
    (:class:`~llama_index_ext_recursive.filters.FilteredQueryBundle`) reach
    both children as SQL WHERE clauses and are enforced on the fused list.
    A query of more distinct words than the store's ``max_text_query_words``
    (default 256) raises
    :class:`~llama_index_ext_recursive.stores.postgres.TextQueryTooLongError` from the text child.

    Args:
        index: a ``VectorStoreIndex`` over a ``PGVectorStore`` built with
            ``hybrid_search=True``, by
            :func:`~llama_index_ext_recursive.stores.postgres.pgvector_store` for its timeouts,
            reconnection and event-loop handling (any other ``PGVectorStore``
            works too, with a logged warning saying what it lacks).
        similarity_top_k: number of fused results.
        child_top_k: hits each child returns (default ``similarity_top_k``).
        retriever_weights: weights of ``[vector, text]`` (default equal).
        filters: construction-time metadata filters.
        filter_policy: ``merge`` (AND with per-call filters) or ``replace``.
        **kwargs: passed to ``HybridFusionRetriever`` (``mode``, ``rrf_k``, ...).
    """
    check_text_search_index(index)
    k = child_top_k or similarity_top_k
    kwargs.setdefault("retriever_names", ["vector", "text"])
    # BackfillVectorRetriever reads a FilteredQueryBundle's filters (the store
    # applies them in SQL) and never writes the query embedding into the bundle
    return HybridFusionRetriever(
        [
            BackfillVectorRetriever(index, k, vector_store_query_mode=VectorStoreQueryMode.DEFAULT),
            BackfillVectorRetriever(index, k, vector_store_query_mode=VectorStoreQueryMode.TEXT_SEARCH),
        ],
        similarity_top_k=similarity_top_k,
        retriever_weights=retriever_weights,
        filters=filters,
        filter_policy=filter_policy,
        **kwargs,
    )
