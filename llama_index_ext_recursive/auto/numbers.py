"""Comparisons on numeric keys that are not years, in English and Chinese.

"under 30 minutes", "at least 4 stars", "between 90 and 120 minutes",
"300 pages or more", "超过 60 分钟", "45分钟以上", "不到15分钟", "30到60分钟之间",
"评分高于8", "a five-judge panel": a number is read with the key whose *unit* follows it or whose
*name* comes before it. Units and names come from the schema, not from one
corpus: the key's name (``minutes``, ``page_count``; a key named by the
plural of what it counts, ``plays`` or ``citations``, is its own unit: "100000
plays"), the unit words in its description ("Runtime in minutes"), and their
Chinese forms in :data:`~llama_index_ext_recursive.auto.lexicon.KEY_WORDS_ZH`.
A unit or name that two keys share is nobody's: such a phrase gets a note, not
a filter. With one numeric key, a number that names neither is read for it
when a comparison says so ("at most 3500", "50万以上"), with a note.

Conventions (the same in both languages): more than / over / 超过 -> ``>``;
at least / N or more / N以上 / 至少 -> ``>=``; less than / under / 不到 -> ``<``;
at most / up to / within / N以下 / 以内 / 不超过 -> ``<=``; between A and B,
A-B, A到B之间 -> ``>=`` A and ``<=`` B. "not more than" is ``<=``; a negated
range ("not between 30 and 60") cannot be ANDed filters and gets a note.
A range's magnitude may follow its second number only ("between 1 and 2
billion"). A key whose description states a scale ("Revenue in millions of US
dollars", "(百万元)") holds "5 billion" as 5000; a bare number is taken as
already in that scale.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from llama_index.core.vector_stores.types import FilterOperator, MetadataInfo

from llama_index_ext_recursive.auto.lexicon import (
    COMPARISON_BEFORE,
    CURRENCY_PREFIXES,
    KEY_WORDS_ZH,
    MAGNITUDES,
    NEGATED_OPERATOR,
    NUM_WORD_RE,
    PERIOD_UNITS,
    UNIT_ALIASES,
    UNIT_WORDS_EN,
    ZH_DIGITS,
    ZH_NUM_RE,
    parse_count,
    plural_forms,
)
from llama_index_ext_recursive.auto.spans import Spans
from llama_index_ext_recursive.auto.terms import chinese_words_for
from llama_index_ext_recursive.text import CJK_CLASS

__all__ = ["NUMBER_TEXT", "NumericComparison", "NumericReader", "in_range", "key_words", "parse_number", "range_note"]

Op = FilterOperator
# digits with optional thousands separators, decimals and exponent: 30, 1,000,000, 1.5, 1e3
_DIGITS = r"(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?"
# a magnitude after the number: 3万, 1.5亿, 5k, 2M, 2 million (not 5 km, 5 min)
_MAGNITUDE = (
    rf"(?:\s*(?:{'|'.join(sorted((m for m in MAGNITUDES if not m.isascii()), key=len, reverse=True))})"
    r"|(?:k|K|M)(?![A-Za-z])|\s+(?:thousand|million|billion)(?![A-Za-z]))"
)
# "2万5", "2万5千" and "两万五" are 25,000, "3千5" 3,500: one digit after 万 or 千 counts the next lower unit
_ZH_DIGITS = "".join(ZH_DIGITS)
_TAIL = rf"(?:(?<=[万千])[0-9{_ZH_DIGITS}][千百]?(?![0-9.,{_ZH_DIGITS}十百千万亿]))?"
_TAIL_TEXT = re.compile(rf"(?P<head>.+[万千])(?P<digit>[0-9{_ZH_DIGITS}])(?P<unit>[千百]?)")
_NEXT_UNIT = {"万": ("千", 1e3), "千": ("百", 1e2)}  # the unit below, and what it counts
# "1,5" or "12,50" is no thousands separator (a list, or a decimal comma): not read as 1 or 12
_NUMBER = (
    rf"(?:(?<![A-Za-z0-9.,]){_DIGITS}(?![0-9]|,\d)(?:{_MAGNITUDE}{_TAIL})?"
    rf"|(?<![A-Za-z])(?:{NUM_WORD_RE})(?![A-Za-z])(?:\s+(?:thousand|million|billion)(?![A-Za-z]))?"
    rf"|{ZH_NUM_RE}(?:{_MAGNITUDE}{_TAIL})?)"
)
#: a written number with its magnitude, for other rules' patterns ("rent < 3万", "pages >= 1,000")
NUMBER_TEXT = rf"-?{_DIGITS}(?![0-9]|,\d)(?:{_MAGNITUDE}{_TAIL})?"
# from here on a float no longer holds every integer exactly (2**53 + 1 reads as 2**53): no filter, a note
LARGEST_NUMBER = 2.0**53
# what a query may write for a number no filter can compare with ("rent < inf")
_NOT_FINITE = {"inf": math.inf, "infinity": math.inf, "nan": math.nan}

# comparison words after the number (and its unit)
_AFTER = {
    "or more": Op.GTE,
    "or longer": Op.GTE,
    "or higher": Op.GTE,
    "or above": Op.GTE,
    "or over": Op.GTE,
    "and up": Op.GTE,
    "and above": Op.GTE,
    "and over": Op.GTE,
    "plus": Op.GTE,
    "+": Op.GTE,
    "at least": Op.GTE,
    "or less": Op.LTE,
    "or fewer": Op.LTE,
    "or shorter": Op.LTE,
    "or lower": Op.LTE,
    "or under": Op.LTE,
    "and under": Op.LTE,
    "and below": Op.LTE,
    "at most": Op.LTE,
    "max": Op.LTE,
    "or below": Op.LTE,
    "及以上": Op.GTE,
    "或以上": Op.GTE,
    "以上": Op.GTE,
    "或更多": Op.GTE,
    "或更长": Op.GTE,
    "及以下": Op.LTE,
    "或以下": Op.LTE,
    "以下": Op.LTE,
    "以内": Op.LTE,
    "之内": Op.LTE,
    "内": Op.LTE,
    "或更少": Op.LTE,
}
_SCALE = re.compile(
    r"\bin\s+(?P<en>thousands|millions|billions)\b|\b(?P<en_of>thousands|millions|billions)\s+of\b"
    r"|(?:单位[:：]?\s*|[(（])(?P<zh>万亿|百万|千万|万|亿|千)",
    re.IGNORECASE,
)
# a magnitude written with the number: 5 billion, 3万, 2M
_HAS_MAGNITUDE = re.compile(r"[万亿千]|\d\s*[kKM](?![A-Za-z])|thousand|million|billion", re.IGNORECASE)
_TRAILING_MAGNITUDE = re.compile(r"(?:万亿|百万|千万|万|亿|[kKM]|\s*(?:thousand|million|billion))\s*$", re.IGNORECASE)
_CJK = re.compile(f"[{CJK_CLASS}]")
# a measure word between a number and its unit: "100个版本", "5名法官"
_ZH_CLASSIFIER = "[个名位家次件条项款]"
# a key that is a score or rating: its numbers may be written "8 分", "9 points"
_SCORE_WORDS = re.compile(r"score|rating|rated|cvss|评分|分数", re.IGNORECASE)
_SCORE_UNITS = {"分", "points", "point"}
# words between a score key's name and its number: "CVSS score of 9", "CVSS 评分 8"
_SCORE_FILLER = r"(?:scores?|ratings?|评分|得分|分数)"
# "50万以上": with one numeric key, a Chinese bound after a bare number is about it
_ZH_AFTER = [phrase for phrase in _AFTER if not phrase.isascii()]
_NOTCOMPARISON_BEFORE = re.compile(r"(?:(?<![A-Za-z])not|不是|并非)\s*$", re.IGNORECASE)


def _alternation(phrases: Iterable[str]) -> str:
    parts = []
    for phrase in sorted(set(phrases), key=len, reverse=True):
        body = r"\s*".join(map(re.escape, phrase.split()))
        parts.append(
            body
            if re.search(r"[^\x00-\x7f]", phrase) or not phrase[0].isalnum()
            else rf"(?<![A-Za-z]){body}(?![A-Za-z])"
        )
    return "|".join(parts)


def parse_number(text: str) -> float | None:
    """A number as a query writes it: ``30``, ``1,000,000``, ``1.5万``, ``2万5``, ``5k``, ``1e3``,
    ``三万``, ``two million``, ``-5k``.

    ``None``: not a number (``1,5`` is none: a list or a decimal comma, not
    fifteen). ``inf``, ``nan`` or from :data:`LARGEST_NUMBER` on in magnitude:
    a number no filter can compare with exactly (:func:`in_range` says so).

    Args:
        text: the number's text, as the patterns of this module find it.
    """
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    text = text.lstrip("-").strip()
    if text.lower() in _NOT_FINITE:
        return sign * _NOT_FINITE[text.lower()]
    multiplier, tail = sign, 0.0
    split = _TAIL_TEXT.fullmatch(text)
    if split is not None:  # "2万5" and "2万5千": 2万 + 5千; "2万5百" is no number
        unit, counts = _NEXT_UNIT[split.group("head")[-1]]
        if split.group("unit") not in ("", unit):
            return None
        digit = split.group("digit")
        tail, text = float(ZH_DIGITS.get(digit, digit)) * counts, split.group("head")
    for suffix in sorted(MAGNITUDES, key=len, reverse=True):
        if text.endswith(suffix) and text[: -len(suffix)].strip():
            text, multiplier = text[: -len(suffix)].strip(), sign * MAGNITUDES[suffix]
            break
    if tail and multiplier == sign:
        return None  # a digit after something other than 万 or 千
    if re.fullmatch(_DIGITS, text):
        return float(text.replace(",", "")) * multiplier + sign * tail
    count = parse_count(text)
    return None if count is None else float(count) * multiplier + sign * tail


def in_range(number: float) -> bool:
    """Whether a filter can compare with ``number``: finite, and below 2**53 where integers are exact."""
    return math.isfinite(number) and abs(number) < LARGEST_NUMBER


def range_note(phrase: str, key: str | None) -> str:
    """The note for a phrase whose number no filter can compare with (:func:`in_range`)."""
    return (
        f"{phrase!r} holds a number no filter can compare exactly (infinite, not a number, or "
        f"2**53 or more); no {key + ' ' if key else ''}filter"
    )


def key_words(name: str) -> list[str]:
    """``page_count`` -> ``["page", "count"]``; ``prepMinutes`` -> ``["prep", "minutes"]``."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)
    return [w.lower() for w in re.split(r"[\s_\-]+", spaced) if w]


