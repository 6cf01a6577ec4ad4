"""The rows behind a :class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore`.

:class:`RowState` mirrors upstream's ``SimpleVectorStoreData`` row for row: the
embeddings as float64 and float32 unit rows in the dict's order (appended,
overwritten in place, tombstoned and compacted as the dict changes), the
metadata as columns with posting lists, and the masks a filter selects. The
store keeps it in step with ``data`` under its lock
(:mod:`.numpy_store`); the query arithmetic reads it (:mod:`.numpy_search`).
Both stand above this module, which knows neither.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from llama_index.core.vector_stores.simple import SimpleVectorStoreData
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive.filters import operator_fn
from llama_index_ext_recursive.stores.numpy_columns import EMPTY_ROWS, MetadataColumn, exact_number

_VECTORISED = frozenset(
    {
        FilterOperator.EQ,
        FilterOperator.NE,
        FilterOperator.IN,
        FilterOperator.NIN,
        FilterOperator.IS_EMPTY,
        FilterOperator.GT,
        FilterOperator.GTE,
        FilterOperator.LT,
        FilterOperator.LTE,
    }
)


class RowState:
    """The matrix and indexes mirroring one ``SimpleVectorStoreData``.

    A plain object (attribute access on the pydantic model is slow); all
    reads and writes happen under ``lock``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.reset(None)

    # copies and pickles of the store start unbuilt (a lock cannot be copied)
    def __reduce__(self) -> Any:
        return (RowState, ())

    def __deepcopy__(self, memo: Any) -> RowState:
        return RowState()

    def __copy__(self) -> RowState:
        return RowState()

    def reset(self, data: SimpleVectorStoreData | None) -> None:
        self.data = data
        self.emb: dict[str, Any] = data.embedding_dict if data is not None else {}
        self.meta: dict[str, Any] = data.metadata_dict if data is not None else {}
        self.matrix = np.zeros((0, 0))  # unit rows, float64; capacity rows, rows >= n unused
        self.matrix32 = np.zeros((0, 0), dtype=np.float32)  # the same rows in float32 (screening)
        self.buffers: dict[tuple, np.ndarray] = {}  # see numpy_search._gather_dot
        self.alive = np.zeros(0, dtype=bool)
        self.bad = np.zeros(0, dtype=bool)  # zero or non-finite norm: upstream's score is NaN
        self.no_meta = np.zeros(0, dtype=bool)  # live rows without a metadata_dict entry
        self.n = 0
        self.n_dead = 0
        self.n_bad = 0
        self.ids: list[str | None] = []
        self.row_of: dict[str, int] = {}
        self.metas: list[Mapping[str, Any] | None] = []
        self.columns: dict[str, MetadataColumn] = {}
        self.version = 0
        self.allowed_cache: tuple | None = None
        self.broken = False  # embeddings of different lengths: leave queries to upstream

    def live_id(self, row: int) -> str:
        """The id of a live row (tombstoned rows hold ``None`` until compaction)."""
        node_id = self.ids[row]
        assert node_id is not None, f"row {row} is tombstoned"
        return node_id

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

    def _unit_rows(self, vectors: list[Any]) -> tuple | None:
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

    def append(self, new_ids: list[str]) -> None:
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

    def overwrite(self, rows: list[int]) -> None:
        """Rows whose id was added again: new vector and metadata, same position."""
        if not rows or self.broken:
            return
        unit = self._unit_rows([self.emb[self.live_id(r)] for r in rows])
        if unit is None:
            self.broken = True
            return
        vectors, bad = unit
        index = np.asarray(rows, dtype=np.int64)
        self.matrix[index] = vectors
        self.matrix32[index] = vectors
        self.bad[index] = bad
        self.n_bad = int(self.bad[: self.n].sum())
        for r in rows:
            self.metas[r] = self.meta.get(self.live_id(r))
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
        new: list[str] = []
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

    def removed(self, candidates: Sequence[str] | None = None) -> None:
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
            del self.row_of[self.live_id(r)]
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

    def compact(self) -> None:
        keep = np.flatnonzero(self.alive[: self.n])
        self.matrix = self.matrix[keep]
        self.matrix32 = self.matrix32[keep]
        self.alive = np.ones(len(keep), dtype=bool)
        self.bad = self.bad[keep]
        self.no_meta = self.no_meta[keep]
        self.ids = [self.ids[r] for r in keep.tolist()]
        self.metas = [self.metas[r] for r in keep.tolist()]
        self.row_of = {node_id: r for r, node_id in enumerate(self.ids) if node_id is not None}
        self.columns = {}
        self.n, self.n_dead = len(keep), 0
        self.version += 1

    # ------------------------------------------------------------- queries
    def column(self, key: str) -> MetadataColumn:
        column = self.columns.get(key)
        if column is None:
            column = self.columns[key] = MetadataColumn([None if m is None else m.get(key) for m in self.metas])
        return column

    def allowed(self, node_ids: Sequence[str]) -> np.ndarray | None:
        """Mask of the rows in ``node_ids``; ``None`` when that is every live row."""
        cached = self.allowed_cache
        if cached is not None and cached[0] == self.version and cached[1] == node_ids:
            return cached[2]
        rows = [r for r in map(self.row_of.get, node_ids) if r is not None]
        selected = np.zeros(self.n, dtype=bool)
        selected[rows] = True
        # None: as_retriever() passes every id of the index
        mask = None if int(selected.sum()) == self.n - self.n_dead else selected
        self.allowed_cache = (self.version, list(node_ids), mask)
        return mask

    def equality_rows(self, filters: MetadataFilters) -> np.ndarray | None:
        """Sorted rows of an AND of ``EQ``/``IN`` leaves, straight from the postings.

        ``None`` when the filter has another shape or a column holds values
        that need the per-row check (lists, dicts); the mask path handles those.
        """
        if (filters.condition or FilterCondition.AND) != FilterCondition.AND:
            return None
        rows: np.ndarray | None = None
        for item in filters.filters:
            if isinstance(item, MetadataFilters):
                return None
            values: list[Any]
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
            ordered = sorted(
                items, key=lambda f: 2 if isinstance(f, MetadataFilters) else 0 if f.operator in _VECTORISED else 1
            )
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
