"""Metadata columns of :class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore`.

One :class:`MetadataColumn` per metadata key: its value per row and the
indexes derived from it on first use (rows per value for ``EQ``/``IN``, a
float64 array for numeric comparisons); :func:`operator_fn` is upstream's
per-value operator semantics for everything the columns do not vectorise.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Optional

import numpy as np
from llama_index.core.vector_stores.types import FilterOperator

PLAIN = frozenset({str, int, float, bool})  # hash-consistent with ==
EXACT_INT = 2**53  # ints up to this convert to float64 exactly
EMPTY_ROWS = np.empty(0, dtype=np.int64)


def exact_number(value: Any) -> bool:
    kind = type(value)
    return kind is float or kind is bool or (kind is int and -EXACT_INT <= value <= EXACT_INT)


def operator_fn(operator: FilterOperator, value: Any) -> Callable[[Any], Any]:
    """Upstream's ``_process_filter_match`` for one operator, metadata value not None."""
    if operator == FilterOperator.EQ:
        return lambda v: v == value
    if operator == FilterOperator.NE:
        return lambda v: v != value
    if operator == FilterOperator.GT:
        return lambda v: v > value
    if operator == FilterOperator.GTE:
        return lambda v: v >= value
    if operator == FilterOperator.LT:
        return lambda v: v < value
    if operator == FilterOperator.LTE:
        return lambda v: v <= value
    if operator == FilterOperator.IN:
        return lambda v: v in value
    if operator == FilterOperator.NIN:
        return lambda v: v not in value
    if operator == FilterOperator.CONTAINS:
        return lambda v: value in v
    if operator in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        insensitive = operator == FilterOperator.TEXT_MATCH_INSENSITIVE

        def text_match(v: Any) -> bool:
            if isinstance(value, str) and isinstance(v, str):
                return value.lower() in v.lower() if insensitive else value in v
            raise TypeError(
                "Both metadata_value and value should be strings to be used with a "
                f"{'TEXT_MATCH_INSENSITIVE' if insensitive else 'TEXT_MATCH'} filter"
            )

        return text_match
    if operator == FilterOperator.ALL:
        return lambda v: all(val in v for val in value)
    if operator == FilterOperator.ANY:
        return lambda v: any(val in v for val in value)
    if operator == FilterOperator.IS_EMPTY:
        return lambda v: v == "" or v == []
    raise ValueError(f"Invalid operator: {operator}")


class MetadataColumn:
    """One metadata key: its value per row and indexes derived on first use."""

    __slots__ = ("values", "_none", "_other", "_postings", "_arrays", "_numeric")

    def __init__(self, values: List[Any]) -> None:
        self.values = values
        self.reset()

    def reset(self) -> None:
        self._none: Optional[np.ndarray] = None
        self._other: Optional[np.ndarray] = None  # non-None values of other types (lists, dicts)
        self._postings: Optional[Dict[Any, List[int]]] = None
        self._arrays: Dict[Any, np.ndarray] = {}
        self._numeric: Any = False  # not computed yet; None = not all numbers

    def none(self) -> np.ndarray:
        if self._none is None:
            self._none = np.fromiter((v is None for v in self.values), bool, len(self.values))
        return self._none

    def _index(self) -> None:
        postings: Dict[Any, List[int]] = {}
        other = np.zeros(len(self.values), dtype=bool)
        for row, value in enumerate(self.values):
            if value is None:
                continue
            if type(value) in PLAIN:
                postings.setdefault(value, []).append(row)
            else:
                other[row] = True
        self._postings, self._other = postings, other

    def other(self) -> np.ndarray:
        if self._other is None:
            self._index()
        return self._other

    def equal_rows(self, value: Any) -> np.ndarray:
        """Rows holding a plain value ``== value`` (as Python compares them)."""
        if self._postings is None:
            self._index()
        if type(value) not in PLAIN or value != value:  # NaN equals nothing
            return EMPTY_ROWS
        rows = self._arrays.get(value)
        if rows is None:
            rows = self._arrays[value] = np.asarray(self._postings.get(value, ()), dtype=np.int64)
        return rows

    def postings(self) -> Dict[Any, np.ndarray]:
        if self._postings is None:
            self._index()
        return {value: self.equal_rows(value) for value in self._postings}

    def numeric(self) -> Optional[np.ndarray]:
        """float64 column (NaN where None) when every value is an exact number."""
        if self._numeric is False:
            values = self.values
            if all(v is None or exact_number(v) for v in values):
                self._numeric = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
            else:
                self._numeric = None
        return self._numeric
