"""``NumpyVectorStore``: upstream's ``SimpleVectorStore``, answered with numpy.

Same data, same persistence format, same filter semantics, ids and scores as
``SimpleVectorStore`` (scores to ~1e-15, ids and their order exactly, ties and
zero vectors included). Instead of a Python loop over every node, a query is
one matrix product over float32 unit rows and ``argpartition`` (a screen: any
row whose float32 score is within the rigorous float32 error bound of the
(k+1)-th survives), then float64 scores for the few survivors; at 50k x 384
that is within ~10% of a bare numpy float32 product (benchmarks/store_speed.py).

How exactness is kept:

* The matrix mirrors ``data.embedding_dict`` row for row, in the dict's order.
  ``add`` appends (or overwrites a row in place, as the dict keeps the key's
  position), deletes leave tombstones that are compacted once a quarter of the
  rows are dead, so nothing is rebuilt per query and the order of live rows is
  always the dict's order.
* Upstream ranks ``(score, node_id)`` tuples with a size-k heap and returns the
  heap sorted by score; with distinct scores that is simply the k highest.
  When two scores among the top k+1 are within ``1e-10`` of each other (ties,
  e.g. duplicate chunks), or a score is NaN (a zero vector, as upstream
  computes 0/0), the order depends on the heap's layout, so the query replays
  upstream's heap over the candidates in dict order, with near-equal scores
  recomputed by upstream's own ``similarity`` function. That path is
  exact and still vectorised for the scores; it costs one Python heap pass.
* Metadata filters run column-wise: per key, the values by row, an inverted
  index for ``EQ``/``IN``/``NE``/``NIN``/``IS_EMPTY`` and a float64 column for
  ``GT``/``GTE``/``LT``/``LTE`` over numbers; the other operators (and values
  of other types) are evaluated per row with upstream's operator semantics,
  only on rows the rest of the filter has not excluded. Nested
  ``MetadataFilters`` are supported (upstream rejects them).

Known difference: where upstream raises ``TypeError`` for a row whose value
the operator cannot take (``GT`` between a string and a number, ``CONTAINS``
on a number, ``TEXT_MATCH`` on a number), that row does not match here, as in
every evaluator of the package (:func:`~llama_index_ext_recursive.filters.operator_fn`):
a key holding numbers and a few strings can still be filtered by number.

The query arithmetic is in :mod:`.numpy_search`, the metadata columns in
:mod:`.numpy_columns`. This module stays above 500 lines because the row
state (matrix, tombstones, columns, filter masks) and the store that keeps
it in step with ``data`` under one lock are one invariant: split, each half
would reach into the other's fields. :func:`vector_index` is the package's
one way to build an index over this store.
"""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import fsspec
import numpy as np
from fsspec.implementations.local import LocalFileSystem
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import BaseNode
from llama_index.core.storage.docstore.types import BaseDocumentStore
from llama_index.core.vector_stores.simple import SimpleVectorStore, SimpleVectorStoreData
from llama_index.core.vector_stores.types import (
    DEFAULT_PERSIST_DIR,
    BasePydanticVectorStore,
    DEFAULT_PERSIST_FNAME,
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)

from llama_index_ext_recursive.embedding_cache import CachedEmbedding, as_cached, check_embedding_cache
from llama_index_ext_recursive.models import corpus_sample, resolve_embed_model
from llama_index_ext_recursive.persist import PersistError, write_file_atomically
from llama_index_ext_recursive.filters import operator_fn
from llama_index_ext_recursive.stores.numpy_columns import EMPTY_ROWS, MetadataColumn, exact_number
from llama_index_ext_recursive.stores.numpy_search import answer_query
from llama_index_ext_recursive.validation import check_count, json_nodes

_VECTORISED = frozenset({
    FilterOperator.EQ, FilterOperator.NE, FilterOperator.IN, FilterOperator.NIN,
    FilterOperator.IS_EMPTY, FilterOperator.GT, FilterOperator.GTE,
    FilterOperator.LT, FilterOperator.LTE,
})


