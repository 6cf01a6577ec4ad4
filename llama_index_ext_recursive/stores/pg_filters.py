"""Metadata filters as PostgreSQL WHERE clauses, every key and value a bound parameter.

Upstream ``PGVectorStore._build_filter_clause`` pastes filter keys and values
into SQL text, so a value such as ``x'; DELETE FROM data_chunks; SELECT 1
WHERE '1'='0`` runs a second statement, ``en' OR '1'='1`` returns other
tenants' rows, and ordinary data breaks the query (``children's books`` is a
syntax error; `` :draft`` an unbound parameter). :func:`where_clause` builds
the same filters from SQLAlchemy constructs instead: the key goes into
``metadata_ ->> :key`` and the value into a bind parameter, for every
operator and nested ``AND`` / ``OR`` / ``NOT``, so nothing a user gives ever
becomes SQL text.

Semantics follow upstream (text comparison of ``metadata_ ->> key`` for
strings, a ``float`` cast for numbers, ``@>`` for ``contains``, ``?|`` /
``?&`` for ``any`` / ``all``) except where upstream was wrong or differed from
LlamaIndex's own in-memory filters (``build_metadata_filter_fn``), which the
package's other stores use:

* A number is compared with the rows holding a number under its key (a
  ``float`` cast of those rows only); upstream cast every row and failed on
  the first one holding text. A string is compared as text with
  ``metadata_ ->> key``, as upstream (so ``"5"`` also matches a stored ``5``),
  where upstream turned any string that parses as a float (``"5"``, ``"nan"``,
  a document id ``"123"``) into that failing numeric comparison. The type
  check costs a second JSON lookup per row for numbers only
  (``benchmarks/postgres_latency.py --case filters``).
* ``!=``, ``nin`` and ``NOT`` match rows that lack the key, as in memory
  (upstream: SQL ``NULL`` dropped them).
* ``text_match`` is a substring match: ``%`` and ``_`` in the value are
  literal characters, not ``LIKE`` wildcards.
* ``contains`` finds numbers in stored lists (upstream wrapped every value in
  quotes, so only strings matched), and so do ``any`` / ``all``.
* ``is_empty`` matches a missing key, ``null``, ``""`` and ``[]`` (upstream:
  missing or ``null`` only), as LlamaIndex documents it.
* ``NOT`` is supported (upstream raised); an empty filter list filters nothing.
* A query's ``node_ids`` and ``doc_ids`` limit its rows (:func:`scoped_filters`;
  upstream ignored both).

Values PostgreSQL cannot hold (a NUL character, a lone surrogate: :func:`sql_text`,
which also checks ids, and :func:`check_storable` for the nodes ``add`` is given), ``None``,
``NaN`` and values of the wrong shape for their operator raise
:class:`~llama_index_ext_recursive.filters.FilterError` naming the key and the
value, instead of a driver error or an empty result.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from sqlalchemy import Float, and_, case, cast, false, func, literal, or_, true
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TEXT
from sqlalchemy.sql.elements import ColumnElement

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import FilterError

_SHORT = reprlib.Repr()
_SHORT.maxstring = 80
_SHORT.maxother = 80
shown = _SHORT.repr  # keys and values in messages: a 100 kB value is shown by its ends

_ORDER = {
    FilterOperator.GT: lambda a, b: a > b,
    FilterOperator.GTE: lambda a, b: a >= b,
    FilterOperator.LT: lambda a, b: a < b,
    FilterOperator.LTE: lambda a, b: a <= b,
}


class UnstorableNodeError(LlamaIndexExtRecursiveError, ValueError):
    """A node holds text PostgreSQL cannot store (a NUL character, a lone surrogate).

    Raised by the store's ``add`` naming the node, the field and the position;
    nothing of the batch was added (it is one transaction).
    """


def sql_text(what: str, value: Any, error: type[ValueError] = FilterError) -> str:
    """``value`` if PostgreSQL can hold it as text, else ``error`` naming it.

    PostgreSQL text and JSON cannot contain NUL, and the drivers cannot encode
    a lone surrogate; both would otherwise fail inside the driver with a
    message that names neither the key nor the value.

    Args:
        what: how the error names the value (``"filter key"``, ``"node id"``...).
        value: the string to check.
        error: the exception to raise (:class:`FilterError` for what a query
            gives, :class:`UnstorableNodeError` for what ``add`` is given).
    """
    if not isinstance(value, str):
        raise error(f"{what} {shown(value)} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise error(
            f"{what} {shown(value)} contains a NUL character (\\x00) at position "
            f"{value.index(chr(0))}, which PostgreSQL text cannot hold: remove it"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise error(
            f"{what} {shown(value)} is not valid Unicode (a lone surrogate at position "
            f"{exc.start}); PostgreSQL stores UTF-8 only: decode the text properly"
        ) from None
    return value


def check_storable(nodes: Iterable[BaseNode]) -> None:
    """Raise :class:`UnstorableNodeError` for the first text of ``nodes`` PostgreSQL cannot hold.

    Run after the driver refused a batch, to say which node and where: every
    string the store writes from a node (its id, text, document id, metadata
    keys and values at any depth) is checked.

    Args:
        nodes: the nodes given to ``add``.
    """
    for node in nodes:
        owner = f"node {shown(node.node_id)}:"
        strings = [("id", node.node_id), ("text", node.get_content()), ("document id", node.ref_doc_id)]
        strings += _metadata_strings(node.metadata, "metadata")
        for where, value in strings:
            if value is not None:
                sql_text(f"{owner} {where}", value, error=UnstorableNodeError)


def _metadata_strings(value: Any, path: str) -> list[tuple[str, Any]]:
    """``(path, string)`` for every key and string value in ``value``, nested ones included."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, dict):
        found: list[tuple[str, Any]] = []
        for key, item in value.items():
            found += _metadata_strings(key, f"{path} key")
            found += _metadata_strings(item, f"{path}[{shown(key)}]")
        return found
    if isinstance(value, (list, tuple)):
        return [pair for i, item in enumerate(value) for pair in _metadata_strings(item, f"{path}[{i}]")]
    return []


