"""NumpyVectorStore answers exactly as upstream SimpleVectorStore does."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from llama_index_ext_recursive import NumpyVectorStore

CATEGORIES = ["food", "biology", "energy", "history"]


def random_nodes(count=400, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    nodes = []
    for i in range(count):
        node = TextNode(
            id_=f"n{i}",
            text=f"text {i}",
            embedding=list(rng.standard_normal(dim)),
            metadata={"category": CATEGORIES[i % 4], "year": 2015 + i % 10, "tags": ["a", "b"][: i % 3]},
        )
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=f"doc{i % 20}")
        nodes.append(node)
    return nodes


FILTERS = [
    None,
    MetadataFilters(filters=[MetadataFilter(key="category", value="food")]),
    MetadataFilters(filters=[MetadataFilter(key="ref_doc_id", value="doc3")]),
    MetadataFilters(filters=[
        MetadataFilter(key="category", value=["food", "energy"], operator=FilterOperator.IN),
        MetadataFilter(key="year", value=2019, operator=FilterOperator.GTE),
    ]),
    MetadataFilters(condition=FilterCondition.OR, filters=[
        MetadataFilter(key="category", value="history"),
        MetadataFilter(key="year", value=2016, operator=FilterOperator.LT),
    ]),
    MetadataFilters(condition=FilterCondition.NOT, filters=[MetadataFilter(key="category", value="food")]),
    MetadataFilters(filters=[MetadataFilter(key="tags", value="b", operator=FilterOperator.CONTAINS)]),
    MetadataFilters(filters=[MetadataFilter(key="category", value="nothing")]),
]


@pytest.mark.parametrize("filters", FILTERS)
@pytest.mark.parametrize("top_k", [1, 10, 1000])
def test_same_top_k_and_scores_as_simple_vector_store(filters, top_k):
    nodes = random_nodes()
    ours, upstream = NumpyVectorStore(), SimpleVectorStore()
    ours.add(nodes)
    upstream.add(nodes)
    rng = np.random.default_rng(1)
    for _ in range(5):
        query = VectorStoreQuery(query_embedding=list(rng.standard_normal(16)), similarity_top_k=top_k, filters=filters)
        expected, got = upstream.query(query), ours.query(query)
        assert got.ids == expected.ids
        np.testing.assert_allclose(got.similarities, expected.similarities, atol=1e-6)


def test_node_ids_restriction_matches_upstream():
    nodes = random_nodes(50)
    ours, upstream = NumpyVectorStore(), SimpleVectorStore()
    ours.add(nodes)
    upstream.add(nodes)
    query = VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=5, node_ids=["n1", "n7", "n9", "n30"])
    assert ours.query(query).ids == upstream.query(query).ids


def test_nested_filters_are_supported():
    store = NumpyVectorStore()
    store.add(random_nodes(100))
    nested = MetadataFilters(filters=[
        MetadataFilter(key="ref_doc_id", value="doc1"),
        MetadataFilters(condition=FilterCondition.OR, filters=[
            MetadataFilter(key="year", value=2016), MetadataFilter(key="year", value=2021)]),
    ])
    result = store.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=100, filters=nested))
    expected = {f"n{i}" for i in range(100) if i % 20 == 1 and 2015 + i % 10 in (2016, 2021)}
    assert set(result.ids) == expected and expected


def test_updates_are_seen_by_the_next_query():
    store = NumpyVectorStore()
    nodes = random_nodes(30)
    store.add(nodes[:20])
    query = VectorStoreQuery(query_embedding=nodes[25].embedding, similarity_top_k=1)
    assert store.query(query).ids != ["n25"]
    store.add(nodes[20:])
    assert store.query(query).ids == ["n25"]
    store.delete_nodes(["n25"])
    assert store.query(query).ids != ["n25"]
    store.delete("doc5")
    assert all(int(i[1:]) % 20 != 5 for i in store.query(VectorStoreQuery(query_embedding=[1.0] * 16, similarity_top_k=100)).ids)
    store.clear()
    assert store.query(query).ids == []


def test_persistence_format_is_simple_vector_stores(tmp_path):
    store = NumpyVectorStore()
    store.add(random_nodes(40))
    path = str(tmp_path / "vector_store.json")
    store.persist(path)
    upstream = SimpleVectorStore.from_persist_path(path)
    reloaded = NumpyVectorStore.from_persist_path(path)
    query = VectorStoreQuery(query_embedding=[0.5] * 16, similarity_top_k=7)
    assert reloaded.query(query).ids == upstream.query(query).ids == store.query(query).ids
