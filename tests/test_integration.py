"""The real bundled model over the bundled sample corpus, offline."""

from __future__ import annotations

import asyncio

import pytest

from llama_index_ext_recursive import (
    FilteredQueryBundle,
    RecursiveSummaryRetriever,
    load_sample_documents,
    load_sample_questions,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sample_retriever(real_model):
    return RecursiveSummaryRetriever.from_documents(load_sample_documents(), embed_model=real_model)


def english_questions():
    return [q for q in load_sample_questions() if not q["doc_id"].startswith("zh-")]


def test_default_model_is_the_bundled_minilm_offline(real_model):
    from llama_index_ext_recursive.models import embed_model_name, resolve_embed_model

    assert resolve_embed_model() is real_model
    assert embed_model_name(real_model) == "all-MiniLM-L6-v2"
    assert len(real_model.get_query_embedding("offline")) == 384


def test_building_with_defaults_configures_nothing_global(real_model):
    """Upstream's Settings.embed_model/llm would resolve to OpenAI; we never touch them."""
    from llama_index.core import Settings

    retriever = RecursiveSummaryRetriever.from_documents(load_sample_documents()[:2])
    assert retriever.index.embed_model is real_model
    assert retriever.retrieve("sourdough starter")  # querying needs no LLM either
    assert Settings._embed_model is None and Settings._llm is None


def test_sample_corpus_builds_with_sections_and_metadata(sample_retriever):
    records = sample_retriever.documents
    assert len(records) == 12
    assert all(len(r.chunk_ids) >= 2 for r in records.values())
    summary = sample_retriever.index.summary_index.docstore.get_node(records["zh-tea"].summary_node_id)
    assert summary.metadata["language"] == "zh" and "茶" in summary.text


def test_english_questions_route_to_their_document(sample_retriever):
    questions = english_questions()
    top_doc = [sample_retriever.retrieve(q["question"])[0].explanation.route.doc_id for q in questions]
    correct = sum(doc == q["doc_id"] for doc, q in zip(top_doc, questions))
    assert correct >= len(questions) - 1, list(zip(top_doc, [q["doc_id"] for q in questions]))


def test_answers_are_in_the_top_three_chunks(sample_retriever):
    questions = english_questions()
    found = sum(
        any(q["answer_contains"] in hit.node.get_content() for hit in sample_retriever.retrieve(q["question"])[:3])
        for q in questions
    )
    assert found >= 0.8 * len(questions)


def test_filters_with_the_real_model(sample_retriever):
    results = sample_retriever.retrieve(
        FilteredQueryBundle("How do bees live together?", filters={"category": "biology", "year": 2020})
    )
    assert results and {r.node.metadata["doc_id"] for r in results} == {"coral-reefs"}


def test_sync_async_parity_and_persistence_with_the_real_model(sample_retriever, real_model, tmp_path):
    question = english_questions()[5]["question"]
    sync = [(r.node.node_id, r.score) for r in sample_retriever.retrieve(question)]
    concurrent = [(r.node.node_id, r.score) for r in asyncio.run(sample_retriever.aretrieve(question))]
    assert sync == concurrent
    sample_retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx")
    reloaded = loaded.retrieve(question)
    assert [r.node.node_id for r in reloaded] == [node_id for node_id, _ in sync]
    assert [r.score for r in reloaded] == pytest.approx([score for _, score in sync])
