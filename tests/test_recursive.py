"""RecursiveSummaryRetriever behaviour, each upstream failure mode included."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import TOPICS, LexicalEmbedding, topic_nodes
from llama_index.core import MockEmbedding, Settings
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager, CBEventType
from llama_index.core.callbacks.base_handler import BaseCallbackHandler
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import (
    Document,
    IndexNode,
    MetadataMode,
    NodeWithScore,
    QueryBundle,
    TextNode,
)
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_recursive import (
    ExplainedNodeWithScore,
    FilteredQueryBundle,
    LinkError,
    PersistError,
    RecursiveSummaryRetriever,
    ScoreMode,
    SummaryCache,
)
from llama_index_ext_recursive.persist import current_generation
from llama_index_ext_recursive.recursive.evidence import UNSURE_SHARE


def build(lexical, **kwargs) -> RecursiveSummaryRetriever:
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, **kwargs)


class Static(BaseRetriever):
    """Returns fixed results; async children can be made to wait on a barrier."""

    def __init__(self, results, barrier=None, error=None):
        self._results, self._barrier, self._error = results, barrier, error
        self.seen: list[QueryBundle] = []
        super().__init__()

    def _retrieve(self, query_bundle):
        self.seen.append(query_bundle)
        if self._error:
            raise self._error
        return [NodeWithScore(node=n.node, score=n.score) for n in self._results]

    async def _aretrieve(self, query_bundle):
        if self._barrier is not None:
            await self._barrier.wait()
        return self._retrieve(query_bundle)


def chunk(node_id, text, score, **metadata):
    return NodeWithScore(node=TextNode(id_=node_id, text=text, metadata=metadata), score=score)


def summary(doc_id, text, **metadata):
    return IndexNode(id_=f"s-{doc_id}", text=text, index_id=doc_id, metadata=metadata)


# ------------------------------------------------------------------- building
def test_one_summary_per_document_whose_index_id_is_the_document(lexical):
    retriever = build(lexical)
    assert set(retriever.documents) == set(TOPICS)
    for doc_id, record in retriever.documents.items():
        node = retriever.index.summary_index.docstore.get_node(record.summary_node_id)
        assert isinstance(node, IndexNode) and node.index_id == doc_id
        assert record.chunk_ids == [f"{doc_id}-{i}" for i in range(3)]
        assert node.metadata["category"] == TOPICS[doc_id][1]
        assert "section" not in node.metadata  # differs between chunks: not document metadata


def test_from_documents_chunks_and_keys_documents(lexical):
    docs = [
        Document(text=" ".join(sentences), metadata={"doc_id": key, "title": title})
        for key, (title, _, _, sentences) in TOPICS.items()
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)
    assert set(retriever.documents) == set(TOPICS)
    hit = retriever.retrieve("wild yeast starter")[0]
    assert hit.explanation.route.doc_id == "bread"
    assert docs[0].doc_id != "bees"  # the user's documents were not modified


def test_user_nodes_are_not_modified(lexical):
    nodes = topic_nodes()
    before = [n.model_dump() for n in nodes]
    RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)
    assert [n.model_dump() for n in nodes] == before


def test_node_without_document_key_is_a_clear_error(lexical):
    nodes = topic_nodes() + [TextNode(id_="orphan", text="no document")]
    with pytest.raises(ValueError, match=r"'orphan'.*metadata\['doc_id'\].*doc_id_key="):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)


def test_duplicate_document_ids_are_a_clear_error(lexical):
    docs = [Document(text="a", metadata={"doc_id": "x"}), Document(text="b", metadata={"doc_id": "x"})]
    with pytest.raises(ValueError, match=r"documents\[0\] and documents\[1\] share .*'x'"):
        RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)


@pytest.mark.parametrize("mode,summary_calls", [("text", 3), ("centroid", 0), ("blend", 3)])
def test_nodes_with_embeddings_are_not_embedded_again(lexical, mode, summary_calls):
    nodes = topic_nodes()
    for node in nodes:
        node.embedding = lexical.get_text_embedding(node.text)
    lexical.text_calls = 0
    RecursiveSummaryRetriever.from_nodes(
        nodes, embed_model=lexical, summary_embedding=mode, summary_mode="vector", chunk_mode="vector"
    )
    # summaries only, and only when routed by text
    assert lexical.text_calls == summary_calls
    # hybrid levels calibrate on pseudo-queries, which this model embeds through its text API:
    # still no chunk is embedded again
    lexical.embedded.clear()
    RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical, summary_embedding=mode)
    assert lexical.embedded and not {n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes} & set(
        lexical.embedded
    )


def test_centroid_routing_vector_is_the_mean_of_chunk_embeddings(lexical):
    import numpy as np

    retriever = build(lexical, summary_embedding="centroid")
    store = retriever.index.summary_index.vector_store
    chunks = retriever.index.chunk_index.vector_store
    mean = np.mean([chunks.get(f"bees-{i}") for i in range(3)], axis=0)
    np.testing.assert_allclose(store.get("summary::bees"), mean / np.linalg.norm(mean))


# ------------------------------------------------------------------- ranking
def test_global_top_k_ranked_by_combined_score_with_summary_score_kept():
    """Upstream returns the union of children's top-k in parent order, child scores only."""
    summaries = [summary("a", "alpha"), summary("b", "alpha beta gamma")]
    children = {
        "a": Static([chunk("a1", "x", 0.2), chunk("a2", "y", 0.1)]),
        "b": Static([chunk("b1", "z", 0.9), chunk("b2", "w", 0.8)]),
    }
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        summaries,
        children,
        embed_model=LexicalEmbedding(),
        similarity_top_k=3,
        num_routed_docs=2,
        score_mode="weighted",
        score_alpha=0.5,
        summary_mode="vector",
    )
    results = retriever.retrieve("alpha")
    assert [r.node.node_id for r in results] == ["b1", "b2", "a1"]
    summary_scores = {r.explanation.route.doc_id: r.explanation.route.summary_score for r in results}
    for r in results:
        expected = 0.5 * summary_scores[r.explanation.route.doc_id] + 0.5 * r.explanation.route.chunk_score
        assert r.score == pytest.approx(expected)
    assert summary_scores["a"] > summary_scores["b"]  # routing preferred a; chunks still ranked globally


