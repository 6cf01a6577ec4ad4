"""The step drivers (the recursive searches, the cached flows): one algorithm, the same steps sync and async."""

from __future__ import annotations

import asyncio
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
