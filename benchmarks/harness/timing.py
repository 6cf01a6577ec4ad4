"""How a benchmark times things: one place for the median, the percentiles and the rounds.

The machine is two cores shared with other sessions, so a single pass can be
twice as slow as the next. Three rules follow, and the helpers enforce them:

- compare contestants **interleaved**: every contestant runs once per round (or
  per query), so a busy neighbour slows all of them alike and their ratio
  stays meaningful; rotating the order keeps one contestant from always
  running on caches another just warmed (:func:`interleaved`,
  :func:`interleaved_calls`);
- **warm up** untimed first (lazy matrices, compiled patterns, connections);
- report the **median** of rounds and the 50th/95th **percentile** of calls,
  both taken here (:func:`median`, :func:`percentile`), never a single pass.
"""

from __future__ import annotations

import asyncio
import signal
import statistics
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def median(values: Iterable[float]) -> float:
    """The median (the mean of the middle two for an even count)."""
    return float(statistics.median(list(values)))


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile, linearly interpolated between the closest ranks (numpy's default)."""
    return float(np.percentile(np.asarray(values, dtype=float), q))


class Stopwatch:
    """Wall seconds since it was made (or restarted): for spans that are not one call."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._started = time.perf_counter()

    def seconds(self) -> float:
        return time.perf_counter() - self._started


def seconds(action: Callable[[], Any]) -> float:
    """Wall seconds of one call of ``action``."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median_seconds(action: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls."""
    return median(seconds(action) for _ in range(repeats))


def ms_per_call(fn: Callable[[T], Any], items: Sequence[T]) -> float:
    """Mean milliseconds per call of ``fn`` over ``items``, timed as one loop."""
    started = time.perf_counter()
    for item in items:
        fn(item)
    return (time.perf_counter() - started) / len(items) * 1000


async def ams_per_call(fn: Callable[[T], Awaitable[Any]], items: Sequence[T]) -> float:
    """:func:`ms_per_call` for a coroutine function, awaited one call after the other."""
    started = time.perf_counter()
    for item in items:
        await fn(item)
    return (time.perf_counter() - started) / len(items) * 1000


def in_loop(loop: asyncio.AbstractEventLoop, fn: Callable[[T], Awaitable[Any]]) -> Callable[[Sequence[T]], float]:
    """``items -> ms per call`` of a coroutine function, run to completion in ``loop``."""
    return lambda items: loop.run_until_complete(ams_per_call(fn, items))


def latencies_ms(
    fn: Callable[[T], Any],
    items: Sequence[T],
    *,
    warmup: int = 0,
    budget_s: float | None = None,
    min_calls: int = 1,
    results: list[Any] | None = None,
) -> list[float]:
    """Milliseconds of each call of ``fn`` over ``items``, after ``warmup`` untimed calls.

    With ``budget_s`` the loop stops once the timed calls add up to more than
    that, after at least ``min_calls`` (a slow contestant gets fewer calls
    rather than the whole run). ``results``, if given, receives each result.
    """
    for item in items[:warmup]:
        fn(item)
    out: list[float] = []
    spent = 0.0
    for item in items:
        started = time.perf_counter()
        result = fn(item)
        ms = (time.perf_counter() - started) * 1000
        out.append(ms)
        if results is not None:
            results.append(result)
        spent += ms / 1000
        if budget_s is not None and spent > budget_s and len(out) >= min_calls:
            break
    return out


def interleaved(contestants: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Each contestant's measurement, once per round, contestants taking turns.

    A contestant is a function that measures itself once and returns the
    figure (e.g. :func:`ms_per_call` over a batch of queries); the order rotates
    from round to round.
    """
    names = list(contestants)
    out: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            out[name].append(contestants[name]())
    return out


def interleaved_calls(
    contestants: Mapping[str, Callable[[T], Any]],
    items: Sequence[T],
    rounds: int,
    *,
    warmup: int = 0,
    rotate: bool = True,
) -> dict[str, list[float]]:
    """Milliseconds of every call, item by item: each contestant answers an item before the next item.

    ``warmup`` items are first run untimed by every contestant. With ``rotate``
    the contestants' order shifts by one from item to item; without, the
    order is fixed.
    """
    names = list(contestants)
    for item in items[:warmup]:
        for name in names:
            contestants[name](item)
    out: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        for turn, item in enumerate(items):
            shift = turn % len(names) if rotate else 0
            for name in names[shift:] + names[:shift]:
                started = time.perf_counter()
                contestants[name](item)
                out[name].append((time.perf_counter() - started) * 1000)
    return out


class TimeLimit(Exception):
    """A call ran past its time limit."""


def limited_seconds(fn: Callable[[], Any], limit: int) -> float:
    """Wall seconds of ``fn()``, or ``inf`` if it runs past ``limit`` whole seconds (main thread only).

    For inputs built to be slow: the benchmark records "too slow" and goes on.
    """

    def alarm(signum, frame):  # noqa: ARG001
        raise TimeLimit

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(limit)
    started = time.perf_counter()
    try:
        fn()
        return time.perf_counter() - started
    except TimeLimit:
        return float("inf")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
