"""A summary index whose two levels are PostgresLevelStores (issue 27) answers as the default
storage: the same chunks, scores, documents and explanations in every score mode, sync and async,
with per-call filters, after adds, replacements and deletes; its levels search the database
(dense and BM25) and its docstores are views of the stores.

Against the real server of the ``pg_server`` fixture."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llama_index.core.node_parser import SentenceSplitter
from recursive_cases import (
    MODES,
    NoTieEmbedding,
    async_recursive_answers,
    chunk_parser,
    make_documents,
    recursive_answers,
    same_answers,
)

from llama_index_ext_recursive import FilteredQueryBundle, RecursiveSummaryRetriever
from llama_index_ext_recursive.recursive.index import RecursiveIndex
from llama_index_ext_recursive.recursive.summaries import StoredSummaries
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.stores.columnar_docstore import ColumnarDocumentStore
from llama_index_ext_recursive.stores.pg_level import PostgresLevelStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

_OPENED = []


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    while _OPENED:
        _OPENED.pop().close()


def _levels(pg_server, dimension):
    stores = {}
    for level in ("chunk", "summary"):
        store = PostgresLevelStore.from_params(
            name=pg_server.table_name(level),
            dimension=dimension,
            tokenizer=MultilingualTokenizer(),
            **pg_server.params(),
        )
        _OPENED.append(store)
        stores[f"{level}_vector_store"] = store
    return stores


def _pair(pg_server, embedding):
    parser = chunk_parser()
    default = RecursiveIndex.from_documents(make_documents(), embed_model=embedding, node_parser=parser)
    dimension = len(embedding.get_text_embedding("probe"))
    in_database = RecursiveIndex.from_documents(
        make_documents(), embed_model=embedding, node_parser=parser, **_levels(pg_server, dimension)
    )
    return default, in_database


@pytest.mark.parametrize("options", MODES, ids=lambda o: "-".join(o.values()) or "fused")
def test_postgres_levels_answer_as_the_default_through_updates(pg_server, options):
    default_index, pg_index = _pair(pg_server, NoTieEmbedding())
    default = RecursiveSummaryRetriever(default_index, similarity_top_k=4, **options)
    in_database = RecursiveSummaryRetriever(pg_index, similarity_top_k=4, **options)
    expected = recursive_answers(default)
    assert sum(len(a) for a in expected) > 50
    assert same_answers(recursive_answers(in_database), expected)
    assert same_answers(asyncio.run(async_recursive_answers(in_database)), expected)
    # an added document, a replaced one (new text) and a deleted one
    changes = make_documents(2, seed=7, prefix="new") + [make_documents(1, seed=3, prefix="d")[0]]
    for index in (default_index, pg_index):
        assert index.add_documents(changes) == ["new0", "new1", "d0"]
        index.delete_document("d4")
    assert same_answers(recursive_answers(in_database), recursive_answers(default))


def test_postgres_levels_are_searched_in_the_database_and_hold_no_node(pg_server):
    _, index = _pair(pg_server, NoTieEmbedding())
    retriever = RecursiveSummaryRetriever(index, similarity_top_k=4)
    retriever.retrieve("queen bee hive")
    levels = retriever._levels()
    assert isinstance(levels.chunk_bm25, StoreBM25Retriever) and isinstance(levels.summary_bm25, StoreBM25Retriever)
    assert levels.chunk_store is index.chunk_index.vector_store
    assert isinstance(index.chunk_index.docstore, ColumnarDocumentStore)
    assert isinstance(index.summaries, StoredSummaries)
    chunks = index.chunk_index.vector_store
    assert chunks.node_count == sum(len(r.chunk_ids) for r in index.documents.values())


# ---------------------------------------------------------------- the whole index in the database
def _index_store(pg_server, name=None, dimension=None):
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore

    store = PostgresIndexStore.from_params(
        name=name or pg_server.table_name("kb"), dimension=dimension, **pg_server.params()
    )
    _OPENED.append(store)
    return store


def test_an_index_built_into_postgres_opens_in_another_process_and_follows_its_changes(pg_server):
    embedding = NoTieEmbedding()
    dimension = len(embedding.get_text_embedding("probe"))
    store = _index_store(pg_server, dimension=dimension)
    built = RecursiveSummaryRetriever.from_documents(
        make_documents(), embed_model=embedding, node_parser=chunk_parser(), postgres=store, similarity_top_k=4
    )
    default = RecursiveSummaryRetriever.from_documents(
        make_documents(), embed_model=embedding, node_parser=chunk_parser(), similarity_top_k=4
    )
    expected = recursive_answers(default)
    assert same_answers(recursive_answers(built), expected)
    # another process: its own engines, nothing but the name
    opened = RecursiveSummaryRetriever.from_postgres(_index_store(pg_server, store.name), embed_model=embedding)
    assert opened.similarity_top_k == 4 and opened.calibration == built.calibration
    assert same_answers(recursive_answers(opened), expected)
    # a change committed by the first is seen by the next query of the second
    changes = make_documents(2, seed=7, prefix="new") + [make_documents(1, seed=3, prefix="d")[0]]
    for retriever in (built, default):
        retriever.add_documents(changes)
        retriever.delete_document("d4")
    assert same_answers(recursive_answers(opened), recursive_answers(default))
    assert "d4" not in opened.index.documents and "new1" in opened.index.documents
    assert opened.index.cache_generation == built.index.cache_generation


# ---------------------------------------------------------------- other processes
WORKER = Path(__file__).parent / "pg_index_worker.py"


def _worker(pg_server, mode, **args):
    connection = {"host": pg_server.host, "port": pg_server.port, "database": pg_server.database}
    connection.update(user=pg_server.user, password=pg_server.password)
    return subprocess.Popen(
        [sys.executable, str(WORKER), mode, json.dumps({**connection, **args})],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def _finished(process, timeout=180):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err[-3000:]
    return out


def _built(pg_server, documents):
    embedding = NoTieEmbedding()
    store = _index_store(pg_server, dimension=len(embedding.get_text_embedding("probe")))
    retriever = RecursiveSummaryRetriever.from_documents(
        documents, embed_model=embedding, node_parser=chunk_parser(), postgres=store, similarity_top_k=4
    )
    return store, retriever


def _consistent(store):
    """The levels hold exactly what the records list."""
    records = dict(RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding()).index.documents.items())
    chunk_ids = {c for record in records.values() for c in record.chunk_ids}
    assert set(store.chunks.live_node_ids()) == chunk_ids
    assert set(store.summaries.live_node_ids()) == {record.summary_node_id for record in records.values()}
    return records


def test_another_process_opens_the_index_and_answers_the_same(pg_server):
    store, built = _built(pg_server, make_documents())
    answers = json.loads(_finished(_worker(pg_server, "answers", name=store.name)).strip().splitlines()[-1])
    # JSON made the tuples lists
    assert same_answers([[tuple(hit) for hit in hits] for hits in answers], recursive_answers(built))


def test_two_writer_processes_at_once_lose_nothing(pg_server, tmp_path):
    store, _ = _built(pg_server, make_documents(10))
    before = store.generation
    go = tmp_path / "go"
    writers = [
        _worker(pg_server, "add", name=store.name, count=3, seed=seed, prefix=prefix, go=str(go))
        for seed, prefix in ((7, "a"), (8, "b"))
    ]
    time.sleep(0.5)
    go.touch()
    for writer in writers:
        _finished(writer)
    records = _consistent(store)
    assert set(records) == {f"d{i}" for i in range(10)} | {"a0", "a1", "a2", "b0", "b1", "b2"}
    assert store.generation == before + 2
    # every BM25 statistic counts both changes: the answers are a fresh build's on all of it
    everything = make_documents(10) + make_documents(3, seed=7, prefix="a") + make_documents(3, seed=8, prefix="b")
    fresh = RecursiveSummaryRetriever.from_documents(
        everything, embed_model=NoTieEmbedding(), node_parser=chunk_parser(), similarity_top_k=4
    )
    opened = RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding())
    assert same_answers(recursive_answers(opened), recursive_answers(fresh))


def test_a_writer_killed_mid_change_leaves_the_index_as_it_was(pg_server):
    store, built = _built(pg_server, make_documents(10))
    expected, before = recursive_answers(built), store.generation
    dying = _worker(pg_server, "die-in-add", name=store.name, count=3, seed=7, prefix="k")
    deadline = time.monotonic() + 120
    while dying.stdout.readline().strip() != "inside":
        assert time.monotonic() < deadline and dying.poll() is None, dying.stderr.read()[-3000:]
    dying.send_signal(signal.SIGKILL)
    dying.wait(timeout=30)
    assert store.generation == before
    assert set(_consistent(store)) == {f"d{i}" for i in range(10)}
    assert same_answers(recursive_answers(built), expected)
    # the dead writer's locks went with it: the next change goes through
    built.add_documents(make_documents(1, seed=9, prefix="after"))
    assert "after0" in _consistent(store) and store.generation == before + 1


def test_opening_what_is_not_there_or_not_finished_is_refused_by_name(pg_server):
    from llama_index_ext_recursive.persist import PersistError
    from llama_index_ext_recursive.stores.pg_index import PostgresIndexError

    with pytest.raises(PostgresIndexError, match="no recursive index .* build one"):
        _index_store(pg_server, "never_built")
    unfinished = _index_store(pg_server, dimension=8)
    with pytest.raises(PersistError, match="holds no configuration: its build did not finish"):
        RecursiveSummaryRetriever.from_postgres(unfinished, embed_model=NoTieEmbedding())
    store, _ = _built(pg_server, make_documents(3))
    with pytest.raises(ValueError, match="holds 3 documents already"):
        RecursiveSummaryRetriever.from_documents(make_documents(2), embed_model=NoTieEmbedding(), postgres=store)
    with pytest.raises(ValueError, match="without \\['persist_dir'\\]"):
        RecursiveSummaryRetriever.from_documents(make_documents(2), persist_dir="x", postgres=unfinished)


def test_async_retrieval_never_calls_the_database_on_the_event_loop(pg_server, monkeypatch):
    from llama_index_ext_recursive.stores import pg_index, pg_level

    store, built = _built(pg_server, make_documents(6))
    on_loop = []
    original = pg_level.read_only

    def watched(engines, **kwargs):
        try:
            asyncio.get_running_loop()
            on_loop.append(True)
        except RuntimeError:
            pass
        return original(engines, **kwargs)

    monkeypatch.setattr(pg_level, "read_only", watched)
    monkeypatch.setattr(pg_index, "read_only", watched)
    opened = RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding())
    hits = asyncio.run(opened.aretrieve("queen bee hive"))
    documents = asyncio.run(opened.aretrieve_documents("sourdough starter yeast"))
    assert hits and documents and on_loop == []


def test_processes_sharing_a_result_cache_share_answers_and_never_get_one_from_before_a_change(pg_server):
    from llama_index_ext_recursive import RetrievalCache

    store, built = _built(pg_server, make_documents(8))
    cache = RetrievalCache()  # stands for a shared Redis: what is shared is the keys
    one, two = (
        RecursiveSummaryRetriever.from_postgres(
            _index_store(pg_server, store.name), embed_model=NoTieEmbedding(), cache=cache
        )
        for _ in range(2)
    )
    question = "queen bee hive"
    first = one.retrieve(question)
    assert [h.node.node_id for h in two.retrieve(question)] == [h.node.node_id for h in first]
    assert cache.stats().hits["results"] == 1
    built.add_documents(make_documents(1, seed=11, prefix="hive"))
    after = two.retrieve(question)
    assert cache.stats().hits["results"] == 1  # a miss: the database moved on
    fresh = RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding())
    assert [h.node.node_id for h in after] == [h.node.node_id for h in fresh.retrieve(question)]


def test_the_bundled_sample_corpus_answers_as_the_default_and_survives_a_server_restart(pg_server):
    from llama_index_ext_recursive import FilteredQueryBundle, load_sample_documents, load_sample_questions

    embedding = NoTieEmbedding()
    store = _index_store(pg_server, dimension=len(embedding.get_text_embedding("probe")))
    documents = load_sample_documents()  # once: both builds give the chunks the same ids, so ties rank alike
    parser = SentenceSplitter(chunk_size=256, chunk_overlap=0, id_func=lambda i, doc: f"{doc.id_}-{i}")
    in_database = RecursiveSummaryRetriever.from_documents(
        documents, embed_model=embedding, node_parser=parser, postgres=store
    )
    default = RecursiveSummaryRetriever.from_documents(documents, embed_model=embedding, node_parser=parser)
    questions = [q["question"] for q in load_sample_questions()]
    assert any("\u4e00" <= ch <= "\u9fff" for q in questions for ch in q)  # Chinese questions too

    def answers(retriever):
        out = []
        for question in questions:
            for filters in (None, {"language": "en"}):
                hits = retriever.retrieve(FilteredQueryBundle(question, filters=filters))
                out.append([(h.node.node_id, h.score, h.node.text) for h in hits])
        return out

    expected = answers(default)
    assert same_answers(answers(in_database), expected)
    pg_server.restart()  # every pooled connection is cut
    assert same_answers(answers(in_database), expected)


def test_a_query_makes_the_same_few_round_trips_whatever_the_corpus_size(pg_server, monkeypatch):
    from llama_index_ext_recursive.stores import pg_index, pg_level

    original = pg_level.read_only
    statements = []

    def counted(engines, **kwargs):
        statements.append(1)
        return original(engines, **kwargs)

    trips = []
    for count in (10, 30):
        _, built = _built(pg_server, make_documents(count))
        built.retrieve("warm up: levels built, generation read")
        monkeypatch.setattr(pg_level, "read_only", counted)
        monkeypatch.setattr(pg_index, "read_only", counted)
        statements.clear()
        built.retrieve(
            FilteredQueryBundle("termination notice of the contract", filters={"year": {"op": ">=", "value": 2020}})
        )
        trips.append(len(statements))
        monkeypatch.setattr(pg_level, "read_only", original)
        monkeypatch.setattr(pg_index, "read_only", original)
    # the generation, 2 + 2 flat and routing searches, records and summaries of the routed documents
    # (fewer when read already), 2 routed searches per wave, the final nodes: not one per document
    assert max(trips) <= 11, trips


def test_a_querys_independent_searches_run_at_once_except_inside_a_change(pg_server, monkeypatch):
    import threading

    from llama_index_ext_recursive.stores import pg_index, pg_level

    store, built = _built(pg_server, make_documents(8))
    expected = built.retrieve("queen bee hive")
    original = pg_level.read_only
    threads = []

    def watched(engines, **kwargs):
        threads.append(threading.current_thread().name)
        return original(engines, **kwargs)

    monkeypatch.setattr(pg_level, "read_only", watched)
    monkeypatch.setattr(pg_index, "read_only", watched)
    opened = RecursiveSummaryRetriever.from_postgres(store, embed_model=NoTieEmbedding())
    threads.clear()
    hits = opened.retrieve("queen bee hive")
    assert [h.node.node_id for h in hits] == [h.node.node_id for h in expected]
    assert [h.score for h in hits] == pytest.approx([h.score for h in expected])
    pooled = [name for name in threads if name.startswith("llama-recursive-postgres")]
    assert len(pooled) >= 4, threads  # the flat and routing searches of the first step, at least
    assert store.concurrent_reads() is not None
    with store.transaction():  # a change in progress reads through its one connection
        assert store.concurrent_reads() is None
