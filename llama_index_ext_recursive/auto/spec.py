"""Auto-retriever query specs checked against the declared metadata schema.

Upstream ``VectorIndexAutoRetriever`` hands whatever the LLM wrote straight to
the vector store: an invented key (``first_author``) silently matches nothing,
``"2023"`` for an int field raises ``TypeError`` under ``>`` and matches
nothing under ``==``, one unknown operator discards the whole spec (the query
then runs with no filters at all), the LLM can only lower ``top_k`` and a
``similarity_top_k`` above ``max_top_k`` is not clamped, and ``extra_filters``
joined by OR are refused. :class:`SpecValidator` turns a spec (a
``VectorStoreQuerySpec``, the LLM's JSON as a dict, or its raw text) into one
the store can run, repairing what can be repaired and dropping only the single
filter that cannot be, and reports every change:

* keys must be declared in ``VectorStoreInfo.metadata_info``; a key that
  differs only in case, spaces or ``-``/``_`` is renamed, any other is dropped
  (the closest declared key is suggested) or rejected;
* values are coerced to the declared type (``"2023"`` -> ``2023``, dates in
  common formats to a year or an ISO string), operators are checked against
  the type and mapped from common spellings (``"gte"``, ``"="``, ``"in"``);
* where the values present in the corpus are known
  (:func:`metadata_vocabulary`), values are checked against them and case or
  spacing is repaired, because an absent value matches nothing;
* ``top_k`` from the spec may raise or lower k within ``[1, max_top_k]``.

:func:`combine_filters` nests the generated, construction-time and per-call
filters, each keeping its own condition, so OR and NOT trees work.
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta
from typing import (
    Any,
    Dict,
    Iterable,
    List,
    Literal,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Set,
    Tuple,
    Union,
)

from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreInfo,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.filters import (
    FilterPolicy,
    FiltersLike,
    apply_policy,
    merge_filters,
    to_filters,
)

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 10

KeyPolicy = Literal["drop", "reject"]

Op = FilterOperator
_RANGE_OPS = frozenset({Op.GT, Op.GTE, Op.LT, Op.LTE})
_LIST_OPS = frozenset({Op.IN, Op.NIN, Op.ANY, Op.ALL})
_TEXT_OPS = frozenset({Op.TEXT_MATCH, Op.TEXT_MATCH_INSENSITIVE})

#: Operators that make sense for each declared base type (``any``: all of them).
VALID_OPERATORS: Dict[str, frozenset] = {
    "int": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | _RANGE_OPS,
    "float": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | _RANGE_OPS,
    "date": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY, Op.TEXT_MATCH}) | _RANGE_OPS,
    "str": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}) | _TEXT_OPS,
    "bool": frozenset({Op.EQ, Op.NE, Op.IN, Op.NIN, Op.IS_EMPTY}),
    "list": frozenset({Op.CONTAINS, Op.ANY, Op.ALL, Op.IS_EMPTY}),
    "any": frozenset(Op),
}

# --------------------------------------------------------------------------- vocabulary


def metadata_vocabulary(
    nodes: Iterable[BaseNode], max_values: int = 200
) -> Dict[str, Set[Any]]:
    """The metadata values actually present, per key.

    A filter value absent from the corpus matches nothing, so the validator
    checks equality values against this. Elements of list values count one by
    one (so ``CONTAINS`` can be checked). Keys with more than ``max_values``
    distinct values, or with unhashable values, are left out: their
    vocabulary is unknown and their values are not checked.

    Args:
        nodes: the nodes (or documents) whose ``metadata`` is filtered on.
        max_values: the most distinct values a key may have to be kept.
    """
    values: Dict[str, Set[Any]] = {}
    unknown: Set[str] = set()
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


# --------------------------------------------------------------------------- report


@dataclass
class Repair:
    """One change made to a spec (or, under ``reject``, one refused change).

    Args:
        kind: ``dropped_key``, ``renamed_key``, ``coerced_value``,
            ``dropped_value``, ``repaired_value``, ``mapped_operator``,
            ``changed_operator``, ``dropped_filter``, ``clamped_top_k``,
            ``coerced_top_k``, ``dropped_top_k`` or ``unparseable_spec``.
        key: the metadata key concerned (``"top_k"`` for k; may be ``None``).
        before: what the spec said (JSON-friendly).
        after: what is used instead (``None`` when dropped).
        message: why, in words.
    """

    kind: str
    key: Optional[str]
    before: Any
    after: Any
    message: str

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


@dataclass
class SpecReport:
    """Everything validation changed (``repairs``) or refused (``errors``)."""

    repairs: List[Repair] = field(default_factory=list)
    errors: List[Repair] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when nothing was refused (repairs may still have been made)."""
        return not self.errors

    def kinds(self) -> List[str]:
        """The kinds of the repairs, in order (handy for logs and tests)."""
        return [repair.kind for repair in self.repairs]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "repairs": [repair.to_dict() for repair in self.repairs],
            "errors": [error.to_dict() for error in self.errors],
        }


