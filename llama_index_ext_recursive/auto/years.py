"""Year expressions the rule-based generator turns into filters, in English and Chinese.

The table of :func:`year_rules` is data: each pattern with the conditions it
means (see :mod:`~llama_index_ext_recursive.auto.rules` for the conventions).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import date

from llama_index.core.vector_stores.types import FilterOperator

from llama_index_ext_recursive.auto.lexicon import NUM_WORD_RE, ZH_NUM_RE, parse_count

# a 4-digit number not glued to letters, digits or a decimal point, nor part of an identifier
# ("CVE-2021-44228", not "pre-2020"); a fiscal year may be written "FY2024"
_Y = r"(?<![0-9A-Za-z.])(?-i:(?<![A-Z]-))(?:FY\s?)?(?P<{name}>\d{{4}})(?![0-9A-Za-z]|\.\d)"
YA, YB = _Y.format(name="a"), _Y.format(name="b")
# a year rule's handler: the regex match -> (operator, year) conditions
YearHandler = Callable[[re.Match], list[tuple[FilterOperator, int]]]


def year_rules(today: date) -> list[tuple[str, str, YearHandler]]:
    """``(rule name, pattern, handler)`` in priority order, longer phrasings first.

    A handler turns a match into ``(operator, year)`` conditions (none: not a
    year filter); relative phrasings count from ``today``.
    """

    def fixed(op: FilterOperator) -> YearHandler:
        return lambda m: [(op, int(m.group("a")))]

    def decade(m: re.Match) -> list[tuple[FilterOperator, int]]:
        start = int(m.group("a"))
        return [(FilterOperator.GTE, start), (FilterOperator.LTE, start + 9)] if start % 10 == 0 else []

    def span(m: re.Match) -> list[tuple[FilterOperator, int]]:
        a, b = sorted((int(m.group("a")), int(m.group("b"))))
        return [(FilterOperator.GTE, a), (FilterOperator.LTE, b)]

    def last_n(m: re.Match) -> list[tuple[FilterOperator, int]]:
        n = parse_count(m.group("n"))
        return [(FilterOperator.GTE, today.year - n + 1)] if n else []

    def this(offset: int) -> YearHandler:
        return lambda m: [(FilterOperator.EQ, today.year - offset)]

    def this_and_after(offset: int) -> YearHandler:
        return lambda m: [(FilterOperator.GTE, today.year - offset)]

    n_en = rf"(?P<n>\d{{1,2}}|{NUM_WORD_RE})"
    n_zh = rf"(?P<n>\d{{1,2}}|{ZH_NUM_RE})"
    # optional 年 after a year; no pattern has two \s* with only optional text between, which
    # made a long run of spaces cost the square of its length
    yr = r"(?:\s*年)?"
    GT, GTE, LT, LTE = FilterOperator.GT, FilterOperator.GTE, FilterOperator.LT, FilterOperator.LTE
    return [
        # ranges
        ("year-range", rf"\bbetween\s+{YA}\s*(?:and|-|–|—|to)\s*{YB}", span),
        ("year-range", rf"\bfrom\s+{YA}\s*(?:-|–|—|to|until|till|through|thru)\s*{YB}", span),
        ("year-range", rf"(?:在)?{YA}{yr}\s*(?:和|与)\s*{YB}{yr}\s*之间", span),
        ("year-range", rf"(?:在|从)?{YA}{yr}\s*(?:到|至|-|–|—|~|～)\s*{YB}{yr}\s*(?:之间|期间|间)?", span),
        ("year-range", rf"{YA}\s*(?:to|through|thru)\s+{YB}", span),
        ("year-range", r"\b(?:the\s+)?(?P<a>[12]\d{2}0)['’]?s\b", decade),
        ("year-range", rf"{YA}\s*年代", decade),
        # up to today
        (
            "year-compare",
            rf"\b(?:from\s+|since\s+)?{YA}\s*(?:-|–|—|to|until|till)\s*"
            r"(?:now|today|(?:the\s+)?present|date)\b",
            fixed(GTE),
        ),
        ("year-compare", rf"(?:从|自)?{YA}{yr}\s*(?:至今|到现在|到今天|到目前为止|到目前|以来至今)", fixed(GTE)),
        # relative ("前三年" is left alone: it also means "the first three years")
        ("relative-year", rf"\b(?:the\s+)?(?:last|past|previous|recent|latest)\s+{n_en}\s+years?\b", last_n),
        ("relative-year", r"\bthe\s+(?:last|past)\s+year\b(?!['’]s)", this_and_after(0)),
        ("relative-year", r"\b(?:the\s+)?(?:last|past|previous)\s+decade\b", this_and_after(9)),
        ("relative-year", r"(?:最近|近|过去)\s*十\s*年", this_and_after(9)),
        ("relative-year", r"\bthis\s+year(?:['’]s)?", this(0)),
        ("relative-year", r"\b(?:the\s+)?year\s+before\s+last\b", this(2)),
        ("relative-year", r"\b(?:last|previous)\s+year(?:['’]s)?", this(1)),
        ("relative-year", rf"(?:最近|近|过去的?)\s*{n_zh}\s*年(?:来|内|间|以来|里|中)?", last_n),
        ("relative-year", r"今年", this(0)),
        ("relative-year", r"去年", this(1)),
        ("relative-year", r"前年", this(2)),
        # comparisons: negated and compound phrasings before the plain ones
        ("year-compare", rf"\b(?:no|not)\s+later\s+than\s+{YA}", fixed(LTE)),
        ("year-compare", rf"\b(?:not\s+after|(?:in|on)\s+or\s+before)\s+{YA}", fixed(LTE)),
        ("year-compare", rf"\b(?:(?:up\s+)?to\s+and\s+including|up\s+to\s+including)\s+{YA}", fixed(LTE)),
        ("year-compare", rf"\b(?:no|not)\s+earlier\s+than\s+{YA}", fixed(GTE)),
        ("year-compare", rf"\b(?:not\s+before|(?:in|on)\s+or\s+after)\s+{YA}", fixed(GTE)),
        ("year-compare", rf"{YA}\s+(?:or|and)\s+(?:later|after|newer|more\s+recent|onwards?|beyond)\b", fixed(GTE)),
        ("year-compare", rf"{YA}\s+(?:or|and)\s+(?:earlier|before|older|prior)\b", fixed(LTE)),
        ("year-compare", rf"\bfrom\s+{YA}\s+(?:on|onwards?|forward)\b", fixed(GTE)),
        ("year-compare", rf"\b(?:starting|beginning)(?:\s+(?:in|from))?\s+{YA}", fixed(GTE)),
        ("year-compare", rf"{YA}\s+onwards?\b", fixed(GTE)),
        ("year-compare", rf"\bsince\s+{YA}", fixed(GTE)),
        (
            "year-compare",
            rf"\b(?:after|later\s+than|newer\s+than|more\s+recent\s+than|post)\s*(?:-\s*)?{YA}",
            fixed(GT),
        ),
        ("year-compare", rf"\b(?:before|earlier\s+than|older\s+than|prior\s+to|pre)\s*(?:-\s*)?{YA}", fixed(LT)),
        ("year-compare", rf"\b(?:up\s+(?:un)?til|up\s+to|until|till|through|thru)\s+{YA}", fixed(LTE)),
        ("year-compare", rf"不早于\s*{YA}{yr}", fixed(GTE)),
        ("year-compare", rf"不晚于\s*{YA}{yr}", fixed(LTE)),
        ("year-compare", rf"晚于\s*{YA}{yr}", fixed(GT)),
        ("year-compare", rf"早于\s*{YA}{yr}", fixed(LT)),
        ("year-compare", rf"{YA}{yr}\s*(?:及|或)(?:以后|之后)", fixed(GTE)),
        ("year-compare", rf"{YA}{yr}\s*(?:及|或)(?:以前|之前)", fixed(LTE)),
        ("year-compare", rf"(?:(?:自从?|从)\s*)?{YA}{yr}\s*(?:以后|之后|以来|起|开始|后)", fixed(GTE)),
        ("year-compare", rf"{YA}{yr}\s*(?:以前|之前|前)", fixed(LT)),
        ("year-compare", rf"(?:截至|截止到?|直到|到)\s*{YA}{yr}\s*(?:为止|底)?", fixed(LTE)),
        # equality: "in 2023", "from 2023", "2023年", a bare year
        ("year", rf"{YA}\s*年度?", fixed(FilterOperator.EQ)),
        ("year", YA, fixed(FilterOperator.EQ)),
    ]
