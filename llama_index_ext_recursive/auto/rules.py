"""Auto-retriever specs without an LLM: metadata filters read from the query by rules.

Upstream's ``VectorIndexAutoRetriever`` asks an LLM to turn a question into a
``VectorStoreQuerySpec`` (query text, metadata filters, top_k). That costs a
call per query, needs a model, and may invent values the index does not hold.
:class:`RuleBasedSpecGenerator` does the same job deterministically, in English
and Chinese, from two things the index already knows: its ``VectorStoreInfo``
(which keys exist and their types) and its *vocabulary* (the values actually
present per key, e.g. from :func:`~llama_index_ext_recursive.auto.spec.metadata_vocabulary`).
It can only produce values the index holds (or that the caller mapped
explicitly through ``synonyms``), and negations ("not in English", "非博客")
become ``!=``/``nin``.

Conventions (all relative to ``today``; years are calendar years):

- ``in/from 2023``, ``2023年``, a bare plausible year -> ``year == 2023``;
  several equality values of one key -> ``IN``.
- ``after 2022`` / ``later than`` / ``晚于`` -> ``>``; ``since 2023``,
  ``2023 or later``, ``from 2023 onwards``, ``2023年以后/之后/以来/起`` -> ``>=``
  (``以后`` conventionally includes the year named in Chinese usage).
- ``before 2020`` / ``older than`` / ``早于`` / ``2020年之前/以前`` -> ``<``;
  ``until/up to/through/no later than 2021``, ``2021 or earlier``,
  ``截至2021年``, ``2021年及以前`` -> ``<=``.
- ``between 2019 and 2021``, ``2019-2021``, ``2019年到2021年``, ``the 2010s``,
  ``2010年代`` -> ``>=`` and ``<=``; ``2020 to now``, ``2020年至今`` -> ``>=``.
- ``last/past N years``, ``最近/近/过去N年`` -> ``>= today.year - N + 1`` (the
  current year counts as one of the N, so "the past year" is this year and
  "the last decade" is ``>= today.year - 9``); ``this year``/``今年`` -> ``==``
  today's year; ``last year``/``去年`` -> ``==`` the previous one, ``前年`` and
  "the year before last" the one before. ``前三年`` is ambiguous ("the first
  three years") and is left as text.
- A year far outside the index's years (more than 10 years before the oldest,
  or after next year) is treated as part of the topic ("before 1300"), not as
  a publication-date filter.
- A value word is a filter when it names a kind of document ("food articles",
  "about food", "中文资料", "博客"), and topic text when it is part of a
  phrase about something else ("the history of lighthouses", "Chinese tea",
  "travel policy", "灯塔的历史", "节约能源").
- ``top 5``, ``5 results``, ``five blog posts``, ``前5个``, ``返回10条`` ->
  ``top_k``; "top 10 mistakes" is not a result count.
- ``key=value``, ``key: value``, ``key >= 3``, ``rating above 4`` work for
  every declared key.

Any schema, not one corpus's:

- Every string value in the vocabulary is matched in text of any script
  ("2024年thai菜谱"); phrases for values come from ``synonyms``, the key
  descriptions and name parts (:mod:`~llama_index_ext_recursive.auto.terms`),
  and a small bilingual lexicon. A value that is also a common word ("main",
  "short") needs a value context ("main courses"); a rare one does not.
- Chinese words match values stored in pinyin (上海 -> ``shanghai``).
- Every other numeric key gets comparisons and ranges by its unit or name
  (:mod:`~llama_index_ext_recursive.auto.numbers`); with a single such key a
  bare "at most 3500" is read for it, with a note.
- A negation right before a value (over function words: "excluding anything
  by Rossi"), or a list of them, or "之外" after it, gives ``!=``/``nin``; a
  year or number after "not" gets the opposite comparison. A negation further
  away in the same clause ("not spicy thai food"), "or" across two keys, and a
  negated range give no filter and a note (:class:`RuleReading`).

The words are in :mod:`~llama_index_ext_recursive.auto.lexicon`, the year
expressions in :mod:`~llama_index_ext_recursive.auto.years`, the reading of
declared types in :mod:`~llama_index_ext_recursive.schema`. This module is
long because what remains is one matcher: its passes (counts, explicit
``key op value``, numbers, years, value words, facet-or-topic, negation,
disjunction, the leftover query text) claim spans of the same token list in
priority order, and each pass decides by what the others claimed.
"""

from __future__ import annotations

import logging
import re
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import (
    Any,
    Literal,
)

import jieba
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataInfo,
    VectorStoreInfo,
    VectorStoreQuerySpec,
)

from llama_index_ext_recursive.auto.lexicon import (
    ASPECT_ZH,
    BUILTIN_SYNONYMS,
    CLAUSE_BREAK,
    COMPARISON_BEFORE,
    COPULAS_EN,
    DETERMINERS_EN,
    DISJUNCTION,
    DOC_NOUNS_EN,
    DOC_NOUNS_ZH,
    FILLER_EN,
    FILLER_ZH,
    KEY_WORDS_ZH,
    KIND_WORDS_EN,
    KIND_WORDS_ZH,
    LIST_JOINER,
    NEGATED_OPERATOR,
    NEGATION_EN,
    NEGATION_TOKENS_EN,
    NEGATION_TOKENS_ZH,
    NEGATION_ZH,
    NEGATION_ZH_AFTER,
    NOUN_MODIFIERS_EN,
    NUM_WORD_RE,
    QUESTION_EN,
    QUESTION_ZH,
    ZH_CLASSIFIERS,
    ZH_FACET_NEXT,
    ZH_GLUE,
    ZH_NUM_RE,
    parse_count,
    plural_forms,
)
from llama_index_ext_recursive.auto.meaning import PhraseMatcher
from llama_index_ext_recursive.auto.numbers import (
    NUMBER_TEXT,
    NumericReader,
    in_range,
    key_words,
    parse_number,
    range_note,
)
from llama_index_ext_recursive.auto.spans import Spans, TokenIndex
from llama_index_ext_recursive.auto.terms import (
    chinese_word_class,
    code_names,
    description_synonyms,
    english_glosses,
    is_common_word,
    name_parts,
    pinyin_of,
    pinyin_values,
    stem_of,
)
from llama_index_ext_recursive.auto.years import year_rules
from llama_index_ext_recursive.models import bundled_embed_model
from llama_index_ext_recursive.schema import FieldType, holds_years
from llama_index_ext_recursive.text import CJK_CLASS, HAN_CLASS

jieba.setLogLevel(logging.WARNING)
logger = logging.getLogger(__name__)

__all__ = [
    "BUILTIN_SYNONYMS",
    "Match",
    "RuleBasedSpecGenerator",
    "RuleReading",
]


# Han runs are segmented by jieba; a term with any CJK character is matched
# without word boundaries (CJK text has no spaces between words).
_TOKEN_RE = re.compile(rf"[A-Za-z0-9]+(?:['’.][A-Za-z0-9]+)*|[{HAN_CLASS}]+|\S")
_HAN = re.compile(f"[{HAN_CLASS}]")
_HAS_CJK = re.compile(f"[{CJK_CLASS}]")


@dataclass(frozen=True)
class Match:
    """One phrase of the query that became part of the spec.

    ``key``/``operator``/``value`` give the filter it produced (``key`` is
    ``None`` and ``value`` the count for a ``top_k`` phrase). A range produces
    two matches over the same span. ``rule`` names the rule that fired.
    """

    start: int
    end: int
    text: str
    rule: str
    key: str | None
    operator: FilterOperator | None
    value: Any


@dataclass(frozen=True)
class _Token:
    start: int
    end: int
    text: str

    @property
    def lower(self) -> str:
        return self.text.lower()

    @property
    def cjk(self) -> bool:
        return bool(_HAS_CJK.match(self.text))

    @property
    def word(self) -> bool:
        return self.text[0].isalnum() or self.cjk


@dataclass(frozen=True)
class _Term:
    key: str
    value: Any
    rule: str  # "value", "user-synonym", "description", "name-part", "pinyin", "synonym" (built-in), "stem", "gloss" or "meaning"


# "key op value": symbols, the comparison words of the numeric rules, and a few for equality
_EXPLICIT_WORDS = {
    **COMPARISON_BEFORE,
    "not": FilterOperator.NE,
    "equal to": FilterOperator.EQ,
    "等于": FilterOperator.EQ,
    "为": FilterOperator.EQ,
}
_EXPLICIT_OPERATORS = {
    ">=": FilterOperator.GTE,
    "<=": FilterOperator.LTE,
    "!=": FilterOperator.NE,
    "==": FilterOperator.EQ,
    "=": FilterOperator.EQ,
    ":": FilterOperator.EQ,
    ">": FilterOperator.GT,
    "<": FilterOperator.LT,
    **_EXPLICIT_WORDS,
}

