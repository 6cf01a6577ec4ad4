"""The step drivers (the recursive searches, the cached flows): one algorithm, the same steps sync and async."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass

import pytest

from llama_index_ext_recursive.steps import Steps as Search
from llama_index_ext_recursive.steps import arun, run


@dataclass
class Echo:
    """A request answering its value; async, it waits until its partner has started."""

    value: str
    log: list[str]
    started: asyncio.Event | None = None
    partner: asyncio.Event | None = None

    def run(self) -> str:
        self.log.append(self.value)
        return self.value

    async def arun(self) -> str:
        if self.started is not None and self.partner is not None:
            self.started.set()
            await asyncio.wait_for(self.partner.wait(), timeout=5)  # only returns if both run at once
        return self.run()


def two_steps(log: list[str], events: tuple[asyncio.Event, asyncio.Event] | None = None) -> Search[list[str]]:
    first, second = events or (None, None)
    answers = yield (Echo("a", log, first, second), Echo("b", log, second, first))
    assert answers == ["a", "b"]  # answers come back in the order asked, whoever finished first
    (more,) = yield (Echo(answers[0] + answers[1], log),)
    empty = yield ()
    return [*answers, more, *empty]


def test_sync_and_async_drivers_take_the_same_steps_and_return_the_same_result():
    sync_log: list[str] = []
    async_log: list[str] = []
    assert run(two_steps(sync_log)) == ["a", "b", "ab"]
    assert asyncio.run(arun(two_steps(async_log))) == ["a", "b", "ab"]
    assert sync_log == ["a", "b", "ab"]
    assert sorted(async_log[:2]) == ["a", "b"] and async_log[2] == "ab"


def test_the_async_driver_answers_one_steps_requests_concurrently():
    async def main() -> list[str]:
        events = (asyncio.Event(), asyncio.Event())  # each request waits for the other to start
        return await arun(two_steps([], events))

    assert asyncio.run(main()) == ["a", "b", "ab"]


def test_an_error_in_a_request_reaches_the_caller():
    def failing() -> Search[None]:
        yield (Boom(),)

    class Boom:
        def run(self) -> None:
            raise LookupError("store gone")

        async def arun(self) -> None:
            raise LookupError("store gone")

    with pytest.raises(LookupError, match="store gone"):
        run(failing())
    with pytest.raises(LookupError, match="store gone"):
        asyncio.run(arun(failing()))


@dataclass
class Meeting:
    """A request that returns only once its partner has started too (in another thread), and
    reports the context variable it saw."""

    value: str
    started: threading.Event
    partner: threading.Event
    seen: list[str | None]

    def run(self) -> str:
        self.started.set()
        if not self.partner.wait(timeout=5):
            raise TimeoutError(f"{self.value}: the other request never started: not run at once")
        self.seen.append(CALLER.get())
        return self.value

    async def arun(self) -> str:  # pragma: no cover - the sync driver is under test
        raise AssertionError("sync only")


CALLER: contextvars.ContextVar[str | None] = contextvars.ContextVar("caller", default=None)


def test_the_sync_driver_with_an_executor_answers_one_steps_requests_at_once_in_the_callers_context():
    first, second = threading.Event(), threading.Event()
    seen: list[str | None] = []

    def meeting() -> Search[list[str]]:
        answers = yield (Meeting("a", first, second, seen), Meeting("b", second, first, seen))
        return list(answers)

    CALLER.set("the caller")
    with ThreadPoolExecutor(4) as pool:
        assert run(meeting(), pool) == ["a", "b"]  # in the order asked
        assert run(two_steps([]), pool) == ["a", "b", "ab"]  # the same answers as one by one
    assert seen == ["the caller", "the caller"]


class _Lazy(Future):
    """A future whose work runs when someone first waits for it."""

    def __init__(self, work) -> None:
        super().__init__()
        self.work = work

    def _run(self) -> None:
        if not self.done():
            try:
                self.set_result(self.work())
            except BaseException as exc:  # noqa: BLE001 - handed to the waiter, as an executor does
                self.set_exception(exc)

    def exception(self, timeout=None):
        self._run()
        return super().exception(timeout)

    def result(self, timeout=None):
        self._run()
        return super().result(timeout)


class _LazyExecutor(Executor):
    """Runs each request only when the driver waits for it: a driver that raised at the first
    failure would leave the later requests unrun."""

    def submit(self, fn, /, *args, **kwargs):
        return _Lazy(lambda: fn(*args, **kwargs))


def test_with_an_executor_a_failure_is_raised_only_after_every_request_of_the_step_ended():
    ended: list[str] = []

    @dataclass
    class Later:
        def run(self) -> str:
            ended.append("later")
            return "later"

        async def arun(self) -> str:  # pragma: no cover - the sync driver is under test
            raise AssertionError("sync only")

    @dataclass
    class Broken:
        def run(self) -> None:
            raise LookupError("store gone")

        async def arun(self) -> None:  # pragma: no cover
            raise AssertionError("sync only")

    def failing() -> Search[None]:
        yield (Broken(), Later())

    with pytest.raises(LookupError, match="store gone"):
        run(failing(), _LazyExecutor())
    assert ended == ["later"]  # nothing of the call is left running once it has failed