class SpecError(LlamaIndexExtRecursiveError, ValueError):
    """A spec that cannot be used as is; the message lists every problem.

    Raised under ``key_policy="reject"`` (instead of dropping anything) and
    for output that is not a spec at all. ``report.errors`` has the details.
    """

    def __init__(self, report: SpecReport) -> None:
        self.report = report
        lines = [f"- {error.message}" for error in report.errors]
        super().__init__(
            f"{len(report.errors)} problem(s) in the query spec:\n" + "\n".join(lines)
        )

    @property
    def problems(self) -> List[Repair]:
        return list(self.report.errors)


class _Run:
    """Collects the records of one ``validate`` call under one policy."""

    def __init__(self, policy: str) -> None:
        self.policy = policy
        self.repairs: List[Repair] = []
        self.errors: List[Repair] = []

    def repair(self, kind: str, key: Optional[str], before: Any, after: Any, message: str) -> None:
        logger.info("query spec repair (%s): %s", kind, message)
        self.repairs.append(Repair(kind, key, _plain(before), _plain(after), message))

    def drop(self, kind: str, key: Optional[str], before: Any, message: str) -> None:
        """Record a drop; under ``reject`` it becomes an error instead."""
        record = Repair(kind, key, _plain(before), None, message)
        if self.policy == "reject":
            self.errors.append(record)
        else:
            logger.warning("query spec repair (%s): %s", kind, message)
            self.repairs.append(record)


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of ``value`` for the report."""
    if isinstance(value, Op):
        return value.value
    if isinstance(value, MetadataFilter):
        return {"key": value.key, "operator": value.operator.value, "value": _plain(value.value)}
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    return repr(value)


# --------------------------------------------------------------------------- dates


class PartialDate(NamedTuple):
    """A date known to year, month or day precision (``"May 2023"`` is a month)."""

    year: int
    month: Optional[int] = None
    day: Optional[int] = None

    def iso(self) -> str:
        """``2023``, ``2023-05`` or ``2023-05-01``: ISO strings sort as dates and prefix-match."""
        if self.month is None:
            return f"{self.year:04d}"
        if self.day is None:
            return f"{self.year:04d}-{self.month:02d}"
        return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"

    def next_iso(self) -> str:
        """The ISO start of the following period (the exclusive upper bound)."""
        if self.month is None:
            return PartialDate(self.year + 1).iso()
        if self.day is None:
            index = self.year * 12 + self.month  # month is 1-based: this is the next month
            return PartialDate(index // 12, index % 12 + 1).iso()
        following = date(self.year, self.month, self.day) + timedelta(days=1)
        return following.isoformat()


_MONTHS = {
    "jan": 1, "january": 1, "feb": 2, "february": 2, "mar": 3, "march": 3,
    "apr": 4, "april": 4, "may": 5, "jun": 6, "june": 6, "jul": 7, "july": 7,
    "aug": 8, "august": 8, "sep": 9, "sept": 9, "september": 9, "oct": 10,
    "october": 10, "nov": 11, "november": 11, "dec": 12, "december": 12,
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"
_DATE_PATTERNS = [
    # 2023, 2023-05, 2023/5/1, 2023.05.01, 2023-05-01T10:00:00Z
    (re.compile(r"(\d{4})(?:[-/.](\d{1,2})(?:[-/.](\d{1,2}))?)?"
                r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:Z|[+-]\d{2}:?\d{2})?)?"), "ymd"),
    # 2023年, 2023年5月, 2023年5月1日
    (re.compile(r"(\d{4})\s*年(?:\s*(\d{1,2})\s*月(?:\s*(\d{1,2})\s*[日号])?)?"), "ymd"),
    # May 2023, May 1, 2023, May 1st 2023
    (re.compile(rf"({_MONTH})\.?(?:\s+(\d{{1,2}}){_ORD})?,?\s+(\d{{4}})", re.I), "mdy"),
    # 1 May 2023, 1st of May, 2023
    (re.compile(rf"(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})", re.I), "dmy"),
    # 2023 May
    (re.compile(rf"(\d{{4}})\s+({_MONTH})\.?", re.I), "ym"),
    # 05/2023
    (re.compile(r"(\d{1,2})[/-](\d{4})"), "my"),
]
_RELATIVE = {
    "today": (0, "day"), "yesterday": (-1, "day"), "this year": (0, "year"),
    "last year": (-1, "year"), "next year": (1, "year"), "this month": (0, "month"),
    "last month": (-1, "month"), "next month": (1, "month"),
    "今天": (0, "day"), "昨天": (-1, "day"), "今年": (0, "year"), "去年": (-1, "year"),
    "前年": (-2, "year"), "明年": (1, "year"), "本月": (0, "month"), "这个月": (0, "month"),
    "上个月": (-1, "month"), "上月": (-1, "month"), "下个月": (1, "month"),
}
_YEARS_AGO = re.compile(r"(\d{1,3})\s*(?:years?\s+ago|年前)", re.I)


def _partial(year: int, month: Optional[int] = None, day: Optional[int] = None) -> Optional[PartialDate]:
    if not 1000 <= year <= 9999 or (month is None and day is not None):
        return None
    try:
        date(year, month or 1, day or 1)
    except ValueError:
        return None
    return PartialDate(year, month, day)


def _relative(text: str, today: date) -> Optional[PartialDate]:
    lowered = " ".join(text.lower().split())
    if lowered in _RELATIVE:
        offset, unit = _RELATIVE[lowered]
        if unit == "day":
            day = today + timedelta(days=offset)
            return PartialDate(day.year, day.month, day.day)
        if unit == "month":
            index = today.year * 12 + today.month - 1 + offset
            return PartialDate(index // 12, index % 12 + 1)
        return _partial(today.year + offset)
    match = _YEARS_AGO.fullmatch(lowered)
    if match:
        return _partial(today.year - int(match.group(1)))
    return None


def parse_date(value: Any, today: Optional[date] = None) -> Optional[PartialDate]:
    """A date from text in common formats, a ``date``, or a four-digit year.

    LLMs write dates as ``"2023-05-01"``, ``"May 2023"``, ``"2023年5月"`` or
    ``"last year"``; a filter needs one comparable form. Ambiguous forms
    (``"05/01/2023"``) are not guessed.

    Args:
        value: the text, ``date``/``datetime`` or ``int`` year.
        today: the reference for relative dates (default: the current date).

    Returns:
        The date at the precision given, or ``None`` when it is not a date.
    """
    if isinstance(value, datetime):
        return PartialDate(value.year, value.month, value.day)
    if isinstance(value, date):
        return PartialDate(value.year, value.month, value.day)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _partial(value)
    if isinstance(value, float):
        return _partial(int(value)) if value.is_integer() else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    for pattern, order in _DATE_PATTERNS:
        match = pattern.fullmatch(text)
        if not match:
            continue
        groups = match.groups()
        if order == "ymd":
            y, m, d = groups
            return _partial(int(y), int(m) if m else None, int(d) if d else None)
        if order == "mdy":
            month, d, y = groups
            return _partial(int(y), _MONTHS[month.lower()], int(d) if d else None)
        if order == "dmy":
            d, month, y = groups
            return _partial(int(y), _MONTHS[month.lower()], int(d))
        if order == "ym":
            y, month = groups
            return _partial(int(y), _MONTHS[month.lower()])
        m, y = groups  # "my"
        return _partial(int(y), int(m))
    return _relative(text, today or date.today())


# --------------------------------------------------------------------------- types


_BASES = {
    "int": "int", "integer": "int", "long": "int", "int32": "int", "int64": "int",
    "float": "float", "number": "float", "double": "float", "decimal": "float",
    "numeric": "float", "real": "float", "float32": "float", "float64": "float",
    "str": "str", "string": "str", "text": "str", "keyword": "str", "enum": "str",
    "bool": "bool", "boolean": "bool",
    "date": "date", "datetime": "date", "timestamp": "date",
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
    def parse(cls, type_str: str) -> "FieldType":
        """``"int"``, ``"integer"``, ``"string"``, ``"number"``, ``"List[str]"``, ``"list of ints"``..."""
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

    @property
    def operators(self) -> frozenset:
        """The operators valid for this type."""
        return VALID_OPERATORS["list" if self.is_list else self.base]


_YEAR_HINT = re.compile(r"(?<![a-z])years?(?![a-z])|年", re.I)
_DATE_HINT = re.compile(r"(?<![a-z])(?:date|datetime|timestamp)(?![a-z])|日期", re.I)
_FORMAT_HINT = re.compile(r"yyyy|(?<![a-z])iso(?![a-z])", re.I)
_ISO_VALUE = re.compile(r"\d{4}-\d{2}(?:-\d{2})?(?:[T ].*)?")


def _norm_key(key: str) -> str:
    return re.sub(r"[\s\-_]+", "_", key.strip().casefold()).strip("_")


def _norm_text(text: str) -> str:
    return " ".join(re.sub(r"[\-_]+", " ", text).split()).casefold()


@dataclass
class _Field:
    name: str
    type: FieldType
    year_like: bool
    vocabulary: Optional[Set[Any]] = None
    by_text: Dict[str, List[str]] = field(default_factory=dict)


def _fits(value: Any, base: str) -> bool:
    """Whether a metadata value in the corpus has the declared base type."""
    if base == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if base == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if base in ("str", "date"):
        return isinstance(value, str)
    if base == "bool":
        return isinstance(value, bool) or value in (0, 1)
    return True


# --------------------------------------------------------------------------- operators


_OPERATOR_ALIASES = {
    **dict.fromkeys(
        ["=", "===", "eq", "equals", "equal", "equal_to", "equals_to", "is", "exact",
         "exact_match", "exactly"], Op.EQ),
    **dict.fromkeys(
        ["<>", "!==", "ne", "neq", "not_equal", "not_equals", "not_equal_to", "is_not",
         "isnt", "not", "differs"], Op.NE),
    **dict.fromkeys(
        ["gt", "greater", "greater_than", "after", "above", "more_than", "over", "newer_than"],
        Op.GT),
    **dict.fromkeys(
        ["=>", "≥", "gte", "ge", "greater_than_or_equal", "greater_than_or_equal_to",
         "greater_or_equal", "at_least", "since", "min", "minimum", "from"], Op.GTE),
    **dict.fromkeys(
        ["lt", "less", "less_than", "before", "below", "under", "older_than"], Op.LT),
    **dict.fromkeys(
        ["=<", "≤", "lte", "le", "less_than_or_equal", "less_than_or_equal_to",
         "less_or_equal", "at_most", "until", "max", "maximum"], Op.LTE),
    **dict.fromkeys(["one_of", "any_of", "is_in", "isin", "in_list", "among"], Op.IN),
    **dict.fromkeys(["not_in", "notin", "none_of", "not_one_of", "not_in_list"], Op.NIN),
    **dict.fromkeys(["has", "includes", "include", "contain"], Op.CONTAINS),
    **dict.fromkeys(["like", "match", "matches", "text", "search", "substring"], Op.TEXT_MATCH),
    **dict.fromkeys(["ilike", "icontains", "imatch", "match_insensitive"], Op.TEXT_MATCH_INSENSITIVE),
    **dict.fromkeys(["contains_any", "has_any", "overlaps"], Op.ANY),
    **dict.fromkeys(["contains_all", "has_all"], Op.ALL),
    **dict.fromkeys(["empty", "is_null", "isnull", "null", "missing", "is_none"], Op.IS_EMPTY),
}


def parse_operator(raw: Any) -> Optional[FilterOperator]:
    """A ``FilterOperator`` from an LLM's spelling (``"gte"``, ``"="``, ``"not in"``...).

    Returns ``None`` for anything unrecognised, so the caller can drop that
    one filter instead of the whole spec. A missing operator (``None``) is
    ``EQ``, as in ``MetadataFilter``.
    """
    if raw is None:
        return Op.EQ
    if isinstance(raw, Op):
        return raw
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    try:
        return Op(text)
    except ValueError:
        pass
    norm = re.sub(r"[\s\-_]+", "_", text.lower().lstrip("$")).strip("_")
    if norm in _OPERATOR_ALIASES:
        return _OPERATOR_ALIASES[norm]
    try:
        return Op(norm)
    except ValueError:
        pass
    return Op.__members__.get(norm.upper())


# --------------------------------------------------------------------------- top_k


def _resolve_top_k(
    spec_top_k: Optional[int],
    similarity_top_k: int,
    max_top_k: int,
    query: Optional[str],
    empty_query_top_k: Optional[int],
) -> Tuple[int, List[Repair]]:
    empty = not (query or "").strip()
    if spec_top_k is not None:
        k, source = spec_top_k, "top_k from the spec"
    elif empty and empty_query_top_k is not None:
        k, source = empty_query_top_k, "empty_query_top_k (the query is empty)"
    else:
        k, source = similarity_top_k, "similarity_top_k"
    clamped = min(max(k, 1), max_top_k)
    if clamped == k:
        return k, []
    message = f"{source} = {k} is outside [1, max_top_k={max_top_k}]; using {clamped}"
    return clamped, [Repair("clamped_top_k", "top_k", k, clamped, message)]


def resolve_top_k(
    spec_top_k: Optional[int],
    similarity_top_k: int,
    max_top_k: int,
    query: Optional[str] = None,
    empty_query_top_k: Optional[int] = None,
) -> int:
    """The k to retrieve: the spec's when given (raise or lower), clamped to ``[1, max_top_k]``.

    Upstream takes ``min(spec.top_k, max_top_k, similarity_top_k)``, so the
    LLM can only lower k, and does not clamp ``similarity_top_k`` itself.

    Args:
        spec_top_k: the spec's ``top_k`` (``None``: not given).
        similarity_top_k: k when the spec gives none.
        max_top_k: the largest k ever used.
        query: the spec's query string; blank means a filters-only query.
        empty_query_top_k: k for a blank query when the spec gives none
            (``None``: use ``similarity_top_k``).
    """
    return _resolve_top_k(spec_top_k, similarity_top_k, max_top_k, query, empty_query_top_k)[0]


# --------------------------------------------------------------------------- validator

_MISSING = object()
_FAIL = object()
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_TRUE = {"true", "yes", "y", "t", "1", "on"}
_FALSE = {"false", "no", "n", "f", "0", "off"}
_KEY_FIELDS = ("key", "field", "attribute", "name", "metadata_key")
_OP_FIELDS = ("operator", "op", "comparator", "operation")
_VALUE_FIELDS = ("value", "values", "val")


def _number(value: Any) -> Optional[Union[int, float]]:
    """An int or finite float from a number or numeric text, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if _THOUSANDS.fullmatch(text):
        text = text.replace(",", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


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
        vocabulary: Optional[Dict[str, Set[Any]]] = None,
        key_policy: KeyPolicy = "drop",
        max_top_k: int = 10,
        similarity_top_k: int = DEFAULT_TOP_K,
        empty_query_top_k: Optional[int] = 10,
        today: Optional[date] = None,
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
                similarity_top_k, max_top_k, max_top_k,
            )
        self._fields: Dict[str, _Field] = {}
        for info in vector_store_info.metadata_info:
            if info.name not in self._fields:
                self._fields[info.name] = self._field(info.name, info.type, info.description, vocabulary)

    def _field(
        self, name: str, type_str: str, description: str, vocabulary: Optional[Dict[str, Set[Any]]]
    ) -> _Field:
        ftype = FieldType.parse(type_str)
        known = (vocabulary or {}).get(name)
        spaced_name, description = name.replace("_", " "), description or ""
        # A str field holds ISO dates when its name says so, its description
        # names an ISO/yyyy date format, or every known value is one.
        if ftype.base == "str" and (
            _DATE_HINT.search(spaced_name)
            or (_DATE_HINT.search(description) and _FORMAT_HINT.search(description))
            or (known and all(isinstance(v, str) and _ISO_VALUE.fullmatch(v) for v in known))
        ):
            ftype = FieldType("date", ftype.is_list)
        year_like = ftype.base in ("int", "float") and bool(
            _YEAR_HINT.search(f"{spaced_name} {description}")
        )
        entry = _Field(name, ftype, year_like)
        if known is not None:
            if all(_fits(v, ftype.base) for v in known):
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
                    name, type_str,
                )
        return entry

    # ------------------------------------------------------------------ public

    def validate(
        self, spec: Union[VectorStoreQuerySpec, Mapping[str, Any], str]
    ) -> Tuple[VectorStoreQuerySpec, SpecReport]:
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
        run = _Run(self.key_policy)
        query, raw_filters, raw_top_k = self._unpack(spec, run)
        filters: List[MetadataFilter] = []
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

    def _unpack(self, spec: Any, run: _Run) -> Tuple[str, Any, Any]:
        if isinstance(spec, VectorStoreQuerySpec):
            return spec.query, list(spec.filters), spec.top_k
        if isinstance(spec, str):
            from llama_index.core.output_parsers.utils import parse_json_markdown

            try:
                spec = parse_json_markdown(spec)
            except Exception as exc:  # the parser raises OutputParserException or ValueError
                run.errors.append(Repair("unparseable_spec", None, spec[:200], None,
                                         f"the spec is not JSON: {exc}"))
                raise SpecError(SpecReport(run.repairs, run.errors)) from exc
            if not isinstance(spec, Mapping):
                run.errors.append(Repair("unparseable_spec", None, _plain(spec), None,
                                         "the spec is not a JSON object"))
                raise SpecError(SpecReport(run.repairs, run.errors))
        if not isinstance(spec, Mapping):
            raise TypeError(
                "spec must be a VectorStoreQuerySpec, a dict or JSON text, "
                f"got {type(spec).__name__}"
            )
        query = _first(spec, ("query", "query_str"))
        query = "" if query is _MISSING or query is None else query
        filters = spec.get("filters")
        return (query if isinstance(query, str) else str(query)), filters, spec.get("top_k")

    def _filter_items(self, raw: Any, run: _Run) -> List[Any]:
        """The individual filters of a spec, flattening AND groups."""
        if raw is None:
            return []
        if isinstance(raw, MetadataFilters) or (isinstance(raw, Mapping) and "filters" in raw):
            condition = raw.condition if isinstance(raw, MetadataFilters) else raw.get("condition")
            inner = raw.filters if isinstance(raw, MetadataFilters) else raw.get("filters")
            if str(getattr(condition, "value", condition) or "and").lower() != "and":
                run.drop("dropped_filter", None, raw,
                         f"a {condition!s} group cannot be expressed in a VectorStoreQuerySpec "
                         "(its filters are ANDed); pass it as extra or per-call filters")
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
            items: List[Any] = []
            for item in raw:
                nested = isinstance(item, MetadataFilters) or (
                    isinstance(item, Mapping) and "filters" in item
                )
                items.extend(self._filter_items(item, run) if nested else [item])
            return items
        run.drop("dropped_filter", None, raw, f"filters must be a list, got {raw!r}")
        return []

    @staticmethod
    def _parts(item: Any) -> Optional[Tuple[Any, Any, Any]]:
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

    def _check_filter(self, item: Any, run: _Run) -> Optional[MetadataFilter]:
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
            run.drop("dropped_filter", fld.name, shown,
                     f"unknown operator {raw_op!r} in the filter on {fld.name!r}")
            return None
        if not isinstance(raw_op, Op) and raw_op is not None and raw_op != op.value:
            run.repair("mapped_operator", fld.name, raw_op, op,
                       f"operator {raw_op!r} on {fld.name!r} read as {op.value!r}")
        if op == Op.IS_EMPTY:
            return MetadataFilter(key=fld.name, value=None, operator=op)
        if value is _MISSING or value is None or (
            isinstance(value, (list, tuple, set, frozenset)) and not value
        ):
            run.drop("dropped_filter", fld.name, shown, f"the filter on {fld.name!r} has no value")
            return None
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
        final = values if op in _LIST_OPS else values[0]
        try:
            return MetadataFilter(key=fld.name, value=final, operator=op)
        except ValueError as exc:  # pydantic's ValidationError; not expected after the checks above
            reason = str(exc).splitlines()[0]
            run.drop("dropped_filter", fld.name, shown, f"the filter on {fld.name!r} is invalid: {reason}")
            return None

    def _resolve_key(self, key: Any, shown: Dict, run: _Run) -> Optional[_Field]:
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
        run.drop("dropped_key", key, shown,
                 f"unknown filter key {key!r} (declared: {declared}){hint}")
        return None

    def suggest_key(self, key: str) -> Optional[str]:
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
        self, fld: _Field, op: FilterOperator, values: List[Any], was_list: bool, shown: Dict, run: _Run
    ) -> Optional[FilterOperator]:
        """Fit the operator to the field's type and the value's shape."""
        ftype, name = fld.type, fld.name
        new = op
        if ftype.is_list:
            if op in (Op.EQ, Op.CONTAINS, Op.ALL):
                new = Op.ALL if len(values) > 1 else Op.CONTAINS
            elif op in (Op.IN, Op.ANY):
                new = Op.ANY if len(values) > 1 else Op.CONTAINS
            else:
                run.drop("dropped_filter", name, shown,
                         f"operator {op.value!r} cannot be used on the list field {name!r}")
                return None
        elif ftype.base != "any":
            base = ftype.base
            if op == Op.ANY:
                new = Op.IN
            elif op == Op.ALL:
                if len(values) > 1:
                    run.drop("dropped_filter", name, shown,
                             f"{name!r} holds one value, it cannot equal all of {values!r}")
                    return None
                new = Op.EQ
            elif op == Op.CONTAINS:
                new = Op.TEXT_MATCH if base in ("str", "date") else Op.EQ
            elif op in _TEXT_OPS and base not in ("str", "date"):
                new = Op.EQ
            elif op == Op.TEXT_MATCH_INSENSITIVE and base == "date":
                new = Op.TEXT_MATCH
            if new in (Op.EQ, Op.NE) and was_list:
                new = Op.IN if new == Op.EQ else Op.NIN
            if new in _RANGE_OPS and base in ("str", "bool"):
                run.drop("dropped_filter", name, shown,
                         f"operator {op.value!r} needs a number or date, {name!r} is {base}")
                return None
        elif op in (Op.EQ, Op.NE) and was_list:
            new = Op.IN if op == Op.EQ else Op.NIN
        if new not in _LIST_OPS and len(values) > 1:
            run.drop("dropped_filter", name, shown,
                     f"operator {new.value!r} on {name!r} takes one value, got {values!r}")
            return None
        if new != op:
            run.repair("changed_operator", name, op, new,
                       f"operator {op.value!r} on {name!r} ({self._describe(fld)}) becomes {new.value!r}")
        if was_list and new not in _LIST_OPS:
            run.repair("coerced_value", name, values, values[0],
                       f"{new.value!r} on {name!r} takes one value: {values!r} read as {values[0]!r}")
        elif not was_list and new in _LIST_OPS:
            run.repair("coerced_value", name, values[0], values,
                       f"{new.value!r} on {name!r} takes a list: {values[0]!r} read as {values!r}")
        return new

    @staticmethod
    def _describe(fld: _Field) -> str:
        return f"list of {fld.type.base}" if fld.type.is_list else fld.type.base

    def _coerce_all(
        self, fld: _Field, op: FilterOperator, values: List[Any], shown: Dict, run: _Run
    ) -> Tuple[Optional[List[Any]], FilterOperator]:
        name = fld.name
        if op not in _LIST_OPS:
            value, new_op, why = self._coerce(fld, values[0], op)
            if value is _FAIL:
                run.drop("dropped_filter", name, shown,
                         f"{values[0]!r} cannot be read as {self._describe(fld)} for {name!r}{why}")
                return None, op
            self._note_coercion(fld, values[0], value, run)
            if new_op != op:
                run.repair("changed_operator", name, op, new_op,
                           f"{values[0]!r} on {name!r}{why}: {op.value!r} becomes {new_op.value!r}")
            return [value], new_op
        kept: List[Any] = []
        failed: List[Any] = []
        for raw in values:
            value, _, why = self._coerce(fld, raw, op)
            if value is _FAIL:
                failed.append((raw, why))
                continue
            self._note_coercion(fld, raw, value, run)
            if not any(_same(value, k) for k in kept):
                kept.append(value)
        if not kept:
            run.drop("dropped_filter", name, shown,
                     f"no value of {values!r} can be read as {self._describe(fld)} for {name!r}")
            return None, op
        if len({isinstance(v, str) for v in kept}) > 1:  # only possible for an unrecognised type
            run.drop("dropped_filter", name, shown,
                     f"the values {values!r} for {name!r} mix text and numbers")
            return None, op
        for raw, why in failed:
            run.drop("dropped_value", name, raw,
                     f"{raw!r} cannot be read as {self._describe(fld)} for {name!r}{why}; value dropped")
        return kept, op

    def _note_coercion(self, fld: _Field, before: Any, after: Any, run: _Run) -> None:
        if not _same(before, after):
            run.repair("coerced_value", fld.name, before, after,
                       f"{before!r} for {fld.name!r} ({fld.type.base}) read as {after!r}")

    def _coerce(self, fld: _Field, value: Any, op: FilterOperator) -> Tuple[Any, FilterOperator, str]:
        """``(value of the declared type or _FAIL, operator, reason)``."""
        base = fld.type.base
        if base in ("int", "float"):
            number = _number(value)
            if number is None:
                if not fld.year_like:
                    return _FAIL, op, ""
                when = parse_date(value, self.today)
                if when is None:
                    return _FAIL, op, ""
                year = when.year if base == "int" else float(when.year)
                if when.month is None:
                    return year, op, ""
                if op in (Op.NE, Op.NIN):  # excluding a whole year would exclude too much
                    return _FAIL, op, " (a year filter cannot exclude part of a year)"
                widened = {Op.GT: Op.GTE, Op.LT: Op.LTE}.get(op, op)
                return year, widened, " (only the year can be compared)"
            if base == "float":
                try:
                    return float(number), op, ""
                except OverflowError:
                    return _FAIL, op, ""
            if isinstance(number, int):
                return number, op, ""
            if number.is_integer():
                return int(number), op, ""
            if op in (Op.GT, Op.LTE):  # x > 2023.5 <=> x > 2023 for integers
                return math.floor(number), op, ""
            if op in (Op.GTE, Op.LT):
                return math.ceil(number), op, ""
            return _FAIL, op, " (no integer equals it)"
        if base == "date":
            when = parse_date(value, self.today)
            if when is None:
                return _FAIL, op, " (not a date)"
            if when.day is None and op == Op.GT:  # after May 2023 = from June 2023
                return when.next_iso(), Op.GTE, f" ({when.iso()} is a whole period)"
            if when.day is None and op == Op.LTE:  # up to May 2023 = before June 2023
                return when.next_iso(), Op.LT, f" ({when.iso()} is a whole period)"
            return when.iso(), op, ""
        if base == "str":
            if isinstance(value, str):
                return value, op, ""
            if isinstance(value, (date, datetime)):
                return value.isoformat(), op, ""
            number = _number(value) if isinstance(value, (int, float)) else None
            if number is None:
                return _FAIL, op, ""
            try:
                text = str(int(number)) if float(number).is_integer() else repr(number)
            except (OverflowError, ValueError):
                return _FAIL, op, ""
            return text, op, ""
        if base == "bool":
            # MetadataFilter rejects bool (StrictInt); 1/0 compare equal to True/False.
            if isinstance(value, bool):
                return int(value), op, ""
            if isinstance(value, int) and value in (0, 1):
                return value, op, ""
            if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
                return int(value.strip().lower() in _TRUE), op, ""
            return _FAIL, op, ""
        # "any": keep what MetadataFilter can hold
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return _FAIL, op, ""
        if isinstance(value, float) and not math.isfinite(value):
            return _FAIL, op, ""
        return value, op, ""

    def _check_vocabulary(
        self, fld: _Field, op: FilterOperator, values: List[Any], shown: Dict, run: _Run
    ) -> Tuple[Optional[List[Any]], FilterOperator]:
        """Repair values to those present in the corpus; drop absent ones."""
        name, known = fld.name, fld.vocabulary
        if fld.type.base == "date" and op == Op.EQ:
            return self._date_equality(fld, values[0], shown, run)
        checked = (Op.CONTAINS, Op.ANY, Op.ALL) if fld.type.is_list else (Op.EQ, Op.NE, Op.IN, Op.NIN)
        if known is None or op not in checked:
            return values, op
        kept: List[Any] = []
        absent: List[Any] = []
        for value in values:
            if value in known:
                found = [value]
            else:
                found = fld.by_text.get(_norm_text(value), []) if isinstance(value, str) else []
                if found:
                    after = found if len(found) > 1 else found[0]
                    run.repair("repaired_value", name, value, after,
                               f"{value!r} for {name!r} read as {after!r}, the value(s) in the corpus")
            if not found:
                absent.append(value)
            kept.extend(v for v in found if not any(_same(v, k) for k in kept))
        sample = ", ".join(repr(v) for v in sorted(known, key=str)[:10])
        effect = "excludes nothing" if op in (Op.NE, Op.NIN) else "matches nothing"
        if not kept:
            run.drop("dropped_filter", name, shown,
                     f"{absent if len(absent) > 1 else absent[0]!r} never occurs in {name!r}, "
                     f"so the filter {effect} (values include {sample})")
            return None, op
        for value in absent:
            run.drop("dropped_value", name, value,
                     f"{value!r} never occurs in {name!r} (values include {sample}); value dropped")
        if len(kept) > 1 and op not in _LIST_OPS:  # a case repair found several spellings
            new = {Op.EQ: Op.IN, Op.NE: Op.NIN, Op.CONTAINS: Op.ANY}[op]
            run.repair("changed_operator", name, op, new,
                       f"{name!r} has several spellings of the value: {op.value!r} becomes {new.value!r}")
            op = new
        return kept, op

    def _date_equality(
        self, fld: _Field, iso: str, shown: Dict, run: _Run
    ) -> Tuple[Optional[List[Any]], FilterOperator]:
        """EQ on a date string: exact if it occurs, else a prefix match (``2023-05`` in ``2023-05-17``)."""
        known, name = fld.vocabulary, fld.name
        if known is None:
            if len(iso) >= 10:
                return [iso], Op.EQ
        elif iso in known:
            return [iso], Op.EQ
        elif not any(v.startswith(iso) for v in known):
            run.drop("dropped_filter", name, shown,
                     f"no date in {name!r} falls in {iso!r}, so the filter matches nothing")
            return None, Op.EQ
        run.repair("changed_operator", name, Op.EQ, Op.TEXT_MATCH,
                   f"{iso!r} on {name!r} is a whole period: '==' becomes a prefix text_match")
        return [iso], Op.TEXT_MATCH

    # ------------------------------------------------------------------ top_k

    def _top_k(self, raw: Any, query: str, run: _Run) -> int:
        spec_top_k: Optional[int] = None
        if raw is not None:
            number = _number(raw)
            if number is not None and float(number).is_integer():
                spec_top_k = int(number)
                if not _same(raw, spec_top_k):
                    run.repair("coerced_top_k", "top_k", raw, spec_top_k,
                               f"top_k {raw!r} read as {spec_top_k}")
            else:
                run.drop("dropped_top_k", "top_k", raw,
                         f"top_k {raw!r} is not a whole number; the default k is used")
        k, clamps = _resolve_top_k(
            spec_top_k, self.similarity_top_k, self.max_top_k, query, self.empty_query_top_k
        )
        for clamp in clamps:
            run.repair(clamp.kind, clamp.key, clamp.before, clamp.after, clamp.message)
        return k