@pytest.mark.parametrize(
    "mode,expected",
    [("chunk", 0.4), ("product", 0.8 * 0.4), ("weighted", 0.25 * 0.8 + 0.75 * 0.4)],
)
def test_score_modes(mode, expected):
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")],
        {"a": Static([chunk("a1", "x", 0.4)])},
        embed_model=LexicalEmbedding(),
        score_mode=mode,
        score_alpha=0.25,
    )
    hit = retriever.retrieve("alpha")[0]
    s = hit.explanation.route.summary_score
    combined = {"chunk": 0.4, "product": s * 0.4, "weighted": 0.25 * s + 0.75 * 0.4}[mode]
    assert hit.score == pytest.approx(combined)
    assert ScoreMode(mode).value == hit.explanation.route.score_mode


def test_duplicates_keep_the_best_score_not_the_first():
    shared = TextNode(id_="shared", text="same chunk")
    children = {
        "a": Static([NodeWithScore(node=shared, score=0.1)]),
        "b": Static([NodeWithScore(node=shared, score=0.99)]),
    }
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha"), summary("b", "alpha")],
        children,
        embed_model=LexicalEmbedding(),
        num_routed_docs=2,
        score_mode="chunk",
    )
    results = retriever.retrieve("alpha")
    assert [(r.node.node_id, r.score) for r in results] == [("shared", 0.99)]


def test_routes_to_the_right_document_and_explains(lexical):
    retriever = build(lexical, num_routed_docs=1, similarity_top_k=2)
    results = retriever.retrieve("queen bee eggs hive")
    assert all(isinstance(r, ExplainedNodeWithScore) for r in results)
    assert {r.explanation.route.doc_id for r in results} == {"bees"}
    assert results[0].node.node_id == "bees-0"
    info = results[0].explanation.route
    assert info.summary_node_id == "summary::bees" and info.path == ["bees"]
    assert info.final_score == results[0].score


def test_routes_to_more_documents_when_routed_ones_cannot_fill_top_k(lexical):
    nodes = [TextNode(id_=f"d{i}", text=f"river number {i}", metadata={"doc_id": f"doc{i}"}) for i in range(12)]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical, num_routed_docs=2, similarity_top_k=5)
    results = retriever.retrieve("river")
    assert len(results) == 5  # five one-chunk documents routed, not two
    assert len({r.explanation.route.doc_id for r in results}) == 5


