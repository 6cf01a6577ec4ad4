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

from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore
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

    def describe(self) -> str:
        """Three lines: the score and the document, what made the score, the start of the chunk."""
        return describe(self)

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

    def describe(self) -> str:
        """One line: rank, routing score, title and id, and the two searches behind it."""
        return describe_document(self)

    @classmethod
    def class_name(cls) -> str:
        return "DocumentWithScore"


# Names of earlier releases, when each layer had its own result type; all are now the one type.
FusedNodeWithScore = ExplainedNodeWithScore
AutoNodeWithScore = ExplainedNodeWithScore


# ------------------------------------------------------------ reading a hit
SNIPPET = 160  # characters of a chunk a description shows


@dataclass(frozen=True)
class ScorePart:
    """What one kind of evidence added to a hit's score (the parts add up to the score)."""

    label: str  # "dense", "bm25", "document", or "score" for a hit without parts
    value: float


def title_of(hit: NodeWithScore) -> str:
    """The hit's document as a reader knows it: the title the index gave its chunks, else the
    node's ``title``/``file_name`` metadata, else its document id."""
    metadata = hit.node.metadata
    for key in ("document", "title", "file_name"):
        if metadata.get(key):
            return str(metadata[key])
    route = hit.explanation.route if isinstance(hit, ExplainedNodeWithScore) else None
    return route.doc_id if route is not None else str(hit.node.ref_doc_id or hit.node.node_id)


def score_parts(hit: NodeWithScore) -> list[ScorePart]:
    """The hit's score split by evidence: a recursive hit's dense and BM25 shares of its chunk
    score and its document's share (each scaled as the final score is); a hybrid hit's
    contribution of each child; otherwise the score itself."""
    score = float(hit.score or 0.0)
    explanation = hit.explanation if isinstance(hit, ExplainedNodeWithScore) else None
    route = explanation.route if explanation is not None else None
    fusion = explanation.fusion if explanation is not None else None
    if route is not None and route.document_weight is not None and route.chunk_score is not None:
        scale = 1.0 + route.document_weight  # final = (chunk + weight * document) / (1 + weight)
        parts = [ScorePart(_label(h.retriever_name), h.contribution / scale) for h in fusion or ()]
        if not parts:
            parts = [ScorePart("dense" if route.dense_score is not None else "bm25", route.chunk_score / scale)]
        parts.append(ScorePart("document", route.document_weight * (route.summary_score or 0.0) / scale))
        return parts
    if fusion:
        return [ScorePart(_label(h.retriever_name), h.contribution) for h in fusion]
    return [ScorePart("score", score)]


def _label(retriever_name: str) -> str:
    return "bm25" if "bm25" in retriever_name.lower() else "dense"


def describe(hit: NodeWithScore) -> str:
    """Three lines: the score and the document; what made the score; the start of the chunk."""
    head = f"{float(hit.score or 0.0):.3f}  {title_of(hit)}"
    route = hit.explanation.route if isinstance(hit, ExplainedNodeWithScore) else None
    if route is not None and route.summary_score is not None:
        head += f"  (document score {route.summary_score:.3f})"
    evidence = []
    if route is not None:
        if route.dense_score is not None:
            evidence.append(f"dense {route.dense_score:.3f}")
        if route.lexical_score is not None:
            evidence.append(f"BM25 {route.lexical_score:.2f}")
    parts = " + ".join(f"{p.label} {p.value:.3f}" for p in score_parts(hit))
    why = f"score = {parts}" + (f"; raw {', '.join(evidence)}" if evidence else "")
    return "\n".join([head, f"  {why}", f"  {snippet(hit)!r}"])


def describe_document(document: DocumentWithScore) -> str:
    """One line for a routed document: its score, title and the two searches behind it."""
    evidence = document.evidence
    if evidence is None:
        return f"{float(document.score or 0.0):.3f}  {document.node.node_id}"
    found = [f"dense {evidence.dense_score:.3f}" if evidence.dense_score is not None else "dense -"]
    found.append(f"BM25 {evidence.lexical_score:.2f}" if evidence.lexical_score is not None else "BM25 -")
    return f"{evidence.rank}. {evidence.score:.3f}  {evidence.title} ({evidence.doc_id}): {', '.join(found)}"


def snippet(hit: NodeWithScore) -> str:
    """The start of the hit's text, whitespace collapsed."""
    text = " ".join(hit.node.get_content(metadata_mode=MetadataMode.NONE).split())
    return text if len(text) <= SNIPPET else text[: SNIPPET - 3] + "..."
