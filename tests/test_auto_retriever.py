"""ValidatedAutoRetriever: upstream VectorIndexAutoRetriever's failures, each as a test.

The bundled sample corpus (12 documents, metadata category/year/language/source)
indexed with the lexical test embedding; a scripted fake LLM where an LLM is
needed. No network, no API key.
"""

from __future__ import annotations

import asyncio
import functools
import json
from datetime import date
from typing import Any

import pytest
from conftest import LexicalEmbedding
from llama_index.core import MockEmbedding, Settings, StorageContext, VectorStoreIndex
from llama_index.core.indices.vector_store.retrievers.auto_retriever.auto_retriever import (
    VectorIndexAutoRetriever,
)
from llama_index.core.indices.vector_store.retrievers.auto_retriever.output_parser import (
    VectorStoreQueryOutputParser,
)
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    MetadataInfo,
    VectorStoreInfo,
)
from test_auto_llm import ScriptedLLM, answer

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    ExplainedNodeWithScore,
    FilteredQueryBundle,
    FusionHit,
    HybridFusionRetriever,
    NumpyVectorStore,
    PersistError,
    RecursiveSummaryRetriever,
    ValidatedAutoRetriever,
    load_sample_documents,
)
from llama_index_ext_recursive.auto import (
    AutoExplanation,
    AutoNodeWithScore,
    RuleBasedSpecGenerator,
    SpecError,
    metadata_vocabulary,
)
from llama_index_ext_recursive.filters import metadata_matches
from llama_index_ext_recursive.query import DEFAULT_TOP_K
from llama_index_ext_recursive.sample import sample_vector_store_info

Op = FilterOperator
TODAY = date(2025, 6, 1)
INFO = sample_vector_store_info()
DOCS = load_sample_documents()
META = {doc.doc_id: doc.metadata for doc in DOCS}
EMBED = LexicalEmbedding(model_name="lexical-test")


def _index() -> VectorStoreIndex:
    storage = StorageContext.from_defaults(vector_store=NumpyVectorStore())
    return VectorStoreIndex.from_documents(DOCS, embed_model=EMBED, storage_context=storage)


@functools.cache
def shared_index() -> VectorStoreIndex:
    """Built on first use, not at import: every xdist worker imports this file."""
    return _index()


@functools.cache
def shared_recursive() -> RecursiveSummaryRetriever:
    return RecursiveSummaryRetriever.from_documents(DOCS, embed_model=EMBED, similarity_top_k=10)


def auto(**kwargs: Any) -> ValidatedAutoRetriever:
    kwargs.setdefault("today", TODAY)
    kwargs.setdefault("similarity_top_k", 5)
    index = kwargs.pop("index", None) or shared_index()
    return ValidatedAutoRetriever(index, INFO, **kwargs)


def llm(*responses: Any) -> ScriptedLLM:
    return ScriptedLLM(responses=list(responses))


def satisfies(hits, filters) -> bool:
    tree = filters if isinstance(filters, MetadataFilters) else MetadataFilters(filters=filters)
    return all(metadata_matches(tree, hit.node.metadata) for hit in hits)


def ids(hits) -> list[tuple]:
    return [(h.node.node_id, round(h.score, 9)) for h in hits]


def F(key: str, value: Any, op: Op = Op.EQ) -> MetadataFilter:
    return MetadataFilter(key=key, value=value, operator=op)


# --------------------------------------------------------------------------- no LLM


def test_constructs_and_works_without_llm_or_openai_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert Settings._llm is None
    # upstream resolves Settings.llm (OpenAI) in its constructor: ImportError without
    # llama-index-llms-openai, ValueError with it but without a key
    with pytest.raises((ImportError, ValueError)):
        VectorIndexAutoRetriever(shared_index(), INFO)
    assert Settings._llm is None
    retriever = auto()
    hits, explanation = retriever.retrieve_with_explanation("English blog posts about marathon training")
    assert hits and satisfies(hits, [F("language", "en"), F("source", "blog")])
    assert explanation.generator == "rules" and explanation.search_query == "marathon training"
    assert Settings._llm is None  # never resolved, so never defaulted to OpenAI


