"""Metadata filters on legitimate but awkward metadata (issue 23): a right answer or a clear error, never
a silent empty list or a raw TypeError, the same on every filterable retriever and store, sync and async."""

from __future__ import annotations

import asyncio
import datetime

import numpy as np
import pytest
from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    FilteredQueryBundle,
    FilterError,
    HybridFusionRetriever,
    MultilingualBM25Retriever,
    NumpyVectorStore,
    RecursiveSummaryRetriever,
)
from llama_index_ext_recursive.filters import FilterVocabulary, metadata_matches, to_filters

IDS = ["bees", "solar", "bread", "ants"]
TEXTS = [
    "Bees dance to share where flowers are.",
    "Solar panels convert sunlight into power.",
    "Bread rises with yeast and flour.",
    "Ants farm aphids for honeydew.",
]
# tags: lists; year: ints, one document without it; mixed: numbers and a string; flag: bools and ints
META = [
    {"tags": ["insects", "biology"], "year": 2020, "date": "2020-05-01", "mixed": 5, "flag": True},
    {"tags": ["energy"], "year": 2021, "date": "2021-07-01", "mixed": "five", "flag": 0},
    {"tags": ["food", "biology"], "year": 2019, "date": "2019-01-01", "mixed": 7, "flag": False},
    {"tags": ["insects"], "date": "2018-03-01", "mixed": 2, "flag": 1},
]
QUERY = "bees solar bread ants flowers power yeast aphids"
KINDS = ["recursive", "hybrid", "bm25", "numpy", "default"]


def _nodes():
    return [TextNode(id_=f"{i}-0", text=t, metadata={**m, "doc_id": i}) for i, t, m in zip(IDS, TEXTS, META)]


@pytest.fixture(scope="module")
def retrievers():
    from conftest import LexicalEmbedding

    model = LexicalEmbedding(model_name="lexical-test")
    docs = [Document(text=t, doc_id=i, metadata=m) for i, t, m in zip(IDS, TEXTS, META)]
    numpy_index = VectorStoreIndex(
        _nodes(), storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()), embed_model=model
    )
    return {
        "recursive": RecursiveSummaryRetriever.from_documents(docs, embed_model=model),
        "hybrid": HybridFusionRetriever.from_nodes(_nodes(), model, similarity_top_k=10),
        "bm25": MultilingualBM25Retriever(_nodes(), similarity_top_k=10),
        "numpy": BackfillVectorRetriever(numpy_index, 10),
        "default": BackfillVectorRetriever(VectorStoreIndex(_nodes(), embed_model=model), 10),  # SimpleVectorStore
    }


def _both(retriever, filters):
    """The documents found by ``retrieve`` and ``aretrieve``, which must agree."""
    sync = retriever.retrieve(FilteredQueryBundle(QUERY, filters=filters))
    async_ = asyncio.run(retriever.aretrieve(FilteredQueryBundle(QUERY, filters=filters)))
    found = sorted({h.node.ref_doc_id or h.node.metadata["doc_id"] for h in sync})
    assert found == sorted({h.node.ref_doc_id or h.node.metadata["doc_id"] for h in async_})
    return found


def _expected(filters):
    """The documents whose metadata passes ``filters``: what a retriever asked for all of them returns."""
    return sorted(i for i, m in zip(IDS, META) if metadata_matches(to_filters(filters), m))


