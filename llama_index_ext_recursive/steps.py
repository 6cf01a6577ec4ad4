"""Algorithms written once as generators of requests, driven blocking or on the event loop.

An algorithm yields a tuple of *requests* (a search of one level, a cache
lookup, an embedding) and receives their answers, in order. :func:`run`
answers them one after another in the calling thread; :func:`arun` answers
the requests of one step concurrently on the event loop, each through its own
``arun`` (a store's async call, or blocking work moved to a thread). So a sync
and an async entry point take the same steps by construction, and what
differs between sync and async lives in the requests alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any, Protocol, TypeVar

__all__ = ["Request", "Steps", "arun", "run"]

T = TypeVar("T")


class Request(Protocol):
    """One thing an algorithm asks for, answered blocking (``run``) or on the loop (``arun``)."""

    def run(self) -> Any: ...

    async def arun(self) -> Any: ...


Steps = Generator[tuple[Request, ...], list[Any], T]


def run(steps: Steps[T]) -> T:
    """Drive ``steps`` to its result, answering each request in turn."""
    try:
        step = next(steps)
        while True:
            step = steps.send([request.run() for request in step])
    except StopIteration as done:
        return done.value


async def arun(steps: Steps[T]) -> T:
    """Drive ``steps`` on the event loop, the requests of one step concurrently."""
    try:
        step = next(steps)
        while True:
            step = steps.send(list(await asyncio.gather(*(request.arun() for request in step))))
    except StopIteration as done:
        return done.value