def sql_ids(what: str, ids: Iterable[Any]) -> list[str]:
    """Node or document ids checked by :func:`sql_text` (they are matched as text).

    A single string is refused: iterated, its characters would be taken as
    ids, and ``delete_nodes(node_ids="doc-1")`` would delete nothing, silently.

    Args:
        what: how an error names an id.
        ids: the ids.
    """
    if isinstance(ids, (str, bytes)):
        raise FilterError(f"{what}s must be a list of ids, got the string {shown(ids)}: pass [{shown(ids)}]")
    return [sql_text(what, i) for i in ids]


class ScopedFilters(MetadataFilters):
    """Filters plus the node ids a query is limited to.

    Node ids live in the table's ``node_id`` column, not in the metadata a
    :class:`~llama_index.core.vector_stores.types.MetadataFilter` can name, so
    they travel beside the filter tree to :func:`where_clause`.
    """

    node_ids: list[str] | None = None


def scoped_filters(
    filters: MetadataFilters | None, node_ids: Sequence[Any] | None, doc_ids: Sequence[Any] | None
) -> MetadataFilters | None:
    """``filters`` limited to ``node_ids`` and to the documents ``doc_ids``.

    Upstream ``PGVectorStore`` ignores a query's ``node_ids`` and ``doc_ids``,
    so a retriever scoped to some documents returned every document's rows.
    Document ids are matched on ``ref_doc_id`` (what the store writes from
    each node's SOURCE relationship, and what its index serves). ``None`` or
    an empty list limits nothing, as in LlamaIndex's other remote stores:
    ``VectorStoreIndex.as_retriever`` passes ``node_ids=[]`` for a store that
    holds the text, meaning every node.

    Args:
        filters: the query's metadata filters.
        node_ids: the query's ``node_ids``.
        doc_ids: the query's ``doc_ids``.
    """
    if not node_ids and not doc_ids:
        return filters
    items: list[Any] = [] if filters is None else [filters]
    if doc_ids:
        documents = sql_ids("document id", doc_ids)
        items.append(MetadataFilter(key="ref_doc_id", operator=FilterOperator.IN, value=documents))
    return ScopedFilters(filters=items, node_ids=sql_ids("node id", node_ids) if node_ids else None)


