"""retrievers.store_bm25: BM25 answered by a ColumnarVectorStore's keyword column ranks as
MultilingualBM25Retriever on the same nodes, through the retriever contract (sync, async,
per-call filters and top_k, unknown filter keys named), and follows the store's updates."""

import asyncio

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

from llama_index_ext_recursive import FilteredQueryBundle
from llama_index_ext_recursive.filters import FilterError
from llama_index_ext_recursive.retrievers.bm25 import MultilingualBM25Retriever
from llama_index_ext_recursive.retrievers.store_bm25 import StoreBM25Retriever
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

TEXTS = [
    "the tenant gives notice of termination",
    "notice periods in employment contracts",
    "终止合同需要提前通知",
    "the landlord keeps the deposit",
    "termination for breach without notice",
    "合同的保密条款",
]


def _nodes():
    rng = np.random.default_rng(0)
    return [
        TextNode(
            id_=f"n{i}",
            text=text,
            embedding=rng.normal(size=8).tolist(),
            metadata={"lang": "zh" if "合" in text else "en", "year": 2020 + i},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i % 2}")},
        )
        for i, text in enumerate(TEXTS)
    ]


def _both():
    store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    store.add(_nodes())
    return StoreBM25Retriever(store, similarity_top_k=3), MultilingualBM25Retriever(nodes=_nodes(), similarity_top_k=3)


def _hits(hits):
    return [(h.node.node_id, round(h.score, 5), h.node.text) for h in hits]


@pytest.mark.parametrize(
    "bundle",
    [
        FilteredQueryBundle("termination notice"),
        FilteredQueryBundle("合同终止", top_k=1),
        FilteredQueryBundle("notice", filters={"lang": "en", "year": {"op": ">=", "value": 2021}}),
        FilteredQueryBundle("notice", filters={"ref_doc_id": "doc0"}),
        FilteredQueryBundle("nothing here"),
    ],
)
def test_ranks_as_the_in_memory_bm25_sync_and_async(bundle):
    store_bm25, memory_bm25 = _both()
    expected = _hits(memory_bm25.retrieve(bundle))
    assert _hits(store_bm25.retrieve(bundle)) == expected
    assert _hits(asyncio.run(store_bm25.aretrieve(bundle))) == expected
    assert store_bm25.scores_by_id(bundle) == pytest.approx(memory_bm25.scores_by_id(bundle))


def test_it_follows_the_stores_updates_and_names_bad_filters():
    store_bm25, _ = _both()
    store_bm25.vector_store.delete("doc0")
    assert [h.node.node_id for h in store_bm25.retrieve("notice")] == ["n1"]
    with pytest.raises(FilterError, match="lang"):
        store_bm25.retrieve(FilteredQueryBundle("notice", filters={"langg": "en"}))


def test_a_store_without_a_keyword_column_is_refused_by_name():
    with pytest.raises(TypeError, match="tokenizer=MultilingualTokenizer"):
        StoreBM25Retriever(ColumnarVectorStore())
