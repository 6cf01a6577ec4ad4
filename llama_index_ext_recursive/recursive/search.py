"""The searches of one recursive call, written once and driven sync or async.

Functions of the retriever (``owner``, an :class:`~llama_index_ext_recursive.recursive.settings.Owner`)
and the call's :class:`~llama_index_ext_recursive.recursive.ranking.Plan`,
kept apart from :mod:`~llama_index_ext_recursive.recursive.retriever` so the
retriever module holds construction, settings and the two entry points.

Each algorithm (:func:`fused_search`, the default score mode end to end;
:func:`routed_search` for the others; :func:`document_search` for
``retrieve_documents``) is a generator: it yields the searches it needs next
as a tuple of requests (:class:`DenseDocuments`, :class:`DenseChunks`,
:class:`Lexical`, :class:`Hits`, :class:`RouteHits`) and receives their
answers; :func:`~llama_index_ext_recursive.steps.run` and
:func:`~llama_index_ext_recursive.steps.arun` drive them, the async driver
moving CPU work (NumPy, BM25) to threads. So sync and async take the same steps by construction, and
what differs between stores lives in the requests alone: the embedded store
is asked for ids and scores directly, other stores go through the levels'
``BackfillVectorRetriever``, called through ``_retrieve`` (no span of its own).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

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
from llama_index_ext_recursive.recursive.levels import Levels, LexicalLevel
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.recursive.ranking import ChunkEvidenceSet, Plan, Route, collect, rank_best
from llama_index_ext_recursive.recursive.settings import ROUTED_POOL_FACTOR, Owner
from llama_index_ext_recursive.results import DocumentEvidence, DocumentWithScore
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever
from llama_index_ext_recursive.steps import Request, Steps
from llama_index_ext_recursive.stores.protocol import ScoredIdSearch
from llama_index_ext_recursive.validation import closest


def summary_doc_ids(levels: Levels, node_ids: Iterable[str]) -> list[str]:
    """Document ids of summary node ids; an unknown id means the stores drifted."""
    ids = list(node_ids)
    out = []
    for node_id, doc_id in zip(ids, levels.documents_of_summaries(ids), strict=True):
        if doc_id is None:
            raise LinkError(
                f"summary store returned {node_id!r}, which is not a known summary "
                "IndexNode; the summary store and the retriever are out of sync"
            )
        out.append(doc_id)
    return out


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
        routes.append(Route(doc_id, score, owner.index.summary_node_id(doc_id), score, (doc_id,)))
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


def routed_pool(owner: Owner, routes: list[Route], plan: Plan) -> int:
    """Chunks a wave keeps per search: ``ROUTED_POOL_FACTOR * top_k`` per
    routed document, so the named document's clause is a candidate even
    when every routed document holds a near copy of it."""
    return math.ceil(ROUTED_POOL_FACTOR * plan.top_k) * min(len(routes), owner.num_routed_docs)


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


def _raise_or(value: Any) -> Any:
    if isinstance(value, BaseException):
        raise value
    return value


# ------------------------------------------------------------------ requests
# What an algorithm below asks for: one search of one level. Each request knows
# how its store answers, blocking (``run``) and on the event loop (``arun``:
# a store's own async call, or CPU work moved to a thread). The algorithms are
# written once, as generators that yield a tuple of requests and receive their
# answers (:mod:`~llama_index_ext_recursive.steps` drives them, the async driver
# answering the requests of one step concurrently).
@dataclass(frozen=True)
class DenseDocuments:
    """``summary node id -> similarity`` of the best documents by routing vector."""

    owner: Owner
    plan: Plan
    levels: Levels

    def _embedded(self) -> ScoredIdSearch | None:
        store = self.owner.index.summary_index.vector_store
        return store if isinstance(store, ScoredIdSearch) else None

    def run(self) -> dict[str, float]:
        store, bundle = self._embedded(), self.plan.summary_bundle
        if store is not None and bundle.embedding is not None:
            ids, scores = store.query_ids(
                VectorStoreQuery(
                    query_embedding=bundle.embedding,
                    similarity_top_k=self.owner.document_depth(self.plan.top_k),
                    filters=self.plan.summary_filters,
                )
            )
            return dict(zip(ids, scores))
        return _routing_scores(self.levels.summary_vector._retrieve(bundle))

    async def arun(self) -> dict[str, float]:
        if self._embedded() is not None:
            return await asyncio.to_thread(self.run)  # embedded store: CPU work
        return _routing_scores(await self.levels.summary_vector._aretrieve(self.plan.summary_bundle))


@dataclass(frozen=True)
class DenseChunks:
    """``chunk id -> similarity`` of the best ``top_k`` chunks for ``bundle``.

    The embedded store is asked for ids and scores only (nodes are fetched
    for the final top-k alone); other stores go through
    :class:`BackfillVectorRetriever`, which filters what they cannot.
    """

    owner: Owner
    levels: Levels
    bundle: FilteredQueryBundle
    top_k: int

    def run(self) -> dict[str, float]:
        store, chunk_vector = _flat_chunk_search(self.owner, self.levels)
        if isinstance(store, ScoredIdSearch) and self.bundle.embedding is not None:
            query = VectorStoreQuery(
                query_embedding=self.bundle.embedding, similarity_top_k=self.top_k, filters=filters_of(self.bundle)
            )
            return dict(zip(*store.query_ids(query)))
        return _scores(chunk_vector._retrieve(replace(self.bundle, top_k=self.top_k)))

    async def arun(self) -> dict[str, float]:
        store, chunk_vector = _flat_chunk_search(self.owner, self.levels)
        if isinstance(store, ScoredIdSearch):
            return await asyncio.to_thread(self.run)  # embedded store: CPU work
        return _scores(await chunk_vector._aretrieve(replace(self.bundle, top_k=self.top_k)))


@dataclass(frozen=True)
class Lexical:
    """``node id -> BM25 score`` of the best ``top_k`` rows of a BM25 level."""

    bm25: LexicalLevel
    bundle: FilteredQueryBundle
    top_k: int

    def run(self) -> dict[str, float]:
        return self.bm25.scores_by_id(self.bundle, self.top_k)

    async def arun(self) -> dict[str, float]:
        return await asyncio.to_thread(self.run)  # BM25: CPU work


@dataclass(frozen=True)
class Hits:
    """A child retriever's hits, through ``_retrieve`` (no span of its own)."""

    retriever: BaseRetriever
    bundle: FilteredQueryBundle

    def run(self) -> list[NodeWithScore]:
        return self.retriever._retrieve(self.bundle)

    async def arun(self) -> list[NodeWithScore]:
        return await self.retriever._aretrieve(self.bundle)


