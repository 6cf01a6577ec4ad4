"""How a recursive retrieval weighs what a query says about documents and about chunks.

Pure functions over score maps (``id -> score``), no retriever objects, so the
ranking can be read, tested and swept offline in one place
(``benchmarks/recursive_sweep.py`` runs the same combination over whole datasets).

A document is scored by dense and lexical evidence over what represents it
(:func:`document_text`: its title, its document-level metadata, its summary and
its chunks); a chunk by dense and lexical evidence over its own text, gathered
from a flat search over all chunks and from a search inside the routed
documents. The chunk's final score is the mean of its fused chunk score and
its document's fused score, weighted 1 and ``document_weight`` (so it stays in
[0, 1], the scale of a flat relative-score fusion): a clause that exists
nearly word for word in every contract ranks first in the contract the query
names, while a chunk of a document that routing missed still competes on its
own evidence.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llama_index_ext_recursive.retrievers.fusion_scores import min_max_scores, relative_score_fusion

# Chosen by measurement over every shared dataset: docs/BENCHMARKS.md,
# "Recursive retrieval: combining document and chunk evidence".
DEFAULT_DOCUMENT_WEIGHT = 1.0
EQUAL_WEIGHTS = (0.5, 0.5)
# the share of document_weight a query gets when its best two documents tie (document_share)
UNSURE_SHARE = 0.5


@dataclass(frozen=True)
class ChunkEvidence:
    """One ranked chunk and the evidence behind its score.

    ``dense``/``lexical`` are the raw scores of the chunk's own searches
    (``None``: that search did not return it), ``chunk`` their fused score,
    ``document`` its document's fused routing score (0 when unrouted) and
    ``final = (chunk + document_weight * document) / (1 + document_weight)`` (:func:`final_score`).
    """

    node_id: str
    doc_id: str
    dense: float | None
    lexical: float | None
    chunk: float
    document: float
    final: float
    shares: tuple[float | None, float | None] = (None, None)  # (dense, lexical) parts of ``chunk``


def final_score(chunk: float, document: float, document_weight: float) -> float:
    """A chunk's score: the mean of its chunk and document scores (both 0-1), weighted 1 and
    ``document_weight``, so every score a recursive call returns is in [0, 1] and a
    ``SimilarityPostprocessor`` cutoff reads as it does on a flat relative-score fusion
    (relative to this query's best evidence, not a cosine similarity)."""
    return (chunk + document_weight * document) / (1.0 + document_weight)


def document_text(title: str, metadata: Mapping[str, Any], summary: str, chunks: Sequence[str]) -> str:
    """The text a document is searched by lexically: what identifies it, then what it says.

    The title and every document-level metadata value (keys constant across the
    document's chunks, including those excluded from chunk embeddings, such as a
    file name or the parties of a contract) come first; then the summary and the
    chunks. A query naming "CopAcc and ToP Mentors" matches that contract's title
    even when no chunk repeats the names.
    """
    return "\n".join([document_identity(title, metadata), summary, *chunks])


def document_identity(title: str, metadata: Mapping[str, Any]) -> str:
    """The first line of :func:`document_text`: the title and the document-level metadata values."""
    identity = [title] + [
        str(value)
        for _, value in sorted(metadata.items())
        if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value) != title
    ]
    return " ".join(identity)


def fuse_document_scores(
    dense: Mapping[str, float], lexical: Mapping[str, float], weights: Sequence[float] = EQUAL_WEIGHTS
) -> dict[str, float]:
    """Each document's routing score in [0, 1]: relative-score fusion of its two searches."""
    return relative_score_fusion([dense, lexical], list(weights))


def routing_certainty(document_scores: Mapping[str, float]) -> float:
    """How sure one query's routing is, 0-1: ``min(1, 2 * lead)``.

    ``lead`` is how far the best document's fused routing score (0-1) is
    ahead of the next one's; with fewer than two documents to choose from
    routing tells nothing (0). A query that names its document (a contract's
    parties) routes with a wide lead; where two documents score alike,
    routing is a guess, and a wrong guess would push the right chunk down.
    Per query, not per corpus: one index serves both kinds of question. The
    certainty sets this query's :func:`document_share` and the ``tail`` of
    :func:`chunk_shares`. Measured on every shared dataset (docs/BENCHMARKS.md,
    "Ranking: never below flat search (issue 28)").
    """
    best = heapq.nlargest(2, document_scores.values())
    if len(best) < 2:
        return 0.0
    return min(1.0, 2.0 * (best[0] - best[1]))


