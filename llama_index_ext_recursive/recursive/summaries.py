"""The summaries of an index over a columnar summary store, read from the store when asked.

A summary index answers "the summary ``IndexNode`` of document ``d``" for the
few documents a query routes to or returns. Holding every summary as a Python
object instead made opening a 100k-document index read and validate 100k
nodes (9 of its 13 seconds at 2M chunks) and kept them resident for good
(issue 25). Over a ``ColumnarVectorStore`` the summaries are rows already, and
each document's record names its summary node, so :class:`StoredSummaries`
is keyed by the records and reads a summary's row when it is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from llama_index.core.schema import BaseNode, IndexNode

from llama_index_ext_recursive.recursive.build import DocumentRecord
from llama_index_ext_recursive.recursive.links import LinkError
from llama_index_ext_recursive.stores.protocol import REF_KEY, LevelStore

SUMMARIES_KEPT = 4096  # summaries a view keeps once read (a few MB)


class StoredSummaries(Mapping[str, IndexNode]):
    """Summary ``IndexNode`` by document id: the documents of ``documents``, each summary read
    from ``store`` (the summary level's) when asked for.

    Iterating, ``len`` and ``in`` read no node. The index makes a new one with
    its new records at every update, as it makes a new dict of summaries for
    other stores.

    Args:
        documents: the index's document records (each names its summary node).
        store: the summary level's store, which holds the summaries as rows.
    """

    def __init__(self, documents: Mapping[str, DocumentRecord], store: LevelStore) -> None:
        self._documents = documents
        self._store = store
        self._read: dict[str, BaseNode | None] = {}  # summary node id -> node (read by prefetch)

    @property
    def store(self) -> LevelStore:
        """The summary level's store the summaries are read from."""
        return self._store

    def prefetch(self, doc_ids: Iterable[str]) -> None:
        """Read the summaries of ``doc_ids`` in one store call (a query's routed documents)."""
        documents = self._documents
        wanted = [documents[d].summary_node_id for d in doc_ids if d in documents]
        wanted = [n for n in dict.fromkeys(wanted) if n not in self._read]
        if wanted:
            if len(self._read) + len(wanted) > SUMMARIES_KEPT:
                self._read.clear()
            self._read.update(zip(wanted, self._store.nodes_by_id(wanted), strict=True))

    def __getitem__(self, doc_id: str) -> IndexNode:
        record = self._documents[doc_id]
        summary_id = record.summary_node_id
        node = self._read[summary_id] if summary_id in self._read else self._store.nodes_by_id([summary_id])[0]
        if not isinstance(node, IndexNode) or node.index_id != doc_id:
            found = "missing" if node is None else f"a {type(node).__name__} naming {getattr(node, 'index_id', None)!r}"
            raise LinkError(
                f"document {doc_id!r}'s summary {record.summary_node_id!r} is {found} in the summary store: "
                "the summary store and the document records are out of sync; rebuild the index"
            )
        return node

    def __iter__(self) -> Iterator[str]:
        return iter(self._documents)

    def __len__(self) -> int:
        return len(self._documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._documents

    def metadata_keys(self) -> set[str]:
        """The metadata keys some summary holds, from the store's columns (no node read).

        The store also files each row's ``ref_doc_id`` as filterable metadata
        (:data:`~llama_index_ext_recursive.stores.protocol.REF_KEY`); a
        summary's comes from its source relationship, not its metadata, so it
        is left out, as it is from the keys of summaries held as nodes.
        """
        return self._store.metadata_keys() - {REF_KEY}
