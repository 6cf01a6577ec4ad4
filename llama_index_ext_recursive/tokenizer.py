"""The tokenizer of every BM25 index of the package.

Used by :class:`~llama_index_ext_recursive.retrievers.bm25.MultilingualBM25Retriever`
and by the lexical column of
:class:`~llama_index_ext_recursive.stores.columnar_store.ColumnarVectorStore`
(which sits below the retrievers, hence this module's place).

Upstream ``BM25Retriever`` tokenizes with ``(?u)\\b\\w\\w+\\b``, so an
unspaced Chinese sentence is one token and any sub-phrase query scores 0.
:class:`MultilingualTokenizer` splits text into script runs with the package's
one script table (:func:`~llama_index_ext_recursive.text.script_runs`) and
tokenizes each run as its script needs.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable
from typing import Any

import jieba
import Stemmer

from llama_index_ext_recursive.text import Script, script_runs

jieba.setLogLevel(logging.WARNING)

ENGLISH_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    few for from further had has have having he her here hers herself him himself his how
    i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom why will with
    would you your yours yourself yourselves""".split()
)
# Function words only: BM25's IDF handles the rest, and content words must stay.
CHINESE_STOPWORDS = frozenset(
    "的 了 是 在 和 与 及 或 也 都 就 而 之 其 这 那 吗 呢 吧 啊 么 什么 怎么 怎样 哪 哪些 哪个 为什么 如何".split()
)
# language code -> PyStemmer algorithm for Latin-script tokens
_STEMMER_LANGUAGES = {
    "auto": "english",
    "en": "english",
    "zh": "english",
    "ja": "english",
    "ko": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "pt": "portuguese",
    "nl": "dutch",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "fi": "finnish",
    "ru": "russian",
    "tr": "turkish",
    "ro": "romanian",
    "hu": "hungarian",
}
_ENGLISH_LIKE = {"auto", "en", "zh", "ja", "ko"}
_BIGRAM_HAN = {"ja", "ko"}  # Han runs inside Japanese/Korean text: bigrams, not jieba

# Alphanumeric runs joined by internal punctuation: GAPDH, C57BL/6, v2.4.0, e-mail.
LATIN_TOKEN = re.compile(r"[^\W_]+(?:[-./_+:'’&][^\W_]+)*")
_LATIN_PART = re.compile(r"[^\W_]+")


