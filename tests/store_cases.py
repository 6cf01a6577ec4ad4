"""Cases every vector store of a recursive level answers alike (the columnar store, the
PostgreSQL level store): nodes, a sequence of changes, dense and BM25 queries under filters, and
the answers of the references they are checked against."""

import numpy as np
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters, VectorStoreQuery

DIM = 8


def make_nodes(count, seed=0, prefix="n"):
    rng = np.random.default_rng(seed)
    return [
        TextNode(
            id_=f"{prefix}{i}",
            text=f"text {prefix}{i}",
            embedding=rng.normal(size=DIM).tolist(),
            metadata={"kind": ["a", "b", "c"][i % 3], "year": 2000 + i % 5},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i // 4}")},
        )
        for i in range(count)
    ]


QUERY_VECTORS = np.random.default_rng(99).normal(size=(5, DIM)).tolist()
FILTERS = [
    None,
    MetadataFilters(filters=[MetadataFilter(key="kind", value="a")]),
    MetadataFilters(filters=[MetadataFilter(key="year", value=2002, operator=FilterOperator.GTE)]),
    # a search routed to two documents, as the recursive retriever asks it, nested under an AND
    MetadataFilters(
        filters=[
            MetadataFilter(key="ref_doc_id", value=["doc1", "doc5"], operator=FilterOperator.IN),
            MetadataFilters(filters=[MetadataFilter(key="kind", value="c", operator=FilterOperator.NE)]),
        ]
    ),
]


def dense_answers(store):
    answers = []
    for vector in QUERY_VECTORS:
        for filters in FILTERS:
            result = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=5, filters=filters))
            answers.append((result.ids, np.round(result.similarities, 5).tolist()))
        result = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=3, node_ids=DOCS_1_AND_3))
        answers.append((result.ids, np.round(result.similarities, 5).tolist()))
    return answers


DOCS_1_AND_3 = [f"n{i}" for i in (4, 5, 6, 7, 12, 13, 14, 15)]


def apply_changes(store):
    store.add(make_nodes(30))
    store.delete("doc2")
    store.delete_nodes(["n5", "n17"])
    store.add(make_nodes(3, seed=5))  # replaces n0, n1, n2
    return store


WORDS = ["contract", "termination", "notice", "party", "confidential", "合同", "终止", "通知", "保密", "court"]
LEXICAL_QUERIES = ["termination notice", "合同终止", "confidential party court", "nothing matches xyzzy", "保密 notice"]


def make_worded(count, seed=0, prefix="n"):
    rng = np.random.default_rng(seed + 1000)
    nodes = make_nodes(count, seed, prefix)
    for node in nodes:
        node.text = " ".join(rng.choice(WORDS, size=int(rng.integers(3, 12))))
    return nodes


def apply_worded_changes(store):
    """_changed's sequence of changes, on worded nodes; returns the live nodes in row order."""
    live = {n.node_id: n for n in make_worded(30)}
    store.add(list(live.values()))
    store.delete("doc2")
    store.delete_nodes(["n5", "n17"])
    for node_id in [n for n, node in live.items() if node.ref_doc_id == "doc2"] + ["n5", "n17"]:
        live.pop(node_id, None)
    again = make_worded(3, seed=5)  # replaces n0, n1, n2, which move to the end
    store.add(again)
    for node in again:
        live.pop(node.node_id)
        live[node.node_id] = node
    return list(live.values())


def lexical_answers(store):
    answers = []
    for text in LEXICAL_QUERIES:
        for filters in FILTERS:
            query = VectorStoreQuery(query_str=text, similarity_top_k=6, filters=filters, mode="text_search")
            ids, scores = store.query_ids(query)
            answers.append((ids, np.round(scores, 4).tolist()))
    return answers


def bm25_reference_answers(live):
    from llama_index_ext_recursive.query import FilteredQueryBundle
    from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever

    bm25 = MultilingualBM25Retriever(nodes=live, similarity_top_k=6, unknown_filter_key=None)
    answers = []
    for text in LEXICAL_QUERIES:
        for filters in FILTERS:
            found = bm25.scores_by_id(FilteredQueryBundle(text, filters=filters))
            answers.append((list(found), np.round(list(found.values()), 4).tolist()))
    return answers