def test_vocabulary_is_read_from_the_index_by_default():
    retriever = auto()
    assert retriever.vocabulary["category"] >= {"food", "biology"}
    assert retriever.vocabulary["year"] >= {2018, 2025}
    assert set(retriever.vocabulary) <= {"category", "year", "language", "source"}


def test_chinese_query_without_llm():
    hits, explanation = auto().retrieve_with_explanation("2020年以后的中文百科")
    assert hits and satisfies(hits, [F("language", "zh"), F("source", "encyclopedia"), F("year", 2020, Op.GTE)])
    assert {m["key"] for m in explanation.report.matches} == {"year", "language", "source"}


# --------------------------------------------------------------------------- upstream failures with an LLM


def author_index():
    nodes = [
        TextNode(id_=f"n{i}", text=text, metadata={"author": author, "year": year})
        for i, (text, author, year) in enumerate(
            [
                ("Bees dance to share where flowers are.", "Ann Lee", 2019),
                ("Queen bees lay the eggs of the colony.", "Bo Chen", 2021),
                ("Sourdough needs a lively starter.", "Ann Lee", 2023),
            ]
        )
    ]
    info = VectorStoreInfo(
        content_info="notes",
        metadata_info=[
            MetadataInfo(name="author", type="str", description="Author name"),
            MetadataInfo(name="year", type="int", description="Year published"),
        ],
    )
    return VectorStoreIndex(nodes, embed_model=EMBED), info


def test_invented_key_dropped_with_suggestion_instead_of_silent_empty():
    index, info = author_index()
    bad = answer("bees", [{"key": "first_author", "value": "Ann Lee", "operator": "=="}])
    upstream = VectorIndexAutoRetriever(index, info, llm=llm(bad), similarity_top_k=3)
    assert upstream.retrieve("bees by Ann Lee") == []  # the store has no first_author: nothing matches
    ours = ValidatedAutoRetriever(index, info, llm=llm(bad, bad), similarity_top_k=3)
    hits, explanation = ours.retrieve_with_explanation("bees by Ann Lee")
    assert hits
    dropped = [r for r in explanation.repairs if r.kind == "dropped_key"]
    assert dropped and "did you mean 'author'" in dropped[0].message
    assert "first_author" in ours.spec_generator.llm.prompts[1]  # retried with the problem


def test_string_year_is_coerced_and_applied():
    bad = answer("history", [{"key": "year", "value": "2019", "operator": ">"}])
    upstream = VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(bad), similarity_top_k=5)
    # '>' between str and int: NumpyVectorStore lets no row match (upstream's SimpleVectorStore raises)
    assert upstream.retrieve("history after 2019") == []
    hits, explanation = auto(llm=llm(bad)).retrieve_with_explanation("history after 2019")
    assert hits and satisfies(hits, [F("year", 2019, Op.GT)])
    assert "coerced_value" in explanation.report.kinds()


def test_llm_top_k_raises_k_within_max_top_k():
    ask = answer("bees", top_k=8)
    upstream = VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(ask), similarity_top_k=2)
    assert len(upstream.retrieve("eight documents please")) == 2  # min(8, max_top_k, similarity_top_k)
    hits = auto(llm=llm(ask), similarity_top_k=2).retrieve("eight documents please")
    assert len(hits) == 8 and hits[0].explanation.auto.top_k == 8
    hits = auto(llm=llm(answer("bees", top_k=40)), similarity_top_k=2).retrieve("forty documents")
    assert len(hits) == 10  # max_top_k


def test_similarity_top_k_above_max_top_k_is_clamped():
    upstream = VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(answer("bees")), similarity_top_k=12, max_top_k=3)
    assert len(upstream.retrieve("bees")) == 12
    hits, explanation = auto(similarity_top_k=12, max_top_k=3).retrieve_with_explanation("bees and honey")
    assert len(hits) == 3 and explanation.top_k == 3
    assert "clamped_top_k" in explanation.report.kinds()


