"""LinearDocumentStore: upstream SimpleDocumentStore's data, without its per-node rewrites."""

from __future__ import annotations

import pytest
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import RefDocInfo

from llama_index_ext_recursive.stores.docstore import LinearDocumentStore


def nodes(doc, count, start=0):
    return [
        TextNode(
            id_=f"{doc}-{i}",
            text=f"text {i} of {doc}",
            metadata={"doc": doc, "i": i},
            relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=doc)},
        )
        for i in range(start, start + count)
    ] + [TextNode(id_=f"{doc}-orphan-{start}", text="no source")]


def exercise(store):
    store.add_documents(nodes("a", 5) + nodes("b", 3))
    store.add_documents(nodes("a", 4, start=3))  # overlapping ids: updated, not duplicated
    store.delete_document("a-1")
    store.delete_document("b-0")
    store.delete_document("b-1")
    store.delete_document("b-2")  # b's last node: its entry goes
    return store


def test_same_data_as_upstream_after_adds_and_deletes():
    ours, theirs = exercise(LinearDocumentStore()), exercise(SimpleDocumentStore())
    assert ours.to_dict() == theirs.to_dict()
    assert ours.get_ref_doc_info("a") == theirs.get_ref_doc_info("a")
    assert ours.get_ref_doc_info("b") is None


async def test_async_paths_give_what_the_sync_paths_give():
    ours, theirs = LinearDocumentStore(), SimpleDocumentStore()
    await ours.async_add_documents(nodes("a", 4))
    await ours.adelete_document("a-2")
    theirs.add_documents(nodes("a", 4))
    theirs.delete_document("a-2")
    assert ours.to_dict() == theirs.to_dict()


def test_refusing_updates_behaves_as_upstream():
    store = LinearDocumentStore()
    store.add_documents(nodes("a", 2))
    with pytest.raises(ValueError, match="a-0 already exists"):
        store.add_documents(nodes("a", 1), allow_update=False)


def test_a_big_document_is_not_reserialised_per_node(monkeypatch):
    calls = {"n": 0}
    original = RefDocInfo.to_dict

    def counting(self, *args, **kwargs):
        calls["n"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(RefDocInfo, "to_dict", counting)
    store = LinearDocumentStore()
    store.add_documents(nodes("big", 2000))
    for i in range(0, 2000, 2):
        store.delete_document(f"big-{i}")
    assert calls["n"] == 0  # upstream: once per node added and once per node deleted
    assert len(store.get_ref_doc_info("big").node_ids) == 1000
