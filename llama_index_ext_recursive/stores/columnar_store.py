"""``ColumnarVectorStore``: a LlamaIndex vector store over the columnar components.

The embedded store for indexes too large to hold as Python objects (issue 25).
Each node is one row, numbered in the order it was added, in three
components of :mod:`llama_index_ext_recursive.columnar` that share the row ids:

* :class:`~llama_index_ext_recursive.columnar.vectors.VectorColumn`: the unit
  float32 embedding per row, searched exactly (approximately with exact
  rescoring above its size threshold), restricted to the rows a filter allows;
* :class:`~llama_index_ext_recursive.columnar.metadata.MetadataColumns`: the
  metadata as dictionary-encoded columns, so a filter is a mask computed on
  codes, plus a second instance holding each row's ``ref_doc_id``
  (``delete(ref_doc_id)`` and ``doc_ids=`` queries use the same masks);
* :class:`~llama_index_ext_recursive.columnar.rows.RowStore`: each node's JSON
  (text, metadata, relationships) in SQLite, read only for the rows a query
  returns.

So a query costs a filter mask, one search and the hydration of ``top_k``
nodes, and the store holds no Python object per row. ``stores_text`` is
``True``: ``VectorStoreIndex`` keeps no docstore copy of the chunks, and
:meth:`query_ids` (:class:`~llama_index_ext_recursive.stores.protocol.ScoredIdSearch`)
answers the recursive search's many intermediate searches without reading
any node.

Updates take the write side of one reader-writer lock; queries the read
side, so a query sees the store before or after an update, never a mix.
Adding a node whose id is already stored replaces it (as upstream's
``SimpleVectorStore`` does): the old row becomes a tombstone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    BasePydanticVectorStore,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.columnar.metadata import MetadataColumns
from llama_index_ext_recursive.columnar.rows import RowStore
from llama_index_ext_recursive.columnar.vectors import VectorColumn
from llama_index_ext_recursive.rwlock import ReadWriteLock
from llama_index_ext_recursive.validation import check_count

logger = logging.getLogger(__name__)

REF_KEY = "ref_doc_id"  # the one key of the ref_doc_id column


class ColumnarVectorStore(BasePydanticVectorStore):
    """Vector store whose rows live in columnar arrays and SQLite, not in Python objects.

    Args:
        dim: the embedding width (``None``: taken from the first nodes added).
        path: the SQLite file the rows are kept in (``None``: in memory, for
            small indexes; a large index needs a file, or its text is held in RAM).
    """

    stores_text: bool = True
    is_embedding_query: bool = True
    flat_metadata: bool = False

    _vectors: VectorColumn | None = PrivateAttr(default=None)
    _metadata: MetadataColumns = PrivateAttr()
    _refs: MetadataColumns = PrivateAttr()
    _rows: RowStore = PrivateAttr()
    _lock: ReadWriteLock = PrivateAttr(default_factory=ReadWriteLock)

    def __init__(self, dim: int | None = None, path: str | Path | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if dim is not None:
            check_count("dim", dim, minimum=1)
            self._vectors = VectorColumn(dim)
        self._metadata = MetadataColumns()
        self._refs = MetadataColumns()
        self._rows = RowStore(path)

    @classmethod
    def class_name(cls) -> str:
        return "ColumnarVectorStore"

    @property
    def client(self) -> None:
        """No client: the store is embedded."""
        return None

    @property
    def dimension(self) -> int | None:
        """The embedding width (``None`` until the first add)."""
        return None if self._vectors is None else self._vectors.dim

    def __len__(self) -> int:
        return 0 if self._vectors is None else int(self._vectors.live_count)

    # ------------------------------------------------------------ updates
    def _matrix(self, nodes: Sequence[BaseNode]) -> np.ndarray:
        """The nodes' embeddings as one float32 matrix; a node without one is named."""
        missing = [n.node_id for n in nodes if n.embedding is None]
        if missing:
            raise ValueError(
                f"{len(missing)} node(s) have no embedding (first: {missing[0]!r}); embed them first, "
                "or add them through a VectorStoreIndex, which embeds them with its embed_model"
            )
        return np.asarray([n.embedding for n in nodes], dtype=np.float32).reshape(len(nodes), -1)

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> list[str]:
        """Append ``nodes`` as rows; an id already stored is replaced (its old row tombstoned)."""
        if not nodes:
            return []
        ids = [n.node_id for n in nodes]
        if len(set(ids)) != len(ids):
            seen: set[str] = set()
            twice = next(i for i in ids if i in seen or seen.add(i))  # type: ignore[func-returns-value]
            raise ValueError(f"node id {twice!r} appears twice in one add; node ids must be unique")
        matrix = self._matrix(nodes)
        with self._lock.writing():
            vectors = self._vectors if self._vectors is not None else VectorColumn(matrix.shape[1])
            old = self._rows.row_of(ids)
            new = vectors.append(matrix)  # checks the width and refuses zero/non-finite rows first
            try:
                added = (
                    self._metadata.append([n.metadata for n in nodes]),
                    self._refs.append([{REF_KEY: n.ref_doc_id} if n.ref_doc_id is not None else {} for n in nodes]),
                    self._rows.append(nodes),
                )
            except Exception:
                vectors.delete(new)  # the other components are checked before they change
                raise
            if any(not np.array_equal(rows, new) for rows in added):
                raise RuntimeError(f"columnar components out of step: rows {new[:3]}... vs {[a[:3] for a in added]}")
            self._vectors = vectors
            self._delete_rows(old[old >= 0])
        return ids

    def _delete_rows(self, rows: np.ndarray) -> None:
        """Tombstone ``rows`` in every component (call under the write lock)."""
        if rows.size and self._vectors is not None:
            for component in (self._vectors, self._metadata, self._refs, self._rows):
                component.delete(rows)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        """Delete every node whose ``ref_doc_id`` is ``ref_doc_id``."""
        with self._lock.writing():
            self._delete_rows(np.flatnonzero(self._refs.mask(_refs_filter([ref_doc_id]))))

    def delete_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **delete_kwargs: Any
    ) -> None:
        """Delete the nodes of ``node_ids`` (all when ``None``) that ``filters`` match (all when ``None``)."""
        with self._lock.writing():
            self._delete_rows(np.flatnonzero(self._selected(node_ids, filters)))

    def clear(self) -> None:
        """Delete every node."""
        self.delete_nodes()

    # ------------------------------------------------------------- queries
    def _selected(
        self, node_ids: Sequence[str] | None, filters: MetadataFilters | None, doc_ids: Sequence[str] | None = None
    ) -> np.ndarray:
        """Live rows allowed by every restriction given, as a mask over all rows."""
        mask = self._metadata.mask(filters if filters is not None else MetadataFilters(filters=[]))
        if doc_ids is not None:
            mask &= self._refs.mask(_refs_filter(doc_ids))
        if node_ids is not None:
            rows = self._rows.row_of(list(node_ids))
            allowed = np.zeros_like(mask)
            allowed[rows[rows >= 0]] = True
            mask &= allowed
        return mask

    def _search(self, query: VectorStoreQuery) -> tuple[np.ndarray, np.ndarray]:
        """Rows and scores of ``query`` (call under the read lock)."""
        if query.mode != VectorStoreQueryMode.DEFAULT:
            raise NotImplementedError(
                f"ColumnarVectorStore answers the default (dense) query mode, not {query.mode.value!r}; "
                "combine it with a BM25 retriever (e.g. HybridFusionRetriever) for hybrid search"
            )
        if query.query_embedding is None:
            raise ValueError("the query has no embedding: embed it first (VectorStoreIndex retrievers do)")
        if query.similarity_top_k is not None:
            check_count("similarity_top_k", query.similarity_top_k, minimum=0)
        if self._vectors is None:
            return np.empty(0, np.int64), np.empty(0, np.float32)
        restricted = query.filters is not None or query.node_ids is not None or query.doc_ids is not None
        allowed = np.flatnonzero(self._selected(query.node_ids, query.filters, query.doc_ids)) if restricted else None
        k = query.similarity_top_k or int(self._vectors.live_count)  # 0 or None: every row, as upstream
        return self._vectors.search(np.asarray(query.query_embedding, dtype=np.float32), k, rows=allowed)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        """The ``similarity_top_k`` nearest live nodes allowed by the query's restrictions, as nodes."""
        with self._lock.reading():
            rows, scores = self._search(query)
            nodes = self._rows.nodes(rows)
        return VectorStoreQueryResult(
            nodes=nodes, similarities=[float(s) for s in scores], ids=[n.node_id for n in nodes]
        )

    def query_ids(self, query: VectorStoreQuery) -> tuple[list[str], list[float]]:
        """:class:`~llama_index_ext_recursive.stores.protocol.ScoredIdSearch`: ids and scores, no node read."""
        with self._lock.reading():
            rows, scores = self._search(query)
            ids = self._rows.node_ids(rows)
        return list(ids), [float(s) for s in scores]

    def get_nodes(
        self, node_ids: list[str] | None = None, filters: MetadataFilters | None = None, **kwargs: Any
    ) -> list[BaseNode]:
        """The stored nodes of ``node_ids`` (in row order) that ``filters`` match."""
        with self._lock.reading():
            return self._rows.nodes(np.flatnonzero(self._selected(node_ids, filters)))


def _refs_filter(doc_ids: Sequence[str]) -> MetadataFilters:
    return MetadataFilters(filters=[MetadataFilter(key=REF_KEY, value=list(doc_ids), operator=FilterOperator.IN)])
