"""PostgreSQL + pgvector, on a real server (``pg_server`` fixture, tests/pg_server.py).

Synthetic embeddings for store logic; real sentences where full-text search matters;
the real model for the fault tests (hung server, restart, event loops) on a server of
their own.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import re
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psycopg2.errors
import pytest
import sqlalchemy.exc
from conftest import DIM as LEXICAL_DIM
from conftest import topic_nodes
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)
from llama_index.vector_stores.postgres import PGVectorStore
from sqlalchemy import event

from llama_index_ext_recursive import FilteredQueryBundle, HybridFusionRetriever
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever
from llama_index_ext_recursive.retrievers.pg_hybrid import pg_hybrid_retriever
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore
from llama_index_ext_recursive.stores.pgserver import PgServer, PgServerError, start_server
from llama_index_ext_recursive.stores.postgres import PostgresTimeoutError, pgvector_store

K = 10


class NoEmbedding(BaseEmbedding):
    """Queries here carry their embeddings; embedding anything is a test bug."""

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError(f"unexpected embedding call for {query!r}")

    def _get_text_embedding(self, text: str) -> list[float]:
        raise AssertionError(f"unexpected embedding call for {text!r}")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError(f"unexpected embedding call for {query!r}")


def _ids(hits) -> list[str]:
    return [h.node.node_id for h in hits]


def _scores(hits) -> list[float]:
    return [h.score for h in hits]


def _dispose(*stores: PGVectorStore) -> None:
    """Close the sync connection pools of stores that connected."""
    for store in stores:
        if store.client is not None:
            store.client.dispose()


# ------------------------------------------------------------------ HNSW + filter

HNSW_DIM, HNSW_ROWS = 32, 2000
HNSW_KWARGS = {"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_ef_search": 40}


@pytest.fixture(scope="module")
def hnsw_table(pg_server: PgServer):
    """2000 random rows, ~5% of them in group "rare", in one HNSW-indexed table."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(HNSW_ROWS, HNSW_DIM)).astype(np.float32)
    groups = np.where(rng.random(HNSW_ROWS) < 0.05, "rare", "common")
    nodes = [
        TextNode(id_=f"row-{i}", text=f"row {i}", metadata={"group": str(groups[i])}, embedding=vectors[i].tolist())
        for i in range(HNSW_ROWS)
    ]
    name = pg_server.table_name("hnsw")
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=HNSW_DIM, hnsw=HNSW_KWARGS)
    store.add(nodes)
    _dispose(store)
    queries = rng.normal(size=(5, HNSW_DIM)).astype(np.float32)
    return name, vectors, groups, queries


def _exact_filtered_top_k(vectors: np.ndarray, groups: np.ndarray, query: np.ndarray, k: int = K):
    rows = np.where(groups == "rare")[0]
    unit = vectors[rows].astype(np.float64)
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    sims = unit @ (query.astype(np.float64) / np.linalg.norm(query))
    order = np.argsort(-sims, kind="stable")[:k]
    return [f"row-{rows[i]}" for i in order], sims[order]


RARE = MetadataFilters(filters=[MetadataFilter(key="group", value="rare")])


def test_hnsw_filter_returns_exact_k_rows_and_plain_store_does_not(pg_server, hnsw_table):
    name, vectors, groups, queries = hnsw_table
    assert 60 <= (groups == "rare").sum() <= 140  # ~5% selectivity
    ours = pgvector_store(**pg_server.params(), table_name=name, embed_dim=HNSW_DIM, hnsw=HNSW_KWARGS)
    plain = PGVectorStore.from_params(
        **pg_server.params(), table_name=name, embed_dim=HNSW_DIM, hnsw_kwargs=dict(HNSW_KWARGS)
    )
    plain_counts = []
    for query in queries:
        q = VectorStoreQuery(query_embedding=query.tolist(), similarity_top_k=K, filters=RARE)
        expected_ids, expected_scores = _exact_filtered_top_k(vectors, groups, query)
        got = ours.query(q)
        assert got.ids == expected_ids
        np.testing.assert_allclose(got.similarities, expected_scores, atol=1e-5)
        assert all(n.metadata["group"] == "rare" for n in got.nodes)
        plain_counts.append(len(plain.query(q).ids))
    # upstream: ef_search=40 candidates, then the WHERE clause keeps ~5% of them
    assert all(count < K for count in plain_counts), plain_counts
    _dispose(ours, plain)