@dataclass(frozen=True)
class NumericComparison:
    """One comparison read from the query: ``key operator value`` over ``[start, end)``."""

    start: int
    end: int
    text: str
    rule: str
    key: str
    operator: FilterOperator
    value: float


class NumericReader:
    """Finds comparisons on numeric keys by their units and names.

    Args:
        keys: the numeric keys to read (the year key has its own rules),
            with their declared ``MetadataInfo``.
        integer_keys: which of them hold integers (their values are ints).
    """

    def __init__(self, keys: Sequence[MetadataInfo], integer_keys: set[str]) -> None:
        self._integer = set(integer_keys)
        # "Revenue in millions of US dollars": "5 billion" is 5000 there (a bare "500" stays 500)
        self._scale = {meta.name: scale for meta in keys if (scale := _stated_scale(meta.description or ""))}
        units: dict[str, set[str]] = {}
        names: dict[str, set[str]] = {}
        for meta in keys:
            unit_forms, name_forms = self._mentions(meta)
            units[meta.name], names[meta.name] = unit_forms, name_forms
        self._units, self._names = units, names
        self._chinese_names_added = False
        before = _alternation(COMPARISON_BEFORE)
        # with one numeric key, "at most 3500" can only be about it (said in a note)
        self._only_key = keys[0].name if len(keys) == 1 else None
        self._bare = re.compile(
            rf"(?:(?P<between>between)\s+|在\s*)?(?P<a>{_NUMBER})\s*(?P<sep>and|to|-|–|~|～|到|至)\s*"
            rf"(?P<b>{_NUMBER})(?P<zh_between>\s*之间)?(?!\s*[年%])"
            rf"|(?P<op>{before})\s*(?P<c>{_NUMBER})(?!\s*[年%])"
            rf"|(?P<d>{_NUMBER})\s*(?P<op_after>{_alternation(_ZH_AFTER)})",
            re.IGNORECASE,
        )
        self.ambiguous, self._patterns = self._compile(units, names)

    def _add_chinese_names(self) -> None:
        """Name each key in Chinese too, by the dictionary words whose first sense is one of its
        English names or units ("judges": 法官, "versions": 版本); at the first Chinese query, once."""
        self._chinese_names_added = True

        def chinese(forms: set[str]) -> set[str]:
            return {word for form in forms if form.isascii() and form.isalpha() for word in chinese_words_for(form)}

        units = {key: forms | chinese(forms) for key, forms in self._units.items()}
        names = {key: (forms | chinese(forms)) - units[key] for key, forms in self._names.items()}
        self.ambiguous, self._patterns = self._compile(units, names)

    def _compile(
        self, units: dict[str, set[str]], names: dict[str, set[str]]
    ) -> tuple[set[str], list[tuple[str, re.Pattern]]]:
        """The phrases that name several keys, and each key's patterns."""
        shared = self._shared(list(units.values()) + list(names.values()))
        patterns: list[tuple[str, re.Pattern]] = []
        before = _alternation(COMPARISON_BEFORE)
        after = _alternation(_AFTER)
        for key in units:
            unit = _alternation(units[key] - shared)
            # a key is named before its number by its name or its unit ("被引用次数在50到200之间")
            name = _alternation((names[key] | units[key]) - shared)
            if not unit and not name:
                continue
            prefix = _alternation(self._prefixes(units[key]) - shared)
            # "¥6000", "$50": a currency symbol before the number says which key as a unit does
            pre = rf"(?:(?P<pre>{prefix})\s*)?" if prefix else r"(?P<pre>(?!))?"
            # a measure word ("100个版本") or a participle ("10 reported injuries") may stand before the unit
            unit_re = rf"(?:{_ZH_CLASSIFIER}\s*|[A-Za-z]{{3,}}ed\s+)?(?P<unit>{unit})" if unit else r"(?P<unit>(?!))"
            unit_b = rf"(?P<unit_b>{unit})" if unit else r"(?P<unit_b>(?!))"
            name_re = (
                rf"(?:(?P<name>{name})\s*(?:{_SCORE_FILLER}\s*)?(?:(?:is|of|at|在|为|是)\s*)?)"
                if name
                else r"(?P<name>(?!))?"
            )
            patterns.append(
                (
                    key,
                    re.compile(
                        rf"{name_re}?(?:(?P<between>between|from)\s+)?(?:在\s*)?{pre}(?P<a>{_NUMBER})\s*(?:{unit_b}\s*)?"
                        rf"(?P<sep>and|to|-|–|~|～|到|至|和)\s*(?:(?:{prefix or '(?!)'})\s*)?(?P<b>{_NUMBER})\s*{unit_re}?"
                        rf"(?P<zh_between>\s*之间)?",
                        re.IGNORECASE,
                    ),
                )
            )
            patterns.append(
                (key, re.compile(rf"{name_re}?(?P<op>{before})\s*{pre}(?P<a>{_NUMBER})\s*{unit_re}?", re.IGNORECASE))
            )
            unit_c = rf"(?P<unit_c>{unit})" if unit else r"(?P<unit_c>(?!))"
            patterns.append(
                (
                    key,
                    re.compile(  # "five-judge panels", "a single-judge ruling", "3-bedroom": exactly that many
                        rf"(?<![\w-])(?P<a>{_NUMBER}|single)-(?P<unit>{_alternation(units[key] | names[key])})(?![\w-])",
                        re.IGNORECASE,
                    ),
                )
            )
            patterns.append(
                (
                    key,
                    re.compile(  # "300 pages or more", "10 or more hours"
                        rf"{name_re}?{pre}(?P<a>{_NUMBER})\s*(?:{unit_re}\s*)?(?P<op>{after})(?:\s*{unit_c}\b)?",
                        re.IGNORECASE,
                    ),
                )
            )
            patterns.append(
                (
                    key,
                    re.compile(  # "10+ citations"
                        rf"{name_re}?{pre}(?P<a>{_NUMBER})\s*(?P<op>\+)\s*{unit_re}", re.IGNORECASE
                    ),
                )
            )
        return shared, patterns

    # ---------------------------------------------------------------- setup

    @staticmethod
    def _mentions(meta: MetadataInfo) -> tuple[set[str], set[str]]:
        """(unit phrases, name phrases) of a key, in English and Chinese."""
        units: set[str] = set()
        names: set[str] = set()

        def add_unit(word: str) -> None:
            word = UNIT_ALIASES.get(word, word)
            for form in plural_forms(word):
                if form in UNIT_WORDS_EN:
                    units.add(form)
                units.update(KEY_WORDS_ZH.get(form, ()))
            units.update(alias for alias, target in UNIT_ALIASES.items() if target in plural_forms(word))

        words = key_words(meta.name)
        for word in words:
            if UNIT_ALIASES.get(word, word) in UNIT_WORDS_EN:
                add_unit(word)
            elif word in PERIOD_UNITS:
                units.update(PERIOD_UNITS[word])  # monthly_rent: "6000 a month", "每月6000"
            elif word == words[-1] and word.endswith("s") and len(word) > 3 and not word.endswith("ss"):
                # a key named by what it counts ("plays", "citations", "affected_versions") is its own
                # unit: "100000 plays", "more than 50 versions"
                units.update(plural_forms(word))
                units.update(KEY_WORDS_ZH.get(word, ()))
                if len(words) > 1:
                    names.add(word)
            else:
                names.update(plural_forms(word) if len(words) == 1 else {word})
                names.update(KEY_WORDS_ZH.get(word, ()))
        names.add(" ".join(words))
        description = meta.description or ""
        for word in re.findall(r"[A-Za-z]+", description):
            if UNIT_ALIASES.get(word.lower(), word.lower()) in UNIT_WORDS_EN:
                add_unit(word.lower())
        if _SCORE_WORDS.search(f"{meta.name} {description}"):
            units.update(_SCORE_UNITS)  # "8 分以上", "9 points or more" on a score
        for forms in KEY_WORDS_ZH.values():
            units.update(form for form in forms if len(form) > 1 and form in description)
        names -= units
        return units, names

    @staticmethod
    def _prefixes(units: set[str]) -> set[str]:
        """Currency symbols that stand before the number for a key measured in that currency."""
        return {symbol for unit in units for symbol in CURRENCY_PREFIXES.get(unit, ())}

    @staticmethod
    def _shared(groups: list[set[str]]) -> set[str]:
        seen: set[str] = set()
        shared: set[str] = set()
        for group in groups:
            shared |= seen & group
            seen |= group
        return shared

    # ---------------------------------------------------------------- reading

    def find(self, text: str) -> tuple[list[NumericComparison], list[str]]:
        """The comparisons in ``text`` (longest reading first) and notes on what was left out."""
        if not self._chinese_names_added and _CJK.search(text):
            self._add_chinese_names()
        found: list[tuple[int, int, str, re.Match]] = []
        for key, pattern in self._patterns:
            for m in pattern.finditer(text):
                if not (
                    _group(m, "name")
                    or m.group("unit")
                    or _group(m, "unit_b")
                    or _group(m, "unit_c")
                    or _group(m, "pre")
                ):
                    continue  # a bare number: nothing says which key it is
                if _group(m, "sep") in {"and", "和"} and not (m.group("between") or _group(m, "zh_between")):
                    continue  # "30 and 60 minutes" lists two numbers; "between 30 and 60" is a range
                if _names_years(m):
                    continue  # "2019-2021年": years, for the year rules, though a key counts per year
                found.append((m.start(), m.end(), key, m))
        found.sort(key=lambda f: (-(f[1] - f[0]), f[0]))
        taken = Spans()
        out: list[NumericComparison] = []
        notes: list[str] = []
        for start, end, key, m in found:
            if taken.overlaps(start, end):
                continue
            a_text, b_text = m.group("a"), _group(m, "b")
            if b_text:  # "between 1 and 2 billion": the magnitude after the second number is both numbers'
                a_text = _shared_magnitude(a_text, b_text)
            a = 1.0 if a_text.lower() == "single" else self.number(key, a_text)
            b = self.number(key, b_text) if b_text else None
            if a is None or (_group(m, "b") and b is None):
                continue
            taken.add(start, end)
            if not all(in_range(v) for v in (a, b) if v is not None):
                notes.append(range_note(m.group().strip(), key))
                continue
            negated = _negated(text, start)
            phrase = m.group().strip()
            if b is not None:
                if negated:
                    notes.append(
                        f"{phrase!r} is negated: 'not between' means either side of the "
                        f"range, which ANDed filters cannot express; no {key} filter"
                    )
                    continue
                low, high = sorted((a, b))
                out += [
                    NumericComparison(start, end, phrase, "number-range", key, Op.GTE, self._value(key, low)),
                    NumericComparison(start, end, phrase, "number-range", key, Op.LTE, self._value(key, high)),
                ]
                continue
            if "op" not in m.re.groupindex:
                op = Op.EQ  # "five-judge"
            else:
                table = COMPARISON_BEFORE if m.start("op") < m.start("a") else _AFTER
                op = table[_lookup(m.group("op"))]
            out.append(
                NumericComparison(
                    start,
                    end,
                    phrase,
                    "not-number" if negated else "number",
                    key,
                    NEGATED_OPERATOR[op] if negated else op,
                    self._value(key, a),
                )
            )
        if self._only_key is not None:
            for m in self._bare.finditer(text):
                if taken.overlaps(m.start(), m.end()):
                    continue
                first = _shared_magnitude(m.group("a"), m.group("b")) if m.group("a") else None
                numbers = [g for g in (first, m.group("b"), m.group("c"), m.group("d")) if g]
                values = [v for v in (self.number(self._only_key, g) for g in numbers) if v is not None]
                if len(values) < len(numbers) or any(g.isdigit() and 1800 <= int(g) <= 2100 for g in numbers):
                    continue  # "before 2020", "2019-2021" are years, read by the year rules
                if not all(in_range(v) for v in values):
                    taken.add(m.start(), m.end())
                    notes.append(range_note(m.group().strip(), None))
                    continue
                if m.group("a") and m.group("sep") in {"and"} and not m.group("between"):
                    continue
                if m.group("a") and not (m.group("between") or m.group("zh_between")):
                    continue  # a bare "3-5" is too weak without "between" or 之间
                key = self._only_key
                negated = _negated(text, m.start())
                if m.group("a"):
                    if negated:
                        continue
                    low, high = sorted(values)
                    out += [
                        NumericComparison(
                            m.start(), m.end(), m.group(), "number-only-key", key, Op.GTE, self._value(key, low)
                        ),
                        NumericComparison(
                            m.start(), m.end(), m.group(), "number-only-key", key, Op.LTE, self._value(key, high)
                        ),
                    ]
                else:
                    op = _AFTER[m.group("op_after")] if m.group("d") else COMPARISON_BEFORE[_lookup(m.group("op"))]
                    out.append(
                        NumericComparison(
                            m.start(),
                            m.end(),
                            m.group(),
                            "number-only-key",
                            key,
                            NEGATED_OPERATOR[op] if negated else op,
                            self._value(key, values[0]),
                        )
                    )
                taken.add(m.start(), m.end())
                notes.append(f"{m.group().strip()!r} names no unit or key; read as {key}, the only numeric key")
        out.sort(key=lambda c: c.start)
        return out, notes

    def number(self, key: str, text: str) -> float | None:
        """The number ``text`` writes, in the key's stated scale when it is written with a magnitude
        ("5 billion" is 5000 for a key "in millions"); ``None`` when it is no number."""
        number = parse_number(text)
        scale = self._scale.get(key)
        if number is None or scale is None or not _HAS_MAGNITUDE.search(text):
            return number
        return number / scale

    def _value(self, key: str, number: float) -> float:
        return int(number) if key in self._integer and number.is_integer() else number