def test_or_extra_filters_are_accepted_and_applied():
    extra = MetadataFilters(filters=[F("language", "zh"), F("year", 2024, Op.GTE)], condition=FilterCondition.OR)
    with pytest.raises(ValueError, match="OR"):
        VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(), extra_filters=extra)
    hits, explanation = auto(extra_filters=extra, similarity_top_k=10).retrieve_with_explanation("garden tea software")
    assert hits and satisfies(hits, extra)
    assert {META[h.node.ref_doc_id]["doc_id"] for h in hits} <= {
        d for d, m in META.items() if m["language"] == "zh" or m["year"] >= 2024
    }
    assert explanation.filters is not None and explanation.extra_filters == extra


def test_nested_extra_filters_and_generated_filters_both_hold():
    extra = MetadataFilters(
        filters=[
            MetadataFilters(filters=[F("source", "blog"), F("source", "encyclopedia")], condition=FilterCondition.OR),
            F("year", 2018, Op.NE),
        ]
    )
    hits = auto(extra_filters=extra, similarity_top_k=10).retrieve("English articles")
    assert hits and satisfies(hits, extra) and satisfies(hits, [F("language", "en")])


def test_unknown_operator_keeps_the_rest_of_the_spec():
    bad = answer(
        "",
        [
            {"key": "category", "value": "biology", "operator": "=="},
            {"key": "year", "value": 2019, "operator": "roughly"},
        ],
    )
    upstream = VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(bad), similarity_top_k=10)
    assert len({h.node.metadata["category"] for h in upstream.retrieve("biology around 2019")}) > 1  # no filters
    hits, explanation = auto(llm=llm(bad, bad), similarity_top_k=10).retrieve_with_explanation("biology around 2019")
    assert hits and satisfies(hits, [F("category", "biology")])
    assert "dropped_filter" in explanation.report.kinds()


def test_bad_json_retried_then_used():
    retriever = auto(llm=llm("Filters: language=zh", answer("tea", [{"key": "language", "value": "zh"}])))
    hits, explanation = retriever.retrieve_with_explanation("Chinese texts about tea")
    assert hits and satisfies(hits, [F("language", "zh")])
    assert explanation.generator == "llm" and explanation.report.kinds()[0] == "retried"
    assert "no JSON object" in retriever.spec_generator.llm.prompts[1]


def test_bad_twice_falls_back_to_rules_never_silent_no_filters():
    bad = "I think you want the Chinese encyclopedia."
    upstream = VectorIndexAutoRetriever(shared_index(), INFO, llm=llm(bad), similarity_top_k=10)
    assert len({h.node.metadata["language"] for h in upstream.retrieve("Chinese encyclopedia entries")}) == 2
    hits, explanation = auto(llm=llm(bad, bad), similarity_top_k=10).retrieve_with_explanation(
        "Chinese encyclopedia entries"
    )
    assert explanation.generator == "fallback" and explanation.fell_back
    assert explanation.repairs[0].kind == "fallback"
    assert hits and satisfies(hits, [F("language", "zh"), F("source", "encyclopedia")])


def test_empty_spec_query_searches_with_the_original_text():
    retriever = auto(llm=llm(answer("", [{"key": "source", "value": "manual"}])))
    hits, explanation = retriever.retrieve_with_explanation("solar inverter manuals")
    assert explanation.spec.query == "" and explanation.search_query == "solar inverter manuals"
    assert hits[0].node.ref_doc_id == "home-solar" and satisfies(hits, [F("source", "manual")])


def test_default_empty_query_vector_is_still_honoured():
    vector = EMBED.get_query_embedding("sourdough starter")
    retriever = auto(llm=llm(answer("", [{"key": "category", "value": "food"}])), default_empty_query_vector=vector)
    hits, explanation = retriever.retrieve_with_explanation("food")
    assert explanation.search_query == "" and hits[0].node.ref_doc_id == "sourdough-baking"