async def test_hnsw_filter_async_engine_also_scans_iteratively(pg_server, hnsw_table):
    """The asyncpg engine gets the setting through server_settings (not libpq options)."""
    name, vectors, groups, queries = hnsw_table
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=HNSW_DIM, hnsw=HNSW_KWARGS)
    index = VectorStoreIndex.from_vector_store(store, embed_model=NoEmbedding())
    retriever = index.as_retriever(similarity_top_k=K, filters=RARE)
    try:
        for query in queries[:3]:
            bundle = QueryBundle("q", embedding=query.tolist())
            expected_ids, expected_scores = _exact_filtered_top_k(vectors, groups, query)
            sync_hits = retriever.retrieve(bundle)
            async_hits = await retriever.aretrieve(QueryBundle("q", embedding=query.tolist()))
            assert _ids(async_hits) == _ids(sync_hits) == expected_ids
            np.testing.assert_allclose(_scores(async_hits), expected_scores, atol=1e-5)
            assert _scores(async_hits) == _scores(sync_hits)
    finally:
        await store.close()


def test_pgvector_store_rejects_unknown_settings(pg_server):
    with pytest.raises(ValueError, match="iterative_scan"):
        pgvector_store(**pg_server.params(), table_name="x", embed_dim=4, iterative_scan="fast")
    with pytest.raises(ValueError, match="unknown hnsw keys"):
        pgvector_store(**pg_server.params(), table_name="x", embed_dim=4, hnsw={"ef": 10})


# ---------------------------------------------------------------------- hybrid

HYBRID_DIM = 32
TEXT_HIT = "zorblaxite"
QUERY = "Which mines produce zorblaxite?"
# dense noise: close to the query's embedding, none shares a query term
NOISE = {
    "noise-0": "The committee moved its monthly meeting to Thursday afternoon.",
    "noise-1": "Our train was delayed by snow on the northern line.",
    "noise-2": "She painted the kitchen walls a warm shade of yellow.",
    "noise-3": "The library extended its opening hours during exams.",
    "noise-4": "A stray cat slept on the warm bonnet of the car.",
    "noise-5": "The orchestra tuned their instruments before the concert.",
    "noise-6": "He forgot his umbrella at the bus stop again.",
}
NOISE_COSINES = [0.6, 0.55, 0.5, 0.45, 0.4, 0.35, 0.3]
TEXT_HIT_COSINE = 0.05  # far from the query, but still 8th of the dense list
OTHERS = {
    "solar": "Solar panels produce the most electricity around noon.",
    "bees": "Worker bees produce honey from the nectar they collect.",
    "coal": "Old coal mines in the region now attract tourists.",
    "bread": "Sourdough bread needs a starter of flour and water.",
    "river": "The river floods the low meadows every spring.",
    "chess": "Chess players often open with the king's pawn.",
    "tea": "Green tea should steep for about two minutes.",
    "bridge": "The suspension bridge was repainted last summer.",
    "owl": "Barn owls hunt mice at dusk over open fields.",
    "glass": "Glassblowers shape molten glass with long pipes.",
    "violin": "A violin bow is strung with horsehair.",
    "rain": "Heavy rain is forecast for the weekend.",
    "map": "The old map showed roads that no longer exist.",
    "clock": "The town hall clock runs five minutes fast.",
    "garden": "Tomatoes ripen faster against a sunny wall.",
}
TEXTS: dict[str, str] = {
    TEXT_HIT: "Zorblaxite, a pale green mineral, is mined only in the Kessel valley.",
    **NOISE,
    **OTHERS,
}


