"""The searches of one recursive call: document scores, routing, chunk scores and waves.

Functions of the retriever (``owner``, an :class:`~llama_index_ext_recursive.recursive.settings.Owner`)
and the call's :class:`~llama_index_ext_recursive.recursive.ranking.Plan`,
kept apart from :mod:`~llama_index_ext_recursive.recursive.retriever` so the
retriever module holds construction, settings and the two entry points. The
``fused`` score mode (the default) runs here end to end: dense and lexical
document scores (:func:`document_scores`), fused into routes (:func:`route`),
then flat and routed chunk scores gathered wave by wave into a
:class:`~llama_index_ext_recursive.recursive.ranking.ChunkEvidenceSet`
(:func:`fused_ranking`). The embedded store is asked for ids and scores
directly; other stores go through the levels' ``BackfillVectorRetriever``,
called through ``_retrieve`` (no span of its own). Sync and async run the
same steps; the async ones move CPU work (numpy, BM25) off the event loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import IndexNode, NodeWithScore
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from llama_index_ext_recursive.filters import merge_filters
from llama_index_ext_recursive.query import FilteredQueryBundle, filters_of
from llama_index_ext_recursive.recursive.build import ROUTING_KEY
from llama_index_ext_recursive.recursive.evidence import fuse_document_scores
from llama_index_ext_recursive.recursive.levels import Levels
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.recursive.ranking import ChunkEvidenceSet, Plan, Route
from llama_index_ext_recursive.recursive.settings import ROUTED_POOL_FACTOR, Owner
from llama_index_ext_recursive.results import DocumentEvidence, DocumentWithScore
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore
from llama_index_ext_recursive.validation import closest


def summary_doc_ids(levels: Levels, node_ids: Iterable[str]) -> list[str]:
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


def dense_document_scores(owner: Owner, plan: Plan, levels: Levels) -> dict[str, float]:
    """``doc id -> similarity`` of the best documents by routing vector."""
    store = owner.index.summary_index.vector_store
    bundle = plan.summary_bundle
    if isinstance(store, NumpyVectorStore) and bundle.embedding is not None:
        found = store.query(
            VectorStoreQuery(
                query_embedding=bundle.embedding,
                similarity_top_k=owner.document_depth(plan.top_k),
                filters=plan.summary_filters,
            )
        )
        ids, scores = found.ids or [], found.similarities or []
    else:
        hits = levels.summary_vector._retrieve(bundle)
        ids, scores = [h.node.node_id for h in hits], [h.score or 0.0 for h in hits]
    return {d: float(v) for d, v in zip(summary_doc_ids(levels, ids), scores)}


def lexical_document_scores(owner: Owner, plan: Plan, levels: Levels) -> dict[str, float]:
    """``doc id -> BM25 score`` over each document's title, metadata, summary, chunks."""
    assert levels.summary_bm25 is not None
    found = levels.summary_bm25.scores_by_id(plan.summary_bundle, owner.document_depth(plan.top_k))
    return dict(zip(summary_doc_ids(levels, found), found.values()))


def document_scores(owner: Owner, plan: Plan, levels: Levels) -> tuple[dict[str, float], dict[str, float]]:
    weights = plan.document_weights
    dense = dense_document_scores(owner, plan, levels) if weights[0] > 0 else {}
    use_lexical = weights[1] > 0 and levels.summary_bm25 is not None
    return dense, lexical_document_scores(owner, plan, levels) if use_lexical else {}


async def adocument_scores(owner: Owner, plan: Plan, levels: Levels) -> tuple[dict[str, float], dict[str, float]]:
    weights = plan.document_weights
    if weights[0] > 0 and not isinstance(owner.index.summary_index.vector_store, NumpyVectorStore):

        async def dense_call() -> dict[str, float]:
            hits = await levels.summary_vector._aretrieve(plan.summary_bundle)
            ids = summary_doc_ids(levels, (h.node.node_id for h in hits))
            return {d: float(h.score or 0.0) for d, h in zip(ids, hits)}

        dense = dense_call()
    elif weights[0] > 0:
        dense = asyncio.to_thread(dense_document_scores, owner, plan, levels)  # numpy: CPU work
    else:
        dense = _no_scores()
    lexical = (
        asyncio.to_thread(lexical_document_scores, owner, plan, levels)
        if weights[1] > 0 and levels.summary_bm25 is not None
        else _no_scores()
    )
    found = await asyncio.gather(dense, lexical)
    return found[0], found[1]


def route(
    owner: Owner, plan: Plan, dense: dict[str, float], lexical: dict[str, float]
) -> tuple[list[Route], dict[str, float]]:
    """Fuse the document searches; route to the best documents (and more
    while they hold fewer than ``top_k`` chunks). Returns the routes and
    every scored document's fused score."""
    lexical = {d: v for d, v in lexical.items() if v > 0}
    fused = fuse_document_scores(dense, lexical, plan.document_weights)
    routes: list[Route] = []
    chunks = 0
    for doc_id in sorted(fused, key=lambda d: (-fused[d], d)):
        if len(routes) >= owner.num_routed_docs and chunks >= plan.top_k:
            break
        score = fused[doc_id]
        routes.append(Route(doc_id, score, owner.index.summaries[doc_id].node_id, score, (doc_id,)))
        record = owner.index.documents.get(doc_id)
        chunks += len(record.chunk_ids) if record is not None else 0
    return routes, fused


