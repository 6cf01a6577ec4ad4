"""Metadata filters: one evaluator, one merge policy, per-call filters.

Upstream's in-memory filter function (``build_metadata_filter_fn``) rejects
nested ``MetadataFilters``; every retriever here needs nesting to combine
construction-time, per-call and routing filters, so this module evaluates
nested trees itself. Each leaf has upstream's semantics (:func:`operator_fn`:
``contains`` is membership in a list or a substring, ``any``/``all`` test a
list's elements, a missing key matches only ``!=``, ``nin`` and
``is_empty``), with one difference: where upstream raises ``TypeError`` for a
row whose value the operator cannot take (``"five" > 4`` on a key holding
numbers and strings, ``contains`` on a number), that row does not match, as
in MongoDB's type-bracketed comparisons. A filter that can match no row that
way is refused beforehand by :class:`FilterVocabulary`, naming the key, the
types it holds and the fix.
"""

from __future__ import annotations

import datetime
import logging
import numbers
import re
from collections.abc import Callable, Iterable, Mapping
from enum import Enum
from typing import Any

from llama_index.core.bridge.pydantic import ValidationError
from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.validation import closest

logger = logging.getLogger(__name__)

FiltersLike = MetadataFilters | Mapping[str, Any] | None

# keys every LlamaIndex vector store adds to the metadata it filters on
STORE_KEYS = frozenset({"ref_doc_id", "doc_id", "document_id"})


class FilterPolicy(str, Enum):
    """How per-call filters combine with construction-time filters.

    ``merge`` (default): both must hold (AND). ``replace``: per-call filters,
    when given, are used instead of the construction-time ones.
    """

    MERGE = "merge"
    REPLACE = "replace"


def to_filters(filters: FiltersLike) -> MetadataFilters | None:
    """Accept ``MetadataFilters``, a mapping, or ``None``: the one filter syntax.

    In a mapping, ``{key: value}`` is equality (a list value: ``in``) and
    ``{key: {"op": ">=", "value": 2021}}`` names any upstream operator
    (``"operator"`` is accepted for ``"op"``); entries are joined by AND.
    """
    if filters is None or isinstance(filters, MetadataFilters):
        return filters
    if isinstance(filters, Mapping):
        return MetadataFilters(filters=[_leaf(key, value) for key, value in filters.items()])
    raise TypeError(f"filters must be MetadataFilters, a {{key: value}} dict or None, got {type(filters).__name__}")


_OPERATOR_ALIASES = {
    **dict.fromkeys(
        ["=", "===", "eq", "equals", "equal", "equal_to", "equals_to", "is", "exact", "exact_match", "exactly"],
        FilterOperator.EQ,
    ),
    **dict.fromkeys(
        ["<>", "!==", "ne", "neq", "not_equal", "not_equals", "not_equal_to", "is_not", "isnt", "not", "differs"],
        FilterOperator.NE,
    ),
    **dict.fromkeys(
        ["gt", "greater", "greater_than", "after", "above", "more_than", "over", "newer_than"], FilterOperator.GT
    ),
    **dict.fromkeys(
        [
            "=>",
            "≥",
            "gte",
            "ge",
            "greater_than_or_equal",
            "greater_than_or_equal_to",
            "greater_or_equal",
            "at_least",
            "since",
            "min",
            "minimum",
            "from",
        ],
        FilterOperator.GTE,
    ),
    **dict.fromkeys(["lt", "less", "less_than", "before", "below", "under", "older_than"], FilterOperator.LT),
    **dict.fromkeys(
        [
            "=<",
            "≤",
            "lte",
            "le",
            "less_than_or_equal",
            "less_than_or_equal_to",
            "less_or_equal",
            "at_most",
            "until",
            "max",
            "maximum",
        ],
        FilterOperator.LTE,
    ),
    **dict.fromkeys(["one_of", "any_of", "is_in", "isin", "in_list", "among"], FilterOperator.IN),
    **dict.fromkeys(["not_in", "notin", "none_of", "not_one_of", "not_in_list"], FilterOperator.NIN),
    **dict.fromkeys(["has", "includes", "include", "contain"], FilterOperator.CONTAINS),
    **dict.fromkeys(["like", "match", "matches", "text", "search", "substring"], FilterOperator.TEXT_MATCH),
    **dict.fromkeys(["ilike", "icontains", "imatch", "match_insensitive"], FilterOperator.TEXT_MATCH_INSENSITIVE),
    **dict.fromkeys(["contains_any", "has_any", "overlaps"], FilterOperator.ANY),
    **dict.fromkeys(["contains_all", "has_all"], FilterOperator.ALL),
    **dict.fromkeys(["empty", "is_null", "isnull", "null", "missing", "is_none"], FilterOperator.IS_EMPTY),
}


