"""stores.pg_level: a recursive level in PostgreSQL answers as the embedded columnar store (dense
and BM25, under filters, through deletes and replacements), another process's store on the
same tables sees every committed change, and bad input or a foreign layout is refused by name.

Against the real server of the ``pg_server`` fixture."""

import asyncio
import json
import threading

import numpy as np
import pytest
from conftest import DIM as LEXICAL_DIM
from conftest import LexicalEmbedding
from llama_index.core.schema import IndexNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery
from sqlalchemy import event, text
from store_cases import (
    DIM,
    FILTERS,
    QUERY_VECTORS,
    apply_changes,
    apply_worded_changes,
    bm25_reference_answers,
    dense_answers,
    lexical_answers,
    make_nodes,
    make_worded,
)

from llama_index_ext_recursive.retrievers.store_facts import store_size
from llama_index_ext_recursive.stores import pg_level, pg_segments
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.stores.pg_index import PostgresIndexStore
from llama_index_ext_recursive.stores.pg_level import FORMAT_VERSION, PostgresLevelError, PostgresLevelStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

_OPENED = []


@pytest.fixture(autouse=True)
def _close_stores():
    """Each test's stores give their connections back before the session's server stops."""
    yield
    while _OPENED:
        _OPENED.pop().close()


def _level(pg_server, name=None, **kwargs):
    if "dimension" not in kwargs and name is None:
        kwargs["dimension"] = DIM
    store = PostgresLevelStore.from_params(name=name or pg_server.table_name("lvl"), **pg_server.params(), **kwargs)
    _OPENED.append(store)
    return store


def test_dense_answers_equal_the_columnar_store_through_changes(pg_server):
    reference = dense_answers(apply_changes(ColumnarVectorStore()))
    store = apply_changes(_level(pg_server))
    assert dense_answers(store) == reference
    hit = store.query(VectorStoreQuery(query_embedding=QUERY_VECTORS[0], similarity_top_k=1)).nodes[0]
    assert hit.text == f"text {hit.node_id}" and hit.ref_doc_id is not None and hit.embedding is None


def test_bm25_answers_equal_the_bm25_retriever_through_changes(pg_server):
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    live = apply_worded_changes(store)
    reference = bm25_reference_answers(live)
    assert sum(len(ids) for ids, _ in reference) > 20  # the queries do find things
    assert lexical_answers(store) == reference
    columnar = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    apply_worded_changes(columnar)
    assert lexical_answers(columnar) == reference


def _graph(store):
    """The definition of the level's HNSW index."""
    with store.client.connect() as conn:
        return conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": f"{store.name}_embedding"}
        ).scalar_one()


def test_the_hnsw_graph_is_half_precision_by_default_and_answers_rank_in_full_precision(pg_server):
    # the graph over halfvec finds candidates; the scores and the order are full precision
    # (dense_answers keeps 5 decimals, which halfvec's 3 significant digits would not match)
    reference = dense_answers(apply_changes(ColumnarVectorStore()))
    half = apply_changes(_level(pg_server))
    assert "halfvec(8)) halfvec_ip_ops" in _graph(half)
    assert dense_answers(half) == reference
    full = apply_changes(_level(pg_server, halfvec=False))
    assert "(embedding vector_ip_ops)" in _graph(full)
    assert dense_answers(full) == reference
    # a level made before the setting existed has a full-precision graph, and is searched so
    with half.client.begin() as conn:
        conn.execute(text(f'DROP INDEX "public"."{half.name}_embedding"'))
        conn.execute(
            text(f'CREATE INDEX "{half.name}_embedding" ON "public"."{half.name}" USING hnsw (embedding vector_ip_ops)')
        )
        conn.execute(text(f'UPDATE "public"."{half.name}_state" SET config = config - \'hnsw\''))
    older = _level(pg_server, name=half.name)
    statements = []
    event.listen(older.client, "before_cursor_execute", lambda *args: statements.append(args[2]))
    assert dense_answers(older) == reference
    assert statements and not [s for s in statements if "halfvec" in s.lower()]


