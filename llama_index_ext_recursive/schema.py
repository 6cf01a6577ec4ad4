"""Metadata schema: what a declared ``MetadataInfo.type`` means, and what values an index holds.

``MetadataInfo.type`` is free text (``"int"``, ``"integer"``, ``"decimal"``,
``"List[str]"``, ``"list of strings"``...). Every component that reads it (the
spec validator, the rule-based spec generator, the LLM prompt's operator list,
the agent tool) reads it through :meth:`FieldType.parse`, so a key is numeric
for all of them or for none. The values present per key
(:func:`metadata_vocabulary`) and a schema inferred from them
(:func:`infer_vector_store_info`) live here too: both describe an index's
metadata, and the auto-retriever and the agent tool both need them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import FilterOperator, MetadataInfo, VectorStoreInfo

__all__ = [
    "FieldType",
    "VALID_OPERATORS",
    "field_type",
    "holds_years",
    "infer_vector_store_info",
    "metadata_vocabulary",
]

Op = FilterOperator
RANGE_OPS = frozenset({Op.GT, Op.GTE, Op.LT, Op.LTE})
LIST_OPS = frozenset({Op.IN, Op.NIN, Op.ANY, Op.ALL})
TEXT_OPS = frozenset({Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE})

#: Operators that make sense for each kind of field (``any``: all of them).
VALID_OPERATORS: dict[str, frozenset] = {
    "int": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | RANGE_OPS,
    "float": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | RANGE_OPS,
    "date": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY, Op.TEXT_MATCH}) | RANGE_OPS,
    "str": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | TEXT_OPS,
    "bool": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}),
    "list": frozenset({Op.CONTAINS, Op.ANY, Op.ALL, Op.IS_EMPTY}),
    "any": frozenset(Op),
}

# declared type word -> base kind; the one table every reader of MetadataInfo.type uses
_BASES = {
    "int": "int",
    "integer": "int",
    "long": "int",
    "int32": "int",
    "int64": "int",
    "float": "float",
    "number": "float",
    "double": "float",
    "decimal": "float",
    "numeric": "float",
    "real": "float",
    "float32": "float",
    "float64": "float",
    "str": "str",
    "string": "str",
    "text": "str",
    "keyword": "str",
    "enum": "str",
    "bool": "bool",
    "boolean": "bool",
    "date": "date",
    "datetime": "date",
    "timestamp": "date",
}
_LIST_TYPE = re.compile(r"(?:list|array|sequence|tuple|set|iterable)\s*[\[<(]\s*(\w+)\s*[\]>)]")
_LIST_OF = re.compile(r"(?:list|array)\s+of\s+(\w+)")
_ARRAY_SUFFIX = re.compile(r"(\w+)\s*\[\s*\]")
_OPTIONAL = re.compile(r"optional\s*\[\s*(.+?)\s*\]")


def _base(word: str) -> str:
    word = word.lower()
    if word in _BASES:
        return _BASES[word]
    if word.endswith("s") and word[:-1] in _BASES:  # "list of strings"
        return _BASES[word[:-1]]
    return "any"


@dataclass(frozen=True)
class FieldType:
    """A declared metadata type, normalised (``MetadataInfo.type`` is free text).

    Args:
        base: ``int``, ``float``, ``str``, ``date`` (ISO strings), ``bool`` or
            ``any`` (unrecognised type: values are kept, not coerced).
        is_list: the metadata value is a list of ``base``.
    """

    base: str
    is_list: bool = False

    @classmethod
    def parse(cls, type_str: str) -> FieldType:
        """``"int"``, ``"integer"``, ``"decimal"``, ``"string"``, ``"List[str]"``, ``"list of ints"``..."""
        text = (type_str or "").strip().lower().removeprefix("typing.")
        optional = _OPTIONAL.fullmatch(text)
        if optional:
            text = optional.group(1)
        parts = [p.strip() for p in text.split("|") if p.strip() not in ("none", "null")]
        text = parts[0] if len(parts) == 1 else text
        for pattern in (_LIST_TYPE, _LIST_OF, _ARRAY_SUFFIX):
            match = pattern.fullmatch(text)
            if match:
                return cls(_base(match.group(1)), True)
        if text in ("list", "array"):
            return cls("any", True)
        return cls(_base(text), False)

    @classmethod
    def of(cls, info: MetadataInfo) -> FieldType:
        """The type ``info`` declares."""
        return cls.parse(info.type)

    @property
    def is_numeric(self) -> bool:
        """A single number (``int`` or ``float``), not a list of them."""
        return not self.is_list and self.base in ("int", "float")

    @property
    def operators(self) -> frozenset:
        """The operators valid for this type."""
        return VALID_OPERATORS["list" if self.is_list else self.base]

    def describe(self) -> str:
        """``int``, ``list of str``...: the type as messages name it."""
        return f"list of {self.base}" if self.is_list else self.base


_YEAR_HINT = re.compile(r"(?<![a-z])years?(?![a-z])|年", re.I)
_DATE_HINT = re.compile(r"(?<![a-z])(?:date|datetime|timestamp)(?![a-z])|日期", re.I)
_FORMAT_HINT = re.compile(r"yyyy|(?<![a-z])iso(?![a-z])", re.I)
_ISO_VALUE = re.compile(r"\d{4}-\d{2}(?:-\d{2})?(?:[T ].*)?")


def field_type(info: MetadataInfo, values: Iterable[Any] | None = None) -> FieldType:
    """What ``info`` declares, with ISO-date strings recognised as dates.

    A ``str`` field holds ISO dates when its name says so (``published_date``),
    its description names an ISO/yyyy date format, or every value present
    (``values``, when known) is one; such a field compares as a date.
    """
    ftype = FieldType.of(info)
    if ftype.base != "str":
        return ftype
    name, description = info.name.replace("_", " "), info.description or ""
    known = list(values) if values is not None else []
    if (
        _DATE_HINT.search(name)
        or (_DATE_HINT.search(description) and _FORMAT_HINT.search(description))
        or (known and all(isinstance(v, str) and _ISO_VALUE.fullmatch(v) for v in known))
    ):
        return FieldType("date", ftype.is_list)
    return ftype


def holds_years(info: MetadataInfo) -> bool:
    """A numeric field (or list of numbers) whose name or description says it holds years.

    Dates written for it are read as their year, and the rule-based generator
    filters year expressions ("since 2020", "去年") on such a single-number field.
    """
    return FieldType.of(info).base in ("int", "float") and bool(
        _YEAR_HINT.search(f"{info.name.replace('_', ' ')} {info.description or ''}")
    )


def metadata_vocabulary(nodes: Iterable[BaseNode], max_values: int = 200) -> dict[str, set[Any]]:
    """The metadata values actually present, per key.

    A filter value absent from the corpus matches nothing, so the validator
    checks equality values against this, and the rule-based generator matches
    value words in a query against it. Elements of list values count one by
    one (so ``CONTAINS`` can be checked). Keys with more than ``max_values``
    distinct values, or with unhashable values, are left out: their
    vocabulary is unknown and their values are not checked.

    Args:
        nodes: the nodes (or documents) whose ``metadata`` is filtered on.
        max_values: the most distinct values a key may have to be kept.
    """
    values: dict[str, set[Any]] = {}
    unknown: set[str] = set()
    for node in nodes:
        for key, value in node.metadata.items():
            if key in unknown or value is None:
                continue
            items = value if isinstance(value, (list, tuple, set, frozenset)) else [value]
            bucket = values.setdefault(key, set())
            try:
                for item in items:
                    if item is not None:
                        bucket.add(item)
            except TypeError:  # unhashable (dict, nested list): vocabulary unknown
                unknown.add(key)
                del values[key]
                continue
            if len(bucket) > max_values:
                unknown.add(key)
                del values[key]
    return values


def _type_name(values: set[Any]) -> str:
    """The ``MetadataInfo`` type of a key, from the Python values seen."""
    kinds = {type(v) for v in values}
    if kinds <= {bool}:
        return "bool"
    if kinds <= {int}:
        return "int"
    if kinds <= {int, float}:
        return "float"
    return "str"


def infer_vector_store_info(nodes: Iterable[BaseNode]) -> VectorStoreInfo | None:
    """A metadata schema from the values present (scalar keys only), for an index that declares none.

    Args:
        nodes: the corpus nodes; keys holding lists, dicts or mixed types are
            left out, since a filter on them cannot be checked.

    Returns:
        The schema, or ``None`` when no key qualifies.
    """
    seen: dict[str, set[Any]] = {}
    skip: set[str] = set()
    for node in nodes:
        for key, value in node.metadata.items():
            if value is None or key in skip:
                continue
            if not isinstance(value, (str, int, float, bool)):
                skip.add(key)
                seen.pop(key, None)
                continue
            seen.setdefault(key, set()).add(value)
    infos: list[MetadataInfo] = []
    for key in sorted(seen):
        kind = _type_name(seen[key])
        if kind == "str" and not all(isinstance(v, str) for v in seen[key]):
            continue  # mixed str/number: no single type to validate against
        infos.append(MetadataInfo(name=key, type=kind, description=f"metadata field {key}"))
    if not infos:
        return None
    return VectorStoreInfo(metadata_info=infos, content_info="passages")
