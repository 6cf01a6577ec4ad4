"""stores.columnar_store: the columnar store answers as NumpyVectorStore on the same nodes, queries,
filters, deletes and replacements, before and after persisting and reopening; it works as a
VectorStoreIndex's store; a persist that fails leaves the published index as it was."""

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery
from store_cases import (
    DIM,
    DOCS_1_AND_3,
    QUERY_VECTORS,
    apply_changes,
    apply_worded_changes,
    bm25_reference_answers,
    dense_answers,
    lexical_answers,
    make_nodes,
    make_worded,
)

from llama_index_ext_recursive.persist import PersistError
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore
from llama_index_ext_recursive.stores.numpy_store import NumpyVectorStore


def test_doc_ids_restrict_to_those_documents_nodes():
    """Upstream's SimpleVectorStore ignores doc_ids; database stores (pgvector) honour them, and so does this one."""
    store = apply_changes(ColumnarVectorStore())
    for vector in QUERY_VECTORS:
        by_doc = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=4, doc_ids=["doc1", "doc3"]))
        by_node = store.query(VectorStoreQuery(query_embedding=vector, similarity_top_k=4, node_ids=DOCS_1_AND_3))
        assert by_doc.ids == by_node.ids and len(by_doc.ids) == 4


def test_answers_equal_numpy_store_through_changes_persist_and_reopen(tmp_path):
    reference = dense_answers(apply_changes(NumpyVectorStore()))
    store = apply_changes(ColumnarVectorStore(tmp_path / "index"))
    assert dense_answers(store) == reference
    store.persist()
    assert dense_answers(store) == reference
    reopened = ColumnarVectorStore(tmp_path / "index")
    assert dense_answers(reopened) == reference
    hit = reopened.query(VectorStoreQuery(query_embedding=QUERY_VECTORS[0], similarity_top_k=1)).nodes[0]
    assert hit.text == f"text {hit.node_id}" and hit.ref_doc_id is not None and hit.embedding is None

    reopened.add(make_nodes(2, seed=7, prefix="m"))
    reopened.delete("doc4")
    reopened.persist()
    again = ColumnarVectorStore(tmp_path / "index")
    assert dense_answers(again) == dense_answers(reopened)
    assert again.node_count == reopened.node_count


def test_a_persist_that_fails_leaves_the_published_index_and_the_next_one_succeeds(tmp_path, monkeypatch):
    store = ColumnarVectorStore(tmp_path / "index")
    store.add(make_nodes(12))
    store.persist()
    published = dense_answers(ColumnarVectorStore(tmp_path / "index"))
    store.delete("doc0")
    store.add(make_nodes(2, seed=3))  # replaces n0, n1 (deleted above: now new rows)

    from llama_index_ext_recursive import persist as persist_module

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(persist_module, "write_file_atomically", fail)  # the manifest is never replaced
    with pytest.raises(OSError, match="disk full"):
        store.persist()
    monkeypatch.undo()
    assert dense_answers(ColumnarVectorStore(tmp_path / "index")) == published  # rows committed, then undone on read
    expected = dense_answers(store)
    store.persist()
    assert dense_answers(ColumnarVectorStore(tmp_path / "index")) == expected


def test_a_folder_published_by_another_writer_is_refused(tmp_path):
    first = ColumnarVectorStore(tmp_path / "index")
    first.add(make_nodes(4))
    first.persist()
    second = ColumnarVectorStore(tmp_path / "index")
    second.add(make_nodes(2, seed=1, prefix="s"))
    second.persist()
    first.add(make_nodes(2, seed=2, prefix="f"))
    with pytest.raises(PersistError, match="open the folder again"):
        first.persist()
    assert sorted(ColumnarVectorStore(tmp_path / "index")._row_of(["s0", "f0"]) >= 0) == [False, True]