def _hybrid_vectors():
    """Unit vectors with exact cosines to the query: noise high, the text hit low, others negative."""
    rng = np.random.default_rng(3)
    basis, _ = np.linalg.qr(rng.normal(size=(HYBRID_DIM, HYBRID_DIM)))
    query = basis[:, 0]
    cosines = {**dict(zip(NOISE, NOISE_COSINES)), TEXT_HIT: TEXT_HIT_COSINE}
    for i, node_id in enumerate(OTHERS):
        cosines[node_id] = -0.1 - 0.02 * i
    vectors = {}
    for j, node_id in enumerate(TEXTS):
        c = cosines[node_id]
        vectors[node_id] = (c * query + np.sqrt(1 - c * c) * basis[:, 1 + j]).tolist()
    return query.tolist(), vectors


@pytest.fixture(scope="module")
def hybrid_table(pg_server: PgServer):
    query, vectors = _hybrid_vectors()
    nodes = [
        TextNode(
            id_=node_id,
            text=text,
            metadata={"group": "a" if i % 2 == 0 else "b", "position": i},
            embedding=vectors[node_id],
        )
        for i, (node_id, text) in enumerate(TEXTS.items())
    ]
    name = pg_server.table_name("hybrid")
    store = pgvector_store(**pg_server.params(), table_name=name, embed_dim=HYBRID_DIM, hybrid_search=True)
    store.add(nodes)
    _dispose(store)
    return name, query, nodes


@pytest.fixture
def hybrid_index(pg_server: PgServer, hybrid_table):
    """Make indexes over the hybrid table (each with its own engines); close them after."""
    stores: list[PGVectorStore] = []

    def make() -> VectorStoreIndex:
        store = pgvector_store(
            **pg_server.params(), table_name=hybrid_table[0], embed_dim=HYBRID_DIM, hybrid_search=True
        )
        stores.append(store)
        return VectorStoreIndex.from_vector_store(store, embed_model=NoEmbedding())

    yield make
    _dispose(*stores)


def test_hybrid_ranks_exact_text_hit_first_where_upstream_hybrid_keeps_it_low(pg_server, hybrid_table, hybrid_index):
    name, query, _ = hybrid_table
    retriever = pg_hybrid_retriever(hybrid_index(), similarity_top_k=K)
    assert isinstance(retriever, HybridFusionRetriever)
    hits = retriever.retrieve(QueryBundle(QUERY, embedding=query))
    top = hits[0]
    assert top.node.node_id == TEXT_HIT
    assert {(hit.retriever_name, hit.rank) for hit in top.provenance} == {("text", 1), ("vector", 8)}
    # the text child also found the other 'produce'/'mine' sentences, the vector child the noise
    assert {"solar", "bees", "coal"} <= set(_ids(hits))
    assert {"noise-0", "noise-1"} <= set(_ids(hits))

    upstream_store = PGVectorStore.from_params(
        **pg_server.params(), table_name=name, embed_dim=HYBRID_DIM, hybrid_search=True
    )
    upstream = VectorStoreIndex.from_vector_store(upstream_store, embed_model=NoEmbedding()).as_retriever(
        similarity_top_k=K, vector_store_query_mode="hybrid"
    )
    up = upstream.retrieve(QueryBundle(QUERY, embedding=query))
    # upstream concatenates the dense top-k (noise first) and the text-only rows, unsorted
    # and untruncated: no fusion, and more than similarity_top_k results
    assert _ids(up)[:7] == list(NOISE)
    assert _ids(up)[7] == TEXT_HIT
    assert up[7].score == pytest.approx(TEXT_HIT_COSINE, abs=1e-5)  # its cosine, not its ts_rank
    assert _ids(up)[K:] == ["coal"] and 0 < up[K].score < up[7].score  # a ts_rank after cosines
    _dispose(upstream_store)