def test_another_process_sees_every_committed_change_and_the_same_answers(pg_server):
    name = pg_server.table_name("lvl")
    writer = _level(pg_server, name, dimension=DIM, tokenizer=MultilingualTokenizer())
    reader = _level(pg_server, name)  # its own engines, no settings
    assert reader.tokenizer == MultilingualTokenizer() and reader.dimension == DIM
    assert reader.generation == writer.generation == 0 and reader.node_count == 0
    live = apply_worded_changes(writer)
    assert reader.generation == writer.generation == 4  # one per add or delete
    assert reader.node_count == len(live) == writer.node_count
    assert lexical_answers(reader) == lexical_answers(writer) == bm25_reference_answers(live)
    assert dense_answers(reader) == dense_answers(writer)
    assert reader.live_node_ids() == [n.node_id for n in live]


def test_lookups_answer_as_the_columnar_store(pg_server):
    store, columnar = _level(pg_server), ColumnarVectorStore()
    link = IndexNode(id_="link0", text="see the other index", index_id="other", embedding=[1.0] * DIM)
    for target in (store, columnar):
        apply_changes(target)
        target.add([link])
    wanted = ["n3", "missing", "n20", "n0"]
    assert store.ref_doc_ids(wanted) == columnar.ref_doc_ids(wanted)
    assert [n and n.text for n in store.nodes_by_id(wanted)] == [n and n.text for n in columnar.nodes_by_id(wanted)]
    assert store.link_targets() == columnar.link_targets() == {"link0": "other"}
    assert store.live_node_ids() == columnar.live_node_ids()
    assert store.metadata_keys() == columnar.metadata_keys() == {"kind", "year", "ref_doc_id"}
    assert store.filter_vocabulary().keys == columnar.filter_vocabulary().keys
    got = store.get_nodes(["n3", "n4"], filters=MetadataFilters(filters=[MetadataFilter(key="kind", value="a")]))
    assert [n.node_id for n in got] == [n.node_id for n in columnar.get_nodes(["n3", "n4"], filters=FILTERS[1])]
    assert np.isclose(np.linalg.norm(got[0].embedding), 1.0)  # the stored unit vector, to add it again
    # a search caps k by the store's size only where that costs no round trip
    assert store_size(columnar) == columnar.node_count and store_size(store) is None


def test_text_that_csv_and_sql_treat_specially_round_trips_and_filters_stay_values(pg_server):
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    tricky = "\\N, \"quoted\", 'single'\nnew line; DROP TABLE x; -- 合同"
    node = TextNode(
        id_="odd,\"id'\n",
        text=tricky,
        embedding=[0.5] * DIM,
        metadata={"kind": "x'; DELETE FROM t; --", "empty": ""},
        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id="doc,\"1'")},
    )
    store.add([node])
    (back,) = store.nodes_by_id([node.node_id])
    assert back.text == tricky and back.metadata == node.metadata and back.ref_doc_id == "doc,\"1'"
    hostile = MetadataFilters(filters=[MetadataFilter(key="kind", value="x' OR '1'='1")])
    assert store.query_ids(VectorStoreQuery(query_embedding=[1.0] * DIM, similarity_top_k=5, filters=hostile)) == (
        [],
        [],
    )
    exact = MetadataFilters(filters=[MetadataFilter(key="kind", value="x'; DELETE FROM t; --")])
    ids, _ = store.query_ids(VectorStoreQuery(query_str="合同", similarity_top_k=5, filters=exact, mode="text_search"))
    assert ids == [node.node_id]