def test_bad_input_is_named():
    store = ColumnarVectorStore()
    with pytest.raises(ValueError, match="no embedding"):
        store.add([TextNode(id_="x", text="x")])
    with pytest.raises(ValueError, match="twice"):
        store.add(make_nodes(1) + make_nodes(1))
    with pytest.raises(PersistError, match="persist_path"):
        store.persist()
    store.add(make_nodes(3))
    with pytest.raises(ValueError, match="width"):
        store.add([TextNode(id_="w", text="w", embedding=[1.0, 2.0])])
    assert store.node_count == 3


def test_a_vector_store_index_over_it_retrieves_full_nodes_and_reopens(tmp_path):
    from conftest import LexicalEmbedding
    from llama_index.core import StorageContext, VectorStoreIndex

    texts = ["bees make honey in the hive", "solar panels feed the inverter", "bread needs a sourdough starter"]
    store = ColumnarVectorStore(tmp_path / "index")
    index = VectorStoreIndex(
        [TextNode(id_=f"t{i}", text=text, metadata={"i": i}) for i, text in enumerate(texts)],
        storage_context=StorageContext.from_defaults(vector_store=store),
        embed_model=LexicalEmbedding(),
    )
    upstream = VectorStoreIndex(
        [TextNode(id_=f"t{i}", text=text, metadata={"i": i}) for i, text in enumerate(texts)],
        embed_model=LexicalEmbedding(),
    )
    for question in ("where do bees keep honey", "solar inverter", "sourdough bread"):
        hits = index.as_retriever(similarity_top_k=3).retrieve(question)
        expected = upstream.as_retriever(similarity_top_k=3).retrieve(question)
        assert [(h.node.node_id, h.node.text, h.node.metadata, round(h.score, 5)) for h in hits] == [
            (h.node.node_id, h.node.text, h.node.metadata, round(h.score, 5)) for h in expected
        ]
    index.storage_context.persist(str(tmp_path / "elsewhere"))  # the store publishes into its own folder
    reopened = VectorStoreIndex.from_vector_store(
        ColumnarVectorStore(tmp_path / "index"), embed_model=LexicalEmbedding()
    )
    question = "sourdough bread"
    assert [h.node.node_id for h in reopened.as_retriever(similarity_top_k=3).retrieve(question)] == [
        h.node.node_id for h in upstream.as_retriever(similarity_top_k=3).retrieve(question)
    ]


# ---------------------------------------------------------------- the BM25 column
def test_the_bm25_column_ranks_as_the_bm25_retriever_through_changes_persist_and_reopen(tmp_path):
    """Scores, order, ties and filters equal MultilingualBM25Retriever built on the live nodes,
    in the same order; the column follows deletes and replacements, and a reopened store keeps it
    and its tokenizer."""
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    store = ColumnarVectorStore(tmp_path / "index", tokenizer=MultilingualTokenizer())
    live = apply_worded_changes(store)
    reference = bm25_reference_answers(live)
    assert sum(len(ids) for ids, _ in reference) > 20  # the queries do find things
    assert lexical_answers(store) == reference
    store.persist()
    reopened = ColumnarVectorStore(tmp_path / "index")
    assert reopened.tokenizer == MultilingualTokenizer()
    assert lexical_answers(reopened) == reference
    # an update after reopening appends to the column: the new node is found by its words
    extra = make_worded(1, seed=9, prefix="x")[0]
    extra.text = "arbitration clause"
    reopened.add([extra])
    ids, _ = reopened.query_ids(VectorStoreQuery(query_str="arbitration", similarity_top_k=3, mode="text_search"))
    assert ids == ["x0"]


def test_lexical_texts_replace_what_the_column_indexes():
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    nodes = make_nodes(2)
    store.add(nodes, lexical_texts=["indemnity cap", "governing law"])
    ids, scores = store.query_ids(VectorStoreQuery(query_str="governing", similarity_top_k=5, mode="text_search"))
    assert ids == ["n1"] and scores[0] > 0
    nodes_found = store.query(VectorStoreQuery(query_str="indemnity", similarity_top_k=5, mode="text_search")).nodes
    assert [n.node_id for n in nodes_found] == ["n0"] and nodes_found[0].text == "text n0"
    tokenised = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    tokenised.add(make_nodes(2), lexical_tokens=[["indemn", "cap"], ["govern", "law"]])
    query = VectorStoreQuery(query_str="governing", similarity_top_k=5, mode="text_search")
    assert tokenised.query_ids(query) == (ids, scores)


