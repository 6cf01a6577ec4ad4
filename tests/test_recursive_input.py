"""Bad input to RecursiveSummaryRetriever: clear errors, never a silent wrong answer (issue 11)."""

from __future__ import annotations

import logging
import math

import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import Document, IndexNode, QueryBundle

from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever
from llama_index_ext_recursive.filters import FilterError


@pytest.fixture
def retriever(lexical):
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, similarity_top_k=3)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_blank_queries_are_refused_sync_and_async(retriever, query):
    with pytest.raises(ValueError, match="the query is empty"):
        retriever.retrieve(query)
    with pytest.raises(ValueError, match="the query is empty"):
        await retriever.aretrieve(query)


def test_a_bundle_with_its_own_embedding_needs_no_text(retriever, lexical):
    vector = lexical.get_query_embedding("queen bee eggs")
    hits = retriever.retrieve(QueryBundle(query_str="", embedding=vector))
    assert hits[0].node.ref_doc_id == "bees"


def test_unknown_filter_keys_and_mistyped_values_raise_with_the_fix(retriever):
    with pytest.raises(FilterError, match=r"unknown filter key 'categroy' \(did you mean 'category'\?\)"):
        retriever.retrieve(FilteredQueryBundle("queen bee", filters={"categroy": "biology"}))
    with pytest.raises(FilterError, match=r"year='2019' is a string, but 'year' holds number values"):
        retriever.retrieve(FilteredQueryBundle("queen bee", filters={"year": "2019"}))
    # the right spelling and type still filter as before
    hits = retriever.retrieve(FilteredQueryBundle("queen bee", filters={"category": "biology", "year": 2019}))
    assert hits and {h.node.ref_doc_id for h in hits} == {"bees"}
    # store-level keys are always known
    assert retriever.retrieve(FilteredQueryBundle("bread", filters={"ref_doc_id": "bread"}))


async def test_unknown_filter_keys_raise_in_aretrieve_too(retriever):
    with pytest.raises(FilterError, match="categroy"):
        await retriever.aretrieve(FilteredQueryBundle("queen bee", filters={"categroy": "biology"}))


def test_warn_policy_logs_and_searches(lexical, caplog):
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, unknown_filter_key="warn")
    with caplog.at_level(logging.WARNING):
        hits = retriever.retrieve(FilteredQueryBundle("queen bee", filters={"categroy": "biology"}))
    assert hits == []
    assert "did you mean 'category'" in caplog.text


def test_construction_filters_are_checked_too(lexical):
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, filters={"yeer": 2019})
    with pytest.raises(FilterError, match="did you mean 'year'"):
        retriever.retrieve("queen bee")


def test_keys_of_documents_added_later_become_known(retriever):
    retriever.add_documents([Document(text="Tides follow the moon.", metadata={"doc_id": "sea", "region": "coast"})])
    hits = retriever.retrieve(FilteredQueryBundle("tides moon", filters={"region": "coast"}))
    assert [h.node.ref_doc_id for h in hits] == ["sea"]


@pytest.mark.parametrize(
    "setting, value, error",
    [
        ("similarity_top_k", True, TypeError),
        ("similarity_top_k", 2.5, TypeError),
        ("similarity_top_k", "5", TypeError),
        ("similarity_top_k", math.nan, TypeError),
        ("similarity_top_k", 0, ValueError),
        ("num_routed_docs", -1, ValueError),
        ("score_alpha", math.nan, ValueError),
        ("score_alpha", math.inf, ValueError),
        ("score_alpha", True, TypeError),
        ("max_link_depth", 1.0, TypeError),
        ("score_mode", "best", ValueError),
    ],
)
def test_bad_settings_fail_before_any_chunking_or_embedding(setting, value, error):
    model = LexicalEmbedding(model_name="counting")
    with pytest.raises(error, match=setting):
        RecursiveSummaryRetriever.from_documents(
            [Document(text="Some text.", metadata={"doc_id": "a"})], embed_model=model, **{setting: value}
        )
    assert model.calls == 0


def test_a_misspelt_keyword_fails_at_once_naming_the_right_one():
    model = LexicalEmbedding(model_name="counting")
    with pytest.raises(TypeError, match=r"'similarity_topk' \(did you mean 'similarity_top_k'\?\)"):
        RecursiveSummaryRetriever.from_documents(
            [Document(text="Some text.", metadata={"doc_id": "a"})], embed_model=model, similarity_topk=5
        )
    with pytest.raises(TypeError, match="transformations"):
        RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=model, transformations=[])
    assert model.calls == 0


def test_documents_may_come_from_a_generator(lexical):
    docs = (Document(text=f"Text number {i} about topic {i}.", metadata={"doc_id": f"d{i}"}) for i in range(3))
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical)
    assert sorted(retriever.documents) == ["d0", "d1", "d2"]


class NanEmbedding(LexicalEmbedding):
    def _get_query_embedding(self, query):
        return [math.nan] * 64


def test_a_query_vector_with_nan_is_refused_naming_the_model(lexical):
    nodes = topic_nodes()
    for node in nodes:
        node.embedding = lexical.get_text_embedding(node.get_content())
    # hybrid levels calibrate on pseudo-queries at build time: the model is caught there
    with pytest.raises(ValueError, match=r"'broken-model' returned NaN or infinite values for the pseudo"):
        RecursiveSummaryRetriever.from_nodes(nodes, embed_model=NanEmbedding(model_name="broken-model"))
    retriever = RecursiveSummaryRetriever.from_nodes(
        nodes,
        embed_model=NanEmbedding(model_name="broken-model"),
        summary_mode="vector",
        chunk_mode="vector",
    )
    with pytest.raises(ValueError, match=r"'broken-model' returned NaN or infinite values for the query"):
        retriever.retrieve("queen bee")


def test_a_query_vector_of_the_wrong_dimension_is_refused(retriever):
    with pytest.raises(ValueError, match=r"gives 3-dimensional vectors for the query, but the index holds 64"):
        retriever.retrieve(QueryBundle(query_str="queen", embedding=[0.1, 0.2, 0.3]))


def test_retriever_dict_values_must_be_retrievers(lexical):
    with pytest.raises(TypeError, match=r"retriever_dict\['bees'\] is a str, not a BaseRetriever"):
        RecursiveSummaryRetriever.from_retriever_dict(
            [IndexNode(text="bees", index_id="bees")], {"bees": "not a retriever"}, embed_model=lexical
        )


class NoneRetriever(BaseRetriever):
    def _retrieve(self, query_bundle):
        return None


def test_a_child_returning_none_is_named(lexical):
    retriever = RecursiveSummaryRetriever.from_retriever_dict(
        [IndexNode(text="bees and honey", index_id="bees")], {"bees": NoneRetriever()}, embed_model=lexical
    )
    with pytest.raises(TypeError, match=r"retriever_dict\['bees'\] \(NoneRetriever\) failed"):
        retriever.retrieve("bees")


def test_keys_of_deleted_documents_are_forgotten(retriever):
    retriever.add_documents([Document(text="Tides follow the moon.", metadata={"doc_id": "sea", "region": "coast"})])
    assert retriever.retrieve(FilteredQueryBundle("tides", filters={"region": "coast"}))
    retriever.delete_document("sea")
    with pytest.raises(FilterError, match="unknown filter key 'region'"):
        retriever.retrieve(FilteredQueryBundle("tides", filters={"region": "coast"}))
    assert "category" in retriever.filter_vocabulary.keys  # other documents keep theirs
