"""The command line: flags every script spells the same way, and the command a report quotes.

docs/BENCHMARKS.md quotes the commands behind its figures, so a flag that means
the same thing in two scripts is spelled, defaulted and documented the same
way; the helpers here add them. :func:`command` gives the command as typed, for
the "Command:" line a report starts with (a figure whose command is lost cannot
be reproduced).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from harness.data import DATA_ROOT
from harness.models import DEFAULT_CACHE, REAL_MODELS

T = TypeVar("T")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the script's docstring: first line above the flags, the rest below."""
    first, _, rest = (doc or "").strip().partition("\n")
    return argparse.ArgumentParser(
        description=first, epilog=rest.strip() or None, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def csv(kind: Callable[[str], T] = str) -> Callable[[str], list[T]]:
    """An argparse ``type`` for comma-separated values (``--sizes 1000,10000``); blanks are skipped."""
    return lambda text: [kind(part.strip()) for part in text.split(",") if part.strip()]


def add_data(p: argparse.ArgumentParser, required: bool = True, default: str | None = None) -> None:
    p.add_argument(
        "--data",
        required=required,
        default=default,
        help="a dataset folder in BEIR layout (e.g. ../shared/data/scifact)",
    )


def add_data_root(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-root", default=str(DATA_ROOT), help="the folder holding the datasets named")


def add_datasets(p: argparse.ArgumentParser, default: str) -> None:
    p.add_argument("--datasets", default=default, help="comma-separated dataset folder names under --data-root")


def add_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache", default=str(DEFAULT_CACHE), help="the shared SQLite embedding cache")


def add_max_queries(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-queries", type=int, default=None, help="the first N judged queries (default: all)")


def add_rounds(p: argparse.ArgumentParser, default: int = 3) -> None:
    p.add_argument("--rounds", type=int, default=default, help="interleaved passes over the queries")


def add_embed_model(p: argparse.ArgumentParser, default: str | None = "minilm") -> None:
    """``--embed-model``; ``default=None`` leaves the choice to the script (e.g. by the corpus's language)."""
    p.add_argument(
        "--embed-model",
        choices=REAL_MODELS,
        default=default,
        help="minilm (or default): all-MiniLM-L6-v2; multilingual: multilingual-e5-small"
        + ("" if default else "; default: the model llama-recursive build chooses for each dataset"),
    )


def add_out(p: argparse.ArgumentParser, default: Path | None, help: str = "where the results go") -> None:
    p.add_argument("--out", type=Path, default=default, help=help)


def command(argv: Sequence[str] | None = None, script: str | None = None, python: str = ".venv/bin/python") -> str:
    """The command that ran ``script`` (a path; default: the running one) with ``argv``, as typed
    from the repository root."""
    name = Path(script or sys.argv[0]).name
    args = list(sys.argv[1:] if argv is None else argv)
    return " ".join([python, f"benchmarks/{name}", *(shlex.quote(a) for a in args)])
