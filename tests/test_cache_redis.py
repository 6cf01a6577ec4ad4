"""RetrievalCache.from_url against a real Redis (Debian's redis-server, started by the fixture):
a hit is the uncached result, shared between processes; a process that opens the index after
another updated it never gets a result from before; a Redis that stops degrades to uncached
retrieval; foreign or damaged values are ignored, never run; entries expire."""

import asyncio
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import redis
from conftest import LexicalEmbedding, topic_nodes

from llama_index_ext_recursive import RecursiveSummaryRetriever, RetrievalCache

QUESTION = "how do bees make honey"
TESTS = Path(__file__).resolve().parent


def _answer(hits):
    return [(h.node.node_id, round(h.score, 9)) for h in hits]


def _cache(server, **kwargs):
    return RetrievalCache.from_url(server.url, prefix=f"test-{uuid.uuid4().hex}", **kwargs)


def test_a_hit_through_redis_is_the_uncached_result_and_another_client_shares_it(redis_server):
    cache = _cache(redis_server)
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    first = retriever.retrieve(QUESTION)
    assert _answer(retriever.retrieve(QUESTION)) == _answer(first)
    other = RetrievalCache.from_url(redis_server.url, prefix=cache.prefix)  # as another process connects
    shared = RecursiveSummaryRetriever(retriever.index, cache=other)
    assert _answer(shared.retrieve(QUESTION)) == _answer(first)
    assert cache.stats().hits["results"] == 1 and other.stats().hits["results"] == 1
    assert _answer(RecursiveSummaryRetriever(retriever.index).retrieve(QUESTION)) == _answer(first)


def test_async_retrieval_through_redis_shares_the_sync_results_and_runs_off_the_loop(redis_server, monkeypatch):
    cache = _cache(redis_server)
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    first = retriever.retrieve(QUESTION)
    on_loop: list[bool] = []
    get = cache.backend.get

    def recording_get(key):
        on_loop.append(_running_loop())
        return get(key)

    monkeypatch.setattr(cache.backend, "get", recording_get)
    hit = asyncio.run(retriever.aretrieve(QUESTION))
    assert _answer(hit) == _answer(first) and cache.stats().hits["results"] == 1
    assert on_loop == [False]  # the Redis call ran in a worker thread, not on the event loop


def _running_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


WRITER = textwrap.dedent(
    """
    import json, sys
    from conftest import LexicalEmbedding
    from llama_index.core.schema import Document
    from llama_index_ext_recursive import RecursiveSummaryRetriever, RetrievalCache

    folder, url, prefix, question = sys.argv[1:5]
    cache = RetrievalCache.from_url(url, prefix=prefix)
    retriever = RecursiveSummaryRetriever.from_persist_dir(folder, embed_model=LexicalEmbedding(), cache=cache)
    before = retriever.retrieve(question)
    retriever.add_documents([Document(text="Bees make honey from nectar, and honey bees make it fast.", id_="new")])
    retriever.persist(folder)
    after = retriever.retrieve(question)
    print(json.dumps([[h.node.node_id for h in before], [h.node.node_id for h in after]]))
    """
)


def test_a_process_that_opens_the_index_after_another_updated_it_never_gets_an_older_result(redis_server, tmp_path):
    folder = tmp_path / "kb"
    cache = _cache(redis_server)
    built = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    built.persist(folder)
    old = built.retrieve(QUESTION)  # cached under the published generation
    done = subprocess.run(
        [sys.executable, "-c", WRITER, str(folder), redis_server.url, cache.prefix, QUESTION],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert before == [h.node.node_id for h in old]  # the writer shared our result before its update
    reader = RecursiveSummaryRetriever.from_persist_dir(folder, embed_model=LexicalEmbedding(), cache=cache)
    fresh = RecursiveSummaryRetriever(reader.index).retrieve(QUESTION)  # uncached, the index as published
    assert _answer(reader.retrieve(QUESTION)) == _answer(fresh)
    assert [h.node.node_id for h in fresh] == after and after != before


def test_a_redis_that_stops_mid_run_degrades_to_uncached_retrieval_then_recovers(own_redis, caplog):
    cache = _cache(own_redis, timeout=0.2)
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    expected = _answer(retriever.retrieve(QUESTION))
    own_redis.stop()
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.cache.retrieval_cache"):
        assert _answer(retriever.retrieve(QUESTION)) == expected
        assert _answer(retriever.retrieve(QUESTION)) == expected
    assert cache.stats().errors >= 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "retrieval cache unavailable" in warnings[0].getMessage()  # once, not per query
    own_redis.start()  # empty again: nothing was saved
    retriever.retrieve(QUESTION)
    hits = cache.stats().hits["results"]
    assert _answer(retriever.retrieve(QUESTION)) == expected and cache.stats().hits["results"] == hits + 1


def test_foreign_and_damaged_values_in_redis_are_ignored(redis_server):
    cache = _cache(redis_server)
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    expected = _answer(retriever.retrieve(QUESTION))
    client = redis.Redis.from_url(redis_server.url)
    keys = list(client.scan_iter(match=f"{cache.prefix}:*"))
    assert keys
    for value in (b"\x80\x81 not utf-8", b"\x80\x04\x95pickle", b'{"v": 1, "hits": [{"node": {"__type__": "x"}}]}'):
        for key in keys:
            client.set(key, value)
        assert _answer(retriever.retrieve(QUESTION)) == expected
    assert (
        cache.stats().rejected >= 2
    )  # the JSON value, at the results and the vector key; bytes that are no text are plain misses


def test_entries_expire_at_their_time_to_live_and_clear_removes_only_its_own(redis_server):
    cache = _cache(redis_server, ttl={"results": 0.3})
    neighbour = _cache(redis_server)
    retriever = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=LexicalEmbedding(), cache=cache)
    RecursiveSummaryRetriever(retriever.index, cache=neighbour).retrieve(QUESTION)
    retriever.retrieve(QUESTION)
    time.sleep(0.6)
    retriever.retrieve(QUESTION)
    assert cache.stats().hits["results"] == 0 and cache.stats().misses["results"] == 2
    client = redis.Redis.from_url(redis_server.url)
    cache.clear()
    assert not list(client.scan_iter(match=f"{cache.prefix}:*"))
    assert list(client.scan_iter(match=f"{neighbour.prefix}:*"))
