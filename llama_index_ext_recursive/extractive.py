"""The offline extractive summarizer: a document's most central sentences, no LLM.

Its own module, below the recursive package, because worker processes run it
(:func:`~llama_index_ext_recursive.workers.summarize_texts`): a streaming build
of 100k documents summarised on one core while the other waited (issue 25).
:mod:`~llama_index_ext_recursive.recursive.summarize` holds the other
summarizers and the cache.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from typing import Any

import numpy as np
from scipy import sparse

from llama_index_ext_recursive.text import CJK_CHARACTER, HAN_CLASS, LATIN_WORD, is_cjk
from llama_index_ext_recursive.validation import check_count

__all__ = ["ExtractiveSummarizer", "split_sentences"]

logger = logging.getLogger(__name__)

# Latin: end mark, space, then a capital/digit/quote (not "U.S. economy", not "3.5");
# Chinese end marks need no space.
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019)]))\s+(?=[A-Z0-9\"'(\[\u201c" + HAN_CLASS + r"])"
    r"|(?<=[。！？；])|\n+"
)
_STOPWORDS = frozenset(
    "a an and are as at be but by for from has have in is it its of on or that the "
    "their there this to was were which with you your".split()
)


def split_sentences(text: str) -> list[str]:
    """Split prose into sentences (English and Chinese punctuation, line breaks)."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def _terms(sentence: str) -> list[str]:
    """Latin words (stopwords dropped) and CJK character bigrams (:mod:`~llama_index_ext_recursive.text`'s table)."""
    words = [w.lower() for w in LATIN_WORD.findall(sentence)]
    chars = CJK_CHARACTER.findall(sentence)
    bigrams = [a + b for a, b in zip(chars, chars[1:])]
    return [w for w in words if w not in _STOPWORDS] + bigrams