def test_reject_policy_raises_for_rules_that_cannot_be_validated():
    class Invented(RuleBasedSpecGenerator):
        def read(self, query):  # the one method every rule-based spec goes through
            reading = super().read(query)
            reading.spec.filters.append(F("first_author", "Ann"))
            return reading

    retriever = auto(spec_generator=Invented(INFO, {}, today=TODAY), key_policy="reject")
    with pytest.raises(SpecError, match="first_author"):
        retriever.retrieve("food")


# --------------------------------------------------------------------------- filters per call


def test_per_call_filters_combine_with_generated_and_extra():
    retriever = auto(extra_filters={"language": "en"}, similarity_top_k=10)
    bundle = FilteredQueryBundle("encyclopedia entries", filters=MetadataFilters(filters=[F("year", 2019, Op.LTE)]))
    hits, explanation = retriever.retrieve_with_explanation(bundle)
    assert hits and satisfies(hits, [F("source", "encyclopedia"), F("language", "en"), F("year", 2019, Op.LTE)])
    assert {h.node.ref_doc_id for h in hits} == {"honeybee-colonies", "lighthouse-history"}
    assert explanation.per_call_filters is not None and "year <= 2019" in explanation.describe()


def test_filter_policy_replace_swaps_extra_for_per_call():
    retriever = auto(extra_filters={"language": "en"}, filter_policy="replace", similarity_top_k=10)
    hits = retriever.retrieve(FilteredQueryBundle("encyclopedia entries", filters={"language": "zh"}))
    assert hits and satisfies(hits, [F("language", "zh"), F("source", "encyclopedia")])


# --------------------------------------------------------------------------- wrapped retriever


def test_over_recursive_summary_retriever_filters_reach_both_levels():
    retriever = auto(index=None, retriever=shared_recursive(), similarity_top_k=10)
    assert retriever.vocabulary["source"] >= {"blog", "manual"}  # read from the recursive chunk store
    hits, explanation = retriever.retrieve_with_explanation(
        FilteredQueryBundle("biology encyclopedia entries about reefs and bees", filters={"language": "en"})
    )
    expected = [F("category", "biology"), F("source", "encyclopedia"), F("language", "en")]
    assert hits and satisfies(hits, expected)
    # routed documents (summary level) and chunks both obey the filters
    assert {h.explanation.route.doc_id for h in hits} == {"coral-reefs", "honeybee-colonies"}
    assert all(isinstance(h, ExplainedNodeWithScore) and h.explanation is not None for h in hits)
    assert explanation.retriever == "RecursiveSummaryRetriever" and explanation.search_query == "reefs and bees"


def test_wrapped_retriever_results_are_cut_to_the_spec_top_k():
    retriever = auto(index=None, retriever=shared_recursive(), llm=llm(answer("bees", top_k=3)))
    assert len(retriever.retrieve("three passages about bees")) == 3
    assert shared_recursive().similarity_top_k == 10  # the shared retriever is never mutated


def test_wrapped_backfill_retriever_and_index_both_given():
    wrapped = BackfillVectorRetriever(shared_index(), similarity_top_k=10)
    hits = auto(retriever=wrapped).retrieve("handbooks")
    assert len(hits) == 2 and satisfies(hits, [F("source", "handbook")])  # the two handbooks


def test_needs_index_or_retriever():
    with pytest.raises(ValueError, match="index"):
        ValidatedAutoRetriever(None, INFO)


# --------------------------------------------------------------------------- sync/async, explanations


@pytest.mark.parametrize(
    "query", ["English blog posts about bread", "2020年以后的中文百科", "top 3 manuals", "history of lighthouses"]
)
async def test_sync_and_async_give_identical_results(query):
    for retriever in (auto(), auto(index=None, retriever=shared_recursive())):
        sync_hits, sync_expl = retriever.retrieve_with_explanation(query)
        async_hits, async_expl = await retriever.aretrieve_with_explanation(query)
        assert ids(sync_hits) == ids(async_hits)
        assert sync_expl.model_dump() == async_expl.model_dump()