def _flat_chunk_search(owner: Owner, levels: Levels) -> tuple[BasePydanticVectorStore, BackfillVectorRetriever]:
    """The chunk store and its dense search, which ``fused`` mode searches flat."""
    chunk_index = owner.index.chunk_index
    if chunk_index is None or levels.chunk_vector is None:  # score_mode set to fused after construction
        raise ValueError(
            "score_mode='fused' searches all chunks flat, which needs the chunk store built by "
            "from_documents/from_nodes; a retriever_dict setup supports 'chunk', 'weighted' or 'product'"
        )
    return chunk_index.vector_store, levels.chunk_vector


def dense_scores(owner: Owner, levels: Levels, bundle: FilteredQueryBundle, top_k: int) -> dict[str, float]:
    """``chunk id -> similarity`` of the best ``top_k`` chunks for ``bundle``.

    The embedded store is asked for ids and scores only (nodes are fetched
    for the final top-k alone); other stores go through
    :class:`BackfillVectorRetriever`, which filters what they cannot.
    """
    store, chunk_vector = _flat_chunk_search(owner, levels)
    if isinstance(store, NumpyVectorStore) and bundle.embedding is not None:
        found = store.query(
            VectorStoreQuery(query_embedding=bundle.embedding, similarity_top_k=top_k, filters=filters_of(bundle))
        )
        return {i: float(v) for i, v in zip(found.ids or [], found.similarities or [])}
    hits = chunk_vector._retrieve(replace(bundle, top_k=top_k))
    return {h.node.node_id: float(h.score) for h in hits if h.score is not None}


async def adense_scores(owner: Owner, levels: Levels, bundle: FilteredQueryBundle, top_k: int) -> dict[str, float]:
    store, chunk_vector = _flat_chunk_search(owner, levels)
    if isinstance(store, NumpyVectorStore):
        return await asyncio.to_thread(dense_scores, owner, levels, bundle, top_k)  # numpy: CPU work
    hits = await chunk_vector._aretrieve(replace(bundle, top_k=top_k))
    return {h.node.node_id: float(h.score) for h in hits if h.score is not None}


