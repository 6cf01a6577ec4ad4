"""Auto-retriever query specs checked against the declared metadata schema.

Upstream ``VectorIndexAutoRetriever`` hands whatever the LLM wrote straight to
the vector store: an invented key (``first_author``) silently matches nothing,
``"2023"`` for an int field raises ``TypeError`` under ``>`` and matches
nothing under ``==``, one unknown operator discards the whole spec (the query
then runs with no filters at all), the LLM can only lower ``top_k`` and a
``similarity_top_k`` above ``max_top_k`` is not clamped. :class:`SpecValidator`
turns a spec (a ``VectorStoreQuerySpec``, the LLM's JSON as a dict, or its raw
text) into one the store can run, repairing what can be repaired and dropping
only the single filter that cannot be, and reports every change
(:class:`SpecReport` of :class:`Repair` records):

* keys must be declared in ``VectorStoreInfo.metadata_info``; a key that
  differs only in case, spaces or ``-``/``_`` is renamed, any other is dropped
  (the closest declared key is suggested) or rejected;
* values are coerced to the declared type (read by
  :class:`~llama_index_ext_recursive.schema.FieldType`; the readers of dates,
  numbers and operator spellings are in :mod:`~llama_index_ext_recursive.auto.values`),
  operators are checked against the type;
* where the values present in the corpus are known
  (:func:`~llama_index_ext_recursive.schema.metadata_vocabulary`), values are
  checked against them and case or spacing is repaired, because an absent
  value matches nothing;
* ``top_k`` from the spec may raise or lower k within ``[1, max_top_k]``.

This module is about 550 lines, nearly all :class:`SpecValidator`: one pass
over a spec whose steps (input shape, key, operator shape, coercion,
vocabulary, k) share one call's record of repairs; the pure readers it uses
are already apart (:mod:`~llama_index_ext_recursive.auto.values`,
:mod:`~llama_index_ext_recursive.auto.report`, :mod:`~llama_index_ext_recursive.schema`).
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal

from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    MetadataInfo,
    VectorStoreInfo,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.auto.report import Repair, RepairLog, SpecError, SpecReport, plain
from llama_index_ext_recursive.auto.values import (
    FAIL,
    coerce_value,
    fits,
    parse_number,
    same_value,
    top_k_with_reason,
)
from llama_index_ext_recursive.filters import parse_operator
from llama_index_ext_recursive.query import DEFAULT_TOP_K
from llama_index_ext_recursive.schema import (
    LIST_OPS,
    RANGE_OPS,
    TEXT_OPS,
    FieldType,
    field_type,
    holds_years,
)

logger = logging.getLogger(__name__)

__all__ = [
    "KeyPolicy",
    "Repair",
    "SpecError",
    "SpecReport",
    "SpecValidator",
]

KeyPolicy = Literal["drop", "reject"]

Op = FilterOperator

# --------------------------------------------------------------------------- fields


def _norm_key(key: str) -> str:
    return re.sub(r"[\s\-_]+", "_", key.strip().casefold()).strip("_")


def _norm_text(text: str) -> str:
    return " ".join(re.sub(r"[\-_]+", " ", text).split()).casefold()


@dataclass
class _Field:
    name: str
    type: FieldType
    year_like: bool
    vocabulary: set[Any] | None = None
    by_text: dict[str, list[str]] = field(default_factory=dict)


# --------------------------------------------------------------------------- validator

_MISSING = object()
_KEY_FIELDS = ("key", "field", "attribute", "name", "metadata_key")
_OP_FIELDS = ("operator", "op", "comparator", "operation")
_VALUE_FIELDS = ("value", "values", "val")


def _first(mapping: Mapping, names: Sequence[str]) -> Any:
    for name in names:
        if name in mapping:
            return mapping[name]
    return _MISSING


class SpecValidator:
    """Check and repair auto-retriever specs against the declared metadata.

    Args:
        vector_store_info: the schema given to the LLM; only keys in its
            ``metadata_info`` are kept, values are coerced to their ``type``.
        vocabulary: values present per key (:func:`metadata_vocabulary`);
            equality values are checked against it, with case and spacing
            repaired. Keys without an entry are not checked.
        key_policy: what happens to anything that cannot be repaired (an
            unknown key, value or operator): ``"drop"`` drops that one filter
            (or value) and records it; ``"reject"`` raises :class:`SpecError`
            listing every problem.
        max_top_k: the largest k ever used.
        similarity_top_k: k when the spec gives none (clamped to ``max_top_k``).
        empty_query_top_k: k for a blank query when the spec gives none
            (``None``: ``similarity_top_k``).
        today: the reference date for relative dates (default: the current date).
    """

    def __init__(
        self,
        vector_store_info: VectorStoreInfo,
        vocabulary: dict[str, set[Any]] | None = None,
        key_policy: KeyPolicy = "drop",
        max_top_k: int = 10,
        similarity_top_k: int = DEFAULT_TOP_K,
        empty_query_top_k: int | None = 10,
        today: date | None = None,
    ) -> None:
        if key_policy not in ("drop", "reject"):
            raise ValueError(f"key_policy must be 'drop' or 'reject', got {key_policy!r}")
        if max_top_k < 1:
            raise ValueError(f"max_top_k must be at least 1, got {max_top_k}")
        self.vector_store_info = vector_store_info
        self.key_policy = key_policy
        self.max_top_k = max_top_k
        self.similarity_top_k = similarity_top_k
        self.empty_query_top_k = empty_query_top_k
        self.today = today
        if similarity_top_k > max_top_k:
            logger.warning(
                "similarity_top_k=%d is above max_top_k=%d; specs without top_k use %d",
                similarity_top_k,
                max_top_k,
                max_top_k,
            )
        self._fields: dict[str, _Field] = {}
        for info in vector_store_info.metadata_info:
            if info.name not in self._fields:
                self._fields[info.name] = self._field(info, vocabulary)

    def _field(self, info: MetadataInfo, vocabulary: dict[str, set[Any]] | None) -> _Field:
        name = info.name
        known = (vocabulary or {}).get(name)
        ftype = field_type(info, known)
        year_like = holds_years(info)
        entry = _Field(name, ftype, year_like)
        if known is not None:
            if all(fits(v, ftype.base) for v in known):
                entry.vocabulary = set(known)
                for value in known:
                    if isinstance(value, str):
                        entry.by_text.setdefault(_norm_text(value), []).append(value)
                for values in entry.by_text.values():
                    values.sort()
            else:
                logger.warning(
                    "metadata values of %r do not all have the declared type %r; "
                    "its vocabulary is not used (filters on it may match nothing)",
                    name,
                    info.type,
                )
        return entry

    # ------------------------------------------------------------------ public

    @property
    def known_values(self) -> dict[str, set[Any]]:
        """The values present per declared key that equality values are checked against."""
        return {name: set(f.vocabulary) for name, f in self._fields.items() if f.vocabulary}

    def validate(self, spec: VectorStoreQuerySpec | Mapping[str, Any] | str) -> tuple[VectorStoreQuerySpec, SpecReport]:
        """A spec the store can run, and the report of what was changed.

        The input is never modified. The returned ``top_k`` is the k to use.

        Args:
            spec: a ``VectorStoreQuerySpec``, the LLM's JSON as a dict
                (filters as dicts, operators as any common spelling), or the
                LLM's raw text (JSON, optionally in a markdown fence).

        Raises:
            SpecError: under ``key_policy="reject"`` when anything would be
                dropped, or when ``spec`` is text that is not a JSON object.
        """
        run = RepairLog(self.key_policy)
        query, raw_filters, raw_top_k = self._unpack(spec, run)
        filters: list[MetadataFilter] = []
        for item in self._filter_items(raw_filters, run):
            checked = self._check_filter(item, run)
            if checked is not None:
                filters.append(checked)
        top_k = self._top_k(raw_top_k, query, run)
        report = SpecReport(repairs=run.repairs, errors=run.errors)
        if report.errors:
            raise SpecError(report)
        return VectorStoreQuerySpec(query=query, filters=filters, top_k=top_k), report

    # ------------------------------------------------------------------ input shapes

    def _unpack(self, spec: Any, run: RepairLog) -> tuple[str, Any, Any]:
        if isinstance(spec, VectorStoreQuerySpec):
            return spec.query, list(spec.filters), spec.top_k
        if isinstance(spec, str):
            from llama_index.core.output_parsers.utils import parse_json_markdown

            try:
                spec = parse_json_markdown(spec)
            except Exception as exc:  # the parser raises OutputParserException or ValueError
                run.errors.append(Repair("unparseable_spec", None, spec[:200], None, f"the spec is not JSON: {exc}"))
                raise SpecError(SpecReport(run.repairs, run.errors)) from exc
            if not isinstance(spec, Mapping):
                run.errors.append(Repair("unparseable_spec", None, plain(spec), None, "the spec is not a JSON object"))
                raise SpecError(SpecReport(run.repairs, run.errors))
        if not isinstance(spec, Mapping):
            raise TypeError(f"spec must be a VectorStoreQuerySpec, a dict or JSON text, got {type(spec).__name__}")
        query = _first(spec, ("query", "query_str"))
        query = "" if query is _MISSING or query is None else query
        filters = spec.get("filters")
        return (query if isinstance(query, str) else str(query)), filters, spec.get("top_k")

    def _filter_items(self, raw: Any, run: RepairLog) -> list[Any]:
        """The individual filters of a spec, flattening AND groups."""
        if raw is None:
            return []
        if isinstance(raw, MetadataFilters) or (isinstance(raw, Mapping) and "filters" in raw):
            condition = raw.condition if isinstance(raw, MetadataFilters) else raw.get("condition")
            inner = raw.filters if isinstance(raw, MetadataFilters) else raw.get("filters")
            if str(getattr(condition, "value", condition) or "and").lower() != "and":
                run.drop(
                    "dropped_filter",
                    None,
                    raw,
                    f"a {condition!s} group cannot be expressed in a VectorStoreQuerySpec "
                    "(its filters are ANDed); pass it as extra or per-call filters",
                )
                return []
            return self._filter_items(inner, run)
        if isinstance(raw, MetadataFilter):
            return [raw]
        if isinstance(raw, Mapping):
            if _first(raw, _KEY_FIELDS) is not _MISSING and (
                _first(raw, _OP_FIELDS) is not _MISSING or _first(raw, _VALUE_FIELDS) is not _MISSING
            ):
                return [raw]
            return [{"key": key, "value": value} for key, value in raw.items()]  # {key: value}
        if isinstance(raw, (list, tuple)):
            items: list[Any] = []
            for item in raw:
                nested = isinstance(item, MetadataFilters) or (isinstance(item, Mapping) and "filters" in item)
                items.extend(self._filter_items(item, run) if nested else [item])
            return items
        run.drop("dropped_filter", None, raw, f"filters must be a list, got {raw!r}")
        return []

    @staticmethod
    def _parts(item: Any) -> tuple[Any, Any, Any] | None:
        if isinstance(item, MetadataFilter):
            return item.key, item.operator, item.value
        if isinstance(item, Mapping):
            key = _first(item, _KEY_FIELDS)
            if key is _MISSING:
                return None
            operator = _first(item, _OP_FIELDS)
            return key, None if operator is _MISSING else operator, _first(item, _VALUE_FIELDS)
        if isinstance(item, (list, tuple)) and len(item) == 3:  # ("year", ">", 2020)
            return item[0], item[1], item[2]
        return None

    # ------------------------------------------------------------------ one filter

    def _check_filter(self, item: Any, run: RepairLog) -> MetadataFilter | None:
        parts = self._parts(item)
        if parts is None:
            run.drop("dropped_filter", None, item, f"not a filter: {item!r}")
            return None
        key, raw_op, value = parts
        shown = {"key": key, "operator": raw_op, "value": None if value is _MISSING else value}
        fld = self._resolve_key(key, shown, run)
        if fld is None:
            return None
        op = parse_operator(raw_op)
        if op is None:
            run.drop("dropped_filter", fld.name, shown, f"unknown operator {raw_op!r} in the filter on {fld.name!r}")
            return None
        if not isinstance(raw_op, Op) and raw_op is not None and raw_op != op.value:
            run.repair(
                "mapped_operator", fld.name, raw_op, op, f"operator {raw_op!r} on {fld.name!r} read as {op.value!r}"
            )
        if op == Op.IS_EMPTY:
            return MetadataFilter(key=fld.name, value=None, operator=op)
        if value is _MISSING or value is None or (isinstance(value, (list, tuple, set, frozenset)) and not value):
            run.drop("dropped_filter", fld.name, shown, f"the filter on {fld.name!r} has no value")
            return None
        values: list[Any] | None
        values = list(value) if isinstance(value, (list, tuple, set, frozenset)) else [value]
        op = self._shape(fld, op, values, isinstance(value, (list, tuple, set, frozenset)), shown, run)
        if op is None:
            return None
        values, op = self._coerce_all(fld, op, values, shown, run)
        if values is None:
            return None
        values, op = self._check_vocabulary(fld, op, values, shown, run)
        if values is None:
            return None
        final = values if op in LIST_OPS else values[0]
        try:
            return MetadataFilter(key=fld.name, value=final, operator=op)
        except ValueError as exc:  # pydantic's ValidationError; not expected after the checks above
            reason = str(exc).splitlines()[0]
            run.drop("dropped_filter", fld.name, shown, f"the filter on {fld.name!r} is invalid: {reason}")
            return None

    def _resolve_key(self, key: Any, shown: dict, run: RepairLog) -> _Field | None:
        if isinstance(key, str) and key in self._fields:
            return self._fields[key]
        declared = ", ".join(self._fields) or "none"
        if not isinstance(key, str):
            run.drop("dropped_key", None, shown, f"filter key {key!r} is not a string (declared: {declared})")
            return None
        norm = _norm_key(key)
        same = [name for name in self._fields if _norm_key(name) == norm]
        if len(same) == 1:
            run.repair("renamed_key", same[0], key, same[0], f"filter key {key!r} read as {same[0]!r}")
            return self._fields[same[0]]
        suggestion = self.suggest_key(key)
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        run.drop("dropped_key", key, shown, f"unknown filter key {key!r} (declared: {declared}){hint}")
        return None

    def suggest_key(self, key: str) -> str | None:
        """The declared key closest to ``key``, for messages (never applied silently)."""
        norm = _norm_key(key)
        by_norm = {_norm_key(name): name for name in self._fields}
        tokens = set(norm.split("_"))
        inside = sorted((n for n in by_norm if n in tokens), key=len, reverse=True)
        if inside:
            return by_norm[inside[0]]
        close = difflib.get_close_matches(norm, list(by_norm), n=1, cutoff=0.6)
        return by_norm[close[0]] if close else None

    def _shape(
        self, fld: _Field, op: FilterOperator, values: list[Any], was_list: bool, shown: dict, run: RepairLog
    ) -> FilterOperator | None:
        """Fit the operator to the field's type and the value's shape."""
        ftype, name = fld.type, fld.name
        new = op
        if ftype.is_list:
            if op in (Op.EQ, Op.CONTAINS, Op.ALL):
                new = Op.ALL if len(values) > 1 else Op.CONTAINS
            elif op in (Op.IN, Op.ANY):
                new = Op.ANY if len(values) > 1 else Op.CONTAINS
            else:
                run.drop(
                    "dropped_filter", name, shown, f"operator {op.value!r} cannot be used on the list field {name!r}"
                )
                return None
        elif ftype.base != "any":
            base = ftype.base
            if op == Op.ANY:
                new = Op.IN
            elif op == Op.ALL:
                if len(values) > 1:
                    run.drop(
                        "dropped_filter", name, shown, f"{name!r} holds one value, it cannot equal all of {values!r}"
                    )
                    return None
                new = Op.EQ
            elif op == Op.CONTAINS:
                new = Op.TEXT_MATCH if base in ("str", "date") else Op.EQ
            elif op in TEXT_OPS and base not in ("str", "date"):
                new = Op.EQ
            elif op == Op.TEXT_MATCH_INSENSITIVE and base == "date":
                new = Op.TEXT_MATCH
            if new in (Op.EQ, Op.NE) and was_list:
                new = Op.IN if new == Op.EQ else Op.NIN
            if new in RANGE_OPS and base in ("str", "bool"):
                run.drop(
                    "dropped_filter", name, shown, f"operator {op.value!r} needs a number or date, {name!r} is {base}"
                )
                return None
        elif op in (Op.EQ, Op.NE) and was_list:
            new = Op.IN if op == Op.EQ else Op.NIN
        if new not in LIST_OPS and len(values) > 1:
            run.drop(
                "dropped_filter", name, shown, f"operator {new.value!r} on {name!r} takes one value, got {values!r}"
            )
            return None
        if new != op:
            run.repair(
                "changed_operator",
                name,
                op,
                new,
                f"operator {op.value!r} on {name!r} ({fld.type.describe()}) becomes {new.value!r}",
            )
        if was_list and new not in LIST_OPS:
            run.repair(
                "coerced_value",
                name,
                values,
                values[0],
                f"{new.value!r} on {name!r} takes one value: {values!r} read as {values[0]!r}",
            )
        elif not was_list and new in LIST_OPS:
            run.repair(
                "coerced_value",
                name,
                values[0],
                values,
                f"{new.value!r} on {name!r} takes a list: {values[0]!r} read as {values!r}",
            )
        return new

    def _coerce_all(
        self, fld: _Field, op: FilterOperator, values: list[Any], shown: dict, run: RepairLog
    ) -> tuple[list[Any] | None, FilterOperator]:
        name = fld.name
        if op not in LIST_OPS:
            value, new_op, why = self._coerce(fld, values[0], op)
            if value is FAIL:
                run.drop(
                    "dropped_filter",
                    name,
                    shown,
                    f"{values[0]!r} cannot be read as {fld.type.describe()} for {name!r}{why}",
                )
                return None, op
            self._note_coercion(fld, values[0], value, run)
            if new_op != op:
                run.repair(
                    "changed_operator",
                    name,
                    op,
                    new_op,
                    f"{values[0]!r} on {name!r}{why}: {op.value!r} becomes {new_op.value!r}",
                )
            return [value], new_op
        kept: list[Any] = []
        failed: list[Any] = []
        for raw in values:
            value, _, why = self._coerce(fld, raw, op)
            if value is FAIL:
                failed.append((raw, why))
                continue
            self._note_coercion(fld, raw, value, run)
            if not any(same_value(value, k) for k in kept):
                kept.append(value)
        if not kept:
            run.drop(
                "dropped_filter",
                name,
                shown,
                f"no value of {values!r} can be read as {fld.type.describe()} for {name!r}",
            )
            return None, op
        if len({isinstance(v, str) for v in kept}) > 1:  # only possible for an unrecognised type
            run.drop("dropped_filter", name, shown, f"the values {values!r} for {name!r} mix text and numbers")
            return None, op
        for raw, why in failed:
            run.drop(
                "dropped_value",
                name,
                raw,
                f"{raw!r} cannot be read as {fld.type.describe()} for {name!r}{why}; value dropped",
            )
        return kept, op

    def _note_coercion(self, fld: _Field, before: Any, after: Any, run: RepairLog) -> None:
        if not same_value(before, after):
            run.repair(
                "coerced_value",
                fld.name,
                before,
                after,
                f"{before!r} for {fld.name!r} ({fld.type.base}) read as {after!r}",
            )

    def _coerce(self, fld: _Field, value: Any, op: FilterOperator) -> tuple[Any, FilterOperator, str]:
        return coerce_value(fld.type, value, op, year_like=fld.year_like, today=self.today)

    def _check_vocabulary(
        self, fld: _Field, op: FilterOperator, values: list[Any], shown: dict, run: RepairLog
    ) -> tuple[list[Any] | None, FilterOperator]:
        """Repair values to those present in the corpus; drop absent ones."""
        name, known = fld.name, fld.vocabulary
        if fld.type.base == "date" and op == Op.EQ:
            return self._date_equality(fld, values[0], shown, run)
        checked = (Op.CONTAINS, Op.ANY, Op.ALL) if fld.type.is_list else (Op.EQ, Op.NE, Op.IN, Op.NIN)
        if known is None or op not in checked:
            return values, op
        kept: list[Any] = []
        absent: list[Any] = []
        for value in values:
            if value in known:
                found = [value]
            else:
                found = fld.by_text.get(_norm_text(value), []) if isinstance(value, str) else []
                if found:
                    after = found if len(found) > 1 else found[0]
                    run.repair(
                        "repaired_value",
                        name,
                        value,
                        after,
                        f"{value!r} for {name!r} read as {after!r}, the value(s) in the corpus",
                    )
            if not found:
                absent.append(value)
            kept.extend(v for v in found if not any(same_value(v, k) for k in kept))
        sample = ", ".join(repr(v) for v in sorted(known, key=str)[:10])
        effect = "excludes nothing" if op in (Op.NE, Op.NIN) else "matches nothing"
        if not kept:
            run.drop(
                "dropped_filter",
                name,
                shown,
                f"{absent if len(absent) > 1 else absent[0]!r} never occurs in {name!r}, "
                f"so the filter {effect} (values include {sample})",
            )
            return None, op
        for value in absent:
            run.drop(
                "dropped_value",
                name,
                value,
                f"{value!r} never occurs in {name!r} (values include {sample}); value dropped",
            )
        if len(kept) > 1 and op not in LIST_OPS:  # a case repair found several spellings
            new = {Op.EQ: Op.IN, Op.NE: Op.NIN, Op.CONTAINS: Op.ANY}[op]
            run.repair(
                "changed_operator",
                name,
                op,
                new,
                f"{name!r} has several spellings of the value: {op.value!r} becomes {new.value!r}",
            )
            op = new
        return kept, op

    def _date_equality(
        self, fld: _Field, iso: str, shown: dict, run: RepairLog
    ) -> tuple[list[Any] | None, FilterOperator]:
        """EQ on a date string: exact if it occurs, else a prefix match (``2023-05`` in ``2023-05-17``)."""
        known, name = fld.vocabulary, fld.name
        if known is None:
            if len(iso) >= 10:
                return [iso], Op.EQ
        elif iso in known:
            return [iso], Op.EQ
        elif not any(v.startswith(iso) for v in known):
            run.drop(
                "dropped_filter", name, shown, f"no date in {name!r} falls in {iso!r}, so the filter matches nothing"
            )
            return None, Op.EQ
        run.repair(
            "changed_operator",
            name,
            Op.EQ,
            Op.TEXT_MATCH,
            f"{iso!r} on {name!r} is a whole period: '==' becomes a prefix text_match",
        )
        return [iso], Op.TEXT_MATCH

    # ------------------------------------------------------------------ top_k

    def _top_k(self, raw: Any, query: str, run: RepairLog) -> int:
        spec_top_k: int | None = None
        if raw is not None:
            number = parse_number(raw)
            if number is not None and float(number).is_integer():
                spec_top_k = int(number)
                if not same_value(raw, spec_top_k):
                    run.repair("coerced_top_k", "top_k", raw, spec_top_k, f"top_k {raw!r} read as {spec_top_k}")
            else:
                run.drop("dropped_top_k", "top_k", raw, f"top_k {raw!r} is not a whole number; the default k is used")
        k, asked, clamped = top_k_with_reason(
            spec_top_k, self.similarity_top_k, self.max_top_k, query, self.empty_query_top_k
        )
        if clamped is not None:
            run.repair("clamped_top_k", "top_k", asked, k, clamped)
        return k