def _names_years(m: re.Match) -> bool:
    """Whether a match is calendar years with a year word as unit ("2019-2021年", "2020 years")."""
    units = [u for u in (_group(m, "unit"), _group(m, "unit_b"), _group(m, "unit_c"), _group(m, "name")) if u]
    numbers = [n for n in (_group(m, "a"), _group(m, "b")) if n]
    return (
        any(u.lower() in {"年", "year", "years"} for u in units)
        and bool(numbers)
        and all(n.isdigit() and 1800 <= int(n) <= 2100 for n in numbers)
    )


def _shared_magnitude(first: str, second: str) -> str:
    """The first number of a range, with the second's magnitude when only that one has it."""
    if _HAS_MAGNITUDE.search(first):
        return first
    m = _TRAILING_MAGNITUDE.search(second)
    return first + m.group() if m else first


def _stated_scale(description: str) -> float | None:
    """The scale a key's description says its numbers are in: "in millions", "thousands of", "(百万元)"."""
    m = _SCALE.search(description)
    if m is None:
        return None
    word = (m.group("en") or m.group("en_of") or m.group("zh")).lower()
    return MAGNITUDES[word.rstrip("s")] if word.rstrip("s") in MAGNITUDES else MAGNITUDES[word]


def _negated(text: str, start: int) -> bool:
    """Whether "not"/"不是" stands right before ``start`` (looked for in the few characters before it)."""
    return _NOTCOMPARISON_BEFORE.search(text, max(0, start - 20), start) is not None


def _group(m: re.Match, name: str) -> str | None:
    return m.group(name) if name in m.re.groupindex else None


def _lookup(op_text: str) -> str:
    return " ".join(op_text.lower().split())