# BM25 returns only nodes sharing a word with the query; every text shares one with QUERY
RIGHT_ANSWERS = [
    ({"tags": {"op": "contains", "value": "insects"}}, ["ants", "bees"]),
    ({"tags": {"op": "any", "value": ["energy", "food"]}}, ["bread", "solar"]),
    ({"tags": {"op": "all", "value": ["biology", "food"]}}, ["bread"]),
    ({"year": {"op": "is_empty"}}, ["ants"]),
    ({"date": {"op": ">=", "value": "2020-01-01"}}, ["bees", "solar"]),  # ISO dates compare as strings
    ({"mixed": {"op": ">", "value": 4}}, ["bees", "bread"]),  # 'five' is no number: no match, no TypeError
    ({"mixed": {"op": ">", "value": "a"}}, ["solar"]),
    ({"mixed": {"op": "!=", "value": "five"}}, ["ants", "bees", "bread"]),
    ({"mixed": 5}, ["bees"]),
    ({"flag": 1}, ["ants", "bees"]),  # True == 1
    ({"flag": {"op": ">", "value": 0}}, ["ants", "bees"]),
    ({"date": {"op": "contains", "value": "2020"}}, ["bees"]),  # upstream: a substring of a string
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("filters,expected", RIGHT_ANSWERS, ids=[str(f) for f, _ in RIGHT_ANSWERS])
def test_legitimate_filters_give_the_right_documents_everywhere(retrievers, kind, filters, expected):
    assert _expected(filters) == expected  # the one evaluator says so too
    assert _both(retrievers[kind], filters) == expected


def test_an_or_across_types_is_how_a_mixed_list_is_written(retrievers):
    either = MetadataFilters(
        condition=FilterCondition.OR,
        filters=[
            MetadataFilter(key="mixed", operator=FilterOperator.IN, value=[5]),
            MetadataFilter(key="mixed", operator=FilterOperator.IN, value=["five"]),
        ],
    )
    for kind in KINDS:
        assert _both(retrievers[kind], either) == ["bees", "solar"], kind


REFUSED = [
    # 1. equality or in on a key holding lists compares whole lists: upstream returns []
    ({"tags": "insects"}, r"'tags' holds lists in this index .* \{\"op\": \"contains\", \"value\": v\}"),
    ({"tags": ["insects", "energy"]}, r"filter tags in \['insects', 'energy'\] compares whole lists.*\"any\"/\"all\""),
    ({"tags": {"op": ">", "value": "a"}}, "compares whole lists"),
    # 2. None: nothing stores None, so == None matches nothing and != None everything
    ({"year": None}, r"year=None matches nothing .*\{'year': \{\"op\": \"is_empty\"\}\}"),
    (MetadataFilters(filters=[MetadataFilter(key="year", value=None)]), "year=None matches nothing"),
    ({"year": {"op": "!=", "value": None}}, r"year != None matches every node .*condition='not'"),
    # 4. a string against ISO strings is fine; a number against them is not
    ({"date": {"op": ">", "value": 2020}}, r"date > 2020 is a number, but 'date' holds string values"),
    # an operator that cannot apply to any kind the key holds
    ({"year": {"op": "contains", "value": 2020}}, r"year contains 2020 cannot match: 'year' holds number values"),
    ({"year": {"op": "any", "value": [2020]}}, r"use \"==\" or \"in\""),
    ({"year": {"op": "text_match", "value": "20"}}, r"'year' holds number values .*text_match compares strings"),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("filters,message", REFUSED, ids=[str(f) for f, _ in REFUSED])
def test_filters_that_would_come_back_empty_or_crash_are_refused_with_the_fix(retrievers, kind, filters, message):
    with pytest.raises(FilterError, match=message):
        retrievers[kind].retrieve(FilteredQueryBundle(QUERY, filters=filters))
    with pytest.raises(FilterError, match=message):
        asyncio.run(retrievers[kind].aretrieve(FilteredQueryBundle(QUERY, filters=filters)))


@pytest.mark.parametrize(
    "filters,message",
    [
        ({"mixed": [5, "five"]}, r"the list \[5, 'five'\] mixes strings and numbers, .*condition='or'"),
        ({"flag": True}, "holds a bool, which a filter value cannot be; pass 1 or 0"),
        ({"date": {"op": ">=", "value": datetime.date(2020, 1, 1)}}, r"filter 'date': .*got date .*isoformat"),
    ],
)
def test_filter_values_no_filter_can_hold_are_refused_when_written(filters, message):
    with pytest.raises(ValueError, match=message):
        to_filters(filters)


@pytest.mark.parametrize("op", ["is_empty", "empty", "missing", "is null"])
def test_every_spelling_of_is_empty_needs_no_value(op):
    assert to_filters({"year": {"op": op}}).filters[0].operator == FilterOperator.IS_EMPTY


def test_stored_datetimes_refuse_a_string_filter_naming_both_types():
    vocabulary = FilterVocabulary.from_nodes([TextNode(text="x", metadata={"when": datetime.datetime(2020, 1, 1)})])
    (problem,) = vocabulary.problems(to_filters({"when": {"op": ">=", "value": "2019-01-01"}}))
    assert "is a string, but 'when' holds datetime values" in problem
    assert "value.isoformat() strings" in problem


def test_only_filters_upstream_would_fail_on_leave_the_default_store(retrievers):
    vocabulary = FilterVocabulary.from_nodes(_nodes())
    assert vocabulary.needs_own_evaluation(to_filters({"mixed": {"op": ">", "value": 4}}))
    assert vocabulary.needs_own_evaluation(to_filters({"tags": {"op": "contains", "value": "x"}})) is False
    assert vocabulary.needs_own_evaluation(to_filters({"mixed": 5})) is False  # == never fails
    assert vocabulary.needs_own_evaluation(to_filters({"year": {"op": ">", "value": 2019}})) is False


AWKWARD_METADATA = {"year": np.int64(2020), "score": np.float32(0.5), "ok": np.bool_(True), "pair": (np.int32(1), 2)}


@pytest.mark.parametrize("kind", ["hybrid", "bm25", "numpy"])
def test_numpy_scalars_in_node_metadata_are_kept_as_the_numbers_they_hold(lexical, kind):
    nodes = [
        TextNode(id_="bees-0", text="bees dance", metadata=dict(AWKWARD_METADATA)),
        TextNode(id_="solar-0", text="solar power", metadata={**AWKWARD_METADATA, "year": np.int64(2021)}),
    ]
    if kind == "hybrid":
        retriever = HybridFusionRetriever.from_nodes(nodes, lexical, similarity_top_k=2)
    elif kind == "bm25":
        retriever = MultilingualBM25Retriever(nodes, similarity_top_k=2)
    else:
        index = VectorStoreIndex(
            nodes, storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()), embed_model=lexical
        )
        retriever = BackfillVectorRetriever(index, 2)
    hits = retriever.retrieve(FilteredQueryBundle("bees dance", filters={"year": 2020}))
    assert [h.node.node_id for h in hits] == ["bees-0"]
    if kind != "numpy":  # the store's copy is converted; the docstore keeps what upstream gave it
        metadata = hits[0].node.metadata
        assert type(metadata["year"]) is int and type(metadata["score"]) is float and metadata["ok"] is True
        assert metadata["pair"] == [1, 2] and type(metadata["pair"][0]) is int
    assert type(nodes[0].metadata["year"]) is np.int64  # the caller's nodes are not changed


@pytest.mark.parametrize("kind", ["hybrid", "bm25", "recursive"])
@pytest.mark.parametrize(
    "value,fix",
    [(datetime.datetime(2020, 1, 1), "isoformat"), ({1, 2}, "sorted"), (object(), "a string, a number")],
)
def test_metadata_no_index_can_hold_is_refused_by_node_and_key_before_embedding(lexical, kind, value, fix):
    nodes = [
        TextNode(id_="bees-0", text="bees dance", metadata={"doc_id": "bees"}),
        TextNode(id_="ants-0", text="ants march", metadata={"doc_id": "ants", "when": value}),
    ]
    build = {
        "hybrid": lambda: HybridFusionRetriever.from_nodes(nodes, lexical),
        "bm25": lambda: MultilingualBM25Retriever(nodes),
        "recursive": lambda: RecursiveSummaryRetriever.from_nodes(nodes, embed_model=lexical),
    }[kind]
    with pytest.raises(TypeError, match=rf"node 'ants-0'.*metadata\['when'\] .*{fix}"):
        build()
    assert lexical.calls == 0
