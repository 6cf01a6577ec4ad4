"""Reading the values a spec writer (rules or an LLM) puts in a spec: dates, numbers, booleans, operators, k.

An LLM writes ``"2023"`` for an int field, ``"May 2023"`` or ``"去年"`` for a
date, ``"gte"`` or ``"="`` for an operator and ``"5"`` for ``top_k``; the
store needs one comparable form of each. Everything here is a pure function
of the text and a declared :class:`~llama_index_ext_recursive.schema.FieldType`,
so :class:`~llama_index_ext_recursive.auto.spec.SpecValidator` only decides
what to do when a value cannot be read.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple

from llama_index.core.vector_stores.types import FilterOperator

from llama_index_ext_recursive.schema import FieldType

__all__ = [
    "FAIL",
    "PartialDate",
    "coerce_value",
    "fits",
    "parse_date",
    "parse_number",
    "resolve_top_k",
    "same_value",
    "top_k_with_reason",
]

Op = FilterOperator

# --------------------------------------------------------------------------- dates


class PartialDate(NamedTuple):
    """A date known to year, month or day precision (``"May 2023"`` is a month)."""

    year: int
    month: int | None = None
    day: int | None = None

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
    "jan": 1,
    "january": 1,
    "feb": 2,
    "february": 2,
    "mar": 3,
    "march": 3,
    "apr": 4,
    "april": 4,
    "may": 5,
    "jun": 6,
    "june": 6,
    "jul": 7,
    "july": 7,
    "aug": 8,
    "august": 8,
    "sep": 9,
    "sept": 9,
    "september": 9,
    "oct": 10,
    "october": 10,
    "nov": 11,
    "november": 11,
    "dec": 12,
    "december": 12,
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"
_DATE_PATTERNS = [
    # 2023, 2023-05, 2023/5/1, 2023.05.01, 2023-05-01T10:00:00Z
    (
        re.compile(
            r"(\d{4})(?:[-/.](\d{1,2})(?:[-/.](\d{1,2}))?)?"
            r"(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:Z|[+-]\d{2}:?\d{2})?)?"
        ),
        "ymd",
    ),
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
    "today": (0, "day"),
    "yesterday": (-1, "day"),
    "this year": (0, "year"),
    "last year": (-1, "year"),
    "next year": (1, "year"),
    "this month": (0, "month"),
    "last month": (-1, "month"),
    "next month": (1, "month"),
    "今天": (0, "day"),
    "昨天": (-1, "day"),
    "今年": (0, "year"),
    "去年": (-1, "year"),
    "前年": (-2, "year"),
    "明年": (1, "year"),
    "本月": (0, "month"),
    "这个月": (0, "month"),
    "上个月": (-1, "month"),
    "上月": (-1, "month"),
    "下个月": (1, "month"),
}
_YEARS_AGO = re.compile(r"(\d{1,3})\s*(?:years?\s+ago|年前)", re.I)


def _partial(year: int, month: int | None = None, day: int | None = None) -> PartialDate | None:
    if not 1000 <= year <= 9999 or (month is None and day is not None):
        return None
    try:
        date(year, month or 1, day or 1)
    except ValueError:
        return None
    return PartialDate(year, month, day)


def _relative(text: str, today: date) -> PartialDate | None:
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


def parse_date(value: Any, today: date | None = None) -> PartialDate | None:
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


# --------------------------------------------------------------------------- numbers and booleans

#: What :func:`coerce_value` returns for a value that cannot be read as the declared type.
FAIL = object()
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_TRUE = {"true", "yes", "y", "t", "1", "on"}
_FALSE = {"false", "no", "n", "f", "0", "off"}


def parse_number(value: Any) -> int | float | None:
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


def same_value(a: Any, b: Any) -> bool:
    """Equal and of the same type (``1`` is not ``1.0`` or ``True``): whether a value was changed."""
    return type(a) is type(b) and a == b


def fits(value: Any, base: str) -> bool:
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


# --------------------------------------------------------------------------- coercion


def coerce_value(
    ftype: FieldType,
    value: Any,
    op: FilterOperator,
    *,
    year_like: bool = False,
    today: date | None = None,
) -> tuple[Any, FilterOperator, str]:
    """``value`` as the declared type: ``(value or FAIL, operator, reason)``.

    The operator may change with the value: ``year > "May 2023"`` on an int
    year can only compare the year (``>=``); ``date > "May 2023"`` means from
    June. ``reason`` (possibly empty) says why, for the report.

    Args:
        ftype: the declared type (its ``base``; list fields coerce their elements).
        value: what the spec writer wrote.
        op: the filter's operator.
        year_like: a numeric field that holds years, so dates are read as their year.
        today: the reference for relative dates (default: the current date).
    """
    base = ftype.base
    if base in ("int", "float"):
        number = parse_number(value)
        if number is None:
            if not year_like:
                return FAIL, op, ""
            when = parse_date(value, today)
            if when is None:
                return FAIL, op, ""
            year = when.year if base == "int" else float(when.year)
            if when.month is None:
                return year, op, ""
            if op in (Op.NE, Op.NIN):  # excluding a whole year would exclude too much
                return FAIL, op, " (a year filter cannot exclude part of a year)"
            widened = {Op.GT: Op.GTE, Op.LT: Op.LTE}.get(op, op)
            return year, widened, " (only the year can be compared)"
        if base == "float":
            try:
                return float(number), op, ""
            except OverflowError:
                return FAIL, op, ""
        if isinstance(number, int):
            return number, op, ""
        if number.is_integer():
            return int(number), op, ""
        if op in (Op.GT, Op.LTE):  # x > 2023.5 <=> x > 2023 for integers
            return math.floor(number), op, ""
        if op in (Op.GTE, Op.LT):
            return math.ceil(number), op, ""
        return FAIL, op, " (no integer equals it)"
    if base == "date":
        when = parse_date(value, today)
        if when is None:
            return FAIL, op, " (not a date)"
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
        number = parse_number(value) if isinstance(value, (int, float)) else None
        if number is None:
            return FAIL, op, ""
        try:
            text = str(int(number)) if float(number).is_integer() else repr(number)
        except (OverflowError, ValueError):
            return FAIL, op, ""
        return text, op, ""
    if base == "bool":
        # MetadataFilter rejects bool (StrictInt); 1/0 compare equal to True/False.
        if isinstance(value, bool):
            return int(value), op, ""
        if isinstance(value, int) and value in (0, 1):
            return value, op, ""
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return int(value.strip().lower() in _TRUE), op, ""
        return FAIL, op, ""
    # "any": keep what MetadataFilter can hold
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return FAIL, op, ""
    if isinstance(value, float) and not math.isfinite(value):
        return FAIL, op, ""
    return value, op, ""


# --------------------------------------------------------------------------- top_k


def top_k_with_reason(
    spec_top_k: int | None,
    similarity_top_k: int,
    max_top_k: int,
    query: str | None,
    empty_query_top_k: int | None,
) -> tuple[int, int, str | None]:
    """``(k used, k asked for, why it was clamped or None)``: :func:`resolve_top_k` with its reason."""
    empty = not (query or "").strip()
    if spec_top_k is not None:
        k, source = spec_top_k, "top_k from the spec"
    elif empty and empty_query_top_k is not None:
        k, source = empty_query_top_k, "empty_query_top_k (the query is empty)"
    else:
        k, source = similarity_top_k, "similarity_top_k"
    clamped = min(max(k, 1), max_top_k)
    if clamped == k:
        return k, k, None
    return clamped, k, f"{source} = {k} is outside [1, max_top_k={max_top_k}]; using {clamped}"


def resolve_top_k(
    spec_top_k: int | None,
    similarity_top_k: int,
    max_top_k: int,
    query: str | None = None,
    empty_query_top_k: int | None = None,
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
    return top_k_with_reason(spec_top_k, similarity_top_k, max_top_k, query, empty_query_top_k)[0]