def chunk_scores(
    owner: Owner, plan: Plan, levels: Levels, bundle: FilteredQueryBundle, top_k: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Dense and lexical scores of the best ``top_k`` chunks each ({} where
    this query's script gives that search weight 0)."""
    weights = plan.chunk_weights
    dense = dense_scores(owner, levels, bundle, top_k) if weights[0] > 0 else {}
    lexical = levels.chunk_bm25.scores_by_id(bundle, top_k) if weights[1] > 0 and levels.chunk_bm25 is not None else {}
    return dense, lexical


async def achunk_scores(
    owner: Owner, plan: Plan, levels: Levels, bundle: FilteredQueryBundle, top_k: int
) -> tuple[dict[str, float], dict[str, float]]:
    weights = plan.chunk_weights
    dense, lexical = await asyncio.gather(
        adense_scores(owner, levels, bundle, top_k) if weights[0] > 0 else _no_scores(),
        asyncio.to_thread(levels.chunk_bm25.scores_by_id, bundle, top_k)
        if weights[1] > 0 and levels.chunk_bm25 is not None
        else _no_scores(),
    )
    return dense, lexical


def routed_pool(owner: Owner, routes: list[Route], plan: Plan) -> int:
    """Chunks a wave keeps per search: ``ROUTED_POOL_FACTOR * top_k`` per
    routed document, so the named document's clause is a candidate even
    when every routed document holds a near copy of it."""
    return math.ceil(ROUTED_POOL_FACTOR * plan.top_k) * min(len(routes), owner.num_routed_docs)


def fused_ranking(
    owner: Owner, plan: Plan, levels: Levels, routes: list[Route], documents: dict[str, float]
) -> list[NodeWithScore]:
    evidence = ChunkEvidenceSet(owner, levels, documents)
    evidence.add(*chunk_scores(owner, plan, levels, plan.chunk_bundle, plan.top_k), None)
    while routes:
        bundle, pool = wave_bundle(owner, routes, plan), routed_pool(owner, routes, plan)
        routes = evidence.add_wave(routes, *chunk_scores(owner, plan, levels, bundle, pool))
    return evidence.ranked(plan)


async def afused_ranking(
    owner: Owner,
    plan: Plan,
    levels: Levels,
    routes: list[Route],
    documents: dict[str, float],
    flat: tuple[dict[str, float], dict[str, float]],
) -> list[NodeWithScore]:
    evidence = ChunkEvidenceSet(owner, levels, documents)
    evidence.add(*flat, None)
    while routes:
        bundle, pool = wave_bundle(owner, routes, plan), routed_pool(owner, routes, plan)
        routes = evidence.add_wave(routes, *(await achunk_scores(owner, plan, levels, bundle, pool)))
    return evidence.ranked(plan)


def documents_with_scores(
    owner: Owner, fused: dict[str, float], dense: dict[str, float], lexical: dict[str, float]
) -> list[DocumentWithScore]:
    index = owner.index
    order = sorted(fused, key=lambda d: (-fused[d], d))
    return [
        DocumentWithScore(
            node=index.summaries[doc_id],
            score=fused[doc_id],
            evidence=DocumentEvidence(
                doc_id=doc_id,
                title=index.documents[doc_id].title if doc_id in index.documents else doc_id,
                rank=rank,
                score=fused[doc_id],
                dense_score=dense.get(doc_id),
                lexical_score=lexical.get(doc_id) or None,
            ),
        )
        for rank, doc_id in enumerate(order, start=1)
    ]


def wave_bundle(owner: Owner, routes: list[Route], plan: Plan) -> FilteredQueryBundle:
    """One chunk query for a whole wave (or one route): its documents' chunks, plus the filters."""
    routing = MetadataFilters(
        filters=[
            MetadataFilter(
                key=ROUTING_KEY,
                value=sorted({route.doc_id for route in routes}),
                operator=FilterOperator.IN,
            )
        ]
    )
    return plan.call.child_bundle(
        filters=merge_filters(routing, plan.chunk_filters), embedding=plan.chunk_bundle.embedding
    )


def split_wave(routes: list[Route], hits: list[NodeWithScore]) -> list[list[NodeWithScore]]:
    """Hand each hit of a wave query to the (first) route of its document."""
    slot: dict[str, int] = {}
    i: int | None
    for i, route in enumerate(routes):
        slot.setdefault(route.doc_id, i)
    out: list[list[NodeWithScore]] = [[] for _ in routes]
    for hit in hits:
        i = slot.get(hit.node.ref_doc_id or "")
        if i is not None:
            out[i].append(hit)
    return out


# ------------------------------------------- chunk / weighted / product modes
def routes(owner: Owner, summary_hits: list[NodeWithScore], plan: Plan) -> list[Route]:
    """The top ``num_routed_docs`` documents, and more while they hold fewer
    than ``top_k`` chunks (a global top-k needs k candidates)."""
    index = owner.index
    routes: list[Route] = []
    chunks = 0
    for hit in summary_hits:
        if len(routes) >= owner.num_routed_docs and (chunks >= plan.top_k or index.chunk_index is None):
            break
        node = hit.node
        doc_id = node.index_id if isinstance(node, IndexNode) else None
        if doc_id is None or doc_id not in index.summaries:
            raise LinkError(
                f"summary store returned {node.node_id!r}, which is not a known summary "
                "IndexNode; the summary store and the retriever are out of sync"
            )
        routes.append(Route(doc_id, hit.score, node.node_id, hit.score, (doc_id,)))
        record = index.documents.get(doc_id)
        chunks += len(record.chunk_ids) if record is not None else 0
    return routes


def child(owner: Owner, route: Route) -> BaseRetriever:
    retriever = owner.index.retriever_dict.get(route.doc_id)
    if retriever is None:
        raise LinkError(
            f"no retriever for document {route.doc_id!r} ({closest(route.doc_id, list(owner.index.retriever_dict))})"
        )
    return retriever


def child_results(route: Route, retriever: BaseRetriever, search: Callable[[], Any]) -> list[NodeWithScore]:
    """A ``retriever_dict`` child's hits; a child that breaks is named."""
    where = f"retriever_dict[{route.doc_id!r}] ({type(retriever).__name__})"
    try:
        hits = search()
    except TypeError as exc:
        raise TypeError(f"{where} failed: {exc}; its _retrieve must return a list of NodeWithScore") from exc
    if not isinstance(hits, list):
        raise TypeError(f"{where} returned {type(hits).__name__}, not a list of NodeWithScore")
    return hits


def retrieve_child(owner: Owner, levels: Levels, route: Route, plan: Plan) -> list[NodeWithScore]:
    if levels.chunk_vector is not None:  # our chunk store: the route is a ref_doc_id filter
        return levels.chunk_vector._retrieve(wave_bundle(owner, [route], plan))
    retriever = child(owner, route)  # the user's retriever: its own span, nested under ours
    return child_results(route, retriever, lambda: retriever.retrieve(replace(plan.chunk_bundle)))


async def aretrieve_child(owner: Owner, levels: Levels, route: Route, plan: Plan) -> list[NodeWithScore]:
    if levels.chunk_vector is not None:
        return await levels.chunk_vector._aretrieve(wave_bundle(owner, [route], plan))
    retriever = child(owner, route)
    hits: list[NodeWithScore] | TypeError
    try:
        hits = await retriever.aretrieve(replace(plan.chunk_bundle))
    except TypeError as exc:
        hits = exc
    return child_results(route, retriever, lambda: _raise_or(hits))


def _raise_or(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


async def _no_scores() -> dict[str, float]:
    """What a search the query's weights switch off contributes."""
    return {}