# --------------------------------------------------------------------- links
def test_unknown_index_id_fails_at_construction_naming_closest_ids():
    """Upstream fails only at query time (ValueError 'Query id ... not found')."""
    with pytest.raises(LinkError, match=r"'docA'.*did you mean 'doc_A'"):
        RecursiveSummaryRetriever.from_retriever_dict(
            [summary("docA", "x")], {"doc_A": Static([])}, embed_model=LexicalEmbedding()
        )


def test_index_node_is_never_returned_in_place_of_chunks():
    """Upstream BaseRetriever returns an unresolvable IndexNode silently as a result."""
    dangling = IndexNode(id_="link", text="see docX", index_id="docX")
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")],
        {"a": Static([NodeWithScore(node=dangling, score=0.8)])},
        embed_model=LexicalEmbedding(),
    )
    with pytest.raises(LinkError, match=r"'link'.*'docX'"):
        retriever.retrieve("alpha")


def test_links_between_documents_are_followed_with_their_score():
    children = {
        "a": Static([NodeWithScore(node=IndexNode(id_="to-b", text="see b", index_id="b"), score=0.5)]),
        "b": Static([chunk("b1", "target", 0.6)]),
    }
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha"), summary("b", "zzz")],
        children,
        embed_model=LexicalEmbedding(),
        num_routed_docs=1,
        score_mode="product",
    )
    (hit,) = retriever.retrieve("alpha")
    assert hit.node.node_id == "b1" and hit.explanation.route.path == ["a", "b"]
    assert hit.score == pytest.approx(hit.explanation.route.summary_score * 0.5 * 0.6)


def test_runtime_cycle_terminates_instead_of_recursion_error():
    """Upstream RecursiveRetriever recurses until RecursionError on a -> b -> a."""
    children = {
        "a": Static(
            [
                NodeWithScore(node=IndexNode(id_="to-b", text="b", index_id="b"), score=0.5),
                chunk("a1", "alpha chunk", 0.4),
            ]
        ),
        "b": Static([NodeWithScore(node=IndexNode(id_="to-a", text="a", index_id="a"), score=0.5)]),
    }
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")], children, embed_model=LexicalEmbedding(), num_routed_docs=1
    )
    assert [r.node.node_id for r in retriever.retrieve("alpha")] == ["a1"]


def test_cycle_in_built_stores_is_detected_at_build(lexical):
    nodes = topic_nodes()
    nodes.append(IndexNode(id_="bees-link", text="see bread", index_id="bread", metadata={"doc_id": "bees"}))
    nodes.append(IndexNode(id_="bread-link", text="see bees", index_id="bees", metadata={"doc_id": "bread"}))
    with pytest.raises(LinkError, match=r"cycle: (bees -> bread -> bees|bread -> bees -> bread)"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)


def test_dangling_link_in_built_stores_is_detected_at_build(lexical):
    nodes = topic_nodes() + [IndexNode(id_="bees-link", text="see", index_id="breadd", metadata={"doc_id": "bees"})]
    with pytest.raises(LinkError, match=r"'bees-link'.*'breadd'.*'bread'"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)


def test_link_to_a_chunk_returns_that_chunk(lexical):
    nodes = topic_nodes() + [
        IndexNode(id_="bees-ref", text="queen bee eggs hive reference", index_id="bread-1", metadata={"doc_id": "bees"})
    ]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical, num_routed_docs=1)
    ids = [r.node.node_id for r in retriever.retrieve("queen bee eggs hive reference")]
    assert "bread-1" in ids and "bees-ref" not in ids


# ------------------------------------------------------------------- filters
def test_per_call_filters_apply_to_documents_and_chunks(lexical):
    retriever = build(lexical, num_routed_docs=3)
    results = retriever.retrieve(FilteredQueryBundle("queen bee", filters={"category": "food"}))
    assert results and {r.node.metadata["category"] for r in results} == {"food"}
    chunk_level = retriever.retrieve(FilteredQueryBundle("bees panels bread", filters={"section": "intro"}))
    assert sorted(r.node.node_id for r in chunk_level) == ["bees-0", "bread-0", "solar-0"]


def test_nested_or_filters_across_document_and_chunk_keys(lexical):
    retriever = build(lexical, num_routed_docs=3)
    either = MetadataFilters(
        condition=FilterCondition.OR,
        filters=[
            MetadataFilter(key="category", value="energy"),
            MetadataFilter(key="section", value="intro"),
        ],
    )
    ids = {r.node.node_id for r in retriever.retrieve(FilteredQueryBundle("bees panels bread", filters=either))}
    assert ids == {"bees-0", "bread-0", "solar-0", "solar-1", "solar-2"}