@dataclass(frozen=True)
class RouteHits:
    """One routed document's hits: our chunk store filtered to the document,
    or the user's ``retriever_dict`` retriever (its own span, nested under ours)."""

    owner: Owner
    levels: Levels
    route: Route
    plan: Plan

    def run(self) -> list[NodeWithScore]:
        if self.levels.chunk_vector is not None:  # our chunk store: the route is a ref_doc_id filter
            return self.levels.chunk_vector._retrieve(wave_bundle(self.owner, [self.route], self.plan))
        retriever = child(self.owner, self.route)
        return child_results(self.route, retriever, lambda: retriever.retrieve(replace(self.plan.chunk_bundle)))

    async def arun(self) -> list[NodeWithScore]:
        if self.levels.chunk_vector is not None:
            return await self.levels.chunk_vector._aretrieve(wave_bundle(self.owner, [self.route], self.plan))
        retriever = child(self.owner, self.route)
        hits: list[NodeWithScore] | TypeError
        try:
            hits = await retriever.aretrieve(replace(self.plan.chunk_bundle))
        except TypeError as exc:
            hits = exc
        return child_results(self.route, retriever, lambda: _raise_or(hits))


@dataclass(frozen=True)
class Prefetch:
    """Read the records and summaries of the documents behind some summary hits in one round
    trip each, so the steps that follow read them from memory (an index in a database; async:
    off the event loop)."""

    owner: Owner
    levels: Levels
    summary_ids: tuple[str, ...]

    def run(self) -> None:
        index = self.owner.index
        store = self.levels.summary_store
        if store is None or not self.summary_ids:
            return
        doc_ids = [d for d in store.ref_doc_ids(list(self.summary_ids)) if d is not None]
        for view in (index.documents, index.summaries):
            prefetch = getattr(view, "prefetch", None)
            if prefetch is not None:
                prefetch(doc_ids)

    async def arun(self) -> None:
        await asyncio.to_thread(self.run)


def prefetched(owner: Owner, levels: Levels, *scores: Iterable[str]) -> tuple[Request, ...]:
    """The :class:`Prefetch` of the documents of these summary ids, when the index reads its
    records from a database (no request otherwise)."""
    if owner.index.database is None:
        return ()
    return (Prefetch(owner, levels, tuple(dict.fromkeys(i for ids in scores for i in ids))),)


def _scores(hits: list[NodeWithScore]) -> dict[str, float]:
    return {h.node.node_id: float(h.score) for h in hits if h.score is not None}


