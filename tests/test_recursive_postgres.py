"""A summary index whose two levels are PostgresLevelStores (issue 27) answers as the default
storage: the same chunks, scores, documents and explanations in every score mode, sync and async,
with per-call filters, after adds, replacements and deletes; its levels search the database
(dense and BM25) and its docstores are views of the stores.

Against the real server of the ``pg_server`` fixture."""

import asyncio

import pytest
from recursive_cases import (
    MODES,
    NoTieEmbedding,
    async_recursive_answers,
    chunk_parser,
    make_documents,
    recursive_answers,
    same_answers,
)

from llama_index_ext_recursive import RecursiveSummaryRetriever
from llama_index_ext_recursive.recursive.index import SummaryIndex
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
    default = SummaryIndex.from_documents(make_documents(), embed_model=embedding, node_parser=parser)
    dimension = len(embedding.get_text_embedding("probe"))
    in_database = SummaryIndex.from_documents(
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