def test_range_filter_on_document_metadata(lexical):
    retriever = build(lexical, num_routed_docs=3)
    newer = MetadataFilters(filters=[MetadataFilter(key="year", value=2020, operator=FilterOperator.GT)])
    results = retriever.retrieve(FilteredQueryBundle("queen bee", filters=newer))
    assert results and all(r.node.metadata["year"] > 2020 for r in results)


def test_key_that_varies_inside_one_document_never_hides_it(lexical):
    """'lang' is document-level for A but chunk-level for B: B's summary lacks it."""
    nodes = [
        TextNode(id_="A1", text="river boats", metadata={"doc_id": "A", "lang": "en"}),
        TextNode(id_="A2", text="river fish", metadata={"doc_id": "A", "lang": "en"}),
        TextNode(id_="B1", text="river bridges", metadata={"doc_id": "B", "lang": "en"}),
        TextNode(id_="B2", text="river bridges", metadata={"doc_id": "B", "lang": "zh"}),
    ]
    retriever = RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical)
    query = FilteredQueryBundle("river bridges", filters={"lang": "en"})
    assert sorted(r.node.node_id for r in retriever.retrieve(query)) == ["A1", "A2", "B1"]
    retriever.delete_document("A")
    assert [r.node.node_id for r in retriever.retrieve(query)] == ["B1"]


def test_construction_filters_merge_or_are_replaced(lexical):
    merged = build(lexical, num_routed_docs=3, filters={"category": "energy"})
    both = merged.retrieve(FilteredQueryBundle("panels", filters={"section": "intro"}))
    assert [r.node.node_id for r in both] == ["solar-0"]
    replaced = build(lexical, num_routed_docs=3, filters={"category": "energy"}, filter_policy="replace")
    only_call = replaced.retrieve(FilteredQueryBundle("queen bee", filters={"category": "biology"}))
    assert {r.node.metadata["category"] for r in only_call} == {"biology"}
    assert {r.node.metadata["category"] for r in replaced.retrieve("queen bee")} == {"energy"}


def test_filters_are_enforced_on_retriever_dict_children():
    child = Static([chunk("a1", "x", 0.9, lang="en"), chunk("a2", "y", 0.8, lang="zh")])
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")], {"a": child}, embed_model=LexicalEmbedding()
    )
    results = retriever.retrieve(FilteredQueryBundle("alpha", filters={"lang": "zh"}))
    assert [r.node.node_id for r in results] == ["a2"]
    assert child.seen[-1].filters.filters[0].key == "lang"  # passed down as well


def test_bad_filters_type_is_a_clear_error():
    with pytest.raises(TypeError, match="filters must be MetadataFilters"):
        FilteredQueryBundle("q", filters=["category=food"])


# ----------------------------------------------------------------- async/sync
async def test_aretrieve_runs_children_concurrently():
    """Each child waits until all have started: a sequential fan-out would never finish."""
    barrier = asyncio.Barrier(3)
    children = {d: Static([chunk(f"{d}1", d, 0.5)], barrier=barrier) for d in "abc"}
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary(d, "alpha") for d in "abc"], children, embed_model=LexicalEmbedding(), num_routed_docs=3
    )
    results = await asyncio.wait_for(retriever.aretrieve("alpha"), timeout=30)
    assert sorted(r.node.node_id for r in results) == ["a1", "b1", "c1"]


@pytest.mark.parametrize("query", ["queen bee eggs", "solar inverter current", "starter bread"])
async def test_sync_and_async_give_identical_results(lexical, query):
    retriever = build(lexical, num_routed_docs=2, similarity_top_k=4)
    sync = retriever.retrieve(query)
    concurrent = await retriever.aretrieve(query)
    assert [(r.node.node_id, r.score, r.explanation) for r in sync] == [
        (r.node.node_id, r.score, r.explanation) for r in concurrent
    ]


async def test_sync_retrieve_inside_a_running_event_loop(lexical):
    """Jupyter runs cells inside a loop; retrieve() must not need asyncio.run."""
    retriever = build(lexical)
    assert asyncio.get_running_loop() is not None
    assert retriever.retrieve("queen bee")[0].explanation.route.doc_id == "bees"


