"""The one result type: a ``NodeWithScore`` whose explanation has a part per layer.

Every retriever of this package returns :class:`ExplainedNodeWithScore`. Its
:class:`Explanation` has one part per layer that touched the result:
``route`` (recursive retrieval: which document routed it and how it scored),
``fusion`` (hybrid fusion: each child hit that contributed) and ``auto``
(auto-retrieval: the validated spec that searched). A wrapper adds its own
part with :func:`explained` and keeps the parts its child attached, so a
recursive retriever over hybrid levels under an auto-retriever returns all
three. Code that only knows ``NodeWithScore`` is unaffected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import BaseNode, NodeWithScore
from pydantic import BaseModel, ConfigDict, Field


class RetrievalExplanation(BaseModel):
    """The ``route`` part: which summary routed a chunk and how it scored.

    In ``fused`` mode ``summary_score`` is the document's fused routing score
    (0 when routing did not pick it), ``chunk_score`` the chunk's fused score,
    ``dense_score``/``lexical_score`` the raw scores of its own searches
    (``None``: that search did not return it) and
    ``final_score = (chunk_score + document_weight * summary_score) / (1 + document_weight)``,
    in [0, 1] (the hit's score).
    """

    doc_id: str
    summary_node_id: str | None
    summary_score: float | None
    chunk_score: float | None
    final_score: float
    score_mode: str
    path: list[str]
    dense_score: float | None = None
    lexical_score: float | None = None
    document_weight: float | None = None


@dataclass(frozen=True)
class FusionHit:
    """One child's evidence for a fused result: an item of the ``fusion`` part.

    A plain dataclass: one is made per hit per query, and a pydantic model
    cost more than the fusion.
    """

    retriever_index: int
    retriever_name: str
    query_str: str
    rank: int  # 1-based position in the child's own returned list
    score: float | None  # the child's raw score
    contribution: float  # what this hit added to the fused score


class Explanation(BaseModel):
    """Why a result was returned, one part per layer (``None``: that layer was not involved).

    Attributes:
        route: set by ``RecursiveSummaryRetriever``.
        fusion: set by ``HybridFusionRetriever`` (every child hit that contributed).
        auto: set by ``ValidatedAutoRetriever``: its ``AutoExplanation``
            (the spec, the filters applied, the repairs), shared by the
            results of one call.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    route: RetrievalExplanation | None = None
    fusion: list[FusionHit] | None = None
    auto: Any | None = None  # AutoExplanation; typed loosely because auto/ builds on this module


class ExplainedNodeWithScore(NodeWithScore):
    """A ``NodeWithScore`` with its :class:`Explanation`.

    Each call creates its own objects, so explanations are safe under
    concurrent calls.
    """

    explanation: Explanation = Field(default_factory=Explanation)

    @property
    def provenance(self) -> list[FusionHit]:
        """The fusion part's hits (empty when no fusion touched this result)."""
        return list(self.explanation.fusion or ())

    @classmethod
    def class_name(cls) -> str:
        return "ExplainedNodeWithScore"


_UNSET: Any = object()


def explained(
    hit: NodeWithScore,
    *,
    score: float | None = _UNSET,
    route: RetrievalExplanation | None = _UNSET,
    fusion: list[FusionHit] | None = _UNSET,
    auto: Any = _UNSET,
) -> ExplainedNodeWithScore:
    """``hit`` as a new :class:`ExplainedNodeWithScore` with the given parts set.

    Parts not given are kept from ``hit``'s own explanation (when it has one),
    so wrapping never drops what an inner retriever attached; a part that is
    given replaces the inner one of the same layer. ``score`` defaults to the
    hit's. ``hit`` is not mutated. Built with ``model_construct``: every field
    comes from already-validated objects.
    """
    inner = hit.explanation if isinstance(hit, ExplainedNodeWithScore) else None
    parts: dict[str, Any] = {
        "route": inner.route if inner is not None else None,
        "fusion": inner.fusion if inner is not None else None,
        "auto": inner.auto if inner is not None else None,
    }
    for name, value in (("route", route), ("fusion", fusion), ("auto", auto)):
        if value is not _UNSET:
            parts[name] = value
    return ExplainedNodeWithScore.model_construct(
        node=hit.node,
        score=hit.score if score is _UNSET else score,
        explanation=Explanation.model_construct(**parts),
    )


def unexplained(node: BaseNode, score: float | None) -> ExplainedNodeWithScore:
    """A first-stage hit (vector or BM25 search) that no layer has explained yet.

    Every retriever returns the one result type, so code can read
    ``hit.explanation`` on any of them; ``model_construct`` because a search
    builds one per hit per query.
    """
    return ExplainedNodeWithScore.model_construct(
        node=node, score=score, explanation=Explanation.model_construct(route=None, fusion=None, auto=None)
    )


class DocumentEvidence(BaseModel):
    """Why a document was routed to: its fused score and the searches behind it.

    ``dense_score`` is the query's similarity to the document's routing vector,
    ``lexical_score`` its BM25 score over the document's title, metadata,
    summary and chunks (``None``: that search did not return it).
    """

    doc_id: str
    title: str
    rank: int
    score: float
    dense_score: float | None
    lexical_score: float | None


class DocumentWithScore(NodeWithScore):
    """A routed document (``retrieve_documents``): its summary ``IndexNode``
    (``index_id`` = document id), its routing score, and the
    :class:`DocumentEvidence` that routed it."""

    evidence: DocumentEvidence | None = None

    @classmethod
    def class_name(cls) -> str:
        return "DocumentWithScore"


# Names of earlier releases, when each layer had its own result type; all are now the one type.
FusedNodeWithScore = ExplainedNodeWithScore
AutoNodeWithScore = ExplainedNodeWithScore
