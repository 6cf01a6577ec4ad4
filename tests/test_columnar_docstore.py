"""stores.columnar_docstore: the docstore view of a ColumnarVectorStore answers as upstream's
SimpleDocumentStore holding the same nodes, follows the store (before and after persisting),
and refuses what it cannot keep, by name."""

import asyncio

import numpy as np
import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from llama_index_ext_recursive.stores.columnar_docstore import ColumnarDocumentStore
from llama_index_ext_recursive.stores.columnar_store import ColumnarVectorStore


def _nodes(count=6):
    rng = np.random.default_rng(1)
    return [
        TextNode(
            id_=f"n{i}",
            text=f"text {i}",
            embedding=rng.normal(size=4).tolist(),
            metadata={"part": i % 2},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=f"doc{i // 3}")},
        )
        for i in range(count)
    ]


def _plain(nodes):
    return [n.model_copy(update={"embedding": None}) for n in nodes]


def _view(tmp_path=None):
    store = ColumnarVectorStore(None if tmp_path is None else tmp_path / "index")
    store.add(_nodes())
    return store, ColumnarDocumentStore(store)


def _answers(docstore):
    info = docstore.get_ref_doc_info("doc1")
    return (
        [n.model_dump() for n in docstore.get_nodes(["n4", "n0"])],
        docstore.get_node("n2").model_dump(),
        docstore.document_exists("n5"),
        docstore.document_exists("zz"),
        docstore.get_document("zz", raise_error=False),
        docstore.get_document_hash("n1"),
        sorted(docstore.docs),
        len(docstore.docs),
        (info.node_ids, info.metadata) if info else None,
        sorted(docstore.get_all_ref_doc_info()),
    )


def test_it_answers_as_simple_document_store_before_and_after_persisting(tmp_path):
    reference = SimpleDocumentStore()
    reference.add_documents(_plain(_nodes()))
    store, view = _view(tmp_path)
    expected = _answers(reference)
    assert _answers(view) == expected
    store.persist()
    assert _answers(ColumnarDocumentStore(ColumnarVectorStore(tmp_path / "index"))) == expected
    assert asyncio.run(view.aget_nodes(["n4", "n0"])) == view.get_nodes(["n4", "n0"])
    with pytest.raises(ValueError, match="zz"):
        view.get_nodes(["n0", "zz"])


def test_deletes_go_to_the_store():
    store, view = _view()
    view.delete_document("n0")
    view.delete_ref_doc("doc1")
    assert store.live_node_ids() == ["n1", "n2"] and sorted(view.docs) == ["n1", "n2"]
    view.delete_document("n0", raise_error=False)
    with pytest.raises(ValueError, match="n0"):
        view.delete_document("n0")


def test_what_it_cannot_keep_is_refused_by_name():
    store, view = _view()
    view.add_documents(_plain(_nodes(2)))  # nodes the store holds: accepted, nothing copied
    with pytest.raises(ValueError, match="'x1' is not in the ColumnarVectorStore"):
        view.add_documents([TextNode(id_="x1", text="new")])
    with pytest.raises(NotImplementedError, match="SimpleDocumentStore"):
        view.set_document_hash("n0", "abc")
    with pytest.raises(TypeError, match="ColumnarVectorStore"):
        ColumnarDocumentStore(SimpleDocumentStore())
    assert store.node_count == 6