@pytest.mark.parametrize("error", [RuntimeError("child broke"), RecursionError("deep")])
async def test_child_exception_surfaces_as_itself(error):
    """Upstream's asyncio_run masks child RuntimeErrors as 'Detected nested async'."""
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")], {"a": Static([], error=error)}, embed_model=LexicalEmbedding()
    )
    with pytest.raises(type(error), match=str(error)):
        retriever.retrieve("alpha")
    with pytest.raises(type(error), match=str(error)):
        await retriever.aretrieve("alpha")


async def test_concurrent_calls_keep_their_own_explanations(lexical):
    retriever = build(lexical, num_routed_docs=1, similarity_top_k=2)
    queries = ["queen bee eggs", "solar inverter current", "starter bread flour"]
    alone = [retriever.retrieve(q) for q in queries]
    together = await asyncio.gather(*(retriever.aretrieve(q) for q in queries))
    for one, other in zip(alone, together):
        assert [(r.node.node_id, r.explanation) for r in one] == [(r.node.node_id, r.explanation) for r in other]
    assert [r[0].explanation.route.doc_id for r in together] == ["bees", "solar", "bread"]


def test_drops_into_query_fusion_retriever(lexical):
    from llama_index.core.retrievers import QueryFusionRetriever

    ours = build(lexical, similarity_top_k=3)
    for use_async in (False, True):
        fusion = QueryFusionRetriever(
            [ours], llm=MockLLM(), num_queries=1, similarity_top_k=3, mode="reciprocal_rerank", use_async=use_async
        )
        assert fusion.retrieve("queen bee eggs")[0].node.node_id == "bees-0"


def test_callers_query_bundle_is_not_mutated(lexical):
    retriever = build(lexical)
    bundle = QueryBundle("queen bee")
    retriever.retrieve(bundle)
    assert bundle.embedding is None


def test_children_get_their_own_bundles():
    """A child that writes its embedding into the bundle must not leak it to siblings."""

    class Writer(Static):
        def _retrieve(self, query_bundle):
            query_bundle.embedding = [1.0]
            return super()._retrieve(query_bundle)

    a, b = Writer([chunk("a1", "x", 0.5)]), Static([chunk("b1", "y", 0.4)])
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha"), summary("b", "alpha")],
        {"a": a, "b": b},
        embed_model=LexicalEmbedding(),
        num_routed_docs=2,
    )
    retriever.retrieve("alpha")
    assert b.seen[0].embedding is None


# ------------------------------------------------------------- integration
def test_callbacks_fire_and_query_engine_accepts_it(lexical):
    class Counter(BaseCallbackHandler):
        def __init__(self):
            super().__init__([], [])
            self.retrieves = 0

        def on_event_start(self, event_type, payload=None, event_id="", parent_id="", **kw):
            self.retrieves += event_type == CBEventType.RETRIEVE
            return event_id

        def on_event_end(self, *args, **kwargs):
            pass

        def start_trace(self, trace_id=None):
            pass

        def end_trace(self, trace_id=None, trace_map=None):
            pass

    counter = Counter()
    retriever = build(lexical, callback_manager=CallbackManager([counter]))
    retriever.retrieve("queen bee")
    assert counter.retrieves >= 1
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query("queen bee eggs")
    assert response.source_nodes[0].node.node_id == "bees-0"


def test_settings_embed_model_wins_over_bundled_default():
    chosen = LexicalEmbedding(model_name="from-settings")
    Settings.embed_model = chosen
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes())
    assert retriever.index.embed_model is chosen


def test_argument_embed_model_wins_over_settings(lexical):
    Settings.embed_model = LexicalEmbedding(model_name="from-settings")
    assert build(lexical).index.embed_model is lexical


def test_invalid_settings_are_clear_errors(lexical):
    with pytest.raises(ValueError, match="similarity_top_k must be >= 1, got 0"):
        build(lexical, similarity_top_k=0)
    with pytest.raises(ValueError, match="score_alpha"):
        build(lexical, score_alpha=2.0)
    with pytest.raises(ValueError, match="'best'"):
        build(lexical, score_mode="best")


