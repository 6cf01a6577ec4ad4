"""Document summaries for routing: offline extractive, LLM with fallback, cache.

A summarizer is any object with ``fingerprint`` (a string that changes when its
output would) and ``summarize(title, text) -> str``. Summaries are cached by
``(fingerprint, content hash)`` so rebuilding does not summarize unchanged
documents again.

The extractive summarizer's memory and time are bounded for documents of any
size: its TF-IDF matrix is sparse and it considers at most ``max_sentences``
sentences, spread evenly over the whole document.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import math
import re
from collections import Counter
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from llama_index.core.llms.utils import LLMType
from scipy import sparse

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.models import resolve_llm
from llama_index_ext_recursive.persist import load_json
from llama_index_ext_recursive.text import CJK_CHARACTER, HAN_CLASS, LATIN_WORD, is_cjk
from llama_index_ext_recursive.validation import check_count

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


@runtime_checkable
class Summarizer(Protocol):
    """What the builder needs from a summarizer."""

    @property
    def fingerprint(self) -> str: ...

    def summarize(self, title: str, text: str) -> str: ...


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


DEFAULT_SUMMARY_PROMPT = (
    "Write a summary of the document below in at most {max_words} words, in the "
    "same language as the document ({language}). Name its main topics so that a "
    "reader can tell whether the document answers their question. Reply with the "
    "summary only.\n\nTitle: {title}\n\nDocument (representative sentences from "
    "the whole document, in order):\n{content}\n\nSummary:"
)


class SummaryRejected(LlamaIndexExtRecursiveError, ValueError):
    """An LLM summary failed validation; the reason says which check."""


class LLMSummarizer:
    """Summaries from any LlamaIndex LLM, validated, with offline fallback.

    The LLM sees sentences chosen from the *whole* document (the extractive
    selection, in order) within ``max_input_chars``, not just its opening.
    Its output is rejected when empty, longer than ``max_chars``, or in a
    different script than the document (Chinese vs Latin); on rejection, error
    or timeout the ``fallback`` summarizer is used and the reason is logged.

    Args:
        llm: the LLM, or anything upstream's ``resolve_llm`` accepts (an
            explicitly set ``Settings.llm`` is used when ``None``; see
            :func:`~llama_index_ext_recursive.models.resolve_llm`).
        max_chars: maximum accepted summary length.
        max_input_chars: budget of document text sent to the LLM.
        timeout: seconds to wait for one summary.
        fallback: summarizer used on failure (extractive by default).
        prompt: template with ``{title}``, ``{content}``, ``{max_words}``, ``{language}``.
        input_segments: consecutive parts of the document that each get an
            equal share of ``max_input_chars``, so the beginning cannot crowd out the end.
    """

    def __init__(
        self,
        llm: LLMType | None = None,
        max_chars: int = 800,
        max_input_chars: int = 6000,
        timeout: float = 60.0,
        fallback: Summarizer | None = None,
        prompt: str = DEFAULT_SUMMARY_PROMPT,
        input_segments: int = 8,
    ) -> None:
        self.llm = resolve_llm(
            llm, needed_for="LLMSummarizer", offline_alternative="use ExtractiveSummarizer() for offline summaries"
        )
        self.max_chars = max_chars
        self.max_input_chars = max_input_chars
        self.timeout = timeout
        self.fallback = fallback or ExtractiveSummarizer()
        self.prompt = prompt
        self.input_segments = input_segments
        self.fallbacks = 0

    @property
    def fingerprint(self) -> str:
        model = getattr(self.llm, "metadata", None)
        model_name = getattr(model, "model_name", type(self.llm).__name__)
        prompt_hash = hashlib.sha256(self.prompt.encode()).hexdigest()[:12]
        return f"llm:{model_name}:{self.max_chars}:{self.max_input_chars}:{self.input_segments}:{prompt_hash}"

    def build_prompt(self, title: str, text: str) -> str:
        content = "\n".join(ExtractiveSummarizer().select(text, self.max_input_chars, segments=self.input_segments))
        language = "Chinese, Japanese or Korean" if is_cjk(text) else "the document's language"
        return self.prompt.format(
            title=title or "(untitled)",
            content=content,
            max_words=max(20, self.max_chars // 6),
            language=language,
        )

    def validate(self, summary: str, text: str) -> str:
        """Return the cleaned summary or raise :class:`SummaryRejected`."""
        summary = (summary or "").strip()
        if not summary:
            raise SummaryRejected("empty summary")
        if len(summary) > self.max_chars:
            raise SummaryRejected(f"summary has {len(summary)} characters, limit {self.max_chars}")
        doc_cjk, sum_cjk = is_cjk(text), is_cjk(summary)
        if doc_cjk != sum_cjk:
            raise SummaryRejected(
                "summary is in a different language than the document "
                f"({'CJK' if sum_cjk else 'Latin script'} vs "
                f"{'CJK' if doc_cjk else 'Latin script'})"
            )
        return summary

    def summarize(self, title: str, text: str) -> str:
        prompt = self.build_prompt(title, text)
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        try:
            future = pool.submit(self.llm.complete, prompt)
            return self.validate(future.result(timeout=self.timeout).text, text)
        except Exception as exc:  # any failure falls back, visibly
            reason = "timed out" if isinstance(exc, concurrent.futures.TimeoutError) else repr(exc)
            logger.warning("LLM summary of %r rejected (%s); using fallback", title, reason)
            self.fallbacks += 1
            return self.fallback.summarize(title, text)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class SummaryCache:
    """Summaries keyed by summarizer fingerprint and document content hash.

    Args:
        path: JSON file to load from and save to (optional).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path else None
        # a dict, or the summaries a persisted columnar index reads when asked for (PublishedTexts)
        self.entries: MutableMapping[str, str] = {}
        self.hits = 0
        self.misses = 0
        if self.path is not None and self.path.exists():
            self.entries = dict(load_json(self.path))

    @staticmethod
    def key(fingerprint: str, text: str) -> str:
        return f"{fingerprint}|{content_hash(text)}"

    def get_or_create(self, summarizer: Summarizer, title: str, text: str) -> str:
        key = self.key(summarizer.fingerprint, f"{title}\n{text}")
        if key in self.entries:
            self.hits += 1
        else:
            self.misses += 1
            self.entries[key] = summarizer.summarize(title, text)
        return self.entries[key]

    def save(self, path: str | Path | None = None) -> None:
        target = Path(path) if path else self.path
        if target is None:
            raise ValueError("SummaryCache.save needs a path (none was given at construction)")
        target.write_text(json.dumps(dict(self.entries), ensure_ascii=False), encoding="utf-8")
