"""``RetrievalCache``: query embeddings and retrieval results, never served after the index changed.

Real query streams repeat, and a repeated query costs an embedding (about
10 ms with the default model on 2 cores, 62 ms with the multilingual one) and
two searches. Caches keyed by the query alone go stale: after a document is
added or deleted they serve the old answer until a time to live runs out.
Here every result key holds the index's *content generation*
(:attr:`~llama_index_ext_recursive.recursive.index.RecursiveIndex.cache_generation`:
the published generation it was loaded from or persisted as, or this
process's own changes since), the exact query text, the filters in force,
``top_k`` and every setting of the retriever, so a result computed before a
change is never looked up after it. Query vectors are keyed by the model's
identity (:func:`~llama_index_ext_recursive.model_identity.model_identity`)
and the exact text.

Values are JSON (:mod:`.codec`); a backend that fails is logged once and the
query runs uncached, never failing.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from llama_index_ext_recursive.cache.backends import CacheBackend, MemoryBackend, RedisBackend
from llama_index_ext_recursive.cache.codec import decode_hits, decode_vector, encode_hits, encode_vector

__all__ = ["CacheStats", "LEVELS", "RetrievalCache", "check_cache"]

logger = logging.getLogger(__name__)

# what is cached, and for how long by default (seconds): a query's vector depends on the model
# alone; a result on the index too, and a routing result (documents) changes less often
LEVELS = ("embeddings", "documents", "results")
DEFAULT_TTL = {"embeddings": 24 * 3600.0, "documents": 3600.0, "results": 600.0}


@dataclass
class CacheStats:
    """Lookups per level since the cache was made (or :meth:`RetrievalCache.clear`ed).

    Attributes:
        hits, misses: per level (``embeddings``, ``documents``, ``results``).
        rejected: values found but not ours (foreign, damaged, another format): counted as misses too.
        errors: backend calls that failed (the query then ran uncached).
    """

    hits: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    misses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LEVELS, 0))
    rejected: int = 0
    errors: int = 0

    @property
    def hit_rate(self) -> float:
        """Hits over lookups, all levels together (0.0 before any lookup)."""
        hits, lookups = sum(self.hits.values()), sum(self.hits.values()) + sum(self.misses.values())
        return hits / lookups if lookups else 0.0


class RetrievalCache:
    """Query embeddings and results of the package's retrievers, in this process by default.

    Pass one as ``cache=`` to a retriever (several retrievers may share one:
    their keys hold their settings and their index's generation).

    Args:
        backend: where entries live; default an in-process LRU
            (:class:`~.backends.MemoryBackend`, 10,000 entries).
        embeddings: cache query vectors (they depend on the model alone).
        results: cache retrieval results.
        ttl: seconds per level, over :data:`DEFAULT_TTL` (``embeddings`` one day,
            ``documents`` one hour, ``results`` ten minutes).
        prefix: the start of every key, so one backend can hold several applications.
    """

    def __init__(
        self,
        backend: CacheBackend | None = None,
        *,
        embeddings: bool = True,
        results: bool = True,
        ttl: Mapping[str, float] | None = None,
        prefix: str = "llama_index_ext_recursive",
    ) -> None:
        unknown = set(ttl or {}) - set(LEVELS)
        if unknown:
            raise ValueError(f"ttl names unknown levels {sorted(unknown)}; the levels are {list(LEVELS)}")
        for level, seconds in (ttl or {}).items():
            if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
                raise ValueError(f"ttl[{level!r}] must be a positive number of seconds, got {seconds!r}")
        if not isinstance(prefix, str) or not prefix:
            raise ValueError(f"prefix must be a non-empty string, got {prefix!r}")
        self.backend: CacheBackend = backend if backend is not None else MemoryBackend()
        self.embeddings = embeddings
        self.results = results
        self.ttl = {**DEFAULT_TTL, **{level: float(s) for level, s in (ttl or {}).items()}}
        self.prefix = prefix
        self._stats = CacheStats()
        self._lock = threading.Lock()
        self._warned = False
        # an in-process backend answers at once; any other is called off the event loop
        self._blocking = getattr(self.backend, "blocking", True)

    @classmethod
    def from_url(cls, url: str, *, timeout: float = 0.5, **kwargs: Any) -> RetrievalCache:
        """A cache in the Redis server at ``url`` (``redis://host:port/db``), shared by every
        process that makes one with the same URL and ``prefix``.

        Args:
            url: the server; ``rediss://`` for TLS.
            timeout: seconds a Redis call may take before the query goes on without the cache.
            kwargs: as the constructor (``embeddings``, ``results``, ``ttl``, ``prefix``).

        Raises:
            ValueError: ``url`` is not a Redis URL.
            ImportError: the ``redis`` client is not installed (``pip install
                'llama-index-ext-recursive[redis]'``).
        """
        return cls(RedisBackend.from_url(url, timeout=timeout), **kwargs)

    # ------------------------------------------------------------------ public
    def stats(self) -> CacheStats:
        """A copy of the counts so far."""
        with self._lock:
            return CacheStats(
                dict(self._stats.hits), dict(self._stats.misses), self._stats.rejected, self._stats.errors
            )

    def clear(self) -> None:
        """Drop every entry under :attr:`prefix` and reset :meth:`stats`."""
        self._call(lambda: self.backend.clear(f"{self.prefix}:"))
        with self._lock:
            self._stats = CacheStats()

    # -------------------------------------------------------------- for retrievers
    def key(self, level: str, parts: Mapping[str, Any]) -> str:
        """The key of ``parts`` (JSON data: the query, the filters, the settings, the generation)."""
        try:
            body = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError as exc:
            raise TypeError(f"a cache key part must be JSON data ({exc})") from None
        return f"{self.prefix}:{level}:{hashlib.sha256(body).hexdigest()}"

    def get(self, level: str, key: str) -> Any:
        """The value at ``key`` (a vector for ``embeddings``, else hits), or ``None``: not cached,
        expired, not ours, this level switched off, or the backend failing."""
        if not self._enabled(level):
            return None
        text = self._call(lambda: self.backend.get(key))
        value = _DECODE[level](text) if isinstance(text, str) else None
        with self._lock:
            if value is None:
                self._stats.misses[level] += 1
                self._stats.rejected += isinstance(text, str)
            else:
                self._stats.hits[level] += 1
        return value

    def put(self, level: str, key: str, value: Any) -> None:
        """Keep ``value`` (a vector for ``embeddings``, else hits) at ``key`` for the level's TTL;
        hits that cannot be stored as data are not kept."""
        if self._enabled(level):
            self._put(level, key, _ENCODE[level](value))

    async def aget(self, level: str, key: str) -> Any:
        """:meth:`get` without blocking the event loop (a network backend is called in a thread)."""
        if self._blocking:
            return await asyncio.to_thread(self.get, level, key)
        return self.get(level, key)

    async def aput(self, level: str, key: str, value: Any) -> None:
        """:meth:`put` without blocking the event loop."""
        if self._blocking:
            await asyncio.to_thread(self.put, level, key, value)
        else:
            self.put(level, key, value)

    # ------------------------------------------------------------------ inside
    def _enabled(self, level: str) -> bool:
        if level not in self.ttl:
            raise ValueError(f"unknown cache level {level!r}; the levels are {list(LEVELS)}")
        return self.embeddings if level == "embeddings" else self.results

    def _put(self, level: str, key: str, text: str | None) -> None:
        if text is not None:
            self._call(lambda: self.backend.set(key, text, self.ttl[level]))

    def _call(self, action: Any) -> Any:
        try:
            return action()
        except Exception as exc:  # a cache must never fail a query
            with self._lock:
                self._stats.errors += 1
                warn, self._warned = not self._warned, True
            if warn:
                logger.warning("retrieval cache unavailable (%s); retrieving without it", exc)
            else:
                logger.debug("retrieval cache unavailable (%s)", exc)
            return None


def check_cache(cache: Any) -> None:
    """A retriever's ``cache=``: a :class:`RetrievalCache` or ``None``.

    Raises:
        TypeError: anything else (the message names the two ways to make one).
    """
    if cache is not None and not isinstance(cache, RetrievalCache):
        raise TypeError(
            f"cache must be a RetrievalCache (or None), got {type(cache).__name__}: pass RetrievalCache() "
            "for this process, or RetrievalCache.from_url('redis://host:port/db') to share one"
        )


_DECODE: dict[str, Callable[[str], Any]] = {
    "embeddings": decode_vector,
    "documents": decode_hits,
    "results": decode_hits,
}
_ENCODE: dict[str, Callable[[Any], str | None]] = {
    "embeddings": encode_vector,
    "documents": encode_hits,
    "results": encode_hits,
}
