"""``--filter key=value``: parsed before the index loads, typed from the index after.

A command line gives every value as text; the index's metadata says what type
each key holds. The typed values are written in the package's one filter
syntax (``{key: value}``, ``{key: {"op": "contains", "value": v}}``) and
turned into ``MetadataFilters`` by :func:`~llama_index_ext_recursive.filters.to_filters`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import FilterCondition, MetadataFilters

from llama_index_ext_recursive.cli.checks import CliError
from llama_index_ext_recursive.corpus import corpus_nodes
from llama_index_ext_recursive.filters import filterable_metadata, merge_filters, to_filters
from llama_index_ext_recursive.recursive.retriever import RecursiveSummaryRetriever

_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][+-]?[0-9]+)?", re.ASCII)
_NON_FINITE = {"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"}


def split_filters(items: Sequence[str] | None) -> list[tuple[str, str]]:
    """``["year=2024", "language=en"]`` -> ``[("year", "2024"), ("language", "en")]``.

    Syntax only, so it runs before the index loads; values are typed later, from
    the index (:func:`typed_filters`). Each key may be given once (filters are ANDed).
    """
    pairs: list[tuple[str, str]] = []
    seen: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CliError(f"--filter expects key=value, got {item!r}")
        if key in seen:
            raise CliError(
                f"--filter {key} is given twice ({seen[key]!r} and {value!r}); filters are ANDed, so give each key once"
            )
        seen[key] = value
        pairs.append((key, value))
    return pairs


@dataclass
class _KeyProfile:
    """The Python types a metadata key holds, as scalars and inside lists."""

    scalars: set[str] = field(default_factory=set)
    elements: set[str] = field(default_factory=set)
    example: Any = None


def _type_tag(value: Any) -> str | None:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return None


def _profiles(nodes: Iterable[BaseNode]) -> dict[str, _KeyProfile]:
    profiles: dict[str, _KeyProfile] = {}
    for node in nodes:
        for key, value in filterable_metadata(node).items():
            if value is None:
                continue
            profile = profiles.setdefault(key, _KeyProfile(example=value))
            if isinstance(value, (list, tuple)):
                profile.elements.update(t for t in map(_type_tag, value) if t)
            elif tag := _type_tag(value):
                profile.scalars.add(tag)
    return profiles


def _number(raw: str) -> float | None:
    if _INT.fullmatch(raw):
        return int(raw)
    if _FLOAT.fullmatch(raw):
        return float(raw)
    return None


def _typed(key: str, raw: str, types: set[str], example: Any) -> list[Any]:
    """``raw`` as the type ``key`` holds: one value, or two (text and number) for a mixed key."""
    where = f"--filter {key}={raw}"
    if types == {"bool"}:  # MetadataFilter takes no bools; True == 1 wherever filters compare
        if raw.lower() in ("true", "false"):
            return [int(raw.lower() == "true")]
        raise CliError(f"{where}: {key!r} holds true/false in this index; pass {key}=true or {key}=false")
    numeric = types & {"int", "float", "bool"}
    if not numeric:
        return [raw]
    if raw.lower() in _NON_FINITE:
        raise CliError(
            f"{where}: {raw!r} is not a finite number, and NaN or infinity never "
            f"matches {key!r}; pass a number such as {example!r}"
        )
    number = _number(raw)
    if "str" in types:  # both kinds indexed: match the text and, when it is one, the number
        return [raw] if number is None else [raw, number]
    if number is None:
        raise CliError(f"{where}: {key!r} holds numbers in this index (e.g. {example!r}), and {raw!r} is not a number")
    return [number]


def typed_filters(pairs: Sequence[tuple[str, str]], retriever: RecursiveSummaryRetriever) -> MetadataFilters | None:
    """Filters whose values have the types the index's chunk metadata holds.

    ``zip=01234`` stays the string ``"01234"`` when ``zip`` holds strings and
    ``year=2020`` becomes the integer 2020 when ``year`` holds numbers; ``nan``
    and ``inf`` are text unless the key is numeric, and then refused. A key
    holding lists matches chunks whose list contains the value. Unknown keys
    are refused with the closest known key.
    """
    if not pairs:
        return None
    profiles = _profiles(corpus_nodes(retriever))
    parts: list[MetadataFilters | None] = []
    for key, raw in pairs:
        profile = profiles.get(key)
        if profile is None:  # unknown: the vocabulary check below names the closest key
            parts.append(to_filters({key: raw}))
            continue
        in_lists = bool(profile.elements) and not profile.scalars
        values = _typed(key, raw, profile.elements if in_lists else profile.scalars, profile.example)
        options = [to_filters({key: {"op": "contains", "value": v} if in_lists else v}) for v in values]
        # a filter value has one type, so "either form" is an OR of two filters
        parts.append(
            options[0] if len(options) == 1 else MetadataFilters(filters=options, condition=FilterCondition.OR)
        )
    filters = merge_filters(*parts)
    vocabulary = retriever.filter_vocabulary
    problems = vocabulary.problems(filters)
    if problems:
        raise CliError(f"--filter: {'; '.join(problems)}")
    return filters