def test_hybrid_per_call_filters_never_return_filtered_out_nodes(hybrid_table, hybrid_index):
    _, query, nodes = hybrid_table
    group = {n.node_id: n.metadata["group"] for n in nodes}
    retriever = pg_hybrid_retriever(hybrid_index(), similarity_top_k=K)
    assert group[TEXT_HIT] == "a"
    for wanted in ("a", "b"):
        hits = retriever.retrieve(FilteredQueryBundle(QUERY, filters={"group": wanted}, embedding=query))
        assert len(hits) == K  # 11 rows per group: a post-filter alone would leave fewer
        assert all(group[i] == wanted for i in _ids(hits))
        assert (TEXT_HIT in _ids(hits)) == (wanted == "a")
        # each child applies the filter itself (SQL WHERE), not only the fusion afterwards
        vector, text = (
            child.retrieve(FilteredQueryBundle(QUERY, filters={"group": wanted}, embedding=query))
            for child in retriever._retrievers
        )
        assert len(vector) == K and all(group[i] == wanted for i in _ids(vector))
        assert text and all(group[i] == wanted for i in _ids(text))
    # per-call MetadataFilters on another key, merged with construction-time filters
    combined = pg_hybrid_retriever(hybrid_index(), filters={"group": "b"})
    late = MetadataFilters(filters=[MetadataFilter(key="position", value=10, operator=">")])
    hits = combined.retrieve(FilteredQueryBundle(QUERY, filters=late, embedding=query))
    assert hits
    assert all(group[n.node.node_id] == "b" and n.node.metadata["position"] > 10 for n in hits)


async def test_hybrid_sync_and_async_return_identical_results(hybrid_table, hybrid_index):
    _, query, _ = hybrid_table
    index = hybrid_index()
    retriever = pg_hybrid_retriever(index, similarity_top_k=K)
    try:
        for bundle in (
            QueryBundle(QUERY, embedding=query),
            FilteredQueryBundle(QUERY, filters={"group": "b"}, embedding=query),
            QueryBundle("bees honey nectar", embedding=query),
        ):
            sync_hits = retriever.retrieve(bundle)
            async_hits = await retriever.aretrieve(bundle)
            assert sync_hits
            assert _ids(async_hits) == _ids(sync_hits)
            assert _scores(async_hits) == _scores(sync_hits)
    finally:
        await index.vector_store.close()  # asyncpg connections belong to this test's loop


def test_pg_hybrid_retriever_needs_a_text_search_column(pg_server, hnsw_table):
    store = pgvector_store(**pg_server.params(), table_name=hnsw_table[0], embed_dim=HNSW_DIM)
    with pytest.raises(ValueError, match="hybrid_search=True"):
        pg_hybrid_retriever(VectorStoreIndex.from_vector_store(store, embed_model=NoEmbedding()))
    with pytest.raises(TypeError, match="PGVectorStore"):
        pg_hybrid_retriever(
            VectorStoreIndex(
                [],
                storage_context=StorageContext.from_defaults(vector_store=NumpyVectorStore()),
                embed_model=NoEmbedding(),
            )
        )


# ------------------------------------------------------------- recursive on PG

RECURSIVE_QUERIES = [
    "the queen bee lays eggs",
    "inverter direct current from solar panels",
    "bake sourdough bread in a hot pot",
    "electricity",
]


async def test_recursive_retriever_on_postgres_filters_in_sql_and_matches_default_store(pg_server, lexical):
    reference = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical)
    store, summaries = (
        pgvector_store(**pg_server.params(), table_name=pg_server.table_name(name), embed_dim=LEXICAL_DIM)
        for name in ("chunks", "summaries")
    )
    on_pg = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(), embed_model=lexical, chunk_vector_store=store, summary_vector_store=summaries
    )
    assert on_pg.documents == reference.documents
    assert pg_server.execute(f"SELECT count(*) FROM data_{store.table_name}") == [(9,)]

    statements: list[tuple] = []

    def capture(conn, cursor, statement, parameters, context, executemany):
        if "data_" in statement and "SELECT" in statement.upper():
            statements.append((statement, set(parameters.values())))

    event.listen(store.client, "before_cursor_execute", capture)
    try:
        for query in RECURSIVE_QUERIES:
            expected = reference.retrieve(query)
            got = on_pg.retrieve(query)
            assert expected
            assert _ids(got) == _ids(expected), query
            np.testing.assert_allclose(_scores(got), _scores(expected), atol=1e-5)
            assert [h.explanation.route.doc_id for h in got] == [h.explanation.route.doc_id for h in expected]
            # aretrieve: the routed documents' chunk queries run concurrently on asyncpg
            concurrent = await on_pg.aretrieve(query)
            assert _ids(concurrent) == _ids(got) and _scores(concurrent) == _scores(got)
        filtered = FilteredQueryBundle("panels produce electricity", filters={"category": "energy"})
        got, expected = on_pg.retrieve(filtered), reference.retrieve(filtered)
        assert _ids(got) == _ids(expected) and {h.node.metadata["category"] for h in got} == {"energy"}
    finally:
        event.remove(store.client, "before_cursor_execute", capture)
        await store.close()
        await summaries.close()

    # every routed document's chunks were selected in SQL by a WHERE on ref_doc_id, key
    # and ids bound as parameters (the fused default asks for all routed documents at
    # once: IN (...))
    routed = {
        doc: [
            params
            for statement, params in statements
            if re.search(r"WHERE.*metadata_ ->> %\(\w+\)s\) IN", statement, re.S) and {"ref_doc_id", doc} <= params
        ]
        for doc in ("bees", "solar", "bread")
    }
    assert all(routed.values()), statements
    assert any({"category", "energy"} <= params for params in routed["solar"])