# ------------------------------------------------------------- incremental
def test_add_and_delete_documents_without_rebuilding(lexical):
    retriever = build(lexical)
    lexical.calls = 0
    new = Document(
        text="Glaciers carve valleys. Ice sheets store fresh water.",
        metadata={"doc_id": "ice", "title": "Glaciers", "category": "earth"},
    )
    assert retriever.add_documents([new]) == ["ice"]
    assert lexical.calls == 2  # the new chunk and its summary (routed by blend: centroid + text)
    assert retriever.retrieve("glaciers carve valleys")[0].explanation.route.doc_id == "ice"
    assert retriever.add_documents([new]) == []  # unchanged: not re-indexed
    changed = Document(text="Glaciers move slowly downhill.", metadata={"doc_id": "ice", "title": "Glaciers"})
    assert retriever.add_documents([changed]) == ["ice"]
    assert "slowly" in retriever.retrieve("glaciers move downhill")[0].node.text
    retriever.delete_document("bees")
    assert "bees" not in retriever.documents
    assert all(r.explanation.route.doc_id != "bees" for r in retriever.retrieve("queen bee eggs hive"))
    with pytest.raises(KeyError, match=r"no document 'bee' \(known: \['bread'"):
        retriever.delete_document("bee")


def test_updating_embeds_only_new_or_changed_documents(lexical):
    retriever = build(lexical)
    lexical.calls = 0
    unchanged = [n for n in topic_nodes() if n.metadata["doc_id"] == "bees"]
    new = TextNode(id_="ice-0", text="Glaciers carve valleys.", metadata={"doc_id": "ice"})
    assert retriever.add_nodes(unchanged + [new]) == ["ice"]
    assert lexical.calls == 2  # the new chunk and the new summary; nothing of "bees"


def test_summaries_are_cached_by_content(lexical):
    class Counting:
        fingerprint = "counting"
        calls = 0

        def summarize(self, title, text):
            Counting.calls += 1
            return f"{title}: {text[:40]}"

    cache = SummaryCache()
    build(lexical, summarizer=Counting(), summary_cache=cache)
    build(lexical, summarizer=Counting(), summary_cache=cache)
    assert Counting.calls == len(TOPICS) and cache.hits == len(TOPICS)


# -------------------------------------------------------------- persistence
def test_persist_round_trip(lexical, tmp_path):
    retriever = build(
        lexical,
        num_routed_docs=2,
        similarity_top_k=4,
        score_mode="product",
        filters={"year": 2019},
        filter_policy="replace",
    )
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    assert loaded.to_dict() == retriever.to_dict()
    for query in ["queen bee", "solar panels"]:
        assert [(r.node.node_id, r.score) for r in loaded.retrieve(query)] == [
            (r.node.node_id, r.score) for r in retriever.retrieve(query)
        ]
    cache_file = current_generation(tmp_path / "idx") / "summary_cache.json"
    assert set(json.loads(cache_file.read_text()).values()) == {
        retriever.index.summary_index.docstore.get_node(r.summary_node_id).text for r in retriever.documents.values()
    }


def test_persist_keeps_node_parser_and_summarizer_settings(lexical, tmp_path):
    from llama_index.core.node_parser import SentenceSplitter

    from llama_index_ext_recursive import ExtractiveSummarizer

    docs = [Document(text="Glaciers carve valleys. " * 40, metadata={"doc_id": "ice"})]
    retriever = RecursiveSummaryRetriever.from_documents(
        docs,
        embed_model=lexical,
        node_parser=SentenceSplitter(chunk_size=64, chunk_overlap=8),
        summarizer=ExtractiveSummarizer(max_chars=120, diversity_lambda=0.5),
    )
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    assert (loaded.index.transformations[0].chunk_size, loaded.index.transformations[0].chunk_overlap) == (64, 8)
    assert loaded.index.summarizer.fingerprint == retriever.index.summarizer.fingerprint
    sand = Document(text="Deserts are dry. " * 40, metadata={"doc_id": "sand"})
    loaded.add_documents([sand])
    expected = SentenceSplitter(chunk_size=64, chunk_overlap=8).get_nodes_from_documents([sand])
    assert len(loaded.documents["sand"].chunk_ids) == len(expected) > 1


def test_persist_is_atomic(lexical, tmp_path, monkeypatch):
    retriever = build(lexical)
    target = tmp_path / "idx"
    retriever.persist(target)
    before = sorted(p.name for p in target.rglob("*"))

    def explode(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(SummaryCache, "save", explode)
    with pytest.raises(OSError, match="disk full"):
        retriever.persist(target)
    assert sorted(p.name for p in target.rglob("*")) == before
    assert [p.name for p in tmp_path.iterdir()] == ["idx"]  # no staging left behind
    RecursiveSummaryRetriever.from_persist_dir(target, embed_model=lexical)


@pytest.mark.parametrize("damage", ["delete", "corrupt"])
@pytest.mark.parametrize("name", ["config.json", "chunks/docstore.json", "summaries/default__vector_store.json"])
def test_missing_or_corrupted_file_names_the_file(lexical, tmp_path, damage, name):
    build(lexical).persist(tmp_path / "idx")
    path = current_generation(tmp_path / "idx") / name
    if damage == "delete":
        path.unlink()
    else:
        path.write_text('{"truncated": ')
    with pytest.raises(PersistError, match=rf"{name}"):
        RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)


