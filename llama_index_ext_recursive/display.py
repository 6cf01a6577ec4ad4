"""A retrieval you can read: a notebook view grouped by document, or each hit in a few lines.

Every hit of this package carries its evidence (:mod:`~llama_index_ext_recursive.results`):
the document that routed it and that document's score, the chunk's dense and
BM25 scores and what each added. Printed as data it is a wall of text;
``hit.describe()`` gives it in three lines, and :class:`RetrievalView`
shows a whole retrieval in Jupyter (``_repr_html_``): the documents in the
order their best chunk ranks, each with its routing score, the chunks under it,
and under each chunk a bar whose parts are what dense search, BM25 and the
document added to its score. The HTML is self-contained (inline styles, no
script, nothing fetched) and every text from the index is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from llama_index.core.schema import NodeWithScore

from llama_index_ext_recursive.results import ExplainedNodeWithScore, describe, score_parts, snippet, title_of

# the parts of a score bar, in order: (label, colour)
PART_COLOURS = {"dense": "#4c78a8", "bm25": "#f58518", "document": "#54a24b", "score": "#9d9d9d"}


class RetrievalView:
    """A retrieval's hits, shown grouped by document in a notebook and as text elsewhere.

    Args:
        hits: what a retriever returned (any ``NodeWithScore``; this package's
            hits show their evidence).
        query: the question, shown as the view's heading.
    """

    def __init__(self, hits: Sequence[NodeWithScore], query: str | None = None) -> None:
        self.hits = list(hits)
        self.query = query

    def groups(self) -> list[tuple[str, float | None, list[tuple[int, NodeWithScore]]]]:
        """(document title, its routing score, its hits with their ranks), documents in the
        order of their best hit."""
        grouped: dict[str, tuple[str, float | None, list[tuple[int, NodeWithScore]]]] = {}
        for rank, hit in enumerate(self.hits, 1):
            route = hit.explanation.route if isinstance(hit, ExplainedNodeWithScore) else None
            key = route.doc_id if route is not None else title_of(hit)
            if key not in grouped:
                grouped[key] = (title_of(hit), route.summary_score if route is not None else None, [])
            grouped[key][2].append((rank, hit))
        return list(grouped.values())

    def __str__(self) -> str:
        lines = [f"Q: {self.query}"] if self.query else []
        for rank, hit in enumerate(self.hits, 1):
            lines.append(f"{rank}. " + describe(hit).replace("\n", "\n   "))
        return "\n".join(lines) if lines else "no results"

    def __repr__(self) -> str:
        return f"RetrievalView({len(self.hits)} hits)"

    def _repr_html_(self) -> str:
        out = ['<div style="font-family:system-ui,sans-serif;font-size:13px;max-width:900px">']
        if self.query:
            out.append(f'<div style="font-weight:600;margin-bottom:6px">{html.escape(self.query)}</div>')
        out.append(_legend())
        if not self.hits:
            out.append("<div>no results</div>")
        for title, document_score, hits in self.groups():
            score = "" if document_score is None else f" &middot; document score {document_score:.3f}"
            out.append(
                '<div style="border:1px solid #ddd;border-radius:6px;margin:8px 0;padding:6px 10px">'
                f'<div class="document" style="font-weight:600">{html.escape(title)}'
                f'<span style="font-weight:400;color:#666">{score}</span></div>'
            )
            for rank, hit in hits:
                out.append(_hit_html(rank, hit))
            out.append("</div>")
        out.append("</div>")
        return "".join(out)


def _legend() -> str:
    items = "".join(
        f'<span style="margin-right:12px"><span style="display:inline-block;width:10px;height:10px;'
        f'background:{colour};margin-right:4px"></span>{label}</span>'
        for label, colour in PART_COLOURS.items()
        if label != "score"
    )
    return f'<div style="color:#444;margin-bottom:4px">{items}</div>'


def _hit_html(rank: int, hit: NodeWithScore) -> str:
    bars = "".join(
        f'<span class="part" data-part="{part.label}" data-value="{part.value:.4f}" title="{part.label} '
        f'{part.value:.3f}" style="display:inline-block;height:10px;width:{100 * max(part.value, 0.0):.2f}%;'
        f'background:{PART_COLOURS[part.label]}"></span>'
        for part in score_parts(hit)
    )
    return (
        f'<div class="hit" data-rank="{rank}" style="margin:6px 0 6px 8px">'
        f'<div><b>{rank}.</b> <span class="score">{float(hit.score or 0.0):.3f}</span> '
        f'<span style="color:#333">{html.escape(snippet(hit))}</span></div>'
        f'<div style="width:300px;background:#f0f0f0;white-space:nowrap;overflow:hidden">{bars}</div>'
        "</div>"
    )