async def test_sync_and_async_with_an_llm():
    script = ["garbage", answer("bees", [{"key": "year", "value": "2019", "operator": ">="}], top_k=2)]
    sync_hits = auto(llm=llm(*script)).retrieve("bees 2019")
    async_hits = await auto(llm=llm(*script)).aretrieve("bees 2019")
    assert ids(sync_hits) == ids(async_hits) and len(sync_hits) == 2  # top_k=2
    assert sync_hits[0].explanation.auto.generator == "llm"


def test_every_result_carries_the_call_explanation():
    retriever = auto(similarity_top_k=10)
    hits = retriever.retrieve("encyclopedia entries")
    assert hits and all(isinstance(h, AutoNodeWithScore) for h in hits)
    first = hits[0].explanation.auto
    assert isinstance(first, AutoExplanation) and all(h.explanation.auto is first for h in hits)
    assert [(f.key, f.value) for f in first.spec.filters] == [("source", "encyclopedia")]
    assert hits[0].to_dict()["explanation"]["auto"]["generator"] == "rules"
    again = retriever.retrieve("encyclopedia entries")
    assert again[0].explanation.auto is not first  # per call, never shared


def test_explanation_even_without_results():
    retriever = auto(extra_filters={"language": "zh"})
    hits, explanation = retriever.retrieve_with_explanation("English blog posts")
    assert hits == [] and explanation.filters is not None
    assert "language == 'zh'" in explanation.describe()


async def test_concurrent_calls_get_their_own_explanations():
    retriever = auto(similarity_top_k=10)
    (a_hits, a), (b_hits, b) = await asyncio.gather(
        retriever.aretrieve_with_explanation("food articles"),
        retriever.aretrieve_with_explanation("handbooks"),
    )
    assert a.query == "food articles" and b.query == "handbooks"
    assert satisfies(a_hits, [F("category", "food")]) and satisfies(b_hits, [F("source", "handbook")])
    assert all(h.explanation.auto is a for h in a_hits) and all(h.explanation.auto is b for h in b_hits)


# --------------------------------------------------------------------------- upstream hooks


def test_upstream_hooks_and_prompts():
    retriever = auto(llm=llm(answer("bees", [{"key": "year", "value": "2019"}])))
    spec = retriever.generate_retrieval_spec(QueryBundle("bees from 2019"))
    assert [(f.key, f.value) for f in spec.filters] == [("year", 2019)]
    inner, bundle = retriever._build_retriever_from_spec(spec)
    assert isinstance(inner, BackfillVectorRetriever) and bundle.query_str == "bees"
    assert "prompt" in retriever.get_prompts()
    retriever.update_prompts({"prompt": retriever.get_prompts()["prompt"]})


def test_rule_based_generator_passed_as_spec_generator_is_wrapped():
    gen = RuleBasedSpecGenerator(INFO, {k: v for k, v in metadata_vocabulary(DOCS).items()}, today=TODAY)
    hits, explanation = auto(spec_generator=gen).retrieve_with_explanation("manuals")
    assert explanation.generator == "rules" and satisfies(hits, [F("source", "manual")])


def test_generator_results_are_json_serialisable():
    _, explanation = auto(llm=llm("x", "y")).retrieve_with_explanation("Chinese blog posts")
    data = json.loads(explanation.model_dump_json())
    assert data["generator"] == "fallback" and data["report"]["repairs"][0]["kind"] == "fallback"


# --------------------------------------------------------------------------- the parent's constructor, k


def test_the_parent_constructor_runs_without_resolving_an_llm_and_k_defaults_to_ten():
    retriever = ValidatedAutoRetriever(shared_index(), INFO, today=TODAY)
    assert Settings._llm is None and retriever._llm is None  # upstream's `llm or Settings.llm` never ran
    assert isinstance(retriever._output_parser, VectorStoreQueryOutputParser)  # set by upstream's __init__ only
    assert retriever._similarity_top_k == DEFAULT_TOP_K == 10  # upstream: 2
    assert len(retriever.retrieve("bees and flowers")) == 10