class _State:
    """The matrix and indexes mirroring one ``SimpleVectorStoreData``.

    A plain object (attribute access on the pydantic model is slow); all
    reads and writes happen under ``lock``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(None)

    # copies and pickles of the store start unbuilt (a lock cannot be copied)
    def __reduce__(self) -> Any:
        return (_State, ())

    def __deepcopy__(self, memo: Any) -> "_State":
        return _State()

    def __copy__(self) -> "_State":
        return _State()

    def reset(self, data: Optional[SimpleVectorStoreData]) -> None:
        self.data = data
        # empty while unbuilt (data None): synced() is then False, so nothing reads them
        self.emb: Dict[str, Any] = data.embedding_dict if data is not None else {}
        self.meta: Dict[str, Any] = data.metadata_dict if data is not None else {}
        self.matrix = np.zeros((0, 0))  # unit rows, float64; capacity rows, rows >= n unused
        self.matrix32 = np.zeros((0, 0), dtype=np.float32)  # the same rows in float32 (screening)
        self.buffers: Dict[tuple, np.ndarray] = {}  # see _gather_dot
        self.alive = np.zeros(0, dtype=bool)
        self.bad = np.zeros(0, dtype=bool)  # zero or non-finite norm: upstream's score is NaN
        self.no_meta = np.zeros(0, dtype=bool)  # live rows without a metadata_dict entry
        self.n = 0
        self.n_dead = 0
        self.n_bad = 0
        self.ids: List[Optional[str]] = []
        self.row_of: Dict[str, int] = {}
        self.metas: List[Optional[Mapping[str, Any]]] = []
        self.columns: Dict[str, MetadataColumn] = {}
        self.version = 0
        self.allowed_cache: Optional[tuple] = None
        self.broken = False  # embeddings of different lengths: leave queries to upstream

    # ------------------------------------------------------------ building
    def synced(self, data: SimpleVectorStoreData) -> bool:
        return (
            self.data is data
            and self.emb is data.embedding_dict
            and self.meta is data.metadata_dict
            and (self.broken or self.n - self.n_dead == len(self.emb))
        )

    def rebuild(self, data: SimpleVectorStoreData) -> None:
        self.reset(data)
        self.append(list(data.embedding_dict))

    def _unit_rows(self, vectors: List[Any]) -> Optional[tuple]:
        """(unit rows, mask of zero/non-finite rows), ``None`` if not a matrix of our width."""
        try:
            matrix = np.array(vectors, dtype=np.float64)
        except (ValueError, TypeError):
            return None
        if matrix.ndim != 2 or (self.n - self.n_dead > 0 and matrix.shape[1] != self.matrix.shape[1]):
            return None
        with np.errstate(all="ignore"):
            norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix))
            bad = ~np.isfinite(norms) | (norms == 0)
            matrix /= np.where(bad, 1.0, norms)[:, None]
        matrix[bad] = 0.0
        return matrix, bad

    def append(self, new_ids: List[str]) -> None:
        """Append rows for ids that are new keys of the embedding dict, in order."""
        if not new_ids or self.broken:
            return
        unit = self._unit_rows([self.emb[i] for i in new_ids])
        if unit is None:
            self.broken = True
            return
        rows, bad = unit
        if self.n and rows.shape[1] != self.matrix.shape[1]:  # every old row is dead
            self.compact()
        start, end = self.n, self.n + len(new_ids)
        if self.n == 0 or end > len(self.matrix):
            capacity = end if self.n == 0 else max(end, 2 * len(self.matrix))
            # new arrays: a query holding the old ones never sees a half-written row
            grown = np.empty((capacity, rows.shape[1]))
            grown32 = np.empty((capacity, rows.shape[1]), dtype=np.float32)
            if start:
                grown[:start] = self.matrix[:start]
                grown32[:start] = self.matrix32[:start]
            self.matrix, self.matrix32 = grown, grown32
            self.alive = np.concatenate([self.alive[:start], np.zeros(capacity - start, dtype=bool)])
            self.bad = np.concatenate([self.bad[:start], np.zeros(capacity - start, dtype=bool)])
            self.no_meta = np.concatenate([self.no_meta[:start], np.zeros(capacity - start, dtype=bool)])
        self.matrix[start:end] = rows
        self.matrix32[start:end] = rows
        self.alive[start:end] = True
        self.bad[start:end] = bad
        self.n_bad += int(bad.sum())
        self.ids.extend(new_ids)
        self.row_of.update(zip(new_ids, range(start, end)))
        metas = [self.meta.get(i) for i in new_ids]
        self.metas.extend(metas)
        self.no_meta[start:end] = [m is None for m in metas]
        for key, column in self.columns.items():
            column.values.extend(None if m is None else m.get(key) for m in metas)
            column.reset()
        self.n = end
        self.version += 1

    def overwrite(self, rows: List[int]) -> None:
        """Rows whose id was added again: new vector and metadata, same position."""
        if not rows or self.broken:
            return
        ids = [self._live_id(r) for r in rows]
        unit = self._unit_rows([self.emb[i] for i in ids])
        if unit is None:
            self.broken = True
            return
        vectors, bad = unit
        index = np.asarray(rows, dtype=np.int64)
        self.matrix[index] = vectors
        self.matrix32[index] = vectors
        self.bad[index] = bad
        self.n_bad = int(self.bad[: self.n].sum())
        for r, node_id in zip(rows, ids):
            self.metas[r] = self.meta.get(node_id)
            self.no_meta[r] = self.metas[r] is None
        for key, column in self.columns.items():
            for r in rows:
                meta = self.metas[r]
                column.values[r] = None if meta is None else meta.get(key)
            column.reset()
        self.version += 1

    def added(self, ids: Sequence[str]) -> None:
        if self.broken:  # rebuilt (and checked again) by the next query
            self.data = None
            return
        new: List[str] = []
        seen: set = set()
        again: set = set()
        for node_id in ids:
            row = self.row_of.get(node_id)
            if row is not None:
                again.add(row)
            elif node_id not in seen:
                seen.add(node_id)
                new.append(node_id)
        self.overwrite(sorted(again))
        self.append(new)

    def removed(self, candidates: Optional[Sequence[str]] = None) -> None:
        """Tombstone the rows whose id left the embedding dict."""
        if self.broken:  # rebuilt (and checked again) by the next query
            self.data = None
            return
        emb = self.emb
        if candidates is None:
            gone = [r for r, i in enumerate(self.ids) if i is not None and i not in emb]
        else:
            gone = sorted({self.row_of[i] for i in candidates if i in self.row_of and i not in emb})
        if not gone:
            return
        for r in gone:
            del self.row_of[self._live_id(r)]
            self.ids[r] = None
            self.metas[r] = None
        index = np.asarray(gone, dtype=np.int64)
        self.alive[index] = False
        self.no_meta[index] = False
        self.n_bad -= int(self.bad[index].sum())
        self.bad[index] = False
        self.n_dead += len(gone)
        self.version += 1
        if self.n_dead * 4 >= self.n:
            self.compact()

    def _live_id(self, row: int) -> str:
        """The id of a live row (a removed row's id is None)."""
        node_id = self.ids[row]
        assert node_id is not None, f"row {row} was removed"
        return node_id

    def compact(self) -> None:
        keep = np.flatnonzero(self.alive[: self.n])
        self.matrix = self.matrix[keep]
        self.matrix32 = self.matrix32[keep]
        self.alive = np.ones(len(keep), dtype=bool)
        self.bad = self.bad[keep]
        self.no_meta = self.no_meta[keep]
        self.ids = [self.ids[r] for r in keep.tolist()]
        self.metas = [self.metas[r] for r in keep.tolist()]
        self.row_of = {node_id: r for r, node_id in enumerate(self.ids) if node_id is not None}  # all live
        self.columns = {}
        self.n, self.n_dead = len(keep), 0
        self.version += 1

    # ------------------------------------------------------------- queries
    def column(self, key: str) -> MetadataColumn:
        column = self.columns.get(key)
        if column is None:
            column = self.columns[key] = MetadataColumn([None if m is None else m.get(key) for m in self.metas])
        return column

    def allowed(self, node_ids: Sequence[str]) -> Optional[np.ndarray]:
        """Mask of the rows in ``node_ids``; ``None`` when that is every live row."""
        cached = self.allowed_cache
        if cached is not None and cached[0] == self.version and cached[1] == node_ids:
            return cached[2]
        rows = [r for r in map(self.row_of.get, node_ids) if r is not None]
        mask: Optional[np.ndarray]
        mask = np.zeros(self.n, dtype=bool)
        mask[rows] = True
        if int(mask.sum()) == self.n - self.n_dead:
            mask = None  # as_retriever() passes every id of the index
        self.allowed_cache = (self.version, list(node_ids), mask)
        return mask

    def equality_rows(self, filters: MetadataFilters) -> Optional[np.ndarray]:
        """Sorted rows of an AND of ``EQ``/``IN`` leaves, straight from the postings.

        ``None`` when the filter has another shape or a column holds values
        that need the per-row check (lists, dicts); the mask path handles those.
        """
        if (filters.condition or FilterCondition.AND) != FilterCondition.AND:
            return None
        rows: Optional[np.ndarray] = None
        values: List[Any]
        for item in filters.filters:
            if isinstance(item, MetadataFilters):
                return None
            if item.operator == FilterOperator.EQ and not isinstance(item.value, list):
                values = [item.value]
            elif item.operator == FilterOperator.IN and isinstance(item.value, list):
                values = item.value
            else:
                return None
            column = self.column(item.key)
            if column.other().any():
                return None
            parts = [column.equal_rows(v) for v in values]
            matched = parts[0] if len(parts) == 1 else np.unique(np.concatenate(parts or [EMPTY_ROWS]))
            rows = matched if rows is None else np.intersect1d(rows, matched, assume_unique=True)
        return rows

    def filter_mask(self, filters: MetadataFilters, scope: np.ndarray) -> np.ndarray:
        """Rows of ``scope`` that pass ``filters`` (nested allowed)."""
        items = filters.filters
        if not items:
            return scope
        condition = filters.condition or FilterCondition.AND
        if condition == FilterCondition.AND:
            # cheap column-wise conditions first: the per-row ones see fewer rows
            ordered = sorted(items, key=lambda f: 2 if isinstance(f, MetadataFilters)
                             else 0 if f.operator in _VECTORISED else 1)
            for item in ordered:
                scope = self._item_mask(item, scope)
            return scope
        matched = np.zeros_like(scope)
        for item in items:
            matched |= self._item_mask(item, scope & ~matched)
        if condition == FilterCondition.OR:
            return matched
        if condition == FilterCondition.NOT:
            return scope & ~matched
        raise ValueError(f"Invalid filter condition: {condition}")

    def _item_mask(self, item: Any, scope: np.ndarray) -> np.ndarray:
        if isinstance(item, MetadataFilters):
            return self.filter_mask(item, scope)
        return self._leaf_mask(item, scope) & scope

    def _leaf_mask(self, f: MetadataFilter, scope: np.ndarray) -> np.ndarray:
        column = self.column(f.key)
        operator, value = f.operator, f.value
        none = column.none()
        n = len(scope)

        def rows_mask(rows: np.ndarray) -> np.ndarray:
            mask = np.zeros(n, dtype=bool)
            mask[rows] = True
            return mask

        def per_row(where: np.ndarray) -> np.ndarray:
            """Upstream's operator on each row of ``where`` (values not None)."""
            rows = np.flatnonzero(where)
            out = np.zeros(n, dtype=bool)
            if len(rows):
                fn, values = operator_fn(operator, value), column.values
                out[rows] = np.fromiter((bool(fn(values[r])) for r in rows.tolist()), bool, len(rows))
            return out

        def equal(v: Any) -> np.ndarray:
            return rows_mask(column.equal_rows(v)) | per_row(column.other() & scope)

        def member(values: list) -> np.ndarray:
            rows = [column.equal_rows(v) for v in values]
            plain = rows_mask(np.concatenate(rows)) if rows else np.zeros(n, dtype=bool)
            return plain | per_row(column.other() & scope)

        present = scope & ~none
        if operator == FilterOperator.IS_EMPTY:
            return none | rows_mask(column.equal_rows("")) | per_row(column.other() & scope)
        if operator == FilterOperator.EQ:
            return equal(value)
        if operator == FilterOperator.NE:
            plain = ~none & ~column.other()
            return none | (plain & ~rows_mask(column.equal_rows(value))) | per_row(column.other() & scope)
        if operator in (FilterOperator.IN, FilterOperator.NIN) and isinstance(value, list):
            if operator == FilterOperator.IN:
                return member(value)
            plain = ~none & ~column.other()
            hits = [column.equal_rows(v) for v in value]
            inside = rows_mask(np.concatenate(hits)) if hits else np.zeros(n, dtype=bool)
            return none | (plain & ~inside) | per_row(column.other() & scope)
        if operator in (FilterOperator.GT, FilterOperator.GTE, FilterOperator.LT, FilterOperator.LTE):
            numbers = column.numeric() if exact_number(value) else None
            if numbers is not None:
                with np.errstate(invalid="ignore"):
                    if operator == FilterOperator.GT:
                        return numbers > value
                    if operator == FilterOperator.GTE:
                        return numbers >= value
                    if operator == FilterOperator.LT:
                        return numbers < value
                    return numbers <= value
        if operator == FilterOperator.NIN:  # non-list value
            return none | per_row(present)
        return per_row(present)


class _PostingsView(Mapping):
    """``store._postings[key][value]`` -> rows (read-only, for benchmarks)."""

    def __init__(self, state: _State) -> None:
        self._state = state

    def __getitem__(self, key: str) -> Dict[Any, np.ndarray]:
        with self._state.lock:
            return self._state.column(key).postings()

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._state.columns))

    def __len__(self) -> int:
        return len(self._state.columns)


