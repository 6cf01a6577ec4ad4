"""How the CLI shows results: as text for a reader, or as JSON for a program."""

from __future__ import annotations

from typing import Any

from llama_index.core.schema import NodeWithScore


def hit_to_json(hit: NodeWithScore) -> dict[str, Any]:
    """One hit as ``query --json``, ``shell --json`` and ``serve`` give it."""
    route = getattr(getattr(hit, "explanation", None), "route", None)
    return {
        "node_id": hit.node.node_id,
        "score": hit.score,
        "text": hit.node.get_content(),
        "explanation": route.model_dump() if route is not None else None,
    }


def print_results(question: str, results: list[NodeWithScore], width: int = 110) -> None:
    """The question, the documents it was routed to, then each hit on one line."""
    print(f"\nQ: {question}")
    routed: dict[str, float] = {}
    for hit in results:
        info = getattr(getattr(hit, "explanation", None), "route", None)
        if info is not None and info.doc_id not in routed:
            routed[info.doc_id] = info.summary_score or 0.0
    if routed:
        print("  routed documents: " + ", ".join(f"{d} ({s:.3f})" for d, s in routed.items()))
    if not results:
        print("  no results")
    for rank, hit in enumerate(results, 1):
        info = getattr(getattr(hit, "explanation", None), "route", None)
        text = " ".join(hit.node.get_content().split())
        text = text if len(text) <= width else text[: width - 3] + "..."
        where = f"{info.doc_id} chunk={info.chunk_score:.3f} " if info else ""
        print(f"  {rank:>2}. score={hit.score:.3f} {where}| {text}")