def test_a_misspelt_keyword_fails_at_construction_naming_the_right_one():
    with pytest.raises(TypeError, match="did you mean 'similarity_top_k'"):
        auto(similarity_topk=3)
    with pytest.raises(TypeError, match="extra_filters="):
        auto(filters={"language": "en"})
    assert auto(stale_policy="raise")._vector_retriever.stale_policy.value == "raise"  # passed on


@pytest.mark.parametrize("wrapped", [False, True], ids=["index", "wrapped-recursive"])
def test_per_call_top_k_replaces_the_spec_and_own_k(wrapped):
    retriever = auto(index=None, retriever=shared_recursive()) if wrapped else auto()
    assert len(retriever.retrieve("bees and flowers")) == 5  # own k
    hits, explanation = retriever.retrieve_with_explanation(FilteredQueryBundle("bees and flowers", top_k=3))
    assert len(hits) == 3 and explanation.top_k == 3
    assert len(retriever.retrieve("top 2 encyclopedia entries")) == 2  # the spec's k
    one = retriever.retrieve(FilteredQueryBundle("top 2 encyclopedia entries", top_k=1))
    assert len(one) == 1 and satisfies(one, [F("source", "encyclopedia")])
    assert len(retriever.retrieve(FilteredQueryBundle("top 2 encyclopedia entries", top_k=None))) == 2


def test_retrieve_with_explanation_reports_the_bundles_own_options():
    bundle = FilteredQueryBundle("blog posts", filters={"year": {"op": ">=", "value": 2022}}, top_k=2)
    hits, explanation = auto().retrieve_with_explanation(bundle)
    assert len(hits) == 2 and satisfies(hits, [F("source", "blog"), F("year", 2022, Op.GTE)])
    assert explanation.per_call_filters == bundle.filters and explanation.top_k == 2
    assert all(hit.explanation.auto is explanation for hit in hits)


# --------------------------------------------------------------------------- composed explanations


def test_a_wrapped_recursive_retrievers_route_part_survives():
    retriever = auto(index=None, retriever=shared_recursive(), similarity_top_k=10)
    hits, explanation = retriever.retrieve_with_explanation("coral reefs and bees")
    inner = shared_recursive().retrieve(
        FilteredQueryBundle(explanation.search_query, filters=explanation.filters, top_k=explanation.top_k)
    )
    routes = {hit.node.node_id: hit.explanation.route for hit in inner}
    assert hits and all(hit.explanation.route is not None for hit in hits)
    assert all(hit.explanation.route == routes[hit.node.node_id] for hit in hits)
    assert all(hit.explanation.auto is explanation for hit in hits)


def test_a_wrapped_hybrid_retrievers_fusion_part_survives():
    hybrid = HybridFusionRetriever.from_nodes(
        list(shared_index().docstore.docs.values()), embed_model=EMBED, similarity_top_k=10, calibrate=False
    )
    retriever = auto(index=None, retriever=hybrid, vocabulary=metadata_vocabulary(DOCS))
    hits, explanation = retriever.retrieve_with_explanation("English articles about bees and honey")
    assert hits and satisfies(hits, [F("language", "en")])
    for hit in hits:
        assert hit.explanation.fusion and all(isinstance(item, FusionHit) for item in hit.explanation.fusion)
        assert hit.explanation.auto is explanation


def test_an_upstream_retriever_that_ignores_the_bundle_is_never_unfiltered(caplog):
    upstream = shared_index().as_retriever(similarity_top_k=12)  # reads no FilteredQueryBundle options
    retriever = auto(index=None, retriever=upstream, vocabulary=metadata_vocabulary(DOCS))
    with caplog.at_level("WARNING", logger="llama_index_ext_recursive.auto.retriever"):
        hits = retriever.retrieve("English blog posts about bread")
    assert hits and satisfies(hits, [F("language", "en"), F("source", "blog")])
    assert "outside the filters" in caplog.text


# --------------------------------------------------------------------------- saving


