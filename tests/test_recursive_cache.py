"""RecursiveSummaryRetriever with cache=: a hit is exactly the uncached result, and no result
computed before an add, delete or update is looked up after it; filters, top_k and settings
are part of the key; a loaded or persisted index shares its results by its folder generation."""

import asyncio
import json
import threading

import pytest
from conftest import LexicalEmbedding, topic_nodes
from llama_index.core.schema import Document

from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever, RetrievalCache
from llama_index_ext_recursive.cache import MemoryBackend

QUESTION = "how do bees make honey"


def _answer(hits):
    return [(h.node.node_id, round(h.score, 9), h.explanation.route) for h in hits]


@pytest.fixture
def built():
    model = LexicalEmbedding()
    cache = RetrievalCache()
    return RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=model, cache=cache), model, cache


def test_a_hit_is_the_uncached_result_and_embeds_nothing(built):
    retriever, model, cache = built
    first = retriever.retrieve(QUESTION)
    calls = model.calls
    again = retriever.retrieve(QUESTION)
    assert _answer(again) == _answer(first) and again[0] is not first[0]
    assert model.calls == calls  # the result was cached: no embedding, no search
    stats = cache.stats()
    assert stats.hits["results"] == 1 and stats.misses["results"] == 1
    uncached = RecursiveSummaryRetriever(retriever.index)
    assert _answer(uncached.retrieve(QUESTION)) == _answer(first)


def test_the_query_vector_is_cached_by_model_and_exact_text(built):
    retriever, model, cache = built
    retriever.retrieve(QUESTION)
    calls = model.calls
    retriever.retrieve(FilteredQueryBundle(QUESTION, top_k=2))  # another result key, the same vector
    assert model.calls == calls and cache.stats().hits["embeddings"] == 1


def test_no_result_from_before_an_add_delete_or_update_is_served_after_it(built):
    retriever, _, _ = built
    question = "what does a sourdough starter need"
    before = retriever.retrieve(question)
    changes = [
        lambda: retriever.add_documents([Document(text="A sourdough starter needs flour and water daily.", id_="new")]),
        lambda: retriever.delete_document("bread"),
        lambda: retriever.add_documents([Document(text="Starters need rye flour to wake up.", id_="new")]),
    ]
    for change in changes:
        change()
        fresh = RecursiveSummaryRetriever(retriever.index).retrieve(question)  # uncached, the index as it is now
        assert _answer(retriever.retrieve(question)) == _answer(fresh)
    assert _answer(fresh) != _answer(before)


def test_filters_top_k_and_settings_are_part_of_the_key(built):
    retriever, _, cache = built
    retriever.retrieve(QUESTION)
    retriever.retrieve(FilteredQueryBundle(QUESTION, filters={"category": "food"}))
    retriever.retrieve(FilteredQueryBundle(QUESTION, top_k=1))
    retriever.num_routed_docs = 1
    retriever.retrieve(QUESTION)
    assert cache.stats().hits["results"] == 0 and cache.stats().misses["results"] == 4


def test_async_hits_equal_sync_ones_and_a_running_loop_is_fine(built):
    retriever, _, cache = built

    async def both():
        first = await retriever.aretrieve(QUESTION)
        return first, await retriever.aretrieve(QUESTION), retriever.retrieve(QUESTION)

    first, second, third = asyncio.run(both())
    assert _answer(first) == _answer(second) == _answer(third)
    assert cache.stats().hits["results"] == 2


def test_results_expire_after_their_time_to_live():
    clock = [0.0]
    cache = RetrievalCache(MemoryBackend(clock=lambda: clock[0]), ttl={"results": 5})
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    retriever.retrieve(QUESTION)
    clock[0] = 4.9
    retriever.retrieve(QUESTION)
    clock[0] = 5.0
    retriever.retrieve(QUESTION)
    assert (cache.stats().hits["results"], cache.stats().misses["results"]) == (1, 2)


def test_a_damaged_value_is_ignored_and_the_result_computed_again(built):
    retriever, _, cache = built
    first = retriever.retrieve(QUESTION)
    for key in list(cache.backend._entries):
        cache.backend.set(key, '{"v": 1, "hits": [{"node": {"__type__": "1", "__data__": "x"}, "score": 1}]}', 60)
    assert _answer(retriever.retrieve(QUESTION)) == _answer(first)
    assert cache.stats().rejected >= 1