# --------------------------------------------------------------------------- filters


def combine_filters(
    generated: Union[MetadataFilters, Sequence[Union[MetadataFilter, MetadataFilters]], FiltersLike],
    extra: FiltersLike = None,
    per_call: FiltersLike = None,
    policy: Union[FilterPolicy, str] = FilterPolicy.MERGE,
) -> Optional[MetadataFilters]:
    """AND the generated, construction-time and per-call filters, nesting each.

    Upstream refuses ``extra_filters`` joined by OR and splices filter lists
    together; here each part keeps its own condition inside a top-level AND,
    so OR and NOT trees work in every part.

    Args:
        generated: the validated spec's filters (a list) or a filter tree.
        extra: construction-time filters (``MetadataFilters`` or ``{key: value}``).
        per_call: per-call filters (e.g. from a ``FilteredQueryBundle``).
        policy: ``merge`` (AND) or ``replace`` (per-call filters, when given,
            replace ``extra``); the generated filters always apply.

    Returns:
        The combined tree, or ``None`` when there is nothing to filter on.
    """
    if isinstance(generated, (list, tuple)):
        generated = MetadataFilters(filters=list(generated), condition=FilterCondition.AND)
    else:
        generated = to_filters(generated)
    return merge_filters(generated, apply_policy(to_filters(extra), to_filters(per_call), policy))


__all__ = [
    "DEFAULT_TOP_K",
    "FieldType",
    "KeyPolicy",
    "PartialDate",
    "Repair",
    "SpecError",
    "SpecReport",
    "SpecValidator",
    "VALID_OPERATORS",
    "combine_filters",
    "metadata_vocabulary",
    "parse_date",
    "parse_operator",
    "resolve_top_k",
]