def parse_operator(raw: Any) -> FilterOperator | None:
    """A ``FilterOperator`` from any common spelling (``"gte"``, ``"="``, ``"not in"``...).

    The one operator reader: ``{key: {"op": ...}}`` filters, the agent tool
    and LLM-written specs all go through it.

    Returns ``None`` for anything unrecognised, so the caller can drop that
    one filter instead of the whole spec. A missing operator (``None``) is
    ``EQ``, as in ``MetadataFilter``.
    """
    if raw is None:
        return FilterOperator.EQ
    if isinstance(raw, FilterOperator):
        return raw
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    try:
        return FilterOperator(text)
    except ValueError:
        pass
    norm = re.sub(r"[\s\-_]+", "_", text.lower().lstrip("$")).strip("_")
    if norm in _OPERATOR_ALIASES:
        return _OPERATOR_ALIASES[norm]
    try:
        return FilterOperator(norm)
    except ValueError:
        pass
    return FilterOperator.__members__.get(norm.upper())


def _leaf(key: str, value: Any) -> MetadataFilter:
    if not isinstance(value, Mapping):
        return _metadata_filter(key, value, FilterOperator.IN if isinstance(value, list) else FilterOperator.EQ)
    op = value.get("op", value.get("operator", "=="))
    operator = parse_operator(op)
    unknown = set(value) - {"op", "operator", "value"}
    if unknown or "value" not in value and operator != FilterOperator.IS_EMPTY:
        raise ValueError(
            f"filter {key!r}: {dict(value)!r} is not an operator filter; write "
            f'{{"op": ">=", "value": 2021}} (keys "op" and "value")'
        )
    if operator is None:
        raise ValueError(
            f"filter {key!r}: unknown operator {op!r}; use one of {sorted(o.value for o in FilterOperator)}"
        )
    return _metadata_filter(key, value.get("value"), operator)


def _metadata_filter(key: str, value: Any, operator: FilterOperator) -> MetadataFilter:
    """A ``MetadataFilter``, or an error naming the key and the value's type (not pydantic's six)."""
    try:
        return MetadataFilter(key=key, value=value, operator=operator)
    except ValidationError:
        items = value if isinstance(value, (list, tuple)) else [value]
        if any(isinstance(v, bool) for v in items):
            raise ValueError(
                f"filter {key!r}: {value!r} holds a bool, which a filter value cannot be; pass 1 "
                "or 0 (a bool in metadata equals 1 or 0)"
            ) from None
        if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
            raise ValueError(
                f"filter {key!r}: the list {value!r} mixes strings and numbers, and a filter list "
                "holds one type; pass one filter per type joined by OR: MetadataFilters(filters=["
                f"MetadataFilter(key={key!r}, operator='in', value=[...numbers]), MetadataFilter("
                f"key={key!r}, operator='in', value=[...strings])], condition='or')"
            ) from None
        hint = (
            " (e.g. value.isoformat(): ISO dates compare correctly as strings)"
            if isinstance(value, (datetime.date, datetime.time))
            else ""
        )
        raise ValueError(
            f"filter {key!r}: a value must be a string, a number or a list of them, got "
            f"{type(value).__name__} {value!r}; convert it{hint}"
        ) from None


def merge_filters(
    *parts: MetadataFilters | None,
) -> MetadataFilters | None:
    """AND the given filter trees, skipping empty ones, flattening plain ANDs."""
    present = [p for p in parts if p is not None and p.filters]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    flat: list = []
    for part in present:
        if (part.condition or FilterCondition.AND) == FilterCondition.AND:
            flat.extend(part.filters)
        else:
            flat.append(part)
    return MetadataFilters(filters=flat, condition=FilterCondition.AND)


def apply_policy(
    configured: MetadataFilters | None,
    per_call: MetadataFilters | None,
    policy: FilterPolicy | str,
) -> MetadataFilters | None:
    """Combine construction-time and per-call filters under ``policy``."""
    if FilterPolicy(policy) == FilterPolicy.REPLACE and per_call is not None:
        return per_call
    return merge_filters(configured, per_call)


