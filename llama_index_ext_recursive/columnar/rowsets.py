"""The rows a restricted search may return, in every form its components need, made once.

A filtered or routed query of a columnar store hands one set of rows to several
components: the vector column gathers them (sorted ids) or skips the others
while it scans (a mask over every row, and from it the lists holding one), the
BM25 postings look them up per term (sorted ids) or test many postings at once
(the mask). A user's filter repeats from query to query, so the metadata
columns keep its :class:`RowSet` and every form made from it is made once, not
once per component per query (at 2M rows each conversion costs about a
millisecond).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

__all__ = ["RowIdError", "RowSet", "checked_ids", "sorted_unique"]

T = TypeVar("T")


class RowIdError(IndexError, ValueError):
    """A row id that does not exist: an ``IndexError`` (an id out of range) and a
    ``ValueError`` (a bad argument), as the columnar components have raised either."""


def checked_ids(rows: Any, row_count: int, caller: str) -> np.ndarray:
    """``rows`` as ``int64`` row ids in the order given, each checked to exist.

    Raises:
        ValueError: not a one-dimensional sequence of integers.
        RowIdError: an id outside ``0 .. row_count - 1`` (the first named).
    """
    array = np.asarray(rows)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{caller}: rows must be a one-dimensional sequence of integer row ids, got {array.dtype} "
            f"of shape {array.shape}"
        )
    array = array.astype(np.int64, copy=False)
    wrong = (array < 0) | (array >= row_count)
    if wrong.any():
        bad = int(array[np.flatnonzero(wrong)[0]])
        where = f"row ids run from 0 to {row_count - 1}" if row_count else "there are no rows"
        raise RowIdError(f"{caller}: row {bad} does not exist: {where}; after compact() use the ids it returned")
    return array


class RowSet:
    """Distinct row ids, ascending, below ``row_count``; read-only.

    Build one with :meth:`checked` from ids a caller gave (validated, sorted),
    or with :meth:`of_mask` from a boolean mask. Components read :attr:`rows`,
    :attr:`mask` and :meth:`derived` forms; a set is never changed, so a form
    made once stays true.
    """

    __slots__ = ("rows", "row_count", "_mask", "_derived")

    def __init__(self, rows: np.ndarray, row_count: int, mask: np.ndarray | None = None) -> None:
        """Args:
        rows: distinct ``int64`` row ids, ascending, each below ``row_count`` (not checked:
            use :meth:`checked` for ids from a caller).
        row_count: the rows of the component the ids index.
        mask: the same rows as a boolean mask of ``row_count`` entries, when already made.
        """
        rows.setflags(write=False)
        if mask is not None:
            mask.setflags(write=False)
        self.rows = rows
        self.row_count = row_count
        self._mask = mask
        self._derived: dict[tuple[str, int], tuple[Any, Any, Any]] = {}

    @classmethod
    def checked(cls, rows: Any, row_count: int, caller: str) -> RowSet:
        """The distinct ids of ``rows`` (any order, repeats allowed), checked by :func:`checked_ids`."""
        return cls(sorted_unique(checked_ids(rows, row_count, caller)), row_count)

    @classmethod
    def of_mask(cls, mask: np.ndarray) -> RowSet:
        """The rows where ``mask`` (one bool per row) is true."""
        return cls(np.flatnonzero(mask), len(mask), mask)

    def __len__(self) -> int:
        return len(self.rows)

    def among(self, ids: np.ndarray) -> RowSet:
        """The rows of this set that are among ``ids`` (valid row ids, any order, repeats
        allowed): one binary search per id, so a few named nodes cost nothing however large
        the set (``np.intersect1d`` sorts both, 1.7 s at 2M rows)."""
        wanted = sorted_unique(np.asarray(ids, dtype=np.int64))
        at = np.minimum(np.searchsorted(self.rows, wanted), max(len(self.rows) - 1, 0))
        found = wanted[self.rows[at] == wanted] if len(self.rows) else wanted[:0]
        return RowSet(found, self.row_count)

    @property
    def mask(self) -> np.ndarray:
        """One read-only bool per row: in the set."""
        if self._mask is None:
            mask = np.zeros(self.row_count, dtype=bool)
            mask[self.rows] = True
            mask.setflags(write=False)
            self._mask = mask
        return self._mask

    def derived(self, form: str, owner: object, state: object, make: Callable[[], T]) -> T:
        """The ``form`` of these rows that ``owner`` computes from its ``state`` (an object
        replaced, never changed, when the owner changes; ``None`` for a form of the rows
        alone), made by ``make`` once per owner and state.

        Concurrent callers may both make it; either result is the same.
        """
        key = (form, id(owner))
        found = self._derived.get(key)
        if found is not None and found[0] is owner and found[1] is state:
            return found[2]
        value = make()
        self._derived[key] = (owner, state, value)  # holding both keeps their ids unique
        return value

    def check_row_count(self, row_count: int, caller: str) -> None:
        """Refuse a set made for another number of rows (another store's, or before a change).

        Raises:
            ValueError: naming both counts.
        """
        if self.row_count != row_count:
            raise ValueError(
                f"{caller}: these rows were selected among {self.row_count} rows, but the column holds "
                f"{row_count}: select them again from this column's current rows"
            )


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """The distinct ``values``, ascending: ``np.unique`` by sorting (NumPy 2.4's ``np.unique``
    hashes integers, which took 25x a sort on 100k row ids)."""
    ordered = np.sort(values)
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]