def test_bad_input_and_a_foreign_layout_are_refused_by_name(pg_server):
    name = pg_server.table_name("lvl")
    store = _level(pg_server, name, dimension=DIM)
    store.add(make_nodes(4))
    with pytest.raises(ValueError, match="keeps no BM25 terms"):
        store.query_ids(VectorStoreQuery(query_str="text", mode="text_search"))
    with pytest.raises(ValueError, match="3 dimensions; this level holds 8"):
        store.query_ids(VectorStoreQuery(query_embedding=[1.0, 0.0, 0.0], similarity_top_k=2))
    with pytest.raises(ValueError, match="no embedding"):
        store.query_ids(VectorStoreQuery(similarity_top_k=2))
    with pytest.raises(ValueError, match="zero or non-finite"):
        store.add([TextNode(id_="z", text="zero", embedding=[0.0] * DIM)])
    with pytest.raises(PostgresLevelError, match="8-dimensional vectors, not 16"):
        _level(pg_server, name, dimension=16)
    with pytest.raises(PostgresLevelError, match="pass dimension="):
        _level(pg_server, pg_server.table_name("none"))
    with pytest.raises(ValueError, match="identifier"):
        _level(pg_server, 'bad"; DROP TABLE x; --')
    with store.client.begin() as conn:
        conn.execute(text(f'UPDATE "public"."{name}_state" SET format = :v'), {"v": FORMAT_VERSION + 1})
    with pytest.raises(PostgresLevelError, match=f"layout version {FORMAT_VERSION + 1}.*rebuild"):
        _level(pg_server, name)
    assert store.node_count == 4  # the refusals changed nothing


def test_a_failed_add_leaves_the_level_as_it_was(pg_server):
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    store.add(make_worded(6))
    before = (lexical_answers(store), dense_answers(store), store.generation, store.node_count)
    bad = make_worded(2, prefix="late") + [TextNode(id_="nan", text="x", embedding=[float("nan")] * DIM)]
    with pytest.raises(ValueError, match="non-finite"):
        store.add(bad)
    unstorable = make_worded(1, prefix="nul")
    unstorable[0].text = "a\x00b"
    with pytest.raises(ValueError, match="NUL"):
        store.add(unstorable)
    assert (lexical_answers(store), dense_answers(store), store.generation, store.node_count) == before
    with store.client.connect() as conn:
        state = conn.execute(text(f'SELECT config FROM "public"."{store.name}_state"')).scalar_one()
    assert json.loads(json.dumps(state))["bm25"] == {"method": "lucene", "k1": 1.5, "b": 0.75}


def test_doc_ids_and_routing_filters_restrict_to_those_documents(pg_server):
    store, columnar = apply_changes(_level(pg_server)), apply_changes(ColumnarVectorStore())
    routed = MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value=["doc1", "doc3"], operator="in")])
    for vector in QUERY_VECTORS:
        by_doc = store.query_ids(VectorStoreQuery(query_embedding=vector, similarity_top_k=4, doc_ids=["doc1", "doc3"]))
        by_filter = store.query_ids(VectorStoreQuery(query_embedding=vector, similarity_top_k=4, filters=routed))
        expected = columnar.query_ids(VectorStoreQuery(query_embedding=vector, similarity_top_k=4, filters=routed))
        assert by_doc[0] == by_filter[0] == expected[0] and len(expected[0]) == 4
    # both: the documents in both (doc3 only)
    both = store.query_ids(
        VectorStoreQuery(query_embedding=QUERY_VECTORS[0], similarity_top_k=9, filters=routed, doc_ids=["doc3", "doc4"])
    )
    assert {n.ref_doc_id for n in store.nodes_by_id(both[0])} == {"doc3"}


def test_a_bulk_load_into_an_empty_level_makes_its_hnsw_index_once_at_the_end(pg_server):
    def has_index(store):
        with store.client.connect() as conn:
            found = conn.execute(text("SELECT to_regclass(:n)"), {"n": f'"public"."{store.name}_embedding"'}).scalar()
        return found is not None

    store = _level(pg_server)
    assert has_index(store)
    with store.bulk_load():
        assert not has_index(store)
        apply_changes(store)
    assert has_index(store)
    with store.client.connect() as conn:  # planner statistics made at once: BM25 read every posting without
        analyzed = conn.execute(text("SELECT count(*) FROM pg_stats WHERE tablename = :t"), {"t": store.name}).scalar()
    assert analyzed > 0
    assert dense_answers(store) == dense_answers(apply_changes(ColumnarVectorStore()))
    with store.bulk_load():  # a level that holds rows keeps its index
        assert has_index(store)