def test_the_bm25_column_refuses_bad_use_by_name(tmp_path):
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    plain = ColumnarVectorStore(tmp_path / "plain")
    plain.add(make_nodes(3))
    with pytest.raises(ValueError, match="keeps no BM25 column"):
        plain.query(VectorStoreQuery(query_str="text", similarity_top_k=2, mode="text_search"))
    with pytest.raises(ValueError, match="keeps no BM25 column"):
        plain.add(make_nodes(1, prefix="m"), lexical_texts=["a"])
    plain.persist()
    with pytest.raises(PersistError, match="no BM25 column"):
        ColumnarVectorStore(tmp_path / "plain", tokenizer=MultilingualTokenizer())
    store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    with pytest.raises(ValueError, match="one text per node"):
        store.add(make_nodes(2), lexical_texts=["only one"])
    with pytest.raises(ValueError, match="one list of tokens per node"):
        store.add(make_nodes(2), lexical_tokens=["a", "b"])
    with pytest.raises(ValueError, match="not both"):
        store.add(make_nodes(1), lexical_texts=["a"], lexical_tokens=[["a"]])
    with pytest.raises(ValueError, match="lexical_tokens= was given, but this store keeps no BM25 column"):
        plain.add(make_nodes(1, prefix="m"), lexical_tokens=[["a"]])
    with pytest.raises(ValueError, match="needs query_str"):
        store.query(VectorStoreQuery(similarity_top_k=2, mode="text_search"))
    with pytest.raises(TypeError, match="MultilingualTokenizer"):
        ColumnarVectorStore(tokenizer=str.split)
    with pytest.raises(NotImplementedError, match="text_search"):
        store.query(VectorStoreQuery(query_embedding=[1.0] * DIM, similarity_top_k=2, mode="hybrid"))
    assert store.node_count == 0  # the refused add changed nothing


def test_a_refused_add_keeps_every_column_on_the_same_rows():
    """A node whose metadata cannot be stored is refused after its vector was appended: the columns
    stay row-aligned, so the next add's words and vector belong to the same node."""
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    store = ColumnarVectorStore(tokenizer=MultilingualTokenizer())
    bad = make_worded(2, prefix="bad")
    bad[1].metadata["score"] = float("nan")  # serialises as a node, but is no filterable value
    with pytest.raises(ValueError, match="not finite"):
        store.add(bad)
    assert store.node_count == 0
    good = make_worded(2, prefix="ok")
    good[0].text, good[1].text = "escrow account", "warranty period"
    store.add(good)
    ids, _ = store.query_ids(VectorStoreQuery(query_str="warranty", similarity_top_k=5, mode="text_search"))
    assert ids == ["ok1"]
    vector = store.query_ids(VectorStoreQuery(query_embedding=good[1].embedding, similarity_top_k=1))[0]
    assert vector == ["ok1"] and store.node_count == 2


def test_merging_segments_keeps_every_answer_and_is_refused_after_a_delete(tmp_path):
    """Each add appends a segment to every column; merging them (while no row was deleted, so no
    row id moves) leaves dense and keyword answers, pending rows and persistence as they were."""
    from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

    store = ColumnarVectorStore(tmp_path / "index", tokenizer=MultilingualTokenizer())
    nodes = make_worded(30)
    for start in range(0, 30, 5):
        store.add(nodes[start : start + 5])
    store.persist()
    store.add(make_worded(4, seed=3, prefix="p"))  # pending when merged
    before, lexical = dense_answers(store), lexical_answers(store)
    assert store._postings.segment_count == 7
    assert store.merge_segments()
    assert store._postings.segment_count == 1
    assert dense_answers(store) == before and lexical_answers(store) == lexical
    store.persist()
    reopened = ColumnarVectorStore(tmp_path / "index")
    assert dense_answers(reopened) == before and lexical_answers(reopened) == lexical
    reopened.delete_nodes(["n3"])
    assert not reopened.merge_segments()  # would renumber rows: store compaction's job


