"""cache= on the flat retrievers: the query vector of a repeated query comes from the cache
(sync and async alike), BM25 results are cached under a name of the retriever's content,
the results are exactly the uncached ones, and the hybrid's children share its cache."""

import asyncio

import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core import VectorStoreIndex
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores.types import MetadataInfo, VectorStoreInfo

from llama_index_ext_recursive import (
    FilteredQueryBundle,
    HybridFusionRetriever,
    MultilingualBM25Retriever,
    RetrievalCache,
    ValidatedAutoRetriever,
)
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


def test_the_hybrid_shares_its_cache_with_its_children(hybrid):
    retriever, _, cache = hybrid
    kinds = {type(r) for r in retriever.retrievers if r.cache is cache}
    assert kinds == {BackfillVectorRetriever, MultilingualBM25Retriever}


def test_a_repeated_query_is_embedded_once_and_answers_the_same(hybrid):
    retriever, model, cache = hybrid
    first = retriever.retrieve(QUESTION)
    calls = model.calls
    second = retriever.retrieve(QUESTION)
    third = asyncio.run(retriever.aretrieve(QUESTION))
    assert _answer(first) == _answer(second) == _answer(third)
    assert model.calls == calls
    assert cache.stats().hits["embeddings"] == 2 and cache.stats().misses["embeddings"] == 1
    # the BM25 child's results are cached; fused results are not (see the docstring)
    assert cache.stats().hits["results"] == 2 and cache.stats().misses["results"] == 1


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


# ---------------------------------------------------------------- BM25 results


def _bm25(cache, nodes=None):
    return MultilingualBM25Retriever(nodes or topic_nodes(), similarity_top_k=3, cache=cache)


def test_bm25_answers_a_repeated_query_from_the_cache_exactly_and_as_fresh_objects():
    cache = RetrievalCache()
    retriever = _bm25(cache)
    uncached = _bm25(None).retrieve(QUESTION)
    first = retriever.retrieve(QUESTION)
    first[0].node.metadata["title"] = "changed by the caller"
    first[0].score = -1.0
    second = retriever.retrieve(QUESTION)
    third = asyncio.run(retriever.aretrieve(QUESTION))
    assert _answer(second) == _answer(third) == _answer(uncached) and uncached
    assert second[0].node.metadata == uncached[0].node.metadata
    assert cache.stats().hits["results"] == 2 and cache.stats().misses["results"] == 1


@pytest.mark.parametrize(
    "other",
    [
        FilteredQueryBundle(QUESTION, top_k=1),
        FilteredQueryBundle(QUESTION, filters={"category": "nature"}),
        FilteredQueryBundle(QUESTION + "?"),
    ],
    ids=["top_k", "filters", "query"],
)
def test_bm25_another_k_filter_or_text_misses(other):
    cache = RetrievalCache()
    retriever = _bm25(cache)
    retriever.retrieve(QUESTION)
    assert _answer(retriever.retrieve(other)) == _answer(_bm25(None).retrieve(other))
    assert cache.stats().hits["results"] == 0


def test_bm25_after_a_change_the_new_retriever_never_reads_the_old_results():
    cache = RetrievalCache()
    retriever = _bm25(cache)
    before = retriever.retrieve(QUESTION)
    added = TextNode(id_="new-honey", text="bees make honey from nectar; honey bees make honey", metadata={})
    changed = retriever.with_changes(add=[added], remove=[])
    after = changed.retrieve(QUESTION)
    assert after[0].node.node_id == "new-honey" != before[0].node.node_id
    assert changed.content_name != retriever.content_name
    assert cache.stats().hits["results"] == 0
    assert _answer(changed.compacted().retrieve(QUESTION)) == _answer(after)


def test_bm25_processes_that_open_one_persisted_generation_share_its_results(tmp_path):
    cache = RetrievalCache()  # stands for a shared (Redis) cache: the keys are what is shared
    _bm25(None).persist(tmp_path / "bm25")
    one = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25", cache=cache)
    two = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25", cache=cache)
    assert one.content_name == two.content_name
    first = one.retrieve(QUESTION)
    assert _answer(two.retrieve(QUESTION)) == _answer(first) and cache.stats().hits["results"] == 1
    # another generation persisted there: its readers miss, and find the new node
    added = TextNode(id_="new-honey", text="bees make honey from nectar; honey bees make honey", metadata={})
    two.with_changes(add=[added], remove=[]).persist(tmp_path / "bm25")
    three = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25", cache=cache)
    assert three.retrieve(QUESTION)[0].node.node_id == "new-honey"
    assert cache.stats().hits["results"] == 1


def test_hybrid_bm25_children_loaded_from_one_folder_share_their_results(hybrid, tmp_path):
    retriever, model, _ = hybrid
    retriever.persist(tmp_path / "hybrid")
    cache = RetrievalCache()
    one, two = (
        HybridFusionRetriever.from_persist_dir(tmp_path / "hybrid", embed_model=model, cache=cache) for _ in range(2)
    )
    names = [[c.content_name for c in h.retrievers if isinstance(c, MultilingualBM25Retriever)] for h in (one, two)]
    assert names[0] == names[1] and len(names[0]) == 1
    assert _answer(one.retrieve(QUESTION)) == _answer(two.retrieve(QUESTION))
    assert cache.stats().hits["results"] == 1 and cache.stats().hits["embeddings"] == 1


# ---------------------------------------------------------------- auto-retrieval


def test_the_auto_retriever_caches_the_vectors_of_its_vector_search(hybrid):
    _, model, _ = hybrid
    index = VectorStoreIndex(topic_nodes(), embed_model=model)
    info = VectorStoreInfo(
        content_info="short texts", metadata_info=[MetadataInfo(name="category", type="str", description="topic")]
    )
    cache = RetrievalCache()
    auto = ValidatedAutoRetriever(index, info, cache=cache)
    first = auto.retrieve(QUESTION)
    calls = model.calls
    assert _answer(auto.retrieve(QUESTION)) == _answer(first) and model.calls == calls
    assert cache.stats().hits["embeddings"] == 1
    with pytest.raises(ValueError, match="pass the cache to that retriever"):
        ValidatedAutoRetriever(None, info, retriever=_bm25(None), cache=cache)