def test_an_index_build_may_outlast_the_statement_timeout_and_nothing_else_may(pg_server):
    from llama_index_ext_recursive.stores.postgres import PostgresTimeoutError, unbounded_statements

    store = _level(pg_server, statement_timeout=0.5)
    with store.client.begin() as conn, unbounded_statements(conn):
        conn.execute(text("SELECT pg_sleep(1.8)"))  # past the server's 0.5 s and the client's 1.5 s
    with pytest.raises(PostgresTimeoutError, match="statement_timeout"):
        with store.client.begin() as conn:
            conn.execute(text("SELECT pg_sleep(1.8)"))


def test_a_filter_asked_again_with_other_values_gets_its_own_answers(pg_server):
    # compiled statements are kept per filter: the same structure with another value must not
    # reuse the first one's SQL (its values are part of it)
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    live = apply_worded_changes(store)
    reference = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    reference.add(live)
    for year in (2000, 2002, 2004, 2002):
        for kind in ("a", "b"):
            filters = MetadataFilters(
                filters=[
                    MetadataFilter(key="year", value=year, operator=FilterOperator.GTE),
                    MetadataFilter(key="kind", value=kind),
                ]
            )
            for query in (
                VectorStoreQuery(
                    query_str="termination notice", similarity_top_k=4, filters=filters, mode="text_search"
                ),
                VectorStoreQuery(query_embedding=QUERY_VECTORS[0], similarity_top_k=4, filters=filters),
            ):
                ids, scores = store.query_ids(query)
                expected_ids, expected_scores = reference.query_ids(query)
                assert ids == expected_ids, (year, kind, query.mode)
                assert scores == pytest.approx(expected_scores, abs=1e-4)


def test_a_hybrid_over_a_postgres_level_answers_as_over_the_embedded_store(pg_server):
    # the vector and hybrid retrievers over one PostgreSQL level: BackfillVectorRetriever for the
    # vectors, StoreBM25Retriever for BM25, fused by HybridFusionRetriever; no node in the client
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.schema import QueryBundle

    from llama_index_ext_recursive import FilteredQueryBundle, HybridFusionRetriever, StoreBM25Retriever
    from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

    def hybrid(store):
        vector = BackfillVectorRetriever.from_vector_store(store, embed_model=MockEmbedding(embed_dim=DIM))
        return HybridFusionRetriever(
            [vector, StoreBM25Retriever(store)], mode="relative_score", similarity_top_k=5, use_async=False
        )

    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    reference = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    store.add(make_worded(30))
    reference.add(make_worded(30))
    in_database, embedded = hybrid(store), hybrid(reference)
    for i, words in enumerate(["termination notice", "合同终止", "confidential party court"]):
        for filters in (None, {"kind": "a"}):
            bundle = FilteredQueryBundle(words, embedding=QUERY_VECTORS[i], filters=filters)
            got, expected = in_database.retrieve(bundle), embedded.retrieve(bundle)
            assert [h.node.node_id for h in got] == [h.node.node_id for h in expected], (words, filters)
            assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-4)
            assert got and all(h.node.text for h in got)
    assert asyncio.run(in_database.aretrieve(QueryBundle("termination notice", embedding=QUERY_VECTORS[0])))


def test_the_hnsw_build_asks_for_memory_that_holds_the_graph_within_bounds():
    from llama_index_ext_recursive.stores.pg_level import HNSW_BUILD_MEMORY_MB, hnsw_build_memory_mb

    least, most = HNSW_BUILD_MEMORY_MB
    assert hnsw_build_memory_mb(1_000, 384) == least
    # 500k 384-d vectors take 732 MiB alone: the build must ask for more than that
    assert 4 * 384 * 500_000 / 2**20 < hnsw_build_memory_mb(500_000, 384) < most
    assert hnsw_build_memory_mb(4_000_000, 1536) == most
    # a halfvec graph holds 2 bytes a value: less memory for the same rows
    assert least < hnsw_build_memory_mb(500_000, 384, 2) < hnsw_build_memory_mb(500_000, 384)
    sizes = [hnsw_build_memory_mb(rows, 384) for rows in (10_000, 200_000, 500_000, 1_000_000, 2_000_000)]
    assert sizes == sorted(sizes)


