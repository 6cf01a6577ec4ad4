"""The retriever contract (issue 13): every retriever of the package, the same cases.

Each case runs over every kind in :data:`contract_fixtures.KINDS` (recursive
with each level mode at each level under both score modes, recursive and
hybrid ``from_index`` over an upstream app's index, the upstream
``retriever_dict`` setup, hybrid, BM25, backfill on the embedded store, on
FAISS and on upstream's ``SimpleVectorStore``, auto over an index and auto
over a recursive retriever), built once per module over a six-document
corpus with the real bundled model:

1. per-call filters under ``filter_policy="merge"`` and ``"replace"`` with
   construction-time filters; a ``ref_doc_id`` filter;
2. per-call ``top_k`` (``None``: the retriever's own k), with no retriever
   built per query;
3. every hit is an ``ExplainedNodeWithScore`` carrying the parts of every
   layer it went through (a wrapper keeps its child's);
4. sync == async, and ``retrieve`` inside a running event loop;
5. ``persist`` + ``from_persist_dir`` answer identically;
6. a ``FilteredQueryBundle`` through ``RetrieverQueryEngine`` and upstream
   ``QueryFusionRetriever`` reaches the retriever.

Filters are checked against the corpus table (``DOC_META``), not with the
package's own filter evaluator, so a wrong evaluator cannot pass its own test.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from contract_fixtures import AUTO, DOC_META, FUSION, KIND_BY_NAME, KINDS, OWN_K, ROUTE, Built, Corpus
from llama_index.core import Settings, get_response_synthesizer
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.retrievers import QueryFusionRetriever
from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_recursive import (
    ExplainedNodeWithScore,
    FilteredQueryBundle,
    FilterError,
    FusionHit,
    HybridFusionRetriever,
    RetrievalExplanation,
)
from llama_index_ext_recursive.auto import AutoExplanation

pytestmark = pytest.mark.integration

ALL = [kind.name for kind in KINDS]
PERSISTING = [kind.name for kind in KINDS if kind.persists]

# construction-time filters of every retriever under contract: all but the 2018 lighthouse document
CONSTRUCTION = {"year": {"op": ">=", "value": 2019}}


def constructed(doc: str) -> bool:
    return DOC_META[doc]["year"] >= 2019


Q_COLONY = "How do bees and corals live in colonies?"
# lighthouse words, and words of other documents, so even BM25 has hits outside the history document
Q_SHIPS = "How did lighthouse lamps guide ships across warm summer water at night?"
Q_BREAD = "How do I bake sourdough bread with a starter?"
Q_BROAD = "summer water"  # words of seven chunks in five documents: every retriever has six hits
Q_MIXED = "bees, coral reefs and sourdough bread"  # a ref_doc_id filter picks one of three documents

# (id, per-call filters, query, predicate on the document id)
PER_CALL = [
    ("category", {"category": "biology"}, Q_COLONY, lambda doc: DOC_META[doc]["category"] == "biology"),
    ("ref_doc_id", {"ref_doc_id": "bread"}, Q_BREAD, lambda doc: doc == "bread"),
    ("operator", {"year": {"op": "<", "value": 2021}}, Q_BROAD, lambda doc: DOC_META[doc]["year"] < 2021),
    (
        "or-tree",
        MetadataFilters(
            filters=[
                MetadataFilter(key="category", value="food", operator=FilterOperator.EQ),
                MetadataFilter(key="category", value="energy", operator=FilterOperator.EQ),
            ],
            condition=FilterCondition.OR,
        ),
        Q_BROAD,
        lambda doc: DOC_META[doc]["category"] in ("food", "energy"),
    ),
]


@pytest.fixture(scope="module")
def built(real_model) -> Built:
    return Built(Corpus(real_model))


def merged(built: Built, name: str):
    """The kind with the construction-time filters, ``filter_policy="merge"``."""
    return built.get(name, CONSTRUCTION, "merge")


def replacing(built: Built, name: str):
    """The kind with the construction-time filters, ``filter_policy="replace"``."""
    return built.get(name, CONSTRUCTION, "replace")


def doc_of(hit: NodeWithScore) -> str:
    """The hit's document: every chunk of the corpus has a ``ref_doc_id``, and a hit must keep it."""
    doc = hit.node.ref_doc_id
    assert doc in DOC_META, (hit.node.node_id, doc)
    return doc


def parts(hit: NodeWithScore) -> frozenset:
    explanation = getattr(hit, "explanation", None)
    if explanation is None:
        return frozenset()
    return frozenset(name for name in (ROUTE, FUSION, AUTO) if getattr(explanation, name, None) not in (None, []))


def signature(hits: list[NodeWithScore]) -> list[tuple]:
    return [(hit.node.node_id, hit.score, parts(hit)) for hit in hits]