def test_indexes_loaded_from_one_folder_generation_share_results_until_one_changes(tmp_path):
    cache = RetrievalCache()
    built = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    unpersisted = built.index.cache_generation
    built.persist(tmp_path / "kb")
    assert built.index.cache_generation != unpersisted  # now named by the folder generation
    built.retrieve(QUESTION)
    # another process opening the folder holds the same content: its lookups hit
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "kb", embed_model=LexicalEmbedding(), cache=cache)
    assert loaded.index.cache_generation == built.index.cache_generation
    assert _answer(loaded.retrieve(QUESTION)) == _answer(built.retrieve(QUESTION))
    assert cache.stats().hits["results"] == 2
    loaded.delete_document("bees")  # changed, not persisted: its own name, shared with no one
    assert loaded.index.cache_generation not in (built.index.cache_generation, unpersisted)
    assert _answer(loaded.retrieve(QUESTION)) == _answer(RecursiveSummaryRetriever(loaded.index).retrieve(QUESTION))


def test_a_cache_that_is_not_a_retrieval_cache_is_refused(built):
    retriever, _, _ = built
    with pytest.raises(TypeError, match="RetrievalCache"):
        RecursiveSummaryRetriever(retriever.index, cache={})


def test_routed_documents_are_cached_at_their_own_level_with_their_evidence(built):
    retriever, model, cache = built
    first = retriever.retrieve_documents(QUESTION)
    calls = model.calls
    again = asyncio.run(retriever.aretrieve_documents(QUESTION))
    assert [(d.node.node_id, d.score, d.evidence) for d in again] == [
        (d.node.node_id, d.score, d.evidence) for d in first
    ]
    assert type(again[0]).__name__ == "DocumentWithScore" and model.calls == calls
    stats = cache.stats()
    assert (stats.hits["documents"], stats.misses["documents"], stats.hits["results"]) == (1, 1, 0)
    retriever.retrieve(QUESTION)  # the chunk results are another level: a miss
    assert cache.stats().misses["results"] == 1


def test_a_cached_aretrieve_waits_for_a_writer_without_blocking_the_loop(built):
    """The cache key is taken under the index's read lock: async, that wait must not block the loop."""
    retriever, _, _ = built
    expected = _answer(retriever.retrieve(QUESTION))
    writer_holds, release = threading.Event(), threading.Event()

    def writer():
        with retriever.index.state_lock.writing():
            writer_holds.set()
            release.wait(5)

    async def scenario():
        ticks = [0]

        async def ticker():
            while not release.is_set():
                ticks[0] += 1
                await asyncio.sleep(0.005)

        thread = threading.Thread(target=writer)
        thread.start()
        writer_holds.wait(5)
        query = asyncio.ensure_future(retriever.aretrieve(QUESTION))
        ticking = asyncio.ensure_future(ticker())
        await asyncio.sleep(0.1)  # the query waits for the writer; the loop must keep ticking
        counted = ticks[0]
        done_early = query.done()
        release.set()
        hits = await query
        await ticking
        thread.join()
        return counted, done_early, hits

    counted, done_early, hits = asyncio.run(scenario())
    assert counted >= 5 and not done_early and _answer(hits) == expected


def test_the_calibration_is_in_the_key_by_what_ranks_not_by_its_measurements(built):
    retriever, _, cache = built
    settings = retriever.to_dict()
    calibration = settings["init_parameters"]["calibration"]
    assert calibration, "the built retriever is calibrated"
    level, fitted = next(iter(calibration.items()))
    script = next(iter(fitted["scripts"]))

    def variant(change):
        data = json.loads(json.dumps(settings))
        change(data["init_parameters"]["calibration"][level]["scripts"][script])
        return RecursiveSummaryRetriever.from_dict(data, retriever.index, cache=cache)

    def remeasured(entry):  # other measurements, the same weights
        entry["child_mrr"] = [m / 2 for m in entry["child_mrr"]]

    def too_few(entry):  # no weights fitted: the equal weights apply
        entry.update(samples=3, weights=None, grid=[])

    def without_text(entry):  # no weights and no text in this script: the document weight drops to 0
        entry.update(samples=0, weights=None, grid=[])

    retriever.retrieve(QUESTION)
    variant(remeasured).retrieve(QUESTION)
    assert cache.stats().hits["results"] == 1
    variant(too_few).retrieve(QUESTION)
    variant(without_text).retrieve(QUESTION)  # the same weights as too_few, another ranking
    assert cache.stats().hits["results"] == 1 and cache.stats().misses["results"] == 3
