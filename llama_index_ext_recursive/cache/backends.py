"""Where a :class:`~.retrieval_cache.RetrievalCache` keeps its entries: text values under text keys.

A backend stores strings only (the cache encodes every value as JSON, never
pickle), each with its own time to live, so the in-process backend and a
shared one answer the same way and a value read back is always a fresh copy
the caller may change.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from llama_index_ext_recursive.validation import check_count

__all__ = ["CacheBackend", "MemoryBackend", "RedisBackend"]


class CacheBackend(Protocol):
    """String values under string keys, each kept for at most ``ttl`` seconds.

    A backend whose ``blocking`` attribute is false (the in-process one)
    answers at once and is called on the event loop; any other is called in a
    worker thread by async retrieval.
    """

    def get(self, key: str) -> str | None: ...

    def set(self, key: str, value: str, ttl: float) -> None: ...

    def clear(self, prefix: str) -> None: ...


class MemoryBackend:
    """An in-process LRU of at most ``max_entries`` values, each dropped ``ttl`` seconds after
    it was written.

    Args:
        max_entries: the size bound; the least recently used entry goes first.
        clock: seconds, monotonic (a test passes its own to expire entries without waiting).
    """

    blocking = False  # a dictionary lookup: called on the event loop

    def __init__(self, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_entries = check_count("max_entries", max_entries, minimum=1)
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, str]] = OrderedDict()  # key -> (expires at, value)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> str | None:
        now = self._clock()
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            if found[0] <= now:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return found[1]

    def set(self, key: str, value: str, ttl: float) -> None:
        expires = self._clock() + ttl
        with self._lock:
            self._entries[key] = (expires, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self, prefix: str) -> None:
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                del self._entries[key]


class RedisBackend:
    """Entries in a Redis server, shared by every process that uses it.

    Each entry is a Redis string with its own expiry (``PX``), so Redis drops
    it at its time to live; Redis's own ``maxmemory`` policy bounds the size.
    A failed call raises (the cache logs it and the query runs uncached); the
    client reconnects by itself on the next call.

    Args:
        client: a ``redis.Redis`` (from ``redis.Redis.from_url``), with timeouts: a
            cache that waits longer than the search it saves is no cache.
    """

    blocking = True  # a network round trip: async retrieval calls it in a worker thread

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def from_url(cls, url: str, timeout: float = 0.5) -> RedisBackend:
        """A backend for ``redis://[user:password@]host:port/db`` (or ``rediss://``, ``unix://``).

        Raises:
            ImportError: the ``redis`` client is not installed (the message names the extra).
            ValueError: ``url`` is not a Redis URL.
        """
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"{url!r} is not a Redis URL; pass redis://host:port/db (rediss:// for TLS)")
        try:
            import redis
        except ImportError as exc:  # pragma: no cover - the dev extra installs it
            raise ImportError(
                "a Redis cache needs the redis client: pip install 'llama-index-ext-recursive[redis]'"
            ) from exc
        return cls(redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout))

    def get(self, key: str) -> str | None:
        value = self.client.get(key)
        if not isinstance(value, bytes):
            return None
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None  # not a value of ours

    def set(self, key: str, value: str, ttl: float) -> None:
        self.client.set(key, value.encode("utf-8"), px=max(1, round(ttl * 1000)))

    def clear(self, prefix: str) -> None:
        pattern = "".join(f"\\{c}" if c in "*?[]\\" else c for c in prefix) + "*"
        batch: list[bytes] = []
        for key in self.client.scan_iter(match=pattern, count=1000):
            batch.append(key)
            if len(batch) == 1000:
                self.client.delete(*batch)
                batch = []
        if batch:
            self.client.delete(*batch)
