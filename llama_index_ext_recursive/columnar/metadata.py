"""Metadata filters evaluated on dictionary-encoded columns instead of node objects.

Per metadata key, every row holds an ``int32`` code (``-1``: the row lacks the
key, or holds ``None``) into the key's list of distinct values. A filter leaf is
evaluated once per distinct value with :func:`..filters.operator_fn` (the
package's one definition of what an operator means), which gives a boolean per
code; the rows' answer is that table indexed by the codes. So 2M rows with a
few hundred distinct values cost a few hundred Python calls and one NumPy
gather per leaf, and the semantics (nested ``MetadataFilters``, AND/OR/NOT,
missing keys, list values, numbers against strings) are exactly those of
:func:`..filters.metadata_matcher`.

A key with very many distinct values (an id, a date) would cost one Python call
per distinct value per leaf, so equality (``==``, ``!=``, ``in``, ``nin``) looks
its values up in a hash index of the distinct values, and numeric comparisons
(``>``, ``>=``, ``<``, ``<=``) run on a NumPy array of the numeric distinct
values; both are proven equal to the per-value path by the property tests.

A query asks for the same masks many times: the dense and the keyword search
of a level take the same filters, every query of a filtered search repeats the
user's filter, and a routed search ANDs the routed documents with it. So the
row mask of every filter tree and subtree is cached (the last
:data:`_CACHED_MASKS`, keyed by the filter's content), until rows are appended
or compacted; deletions need no invalidation, as the live rows are applied to
the cached mask on each call. A leaf that few codes pass (an ``==`` or ``in``
on a document id) is computed by comparing the codes with those few, which is
many times faster than a gather through the per-code table. Where a caller
wants the matching rows rather than a mask (:meth:`MetadataColumns.rows`), an
equality that few rows pass reads them from each segment's rows sorted by
code, built once per segment and key, with no pass over every row.

Codes are kept in immutable segment files (:mod:`.segments`), one ``int32``
array of shape ``(keys, rows)`` per append; deletes are tombstone segments of
row ids; the distinct values are JSON files (data only) written once each,
holding the values added since the previous write.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from llama_index.core.vector_stores.types import FilterCondition, FilterOperator, MetadataFilter, MetadataFilters

from llama_index_ext_recursive.columnar import segments
from llama_index_ext_recursive.columnar.rowsets import RowSet, checked_ids
from llama_index_ext_recursive.filters import operator_fn
from llama_index_ext_recursive.persist import PathLike, PersistError, load_json, write_file_atomically

__all__ = ["FORMAT_VERSION", "MetadataColumns"]

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1

# a float64 holds every integer up to this magnitude exactly, so comparisons on it equal Python's
_EXACT_FLOAT_INT = 2**53

# operators a row without the key (or with None) passes, as in filters._leaf_matcher
_MISSING_PASSES = frozenset({FilterOperator.NE, FilterOperator.NIN, FilterOperator.IS_EMPTY})
_COMPARISONS = {
    FilterOperator.GT: np.greater,
    FilterOperator.GTE: np.greater_equal,
    FilterOperator.LT: np.less,
    FilterOperator.LTE: np.less_equal,
}

Identity = tuple[Any, Any]

# filter masks cached per MetadataColumns (one bool per row each: 16 MB at 2M rows)
_CACHED_MASKS = 8
# a leaf that at most this many codes pass (or fail) compares the codes with them instead of
# gathering through the table: one comparison costs about a twentieth of a gather
_FEW_CODES = 8
# an equality filter that at most this share of the rows pass is answered from the rows sorted
# by code (:meth:`MetadataColumns.rows`) instead of a mask over every row
_FEW_ROWS_SHARE = 1 / 64


def _json_problem(value: Any) -> str | None:
    """Why ``value`` does not survive a JSON round trip unchanged (``None``: it does)."""
    kind = type(value)
    if value is None or kind in (str, bool, int):
        return None
    if kind is float:
        return None if math.isfinite(value) else f"the float {value!r} is not finite"
    if kind is list:
        return next((problem for item in value if (problem := _json_problem(item)) is not None), None)
    if kind is dict:
        for name, item in value.items():
            if type(name) is not str:
                return f"the dict key {name!r} is a {type(name).__name__}, not a string"
            problem = _json_problem(item)
            if problem is not None:
                return problem
        return None
    return f"a {kind.__name__} ({value!r}) is not a JSON value"


def _identity(key: str, value: Any) -> Identity:
    """The dictionary key of a metadata value: equal for values every operator treats alike.

    Scalars are told apart by type (``1``, ``1.0`` and ``True`` stay three
    values, as the vocabulary reports them); lists and dicts by their canonical
    JSON.

    Raises:
        ValueError: the value is not JSON-representable, naming the key and the fix.
    """
    kind = type(value)
    if kind is str or kind is bool or kind is int:
        return kind, value
    problem = _json_problem(value)
    if problem is not None:
        raise ValueError(
            f"metadata key {key!r}: {problem}; metadata values are stored as JSON, so convert it to a "
            "string, a finite number, a bool, or a list/dict of those (e.g. a date as value.isoformat())"
        )
    if kind is float:
        return float, value
    return "json", json.dumps(value, sort_keys=True, allow_nan=False)


@dataclass
class _Segment:
    """The codes of rows ``start .. start + rows - 1``: ``codes[j]`` is the column of ``keys[j]``."""

    number: int
    start: int
    keys: list[str]
    codes: np.ndarray  # int32, shape (len(keys), rows)

    @property
    def rows(self) -> int:
        return int(self.codes.shape[1])


@dataclass
class _ValueFile:
    """Distinct values added since the previous value file, per key, in code order."""

    number: int
    values: dict[str, list[Any]]


class MetadataColumns:
    """Dictionary-encoded metadata of rows ``0 .. n-1``, and filters over it as row masks.

    Holds no Python object per row: per key, an ``int32`` code per row and the
    list of distinct values. Rows are appended, deleted (tombstones: their
    codes stay until :meth:`compact`) and compacted; :meth:`write` and
    :meth:`open` persist through :mod:`.segments`.
    """

    def __init__(self) -> None:
        self._segments: list[_Segment] = []
        self._values: dict[str, list[Any]] = {}
        self._lookup: dict[str, dict[Identity, int]] = {}  # built on first use per key
        self._numeric: dict[str, tuple[np.ndarray, np.ndarray] | None] = {}  # per key: (codes, float64 values)
        self._value_files: list[_ValueFile] = []
        self._tombstones: list[tuple[int, np.ndarray]] = []
        self._dead = np.zeros(0, dtype=bool)
        self._next_number = 0
        self._masks: OrderedDict[Hashable, np.ndarray] = OrderedDict()  # filter key -> rows it matches
        self._masks_lock = threading.Lock()  # concurrent queries share the cache
        self._row_sets: OrderedDict[Hashable, RowSet] = OrderedDict()  # filter key -> its live rows
        # (segment number, key) -> the segment's rows sorted by code, and the codes (:meth:`rows`)
        self._code_indexes: dict[tuple[int, str], tuple[np.ndarray, np.ndarray]] = {}

    # ------------------------------------------------------------------ reading
    def __len__(self) -> int:
        """Rows ever appended (deleted rows included until :meth:`compact`)."""
        return len(self._dead)

    @property
    def live(self) -> np.ndarray:
        """Boolean per row: not deleted (a copy)."""
        return ~self._dead

    def keys(self) -> list[str]:
        """Every metadata key seen, sorted."""
        return sorted(self._values)

    def live_keys(self) -> set[str]:
        """The keys some live row holds (:meth:`keys` also keeps those only deleted rows held)."""
        live = ~self._dead
        found: set[str] = set()
        for segment in self._segments:
            alive = live[segment.start : segment.start + segment.rows]
            for key, codes in zip(segment.keys, segment.codes, strict=True):
                if key not in found and bool((alive & (np.asarray(codes) >= 0)).any()):
                    found.add(key)
        return found

    def values(self, key: str) -> list[Any]:
        """The distinct values of ``key`` (the filter vocabulary), in code order.

        Values of deleted rows stay until :meth:`compact`; an unknown key has none.
        """
        return list(self._values.get(key, ()))

    def codes(self, key: str) -> np.ndarray:
        """The ``int32`` code of ``key`` for every row (``-1``: missing), a new array."""
        column = np.full(len(self), -1, dtype=np.int32)
        for segment in self._segments:
            if key in segment.keys:
                column[segment.start : segment.start + segment.rows] = segment.codes[segment.keys.index(key)]
        return column

    def mask(self, filters: MetadataFilters | None) -> np.ndarray:
        """Boolean per row: live and matching ``filters`` (``None`` or empty: every live row).

        Exactly :func:`..filters.metadata_matcher` applied to each row's metadata.
        """
        if filters is None or not filters.filters:
            return ~self._dead
        return self._matching(filters) & ~self._dead

    def rows(self, filters: MetadataFilters | None) -> RowSet:
        """Live rows matching ``filters``: the rows of :meth:`mask`, as a :class:`RowSet`.

        A filter that few rows pass (``==`` or ``in`` on document ids, alone or
        ANDed with other filters) is answered from each segment's rows sorted by
        code, so a routed query of a 2M-row level reads the rows of its
        documents instead of passing over every row's code (4 ms a query).
        Other filters' sets are kept (the last :data:`_CACHED_MASKS`) until the
        rows change, so a user's filter repeated by every query is selected once
        and the forms the searches make of it are made once.
        """
        if filters is None or not filters.filters:
            return self._kept_rows(None, lambda: ~self._dead)
        found = self._few_rows(filters)
        if found is not None:
            return RowSet(found[~self._dead[found]], len(self))
        return self._kept_rows(_filter_key(filters), lambda: self.mask(filters))

    def _kept_rows(self, key: Hashable, mask: Callable[[], np.ndarray]) -> RowSet:
        with self._masks_lock:
            found = self._row_sets.get(key)
            if found is not None:
                self._row_sets.move_to_end(key)
                return found
        found = RowSet.of_mask(mask())
        with self._masks_lock:
            self._row_sets[key] = found
            while len(self._row_sets) > _CACHED_MASKS:
                self._row_sets.popitem(last=False)
        return found

    def _few_rows(self, item: MetadataFilters | MetadataFilter) -> np.ndarray | None:
        """Rows ``item`` holds for (dead ones included), ascending, when some part of it is an
        equality that at most a :data:`_FEW_ROWS_SHARE` of the rows pass; ``None`` otherwise."""
        if isinstance(item, MetadataFilter):
            return self._equal_rows(item)
        if not item.filters or (item.condition or FilterCondition.AND) != FilterCondition.AND:
            return None
        found = [(part, self._few_rows(part)) for part in item.filters]
        narrow = [rows for _, rows in found if rows is not None]
        if not narrow:
            return None
        rows = functools.reduce(functools.partial(np.intersect1d, assume_unique=True), narrow)
        for part, few in found:
            if few is None:
                rows = rows[self._matching(part)[rows]]
        return rows

    def _equal_rows(self, item: MetadataFilter) -> np.ndarray | None:
        """The rows of an ``==`` / ``in`` leaf on plain values, from the code index, when they
        are few; ``None`` for another leaf or too many rows (a mask is then cheaper)."""
        value = item.value
        wanted: list[Any]
        if item.operator == FilterOperator.EQ and _is_plain(value):
            wanted = [value]
        elif item.operator == FilterOperator.IN and type(value) is list and all(map(_is_plain, value)):
            wanted = value
        else:
            return None
        codes = np.asarray(sorted(set(self._equal_codes(item.key, wanted))), dtype=np.int32)
        spans = []
        for segment in self._segments:
            if item.key not in segment.keys:
                continue  # rows without the key fail == and in
            order, sorted_codes = self._code_index(segment, item.key)
            starts = np.searchsorted(sorted_codes, codes, side="left")
            ends = np.searchsorted(sorted_codes, codes, side="right")
            spans.append((segment.start, order, starts, ends))
        total = sum(int((ends - starts).sum()) for _, _, starts, ends in spans)
        if total > len(self) * _FEW_ROWS_SHARE:
            return None
        parts = [
            start + order[a:b].astype(np.int64)
            for start, order, starts, ends in spans
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
            if b > a
        ]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def _code_index(self, segment: _Segment, key: str) -> tuple[np.ndarray, np.ndarray]:
        """The segment's rows (local, ``int32``) ordered by their code of ``key``, and those
        codes: built once per segment and key (a segment's codes never change)."""
        cache_key = (segment.number, key)
        with self._masks_lock:
            found = self._code_indexes.get(cache_key)
        if found is not None:
            return found
        codes = np.asarray(segment.codes[segment.keys.index(key)])
        order = np.argsort(codes, kind="stable").astype(np.int32)
        found = (order, codes[order])
        with self._masks_lock:
            live = {s.number for s in self._segments}
            for stale in [k for k in self._code_indexes if k[0] not in live]:
                del self._code_indexes[stale]  # a compaction replaced its segment
            self._code_indexes[cache_key] = found
        return found

    def _matching(self, item: MetadataFilters | MetadataFilter) -> np.ndarray:
        """Boolean per row, dead rows included: ``item`` holds. Cached and read-only."""
        key = _filter_key(item)
        with self._masks_lock:
            found = self._masks.get(key)
            if found is not None:
                self._masks.move_to_end(key)
                return found
        found = self._evaluate(item) if isinstance(item, MetadataFilters) else self._leaf(item)
        found.setflags(write=False)
        with self._masks_lock:
            self._masks[key] = found
            while len(self._masks) > _CACHED_MASKS:
                self._masks.popitem(last=False)
        return found

    def _forget_masks(self) -> None:
        """Drop the cached masks: the rows or their codes changed."""
        with self._masks_lock:
            self._masks.clear()
            self._row_sets.clear()

    def _evaluate(self, filters: MetadataFilters) -> np.ndarray:
        if not filters.filters:
            return np.ones(len(self), dtype=bool)
        parts = [self._matching(item) for item in filters.filters]
        condition = filters.condition or FilterCondition.AND
        if condition == FilterCondition.AND:
            return functools.reduce(np.logical_and, parts)
        combined = functools.reduce(np.logical_or, parts)
        return combined if condition == FilterCondition.OR else ~combined  # NOT: none holds, as upstream

    def _leaf(self, item: MetadataFilter) -> np.ndarray:
        table = self._table(item)
        rows = np.empty(len(self), dtype=bool)
        passing = np.flatnonzero(table)
        few = passing if len(passing) <= len(table) // 2 else np.flatnonzero(~table)
        few[few == len(table) - 1] = -1  # the last entry is the rows without the key, coded -1
        for segment in self._segments:
            span = slice(segment.start, segment.start + segment.rows)
            if item.key not in segment.keys:
                rows[span] = table[-1]
                continue
            codes = np.asarray(segment.codes[segment.keys.index(item.key)])  # a plain view of the map
            if len(few) > _FEW_CODES:
                np.take(table, codes, out=rows[span])  # -1 reads the last entry
                continue
            rows[span] = False
            for code in few.tolist():
                rows[span] |= codes == code
            if few is not passing:
                np.logical_not(rows[span], out=rows[span])
        return rows

    def _table(self, item: MetadataFilter) -> np.ndarray:
        """Boolean per code of ``item.key``, plus a last entry for rows that lack the key."""
        values = self._values.get(item.key, [])
        table = np.zeros(len(values) + 1, dtype=bool)
        table[-1] = item.operator in _MISSING_PASSES
        if not values:
            return table
        operator, wanted = item.operator, item.value
        if operator in (FilterOperator.EQ, FilterOperator.NE) and _is_plain(wanted):
            equal = self._equal_codes(item.key, [wanted])
        elif (
            operator in (FilterOperator.IN, FilterOperator.NIN) and type(wanted) is list and all(map(_is_plain, wanted))
        ):
            equal = self._equal_codes(item.key, wanted)
        elif operator in _COMPARISONS and _is_exact_number(wanted) and (numeric := self._numeric_values(item.key)):
            codes, numbers = numeric
            table[codes] = _COMPARISONS[operator](numbers, float(wanted))  # type: ignore[arg-type]
            return table
        else:
            test = operator_fn(operator, wanted)
            table[:-1] = np.fromiter((test(value) for value in values), dtype=bool, count=len(values))
            return table
        if operator in (FilterOperator.EQ, FilterOperator.IN):
            table[equal] = True
        else:
            table[:-1] = True
            table[equal] = False
        return table

    def _equal_codes(self, key: str, wanted: Sequence[Any]) -> list[int]:
        """Codes of the distinct values ``==`` to one of ``wanted`` (strings and numbers)."""
        lookup = self._lookup_of(key)
        found: list[int] = []
        for value in wanted:
            kinds: tuple[Any, ...] = (str,) if type(value) is str else (int, float, bool)
            found.extend(code for kind in kinds if (code := lookup.get((kind, value))) is not None)
        return found

    def _lookup_of(self, key: str) -> dict[Identity, int]:
        lookup = self._lookup.get(key)
        if lookup is None:
            lookup = {_identity(key, value): code for code, value in enumerate(self._values.get(key, ()))}
            self._lookup[key] = lookup
        return lookup

    def _numeric_values(self, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """Codes and float64 values of the numbers ``key`` holds; ``None`` when a float64
        cannot hold one exactly (then the per-value path decides)."""
        if key not in self._numeric:
            values = self._values.get(key, [])
            codes = [code for code, value in enumerate(values) if type(value) in (int, float, bool)]
            exact = all(_is_exact_number(values[code]) or type(values[code]) is bool for code in codes)
            self._numeric[key] = (
                (np.asarray(codes, dtype=np.int64), np.asarray([values[code] for code in codes], dtype=np.float64))
                if exact
                else None
            )
        return self._numeric[key]

    # ------------------------------------------------------------------ changes
    def append(self, metadatas: Sequence[Mapping[str, Any]]) -> np.ndarray:
        """Add one row per metadata mapping; returns their row ids (``int64``).

        A value of ``None`` is a missing key, as filters read it. Nothing is
        added when a value is refused.

        Args:
            metadatas: one mapping per new row, as ``node.metadata``.

        Raises:
            ValueError: a value is not JSON-representable (naming the key and the fix).
            TypeError: an item is not a mapping, or a key is not a string.
        """
        count = len(metadatas)
        columns: dict[str, list[int]] = {}
        before = {key: len(values) for key, values in self._values.items()}
        try:
            for position, metadata in enumerate(metadatas):
                if not isinstance(metadata, Mapping):
                    raise TypeError(f"metadata of row {position} is a {type(metadata).__name__}, not a mapping")
                for key, value in metadata.items():
                    if value is None:
                        continue
                    column = columns.get(key)
                    if column is None:
                        if type(key) is not str:
                            raise TypeError(f"metadata key {key!r} is a {type(key).__name__}; keys must be strings")
                        column = columns[key] = [-1] * count
                    column[position] = self._code(key, value)
        except (TypeError, ValueError):
            self._forget_values_after(before)
            raise
        start = len(self)
        keys = sorted(columns)
        codes = np.array([columns[key] for key in keys], dtype=np.int32).reshape(len(keys), count)
        self._segments.append(_Segment(self._take_number(), start, keys, codes))
        self._dead = np.concatenate([self._dead, np.zeros(count, dtype=bool)])
        self._forget_masks()
        return np.arange(start, start + count, dtype=np.int64)

    def _code(self, key: str, value: Any) -> int:
        identity = _identity(key, value)
        lookup = self._lookup_of(key)
        code = lookup.get(identity)
        if code is None:
            values = self._values.setdefault(key, [])
            code = lookup[identity] = len(values)
            values.append(
                json.loads(identity[1]) if identity[0] == "json" else value
            )  # a copy the caller cannot change
            self._numeric.pop(key, None)
        return code

    def _forget_values_after(self, before: Mapping[str, int]) -> None:
        """Undo the distinct values a refused append added."""
        for key in list(self._values):
            keep = before.get(key, 0)
            if keep == 0:
                del self._values[key]
            else:
                del self._values[key][keep:]
            self._lookup.pop(key, None)
            self._numeric.pop(key, None)

    def delete(self, rows: Sequence[int] | np.ndarray) -> None:
        """Mark ``rows`` deleted (a tombstone: :meth:`mask` is False for them from now on).

        Raises:
            IndexError: a row id was never appended.
        """
        ids = checked_ids(rows, len(self), "metadata")
        fresh = np.unique(ids[~self._dead[ids]])
        if len(fresh):
            self._dead[fresh] = True
            self._tombstones.append((self._take_number(), fresh))
            with self._masks_lock:
                self._row_sets.clear()  # they hold live rows; the masks are filtered on each call

    def compact(self, mapping: np.ndarray | None = None) -> np.ndarray:
        """Drop deleted rows and distinct values no row uses any more; number rows ``0 .. m-1``.

        Args:
            mapping: old row id -> new row id (``-1``: dropped), as another
                component's compaction returned it; ``None`` drops exactly the
                deleted rows. Kept rows must keep their order and be numbered
                ``0 .. m-1``; a deleted row must be dropped.

        Returns:
            The mapping applied.

        Raises:
            ValueError: ``mapping`` does not fit these rows (the message says how).
        """
        mapping = _checked_mapping(mapping, self._dead)
        kept = mapping >= 0
        columns = {key: self.codes(key)[kept] for key in self._values}
        values: dict[str, list[Any]] = {}
        keys = []
        for key, column in columns.items():
            used = np.unique(column[column >= 0])
            if not len(used):
                continue
            renumber = np.full(len(self._values[key]) + 1, -1, dtype=np.int32)
            renumber[used] = np.arange(len(used), dtype=np.int32)
            columns[key] = renumber[column]
            values[key] = [self._values[key][code] for code in used.tolist()]
            keys.append(key)
        keys.sort()
        count = int(kept.sum())
        codes = np.array([columns[key] for key in keys], dtype=np.int32).reshape(len(keys), count)
        self._segments = [_Segment(self._take_number(), 0, keys, codes)]
        self._values = values
        self._lookup = {}
        self._numeric = {}
        self._value_files = []
        self._tombstones = []
        self._dead = np.zeros(count, dtype=bool)
        self._forget_masks()
        return mapping

    def _take_number(self) -> int:
        number = self._next_number
        self._next_number += 1
        return number

    # ------------------------------------------------------------------ persistence
    def write(self, folder: PathLike, component: str = "metadata") -> None:
        """Persist into ``folder``: the segment and value files it lacks, then the state file.

        Files already in ``folder`` under a segment's name are that segment
        (segment files are immutable), so a write after a small change writes
        kilobytes.

        Args:
            folder: the index folder (created if missing).
            component: file prefix, so that several columns (chunks, documents) share a folder.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self._seal_values()
        for segment in self._segments:
            name = segments.segment_name(f"{component}-codes", segment.number)
            if not (folder / f"{name}.npy").exists():
                segments.write_array(folder, name, segment.codes)
        for number, rows in self._tombstones:
            name = segments.segment_name(f"{component}-deleted", number)
            if not (folder / f"{name}.npy").exists():
                segments.write_array(folder, name, rows)
        for value_file in self._value_files:
            path = folder / f"{segments.segment_name(f'{component}-values', value_file.number)}.json"
            if not path.exists():
                write_file_atomically(path, functools.partial(_dump_json, value_file.values))
        previous = segments.previous_state(folder, component)
        state = {
            "rows": len(self),
            "next_number": self._next_number,
            "segments": [{"number": s.number, "start": s.start, "keys": s.keys} for s in self._segments],
            "deleted": [number for number, _ in self._tombstones],
            "values": [value_file.number for value_file in self._value_files],
        }
        segments.write_state(folder, component, FORMAT_VERSION, state)
        if previous is not None:
            segments.retire(folder, _files_of(component, previous), _files_of(component, state))
        logger.debug("wrote %d metadata rows to %s", len(self), folder)

    def _seal_values(self) -> None:
        """Put the distinct values added since the last value file into a new one."""
        sealed: dict[str, int] = {}
        for value_file in self._value_files:
            for key, values in value_file.values.items():
                sealed[key] = sealed.get(key, 0) + len(values)
        fresh = {key: values[sealed.get(key, 0) :] for key, values in self._values.items()}
        fresh = {key: values for key, values in fresh.items() if values}
        if fresh:
            self._value_files.append(_ValueFile(self._take_number(), fresh))

    @classmethod
    def open(cls, folder: PathLike, component: str = "metadata") -> MetadataColumns:
        """Open what :meth:`write` persisted; codes are memory-mapped, read-only.

        Raises:
            PersistError: a file is missing or damaged, or was written in
                another format version (naming it and the fix).
        """
        folder = Path(folder)
        state = segments.read_state(folder, component, FORMAT_VERSION)
        columns = cls()
        try:
            columns._next_number = int(state["next_number"])
            for entry in state["segments"]:
                codes = segments.open_array(folder, segments.segment_name(f"{component}-codes", entry["number"]))
                keys = list(entry["keys"])
                if codes.dtype != np.int32 or codes.ndim != 2 or codes.shape[0] != len(keys):
                    raise PersistError(
                        f"{folder}: metadata segment {entry['number']} is damaged; build the index again"
                    )
                columns._segments.append(_Segment(int(entry["number"]), int(entry["start"]), keys, codes))
            for number in state["values"]:
                path = folder / f"{segments.segment_name(f'{component}-values', number)}.json"
                values = load_json(path)
                if not isinstance(values, dict):
                    raise PersistError(f"{path} is damaged (not a JSON object); build the index again")
                columns._value_files.append(_ValueFile(int(number), values))
                for key, added in values.items():
                    columns._values.setdefault(key, []).extend(added)
            columns._dead = np.zeros(int(state["rows"]), dtype=bool)
            for number in state["deleted"]:
                rows = segments.open_array(folder, segments.segment_name(f"{component}-deleted", number), mmap=False)
                columns._dead[rows] = True
                columns._tombstones.append((int(number), rows))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise PersistError(
                f"{folder}/{component}{segments.STATE_SUFFIX} is damaged ({exc!r}); build the index again"
            ) from exc
        return columns


def _files_of(component: str, state: dict[str, Any]) -> set[str]:
    """The files a metadata state reads."""
    name = segments.segment_name
    files = {f"{name(f'{component}-codes', int(s['number']))}.npy" for s in state.get("segments", [])}
    files |= {f"{name(f'{component}-deleted', int(number))}.npy" for number in state.get("deleted", [])}
    files |= {f"{name(f'{component}-values', int(number))}.json" for number in state.get("values", [])}
    return files


def _filter_key(item: MetadataFilters | MetadataFilter) -> Hashable:
    """What a filter's mask depends on, hashable: its tree, keys, operators, and values
    with their types (``1``, ``1.0`` and ``"1"`` select different rows)."""
    if isinstance(item, MetadataFilters):
        return (item.condition or FilterCondition.AND, tuple(_filter_key(child) for child in item.filters))
    value = item.value
    typed = tuple((type(v), v) for v in value) if isinstance(value, list) else (type(value), value)
    return (item.key, item.operator, isinstance(value, list), typed)


def _dump_json(data: Any, handle: IO[str]) -> None:
    json.dump(data, handle, sort_keys=True, allow_nan=False)


def _is_plain(value: Any) -> bool:
    """A string or a non-bool number: a filter value equality can look up by hash."""
    return type(value) in (str, int, float) and not (type(value) is float and math.isnan(value))


def _is_exact_number(value: Any) -> bool:
    """A non-bool number a float64 holds exactly (so NumPy compares it as Python does)."""
    if type(value) is int:
        return abs(value) <= _EXACT_FLOAT_INT
    return type(value) is float and not math.isnan(value)


def _checked_mapping(mapping: np.ndarray | None, dead: np.ndarray) -> np.ndarray:
    """The compaction mapping: given (checked against ``dead``) or the one dropping ``dead`` rows."""
    if mapping is None:
        kept = ~dead
        result = np.full(len(dead), -1, dtype=np.int64)
        result[kept] = np.arange(int(kept.sum()), dtype=np.int64)
        return result
    result = np.asarray(mapping)
    if result.shape != dead.shape or not np.issubdtype(result.dtype, np.integer):
        raise ValueError(
            f"a compaction mapping holds one integer per row ({len(dead)}), got shape {result.shape} "
            f"of {result.dtype}; pass the array another component's compact() returned"
        )
    result = result.astype(np.int64)
    kept = result[result >= 0]
    if not np.array_equal(kept, np.arange(len(kept))):
        raise ValueError("a compaction mapping numbers the kept rows 0 .. m-1 in their old order; this one does not")
    if (result[dead] >= 0).any():
        raise ValueError(
            f"the compaction mapping keeps deleted row {int(np.flatnonzero(dead & (result >= 0))[0])}; "
            "delete the same rows in every component before compacting"
        )
    return result