class ExtractiveSummarizer:
    """Title plus the sentences most central to the whole document. No LLM.

    Centrality is the TF-IDF cosine between a sentence and the document's
    centroid (IDF over the document's own sentences), so every part of the
    document competes, not just its opening; sentences are picked by maximal
    marginal relevance so near-duplicates do not crowd out other topics.
    Selected sentences keep their original order and the summary stays within
    ``max_chars``.

    Memory and time are bounded whatever the document's size: the TF-IDF matrix
    is sparse (a dense one needed 32.8 GiB for 5 MB of source code), and a
    document with more than ``max_sentences`` sentences is summarized from that
    many of them, taken at even intervals so the summary still covers the whole
    document. Documents under the cap are summarized from every sentence.

    Args:
        max_chars: upper bound on summary length (the embedding model reads
            about 256 word pieces; 600 characters of English fit).
        max_chars_cjk: the bound for Chinese text, where each character is a
            word piece (240 fit the same window).
        diversity_lambda: 1.0 ranks by centrality alone; lower values favour
            sentences unlike those already chosen.
        max_sentences: most sentences considered per document; larger documents
            are sampled evenly (10,000 sentences of prose take about a second).
    """

    def __init__(
        self,
        max_chars: int = 600,
        diversity_lambda: float = 0.7,
        max_chars_cjk: int = 240,
        max_sentences: int = 10_000,
    ) -> None:
        if min(max_chars, max_chars_cjk) < 50:
            raise ValueError(f"max_chars and max_chars_cjk must be at least 50, got {max_chars}, {max_chars_cjk}")
        if not 0.0 <= diversity_lambda <= 1.0:
            raise ValueError(f"diversity_lambda must be within [0, 1], got {diversity_lambda}")
        self.max_chars = max_chars
        self.max_chars_cjk = max_chars_cjk
        self.diversity_lambda = diversity_lambda
        self.max_sentences = check_count("max_sentences", max_sentences, minimum=2)

    @property
    def fingerprint(self) -> str:
        return (
            f"extractive-tfidf-mmr-v4:{self.max_chars}:{self.max_chars_cjk}:"
            f"{self.diversity_lambda}:{self.max_sentences}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "extractive",
            "max_chars": self.max_chars,
            "max_chars_cjk": self.max_chars_cjk,
            "diversity_lambda": self.diversity_lambda,
            "max_sentences": self.max_sentences,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExtractiveSummarizer:
        return cls(
            max_chars=data["max_chars"],
            diversity_lambda=data["diversity_lambda"],
            max_chars_cjk=data.get("max_chars_cjk", 240),
            max_sentences=data.get("max_sentences", 10_000),
        )

    def candidates(self, text: str) -> list[str]:
        """The sentences :meth:`select` chooses from, in document order.

        Headings (``#`` lines) are left out. Beyond ``max_sentences``, every
        ``n / max_sentences``-th sentence is kept: deterministic, and spread over
        the whole document rather than its opening.
        """
        sentences = [s for s in split_sentences(text) if not s.startswith("#")]
        total = len(sentences)
        if total <= self.max_sentences:
            return sentences
        logger.debug("summarizing from %d of %d sentences", self.max_sentences, total)
        return [sentences[i] for i in np.arange(self.max_sentences) * total // self.max_sentences]

    def select(self, text: str, budget: int, segments: int = 1) -> list[str]:
        """Central, mutually different sentences of ``text`` within ``budget`` characters.

        With ``segments > 1`` the document is cut into that many consecutive
        parts, each given an equal share of the budget, so every part is covered.
        """
        sentences = self.candidates(text)
        if not sentences:
            return []
        bags = [Counter(_terms(s)) for s in sentences]
        df = Counter(term for bag in bags for term in bag)
        vocab = {term: i for i, term in enumerate(df)}
        if not vocab:
            return sentences[:1]
        idf = np.array([math.log((1 + len(bags)) / (1 + df[t])) + 1 for t in vocab])
        matrix = _unit_rows(bags, vocab, idf)
        centrality = matrix @ matrix.mean(axis=0)
        lengths = np.array([len(s) + 1 for s in sentences])
        fit = budget // max(1, 2 * int(lengths.mean()))  # each part fits about two sentences
        parts = np.array_split(np.arange(len(sentences)), max(1, min(segments, len(sentences), fit)))
        chosen: list[int] = []
        for part in parts:
            rows = slice(int(part[0]), int(part[-1]) + 1)  # parts are consecutive
            chosen.extend(self._mmr(matrix[rows], centrality[rows], lengths[rows], budget // len(parts), part))
        return [sentences[i] for i in sorted(chosen)]

    def _mmr(
        self, matrix: sparse.csr_array, centrality: np.ndarray, lengths: np.ndarray, budget: int, ids: np.ndarray
    ) -> list[int]:
        """Greedy maximal marginal relevance within a character budget.

        A sentence longer than the budget left can never be chosen later, so it
        is dropped at once: the loop runs once per chosen sentence, not once per
        sentence of the document.
        """
        redundancy = np.zeros(len(ids))
        open_ = lengths <= budget
        chosen, used = [], 0
        while open_.any():
            gain = self.diversity_lambda * centrality - (1 - self.diversity_lambda) * redundancy
            idx = int(np.argmax(np.where(open_, gain, -np.inf)))
            chosen.append(int(ids[idx]))
            used += lengths[idx]
            open_[idx] = False
            open_ &= lengths <= budget - used
            redundancy = np.maximum(redundancy, matrix @ _dense_row(matrix, idx))
        return chosen

    def summarize(self, title: str, text: str) -> str:
        limit = self.max_chars_cjk if is_cjk(text) else self.max_chars
        head = f"{title}. " if title else ""
        body = self.select(text, limit - len(head))
        if not body:  # no sentence fits (one huge unpunctuated paragraph): its opening words
            opening = text[: limit - len(head) + 1]
            body = [opening[: opening.rfind(" ")] if " " in opening.strip() else opening]
        summary = head + " ".join(body)
        return summary[:limit].strip() or text[:limit].strip()


def _unit_rows(bags: list[Counter], vocab: dict[str, int], idf: np.ndarray) -> sparse.csr_array:
    """Sparse TF-IDF rows of unit length (all-zero rows stay zero)."""
    counts = [len(bag) for bag in bags]
    rows = np.repeat(np.arange(len(bags)), counts)
    cols = np.fromiter((vocab[t] for bag in bags for t in bag), dtype=np.int64, count=sum(counts))
    data = np.fromiter((c for bag in bags for c in bag.values()), dtype=np.float64, count=len(cols))
    data *= idf[cols]
    norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=len(bags)))
    data /= np.where(norms == 0, 1.0, norms)[rows]
    return sparse.csr_array((data, (rows, cols)), shape=(len(bags), len(vocab)))


def _dense_row(matrix: sparse.csr_array, row: int) -> np.ndarray:
    """One row as a dense vector, read off the CSR arrays (``matrix[row]`` costs 1 ms)."""
    start, end = matrix.indptr[row], matrix.indptr[row + 1]
    dense = np.zeros(matrix.shape[1])
    dense[matrix.indices[start:end]] = matrix.data[start:end]
    return dense