# -------------------------------------------------------------------- faults
# A server of these tests' own, since they freeze and restart it; the real
# model embeds the documents and queries.

FAULT_TIMEOUT = 2.0  # statement_timeout and connect_timeout of the fault tests' stores
# the longest any call may take before the test calls it a hang (generous:
# statement_timeout + grace + connect_timeout is 5 s)
HANG = 60.0
FAULT_QUERY = "the queen bee lays eggs"


@pytest.fixture(scope="module")
def fault_server():
    with start_server() as server:
        yield server


def _fault_store(server: PgServer, table_name: str, dim: int) -> PGVectorStore:
    return pgvector_store(
        **server.params(),
        table_name=table_name,
        embed_dim=dim,
        hybrid_search=True,
        statement_timeout=FAULT_TIMEOUT,
        connect_timeout=FAULT_TIMEOUT,
    )


@pytest.fixture
def fault_index(fault_server, real_model):
    """The three topic documents, embedded by the real model, on the fault server."""
    dim = len(real_model.get_text_embedding("dimension"))
    store = _fault_store(fault_server, fault_server.table_name("faults"), dim)
    index = VectorStoreIndex(
        topic_nodes(), storage_context=StorageContext.from_defaults(vector_store=store), embed_model=real_model
    )
    yield index
    asyncio.run(store.close())


