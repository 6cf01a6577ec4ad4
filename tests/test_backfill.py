"""BackfillVectorRetriever on real stores (FAISS, SimpleVectorStore, ours, Chroma).

Every upstream failure of section D (stale ids, ids-only stores, FAISS
filters, the mutated QueryBundle, IndexNode objects) is a test here. Vectors
are synthetic (pure store logic); the stores are the real libraries.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable

import faiss
import numpy as np
import pytest
from conftest import FixedEmbedding
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import IndexNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from llama_index.vector_stores.faiss import FaissMapVectorStore, FaissVectorStore

from llama_index_ext_recursive import (
    BackfillVectorRetriever,
    FilteredQueryBundle,
    NumpyVectorStore,
    StaleIdError,
)
from llama_index_ext_recursive.filters import metadata_matches

DIM = 16


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def make_nodes(n: int, seed: int = 0) -> list[TextNode]:
    rng = np.random.default_rng(seed)
    return [
        TextNode(
            id_=f"n{i}",
            text=f"chunk number {i}",
            embedding=list(unit(rng.normal(size=DIM))),
            metadata={"group": f"g{i % 5}", "year": 2000 + i % 7},
        )
        for i in range(n)
    ]


def query_vector(seed: int = 99) -> list[float]:
    return list(unit(np.random.default_rng(seed).normal(size=DIM)))


def brute_force(nodes, q, k, filters=None, exclude=()):
    scored = [
        (float(np.dot(n.embedding, q)), n.node_id)
        for n in nodes
        if n.node_id not in exclude and (filters is None or metadata_matches(filters, n.metadata))
    ]
    scored.sort(key=lambda s: (-s[0], s[1]))
    return scored[:k]


def faiss_map_store() -> FaissMapVectorStore:
    return FaissMapVectorStore(faiss_index=faiss.IndexIDMap(faiss.IndexFlatIP(DIM)))


def faiss_row_store() -> FaissVectorStore:
    return FaissVectorStore(faiss_index=faiss.IndexFlatIP(DIM))


STORES: dict[str, Callable] = {
    "faiss-map": faiss_map_store,
    "faiss": faiss_row_store,
    "simple": SimpleVectorStore,
    "numpy": NumpyVectorStore,
}


def build_index(store_name: str, nodes) -> VectorStoreIndex:
    storage = StorageContext.from_defaults(vector_store=STORES[store_name]())
    return VectorStoreIndex(nodes, storage_context=storage, embed_model=FixedEmbedding())


def pairs(results: list[NodeWithScore]):
    return [(round(float(r.score), 5), r.node.node_id) for r in results]


def rounded(expected):
    return [(round(s, 5), i) for s, i in expected]


# -- D1: stale ids -------------------------------------------------------------


@pytest.mark.parametrize("store", list(STORES))
def test_three_stale_of_ten_skip_and_the_other_seven_keep_their_scores(store, caplog):
    nodes = make_nodes(10)
    index = build_index(store, nodes)
    stale = ["n1", "n4", "n7"]
    for node_id in stale:
        index.docstore.delete_document(node_id)
    q = query_vector()
    upstream = index.as_retriever(similarity_top_k=10)
    with pytest.raises(KeyError):
        upstream.retrieve(QueryBundle("q", embedding=q))  # upstream loses every hit

    retriever = BackfillVectorRetriever(index, similarity_top_k=10)
    with caplog.at_level(logging.WARNING, logger="llama_index_ext_recursive.retrievers.vector"):
        results = retriever.retrieve(QueryBundle("q", embedding=q))
    assert pairs(results) == rounded(brute_force(nodes, q, 10, exclude=stale))
    assert len(results) == 7
    assert retriever.stale_ids_skipped == 3
    assert any("n4" in r.getMessage() for r in caplog.records)

    strict = BackfillVectorRetriever(index, similarity_top_k=10, stale_policy="raise")
    with pytest.raises(StaleIdError, match="3 id\\(s\\)"):
        strict.retrieve(QueryBundle("q", embedding=q))


@pytest.mark.parametrize("store", list(STORES))
def test_stale_ids_are_replaced_by_the_next_valid_hits(store):
    nodes = make_nodes(40)
    index = build_index(store, nodes)
    q = query_vector()
    top = [node_id for _, node_id in brute_force(nodes, q, 10)]
    stale = top[:3]
    for node_id in stale:
        index.docstore.delete_document(node_id)
    results = BackfillVectorRetriever(index, similarity_top_k=10).retrieve(QueryBundle("q", embedding=q))
    assert pairs(results) == rounded(brute_force(nodes, q, 10, exclude=stale))


# -- D2: ids-only stores without nodes_dict -------------------------------------


@pytest.mark.parametrize("store", ["faiss-map", "simple", "numpy"])
def test_from_vector_store_over_a_populated_ids_only_store(store):
    nodes = make_nodes(30)
    built = build_index(store, nodes)
    vector_store, docstore = built.vector_store, built.docstore
    with pytest.raises(ValueError, match="does not store text"):
        VectorStoreIndex.from_vector_store(vector_store)
    rebuilt = VectorStoreIndex(
        nodes=[],
        storage_context=StorageContext.from_defaults(vector_store=vector_store, docstore=docstore),
        embed_model=FixedEmbedding(),
    )
    q = query_vector()
    try:  # upstream: silently nothing (SimpleVectorStore) or KeyError (FAISS)
        assert rebuilt.as_retriever(similarity_top_k=5).retrieve(QueryBundle("q", embedding=q)) == []
    except KeyError:
        pass

    expected = rounded(brute_force(nodes, q, 5))
    ours = BackfillVectorRetriever.from_vector_store(
        vector_store, docstore=docstore, embed_model=FixedEmbedding(), similarity_top_k=5
    )
    assert pairs(ours.retrieve(QueryBundle("q", embedding=q))) == expected
    assert (
        pairs(BackfillVectorRetriever(rebuilt, similarity_top_k=5).retrieve(QueryBundle("q", embedding=q))) == expected
    )


def test_ids_only_store_without_docstore_or_row_mapping_is_a_clear_error():
    nodes = make_nodes(5)
    built = build_index("faiss", nodes)
    with pytest.raises(ValueError, match="pass docstore="):
        BackfillVectorRetriever.from_vector_store(built.vector_store, embed_model=FixedEmbedding())
    with pytest.raises(ValueError, match="FaissMapVectorStore"):
        BackfillVectorRetriever.from_vector_store(
            built.vector_store, docstore=built.docstore, embed_model=FixedEmbedding()
        )
    # loaded the upstream way, nodes_dict maps FAISS rows to node ids
    q = query_vector()
    results = BackfillVectorRetriever(built, similarity_top_k=3).retrieve(QueryBundle("q", embedding=q))
    assert pairs(results) == rounded(brute_force(nodes, q, 3))


# -- D3: filters on stores that cannot filter ------------------------------------

FILTERS = {
    "eq": MetadataFilters(filters=[MetadataFilter(key="group", value="g3")]),
    "in": MetadataFilters(filters=[MetadataFilter(key="group", value=["g1", "g2"], operator=FilterOperator.IN)]),
    "gt-and": MetadataFilters(
        filters=[
            MetadataFilter(key="year", value=2004, operator=FilterOperator.GT),
            MetadataFilter(key="group", value="g0", operator=FilterOperator.NE),
        ]
    ),
    "nested-or": MetadataFilters(
        filters=[
            MetadataFilter(key="year", value=2001),
            MetadataFilters(filters=[MetadataFilter(key="group", value="g4")]),
        ],
        condition=FilterCondition.OR,
    ),
    "rare": MetadataFilters(
        filters=[
            MetadataFilter(key="group", value="g2"),
            MetadataFilter(key="year", value=2006),
        ]
    ),
}


@pytest.mark.parametrize("name", list(FILTERS))
@pytest.mark.parametrize("store", ["faiss-map", "faiss"])
def test_filtered_faiss_equals_brute_force(store, name):
    nodes = make_nodes(200)
    index = build_index(store, nodes)
    filters = FILTERS[name]
    q = query_vector()
    with pytest.raises(ValueError, match="not implemented for Faiss"):
        index.as_retriever(filters=filters).retrieve(QueryBundle("q", embedding=q))
    retriever = BackfillVectorRetriever(index, similarity_top_k=10, filters=filters)
    results = retriever.retrieve(QueryBundle("q", embedding=q))
    assert pairs(results) == rounded(brute_force(nodes, q, 10, filters))
    assert all(metadata_matches(filters, r.node.metadata) for r in results)
    # per call, through a FilteredQueryBundle, the same
    plain = BackfillVectorRetriever(index, similarity_top_k=10)
    assert pairs(plain.retrieve(FilteredQueryBundle("q", filters=filters, embedding=q))) == pairs(results)


def test_fewer_matches_than_k_returns_every_match():
    nodes = make_nodes(100)
    index = build_index("faiss-map", nodes)
    filters = FILTERS["rare"]
    matching = [n for n in nodes if metadata_matches(filters, n.metadata)]
    assert 0 < len(matching) < 10
    results = BackfillVectorRetriever(index, similarity_top_k=10, filters=filters).retrieve(
        QueryBundle("q", embedding=query_vector())
    )
    assert {r.node.node_id for r in results} == {n.node_id for n in matching}


# -- D4: the caller's QueryBundle ------------------------------------------------


def test_query_bundle_is_not_mutated_and_two_embedding_sizes_share_it():
    small = VectorStoreIndex(make_nodes(5), embed_model=FixedEmbedding(dim=DIM))
    big_nodes = [TextNode(id_=f"b{i}", text=f"big {i}") for i in range(5)]
    big = VectorStoreIndex(big_nodes, embed_model=FixedEmbedding(dim=32))
    bundle = QueryBundle("chunk number 3")
    upstream_bundle = QueryBundle("chunk number 3")
    small.as_retriever().retrieve(upstream_bundle)
    assert upstream_bundle.embedding is not None  # upstream wrote into it
    with pytest.raises(ValueError):
        big.as_retriever().retrieve(upstream_bundle)

    first = BackfillVectorRetriever(small, similarity_top_k=2).retrieve(bundle)
    second = BackfillVectorRetriever(big, similarity_top_k=2).retrieve(bundle)
    assert bundle.embedding is None
    assert len(first) == 2 and len(second) == 2


# -- IndexNode objects -------------------------------------------------------------


class Answer(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(id_="inner", text="from the linked retriever"), score=1.0)]


def chroma_store():
    import chromadb
    from llama_index.vector_stores.chroma import ChromaVectorStore

    client = chromadb.EphemeralClient(settings=chromadb.config.Settings(anonymized_telemetry=False))
    collection = client.get_or_create_collection(f"t{uuid.uuid4().hex}", metadata={"hnsw:space": "cosine"})
    return ChromaVectorStore(chroma_collection=collection)


@pytest.mark.parametrize("store", ["faiss-map", "numpy", "chroma"])
def test_index_nodes_keep_their_objects(store):
    link = IndexNode(id_="link", text="linked", index_id="answer", obj=Answer(), embedding=list(unit(np.ones(DIM))))
    vector_store = chroma_store() if store == "chroma" else STORES[store]()
    index = VectorStoreIndex(  # upstream's way: objects= keeps the object out of the store
        make_nodes(5),
        objects=[link],
        storage_context=StorageContext.from_defaults(vector_store=vector_store),
        embed_model=FixedEmbedding(),
    )
    q = list(unit(np.ones(DIM)))
    from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever

    upstream = VectorIndexRetriever(index, similarity_top_k=1).retrieve(QueryBundle("q", embedding=q))
    assert [r.node.node_id for r in upstream] == ["link"]  # recursion stopped at the IndexNode
    results = BackfillVectorRetriever(index, similarity_top_k=1).retrieve(QueryBundle("q", embedding=q))
    assert [r.node.node_id for r in results] == ["inner"]


# -- stores that keep text ----------------------------------------------------------


def test_chroma_keeps_text_and_filters_in_the_store():
    nodes = make_nodes(60)
    index = VectorStoreIndex(
        nodes,
        storage_context=StorageContext.from_defaults(vector_store=chroma_store()),
        embed_model=FixedEmbedding(),
    )
    retriever = BackfillVectorRetriever(index, similarity_top_k=5, filters={"group": "g2"})
    assert retriever.filter_in_store
    q = query_vector()
    results = retriever.retrieve(QueryBundle("q", embedding=q))
    expected = brute_force(
        nodes, q, 5, FILTERS["in"].model_copy(update={"filters": [MetadataFilter(key="group", value="g2")]})
    )
    assert [r.node.node_id for r in results] == [i for _, i in expected]
    assert all(r.node.text.startswith("chunk number") for r in results)


# -- sync and async ------------------------------------------------------------------


@pytest.mark.parametrize("store", ["faiss-map", "numpy"])
async def test_async_equals_sync_and_runs_the_search_off_the_loop(store, monkeypatch):
    nodes = make_nodes(50)
    index = build_index(store, nodes)
    retriever = BackfillVectorRetriever(index, similarity_top_k=10, filters=FILTERS["in"])
    index.docstore.delete_document("n1")
    q = query_vector()
    sync = pairs(retriever.retrieve(QueryBundle("q", embedding=q)))
    threads = []
    original = type(index.vector_store).query

    def spy(self, *args, **kwargs):
        threads.append(threading.current_thread() is threading.main_thread())
        return original(self, *args, **kwargs)

    monkeypatch.setattr(type(index.vector_store), "query", spy)
    results = await retriever.aretrieve(QueryBundle("q", embedding=q))
    assert pairs(results) == sync
    assert threads and not any(threads)  # never on the event loop's thread
    both = await asyncio.gather(
        retriever.aretrieve(QueryBundle("q", embedding=q)), retriever.aretrieve(QueryBundle("q", embedding=q))
    )
    assert [pairs(r) for r in both] == [sync, sync]


# -- the recursive retriever on real stores ---------------------------------------


@pytest.mark.parametrize("store", ["faiss-map", "chroma"])
def test_recursive_retriever_runs_on_real_stores(lexical, store, tmp_path):
    from conftest import topic_nodes

    from llama_index_ext_recursive import RecursiveSummaryRetriever

    def new_store():
        return chroma_store() if store == "chroma" else faiss.IndexIDMap(faiss.IndexFlatIP(64))

    def wrap(raw):
        return raw if store == "chroma" else FaissMapVectorStore(faiss_index=raw)

    default = RecursiveSummaryRetriever.from_nodes(topic_nodes(), embed_model=lexical, similarity_top_k=4)
    on_store = RecursiveSummaryRetriever.from_nodes(
        topic_nodes(),
        embed_model=lexical,
        similarity_top_k=4,
        chunk_vector_store=wrap(new_store()),
        summary_vector_store=wrap(new_store()),
    )
    for query in ("queen bee hive", "sourdough starter yeast", "inverter current"):
        expected = default.retrieve(query)
        got = on_store.retrieve(query)
        assert [n.node.node_id for n in got] == [n.node.node_id for n in expected]
        if store != "chroma":  # Chroma reports exp(-distance), a different scale
            assert [round(n.score, 5) for n in got] == [round(n.score, 5) for n in expected]
    filtered = on_store.retrieve(FilteredQueryBundle("queen bee sunlight", filters={"category": "energy"}))
    assert filtered and {n.node.metadata["category"] for n in filtered} == {"energy"}
    with pytest.raises(NotImplementedError, match="keeps its own data"):
        on_store.persist(tmp_path / "idx")