def test_loading_with_another_embedding_model_is_refused(lexical, tmp_path):
    build(lexical).persist(tmp_path / "idx")
    with pytest.raises(PersistError, match="'lexical-test'.*'unknown'.*vectors differ"):
        RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=MockEmbedding(embed_dim=64))
    # the same vectors under another name are the same model
    assert RecursiveSummaryRetriever.from_persist_dir(
        tmp_path / "idx", embed_model=LexicalEmbedding(model_name="other")
    ).retrieve("bees")


def test_config_from_an_earlier_version_loads_with_defaults(lexical, tmp_path):
    from test_persist import as_previous_format

    build(lexical, similarity_top_k=4).persist(tmp_path / "new")
    # the previous release wrote the generation's files at the top level, unchecked
    as_previous_format(current_generation(tmp_path / "new"), tmp_path / "idx")
    path = tmp_path / "idx" / "config.json"
    config = json.loads(path.read_text())
    for key in ("summary_embedding", "node_parser", "filters"):
        config.pop(key)
    config["summarizer"] = "extractive-tfidf-v1:600"
    path.write_text(json.dumps(config))
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    assert loaded.similarity_top_k == 4 and loaded.retrieve("queen bee")
    del config["documents"]
    path.write_text(json.dumps(config))
    with pytest.raises(PersistError, match=r"config.json lacks \['documents'\]"):
        RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)


def test_loading_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(PersistError, match="does not exist"):
        RecursiveSummaryRetriever.from_persist_dir(tmp_path / "nothing")


def test_retriever_dict_setup_cannot_persist(tmp_path):
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [summary("a", "alpha")], {"a": Static([])}, embed_model=LexicalEmbedding()
    )
    with pytest.raises(NotImplementedError, match="persist needs the chunk store"):
        retriever.persist(tmp_path / "x")


# -- BM25 and hybrid levels ----------------------------------------------------

CHINESE_DOCS = {
    "mice": [
        "定量 PCR 以小鼠肝脏 GAPDH 为内参。",
        "实验对象为 SPF 级 C57BL/6 小鼠。",
        "小鼠饲养在恒温恒湿的屏障环境中。",
    ],
    "python": [
        "Python 的列表推导式用一行从可迭代对象生成列表。",
        "字典推导式以键值对生成字典。",
        "生成器表达式按需产生元素，节省内存。",
    ],
    "river": ["长江是中国最长的河流。", "长江发源于青藏高原的唐古拉山脉。", "三峡大坝位于长江中上游。"],
    "bread": [
        "面包发酵需要酵母把糖分解产生二氧化碳。",
        "面团冷藏过夜可以让风味更浓郁。",
        "烤面包时在锅里加盖可以保留蒸汽。",
    ],
}


def chinese_nodes() -> list[TextNode]:
    return [
        TextNode(id_=f"{doc}-{i}", text=text, metadata={"doc_id": doc, "topic": doc})
        for doc, texts in CHINESE_DOCS.items()
        for i, text in enumerate(texts)
    ]


@pytest.mark.parametrize("summary_mode", ["bm25", "hybrid"])
@pytest.mark.parametrize("chunk_mode", ["bm25", "hybrid"])
def test_bm25_and_hybrid_levels_find_chinese_chunks(lexical, summary_mode, chunk_mode):
    retriever = RecursiveSummaryRetriever.from_nodes(
        chinese_nodes(),
        embed_model=lexical,
        similarity_top_k=3,
        num_routed_docs=2,
        summary_mode=summary_mode,
        chunk_mode=chunk_mode,
    )
    for query, doc, chunk in [
        ("实验对象是什么物种？", "mice", "mice-1"),
        ("C57BL/6", "mice", "mice-1"),
        ("列表推导式", "python", "python-0"),
        ("唐古拉山脉", "river", "river-1"),
    ]:
        results = retriever.retrieve(query)
        # a hybrid chunk level may tie BM25's best with the (here blind) vector
        # child's best; fusion then breaks the tie by node id
        top = 1 if chunk_mode == "bm25" else 2
        found = [r for r in results[:top] if r.node.node_id == chunk]
        assert found, (query, [r.node.node_id for r in results])
        assert found[0].explanation.route.doc_id == doc
        # fused scores: relative-score fusion maps each search's weakest hit to 0
        assert all(r.score >= 0.0 and not isinstance(r.node, IndexNode) for r in results)
        again = asyncio.run(retriever.aretrieve(query))
        assert [(r.node.node_id, r.score) for r in again] == [(r.node.node_id, r.score) for r in results]