def _bounded(call, limit: float = HANG) -> dict:
    """Run ``call`` in a thread: {"value" or "error", "seconds"}; fail if it still waits after ``limit``."""
    box: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test, which checks its type
            box["error"] = exc
        box["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit)
    assert not thread.is_alive(), f"the call still waits after {limit} s: no client-side timeout"
    return box


def _assert_timeout(box: dict, settings: set, bound: float) -> None:
    error = box.get("error")
    assert isinstance(error, PostgresTimeoutError), box
    assert isinstance(error, TimeoutError)
    assert error.setting in settings and error.seconds == FAULT_TIMEOUT
    assert f"{error.setting}=2 s" in str(error) and f"pgvector_store(..., {error.setting}=" in str(error)
    assert box["seconds"] < bound, box


def test_frozen_server_gives_a_timeout_error_within_the_bound_then_answers_again(fault_server, fault_index):
    retriever = pg_hybrid_retriever(fault_index)
    expected = retriever.retrieve(FAULT_QUERY)
    assert _ids(expected)[0] == "bees-0"
    loop = asyncio.new_event_loop()  # keeps its pooled asyncpg connection across calls
    try:
        assert _ids(loop.run_until_complete(retriever.aretrieve(FAULT_QUERY))) == _ids(expected)
        with fault_server.frozen() as paused:
            assert len(paused) >= 2  # the postmaster and its children
            # sync: the pooled connection's check (a statement) times out
            _assert_timeout(_bounded(lambda: retriever.retrieve(FAULT_QUERY)), {"statement_timeout"}, 10)
            # async: the two children query concurrently, one on the pooled
            # connection, one opening a new connection; whichever gives up first
            _assert_timeout(
                _bounded(lambda: loop.run_until_complete(retriever.aretrieve(FAULT_QUERY))),
                {"statement_timeout", "connect_timeout"},
                10,
            )
            # the timed-out connections were discarded; new ones cannot be opened
            _assert_timeout(_bounded(lambda: retriever.retrieve(FAULT_QUERY)), {"connect_timeout"}, 10)
            _assert_timeout(
                _bounded(lambda: loop.run_until_complete(retriever.aretrieve(FAULT_QUERY))),
                {"connect_timeout"},
                10,
            )
        # retryable: once the server runs again, the same retriever answers as before
        assert _ids(retriever.retrieve(FAULT_QUERY)) == _ids(expected)
        again = loop.run_until_complete(retriever.aretrieve(FAULT_QUERY))
        assert _ids(again) == _ids(expected) and _scores(again) == _scores(expected)
    finally:
        loop.run_until_complete(fault_index.vector_store.close())
        loop.close()


def test_slow_statement_is_cancelled_by_the_server_and_its_connection_survives(fault_index):
    pg_hybrid_retriever(fault_index).retrieve(FAULT_QUERY)  # connects
    with fault_index.vector_store.client.connect() as conn:
        backend = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with pytest.raises(PostgresTimeoutError, match="statement_timeout=2 s") as caught:
            conn.exec_driver_sql("SELECT pg_sleep(30)")
        # the server's statement_timeout cancelled it (not the client cutting the connection)
        assert isinstance(caught.value.__cause__, psycopg2.errors.QueryCanceled)
        conn.rollback()
        assert conn.exec_driver_sql("SELECT pg_backend_pid()").scalar() == backend


async def test_restarted_server_answers_the_next_query_sync_and_async(fault_server, fault_index, real_model, caplog):
    retriever = pg_hybrid_retriever(fault_index)
    expected = retriever.retrieve(FAULT_QUERY)
    assert _ids(await retriever.aretrieve(FAULT_QUERY)) == _ids(expected)  # this loop's pool has a connection
    store = fault_index.vector_store
    upstream = PGVectorStore.from_params(
        **fault_server.params(), table_name=store.table_name, embed_dim=store.embed_dim, hybrid_search=True
    )
    probe = VectorStoreQuery(query_embedding=real_model.get_query_embedding(FAULT_QUERY), similarity_top_k=K)
    assert upstream.query(probe).ids
    before = fault_server.pids()
    fault_server.restart()
    assert not set(before) & set(fault_server.pids())  # every old backend is gone, with its connections
    # upstream's pooled connection is dead, and its first query after the restart fails
    with pytest.raises(sqlalchemy.exc.OperationalError, match="server closed the connection"):
        upstream.query(probe)
    _dispose(upstream)
    assert _ids(retriever.retrieve(FAULT_QUERY)) == _ids(expected)  # the pool's check replaced it
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.stores.postgres"):
        after = await retriever.aretrieve(FAULT_QUERY)
    assert _ids(after) == _ids(expected) and _scores(after) == _scores(expected)
    # the async connection was dead too: the query was retried on a new one
    assert "retrying the query on a new connection" in caplog.text


def test_aretrieve_from_successive_event_loops_equals_sync(fault_server, fault_index, real_model, caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.stores.postgres"):
        retriever = pg_hybrid_retriever(fault_index)
    assert [r for r in caplog.records if r.name == "llama_index_ext_recursive.stores.postgres"] == []
    expected = retriever.retrieve(FAULT_QUERY)

    def backends() -> int:
        gc.collect()  # connections of closed loops close as they are collected
        return fault_server.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")[0][0]

    start = backends()
    for _ in range(4):
        got = asyncio.run(retriever.aretrieve(FAULT_QUERY))
        assert _ids(got) == _ids(expected) and _scores(got) == _scores(expected)
    # the last loop's pool at most: earlier loops' were released. A backend leaves pg_stat_activity a
    # moment after its client hangs up (a loaded machine showed one more), so wait for it, up to 30 s
    deadline = time.monotonic() + 30
    while backends() > start + 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert backends() <= start + 2

    # upstream's one async engine is bound to the first loop
    store = fault_index.vector_store
    upstream_store = PGVectorStore.from_params(
        **fault_server.params(), table_name=store.table_name, embed_dim=store.embed_dim, hybrid_search=True
    )
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.stores.postgres"):
        upstream = pg_hybrid_retriever(VectorStoreIndex.from_vector_store(upstream_store, embed_model=real_model))
    assert "not built by pgvector_store" in caplog.text and "one event loop only" in caplog.text
    assert _ids(asyncio.run(upstream.aretrieve(FAULT_QUERY))) == _ids(expected)
    with pytest.raises(RuntimeError, match="different loop"):
        asyncio.run(upstream.aretrieve(FAULT_QUERY))
    _dispose(upstream_store)


async def test_aretrieve_from_a_loop_in_another_thread_while_this_loop_runs(fault_index):
    """As in Jupyter, whose own loop runs in a thread of its own."""
    retriever = pg_hybrid_retriever(fault_index)
    expected = retriever.retrieve(FAULT_QUERY)
    assert _ids(await retriever.aretrieve(FAULT_QUERY)) == _ids(expected)
    other = asyncio.new_event_loop()
    thread = threading.Thread(target=other.run_forever, daemon=True)
    thread.start()
    try:
        there = asyncio.run_coroutine_threadsafe(retriever.aretrieve(FAULT_QUERY), other)
        # both loops query at the same time, each on connections of its own
        here, there = await asyncio.wait_for(
            asyncio.gather(retriever.aretrieve(FAULT_QUERY), asyncio.wrap_future(there)), HANG
        )
        again = await retriever.aretrieve(FAULT_QUERY)  # this loop's pool is unharmed
        for got in (here, there, again):
            assert _ids(got) == _ids(expected) and _scores(got) == _scores(expected)
    finally:
        other.call_soon_threadsafe(other.stop)
        thread.join(HANG)
        other.close()


def test_timeouts_are_checked_at_construction(pg_server):
    for name in ("connect_timeout", "statement_timeout"):
        for bad in (0, -1.0, float("nan"), float("inf")):
            with pytest.raises(ValueError, match=name):
                pgvector_store(**pg_server.params(), table_name="x", embed_dim=4, **{name: bad})
        for bad in (True, "5", None):
            with pytest.raises(TypeError, match=name):
                pgvector_store(**pg_server.params(), table_name="x", embed_dim=4, **{name: bad})


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has exited; only its parent has not reaped it


@pytest.mark.server
def test_a_kept_server_keeps_its_data_for_the_next_start_and_refuses_a_folder_of_other_files():
    # a temporary folder others may enter: as root the server runs as nobody, and pytest's
    # own tmp_path is closed to other users
    outer = Path(tempfile.mkdtemp(prefix="kept-pg-test-"))
    os.chmod(outer, 0o755)
    try:
        kept = outer / "server"
        with start_server(keep=kept) as server:
            server.execute("CREATE TABLE kept_rows (x int)")
            server.execute("INSERT INTO kept_rows VALUES (7)")
        assert server.pids() == []
        with start_server(keep=kept, settings={"work_mem": "8MB"}) as again:
            assert again.execute("SELECT x FROM kept_rows") == [(7,)]
            assert again.execute("SHOW work_mem") == [("8MB",)]
        with pytest.raises(PgServerError, match="not a plain name and value"):
            with start_server(settings={"work_mem": "8MB -c listen_addresses=*"}):
                pass
        mine = outer / "mine"
        mine.mkdir()
        (mine / "notes.txt").write_text("my notes")
        with pytest.raises(PgServerError, match="notes.txt.*new or empty folder"):
            with start_server(keep=mine):
                pass
        assert [p.name for p in mine.iterdir()] == ["notes.txt"]
        assert (mine / "notes.txt").read_text() == "my notes"
    finally:
        shutil.rmtree(outer)


@pytest.mark.server
def test_test_server_is_stopped_even_when_paused_and_the_test_fails():
    with pytest.raises(RuntimeError, match="the test failed"):
        with start_server() as server:
            pids = server.pids()
            for pid in pids:  # as if a test died while the server was frozen
                os.kill(pid, signal.SIGSTOP)
            raise RuntimeError("the test failed")
    assert len(pids) >= 2
    assert [pid for pid in pids if _running(pid)] == []
    assert not server.root.exists()