def _bigrams(run: str) -> list[str]:
    if len(run) < 2:
        return [run] if run else []
    return [run[i : i + 2] for i in range(len(run) - 1)]


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class MultilingualTokenizer:
    """Script-aware tokenizer for BM25: Chinese words, CJK bigrams, intact identifiers.

    Text is NFKC-normalized and lowercased, then split into runs by script:
    Han runs are segmented with jieba (bigrams when ``language`` is ``"ja"`` or
    ``"ko"``), kana and hangul runs become character bigrams, and everything else
    yields Latin-style tokens that keep internal punctuation (``c57bl/6``,
    ``v2.4.0``, ``e-mail``); with ``split_compounds`` such a compound is also
    indexed by its parts (``c57bl``, ``6``), so ``IL-6`` matches ``IL 6`` while
    the exact identifier still scores highest. Stopwords and stemming apply to
    Latin tokens only (stemming only to purely alphabetic ones, so identifiers
    survive). Other punctuation is dropped.

    Args:
        language: ``"auto"`` (default; mixed text works because runs are split
            by script), ``"en"``, ``"zh"``, ``"ja"``, ``"ko"``, or a language code
            with a Snowball stemmer (``"de"``, ``"fr"``, ...) for Latin tokens.
        stem: Stem Latin tokens.
        stopwords: Latin stopwords; ``None`` means the built-in English list for
            ``auto``/``en``/``zh``/``ja``/``ko`` and none otherwise.
        chinese_stopwords: Drop a few Chinese function words (的, 是, 什么, ...).
        split_compounds: Also emit the parts of punctuation-joined Latin tokens
            (on SciFact this lifts nDCG@10 from 0.676 to 0.694).
    """

    def __init__(
        self,
        language: str = "auto",
        stem: bool = True,
        stopwords: Iterable[str] | None = None,
        chinese_stopwords: bool = True,
        split_compounds: bool = True,
    ) -> None:
        language = (language or "auto").lower()
        if language not in _STEMMER_LANGUAGES:
            raise ValueError(f"unsupported language {language!r}; use one of {sorted(_STEMMER_LANGUAGES)}")
        self.language = language
        self.stem = bool(stem)
        if stopwords is None:
            self.stopwords = ENGLISH_STOPWORDS if language in _ENGLISH_LIKE else frozenset()
        else:
            self.stopwords = frozenset(word.lower() for word in stopwords)
        self.chinese_stopwords = bool(chinese_stopwords)
        self.split_compounds = bool(split_compounds)
        self._stemmer: Stemmer.Stemmer | None = None

    # -- configuration -------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable settings; :meth:`from_dict` rebuilds an equal tokenizer."""
        return {
            "language": self.language,
            "stem": self.stem,
            "stopwords": sorted(self.stopwords),
            "chinese_stopwords": self.chinese_stopwords,
            "split_compounds": self.split_compounds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MultilingualTokenizer:
        """Rebuild a tokenizer from :meth:`to_dict` output.

        Settings absent from older files keep the behaviour those files were
        built with (``split_compounds`` was added later, so it reads as off).
        """
        known = {"language", "stem", "stopwords", "chinese_stopwords", "split_compounds"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown tokenizer settings: {sorted(unknown)}")
        return cls(**{"split_compounds": False, **data})

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MultilingualTokenizer) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return (
            f"MultilingualTokenizer(language={self.language!r}, stem={self.stem}, "
            f"split_compounds={self.split_compounds})"
        )

    def __getstate__(self) -> dict[str, Any]:
        return self.to_dict()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    # -- tokenization --------------------------------------------------
    @property
    def stemmer(self) -> Stemmer.Stemmer:
        if self._stemmer is None:
            self._stemmer = Stemmer.Stemmer(_STEMMER_LANGUAGES[self.language])
        return self._stemmer

    def _latin(self, run: str) -> list[str]:
        tokens: list[str] = []
        for token in LATIN_TOKEN.findall(run):
            # only a token holding a joiner (C57BL/6, e-mail) has parts; most are plain words
            parts = _LATIN_PART.findall(token) if self.split_compounds and not token.isalnum() else ()
            if len(parts) > 1:
                tokens.extend([token, *parts])
            else:
                tokens.append(token)
        stopwords = self.stopwords
        tokens = [t for t in tokens if t not in stopwords]
        if not self.stem:
            return tokens
        words = [t for t in tokens if t.isalpha()]
        stems = iter(self.stemmer.stemWords(words))  # one call for the run, not one per word
        return [next(stems) if t.isalpha() else t for t in tokens]

    def _han(self, run: str) -> list[str]:
        if self.language in _BIGRAM_HAN:
            return _bigrams(run)
        words = [w for w in jieba.lcut(run) if w.strip()]
        if self.chinese_stopwords:
            words = [w for w in words if w not in CHINESE_STOPWORDS]
        return words

    def __call__(self, text: str) -> list[str]:
        """Tokens of ``text`` (an empty list when nothing indexable is left).

        Lone surrogates (from a mis-decoded file or a broken client) cannot be
        encoded for the stemmer; they become U+FFFD instead of crashing.
        """
        text = _LONE_SURROGATE.sub("\ufffd", text or "")
        text = unicodedata.normalize("NFKC", text).lower()
        tokens: list[str] = []
        for kind, run in script_runs(text):
            if kind == Script.HAN:
                tokens.extend(self._han(run))
            elif kind in (Script.KANA, Script.HANGUL):
                tokens.extend(_bigrams(run))
            else:
                tokens.extend(self._latin(run))
        return tokens

    tokenize = __call__


__all__ = [
    "CHINESE_STOPWORDS",
    "ENGLISH_STOPWORDS",
    "LATIN_TOKEN",
    "MultilingualTokenizer",
]