def assert_same(actual: list[NodeWithScore], expected: list[NodeWithScore]) -> None:
    """Same nodes in the same order, same scores (to float noise), same explanation parts."""
    got, want = signature(actual), signature(expected)
    assert [(i, p) for i, _, p in got] == [(i, p) for i, _, p in want]
    assert [s for _, s, _ in got] == pytest.approx([s for _, s, _ in want], rel=1e-6, abs=1e-9)


def assert_all(hits: list[NodeWithScore], holds: Callable[[str], bool], what: str) -> None:
    assert hits, f"no hits for {what}"
    wrong = [(hit.node.node_id, doc_of(hit)) for hit in hits if not holds(doc_of(hit))]
    assert not wrong, f"hits breaking {what}: {wrong}"


# ----------------------------------------------------------------- 1. per-call filters


@pytest.mark.parametrize("per_call, query, holds", [case[1:] for case in PER_CALL], ids=[c[0] for c in PER_CALL])
@pytest.mark.parametrize("name", ALL)
def test_per_call_filters_merge_with_construction_filters(built, name, per_call, query, holds):
    hits = merged(built, name).retrieve(FilteredQueryBundle(query, filters=per_call))
    assert_all(hits, lambda doc: holds(doc) and constructed(doc), f"{per_call} AND {CONSTRUCTION}")


@pytest.mark.parametrize("name", ALL)
def test_merge_keeps_construction_filters_a_per_call_filter_contradicts(built, name):
    """The only history document is from 2018: merged with year >= 2019, nothing matches."""
    retriever = merged(built, name)
    assert retriever.retrieve(FilteredQueryBundle(Q_SHIPS, filters={"category": "history"})) == []
    assert_all(retriever.retrieve(Q_SHIPS), constructed, str(CONSTRUCTION))


@pytest.mark.parametrize("name", ALL)
def test_replace_uses_per_call_filters_instead_of_construction_filters(built, name):
    retriever = replacing(built, name)
    hits = retriever.retrieve(FilteredQueryBundle(Q_SHIPS, filters={"category": "history"}))
    assert_all(hits, lambda doc: doc == "lighthouse", "category == history (replacing year >= 2019)")
    # without per-call filters the construction-time ones still hold
    assert_all(retriever.retrieve(Q_SHIPS), constructed, str(CONSTRUCTION))
    assert_all(retriever.retrieve(FilteredQueryBundle(Q_SHIPS)), constructed, str(CONSTRUCTION))


@pytest.mark.parametrize("name", ALL)
def test_a_per_call_filter_no_node_can_match_is_refused_sync_and_async(built, name):
    retriever = merged(built, name)
    with pytest.raises(FilterError, match="categroy"):
        retriever.retrieve(FilteredQueryBundle(Q_COLONY, filters={"categroy": "biology"}))
    with pytest.raises(FilterError, match="categroy"):
        asyncio.run(retriever.aretrieve(FilteredQueryBundle(Q_COLONY, filters={"categroy": "biology"})))


@pytest.mark.parametrize("name", ALL)
def test_ref_doc_id_filter_selects_the_document(built, name):
    hits = merged(built, name).retrieve(FilteredQueryBundle(Q_MIXED, filters={"ref_doc_id": "bread"}))
    assert hits and {hit.node.ref_doc_id for hit in hits} == {"bread"}


# ----------------------------------------------------------------- 2. per-call top_k


@pytest.mark.parametrize("name", ALL)
def test_per_call_top_k_and_none_means_the_retrievers_own(built, name):
    retriever = merged(built, name)
    own = retriever.retrieve(Q_BROAD)
    assert len(own) == OWN_K
    assert_same(retriever.retrieve(FilteredQueryBundle(Q_BROAD, top_k=None)), own)
    assert len(retriever.retrieve(FilteredQueryBundle(Q_BROAD, top_k=2))) == 2
    assert len(retriever.retrieve(FilteredQueryBundle(Q_BROAD, top_k=6))) == 6


@pytest.mark.parametrize("name", ALL)
def test_per_call_top_k_with_per_call_filters(built, name):
    bundle = FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=2)
    hits = merged(built, name).retrieve(bundle)
    assert len(hits) == 2
    assert_all(hits, lambda doc: DOC_META[doc]["category"] == "biology", "category == biology")
    # the caller's bundle is not changed (upstream hands one bundle to several retrievers)
    unchanged = FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=2)
    assert (bundle.query_str, bundle.filters, bundle.top_k) == (unchanged.query_str, unchanged.filters, unchanged.top_k)