# a word and a list joiner right before a value: "lung or" of "lung or breast cancer"
_ELIDED_BEFORE = re.compile(r"(?<![A-Za-z0-9])([A-Za-z][A-Za-z'\-]*)\s*(?:,\s*(?:and|or)?|\bor\b|\band\b|/)\s*$", re.I)
# a number written in Roman numerals after a word: "phase III", "stage iv"
_ROMAN = {"i": 1, "ii": 2, "iii": 3, "iv": 4, "v": 5, "vi": 6, "vii": 7, "viii": 8, "ix": 9, "x": 10}
# phrases of one query read by meaning, at most (in query order): what keeps a long query interactive
MAX_MEANING_PHRASES = 16
# a query noun this near in meaning to a plural noun that opens content_info names the documents too:
# "studies" ~ trials 0.54, "rulings" ~ decisions 0.53, "songs" ~ albums 0.68; "research" ~ papers 0.39
KIND_SIMILARITY = 0.5
MAX_KIND_MEMO = 10_000  # words remembered per generator as naming the documents or not
_CONTENT_HEAD_END = re.compile(
    r"\b(?:from|with|on|in|at|for|by|each|that|which|where|including|about)\b|[:;.(]", re.IGNORECASE
)
# a Chinese numeral and the noun it numbers: 三期 (phase 3), 第二季 (season 2)
_NUMBERED_ZH = re.compile(rf"第?(?P<n>{ZH_NUM_RE}|\d{{1,3}})(?P<noun>[{HAN_CLASS}]{{1,2}})")
_APOSTROPHE = re.compile(r"['’]")
# British to American spelling, in that order: behaviour, paediatric, oesophagus, organise, analyse, centre, catalogue
_AMERICAN = [
    (re.compile(r"(?<=[a-z]{2})our(?=[a-z]*$)"), "or"),
    (re.compile(r"ae(?=[a-z]{3})"), "e"),
    (re.compile(r"(?<=[a-z])oe(?=[a-z]{3})"), "e"),
    (re.compile(r"(?<=[a-z]{3})is(e|ed|es|ing|ation|ations)$"), r"iz\1"),
    (re.compile(r"(?<=[a-z]{3})ys(e|ed|es|ing)$"), r"yz\1"),
    (re.compile(r"(?<=[a-z]{3})tre(s?)$"), r"ter\1"),
    (re.compile(r"(?<=[a-z]{3})ogue(s?)$"), r"og\1"),
]
# adjectives made of a noun: asthma-tic, cancer-ous, tumor-al; of a country: india-n, canad-ian, japan-ese, chin-ese
_DERIVED_SUFFIXES = (
    ("tic", ""),
    ("ic", ""),
    ("ous", ""),
    ("al", ""),
    ("n", ""),
    ("ian", "a"),
    ("ese", ""),
    ("ese", "a"),
)
# words that join two values of one key in a list: "or", "and", 和, 、
_LIST_JOINER = re.compile(rf"(?:{DISJUNCTION.pattern})|and|和|与|及|、|,|，", re.IGNORECASE)
# "the case", "each track": the noun a key description says its value belongs to
_DESCRIBED = re.compile(r"\b(?:the|a|an|each|this)\s+([a-z]{3,})")
# "Area of law ...", "Level of the court ...": what a key's values are kinds of
_DESCRIPTION_HEAD = re.compile(r"\s*[A-Za-z]+(?:\s+[A-Za-z]+)?\s+of\s+(?:the\s+|a\s+)?([A-Za-z]{3,})\b")
# nouns descriptions use for the value itself, not for the documents
_ATTRIBUTE_NOUNS = frozenset(
    {"number", "type", "kind", "name", "date", "year", "amount", "level", "count", "value", "total", "list", "main"}
)
_POSSESSIVES = frozenset({"their", "our", "its", "his", "her", "my", "your"})
# particles jieba may glue to the next word: or, and, with, not
_GLUED_PARTICLES = frozenset("或和与及跟非")
# readings the query's words do not spell: they need a cue where the value is a common word, always by meaning
_INFERRED_RULES = frozenset({"stem", "gloss", "meaning"})
# words before a value read by meaning that make it an attribute wanted ("hotels with a gym", 有无线网)
ATTRIBUTE_CUES = frozenset({"with", "without", "has", "have", "having", "有", "带", "带有", "含", "没有", "无"})
# rules whose phrases the caller or the data gave: a rare one is a value wherever it stands
_SPECIFIC_RULES = {"value", "user-synonym", "description", "name-part", "pinyin", "initials"}


@dataclass
class RuleReading:
    """What the rules read from one query: the spec, the phrases behind it, and their doubts.

    ``notes`` says, in words, what the rules left out because they were not
    sure ("not spicy thai": is "thai" negated?), so an explanation can show it.
    """

    spec: VectorStoreQuerySpec
    matches: list[Match]
    notes: list[str]


@dataclass(frozen=True)
class _Candidate:
    start: int
    end: int
    term: _Term
    cued: bool = False  # the word names the kind of document too (古典音乐: "classical music")
    common: bool = False  # read from a common Chinese word (手机 "mobile phone"): needs a cue


def _is_plural(word: str) -> bool:
    """An English plural noun by its shape: ends in "s" and stems shorter ("trials", not "news")."""
    return len(word) >= 4 and word.endswith("s") and stem_of(word) != word


def _content_kinds(content_info: str) -> list[str]:
    """The plural nouns that open ``content_info``: what the documents are.

    "Registered clinical trials, each with a brief summary ..." -> ``["trials"]``;
    "Research papers, technical reports, theses and surveys in ..." -> papers,
    reports, theses, surveys. What follows a preposition or "each" describes them.
    """
    head = _CONTENT_HEAD_END.split(content_info, maxsplit=1)[0]
    return list(dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]{4,}", head) if _is_plural(w.lower())))


def _stems_of(phrase: str) -> str:
    """A phrase's words by their stems, for matching inflected phrases ("path traversals")."""
    return " ".join(stem_of(w) for w in phrase.split())


def _spellings(word: str) -> list[str]:
    """A word, its American spelling ("behavioural" -> "behavioral", "paediatric" ->
    "pediatric") and the noun a derived adjective is made of ("asthmatic" -> "asthma",
    "cancerous" -> "cancer", "Canadian" -> "canada"), for looking values up by stem."""
    forms = [word]
    american = word
    for pattern, replacement in _AMERICAN:
        american = pattern.sub(replacement, american)
    if american != word:
        forms.append(american)
    for suffix, ending in _DERIVED_SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            forms.append(word[: -len(suffix)] + ending)
    return forms


def _is_verb(tok: _Token) -> bool:
    """A word that is a verb, not a noun a value before it could modify: jieba's tag "v" (进行)
    or an English past participle ("decided", "filed"; not "need" or "bed")."""
    if tok.cjk:
        return chinese_word_class(tok.text) == "v"
    word = tok.lower
    return len(word) >= 6 and word.endswith("ed") and (is_common_word(word[:-1]) or is_common_word(word[:-2]))


def _particle_split(word: str) -> tuple[str, ...]:
    """A jieba word that is a joining particle glued to a word the dictionary has, as the two.

    jieba joins "或" to the word after it in "电子或嘻哈" ("或嘻哈"), which hides
    both the "or" and the value; a word CC-CEDICT has whole stays one.
    """
    if len(word) >= 3 and word[0] in _GLUED_PARTICLES and english_glosses(word[1:]) and not english_glosses(word):
        return word[0], word[1:]
    return (word,)


def _is_cjk_term(term: str) -> bool:
    return bool(_HAS_CJK.search(term))


def _norm(phrase: str) -> str:
    """Lower case, runs of spaces and hyphens as one space: the lookup form of a phrase."""
    return " ".join(re.split(r"[\s\-]+", phrase.lower().strip()))


#: Characters of a query the rules read for filters and top_k (the rest is searched as text).
MAX_RULE_CHARS = 10_000
# How far before a value a negation is looked for ("except anything published by the" is 33).
_NEGATION_REACH = 100
# How long the text joining two listed values can be ("blogs, and manuals", "美国、法国").
_JOINER_REACH = 24
# How many noun modifiers after a value are skipped to the noun they modify ("French new wave").
_MODIFIER_REACH = 3
# "除了泰国菜以外": the 以外 after the value belongs to the 除了 before it
_EXCEPT_BEFORE = re.compile(r"(?:除了|除)\s*$")


def _joined(text: str, start: int, end: int) -> bool:
    """Only a list joiner (a comma, "and", "or", 、, 和 ...) between two positions."""
    return end - start <= _JOINER_REACH and LIST_JOINER.match(text[start:end]) is not None


class _Cues:
    """The negation words of a query ("not", "不是") no rule has claimed, for a note.

    "not spicy thai food": a negation earlier in the clause than the word
    before a value leaves the value unsure. Claimed spans stay claimed, so a
    cue found claimed is dropped for good and each is looked at once.

    Args:
        tokens: the query's tokens.
    """

    def __init__(self, tokens: Sequence[_Token]) -> None:
        self._cues = [t for t in tokens if t.lower in NEGATION_TOKENS_EN or t.text in NEGATION_TOKENS_ZH]
        self._starts = [t.start for t in self._cues]

    def first_free(self, begin: int, end: int, taken: Spans) -> _Token | None:
        """The first unclaimed negation wholly inside ``[begin, end)``."""
        i = bisect_left(self._starts, begin)
        while i < len(self._cues) and self._cues[i].end <= end:
            cue = self._cues[i]
            if not taken.overlaps(cue.start, cue.end):
                return cue
            del self._cues[i], self._starts[i]
        return None


