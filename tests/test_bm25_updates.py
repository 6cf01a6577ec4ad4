"""BM25 updated by the changed documents only (issue 23): a delta segment and removed rows, compacted
by a rebuild that gives exactly a fresh build's scores."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from llama_index.core import Document
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_ext_recursive import MultilingualBM25Retriever, RecursiveSummaryRetriever
from llama_index_ext_recursive.retrievers.bm25 import COMPACT_SHARE

WORDS = [f"w{i}" for i in range(300)]
QUERIES = ["w1 w5 w9", "w100 w7", "w42", "w3 w250 w17 w8"]


def _nodes(count: int, prefix: str, seed: int):
    rng = np.random.default_rng(seed)
    return [TextNode(id_=f"{prefix}{i}", text=" ".join(rng.choice(WORDS, 40))) for i in range(count)]


def _ranking(retriever, query, digits=4):
    return [(h.node.node_id, round(h.score, digits)) for h in retriever.retrieve(query)]


@pytest.fixture(scope="module")
def base():
    return MultilingualBM25Retriever.from_defaults(nodes=_nodes(400, "n", 0), similarity_top_k=10)


def test_an_update_removes_rows_adds_a_delta_and_leaves_the_original_as_it_was(base):
    added = _nodes(5, "x", 1)
    before = {q: _ranking(base, q) for q in QUERIES}
    updated = base.with_changes(added, ["n3", "n7"])
    fresh = MultilingualBM25Retriever.from_defaults(
        nodes=[n for n in base.nodes if n.node_id not in ("n3", "n7")] + added, similarity_top_k=10
    )
    for query in QUERIES:
        got = [node_id for node_id, _ in _ranking(updated, query)]
        assert not {"n3", "n7"} & set(got)
        # the delta is scored with the index's statistics: close to a fresh build's
        np.testing.assert_allclose([s for _, s in _ranking(updated, query)], [s for _, s in _ranking(fresh, query)],
                                   rtol=0.05)
        assert _ranking(updated.compacted(), query) == _ranking(fresh, query)  # compaction is exact
        assert _ranking(base, query) == before[query]
    # an added node's own words find it
    assert updated.retrieve(added[0].get_content())[0].node.node_id == "x0"
    assert asyncio.run(updated.aretrieve("w1 w5 w9")) and [h.node.node_id for h in asyncio.run(
        updated.aretrieve("w1 w5 w9"))] == [h.node.node_id for h in updated.retrieve("w1 w5 w9")]


def test_changes_past_the_compaction_share_are_indexed_again_exactly(base):
    many = _nodes(int(COMPACT_SHARE * len(base.nodes)) + 1, "y", 2)
    updated = base.with_changes(many, [])
    fresh = MultilingualBM25Retriever.from_defaults(nodes=list(base.nodes) + many, similarity_top_k=10)
    assert not updated._delta and updated._dead is None
    for query in QUERIES:
        assert _ranking(updated, query) == _ranking(fresh, query)


def test_chained_updates_replace_a_node_and_refuse_unknown_or_clashing_ids(base):
    replaced = TextNode(id_="n10", text="w299 w298 w297")
    updated = base.with_changes([], ["n10"]).with_changes([replaced], [])
    assert updated.retrieve("w299 w298")[0].node.get_content() == "w299 w298 w297"
    with pytest.raises(ValueError, match="cannot remove \\['nope'\\]"):
        base.with_changes([], ["nope"])
    with pytest.raises(ValueError, match="indexed already"):
        base.with_changes([TextNode(id_="n1", text="w1")], [])


def test_a_persisted_updated_retriever_writes_its_compacted_index(base, tmp_path):
    updated = base.with_changes(_nodes(3, "z", 3), ["n0"])
    updated.persist(tmp_path / "bm25")
    loaded = MultilingualBM25Retriever.from_persist_dir(tmp_path / "bm25")
    for query in QUERIES:
        assert _ranking(loaded, query) == _ranking(updated.compacted(), query)


def _docs(count: int, seed: int, start: int = 0):
    rng = np.random.default_rng(seed)
    return [Document(text=" ".join(rng.choice(WORDS, 60)) + ".", doc_id=f"doc-{i}") for i in range(start, start + count)]


def test_the_recursive_retriever_updates_its_levels_with_the_changed_documents_only(lexical, tmp_path):
    docs = _docs(40, 4)
    retriever = RecursiveSummaryRetriever.from_documents(docs, embed_model=lexical, similarity_top_k=5)
    retriever.retrieve("w1 w2")
    full = retriever._built
    added = _docs(1, 5, start=100)
    retriever.add_documents(added)
    retriever.delete_document("doc-3")
    hits = retriever.retrieve(added[0].text)
    assert hits[0].node.ref_doc_id == "doc-100"
    updated = retriever._built
    # the BM25 levels were updated, not rebuilt: they share the first build's index
    assert updated.chunk_bm25.bm25 is full.chunk_bm25.bm25 and updated.summary_bm25.bm25 is full.summary_bm25.bm25
    final = [d for d in docs if d.doc_id != "doc-3"] + added
    fresh = RecursiveSummaryRetriever.from_documents(final, embed_model=lexical, similarity_top_k=5)
    for query in QUERIES + [added[0].text]:
        got = retriever.retrieve(query)
        assert all(h.node.ref_doc_id != "doc-3" for h in got)
        assert [h.node.node_id for h in asyncio.run(retriever.aretrieve(query))] == [h.node.node_id for h in got]
        assert {h.node.ref_doc_id for h in got[:3]} & {h.node.ref_doc_id for h in fresh.retrieve(query)[:3]}
    # persisted and loaded, the BM25 levels are built from the nodes: the compacted levels' scores exactly
    retriever.persist(tmp_path / "idx")
    loaded = RecursiveSummaryRetriever.from_persist_dir(tmp_path / "idx", embed_model=lexical)
    loaded.retrieve("w1")
    for level in ("chunk_bm25", "summary_bm25"):
        ours, theirs = getattr(retriever._built, level).compacted(), getattr(loaded._built, level)
        for query in QUERIES:
            assert {k: round(v, 5) for k, v in ours.scores_by_id(QueryBundle(query), top_k=50).items()} == {
                k: round(v, 5) for k, v in theirs.scores_by_id(QueryBundle(query), top_k=50).items()
            }