@pytest.mark.parametrize("name", ALL)
def test_no_retriever_is_built_per_query(built, name, monkeypatch):
    """Children are built with their parent; per-call options travel in the bundle instead."""
    retriever = merged(built, name)
    retriever.retrieve(Q_BROAD)  # anything built lazily on first use is built now
    built_during: list[str] = []
    original = BaseRetriever.__init__

    def counting(self, *args, **kwargs):
        built_during.append(type(self).__name__)
        original(self, *args, **kwargs)

    monkeypatch.setattr(BaseRetriever, "__init__", counting)
    retriever.retrieve(FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=2))
    asyncio.run(retriever.aretrieve(FilteredQueryBundle(Q_SHIPS, top_k=6)))
    assert built_during == []


# ----------------------------------------------------------------- 3. explanations


def check_parts(hits: list[NodeWithScore], expected: frozenset) -> None:
    assert hits
    for hit in hits:
        assert isinstance(hit, ExplainedNodeWithScore), type(hit).__name__
        assert parts(hit) >= expected, (hit.node.node_id, sorted(parts(hit)), sorted(expected))
        if ROUTE in expected:
            route = hit.explanation.route
            assert isinstance(route, RetrievalExplanation) and route.doc_id == doc_of(hit)
        if FUSION in expected:
            assert all(isinstance(item, FusionHit) for item in hit.explanation.fusion)
        if AUTO in expected:
            assert isinstance(hit.explanation.auto, AutoExplanation)


@pytest.mark.parametrize("name", ALL)
def test_every_hit_is_explained_by_every_layer_it_went_through(built, name):
    retriever = merged(built, name)
    expected = KIND_BY_NAME[name].parts
    check_parts(retriever.retrieve(Q_COLONY), expected)
    check_parts(retriever.retrieve(FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=2)), expected)


@pytest.mark.parametrize("name", ALL)
def test_async_hits_are_explained_alike(built, name):
    check_parts(asyncio.run(merged(built, name).aretrieve(Q_COLONY)), KIND_BY_NAME[name].parts)


def test_a_hybrid_child_keeps_its_fusion_part_under_a_recursive_parent(built):
    """Recursive over hybrid chunks: a chunk's fusion hits name the vector and the BM25 search."""
    hits = merged(built, "recursive-hybrid-hybrid-fused").retrieve(Q_BREAD)
    assert hits and all(hit.explanation.fusion for hit in hits), [hit.explanation.fusion for hit in hits]
    names = {item.retriever_name for hit in hits for item in hit.explanation.fusion}
    assert len(names) == 2, names


def test_the_fusion_part_accounts_for_the_fused_score(built):
    """Hybrid: each hit's fusion items are the children's hits behind it, adding up to its score."""
    hits = merged(built, "hybrid").retrieve(Q_BROAD)
    assert hits
    for hit in hits:
        assert hit.explanation.fusion
        assert {item.retriever_name for item in hit.explanation.fusion} <= {"vector", "bm25"}
        assert sum(item.contribution for item in hit.explanation.fusion) == pytest.approx(hit.score)


def test_a_hybrid_wrapper_keeps_the_route_of_a_recursive_child(built):
    """Hybrid over (recursive, BM25): hits the recursive child returned keep its route part."""
    recursive = merged(built, "recursive-vector-vector-fused")
    bm25 = merged(built, "bm25")
    hybrid = HybridFusionRetriever([recursive, bm25], similarity_top_k=OWN_K, retriever_names=["recursive", "bm25"])
    hits = hybrid.retrieve(FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}))
    assert_all(hits, biology, "category == biology AND year >= 2019")
    routed = {
        hit.node.node_id: hit.explanation.route
        for hit in recursive.retrieve(FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=OWN_K))
    }
    for hit in hits:
        names = {item.retriever_name for item in hit.explanation.fusion}
        if "recursive" in names:
            assert hit.explanation.route == routed[hit.node.node_id]
        else:
            assert names == {"bm25"} and hit.node.node_id not in routed


def test_an_auto_wrapper_keeps_the_recursive_route(built):
    """Auto over recursive: each hit's route is the inner retriever's, and the auto part is this call's."""
    auto = merged(built, "auto-over-recursive")
    hits = auto.retrieve(FilteredQueryBundle(Q_COLONY, filters={"category": "biology"}))
    assert hits
    call = hits[0].explanation.auto
    inner = auto.wrapped_retriever.retrieve(
        FilteredQueryBundle(call.search_query, filters=call.filters, top_k=call.top_k)
    )
    by_id = {hit.node.node_id: hit.explanation.route for hit in inner}
    assert all(hit.explanation.route == by_id[hit.node.node_id] for hit in hits)
    assert all(hit.explanation.auto.query == Q_COLONY for hit in hits)


# ----------------------------------------------------------------- 4. sync == async, Jupyter

BUNDLES = {
    "plain": lambda: Q_COLONY,
    "filters+top_k": lambda: FilteredQueryBundle(Q_BROAD, filters={"category": "biology"}, top_k=2),
    "ref_doc_id": lambda: FilteredQueryBundle(Q_BREAD, filters={"ref_doc_id": "bread"}),
}


