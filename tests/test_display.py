"""Reading a retrieval: ``describe()`` on every hit and the notebook view (display.py)."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from conftest import TOPICS, topic_nodes
from llama_index.core.schema import Document, NodeWithScore, TextNode

from llama_index_ext_recursive import HybridFusionRetriever, RecursiveSummaryRetriever, RetrievalView
from llama_index_ext_recursive.results import score_parts


def topic_documents(extra=()):
    return [
        Document(text=" ".join(sentences), metadata={"doc_id": doc_id, "title": title})
        for doc_id, (title, _, _, sentences) in TOPICS.items()
    ] + list(extra)


@pytest.fixture
def retriever(lexical):  # three chunks per document, so a document can hold several hits
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, similarity_top_k=5)


class Parsed(HTMLParser):
    """The view's documents, hits and bar parts, in page order."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.documents: list[str] = []
        self.hits: list[tuple[str, int]] = []  # (document, rank)
        self.parts: dict[int, list[tuple[str, float]]] = {}
        self.scripts = 0
        self._in_document = False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.scripts += tag == "script"
        if attrs.get("class") == "document":
            self._in_document = True
            self.documents.append("")
        elif attrs.get("class") == "hit":
            self.hits.append((self.documents[-1], int(attrs["data-rank"])))
        elif attrs.get("class") == "part":
            self.parts.setdefault(self.hits[-1][1], []).append((attrs["data-part"], float(attrs["data-value"])))

    def handle_endtag(self, tag):
        if tag == "div":
            self._in_document = False

    def handle_data(self, data):
        if self._in_document and not self.documents[-1]:
            self.documents[-1] = data


def test_describe_names_the_document_and_splits_the_score_by_evidence(retriever):
    hit = retriever.retrieve("honeybee queen eggs")[0]
    text = hit.describe()
    title = TOPICS[hit.explanation.route.doc_id][0]
    assert text.splitlines()[0].startswith(f"{hit.score:.3f}  {title}")
    assert f"document score {hit.explanation.route.summary_score:.3f}" in text
    parts = score_parts(hit)
    assert {p.label for p in parts} <= {"dense", "bm25", "document"} and "document" in {p.label for p in parts}
    assert sum(p.value for p in parts) == pytest.approx(hit.score)  # the parts add up to the score
    assert f"dense {hit.explanation.route.dense_score:.3f}" in text


def test_the_view_groups_hits_under_their_documents_in_rank_order_with_bars_that_add_up(retriever):
    hits = retriever.retrieve("bees and solar panels")
    parsed = Parsed(RetrievalView(hits, query="bees and solar panels")._repr_html_())
    assert len(parsed.documents) < len(hits)  # a document holds several of them
    titles = [TOPICS[h.explanation.route.doc_id][0] for h in hits]
    assert parsed.documents == list(dict.fromkeys(titles))  # documents in the order of their best hit
    assert sorted(rank for _, rank in parsed.hits) == list(range(1, len(hits) + 1))
    for document, rank in parsed.hits:
        assert titles[rank - 1] == document  # each hit under its own document
    for document in parsed.documents:  # and in rank order under it
        ranks = [rank for d, rank in parsed.hits if d == document]
        assert ranks == sorted(ranks)
    for rank, hit in enumerate(hits, 1):
        assert sum(v for _, v in parsed.parts[rank]) == pytest.approx(hit.score, abs=1e-3)
    assert str(RetrievalView(hits)).count("\n") >= 3 * len(hits) - 1  # the text form: each hit described


def test_text_from_the_index_is_escaped(lexical):
    hostile = Document(
        text="<script>alert('x')</script> bees <b>bold</b>", metadata={"doc_id": "x", "title": "<i>T</i>"}
    )
    retriever = RecursiveSummaryRetriever.from_documents(topic_documents([hostile]), embed_model=lexical)
    page = RetrievalView(retriever.retrieve("script alert bees"), query="<q>")._repr_html_()
    parsed = Parsed(page)
    assert parsed.scripts == 0 and "&lt;script&gt;" in page and "<b>bold" not in page and "<i>T</i>" not in page
    assert "<i>T</i>" in parsed.documents and "&lt;q&gt;" in page


def test_hits_of_other_retrievers_render_too(lexical):
    nodes = [TextNode(id_=f"n{i}", text=t, metadata={"title": f"note {i}"}) for i, t in enumerate(["bees", "sun"])]
    hybrid = HybridFusionRetriever.from_nodes(nodes, embed_model=lexical, similarity_top_k=2, calibrate=False)
    fused = hybrid.retrieve("bees")
    plain = [NodeWithScore(node=nodes[1], score=0.25)]  # an upstream retriever's hit
    for hits in (fused, plain):
        parsed = Parsed(RetrievalView(hits)._repr_html_())
        assert len(parsed.hits) == len(hits)
        assert sum(v for _, v in parsed.parts[1]) == pytest.approx(hits[0].score, abs=1e-3)
    assert {label for label, _ in Parsed(RetrievalView(plain)._repr_html_()).parts[1]} == {"score"}
    assert Parsed(RetrievalView([])._repr_html_()).hits == [] and str(RetrievalView([])) == "no results"


def test_routed_documents_describe_themselves(retriever):
    documents = retriever.retrieve_documents("honeybee queen eggs")
    line = documents[0].describe()
    evidence = documents[0].evidence
    assert line.startswith(f"1. {evidence.score:.3f}  {evidence.title} ({evidence.doc_id})") and "dense" in line