def document_share(certainty: float) -> float:
    """The share of ``document_weight`` a query gets: :data:`UNSURE_SHARE` when routing
    is a guess, rising to all of it when routing is sure (:func:`routing_certainty`)."""
    return UNSURE_SHARE + (1.0 - UNSURE_SHARE) * certainty


def chunk_shares(
    dense: Mapping[str, float],
    lexical: Mapping[str, float],
    weights: Sequence[float] = EQUAL_WEIGHTS,
    head: int | None = None,
    tail: float = 1.0,
) -> dict[str, tuple[float | None, float | None]]:
    """Each chunk's (dense, lexical) share of its fused chunk score; the shares add up to it.

    Relative-score fusion of the two searches (``None``: that search did not
    return the chunk). With ``head``, each search is scaled by its best
    ``head`` scores (:func:`~llama_index_ext_recursive.retrievers.fusion_scores.head_scores`),
    so the two weigh as in a flat relative-score fusion of their top-k however
    many routed candidates one of them added, and the fused scores are then
    mapped back to [0, 1] (the scale of the document scores they are added to),
    the offset split evenly between the shares.

    A score below a search's ``head``-th best scales below 0; ``tail``
    (0-1) is how much of that shortfall counts. At 1 a routed candidate keeps
    its full standing against the others; at 0 every chunk outside a
    search's best ``head`` gets nothing from it, so the flat candidates rank
    exactly as a flat relative-score fusion of the two top-k lists (our
    hybrid retriever's arithmetic) and routed-only candidates are left to
    their document's evidence.
    """
    parts = [
        {
            node_id: value if value >= 0 else value * tail
            for node_id, value in relative_score_fusion(
                [scores if i == j else {} for j in range(2)], list(weights), head=head
            ).items()
        }
        for i, scores in enumerate((dense, lexical))
    ]
    ids = list(dict.fromkeys([*parts[0], *parts[1]]))
    raw = {n: (parts[0].get(n), parts[1].get(n)) for n in ids}
    if head is None or not ids:
        return raw
    fused = [sum(v for v in raw[n] if v is not None) for n in ids]
    low, high = min(fused), max(fused)
    scaled = min_max_scores(fused)
    out = {}
    for node_id, value in zip(ids, scaled):
        present = sum(v is not None for v in raw[node_id])
        # value = (fused - low) / (high - low): each share loses its part of the offset
        out[node_id] = tuple(
            None if v is None else (value / present if high == low else (v - low / present) / (high - low))
            for v in raw[node_id]
        )
    return out  # type: ignore[return-value]


def rank_chunks(
    dense: Mapping[str, float],
    lexical: Mapping[str, float],
    doc_of: Mapping[str, str],
    document_scores: Mapping[str, float],
    weights: Sequence[float] = EQUAL_WEIGHTS,
    document_weight: float = DEFAULT_DOCUMENT_WEIGHT,
    top_k: int | None = None,
    head: int | None = None,
    tail: float = 1.0,
) -> list[ChunkEvidence]:
    """Rank chunks by fused chunk evidence and weighted document evidence (:func:`final_score`).

    Args:
        dense: raw dense scores of the chunks the dense searches returned.
        lexical: raw lexical (BM25) scores of the chunks the lexical searches returned.
        doc_of: each chunk's document id.
        document_scores: fused routing scores (:func:`fuse_document_scores`).
        weights: (dense, lexical) weights of the chunk-level fusion.
        document_weight: how much a document's routing score adds to its chunks.
        top_k: how many to return (``None``: all).
        head: scale each search by its best ``head`` scores (the flat top-k;
            :func:`chunk_shares`); ``None``: by all its candidates. Measured in
            docs/BENCHMARKS.md, "Ranking: never below flat search (issue 28)".
        tail: how much a score below a search's ``head`` counts (:func:`chunk_shares`).

    Returns:
        Best first; ties broken by node id, so the order is deterministic.
    """
    ranked = []
    for node_id, shares in chunk_shares(dense, lexical, weights, head, tail).items():
        chunk = math.fsum(v for v in shares if v is not None)
        doc_id = doc_of[node_id]
        document = float(document_scores.get(doc_id, 0.0))
        ranked.append(
            ChunkEvidence(
                node_id=node_id,
                doc_id=doc_id,
                dense=dense.get(node_id),
                lexical=lexical.get(node_id),
                chunk=chunk,
                document=document,
                final=final_score(chunk, document, document_weight),
                shares=shares,
            )
        )
    ranked.sort(key=lambda e: (-e.final, e.node_id))
    return ranked if top_k is None else ranked[:top_k]
