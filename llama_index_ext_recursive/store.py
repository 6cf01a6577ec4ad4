"""``NumpyVectorStore``: upstream's ``SimpleVectorStore``, answered with numpy.

Same data, same persistence format, same filter semantics and scores as
``SimpleVectorStore``; queries run as one matrix product over the candidate
rows instead of a Python loop over every node. Equality filters (``EQ``/``IN``,
e.g. the ``ref_doc_id`` routing filter) are narrowed through an inverted index,
so a per-document query costs the document's rows, not the store's.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.simple import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.filters import equality_constraints, metadata_matcher


class NumpyVectorStore(SimpleVectorStore):
    """In-memory vector store with exact cosine top-k over a numpy matrix.

    Drop-in for ``SimpleVectorStore`` (``stores_text=False``: text comes from
    the docstore). Non-default query modes (MMR, SVM, ...) fall back to the
    parent. Nested ``MetadataFilters`` are supported.
    """

    _ids: List[str] = PrivateAttr(default_factory=list)
    _matrix: Optional[np.ndarray] = PrivateAttr(default=None)
    _postings: Dict[str, Dict[Any, np.ndarray]] = PrivateAttr(default_factory=dict)
    _unindexable: Dict[str, np.ndarray] = PrivateAttr(default_factory=dict)

    @classmethod
    def class_name(cls) -> str:
        return "NumpyVectorStore"

    def _invalidate(self) -> None:
        self._matrix = None
        self._postings = {}
        self._unindexable = {}

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> List[str]:
        self._invalidate()
        return super().add(nodes, **add_kwargs)

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        self._invalidate()
        super().delete(ref_doc_id, **delete_kwargs)

    def delete_nodes(
        self,
        node_ids: Optional[List[str]] = None,
        filters: Optional[MetadataFilters] = None,
        **delete_kwargs: Any,
    ) -> None:
        self._invalidate()
        super().delete_nodes(node_ids, filters, **delete_kwargs)

    def clear(self) -> None:
        self._invalidate()
        super().clear()

    def _ensure_matrix(self) -> np.ndarray:
        if self._matrix is None:
            self._ids = list(self.data.embedding_dict)
            if self._ids:
                matrix = np.asarray(
                    [self.data.embedding_dict[i] for i in self._ids], dtype=np.float64
                )
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                self._matrix = matrix / np.where(norms == 0, 1.0, norms)
            else:
                self._matrix = np.zeros((0, 0))
        return self._matrix

    def _rows_for(self, key: str, values: List[Any]) -> np.ndarray:
        if key not in self._postings:
            postings: Dict[Any, list] = defaultdict(list)
            unindexable = []
            for row, node_id in enumerate(self._ids):
                value = self.data.metadata_dict.get(node_id, {}).get(key)
                try:
                    postings[value].append(row)
                except TypeError:  # list/dict values: always checked exactly
                    unindexable.append(row)
            self._postings[key] = {
                v: np.asarray(r, dtype=np.int64) for v, r in postings.items()
            }
            self._unindexable[key] = np.asarray(unindexable, dtype=np.int64)
        parts = [self._unindexable[key]]
        for value in values:
            try:
                parts.append(self._postings[key].get(value, np.empty(0, np.int64)))
            except TypeError:
                return np.arange(len(self._ids))
        return np.unique(np.concatenate(parts))

    def _candidate_rows(self, query: VectorStoreQuery) -> np.ndarray:
        """Rows passing the filters: narrowed by postings, then checked exactly."""
        rows: Optional[np.ndarray] = None
        for key, values in equality_constraints(query.filters):
            matched = self._rows_for(key, values)
            rows = matched if rows is None else np.intersect1d(rows, matched, assume_unique=True)
        if rows is None:
            rows = np.arange(len(self._ids))
        ids = self._ids  # a local: attribute access on this pydantic model is slow
        if query.node_ids is not None:
            allowed = set(query.node_ids)
            # as_retriever() passes every id of the index: nothing to narrow then
            if not (len(allowed) >= len(ids) and allowed.issuperset(ids)):
                rows = rows[np.asarray([ids[r] in allowed for r in rows], dtype=bool)]
        if query.filters is not None and query.filters.filters and len(rows):
            metadata, matches = self.data.metadata_dict, metadata_matcher(query.filters)
            keep = [matches(metadata[ids[r]]) for r in rows]
            rows = rows[np.asarray(keep, dtype=bool)]
        return rows

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.mode != VectorStoreQueryMode.DEFAULT:
            return super().query(query, **kwargs)
        if query.filters is not None and self.data.embedding_dict and not self.data.metadata_dict:
            raise ValueError(
                "Cannot filter stores that were persisted without metadata. "
                "Please rebuild the store with metadata to enable filtering."
            )
        matrix = self._ensure_matrix()
        rows = self._candidate_rows(query)
        if len(rows) == 0 or query.query_embedding is None:
            return VectorStoreQueryResult(similarities=[], ids=[])
        q = np.asarray(query.query_embedding, dtype=np.float64)
        q_norm = np.linalg.norm(q)
        scores = (matrix[rows] if len(rows) < len(self._ids) else matrix) @ (
            q / (q_norm if q_norm else 1.0)
        )
        k = min(query.similarity_top_k or len(rows), len(rows))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(rows) else np.arange(len(rows))
        top = top[np.argsort(-scores[top], kind="stable")]
        ids = self._ids
        return VectorStoreQueryResult(
            similarities=[float(scores[t]) for t in top],
            ids=[ids[rows[t]] for t in top],
        )