def _untyped(test: Callable[[Any], Any], otherwise: bool) -> Callable[[Any], bool]:
    """``test``, answering ``otherwise`` for a value of a type it cannot take (see the module)."""

    def apply(value: Any) -> bool:
        try:
            return bool(test(value))
        except TypeError:
            return otherwise

    return apply


def operator_fn(operator: FilterOperator, value: Any) -> Callable[[Any], bool]:
    """Upstream's ``_process_filter_match`` for one operator and a metadata value that is not None.

    The one definition of what each operator means, for every in-memory
    evaluator (:func:`metadata_matcher`, ``NumpyVectorStore``); a metadata
    value of a type the operator cannot take does not match (``nin``: is not
    in) instead of raising ``TypeError`` (see the module).
    """
    if operator == FilterOperator.EQ:
        return lambda v: v == value
    if operator == FilterOperator.NE:
        return lambda v: v != value
    if operator == FilterOperator.GT:
        return _untyped(lambda v: v > value, False)
    if operator == FilterOperator.GTE:
        return _untyped(lambda v: v >= value, False)
    if operator == FilterOperator.LT:
        return _untyped(lambda v: v < value, False)
    if operator == FilterOperator.LTE:
        return _untyped(lambda v: v <= value, False)
    if operator == FilterOperator.IN:
        return _untyped(lambda v: v in value, False)
    if operator == FilterOperator.NIN:
        return _untyped(lambda v: v not in value, True)
    if operator == FilterOperator.CONTAINS:
        return _untyped(lambda v: value in v, False)
    if operator == FilterOperator.TEXT_MATCH:
        return lambda v: isinstance(v, str) and isinstance(value, str) and value in v
    if operator == FilterOperator.TEXT_MATCH_INSENSITIVE:
        return lambda v: isinstance(v, str) and isinstance(value, str) and value.lower() in v.lower()
    if operator == FilterOperator.ALL:
        return _untyped(lambda v: all(val in v for val in value), False)
    if operator == FilterOperator.ANY:
        return _untyped(lambda v: any(val in v for val in value), False)
    if operator == FilterOperator.IS_EMPTY:
        return lambda v: v == "" or v == []
    raise ValueError(f"Invalid operator: {operator}")


def _leaf_matcher(item: MetadataFilter) -> Callable[[Mapping[str, Any]], bool]:
    """One leaf as upstream reads it: a missing or None value passes only ``!=``, ``nin``, ``is_empty``."""
    key, test = item.key, operator_fn(item.operator, item.value)
    missing = item.operator in (FilterOperator.NE, FilterOperator.NIN, FilterOperator.IS_EMPTY)

    def match(metadata: Mapping[str, Any]) -> bool:
        value = metadata.get(key)
        return missing if value is None else test(value)

    return match


def metadata_matcher(
    filters: MetadataFilters | None,
) -> Callable[[Mapping[str, Any]], bool]:
    """Compile a (possibly nested) filter tree into ``metadata -> bool``, once.

    Leaves mean what they mean in ``SimpleVectorStore`` (:func:`operator_fn`),
    except that a value of a type the operator cannot take does not match.
    """
    if filters is None or not filters.filters:
        return lambda _: True
    parts = [
        metadata_matcher(item) if isinstance(item, MetadataFilters) else _leaf_matcher(item) for item in filters.filters
    ]
    condition = filters.condition or FilterCondition.AND
    if condition == FilterCondition.AND:
        return lambda metadata: all(part(metadata) for part in parts)
    if condition == FilterCondition.OR:
        return lambda metadata: any(part(metadata) for part in parts)
    return lambda metadata: not any(part(metadata) for part in parts)  # NOT, as upstream


def filterable_metadata(node: BaseNode) -> Mapping[str, Any]:
    """The metadata a filter sees for ``node``, as vector stores store it.

    Vector stores add ``ref_doc_id`` to the metadata they filter on, so a
    ``ref_doc_id`` filter works on them; retrievers that filter in Python
    (BM25, fusion) use this view to behave the same.
    """
    ref = node.ref_doc_id
    if ref is None or "ref_doc_id" in node.metadata:
        return node.metadata
    return {**node.metadata, "ref_doc_id": ref}


