"""How one recursive call turns search hits into its ranked results.

Per call, the retriever resolves a :class:`Plan` (bundles, filters, fusion
weights), then hands hits to the code here: :class:`ChunkEvidenceSet` for the
``fused`` score mode (id -> score maps from flat and routed searches, ranked
by :func:`~llama_index_ext_recursive.recursive.evidence.rank_chunks`), and
:func:`collect` for the ``chunk``/``weighted``/``product`` modes. Both follow
``IndexNode`` links (:func:`follow_link`), post-check what a search could not
filter with :func:`~llama_index_ext_recursive.filters.keep_matching` (on the
filterable metadata, ``ref_doc_id`` included) and build results with
:func:`~llama_index_ext_recursive.results.explained`, which keeps the parts a
child attached (a hybrid level's fusion hits).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from llama_index.core.schema import BaseNode, IndexNode, NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_ext_recursive.filters import keep_matching
from llama_index_ext_recursive.query import Call, FilteredQueryBundle
from llama_index_ext_recursive.recursive.evidence import (
    DEFAULT_DOCUMENT_WEIGHT,
    EQUAL_WEIGHTS,
    ChunkEvidence,
    document_share,
    rank_chunks,
    routing_certainty,
)
from llama_index_ext_recursive.recursive.levels import Levels
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.recursive.settings import LevelMode, Owner, ScoreMode
from llama_index_ext_recursive.results import ExplainedNodeWithScore, FusionHit, RetrievalExplanation, explained
from llama_index_ext_recursive.steps import Steps
from llama_index_ext_recursive.validation import closest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReadNodes:
    """Nodes by id from a docstore, in one call (async: off the event loop)."""

    docstore: Any
    node_ids: tuple[str, ...]

    def run(self) -> list[BaseNode]:
        return list(self.docstore.get_nodes(list(self.node_ids), raise_error=False))

    async def arun(self) -> list[BaseNode]:
        return await asyncio.to_thread(self.run)


@dataclass(frozen=True)
class Route:
    """A document to search, with the score and path that led there."""

    doc_id: str
    score: float | None
    summary_node_id: str | None
    summary_score: float | None
    path: tuple[str, ...]


@dataclass
class Plan:
    """Per-call state: the resolved call, the bundles to pass down, the filters
    in force at each level and the (dense, lexical) fusion weights of each
    level for this query's script."""

    call: Call
    summary_bundle: FilteredQueryBundle
    chunk_bundle: FilteredQueryBundle
    chunk_filters: MetadataFilters | None
    summary_filters: MetadataFilters | None
    document_weights: tuple[float, float] = EQUAL_WEIGHTS
    chunk_weights: tuple[float, float] = EQUAL_WEIGHTS
    document_weight: float = DEFAULT_DOCUMENT_WEIGHT  # fused mode: see RecursiveSummaryRetriever._document_weight

    @property
    def top_k(self) -> int:
        return self.call.top_k


def combine(owner: Owner, parent: float | None, child: float | None) -> float:
    """A chunk's score from its document's and its own (``chunk``/``weighted``/``product``)."""
    child = 0.0 if child is None else child
    if parent is None or owner.score_mode == ScoreMode.CHUNK:
        return child
    if owner.score_mode == ScoreMode.PRODUCT:
        return parent * child
    return owner.score_alpha * parent + (1.0 - owner.score_alpha) * child


def follow_link(owner: Owner, route: Route, hit: NodeWithScore) -> Route | BaseNode | None:
    """Resolve an ``IndexNode`` hit to a document to search or a node."""
    index = owner.index
    target = hit.node.index_id  # type: ignore[attr-defined]
    if target in index.summaries or target in index.retriever_dict:
        if target in route.path:
            logger.warning("link cycle %s -> %s not followed", " -> ".join(route.path), target)
            return None
        if len(route.path) > owner.max_link_depth:
            logger.warning("link depth %d reached at %s; not followed", owner.max_link_depth, target)
            return None
        return Route(
            target,
            combine(owner, route.score, hit.score),
            route.summary_node_id,
            route.summary_score,
            route.path + (target,),
        )
    if index.docstore is not None:
        node = index.docstore.get_node(target, raise_error=False)
        if node is not None:
            return node
        # builds and updates refuse such a link, so an index loaded from a previous
        # release's folder holds it (validate_links warned at load): nothing to follow
        logger.warning(
            "IndexNode %r of document %r points to %r, which no longer exists; not followed",
            hit.node.node_id,
            route.doc_id,
            target,
        )
        return None
    raise LinkError(
        f"IndexNode {hit.node.node_id!r} returned for document {route.doc_id!r} points to "
        f"{target!r}, which is neither a document nor a chunk "
        f"({closest(target, index.doc_ids)})"
    )