def _statement_threads(store):
    """The names of the threads that ran a statement on ``store``'s engine (listened to)."""
    names = []

    def note(*_):
        names.append(threading.current_thread().name)

    event.listen(store.client, "before_cursor_execute", note)
    return names


def _segments(store):
    """The level's segment bookkeeping and its segments' numbers and terms."""
    with store.client.connect() as conn:
        state = conn.execute(
            text(f'SELECT compacted_seq, segments, dead_rows FROM "public"."{store.name}_state"')
        ).one()
        numbers = conn.execute(text(f'SELECT DISTINCT segment FROM "public"."{store.name}_segments"')).scalars()
        return state, sorted(numbers)


def test_bm25_of_the_whole_level_answers_the_same_from_segments_tail_and_tombstones(pg_server, monkeypatch):
    # a search of the whole level scores packed postings in the client: rows of merged segments,
    # of a young segment and of the tail, and rows deleted or replaced after they were packed,
    # must answer as BM25 over the live rows (ties to the earlier row, k=None, filters)
    monkeypatch.setattr(pg_segments, "TAIL_ROWS", 4)
    monkeypatch.setattr(pg_segments, "MERGE_FAN", 2)
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    twins = [
        TextNode(id_=f"twin{i}", text="zebra zebra crossing", embedding=[1.0] + [0.0] * (DIM - 1)) for i in range(4)
    ]
    store.add(twins[:1])  # a tail of one row: no segment yet
    assert _segments(store) == ((0, [], 0), [])
    for start in range(0, 30, 5):  # segments of 5 rows, merged two by two as they come
        store.add(make_worded(30)[start : start + 5])
    (compacted, listed, dead), numbers = _segments(store)
    assert [s["id"] for s in listed] == numbers and len(numbers) >= 2  # merged: fewer than the 6 packed
    assert sum(s["rows"] for s in listed) == 31 and dead == 0
    monkeypatch.setattr(pg_segments, "TAIL_ROWS", 100)  # from here on: no rebuild, a tail
    store.delete("doc2")  # tombstones in the segments
    store.delete_nodes(["n5", "n17"])
    store.add(make_worded(3, seed=5))  # replaces n0, n1, n2: 3 more tombstones, 3 rows in the tail
    live = {n.node_id: n for n in [twins[0], *make_worded(30)]}
    for node_id in [n for n, node in live.items() if node.ref_doc_id == "doc2"] + ["n5", "n17"]:
        live.pop(node_id)
    for node in make_worded(3, seed=5):
        live.pop(node.node_id)
        live[node.node_id] = node
    (_, _, dead), _ = _segments(store)
    assert dead == 31 - (len(live) - 3)  # every deleted or replaced row, none yet dropped
    store.add(twins[1:])
    assert lexical_answers(store) == bm25_reference_answers(list(live.values()) + twins[1:])
    ids, scores = store.query_ids(VectorStoreQuery(query_str="zebra", similarity_top_k=2, mode="text_search"))
    assert ids == ["twin0", "twin1"] and scores[0] == scores[1]
    ids, _ = store.query_ids(VectorStoreQuery(query_str="zebra crossing", similarity_top_k=None, mode="text_search"))
    assert ids == ["twin0", "twin1", "twin2", "twin3"]
    # another store on the same tables, which never wrote: the same answers
    assert lexical_answers(_level(pg_server, name=store.name)) == lexical_answers(store)


