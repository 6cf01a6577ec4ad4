"""A reader-writer lock for retrievers that are updated while they serve queries.

Readers (``retrieve``, ``aretrieve``, ``persist``) share the lock; an update
holds it alone for the short in-memory step that swaps its prepared nodes in,
so a reader sees the index either before or after an update, never a mix.
A waiting writer blocks new readers, so a steady stream of queries cannot
starve updates. The lock is not re-entrant.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager


class ReadWriteLock:
    """Many readers or one writer, across threads and event loops."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def _try_acquire_read(self) -> bool:
        if self._writer or self._writers_waiting:
            return False
        self._readers += 1
        return True

    def acquire_read(self) -> None:
        with self._condition:
            self._condition.wait_for(self._try_acquire_read)

    def release_read(self) -> None:
        with self._condition:
            self._readers -= 1
            if not self._readers:
                self._condition.notify_all()

    @contextmanager
    def reading(self) -> Iterator[None]:
        self.acquire_read()
        try:
            yield
        finally:
            self.release_read()

    @asynccontextmanager
    async def areading(self) -> AsyncIterator[None]:
        """:meth:`reading` for coroutines: waits for a writer in a worker
        thread, so the event loop keeps running meanwhile."""
        with self._condition:
            acquired = self._try_acquire_read()
        if not acquired:
            waiting = asyncio.ensure_future(asyncio.to_thread(self.acquire_read))
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:
                # the worker thread still acquires: release as soon as it does
                waiting.add_done_callback(
                    lambda done: None if done.cancelled() or done.exception() else self.release_read()
                )
                raise
        try:
            yield
        finally:
            self.release_read()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._condition:
            self._writers_waiting += 1
            try:
                self._condition.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._condition:
                self._writer = False
                self._condition.notify_all()
