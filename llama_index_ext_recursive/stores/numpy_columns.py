"""Metadata columns of :class:`~llama_index_ext_recursive.stores.numpy_store.NumpyVectorStore`.

One :class:`MetadataColumn` per metadata key: its value per row and the
indexes derived from it on first use (rows per value for ``EQ``/``IN``, a
float64 array for numeric comparisons); everything the columns do not
vectorise is evaluated per value by
:func:`~llama_index_ext_recursive.filters.operator_fn`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

PLAIN = frozenset({str, int, float, bool})  # hash-consistent with ==
EXACT_INT = 2**53  # ints up to this convert to float64 exactly
EMPTY_ROWS = np.empty(0, dtype=np.int64)


def exact_number(value: Any) -> bool:
    kind = type(value)
    return kind is float or kind is bool or (kind is int and -EXACT_INT <= value <= EXACT_INT)


class MetadataColumn:
    """One metadata key: its value per row and indexes derived on first use."""

    __slots__ = ("values", "_none", "_other", "_postings", "_arrays", "_numeric")

    def __init__(self, values: list[Any]) -> None:
        self.values = values
        self.reset()

    def reset(self) -> None:
        self._none: np.ndarray | None = None
        self._other: np.ndarray | None = None  # non-None values of other types (lists, dicts)
        self._postings: dict[Any, list[int]] | None = None
        self._arrays: dict[Any, np.ndarray] = {}
        self._numeric: Any = False  # not computed yet; None = not all numbers

    def none(self) -> np.ndarray:
        if self._none is None:
            self._none = np.fromiter((v is None for v in self.values), bool, len(self.values))
        return self._none

    def _index(self) -> tuple[dict[Any, list[int]], np.ndarray]:
        postings: dict[Any, list[int]] = {}
        other = np.zeros(len(self.values), dtype=bool)
        for row, value in enumerate(self.values):
            if value is None:
                continue
            if type(value) in PLAIN:
                postings.setdefault(value, []).append(row)
            else:
                other[row] = True
        self._postings, self._other = postings, other
        return postings, other

    def other(self) -> np.ndarray:
        if self._other is None:
            return self._index()[1]
        return self._other

    def equal_rows(self, value: Any) -> np.ndarray:
        """Rows holding a plain value ``== value`` (as Python compares them)."""
        postings = self._postings if self._postings is not None else self._index()[0]
        if type(value) not in PLAIN or value != value:  # NaN equals nothing
            return EMPTY_ROWS
        rows = self._arrays.get(value)
        if rows is None:
            rows = self._arrays[value] = np.asarray(postings.get(value, ()), dtype=np.int64)
        return rows

    def postings(self) -> dict[Any, np.ndarray]:
        postings = self._postings if self._postings is not None else self._index()[0]
        return {value: self.equal_rows(value) for value in postings}

    def numeric(self) -> np.ndarray | None:
        """float64 column (NaN where None) when every value is an exact number."""
        if self._numeric is False:
            values = self.values
            if all(v is None or exact_number(v) for v in values):
                self._numeric = np.array([math.nan if v is None else v for v in values], dtype=np.float64)
            else:
                self._numeric = None
        return self._numeric