def _routing_scores(hits: list[NodeWithScore]) -> dict[str, float]:
    """A summary hit routes even without a score (a store that gives none): it counts as 0."""
    return {h.node.node_id: float(h.score or 0.0) for h in hits}


@dataclass(frozen=True)
class Pair:
    """The dense and lexical searches of one level for one step; a search the
    query's weights switch off is not asked, and contributes ``{}``."""

    dense: Request | None
    lexical: Request | None

    @property
    def requests(self) -> tuple[Request, ...]:
        return tuple(r for r in (self.dense, self.lexical) if r is not None)

    def read(self, answers: Sequence[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
        found = iter(answers)
        dense = next(found) if self.dense is not None else {}
        lexical = next(found) if self.lexical is not None else {}
        return dense, lexical


def document_pair(owner: Owner, plan: Plan, levels: Levels) -> Pair:
    weights = plan.document_weights
    bm25 = levels.summary_bm25
    return Pair(
        DenseDocuments(owner, plan, levels) if weights[0] > 0 else None,
        Lexical(bm25, plan.summary_bundle, owner.document_depth(plan.top_k))
        if weights[1] > 0 and bm25 is not None
        else None,
    )


def chunk_pair(owner: Owner, plan: Plan, levels: Levels, bundle: FilteredQueryBundle, top_k: int) -> Pair:
    weights = plan.chunk_weights
    bm25 = levels.chunk_bm25
    return Pair(
        DenseChunks(owner, levels, bundle, top_k) if weights[0] > 0 else None,
        Lexical(bm25, bundle, top_k) if weights[1] > 0 and bm25 is not None else None,
    )


def document_ids(levels: Levels, scores: dict[str, float]) -> dict[str, float]:
    """Summary node id keys replaced by their document ids."""
    return dict(zip(summary_doc_ids(levels, scores), scores.values()))


# ---------------------------------------------------------------- algorithms
T = TypeVar("T")
Search = Steps[T]


def fused_search(owner: Owner, plan: Plan, levels: Levels) -> Search[list[NodeWithScore]]:
    """The ``fused`` score mode: flat chunk and document searches, routes from
    the fused document scores, then routed chunk searches wave by wave into a
    :class:`~llama_index_ext_recursive.recursive.ranking.ChunkEvidenceSet`."""
    flat, documents = chunk_pair(owner, plan, levels, plan.chunk_bundle, plan.top_k), document_pair(owner, plan, levels)
    answers = yield flat.requests + documents.requests
    split = len(flat.requests)
    dense, lexical = documents.read(answers[split:])
    for request in prefetched(owner, levels, dense, lexical):
        yield (request,)
    routes, fused = route(owner, plan, document_ids(levels, dense), document_ids(levels, lexical))
    evidence = ChunkEvidenceSet(owner, levels, fused)
    evidence.add(*flat.read(answers[:split]), None)
    while routes:
        wave = chunk_pair(owner, plan, levels, wave_bundle(owner, routes, plan), routed_pool(owner, routes, plan))
        routes = evidence.add_wave(routes, *wave.read((yield wave.requests)))
    return (yield from evidence.ranked(plan))


def routed_search(owner: Owner, plan: Plan, levels: Levels) -> Search[list[NodeWithScore]]:
    """The ``chunk``/``weighted``/``product`` score modes: route by the summary
    searcher's hits, then search the routed documents wave by wave."""
    searcher = levels.summary_search or levels.summary_vector
    (summary_hits,) = yield (Hits(searcher, plan.summary_bundle),)
    for request in prefetched(owner, levels, [h.node.node_id for h in summary_hits]):
        yield (request,)
    waves = routes(owner, summary_hits, plan)
    best: dict[str, Any] = {}
    while waves:
        if levels.chunk_search is None:
            results = list((yield tuple(RouteHits(owner, levels, r, plan) for r in waves)))
        else:
            (hits,) = yield (Hits(levels.chunk_search, wave_bundle(owner, waves, plan)),)
            results = split_wave(waves, hits)
        waves = collect(owner, waves, results, plan, best)
    return rank_best(best, plan.top_k)


def document_search(owner: Owner, plan: Plan, levels: Levels) -> Search[list[DocumentWithScore]]:
    """The documents a query routes to, with the evidence that routed them."""
    documents = document_pair(owner, plan, levels)
    dense, lexical = documents.read((yield documents.requests))
    for request in prefetched(owner, levels, dense, lexical):
        yield (request,)
    dense, lexical = document_ids(levels, dense), document_ids(levels, lexical)
    return documents_with_scores(owner, route(owner, plan, dense, lexical)[1], dense, lexical)
