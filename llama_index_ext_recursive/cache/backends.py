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
from typing import Protocol

from llama_index_ext_recursive.validation import check_count

__all__ = ["CacheBackend", "MemoryBackend"]


class CacheBackend(Protocol):
    """String values under string keys, each kept for at most ``ttl`` seconds."""

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