class NumpyVectorStore(SimpleVectorStore):
    """In-memory vector store with exact cosine top-k over a numpy matrix.

    Drop-in for ``SimpleVectorStore`` (``stores_text=False``: text comes from
    the docstore; persisted files load in either class). Non-default query
    modes (MMR, SVM, ...) fall back to the parent. Nested ``MetadataFilters``
    are supported.

    Memory: besides upstream's ``embedding_dict`` (Python lists), 12 bytes per
    dimension per node (the unit rows in float64, for exact scores, and in
    float32, which a large query scans first: the float32 screen keeps every
    row that can be in the top k given float32's error bound, and only those
    are scored in float64).
    """

    _state: _State = PrivateAttr(default_factory=_State)

    @classmethod
    def class_name(cls) -> str:
        return "NumpyVectorStore"

    @property
    def _ids(self) -> List[Optional[str]]:
        """Node id per matrix row (``None`` for a deleted row not compacted yet)."""
        return self._state.ids

    @property
    def _postings(self) -> Mapping[str, Dict[Any, np.ndarray]]:
        return _PostingsView(self._state)

    # ------------------------------------------------------------ updates
    def _synced(self, state: _State) -> None:
        """Bring ``state`` in line with ``self.data`` (call under the lock)."""
        if not state.synced(self.data):
            state.rebuild(self.data)

    def add(self, nodes: Sequence[BaseNode], **add_kwargs: Any) -> List[str]:
        """Add ``nodes`` (with embeddings); NumPy scalars in metadata are stored as the
        Python numbers they hold (upstream fails on them without naming the key), and a
        value JSON cannot hold is refused naming node, key and fix (:func:`json_nodes`)."""
        nodes = json_nodes(nodes)
        state = self._state
        with state.lock:
            self._synced(state)
            ids = super().add(nodes, **add_kwargs)
            state.added(ids)
        return ids

    def delete(self, ref_doc_id: str, **delete_kwargs: Any) -> None:
        state = self._state
        with state.lock:
            self._synced(state)
            super().delete(ref_doc_id, **delete_kwargs)
            state.removed()

    def delete_nodes(
        self,
        node_ids: Optional[List[str]] = None,
        filters: Optional[MetadataFilters] = None,
        **delete_kwargs: Any,
    ) -> None:
        state = self._state
        with state.lock:
            self._synced(state)
            super().delete_nodes(node_ids, filters, **delete_kwargs)
            state.removed(list(node_ids) if node_ids is not None else None)

    def clear(self) -> None:
        state = self._state
        with state.lock:
            super().clear()
            state.rebuild(self.data)

    # --------------------------------------------------------- persistence
    def persist(
        self,
        persist_path: str = os.path.join(DEFAULT_PERSIST_DIR, DEFAULT_PERSIST_FNAME),
        fs: Optional[fsspec.AbstractFileSystem] = None,
    ) -> None:
        """Write the store to ``persist_path`` in upstream's format, atomically.

        The file is written under a temporary name and renamed over
        ``persist_path``, so a crash leaves the old file or the new one. An
        existing file that is not a vector store file is refused instead of
        replaced. Other filesystems (``fs`` not local) are written as upstream does.

        Raises:
            PersistError: ``persist_path`` is a folder or a file of another kind.
        """
        fs = fs or self._fs
        if not isinstance(fs, LocalFileSystem):
            super().persist(persist_path, fs=fs)
            return
        path = Path(persist_path)
        if path.exists() and not _looks_like_store_file(path):
            raise PersistError(
                f"refusing to replace {path}: it is not a vector store file (left untouched); "
                "choose another path"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._state.lock:  # a consistent copy even while another thread adds
            # the fields as they are: dataclasses_json's to_dict walks every float (slow)
            payload = json.dumps({
                "embedding_dict": self.data.embedding_dict,
                "text_id_to_ref_doc_id": self.data.text_id_to_ref_doc_id,
                "metadata_dict": self.data.metadata_dict,
            })
        write_file_atomically(path, lambda handle: handle.write(payload))

    @classmethod
    def from_persist_path(
        cls, persist_path: str, fs: Optional[fsspec.AbstractFileSystem] = None
    ) -> "NumpyVectorStore":
        """Load a store written by ``persist`` (ours or upstream's).

        Raises:
            PersistError: naming the file when it is missing, not JSON, not a
                vector store (e.g. ``{}``) or internally inconsistent.
        """
        fs = fs or fsspec.filesystem("file")
        if not fs.exists(persist_path):
            raise PersistError(
                f"{persist_path} is missing: no vector store was persisted there; persist it again"
            )
        try:
            with fs.open(persist_path, "rb") as handle:
                data = json.load(handle)
        except (ValueError, UnicodeDecodeError) as exc:
            raise PersistError(
                f"{persist_path} is corrupted ({exc}); restore it or persist the store again"
            ) from exc
        problem = _store_file_problem(data)
        if problem is not None:
            raise PersistError(
                f"{persist_path} is not a usable vector store file: {problem}; restore it or "
                "persist the store again"
            )
        # checked above, so built directly: dataclasses_json's from_dict decodes
        # every float one by one (about 95% of loading a 5k-node index)
        return cls(
            data=SimpleVectorStoreData(
                embedding_dict=data["embedding_dict"],
                text_id_to_ref_doc_id=data.get("text_id_to_ref_doc_id", {}),
                metadata_dict=data.get("metadata_dict", {}),
            )
        )

    # ------------------------------------------------------------- queries
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if query.similarity_top_k is not None:
            check_count("similarity_top_k", query.similarity_top_k, minimum=0)  # 0: all, as upstream
        if query.mode != VectorStoreQueryMode.DEFAULT:
            return super().query(query, **kwargs)
        data = self.data
        if query.filters is not None and data.embedding_dict and not data.metadata_dict:
            raise ValueError(
                "Cannot filter stores that were persisted without metadata. "
                "Please rebuild the store with metadata to enable filtering."
            )
        state = self._state
        with state.lock:
            self._synced(state)
            if not state.broken:
                return answer_query(state, query)
        return super().query(query, **kwargs)


_STORE_FILE_START = re.compile(rb'\s*\{\s*"(embedding_dict|text_id_to_ref_doc_id|metadata_dict)"\s*:')


def vector_index(
    nodes: Sequence[BaseNode],
    embed_model: Optional[BaseEmbedding] = None,
    *,
    vector_store: Optional[BasePydanticVectorStore] = None,
    docstore: Optional[BaseDocumentStore] = None,
    show_progress: bool = False,
    store_nodes_override: bool = False,
    embedding_cache: Union[str, Path, CachedEmbedding, None] = None,
) -> VectorStoreIndex:
    """A ``VectorStoreIndex`` over ``nodes`` in a new :class:`NumpyVectorStore`.

    The one place the package builds an index from nodes: nodes that carry an
    embedding are not embedded again (``VectorStoreIndex`` embeds only the
    others), so an index's stored vectors are reused.

    Args:
        nodes: the nodes to index.
        embed_model: the model for nodes without an embedding and for queries
            (argument > ``Settings.embed_model`` > the bundled model chosen for
            the nodes' scripts when none carries an embedding, see
            :func:`~llama_index_ext_recursive.models.choose_embed_model`).
        vector_store: another store to fill instead (FAISS, Chroma, PostgreSQL, ...).
        docstore: the docstore to keep the nodes in (default: upstream's).
        show_progress: a progress bar while embedding.
        store_nodes_override: keep every node in the docstore even when the
            store keeps text (as upstream's argument).
        embedding_cache: a SQLite path or a
            :class:`~llama_index_ext_recursive.embedding_cache.CachedEmbedding`:
            texts it holds for the model are not embedded again.
    """
    check_embedding_cache(embedding_cache)
    nodes = json_nodes(nodes)  # before anything is embedded
    storage = StorageContext.from_defaults(
        vector_store=vector_store if vector_store is not None else NumpyVectorStore(),
        docstore=docstore,
    )
    return VectorStoreIndex(
        nodes,
        storage_context=storage,
        embed_model=as_cached(resolve_embed_model(embed_model, texts=corpus_sample(nodes)), embedding_cache),
        show_progress=show_progress,
        store_nodes_override=store_nodes_override,
    )


def _looks_like_store_file(path: Path) -> bool:
    """Whether ``path`` is a file upstream's or our ``persist`` wrote (by its first bytes)."""
    if not path.is_file():
        return False
    with open(path, "rb") as handle:
        return bool(_STORE_FILE_START.match(handle.read(256)))


def _store_file_problem(data: Any) -> Optional[str]:
    """Why a parsed store file cannot be loaded faithfully (``None``: it can)."""
    if not isinstance(data, dict):
        return f"it holds a JSON {type(data).__name__}, not an object"
    if "embedding_dict" not in data:
        return "it has no embedding_dict"
    for key in ("embedding_dict", "text_id_to_ref_doc_id", "metadata_dict"):
        if not isinstance(data.get(key, {}), dict):
            return f"its {key} is a {type(data[key]).__name__}, not an object"
    vectors = data["embedding_dict"]
    bad = next((k for k, v in vectors.items() if not isinstance(v, list)), None)
    if bad is not None:
        return f"the embedding of {bad!r} is not a list of numbers"
    if len({len(v) for v in vectors.values()}) > 1:
        return "its embeddings have different dimensions"
    for key in ("text_id_to_ref_doc_id", "metadata_dict"):
        stray = next((k for k in data.get(key, {}) if k not in vectors), None)
        if stray is not None:
            return f"its {key} names {stray!r}, which has no embedding"
    return None