def _settings_rich(**kwargs: Any) -> ValidatedAutoRetriever:
    extra = MetadataFilters(filters=[F("language", "zh"), F("year", 2020, Op.GTE)], condition=FilterCondition.OR)
    return auto(
        extra_filters=extra,
        filter_policy="replace",
        synonyms={"source": {"wiki": "encyclopedia"}},
        max_top_k=8,
        similarity_top_k=4,
        empty_query_top_k=6,
        unknown_filter_key="warn",
        max_retries=0,
        **kwargs,
    )


SAVED_QUERIES = [
    "wiki entries about tea",
    "blog posts since 2021",
    FilteredQueryBundle("encyclopedia entries", filters={"language": "en"}),
    FilteredQueryBundle("garden tea software", top_k=2),
]


def answers(retriever: ValidatedAutoRetriever) -> list[tuple]:
    out = []
    for query in SAVED_QUERIES:
        hits, explanation = retriever.retrieve_with_explanation(query)
        out.append((ids(hits), explanation.model_dump()))
    return out


def test_settings_round_trip_through_to_dict_and_from_dict():
    original = _settings_rich(vocabulary=metadata_vocabulary(DOCS))
    data = original.to_dict()
    assert data["type"] == "llama_index_ext_recursive.auto.retriever.ValidatedAutoRetriever"
    assert json.loads(json.dumps(data)) == data
    again = ValidatedAutoRetriever.from_dict(data, shared_index())
    assert again.to_dict() == data
    assert answers(again) == answers(original)


def test_a_vocabulary_read_from_the_index_is_not_saved_but_read_again():
    data = auto().to_dict()
    assert data["init_parameters"]["vocabulary"] is None
    assert ValidatedAutoRetriever.from_dict(data, shared_index()).vocabulary == auto().vocabulary


def test_persist_and_reload_answer_identically(tmp_path):
    original = _settings_rich()
    original.persist(tmp_path / "auto")
    loaded = ValidatedAutoRetriever.from_persist_dir(tmp_path / "auto", embed_model=EMBED)
    assert type(loaded) is ValidatedAutoRetriever and loaded.to_dict() == original.to_dict()
    assert answers(loaded) == answers(original)
    for query in SAVED_QUERIES:
        assert ids(asyncio.run(loaded.aretrieve(query))) == ids(original.retrieve(query))
    original.persist(tmp_path / "auto")  # persisting again replaces the folder's index
    assert answers(ValidatedAutoRetriever.from_persist_dir(tmp_path / "auto", embed_model=EMBED)) == answers(original)


def test_reload_with_another_embedding_model_is_refused(tmp_path):
    auto().persist(tmp_path / "auto")
    # the same vectors under another name load; other vectors are refused, naming both models
    assert ValidatedAutoRetriever.from_persist_dir(tmp_path / "auto", embed_model=LexicalEmbedding(model_name="other"))
    with pytest.raises(PersistError, match="built with embedding model 'lexical-test' .* but 'unknown'"):
        ValidatedAutoRetriever.from_persist_dir(tmp_path / "auto", embed_model=MockEmbedding(embed_dim=64))


def test_a_store_that_keeps_its_own_data_is_refused_before_anything_is_written(tmp_path):
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    client = chromadb.EphemeralClient(settings=chromadb.config.Settings(anonymized_telemetry=False))
    store = ChromaVectorStore(chroma_collection=client.get_or_create_collection("auto-persist"))
    storage = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex.from_documents(DOCS, embed_model=EMBED, storage_context=storage)
    with pytest.raises(TypeError, match="keeps its data itself"):
        ValidatedAutoRetriever(index, INFO).persist(tmp_path / "auto")
    assert not (tmp_path / "auto").exists()


def test_a_wrapping_retriever_is_saved_as_settings_beside_its_child(tmp_path):
    retriever = auto(index=None, retriever=shared_recursive())
    with pytest.raises(PersistError, match="persist that retriever"):
        retriever.persist(tmp_path / "auto")
    assert not (tmp_path / "auto").exists()
    again = ValidatedAutoRetriever.from_dict(retriever.to_dict(), retriever=shared_recursive())
    assert ids(again.retrieve("coral reefs and bees")) == ids(retriever.retrieve("coral reefs and bees"))
