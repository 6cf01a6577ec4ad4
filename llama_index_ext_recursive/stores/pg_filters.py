"""Metadata filters as PostgreSQL WHERE clauses in which every value and every key is a bound parameter.

Upstream ``PGVectorStore._build_filter_clause`` pastes filter values and keys
into SQL text (``text(f"metadata_->>'{key}' = '{value}'")``): a value such as
``x'; DELETE FROM ...`` runs as SQL, ``en' OR '1'='1`` returns other tenants'
rows, and ordinary data breaks the statement (``children's books``; a value
holding `` :draft`` is read as a bind parameter). :func:`filter_clause` builds
the same clauses from SQLAlchemy constructs instead: ``metadata_ -> :key``,
``metadata_ ->> :key`` and the values as bind parameters, so nothing a user
gives becomes SQL text.

Semantics follow upstream's, except where upstream's are a bug:

* ``EQ``/``NE``/``GT``/``GTE``/``LT``/``LTE`` with a number compare numbers
  (upstream casts every row's value with ``::float``, so one row holding text
  under that key fails the whole query; here rows whose value is not a JSON
  number simply do not match). With a string they compare text, as upstream
  does (upstream also compares a numeric-looking string as a number).
* ``IN``/``NIN`` compare the value's text (``->>``) with the values' JSON text;
  an empty list matches nothing (``IN``) or every row holding the key
  (``NIN``) instead of a syntax error.
* ``CONTAINS`` asks whether the stored JSON array holds the value as JSON
  (a number matches a number; upstream always quotes it as a string).
* ``TEXT_MATCH``/``TEXT_MATCH_INSENSITIVE`` match the value as a literal
  substring: ``%``, ``_`` and ``\\`` in it are escaped.
* ``NOT`` negates the AND of its filters (upstream refuses the condition).

PostgreSQL text cannot hold the NUL character; a value or key holding one is
refused with :class:`PostgresFilterError` instead of a driver error.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from sqlalchemy import Float, and_, bindparam, case, cast, false, func, not_, or_, true
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TEXT
from sqlalchemy.sql.elements import ColumnElement

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError

_COMPARISONS = {
    FilterOperator.EQ: "__eq__",
    FilterOperator.NE: "__ne__",
    FilterOperator.GT: "__gt__",
    FilterOperator.GTE: "__ge__",
    FilterOperator.LT: "__lt__",
    FilterOperator.LTE: "__le__",
}


class PostgresFilterError(LlamaIndexExtRecursiveError, ValueError):
    """A metadata filter PostgreSQL cannot evaluate (a NUL character, an unknown operator)."""


def filter_clause(metadata: Any, filters: MetadataFilters) -> ColumnElement:
    """The WHERE clause of ``filters`` (nested, AND/OR/NOT) over the ``metadata_`` column.

    Args:
        metadata: the table's ``metadata_`` column (JSON or JSONB).
        filters: the filters; values and keys become bind parameters.
    """
    doc = cast(metadata, JSONB)
    parts = [
        filter_clause(metadata, item) if isinstance(item, MetadataFilters) else _one(doc, item)
        for item in filters.filters
    ]
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return and_(true(), *parts)
    if condition == FilterCondition.OR:
        return or_(false(), *parts)
    if condition == FilterCondition.NOT:
        return not_(and_(true(), *parts))
    raise PostgresFilterError(f"unknown filter condition {condition!r}; use 'and', 'or' or 'not'")


def _one(doc: Any, item: MetadataFilter) -> ColumnElement:
    key, op, value = item.key, item.operator, item.value
    _check_text(key, key, "key")
    json_value = doc.op("->")(bindparam(None, key, type_=TEXT))
    text_value = doc.op("->>")(bindparam(None, key, type_=TEXT))
    if op == FilterOperator.IS_EMPTY:
        return text_value.is_(None)
    if op in (FilterOperator.IN, FilterOperator.NIN):
        values = [_json_text(key, v) for v in _as_list(key, op, value)]
        clause = text_value.in_(values)
        # upstream's NOT IN: rows without the key do not match
        return clause if op == FilterOperator.IN else and_(text_value.is_not(None), not_(clause))
    if op in (FilterOperator.ANY, FilterOperator.ALL):
        values = [_json_text(key, v) for v in _as_list(key, op, value)]
        array = bindparam(None, values, type_=ARRAY(TEXT))
        return json_value.op("?|" if op == FilterOperator.ANY else "?&")(array)
    if op == FilterOperator.CONTAINS:
        _check_text(key, value, "value")
        return json_value.op("@>")(bindparam(None, [value], type_=JSONB))
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        _check_text(key, value, "value")
        pattern = "%" + str(value).replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        match = text_value.ilike if op == FilterOperator.TEXT_MATCH_INSENSITIVE else text_value.like
        return match(bindparam(None, pattern, type_=TEXT), escape="\\")
    if op in _COMPARISONS:
        compare = _COMPARISONS[op]
        if isinstance(value, (int, float)):
            number = case((func.jsonb_typeof(json_value) == "number", cast(text_value, Float)))
            return getattr(number, compare)(bindparam(None, float(value), type_=Float))
        _check_text(key, value, "value")
        return getattr(text_value, compare)(bindparam(None, str(value), type_=TEXT))
    raise PostgresFilterError(f"filter on {key!r}: operator {op!r} is not supported by the PostgreSQL store")


def _as_list(key: str, op: FilterOperator, value: Any) -> Sequence[Any]:
    if isinstance(value, (list, tuple)):
        return value
    raise PostgresFilterError(
        f"filter on {key!r}: operator {op.value!r} takes a list of values, got {type(value).__name__}; "
        f"pass a list, e.g. [{value!r}]"
    )


def _json_text(key: str, value: Any) -> str:
    """A value as ``->>`` shows it when stored: strings as themselves, others as JSON."""
    _check_text(key, value, "value")
    return value if isinstance(value, str) else json.dumps(value)


def _check_text(key: str, value: Any, what: str) -> None:
    if isinstance(value, str) and "\x00" in value:
        raise PostgresFilterError(
            f"filter on {key!r}: the {what} holds a NUL character (\\x00), which PostgreSQL text cannot "
            "store, so no row can match it; remove the NUL character"
        )