def test_many_deleted_rows_rebuild_the_segments_and_compact_drops_every_tombstone(pg_server, monkeypatch):
    monkeypatch.setattr(pg_segments, "TAIL_ROWS", 4)
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    store.add(make_worded(30))
    (compacted, listed, _), numbers = _segments(store)
    assert listed == [{"id": 0, "rows": 30}] and numbers == [0]
    store.delete_nodes(["n1", "n2", "n3"])  # 3 of 27 live: a few tombstones stay
    assert _segments(store)[0][2] == 3
    store.delete_nodes(["n4", "n6", "n7", "n8"])  # 7 dead >= a quarter of 23 live: rebuilt
    (_, listed, dead), numbers = _segments(store)
    assert dead == 0 and listed == [{"id": 1, "rows": 23}] and numbers == [1]
    store.delete_nodes(["n9"])
    store.compact()
    (again, listed, dead), numbers = _segments(store)
    assert dead == 0 and listed == [{"id": 2, "rows": 22}] and numbers == [2] and again == compacted
    live = [n for n in make_worded(30) if n.node_id not in {"n1", "n2", "n3", "n4", "n6", "n7", "n8", "n9"}]
    assert lexical_answers(store) == bm25_reference_answers(live)
    store.clear()
    assert _segments(store) == ((compacted, [], 0), [])
    assert store.query_ids(VectorStoreQuery(query_str="notice", mode="text_search")) == ([], [])


def test_a_filtered_search_of_the_whole_level_looks_hits_up_in_growing_batches(pg_server, monkeypatch):
    # the best rows are looked up a batch at a time, with the filters; a filter few rows pass
    # needs more batches, and must find exactly the rows BM25 over all rows finds under it
    from llama_index_ext_recursive.query import FilteredQueryBundle
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    monkeypatch.setattr(pg_level, "FIRST_HITS", 1)
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    nodes = make_worded(40)
    for node in nodes:
        node.metadata["rare"] = "yes" if node.node_id in {"n3", "n31", "n38"} else "no"
    store.add(nodes)
    statements = []
    event.listen(store.client, "before_cursor_execute", lambda *args: statements.append(args[2]))
    rare = MetadataFilters(filters=[MetadataFilter(key="rare", value="yes")])
    words = f"{nodes[0].text} {nodes[3].text.split()[0]} {nodes[31].text.split()[0]}"
    ids, _ = store.query_ids(VectorStoreQuery(query_str=words, similarity_top_k=2, filters=rare, mode="text_search"))
    bm25 = MultilingualBM25Retriever(nodes=nodes, similarity_top_k=2, unknown_filter_key=None)
    assert len(ids) == 2 and ids == list(bm25.scores_by_id(FilteredQueryBundle(words, filters=rare)))
    assert len([s for s in statements if "%(seqs)s" in s]) > 1  # the first batch held too few


def test_a_search_inside_a_change_reads_its_uncommitted_rows(pg_server, monkeypatch):
    monkeypatch.setattr(pg_segments, "TAIL_ROWS", 4)
    index = PostgresIndexStore.from_params(name=pg_server.table_name("idx"), dimension=DIM, **pg_server.params())
    _OPENED.append(index)
    index.chunks.add(make_worded(20))
    query = VectorStoreQuery(query_str="zebra", similarity_top_k=3, mode="text_search")
    other = _level(pg_server, name=index.chunks.name)
    with index.transaction():
        index.chunks.add([TextNode(id_="new", text="zebra", embedding=[1.0] + [0.0] * (DIM - 1))])
        index.chunks.delete_nodes(["n0"])
        assert index.chunks.query_ids(query)[0] == ["new"]  # not committed: only its connection sees it
        assert other.query_ids(query)[0] == []
    assert index.chunks.query_ids(query)[0] == ["new"] == other.query_ids(query)[0]


