"""Worker processes for the pure-Python text work of a build: BM25 tokens and extractive summaries.

Tokenising (regular expressions, jieba, the stemmer) and extractive
summarising (sentence splitting, TF-IDF, MMR) hold the GIL, so threads do not
help: a build tokenising 200k chunks spent 219 s of 419 s on one core, and a
streaming build of 100k documents summarised them on one core while the other
waited (issue 25). :func:`tokenize_texts` and :func:`summarize_texts` cut a
batch into ``workers`` consecutive parts, each handled by a worker process
with the tokenizer's or summarizer's settings; the result is the serial one,
item for item.

The workers are plain ``python -m`` processes spoken to in JSON lines
(:class:`_WorkerPool`), started at the first parallel batch and kept for the
next ones. Not ``multiprocessing``: its workers import the caller's main
script again, so a script without an ``if __name__ == "__main__":`` guard
would run again in every worker (or fail to start them). A request names one
of two jobs and carries plain settings and texts: nothing in it is run as code.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from llama_index_ext_recursive.extractive import ExtractiveSummarizer
from llama_index_ext_recursive.tokenizer import MultilingualTokenizer

__all__ = ["PARALLEL_MIN_CHARACTERS", "PARALLEL_MIN_TEXTS", "summarize_texts", "tokenize_texts"]

# a batch of fewer texts, and fewer characters, is handled in this process: the
# first parallel batch starts the worker processes (each imports the package, ~2 s)
PARALLEL_MIN_TEXTS = 5_000
PARALLEL_MIN_CHARACTERS = 2_000_000  # a few hundred whole documents count as much as 2000 chunks


def _check(workers: int, min_parallel: int, texts: Sequence[str]) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}; pass workers=2 for both cores")
    if isinstance(min_parallel, bool) or not isinstance(min_parallel, int) or min_parallel < 1:
        raise ValueError(f"min_parallel must be an integer >= 1, got {min_parallel!r}")
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"texts must be strings, got {type(text).__name__}: {text!r:.60}")


def _parallel(items: Sequence[Any], characters: int, workers: int, min_parallel: int) -> list[list[Any]] | None:
    """``items`` cut into ``workers`` consecutive parts, or ``None`` when the batch is too
    small to pay for the workers (fewer than ``min_parallel`` items and characters)."""
    if workers == 1 or (len(items) < min_parallel and characters < PARALLEL_MIN_CHARACTERS):
        return None
    size = -(-len(items) // workers)
    return [list(items[start : start + size]) for start in range(0, len(items), size)]


def tokenize_texts(
    texts: Sequence[str],
    tokenizer: MultilingualTokenizer,
    workers: int = 2,
    min_parallel: int = PARALLEL_MIN_TEXTS,
) -> list[list[str]]:
    """The tokens of each of ``texts``, on ``workers`` processes when the batch pays for them.

    Args:
        texts: the texts to tokenise.
        tokenizer: the tokenizer (its settings are sent to the workers).
        workers: processes to use; 1 tokenises here.
        min_parallel: batches of fewer texts are tokenised here, unless they hold
            :data:`PARALLEL_MIN_CHARACTERS` characters or more (long documents).

    Raises:
        ValueError: ``workers`` or ``min_parallel`` is not a positive integer.
        TypeError: a text is not a string.
        RuntimeError: a worker process failed (its error is named).
    """
    _check(workers, min_parallel, texts)
    parts = _parallel(texts, sum(map(len, texts)), workers, min_parallel)
    if parts is None:
        return [tokenizer(text) for text in texts]
    answers = _WorkerPool.shared(len(parts)).ask("tokens", tokenizer.to_dict(), parts)
    return [tokens for part in answers for tokens in part]


def summarize_texts(
    documents: Sequence[tuple[str, str]],
    summarizer: ExtractiveSummarizer,
    workers: int = 2,
    min_parallel: int = 64,
) -> list[str]:
    """``summarizer.summarize(title, text)`` of each of ``documents``, on ``workers``
    processes when the batch pays for them (a document is a few milliseconds of work).

    Args:
        documents: ``(title, text)`` pairs.
        summarizer: the extractive summarizer (its settings are sent to the workers).
        workers: processes to use; 1 summarises here.
        min_parallel: batches of fewer documents are summarised here, unless they hold
            :data:`PARALLEL_MIN_CHARACTERS` characters or more.

    Raises:
        ValueError, TypeError, RuntimeError: as :func:`tokenize_texts`.
    """
    _check(workers, min_parallel, [piece for document in documents for piece in document])
    parts = _parallel(documents, sum(len(text) for _, text in documents), workers, min_parallel)
    if parts is None:
        return [summarizer.summarize(title, text) for title, text in documents]
    answers = _WorkerPool.shared(len(parts)).ask("summaries", summarizer.to_dict(), parts)
    return [summary for part in answers for summary in part]


class _WorkerPool:
    """Worker processes that answer JSON requests, one line in, one line out.

    One pool per process (:meth:`shared`), grown to the largest number of
    workers asked for, used by one batch at a time (a lock), and ended when
    the process exits (each worker stops at the end of its input).
    """

    _shared: _WorkerPool | None = None
    _shared_lock = threading.Lock()

    def __init__(self) -> None:
        self._workers: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    @classmethod
    def shared(cls, count: int) -> _WorkerPool:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
                atexit.register(cls._shared.close)
            pool = cls._shared
        pool._grow(count)
        return pool

    def _grow(self, count: int) -> None:
        with self._lock:
            self._workers = [w for w in self._workers if w.poll() is None]
            while len(self._workers) < count:
                self._workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", __name__],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,  # a failure comes back as a JSON error line
                        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                    )
                )

    def ask(self, job: str, settings: dict[str, Any], parts: list[list[Any]]) -> list[list[Any]]:
        """The answers of one worker per part to the request ``job`` (a key of :data:`_JOBS`)."""
        with self._lock:
            workers = self._workers[: len(parts)]
            with ThreadPoolExecutor(max_workers=len(parts)) as threads:  # pipes: I/O, so threads
                return list(
                    threads.map(lambda work: _ask(work[0], job, settings, work[1]), zip(workers, parts, strict=True))
                )

    def close(self) -> None:
        for worker in self._workers:
            if worker.stdin is not None:
                worker.stdin.close()
        for worker in self._workers:
            try:
                worker.wait(timeout=5)
            except subprocess.TimeoutExpired:
                worker.kill()
        self._workers = []


def _ask(worker: subprocess.Popen[bytes], job: str, settings: dict[str, Any], items: list[Any]) -> list[Any]:
    """Send one request to ``worker`` and read its answer (the worker reads the whole
    request before it writes, so writing first cannot deadlock)."""
    assert worker.stdin is not None and worker.stdout is not None
    try:
        worker.stdin.write(json.dumps({"job": job, "settings": settings, "items": items}).encode("utf-8") + b"\n")
        worker.stdin.flush()
        line = worker.stdout.readline()
    except OSError as exc:
        raise RuntimeError(f"a worker process stopped ({exc}); pass workers=1") from exc
    if not line:
        raise RuntimeError(f"a worker process ended (exit status {worker.poll()}); pass workers=1")
    answer = json.loads(line)
    if "error" in answer:
        raise RuntimeError(f"a worker process failed: {answer['error']}")
    results: list[Any] = answer["results"]
    return results


def _tokens(settings: dict[str, Any]) -> Callable[[Any], Any]:
    return MultilingualTokenizer.from_dict(settings)


def _summaries(settings: dict[str, Any]) -> Callable[[Any], Any]:
    summarizer = ExtractiveSummarizer.from_dict(settings)
    return lambda document: summarizer.summarize(document[0], document[1])


# what a worker can be asked to do: a job name -> how to make its function from the settings
_JOBS: dict[str, Callable[[dict[str, Any]], Callable[[Any], Any]]] = {"tokens": _tokens, "summaries": _summaries}


def _serve() -> None:
    """A worker: answer each JSON request line with a JSON line of results, until stdin ends."""
    made: dict[str, Callable[[Any], Any]] = {}
    for line in sys.stdin.buffer:
        try:
            request = json.loads(line)
            key = json.dumps([request["job"], request["settings"]], sort_keys=True)
            function = made.get(key)
            if function is None:
                function = made[key] = _JOBS[request["job"]](request["settings"])
            answer: dict[str, Any] = {"results": [function(item) for item in request["items"]]}
        except Exception as exc:  # sent back to the caller, which raises it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.buffer.write(json.dumps(answer).encode("utf-8") + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    _serve()
