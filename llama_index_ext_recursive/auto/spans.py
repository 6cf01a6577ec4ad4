"""Spans of a query the rules have claimed, and where a position falls among its tokens.

Each rule asks, for every phrase it finds, whether the phrase overlaps one
already read and which tokens stand before and after it. Asked by scanning
every claimed span or every token, a query with thousands of phrases costs
the square of its length (a crafted 10 kB query took the rules 12 s); asked by
bisection, reading stays close to linear in the query's length (issue 23).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["Spans", "TokenIndex"]


class Spans:
    """A union of ``[start, end)`` spans: whether a new span overlaps it, in O(log n).

    Kept as sorted disjoint spans (overlapping ones merged when added), so
    the one span that can overlap ``[start, end)`` is the last starting before
    ``end``.

    Args:
        spans: the spans to start with, in any order.
    """

    def __init__(self, spans: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in spans:
            self.add(start, end)

    def __bool__(self) -> bool:
        return bool(self._starts)

    def overlaps(self, start: int, end: int) -> bool:
        """Whether ``[start, end)`` shares a position with a span (``s < end and start < e``)."""
        i = bisect_left(self._starts, end)
        return i > 0 and self._ends[i - 1] > start

    def add(self, start: int, end: int) -> None:
        """Claim ``[start, end)``, merged with the spans it overlaps."""
        lo = bisect_right(self._ends, start)
        hi = bisect_left(self._starts, end)
        if lo < hi:  # overlapping spans become one
            start, end = min(start, self._starts[lo]), max(end, self._ends[hi - 1])
        self._starts[lo:hi] = [start]
        self._ends[lo:hi] = [end]


class TokenIndex:
    """Positions of a query's tokens (sorted, not overlapping), searched by bisection.

    Args:
        tokens: the tokens, in order, each with ``start`` and ``end``.
    """

    def __init__(self, tokens: Sequence[Any]) -> None:
        self.tokens = tokens
        self._starts = [t.start for t in tokens]
        self._ends = [t.end for t in tokens]

    def ending_by(self, pos: int) -> int:
        """How many tokens end at or before ``pos`` (``tokens[:i]`` all do)."""
        return bisect_right(self._ends, pos)

    def starting_from(self, pos: int) -> int:
        """The index of the first token that starts at or after ``pos``."""
        return bisect_left(self._starts, pos)

    def around(self, pos: int) -> Any | None:
        """The token with ``start < pos < end``: ``pos`` falls inside it."""
        i = bisect_left(self._starts, pos) - 1
        if i >= 0 and self._ends[i] > pos:
            return self.tokens[i]
        return None

    def between(self, start: int, end: int) -> Sequence[Any]:
        """The tokens wholly inside ``[start, end)``."""
        return self.tokens[self.starting_from(start) : self.ending_by(end)]
