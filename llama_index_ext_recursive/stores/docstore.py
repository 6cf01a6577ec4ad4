"""A ``SimpleDocumentStore`` whose updates cost time linear in a document's nodes.

Upstream's ``KVDocumentStore`` rewrites a document's whole ``RefDocInfo``
(through dataclasses_json, with a list-membership test) for every node added
or removed, so indexing one document of n chunks costs O(n^2): a 5 MB document
(about 5k chunks) spent most of its 45 s build there, and a 50 MB one (about
48k chunks) did not finish in 30 minutes. This store keeps upstream's data,
semantics and persisted JSON exactly; it only builds each document's entry
once per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import RefDocInfo
from llama_index.core.storage.docstore.utils import doc_to_json

_KV = list[tuple[str, dict]]


class LinearDocumentStore(SimpleDocumentStore):
    """Drop-in ``SimpleDocumentStore`` for documents with many nodes (same files)."""

    def _ref_doc_entry(self, ref_doc_id: str) -> dict[str, Any]:
        """The stored entry, extended in place: upstream's index adds nodes one call
        at a time, so copying the id list per call would be quadratic again."""
        info = self.get_ref_doc_info(ref_doc_id) or RefDocInfo()
        return {"node_ids": info.node_ids, "metadata": info.metadata or {}}

    def _prepare_kv_pairs(
        self, nodes: Sequence[BaseNode], allow_update: bool, store_text: bool
    ) -> tuple[_KV, _KV, _KV]:
        node_pairs: _KV = []
        metadata_pairs: _KV = []
        entries: dict[str, dict[str, Any]] = {}
        added: set[tuple[str, str]] = set()  # (document, node) listed by this call
        unset: set[str] = set()  # entries stored without metadata: upstream's merge keeps the last node's
        for node in nodes:
            if not allow_update and self.document_exists(node.node_id):
                raise ValueError(f"node_id {node.node_id} already exists. Set allow_update to True to overwrite.")
            if store_text:
                node_pairs.append((node.node_id, doc_to_json(node)))
            metadata: dict[str, Any] = {"doc_hash": node.hash}
            source = node.source_node
            if source is not None and node.ref_doc_id:
                entry = entries.get(source.node_id)
                if entry is None:
                    entry = entries[source.node_id] = self._ref_doc_entry(source.node_id)
                    if not entry["metadata"]:
                        unset.add(source.node_id)
                # a node already listed has its document recorded in the metadata collection
                listed = (source.node_id, node.node_id) in added or (
                    self._get_ref_doc_id(node.node_id) == source.node_id
                )
                if not listed:
                    added.add((source.node_id, node.node_id))
                    entry["node_ids"].append(node.node_id)
                if source.node_id in unset and node.metadata:
                    entry["metadata"] = dict(node.metadata)
                metadata["ref_doc_id"] = node.ref_doc_id
            metadata_pairs.append((node.node_id, metadata))
        return node_pairs, metadata_pairs, list(entries.items())

    async def _async_prepare_kv_pairs(
        self, nodes: Sequence[BaseNode], allow_update: bool, store_text: bool
    ) -> tuple[_KV, _KV, _KV]:
        return self._prepare_kv_pairs(nodes, allow_update, store_text)  # in memory: no I/O

    def _remove_from_ref_doc_node(self, doc_id: str) -> None:
        ref_doc_id = self._get_ref_doc_id(doc_id)
        if ref_doc_id is None:
            return
        info = self.get_ref_doc_info(ref_doc_id)
        if info is None:
            return
        if doc_id in info.node_ids:
            info.node_ids.remove(doc_id)
        if info.node_ids:
            self._kvstore.put(
                ref_doc_id,
                {"node_ids": info.node_ids, "metadata": info.metadata},
                collection=self._ref_doc_collection,
            )
        else:
            self._kvstore.delete(ref_doc_id, collection=self._metadata_collection)
            self._kvstore.delete(ref_doc_id, collection=self._node_collection)
            self._kvstore.delete(ref_doc_id, collection=self._ref_doc_collection)

    async def _aremove_from_ref_doc_node(self, doc_id: str) -> None:
        self._remove_from_ref_doc_node(doc_id)
