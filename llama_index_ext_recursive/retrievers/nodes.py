"""Checks on the nodes a retriever indexes, shared by BM25 and the hybrid."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from llama_index.core.schema import BaseNode


def refuse_duplicate_ids(nodes: Sequence[BaseNode]) -> None:
    """Refuse two nodes with one id, naming both positions and their documents.

    They would be two BM25 documents but one node in a vector store, a
    docstore and every result map keyed by node id.
    """
    seen: dict[str, int] = {}
    for position, node in enumerate(nodes):
        first = seen.setdefault(node.node_id, position)
        if first == position:
            continue
        counts = Counter(n.node_id for n in nodes)
        duplicated = [node_id for node_id, n in counts.items() if n > 1]
        sources = [
            n.ref_doc_id or n.metadata.get("doc_id") or "no document" for n in nodes if n.node_id == node.node_id
        ]
        raise ValueError(
            f"node id {node.node_id!r} occurs {counts[node.node_id]} times (documents: {sources}): "
            f"nodes[{first}] and nodes[{position}] share the node id {node.node_id!r}; give every "
            f"node its own id_ ({len(duplicated)} duplicated id(s): {duplicated[:10]})"
        )
