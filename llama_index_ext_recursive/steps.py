"""Algorithms written once as generators of requests, driven blocking or on the event loop.

An algorithm yields a tuple of *requests* (a search of one level, a cache
lookup, an embedding) and receives their answers, in order. :func:`run`
answers them one after another in the calling thread; :func:`arun` answers
the requests of one step concurrently on the event loop, each through its own
``arun`` (a store's async call, or blocking work moved to a thread). So a sync
and an async entry point take the same steps by construction, and what
differs between sync and async lives in the requests alone. Given an
executor, :func:`run` also answers a step's requests at once (each in a copy
of the caller's context): for requests that mostly wait on a database server.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Generator
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

__all__ = ["Request", "Steps", "arun", "run"]

T = TypeVar("T")


class Request(Protocol):
    """One thing an algorithm asks for, answered blocking (``run``) or on the loop (``arun``)."""

    def run(self) -> Any: ...

    async def arun(self) -> Any: ...


Steps = Generator[tuple[Request, ...], list[Any], T]


def run(steps: Steps[T], concurrently: Executor | None = None) -> T:
    """Drive ``steps`` to its result, answering each request in turn; with ``concurrently``,
    the requests of one step at once in that executor (the first failure, in request order,
    is raised once all have ended)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(_answers(step, concurrently))
    except StopIteration as done:
        return done.value


def _answers(step: tuple[Request, ...], executor: Executor | None) -> list[Any]:
    if executor is None or len(step) < 2:
        return [request.run() for request in step]
    futures = [executor.submit(contextvars.copy_context().run, request.run) for request in step]
    failures = [future.exception() for future in futures]  # waits for every one
    for failure in failures:
        if failure is not None:
            raise failure
    return [future.result() for future in futures]


async def arun(steps: Steps[T]) -> T:
    """Drive ``steps`` on the event loop, the requests of one step concurrently."""
    try:
        step = next(steps)
        while True:
            step = steps.send(list(await asyncio.gather(*(request.arun() for request in step))))
    except StopIteration as done:
        return done.value