def test_hybrid_levels_rank_chunks_across_routed_documents(lexical):
    retriever = build(lexical, similarity_top_k=4, num_routed_docs=2, summary_mode="hybrid", chunk_mode="hybrid")
    results = retriever.retrieve("bees hive nectar bread dough")
    docs = {r.explanation.route.doc_id for r in results}
    assert docs == {"bees", "bread"}  # one global ranking over both routed documents
    assert len(results) == 4 and len({r.node.node_id for r in results}) == 4


def test_bm25_levels_apply_per_call_filters(lexical):
    retriever = build(lexical, summary_mode="bm25", chunk_mode="bm25")
    results = retriever.retrieve(FilteredQueryBundle("queen bee hive sunlight", filters={"category": "energy"}))
    assert results and {r.node.metadata["category"] for r in results} == {"energy"}
    intro = retriever.retrieve(FilteredQueryBundle("bees queen", filters={"section": "body"}))
    assert intro and all(r.node.metadata["section"] == "body" for r in intro)


def test_level_modes_persist_and_follow_updates(lexical, tmp_path):
    retriever = RecursiveSummaryRetriever.from_nodes(
        chinese_nodes(), embed_model=lexical, summary_mode="bm25", chunk_mode="hybrid"
    )
    before = [(r.node.node_id, r.score) for r in retriever.retrieve("唐古拉山脉")]
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    assert (loaded.summary_mode.value, loaded.chunk_mode.value) == ("bm25", "hybrid")
    assert [(r.node.node_id, r.score) for r in loaded.retrieve("唐古拉山脉")] == before

    loaded.add_nodes([TextNode(id_="tea-0", text="龙井茶产于杭州西湖。", metadata={"doc_id": "tea"})])
    assert loaded.retrieve("龙井茶")[0].node.node_id == "tea-0"
    loaded.delete_document("river")
    assert all(r.explanation.route.doc_id != "river" for r in loaded.retrieve("唐古拉山脉"))


def test_level_modes_are_validated(lexical):
    with pytest.raises(ValueError, match=r"chunk_mode must be one of \['vector', 'bm25', 'hybrid'\], got 'fuzzy'"):
        build(lexical, chunk_mode="fuzzy")
    summaries = [IndexNode(text="bees", index_id="bees")]
    with pytest.raises(ValueError, match="chunk_mode='bm25' needs the chunk store"):
        RecursiveSummaryRetriever.from_retriever_dict(
            summaries, {"bees": Static([])}, embed_model=lexical, chunk_mode="bm25"
        )


def test_a_query_in_a_script_the_corpus_lacks_is_ranked_without_document_evidence(lexical):
    """English questions over Chinese documents: routing by documents misleads, so the chunks'
    own fused evidence ranks them (the document weight drops to 0 for that query only)."""
    from llama_index.core import Document

    from llama_index_ext_recursive import RecursiveSummaryRetriever

    docs = [
        Document(text=f"第{i}篇：绿茶应当冷藏保存。乌龙茶是半发酵茶，红茶是全发酵茶。", metadata={"doc_id": f"d{i}"})
        for i in range(12)
    ]
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical, similarity_top_k=3)
    english, chinese = retriever.retrieve("green tea storage"), retriever.retrieve("绿茶怎么保存")
    assert english and all(hit.explanation.route.document_weight == 0.0 for hit in english)
    assert all(hit.explanation.route.final_score == hit.explanation.route.chunk_score for hit in english)
    # twelve near-copies: routing cannot tell them apart, so their evidence counts for half (document_share)
    assert chinese and all(
        hit.explanation.route.document_weight == pytest.approx(retriever.document_weight * UNSURE_SHARE, abs=0.05)
        for hit in chinese
    )
    for hit in chinese:
        route = hit.explanation.route
        assert route.final_score == pytest.approx(
            (route.chunk_score + route.document_weight * route.summary_score) / (1 + route.document_weight)
        )