@pytest.mark.parametrize("version", [2, 3])
def test_a_level_of_an_older_layout_is_refused_with_the_fix_and_upgraded_in_place_on_request(pg_server, version):
    name = pg_server.table_name("old")
    store = _level(pg_server, name, dimension=DIM, tokenizer=MultilingualTokenizer())
    live = apply_worded_changes(store)
    layout_3 = [  # what layout 3 was: no segments
        f'DROP TABLE "public"."{name}_segments"',
        f'ALTER TABLE "public"."{name}_state" DROP COLUMN compacted_seq, DROP COLUMN segments, DROP COLUMN dead_rows',
        f'UPDATE "public"."{name}_state" SET format = 3',
    ]
    layout_2 = [  # and layout 2: postings indexed by term alone, keyed by (doc_id, node_id, term)
        f'DROP INDEX "public"."{name}_postings_term"',
        f'CREATE INDEX "{name}_postings_term" ON "public"."{name}_postings" (term) INCLUDE (tf, length, seq)',
        f'ALTER TABLE "public"."{name}_postings" DROP CONSTRAINT "{name}_postings_pkey"',
        f'ALTER TABLE "public"."{name}_postings" ADD CONSTRAINT "{name}_postings_pkey" PRIMARY KEY (doc_id, node_id, term)',
        f'UPDATE "public"."{name}_state" SET format = 2',
    ]
    with store.client.begin() as conn:
        for statement in layout_3 + (layout_2 if version == 2 else []):
            conn.execute(text(statement))
    with pytest.raises(
        PostgresLevelError, match=f"layout version {version}; this release reads version 4: pass upgrade=True"
    ):
        _level(pg_server, name)
    upgraded = _level(pg_server, name, upgrade=True)
    with upgraded.client.connect() as conn:
        assert conn.execute(text(f'SELECT format FROM "public"."{name}_state"')).scalar_one() == FORMAT_VERSION
        definition = conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": f"{name}_postings_term"}
        )
        assert "(term, seq) INCLUDE (tf, length)" in definition.scalar_one()
        key = conn.execute(text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": f"{name}_postings_pkey"})
        assert "(doc_id, term, node_id)" in key.scalar_one()
    (compacted, listed, dead), numbers = _segments(upgraded)
    assert listed == [{"id": 0, "rows": len(live)}] and numbers == [0] and dead == 0  # every row packed
    assert lexical_answers(upgraded) == bm25_reference_answers(live)
    assert _level(pg_server, name).node_count == len(live)  # opens as any level of this layout now


def _embedded_worded(count, seed=0, prefix="n"):
    """Worded nodes embedded by the lexical test model (queries then find their words densely too)."""
    model = LexicalEmbedding()
    nodes = make_worded(count, seed, prefix)
    for node in nodes:
        node.embedding = model.get_text_embedding(node.text)
    return nodes


def test_a_hybrid_from_postgres_calibrates_on_sampled_rows_and_answers_as_its_children_fused(pg_server):
    from llama_index_ext_recursive import FilteredQueryBundle, HybridFusionRetriever, StoreBM25Retriever
    from llama_index_ext_recursive.filters import FilterError
    from llama_index_ext_recursive.retrievers.vector import BackfillVectorRetriever

    level = _level(pg_server, dimension=LEXICAL_DIM, tokenizer=MultilingualTokenizer())
    level.add(_embedded_worded(60))
    hybrid = HybridFusionRetriever.from_postgres(level, embed_model=LexicalEmbedding(), similarity_top_k=5)
    calibration = hybrid.calibration
    assert calibration is not None and calibration.scripts  # fitted on pseudo-queries cut from the rows
    again = HybridFusionRetriever.from_postgres(level, embed_model=LexicalEmbedding(), similarity_top_k=5)
    assert again.calibration.to_dict() == calibration.to_dict()  # the same rows for the same seed
    by_hand = HybridFusionRetriever(
        [
            BackfillVectorRetriever.from_vector_store(level, embed_model=LexicalEmbedding(), similarity_top_k=5),
            StoreBM25Retriever(level, similarity_top_k=5),
        ],
        mode="relative_score",
        similarity_top_k=5,
        retriever_names=["vector", "bm25"],
        calibration=calibration,
        use_async=False,
    )
    for words in ("termination notice", "合同终止", "confidential party court"):
        for filters in (None, {"kind": "a"}):
            bundle = FilteredQueryBundle(words, filters=filters)
            got, expected = hybrid.retrieve(bundle), by_hand.retrieve(bundle)
            assert got and [h.node.node_id for h in got] == [h.node.node_id for h in expected], (words, filters)
            assert [h.score for h in got] == pytest.approx([h.score for h in expected])
    with pytest.raises(FilterError, match="colour"):
        hybrid.retrieve(FilteredQueryBundle("notice", filters={"colour": "red"}))
    # a key another process adds is a key from then on (the level's own key counts are read)
    other = _level(pg_server, name=level.name)
    painted = _embedded_worded(1, seed=9, prefix="p")[0]
    painted.metadata["colour"] = "red"
    other.add([painted])
    assert [
        h.node.node_id for h in hybrid.retrieve(FilteredQueryBundle("notice contract", filters={"colour": "red"}))
    ] == ["p0"]
    index = PostgresIndexStore.from_params(
        name=pg_server.table_name("idx"), dimension=LEXICAL_DIM, **pg_server.params()
    )
    _OPENED.append(index)
    index.chunks.add(_embedded_worded(12))
    over_index = HybridFusionRetriever.from_postgres(
        index, embed_model=LexicalEmbedding(), retriever_weights=[0.5, 0.5]
    )
    assert over_index.calibration is None and over_index.retrieve("termination notice")
    with pytest.raises(TypeError, match="PostgresLevelStore or a PostgresIndexStore, not ColumnarVectorStore"):
        HybridFusionRetriever.from_postgres(ColumnarVectorStore(tokenizer=MultilingualTokenizer()))


def test_sample_nodes_picks_about_that_many_rows_the_same_for_a_seed(pg_server):
    level = _level(pg_server, tokenizer=MultilingualTokenizer())
    level.add(make_worded(3000))
    first = [n.node_id for n in level.sample_nodes(100, seed=1)]
    assert 50 <= len(first) <= 100 and len(set(first)) == len(first)
    assert [n.node_id for n in level.sample_nodes(100, seed=1)] == first
    assert [n.node_id for n in level.sample_nodes(100, seed=2)] != first
    order = {f"n{i}": i for i in range(3000)}
    assert first == sorted(first, key=order.get)  # in the order added
    assert len(level.sample_nodes(5000)) == 3000  # fewer rows than asked: all of them


def test_a_bm25_search_in_sql_runs_with_the_work_memory_its_sums_need(pg_server):
    # PostgreSQL's default work_mem spilled the sums by row to disk at 2M chunks (186k rows
    # matched: 291 of 326 ms); each BM25 statement that sums in SQL (routed, or restricted to
    # node ids) runs in a transaction with more
    store = _level(pg_server, tokenizer=MultilingualTokenizer())
    store.add(make_worded(30))
    seen = []

    def after(conn, cursor, statement, *_):
        if "weights" in statement:  # the BM25 statements that sum in SQL
            with cursor.connection.cursor() as check:
                check.execute("SHOW work_mem")
                seen.append(check.fetchone()[0])

    event.listen(store.client, "after_cursor_execute", after)
    routed = MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value="doc1")])
    for filters in (None, routed):  # the whole level (scored in the client), then in SQL
        store.query_ids(VectorStoreQuery(query_str="termination notice", filters=filters, mode="text_search"))
    store.query_ids(VectorStoreQuery(query_str="termination notice", node_ids=["n1", "n2"], mode="text_search"))
    assert seen == [f"{pg_level.BM25_WORK_MEM_MB}MB"] * 2
    with store.client.connect() as conn:  # the setting ends with the search's transaction
        assert conn.exec_driver_sql("SHOW work_mem").scalar_one() == "4MB"


def test_a_whole_level_bm25_search_past_the_statement_timeout_is_a_timeout_error_then_answers(pg_server):
    # the search reads its packed postings by COPY, past SQLAlchemy: its timeout must still be the
    # package's error, and the store must answer once the server does
    from llama_index_ext_recursive.stores.postgres import PostgresTimeoutError

    store = _level(pg_server, tokenizer=MultilingualTokenizer(), statement_timeout=1)
    store.add(make_worded(30))
    query = VectorStoreQuery(query_str="termination notice", similarity_top_k=3, mode="text_search")
    expected = store.query_ids(query)
    assert expected[0]
    with store.client.connect() as holder:  # another session holds the segments until it ends
        holder.exec_driver_sql(f'LOCK TABLE "public"."{store.name}_segments" IN ACCESS EXCLUSIVE MODE')
        with pytest.raises(PostgresTimeoutError, match="statement_timeout=1 s"):
            store.query_ids(query)
        holder.rollback()
    assert store.query_ids(query) == expected
