"""cache= on the flat retrievers: the query vector of a repeated query comes from the cache
(sync and async alike), the results are exactly the uncached ones, and the hybrid's vector
children share its cache."""

import asyncio

import pytest
from conftest import LexicalEmbedding, topic_nodes

from llama_index_ext_recursive import HybridFusionRetriever, RetrievalCache
from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

QUESTION = "how do bees make honey"


def _answer(hits):
    return [(h.node.node_id, round(h.score, 9)) for h in hits]


@pytest.fixture
def hybrid():
    model = LexicalEmbedding()
    cache = RetrievalCache()
    built = HybridFusionRetriever.from_nodes(topic_nodes(), embed_model=model, calibrate=False, cache=cache)
    return built, model, cache


def test_the_hybrid_shares_its_cache_with_its_vector_child(hybrid):
    retriever, _, cache = hybrid
    vectors = [r for r in retriever.retrievers if isinstance(r, BackfillVectorRetriever)]
    assert vectors and all(r.cache is cache for r in vectors)


def test_a_repeated_query_is_embedded_once_and_answers_the_same(hybrid):
    retriever, model, cache = hybrid
    first = retriever.retrieve(QUESTION)
    calls = model.calls
    second = retriever.retrieve(QUESTION)
    third = asyncio.run(retriever.aretrieve(QUESTION))
    assert _answer(first) == _answer(second) == _answer(third)
    assert model.calls == calls
    assert cache.stats().hits["embeddings"] == 2 and cache.stats().misses["embeddings"] == 1
    assert cache.stats().hits["results"] == 0  # fused results are not cached (see the docstring)


def test_the_vector_retriever_takes_a_cache_and_a_given_embedding_bypasses_it(hybrid):
    retriever, model, _ = hybrid
    child = next(r for r in retriever.retrievers if isinstance(r, BackfillVectorRetriever))
    own = RetrievalCache()
    vector = BackfillVectorRetriever(child._index, embed_model=model, cache=own)
    first = vector.retrieve(QUESTION)
    calls = model.calls
    assert _answer(vector.retrieve(QUESTION)) == _answer(first) and model.calls == calls
    assert own.stats().hits["embeddings"] == 1
    uncached = BackfillVectorRetriever(child._index, embed_model=model)
    assert _answer(uncached.retrieve(QUESTION)) == _answer(first)


class ReversedLexical(LexicalEmbedding):
    """Another model with the same name and dimension: its vectors are reversed."""

    def _vector(self, text):
        return super()._vector(text)[::-1]


def test_two_models_never_share_a_vector():
    cache = RetrievalCache()
    nodes = topic_nodes()
    one = HybridFusionRetriever.from_nodes(nodes, embed_model=LexicalEmbedding(), calibrate=False, cache=cache)
    other_model = ReversedLexical()
    other = HybridFusionRetriever.from_nodes(nodes, embed_model=other_model, calibrate=False, cache=cache)
    one.retrieve(QUESTION)
    calls = other_model.calls
    other.retrieve(QUESTION)
    assert other_model.calls == calls + 1 and cache.stats().hits["embeddings"] == 0


@pytest.mark.parametrize("make", [BackfillVectorRetriever, HybridFusionRetriever])
def test_a_cache_that_is_not_a_retrieval_cache_is_refused(make, hybrid):
    retriever, _, _ = hybrid
    child = next(r for r in retriever.retrievers if isinstance(r, BackfillVectorRetriever))
    first = child._index if make is BackfillVectorRetriever else [child]
    with pytest.raises(TypeError, match=r"RetrievalCache\(\).*from_url"):
        make(first, cache="redis://localhost")
