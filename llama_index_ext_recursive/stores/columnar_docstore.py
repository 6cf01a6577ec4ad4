"""``ColumnarDocumentStore``: the docstore of an index whose vector store is a ``ColumnarVectorStore``.

A ``VectorStoreIndex`` over a store that keeps the text (``stores_text``)
still has a docstore, and LlamaIndex code reads nodes from it
(``index.docstore.get_node``, link checks, ``ref_doc_info``). A separate
docstore would hold a second copy of every node, in memory, which is what a
2M-chunk index cannot afford (issue 25). This one is a view: it answers from
the store's rows (SQLite, and the nodes added since the last persist), holds
nothing itself and persists nothing (the store does).

Writes go to the store, which owns the nodes: ``add_documents`` accepts only
nodes the store already holds (``VectorStoreIndex`` records ``IndexNode``s
there after adding them to the store); deletes delete from the store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore, RefDocInfo
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive.stores.protocol import REF_KEY, LevelStore

logger = logging.getLogger(__name__)


class _StoreNodes(Mapping[str, BaseNode]):
    """``docs``: every stored node by id, read when asked for."""

    def __init__(self, store: LevelStore) -> None:
        self._store = store

    def __getitem__(self, node_id: str) -> BaseNode:
        node = self._store.nodes_by_id([node_id])[0]
        if node is None:
            raise KeyError(node_id)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self._store.live_node_ids())

    def __len__(self) -> int:
        return self._store.node_count

    def values(self) -> Iterator[BaseNode]:  # type: ignore[override]
        """The nodes in the order they were added, read a batch at a time."""
        ids = self._store.live_node_ids()
        for start in range(0, len(ids), _BATCH):
            for node in self._store.nodes_by_id(ids[start : start + _BATCH]):
                if node is not None:  # deleted since the ids were read
                    yield node


_BATCH = 2048


class ColumnarDocumentStore(BaseDocumentStore):
    """LlamaIndex's docstore interface, answered by a :class:`ColumnarVectorStore`'s rows.

    Args:
        store: the store holding the nodes.
    """

    def __init__(self, store: LevelStore) -> None:
        if not isinstance(store, LevelStore):
            raise TypeError(
                f"ColumnarDocumentStore reads a level store (ColumnarVectorStore, PostgresLevelStore), "
                f"got {type(store).__name__}"
            )
        self._store = store

    @property
    def store(self) -> LevelStore:
        return self._store

    def persist(self, persist_path: str = "", fs: Any = None) -> None:
        """Nothing to write: the nodes are the store's, persisted by ``ColumnarVectorStore.persist``."""
        logger.debug("ColumnarDocumentStore.persist: the nodes are persisted by their ColumnarVectorStore")

    @property
    def docs(self) -> Mapping[str, BaseNode]:  # type: ignore[override]
        """Every stored node by id, read lazily."""
        return _StoreNodes(self._store)

    def add_documents(
        self,
        docs: Sequence[BaseNode],
        allow_update: bool = True,
        batch_size: int | None = None,
        store_text: bool = True,
    ) -> None:
        """Accept nodes the store holds already (nothing to copy); any other is refused.

        Raises:
            ValueError: a node is not in the store: add it to the ColumnarVectorStore
                (or through the VectorStoreIndex), which owns the nodes.
        """
        found = self._store.nodes_by_id([doc.node_id for doc in docs])
        missing = [doc.node_id for doc, node in zip(docs, found, strict=True) if node is None]
        if missing:
            raise ValueError(
                f"node {missing[0]!r} is not in the ColumnarVectorStore this docstore reads: add nodes to the "
                "store (or through the VectorStoreIndex over it), which owns them"
            )

    async def async_add_documents(
        self,
        docs: Sequence[BaseNode],
        allow_update: bool = True,
        batch_size: int | None = None,
        store_text: bool = True,
    ) -> None:
        self.add_documents(docs, allow_update, batch_size, store_text)

    def get_document(self, doc_id: str, raise_error: bool = True) -> BaseNode | None:
        node = self._store.nodes_by_id([doc_id])[0]
        if node is None and raise_error:
            raise ValueError(f"doc_id {doc_id} not found.")
        return node

    async def aget_document(self, doc_id: str, raise_error: bool = True) -> BaseNode | None:
        return self.get_document(doc_id, raise_error)

    def get_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        """The nodes of ``node_ids`` in order, read in one batch (unknown ids: skipped, or ``ValueError``)."""
        found = self._store.nodes_by_id(node_ids)
        if raise_error and None in found:
            raise ValueError(f"Node {node_ids[found.index(None)]} not found")
        return [node for node in found if node is not None]

    async def aget_nodes(self, node_ids: list[str], raise_error: bool = True) -> list[BaseNode]:
        return self.get_nodes(node_ids, raise_error)

    def delete_document(self, doc_id: str, raise_error: bool = True) -> None:
        """Delete the node from the store (a node already gone: nothing, or ``ValueError``)."""
        if not self.document_exists(doc_id):
            if raise_error:
                raise ValueError(f"doc_id {doc_id} not found.")
            return
        self._store.delete_nodes([doc_id])

    async def adelete_document(self, doc_id: str, raise_error: bool = True) -> None:
        self.delete_document(doc_id, raise_error)

    def document_exists(self, doc_id: str) -> bool:
        return self._store.nodes_by_id([doc_id])[0] is not None

    async def adocument_exists(self, doc_id: str) -> bool:
        return self.document_exists(doc_id)

    def set_document_hash(self, doc_id: str, doc_hash: str) -> None:
        """Refused: a node's hash is computed from the node the store holds.

        Raises:
            NotImplementedError: always, naming the fix.
        """
        raise NotImplementedError(
            "ColumnarDocumentStore derives each node's hash from the stored node and keeps no other; "
            "use a SimpleDocumentStore for ingestion-pipeline deduplication"
        )

    async def aset_document_hash(self, doc_id: str, doc_hash: str) -> None:
        self.set_document_hash(doc_id, doc_hash)

    def set_document_hashes(self, doc_hashes: dict[str, str]) -> None:
        """Refused, as :meth:`set_document_hash`."""
        for doc_id, doc_hash in doc_hashes.items():
            self.set_document_hash(doc_id, doc_hash)

    async def aset_document_hashes(self, doc_hashes: dict[str, str]) -> None:
        self.set_document_hashes(doc_hashes)

    def get_document_hash(self, doc_id: str) -> str | None:
        """The stored node's hash (of its text and metadata), ``None`` if it is not stored."""
        node = self._store.nodes_by_id([doc_id])[0]
        return None if node is None else node.hash

    async def aget_document_hash(self, doc_id: str) -> str | None:
        return self.get_document_hash(doc_id)

    def get_all_document_hashes(self) -> dict[str, str]:
        """``{hash: node id}`` for every stored node, as upstream (reads them all: the caller asked)."""
        return {node.hash: node.node_id for node in _StoreNodes(self._store).values()}

    async def aget_all_document_hashes(self) -> dict[str, str]:
        return self.get_all_document_hashes()

    def _ref_doc_infos(self, filters: MetadataFilters | None) -> dict[str, RefDocInfo]:
        infos: dict[str, RefDocInfo] = {}
        for node in self._store.get_nodes(filters=filters):
            if node.ref_doc_id is None:
                continue
            info = infos.get(node.ref_doc_id)
            if info is None:
                info = infos[node.ref_doc_id] = RefDocInfo(metadata=dict(node.metadata))
            info.node_ids.append(node.node_id)
        return infos

    def get_all_ref_doc_info(self) -> dict[str, RefDocInfo] | None:
        """Every document's node ids and the metadata of its first node (reads them all: the caller asked)."""
        return self._ref_doc_infos(None)

    async def aget_all_ref_doc_info(self) -> dict[str, RefDocInfo] | None:
        return self.get_all_ref_doc_info()

    def get_ref_doc_info(self, ref_doc_id: str) -> RefDocInfo | None:
        return self._ref_doc_infos(_of_document(ref_doc_id)).get(ref_doc_id)

    async def aget_ref_doc_info(self, ref_doc_id: str) -> RefDocInfo | None:
        return self.get_ref_doc_info(ref_doc_id)

    def delete_ref_doc(self, ref_doc_id: str, raise_error: bool = True) -> None:
        """Delete a document's nodes from the store."""
        if self.get_ref_doc_info(ref_doc_id) is None:
            if raise_error:
                raise ValueError(f"ref_doc_id {ref_doc_id} not found.")
            return
        self._store.delete(ref_doc_id)

    async def adelete_ref_doc(self, ref_doc_id: str, raise_error: bool = True) -> None:
        self.delete_ref_doc(ref_doc_id, raise_error)


def _of_document(ref_doc_id: str) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key=REF_KEY, value=ref_doc_id, operator=FilterOperator.EQ)])
