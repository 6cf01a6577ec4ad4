"""PostgreSQL + pgvector: a store whose filtered HNSW queries return k rows, and
a hybrid (vector + full-text) retriever that fuses ranks.

Two upstream ``PGVectorStore`` behaviours make it return less than asked:

* HNSW + a metadata filter: pgvector fetches ``hnsw.ef_search`` (40)
  candidates and *then* applies the WHERE clause, so a filter matching 5% of
  the rows leaves about 2 of 10. pgvector 0.8 can keep scanning
  (``hnsw.iterative_scan``), but ``PGVectorStore`` has no option for it, and
  ``create_engine_kwargs`` go to both engines, whose drivers spell connection
  settings differently (psycopg2 ``options``, asyncpg ``server_settings``).
  :func:`pgvector_store` builds both engines itself.
* ``hybrid_search=True`` with ``vector_store_query_mode="hybrid"`` does not
  fuse: it lists the dense top-k, then the text-search rows not already
  there (up to 2k rows), cosine similarities and ``ts_rank`` values side by
  side. An exact keyword match that the embedding ranks low stays low.
  :func:`pg_hybrid_retriever` runs the two searches as separate children of
  :class:`~llama_index_ext_recursive.fusion.HybridFusionRetriever` and fuses
  their ranks.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional, Union

from llama_index.core import VectorStoreIndex
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.backfill import BackfillVectorRetriever
from llama_index_ext_recursive.filters import FilterPolicy, FiltersLike
from llama_index_ext_recursive.fusion import HybridFusionRetriever

try:
    from llama_index.vector_stores.postgres import PGVectorStore
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "llama_index_ext_recursive.postgres needs llama-index-vector-stores-postgres: "
        "pip install 'llama-index-ext-recursive[postgres]'"
    ) from exc

logger = logging.getLogger(__name__)

# pgvector's own defaults (m=16, ef_construction=64, ef_search=40), cosine distance
# as PGVectorStore's queries use
DEFAULT_HNSW: Dict[str, Any] = {
    "hnsw_m": 16,
    "hnsw_ef_construction": 64,
    "hnsw_ef_search": 40,
    "hnsw_dist_method": "vector_cosine_ops",
}
ITERATIVE_SCAN_MODES = ("off", "relaxed_order", "strict_order")
DEFAULT_TOP_K = 10


class _SortedPGVectorStore(PGVectorStore):
    """``PGVectorStore`` that re-sorts dense results by similarity.

    ``hnsw.iterative_scan=relaxed_order`` may return rows slightly out of
    distance order (pgvector's documented trade-off for recall); ranks feed
    fusion and the recursive retriever's global top-k, so order matters.
    """

    @classmethod
    def class_name(cls) -> str:
        return "PGVectorStore"

    @staticmethod
    def _sorted(query: VectorStoreQuery, result: VectorStoreQueryResult) -> VectorStoreQueryResult:
        if query.mode != VectorStoreQueryMode.DEFAULT or not result.similarities:
            return result
        order = sorted(range(len(result.similarities)), key=lambda i: -result.similarities[i])
        if order == list(range(len(order))):
            return result
        logger.debug("pgvector returned %d rows out of order; re-sorted", len(order))
        return VectorStoreQueryResult(
            nodes=[result.nodes[i] for i in order] if result.nodes is not None else None,
            similarities=[result.similarities[i] for i in order],
            ids=[result.ids[i] for i in order] if result.ids is not None else None,
        )

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return self._sorted(query, super().query(query, **kwargs))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        return self._sorted(query, await super().aquery(query, **kwargs))


def _hnsw_kwargs(hnsw: Union[bool, Dict[str, Any], None]) -> Optional[Dict[str, Any]]:
    if hnsw is None or hnsw is False:
        return None
    if hnsw is True:
        return dict(DEFAULT_HNSW)
    if isinstance(hnsw, dict):
        unknown = set(hnsw) - set(DEFAULT_HNSW)
        if unknown:
            raise ValueError(f"unknown hnsw keys {sorted(unknown)}; known: {sorted(DEFAULT_HNSW)}")
        # a copy: PGVectorStore pops keys from the dict it is given
        return {**DEFAULT_HNSW, **hnsw}
    raise TypeError(f"hnsw must be a bool or a dict of HNSW settings, got {type(hnsw).__name__}")


def pgvector_store(
    host: str,
    port: Union[int, str],
    database: str,
    user: str,
    password: str,
    table_name: str,
    embed_dim: int,
    *,
    hnsw: Union[bool, Dict[str, Any]] = True,
    hybrid_search: bool = False,
    text_search_config: str = "english",
    iterative_scan: Optional[str] = "relaxed_order",
    schema_name: str = "public",
    create_engine_kwargs: Optional[Dict[str, Any]] = None,
    **kwargs: Any,
) -> PGVectorStore:
    """A ``PGVectorStore`` whose HNSW queries with metadata filters return k rows.

    Builds the sync (psycopg2) and async (asyncpg) SQLAlchemy engines itself so
    that every connection sets ``hnsw.iterative_scan`` (pgvector >= 0.8): the
    HNSW scan continues until enough rows pass the filter instead of stopping
    after ``ef_search`` candidates. With ``relaxed_order`` dense results are
    re-sorted by similarity before they are returned.

    Args:
        host: server host.
        port: server port.
        database: database name.
        user: user name.
        password: password ("" for trust authentication).
        table_name: table name (PGVectorStore lowercases it and prefixes ``data_``).
        embed_dim: embedding dimension.
        hnsw: ``True`` for an HNSW cosine index with pgvector's defaults
            (m=16, ef_construction=64, ef_search=40), a dict to override some
            of them (keys as in ``PGVectorStore``'s ``hnsw_kwargs``: ``hnsw_m``,
            ``hnsw_ef_construction``, ``hnsw_ef_search``, ``hnsw_dist_method``),
            ``False`` for exact scans.
        hybrid_search: add the ``tsvector`` column full-text search needs
            (required by :func:`pg_hybrid_retriever`).
        text_search_config: PostgreSQL text search configuration, e.g. "english", "simple".
        iterative_scan: ``"relaxed_order"`` (default), ``"strict_order"``,
            ``"off"``, or ``None`` to leave the server's setting alone.
        schema_name: schema holding the table.
        create_engine_kwargs: extra keyword arguments for both engines (pool size, echo, ...).
        **kwargs: passed to ``PGVectorStore`` (``use_jsonb``, ``indexed_metadata_keys``, ...).
    """
    if iterative_scan is not None and iterative_scan not in ITERATIVE_SCAN_MODES:
        raise ValueError(f"iterative_scan must be one of {ITERATIVE_SCAN_MODES} or None, got {iterative_scan!r}")
    from sqlalchemy import create_engine
    from sqlalchemy.engine import URL
    from sqlalchemy.ext.asyncio import create_async_engine

    def url(driver: str) -> URL:
        return URL.create(
            f"postgresql+{driver}",
            username=user,
            password=password,
            host=host,
            port=int(port),
            database=database,
        )

    engine_kwargs = dict(create_engine_kwargs or {})
    sync_args = dict(engine_kwargs.pop("connect_args", None) or {})
    async_args = dict(sync_args)
    if iterative_scan is not None:
        # psycopg2 takes libpq's startup options; asyncpg takes server_settings
        options = sync_args.get("options", "")
        sync_args["options"] = f"{options} -c hnsw.iterative_scan={iterative_scan}".strip()
        async_args.pop("options", None)
        async_args["server_settings"] = {
            **async_args.get("server_settings", {}),
            "hnsw.iterative_scan": iterative_scan,
        }
    sync_url, async_url = url("psycopg2"), url("asyncpg")
    engine = create_engine(sync_url, connect_args=sync_args, **engine_kwargs)
    async_engine = create_async_engine(async_url, connect_args=async_args, **engine_kwargs)
    store_class = _SortedPGVectorStore if iterative_scan == "relaxed_order" else PGVectorStore
    logger.debug(
        "pgvector_store %s:%s/%s table=%s hnsw=%s iterative_scan=%s hybrid_search=%s",
        host, port, database, table_name, bool(hnsw), iterative_scan, hybrid_search,
    )
    return store_class(
        # kept for display only: the engines above are what connects (password hidden)
        connection_string=sync_url.render_as_string(hide_password=True),
        async_connection_string=async_url.render_as_string(hide_password=True),
        table_name=table_name,
        schema_name=schema_name,
        hybrid_search=hybrid_search,
        text_search_config=text_search_config,
        embed_dim=embed_dim,
        hnsw_kwargs=_hnsw_kwargs(hnsw),
        engine=engine,
        async_engine=async_engine,
        **kwargs,
    )


def pg_hybrid_retriever(
    index: VectorStoreIndex,
    similarity_top_k: int = DEFAULT_TOP_K,
    *,
    child_top_k: Optional[int] = None,
    retriever_weights: Optional[List[float]] = None,
    filters: FiltersLike = None,
    filter_policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
    **kwargs: Any,
) -> HybridFusionRetriever:
    """Vector + PostgreSQL full-text search over one PGVectorStore index, fused by rank.

    Children: ``"vector"`` (cosine, the default query mode) and ``"text"``
    (``text_search`` mode: ``ts_rank`` over the ``tsvector`` column, terms
    OR'ed). Their scores are on unrelated scales, so the default fusion is
    weighted reciprocal rank fusion. Per-call filters
    (:class:`~llama_index_ext_recursive.filters.FilteredQueryBundle`) reach
    both children as SQL WHERE clauses and are enforced on the fused list.

    Args:
        index: a ``VectorStoreIndex`` over a ``PGVectorStore`` built with
            ``hybrid_search=True`` (e.g. by :func:`pgvector_store`).
        similarity_top_k: number of fused results.
        child_top_k: hits each child returns (default ``similarity_top_k``).
        retriever_weights: weights of ``[vector, text]`` (default equal).
        filters: construction-time metadata filters.
        filter_policy: ``merge`` (AND with per-call filters) or ``replace``.
        **kwargs: passed to ``HybridFusionRetriever`` (``mode``, ``rrf_k``, ...).
    """
    store = getattr(index, "vector_store", None)
    if not isinstance(store, PGVectorStore):
        raise TypeError(
            f"pg_hybrid_retriever needs an index over a PGVectorStore, got {type(store).__name__}"
        )
    if not store.hybrid_search:
        raise ValueError(
            "the PGVectorStore was built without hybrid_search=True, so its table has no "
            "tsvector column to search; rebuild it with hybrid_search=True"
        )
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