def metadata_matches(filters: MetadataFilters | None, metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` satisfies a (possibly nested) filter tree."""
    return metadata_matcher(filters)(metadata)


def keep_matching(hits: list[NodeWithScore], filters: MetadataFilters | None) -> list[NodeWithScore]:
    """The hits whose :func:`filterable_metadata` satisfies ``filters``, in order.

    The one post-check for results a search could not filter itself (a store
    that cannot filter, a wrapped upstream retriever); it reads the same view
    of metadata as the stores, so ``ref_doc_id`` filters work.
    """
    if filters is None or not filters.filters:
        return hits
    matches = metadata_matcher(filters)
    return [hit for hit in hits if matches(filterable_metadata(hit.node))]


def filter_keys(filters: MetadataFilters | None) -> set[str]:
    """Every metadata key a filter tree mentions."""
    if filters is None:
        return set()
    keys: set[str] = set()
    for item in filters.filters:
        keys |= filter_keys(item) if isinstance(item, MetadataFilters) else {item.key}
    return keys


def relax_to_keys(filters: MetadataFilters | None, keys: Iterable[str]) -> MetadataFilters | None:
    """A filter on ``keys`` only that every match of ``filters`` also passes.

    Used to pre-filter summaries (which carry document metadata only) without
    ever excluding a document that has matching chunks: AND drops conditions
    on other keys, OR and NOT keep a branch only when it is entirely on
    ``keys``. ``None`` means "no constraint can be derived".
    """
    allowed = set(keys)
    if filters is None or not filters.filters:
        return None
    condition = filters.condition or FilterCondition.AND
    if filter_keys(filters) <= allowed:
        return filters
    if condition != FilterCondition.AND:
        return None
    kept: list[MetadataFilter | MetadataFilters] = []
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            relaxed = relax_to_keys(item, allowed)
            if relaxed is not None:
                kept.append(relaxed)
        elif item.key in allowed:
            kept.append(item)
    return MetadataFilters(filters=kept) if kept else None


def equality_constraints(
    filters: MetadataFilters | None,
) -> list[tuple[str, list[Any]]]:
    """``(key, allowed values)`` pairs implied by top-level AND'ed EQ/IN leaves.

    Stores use them to narrow candidates through an inverted index before the
    exact check with :func:`metadata_matches`.
    """
    if filters is None or (filters.condition or FilterCondition.AND) != FilterCondition.AND:
        return []
    constraints = []
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            constraints.extend(equality_constraints(item))
        elif item.operator == FilterOperator.EQ and not isinstance(item.value, list):
            constraints.append((item.key, [item.value]))
        elif item.operator == FilterOperator.IN and isinstance(item.value, list):
            constraints.append((item.key, list(item.value)))
    return constraints


def answered_by_equality(filters: MetadataFilters | None) -> bool:
    """Whether :func:`equality_constraints` say all there is: every leaf is an
    ANDed ``EQ``/``IN`` on strings, so an inverted index's rows need no exact
    re-check (string hashing agrees with ``==``; numbers may not, e.g. ``1 == 1.0``)."""
    if filters is None or (filters.condition or FilterCondition.AND) != FilterCondition.AND:
        return False
    for item in filters.filters:
        if isinstance(item, MetadataFilters):
            if not answered_by_equality(item):
                return False
        elif item.operator == FilterOperator.EQ:
            if not isinstance(item.value, str):
                return False
        elif item.operator == FilterOperator.IN:
            if not isinstance(item.value, list) or not all(isinstance(v, str) for v in item.value):
                return False
        else:
            return False
    return bool(filters.filters)


class FilterError(LlamaIndexExtRecursiveError, ValueError):
    """A filter names a key the index does not hold, or a value of the wrong type."""


class UnknownFilterPolicy(str, Enum):
    """What a retriever does with a filter its index cannot match.

    ``raise`` (default): :class:`FilterError` naming each problem, the closest
    key and the fix. ``warn``: log the same message and search anyway (the
    result is then usually empty). Either way no misspelt key or mistyped value
    goes unreported.
    """

    RAISE = "raise"
    WARN = "warn"


def value_kind(value: Any) -> str | None:
    """``"number"`` (bool included: filters compare it as 1/0), ``"string"``, ``"list"``,
    or the type's name for anything else (``"datetime"``, ``"dict"``)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple, set)):
        return "list"
    if isinstance(value, numbers.Number):
        return "number"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


# operators upstream defines for list-valued metadata (CONTAINS: holds the value; ANY/ALL: some/all of them)
_LIST_OPERATORS = frozenset({FilterOperator.CONTAINS, FilterOperator.ANY, FilterOperator.ALL})
_TEXT_OPERATORS = frozenset({FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE})


def _can_match(operator: FilterOperator, value: Any, held: str) -> bool:
    """Whether ``operator`` with the filter ``value`` can match a stored value of kind ``held``.

    Equality, ``in`` and comparisons need the same kind on both sides;
    ``contains``/``any``/``all`` need a list, or a string holding the
    string(s) as substrings; ``text_match`` needs strings.
    """
    if isinstance(value, list) and not value:
        return True  # "in []": matches nothing, as written
    kinds = {value_kind(v) for v in value} if isinstance(value, list) else {value_kind(value)}
    if operator in _LIST_OPERATORS:
        return held == "list" or held == "string" and kinds == {"string"}
    if operator in _TEXT_OPERATORS:
        return held == "string" and kinds == {"string"}
    if operator in (FilterOperator.IN, FilterOperator.NIN) and not isinstance(value, list):
        return held == "string" and kinds == {"string"}  # upstream: a substring of the value
    return held in kinds


def _upstream_raises(operator: FilterOperator, value: Any) -> bool:
    """Whether upstream's evaluator raises ``TypeError`` (where :func:`operator_fn`
    does not match) for a stored value this operator cannot take: all but
    equality and ``in`` over a list, which compare with ``==``."""
    return not (
        operator in (FilterOperator.EQ, FilterOperator.NE, FilterOperator.IS_EMPTY)
        or operator in (FilterOperator.IN, FilterOperator.NIN)
        and isinstance(value, list)
    )


def _kind_fix(operator: FilterOperator, held: set[str]) -> str:
    """How to write a filter that can match a key holding ``held`` kinds."""
    if held & {"datetime", "date", "time"}:
        return (
            "a filter value cannot be a date, so store dates as value.isoformat() strings in the "
            "metadata (ISO dates compare correctly as strings) and filter with strings"
        )
    if operator in _LIST_OPERATORS:
        return 'use "==" or "in" (contains/any/all apply to lists and to strings)'
    if "list" in held:
        others = "/".join(sorted(held - {"list"}))
        return f'use {{"op": "contains", "value": v}} for an element of the lists, or pass a {others}'
    if operator in _TEXT_OPERATORS:
        return "text_match compares strings: pass a string, on a key holding strings"
    return f"pass a {'/'.join(sorted(held))}"


class FilterVocabulary:
    """The metadata keys of an index and the kinds of value each holds.

    Built once from the indexed nodes (the view vector stores filter on,
    ``ref_doc_id`` included) and extended as nodes are added, so a filter can be
    checked before the search: ``{"categroy": "biology"}`` or ``year="2020"``
    on an integer field would otherwise just match nothing. Counts per key and
    kind let :meth:`remove_nodes` forget a key when its last node goes.
    """

    def __init__(self, kinds: Mapping[str, Iterable[str]] | None = None) -> None:
        self._counts: dict[str, dict[str, int]] = {k: {kind: 1 for kind in v} for k, v in (kinds or {}).items()}
        self._examples: dict[str, Any] = {}

    @classmethod
    def from_nodes(cls, nodes: Iterable[BaseNode]) -> FilterVocabulary:
        vocabulary = cls()
        vocabulary.add_nodes(nodes)
        return vocabulary

    def add_nodes(self, nodes: Iterable[BaseNode]) -> None:
        for node in nodes:
            self.add_metadata(filterable_metadata(node))

    def add_metadata(self, metadata: Mapping[str, Any]) -> None:
        for key, value in metadata.items():
            kind = value_kind(value)
            if kind is not None:
                kinds = self._counts.setdefault(key, {})
                kinds[kind] = kinds.get(kind, 0) + 1
                self._examples.setdefault(key, value)

    def remove_nodes(self, nodes: Iterable[BaseNode]) -> None:
        """Forget nodes that left the index (the inverse of :meth:`add_nodes`)."""
        for node in nodes:
            for key, value in filterable_metadata(node).items():
                kinds = self._counts.get(key)
                kind = value_kind(value)
                if kinds is None or kind not in kinds:
                    continue
                kinds[kind] -= 1
                if kinds[kind] <= 0:
                    del kinds[kind]
                if not kinds:
                    del self._counts[key]
                    self._examples.pop(key, None)

    @property
    def keys(self) -> list[str]:
        return sorted(self._counts)

    def kinds(self, key: str) -> set[str]:
        """``{"number", "string", "list"}`` subset seen for ``key`` (empty: unknown)."""
        return set(self._counts.get(key, ()))

    def __bool__(self) -> bool:
        return bool(self._counts)

    def problems(self, filters: MetadataFilters | None) -> list[str]:
        """One message per leaf that cannot match anything in this index."""
        if filters is None or not self._counts:
            return []
        held_kinds = self._counts  # key -> {kind: count}; read, never copied per query
        out: list[str] = []
        for item in filters.filters:
            if isinstance(item, MetadataFilters):
                out.extend(self.problems(item))
                continue
            if item.key not in held_kinds:
                if item.key not in STORE_KEYS:
                    out.append(f"unknown filter key {item.key!r} ({closest(item.key, held_kinds)})")
                continue
            held = held_kinds[item.key]
            if item.operator == FilterOperator.IS_EMPTY:
                continue
            if item.value is None:
                out.append(self._none_problem(item))
                continue
            if set(held) == {"list"} and item.operator not in _LIST_OPERATORS:
                out.append(
                    f"filter {item.key} {item.operator.value} {item.value!r} compares whole lists, but "
                    f"{item.key!r} holds lists in this index (e.g. {self._examples.get(item.key)!r}); "
                    f'use {{"op": "contains", "value": v}} for one element, or "any"/"all" with a list'
                )
                continue
            if not any(_can_match(item.operator, item.value, kind) for kind in held):
                values = item.value if isinstance(item.value, list) else [item.value]
                given = "/".join(sorted({str(value_kind(v)) for v in values}))
                stored = "/".join(sorted(held))
                if set(given.split("/")) <= set(held):  # the operator, not the value, is wrong
                    problem = (
                        f"filter {item.key} {item.operator.value} {item.value!r} cannot match: "
                        f"{item.key!r} holds {stored} values"
                    )
                else:
                    shown = (
                        f"={item.value!r}"
                        if item.operator == FilterOperator.EQ
                        else (f" {item.operator.value} {item.value!r}")
                    )
                    problem = f"filter {item.key}{shown} is a {given}, but {item.key!r} holds {stored} values"
                out.append(
                    f"{problem} in this index (e.g. {self._examples.get(item.key)!r}); "
                    f"{_kind_fix(item.operator, set(held))}"
                )
        return out

    def _none_problem(self, item: MetadataFilter) -> str:
        """Why a None filter value is refused: it matches nothing (or, negated, everything)."""
        key, example = item.key, self._examples.get(item.key)
        empty = f'{{{key!r}: {{"op": "is_empty"}}}}'
        if item.operator in (FilterOperator.NE, FilterOperator.NIN):
            return (
                f"filter {key} {item.operator.value} None matches every node (no node stores None); "
                f"for nodes that have a {key!r}, use MetadataFilters(filters=[MetadataFilter(key={key!r}, "
                "operator='is_empty')], condition='not'), or drop the filter"
            )
        return (
            f"filter {key}=None matches nothing (a filter compares values, and no node stores None); "
            f"for nodes without a {key!r} use {empty}, else drop the filter or pass a value {key!r} "
            f"holds (e.g. {example!r})"
        )

    def needs_own_evaluation(self, filters: MetadataFilters | None) -> bool:
        """Whether upstream's evaluator would raise ``TypeError`` on some indexed node.

        True when a leaf's key holds a kind of value its operator cannot take
        (``"five" > 4`` on a key holding numbers and strings): upstream raises
        where :func:`metadata_matcher` lets that node not match, so a
        retriever over upstream's ``SimpleVectorStore`` evaluates such
        filters itself.
        """
        if filters is None:
            return False
        for item in filters.filters:
            if isinstance(item, MetadataFilters):
                if self.needs_own_evaluation(item):
                    return True
            elif _upstream_raises(item.operator, item.value) and not all(
                _can_match(item.operator, item.value, kind) for kind in self._counts.get(item.key, ())
            ):
                return True
        return False

    def check(
        self,
        filters: MetadataFilters | None,
        policy: UnknownFilterPolicy | str = UnknownFilterPolicy.RAISE,
    ) -> None:
        """Apply ``policy`` to every problem :meth:`problems` finds."""
        problems = self.problems(filters)
        if not problems:
            return
        message = "; ".join(problems)
        if UnknownFilterPolicy(policy) == UnknownFilterPolicy.RAISE:
            raise FilterError(f"{message}. Fix the filter, or pass unknown_filter_key='warn' to search anyway")
        logger.warning("%s; searching anyway (unknown_filter_key='warn')", message)