def where_clause(table: Any, filters: MetadataFilters, *, jsonb: bool) -> ColumnElement[bool]:
    """A WHERE clause for ``filters`` on a ``PGVectorStore`` table, keys and values bound.

    Args:
        table: the store's table class (its ``metadata_`` column holds the metadata).
        filters: the filter tree, nested ``MetadataFilters`` included; a
            :class:`ScopedFilters` also limits the rows to its ``node_ids``.
        jsonb: whether ``metadata_`` is ``JSONB`` (``use_jsonb=True``) rather than ``JSON``.
    """
    clause = _Builder(table.metadata_, jsonb).tree(filters)
    node_ids = getattr(filters, "node_ids", None)
    return clause if node_ids is None else and_(clause, table.node_id.in_(node_ids))


class _Builder:
    def __init__(self, column: Any, jsonb: bool) -> None:
        self.column = column
        self.prefix = "jsonb_" if jsonb else "json_"

    def tree(self, filters: MetadataFilters) -> ColumnElement[bool]:
        condition = filters.condition or FilterCondition.AND
        if not filters.filters:
            return true()
        parts = [self.tree(f) if isinstance(f, MetadataFilters) else self.leaf(f) for f in filters.filters]
        if condition == FilterCondition.AND:
            return and_(*parts)
        if condition == FilterCondition.OR:
            return or_(*parts)
        if condition == FilterCondition.NOT:
            return _negated(or_(*parts))
        raise FilterError(f"unknown filter condition {condition!r}; use one of {[c.value for c in FilterCondition]}")

    # ------------------------------------------------------------ pieces

    def _fn(self, name: str) -> Any:
        """``json_<name>`` or ``jsonb_<name>``, as the column's type needs."""
        return getattr(func, self.prefix + name)

    def _field(self, key: str) -> Any:
        return self.column[key]  # metadata_ -> :key

    def _text(self, key: str) -> Any:
        return self.column[key].astext  # metadata_ ->> :key

    def _typeof(self, key: str) -> Any:
        return self._fn("typeof")(self._field(key))

    def _jsonb(self, key: str) -> Any:
        return cast(self.column, JSONB)[key]

    def _number(self, key: str) -> Any:
        # CASE, not AND: PostgreSQL may evaluate a cast before a guard beside it
        return case((self._typeof(key) == "number", cast(self._text(key), Float)), else_=None)

    # ------------------------------------------------------------- leaves

    def leaf(self, f: MetadataFilter) -> ColumnElement[bool]:
        key = sql_text("filter key", f.key)
        op, value = f.operator, f.value
        if op == FilterOperator.IS_EMPTY:
            return self._is_empty(key)
        if value is None:
            raise FilterError(
                f"filter {shown(key)} {op.value} None matches nothing; to select nodes without "
                f"{shown(key)} use the operator 'is_empty'"
            )
        if op == FilterOperator.EQ:
            return self._equals(key, value)
        if op == FilterOperator.NE:
            return _negated(self._equals(key, value))
        if op in (FilterOperator.IN, FilterOperator.NIN):
            found = self._one_of(key, _listed(key, op, value))
            return found if op == FilterOperator.IN else _negated(found)
        if op in _ORDER:
            return self._ordered(key, op, value)
        if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
            if not isinstance(value, str):
                raise FilterError(
                    f"filter {shown(key)} {op.value} {shown(value)}: {op.value} matches a substring "
                    f"of text, so its value must be a string"
                )
            text = self._text(key)
            value = sql_text(f"filter {shown(key)} value", value)
            matched = (
                text.contains(value, autoescape=True)
                if op == FilterOperator.TEXT_MATCH
                else text.icontains(value, autoescape=True)
            )
            return matched
        if op == FilterOperator.CONTAINS:
            if isinstance(value, (list, tuple)):
                raise FilterError(
                    f"filter {shown(key)} contains {shown(value)}: contains takes one value; "
                    f"for several use the operator 'all' or 'any'"
                )
            return self._jsonb(key).contains([self._scalar(key, value)])
        if op in (FilterOperator.ANY, FilterOperator.ALL):
            return self._any_all(key, op, _listed(key, op, value))
        raise FilterError(
            f"filter {shown(key)}: operator {op!r} is not supported on PostgreSQL; use one of "
            f"{[o.value for o in FilterOperator]}"
        )

    def _scalar(self, key: str, value: Any) -> Any:
        """A string, finite number or boolean, checked; anything else is a :class:`FilterError`."""
        if isinstance(value, str):
            return sql_text(f"filter {shown(key)} value", value)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                number = math.nan
            if math.isnan(number):
                raise FilterError(
                    f"filter {shown(key)} value {shown(value)} is not a number PostgreSQL can "
                    f"compare (NaN, or beyond the range of a double); pass a finite number"
                )
            return value
        raise FilterError(
            f"filter {shown(key)} value {shown(value)} is a {type(value).__name__}; filters "
            f"take strings, numbers or lists of them"
        )

    def _equals(self, key: str, value: Any) -> ColumnElement[bool]:
        value = self._scalar(key, value)
        if isinstance(value, str):
            # as upstream: one JSON lookup per row, and the store's index on
            # metadata_ ->> 'ref_doc_id' serves routed documents
            return self._text(key) == value
        return self._number(key) == float(value)

    def _one_of(self, key: str, values: Sequence[Any]) -> ColumnElement[bool]:
        strings = [v for v in values if isinstance(v, str)]
        parts = [self._equals(key, v) for v in values if not isinstance(v, str)]
        if strings:
            strings = [sql_text(f"filter {shown(key)} value", v) for v in strings]
            parts.insert(0, self._text(key).in_(strings))
        return or_(false(), *parts)

    def _ordered(self, key: str, op: FilterOperator, value: Any) -> ColumnElement[bool]:
        value = self._scalar(key, value)
        compare = _ORDER[op]
        if isinstance(value, str):
            return compare(self._text(key), value)
        return compare(self._number(key), float(value))

    def _any_all(self, key: str, op: FilterOperator, values: Sequence[Any]) -> ColumnElement[bool]:
        values = [self._scalar(key, v) for v in values]
        field = self._jsonb(key)
        strings = [v for v in values if isinstance(v, str)]
        others = [v for v in values if not isinstance(v, str)]
        if op == FilterOperator.ANY:
            parts = [field.contains([v]) for v in others]
            if strings:
                parts.insert(0, field.has_any(literal(strings, ARRAY(TEXT))))
            return or_(false(), *parts)
        parts = [field.contains(others)] if others else []
        if strings:
            parts.insert(0, field.has_all(literal(strings, ARRAY(TEXT))))
        return and_(true(), *parts)

    def _is_empty(self, key: str) -> ColumnElement[bool]:
        kind = self._typeof(key)
        empty_list = case((kind == "array", self._fn("array_length")(self._field(key))), else_=None) == 0
        return or_(self._text(key).is_(None), and_(kind == "string", self._text(key) == ""), empty_list)


def _negated(clause: ColumnElement[bool]) -> ColumnElement[bool]:
    """``NOT clause`` that also holds where ``clause`` is NULL (a missing key), as in memory."""
    return clause.is_not(true())


def _listed(key: str, op: FilterOperator, value: Any) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise FilterError(
            f"filter {shown(key)} {op.value} {shown(value)}: {op.value} takes a list of values, e.g. [{shown(value)}]"
        )
    if any(v is None for v in value):
        raise FilterError(
            f"filter {shown(key)} {op.value} {shown(value)}: None matches nothing; to select nodes "
            f"without {shown(key)} use the operator 'is_empty'"
        )
    return list(value)
