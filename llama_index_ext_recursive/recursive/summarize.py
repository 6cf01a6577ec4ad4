"""Document summaries for routing: offline extractive, LLM with fallback, cache.

A summarizer is any object with ``fingerprint`` (a string that changes when its
output would) and ``summarize(title, text) -> str``. Summaries are cached by
``(fingerprint, content hash)`` so rebuilding does not summarize unchanged
documents again.

The offline extractive summarizer lives in :mod:`~llama_index_ext_recursive.extractive`
(worker processes run it); the builder asks the cache for a batch of documents
at a time (:meth:`SummaryCache.get_or_create_many`), so the summaries it lacks
can be made on both cores.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from llama_index.core.llms.utils import LLMType

from llama_index_ext_recursive.errors import LlamaIndexExtRecursiveError
from llama_index_ext_recursive.extractive import ExtractiveSummarizer
from llama_index_ext_recursive.models import resolve_llm
from llama_index_ext_recursive.persist import load_json
from llama_index_ext_recursive.text import is_cjk
from llama_index_ext_recursive.workers import summarize_texts

logger = logging.getLogger(__name__)


@runtime_checkable
class Summarizer(Protocol):
    """What the builder needs from a summarizer."""

    @property
    def fingerprint(self) -> str: ...

    def summarize(self, title: str, text: str) -> str: ...


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
        return self.get_or_create_many(summarizer, [(title, text)])[0]

    def get_or_create_many(
        self, summarizer: Summarizer, documents: Sequence[tuple[str, str]], workers: int = 1
    ) -> list[str]:
        """The summary of each ``(title, text)``, from the cache or made and cached.

        Args:
            summarizer: what makes the summaries the cache lacks.
            documents: ``(title, text)`` pairs.
            workers: processes the default :class:`ExtractiveSummarizer` may use
                (:func:`~llama_index_ext_recursive.workers.summarize_texts`); any other
                summarizer runs here.
        """
        keys = [self.key(summarizer.fingerprint, f"{title}\n{text}") for title, text in documents]
        wanted: dict[str, tuple[str, str]] = {}
        for key, document in zip(keys, documents, strict=True):
            if key in wanted or key in self.entries:
                self.hits += 1
            else:
                self.misses += 1
                wanted[key] = document
        if wanted:
            missing = list(wanted.values())
            if type(summarizer) is ExtractiveSummarizer:  # a subclass may summarise otherwise: not in a worker
                made = summarize_texts(missing, summarizer, workers=workers)
            else:
                made = [summarizer.summarize(title, text) for title, text in missing]
            for key, summary in zip(wanted, made, strict=True):
                self.entries[key] = summary
        return [self.entries[key] for key in keys]

    def save(self, path: str | Path | None = None) -> None:
        target = Path(path) if path else self.path
        if target is None:
            raise ValueError("SummaryCache.save needs a path (none was given at construction)")
        target.write_text(json.dumps(dict(self.entries), ensure_ascii=False), encoding="utf-8")
