"""Writing systems: the one table of scripts every component reads.

BM25 tokenizes by script runs (Han, kana, hangul, everything else), fusion and
calibration pick weights by a query's script, the summarizer picks its length
and prompt by a text's script, and the auto-retrieval rules match CJK value
words. All of them read the ranges and the threshold below, so a kana query is
CJK for every one of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from enum import Enum

HAN_RANGES: tuple[tuple[int, int], ...] = (
    (0x3007, 0x3007),  # 〇
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0x20000, 0x3134F),
)
KANA_RANGES: tuple[tuple[int, int], ...] = ((0x3040, 0x30FF), (0x31F0, 0x31FF))
HANGUL_RANGES: tuple[tuple[int, int], ...] = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))

# A text is CJK when at least this share of its letters are CJK characters.
CJK_THRESHOLD = 0.3


class Script(str, Enum):
    """The script class of one character."""

    HAN = "han"
    KANA = "kana"
    HANGUL = "hangul"
    OTHER = "other"


def script_runs(text: str) -> Iterable[tuple[Script, str]]:
    """Split ``text`` into maximal runs of one script class, in order.

    One regex pass (:data:`_RUNS`): BM25 tokenizes every chunk through this,
    and a per-character loop cost 13 of 18 seconds of re-indexing 3000 chunks.
    """
    if CJK_CHARACTER.search(text) is None:  # most chunks of most corpora: one run
        if text:
            yield Script.OTHER, text
        return
    for match in _RUNS.finditer(text):
        group = match.lastindex
        assert group is not None  # one of the four alternatives always matches
        yield _RUN_SCRIPTS[group - 1], match.group()


def character_class(ranges: Sequence[tuple[int, int]]) -> str:
    """The body of a regex character class matching ``ranges`` (for ``[...]``)."""
    return "".join(
        re.escape(chr(low)) if low == high else f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in ranges
    )


HAN_CLASS = character_class(HAN_RANGES)
CJK_CLASS = character_class(HAN_RANGES + KANA_RANGES + HANGUL_RANGES)
CJK_CHARACTER = re.compile(f"[{CJK_CLASS}]")
LATIN_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-./]*")
# maximal runs of one script, in the order of _RUN_SCRIPTS
_RUNS = re.compile(
    f"([{character_class(HAN_RANGES)}]+)|([{character_class(KANA_RANGES)}]+)"
    f"|([{character_class(HANGUL_RANGES)}]+)|([^{CJK_CLASS}]+)"
)
_RUN_SCRIPTS = (Script.HAN, Script.KANA, Script.HANGUL, Script.OTHER)


def cjk_ratio(text: str) -> float:
    """Share of CJK characters among letters (CJK characters plus Latin word characters).

    Counted as the length the matches remove, so a 50 MB document costs one
    string copy, not a list of millions of match strings.
    """
    cjk = len(text) - len(CJK_CHARACTER.sub("", text))
    latin = len(text) - len(LATIN_WORD.sub("", text))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def is_cjk(text: str) -> bool:
    """Whether ``text`` is mostly Chinese, Japanese or Korean (:data:`CJK_THRESHOLD`)."""
    return cjk_ratio(text) >= CJK_THRESHOLD


class QueryScript(str, Enum):
    """Which writing system a query is in, for per-script fusion weights."""

    LATIN = "latin"  # everything that is not mostly Chinese/Japanese/Korean
    CJK = "cjk"


def query_script(text: str) -> QueryScript:
    """:attr:`QueryScript.CJK` when :func:`is_cjk`, else :attr:`QueryScript.LATIN`."""
    return QueryScript.CJK if is_cjk(text) else QueryScript.LATIN