def collect(
    owner: Owner,
    routes: list[Route],
    results: list[list[NodeWithScore]],
    plan: Plan,
    best: dict[str, ExplainedNodeWithScore],
) -> list[Route]:
    """Fold one wave of chunk results into ``best``; return links to follow.

    A ``retriever_dict`` child may ignore the filters it is given, and a link
    target was not searched at all: those hits are post-checked here.
    """
    follow: list[Route] = []
    opaque = owner.index.chunk_index is None
    for route, hits in zip(routes, results):
        for hit in hits:
            if isinstance(hit.node, IndexNode):
                link = follow_link(owner, route, hit)
                if isinstance(link, Route):
                    follow.append(link)
                    continue
                if link is None or not keep_matching([NodeWithScore(node=link)], plan.chunk_filters):
                    continue
                hit = NodeWithScore(node=link, score=hit.score)
            elif opaque and not keep_matching([hit], plan.chunk_filters):
                continue
            final = combine(owner, route.score, hit.score)
            current = best.get(hit.node.node_id)
            # every entry of best was made with a score (score=final below)
            if current is not None and current.score is not None and current.score >= final:
                continue
            best[hit.node.node_id] = explained(
                hit,
                score=final,
                route=RetrievalExplanation(
                    doc_id=route.doc_id,
                    summary_node_id=route.summary_node_id,
                    summary_score=route.summary_score,
                    chunk_score=hit.score,
                    final_score=final,
                    score_mode=owner.score_mode.value,
                    path=list(route.path),
                ),
            )
    return follow


def rank_best(best: dict[str, ExplainedNodeWithScore], top_k: int) -> list[NodeWithScore]:
    ranked = sorted(best.values(), key=lambda n: (-(n.score or 0.0), n.node.node_id))
    return list(ranked[:top_k])