class RuleBasedSpecGenerator:
    """Turns a query into a ``VectorStoreQuerySpec`` by rules: no LLM, deterministic.

    Drop-in for the spec step of upstream's ``VectorIndexAutoRetriever``; reads
    English and Chinese. See the module docstring for the conventions.
    Every spec goes through :meth:`read` (``generate`` and
    ``generate_with_matches`` call it), so a subclass overrides ``read``.

    Args:
        vector_store_info: the filterable keys and their types (``str``,
            ``int``, ``float``, ``list[str]``); only these keys are filtered on.
            The year key is the numeric key whose name or description mentions
            years (else whose values all look like years).
        vocabulary: values present per key (e.g. ``metadata_vocabulary(nodes)``
            from :mod:`llama_index_ext_recursive.auto.spec`);
            string values are matched in the query, numeric ones bound which
            years count as plausible filters.
        today: reference date for "this year", "last three years", "去年" ...;
            ``None`` means the current date at each call.
        synonyms: extra phrases per key, ``{key: {phrase: value}}``, e.g.
            ``{"source": {"wiki": "encyclopedia"}}``; they take precedence over
            the built-in ones (:data:`BUILTIN_SYNONYMS`).
        meaning_model: the embedding model that reads a phrase no term, stem or
            gloss names as the value it means (:mod:`.meaning`): ``None`` (default)
            the bundled all-MiniLM-L6-v2 when it is installed, ``False`` none.
            Not the index's model: a few short phrases per query, so a local model.

    Raises:
        ValueError: ``synonyms`` name a key missing from ``vector_store_info``.
    """

    def __init__(
        self,
        vector_store_info: VectorStoreInfo,
        vocabulary: dict[str, set[Any]],
        today: date | None = None,
        synonyms: dict[str, dict[str, Any]] | None = None,
        meaning_model: BaseEmbedding | Literal[False] | None = None,
    ) -> None:
        self._info = vector_store_info
        self._types = {m.name: FieldType.of(m) for m in vector_store_info.metadata_info}
        self._vocabulary = {k: set(v) for k, v in vocabulary.items() if k in self._types}
        for key in vocabulary:
            if key not in self._types:
                logger.debug("vocabulary key %r is not in vector_store_info; ignored", key)
        self._today = today
        unknown = sorted(set(synonyms or {}) - set(self._types))
        if unknown:
            raise ValueError(f"synonyms for unknown keys {unknown}; vector_store_info has {sorted(self._types)}")
        self._year_key = self._find_year_key()
        self._key_words = {w for key in self._types for w in key_words(key)}
        self._described = self._described_nouns()
        self._doc_en, self._doc_zh = self._document_nouns()
        # "Area of law the case concerns": a value before "law" is an area ("family law")
        self._key_nouns = {
            head.group(1).lower()
            for meta in vector_store_info.metadata_info
            if not self._is_numeric(meta.name) and (head := _DESCRIPTION_HEAD.match(meta.description or ""))
        }
        self._terms: dict[str, list[_Term]] = {}
        self._ambiguous: dict[str, list[str]] = {}
        self._build_terms(synonyms or {})
        numeric = [m for m in vector_store_info.metadata_info if self._is_numeric(m.name) and m.name != self._year_key]
        self._numbers = NumericReader(numeric, {m.name for m in numeric if self._types[m.name].base == "int"})
        self._term_res = self._compile_terms()
        self._ambiguous_re = (
            re.compile(
                "|".join(
                    rf"(?<![A-Za-z0-9]){re.escape(p)}(?![A-Za-z0-9])"
                    for p in sorted(self._ambiguous, key=len, reverse=True)
                ),
                re.IGNORECASE,
            )
            if self._ambiguous
            else None
        )
        self._explicit_res = self._compile_explicit()
        model = self._meaning_model(meaning_model)
        self._meaning = self._phrase_matcher(model)
        kinds = _content_kinds(self._info.content_info or "")
        kinds += [plural for noun in self._described for plural in sorted(plural_forms(noun)) if plural != noun]
        self._kinds = PhraseMatcher(model, {k: k for k in kinds}) if model is not None and kinds else None
        self._kind_memo: dict[str, bool] = {}  # word -> names the documents by meaning (KIND_SIMILARITY)
        # the longest stored string per key: how far "chef: Kenji Sato" can reach
        self._longest = {
            key: max((len(v) for v in values if isinstance(v, str)), default=0)
            for key, values in self._vocabulary.items()
        }

    # ---------------------------------------------------------------- setup

    @property
    def year_key(self) -> str | None:
        """The key that year expressions filter on (``None`` if there is none)."""
        return self._year_key

    def _is_numeric(self, key: str) -> bool:
        return key in self._types and self._types[key].is_numeric

    def _is_list(self, key: str) -> bool:
        return key in self._types and self._types[key].is_list

    def _find_year_key(self) -> str | None:
        """The key that holds calendar years: named so, and not holding small numbers.

        "Years of experience required" names years too; its values (0-20) say
        it is a count, so a key whose values are calendar years comes first.
        """
        numeric = [m for m in self._info.metadata_info if self._is_numeric(m.name)]

        def calendar(meta: MetadataInfo) -> bool | None:
            values = self._vocabulary.get(meta.name) or set()
            if not values:
                return None
            return all(isinstance(v, int) and not isinstance(v, bool) and 1000 <= v <= 2999 for v in values)

        named = [m for m in numeric if holds_years(m)]
        for wanted in (True, None):
            for meta in named:
                if calendar(meta) is wanted:
                    return meta.name
        for meta in numeric:
            if calendar(meta):
                return meta.name
        return None

    def _document_nouns(self) -> tuple[set[str], set[str]]:
        """Words that make a value next to them a facet: kinds of document, key names, content words.

        "thai 菜谱", "main courses", "French films": besides the built-in kinds
        of document, the key names ("courses" for ``course``, with their
        Chinese forms), the words of ``content_info`` ("Recipes from a
        cooking site") and the noun the key descriptions give the values to
        ("the case") name what the documents are.
        """
        english = set(DOC_NOUNS_EN) | KIND_WORDS_EN
        chinese = set(DOC_NOUNS_ZH) | KIND_WORDS_ZH
        words = sorted(self._key_words)
        content = self._info.content_info or ""
        words += [w.lower() for w in re.findall(r"[A-Za-z]{4,}", content) if w.lower() not in FILLER_EN]
        words += self._described
        for word in words:
            if word and not self._is_numeric(word):
                english |= plural_forms(word)
                chinese.update(KEY_WORDS_ZH.get(word, ()))
        for run in re.findall(f"[{HAN_CLASS}]+", content):
            chinese.update(w for w in jieba.lcut(run) if len(w) >= 2 and w not in FILLER_ZH)
        return english, chinese

    def _described_nouns(self) -> list[str]:
        """The noun the key descriptions say the values belong to: "Area of law the case concerns",
        "Result of the case or appeal" -> ``case``, when two descriptions or more name it."""
        counts: dict[str, int] = {}
        for meta in self._info.metadata_info:
            for word in set(_DESCRIBED.findall((meta.description or "").lower())):
                if word not in FILLER_EN and word not in _ATTRIBUTE_NOUNS:
                    counts[word] = counts.get(word, 0) + 1
        return [word for word, n in counts.items() if n >= 2]

    def _add_term(self, phrase: str, term: _Term) -> None:
        phrase = _norm(phrase)
        forms = {phrase} if _is_cjk_term(phrase) else plural_forms(phrase)
        for form in forms:
            bucket = self._terms.setdefault(form, [])
            if any(t.key == term.key for t in bucket):
                continue  # first definition per key wins (user, then vocabulary, then built-in)
            bucket.append(term)

    def _build_terms(self, synonyms: dict[str, dict[str, Any]]) -> None:
        for key, phrases in synonyms.items():
            for phrase, value in phrases.items():
                if self._vocabulary.get(key) and value not in self._vocabulary[key]:
                    logger.warning("synonym %r -> %s=%r: value not in the vocabulary", phrase, key, value)
                self._add_term(phrase, _Term(key, value, "user-synonym"))
        lowered: dict[str, dict[str, Any]] = {}
        for key, values in self._vocabulary.items():
            if self._is_numeric(key):
                continue
            for value in values:
                if not isinstance(value, str):
                    continue
                lowered.setdefault(key, {})[value.lower()] = value
                # raw codes like "en" are too ambiguous as words: only "language=en"
                if len(value) >= 3 or _is_cjk_term(value):
                    self._add_term(value, _Term(key, value, "value"))
        for meta in self._info.metadata_info:
            strings = [v for v in self._vocabulary.get(meta.name, ()) if isinstance(v, str)]
            for phrase, value in description_synonyms(meta.description or "", strings).items():
                self._add_term(phrase, _Term(meta.name, value, "description"))
        for key, values in self._vocabulary.items():
            for phrase, value in {**name_parts(values), **code_names(values)}.items():
                if _norm(phrase) not in self._terms:  # a word of a name never hides a value
                    self._add_term(phrase, _Term(key, value, "name-part"))
        self._pinyin: dict[str, list[_Term]] = {}
        for key, values in self._vocabulary.items():
            for letters, value in pinyin_values(values).items():
                self._pinyin.setdefault(letters, []).append(_Term(key, value, "pinyin"))
        for phrase, candidates in BUILTIN_SYNONYMS.items():
            for key, by_lower in lowered.items():
                hit = next((by_lower[c] for c in candidates if c in by_lower), None)
                if hit is not None:
                    self._add_term(phrase, _Term(key, hit, "synonym"))
        # a value of two words or more by its initials, written in capitals: "IP", "US", "UK"; a
        # value stored as two capitals ("EY") when the query writes it so
        by_initials: dict[str, set[tuple[str, Any]]] = {}
        for key, values in self._vocabulary.items():
            for value in values:
                parts = re.findall(r"[A-Za-z]+", value) if isinstance(value, str) else []
                if len(parts) >= 2:
                    by_initials.setdefault("".join(p[0] for p in parts).lower(), set()).add((key, value))
                elif isinstance(value, str) and len(value) == 2 and value.isalpha() and value.isupper():
                    by_initials.setdefault(value.lower(), set()).add((key, value))
        self._initials = {
            letters: _Term(*next(iter(found)), "initials")
            for letters, found in by_initials.items()
            if len(found) == 1 and letters not in self._terms
        }
        # a one-word value by its first letters, as people clip it: "tech", "pharma", "telecom"
        clipped: dict[str, set[_Term]] = {}
        for phrase, bucket in self._terms.items():
            if len(bucket) == 1 and bucket[0].rule == "value" and phrase.isalpha() and len(phrase) >= 7:
                for end in range(4, len(phrase) - 2):
                    clipped.setdefault(phrase[:end], set()).add(_Term(bucket[0].key, bucket[0].value, "stem"))
        self._clippings = {p: next(iter(t)) for p, t in clipped.items() if len(t) == 1 and p not in self._terms}
        self._phrase_stems: dict[str, list[_Term]] = {}  # Latin phrases of several words by their stems
        for phrase, bucket in self._terms.items():
            if " " in phrase and not _is_cjk_term(phrase):
                self._phrase_stems.setdefault(_stems_of(phrase), []).extend(bucket)
        self._stems: dict[str, list[tuple[str, _Term]]] = {}  # one-word Latin phrases by stem: _terms_of
        for phrase, bucket in self._terms.items():
            word = _APOSTROPHE.sub("", phrase)  # "alzheimer's" stems as "alzheimers" does
            if " " not in word and not _is_cjk_term(word) and word.isalpha():
                self._stems.setdefault(stem_of(word), []).extend((word, t) for t in bucket)
        for phrase, bucket in list(self._terms.items()):
            if len(bucket) > 1 and len({t.rule for t in bucket}) == 1:
                logger.debug("phrase %r names values of several keys %s; ignored", phrase, [t.key for t in bucket])
                self._ambiguous[phrase] = sorted(t.key for t in bucket)
                del self._terms[phrase]

    @staticmethod
    def _meaning_model(model: BaseEmbedding | Literal[False] | None) -> BaseEmbedding | None:
        """The model that reads by meaning: the caller's, the bundled one (``None``) or none."""
        if model is False:
            return None
        if model is None:
            try:
                return bundled_embed_model()
            except ImportError:
                logger.info("no bundled embedding model: values are not matched by meaning")
                return None
            except RuntimeError as exc:  # its graph could not be exported (minilm._check_graph)
                logger.warning("values are not matched by meaning: %s", exc)
                return None
        return model

    def _phrase_matcher(self, model: BaseEmbedding | None) -> PhraseMatcher | None:
        """The schema's Latin phrases (values, descriptions, synonyms) for :mod:`.meaning`."""
        if model is None:
            return None
        phrases = {
            phrase: (bucket[0].key, bucket[0].value)
            for phrase, bucket in self._terms.items()
            if len(bucket) == 1 and not _is_cjk_term(phrase) and bucket[0].rule not in {"name-part", "pinyin"}
        }
        return PhraseMatcher(model, phrases) if phrases else None

    def _compile_terms(self) -> tuple[re.Pattern | None, list[int]]:
        """The Latin-script terms as one regex; the lengths of the CJK terms, longest first."""
        latin = sorted((t for t in self._terms if not _is_cjk_term(t)), key=len, reverse=True)
        latin_re = None
        if latin:
            body = "|".join(r"[\s-]+".join(map(re.escape, t.split())) for t in latin)
            latin_re = re.compile(rf"(?<![A-Za-z0-9])(?:{body})(?![A-Za-z0-9])", re.IGNORECASE)
        cjk_lengths = sorted({len(t) for t in self._terms if _is_cjk_term(t)}, reverse=True)
        return latin_re, cjk_lengths

    def _compile_explicit(self) -> list[tuple[str, re.Pattern]]:
        """``key=value``, ``key: value``, ``key >= 3``, ``key at least 3`` for every key."""
        out = []
        for key in self._types:
            names = {key, key.replace("_", " ")}
            if key == self._year_key:
                names |= {"年份", "发布年份", "出版年份", "年度"}
            name = "|".join(r"[\s_-]+".join(map(re.escape, n.split())) for n in sorted(names, key=len, reverse=True))
            words = "|".join(
                r"\s+".join(map(re.escape, w.split())) for w in sorted(_EXPLICIT_WORDS, key=len, reverse=True)
            )
            out.append(
                (
                    key,
                    re.compile(
                        rf"(?<![A-Za-z0-9])(?:{name})s?\s*(?:(?P<sym>>=|<=|!=|==|=|>|<|:)|(?:is\s+)?(?P<word>{words}))"
                        rf"\s*(?P<val>\"[^\"]*\"|'[^']*'|{NUMBER_TEXT}(?![0-9A-Za-z])|[^\s,;，；。?？]+)",
                        re.IGNORECASE,
                    ),
                )
            )
        return out

    # ---------------------------------------------------------------- public

    def generate(self, query: str) -> VectorStoreQuerySpec:
        """The spec for ``query``: remaining query text, filters and top_k.

        Args:
            query: the user's question or search, English and/or Chinese.
        """
        return self.generate_with_matches(query)[0]

    async def agenerate(self, query: str) -> VectorStoreQuerySpec:
        """Same result as :meth:`generate` (pure CPU and fast, nothing to await).

        Args:
            query: the user's question or search, English and/or Chinese.
        """
        return self.generate(query)

    def generate_with_matches(self, query: str) -> tuple[VectorStoreQuerySpec, list[Match]]:
        """The spec and the phrases that produced it, to explain or debug a spec.

        Args:
            query: the user's question or search, English and/or Chinese.
        """
        reading = self.read(query)
        return reading.spec, reading.matches

    def read(self, query: str) -> RuleReading:
        """The spec, the phrases that produced it, and notes on what the rules were unsure of.

        Args:
            query: the user's question or search, English and/or Chinese.
        """
        today = self._today or date.today()
        notes: list[str] = []
        query, unread = self._bounded(query, notes)
        tokens = TokenIndex(self._tokenize(query))
        self._learn_kinds(tokens.tokens)
        candidates = self._term_candidates(query, tokens, notes)
        # what a facet's neighbours are read against: a reading that still needs a cue is no value yet
        values = Spans((c.start, c.end) for c in candidates if not self._needs_cue(c))
        matches: list[Match] = []
        taken = Spans()
        ends: dict[int, list[Match]] = {}  # matches by where they end, for "studio apartments"

        def accept(found: Sequence[Match]) -> None:
            matches.extend(found)
            for m in found:
                taken.add(m.start, m.end)
                ends.setdefault(m.end, []).append(m)

        found: Match | None
        for found in self._find_top_k(query, tokens, values):
            if not taken.overlaps(found.start, found.end):
                accept([found])
                break  # one count per query: the first
        for found in self._find_explicit(query, notes):
            if not taken.overlaps(found.start, found.end):
                accept([found])
        comparisons, number_notes = self._numbers.find(query)
        notes += number_notes
        spans: dict[tuple[int, int], list[Match]] = {}
        for c in comparisons:  # a range is two comparisons over one span
            spans.setdefault((c.start, c.end), []).append(
                Match(c.start, c.end, c.text, c.rule, c.key, c.operator, c.value)
            )
        for (start, end), group in spans.items():
            if not taken.overlaps(start, end):
                accept(group)
        clauses = self._clause_starts(query)
        if self._year_key is not None:
            for group in self._find_years(query, today):
                if not taken.overlaps(group[0].start, group[0].end):
                    span = (group[0].start, group[0].end)
                    group = self._negate_years(query, group, clauses, notes)
                    taken.add(*span)  # read, even when a negated range gives no filter
                    if group:
                        accept(group)
        cues = _Cues(tokens.tokens)
        read_otherwise = Spans((c.start, c.end) for c in candidates if c.term.rule not in _INFERRED_RULES)
        sure = [c for c in candidates if not self._needs_cue(c)]
        # a reading with its cue is a value its neighbours are read against too ("英文摇滚")
        cued = {
            id(c)
            for c in candidates
            if self._needs_cue(c)
            and not taken.overlaps(c.start, c.end)
            and self._meaning_cue(tokens, c, read_otherwise, sure, taken)
        }
        for cand in candidates:
            if id(cand) in cued:
                values.add(cand.start, cand.end)
        for cand in candidates:
            if taken.overlaps(cand.start, cand.end):
                continue
            if self._needs_cue(cand):  # a reading a topic could give too ("运动员的饮食")
                if id(cand) not in cued:
                    notes.append(
                        f"{query[cand.start : cand.end]!r} may mean {cand.term.key}={cand.term.value!r}, but "
                        "nothing around it says it is a kind of document wanted; no filter"
                    )
                    continue
            elif not self._is_facet(query, tokens, cand, values, taken) and not self._listed_with(tokens, cand, sure):
                logger.debug("%r read as topic, not a %s filter", query[cand.start : cand.end], cand.term.key)
                continue
            found = self._value_match(query, tokens, cand, ends, taken, clauses, cues, notes)
            head_of = self._head_of(query, found, cand, ends) if found is not None else None
            if found is not None and head_of is not None:  # "studio apartments": the first value says which kind
                logger.debug("%r after %r of the same key: the noun they share, no filter", found.text, head_of.text)
                taken.add(cand.start, cand.end)
                continue
            if found is not None:
                accept([found])
        matches = self._negated_lists(query, matches)
        matches = self._without_mixed_disjunctions(query, tokens, matches, notes)
        for m in self._ambiguous_re.finditer(query) if self._ambiguous_re is not None else ():
            keys = self._ambiguous[_norm(m.group())]
            notes.append(f"{m.group()!r} names values of several keys ({', '.join(keys)}); no filter from it")
        matches.sort(key=lambda m: (m.start, m.end))
        spec = VectorStoreQuerySpec(
            query=self._remaining(query, tokens, taken) + unread,
            filters=self._filters(matches),
            top_k=next((m.value for m in matches if m.key is None), None),
        )
        for note in notes:
            logger.info("rule-based spec for %r: %s", query[:200], note)
        logger.debug("spec for %r: %s", query[:200], spec)
        return RuleReading(spec, matches, notes)

    @staticmethod
    def _bounded(query: str, notes: list[str]) -> tuple[str, str]:
        """(the part the rules read, the rest): at most :data:`MAX_RULE_CHARS` characters are read.

        Reading is linear in the query's length (claimed spans and neighbouring
        tokens are found by bisection, negations in a window before each value),
        but at up to 36 microseconds a character (Chinese, with jieba) a crafted
        100 kB query would still take seconds. A question is a
        few hundred characters; a pasted page of 10,000 is read whole. The rest
        is kept in the spec's query text, searched but not read for filters.
        """
        if len(query) <= MAX_RULE_CHARS:
            return query, ""
        cut = MAX_RULE_CHARS
        space = query.rfind(" ", MAX_RULE_CHARS - 200, MAX_RULE_CHARS)
        if space > 0:
            cut = space  # not inside a word or number
        notes.append(
            f"the query has {len(query)} characters; filters and top_k are read from its first {cut} "
            "only, and the rest is searched as text"
        )
        return query[:cut], query[cut:]

    # ---------------------------------------------------------------- negation

    @staticmethod
    def _clause_starts(text: str) -> list[int]:
        """Where each clause of ``text`` begins (after a comma, "but", 但是 ...), in order."""
        return [0] + [m.end() for m in CLAUSE_BREAK.finditer(text)]

    @staticmethod
    def _clause_start(clauses: list[int], start: int) -> int:
        """Where the clause holding ``start`` begins (one of :meth:`_clause_starts`)."""
        return clauses[bisect_right(clauses, start) - 1]

    @staticmethod
    def _negation_before(text: str, begin: int, end: int) -> re.Match | None:
        """The negation ending right before ``end`` (over function words), not before ``begin``.

        Only the last :data:`_NEGATION_REACH` characters are searched: a
        negation is a few words, and searching the whole clause for every
        value made a long clause cost the square of its length.
        """
        lo = max(begin, end - _NEGATION_REACH)
        return NEGATION_EN.search(text, lo, end) or NEGATION_ZH.search(text, lo, end)

    def _value_match(
        self,
        text: str,
        tokens: TokenIndex,
        cand: _Candidate,
        ends: dict[int, list[Match]],
        taken: Spans,
        clauses: list[int],
        cues: _Cues,
        notes: list[str],
    ) -> Match | None:
        """The filter a facet value gives: ``==``, ``!=`` when negated, none when unsure."""
        term = cand.term
        begin = self._clause_start(clauses, cand.start)
        direct = self._direct_negation(text, tokens, begin, cand.start)
        if direct is not None and not taken.overlaps(direct.start(), cand.start):
            start = direct.start()
            return Match(
                start, cand.end, text[start : cand.end], f"not-{term.rule}", term.key, FilterOperator.NE, term.value
            )
        if NEGATION_ZH_AFTER.match(text[cand.end : cand.end + _JOINER_REACH]) and not _EXCEPT_BEFORE.search(
            text, max(begin, cand.start - _JOINER_REACH), cand.start
        ):
            return Match(
                cand.start,
                cand.end,
                text[cand.start : cand.end],
                f"not-{term.rule}",
                term.key,
                FilterOperator.NE,
                term.value,
            )  # "泰国菜以外的", "甜点除外"
        previous = self._joined_before(text, cand.start, ends)
        if previous is not None and previous.key == term.key and previous.operator == FilterOperator.NE:
            return Match(
                cand.start,
                cand.end,
                text[cand.start : cand.end],
                f"not-{term.rule}",
                term.key,
                FilterOperator.NE,
                term.value,
            )  # "except blogs and manuals"
        cue = cues.first_free(begin, cand.start, taken)
        if cue is not None:
            notes.append(
                f"{text[cand.start : cand.end]!r} follows {cue.text!r} in the same clause, but "
                f"words between them leave unclear whether it is negated; no {term.key} filter"
            )
            return None
        return Match(
            cand.start, cand.end, text[cand.start : cand.end], term.rule, term.key, FilterOperator.EQ, term.value
        )

    @staticmethod
    def _joined_before(text: str, start: int, ends: dict[int, list[Match]]) -> Match | None:
        """The filter match nearest before ``start`` with only a list joiner between ("blogs and")."""
        for end in range(start, max(start - _JOINER_REACH, 0) - 1, -1):
            found = [m for m in ends.get(end, ()) if m.key is not None]
            if found:
                return found[-1] if _joined(text, end, start) else None
        return None

    @staticmethod
    def _head_of(text: str, found: Match, cand: _Candidate, ends: dict[int, list[Match]]) -> Match | None:
        """A match of the same key and operator right before ``cand`` (only spaces or hyphens between)."""
        pos = cand.start
        while pos > 0 and text[pos - 1] in " -":
            pos -= 1
        for end in range(pos, cand.start + 1):
            for m in ends.get(end, ()):
                if m.key == found.key and m.operator == found.operator:
                    return m
        return None

    def _direct_negation(self, text: str, tokens: TokenIndex, begin: int, start: int) -> re.Match | None:
        """The negation that ends right before ``start``, over function words and document nouns.

        "not italian", "non-thai", "除了泰国菜", "excluding anything by Rossi",
        "except recipes by Rossi": the words between the negation and the value
        may only be ones that name nothing ("anything", "by", "recipes").
        """
        cut = start
        last = tokens.ending_by(start)
        first = max(tokens.starting_from(begin), last - 5)
        for tok in reversed(tokens.tokens[first:last]):
            direct = self._negation_before(text, begin, cut)
            if direct is not None:
                return direct
            if tok.text in NEGATION_TOKENS_ZH or tok.lower in NEGATION_TOKENS_EN:
                return None
            if self._role(tok) not in {"filler", "doc"} and tok.text not in ASPECT_ZH:
                return None  # "不要已关闭的": a word for a state (已) names nothing either
            cut = tok.start
        return self._negation_before(text, begin, cut)

    @staticmethod
    def _negated_lists(text: str, matches: list[Match]) -> list[Match]:
        """ "美国、法国之外": a negation after a list of values negates all of them."""
        out = list(matches)
        for i in range(len(out) - 1, 0, -1):
            cur, prev = out[i], out[i - 1]
            if (
                cur.operator == FilterOperator.NE
                and cur.rule.startswith("not-")
                and prev.key == cur.key
                and prev.operator == FilterOperator.EQ
                and prev.end <= cur.start
                and _joined(text, prev.end, cur.start)
            ):
                out[i - 1] = Match(
                    prev.start, prev.end, prev.text, f"not-{prev.rule}", prev.key, FilterOperator.NE, prev.value
                )
        return out

    def _negate_years(self, text: str, group: list[Match], clauses: list[int], notes: list[str]) -> list[Match]:
        """A year phrase after "not"/"不是" has the opposite operator; a negated range has no filter."""
        begin = self._clause_start(clauses, group[0].start)
        direct = self._negation_before(text, begin, group[0].start)
        if direct is None:
            return group
        if len(group) > 1:
            notes.append(
                f"{group[0].text!r} is negated: outside a range is two alternatives, which "
                f"ANDed filters cannot express; no {group[0].key} filter"
            )
            return []
        m = group[0]
        assert m.operator is not None  # a year match always has one (only top_k matches have none)
        start = direct.start()
        return [Match(start, m.end, text[start : m.end], f"not-{m.rule}", m.key, NEGATED_OPERATOR[m.operator], m.value)]

    # ---------------------------------------------------------------- disjunction

    def _without_mixed_disjunctions(
        self, text: str, tokens: TokenIndex, matches: list[Match], notes: list[str]
    ) -> list[Match]:
        """Drop values joined by "or" across keys ("thai recipes or desserts"), with a note.

        ANDed filters can say "thai or mexican" (``in``) but not "thai or
        dessert"; when the value before an "or" and the one after it belong to
        different keys, both sides' values are left out rather than ANDed.
        """
        values = sorted(
            (m for m in matches if m.rule in _SPECIFIC_RULES | {"synonym"}), key=lambda m: (m.start, m.end)
        )  # value matches do not overlap
        starts = [v.start for v in values]
        ends = [v.end for v in values]
        dropped: set[int] = set()
        for m in DISJUNCTION.finditer(text):
            i, j = bisect_right(ends, m.start()) - 1, bisect_left(starts, m.end())
            if i < 0 or j >= len(values):
                continue
            before, after = values[i], values[j]
            if before.key == after.key or not self._only_glue(tokens, before.end, after.start):
                continue
            side = self._chain(text, tokens, values, i, -1) + self._chain(text, tokens, values, j, 1)
            dropped.update(id(v) for v in side)
            notes.append(
                f"{text[side[0].start if side else before.start : after.end]!r} asks for "
                f"one of values of different keys ({before.key}, {after.key}); ANDed "
                f"filters cannot say 'or' across keys, so none of them is applied"
            )
        return [m for m in matches if id(m) not in dropped]

    def _only_glue(self, tokens: TokenIndex, start: int, end: int) -> bool:
        """Only function words, document nouns and "or" between two positions."""
        for i in range(tokens.starting_from(start), len(tokens.tokens)):
            tok = tokens.tokens[i]
            if tok.end > end:
                break
            if tok.word:
                if DISJUNCTION.fullmatch(tok.text) or self._role(tok) in {"doc", "filler", "edge"}:
                    continue
                return False
        return True

    def _chain(self, text: str, tokens: TokenIndex, values: list[Match], i: int, step: int) -> list[Match]:
        """Values next to ``values[i]`` in one direction, joined only by glue words."""
        chain = [values[i]]
        j = i + step
        while 0 <= j < len(values):
            a, b = (values[j], chain[-1]) if step < 0 else (chain[-1], values[j])
            if DISJUNCTION.search(text, a.end, b.start) or not self._only_glue(tokens, a.end, b.start):
                break
            chain.append(values[j])
            j += step
        return sorted(chain, key=lambda v: v.start)

    # ---------------------------------------------------------------- tokens

    @staticmethod
    def _tokenize(text: str) -> list[_Token]:
        tokens: list[_Token] = []
        for m in _TOKEN_RE.finditer(text):
            if _HAN.match(m.group()):
                pos = m.start()
                for word in jieba.lcut(m.group()):
                    for part in _particle_split(word):
                        tokens.append(_Token(pos, pos + len(part), part))
                        pos += len(part)
            else:
                tokens.append(_Token(m.start(), m.end(), m.group()))
        return tokens

    def _term_candidates(self, text: str, tokens: TokenIndex, notes: list[str]) -> list[_Candidate]:
        latin_re, cjk_lengths = self._term_res
        found: list[_Candidate] = []
        if latin_re is not None:
            for m in latin_re.finditer(text):
                found.extend(self._candidates_for(m.start(), m.end(), _norm(m.group())))
        starts = {t.start for t in tokens.tokens}
        ends = {t.end for t in tokens.tokens}
        for s in range(len(text)) if cjk_lengths else ():
            if not _HAS_CJK.match(text[s]):
                continue
            # the longest term at s that ends where a word ends; jieba may glue a function
            # word or a kind of document to the value ("关于软件", "英文版", "非中文", "恐怖电影")
            for length in cjk_lengths:
                e = s + length
                if text[s:e] not in self._terms:
                    continue
                around_s, around_e = tokens.around(s), tokens.around(e)
                head = text[around_s.start : s] if around_s is not None else ""
                tail = text[e : around_e.end] if around_e is not None else ""
                given = any(t.rule in {"value", "user-synonym"} for t in self._terms[text[s:e]])
                if given:
                    pass  # the index's own value, or the caller's phrase: matched inside any word
                elif (s not in starts and head not in ZH_GLUE and head not in self._terms) or (
                    e not in ends and tail not in ZH_GLUE and tail not in self._doc_zh and tail not in self._terms
                ):  # "高级工程师": two values in one word
                    logger.debug("%r inside a longer word; not a value", text[s:e])
                    continue
                found.extend(self._candidates_for(s, e, text[s:e]))
                break
        found.extend(self._pinyin_candidates(tokens.tokens, found))
        found.extend(self._elided_candidates(text, found))
        found.extend(self._language_candidates(tokens.tokens, found, notes))
        found.sort(key=lambda c: (c.start, -(c.end - c.start)))
        out: list[_Candidate] = []
        for cand in found:  # longest first at each position, no overlaps
            if out and cand.start < out[-1].end:
                continue
            out.append(cand)
        return out

    def _elided_candidates(self, text: str, found: Sequence[_Candidate]) -> list[_Candidate]:
        """Values whose shared last words a list leaves out: "lung or breast cancer" names
        ``lung cancer`` too, when that is a value of the same key as ``breast cancer``."""
        out: list[_Candidate] = []
        for cand in found:
            phrase = _norm(text[cand.start : cand.end])
            if " " not in phrase or _is_cjk_term(phrase):
                continue
            shared = phrase.split(" ", 1)[1]  # "cancer" of "breast cancer"
            end = cand.start
            while True:
                m = _ELIDED_BEFORE.search(text, 0, end)
                if m is None:
                    break
                bucket = self._terms.get(_norm(f"{m.group(1)} {shared}"), [])
                same = [t for t in bucket if t.key == cand.term.key]
                if len(same) != 1:
                    break
                out.append(_Candidate(m.start(1), m.end(1), same[0]))
                end = m.start(1)  # "lung, colon or breast cancer"
        return out

    def _pinyin_candidates(self, tokens: Sequence[_Token], found: Sequence[_Candidate]) -> list[_Candidate]:
        """Chinese words (one to four jieba tokens, two characters or more) read as a pinyin value."""
        if not self._pinyin:
            return []
        out: list[_Candidate] = []
        covered = bytearray(tokens[-1].end if tokens else 0)  # characters inside a found candidate
        for c in found:
            covered[c.start : c.end] = b"\x01" * (c.end - c.start)
        for i, first in enumerate(tokens):
            if not first.cjk:
                continue
            for j in range(i, min(i + 4, len(tokens))):
                if not tokens[j].cjk:
                    break
                start, end = first.start, tokens[j].end
                if end - start < 2 or any(covered[start:end]):
                    continue
                word = "".join(t.text for t in tokens[i : j + 1])
                bucket = self._pinyin.get(pinyin_of(word), [])
                if len(bucket) == 1:  # a reading two keys share names neither
                    out.append(_Candidate(start, end, bucket[0]))
        return out

    def _language_candidates(
        self, tokens: Sequence[_Token], found: Sequence[_Candidate], notes: list[str]
    ) -> list[_Candidate]:
        """Words no term names that name one value through language resources (:mod:`.terms`)
        or by meaning (:mod:`.meaning`).

        An English word is read by its stem ("terminations"), a Chinese word of one to
        three jieba tokens by an English gloss that is a term's whole phrase or stem
        (古典 "classical"). A word whose readings name values of two keys, or two values,
        names none. What is left (content words and word pairs, the glosses of Chinese
        words) goes to the phrase matcher in one batch; its doubts become ``notes``.
        """
        covered = bytearray(tokens[-1].end if tokens else 0)
        for c in found:
            covered[c.start : c.end] = b"\x01" * (c.end - c.start)
        out: list[_Candidate] = []
        asked: list[tuple[int, int, str]] = []  # (start, end, phrase) for the phrase matcher
        i = 0
        while i < len(tokens):
            first = tokens[i]
            best: _Candidate | None = None
            reach = min(i + (3 if first.cjk else 2), len(tokens))
            for j in range(reach - 1, i - 1, -1):  # the longest word first
                words = tokens[i : j + 1]
                start, end = first.start, tokens[j].end
                if len(words) == 2 and not first.cjk and words[1].lower in _ROMAN and not any(covered[start:end]):
                    # "phase III" for "phase 3" (the key's own noun, so before the content check)
                    numbered = self._terms_of(f"{first.text} {_ROMAN[words[1].lower]}", "stem")
                    if len(numbered) == 1:
                        best = _Candidate(start, end, numbered[0])
                        break
                if len(words) == 2 and not first.cjk and first.text.isalpha() and words[1].cjk:
                    # "SQL 注入": a Latin word and a Chinese one, read as the word and the gloss
                    mixed = {
                        t
                        for gloss in english_glosses(words[1].text)
                        for t in self._terms_of(f"{first.text} {gloss}", "gloss")
                    }
                    if len(mixed) == 1 and not any(covered[start:end]):
                        best = _Candidate(start, end, mixed.pop())
                        break
                if len(words) == 1 and first.text.isupper() and first.text.lower() in self._initials:
                    if not any(covered[start:end]):
                        best = _Candidate(start, end, self._initials[first.text.lower()])  # "IP", "US"
                        break
                if not all(t.cjk == first.cjk for t in words) or any(self._role(t) != "content" for t in words[:-1]):
                    continue  # a kind of document (论文), a filler (看看), a negation: not a value
                # ... but a value's word may come before its key's noun (高|优先级 "high priority")
                key_noun_after = self._role(words[-1]) != "content"
                if key_noun_after and (len(words) == 1 or not first.cjk or self._role(words[-1]) != "doc"):
                    continue
                if any(covered[start:end]):
                    continue
                if first.cjk:
                    word = "".join(t.text for t in words)
                    if end - start < 2:
                        continue  # one character has too many readings
                    # a word jieba kept whole may split anywhere (电子|音乐); jieba's words only between them
                    cuts = None if len(words) == 1 else [t.start - start for t in words[1:]]
                    readings = self._glosses(word, cuts)
                    if key_noun_after or (
                        len(words) > 1 and any(len(t.text) < 2 for t in words) and not english_glosses(word, cuts=())
                    ):
                        # 被|引, 一般|都: a one-character jieba word is mostly a function word, unless
                        # it is a value before its key's noun (高|优先级 "high priority")
                        readings = [r for r in readings if r[2] == "kind"]
                    elif not readings and len(words) == 1 and len(word) >= 3:
                        readings = [r for r in self._glosses(word, [1]) if r[2] == "kind"]  # 低|优先级
                    if not readings:
                        continue
                    found_by = {
                        (phrase, part): [
                            t
                            for t in self._terms_of(phrase, "gloss")
                            if part != "head" or not is_common_word(str(t.value))
                        ]
                        for phrase, _, part in readings
                    }
                    terms = {t for found in found_by.values() for t in found}
                    # cued: only a gloss without its last word, a kind of document, matched (古典音乐)
                    cued = not any(found for (_, part), found in found_by.items() if part != "kind")
                    # only the last word of a gloss ("public utilities"): a reading that needs a cue
                    by_tail = bool(terms) and not any(found for (_, part), found in found_by.items() if part != "tail")
                    if not terms and chinese_word_class(word) != "v":
                        # by meaning, the nouns only: 租房 "to rent an apartment" is no apartment, and a
                        # verb's noun sense is not the one used (申请的专利: applied for, not "application")
                        nouns = set(english_glosses(word, verbs=False, cuts=cuts))
                        asked.extend((start, end, phrase) for phrase, gloss, _ in readings if gloss in nouns)
                else:
                    cued = by_tail = False
                    word = " ".join(t.text for t in words)
                    if not all(t.text.isalpha() for t in words):
                        continue
                    terms = set(self._terms_of(word, "stem", inflected=True)) if len(words) == 1 else set()
                    clipping = self._clippings.get(first.lower) if len(words) == 1 and not terms else None
                    if clipping is not None and (
                        not is_common_word(first.lower) or is_common_word(str(clipping.value))
                    ):  # "pharma", "tech" (a common word for a common value: with a cue); not "document"
                        terms = {clipping}
                    if not terms and len(words) > 1:
                        # a phrase ("wireless network"); one English word next to a value's
                        # meaning is mostly its topic ("blog posts about bread": not food)
                        asked.append((start, end, word))
                if len(terms) == 1:
                    # 手机, 看看: many readings; 招募 "to recruit": a verb names an act. Either needs a cue
                    common = first.cjk and (is_common_word(word) or chinese_word_class(word) == "v" or by_tail)
                    best = _Candidate(start, end, terms.pop(), first.cjk and cued and not common, common)
                    break
            if best is not None:
                out.append(best)
                covered[best.start : best.end] = b"\x01" * (best.end - best.start)
                i = next(k for k in range(i, len(tokens)) if tokens[k].end >= best.end) + 1
            else:
                i += 1
        return out + self._meaning_candidates(asked, covered, notes)

    def _meaning_candidates(
        self, asked: list[tuple[int, int, str]], covered: bytearray, notes: list[str]
    ) -> list[_Candidate]:
        """The phrases the phrase matcher reads as one value, longest first, none overlapping."""
        asked = [(s, e, p) for s, e, p in asked if not any(covered[s:e])][:MAX_MEANING_PHRASES]
        if self._meaning is None or not asked:
            return []
        readings = self._meaning.read([p for _, _, p in asked])
        by_span: dict[tuple[int, int], list[Any]] = {}
        for (start, end, _), reading in zip(asked, readings):
            if reading is not None:
                by_span.setdefault((start, end), []).append(reading)
        out: list[_Candidate] = []
        taken = bytearray(len(covered))
        for (start, end), found in sorted(by_span.items(), key=lambda item: (-(item[0][1] - item[0][0]), item[0])):
            accepted = {r.label for r in found if r.accepted}
            if any(taken[start:end]):
                continue
            if len(accepted) == 1:
                key, value = accepted.pop()
                out.append(_Candidate(start, end, _Term(key, value, "meaning")))
                taken[start:end] = b"\x01" * (end - start)
                continue
            doubt = max((r for r in found if r.doubtful), key=lambda r: r.similarity, default=None)
            if doubt is not None:
                key, value = doubt.label
                notes.append(
                    f"{doubt.phrase!r} may mean {key}={value!r} (similarity {doubt.similarity:.2f}, "
                    f"{doubt.margin:.2f} ahead of the next value); not sure enough to filter"
                )
        return out

    def _glosses(self, word: str, cuts: Sequence[int] | None = None) -> list[tuple[str, str, str]]:
        """A Chinese word's English glosses as ``(phrase, gloss, part)``: each gloss whole
        (``"whole"``), and each without its last word, which may be a noun for the
        documents (``"kind"``: jieba keeps 古典音乐 whole, and "classical music" in a
        music catalogue names the value "classical") or for what the value is
        (``"head"``: 阿尔茨海默病 "alzheimer's disease", 微软 "microsoft corporation";
        the caller keeps these for rare values only), and a dictionary word's gloss by its
        last word (``"tail"``: 公用事业 "public utilities"; read only with a cue)."""
        numbered = _NUMBERED_ZH.fullmatch(word)
        if numbered and parse_count(numbered.group("n")) and not english_glosses(word, cuts=()):
            # 三期 "phase 3", 第二季 "season 2": the glosses of the noun, with the number after them
            n = parse_count(numbered.group("n"))
            return [(f"{g} {n}", g, "whole") for g in english_glosses(numbered.group("noun"), verbs=False)]
        out = []
        listed = bool(english_glosses(word, cuts=()))  # a dictionary word, not glosses of its parts joined
        nouns = set(english_glosses(word, verbs=False, cuts=cuts))  # 租房 "to rent an apartment" is an act
        for gloss in english_glosses(word, cuts=cuts):
            out.append((gloss, gloss, "whole"))
            words = gloss.split()
            # the first noun for the documents or a key after the value's words: "low priority level"
            kind = next((i for i in range(1, len(words)) if words[i] in self._doc_en), None)
            if kind is not None:
                out.append((" ".join(words[:kind]), gloss, "kind"))
            elif len(words) > 1 and listed:  # 哮喘|药物 "asthma medication" is two things, not asthma
                out.append((" ".join(words[:-1]), gloss, "head"))
                if gloss in nouns:
                    out.append((words[-1], gloss, "tail"))  # 公用事业 "public utilities", with a cue
        return out

    def _terms_of(self, phrase: str, rule: str, inflected: bool = False) -> list[_Term]:
        """The values a Latin phrase names as a term or, one word, by its stem; marked ``rule``.

        With ``inflected`` the word must be at least as long as the phrase it stems
        like: an inflected form ("changelogs", "recordings"), not a shorter word
        that shares its stem ("rent" for "rented").
        """
        phrase = _norm(phrase)
        bucket = self._terms.get(phrase)
        if not bucket and " " not in phrase:
            for form in _spellings(phrase):  # the word, its American spelling, the noun of its adjective
                bucket = [t for p, t in self._stems.get(stem_of(form), []) if not inflected or len(form) >= len(p)]
                if bucket:
                    break
        elif not bucket:  # "sql inject" for "sql injection": a phrase by the stems of its words
            bucket = self._phrase_stems.get(_stems_of(phrase), [])
        return [_Term(t.key, t.value, rule) for t in bucket or ()]

    def _candidates_for(self, start: int, end: int, phrase: str) -> list[_Candidate]:
        bucket = self._terms.get(phrase, [])
        if len(bucket) > 1:  # a user synonym beats built-in readings of the same phrase
            bucket = [t for t in bucket if t.rule == "user-synonym"] or bucket[:1]
        return [_Candidate(start, end, bucket[0])] if bucket else []

    # ---------------------------------------------------------------- facet or topic

    def _role(self, tok: _Token | None, values: Spans | None = None, taken: Spans | None = None) -> str:
        """What a token is to the value next to it: edge, value, doc, filler, number or content.

        Args:
            tok: the token (``None``: the query's start or end).
            values: the spans of the value words found in the query.
            taken: the spans other rules read (numbers, years, counts).
        """
        if tok is None or not tok.word:
            return "edge"
        if (values is not None and values.overlaps(tok.start, tok.end)) or (
            taken is not None and taken.overlaps(tok.start, tok.end)
        ):
            return "value"  # a value word, or part of a number, year or count already read
        if tok.cjk:
            if self._names_documents(tok):
                return "doc"
            if tok.text in FILLER_ZH or tok.text in ZH_FACET_NEXT or tok.text == "年" or tok.text in NEGATION_TOKENS_ZH:
                return "filler"
            return "content"
        if self._names_documents(tok):
            return "doc"
        if tok.lower in FILLER_EN or tok.lower in QUESTION_EN or tok.lower in NEGATION_TOKENS_EN:
            return "filler"
        if tok.text[0].isdigit():
            return "number"
        return "content"

    @staticmethod
    def _needs_cue(cand: _Candidate) -> bool:
        """A reading by meaning, or a common value by stem or gloss, unless the word names the
        kind of document too: :meth:`_meaning_cue` decides it."""
        if cand.cued:
            return False
        return (
            cand.common
            or cand.term.rule == "meaning"
            or (cand.term.rule in _INFERRED_RULES and is_common_word(str(cand.term.value)))
        )

    def _meaning_cue(
        self,
        tokens: TokenIndex,
        cand: _Candidate,
        read_otherwise: Spans,
        sure: Sequence[_Candidate],
        taken: Spans,
    ) -> bool:
        """Whether a value read by meaning (or a common value by stem or gloss) stands where a
        facet does, by a positive cue.

        A reading by meaning cannot tell a synonym from a topic ("athlete" is as near
        ``sports`` as "wireless network" is to ``wifi``), so it needs more than a common
        word does: a kind of document after it (its English gloss counts: 酒店 "hotel"
        in a hotel catalogue), a value the query spells before it, an attribute word
        before it ("with", "without", 有, 带), or a value of the same key it is listed
        with ("电子或嘻哈": electronic or hip-hop; "excluding email and phone"). A
        Chinese gloss (not a reading by meaning: "员工手册里的规定" is not about
        policies) also stands where the head noun does ("今年新出的摇滚": what the
        modifiers before 的 describe, at the end of a query that filters by something
        else) and after a word for a state (已完成, 还在招募). "运动员的饮食" has none.

        Args:
            tokens: the query's tokens.
            cand: the reading that needs a cue.
            read_otherwise: spans of values the query spells.
            sure: readings that need no cue, alternatives' partners.
            taken: spans other rules read (years, numbers, counts).
        """
        toks = tokens.tokens
        after = tokens.starting_from(cand.end)
        if after < len(toks) and toks[after].text == "的":
            after += 1  # "有无线网的酒店"
        if after < len(toks) and self._names_documents(toks[after]):
            return True
        before = tokens.ending_by(cand.start) - 1
        while before >= 0 and toks[before].lower in DETERMINERS_EN:
            before -= 1
        prev = toks[before] if before >= 0 else None
        if self._listed_with(tokens, cand, sure):
            return True
        if cand.term.rule != "meaning" and self._chinese_head(tokens, cand, taken):
            return True
        nxt = toks[tokens.starting_from(cand.end)] if tokens.starting_from(cand.end) < len(toks) else None
        inside = tokens.between(cand.start, cand.end)
        if (
            cand.term.rule != "meaning"
            and nxt is not None
            and read_otherwise.overlaps(nxt.start, nxt.end)
            and inside
            and not _is_verb(inside[-1])
        ):
            return True  # "Canadian tribunals", "澳大利亚上诉法院": it modifies a value after it (not a verb: 支持远程办公)
        if prev is not None and prev.text in ASPECT_ZH and cand.term.rule != "meaning":
            # "已完成": a state of the documents ("在" only after 还, 仍, 正: "还在招募")
            if prev.text != "在" or (before >= 1 and toks[before - 1].text in {"还", "仍", "正"}):
                return True
        # a value spelled before it modifies it ("rust 更新日志"); one after it may be its object
        # ("支持远程办公": supports remote work) or a topic beside it ("运动员的饮食")
        return prev is not None and (prev.lower in ATTRIBUTE_CUES or read_otherwise.overlaps(prev.start, prev.end))

    @staticmethod
    def _listed_with(tokens: TokenIndex, cand: _Candidate, sure: Sequence[_Candidate]) -> bool:
        """Whether "or" or "and" joins the reading to a sure value of the same key ("电子或嘻哈",
        "excluding email and phone")."""
        toks = tokens.tokens
        after = tokens.starting_from(cand.end)
        before = tokens.ending_by(cand.start) - 1
        partners: list[int] = []
        if after + 1 < len(toks) and _LIST_JOINER.fullmatch(toks[after].text):
            partners.append(toks[after + 1].start)
        if before >= 1 and _LIST_JOINER.fullmatch(toks[before].text):
            partners.append(toks[before - 1].end)
        return any(
            other.term.key == cand.term.key and other is not cand and (other.start in partners or other.end in partners)
            for other in sure
        )

    def _chinese_head(self, tokens: TokenIndex, cand: _Candidate, taken: Spans) -> bool:
        """A Chinese word that ends the query after 的, in a query another rule already filters."""
        toks = tokens.tokens
        inside = tokens.between(cand.start, cand.end)
        if not inside or not inside[-1].cjk or not taken:
            return False
        after = tokens.starting_from(cand.end)
        rest = [t for t in toks[after:] if t.word]
        if rest and not all(t.text in FILLER_ZH or t.text.startswith(QUESTION_ZH) for t in rest):
            return False
        before = tokens.ending_by(cand.start) - 1
        return before >= 0 and toks[before].text == "的"

    def _names_documents(self, tok: _Token, by_meaning: bool = True) -> bool:
        """A token naming what the documents are: a kind of document, a key's or the content's
        noun, (Chinese) a word whose English gloss is one, or (``by_meaning``) a noun near in
        meaning to the content's (:meth:`_learn_kinds`)."""
        memo = self._kind_memo if by_meaning else {}
        if not tok.cjk:
            return tok.lower in self._doc_en or bool(memo.get(tok.lower))
        return tok.text in self._doc_zh or any(
            g in self._doc_en or g.split()[0] in self._key_words or memo.get(g)
            for g in english_glosses(tok.text, verbs=False)
        )  # 优先级 "priority level": a key's noun

    def _learn_kinds(self, tokens: Sequence[_Token]) -> None:
        """Which of the query's nouns name the documents by meaning ("studies" of trials, 研究
        "research" too), asked of the model in one batch for the words not asked before.

        English plurals and the one-word noun glosses of Chinese words are compared with the
        plural nouns that open ``content_info`` (:func:`_content_kinds`).
        """
        if self._kinds is None:
            return
        words: list[str] = []
        for tok in tokens:
            if not tok.word or self._role(tok) != "content":
                continue
            if tok.cjk:
                words += [g for g in english_glosses(tok.text, verbs=False) if " " not in g]
            elif _is_plural(tok.lower):
                words.append(tok.lower)
        words = [w for w in dict.fromkeys(words) if w not in self._kind_memo and w not in self._doc_en]
        if not words:
            return
        if len(self._kind_memo) > MAX_KIND_MEMO:
            self._kind_memo.clear()
        for reading in self._kinds.read(words):
            if reading is not None:
                self._kind_memo[reading.phrase] = reading.similarity >= KIND_SIMILARITY

    @staticmethod
    def _specific(phrase: str, term: _Term) -> bool:
        """A phrase the data or the caller gave that is not also a common word."""
        if term.rule == "pinyin":
            return True  # the stored value was rare to begin with (pinyin_values)
        if term.rule in {"gloss", "stem"}:  # another form of the value: as specific as the value is
            return isinstance(term.value, str) and not is_common_word(term.value)
        return term.rule in _SPECIFIC_RULES and not is_common_word(_norm(phrase))

    def _is_facet(
        self,
        text: str,
        tokens: TokenIndex,
        cand: _Candidate,
        values: Spans,
        taken: Spans | None = None,
    ) -> bool:
        """Whether a value word names the kind of document wanted (else it is topic)."""
        toks = tokens.tokens
        before = tokens.ending_by(cand.start)  # toks[:before] end before the value
        after = tokens.starting_from(cand.end)  # toks[after:] start after it
        inside = tokens.between(cand.start, cand.end)
        last = inside[-1].lower if inside else text[cand.start : cand.end].lower()
        if last in DOC_NOUNS_EN or last in DOC_NOUNS_ZH:
            return True  # "manual", "blog posts", "博客": the value is itself a kind of document
        prev = toks[before - 1] if before else None
        skipped = 0
        while after + 1 < len(toks) and toks[after].lower in NOUN_MODIFIERS_EN and skipped < _MODIFIER_REACH:
            after, skipped = after + 1, skipped + 1  # "the French new wave": what "new" modifies decides
        nxt = toks[after] if after < len(toks) else None
        if prev is not None and prev.lower == "the" and nxt is not None and nxt.lower in COPULAS_EN:
            return False  # "the room was smaller": one thing talked about, not a kind asked for
        written = text[cand.start : cand.end]
        if (
            written.lower().endswith("ed")
            and nxt is not None
            and self._role(nxt, values, taken) == "content"
            and not _is_verb(nxt)
        ):
            return False  # "expired food", "revoked certificates": a participle describing another noun
        if self._specific(written, cand.term):
            # "thai curry", "Miyazaki": a rare word of the data is the value, except as the
            # head of "X of ..." ("the biology of reefs")
            return not (nxt is not None and nxt.lower == "of")
        prev_role, next_role = self._role(prev, values, taken), self._role(nxt, values, taken)
        if next_role == "content" and nxt is not None and _is_verb(nxt):
            next_role = "edge"  # "美国进行的试验", "cases from India decided before": a verb, not a noun it modifies
        if nxt is not None and nxt.lower == "of":
            return False  # "the history of lighthouses"
        if nxt is not None and nxt.lower in DETERMINERS_EN:
            return False  # "films that feature a haunted house": a verb, not the value
        if before >= 2 and toks[before - 2].lower == "how" and toks[before - 1].lower in {"much", "many"}:
            return False  # "how much energy"
        if next_role == "doc" and nxt is not None and not self._names_documents(nxt, by_meaning=False):
            # a noun only near the documents' kind ("tax rulings" of court decisions), unless a common
            # word and the noun are what an act is done to ("grading final exams")
            return not (
                is_common_word(_norm(text[cand.start : cand.end]))
                and prev is not None
                and prev.lower.endswith("ing")
                and len(prev.lower) >= 5
            )
        if next_role in {"doc", "value"} or (nxt is not None and nxt.text in ZH_FACET_NEXT):
            return True  # "food articles", "English blog posts", "生物类"
        if nxt is not None and nxt.lower in self._key_nouns:
            return True  # "family law": the noun of what the key's values are kinds of
        if next_role == "content":
            return False  # "Chinese tea", "生物多样性"
        if prev is not None and prev.text == "的" and before >= 2:
            if self._role(toks[before - 2], values, taken) == "content":
                return False  # "灯塔的历史"
        if prev_role == "content":
            return False  # "travel policy", "报销政策"
        return True

    # ---------------------------------------------------------------- top_k

    def _find_top_k(self, text: str, tokens: TokenIndex, values: Spans) -> list[Match]:
        num = rf"(?P<n>\d{{1,3}}|{NUM_WORD_RE})"
        results = (
            r"results?|hits|matches|passages|chunks|documents|docs|articles|entries|posts|"
            r"sources|items|records|pages"
        )
        out: list[Match] = []
        for m in re.finditer(rf"\b(?:top|first|best)(?:\s+|\s*-\s*){num}\b(?:\s+(?:{results})\b)?", text, re.I):
            before = tokens.ending_by(m.start()) - 1
            prev = tokens.tokens[before] if before >= 0 else None
            if prev is not None and (prev.lower in _POSSESSIVES or self._role(prev, values) == "content"):
                continue  # "their top 10 customers", "the OWASP top 10": a list the text talks about
            if self._top_k_followed_ok(tokens, m.end(), values):
                out.append(self._top_k_match(text, m, "top_k"))
        for m in re.finditer(rf"\b{num}\s+(?:{results})\b", text, re.I):
            out.append(self._top_k_match(text, m, "top_k"))
        request = r"(?:give|show|find|get|list|fetch|return|send|recommend)\s+(?:me\s+|us\s+)?"
        for m in re.finditer(rf"\b{request}{num}\b", text, re.I):
            i = tokens.starting_from(m.end())
            if i < len(tokens.tokens) and self._role(tokens.tokens[i], values) in {"doc", "value"}:
                out.append(self._top_k_match(text, m, "top_k"))  # "give me 3 listings"
        for m in re.finditer(rf"\b{num}\b", text, re.I):
            before = tokens.ending_by(m.start()) - 1
            if before >= 0 and self._role(tokens.tokens[before], values) in {"content", "doc"}:
                continue  # "type 2 diabetes studies": a number a noun before it names is a label
            if m.group("n").lower() != "one" and self._counts_documents(tokens, m.end(), values):
                out.append(self._top_k_match(text, m, "top_k"))  # "five blog posts"
        zh_num = rf"(?P<n>\d{{1,3}}|{ZH_NUM_RE})"
        for pattern in (
            rf"前\s*{zh_num}\s*(?:{ZH_CLASSIFIERS}|名|(?=的))",
            rf"(?:返回|给我|列出|显示|找出?|要|推荐)(?:看看?|找|列出|来)?\s*{zh_num}\s*(?:{ZH_CLASSIFIERS})",
            rf"{zh_num}\s*(?:{ZH_CLASSIFIERS})\s*(?:结果|文档|文章|资料|条目)",
        ):
            out.extend(self._top_k_match(text, m, "top_k") for m in re.finditer(pattern, text))
        out = [m for m in out if m.value and 0 < m.value <= 1000]
        out.sort(key=lambda m: m.start)
        return out

    def _counts_documents(self, tokens: TokenIndex, end: int, values: Spans) -> bool:
        """A number followed by values naming a kind of document: "3 English blog posts"."""
        first = tokens.starting_from(end)
        after = tokens.tokens[first : first + 4]
        for i, tok in enumerate(after):
            role = self._role(tok, values)
            if role != "value":
                return i > 0 and role == "doc"
            last_value = i + 1 == len(after) or self._role(after[i + 1], values) != "value"
            if tok.lower in DOC_NOUNS_EN and last_value:
                return True
        return False

    @staticmethod
    def _top_k_match(text: str, m: re.Match, rule: str) -> Match:
        return Match(m.start(), m.end(), text[m.start() : m.end()], rule, None, None, parse_count(m.group("n")))

    def _top_k_followed_ok(self, tokens: TokenIndex, end: int, values: Spans) -> bool:
        """ "top 5 about X" counts results; "top 10 mistakes runners make" does not."""
        first = tokens.starting_from(end)
        if first + 1 < len(tokens.tokens) and tokens.tokens[first].lower in {"most", "least"}:
            first += 2  # "top 5 most cited ..."
        after = tokens.tokens[first : first + 3]
        if not after or not after[0].word or after[0].lower in FILLER_EN:
            return True
        for tok in after:
            if not tok.word:
                break
            if self._role(tok, values) in {"doc", "value"}:
                return True
        return False

    # ---------------------------------------------------------------- explicit key ops

    def _find_explicit(self, text: str, notes: list[str]) -> list[Match]:
        ops = _EXPLICIT_OPERATORS
        out = []
        for key, pattern in self._explicit_res:
            for m in pattern.finditer(text):
                op_text = " ".join((m.group("sym") or m.group("word")).lower().split())
                operator = ops[op_text]
                if not self._is_numeric(key) and m.group("sym") is None:
                    continue  # "sources not in English" is no source filter
                end, raw = m.end(), m.group("val").strip("\"'").rstrip(".")
                if not self._is_numeric(key):  # "chef: Kenji Sato": the longest stored value there
                    rest = text[m.start("val") : m.start("val") + self._longest.get(key, 0) + 1]
                    longest = max(
                        (
                            v
                            for v in self._vocabulary.get(key, ())
                            if isinstance(v, str)
                            and rest.lower().startswith(v.lower())
                            and not rest[len(v) : len(v) + 1].isalnum()
                        ),
                        key=len,
                        default=None,
                    )
                    if longest is not None and len(longest) > len(raw):
                        end, raw = m.start("val") + len(longest), longest
                value = self._coerce(key, raw)
                if value is None:
                    number = parse_number(raw) if self._is_numeric(key) else None
                    if number is not None:  # a number, but none a filter can hold
                        notes.append(range_note(m.group().strip(), key))
                    continue
                if not self._is_numeric(key) and operator not in {FilterOperator.EQ, FilterOperator.NE}:
                    continue
                out.append(Match(m.start(), end, text[m.start() : end], "explicit", key, operator, value))
        return out

    def _coerce(self, key: str, raw: str) -> Any:
        kind = self._types[key]
        if kind.is_numeric:  # "rent < 3万", "pages >= 1,000"; nothing for what no filter can hold
            number = self._numbers.number(key, raw)
            if number is None or not in_range(number):
                return None
            return int(number) if kind.base == "int" and number.is_integer() else number
        for value in self._vocabulary.get(key, ()):
            if isinstance(value, str) and value.lower() == raw.lower():
                return value
        for term in self._terms.get(_norm(raw), ()):
            if term.key == key:
                return term.value  # "source=博客" -> "blog"
        return raw

    # ---------------------------------------------------------------- years

    def _plausible(self, year: int, today: date) -> bool:
        years = [v for v in self._vocabulary.get(self._year_key or "", ()) if isinstance(v, (int, float))]
        low = (min(years) if years else 1900) - 10
        high = max(max(years) if years else today.year, today.year) + 1
        return low <= year <= high

    def _find_years(self, text: str, today: date) -> list[list[Match]]:
        key = self._year_key
        taken = Spans()
        groups: list[list[Match]] = []
        for rule, pattern, handler in year_rules(today):
            for m in re.finditer(pattern, text, re.IGNORECASE):
                if taken.overlaps(m.start(), m.end()):
                    continue
                conds = handler(m)
                years = [int(m.group(g)) for g in ("a", "b") if g in m.re.groupindex and m.group(g)]
                if not conds or any(not self._plausible(y, today) for y in years):
                    logger.debug("%r: year outside the index's range, read as topic", m.group())
                    taken.add(m.start(), m.end())  # neither a filter nor a shorter match
                    continue
                taken.add(m.start(), m.end())
                groups.append([Match(m.start(), m.end(), m.group(), rule, key, op, value) for op, value in conds])
        return groups

    # ---------------------------------------------------------------- output

    def _filters(self, matches: Sequence[Match]) -> list[MetadataFilter]:
        """Filters in query order; several ``==`` values of one key become IN, ``!=`` NIN."""
        grouped: dict[tuple[str, FilterOperator], list[Any]] = {}
        order: list[tuple[str, FilterOperator, Any]] = []
        for m in matches:
            if m.key is None or m.operator is None:
                continue
            if m.operator in (FilterOperator.EQ, FilterOperator.NE):
                group = (m.key, m.operator)
                if group not in grouped:
                    grouped[group] = []
                    order.append((m.key, m.operator, grouped[group]))
                if m.value not in grouped[group]:
                    grouped[group].append(m.value)
            elif (m.key, m.operator, m.value) not in order:
                order.append((m.key, m.operator, m.value))
        filters = []
        for key, operator, value in order:
            if (key, operator) in grouped:
                values, negated = grouped[key, operator], operator == FilterOperator.NE
                if self._is_list(key) and not negated:
                    operator, value = (
                        (FilterOperator.CONTAINS, values[0]) if len(values) == 1 else (FilterOperator.ANY, values)
                    )
                elif self._is_list(key) or len(values) > 1:
                    operator, value = (FilterOperator.NIN if negated else FilterOperator.IN), values
                else:
                    value = values[0]
            filters.append(MetadataFilter(key=key, operator=operator, value=value))
        return filters

    @staticmethod
    def _remaining(text: str, index: TokenIndex, taken: Spans) -> str:
        """The query minus matched phrases and the filler next to them."""
        if not taken:
            return text.strip()
        tokens = index.tokens
        removed = [taken.overlaps(t.start, t.end) for t in tokens]

        def filler(t: _Token) -> bool:
            return (
                t.text in FILLER_ZH or t.text in DOC_NOUNS_ZH
                if t.cjk
                else (t.lower in FILLER_EN or t.lower in DOC_NOUNS_EN)
            )

        # filler touching a removed token goes, and so on along a run of filler: a run
        # with a removed token on its left goes in the forward sweep, on its right in the backward one
        for order, side in ((range(len(tokens)), -1), (range(len(tokens) - 1, -1, -1), 1)):
            for i in order:
                if not removed[i] and 0 <= i + side < len(tokens) and removed[i + side] and filler(tokens[i]):
                    removed[i] = True
        for order in (range(len(tokens)), range(len(tokens) - 1, -1, -1)):
            for i in order:  # then filler at either end: "...的结果", "what ..."
                if removed[i] or not tokens[i].word:
                    continue
                if not filler(tokens[i]):
                    break
                removed[i] = True
        keep = [True] * len(text)
        for tok, gone in zip(tokens, removed):
            if gone:
                keep[tok.start : tok.end] = [False] * (tok.end - tok.start)
        rest = "".join(ch for ch, k in zip(text, keep) if k)
        rest = re.sub(r"\s+", " ", rest)
        rest = re.sub(r"\s+([,.;:?!，。；：？！])", r"\1", rest).strip(" ,;:，；：、-–—'\"")
        kept = [t for t, gone in zip(tokens, removed) if not gone]
        if not any(t.word and not filler(t) for t in kept):
            return ""
        if rest.endswith(("?", "？")) and not (
            any(t.lower in QUESTION_EN for t in kept) or any(w in rest for w in QUESTION_ZH)
        ):
            rest = rest.rstrip("?？").strip()
        return rest