def test_filtered_answers_asked_again_after_each_change_see_that_change():
    # the columnar store caches filter masks: after every add, delete and replacement the
    # same filters must answer as NumpyVectorStore does on the changed nodes
    steps = [
        lambda s: s.add(make_nodes(12)),
        lambda s: s.add(make_nodes(30)[12:]),  # new rows, also of the kinds and years filtered on
        lambda s: s.delete("doc1"),  # a routed document's rows go
        lambda s: s.delete_nodes(["n8", "n21"]),
        lambda s: s.add(make_nodes(4, seed=7)),  # replaces n0..n3: their old rows become tombstones
    ]
    reference, store = NumpyVectorStore(), ColumnarVectorStore()
    for step in steps:
        step(reference)
        step(store)
        got, expected = dense_answers(store), dense_answers(reference)
        assert [ids for ids, _ in got] == [ids for ids, _ in expected]
        # float32 scores against NumpyVectorStore's: equal to rounding (one straddles a 5th decimal)
        for (_, scores), (_, wanted) in zip(got, expected, strict=True):
            np.testing.assert_allclose(scores, wanted, atol=2e-5)


def test_ref_doc_ids_answer_for_stored_pending_and_searched_nodes_through_changes(tmp_path):
    """The recursive retriever asks the store which document each hit belongs to (no map of
    every chunk): stored and pending rows answer, and a change is never answered from before it."""
    store = ColumnarVectorStore(tmp_path / "index")
    store.add(make_nodes(8))
    store.persist()
    store.add(make_nodes(2, seed=3, prefix="m"))  # pending: not persisted yet
    assert store.ref_doc_ids(["n0", "n5", "m1", "missing"]) == ["doc0", "doc1", "doc0", None]
    ids, _ = store.query_ids(VectorStoreQuery(query_embedding=QUERY_VECTORS[0], similarity_top_k=10))
    assert store.ref_doc_ids(ids) == [{"n": f"doc{int(i[1:]) // 4}", "m": "doc0"}[i[0]] for i in ids]
    moved = make_nodes(1)[0]
    moved.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id="doc9")
    store.add([moved])  # replaces n0 under another document
    store.delete("doc1")
    assert store.ref_doc_ids(ids) == [
        None if i in {"n4", "n5", "n6", "n7"} else "doc9" if i == "n0" else {"n": "doc0", "m": "doc0"}[i[0]]
        for i in ids
    ]


def test_changes_made_between_writing_a_part_and_its_publication_stay_pending(tmp_path):
    """A larger index writes the store as a part, publishes its manifest, then confirms
    (mark_published); another thread may add or delete in between. Those changes must be
    written by the next persist, not taken for written: a late add lost on reopen, or a
    deleted row that the published part had added coming back."""
    from llama_index_ext_recursive.persist import ROWS_DATABASE, published_generation, write_index
    from llama_index_ext_recursive.stores.columnar_store import KIND

    folder = tmp_path / "index"
    store = ColumnarVectorStore(folder)
    store.add(make_nodes(12))
    with write_index(folder, KIND, carry_over=True) as staging:
        published = published_generation(folder)
        store.write_part(staging, folder / ROWS_DATABASE, published)
        store.add(make_nodes(2, seed=4, prefix="late"))  # after the part was written
        store.delete("doc1")  # n4..n7, which the part wrote as added
    store.mark_published(published + 1)
    expected = dense_answers(store)
    store.persist()
    reopened = ColumnarVectorStore(folder)
    assert dense_answers(reopened) == expected
    wanted = ["late0", "late1", "n4", "n7", "n8"]
    assert sorted(n.node_id for n in reopened.get_nodes(wanted)) == ["late0", "late1", "n8"]
    assert reopened.node_count == 10