class ChunkEvidenceSet:
    """One ``fused`` call's chunk evidence: the best dense and lexical score of
    every chunk the flat and routed searches returned, and the documents'
    routing scores, ranked by :func:`~llama_index_ext_recursive.recursive.evidence.rank_chunks`.
    Searches hand in ``id -> score`` maps; nodes are fetched for the final top-k
    (and for ``IndexNode`` links, which are followed instead of ranked)."""

    def __init__(self, owner: Owner, levels: Levels, documents: Mapping[str, float]) -> None:
        self._owner = owner
        self._levels = levels
        assert owner.index.docstore is not None
        self._docstore = owner.index.docstore
        self.document_scores: dict[str, float] = dict(documents)  # fused routing scores
        self.dense: dict[str, float] = {}
        self.lexical: dict[str, float] = {}
        self.nodes: dict[str, BaseNode] = {}  # linked targets, fetched while following
        self.doc_of: dict[str, str] = {}
        self.paths: dict[str, tuple[str, ...]] = {}
        self.linked: set = set()  # nodes reached through an IndexNode: filters checked here

    def _route_of(self, doc_id: str) -> Route:
        score = self.document_scores.get(doc_id, 0.0)
        return Route(doc_id, score, self._summary_id(doc_id), score, (doc_id,))

    def _summary_id(self, doc_id: str) -> str | None:
        return self._owner.index.summary_node_id(doc_id)

    def add(self, dense: Mapping[str, float], lexical: Mapping[str, float], route: Route | None) -> list[Route]:
        """Record scores (of one route, or flat when ``route`` is None); return links to follow."""
        follow: list[Route] = []
        links = self._levels.link_ids
        owners = self._levels.owners_of([*dense, *lexical]) if route is None else {}
        for scores, hits in ((self.dense, dense), (self.lexical, lexical)):
            for node_id, score in hits.items():
                if scores is self.lexical and score <= 0:
                    continue
                current = route or self._route_of(owners[node_id])
                if node_id in links:
                    node = self._docstore.get_node(node_id, raise_error=False)
                    if node is None:
                        continue  # a stale id: the store kept a node the docstore lost
                    link = follow_link(self._owner, current, NodeWithScore(node=node, score=score))
                    if isinstance(link, Route):
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

    def add_wave(self, routes: list[Route], dense: Mapping[str, float], lexical: Mapping[str, float]) -> list[Route]:
        """Record one wave of routed searches; return the documents links lead to."""
        slot: dict[str, int] = {}
        i: int | None
        for i, route in enumerate(routes):
            slot.setdefault(route.doc_id, i)
        parts: list[tuple[dict[str, float], dict[str, float]]] = [({}, {}) for _ in routes]
        owners = self._levels.owners_of([*dense, *lexical])
        for which, hits in ((0, dense), (1, lexical)):
            for node_id, score in hits.items():
                i = slot.get(owners[node_id])
                if i is not None:
                    parts[i][which][node_id] = score
        follow: list[Route] = []
        seen = {r.doc_id for r in routes}
        for route, (dense_part, lexical_part) in zip(routes, parts):
            for link in self.add(dense_part, lexical_part, route):
                if link.doc_id not in seen:
                    seen.add(link.doc_id)
                    follow.append(link)
        return follow

    def _nodes(self, node_ids: list[str]) -> Steps[dict[str, BaseNode]]:
        """The nodes of ``node_ids`` that exist, read in one docstore call (a store answers it
        with one query, not one per node; async: off the event loop)."""
        found = {n: self.nodes[n] for n in node_ids if n in self.nodes}
        wanted = tuple(n for n in node_ids if n not in found)
        if wanted:
            (read,) = yield (ReadNodes(self._docstore, wanted),)
            found.update((node.node_id, node) for node in read)
        return found

    def _fusion_parts(self, plan: Plan, ranked: list[ChunkEvidence]) -> Callable[[str], list[FusionHit]]:
        """``node id -> fusion part``: each chunk search's hit behind a chunk, with
        its rank, raw score and what it added to the chunk's fused score (the
        shares :func:`rank_chunks` summed, so they add up to ``chunk_score``), as a
        hybrid retriever reports them."""
        searches = [(0, "vector", self.dense), (1, "bm25", self.lexical)]
        shares = {e.node_id: e.shares for e in ranked}
        ranks = [
            {node_id: r for r, node_id in enumerate(sorted(scores, key=lambda n: (-scores[n], n)), 1)}
            for _, _, scores in searches
        ]
        query = plan.call.bundle.query_str

        def part(node_id: str) -> list[FusionHit]:
            return [
                FusionHit(
                    retriever_index=i,
                    retriever_name=name,
                    query_str=query,
                    rank=ranks[i][node_id],
                    score=scores[node_id],
                    contribution=shares[node_id][i] or 0.0,
                )
                for i, name, scores in searches
                if node_id in scores
            ]

        return part

    def ranked(self, plan: Plan) -> Steps[list[NodeWithScore]]:
        owner = self._owner
        if self.linked and plan.chunk_filters is not None:
            # link targets were not searched, so the filters were not applied to them
            linked = [NodeWithScore(node=self.nodes[n]) for n in self.linked]
            kept = {hit.node.node_id for hit in keep_matching(linked, plan.chunk_filters)}
            for node_id in self.linked - kept:
                self.dense.pop(node_id, None)
                self.lexical.pop(node_id, None)
        # where routing is sure, the documents' evidence counts in full and routed candidates keep
        # their standing; where it is a guess, the ranking falls back toward the flat hybrid's
        certainty = routing_certainty(self.document_scores)
        document_weight = plan.document_weight * document_share(certainty)
        ranked = rank_chunks(
            self.dense,
            self.lexical,
            self.doc_of,
            self.document_scores,
            plan.chunk_weights,
            document_weight,
            head=plan.top_k,
            tail=certainty,
        )
        fusion = self._fusion_parts(plan, ranked) if owner.chunk_mode == LevelMode.HYBRID else None
        out: list[NodeWithScore] = []
        nodes: dict[str, BaseNode] = {}
        for position, e in enumerate(ranked):
            if position % plan.top_k == 0:  # the next top_k candidates, read at once
                nodes = yield from self._nodes([c.node_id for c in ranked[position : position + plan.top_k]])
            node = nodes.get(e.node_id)
            if node is None:
                logger.debug("chunk %r is in the store but not the docstore; skipped", e.node_id)
                continue
            out.append(
                explained(
                    NodeWithScore.model_construct(node=node, score=e.final),
                    route=RetrievalExplanation.model_construct(
                        doc_id=e.doc_id,
                        summary_node_id=self._summary_id(e.doc_id),
                        summary_score=e.document,
                        chunk_score=e.chunk,
                        final_score=e.final,
                        score_mode=ScoreMode.FUSED.value,
                        path=list(self.paths.get(e.node_id, (e.doc_id,))),
                        dense_score=e.dense,
                        lexical_score=e.lexical,
                        document_weight=document_weight,
                    ),
                    fusion=fusion(e.node_id) if fusion is not None else None,
                )
            )
            if len(out) == plan.top_k:
                break
        return out