@pytest.mark.parametrize("bundle", list(BUNDLES))
@pytest.mark.parametrize("name", ALL)
def test_sync_equals_async(built, name, bundle):
    retriever = merged(built, name)
    sync = retriever.retrieve(BUNDLES[bundle]())
    assert sync
    assert_same(asyncio.run(retriever.aretrieve(BUNDLES[bundle]())), sync)


@pytest.mark.parametrize("name", ALL)
def test_retrieve_works_inside_a_running_event_loop(built, name):
    """Jupyter runs cells inside an event loop: the sync API must still answer there."""
    retriever = merged(built, name)
    bundle = BUNDLES["filters+top_k"]

    async def cell() -> list[NodeWithScore]:
        return retriever.retrieve(bundle())

    assert_same(asyncio.run(cell()), retriever.retrieve(bundle()))


# ----------------------------------------------------------------- 5. persist / reload

PERSIST_BUNDLES = [
    lambda: Q_COLONY,
    lambda: FilteredQueryBundle(Q_COLONY, filters={"category": "biology"}),
    lambda: FilteredQueryBundle(Q_BROAD, top_k=6),
    lambda: Q_SHIPS,  # the construction-time filters exclude the lighthouse document
    lambda: FilteredQueryBundle(Q_SHIPS, filters={"category": "history"}),  # replaced: only the lighthouse
    lambda: FilteredQueryBundle(Q_BREAD, filters={"ref_doc_id": "bread"}),
]


@pytest.mark.parametrize("name", PERSISTING)
def test_persist_and_reload_answer_identically(built, name, tmp_path):
    """The ``replace`` retriever: its construction-time filters and its policy must both survive."""
    retriever = replacing(built, name)
    retriever.persist(tmp_path / "index")
    loaded = type(retriever).from_persist_dir(tmp_path / "index")
    assert type(loaded) is type(retriever)
    # the one configuration convention, and every setting survives
    config = retriever.to_dict()
    assert {"type", "init_parameters"} <= set(config)
    assert config["type"].rsplit(".", 1)[-1] == type(retriever).__name__
    assert loaded.to_dict() == config
    for bundle in PERSIST_BUNDLES:
        assert_same(loaded.retrieve(bundle()), retriever.retrieve(bundle()))
        assert_same(asyncio.run(loaded.aretrieve(bundle())), retriever.retrieve(bundle()))


# ----------------------------------------------------------------- 6. through upstream layers


def engine_over(retriever) -> RetrieverQueryEngine:
    """An offline engine. ``NoText`` ignores ``llm=`` and resolves ``Settings.llm``
    (OpenAI by default), hence the ``MockLLM`` in ``Settings`` (restored by conftest)."""
    Settings.llm = MockLLM()
    return RetrieverQueryEngine(retriever, response_synthesizer=get_response_synthesizer(response_mode="no_text"))


def biology(doc: str) -> bool:
    return DOC_META[doc]["category"] == "biology" and constructed(doc)


@pytest.mark.parametrize("name", ALL)
def test_filtered_bundle_through_retriever_query_engine(built, name):
    engine = engine_over(merged(built, name))
    response = engine.query(FilteredQueryBundle(Q_COLONY, filters={"category": "biology"}))
    assert_all(response.source_nodes, biology, "category == biology AND year >= 2019")
    again = asyncio.run(engine.aquery(FilteredQueryBundle(Q_COLONY, filters={"category": "biology"})))
    assert_same(again.source_nodes, response.source_nodes)
    assert len(engine.query(FilteredQueryBundle(Q_BROAD, top_k=2)).source_nodes) == 2
    ref = engine.query(FilteredQueryBundle(Q_MIXED, filters={"ref_doc_id": "bread"}))
    assert ref.source_nodes and {hit.node.ref_doc_id for hit in ref.source_nodes} == {"bread"}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync-children", "async-children"])
@pytest.mark.parametrize("name", ALL)
def test_filtered_bundle_through_query_fusion_retriever(built, name, use_async):
    fusion = QueryFusionRetriever(
        [merged(built, name)], llm=MockLLM(), num_queries=1, use_async=use_async, similarity_top_k=10
    )
    bundle = FilteredQueryBundle(Q_COLONY, filters={"category": "biology"})
    assert_all(fusion.retrieve(bundle), biology, "category == biology AND year >= 2019")
    assert_all(asyncio.run(fusion.aretrieve(bundle)), biology, "category == biology AND year >= 2019")
    ref = fusion.retrieve(FilteredQueryBundle(Q_MIXED, filters={"ref_doc_id": "bread"}))
    assert ref and {hit.node.ref_doc_id for hit in ref} == {"bread"}
    assert len(fusion.retrieve(FilteredQueryBundle(Q_BROAD, top_k=2))) == 2
