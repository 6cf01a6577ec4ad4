"""cache: the in-process backend's size bound and expiry, values as data only (a foreign or
damaged value is a miss, never run), keys that hold every part, and a failing backend that
degrades to uncached retrieval with one warning."""

import asyncio
import json
import logging
import threading

import pytest
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_ext_recursive.cache import MemoryBackend, RetrievalCache
from llama_index_ext_recursive.cache.codec import decode_hits, decode_vector, encode_hits, encode_vector
from llama_index_ext_recursive.results import ExplainedNodeWithScore, Explanation, RetrievalExplanation


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_memory_backend_keeps_the_most_recently_used_and_drops_expired_entries():
    clock = Clock()
    backend = MemoryBackend(max_entries=2, clock=clock)
    backend.set("a", "1", ttl=10)
    backend.set("b", "2", ttl=10)
    assert backend.get("a") == "1"  # a is now the most recently used
    backend.set("c", "3", ttl=10)
    assert (backend.get("a"), backend.get("b"), backend.get("c")) == ("1", None, "3")
    clock.now = 10.0
    assert backend.get("a") is None and len(backend) == 1  # expired at its time to live
    backend.set("p:x", "4", ttl=5)
    backend.set("q:x", "5", ttl=5)
    backend.clear("p:")
    assert (backend.get("p:x"), backend.get("q:x")) == (None, "5")
    with pytest.raises(ValueError, match="max_entries"):
        MemoryBackend(max_entries=0)


def _hits():
    route = RetrievalExplanation(
        doc_id="d1",
        summary_node_id="s1",
        summary_score=0.5,
        chunk_score=0.25,
        final_score=0.75,
        score_mode="fused",
        path=["s1", "c1"],
    )
    node = TextNode(id_="c1", text="Bees make honey.", metadata={"year": 2020, "tags": ["a"]})
    return [
        ExplainedNodeWithScore(node=node, score=0.75, explanation=Explanation(route=route)),
        NodeWithScore(node=TextNode(id_="c2", text="Plain."), score=None),
    ]


def test_hits_and_vectors_round_trip_as_json_and_come_back_as_new_objects():
    hits = _hits()
    again = decode_hits(encode_hits(hits))
    assert again is not None and again[0] is not hits[0]
    assert [(h.node.node_id, h.node.get_content(), h.node.metadata, h.score) for h in again] == [
        (h.node.node_id, h.node.get_content(), h.node.metadata, h.score) for h in hits
    ]
    assert again[0].explanation == hits[0].explanation and type(again[1]) is NodeWithScore
    assert decode_vector(encode_vector([0.5, -1.0])) == [0.5, -1.0]


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        json.dumps(["a list"]),
        json.dumps({"v": 99, "hits": []}),  # another format version
        json.dumps({"v": 1, "hits": [{"node": {"__type__": "os.system", "__data__": "{}"}, "score": 1.0}]}),
        json.dumps({"v": 1, "hits": [{"node": {}, "score": "high"}]}),
        '{"v": 1, "hits": [{"score": NaN}]}',
        json.dumps({"v": 1, "vector": ["1"]}),
    ],
)
def test_a_foreign_or_damaged_value_decodes_to_nothing(text):
    assert decode_hits(text) is None and decode_vector(text) is None


def test_an_auto_explanation_is_not_plain_data_so_its_result_is_not_cached():
    hit = _hits()[0]
    hit.explanation.auto = object()
    assert encode_hits([hit]) is None


def test_keys_differ_by_every_part_and_level_and_refuse_what_is_not_data():
    cache = RetrievalCache()
    base = {"query": "q", "top_k": 3, "filters": None}
    keys = {
        cache.key("results", base),
        cache.key("documents", base),
        cache.key("results", {**base, "top_k": 4}),
        cache.key("results", {**base, "query": "q "}),  # the exact text: a space is another query
        RetrievalCache(prefix="other").key("results", base),
    }
    assert len(keys) == 5 and cache.key("results", dict(reversed(base.items()))) == cache.key("results", base)
    with pytest.raises(TypeError, match="JSON data"):
        cache.key("results", {"query": object()})


class Broken:
    def get(self, key):
        raise ConnectionError("backend down")

    def set(self, key, value, ttl):
        raise ConnectionError("backend down")

    def clear(self, prefix):
        raise ConnectionError("backend down")


def test_a_failing_backend_is_a_miss_with_one_warning(caplog):
    cache = RetrievalCache(Broken())
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.cache.retrieval_cache"):
        assert cache.get("results", "k") is None
        cache.put("results", "k", _hits())
        assert cache.get("embeddings", "k") is None
    assert [r.getMessage() for r in caplog.records] == [
        "retrieval cache unavailable (backend down); retrieving without it"
    ]
    stats = cache.stats()
    assert stats.errors == 3 and stats.misses["results"] == 1 and stats.misses["embeddings"] == 1


def test_stats_count_hits_misses_and_rejected_values_and_clear_resets_them():
    cache = RetrievalCache()
    key = cache.key("results", {"query": "q"})
    assert cache.get("results", key) is None
    cache.put("results", key, _hits())
    assert cache.get("results", key) is not None
    cache.backend.set(key, "garbage", 60)
    assert cache.get("results", key) is None
    stats = cache.stats()
    assert (stats.hits["results"], stats.misses["results"], stats.rejected) == (1, 2, 1)
    assert stats.hit_rate == pytest.approx(1 / 3)
    cache.clear()
    assert cache.stats().hit_rate == 0.0 and cache.backend.get(key) is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"ttl": {"everything": 5}}, "unknown levels"),
        ({"ttl": {"results": 0}}, "positive number of seconds"),
        ({"prefix": ""}, "non-empty string"),
    ],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RetrievalCache(**kwargs)


def test_an_unknown_level_is_refused_naming_the_levels():
    with pytest.raises(ValueError, match=r"unknown cache level 'answers'.*'embeddings', 'documents', 'results'"):
        RetrievalCache().get("answers", "k")


def test_async_calls_answer_as_sync_calls_and_a_network_backend_runs_off_the_loop():
    """A backend that may block (anything but the in-process one) is called in a worker thread."""
    loop_threads: list[bool] = []

    class Recording(MemoryBackend):
        blocking = True

        def get(self, key):
            loop_threads.append(threading.current_thread() is threading.main_thread())
            return super().get(key)

    cache = RetrievalCache(Recording())
    key = cache.key("results", {"query": "q"})

    async def go():
        await cache.aput("results", key, _hits())
        return await cache.aget("results", key)

    hits = asyncio.run(go())
    assert [h.node.node_id for h in hits] == [h.node.node_id for h in cache.get("results", key)]
    assert loop_threads == [False, True]  # async: off the loop's thread; sync: here
